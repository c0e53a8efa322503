//! Chaos on a real cluster: three `awaken serve` processes on one nats-server and
//! one PostgreSQL schema, with inputs arriving together on hot threads through
//! every node while one node is killed (SIGKILL) and another paused past its
//! lease (SIGSTOP, then SIGCONT). Whatever happens, every accepted run ends: none
//! is left `running` or `waiting` with nobody on it, none ends in error, and the
//! input delivered last on each thread runs to its natural end. And runs waiting
//! for approval outlive a restart of every node and of NATS: each decision,
//! sent twice through different nodes, is applied once (the repeat answered as a
//! duplicate) and its call runs once.
//!
//! Needs PostgreSQL (`AWAKEN_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`), `nats-server` on the PATH, and the
//! `awaken` binary built beside this test (`cargo nextest run --workspace` builds
//! it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use awaken_actors::store::{PostgresStore, TestSchema};
use awaken_cluster::shards::{DEFAULT_SHARDS_BUCKET, LeaseTable};
use awaken_cluster::testing::NatsServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Hot threads, and inputs sent to each of them together.
const THREADS: usize = 4;
const INPUTS_PER_THREAD: usize = 5;
/// How long the whole suite may take to settle after the faults.
const SETTLE: Duration = Duration::from_secs(90);
/// The cluster's shards and lease TTL (as in each node's config).
const SHARDS: usize = 16;
const LEASE_TTL: Duration = Duration::from_secs(2);

/// The `awaken` binary of this build (next to this test's own directory).
fn awaken_binary() -> PathBuf {
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

/// One `awaken serve` cluster node.
struct Node {
    child: Child,
    base: String,
    _config: tempfile::TempDir,
}

impl Node {
    async fn start(id: &str, nats_url: &str, postgres_url: &str) -> Self {
        let config = tempfile::tempdir().unwrap();
        let path = config.path().join("awaken.toml");
        std::fs::write(
            &path,
            format!(
                "[server]\naddress = \"127.0.0.1:0\"\n\n\
                 [store]\nkind = \"postgres\"\nurl = \"{postgres_url}\"\n\n\
                 [cluster]\nnats_url = \"{nats_url}\"\nnode_id = \"{id}\"\nshards = {SHARDS}\n\
                 lease_ttl_secs = {ttl}\nclaim_lease_ms = 3000\ndrain_timeout_secs = 5\n",
                ttl = LEASE_TTL.as_secs()
            ),
        )
        .unwrap();
        let mut child = Command::new(awaken_binary())
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let base = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
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
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            child,
            base,
            _config: config,
        }
    }

    fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), self.child.id().unwrap().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// A PostgreSQL schema for the cluster's store, and its URL.
