//! `idle-threads`: what an idle thread costs in memory, live and passivated.
//!
//! Two phases, each on a runtime of its own, each starting `--threads` threads with
//! one short run (one inference answering with text):
//!
//! 1. passivation off (an idle timeout longer than the benchmark: `ThreadConfig` has
//!    no off switch): every thread keeps its actor; the growth of the resident set
//!    divided by the thread count is `bytes_per_live_thread`;
//! 2. passivation on (`ThreadConfig::idle_passivation` of [`PASSIVATE_AFTER`]): the
//!    phase waits until every thread passivated; the growth per thread is
//!    `bytes_per_passivated_thread` and `live_threads` is what is left live.
//!
//! Both include what the in-memory store keeps per thread (messages, run, state).
//! The first phase's runtime stays alive during the second, so the second cannot
//! reuse memory the first freed, which would hide its cost; what the allocator keeps
//! after actors stop is counted, as the operating system counts it. `runs` is twice
//! `--threads`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use awaken_actors::contract::{Message, TerminationReason};
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::thread::{RunRequest, ThreadConfig};
use awaken_actors::{AgentId, ThreadId};

use super::BenchOptions;
use super::driver::{Discard, Driven, RunSample, drive};
use super::report::{BenchReport, rss_kb};
use crate::demo;
use crate::error::{GatewayError, Result};

/// The scenario's name in reports.
pub const NAME: &str = "idle-threads";

/// The idle timeout of the passivating phase.
pub const PASSIVATE_AFTER: Duration = Duration::from_millis(100);

/// The idle timeout standing for "never" in the live phase.
const NEVER: Duration = Duration::from_secs(24 * 60 * 60);

/// Measures `options.threads` live and passivated threads.
pub async fn run(options: &BenchOptions) -> Result<BenchReport> {
    let threads = options.threads.max(1);
    let live = Phase::run("idle-threads/live", NEVER, threads, options).await?;
    let passivating =
        Phase::run("idle-threads/passivated", PASSIVATE_AFTER, threads, options).await?;
    let deadline = Instant::now() + options.timeout;
    let mut waited_out = true;
    for id in passivating.threads.iter() {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(remaining, passivating.runtime.thread_passivated(id))
            .await
            .is_err()
        {
            waited_out = false;
            break;
        }
    }
    let passivated_growth = rss_kb().saturating_sub(passivating.rss_before_kb);
    let live_after = passivating.runtime.live_threads();
    let live_without_passivation = live.runtime.live_threads();

    let mut driven = live.driven;
    driven.latencies.merge(&passivating.driven.latencies)?;
    driven.completed += passivating.driven.completed;
    driven.errors += passivating.driven.errors;
    driven.first_error = driven.first_error.take().or(passivating.driven.first_error);
    driven.timed_out |= passivating.driven.timed_out || !waited_out;
    driven.elapsed += passivating.driven.elapsed;

    live.runtime.shutdown().await;
    passivating.runtime.shutdown().await;
    Ok(driven
        .report(NAME, options.concurrency)
        .with("threads", threads)
        .with("bytes_per_live_thread", per_thread(live.growth_kb, threads))
        .with(
            "bytes_per_passivated_thread",
            per_thread(passivated_growth, threads),
        )
        .with("live_threads", live_after)
        .with("live_threads_without_passivation", live_without_passivation)
        .with(
            "idle_passivation_ms",
            u64::try_from(PASSIVATE_AFTER.as_millis()).unwrap_or(u64::MAX),
        ))
}

/// One phase: a runtime, its threads and what starting them cost.
struct Phase {
    runtime: AgentRuntime,
    threads: Arc<Vec<ThreadId>>,
    driven: Driven,
    rss_before_kb: u64,
    growth_kb: u64,
}

impl Phase {
    async fn run(
        name: &str,
        idle_passivation: Duration,
        threads: usize,
        options: &BenchOptions,
    ) -> Result<Self> {
        let runtime = demo::runtime(ThreadConfig {
            idle_passivation,
            ..ThreadConfig::default()
        })?;
        let agent =
            AgentId::new(demo::BENCH_TEXT_AGENT).map_err(|e| GatewayError::Bench(e.to_string()))?;
        let ids: Arc<Vec<ThreadId>> =
            Arc::new((0..threads).map(|_| ThreadId::generate()).collect());
        let rss_before_kb = rss_kb();
        let (job_runtime, job_ids) = (runtime.clone(), Arc::clone(&ids));
        let driven = drive(name, threads, options.concurrency, options, move |index| {
            short_run(job_runtime.clone(), agent.clone(), job_ids[index].clone())
        })
        .await?;
        let growth_kb = rss_kb().saturating_sub(rss_before_kb);
        Ok(Self {
            runtime,
            threads: ids,
            driven,
            rss_before_kb,
            growth_kb,
        })
    }
}

async fn short_run(
    runtime: AgentRuntime,
    agent: AgentId,
    thread: ThreadId,
) -> Result<RunSample, String> {
    let request = RunRequest::new(thread, vec![Message::user("hi")]).with_agent_id(agent);
    let result = runtime
        .run(request, Arc::new(Discard))
        .await
        .map_err(|e| e.to_string())?;
    if result.termination != TerminationReason::NaturalEnd {
        return Err(format!("run ended with {:?}", result.termination));
    }
    Ok(RunSample::default())
}

/// Bytes per thread of a growth in KiB.
fn per_thread(growth_kb: u64, threads: usize) -> u64 {
    growth_kb.saturating_mul(1024) / u64::try_from(threads.max(1)).unwrap_or(u64::MAX)
}
