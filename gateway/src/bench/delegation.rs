//! `delegation`: the overhead of a delegate call, parent tool call → child run →
//! result back, one run at a time.
//!
//! Each run is the `bench-delegate` agent on a new thread: one inference calling
//! `agent_run_bench-text`, whose child run is one inference answering with text,
//! then the parent's final inference. `delegation_p50_us`/`delegation_p99_us` are
//! the time from the parent's `ToolCallReady` for the delegate call to its
//! `ToolCallDone`, seen by the run's event sink; `p50_us`/`p99_us` the whole
//! parent run.
//!
//! `bench local --scenario delegation` runs it on a single [`LocalNode`]; `bench
//! cluster --scenario delegation` on two [`ClusterNode`]s in this process, every
//! parent on the first node and every child on the second, over NATS.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use awaken_actors::contract::{AgentEvent, Message, TerminationReason};
use awaken_actors::delegation::{ChildRef, DELEGATE_TOOL_PREFIX};
use awaken_actors::event_sink::EventSink;
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::store::InMemoryStore;
use awaken_actors::thread::{RunRequest, ThreadConfig};
use awaken_actors::{AgentId, RunId, ThreadId, ToolCallId};
use awaken_cluster::RunControl;
use awaken_cluster::local::{LocalNode, LocalNodeConfig};
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};

use super::BenchOptions;
use super::driver::{RunSample, drive};
use super::report::BenchReport;
use crate::demo::{self, FakeFiles, Journal};
use crate::error::{GatewayError, Result};

/// The scenario's name in reports.
pub const NAME: &str = "delegation";

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

fn builder() -> Result<awaken_actors::runtime::AgentRuntimeBuilder> {
    Ok(demo::builder(
        ThreadConfig::default(),
        Arc::new(FakeFiles::with_demo_files()),
        Journal::default(),
    )?)
}

/// Runs `options.runs` delegating runs one at a time on a single node.
pub async fn run_local(options: &BenchOptions) -> Result<BenchReport> {
    let node = LocalNode::start(builder()?, LocalNodeConfig::default())
        .await
        .map_err(bench_error)?;
    let runtime = node.runtime().clone();
    let agent = AgentId::new(demo::BENCH_DELEGATE_AGENT).map_err(bench_error)?;
    let driven = drive(NAME, options.runs, 1, options, move |_| {
        one_run(runtime.clone(), agent.clone(), ThreadId::generate(), None)
    })
    .await?;
    node.shutdown().await;
    Ok(driven
        .report(NAME, 1)
        .with("delegation_p50_us", driven.parts.quantile_us(0.50))
        .with("delegation_p99_us", driven.parts.quantile_us(0.99)))
}

/// Runs `options.runs` delegating runs one at a time on two nodes of a cluster on
/// the NATS server at `nats_url`: parents on the first, children on the second.
pub async fn run_cluster(nats_url: &str, options: &BenchOptions) -> Result<BenchReport> {
    super::jetstream::refuse_a_used_server(nats_url).await?;
    let store = Arc::new(InMemoryStore::new());
    let tag = uuid::Uuid::now_v7().simple().to_string();
    let mut nodes = Vec::new();
    for index in 0..2 {
        let node_id = NodeId::new(format!("bench-{tag}-{index}")).map_err(bench_error)?;
        let client = async_nats::connect(nats_url).await.map_err(bench_error)?;
        let builder = builder()?.with_thread_run_store(Arc::clone(&store) as _);
        let node = ClusterNode::start(client, builder, NodeConfig::new(node_id))
            .await
            .map_err(bench_error)?;
        nodes.push(node);
    }
    super::cluster_w::settle(&nodes).await?;
    let (parents, children) = (&nodes[0], &nodes[1]);
    let agent = AgentId::new(demo::BENCH_DELEGATE_AGENT).map_err(bench_error)?;
    let runtime = parents.runtime().clone();

    // The scripted model names its calls after the history, so one run tells the
    // delegate call's id, and with it where each parent run's child will live.
    let probe = timed_run(
        runtime.clone(),
        agent.clone(),
        owned(parents, "probe"),
        None,
    )
    .await
    .map_err(bench_error)?;
    let call_id = probe.call.ok_or_else(|| bench_error("no delegate call"))?;
    let delegate = AgentId::new(demo::BENCH_TEXT_AGENT).map_err(bench_error)?;
    let mut placed = Vec::with_capacity(options.runs);
    for index in 0..options.runs {
        let run = std::iter::repeat_with(RunId::generate)
            .find(|run| children.owns(&ChildRef::of_call(&delegate, run, &call_id).thread_id))
            .ok_or_else(|| bench_error("no run id places its child"))?;
        placed.push((owned(parents, &format!("parent-{tag}-{index}")), run));
    }
    let placed = Arc::new(placed);
    let driven = drive(NAME, options.runs, 1, options, move |index| {
        let (thread, run) = placed[index].clone();
        one_run(runtime.clone(), agent.clone(), thread, Some(run))
    })
    .await?;
    for node in nodes {
        node.drain(Duration::from_secs(10))
            .await
            .map_err(bench_error)?;
    }
    let mut report = driven
        .report(NAME, 1)
        .with("delegation_p50_us", driven.parts.quantile_us(0.50))
        .with("delegation_p99_us", driven.parts.quantile_us(0.99));
    report.nodes = 2;
    Ok(report)
}