async fn database() -> (String, TestSchema) {
    let (store, schema) = PostgresStore::for_tests().await;
    store.ensure_schema().await.unwrap();
    let base = std::env::var("AWAKEN_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let url = format!("{base}?options=-c%20search_path%3D{}", schema.name());
    (url, schema)
}

async fn post(client: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let response = client.post(url).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A run's record as `base` serves it (`None` while the node does not answer).
async fn record(client: &reqwest::Client, base: &str, run_id: &str) -> Option<Value> {
    let response = client
        .get(format!("{base}/v1/runs/{run_id}"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    response.json().await.ok()
}

/// A new thread through `base`; its id.
async fn new_thread(client: &reqwest::Client, base: &str) -> String {
    let (status, thread) = post(client, format!("{base}/v1/threads"), json!({})).await;
    assert_eq!(status, 201, "{thread}");
    thread["id"].as_str().unwrap().to_owned()
}

/// Waits (bounded) until one of `runs` is seen executing, or all have ended.
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

/// Waits (bounded) until `node` holds every shard lease: the others' leases
/// expired and were taken over.
async fn survivor_holds_every_shard(nats: &NatsServer, node: &str) {
    let js = async_nats::jetstream::new(nats.connect().await.unwrap());
    let leases = LeaseTable::open(&js, DEFAULT_SHARDS_BUCKET, LEASE_TTL, 1)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let holders = leases.holders().await.unwrap();
        if holders.len() == SHARDS && holders.values().all(|h| h.node_id.as_str() == node) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{node} never took every shard: {holders:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_ends_through_concurrent_inputs_a_kill_and_a_pause() {
    let nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let mut nodes = Vec::new();
    for id in ["n1", "n2", "n3"] {
        nodes.push(Node::start(id, &nats.url(), &postgres_url).await);
    }
    let client = reqwest::Client::new();

    // Hot threads, created through the first node.
    let mut threads = Vec::new();
    for _ in 0..THREADS {
        threads.push(new_thread(&client, &nodes[0].base).await);
    }

    // Every input of every thread at once, spread over the nodes.
    let sends: Vec<_> = (0..THREADS * INPUTS_PER_THREAD)
        .map(|i| {
            let thread = threads[i % THREADS].clone();
            let base = nodes[i % nodes.len()].base.clone();
            let client = client.clone();
            tokio::spawn(async move {
                let body = json!({"agentId": "slow",
                    "messages": [{"role": "user", "content": format!("input {i}")}]});
                let (status, queued) = post(
                    &client,
                    format!("{base}/v1/threads/{thread}/messages"),
                    body,
                )
                .await;
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

    // Faults while runs execute (a run of every thread seen running): one node
    // killed, one paused until the survivor holds every shard (its leases
    // expired and were taken), then resumed.
    let survivor = nodes[0].base.clone();
    for thread_runs in runs.values() {
        some_run_executes(&client, &survivor, thread_runs).await;
    }
    nodes[2].child.kill().await.unwrap();
    nodes[1].signal("STOP");
    survivor_holds_every_shard(&nats, "n1").await;
    nodes[1].signal("CONT");

    // Every run ends, seen from the node that stayed up.
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut pending: Vec<String> = runs.values().flatten().cloned().collect();
    let mut ended: BTreeMap<String, Value> = BTreeMap::new();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for run_id in pending {
            match record(&client, &survivor, &run_id).await {
                Some(run) if run["status"] == "done" => {
                    ended.insert(run_id, run);
                }
                _ => still.push(run_id),
            }
        }
        pending = still;
        if !pending.is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "runs never ended: {pending:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Every run ended cancelled (by the input delivered after it) or on its own,
    // none in error, and the input delivered last on each thread ran to its end.
    for (thread, thread_runs) in &runs {
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

/// The first waiting call of a run's record, once the run waits.
async fn waiting_call(client: &reqwest::Client, base: &str, run_id: &str) -> String {
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
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_runs_outlive_every_node_and_nats_and_their_retried_decisions_apply_once() {
    let mut nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let mut nodes = Vec::new();
    for id in ["n1", "n2", "n3"] {
        nodes.push(Node::start(id, &nats.url(), &postgres_url).await);
    }
    let client = reqwest::Client::new();

    // Runs that ask for approval, on threads spread over the nodes.
    let mut runs = Vec::new();
    for i in 0..THREADS {
        let base = &nodes[i % nodes.len()].base;
        let thread_id = new_thread(&client, base).await;
        let body = json!({"agentId": "demo",
            "messages": [{"role": "user", "content": "delete notes.txt"}]});
        let (status, queued) = post(
            &client,
            format!("{base}/v1/threads/{thread_id}/messages"),
            body,
        )
        .await;
        assert_eq!(status, 202, "{queued}");
        let run_id = queued["run_id"].as_str().unwrap().to_owned();
        let call = waiting_call(&client, base, &run_id).await;
        runs.push((thread_id, run_id, call));
    }

    // Every node and the NATS server go down while the runs wait; all come back.
    for node in &mut nodes {
        node.child.kill().await.unwrap();
    }
    nats.restart().await.unwrap();
    let mut nodes = Vec::new();
    for id in ["n1", "n2", "n3"] {
        nodes.push(Node::start(id, &nats.url(), &postgres_url).await);
    }

    // Each decision is sent, then sent again through another node: applied once,
    // the repeat a duplicate, and the run finishes.
    for (i, (thread_id, run_id, call)) in runs.iter().enumerate() {
        let decision = json!({"call_id": call, "decision_id": format!("d-{i}"),
            "action": "resume", "result": {"approved": true}});
        let first = &nodes[i % nodes.len()].base;
        let again = &nodes[(i + 1) % nodes.len()].base;
        let (status, applied) = post(
            &client,
            format!("{first}/v1/runs/{run_id}/decision"),
            decision.clone(),
        )
        .await;
        assert_eq!(status, 200, "{applied}");
        assert_eq!(applied["duplicate"], false, "{applied}");
        let (status, repeated) = post(
            &client,
            format!("{again}/v1/runs/{run_id}/decision"),
            decision,
        )
        .await;
        assert_eq!(status, 200, "{repeated}");
        assert_eq!(repeated["duplicate"], true, "{repeated}");

        let run = record(&client, again, run_id).await.unwrap();
        assert_eq!(run["status"], "done", "{run}");
        assert_eq!(run["termination"]["type"], "natural_end", "{run}");
        // The approved call ran once: one result for it in the thread's log.
        let log: Value = client
            .get(format!("{again}/v1/threads/{thread_id}/messages?limit=200"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let results = log["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["message"]["tool_call_id"] == call.as_str())
            .count();
        assert_eq!(results, 1, "{log}");
    }
}
