//! Noticing that the NATS connection was established again.
//!
//! The client re-sends its subscriptions after a reconnect, but what was in
//! flight is gone, and a JetStream pull or push consumer may sit out its own
//! heartbeat timeouts before it asks again. The parts that can do better (the
//! decision worker, the mailbox feed) look at the client's connect count on
//! their own ticks and start over at once when it moved.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_nats::{Client, Statistics};

/// The connect count of one client as last seen.
#[derive(Debug)]
pub(crate) struct Reconnects {
    statistics: Arc<Statistics>,
    seen: u64,
}

impl Reconnects {
    /// Starts from the client's connects so far.
    pub(crate) fn of(client: &Client) -> Self {
        let statistics = client.statistics();
        let seen = statistics.connects.load(Ordering::Relaxed);
        Self { statistics, seen }
    }

    /// Whether the client connected again since this was last asked.
    pub(crate) fn happened(&mut self) -> bool {
        let now = self.statistics.connects.load(Ordering::Relaxed);
        let again = now != self.seen;
        self.seen = now;
        again
    }
}
