//! `awaken bench cluster --scenario workload-w --nodes N`: workload W submitted
//! through the cluster (run inbox + JetStream mailbox) and executed by the owners of
//! the runs' threads, on `N` [`ClusterNode`]s in this process.
//!
//! The nodes share one NATS server and one in-memory thread store (so the figure is
//! the cluster path's cost, not a database's), and take their fair shares of the
//! shards before the load starts. Runs are submitted round-robin through the nodes,
//! each on a new thread, so about `(N-1)/N` of them are executed by a node other
//! than the one that accepted them. A run's time covers the submission until its
//! owner finished it. All nodes run on this process's cores: with N > 1 the figure
//! shows the protocol's overhead, not the capacity of N machines.
//!
//! Beside it, in the same process run: `stream_writes_per_run`, the messages the
//! server's streams took during the measured runs (a KV put counts one; see
//! `stream_writes`) per run, counted rather than estimated;
//! `raw_publish_per_s`, raw JetStream publishes on the same server at the same
//! concurrency, measured after the runs; and `ratio_to_raw` = runs/s × stream
//! writes per run ÷ raw publishes/s (1.0: the runs' writes come as fast as bare
//! publishes). Writes still in flight when the last run ends (its dispatch's ack)
//! are not counted: at most the concurrency's worth, against the runs'. Where
//! batching brings a run below one stream write, that ratio no longer says how
//! close the runs come to the server's limit; `runs_per_raw_publish` = runs/s ÷
//! raw publishes/s does (a run costs the time of 1 / that many publishes).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use awaken_actors::contract::{Message, TerminationReason};
use awaken_actors::mailbox::SubmitOptions;
use awaken_actors::store::InMemoryStore;
use awaken_actors::thread::{RunRequest, ThreadConfig};
use awaken_actors::{AgentId, RunId, ThreadId};
use awaken_cluster::RunInputPlacement;
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};

use super::BenchOptions;
use super::driver::{RunSample, drive};
use super::jetstream::{raw_publishes, refuse_a_used_server, stream_writes};
use super::report::BenchReport;
use crate::demo::{self, FakeFiles, Journal};
use crate::error::{GatewayError, Result};

/// The scenario's name in reports.
pub const NAME: &str = "cluster-workload-w";

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

/// Runs workload W on `nodes` nodes against the server at `nats_url`.
pub async fn run(
    nats_url: &str,
    nodes: usize,
    run_input: RunInputPlacement,
    options: &BenchOptions,
) -> Result<BenchReport> {
    refuse_a_used_server(nats_url).await?;
    let nodes = nodes.max(1);
    let store = Arc::new(InMemoryStore::new());
    let mut started = Vec::with_capacity(nodes);
    for _ in 0..nodes {
        let builder = demo::builder(
            ThreadConfig::default(),
            Arc::new(FakeFiles::with_demo_files()),
            Journal::default(),
        )?
        .with_thread_run_store(Arc::clone(&store) as _);
        let id =
            NodeId::new(format!("bench-{}", uuid::Uuid::now_v7().simple())).map_err(bench_error)?;
        let client = async_nats::connect(nats_url).await.map_err(bench_error)?;
        let mut config = NodeConfig::new(id);
        config.run_input = run_input;
        started.push(
            ClusterNode::start(client, builder, config)
                .await
                .map_err(bench_error)?,
        );
    }
    let cluster = Arc::new(started);
    settle(&cluster).await?;
    let js = jetstream::new(async_nats::connect(nats_url).await.map_err(bench_error)?);
    let writes_before = stream_writes(&js).await?;

    let agent = AgentId::new(demo::BENCH_AGENT).map_err(bench_error)?;
    let job_cluster = Arc::clone(&cluster);
    let driven = drive(NAME, options.runs, options.concurrency, options, move |i| {
        one_run(Arc::clone(&job_cluster), i, agent.clone())
    })
    .await?;
    let writes = stream_writes(&js).await?.saturating_sub(writes_before);
    if let Ok(cluster) = Arc::try_unwrap(cluster) {
        for node in cluster {
            node.drain(Duration::from_secs(10))
                .await
                .map_err(bench_error)?;
        }
    }
    let raw = raw_publishes(&js, options).await?;
    let mut report = driven.report(NAME, options.concurrency);
    report.nodes = u32::try_from(nodes).unwrap_or(u32::MAX);
    let writes_per_run = (writes as f64 / report.runs.max(1) as f64 * 100.0).round() / 100.0;
    let per_raw = if raw.runs_per_s > 0.0 {
        report.runs_per_s / raw.runs_per_s
    } else {
        0.0
    };
    let ratio = per_raw * writes_per_run;
    Ok(report
        .with("stream_writes_per_run", writes_per_run)
        .with("raw_publish_per_s", raw.runs_per_s)
        .with("raw_p50_us", raw.p50_us)
        .with("ratio_to_raw", (ratio * 1000.0).round() / 1000.0)
        .with("runs_per_raw_publish", (per_raw * 1000.0).round() / 1000.0))
}

/// Waits until every node owns its fair share of the shards.
pub(super) async fn settle(cluster: &[ClusterNode]) -> Result<()> {
    let members: BTreeSet<NodeId> = cluster.iter().map(|node| node.node_id().clone()).collect();
    let all_settled = async {
        for node in cluster {
            // False: the node's shard owner stopped; the load would fail anyway.
            node.fair_share_held(&members).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all_settled)
        .await
        .map_err(|_| {
            bench_error(
                "the nodes did not settle their shares within 60 s (other nodes on this server?)",
            )
        })
}

async fn one_run(
    cluster: Arc<Vec<ClusterNode>>,
    index: usize,
    agent: AgentId,
) -> std::result::Result<RunSample, String> {
    let thread = ThreadId::generate();
    let run_id = RunId::generate();
    let owner = cluster
        .iter()
        .find(|node| node.owns(&thread))
        .ok_or("no node owns the thread")?;
    let mut watch = owner.runtime().watch_run(&run_id);
    let request = RunRequest::new(thread, vec![Message::user("go")])
        .with_agent_id(agent)
        .with_run_id(run_id);
    cluster[index % cluster.len()]
        .submit(request, SubmitOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let end = watch.ended().await.ok_or("the runtime stopped")?;
    if end.termination != TerminationReason::NaturalEnd
        || !end.response.starts_with(demo::BENCH_ANSWER_PREFIX)
    {
        return Err(format!("the run ended with {end:?}"));
    }
    Ok(RunSample::default())
}
