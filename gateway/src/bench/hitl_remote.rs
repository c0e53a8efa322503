//! `awaken bench cluster --scenario hitl-remote`: a decision published on NATS by a
//! client that is not the node resumes a waiting run.
//!
//! One [`ClusterNode`] (owning every shard) runs in the process with the in-memory
//! thread store. Each run is submitted through the mailbox, waits for approval
//! (workload W whose `echo` asks), and is then approved by a *separate* NATS
//! connection publishing the decision with JetStream to `awaken.decisions.<thread>`.
//! `decision_p50_us`/`decision_p99_us` cover publishing the decision until the
//! resumed run finished on the node (the tool replayed, the final inference done);
//! `p50_us`/`p99_us` the whole run, submission included.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use awaken_actors::contract::{Message, TerminationReason};
use awaken_actors::mailbox::SubmitOptions;
use awaken_actors::store::InMemoryStore;
use awaken_actors::thread::{RunRequest, ThreadConfig};
use awaken_actors::{AgentId, RunId, ThreadId};
use awaken_cluster::RunInputPlacement;
use awaken_cluster::decisions::{DecisionBus, DecisionBusConfig, DecisionPayload};
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use awaken_cluster::shards::ShardOwnerConfig;

use super::BenchOptions;
use super::driver::{RunSample, drive};
use super::report::BenchReport;
use crate::demo::{self, FakeFiles, Journal};
use crate::error::{GatewayError, Result};

/// The scenario's name in reports.
pub const NAME: &str = "hitl-remote";

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

/// Runs `options.runs` remote approval round trips against the server at `nats_url`.
pub async fn run(
    nats_url: &str,
    run_input: RunInputPlacement,
    options: &BenchOptions,
) -> Result<BenchReport> {
    super::jetstream::refuse_a_used_server(nats_url).await?;
    let builder = demo::builder(
        ThreadConfig::default(),
        Arc::new(FakeFiles::with_demo_files()),
        Journal::default(),
    )?
    .with_thread_run_store(Arc::new(InMemoryStore::new()));
    let node_id =
        NodeId::new(format!("bench-{}", uuid::Uuid::now_v7().simple())).map_err(bench_error)?;
    let client = async_nats::connect(nats_url).await.map_err(bench_error)?;
    let mut config = NodeConfig::new(node_id);
    config.run_input = run_input;
    let node = Arc::new(
        ClusterNode::start(client, builder, config)
            .await
            .map_err(bench_error)?,
    );
    let every_shard = ShardOwnerConfig::default().count.get() as usize;
    let mut ownership = node.ownership();
    let settled = ownership.wait_for(|owned| owned.len() == every_shard);
    if !matches!(
        tokio::time::timeout(Duration::from_secs(30), settled).await,
        Ok(Ok(_))
    ) {
        return Err(bench_error(
            "the node did not get every shard within 30 s (another node on this server?)",
        ));
    }

    // The approver: its own connection, as an outside program would have.
    let outside = async_nats::connect(nats_url).await.map_err(bench_error)?;
    let bus = DecisionBus::open(jetstream::new(outside), DecisionBusConfig::default())
        .await
        .map_err(bench_error)?;
    let agent = AgentId::new(demo::BENCH_HITL_AGENT).map_err(bench_error)?;
    let job_node = Arc::clone(&node);
    let driven = drive(
        NAME,
        options.runs,
        options.concurrency,
        options,
        move |_| one_run(Arc::clone(&job_node), bus.clone(), agent.clone()),
    )
    .await?;
    if let Ok(node) = Arc::try_unwrap(node) {
        node.drain(Duration::from_secs(10))
            .await
            .map_err(bench_error)?;
    }
    Ok(driven
        .report(NAME, options.concurrency)
        .with("decision_p50_us", driven.parts.quantile_us(0.50))
        .with("decision_p99_us", driven.parts.quantile_us(0.99)))
}

async fn one_run(
    node: Arc<ClusterNode>,
    bus: DecisionBus,
    agent: AgentId,
) -> std::result::Result<RunSample, String> {
    let thread = ThreadId::generate();
    let run_id = RunId::generate();
    let runtime = node.runtime();
    let mut waiting = runtime.watch_run(&run_id);
    let request = RunRequest::new(thread.clone(), vec![Message::user("go")])
        .with_agent_id(agent)
        .with_run_id(run_id.clone());
    node.submit(request, SubmitOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let suspended = waiting.ended().await.ok_or("the runtime stopped")?;
    if suspended.termination != TerminationReason::Suspended {
        return Err(format!("expected a suspension, got {suspended:?}"));
    }
    let record = runtime
        .store()
        .load_run(&run_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the waiting run has no record")?;
    let call = record
        .waiting
        .and_then(|w| w.tickets.into_iter().next())
        .ok_or("the waiting run has no ticket")?
        .tool_call_id;

    let mut resumed = runtime.watch_run(&run_id);
    let sent = Instant::now();
    let decision = DecisionPayload::resume(
        call.to_string(),
        format!("approve-{run_id}"),
        serde_json::json!({"approved": true}),
    );
    bus.publish(thread.as_str(), &decision)
        .await
        .map_err(|e| e.to_string())?;
    let done = resumed.ended().await.ok_or("the runtime stopped")?;
    let latency = sent.elapsed();
    if done.termination != TerminationReason::NaturalEnd
        || !done.response.starts_with(demo::BENCH_ANSWER_PREFIX)
    {
        return Err(format!("the resumed run ended with {done:?}"));
    }
    Ok(RunSample {
        part: Some(latency),
    })
}
