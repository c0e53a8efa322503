//! Membership: nodes register and heartbeat in a KV bucket; every node keeps a live
//! view of who is there.
//!
//! A node's entry is its heartbeat: the bucket's `max_age` is the TTL, so an entry
//! not refreshed for a TTL is expired by the server — no node clock is trusted. A
//! graceful leave deletes the entry (watchers see it at once); a crashed node's entry
//! expires, which watchers do not see, so the view is also rebuilt from the key list
//! every quarter TTL. Joins and leaves therefore show within the TTL (a crash within
//! 1¼ TTL of the node's last heartbeat).

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::codec;
use crate::error::ClusterError;
use crate::kv::{BucketSpec, ensure_bucket};
use crate::kv_scan::SCAN_IDLE_TIMEOUT;

/// The KV bucket membership lives in, unless configured otherwise.
pub const DEFAULT_MEMBERS_BUCKET: &str = "awaken_members";

/// A node's id: what it registers under (a KV key, so `[A-Za-z0-9_=-]+`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeId(String);

impl NodeId {
    /// Validates a node id.
    pub fn new(id: impl Into<String>) -> Result<Self, ClusterError> {
        let id = id.into();
        let valid = !id.is_empty()
            && id.len() <= 128
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'=');
        if valid {
            Ok(Self(id))
        } else {
            Err(ClusterError::InvalidInput(format!(
                "node id {id:?}: use 1–128 characters from [A-Za-z0-9_=-]"
            )))
        }
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for NodeId {
    type Error = ClusterError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<NodeId> for String {
    fn from(id: NodeId) -> Self {
        id.0
    }
}

/// What a node publishes about itself (MessagePack, named fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// The node.
    pub node_id: NodeId,
    /// When the node joined, unix millis (its own clock; informational).
    pub joined_at_ms: u64,
    /// Where the node's gateway listens, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_url: Option<String>,
}

/// Membership settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipConfig {
    /// The KV bucket.
    pub bucket: String,
    /// A node missing heartbeats this long is gone.
    pub ttl: Duration,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        Self {
            bucket: DEFAULT_MEMBERS_BUCKET.to_owned(),
            ttl: Duration::from_secs(10),
        }
    }
}

/// This node's registration and its view of the cluster. Dropping it stops the
/// heartbeats without deregistering (as a crash would); call [`leave`](Self::leave)
/// to go gracefully.
#[derive(Debug)]
pub struct Membership {
    node_id: NodeId,
    bucket: kv::Store,
    view: watch::Receiver<BTreeSet<NodeId>>,
    heartbeat: JoinHandle<()>,
    watcher: JoinHandle<()>,
}

impl Membership {
    /// Registers `record` and starts heartbeating and watching.
    pub async fn join(
        js: &jetstream::Context,
        config: &MembershipConfig,
        record: MemberRecord,
    ) -> Result<Self, ClusterError> {
        let spec = BucketSpec::new(&config.bucket).with_max_age(config.ttl);
        let bucket = ensure_bucket(js, &spec).await?;
        let payload = codec::encode(&record)?;
        let node_id = record.node_id;
        bucket
            .put(node_id.as_str(), payload.clone())
            .await
            .map_err(ClusterError::nats)?;
        let (sender, view) = watch::channel(scan(&bucket).await?);
        let heartbeat = tokio::spawn(heartbeat(
            bucket.clone(),
            node_id.clone(),
            payload,
            config.ttl / 3,
        ));
        let watcher = tokio::spawn(keep_view(bucket.clone(), sender, config.ttl / 4));
        Ok(Self {
            node_id,
            bucket,
            view,
            heartbeat,
            watcher,
        })
    }

    /// This node.
    pub fn node_id(&self) -> &NodeId {
        &self.node_id
    }

    /// The nodes alive now, this one included.
    pub fn members(&self) -> BTreeSet<NodeId> {
        self.view.borrow().clone()
    }

    /// A receiver that sees every change of the member set from now on.
    pub fn subscribe(&self) -> watch::Receiver<BTreeSet<NodeId>> {
        let mut view = self.view.clone();
        view.mark_unchanged();
        view
    }

    /// Stops heartbeating and deregisters: other nodes see the leave at once.
    pub async fn leave(self) -> Result<(), ClusterError> {
        self.heartbeat.abort();
        self.watcher.abort();
        self.bucket
            .delete(self.node_id.as_str())
            .await
            .map_err(ClusterError::nats)
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.heartbeat.abort();
        self.watcher.abort();
    }
}

async fn heartbeat(bucket: kv::Store, node_id: NodeId, payload: bytes::Bytes, every: Duration) {
    let mut ticks = tokio::time::interval(every.max(Duration::from_millis(10)));
    ticks.tick().await;
    loop {
        ticks.tick().await;
        if let Err(error) = bucket.put(node_id.as_str(), payload.clone()).await {
            tracing::warn!(node = %node_id, %error, "membership heartbeat failed");
        }
    }
}

/// Applies watch events as they come and rebuilds the set from the key list every
/// `rescan` (expired entries leave no event).
async fn keep_view(bucket: kv::Store, view: watch::Sender<BTreeSet<NodeId>>, rescan: Duration) {
    let mut events = match bucket.watch_all().await {
        Ok(events) => Some(events),
        Err(error) => {
            tracing::warn!(%error, "membership watch failed; relying on rescans");
            None
        }
    };
    let mut ticks = tokio::time::interval(rescan.max(Duration::from_millis(10)));
    loop {
        tokio::select! {
            event = async {
                match events.as_mut() {
                    Some(events) => events.next().await,
                    None => std::future::pending().await,
                }
            } => match event {
                Some(Ok(entry)) => {
                    let Ok(node) = NodeId::new(entry.key.clone()) else { continue };
                    view.send_if_modified(|members| match entry.operation {
                        kv::Operation::Put => members.insert(node),
                        kv::Operation::Delete | kv::Operation::Purge => members.remove(&node),
                    });
                }
                Some(Err(error)) => tracing::warn!(%error, "membership watch error"),
                None => events = None,
            },
            _ = ticks.tick() => match scan(&bucket).await {
                Ok(members) => {
                    view.send_if_modified(|current| {
                        let changed = *current != members;
                        *current = members;
                        changed
                    });
                }
                Err(error) => tracing::warn!(%error, "membership rescan failed"),
            },
        }
    }
}

/// The nodes whose entries exist now.
async fn scan(bucket: &kv::Store) -> Result<BTreeSet<NodeId>, ClusterError> {
    let keys = bucket.keys().await.map_err(ClusterError::nats)?;
    // Entries expiring while the key list streams can leave it waiting forever for
    // the last one; a stalled scan fails and the next rescan starts afresh.
    let keys: Vec<Result<String, _>> = tokio::time::timeout(SCAN_IDLE_TIMEOUT, keys.collect())
        .await
        .map_err(|_| ClusterError::Nats("member scan stalled".to_owned()))?;
    Ok(keys
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|key| NodeId::new(key).ok())
        .collect())
}
