//! Reading the latest value of every key under a prefix, in one consumer.
//!
//! `kv::Store::keys` only yields names and a `get` per key would cost a round trip
//! each; an ordered consumer that delivers the last message per subject streams all
//! values at once. A scan stops after the entries that existed when it started, so
//! it ends even while writers keep writing.

use std::time::{Duration, SystemTime};

use async_nats::jetstream::consumer::{DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::kv;
use bytes::Bytes;
use futures::StreamExt;

use crate::error::ClusterError;
use crate::streams::ordered_consumer;

/// Longest wait for the next entry of a scan.
pub(crate) const SCAN_IDLE_TIMEOUT: Duration = Duration::from_secs(2);

/// One key's latest value.
#[derive(Debug, Clone)]
pub(crate) struct Latest {
    /// The key, without the bucket prefix.
    pub(crate) key: String,
    /// Its revision (the stream sequence of the value).
    pub(crate) revision: u64,
    /// When the server stored it (by the server's clock): with a bucket's
    /// `max_age`, when it expires.
    pub(crate) written_at: SystemTime,
    /// The value.
    pub(crate) value: Bytes,
}

/// The latest value of every live key that starts with `key_prefix` (which must end
/// with a `.`), in revision order. Deleted and purged keys are skipped.
pub(crate) async fn latest_under(
    client: &async_nats::Client,
    store: &kv::Store,
    key_prefix: &str,
) -> Result<Vec<Latest>, ClusterError> {
    let mut feed = follow_under(client, store, key_prefix).await?;
    let mut found = Vec::new();
    while !feed.caught_up() {
        // Entries counted as pending may expire (buckets with `max_age`) before they
        // are delivered; the scan would then wait forever. A stalled scan fails and
        // its caller scans again later.
        let next = tokio::time::timeout(SCAN_IDLE_TIMEOUT, feed.next())
            .await
            .map_err(|_| {
                ClusterError::Unexpected("kv scan stalled (entries expired?)".to_owned())
            })?;
        match next {
            Some(Ok(Change::Put(latest))) => found.push(latest),
            Some(Ok(Change::Removed)) => {}
            Some(Err(error)) => return Err(error),
            None => return Err(ClusterError::Unexpected("kv scan ended early".to_owned())),
        }
    }
    Ok(found)
}

/// A change to a key, as a [`Feed`] delivers it.
#[derive(Debug, Clone)]
enum Change {
    /// The key was written.
    Put(Latest),
    /// The key was deleted or purged.
    Removed,
}

/// The latest value of every key under a prefix, in revision order: one ordered
/// consumer.
struct Feed {
    messages: push::Ordered,
    prefix: String,
    /// Entries of the initial state not delivered yet.
    remaining: u64,
}

/// Starts a [`Feed`] of the keys that start with `key_prefix` (ending with a `.`).
async fn follow_under(
    client: &async_nats::Client,
    store: &kv::Store,
    key_prefix: &str,
) -> Result<Feed, ClusterError> {
    let consumer = ordered_consumer(
        &store.stream,
        push::OrderedConfig {
            deliver_subject: client.new_inbox(),
            description: Some("awaken kv feed".to_owned()),
            filter_subject: format!("{}{key_prefix}>", store.prefix),
            deliver_policy: DeliverPolicy::LastPerSubject,
            replay_policy: ReplayPolicy::Instant,
            ..Default::default()
        },
    )
    .await?;
    let remaining = consumer.cached_info().num_pending;
    Ok(Feed {
        messages: consumer.messages().await.map_err(ClusterError::nats)?,
        prefix: store.prefix.clone(),
        remaining,
    })
}

impl Feed {
    /// Whether every entry that existed when the feed started was delivered.
    fn caught_up(&self) -> bool {
        self.remaining == 0
    }

    /// The next change; `None` when the consumer ended for good.
    async fn next(&mut self) -> Option<Result<Change, ClusterError>> {
        let message = match self.messages.next().await? {
            Ok(message) => message,
            Err(error) => return Some(Err(ClusterError::nats(error))),
        };
        let info = match message.info() {
            Ok(info) => info,
            Err(error) => return Some(Err(ClusterError::nats(error))),
        };
        let (revision, pending) = (info.stream_sequence, info.pending);
        let written_at = SystemTime::from(info.published);
        self.remaining = self.remaining.saturating_sub(1).min(pending);
        let key = message
            .subject
            .strip_prefix(self.prefix.as_str())
            .unwrap_or(message.subject.as_str())
            .to_owned();
        let removed = message
            .headers
            .as_ref()
            .and_then(|headers| headers.get("KV-Operation"))
            .is_some_and(|op| op.as_str() != "PUT");
        Some(Ok(if removed {
            Change::Removed
        } else {
            Change::Put(Latest {
                key,
                revision,
                written_at,
                value: message.payload.clone(),
            })
        }))
    }
}
