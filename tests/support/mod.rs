//! What the end-to-end suites share: `awaken serve` nodes as processes, a
//! PostgreSQL schema, HTTP helpers, and two witnesses that watch a cluster from
//! outside: every run event published on NATS ([`EventLog`]) and every tool
//! execution the nodes journal ([`tool_starts_per_call`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awaken_actors::contract::{AgentEvent, StreamEvent, TerminationReason};
use awaken_actors::store::{PostgresStore, TestSchema};
use awaken_cluster::events::EVENTS_SUBJECT_PREFIX;
use awaken_cluster::membership::NodeId;
use awaken_cluster::shards::{DEFAULT_SHARDS_BUCKET, LeaseTable, ShardCount, preference};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub(crate) mod tls;

/// How long a suite waits for the cluster to settle after its faults.
pub(crate) const SETTLE: Duration = Duration::from_secs(90);
/// How many times an outage suite runs each scenario: `AWAKEN_STRESS_REPEATS`
/// (its faults are timing-dependent), once by default.
pub(crate) fn stress_repeats() -> usize {
    std::env::var("AWAKEN_STRESS_REPEATS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// The cluster's shards and lease TTL (as in each node's config).
pub(crate) const SHARDS: usize = 16;
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(2);

/// The `awaken` binary of this build (next to this test's own directory).
pub(crate) fn awaken_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let binary = dir.join("awaken");
    assert!(
        binary.exists(),
        "{} is missing: build the workspace first (cargo build -p awaken-gateway)",
        binary.display()
    );
    binary
}

/// The `awaken.toml` of the three-node overlay's pods (`deploy/k8s`).
pub(crate) fn pod_config() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/k8s/overlays/three-node/awaken.toml")
}

/// Where a node connects and what it records.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    /// NATS URL(s), comma-separated.
    pub(crate) nats_url: String,
    pub(crate) postgres_url: String,
    /// Copies of every bucket and stream.
    pub(crate) replicas: usize,
    /// The file every node appends its tool executions to.
    pub(crate) journal: PathBuf,
    /// More of each node's own `local.toml`: `[server]` keys, then tables.
    pub(crate) server_toml: String,
}

/// One `awaken serve` cluster node.
pub(crate) struct Node {
    pub(crate) child: Child,
    pub(crate) base: String,
    /// Every line the node wrote, stdout and stderr.
    output: Arc<Mutex<Vec<String>>>,
    _config: Option<tempfile::TempDir>,
}

impl Node {
    /// Starts node `id` as the three-node overlay's pods start: its
    /// `awaken.toml` (what the ConfigMap carries), the store URL and node id from
    /// the environment as the Deployment sets them, and a second file with the
    /// test's own values (local addresses, and shorter leases and drains so that
    /// failover happens within a test's time).
    pub(crate) async fn start(id: &str, cluster: &Cluster) -> Self {
        Self::start_with_env(id, cluster, &[]).await
    }

    /// [`Self::start`], with the variables `extra` set too.
    pub(crate) async fn start_with_env(
        id: &str,
        cluster: &Cluster,
        extra: &[(&str, &str)],
    ) -> Self {
        let config = tempfile::tempdir().unwrap();
        let local = config.path().join("local.toml");
        std::fs::write(
            &local,
            format!(
                "[server]\naddress = \"127.0.0.1:0\"\n{server}\n\n\
                 [cluster]\nnats_url = \"{nats}\"\nshards = {SHARDS}\n\
                 lease_ttl_secs = {ttl}\nclaim_lease_ms = 3000\ndrain_timeout_secs = 5\n\
                 replicas = {replicas}\n",
                server = cluster.server_toml,
                nats = cluster.nats_url,
                ttl = LEASE_TTL.as_secs(),
                replicas = cluster.replicas,
            ),
        )
        .unwrap();
        let pod_config = pod_config();
        let journal = ["--tool-journal".as_ref(), cluster.journal.as_os_str()];
        let mut env = vec![
            ("AWAKEN_STORE__URL", cluster.postgres_url.as_str()),
            ("AWAKEN_CLUSTER__NODE_ID", id),
        ];
        env.extend_from_slice(extra);
        let mut node = Self::serve(id, &[&pod_config, &local], &journal, &env).await;
        node._config = Some(config);
        node
    }

