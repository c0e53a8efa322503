//! `mailbox-memory`: what the single node's mailbox holds per queued input and
//! per settled dispatch, as the operating system counts it.
//!
//! Two phases, each on a mailbox and inbox of its own (the ones `awaken serve`
//! runs on: [`InMemoryMailboxStore`] and [`InMemoryRunInbox`]), each with
//! `--threads` runs of workload W's input (one user message) to new threads:
//!
//! 1. queued: every run is submitted and left queued, as when the node accepts
//!    work faster than it claims it; the growth of the resident set per run is
//!    `bytes_per_queued_input` (its dispatch and its input), beside what the
//!    admitted meter counts for it (`counted_bytes_per_queued_input`);
//! 2. settled: every run is submitted, claimed and acked, as a finished run
//!    leaves it; what stays is its settled dispatch (the latest
//!    [`SETTLED_KEPT`] whole, the rest as marks): `bytes_per_settled_dispatch`,
//!    beside [`MailboxStore::settled_bytes`] per run
//!    (`counted_bytes_per_settled_dispatch`).
//!
//! The first phase's mailbox stays alive during the second, so the second cannot
//! reuse memory the first freed. No engine runs: the figures are the mailbox's own.

use std::sync::Arc;
use std::time::Instant;

use awaken_actors::ThreadId;
use awaken_actors::clock::now_ms;
use awaken_actors::contract::Message;
use awaken_actors::mailbox::{
    InMemoryMailboxStore, InMemoryRunInbox, MailboxConfig, MailboxStore, RunInbox, SETTLED_KEPT,
    SubmitOptions, submit,
};
use awaken_actors::memory::{MemoryBudget, NodeMemory, Share};
use awaken_actors::thread::RunRequest;

use super::BenchOptions;
use super::report::{BenchReport, peak_rss_kb, rss_kb};
use crate::error::{GatewayError, Result};

/// The scenario's name in reports.
pub const NAME: &str = "mailbox-memory";

/// A budget no phase comes near, so nothing is refused or collected.
const BUDGET: u64 = 16 << 30;

/// The claim lease of the settled phase, ms (it acks at once).
const LEASE_MS: u64 = 30_000;

/// Measures `options.threads` queued inputs and settled dispatches.
pub async fn run(options: &BenchOptions) -> Result<BenchReport> {
    let runs = options.threads.max(1);
    let started = Instant::now();
    let queued = Phase::new()?;
    let rss_before = rss_kb();
    for _ in 0..runs {
        queued.submit().await?;
    }
    let queued_growth = rss_kb().saturating_sub(rss_before);
    let counted_queued = queued.memory.meter(Share::Admitted).bytes();

    let settled = Phase::new()?;
    let rss_before = rss_kb();
    for _ in 0..runs {
        settled.settle().await?;
    }
    let settled_growth = rss_kb().saturating_sub(rss_before);
    let counted_settled = settled.mailbox.settled_bytes();
    if queued.inbox.len() != runs || !settled.inbox.is_empty() {
        return Err(bench_error("the inboxes do not hold what the phases left"));
    }

    let per_run = |kb: u64| kb * 1024 / runs as u64;
    Ok(BenchReport {
        scenario: NAME.to_owned(),
        runs: 2 * runs as u64,
        concurrency: 1,
        runs_per_s: 0.0,
        p50_us: 0,
        p90_us: 0,
        p99_us: 0,
        max_us: 0,
        errors: 0,
        first_error: None,
        timed_out: false,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        peak_rss_kb: peak_rss_kb(),
        nodes: 1,
        extra: serde_json::Map::new(),
    }
    .with("threads", runs)
    .with("bytes_per_queued_input", per_run(queued_growth))
    .with(
        "counted_bytes_per_queued_input",
        counted_queued / runs as u64,
    )
    .with("bytes_per_settled_dispatch", per_run(settled_growth))
    .with(
        "counted_bytes_per_settled_dispatch",
        counted_settled / runs as u64,
    )
    .with("settled_kept_whole", SETTLED_KEPT))
}

/// One phase's mailbox, inbox and meters.
struct Phase {
    mailbox: InMemoryMailboxStore,
    inbox: InMemoryRunInbox,
    memory: Arc<NodeMemory>,
}

impl Phase {
    fn new() -> Result<Self> {
        let budget = MemoryBudget::new(BUDGET).map_err(|e| bench_error(e.to_string()))?;
        let memory = Arc::new(NodeMemory::new(budget));
        Ok(Self {
            mailbox: InMemoryMailboxStore::new(MailboxConfig::default()),
            inbox: InMemoryRunInbox::with_memory(Arc::clone(&memory)),
            memory,
        })
    }

    /// Accepts one W input on a new thread and leaves it queued.
    async fn submit(&self) -> Result<awaken_actors::contract::RunDispatch> {
        let request = RunRequest::new(ThreadId::generate(), vec![Message::user("hi")]);
        submit(
            &self.mailbox,
            &self.inbox,
            request,
            SubmitOptions::default(),
        )
        .await
        .map_err(|e| bench_error(e.to_string()))
    }

    /// Accepts one W input, claims and acks it, and forgets its input, as the
    /// mailbox worker does when its run ends.
    async fn settle(&self) -> Result<()> {
        let queued = self.submit().await?;
        let now = now_ms();
        let claimed = self
            .mailbox
            .claim_dispatch(&queued.dispatch_id, "bench", LEASE_MS, now)
            .await
            .map_err(|e| bench_error(e.to_string()))?;
        let token = claimed
            .claim_token
            .as_deref()
            .ok_or_else(|| bench_error("a claimed dispatch has no claim token"))?;
        self.mailbox
            .ack(&claimed.dispatch_id, token, now)
            .await
            .map_err(|e| bench_error(e.to_string()))?;
        self.inbox
            .remove(&claimed.run_id)
            .await
            .map_err(|e| bench_error(e.to_string()))
    }
}

fn bench_error(message: impl Into<String>) -> GatewayError {
    GatewayError::Bench(message.into())
}
