//! Keeping a node's runtime in step with the shards it owns.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::store::FencingToken;

use super::{HandOffs, ShardCount, ShardEvent, ShardId};

/// How often a hand-off looks whether its shards' runs are done.
const HAND_OFF_POLL: Duration = Duration::from_millis(20);

/// Evicts a shard's threads from the runtime when the node gives the shard up or
/// loses it, so no warm core or actor outlives the node's ownership; before a
/// shard is given up, lets its executing runs finish here.
#[derive(Debug, Clone)]
pub struct RuntimeShards {
    runtime: AgentRuntime,
    count: ShardCount,
    handoffs: Arc<HandOffs>,
}

impl RuntimeShards {
    /// Follows shard changes for `runtime` in a cluster of `count` shards;
    /// `handoffs` tells the node's placement which shards take no new work.
    pub fn new(runtime: AgentRuntime, count: ShardCount, handoffs: Arc<HandOffs>) -> Self {
        Self {
            runtime,
            count,
            handoffs,
        }
    }

    /// Evicts the threads of `shards`, hashing each thread of the node once
    /// whatever the number of shards: a node leaving gives up all of its shards
    /// together, and a scan per shard would hash every thread that many times.
    async fn evict(&self, shards: &[ShardId]) {
        let count = self.count;
        self.runtime
            .evict_threads(|thread_id| shards.contains(&count.shard_of(thread_id)))
            .await;
    }
}

#[async_trait]
impl ShardEvent for RuntimeShards {
    async fn acquired(&self, shard: ShardId, token: FencingToken) {
        self.handoffs.end(shard);
        tracing::info!(%shard, token = token.0, "shard acquired");
    }

    async fn handing_off(&self, shards: &[ShardId]) {
        self.handoffs.begin(shards);
        let count = self.count;
        // Thread statuses have no change signal: look again shortly.
        while self
            .runtime
            .any_executing(|thread_id| shards.contains(&count.shard_of(thread_id)))
            .await
        {
            tokio::time::sleep(HAND_OFF_POLL).await;
        }
    }

    async fn draining(&self, shards: &[ShardId]) {
        // Idle threads are checkpointed already; a step still running (the
        // hand-off gave up on it) is stopped and resumed by the next owner from
        // its last checkpoint.
        self.evict(shards).await;
        for shard in shards {
            self.handoffs.end(*shard);
        }
    }

    async fn lost(&self, shard: ShardId) {
        self.handoffs.end(shard);
        self.evict(&[shard]).await;
        tracing::warn!(%shard, "lost shard evicted: none of its threads is left on this node");
    }
}
