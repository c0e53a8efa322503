//! Membership: nodes register and heartbeat in a KV bucket; every node keeps a live
//! view of who is there.
//!
//! A node's entry is its heartbeat: the bucket's `max_age` is the TTL, so an entry
//! not refreshed for a TTL is expired by the server — no node clock decides who is
//! alive. A graceful leave deletes the entry (watchers see it at once); a crashed
//! node's entry expires, which watchers do not see, so a member's entry is read
//! again when its last heartbeat is due to expire (clocks only time that look; the
//! server's answer decides), and the view is rebuilt from the key list every
//! quarter TTL in case a watch misses something. A crash therefore shows about a
//! TTL after the node's last heartbeat.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::{self, kv};
use awaken_actors::backoff::Backoff;
use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::codec;
use crate::error::ClusterError;
use crate::expiry::{rechecks, time_left};
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
    /// What this node's version understands that earlier ones do not (e.g.
    /// [`RUN_INPUT_IN_LEDGER`](crate::run_input::RUN_INPUT_IN_LEDGER)): a node
    /// uses a newer form only once every member lists it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
}

/// Membership settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipConfig {
    /// The KV bucket.
    pub bucket: String,
    /// A node missing heartbeats this long is gone.
    pub ttl: Duration,
    /// Copies of the bucket on a clustered NATS: with one, losing its server
    /// stops every heartbeat, and the members' shards with them.
    pub replicas: usize,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        Self {
            bucket: DEFAULT_MEMBERS_BUCKET.to_owned(),
            ttl: Duration::from_secs(10),
            replicas: 1,
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
    features: watch::Receiver<BTreeMap<NodeId, Vec<String>>>,
    heartbeat: AbortOnDropHandle<()>,
    watcher: AbortOnDropHandle<()>,
}

