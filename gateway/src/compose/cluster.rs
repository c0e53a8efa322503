//! Joining a cluster on NATS from the `[cluster]` section.

use std::time::Duration;

use awaken_actors::runtime::AgentRuntimeBuilder;
use awaken_cluster::events::EventsConfig;
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use awaken_cluster::shards::ShardCount;

use super::invalid;
use super::nats::{self, ServerErrors};
use crate::config::ClusterConfig;
use crate::error::{GatewayError, Result};

/// Connects to NATS and starts a cluster node running `builder`'s runtime; it has
/// joined the membership when this returns.
pub async fn join_cluster(
    cluster: &ClusterConfig,
    events: EventsConfig,
    backend_wait: Duration,
    builder: AgentRuntimeBuilder,
) -> Result<ClusterNode> {
    let node_id = cluster
        .node_id
        .clone()
        .unwrap_or_else(|| format!("node-{}", uuid::Uuid::now_v7().simple()));
    let node_id = NodeId::new(node_id).map_err(|e| invalid("cluster.node_id", e))?;
    let mut config = NodeConfig::new(node_id);
    config.shards.count =
        ShardCount::new(cluster.shards).map_err(|e| invalid("cluster.shards", e))?;
    config.shards.lease_ttl = Duration::from_secs(cluster.lease_ttl_secs);
    config.membership.ttl = config.shards.lease_ttl;
    config.decisions.ack_wait = config.shards.lease_ttl;
    config.replicas = cluster.replicas;
    config.mailbox.lease_ms = cluster.claim_lease_ms;
    config.mailbox.lease_renewal_interval = Duration::from_millis(cluster.claim_lease_ms / 5);
    config.events = events;
    config.run_input = cluster.run_input;
    config.approvals.encoding = cluster.approval_feed_encoding;
    config.backend_wait = backend_wait;
    // A request routed to a thread's owner waits as long for the owner as it
    // waits for the mailbox: a shard without an owner after a NATS outage is
    // one more backend coming back.
    config.routing.owner_wait = config.routing.owner_wait.max(backend_wait);
    let errors = ServerErrors::default();
    let client = nats::connect(cluster, config.node_id.as_str(), errors.clone()).await?;
    tokio::select! {
        started = ClusterNode::start(client, builder, config) => {
            started.map_err(|e| GatewayError::Cluster(e.to_string()))
        }
        denied = errors.denied() => Err(GatewayError::Cluster(format!(
            "NATS refused the node a subject it needs ({denied}): \
             docs/security.md lists a node's permissions"
        ))),
    }
}
