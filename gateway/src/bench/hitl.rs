//! `hitl`: workload W whose tool call waits for a human. Each run starts on a new
//! thread, suspends before the tool runs, and is approved with `decide_and_wait`.
//!
//! `p50_us`/`p99_us` cover the whole run (start to suspension, then decision to
//! end); `decision_p50_us`/`decision_p99_us` cover only sending the decision until
//! the resumed run finished. With the default thread configuration a waiting thread
//! passivates, so a decision includes rehydrating the thread from the store
//! (`passivate_while_waiting` says so in the report).

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use awaken_actors::contract::{AgentEvent, Message, TerminationReason, ToolCallOutcome};
use awaken_actors::event_sink::EventSink;
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::thread::{RunRequest, ThreadConfig};
use awaken_actors::{AgentId, ThreadId, ToolCallId};

use super::BenchOptions;
use super::driver::{RunSample, drive};
use super::report::BenchReport;
use super::store::OpenStore;
use crate::demo;
use crate::error::{GatewayError, Result};
use crate::run_cmd::Answer;

/// The scenario's name in reports.
pub const NAME: &str = "hitl";

/// Runs `options.runs` approval round trips at `options.concurrency`.
pub async fn run(options: &BenchOptions) -> Result<BenchReport> {
    let config = ThreadConfig::default();
    let passivate_while_waiting = config.passivate_while_waiting;
    let store = OpenStore::open(options).await?;
    let runtime = store.runtime(config)?;
    let before = store.sent();
    let agent =
        AgentId::new(demo::BENCH_HITL_AGENT).map_err(|e| GatewayError::Bench(e.to_string()))?;
    let job_runtime = runtime.clone();
    let driven = drive(
        NAME,
        options.runs,
        options.concurrency,
        options,
        move |_| one_run(job_runtime.clone(), agent.clone()),
    )
    .await?;
    runtime.shutdown().await;
    let report = driven
        .report(NAME, options.concurrency)
        .with("decision_p50_us", driven.parts.quantile_us(0.50))
        .with("decision_p99_us", driven.parts.quantile_us(0.99))
        .with("passivate_while_waiting", passivate_while_waiting);
    store.close(report, before, options).await
}

async fn one_run(runtime: AgentRuntime, agent: AgentId) -> Result<RunSample, String> {
    let thread = ThreadId::generate();
    let request = RunRequest::new(thread.clone(), vec![Message::user("go")]).with_agent_id(agent);
    let suspended = Arc::new(SuspendedCall::default());
    let first = runtime
        .run(request, suspended.clone())
        .await
        .map_err(|e| e.to_string())?;
    if first.termination != TerminationReason::Suspended {
        return Err(format!(
            "expected a suspension, got {:?}",
            first.termination
        ));
    }
    let call = suspended
        .take()
        .ok_or_else(|| "the run suspended without a suspended call".to_owned())?;
    let sent = std::time::Instant::now();
    let done = runtime
        .decide_and_wait(&thread, call, Answer::Yes.decision(), None)
        .await
        .map_err(|e| e.to_string())?;
    let decision = sent.elapsed();
    if done.termination != TerminationReason::NaturalEnd
        || !done.response.starts_with(demo::BENCH_ANSWER_PREFIX)
    {
        return Err(format!(
            "resumed run ended with {:?} and response {:?}",
            done.termination, done.response
        ));
    }
    Ok(RunSample {
        part: Some(decision),
    })
}

/// Remembers the call a run suspended on.
#[derive(Debug, Default)]
struct SuspendedCall(Mutex<Option<ToolCallId>>);

impl SuspendedCall {
    fn take(&self) -> Option<ToolCallId> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

#[async_trait]
impl EventSink for SuspendedCall {
    async fn emit(&self, event: AgentEvent) {
        if let AgentEvent::ToolCallDone {
            id,
            outcome: ToolCallOutcome::Suspended,
            ..
        } = event
        {
            *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(id);
        }
    }
}
