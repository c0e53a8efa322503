//! Chaos on a real cluster: three `awaken serve` processes on NATS (one server,
//! or a three-server JetStream cluster) and one PostgreSQL schema, with inputs
//! arriving together on hot threads through every node while nodes are killed
//! (SIGKILL) or paused past their lease (SIGSTOP, then SIGCONT) and NATS servers
//! restart. Whatever happens:
//!
//! - every accepted run ends: none is left `running` or `waiting` with nobody
//!   on it, none ends in error, and the input delivered last on each thread runs
//!   to its natural end;
//! - a fenced node adds nothing: no event of a run arrives after its end (an
//!   observer subscribed to every run's events checks), and no tool call starts
//!   more than twice (once, and once more where its node was cut off mid-call:
//!   the nodes journal every execution);
//! - runs waiting for approval outlive a restart of every node and of NATS, and
//!   each decision, sent twice through different nodes, is applied once (the
//!   repeat answered as a duplicate) and starts its call once; on the three-server
//!   layout, so do decisions sent while a node and a NATS server are killed.
//!
//! Nodes start as the three-node overlay's pods do (`support::Node::start`): its
//! `awaken.toml`, the store URL and node id from the environment, plus the
//! test's shorter leases.
//!
//! Needs PostgreSQL (`AWAKEN_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`), `nats-server` on the PATH, and the
//! `awaken` binary built beside this test (`cargo nextest run --workspace` builds
//! it). `AWAKEN_E2E_LOG` sets the nodes' `RUST_LOG` (default `warn`); their
//! log lines are marked with the node they came from.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[allow(dead_code)] // each suite uses some of the shared helpers
mod support;

use std::path::Path;

use awaken_actors::contract::{AgentEvent, TerminationReason};
use awaken_cluster::testing::{NatsCluster, NatsServer};
use serde_json::json;
use support::{
    Cluster, EventLog, Node, RunStream, SETTLE, all_end, assert_hot_threads_ended_well, database,
    every_thread_executes, holds_a_shard, holds_every_shard, hot_threads, new_thread, post, record,
    thread_owned_by, tool_starts_per_call, waiting_call,
};

/// Hot threads, and inputs sent to each of them together.
const THREADS: usize = 16;
const INPUTS_PER_THREAD: usize = 10;

/// A cluster description whose journal lives in `dir`.
fn cluster(nats_url: String, postgres_url: &str, replicas: usize, dir: &Path) -> Cluster {
    Cluster {
        nats_url,
        postgres_url: postgres_url.to_owned(),
        replicas,
        journal: dir.join("tools.journal"),
        server_toml: String::new(),
    }
}