    /// Runs `awaken serve --config <configs> <args>` with `env` added, named
    /// `id` in the test's log; returns once it listens.
    pub(crate) async fn serve(
        id: &str,
        configs: &[&Path],
        args: &[&std::ffi::OsStr],
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = Command::new(awaken_binary());
        command.arg("serve");
        for config in configs {
            command.arg("--config").arg(config);
        }
        let mut child = command
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("AWAKEN_E2E_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let output = Arc::new(Mutex::new(Vec::new()));
        // The node's log, each line marked with the node it came from.
        let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
        let node = id.to_owned();
        let kept = Arc::clone(&output);
        tokio::spawn(async move {
            while let Ok(Some(line)) = log.next_line().await {
                eprintln!("[{node}] {line}");
                kept.lock().unwrap().push(line);
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let kept = Arc::clone(&output);
        let base = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                kept.lock().unwrap().push(line.clone());
                if let Ok(event) = serde_json::from_str::<Value>(&line)
                    && event["event"] == "listening"
                {
                    return format!("http://{}", event["address"].as_str().unwrap());
                }
            }
            panic!("node {id} exited before listening");
        })
        .await
        .expect("the node listens in time");
        // Keep reading stdout so the node never writes into a closed pipe.
        let kept = Arc::clone(&output);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                kept.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            base,
            output,
            _config: None,
        }
    }

    /// Everything the node wrote so far, one line each.
    pub(crate) fn output(&self) -> String {
        self.output.lock().unwrap().join("\n")
    }

    /// Starts nodes `n1`, `n2`, … of `cluster`.
    pub(crate) async fn start_all(count: usize, cluster: &Cluster) -> Vec<Self> {
        let mut nodes = Vec::with_capacity(count);
        for i in 1..=count {
            nodes.push(Self::start(&format!("n{i}"), cluster).await);
        }
        nodes
    }

    pub(crate) fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), self.child.id().unwrap().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// A PostgreSQL schema for the cluster's store, and its URL.
