//! Shards: every thread belongs to one of `N` shards, and each shard has at most one
//! owner node at a time, through a lease in a KV bucket whose revision is the
//! fencing token of the owner's checkpoints.

mod assignment;
mod contract;
mod handoff;
mod keeper;
mod lease;
mod meters;
mod owner;
mod runtime;
mod tenure;

use awaken_actors::ids::ThreadId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ClusterError;

pub use assignment::{preference, quota};
pub use contract::{Ownership, ShardEvent, ShardOwnerConfig};
pub use handoff::{HandOffs, ShardPlacement};
pub use lease::{DEFAULT_SHARDS_BUCKET, HeldLease, Holder, LeaseTable, ShardLease};
pub use meters::LeaseMeters;
pub use owner::{ShardOwner, ShardedFence};
pub use runtime::RuntimeShards;
pub use tenure::Tenure;

/// The number of shards when the cluster is created without one.
pub const DEFAULT_SHARD_COUNT: u32 = 256;

/// One shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShardId(pub u32);

impl std::fmt::Display for ShardId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// How many shards the cluster has: fixed when it is created, the same on every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardCount(u32);

impl ShardCount {
    /// Validates a shard count (1–65,536).
    pub fn new(count: u32) -> Result<Self, ClusterError> {
        if (1..=65_536).contains(&count) {
            Ok(Self(count))
        } else {
            Err(ClusterError::InvalidInput(format!(
                "shard count {count}: use 1–65536"
            )))
        }
    }

    /// The count.
    pub fn get(self) -> u32 {
        self.0
    }

    /// Every shard.
    pub fn all(self) -> impl Iterator<Item = ShardId> {
        (0..self.0).map(ShardId)
    }

    /// The thread's shard: the first 8 bytes of the SHA-256 of its id, big-endian,
    /// modulo the count — easy to compute in any language.
    pub fn shard_of(self, thread_id: &ThreadId) -> ShardId {
        let digest = Sha256::digest(thread_id.as_str().as_bytes());
        let mut head = [0_u8; 8];
        head.copy_from_slice(&digest[..8]);
        ShardId((u64::from_be_bytes(head) % u64::from(self.0)) as u32)
    }
}

impl Default for ShardCount {
    fn default() -> Self {
        Self(DEFAULT_SHARD_COUNT)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_shard_of_a_thread_is_pinned() {
        // Golden values: other programs compute shards the same way.
        let count = ShardCount::default();
        let shard = |id: &str| count.shard_of(&ThreadId::new(id).unwrap()).0;
        assert_eq!(shard("thread-1"), shard("thread-1"));
        let digest = Sha256::digest(b"thread-1");
        let expected = u64::from_be_bytes(digest[..8].try_into().unwrap()) % 256;
        assert_eq!(u64::from(shard("thread-1")), expected);
        assert!(ShardCount::new(0).is_err());
        assert!(ShardCount::new(65_537).is_err());
    }

    #[test]
    fn threads_spread_over_shards() {
        let count = ShardCount::new(16).unwrap();
        let mut hits = [0_u32; 16];
        for n in 0..16_000 {
            let thread = ThreadId::new(format!("t-{n}")).unwrap();
            hits[count.shard_of(&thread).0 as usize] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
    }
}
