//! Workload W, the run compared with other systems: a new thread, one user message,
//! inference → one tool call → inference → final text, with the scripted model and
//! the store `--store` names, in memory by default (the runtime checkpoints at
//! every step).
//!
//! Extra fields, taken once every thread's actor stopped after the last run:
//! `live_threads_at_end` (thread actors still live: 0), `warm_threads_at_end` (idle
//! threads kept in memory; with the default idle passivation of minutes, every
//! thread) and `idle_passivation_s`.

use std::sync::Arc;

use awaken_actors::contract::{Message, TerminationReason};
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::thread::{RunRequest, ThreadConfig};
use awaken_actors::{AgentId, ThreadId};

use super::BenchOptions;
use super::driver::{Discard, RunSample, drive};
use super::report::BenchReport;
use super::store::OpenStore;
use crate::demo;
use crate::error::{GatewayError, Result};

/// The scenario's name in reports.
pub const NAME: &str = "workload-w";

/// Runs `options.runs` W runs at `options.concurrency`.
pub async fn run(options: &BenchOptions) -> Result<BenchReport> {
    run_named(NAME, options, options.concurrency).await
}

/// Runs workload W under another scenario name and concurrency.
pub(crate) async fn run_named(
    name: &str,
    options: &BenchOptions,
    concurrency: usize,
) -> Result<BenchReport> {
    let config = ThreadConfig::default();
    let idle_passivation_s = config.idle_passivation.as_secs();
    let store = OpenStore::open(options).await?;
    let runtime = store.runtime(config)?;
    let before = store.sent();
    let agent = AgentId::new(demo::BENCH_AGENT).map_err(|e| GatewayError::Bench(e.to_string()))?;
    let job_runtime = runtime.clone();
    let driven = drive(name, options.runs, concurrency, options, move |_| {
        one_run(job_runtime.clone(), agent.clone())
    })
    .await?;
    // Outside the timed part: actors stop right after their run's last event.
    let settle = tokio::time::timeout(options.timeout, runtime.all_stopped()).await;
    let (live, warm) = (runtime.live_threads(), runtime.warm_threads());
    runtime.shutdown().await;
    let mut driven = driven;
    driven.timed_out |= settle.is_err();
    let report = driven
        .report(name, concurrency)
        .with("live_threads_at_end", live)
        .with("warm_threads_at_end", warm)
        .with("idle_passivation_s", idle_passivation_s);
    store.close(report, before, options).await
}

/// One W run on a new thread; fails unless it ends naturally with the scripted text.
pub(crate) async fn one_run(runtime: AgentRuntime, agent: AgentId) -> Result<RunSample, String> {
    let request =
        RunRequest::new(ThreadId::generate(), vec![Message::user("go")]).with_agent_id(agent);
    let result = runtime
        .run(request, Arc::new(Discard))
        .await
        .map_err(|e| e.to_string())?;
    if result.termination != TerminationReason::NaturalEnd
        || !result.response.starts_with(demo::BENCH_ANSWER_PREFIX)
    {
        return Err(format!(
            "run ended with {:?} and response {:?}",
            result.termination, result.response
        ));
    }
    Ok(RunSample::default())
}
