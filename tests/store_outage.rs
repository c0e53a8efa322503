//! A single `awaken serve` on a PostgreSQL server this suite runs, the database
//! stopped while runs execute (`pg_ctl stop -m fast` as an operator's restart
//! does, `-m immediate` as a crash does) and started again: the runs wait for it
//! (the node's `awaken_store_outage_runs_waiting` says how many; readiness is
//! false, liveness true), then go on, and none ends in error or runs its tool
//! twice. Under workload W with runs waiting for approval (the load and its
//! checks shared with the NATS outages, `tests/support/load.rs`), a restart, a
//! crash and twenty seconds without the database cost no run, no 5xx and no
//! stream. Past `store.outage_timeout` the runs end in error saying so, and the
//! node serves again once the database is back.
//!
//! `AWAKEN_STRESS_REPEATS=N` runs each scenario N times (`--profile stress`).
//!
//! Needs `initdb` and `pg_ctl` on the PATH (under root as the `postgres` user),
//! and the `awaken` binary built beside this test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[allow(dead_code)] // each suite uses some of the shared helpers
mod support;

#[allow(dead_code)] // the TLS server is for the secured suite
#[path = "support/postgres_server.rs"]
mod postgres_server;

#[path = "support/load.rs"]
mod load;

use std::time::Duration;

use load::{Load, approve_all, nothing_lost, runs_in_their_tools, unix_now, waiting_runs};
use postgres_server::PostgresServer;
use serde_json::json;
use support::{Node, SETTLE, new_thread, post, record, stress_repeats, tool_starts_per_call};

/// Runs executing when the database goes away.
const RUNS: usize = 8;

/// A node on `server` waiting `backend_wait` seconds for it in requests and
/// `outage_timeout` in runs, its tools journaled to `dir/tools.journal`.
async fn node(
    server: &PostgresServer,
    dir: &std::path::Path,
    backend_wait: u64,
    outage_timeout: u64,
) -> Node {
    let config = dir.join("awaken.toml");
    std::fs::write(
        &config,
        format!(
            "demo_agents = true\n\n[server]\naddress = \"127.0.0.1:0\"\n\
             backend_wait_secs = {backend_wait}\n\n\
             [store]\nkind = \"postgres\"\nurl = \"{}\"\noutage_timeout_secs = {outage_timeout}\n",
            server.url()
        ),
    )
    .unwrap();
    let journal = dir.join("tools.journal");
    let args = ["--tool-journal".as_ref(), journal.as_os_str()];
    Node::serve("n1", &[&config], &args, &[]).await
}

