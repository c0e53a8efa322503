//! A cluster node's own gauges, read when scraped: the members it sees, the shards
//! it owns out of how many, its NATS connection and the run events it could not
//! publish. The shard keeper's counters
//! ([`LeaseMeters`]) are registered beside them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_nats::connection::State;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::events::ClusterEventHub;
use crate::membership::NodeId;
use crate::shards::{LeaseMeters, Ownership, ShardCount};

/// Everything a scrape reads from the node without a round trip.
#[derive(Debug)]
pub(crate) struct NodeGauges {
    pub(crate) members: watch::Receiver<BTreeSet<NodeId>>,
    pub(crate) ownership: watch::Receiver<Ownership>,
    pub(crate) shards: ShardCount,
    pub(crate) client: async_nats::Client,
    pub(crate) leases: LeaseMeters,
    pub(crate) events: Arc<ClusterEventHub>,
}

impl NodeGauges {
    /// Registers the gauges and the lease counters in `awaken`, the node's
    /// prefixed registry.
    pub(crate) fn register(self, awaken: &mut Registry) {
        self.leases.register(awaken);
        awaken.register_collector(Box::new(self));
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: i64,
) -> std::fmt::Result {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for NodeGauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "cluster_members",
            "Cluster members this node sees, itself included",
            count(self.members.borrow().len()),
        )?;
        gauge(
            &mut encoder,
            "shards_owned",
            "Shards whose lease this node holds",
            count(self.ownership.borrow().len()),
        )?;
        gauge(
            &mut encoder,
            "shard_count",
            "Shards in the cluster",
            i64::from(self.shards.get()),
        )?;
        let connected = matches!(self.client.connection_state(), State::Connected);
        gauge(
            &mut encoder,
            "nats_connected",
            "1 while this node's NATS connection is up, 0 while it is down or reconnecting",
            i64::from(connected),
        )?;
        let connects = ConstCounter::new(self.client.statistics().connects.load(Ordering::Relaxed));
        connects.encode(encoder.encode_descriptor(
            "nats_connects",
            "NATS connections this node established: the first, then every reconnect",
            None,
            connects.metric_type(),
        )?)?;
        let unpublished = ConstCounter::new(self.events.dropped());
        unpublished.encode(encoder.encode_descriptor(
            "run_events_unpublished",
            "Run events not published on NATS because the queue to the connection was full \
             (events.publish_queue or its bytes); they stay replayable from the owner",
            None,
            unpublished.metric_type(),
        )?)
    }
}
