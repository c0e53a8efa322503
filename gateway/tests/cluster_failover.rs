//! Multi-process cluster tests: `awaken node` processes on a real nats-server and a
//! real PostgreSQL schema, killed with SIGKILL or paused with SIGSTOP mid-run.
//!
//! Each test proves DESIGN invariants across processes: a dispatch is never lost
//! (2), a decision is applied once across failover (3), a waiting run survives the
//! death of its node (4), a tool runs once per approval (5), and a paused owner that
//! comes back cannot commit anything (1).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod otlp_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream;
use awaken_actors::contract::{
    AgentEvent, Message, RunDispatch, RunDispatchStatus, RunStatus, TraceContext,
};
use awaken_actors::delegation::ChildRef;
use awaken_actors::ids::{AgentId, DispatchId, RunId, ThreadId};
use awaken_actors::mailbox::{MailboxConfig, MailboxStore, SubmitOptions, submit};
use awaken_actors::store::{MessageQuery, PostgresStore, TestSchema, ThreadRunStore};
use awaken_actors::thread::RunRequest;
use awaken_cluster::decisions::{DecisionBus, DecisionBusConfig, DecisionPayload};
use awaken_cluster::events::{decode_events, event_subject};
use awaken_cluster::inbox::{DEFAULT_INBOX_BUCKET, KvRunInbox};
use awaken_cluster::ledger::{DEFAULT_LEDGER_NAME, LedgerMailbox};
use awaken_cluster::membership::NodeId;
use awaken_cluster::shards::{DEFAULT_SHARDS_BUCKET, LeaseTable, ShardCount};
use awaken_cluster::testing::NatsServer;
use futures::{FutureExt, StreamExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const SHARDS: u32 = 8;
const LEASE_TTL_S: u64 = 2;
const DEADLINE: Duration = Duration::from_secs(60);

/// One `awaken node` process; its log lines are echoed and can be waited for.
struct Node {
    id: String,
    child: Child,
    log: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Node {
    async fn spawn(cluster: &Cluster, id: &str) -> Self {
        Self::with_claim_lease(cluster, id, 3_000).await
    }

    async fn with_claim_lease(cluster: &Cluster, id: &str, claim_lease_ms: u64) -> Self {
        Self::with_env(cluster, id, claim_lease_ms, &[]).await
    }

    /// A node exporting its spans to the collector at `endpoint`, naming itself
    /// in `service.instance.id`.
    async fn exporting(cluster: &Cluster, id: &str, endpoint: &str) -> Self {
        let instance = format!("service.instance.id={id}");
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ("OTEL_RESOURCE_ATTRIBUTES", instance.as_str()),
        ];
        Self::with_env(cluster, id, 3_000, &env).await
    }

    async fn with_env(
        cluster: &Cluster,
        id: &str,
        claim_lease_ms: u64,
        env: &[(&str, &str)],
    ) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_awaken"))
            .args(["node", "--nats-url", &cluster.nats.url()])
            .args(["--postgres-url", &cluster.postgres_url])
            .args(["--node-id", id, "--shards", &SHARDS.to_string()])
            .args(["--lease-ttl-s", &LEASE_TTL_S.to_string()])
            .args(["--claim-lease-ms", &claim_lease_ms.to_string()])
            .arg("--tool-journal")
            .arg(&cluster.journal)
            .env("RUST_LOG", "warn,awaken_cluster=info,awaken_actors=info")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the awaken binary runs");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(DEADLINE, lines.next_line())
            .await
            .expect("the node reports ready in time")
            .unwrap()
            .expect("the node printed a line");
        assert!(ready.contains(r#""event":"ready""#), "{ready}");
        let (tx, log) = tokio::sync::mpsc::unbounded_channel();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let name = id.to_owned();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                eprintln!("[{name}] {line}");
                let _ = tx.send(line);
            }
        });
        Self {
            id: id.to_owned(),
            child,
            log,
        }
    }

    /// Waits for a log line containing `needle`.
    async fn logged(&mut self, needle: &str) {
        let wait = async {
            while let Some(line) = self.log.recv().await {
                if line.contains(needle) {
                    return;
                }
            }
            panic!("the node exited before logging {needle:?}");
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {needle:?}"));
    }

    fn pid(&self) -> String {
        self.child.id().unwrap().to_string()
    }

    async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }

    fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), self.pid()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// A nats-server, a PostgreSQL schema, a tool journal, and the client side of the