/// The value of the gauge `name` on the node's `/metrics` (0 when absent).
async fn gauge(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The status `/health/{which}` answers.
async fn probe(client: &reqwest::Client, base: &str, which: &str) -> u16 {
    client
        .get(format!("{base}/health/{which}"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Waits (bounded) until `runs` runs wait for the store.
async fn runs_wait_for_the_store(client: &reqwest::Client, base: &str, runs: usize) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    while gauge(client, base, "awaken_store_outage_runs_waiting").await < runs as f64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the runs never waited for the store"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded) until the journal shows `count` tool executions.
async fn tools_started(journal: &std::path::Path, count: usize) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    while tool_starts_per_call(journal).len() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tools never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts [`RUNS`] runs of the `slow` agent (each sleeps 1.5 s in its tool),
/// each on a new thread: (thread id, run id).
async fn slow_runs(client: &reqwest::Client, base: &str) -> Vec<(String, String)> {
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let thread = new_thread(client, base).await;
        let url = format!("{base}/v1/threads/{thread}/messages");
        let body = json!({"agentId": "slow",
            "messages": [{"role": "user", "content": "take your time"}]});
        let (status, queued) = post(client, url, body).await;
        assert_eq!(status, 202, "{queued}");
        runs.push((thread, queued["run_id"].as_str().unwrap().to_owned()));
    }
    runs
}

/// Starts `slow` runs, stops the database once
/// every tool runs, starts it again once every run waits for it, and checks that
/// every run ended on its own with each tool run once.
async fn runs_outlive(stop: impl AsyncFnOnce(&PostgresServer)) {
    let server = PostgresServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = node(&server, dir.path(), 30, 60).await;
    let client = reqwest::Client::new();
    let runs: Vec<String> = slow_runs(&client, &node.base)
        .await
        .into_iter()
        .map(|(_, run)| run)
        .collect();
    let journal = dir.path().join("tools.journal");
    tools_started(&journal, RUNS).await;

    stop(&server).await;
    // Each run's tool returns while the database is away: its checkpoint waits.
    runs_wait_for_the_store(&client, &node.base, RUNS).await;
    // Meanwhile the node says it is not ready (Kubernetes sends traffic
    // elsewhere) but alive (a restart would not help).
    assert_eq!(probe(&client, &node.base, "ready").await, 503);
    assert_eq!(probe(&client, &node.base, "live").await, 200);
    // A request that needs the store waits for it rather than failing.
    let asked = tokio::spawn(
        client
            .get(format!("{}/v1/runs/{}", node.base, runs[0]))
            .send(),
    );
    server.start_again().await;
    let answered = asked.await.unwrap().unwrap();
    assert_eq!(answered.status(), 200, "the request outlived the outage");
    let deadline = tokio::time::Instant::now() + SETTLE;
    while probe(&client, &node.base, "ready").await != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node never got ready again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let deadline = tokio::time::Instant::now() + SETTLE;
    for run_id in &runs {
        let run = loop {
            match record(&client, &node.base, run_id).await {
                Some(run) if run["status"] == "done" => break run,
                seen => assert!(
                    tokio::time::Instant::now() < deadline,
                    "{run_id} never ended: {seen:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(run["termination"]["type"], "natural_end", "{run}");
    }
    let starts = tool_starts_per_call(&journal);
    assert_eq!(starts.len(), RUNS, "{starts:?}");
    assert!(starts.values().all(|n| *n == 1), "{starts:?}");
    assert_eq!(
        gauge(&client, &node.base, "awaken_store_outage_runs_waiting").await,
        0.0
    );
    assert!(gauge(&client, &node.base, "awaken_store_outage_waits_total").await >= RUNS as f64);
    assert_eq!(
        gauge(&client, &node.base, "awaken_store_outage_failures_total").await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_outlive_a_restart_of_the_database() {
    for _ in 0..stress_repeats() {
        runs_outlive(async |server| server.stop_fast().await).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_outlive_a_crash_of_the_database() {
    for _ in 0..stress_repeats() {
        runs_outlive(async |server| server.crash().await).await;
    }
}

/// Past `server.backend_wait_secs` a request is answered 503 with `Retry-After`
/// (the database stays down), and the node serves again once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_backend_wait_is_told_to_retry_after() {
    let server = PostgresServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = node(&server, dir.path(), 1, 60).await;
    let client = reqwest::Client::new();
    let thread = new_thread(&client, &node.base).await;
    let url = format!("{}/v1/threads/{thread}", node.base);
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);

    server.stop_fast().await;
    let refused = client.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "5");
    let body: serde_json::Value = refused.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("unavailable"),
        "{body}"
    );
    assert!(gauge(&client, &node.base, "awaken_store_request_failures_total").await >= 1.0);

    server.start_again().await;
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    assert!(gauge(&client, &node.base, "awaken_store_request_waits_total").await >= 1.0);
}

/// W runs that finish before the fault, and after it, before the load stops.
const RUNS_AROUND_THE_FAULT: usize = 16;

/// What a W-load scenario does to the database.
enum Outage {
    /// Stopped (`fast`) or crashed (`immediate`), and started again at once.
    Restart { crash: bool },
    /// Stopped, and started again this much later.
    StoppedFor(Duration),
}

/// Waits (bounded) until `/health/{which}` answers `status`.
async fn probe_turns(client: &reqwest::Client, base: &str, which: &str, status: u16) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    while probe(client, base, which).await != status {
        assert!(
            tokio::time::Instant::now() < deadline,
            "/health/{which} never answered {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Workload W and waiting runs on one node while the database goes through
/// `outage` (shorter than the node's waits): nothing lost.
async fn w_load_outlives(outage: Outage) {
    let server = PostgresServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let nodes = [node(&server, dir.path(), 30, 60).await];
    let base = nodes[0].base.clone();
    let client = reqwest::Client::new();
    let waiting = waiting_runs(&client, &nodes).await;
    let load = Load::start(&client, &nodes);
    load.finishes(RUNS_AROUND_THE_FAULT).await;
    let journal = dir.path().join("tools.journal");
    let in_their_tools = runs_in_their_tools(&client, &nodes, &journal, 6).await;

    match outage {
        Outage::Restart { crash } => {
            if crash {
                server.crash().await;
            } else {
                server.stop_fast().await;
            }
            server.start_again().await;
        }
        Outage::StoppedFor(down) => {
            server.stop_fast().await;
            probe_turns(&client, &base, "ready", 503).await;
            assert_eq!(probe(&client, &base, "live").await, 200);
            // The outage itself: how long the database stays away.
            tokio::time::sleep(down).await;
            server.start_again().await;
            probe_turns(&client, &base, "ready", 200).await;
        }
    }
    let back_at = unix_now();

    load.finishes(RUNS_AROUND_THE_FAULT).await;
    let samples = load.stop().await;
    approve_all(&client, &nodes, &waiting).await;
    nothing_lost(
        &client,
        &base,
        &journal,
        &samples,
        &[waiting, in_their_tools].concat(),
        back_at,
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w_load_outlives_a_restart_of_the_database() {
    for _ in 0..stress_repeats() {
        w_load_outlives(Outage::Restart { crash: false }).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w_load_outlives_a_crash_of_the_database() {
    for _ in 0..stress_repeats() {
        w_load_outlives(Outage::Restart { crash: true }).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w_load_outlives_the_database_stopped_for_twenty_seconds() {
    for _ in 0..stress_repeats() {
        w_load_outlives(Outage::StoppedFor(Duration::from_secs(20))).await;
    }
}

/// Past `store.outage_timeout` (2 s here) the runs the outage caught end in
/// error naming it, once the database is back to record that; nothing of them
/// is half-written; and the node serves new runs again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_past_the_outage_timeout_end_saying_so_and_the_node_serves_again() {
    let server = PostgresServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = node(&server, dir.path(), 1, 2).await;
    let client = reqwest::Client::new();
    let runs = slow_runs(&client, &node.base).await;
    let journal = dir.path().join("tools.journal");
    tools_started(&journal, RUNS).await;

    server.stop_fast().await;
    let deadline = tokio::time::Instant::now() + SETTLE;
    while gauge(&client, &node.base, "awaken_store_outage_failures_total").await < RUNS as f64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the runs never gave up on the store"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.start_again().await;
    probe_turns(&client, &node.base, "ready", 200).await;

    for (thread, run_id) in &runs {
        let run = support::done_run(&client, &node.base, run_id).await;
        assert_eq!(run["termination"]["type"], "error", "{run}");
        let cause = run["termination"]["value"].as_str().unwrap();
        assert!(
            cause.contains("(store.outage_timeout): storage unavailable"),
            "{run}"
        );
        // Each try waits for a connection no longer than the timeout, so the
        // run gives up near it, not a pool's wait (10 s) later.
        let waited: u64 = cause
            .split("unavailable for ")
            .nth(1)
            .and_then(|rest| rest.split('s').next())
            .and_then(|secs| secs.parse().ok())
            .unwrap();
        assert!(waited < 10, "{run}");
        transcript_is_whole(&client, &node.base, thread).await;
    }
    assert_eq!(
        gauge(&client, &node.base, "awaken_store_outage_failures_total").await,
        RUNS as f64
    );
    // The node serves new runs at once.
    let thread = new_thread(&client, &node.base).await;
    let url = format!("{}/v1/threads/{thread}/messages", node.base);
    let body = json!({"agentId": "bench",
        "messages": [{"role": "user", "content": "echo this"}]});
    let (status, queued) = post(&client, url, body).await;
    assert_eq!(status, 202, "{queued}");
    let run = support::done_run(&client, &node.base, queued["run_id"].as_str().unwrap()).await;
    assert_eq!(run["termination"]["type"], "natural_end", "{run}");
}

/// Asserts that the thread's stored messages are one whole transcript: seqs
/// from 1 without a gap, and every tool call answered by its result.
async fn transcript_is_whole(client: &reqwest::Client, base: &str, thread: &str) {
    let page: serde_json::Value = client
        .get(format!("{base}/v1/threads/{thread}/messages"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let messages = page["messages"].as_array().unwrap();
    let seqs: Vec<u64> = messages
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        (1..=messages.len() as u64).collect::<Vec<_>>(),
        "{page}"
    );
    for message in messages {
        for call in message["message"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                messages
                    .iter()
                    .any(|m| m["message"]["tool_call_id"] == call["id"]),
                "the call {} has no result: {page}",
                call["id"]
            );
        }
    }
}
