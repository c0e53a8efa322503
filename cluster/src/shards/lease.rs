//! Shard leases in a KV bucket: create to acquire, compare-and-set to renew, expiry
//! by the bucket's `max_age` when the owner falls silent.
//!
//! The fencing token of a lease is the revision of the write that acquired it.
//! Revisions only grow, so whoever acquires a shard later holds a higher token, and
//! a store that has seen it refuses the older owner's checkpoints.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::{self, kv};
use awaken_actors::store::FencingToken;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::ShardId;
use crate::codec;
use crate::error::ClusterError;
use crate::kv::{BucketSpec, ensure_bucket};
use crate::kv_scan::latest_under;
use crate::membership::NodeId;

/// The KV bucket shard leases live in, unless configured otherwise.
pub const DEFAULT_SHARDS_BUCKET: &str = "awaken_shards";

const KEY_PREFIX: &str = "shard.";

/// A shard's lease as stored under `shard.<n>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardLease {
    /// The owner.
    pub node_id: NodeId,
    /// The fencing token; 0 in the acquiring write itself, whose revision it is.
    #[serde(default)]
    pub token: u64,
    /// When the owner acquired the lease, unix millis (informational).
    pub acquired_at_ms: u64,
}

/// A lease this node holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    /// The shard.
    pub shard: ShardId,
    /// The token its checkpoints carry.
    pub token: FencingToken,
    revision: u64,
    acquired_at_ms: u64,
}

/// Who holds a shard, as read from the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The owner.
    pub node_id: NodeId,
    /// Its fencing token.
    pub token: FencingToken,
    /// When the server expires the lease unless it is renewed first (the last
    /// write's time by the server's clock, plus the TTL).
    pub expires_at: SystemTime,
}

/// The shard lease bucket.
#[derive(Debug, Clone)]
pub struct LeaseTable {
    client: async_nats::Client,
    bucket: kv::Store,
    ttl: Duration,
}

fn key(shard: ShardId) -> String {
    format!("{KEY_PREFIX}{}", shard.0)
}

impl LeaseTable {
    /// Opens the lease bucket; a lease not renewed for `ttl` expires.
    pub async fn open(
        js: &jetstream::Context,
        bucket: &str,
        ttl: Duration,
        replicas: usize,
    ) -> Result<Self, ClusterError> {
        if ttl < Duration::from_secs(1) {
            return Err(ClusterError::InvalidInput(format!(
                "lease ttl {ttl:?}: at least one second"
            )));
        }
        let spec = BucketSpec::new(bucket)
            .with_max_age(ttl)
            .with_replicas(replicas);
        Ok(Self {
            client: js.client(),
            bucket: ensure_bucket(js, &spec).await?,
            ttl,
        })
    }

    /// Takes the shard if nobody holds it; `None` when someone does.
    pub async fn acquire(
        &self,
        shard: ShardId,
        node_id: &NodeId,
        now_ms: u64,
    ) -> Result<Option<HeldLease>, ClusterError> {
        let lease = ShardLease {
            node_id: node_id.clone(),
            token: 0,
            acquired_at_ms: now_ms,
        };
        match self.bucket.create(key(shard), codec::encode(&lease)?).await {
            Ok(revision) => Ok(Some(HeldLease {
                shard,
                token: FencingToken(revision),
                revision,
                acquired_at_ms: now_ms,
            })),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(ClusterError::nats(e)),
        }
    }

    /// Renews a held lease. `Ok(false)`: the lease expired or someone else holds
    /// the shard now — it is lost.
    ///
    /// A renewal whose answer was lost (a reconnect, a timeout) may still have
    /// landed, leaving this holder's revision behind its own latest write: when
    /// the entry that beat it names this node with this token, its revision is
    /// taken and the renewal sent again, rather than the lease counted as lost.
    pub async fn renew(
        &self,
        held: &mut HeldLease,
        node_id: &NodeId,
    ) -> Result<bool, ClusterError> {
        let lease = ShardLease {
            node_id: node_id.clone(),
            token: held.token.0,
            acquired_at_ms: held.acquired_at_ms,
        };
        let value = codec::encode(&lease)?;
        if let Some(revision) = self.update(held, value.clone()).await? {
            held.revision = revision;
            return Ok(true);
        }
        let Some(own) = self.own_revision(held, node_id).await? else {
            return Ok(false);
        };
        held.revision = own;
        match self.update(held, value).await? {
            Some(revision) => {
                held.revision = revision;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The compare-and-set of a renewal: the new revision, `None` when the entry
    /// is no longer at `held`'s revision.
    async fn update(&self, held: &HeldLease, value: Bytes) -> Result<Option<u64>, ClusterError> {
        match self
            .bucket
            .update(key(held.shard), value, held.revision)
            .await
        {
            Ok(revision) => Ok(Some(revision)),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(ClusterError::nats(e)),
        }
    }

    /// The revision of the shard's entry when it is still this holder's lease
    /// (written by a renewal whose answer never came).
    async fn own_revision(
        &self,
        held: &HeldLease,
        node_id: &NodeId,
    ) -> Result<Option<u64>, ClusterError> {
        let Some(entry) = self
            .bucket
            .entry(key(held.shard))
            .await
            .map_err(ClusterError::nats)?
        else {
            return Ok(None);
        };
        if entry.operation != kv::Operation::Put {
            return Ok(None);
        }
        let Ok(lease) = codec::decode::<ShardLease>(&entry.value) else {
            return Ok(None);
        };
        let ours = lease.node_id == *node_id && lease.token == held.token.0;
        Ok(ours.then_some(entry.revision))
    }

    /// Gives a held lease up, unless it was lost meanwhile (a newer holder's lease
    /// is never touched). Leaves no delete marker.
    pub async fn release(&self, held: HeldLease) -> Result<(), ClusterError> {
        self.bucket
            .stream
            .purge()
            .filter(format!("{}{}", self.bucket.prefix, key(held.shard)))
            .sequence(held.revision.saturating_add(1))
            .await
            .map_err(ClusterError::nats)?;
        Ok(())
    }

    /// Every held shard and its holder.
    pub async fn holders(&self) -> Result<BTreeMap<ShardId, Holder>, ClusterError> {
        let mut holders = BTreeMap::new();
        for entry in latest_under(&self.client, &self.bucket, KEY_PREFIX).await? {
            let Ok(shard) = entry.key[KEY_PREFIX.len()..].parse::<u32>() else {
                continue;
            };
            let Ok(lease) = codec::decode::<ShardLease>(&entry.value) else {
                continue;
            };
            let token = if lease.token == 0 {
                entry.revision
            } else {
                lease.token
            };
            holders.insert(
                ShardId(shard),
                Holder {
                    node_id: lease.node_id,
                    token: FencingToken(token),
                    expires_at: entry.written_at + self.ttl,
                },
            );
        }
        Ok(holders)
    }
}