/// cluster (what a gateway or a test uses to submit runs and decisions).
struct Cluster {
    nats: NatsServer,
    postgres_url: String,
    store: PostgresStore,
    _schema: TestSchema,
    _dir: tempfile::TempDir,
    journal: PathBuf,
    js: jetstream::Context,
    mailbox: LedgerMailbox,
    inbox: KvRunInbox,
    leases: LeaseTable,
}

impl Cluster {
    async fn start() -> Self {
        let nats = NatsServer::start().await.unwrap();
        let (store, schema) = PostgresStore::for_tests().await;
        store.ensure_schema().await.unwrap();
        let base = std::env::var("AWAKEN_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let postgres_url = format!("{base}?options=-c%20search_path%3D{}", schema.name());
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("tools.log");
        let js = jetstream::new(nats.connect().await.unwrap());
        let mailbox = LedgerMailbox::open(&js, DEFAULT_LEDGER_NAME, 1, MailboxConfig::default())
            .await
            .unwrap();
        let inbox = KvRunInbox::open(
            &js,
            DEFAULT_INBOX_BUCKET,
            1,
            awaken_cluster::ledger::ANSWER_DEADLINE,
        )
        .await
        .unwrap();
        let leases = LeaseTable::open(
            &js,
            DEFAULT_SHARDS_BUCKET,
            Duration::from_secs(LEASE_TTL_S),
            1,
        )
        .await
        .unwrap();
        Self {
            nats,
            postgres_url,
            store,
            _schema: schema,
            _dir: dir,
            journal,
            js,
            mailbox,
            inbox,
            leases,
        }
    }

    async fn submit(&self, thread: &ThreadId, agent: &str) -> RunDispatch {
        self.submit_run(thread, agent, RunId::generate()).await
    }

    async fn submit_run(&self, thread: &ThreadId, agent: &str, run_id: RunId) -> RunDispatch {
        self.submit_traced(thread, agent, run_id, None).await
    }

    async fn submit_traced(
        &self,
        thread: &ThreadId,
        agent: &str,
        run_id: RunId,
        trace: Option<TraceContext>,
    ) -> RunDispatch {
        let request = RunRequest::new(thread.clone(), vec![Message::user("go")])
            .with_agent_id(AgentId::new(agent).unwrap())
            .with_run_id(run_id)
            .with_trace(trace);
        submit(
            &self.mailbox,
            &self.inbox,
            request,
            SubmitOptions::default(),
        )
        .await
        .unwrap()
    }

    /// Waits until every shard is held and exactly `nodes` hold them.
    async fn balanced(&self, nodes: &[&Node]) {
        let want: BTreeSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
        eventually("shards spread over the nodes", || async {
            let holders = self.leases.holders().await.unwrap();
            let seen: BTreeSet<String> = holders.values().map(|h| h.node_id.to_string()).collect();
            holders.len() == SHARDS as usize
                && seen.iter().map(String::as_str).collect::<BTreeSet<_>>() == want
        })
        .await;
    }

    async fn owner_of(&self, thread: &ThreadId) -> NodeId {
        let shard = ShardCount::new(SHARDS).unwrap().shard_of(thread);
        self.leases.holders().await.unwrap()[&shard].node_id.clone()
    }

    async fn dispatch(&self, id: &DispatchId) -> RunDispatch {
        self.mailbox.load_dispatch(id).await.unwrap().unwrap()
    }

    /// Waits until the dispatch is acked with the run in `status`; on timeout the
    /// failure shows the dispatch and the shard holders.
    async fn acked(&self, id: &DispatchId, status: RunStatus) -> RunDispatch {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let d = self.dispatch(id).await;
            if d.status == RunDispatchStatus::Acked && d.run_status == Some(status) {
                return d;
            }
            if tokio::time::Instant::now() >= deadline {
                let holders = self.leases.holders().await;
                panic!(
                    "timed out: dispatch not acked with {status:?}: {d:?}; holders: {holders:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn run_status(&self, run_id: &RunId) -> Option<RunStatus> {
        self.store.load_run(run_id).await.unwrap().map(|r| r.status)
    }

    fn journal_lines(&self) -> Vec<String> {
        read_lines(&self.journal)
    }
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Polls `check` until it holds; fails the test after [`DEADLINE`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn pick<'a>(nodes: &'a mut [Node], id: &NodeId) -> (&'a mut Node, usize) {
    let at = nodes.iter().position(|n| n.id == id.as_str()).unwrap();
    (&mut nodes[at], at)
}

/// One run, one trace, across processes (#40): started with a caller's context,
/// waiting on the node that owned it, that node killed, a decision published
/// straight onto NATS with the publisher's own `traceparent`, and the run ended
/// by the survivor. Both activations are in the caller's trace, each exported by
/// the node that ran it; the decision's consumer span is in the publisher's
/// trace, and the activation it resumed links to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_decided_over_nats_after_a_failover_is_one_trace() {
    const RUN_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const CALLER: &str = "b7ad6b7169203331";
    const PUBLISHER_TRACE: &str = "5b8efff798038103d269b633813fc60c";
    const PUBLISHER: &str = "eee19b7ec3c1b174";
    let (endpoint, mut received) = otlp_support::collector().await;
    let cluster = Cluster::start().await;
    let mut nodes = vec![
        Node::exporting(&cluster, "node-a", &endpoint).await,
        Node::exporting(&cluster, "node-b", &endpoint).await,
    ];
    cluster.balanced(&[&nodes[0], &nodes[1]]).await;

    let thread = ThreadId::new("traced-failover").unwrap();
    let trace = TraceContext::parse(&format!("00-{RUN_TRACE}-{CALLER}-01")).unwrap();
    let run_id = RunId::generate();
    let listener = cluster.js.client();
    let mut events = listener.subscribe(event_subject(&run_id)).await.unwrap();
    listener.flush().await.unwrap();
    let queued = cluster
        .submit_traced(&thread, "bench-hitl", run_id, Some(trace))
        .await;
    cluster.acked(&queued.dispatch_id, RunStatus::Waiting).await;
    let run = cluster
        .store
        .load_run(&queued.run_id)
        .await
        .unwrap()
        .unwrap();
    let call_id = run.waiting.unwrap().tickets[0].tool_call_id.to_string();
    // A process killed with SIGKILL loses the spans it had not sent yet: the
    // owner is killed once its activation's span has arrived.
    let mut spans = otlp_support::spans_until(&mut received, |spans| {
        spans.iter().any(|s| {
            s.name == "invoke_agent bench-hitl"
                && s.attributes.get("awaken.run.outcome").map(String::as_str) == Some("waiting")
        }) && spans.iter().any(|s| s.name == "process awaken.mailbox")
    })
    .await;
    let owner = cluster.owner_of(&thread).await;
    let (victim, at) = pick(&mut nodes, &owner);
    victim.kill().await;
    let survivor = nodes[1 - at].id.clone();

    let decision = DecisionPayload::resume(call_id, "approve-traced", serde_json::json!(true));
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Content-Type", "application/json");
    headers.insert("Nats-Msg-Id", "approve-traced");
    headers.insert(
        "traceparent",
        format!("00-{PUBLISHER_TRACE}-{PUBLISHER}-01").as_str(),
    );
    cluster
        .js
        .publish_with_headers(
            format!("awaken.decisions.{thread}"),
            headers,
            serde_json::to_vec(&decision).unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    eventually("the run finishes on the survivor", || async {
        cluster.run_status(&queued.run_id).await == Some(RunStatus::Done)
    })
    .await;

    spans.extend(
        otlp_support::spans_until(&mut received, |spans| {
            spans.iter().any(|s| {
                s.name == "invoke_agent bench-hitl"
                    && s.attributes.get("awaken.run.outcome").map(String::as_str)
                        == Some("natural_end")
            }) && spans.iter().any(|s| {
                s.name == "process awaken.decisions"
                    && s.attributes
                        .get("awaken.decision.outcome")
                        .map(String::as_str)
                        == Some("applied")
            })
        })
        .await,
    );
    otlp_support::dump_if_asked(&spans);
    let activation = |outcome: &str| {
        spans
            .iter()
            .find(|s| {
                s.name == "invoke_agent bench-hitl" && s.attributes["awaken.run.outcome"] == outcome
            })
            .unwrap_or_else(|| panic!("an activation ending {outcome}: {spans:#?}"))
    };
    let first = activation("waiting");
    let second = activation("natural_end");
    for span in [first, second] {
        assert_eq!(span.trace_id, RUN_TRACE);
        assert_eq!(span.parent_span_id, CALLER);
        assert_eq!(span.attributes["awaken.run.id"], queued.run_id.as_str());
    }
    assert_eq!(first.resource["service.instance.id"], owner.as_str());
    assert_eq!(second.resource["service.instance.id"], survivor);
    // The dispatch the test enqueued was taken by the owner, in the run's trace.
    let taken = otlp_support::one(&spans, "process awaken.mailbox");
    assert_eq!(taken.trace_id, RUN_TRACE);
    assert_eq!(taken.parent_span_id, CALLER);
    assert_eq!(taken.resource["service.instance.id"], owner.as_str());
    assert_eq!(taken.attributes["awaken.dispatch.outcome"], "activated");
    // Mid-failover the decision may be taken and given back (`retry`) until
    // the survivor owns the thread; every attempt is in the publisher's trace.
    let attempts: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "process awaken.decisions")
        .collect();
    for attempt in &attempts {
        assert_eq!(attempt.trace_id, PUBLISHER_TRACE);
        assert_eq!(attempt.parent_span_id, PUBLISHER);
        assert_eq!(attempt.attributes["messaging.system"], "nats");
        assert_eq!(attempt.attributes["messaging.message.id"], "approve-traced");
    }
    let applied: Vec<_> = attempts
        .iter()
        .filter(|s| s.attributes["awaken.decision.outcome"] == "applied")
        .collect();
    assert_eq!(applied.len(), 1, "{attempts:#?}");
    let consumed = applied[0];
    assert_eq!(
        second.links,
        [(PUBLISHER_TRACE.to_owned(), consumed.span_id.clone())]
    );
    assert_eq!(second.events, ["awaken.decision"]);
    // The run's events, published by each activation's node, carry that
    // activation's span as their `traceparent`.
    let activations = [first.span_id.clone(), second.span_id.clone()];
    let mut seen = BTreeSet::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while seen.len() < activations.len() {
            let event = events.next().await.expect("the events subscription");
            let traceparent = event
                .headers
                .as_ref()
                .and_then(|headers| headers.get("traceparent"))
                .unwrap_or_else(|| panic!("an event without traceparent: {event:?}"));
            let trace = TraceContext::parse(traceparent.as_str()).unwrap();
            assert_eq!(trace.trace_id(), RUN_TRACE);
            assert!(
                activations.contains(&trace.span_id()),
                "{trace} is not an activation of {activations:?}"
            );
            seen.insert(trace.span_id());
        }
    })
    .await
    .expect("events of both activations");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_run_resumes_on_another_node_after_its_owner_is_killed() {
    let cluster = Cluster::start().await;
    let mut nodes = vec![
        Node::spawn(&cluster, "node-a").await,
        Node::spawn(&cluster, "node-b").await,
    ];
    cluster.balanced(&[&nodes[0], &nodes[1]]).await;

    let thread = ThreadId::new("hitl-failover").unwrap();
    let queued = cluster.submit(&thread, "bench-hitl").await;
    let waiting = cluster.acked(&queued.dispatch_id, RunStatus::Waiting).await;
    let run = cluster
        .store
        .load_run(&queued.run_id)
        .await
        .unwrap()
        .unwrap();
    let call_id = run.waiting.unwrap().tickets[0].tool_call_id.to_string();
    assert!(
        cluster.journal_lines().is_empty(),
        "nothing ran before approval"
    );

    let owner = cluster.owner_of(&thread).await;
    assert_eq!(
        waiting.dispatch_instance_id.as_deref(),
        Some(owner.as_str())
    );
    let (victim, at) = pick(&mut nodes, &owner);
    victim.kill().await;
    let survivor = &nodes[1 - at];

    // Published after the kill, by a client that knows nothing of the owner.
    let bus = DecisionBus::open(cluster.js.clone(), DecisionBusConfig::default())
        .await
        .unwrap();
    let decision = DecisionPayload::resume(call_id.clone(), "approve-1", serde_json::json!(true));
    bus.publish(thread.as_str(), &decision).await.unwrap();
    // A duplicate (a client retrying) must not run the tool again.
    bus.publish(thread.as_str(), &decision).await.unwrap();

    eventually("the run finishes on the survivor", || async {
        cluster.run_status(&queued.run_id).await == Some(RunStatus::Done)
    })
    .await;
    assert_eq!(cluster.owner_of(&thread).await.as_str(), survivor.id);
    let executions = cluster.journal_lines();
    assert_eq!(
        executions,
        [format!("echo {}:{call_id}:1", queued.run_id)],
        "exactly one execution for one approval"
    );
    let log = cluster
        .store
        .load_messages(&thread, &MessageQuery::default())
        .await
        .unwrap();
    let last = log.messages.last().unwrap();
    assert!(last.message.text().starts_with("echoed: "), "{last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_mid_tool_continues_on_another_node_from_its_checkpoint() {
    Box::pin(killed_mid_tool(3_000)).await;
}

/// The dead node's claim is given back once it has left the cluster, not when the
/// claim's lease ends: with a lease longer than the test's deadline, only that can
/// finish the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_mid_tool_does_not_wait_for_its_claim_lease() {
    let (done, victim) = Box::pin(killed_mid_tool(10 * DEADLINE.as_millis() as u64)).await;
    assert_eq!(
        done.last_error,
        Some(format!("its claimer {victim} is gone")),
        "{done:?}"
    );
}

/// Kills the owner of a run while its tool runs; the finished dispatch and the
/// victim's id.
async fn killed_mid_tool(claim_lease_ms: u64) -> (RunDispatch, String) {
    let cluster = Cluster::start().await;
    let mut nodes = vec![
        Node::with_claim_lease(&cluster, "node-a", claim_lease_ms).await,
        Node::with_claim_lease(&cluster, "node-b", claim_lease_ms).await,
    ];
    cluster.balanced(&[&nodes[0], &nodes[1]]).await;

    let thread = ThreadId::new("midrun-failover").unwrap();
    let owner = cluster.owner_of(&thread).await;
    let queued = cluster.submit(&thread, "slow").await;
    eventually("the tool started on the owner", || async {
        !cluster.journal_lines().is_empty()
    })
    .await;
    let (victim, at) = pick(&mut nodes, &owner);
    victim.kill().await;
    let victim = victim.id.clone();
    let survivor = nodes[1 - at].id.clone();

    let done = cluster.acked(&queued.dispatch_id, RunStatus::Done).await;
    assert_eq!(
        done.dispatch_instance_id.as_deref(),
        Some(survivor.as_str())
    );
    assert_eq!(done.run_response.as_deref(), Some("slept"));
    assert!(done.attempt_count >= 2, "the dead claim counted: {done:?}");
    let executions = cluster.journal_lines();
    assert_eq!(executions.len(), 2, "at least once: re-run after the crash");
    assert_eq!(
        executions[0], executions[1],
        "the re-run carries the same idempotency key"
    );
    assert_eq!(
        cluster.run_status(&queued.run_id).await,
        Some(RunStatus::Done)
    );
    (done, victim)
}

/// A rolling update's SIGTERM while a tool runs: the node lets the run finish
/// before it gives its threads away, so the call executes once, on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_terminated_mid_tool_finishes_the_call_before_it_leaves() {
    let cluster = Cluster::start().await;
    let mut nodes = vec![
        Node::spawn(&cluster, "node-a").await,
        Node::spawn(&cluster, "node-b").await,
    ];
    cluster.balanced(&[&nodes[0], &nodes[1]]).await;

    let thread = ThreadId::new("midrun-drain").unwrap();
    let owner = cluster.owner_of(&thread).await;
    let queued = cluster.submit(&thread, "slow").await;
    eventually("the tool started on the owner", || async {
        !cluster.journal_lines().is_empty()
    })
    .await;
    let (leaving, _) = pick(&mut nodes, &owner);
    leaving.signal("TERM");
    let status = tokio::time::timeout(DEADLINE, leaving.child.wait())
        .await
        .expect("the node drains in time")
        .unwrap();
    assert!(status.success(), "a clean drain: {status}");

    let done = cluster.acked(&queued.dispatch_id, RunStatus::Done).await;
    assert_eq!(
        done.dispatch_instance_id.as_deref(),
        Some(owner.as_str()),
        "the leaving node finished it"
    );
    assert_eq!(done.attempt_count, 1, "{done:?}");
    assert_eq!(done.run_response.as_deref(), Some("slept"));
    assert_eq!(cluster.journal_lines().len(), 1, "the call executed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_that_comes_back_cannot_commit() {
    let cluster = Cluster::start().await;
    let mut nodes = vec![
        Node::spawn(&cluster, "node-a").await,
        Node::spawn(&cluster, "node-b").await,
    ];
    cluster.balanced(&[&nodes[0], &nodes[1]]).await;

    let thread = ThreadId::new("paused-owner").unwrap();
    let owner = cluster.owner_of(&thread).await;
    // Every event any node publishes for the run, in arrival order.
    let run_id = RunId::generate();
    let mut published = cluster
        .nats
        .connect()
        .await
        .unwrap()
        .subscribe(event_subject(&run_id))
        .await
        .unwrap();
    let queued = cluster.submit_run(&thread, "slow", run_id).await;
    eventually("the tool started on the owner", || async {
        !cluster.journal_lines().is_empty()
    })
    .await;
    let (paused, at) = pick(&mut nodes, &owner);
    paused.signal("STOP");
    let survivor = nodes[1 - at].id.clone();

    let done = cluster.acked(&queued.dispatch_id, RunStatus::Done).await;
    assert_eq!(
        done.dispatch_instance_id.as_deref(),
        Some(survivor.as_str())
    );
    let before = cluster
        .store
        .load_thread_snapshot(&thread)
        .await
        .unwrap()
        .unwrap();

    // The paused node wakes up in the middle of its step, past its lease. Its step
    // either reaches its checkpoint (refused: the survivor raised the thread's
    // fence) or is stopped when the node finds its lease lost and evicts the
    // shard's threads; once it logs the eviction, nothing of it is left to write.
    let paused = &mut nodes[at];
    paused.signal("CONT");
    paused.logged("lost shard evicted").await;
    let next = cluster.submit(&thread, "bench-text").await;
    cluster.acked(&next.dispatch_id, RunStatus::Done).await;
    let after = cluster
        .store
        .load_thread_snapshot(&thread)
        .await
        .unwrap()
        .unwrap();
    let old_run = cluster
        .store
        .load_run(&queued.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(old_run.status, RunStatus::Done);
    assert_eq!(
        after.messages[..before.messages.len()],
        before.messages[..],
        "the paused owner changed nothing"
    );
    assert_eq!(
        after.messages.len(),
        before.messages.len() + 2,
        "only the new run's user message and answer were added"
    );
    assert!(after.fence >= before.fence);

    // Nothing of the paused node reached the run's followers once it resumed: the
    // run's events end with the survivor's one `run_finish`.
    let mut events = Vec::new();
    while let Some(Some(message)) = published.next().now_or_never() {
        events.extend(decode_events(&message.payload).unwrap());
    }
    let finishes: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.event, AgentEvent::RunFinish { .. }))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        finishes,
        [events.len() - 1],
        "events after the run ended: {events:?}"
    );
}

