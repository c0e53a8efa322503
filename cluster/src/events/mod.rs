//! Run events across the cluster: the owner publishes every event of a run on
//! `awaken.events.<run_id>` and keeps the newest ones in a bounded replay buffer,
//! so any node can serve a run's stream and a reconnecting client (`Last-Event-ID`)
//! gets what it missed.
//!
//! Publishing is core NATS (at most once, no storage): a stream is live output, and
//! what a follower misses (a gap in `seq`, a quiet spell after a reconnect) it
//! asks the owner for (`ThreadCall::Replay`, see `catch_up`); the durable
//! record of a run is its checkpointed messages in the thread store. A message
//! holds one or more consecutive events of one run, as an array (`batch`,
//! decision 0077); one emitted in an exported activation carries that span's
//! `traceparent` header.

mod batch;
mod catch_up;
mod follow;
mod local;
mod replay;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use awaken_actors::contract::{StreamEvent, TraceContext};
use awaken_actors::memory::NodeMemory;
use awaken_actors::thread::{EventHub, FenceSource};
use awaken_actors::{RunId, ThreadId};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use tokio::sync::mpsc;

pub use batch::decode_events;
pub use follow::{RunFollow, follow_local, follow_run};
pub use local::{Fed, LiveSubscription, LocalEventHub};
pub use replay::{DEFAULT_REPLAY_CAPACITY, DEFAULT_RETAINED_RUNS, Read, Replay, ReplayBuffers};

use self::batch::{Batch, Outgoing, batches};
use crate::codec;
use crate::shards::ShardedFence;
use crate::trace_headers;

/// Prefix of the subjects run events are published on.
pub const EVENTS_SUBJECT_PREFIX: &str = "awaken.events.";

/// The subject of a run's events: `awaken.events.<run_id>` with the run id as it
/// is, or `awaken.events.~<base64url of the run id>` when the id cannot be part of
/// a subject (whitespace, `*`, `>`, an empty token, or a leading `~`). Generated
/// run ids (UUIDs) are always used as they are.
pub fn event_subject(run_id: &RunId) -> String {
    let id = run_id.as_str();
    let verbatim = !id.starts_with('~')
        && !id
            .chars()
            .any(|c| c.is_whitespace() || c == '*' || c == '>')
        && id.split('.').all(|token| !token.is_empty());
    if verbatim {
        // Built by hand: every event of every run names its subject, and
        // `format!` costs several times two copies.
        let mut subject = String::with_capacity(EVENTS_SUBJECT_PREFIX.len() + id.len());
        subject.push_str(EVENTS_SUBJECT_PREFIX);
        subject.push_str(id);
        subject
    } else {
        format!("{EVENTS_SUBJECT_PREFIX}~{}", URL_SAFE_NO_PAD.encode(id))
    }
}

/// Events the publishing task takes off its queue at most at once: what it
/// finds queued goes out in as few messages as the runs and traces allow.
const PUBLISH_BATCH: usize = 256;

/// What events queued for NATS may hold by default: about two seconds of a
/// busy node's events, within the part of the memory budget no share counts.
pub const DEFAULT_PUBLISH_QUEUE_BYTES: u64 = 16 << 20;

/// Tunables of run event publishing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsConfig {
    /// Events kept per run for replay (the book's `replay_buffer_capacity`).
    pub replay_capacity: usize,
    /// Ended runs whose buffers are kept.
    pub retained_runs: usize,
    /// Events a local follower copies out of a run's replay buffer per read: what
    /// one stream holds before writing it (single node; on NATS the subscription's
    /// own buffer applies).
    pub follower_batch: usize,
    /// Encoded events waiting for the NATS connection; beyond it events are not
    /// published (they stay replayable) and [`ClusterEventHub::dropped`] counts them.
    pub publish_queue: usize,
    /// What those events may hold, encoded: past it they are dropped the same
    /// way, so a stalled connection cannot hold more than this of a node's
    /// memory however large the events (tool outputs) are.
    pub publish_queue_bytes: u64,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            replay_capacity: DEFAULT_REPLAY_CAPACITY,
            retained_runs: DEFAULT_RETAINED_RUNS,
            follower_batch: 64,
            publish_queue: 65_536,
            publish_queue_bytes: DEFAULT_PUBLISH_QUEUE_BYTES,
        }
    }
}

/// The [`EventHub`] of a cluster node: buffers each event for replay and publishes
/// it on the run's subject.
///
/// The thread actor's emit path never waits: events are encoded in place and queued
/// for a publishing task.
#[derive(Debug)]
pub struct ClusterEventHub {
    buffers: Arc<ReplayBuffers>,
    outbox: mpsc::Sender<Outgoing>,
    /// Encoded bytes in `outbox` and in the batch being published.
    queued_bytes: Arc<AtomicU64>,
    max_queued_bytes: u64,
    dropped: AtomicU64,
    /// Events of threads this node no longer holds are not published.
    fence: ShardedFence,
}

