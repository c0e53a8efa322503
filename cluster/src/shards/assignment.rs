//! Fair shard assignment, computed by every node from the same member list.
//!
//! Node `i` (by sorted node id) of `k` should own `N / k` shards, one more when
//! `i < N mod k`: every node is within one shard of its share. Which shards a node
//! tries to take is its rendezvous order (highest hash of node and shard first), so
//! nodes mostly go for different shards and a shard tends to return to the node
//! that had it.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use super::{ShardCount, ShardId};
use crate::membership::NodeId;

/// How many shards `node` should own among `members` (it counts itself in).
pub fn quota(count: ShardCount, members: &BTreeSet<NodeId>, node: &NodeId) -> u32 {
    let nodes = members.len() as u32 + u32::from(!members.contains(node));
    let rank = members.iter().filter(|member| *member < node).count() as u32;
    count.get() / nodes + u32::from(rank < count.get() % nodes)
}

/// `shards` ordered by how much `node` prefers them, most preferred first.
pub fn preference(node: &NodeId, shards: impl IntoIterator<Item = ShardId>) -> Vec<ShardId> {
    let mut ranked: Vec<(u64, ShardId)> = shards
        .into_iter()
        .map(|shard| {
            let mut hasher = Sha256::new();
            hasher.update(node.as_str().as_bytes());
            hasher.update(shard.0.to_be_bytes());
            let digest = hasher.finalize();
            let mut head = [0_u8; 8];
            head.copy_from_slice(&digest[..8]);
            (u64::from_be_bytes(head), shard)
        })
        .collect();
    ranked.sort_unstable_by(|a, b| b.cmp(a));
    ranked.into_iter().map(|(_, shard)| shard).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn nodes(ids: &[&str]) -> BTreeSet<NodeId> {
        ids.iter().map(|id| NodeId::new(*id).unwrap()).collect()
    }

    #[test]
    fn quotas_add_up_and_differ_by_at_most_one() {
        let count = ShardCount::new(256).unwrap();
        for k in 1..=7 {
            let names: Vec<String> = (0..k).map(|i| format!("node-{i}")).collect();
            let members = nodes(&names.iter().map(String::as_str).collect::<Vec<_>>());
            let quotas: Vec<u32> = members.iter().map(|n| quota(count, &members, n)).collect();
            assert_eq!(quotas.iter().sum::<u32>(), 256);
            let (min, max) = (quotas.iter().min().unwrap(), quotas.iter().max().unwrap());
            assert!(max - min <= 1, "{quotas:?}");
        }
    }

    #[test]
    fn a_node_missing_from_the_view_counts_itself() {
        let count = ShardCount::new(10).unwrap();
        let me = NodeId::new("b").unwrap();
        assert_eq!(quota(count, &nodes(&["a"]), &me), 5);
        assert_eq!(quota(count, &BTreeSet::new(), &me), 10);
    }

    #[test]
    fn preferences_are_permutations_that_differ_between_nodes() {
        let count = ShardCount::new(64).unwrap();
        let a = preference(&NodeId::new("a").unwrap(), count.all());
        let b = preference(&NodeId::new("b").unwrap(), count.all());
        assert_eq!(a.iter().copied().collect::<BTreeSet<_>>().len(), 64);
        assert_ne!(a, b);
        assert_eq!(a, preference(&NodeId::new("a").unwrap(), count.all()));
    }
}
