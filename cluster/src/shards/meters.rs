//! What the shard keeper counts for the node's metrics: leases taken, leases
//! lost, renewals that failed. Churn in the first two means shards keep moving.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// The keeper's counters; clones share their values.
#[derive(Debug, Clone, Default)]
pub struct LeaseMeters {
    pub(super) acquired: Counter,
    pub(super) lost: Counter,
    pub(super) renewal_failures: Counter,
}

impl LeaseMeters {
    /// Registers the counters in `awaken`, the node's prefixed registry.
    pub fn register(&self, awaken: &mut Registry) {
        awaken.register(
            "shard_leases_acquired",
            "Shard leases this node took (at start, after a member left, when rebalancing)",
            self.acquired.clone(),
        );
        awaken.register(
            "shard_leases_lost",
            "Shard leases this node lost without draining (expired or taken while unrenewed)",
            self.lost.clone(),
        );
        awaken.register(
            "shard_lease_renewal_failures",
            "Lease renewals that did not reach the KV bucket (NATS unreachable, timeouts)",
            self.renewal_failures.clone(),
        );
    }
}
