//! The approval feed on NATS: every approval's request and resolution, kept by
//! JetStream on `awaken.approvals.<event>.<agent>` (stream `AWAKEN_APPROVALS`).
//!
//! A NATS-only approver subscribes to `awaken.approvals.requested.>`, decides on
//! `awaken.decisions.<thread_id>` with the record's `call_id`, and sees the
//! approval's `awaken.approvals.resolved.<agent>` record. The records are the
//! approval as the change left it (`{"event": …, "approval": {…}}`), JSON or
//! MessagePack as the node is configured (`Content-Type` says which), the tenant
//! also in the `Awaken-Tenant` header. Each is published once its change is
//! stored, with `Nats-Msg-Id` `<approval_id>.<event>`: the stream keeps one copy
//! of a record published twice within its duplicate window (a catch-up sweep on
//! two nodes, a publication whose answer was lost).
//!
//! The inbox's SSE stream follows the stream from any node: positions are
//! stream sequences.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::{self, stream};
use async_trait::async_trait;
use awaken_actors::approval_feed::{FeedEntry, FeedError, FeedItem, FeedSink, FeedStream};
use awaken_actors::contract::ApprovalChange;
use dashmap::DashMap;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::decisions::Encoding;
use crate::error::ClusterError;
use crate::streams::{ensure_stream, ordered_consumer};

/// The stream that keeps the approval feed.
pub const APPROVALS_STREAM: &str = "AWAKEN_APPROVALS";
/// Subject prefix of the feed: `awaken.approvals.<event>.<agent>`.
pub const APPROVALS_SUBJECT_PREFIX: &str = "awaken.approvals.";
/// The header that carries the approval's tenant.
pub const TENANT_HEADER: &str = "Awaken-Tenant";
/// Largest record the stream takes: an approval carries its call's arguments.
const MAX_RECORD_BYTES: i32 = 1024 * 1024;
/// How often an unreadable record on one subject is logged, at most.
const GARBAGE_LOG_EVERY: Duration = Duration::from_secs(60);

/// How the feed's records are encoded on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeedEncoding {
    /// `application/json`.
    #[default]
    Json,
    /// `application/msgpack` (field names), as the cluster's own payloads.
    Msgpack,
}

impl FeedEncoding {
    fn content_type(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::Msgpack => "application/msgpack",
        }
    }
}

/// Tunables of the approval feed's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalFeedConfig {
    /// How records are encoded.
    pub encoding: FeedEncoding,
    /// How long the stream keeps a record.
    pub max_age: Duration,
    /// Bytes the stream keeps at most; the oldest records go first.
    pub max_bytes: i64,
    /// Copies of the stream on a clustered server.
    pub replicas: usize,
}

impl Default for ApprovalFeedConfig {
    fn default() -> Self {
        Self {
            encoding: FeedEncoding::Json,
            max_age: Duration::from_secs(7 * 24 * 3600),
            max_bytes: 1024 * 1024 * 1024,
            replicas: 1,
        }
    }
}

/// The subject of `change`: its event and its agent, the agent's id with every
/// character a subject token cannot hold (or that would split it) as `_`.
pub fn subject_of(change: &ApprovalChange) -> String {
    let agent: String = change
        .approval
        .agent_id
        .as_str()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{APPROVALS_SUBJECT_PREFIX}{}.{agent}",
        change.event.as_str()
    )
}

/// Reads a record published on the feed's subjects.
pub fn parse_record(content_type: Option<&str>, body: &[u8]) -> Result<ApprovalChange, String> {
    match Encoding::from_content_type(content_type)? {
        Encoding::Json => {
            serde_json::from_slice(body).map_err(|e| format!("invalid JSON approval record: {e}"))
        }
        Encoding::MessagePack => awaken_actors::codec::decode(body)
            .map_err(|e| format!("invalid MessagePack approval record: {e}")),
    }
}

/// The approval feed kept by JetStream.
#[derive(Debug, Clone)]
pub struct JetStreamFeed {
    js: jetstream::Context,
    stream: stream::Stream,
    encoding: FeedEncoding,
    /// When garbage on a subject was last logged.
    garbage: Arc<DashMap<String, Instant>>,
}

impl JetStreamFeed {
    /// Opens the feed, creating its stream when missing.
    pub async fn open(
        js: jetstream::Context,
        config: &ApprovalFeedConfig,
    ) -> Result<Self, ClusterError> {
        let stream = ensure_stream(
            &js,
            stream::Config {
                name: APPROVALS_STREAM.to_owned(),
                subjects: vec![format!("{APPROVALS_SUBJECT_PREFIX}>")],
                retention: stream::RetentionPolicy::Limits,
                max_age: config.max_age,
                max_bytes: config.max_bytes,
                max_message_size: MAX_RECORD_BYTES,
                discard: stream::DiscardPolicy::Old,
                duplicate_window: Duration::from_secs(120),
                num_replicas: config.replicas,
                ..Default::default()
            },
        )
        .await?;
        Ok(Self {
            js,
            stream,
            encoding: config.encoding,
            garbage: Arc::default(),
        })
    }

    fn encode(&self, change: &ApprovalChange) -> Result<Vec<u8>, FeedError> {
        match self.encoding {
            FeedEncoding::Json => serde_json::to_vec(change),
            FeedEncoding::Msgpack => {
                awaken_actors::codec::encode(change).map_err(serde::ser::Error::custom)
            }
        }
        .map_err(|error| FeedError::Encoding(error.to_string()))
    }

