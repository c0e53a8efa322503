//! Keeping a node's runtime in step with the shards it owns.

use async_trait::async_trait;
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::store::FencingToken;

use super::{ShardCount, ShardEvent, ShardId};

/// Evicts a shard's threads from the runtime when the node gives the shard up or
/// loses it, so no warm core or actor outlives the node's ownership.
#[derive(Debug, Clone)]
pub struct RuntimeShards {
    runtime: AgentRuntime,
    count: ShardCount,
}

impl RuntimeShards {
    /// Follows shard changes for `runtime` in a cluster of `count` shards.
    pub fn new(runtime: AgentRuntime, count: ShardCount) -> Self {
        Self { runtime, count }
    }

    async fn evict(&self, shard: ShardId) {
        let count = self.count;
        self.runtime
            .evict_threads(|thread_id| count.shard_of(thread_id) == shard)
            .await;
    }
}

#[async_trait]
impl ShardEvent for RuntimeShards {
    async fn acquired(&self, shard: ShardId, token: FencingToken) {
        tracing::info!(%shard, token = token.0, "shard acquired");
    }

    async fn draining(&self, shard: ShardId) {
        // Idle threads are checkpointed already; a running step is stopped and
        // resumed by the next owner from its last checkpoint.
        self.evict(shard).await;
    }

    async fn lost(&self, shard: ShardId) {
        self.evict(shard).await;
        tracing::warn!(%shard, "lost shard evicted: none of its threads is left on this node");
    }
}
