//! The mailbox's metrics: how long claimable dispatches wait for a claim and how
//! many are delivered again after an earlier attempt, and how often claims
//! waited for memory. Dispatch counts by status
//! are read from the mailbox when scraped, not kept here.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::contract::RunDispatch;

/// Bucket bounds of the claim lag in seconds: a millisecond to ten minutes.
const LAG_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5, 10.0, 60.0, 600.0,
];

/// The mailbox worker's meters; one per runtime, inside [`super::RunMetrics`].
#[derive(Debug)]
pub(crate) struct MailboxMetrics {
    claim_lag: Histogram,
    redeliveries: Counter,
    claims_deferred: Counter,
}

impl Default for MailboxMetrics {
    fn default() -> Self {
        Self {
            claim_lag: Histogram::new(LAG_BUCKETS),
            redeliveries: Counter::default(),
            claims_deferred: Counter::default(),
        }
    }
}

impl MailboxMetrics {
    /// Registers the meters in `awaken`, the runtime's prefixed registry.
    pub(crate) fn register(&self, awaken: &mut Registry) {
        awaken.register_with_unit(
            "mailbox_claim_lag",
            "Time from a dispatch becoming claimable (enqueued, or its retry back-off over) to its claim",
            Unit::Seconds,
            self.claim_lag.clone(),
        );
        awaken.register(
            "mailbox_redeliveries",
            "Dispatches claimed again after an earlier attempt (a failure, a lapsed lease, a node gone)",
            self.redeliveries.clone(),
        );
        awaken.register(
            "mailbox_claims_deferred",
            "Claims of queued work put off because active runs fill the node's admitted memory",
            self.claims_deferred.clone(),
        );
    }

    /// A thread's queued work was left queued for want of memory.
    pub(crate) fn claim_deferred(&self) {
        self.claims_deferred.inc();
    }

    /// Claims put off for want of memory, since the node started.
    pub(crate) fn claims_deferred(&self) -> u64 {
        self.claims_deferred.get()
    }

    /// `dispatch` was claimed at `now_ms` (unix millis).
    pub(crate) fn claimed(&self, dispatch: &RunDispatch, now_ms: u64) {
        let lag = Duration::from_millis(now_ms.saturating_sub(dispatch.available_at));
        self.claim_lag.observe(lag.as_secs_f64());
        if dispatch.attempt_count > 1 {
            self.redeliveries.inc();
        }
    }
}