/// A thread id `node` owns.
fn owned(node: &ClusterNode, tag: &str) -> ThreadId {
    (0u64..)
        .filter_map(|i| ThreadId::new(format!("{tag}-{i}")).ok())
        .find(|thread| node.owns(thread))
        .unwrap_or_else(ThreadId::generate)
}

/// What one run's sink saw of its delegate call.
struct Probe {
    call: Option<ToolCallId>,
    latency: Option<Duration>,
}

/// Times the delegate call between its `ToolCallReady` and its `ToolCallDone`.
#[derive(Default)]
struct DelegateTimer {
    state: Mutex<Timing>,
}

/// The delegate call seen so far: its id and when it was ready, then how long it took.
#[derive(Default)]
struct Timing {
    ready: Option<(ToolCallId, Instant)>,
    took: Option<Duration>,
}

#[async_trait]
impl EventSink for DelegateTimer {
    async fn emit(&self, event: AgentEvent) {
        let now = Instant::now();
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match event {
            AgentEvent::ToolCallReady { id, name, .. }
                if name.starts_with(DELEGATE_TOOL_PREFIX) =>
            {
                state.ready = Some((id, now));
            }
            AgentEvent::ToolCallDone { id, .. } => {
                if let Some((ready, at)) = &state.ready
                    && *ready == id
                {
                    state.took = Some(now - *at);
                }
            }
            _ => {}
        }
    }
}

impl DelegateTimer {
    fn probe(&self) -> Probe {
        let state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Probe {
            call: state.ready.as_ref().map(|(id, _)| id.clone()),
            latency: state.took,
        }
    }
}

async fn one_run(
    runtime: AgentRuntime,
    agent: AgentId,
    thread: ThreadId,
    run_id: Option<RunId>,
) -> std::result::Result<RunSample, String> {
    let probe = timed_run(runtime, agent, thread, run_id).await?;
    Ok(RunSample {
        part: probe.latency,
    })
}

async fn timed_run(
    runtime: AgentRuntime,
    agent: AgentId,
    thread: ThreadId,
    run_id: Option<RunId>,
) -> std::result::Result<Probe, String> {
    let timer = Arc::new(DelegateTimer::default());
    let mut request = RunRequest::new(thread, vec![Message::user("go")]).with_agent_id(agent);
    request.run_id = run_id;
    let done = runtime
        .run(request, Arc::clone(&timer) as _)
        .await
        .map_err(|e| e.to_string())?;
    if done.termination != TerminationReason::NaturalEnd
        || !done.response.starts_with("delegated: ")
    {
        return Err(format!("the run ended with {done:?}"));
    }
    let probe = timer.probe();
    if probe.latency.is_none() {
        return Err("the delegate call was not seen".to_owned());
    }
    Ok(probe)
}