/// What an observer outside the cluster sees of fenced work: no event of a run
/// after its end, and no call started more than twice.
fn assert_no_fenced_work(events: &EventLog, cluster: &Cluster) {
    assert!(events.len() > 0, "the observer saw no event at all");
    let late = events.after_the_end();
    assert!(late.is_empty(), "events after their run ended: {late:#?}");
    let starts = tool_starts_per_call(&cluster.journal);
    assert!(!starts.is_empty(), "no tool execution journaled");
    let repeated: Vec<_> = starts.iter().filter(|(_, n)| **n > 2).collect();
    assert!(
        repeated.is_empty(),
        "calls started more than twice: {repeated:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_ends_through_concurrent_inputs_a_kill_and_a_pause() {
    let nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(nats.url(), &postgres_url, 1, dir.path());
    let events = EventLog::record(nats.connect().await.unwrap()).await;
    let mut nodes = Node::start_all(3, &cluster).await;
    let client = reqwest::Client::new();
    let runs = hot_threads(&client, &nodes, THREADS, INPUTS_PER_THREAD).await;

    // Faults while runs execute: one node killed, one paused until the survivor
    // holds every shard (their leases expired and were taken) and every run
    // ended there; then the paused node wakes and takes its share back. Its
    // calls cut by the pause complete at once on waking: they must add nothing.
    let survivor = nodes[0].base.clone();
    every_thread_executes(&client, &survivor, &runs).await;
    nodes[2].child.kill().await.unwrap();
    nodes[1].signal("STOP");
    holds_every_shard(nats.connect().await.unwrap(), "n1").await;
    let ended = all_end(&client, &survivor, &runs).await;
    nodes[1].signal("CONT");
    holds_a_shard(nats.connect().await.unwrap(), "n2").await;

    assert_hot_threads_ended_well(&runs, &ended);
    assert_no_fenced_work(&events, &cluster);
    // And the records stayed as the survivor left them.
    assert_eq!(all_end(&client, &nodes[1].base, &runs).await, ended);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_ends_when_nats_restarts_under_load() {
    let mut nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(nats.url(), &postgres_url, 1, dir.path());
    // The observer's client reconnects after the restart, like the nodes'.
    let events = EventLog::record(nats.connect().await.unwrap()).await;
    let nodes = Node::start_all(3, &cluster).await;
    let client = reqwest::Client::new();
    let runs = hot_threads(&client, &nodes, THREADS, INPUTS_PER_THREAD).await;

    // The one NATS server goes down and comes back while runs execute.
    every_thread_executes(&client, &nodes[0].base, &runs).await;
    nats.restart().await.unwrap();

    let ended = all_end(&client, &nodes[0].base, &runs).await;
    assert_hot_threads_ended_well(&runs, &ended);
    assert_no_fenced_work(&events, &cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_ends_on_a_nats_cluster_losing_a_server_and_a_node() {
    let mut nats = NatsCluster::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(nats.urls(), &postgres_url, 3, dir.path());
    let events = EventLog::record(nats.connect().await.unwrap()).await;
    let mut nodes = Node::start_all(3, &cluster).await;
    let client = reqwest::Client::new();
    let runs = hot_threads(&client, &nodes, THREADS, INPUTS_PER_THREAD).await;

    // While runs execute, a NATS server and a node are killed; the server comes
    // back while the others carry on.
    every_thread_executes(&client, &nodes[0].base, &runs).await;
    nats.kill(0).await;
    nodes[2].child.kill().await.unwrap();
    nats.restart(0).await.unwrap();

    let ended = all_end(&client, &nodes[0].base, &runs).await;
    assert_hot_threads_ended_well(&runs, &ended);
    assert_no_fenced_work(&events, &cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_runs_outlive_every_node_and_nats_and_their_retried_decisions_apply_once() {
    let mut nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(nats.url(), &postgres_url, 1, dir.path());
    let mut nodes = Node::start_all(3, &cluster).await;
    let client = reqwest::Client::new();

    // Runs whose `echo` call asks for approval, on threads spread over the nodes.
    let mut runs = Vec::new();
    for i in 0..THREADS {
        let base = &nodes[i % nodes.len()].base;
        let thread_id = new_thread(&client, base).await;
        let body = json!({"agentId": "bench-hitl",
            "messages": [{"role": "user", "content": "echo, once approved"}]});
        let url = format!("{base}/v1/threads/{thread_id}/messages");
        let (status, queued) = post(&client, url, body).await;
        assert_eq!(status, 202, "{queued}");
        let run_id = queued["run_id"].as_str().unwrap().to_owned();
        let call = waiting_call(&client, base, &run_id).await;
        runs.push((run_id, call));
    }

    // Every node and the NATS server go down while the runs wait; all come back.
    for node in &mut nodes {
        node.child.kill().await.unwrap();
    }
    nats.restart().await.unwrap();
    let nodes = Node::start_all(3, &cluster).await;

    // Each decision is sent, then sent again through another node: applied once,
    // the repeat a duplicate, and the run finishes.
    for (i, (run_id, call)) in runs.iter().enumerate() {
        let decision = json!({"call_id": call, "decision_id": format!("d-{i}"),
            "action": "resume", "result": {"approved": true}});
        let first = &nodes[i % nodes.len()].base;
        let again = &nodes[(i + 1) % nodes.len()].base;
        let url = format!("{first}/v1/runs/{run_id}/decision");
        let (status, applied) = post(&client, url, decision.clone()).await;
        assert_eq!(status, 200, "{applied}");
        assert_eq!(applied["duplicate"], false, "{applied}");
        let url = format!("{again}/v1/runs/{run_id}/decision");
        let (status, repeated) = post(&client, url, decision).await;
        assert_eq!(status, 200, "{repeated}");
        assert_eq!(repeated["duplicate"], true, "{repeated}");

        let run = record(&client, again, run_id).await.unwrap();
        assert_eq!(run["status"], "done", "{run}");
        assert_eq!(run["termination"]["type"], "natural_end", "{run}");
    }

    // Each approved call started once, and nothing started before its approval.
    let starts = tool_starts_per_call(&cluster.journal);
    for (run_id, call) in &runs {
        assert_eq!(
            starts.get(&format!("{run_id}:{call}")),
            Some(&1),
            "{starts:?}"
        );
    }
    assert_eq!(starts.len(), runs.len(), "{starts:?}");
}

/// Posts `decision` for `run_id` through `base` until the thread has an owner to
/// apply it (503 while its shard changes hands); the answer.
/// Posts `decision` until it is answered 200 (a 503 is tried again, as a client
/// would); the answer, and whether an earlier try was answered 503.
async fn decide(
    client: &reqwest::Client,
    base: &str,
    run_id: &str,
    decision: &serde_json::Value,
) -> (serde_json::Value, bool) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut retried = false;
    loop {
        let url = format!("{base}/v1/runs/{run_id}/decision");
        let (status, answer) = post(client, url, decision.clone()).await;
        if status == 200 {
            return (answer, retried);
        }
        retried = true;
        assert!(
            status == 503 && tokio::time::Instant::now() < deadline,
            "{status} {answer}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Runs of `bench-hitl` (its `echo` call asks for approval) on `count` new
/// threads spread over `nodes`, once each waits: (run id, call id).
async fn waiting_for_approval(
    client: &reqwest::Client,
    nodes: &[Node],
    count: usize,
) -> Vec<(String, String)> {
    let mut approvals = Vec::new();
    for i in 0..count {
        let base = nodes[i % nodes.len()].base.clone();
        let thread_id = new_thread(client, &base).await;
        let body = json!({"agentId": "bench-hitl",
            "messages": [{"role": "user", "content": "echo, once approved"}]});
        let url = format!("{base}/v1/threads/{thread_id}/messages");
        let (status, queued) = post(client, url, body).await;
        assert_eq!(status, 202, "{queued}");
        let run_id = queued["run_id"].as_str().unwrap().to_owned();
        let call = waiting_call(client, &base, &run_id).await;
        approvals.push((run_id, call));
    }
    approvals
}

/// Approves `approvals[range]` through `base`; each decision is applied, none a
/// duplicate unless an earlier try was answered 503: the owner answers "try
/// again" when the thread moves while the resumed run goes on, and by then the
/// decision may be applied and checkpointed, so the new owner finds it so. That
/// no decision is applied twice is what the callers check, in the tool journal.
async fn approve(
    client: &reqwest::Client,
    base: &str,
    approvals: &[(String, String)],
    range: std::ops::Range<usize>,
) {
    for k in range {
        let (run_id, call) = &approvals[k];
        let decision = json!({"call_id": call, "decision_id": format!("d-{k}"),
            "action": "resume", "result": {"approved": true}});
        let (answer, retried) = decide(client, base, run_id, &decision).await;
        assert_eq!(answer["status"], "decision_applied", "{answer}");
        if !retried {
            assert_eq!(answer["duplicate"], false, "{answer}");
        }
    }
}

/// Stops `node` as Kubernetes does (SIGTERM) and waits for its clean exit.
async fn terminate(node: &mut Node, name: &str) {
    node.signal("TERM");
    let status = tokio::time::timeout(SETTLE, node.child.wait())
        .await
        .expect("the node drains in time")
        .unwrap();
    assert!(status.success(), "node {name} drained cleanly: {status}");
}

/// Every hot-thread run and approved run ended as it should, and every tool call
/// executed exactly once.
async fn nothing_lost_and_each_call_once(
    client: &reqwest::Client,
    base: &str,
    cluster: &Cluster,
    runs: &std::collections::BTreeMap<String, Vec<String>>,
    approvals: &[(String, String)],
) {
    let ended = all_end(client, base, runs).await;
    assert_hot_threads_ended_well(runs, &ended);
    let approved: std::collections::BTreeMap<String, Vec<String>> = approvals
        .iter()
        .map(|(run_id, _)| (run_id.clone(), vec![run_id.clone()]))
        .collect();
    for (run_id, run) in all_end(client, base, &approved).await {
        assert_eq!(run["termination"]["type"], "natural_end", "{run_id}: {run}");
    }
    let starts = tool_starts_per_call(&cluster.journal);
    let repeated: Vec<_> = starts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "calls executed more than once: {repeated:?}"
    );
    for (run_id, call) in approvals {
        assert_eq!(
            starts.get(&format!("{run_id}:{call}")),
            Some(&1),
            "{starts:?}"
        );
    }
}

/// The three-node layout under load: three NATS servers (three copies of every
/// stream), PostgreSQL, three nodes, six runs waiting for approval and runs
/// executing on six hot threads.
struct Loaded {
    nats: NatsCluster,
    _schema: awaken_actors::store::TestSchema,
    _dir: tempfile::TempDir,
    cluster: Cluster,
    nodes: Vec<Node>,
    client: reqwest::Client,
    approvals: Vec<(String, String)>,
    runs: std::collections::BTreeMap<String, Vec<String>>,
}

async fn pod_layout_under_load() -> Loaded {
    let nats = NatsCluster::start().await.unwrap();
    let (postgres_url, schema) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(nats.urls(), &postgres_url, 3, dir.path());
    let nodes = Node::start_all(3, &cluster).await;
    let client = reqwest::Client::new();
    let approvals = waiting_for_approval(&client, &nodes, 6).await;
    let runs = hot_threads(&client, &nodes, 6, 2).await;
    every_thread_executes(&client, &nodes[0].base, &runs).await;
    Loaded {
        nats,
        _schema: schema,
        _dir: dir,
        cluster,
        nodes,
        client,
        approvals,
        runs,
    }
}

/// A rolling update as Kubernetes does it, on the three-node layout (three NATS
/// servers, three copies of every stream): each node in turn gets SIGTERM,
/// drains and comes back under its name, while runs execute on hot threads and
/// others wait for approval; half the decisions come mid-rollout. No run and no
/// decision is lost, and every tool call executes once: a draining node lets the
/// calls it runs finish, and so does one handing shards to a node that joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_loses_no_run_no_decision_and_runs_each_call_once() {
    let Loaded {
        nats,
        _schema,
        _dir,
        cluster,
        mut nodes,
        client,
        approvals,
        runs,
    } = pod_layout_under_load().await;

    // A client streaming, through the first node to go, a run another node owns
    // (a run's replay buffer lives on its owner).
    let thread =
        thread_owned_by(&client, &nodes[0].base, nats.connect().await.unwrap(), "n2").await;
    let response = client
        .post(format!("{}/v1/runs", nodes[0].base))
        .json(&json!({"agentId": "slow", "threadId": thread,
            "messages": [{"role": "user", "content": "stream me"}]}))
        .send()
        .await
        .unwrap();
    let mut stream = RunStream::new(response);
    let first = stream.next().await.expect("the run starts");
    let AgentEvent::RunStart { run_id, .. } = &first.event else {
        panic!("{first:?}");
    };
    let streamed_run = run_id.to_string();
    let mut seen = vec![first];

    for i in 0..nodes.len() {
        let name = format!("n{}", i + 1);
        terminate(&mut nodes[i], &name).await;
        if i == 0 {
            // Its stream ended with the node; the client resumes elsewhere.
            while let Some(event) = stream.next().await {
                seen.push(event);
            }
            let last = seen.last().unwrap().seq;
            let response = client
                .get(format!("{}/v1/runs/{streamed_run}/events", nodes[2].base))
                .header("Last-Event-ID", last.to_string())
                .send()
                .await
                .unwrap();
            let mut resumed = RunStream::new(response);
            while let Some(event) = resumed.next().await {
                seen.push(event);
            }
            approve(&client, &nodes[1].base, &approvals, 0..3).await;
        }
        nodes[i] = Node::start(&name, &cluster).await;
    }
    approve(&client, &nodes[2].base, &approvals, 3..6).await;

    let seqs: Vec<u64> = seen.iter().map(|event| event.seq).collect();
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "no gap, no repeat"
    );
    let AgentEvent::RunFinish { termination, .. } = &seen.last().unwrap().event else {
        panic!("the resumed stream ends with the run: {seen:?}");
    };
    assert_eq!(*termination, TerminationReason::NaturalEnd);
    nothing_lost_and_each_call_once(&client, &nodes[0].base, &cluster, &runs, &approvals).await;
}

/// Scaling out from three nodes to five and in to two while runs execute and
/// wait for approval: shards move at every step, and still no run or decision is
/// lost and every call executes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_three_to_five_to_two_nodes_under_load_loses_nothing() {
    let Loaded {
        nats,
        _schema,
        _dir,
        cluster,
        mut nodes,
        client,
        approvals,
        runs,
    } = pod_layout_under_load().await;

    for name in ["n4", "n5"] {
        nodes.push(Node::start(name, &cluster).await);
    }
    holds_a_shard(nats.connect().await.unwrap(), "n5").await;
    approve(&client, &nodes[4].base, &approvals, 0..3).await;
    for i in (2..5).rev() {
        terminate(&mut nodes[i], &format!("n{}", i + 1)).await;
    }
    nodes.truncate(2);
    approve(&client, &nodes[1].base, &approvals, 3..6).await;
    nothing_lost_and_each_call_once(&client, &nodes[0].base, &cluster, &runs, &approvals).await;
}

/// On the three-node layout, a node and a NATS server are killed (SIGKILL)
/// while runs wait for approval and others execute. Decisions sent through the
/// survivors meanwhile, and after both came back, each apply once and start
/// their call once; every run ends. (A call cut by the kill may run again on the
/// next owner, with the same idempotency key: at most twice.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_and_a_nats_server_killed_mid_approval_lose_no_decision() {
    let Loaded {
        mut nats,
        _schema,
        _dir,
        cluster,
        mut nodes,
        client,
        approvals,
        runs,
    } = pod_layout_under_load().await;

    nodes[1].child.kill().await.unwrap();
    nats.kill(2).await;
    approve(&client, &nodes[0].base, &approvals, 0..3).await;
    nats.restart(2).await.unwrap();
    nodes[1] = Node::start("n2", &cluster).await;
    approve(&client, &nodes[1].base, &approvals, 3..6).await;

    let ended = all_end(&client, &nodes[2].base, &runs).await;
    assert_hot_threads_ended_well(&runs, &ended);
    let approved: std::collections::BTreeMap<String, Vec<String>> = approvals
        .iter()
        .map(|(run_id, _)| (run_id.clone(), vec![run_id.clone()]))
        .collect();
    for (run_id, run) in all_end(&client, &nodes[2].base, &approved).await {
        assert_eq!(run["termination"]["type"], "natural_end", "{run_id}: {run}");
    }
    let starts = tool_starts_per_call(&cluster.journal);
    for (run_id, call) in &approvals {
        assert_eq!(
            starts.get(&format!("{run_id}:{call}")),
            Some(&1),
            "{starts:?}"
        );
    }
    let repeated: Vec<_> = starts.iter().filter(|(_, n)| **n > 2).collect();
    assert!(
        repeated.is_empty(),
        "calls started more than twice: {repeated:?}"
    );
}
