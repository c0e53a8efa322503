//! Reading the latest value of every key under a prefix, in one consumer.
//!
//! `kv::Store::keys` only yields names and a `get` per key would cost a round trip
//! each; an ordered consumer that delivers the last message per subject streams all
//! values at once. It stops after the entries that existed when it started, so a
//! scan ends even while writers keep writing.

use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::kv;
use bytes::Bytes;
use futures::StreamExt;

use crate::error::ClusterError;

/// Longest wait for the next entry of a scan.
pub(crate) const SCAN_IDLE_TIMEOUT: Duration = Duration::from_secs(2);

/// One key's latest value.
#[derive(Debug, Clone)]
pub(crate) struct Latest {
    /// The key, without the bucket prefix.
    pub(crate) key: String,
    /// Its revision (the stream sequence of the value).
    pub(crate) revision: u64,
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
    let consumer = store
        .stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: client.new_inbox(),
            description: Some("awaken kv scan".to_owned()),
            filter_subject: format!("{}{key_prefix}>", store.prefix),
            deliver_policy: DeliverPolicy::LastPerSubject,
            replay_policy: ReplayPolicy::Instant,
            ..Default::default()
        })
        .await
        .map_err(ClusterError::nats)?;
    let mut remaining = consumer.cached_info().num_pending;
    let mut found = Vec::new();
    if remaining == 0 {
        return Ok(found);
    }
    let mut messages = consumer.messages().await.map_err(ClusterError::nats)?;
    while remaining > 0 {
        // Entries counted as pending may expire (buckets with `max_age`) before they
        // are delivered; the scan would then wait forever. A stalled scan fails and
        // its caller scans again later.
        let next = tokio::time::timeout(SCAN_IDLE_TIMEOUT, messages.next())
            .await
            .map_err(|_| ClusterError::Nats("kv scan stalled (entries expired?)".to_owned()))?;
        let Some(message) = next else {
            return Err(ClusterError::Nats("kv scan ended early".to_owned()));
        };
        let message = message.map_err(ClusterError::nats)?;
        let info = message.info().map_err(ClusterError::nats)?;
        let (revision, pending) = (info.stream_sequence, info.pending);
        remaining = remaining.saturating_sub(1).min(pending);
        let deleted = message
            .headers
            .as_ref()
            .and_then(|headers| headers.get("KV-Operation"))
            .is_some_and(|op| op.as_str() != "PUT");
        if deleted {
            continue;
        }
        if let Some(key) = message.subject.strip_prefix(store.prefix.as_str()) {
            found.push(Latest {
                key: key.to_owned(),
                revision,
                value: message.payload.clone(),
            });
        }
    }
    Ok(found)
}