impl ClusterEventHub {
    /// A hub publishing on `client` the events of threads `fence` says this node
    /// holds; the publishing task ends with the hub.
    ///
    /// The fence is asked twice: when an event is emitted, and again just before
    /// it goes out, because a node paused with events queued must not publish
    /// them once it wakes past its lease: the thread's new owner may have
    /// continued (or ended) the run meanwhile.
    /// Ended runs' buffers keep within `memory`'s share.
    pub fn start(
        client: async_nats::Client,
        config: &EventsConfig,
        fence: ShardedFence,
        memory: Arc<NodeMemory>,
    ) -> Self {
        let (outbox, mut queued) = mpsc::channel::<Outgoing>(config.publish_queue.max(1));
        let held = fence.clone();
        let queued_bytes = Arc::new(AtomicU64::new(0));
        let taken_bytes = Arc::clone(&queued_bytes);
        tokio::spawn(async move {
            let mut queued_now = Vec::with_capacity(PUBLISH_BATCH);
            while queued.recv_many(&mut queued_now, PUBLISH_BATCH).await > 0 {
                let taken: u64 = queued_now.iter().map(Outgoing::bytes).sum();
                // Given back once handed to the client, whichever way this batch goes.
                let _given_back = GiveBack(&taken_bytes, taken);
                if !held.holds_any() {
                    tracing::debug!(
                        events = queued_now.len(),
                        "run events of a lapsed tenure dropped"
                    );
                    queued_now.clear();
                    continue;
                }
                let max_payload = client.server_info().max_payload;
                for Batch {
                    subject,
                    trace,
                    payload,
                } in batches(queued_now.drain(..), max_payload)
                {
                    let published = match trace {
                        Some(trace) => {
                            let mut headers = async_nats::HeaderMap::new();
                            trace_headers::insert(&mut headers, &trace);
                            client.publish_with_headers(subject, headers, payload).await
                        }
                        None => client.publish(subject, payload).await,
                    };
                    if let Err(error) = published {
                        tracing::debug!(%error, "run events not published");
                    }
                }
            }
        });
        Self {
            buffers: Arc::new(
                ReplayBuffers::new(config.replay_capacity, config.retained_runs).within(memory),
            ),
            outbox,
            queued_bytes,
            max_queued_bytes: config.publish_queue_bytes,
            dropped: AtomicU64::new(0),
            fence,
        }
    }

    /// The replay buffers this hub fills.
    pub fn buffers(&self) -> &Arc<ReplayBuffers> {
        &self.buffers
    }

    /// Events not published because the queue to NATS was full or closed.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl EventHub for ClusterEventHub {
    fn publish(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
        event: &Arc<StreamEvent>,
        trace: Option<&TraceContext>,
    ) {
        if !self.fence.holds(thread_id) {
            tracing::debug!(%thread_id, %run_id, "event of a thread this node no longer holds dropped");
            return;
        }
        self.buffers.push(run_id, Arc::clone(event));
        let payload = match codec::encode(&**event) {
            Ok(payload) => payload,
            Err(error) => {
                tracing::warn!(%error, run_id = %run_id, "run event not encodable");
                return;
            }
        };
        let outgoing = Outgoing {
            subject: event_subject(run_id),
            payload,
            trace: trace.copied(),
        };
        let bytes = outgoing.bytes();
        let before = self.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        if before.saturating_add(bytes) > self.max_queued_bytes
            || self.outbox.try_send(outgoing).is_err()
        {
            self.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Subtracts a publishing batch's bytes from the queued count when dropped.
struct GiveBack<'a>(&'a AtomicU64, u64);

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn subject(id: &str) -> String {
        event_subject(&RunId::new(id).unwrap())
    }

    #[test]
    fn subject_safe_ids_are_used_as_they_are() {
        assert_eq!(
            subject("0190b6b2-7c1e-7000-8000-000000000001"),
            "awaken.events.0190b6b2-7c1e-7000-8000-000000000001"
        );
        assert_eq!(subject("run.1"), "awaken.events.run.1");
    }

    #[test]
    fn other_ids_are_encoded_so_they_stay_one_subject() {
        for id in ["a b", "a*", ">", "a..b", ".a", "a.", "~x"] {
            let subject = subject(id);
            let encoded = subject.strip_prefix("awaken.events.~").unwrap();
            assert_eq!(URL_SAFE_NO_PAD.decode(encoded).unwrap(), id.as_bytes());
        }
    }
}
