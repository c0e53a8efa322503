//! `idle-threads`: what an idle thread costs in memory, warm and passivated.
//!
//! Two phases, each on a runtime of its own, each starting `--threads` threads with
//! one short run (one inference answering with text) and waiting until every
//! thread's actor stopped (an idle thread holds no actor):
//!
//! 1. warm (an idle passivation longer than the benchmark): every thread keeps its
//!    core in memory; the growth of the resident set divided by the thread count is
//!    `bytes_per_warm_thread`, and `warm_threads` counts them;
//! 2. passivated (`ThreadConfig::idle_passivation` of [`PASSIVATE_AFTER`]): the phase
//!    waits until every thread passivated; the growth per thread is
//!    `bytes_per_passivated_thread`.
//!
//! Both include what the in-memory store keeps per thread (messages, run, state);
//! `bytes_per_warm_core` is the difference, what keeping a thread warm costs. The
//! first phase's runtime stays alive during the second, so the second cannot reuse
//! memory the first freed, which would hide its cost; what the allocator keeps after
//! actors stop is counted, as the operating system counts it. `live_threads` is the
//! number of actors left after both phases (0). `runs` is twice `--threads`.

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

/// The idle passivation standing for "never" in the warm phase.
const NEVER: Duration = Duration::from_secs(24 * 60 * 60);

/// Measures `options.threads` warm and passivated threads.
pub async fn run(options: &BenchOptions) -> Result<BenchReport> {
    let threads = options.threads.max(1);
    let warm = Phase::run("idle-threads/warm", NEVER, threads, options).await?;
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
    let live_after = warm.runtime.live_threads() + passivating.runtime.live_threads();
    let warm_threads = warm.runtime.warm_threads();
    let (bytes_warm, bytes_passivated) = (
        per_thread(warm.growth_kb, threads),
        per_thread(passivated_growth, threads),
    );

    let mut driven = warm.driven;
    driven.latencies.merge(&passivating.driven.latencies)?;
    driven.completed += passivating.driven.completed;
    driven.errors += passivating.driven.errors;
    driven.first_error = driven.first_error.take().or(passivating.driven.first_error);
    driven.timed_out |= warm.timed_out || passivating.timed_out || !waited_out;
    driven.elapsed += passivating.driven.elapsed;

    warm.runtime.shutdown().await;
    passivating.runtime.shutdown().await;
    Ok(driven
        .report(NAME, options.concurrency)
        .with("threads", threads)
        .with("bytes_per_warm_thread", bytes_warm)
        .with("bytes_per_passivated_thread", bytes_passivated)
        .with(
            "bytes_per_warm_core",
            bytes_warm.saturating_sub(bytes_passivated),
        )
        .with("warm_threads", warm_threads)
        .with("live_threads", live_after)
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
    /// Whether the actors did not all stop within the time limit.
    timed_out: bool,
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
        let stopped = tokio::time::timeout(options.timeout, runtime.all_stopped()).await;
        let growth_kb = rss_kb().saturating_sub(rss_before_kb);
        Ok(Self {
            runtime,
            threads: ids,
            driven,
            rss_before_kb,
            growth_kb,
            timed_out: stopped.is_err(),
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
