//! Handing a shard to another node without running its work twice.
//!
//! When membership changes, a node gives up the shards beyond its quota. Before
//! [`HandOffs`] it stopped their threads at once, and a run mid-tool continued on
//! the next owner from its last checkpoint: the call ran again. Now the keeper
//! first marks the shards as handed off — [`ShardPlacement`] then starts no new
//! work on their threads — and waits, renewing its leases meanwhile, until no run
//! executes on them here (or for two lease TTLs at most), then releases them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use awaken_actors::ThreadId;
use awaken_actors::mailbox::Placement;

use super::{ShardId, ShardedFence};

/// The shards this node is handing to others now.
#[derive(Debug, Default)]
pub struct HandOffs {
    shards: Mutex<BTreeSet<ShardId>>,
}

impl HandOffs {
    fn lock(&self) -> MutexGuard<'_, BTreeSet<ShardId>> {
        // Critical sections never panic midway; a poisoned lock holds consistent data.
        self.shards
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Marks `shards` as handed off: no new work starts on their threads.
    pub fn begin(&self, shards: &[ShardId]) {
        self.lock().extend(shards.iter().copied());
    }

    /// The shard is released, lost or taken again: no longer handed off.
    pub fn end(&self, shard: ShardId) {
        self.lock().remove(&shard);
    }

    /// Whether `shard` is being handed off.
    pub fn contains(&self, shard: ShardId) -> bool {
        self.lock().contains(&shard)
    }
}

/// Where a cluster node runs threads: those of the shards it owns, starting new
/// work only on shards it is not handing off.
#[derive(Debug, Clone)]
pub struct ShardPlacement {
    fence: ShardedFence,
    handoffs: Arc<HandOffs>,
}

impl ShardPlacement {
    /// The placement of `fence`'s shards, less `handoffs` for new work.
    pub fn new(fence: ShardedFence, handoffs: Arc<HandOffs>) -> Self {
        Self { fence, handoffs }
    }
}

impl Placement for ShardPlacement {
    fn owns(&self, thread_id: &ThreadId) -> bool {
        self.fence.owns(thread_id)
    }

    fn admits(&self, thread_id: &ThreadId) -> bool {
        self.owns(thread_id)
            && !self
                .handoffs
                .contains(self.fence.count().shard_of(thread_id))
    }
}
