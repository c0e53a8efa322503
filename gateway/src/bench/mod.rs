//! `awaken bench local`: the project's load generator on one embedded node.
//!
//! Every scenario builds a fresh embedded runtime ([`crate::demo`]), drives runs
//! through the public [`AgentRuntime`](awaken_actors::runtime::AgentRuntime) API with
//! a fixed number of runs in flight, and returns one [`BenchReport`], printed as one
//! JSON line on stdout (progress goes to stderr):
//!
//! ```json
//! {"scenario":"workload-w","runs":1000,"concurrency":32,"runs_per_s":1234.5,
//!  "p50_us":800,"p90_us":1500,"p99_us":3000,"max_us":9000,"errors":0,
//!  "timed_out":false,"elapsed_ms":810,"peak_rss_kb":51200,"nodes":1, ...}
//! ```
//!
//! Latencies are per-run wall times in an HDR histogram (3 significant digits).
//! `peak_rss_kb` is the process's `VmHWM`: the peak of the whole process so far,
//! so scenarios run in one invocation see the peaks of those before them.
//!
//! | scenario | module |
//! |---|---|
//! | `workload-w` | [`workload_w`] |
//! | `sequential` | [`sequential`] |
//! | `hitl` | [`hitl`] |
//! | `idle-threads` | [`idle_threads`] |
//! | `delegation` | [`delegation`] |
//! | `mailbox-memory` | [`mailbox_memory`] |
//!
//! `workload-w`, `sequential` and `hitl` run on the store `--store` names
//! (`memory`, `file` in a temporary directory, or `postgres` in a schema of their
//! own, with `--postgres-url`); on PostgreSQL their report adds the store's traffic
//! per run and the database's reference, as `bench http --store postgres` does.
//!
//! Every scenario is bounded: by its run count, by [`BenchOptions::timeout`] for the
//! whole scenario (no run starts after it; the report says `"timed_out": true`), and
//! by [`BenchOptions::run_timeout`] for each run (counted as an error).

mod child;
pub mod cluster_w;
pub mod delegation;
pub mod dispatch;
mod driver;
pub mod failover;
pub mod hitl;
pub mod hitl_remote;
pub mod http;
pub mod idle_threads;
mod jetstream;
pub mod mailbox_memory;
mod postgres;
pub mod report;
pub mod sequential;
pub mod slow_clients;
mod store;
pub mod workload_w;

use std::time::Duration;

pub use report::{BenchReport, Latencies};

use crate::error::Result;

/// A benchmark scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Workload W at the configured concurrency.
    WorkloadW,
    /// Workload W, one run at a time.
    Sequential,
    /// Workload W with an approval round trip per run.
    Hitl,
    /// Memory per idle thread, live and passivated.
    IdleThreads,
    /// A delegate call's overhead, one run at a time.
    Delegation,
    /// Memory per queued input and per settled dispatch in the mailbox.
    MailboxMemory,
}

impl Scenario {
    /// Every scenario, in the order `all` runs them.
    pub const ALL: [Self; 6] = [
        Self::WorkloadW,
        Self::Sequential,
        Self::Hitl,
        Self::IdleThreads,
        Self::Delegation,
        Self::MailboxMemory,
    ];

    /// The scenario's name, as on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::WorkloadW => workload_w::NAME,
            Self::Sequential => sequential::NAME,
            Self::Hitl => hitl::NAME,
            Self::IdleThreads => idle_threads::NAME,
            Self::Delegation => delegation::NAME,
            Self::MailboxMemory => mailbox_memory::NAME,
        }
    }
}

/// The thread store `awaken bench local` runs the engine on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum BenchStore {
    /// In memory, the embedded default.
    #[default]
    Memory,
    /// Files in a temporary directory.
    File,
    /// PostgreSQL at this URL, in a schema the benchmark creates and drops.
    Postgres(String),
}

impl BenchStore {
    /// Whether `scenario` can run on this store: the scenarios that build their
    /// runtime from the engine's store (`idle-threads` and `mailbox-memory`
    /// measure memory, and `delegation` a call's overhead, on the in-memory
    /// store only).
    pub fn serves(&self, scenario: Scenario) -> bool {
        *self == Self::Memory
            || matches!(
                scenario,
                Scenario::WorkloadW | Scenario::Sequential | Scenario::Hitl
            )
    }
}

/// Sizes and limits of a benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchOptions {
    /// Runs per scenario (`workload-w`, `sequential`, `hitl`).
    pub runs: usize,
    /// Runs in flight at once (`sequential` always uses 1).
    pub concurrency: usize,
    /// Threads per phase of `idle-threads`; runs per phase of `mailbox-memory`.
    pub threads: usize,
    /// Time limit of one scenario; no run starts after it.
    pub timeout: Duration,
    /// Time limit of one run; a slower run counts as an error.
    pub run_timeout: Duration,
    /// Whether to print progress on stderr.
    pub progress: bool,
    /// The thread store of `bench local`'s W and HITL scenarios.
    pub store: BenchStore,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            runs: 5_000,
            concurrency: 32,
            threads: 10_000,
            timeout: Duration::from_secs(600),
            run_timeout: Duration::from_secs(60),
            progress: true,
            store: BenchStore::Memory,
        }
    }
}

/// Runs one scenario and returns its report.
pub async fn run(scenario: Scenario, options: &BenchOptions) -> Result<BenchReport> {
    if !options.store.serves(scenario) {
        return Err(crate::error::GatewayError::Bench(format!(
            "{} runs on the in-memory store only: leave out --store",
            scenario.name()
        )));
    }
    match scenario {
        Scenario::WorkloadW => workload_w::run(options).await,
        Scenario::Sequential => sequential::run(options).await,
        Scenario::Hitl => hitl::run(options).await,
        Scenario::IdleThreads => idle_threads::run(options).await,
        Scenario::Delegation => delegation::run_local(options).await,
        Scenario::MailboxMemory => mailbox_memory::run(options).await,
    }
}