/// `awaken bench cluster --scenario failover` on two real nodes: one kill, the run
/// resumed on the survivor, and not before the victim's lease could expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failover_bench_resumes_a_waiting_run_after_its_owner_is_killed() {
    use awaken_gateway::bench::{BenchOptions, failover};

    let cluster = Cluster::start().await;
    let options = BenchOptions {
        runs: 1,
        concurrency: 1,
        progress: false,
        ..BenchOptions::default()
    };
    let report = Box::pin(failover::run(
        &cluster.nats.url(),
        &cluster.postgres_url,
        Path::new(env!("CARGO_BIN_EXE_awaken")),
        &options,
    ))
    .await
    .unwrap();
    assert_eq!(
        (report.runs, report.errors, report.nodes),
        (1, 0, 2),
        "{report:?}"
    );
    let failover_us = report.extra["failover_max_us"].as_u64().unwrap();
    // The bench's nodes renew their 5 s leases every 5/3 s: the shard stays the
    // dead node's for at least the rest of that TTL.
    assert!((3_000_000..60_000_000).contains(&failover_us), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegated_child_waiting_for_approval_outlives_its_node_and_the_parent_completes() {
    let cluster = Cluster::start().await;
    let mut nodes = vec![
        Node::spawn(&cluster, "node-a").await,
        Node::spawn(&cluster, "node-b").await,
    ];
    cluster.balanced(&[&nodes[0], &nodes[1]]).await;

    // The scripted orchestrator names its delegate call after the history: a probe
    // run tells its id, so the parent run can be chosen with its child (whose ids
    // derive from the parent run and the call) on the other node.
    let probe = cluster
        .submit(&ThreadId::new("delegation-probe").unwrap(), "orchestrator")
        .await;
    cluster.acked(&probe.dispatch_id, RunStatus::Waiting).await;
    let probed = cluster
        .store
        .load_run(&probe.run_id)
        .await
        .unwrap()
        .unwrap();
    let call_id = probed.waiting.unwrap().tickets[0].tool_call_id.clone();
    let parent_thread = ThreadId::new("delegation-parent").unwrap();
    let parent_owner = cluster.owner_of(&parent_thread).await;
    let shards = ShardCount::new(SHARDS).unwrap();
    let holders = cluster.leases.holders().await.unwrap();
    let (parent_run, child) = std::iter::repeat_with(RunId::generate)
        .map(|run| {
            let child = ChildRef::of_call(&AgentId::new("demo").unwrap(), &run, &call_id);
            (run, child)
        })
        .find(|(_, child)| holders[&shards.shard_of(&child.thread_id)].node_id != parent_owner)
        .unwrap();

    let parent = cluster
        .submit_run(&parent_thread, "orchestrator", parent_run.clone())
        .await;
    cluster.acked(&parent.dispatch_id, RunStatus::Waiting).await;
    assert_eq!(
        cluster.run_status(&child.run_id).await,
        Some(RunStatus::Waiting)
    );
    let child_owner = cluster.owner_of(&child.thread_id).await;
    assert_ne!(child_owner, parent_owner);

    // Kill the child's node while it waits; the decision goes to the parent.
    let (victim, _) = pick(&mut nodes, &child_owner);
    victim.kill().await;
    let bus = DecisionBus::open(cluster.js.clone(), DecisionBusConfig::default())
        .await
        .unwrap();
    let decision = DecisionPayload::resume(
        call_id.to_string(),
        "approve-delegate",
        serde_json::json!(true),
    );
    bus.publish(parent_thread.as_str(), &decision)
        .await
        .unwrap();

    eventually("the parent finishes", || async {
        cluster.run_status(&parent_run).await == Some(RunStatus::Done)
    })
    .await;
    let child_record = cluster
        .store
        .load_run(&child.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(child_record.status, RunStatus::Done);
    assert_eq!(cluster.owner_of(&child.thread_id).await, parent_owner);
    let log = cluster
        .store
        .load_messages(&parent_thread, &MessageQuery::default())
        .await
        .unwrap();
    let last = log.messages.last().unwrap().message.text();
    assert!(last.starts_with("The demo agent reports: "), "{last}");
    assert!(last.contains(r#"\"deleted\":\"notes.txt\""#), "{last}");
}