pub(crate) async fn database() -> (String, TestSchema) {
    let (store, schema) = PostgresStore::for_tests().await;
    store.ensure_schema().await.unwrap();
    let base = std::env::var("AWAKEN_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let url = format!("{base}?options=-c%20search_path%3D{}", schema.name());
    (url, schema)
}

pub(crate) async fn post(client: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let response = client.post(url).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A run's record as `base` serves it (`None` while the node does not answer).
pub(crate) async fn record(client: &reqwest::Client, base: &str, run_id: &str) -> Option<Value> {
    let response = client
        .get(format!("{base}/v1/runs/{run_id}"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    response.json().await.ok()
}

/// A run's record once the run is done (within [`SETTLE`]).
pub(crate) async fn done_run(client: &reqwest::Client, base: &str, run_id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let run = record(client, base, run_id).await;
        if let Some(run) = run.as_ref().filter(|run| run["status"] == "done") {
            return run.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {run_id} never ended: {run:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The first waiting call of a run's record, once the run waits.
pub(crate) async fn waiting_call(client: &reqwest::Client, base: &str, run_id: &str) -> String {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        if let Some(run) = record(client, base, run_id).await
            && run["status"] == "waiting"
        {
            return run["waiting"]["tickets"][0]["tool_call_id"]
                .as_str()
                .unwrap()
                .to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {run_id} never waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A new thread through `base`; its id.
pub(crate) async fn new_thread(client: &reqwest::Client, base: &str) -> String {
    let (status, thread) = post(client, format!("{base}/v1/threads"), json!({})).await;
    assert_eq!(status, 201, "{thread}");
    thread["id"].as_str().unwrap().to_owned()
}

/// Sends `per_thread` inputs for agent `slow` to each of `threads` new threads,
/// all at once and spread over `nodes`; the queued run ids by thread.
pub(crate) async fn hot_threads(
    client: &reqwest::Client,
    nodes: &[Node],
    threads: usize,
    per_thread: usize,
) -> BTreeMap<String, Vec<String>> {
    let mut ids = Vec::new();
    for _ in 0..threads {
        ids.push(new_thread(client, &nodes[0].base).await);
    }
    let sends: Vec<_> = (0..threads * per_thread)
        .map(|i| {
            let thread = ids[i % threads].clone();
            let base = nodes[i % nodes.len()].base.clone();
            let client = client.clone();
            tokio::spawn(async move {
                let body = json!({"agentId": "slow",
                    "messages": [{"role": "user", "content": format!("input {i}")}]});
                let url = format!("{base}/v1/threads/{thread}/messages");
                let (status, queued) = post(&client, url, body).await;
                assert_eq!(status, 202, "{queued}");
                (thread, queued["run_id"].as_str().unwrap().to_owned())
            })
        })
        .collect();
    let mut runs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for send in sends {
        let (thread, run_id) = send.await.unwrap();
        runs.entry(thread).or_default().push(run_id);
    }
    runs
}

/// Waits (bounded) until a run of every thread of `runs` is seen executing (or
/// all its runs ended): the moment to inject a fault.
pub(crate) async fn every_thread_executes(
    client: &reqwest::Client,
    base: &str,
    runs: &BTreeMap<String, Vec<String>>,
) {
    for thread_runs in runs.values() {
        some_run_executes(client, base, thread_runs).await;
    }
}

async fn some_run_executes(client: &reqwest::Client, base: &str, runs: &[String]) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let mut ended = 0;
        for run_id in runs {
            match record(client, base, run_id).await {
                Some(run) if run["status"] == "running" => return,
                Some(run) if run["status"] == "done" => ended += 1,
                _ => {}
            }
        }
        if ended == runs.len() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no run executed: {runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until every run of `runs` is `done` as `base` serves it; the
/// records by run id.
pub(crate) async fn all_end(
    client: &reqwest::Client,
    base: &str,
    runs: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, Value> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut pending: Vec<String> = runs.values().flatten().cloned().collect();
    let mut ended = BTreeMap::new();
    while !pending.is_empty() {
        let mut still = Vec::new();
        let mut last_seen = Vec::new();
        for run_id in pending {
            match record(client, base, &run_id).await {
                Some(run) if run["status"] == "done" => {
                    ended.insert(run_id, run);
                }
                seen => {
                    last_seen.push(seen);
                    still.push(run_id);
                }
            }
        }
        pending = still;
        if !pending.is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "runs never ended: {last_seen:#?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    ended
}

/// Every run ended cancelled (by the input delivered after it) or on its own,
/// none in error, and on each thread at least one ran to its end (the input
/// delivered last).
pub(crate) fn assert_hot_threads_ended_well(
    runs: &BTreeMap<String, Vec<String>>,
    ended: &BTreeMap<String, Value>,
) {
    for (thread, thread_runs) in runs {
        let mut natural = 0;
        for run_id in thread_runs {
            let run = &ended[run_id];
            match run["termination"]["type"].as_str().unwrap_or_default() {
                "natural_end" => natural += 1,
                "cancelled" => {}
                _ => panic!("thread {thread}: {run}"),
            }
        }
        assert!(natural >= 1, "no run of thread {thread} ran to its end");
    }
}

/// Waits (bounded) until `node` holds every shard lease: the others' leases
/// expired and were taken over.
pub(crate) async fn holds_every_shard(nats: async_nats::Client, node: &str) {
    leases_until(nats, &format!("{node} holds every shard"), |holders| {
        holders.len() == SHARDS && holders.iter().all(|holder| holder == node)
    })
    .await;
}

/// Waits (bounded) until `node` holds a shard lease: it (re)joined and took its
/// share, so its runtime has been running for a renewal cycle at least.
pub(crate) async fn holds_a_shard(nats: async_nats::Client, node: &str) {
    leases_until(nats, &format!("{node} holds a shard"), |holders| {
        holders.iter().any(|holder| holder == node)
    })
    .await;
}

/// A new thread, created through `base`, in the shard node `owner` holds now and
/// prefers most: the one it keeps while it holds any (membership changes move
/// the shards a node prefers least). Waits until `owner` holds a shard first: a
/// node that just joined gets its share once the others handed it off.
pub(crate) async fn thread_owned_by(
    client: &reqwest::Client,
    base: &str,
    nats: async_nats::Client,
    owner: &str,
) -> String {
    holds_a_shard(nats.clone(), owner).await;
    let js = async_nats::jetstream::new(nats);
    let leases = LeaseTable::open(&js, DEFAULT_SHARDS_BUCKET, LEASE_TTL, 1)
        .await
        .unwrap();
    let holders = leases.holders().await.unwrap();
    let count = ShardCount::new(SHARDS as u32).unwrap();
    let node = NodeId::new(owner).unwrap();
    let held = count
        .all()
        .filter(|shard| holders.get(shard).is_some_and(|h| h.node_id == node));
    let favourite = preference(&node, held)[0];
    let id = (0..)
        .map(|i| format!("owned-by-{owner}-{i}"))
        .find(|id| {
            let thread = awaken_actors::ThreadId::new(id.as_str()).unwrap();
            count.shard_of(&thread) == favourite
        })
        .unwrap();
    let (status, thread) = post(client, format!("{base}/v1/threads"), json!({"id": id})).await;
    assert_eq!(status, 201, "{thread}");
    id
}

/// Waits (bounded) until the holders of the shard leases (node ids) satisfy `done`.
async fn leases_until(nats: async_nats::Client, what: &str, done: impl Fn(&[String]) -> bool) {
    let js = async_nats::jetstream::new(nats);
    let leases = LeaseTable::open(&js, DEFAULT_SHARDS_BUCKET, LEASE_TTL, 1)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let holders: Vec<String> = leases
            .holders()
            .await
            .unwrap()
            .values()
            .map(|holder| holder.node_id.as_str().to_owned())
            .collect();
        if done(&holders) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never true: {what} ({holders:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every run event the nodes publish on NATS, as a subscriber of
/// `awaken.events.>` receives them, by run id in arrival order. What the
/// subscriber misses while its server is down is missing here too, so the log
/// can only under-report.
pub(crate) struct EventLog {
    runs: Arc<Mutex<BTreeMap<String, Vec<StreamEvent>>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl EventLog {
    /// Starts recording on `client` (subscribed once this returns).
    pub(crate) async fn record(client: async_nats::Client) -> Self {
        let mut events = client
            .subscribe(format!("{EVENTS_SUBJECT_PREFIX}>"))
            .await
            .unwrap();
        client.flush().await.unwrap();
        let runs: Arc<Mutex<BTreeMap<String, Vec<StreamEvent>>>> = Arc::default();
        let sink = Arc::clone(&runs);
        let task = tokio::spawn(async move {
            while let Some(message) = events.next().await {
                let run_id = message.subject.as_str()[EVENTS_SUBJECT_PREFIX.len()..].to_owned();
                let events = awaken_cluster::events::decode_events(&message.payload).unwrap();
                sink.lock()
                    .unwrap()
                    .entry(run_id)
                    .or_default()
                    .extend(events);
            }
        });
        Self { runs, _task: task }
    }

    /// The events that arrived for a run after it ended (a `run_finish` other
    /// than a suspension), by run id: a fenced owner's late work shows here.
    pub(crate) fn after_the_end(&self) -> BTreeMap<String, Vec<StreamEvent>> {
        let runs = self.runs.lock().unwrap();
        runs.iter()
            .filter_map(|(run_id, events)| {
                let end = events.iter().position(|e| {
                    matches!(&e.event, AgentEvent::RunFinish { termination, .. }
                        if *termination != TerminationReason::Suspended)
                })?;
                let late = events[end + 1..].to_vec();
                (!late.is_empty()).then(|| (run_id.clone(), late))
            })
            .collect()
    }

    /// How many events were recorded in all.
    pub(crate) fn len(&self) -> usize {
        self.runs.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// The executions of the demo tools `echo` and `sleep` the nodes journaled
/// (`--tool-journal`), counted by run and call (`<run>:<call>`): a call started
/// again after a failover counts twice.
pub(crate) fn tool_starts_per_call(journal: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(journal).unwrap_or_default();
    let mut calls = BTreeMap::new();
    for line in text.lines() {
        let (_tool, key) = line.split_once(' ').unwrap();
        // The key is `<run>:<call>:<attempt>`.
        let call = key.rsplit_once(':').map_or(key, |(call, _attempt)| call);
        *calls.entry(call.to_owned()).or_insert(0) += 1;
    }
    calls
}

/// A run's SSE stream, event by event (each event's `id` is its `seq`).
pub(crate) struct RunStream {
    events: std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<eventsource_stream::Event, String>> + Send>,
    >,
}

impl RunStream {
    pub(crate) fn new(response: reqwest::Response) -> Self {
        use eventsource_stream::Eventsource;
        assert_eq!(response.status(), 200);
        let events = response
            .bytes_stream()
            .eventsource()
            .map(|event| event.map_err(|e| e.to_string()));
        Self {
            events: Box::pin(events),
        }
    }

    /// The next run event; `None` when the stream ends (or breaks).
    pub(crate) async fn next(&mut self) -> Option<StreamEvent> {
        loop {
            let frame = self.events.next().await?.ok()?;
            if frame.data.is_empty() {
                continue;
            }
            let event: StreamEvent = serde_json::from_str(&frame.data).unwrap();
            assert_eq!(frame.id, event.seq.to_string(), "the SSE id is the seq");
            return Some(event);
        }
    }
}