    fn headers(&self, change: &ApprovalChange) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("Content-Type", self.encoding.content_type());
        headers.insert(
            "Nats-Msg-Id",
            format!("{}.{}", change.approval.approval_id, change.event.as_str()).as_str(),
        );
        if let Some(tenant) = &change.approval.tenant {
            headers.insert(TENANT_HEADER, tenant.as_str());
        }
        headers
    }

    /// Logs an unreadable record once per subject and minute.
    fn garbage(&self, subject: &str, error: &str) {
        let now = Instant::now();
        let mut logged = false;
        self.garbage
            .entry(subject.to_owned())
            .and_modify(|last| {
                if now.duration_since(*last) >= GARBAGE_LOG_EVERY {
                    *last = now;
                    logged = true;
                }
            })
            .or_insert_with(|| {
                logged = true;
                now
            });
        if logged {
            tracing::warn!(%subject, %error, "approval feed: an unreadable record was skipped (logged once a minute per subject)");
        }
    }

    /// Where a follower resuming after `after` starts: `None` is a gap (the
    /// position is not this stream's, or no longer kept), then only new records.
    async fn start_after(&self, after: Option<&str>) -> Result<Option<u64>, FeedError> {
        let Some(after) = after else {
            return Ok(None);
        };
        let Ok(after) = after.parse::<u64>() else {
            return Ok(None);
        };
        let mut stream = self.stream.clone();
        let state = stream
            .info()
            .await
            .map_err(|error| FeedError::Unavailable(error.to_string()))?
            .state
            .clone();
        let kept = after >= state.first_sequence.saturating_sub(1) && after <= state.last_sequence;
        Ok(kept.then_some(after))
    }
}

#[async_trait]
impl FeedSink for JetStreamFeed {
    async fn publish(&self, changes: &[ApprovalChange]) -> Vec<Result<(), FeedError>> {
        // Sent one after another without waiting, then their acks awaited.
        let mut pending = Vec::with_capacity(changes.len());
        for change in changes {
            let sent = match self.encode(change) {
                Ok(body) => self
                    .js
                    .publish_with_headers(subject_of(change), self.headers(change), body.into())
                    .await
                    .map_err(|error| FeedError::Unavailable(error.to_string())),
                Err(error) => Err(error),
            };
            pending.push(sent);
        }
        let mut outcomes = Vec::with_capacity(changes.len());
        for sent in pending {
            outcomes.push(match sent {
                Ok(ack) => ack
                    .await
                    .map(drop)
                    .map_err(|error| FeedError::Unavailable(error.to_string())),
                Err(error) => Err(error),
            });
        }
        outcomes
    }

    fn shared(&self) -> bool {
        true
    }

    async fn follow(&self, after: Option<&str>) -> Result<FeedStream, FeedError> {
        let start = self.start_after(after).await?;
        let gap = after.is_some() && start.is_none();
        let deliver_policy = match start {
            Some(after) => DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            },
            None => DeliverPolicy::New,
        };
        let consumer = ordered_consumer(
            &self.stream,
            push::OrderedConfig {
                deliver_subject: self.js.client().new_inbox(),
                description: Some("awaken approvals follower".to_owned()),
                deliver_policy,
                replay_policy: ReplayPolicy::Instant,
                ..Default::default()
            },
        )
        .await
        .map_err(|error| FeedError::Unavailable(error.to_string()))?;
        let messages = consumer
            .messages()
            .await
            .map_err(|error| FeedError::Unavailable(error.to_string()))?;
        let this = self.clone();
        // A follower that loses its consumer ends; SSE clients reconnect with
        // their last position.
        let entries = messages
            .take_while(|message| futures::future::ready(message.is_ok()))
            .filter_map(move |message| {
                let item = message.ok().and_then(|message| {
                    let position = message.info().ok()?.stream_sequence.to_string();
                    let content_type = message
                        .headers
                        .as_ref()
                        .and_then(|headers| headers.get("Content-Type"))
                        .map(|value| value.as_str().to_owned());
                    match parse_record(content_type.as_deref(), &message.payload) {
                        Ok(change) => {
                            Some(FeedItem::Entry(Box::new(FeedEntry { position, change })))
                        }
                        Err(error) => {
                            this.garbage(message.subject.as_str(), &error);
                            None
                        }
                    }
                });
                futures::future::ready(item)
            });
        let first = gap.then_some(FeedItem::Gap);
        Ok(futures::stream::iter(first).chain(entries).boxed())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::ApprovalEvent;
    use awaken_actors::ids::{AgentId, ThreadId};
    use awaken_actors::store::conformance::approval;

    use super::*;

    fn change(agent: &str) -> ApprovalChange {
        let mut approval = approval("a1", &ThreadId::new("t").unwrap(), "r", "delete_file", 10);
        approval.tenant = Some("acme".into());
        approval.agent_id = AgentId::new(agent).unwrap();
        ApprovalChange::requested(approval)
    }

    #[test]
    fn subjects_name_the_event_and_a_token_of_the_agent() {
        assert_eq!(
            subject_of(&change("support-bot_2")),
            "awaken.approvals.requested.support-bot_2"
        );
        assert_eq!(
            subject_of(&change("team.support *>x")),
            "awaken.approvals.requested.team_support___x"
        );
        let mut resolved = change("a");
        resolved.event = ApprovalEvent::Resolved;
        assert_eq!(subject_of(&resolved), "awaken.approvals.resolved.a");
    }

    #[test]
    fn records_read_back_in_either_encoding_and_garbage_is_an_error() {
        let record = change("a");
        let json = serde_json::to_vec(&record).unwrap();
        assert_eq!(parse_record(None, &json).unwrap(), record);
        let msgpack = awaken_actors::codec::encode(&record).unwrap();
        assert_eq!(
            parse_record(Some("application/msgpack"), &msgpack).unwrap(),
            record
        );
        assert!(parse_record(None, b"{\"event\":\"requested\"}").is_err());
        assert!(parse_record(Some("text/plain"), &json).is_err());
    }
}
