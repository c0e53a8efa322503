//! What shard ownership promises the rest of the node, shared by the owner's
//! handle and its keeper loop: the owned shards with their fencing tokens, the
//! events of a shard changing hands, and the tunables.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use awaken_actors::store::FencingToken;

use super::{ShardCount, ShardId};

/// The shards this node owns, with the fencing token of each.
pub type Ownership = BTreeMap<ShardId, FencingToken>;

/// What the node must do when its shards change hands.
#[async_trait]
pub trait ShardEvent: Send + Sync + 'static {
    /// The node now owns `shard` under `token`.
    async fn acquired(&self, shard: ShardId, token: FencingToken);
    /// The node will give `shards` up (membership changed): start no new work on
    /// their threads and resolve once none runs here any more. The keeper renews
    /// its leases meanwhile and stops waiting after two lease TTLs.
    async fn handing_off(&self, _shards: &[ShardId]) {}
    /// The node is about to give `shards` up: stop their threads (checkpoint and
    /// passivate) before the leases are released. One call for all the shards
    /// given up together, so the node's threads are looked at once.
    async fn draining(&self, shards: &[ShardId]);
    /// The node lost `shard` without draining (lease expired or taken): drop its
    /// threads' memory now.
    async fn lost(&self, shard: ShardId);
}

/// Tunables of shard ownership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOwnerConfig {
    /// How many shards the cluster has.
    pub count: ShardCount,
    /// A lease not renewed for this long expires (default 5 s).
    pub lease_ttl: Duration,
}

impl Default for ShardOwnerConfig {
    fn default() -> Self {
        Self {
            count: ShardCount::default(),
            lease_ttl: Duration::from_secs(5),
        }
    }
}
