//! The load loop shared by every scenario: `concurrency` workers take run indexes
//! from one counter until `runs` are done or the time limit passes, each run bounded
//! by its own timeout; per-run wall times go into a histogram.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use awaken_actors::contract::AgentEvent;
use awaken_actors::event_sink::EventSink;

use super::BenchOptions;
use super::report::{BenchReport, Latencies, peak_rss_kb};
use crate::error::{GatewayError, Result};

/// How often progress goes to stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// What one run reports besides its wall time, which the driver measures.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunSample {
    /// Latency of the part of the run the scenario measures on its own (a decision
    /// round trip, a failover, a delegate call), if it has one.
    pub(crate) part: Option<Duration>,
}

/// The outcome of driving a batch of runs.
#[derive(Debug)]
pub(crate) struct Driven {
    /// Wall time of each successful run.
    pub(crate) latencies: Latencies,
    /// The parts runs reported ([`RunSample::part`]).
    pub(crate) parts: Latencies,
    /// Runs that finished, successfully or not.
    pub(crate) completed: u64,
    /// Runs that failed or timed out.
    pub(crate) errors: u64,
    /// The first failure's text.
    pub(crate) first_error: Option<String>,
    /// Whether the time limit stopped the batch early.
    pub(crate) timed_out: bool,
    /// Wall time of the whole batch.
    pub(crate) elapsed: Duration,
}

impl Driven {
    /// The fixed fields of a report for `scenario` at `concurrency`.
    pub(crate) fn report(&self, scenario: &str, concurrency: usize) -> BenchReport {
        let seconds = self.elapsed.as_secs_f64();
        let per_second = if seconds > 0.0 {
            self.completed as f64 / seconds
        } else {
            0.0
        };
        BenchReport {
            scenario: scenario.to_owned(),
            runs: self.completed,
            concurrency,
            runs_per_s: (per_second * 10.0).round() / 10.0,
            p50_us: self.latencies.quantile_us(0.50),
            p90_us: self.latencies.quantile_us(0.90),
            p99_us: self.latencies.quantile_us(0.99),
            max_us: self.latencies.max_us(),
            errors: self.errors,
            first_error: self.first_error.clone(),
            timed_out: self.timed_out,
            elapsed_ms: u64::try_from(self.elapsed.as_millis()).unwrap_or(u64::MAX),
            peak_rss_kb: peak_rss_kb(),
            nodes: 1,
            extra: serde_json::Map::new(),
        }
    }
}

/// Runs `job(0..runs)` with `concurrency` workers under `options`' limits.
///
/// A job returns `Err(text)` for a run that did not end as the scenario expects.
pub(crate) async fn drive<F, Fut>(
    name: &str,
    runs: usize,
    concurrency: usize,
    options: &BenchOptions,
    job: F,
) -> Result<Driven>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<RunSample, String>> + Send + 'static,
{
    let job = Arc::new(job);
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + options.timeout;
    let progress = options
        .progress
        .then(|| spawn_progress(name.to_owned(), runs, Arc::clone(&done)));

    let mut workers = Vec::with_capacity(concurrency.max(1));
    for _ in 0..concurrency.max(1) {
        let worker = Worker {
            job: Arc::clone(&job),
            next: Arc::clone(&next),
            done: Arc::clone(&done),
            runs,
            deadline,
            run_timeout: options.run_timeout,
        };
        workers.push(tokio::spawn(worker.work()));
    }
    let mut driven = Driven {
        latencies: Latencies::new()?,
        parts: Latencies::new()?,
        completed: 0,
        errors: 0,
        first_error: None,
        timed_out: false,
        elapsed: Duration::ZERO,
    };
    for worker in workers {
        let tally = worker
            .await
            .map_err(|e| GatewayError::Bench(format!("worker failed: {e}")))??;
        driven.latencies.merge(&tally.latencies)?;
        driven.parts.merge(&tally.parts)?;
        driven.completed += tally.completed;
        driven.errors += tally.errors;
        driven.first_error = driven.first_error.take().or(tally.first_error);
    }
    driven.elapsed = started.elapsed();
    driven.timed_out = next.load(Ordering::Relaxed) < runs;
    if let Some(progress) = progress {
        progress.abort();
        eprintln!(
            "{name}: {} runs in {:.1}s, {} errors",
            driven.completed,
            driven.elapsed.as_secs_f64(),
            driven.errors
        );
    }
    Ok(driven)
}

/// One worker's share of the batch.
struct Worker<F> {
    job: Arc<F>,
    next: Arc<AtomicUsize>,
    done: Arc<AtomicU64>,
    runs: usize,
    deadline: Instant,
    run_timeout: Duration,
}

/// What one worker measured.
struct Tally {
    latencies: Latencies,
    parts: Latencies,
    completed: u64,
    errors: u64,
    first_error: Option<String>,
}

impl<F, Fut> Worker<F>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<RunSample, String>> + Send + 'static,
{
    async fn work(self) -> Result<Tally> {
        let mut tally = Tally {
            latencies: Latencies::new()?,
            parts: Latencies::new()?,
            completed: 0,
            errors: 0,
            first_error: None,
        };
        loop {
            // Check the clock before taking an index, so a late worker leaves it
            // untaken and the batch reports that it timed out.
            if Instant::now() >= self.deadline {
                break;
            }
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            if index >= self.runs {
                // Undo, so `next` stays at `runs` and the batch is not taken as cut.
                self.next.fetch_sub(1, Ordering::Relaxed);
                break;
            }
            let started = Instant::now();
            let outcome = tokio::time::timeout(self.run_timeout, (self.job)(index)).await;
            let wall = started.elapsed();
            match outcome {
                Ok(Ok(sample)) => {
                    tally.latencies.record(wall);
                    if let Some(part) = sample.part {
                        tally.parts.record(part);
                    }
                }
                Ok(Err(error)) => tally.fail(error),
                Err(_) => tally.fail(format!(
                    "run {index} exceeded the run timeout of {:?}",
                    self.run_timeout
                )),
            }
            tally.completed += 1;
            self.done.fetch_add(1, Ordering::Relaxed);
        }
        Ok(tally)
    }
}

impl Tally {
    fn fail(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }
}

fn spawn_progress(name: String, runs: usize, done: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(PROGRESS_EVERY);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            eprintln!("{name}: {}/{runs} runs", done.load(Ordering::Relaxed));
        }
    })
}

/// An event sink that drops everything (the benchmark measures the engine, not a
/// consumer).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Discard;

#[async_trait]
impl EventSink for Discard {
    async fn emit(&self, _event: AgentEvent) {}

    fn try_emit(&self, _event: AgentEvent) -> Option<AgentEvent> {
        None
    }
}
