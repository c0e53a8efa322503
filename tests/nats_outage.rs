//! NATS outages under load: three `awaken serve` nodes on PostgreSQL and NATS
//! (one server, or a three-server JetStream cluster), workload W kept
//! [`load::IN_FLIGHT`] runs at a time over HTTP (each run submitted through one node
//! and its SSE stream followed through another), and [`load::WAITING`] runs waiting
//! for approval, while NATS restarts, stops for ten seconds, or loses one of
//! its three servers. Whatever happens, for outages shorter than the nodes'
//! `server.backend_wait_secs` (the load and the checks: `tests/support/load.rs`):
//!
//! - no request is answered 5xx;
//! - every run ends on its own (`natural_end`), none in error;
//! - every SSE stream ends with its run's `run_finish`, within 5 s of the run's
//!   end;
//! - every waiting run finishes once approved, every run caught in its tool
//!   call ends on its own, and no tool call runs twice (where the outage
//!   outlasts the shard leases, a call its node was cut off in starts once more
//!   on the next owner, as after a kill; with leases that outlast it, none);
//! - while NATS is away, `/health/ready` is 503 and `/health/live` 200 on every
//!   node; ready again once it is back.
//!
//! These faults are timing-dependent: `AWAKEN_STRESS_REPEATS=N` runs each
//! scenario N times (the default suite runs it once), e.g.
//! `AWAKEN_STRESS_REPEATS=5 cargo nextest run --workspace --profile stress -E 'binary(nats_outage)'`
//!
//! Needs PostgreSQL (`AWAKEN_TEST_POSTGRES_URL`), `nats-server` on the PATH and
//! the `awaken` binary built beside this test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[allow(dead_code)] // each suite uses some of the shared helpers
mod support;

#[path = "support/load.rs"]
mod load;

use std::path::Path;
use std::time::Duration;

use awaken_cluster::testing::{NatsCluster, NatsServer};
use load::{Load, approve_all, nothing_lost, runs_in_their_tools, unix_now, waiting_runs};
use support::{Cluster, Node, SETTLE, database, stress_repeats};

/// W runs that finish before the fault, and after it, before the load stops.
const RUNS_AROUND_THE_FAULT: usize = 16;
/// The nodes' `server.backend_wait_secs`: longer than every outage here.
const BACKEND_WAIT_SECS: u64 = 30;

fn cluster(nats_url: String, postgres_url: &str, replicas: usize, dir: &Path) -> Cluster {
    Cluster {
        nats_url,
        postgres_url: postgres_url.to_owned(),
        replicas,
        journal: dir.join("tools.journal"),
        server_toml: format!("backend_wait_secs = {BACKEND_WAIT_SECS}"),
    }
}

/// The status `/health/{which}` of `base` answers.
async fn health(client: &reqwest::Client, base: &str, which: &str) -> u16 {
    let response = client.get(format!("{base}/health/{which}")).send().await;
    response.unwrap().status().as_u16()
}

