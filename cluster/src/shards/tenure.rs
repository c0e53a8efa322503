//! `Tenure`: until when this node may still act as the owner of its shards, by
//! its own monotonic clock.
//!
//! A lease expires on the server `lease_ttl` after it was last written, and
//! another node may then take the shard. The ownership loop only learns of that
//! when its next renewal fails — after a pause (SIGSTOP, a frozen VM) that is
//! after the process resumed and may already have run tools, published events
//! and written. So every renewal also moves a deadline: the instant before the
//! renewal was sent, plus the TTL less a margin for clock drift between nodes.
//! Past it, the node treats its shards as gone until a renewal succeeds; the
//! monotonic clock keeps running while the process is stopped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The part of the TTL kept as a margin: a node stops acting this much before
/// its lease can expire on the server.
const MARGIN_DIVISOR: u32 = 10;

/// The node-wide deadline of its shard leases (the earliest of them).
#[derive(Debug)]
pub struct Tenure {
    base: Instant,
    /// Microseconds after `base` at which the node stops acting; 0 holds nothing.
    until_us: AtomicU64,
    ttl: Duration,
}

impl Tenure {
    /// A tenure for leases of `ttl`, holding nothing yet.
    pub fn new(ttl: Duration) -> Self {
        Self {
            base: Instant::now(),
            until_us: AtomicU64::new(0),
            ttl,
        }
    }

    /// The deadline of a lease written at or after `sent_at`.
    pub(super) fn deadline(&self, sent_at: Instant) -> Instant {
        sent_at + self.ttl - self.ttl / MARGIN_DIVISOR
    }

    /// Sets the node's deadline: the earliest of its leases' (none held: lapsed).
    pub(super) fn set(&self, earliest: Option<Instant>) {
        let until = earliest.map_or(0, |at| {
            u64::try_from(at.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX)
        });
        self.until_us.store(until, Ordering::Release);
    }

    /// Whether the node may still act on its leases now.
    pub fn holds(&self) -> bool {
        let now = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX);
        now < self.until_us.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_lapses_a_margin_before_the_ttl() {
        let tenure = Tenure::new(Duration::from_secs(5));
        assert!(!tenure.holds(), "nothing held yet");
        let now = Instant::now();
        assert_eq!(tenure.deadline(now), now + Duration::from_millis(4_500));
        tenure.set(Some(tenure.deadline(now)));
        assert!(tenure.holds());
        tenure.set(Some(now));
        assert!(!tenure.holds(), "a deadline in the past has lapsed");
        tenure.set(None);
        assert!(!tenure.holds());
    }
}
