//! What a [`PostgresStore`](super::PostgresStore) sends to the server, counted as it
//! sends it: the benchmark's statements and round trips per run, and `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::StoreIoCounts;

/// Counters shared by a store and its pool's connection hook.
#[derive(Debug, Default)]
pub(super) struct StoreStats {
    checkpoints: AtomicU64,
    statements: AtomicU64,
    /// Round trips that are not statements: pings before use, tests on release.
    pings: AtomicU64,
}

impl StoreStats {
    /// One statement sent and answered (a query, `BEGIN`, `COMMIT` or `ROLLBACK`).
    pub(super) fn statement(&self) {
        self.statements.fetch_add(1, Ordering::Relaxed);
    }

    /// One checkpoint written or refused.
    pub(super) fn checkpoint(&self) {
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
    }

    /// One ping of an idle connection before it was used again.
    pub(super) fn ping(&self) {
        self.pings.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` connections given back to the pool, which tests each with a round
    /// trip of its own (see [`held`](super::held)).
    pub(super) fn released(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.pings.fetch_add(n, Ordering::Relaxed);
    }

    /// The totals so far.
    pub(super) fn counts(&self) -> StoreIoCounts {
        let statements = self.statements.load(Ordering::Relaxed);
        StoreIoCounts {
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            statements,
            round_trips: statements + self.pings.load(Ordering::Relaxed),
        }
    }
}