/// Waits (bounded) until `/health/{which}` of `base` answers `status`.
async fn health_turns(client: &reqwest::Client, base: &str, which: &str, status: u16) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    while health(client, base, which).await != status {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{base}/health/{which} never answered {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The outage a scenario puts NATS through.
enum Outage {
    /// The single server killed and started again at once.
    Restart,
    /// The single server killed, and started again ten seconds later.
    StoppedFor(Duration),
}

/// The shard leases of a scenario's nodes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leases {
    /// The suites' 2 s: a ten-second outage outlasts them.
    Short,
    /// Long enough that the nodes' tenure outlasts a ten-second outage (the
    /// last renewal may be a third of the TTL before it, the tenure ends a
    /// tenth before the TTL).
    OutlastingTheOutage,
}

/// Runs of the `slow` agent each outage catches in its tool call.
const IN_THEIR_TOOLS: usize = 6;

async fn single_server_scenario(outage: Outage, leases: Leases) {
    let mut nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(nats.url(), &postgres_url, 1, dir.path());
    let env: &[(&str, &str)] = match leases {
        Leases::Short => &[],
        Leases::OutlastingTheOutage => &[("AWAKEN_CLUSTER__LEASE_TTL_SECS", "25")],
    };
    let mut nodes = Vec::new();
    for i in 1..=3 {
        nodes.push(Node::start_with_env(&format!("n{i}"), &cluster, env).await);
    }
    let client = reqwest::Client::new();
    let waiting = waiting_runs(&client, &nodes).await;
    let load = Load::start(&client, &nodes);
    load.finishes(RUNS_AROUND_THE_FAULT).await;
    let in_their_tools =
        runs_in_their_tools(&client, &nodes, &cluster.journal, IN_THEIR_TOOLS).await;

    match &outage {
        Outage::Restart => nats.restart().await.unwrap(),
        Outage::StoppedFor(down) => {
            let down = *down;
            nats.kill().await;
            // Meanwhile every node says it is not ready (Kubernetes sends its
            // traffic elsewhere) and alive (a restart would not help).
            for node in &nodes {
                health_turns(&client, &node.base, "ready", 503).await;
                assert_eq!(health(&client, &node.base, "live").await, 200);
            }
            // The outage itself: how long NATS stays away.
            tokio::time::sleep(down).await;
            nats.restart().await.unwrap();
            for node in &nodes {
                health_turns(&client, &node.base, "ready", 200).await;
            }
        }
    }
    let nats_back_at = unix_now();

    load.finishes(RUNS_AROUND_THE_FAULT).await;
    let samples = load.stop().await;
    approve_all(&client, &nodes, &waiting).await;
    // Short leases lapse in an outage longer than they are.
    let leases_lapsed = matches!(outage, Outage::StoppedFor(_)) && leases == Leases::Short;
    nothing_lost(
        &client,
        &nodes[0].base,
        &cluster.journal,
        &samples,
        &[waiting, in_their_tools].concat(),
        nats_back_at,
        leases_lapsed,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_restart_costs_no_run_and_hangs_no_stream() {
    for _ in 0..stress_repeats() {
        single_server_scenario(Outage::Restart, Leases::Short).await;
    }
}

/// With the suites' 2 s leases: they lapse, and a call its node was cut off
/// in may start once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_stopped_for_ten_seconds_costs_no_run_and_hangs_no_stream() {
    for _ in 0..stress_repeats() {
        single_server_scenario(Outage::StoppedFor(Duration::from_secs(10)), Leases::Short).await;
    }
}

/// Within the configured waits, leases included: no call runs twice, also
/// the calls executing while NATS is away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_stopped_within_the_lease_ttl_runs_no_call_twice() {
    for _ in 0..stress_repeats() {
        let outage = Outage::StoppedFor(Duration::from_secs(10));
        single_server_scenario(outage, Leases::OutlastingTheOutage).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_cluster_losing_a_server_costs_no_run_and_hangs_no_stream() {
    for _ in 0..stress_repeats() {
        let mut nats = NatsCluster::start().await.unwrap();
        let (postgres_url, _schema) = database().await;
        let dir = tempfile::tempdir().unwrap();
        let cluster = cluster(nats.urls(), &postgres_url, 3, dir.path());
        let nodes = Node::start_all(3, &cluster).await;
        let client = reqwest::Client::new();
        let waiting = waiting_runs(&client, &nodes).await;
        let load = Load::start(&client, &nodes);
        load.finishes(RUNS_AROUND_THE_FAULT).await;
        let in_their_tools =
            runs_in_their_tools(&client, &nodes, &cluster.journal, IN_THEIR_TOOLS).await;

        // Two servers of three carry on: NATS as a whole is never away.
        nats.kill(0).await;
        let nats_back_at = unix_now();
        load.finishes(RUNS_AROUND_THE_FAULT).await;
        nats.restart(0).await.unwrap();

        let samples = load.stop().await;
        approve_all(&client, &nodes, &waiting).await;
        // The lease bucket's stream elects a new leader when its leader's
        // server is lost, which can outlast the 2 s leases.
        nothing_lost(
            &client,
            &nodes[0].base,
            &cluster.journal,
            &samples,
            &[waiting, in_their_tools].concat(),
            nats_back_at,
            true,
        )
        .await;
    }
}