impl Membership {
    /// Registers `record` and starts heartbeating and watching.
    pub async fn join(
        js: &jetstream::Context,
        config: &MembershipConfig,
        record: MemberRecord,
    ) -> Result<Self, ClusterError> {
        let spec = BucketSpec::new(&config.bucket)
            .with_max_age(config.ttl)
            .with_replicas(config.replicas);
        let bucket = ensure_bucket(js, &spec).await?;
        let payload = codec::encode(&record)?;
        let node_id = record.node_id;
        Box::pin(first_put(&bucket, node_id.as_str(), &payload)).await?;
        let (sender, view) = watch::channel(scan(&bucket).await?);
        let (feature_sender, features) = watch::channel(BTreeMap::new());
        let heartbeat = AbortOnDropHandle::new(tokio::spawn(heartbeat(
            bucket.clone(),
            node_id.clone(),
            payload,
            config.ttl / 3,
        )));
        let watcher = AbortOnDropHandle::new(tokio::spawn(keep_view(
            bucket.clone(),
            sender,
            feature_sender,
            config.ttl,
        )));
        Ok(Self {
            node_id,
            bucket,
            view,
            features,
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

    /// What the members' versions understand, as their records say.
    pub fn features(&self) -> MemberFeatures {
        MemberFeatures {
            members: self.view.clone(),
            features: self.features.clone(),
        }
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

/// The members registered in `bucket` now, without joining: none when the bucket
/// does not exist (no cluster ever used this server under that name).
pub async fn registered(
    js: &jetstream::Context,
    bucket: &str,
) -> Result<BTreeSet<NodeId>, ClusterError> {
    use jetstream::ErrorCode;
    use jetstream::context::GetStreamErrorKind;

    match js.get_stream(format!("KV_{bucket}")).await {
        Ok(_) => {}
        Err(error)
            if matches!(error.kind(), GetStreamErrorKind::JetStream(ref e)
                if e.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
        {
            return Ok(BTreeSet::new());
        }
        Err(error) => return Err(ClusterError::nats(error)),
    }
    let store = js.get_key_value(bucket).await.map_err(ClusterError::nats)?;
    scan(&store).await
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

/// Which features every member of the cluster has, as the members' records say.
#[derive(Debug, Clone)]
pub struct MemberFeatures {
    members: watch::Receiver<BTreeSet<NodeId>>,
    features: watch::Receiver<BTreeMap<NodeId, Vec<String>>>,
}

impl MemberFeatures {
    /// Whether every member alive now lists `feature`. A member whose record was
    /// not read yet counts as lacking it.
    pub fn everyone_has(&self, feature: &str) -> bool {
        let features = self.features.borrow();
        self.members.borrow().iter().all(|member| {
            features
                .get(member)
                .is_some_and(|listed| listed.iter().any(|f| f == feature))
        })
    }

    /// Waits until the members or their features change (an error once the
    /// membership stopped).
    pub async fn changed(&mut self) -> Result<(), ClusterError> {
        let changed = tokio::select! {
            changed = self.members.changed() => changed,
            changed = self.features.changed() => changed,
        };
        changed.map_err(|_| ClusterError::Unexpected("the membership view stopped".into()))
    }
}

/// Applies watch events as they come, reads a member's entry when it is due to
/// expire (expired entries leave no event) and rebuilds the set from the key list
/// every `ttl / 4`. The features of a member are those of the last record the
/// watch brought (a rescan lists keys only).
async fn keep_view(
    bucket: kv::Store,
    view: watch::Sender<BTreeSet<NodeId>>,
    features: watch::Sender<BTreeMap<NodeId, Vec<String>>>,
    ttl: Duration,
) {
    // With history: the members present now come with their write times too.
    let mut events = match bucket.watch_with_history(">").await {
        Ok(events) => Some(events),
        Err(error) => {
            tracing::warn!(%error, "membership watch failed; relying on rescans");
            None
        }
    };
    let mut ticks = tokio::time::interval((ttl / 4).max(Duration::from_millis(10)));
    let mut expiries = Expiries::new(ttl / 4);
    loop {
        let due = async {
            match expiries.next() {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = async {
                match events.as_mut() {
                    Some(events) => events.next().await,
                    None => std::future::pending().await,
                }
            } => match event {
                Some(Ok(entry)) => {
                    let Ok(node) = NodeId::new(entry.key.clone()) else { continue };
                    match entry.operation {
                        kv::Operation::Put => {
                            // Already past by this node's clock: look it up at once.
                            let at = expiry_of(&entry, ttl).unwrap_or_else(Instant::now);
                            expiries.heard(node.clone(), at);
                            let listed = codec::decode::<MemberRecord>(&entry.value)
                                .map(|record| record.features)
                                .unwrap_or_default();
                            features.send_if_modified(|known| {
                                known.insert(node.clone(), listed.clone()).as_ref() != Some(&listed)
                            });
                            view.send_if_modified(|members| members.insert(node));
                        }
                        kv::Operation::Delete | kv::Operation::Purge => {
                            expiries.forget(&node);
                            features.send_if_modified(|known| known.remove(&node).is_some());
                            view.send_if_modified(|members| members.remove(&node));
                        }
                    }
                }
                Some(Err(error)) => tracing::warn!(%error, "membership watch error"),
                None => events = None,
            },
            _ = ticks.tick() => rescan(&bucket, &view, &mut expiries).await,
            () = due => look_up_due(&bucket, &view, &mut expiries, ttl).await,
        }
    }
}

/// Reads the entry of every member due to expire by now: gone, it leaves the view;
/// still there, it is looked up again later. One read per member, which the server
/// answers from what it holds: a scan started as the entry expires could wait for it.
async fn look_up_due(
    bucket: &kv::Store,
    view: &watch::Sender<BTreeSet<NodeId>>,
    expiries: &mut Expiries,
    ttl: Duration,
) {
    let now = Instant::now();
    for node in expiries.due(now) {
        match bucket.entry(node.as_str()).await {
            Ok(Some(entry)) if entry.operation == kv::Operation::Put => {
                match expiry_of(&entry, ttl) {
                    Some(at) => expiries.heard(node, at),
                    None => expiries.still_there(&node, now),
                }
            }
            Ok(_) => {
                expiries.forget(&node);
                view.send_if_modified(|members| members.remove(&node));
            }
            Err(error) => {
                tracing::warn!(%error, %node, "membership lookup failed");
                expiries.still_there(&node, now);
            }
        }
    }
}

/// Rebuilds the view from the key list.
async fn rescan(
    bucket: &kv::Store,
    view: &watch::Sender<BTreeSet<NodeId>>,
    expiries: &mut Expiries,
) {
    match scan(bucket).await {
        Ok(members) => {
            expiries.keep_only(&members);
            view.send_if_modified(|current| {
                let changed = *current != members;
                *current = members;
                changed
            });
        }
        Err(error) => tracing::warn!(%error, "membership rescan failed"),
    }
}

/// When `entry` expires, on this node's monotonic clock: its write time (by the
/// server's clock) plus the TTL, never further than a TTL from now. `None` when
/// that time has passed: the entry outlived its expiry, and taking "now" for it
/// would have it looked up again and again without a pause.
fn expiry_of(entry: &kv::Entry, ttl: Duration) -> Option<Instant> {
    let left = time_left(SystemTime::from(entry.created) + ttl, SystemTime::now())?;
    Some(Instant::now() + left.min(ttl))
}

/// When each member's entry is due to expire, so that a crashed node is looked for
/// when its heartbeat runs out rather than at the next periodic rescan.
#[derive(Debug)]
struct Expiries {
    /// Per member: when to look, and the pauses before looking again if it is
    /// still there then.
    due: BTreeMap<NodeId, (Instant, Backoff)>,
    /// The longest pause between two looks at a member past its expiry.
    max_pause: Duration,
}

impl Expiries {
    /// No member known yet; one past its expiry is looked at again at most
    /// `max_pause` apart.
    fn new(max_pause: Duration) -> Self {
        Self {
            due: BTreeMap::new(),
            max_pause,
        }
    }

    /// A heartbeat of `node` that expires at `at`.
    fn heard(&mut self, node: NodeId, at: Instant) {
        self.due.insert(node, (at, rechecks(self.max_pause)));
    }

    /// `node` left.
    fn forget(&mut self, node: &NodeId) {
        self.due.remove(node);
    }

    /// A scan listed `members`: the others are gone.
    fn keep_only(&mut self, members: &BTreeSet<NodeId>) {
        self.due.retain(|node, _| members.contains(node));
    }

    /// The members due to expire by `now`.
    fn due(&self, now: Instant) -> Vec<NodeId> {
        self.due
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(node, _)| node.clone())
            .collect()
    }

    /// `node` was still there at `now`, past its expiry: look again after its
    /// pause, which doubles up to `max_pause`.
    fn still_there(&mut self, node: &NodeId, now: Instant) {
        if let Some((at, recheck)) = self.due.get_mut(node) {
            *at = now + recheck.next_pause();
        }
    }

    /// The next time a member is due to expire.
    fn next(&self) -> Option<Instant> {
        self.due.values().map(|(at, _)| *at).min()
    }
}

/// The nodes whose entries exist now.
async fn scan(bucket: &kv::Store) -> Result<BTreeSet<NodeId>, ClusterError> {
    // The consumer's creation is a request: one lost in a reconnect would wait the
    // client's 10 s request timeout, freezing the view that long after a NATS
    // restart; bounded, the next rescan (TTL/4 later) asks again.
    let keys = tokio::time::timeout(SCAN_IDLE_TIMEOUT, bucket.keys())
        .await
        .map_err(|_| ClusterError::Unexpected("member scan not answered".to_owned()))?
        .map_err(ClusterError::nats)?;
    // Entries expiring while the key list streams can leave it waiting forever for
    // the last one; a stalled scan fails and the next rescan starts afresh.
    let keys: Vec<Result<String, _>> = tokio::time::timeout(SCAN_IDLE_TIMEOUT, keys.collect())
        .await
        .map_err(|_| ClusterError::Unexpected("member scan stalled".to_owned()))?;
    Ok(keys
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|key| NodeId::new(key).ok())
        .collect())
}

/// Writes this node's record right after the bucket was opened. When another node
/// created the bucket's stream a moment ago, nats-server 2.9 may not route
/// publishes to it yet ("no stream found for given subject"): such a write is
/// tried again briefly before joining fails.
async fn first_put(bucket: &kv::Store, key: &str, payload: &Bytes) -> Result<(), ClusterError> {
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(320));
    for _ in 0..5 {
        match bucket.put(key, payload.clone()).await {
            Ok(_) => return Ok(()),
            Err(error) => {
                tracing::debug!(%error, "joining: the members bucket took no write yet; retrying");
                backoff.wait().await;
            }
        }
    }
    bucket
        .put(key, payload.clone())
        .await
        .map(|_| ())
        .map_err(ClusterError::nats)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn node(id: &str) -> NodeId {
        NodeId::new(id).unwrap()
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_next_look_is_the_earliest_expiry() {
        let now = Instant::now();
        let mut expiries = Expiries::new(250 * MS);
        assert_eq!(expiries.next(), None);
        expiries.heard(node("a"), now + 900 * MS);
        expiries.heard(node("b"), now + 400 * MS);
        assert_eq!(expiries.next(), Some(now + 400 * MS));
        // A new heartbeat moves the member's expiry on.
        expiries.heard(node("b"), now + 1_200 * MS);
        assert_eq!(expiries.next(), Some(now + 900 * MS));
        expiries.forget(&node("a"));
        assert_eq!(expiries.next(), Some(now + 1_200 * MS));
    }

    #[test]
    fn members_due_are_those_past_their_expiry() {
        let now = Instant::now();
        let mut expiries = Expiries::new(250 * MS);
        expiries.heard(node("a"), now + 100 * MS);
        expiries.heard(node("b"), now + 500 * MS);
        assert_eq!(expiries.due(now), Vec::<NodeId>::new());
        assert_eq!(expiries.due(now + 100 * MS), [node("a")]);
        assert_eq!(expiries.due(now + 500 * MS), [node("a"), node("b")]);
    }

    #[test]
    fn a_member_the_scan_no_longer_lists_is_not_looked_for() {
        let now = Instant::now();
        let mut expiries = Expiries::new(250 * MS);
        expiries.heard(node("a"), now + 100 * MS);
        expiries.heard(node("b"), now + 500 * MS);
        expiries.keep_only(&BTreeSet::from([node("b")]));
        assert_eq!(expiries.next(), Some(now + 500 * MS));
    }

    #[test]
    fn a_member_still_there_past_its_expiry_is_looked_for_again_less_and_less_often() {
        let now = Instant::now();
        let mut expiries = Expiries::new(250 * MS);
        expiries.heard(node("a"), now);
        let mut looks = Vec::new();
        let mut at = now;
        for _ in 0..5 {
            expiries.still_there(&node("a"), at);
            let next = expiries.next().unwrap();
            looks.push(next - at);
            at = next;
        }
        assert_eq!(looks, [50 * MS, 100 * MS, 200 * MS, 250 * MS, 250 * MS]);
        // A new heartbeat starts the pauses over.
        expiries.heard(node("a"), at + 1_000 * MS);
        expiries.still_there(&node("a"), at + 1_000 * MS);
        assert_eq!(expiries.next(), Some(at + 1_050 * MS));
    }
}
