//! The feed: one ordered consumer per mailbox instance that applies every batch
//! of the ledger stream to the node's [`Replica`], and takes snapshots.
//!
//! Messages arrive in stream order. The feed replaces its consumer itself when
//! it fails or stalls (see [`Follower::run`]).  A jump in the stream sequence means the
//! messages in between were purged behind a snapshot: the replica then loads the
//! newest snapshot and goes on from there. Taking snapshots falls to the node whose
//! batch crosses the interval, so under load the nodes that write share the work.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::stream::Stream;
use awaken_actors::backoff::Backoff;
use futures::StreamExt;
use tokio_util::task::AbortOnDropHandle;

use super::replica::{LedgerOp, Replica};
use super::snapshot::{self, Snapshots, Written};
use super::wire::{BATCH_HEADER, Batch, WRITER_HEADER};
use crate::codec;
use crate::error::ClusterError;
use crate::reconnects::Reconnects;
use crate::streams::ordered_consumer;

/// Keeps the replica following the stream while it lives.
#[derive(Debug)]
pub(crate) struct Feed {
    _task: AbortOnDropHandle<()>,
}

/// How often the feed checks that it is not stalled.
const STALL_TICK: Duration = Duration::from_millis(250);
/// Ticks without progress, while the stream is known to hold more, after which
/// the consumer is replaced.
const STALL_TICKS: u32 = 3;
/// The first wait before creating the consumer again, doubled up to
/// [`MAX_RESUBSCRIBE_DELAY`].
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(50);
const MAX_RESUBSCRIBE_DELAY: Duration = Duration::from_secs(1);

/// What the feed needs besides the consumer.
struct Follower {
    client: async_nats::Client,
    replica: Arc<Replica>,
    stream: Stream,
    snapshots: Snapshots,
    /// The newest snapshot this node knows of.
    covers: Arc<AtomicU64>,
    /// Whether this node is writing a snapshot.
    snapshotting: Arc<AtomicBool>,
    /// Batches between snapshots at the least.
    min_interval: u64,
}

/// Why the feed stopped reading one consumer.
enum Interrupted {
    /// The consumer failed or stalled: read the stream again from a new one.
    Resubscribe,
    /// The replica cannot go on (the messages it needs are gone).
    BrokenOff,
}

/// Starts applying the stream after the replica's applied sequence.
pub(crate) async fn follow(
    client: &async_nats::Client,
    stream: Stream,
    replica: Arc<Replica>,
    snapshots: Snapshots,
    min_interval: u64,
) -> Result<Feed, ClusterError> {
    let follower = Follower {
        client: client.clone(),
        covers: Arc::new(AtomicU64::new(replica.applied())),
        snapshotting: Arc::new(AtomicBool::new(false)),
        min_interval,
        replica,
        stream,
        snapshots,
    };
    let messages = follower.subscribe().await?;
    Ok(Feed {
        _task: AbortOnDropHandle::new(tokio::spawn(follower.run(messages))),
    })
}

impl Follower {
    /// An ordered consumer delivering the stream after the applied sequence.
    async fn subscribe(&self) -> Result<push::Ordered, ClusterError> {
        let applied = self.replica.applied();
        let deliver_policy = if applied == 0 {
            DeliverPolicy::All
        } else {
            DeliverPolicy::ByStartSequence {
                start_sequence: applied + 1,
            }
        };
        let consumer = ordered_consumer(
            &self.stream,
            push::OrderedConfig {
                deliver_subject: self.client.new_inbox(),
                description: Some("awaken mailbox ledger".to_owned()),
                deliver_policy,
                replay_policy: ReplayPolicy::Instant,
                ..Default::default()
            },
        )
        .await?;
        consumer.messages().await.map_err(ClusterError::nats)
    }

    /// Follows the stream for as long as the feed lives.
    ///
    /// The ordered consumer re-creates itself after a failure, but only after
    /// missing two 5 s heartbeats and with waits growing to 10 s: every mailbox
    /// op would stall that long after a stream leader fails over. So the feed
    /// watches for itself: when the consumer errs, ends, or the stream is known to
    /// hold batches the replica has not applied while nothing arrives, it drops
    /// the consumer and reads on from a new one.
    async fn run(self, first: push::Ordered) {
        let mut messages = first;
        loop {
            match self.consume(&mut messages).await {
                Interrupted::BrokenOff => return,
                Interrupted::Resubscribe => {}
            }
            let mut backoff = Backoff::new(RESUBSCRIBE_DELAY, MAX_RESUBSCRIBE_DELAY);
            messages = loop {
                match self.subscribe().await {
                    Ok(messages) => break messages,
                    Err(error) => {
                        tracing::warn!(%error, "mailbox ledger feed: consumer not created yet");
                        backoff.wait().await;
                    }
                }
            };
        }
    }

    /// Applies what `messages` delivers until it fails or stalls.
    async fn consume(&self, messages: &mut push::Ordered) -> Interrupted {
        let mut tick = tokio::time::interval(STALL_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_applied = self.replica.applied();
        let mut still = 0;
        let mut reconnects = Reconnects::of(&self.client);
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                _ = tick.tick() => {
                    // After a reconnect the ordered consumer would wait for its
                    // missed heartbeats, and start over from the stream's start
                    // when it had delivered nothing yet: read on from here.
                    if reconnects.happened() {
                        tracing::info!(applied = self.replica.applied(),
                            "mailbox ledger feed: connection re-established; resubscribing");
                        return Interrupted::Resubscribe;
                    }
                    let applied = self.replica.applied();
                    if applied != last_applied || self.replica.known() <= applied {
                        last_applied = applied;
                        still = 0;
                        continue;
                    }
                    still += 1;
                    if still >= STALL_TICKS {
                        tracing::warn!(applied, known = self.replica.known(),
                            "mailbox ledger feed stalled; resubscribing");
                        return Interrupted::Resubscribe;
                    }
                    continue;
                }
            };
            let message = match message {
                Some(Ok(message)) => message,
                Some(Err(error)) => {
                    tracing::warn!(%error, "mailbox ledger feed interrupted; resubscribing");
                    return Interrupted::Resubscribe;
                }
                None => {
                    tracing::warn!("mailbox ledger consumer ended; resubscribing");
                    return Interrupted::Resubscribe;
                }
            };
            let seq = match message.info() {
                Ok(info) => info.stream_sequence,
                Err(error) => {
                    tracing::warn!(%error, "mailbox ledger message without stream info");
                    continue;
                }
            };
            let applied = self.replica.applied();
            if seq <= applied {
                continue;
            }
            if seq > applied + 1 && !self.catch_up(applied, seq).await {
                return Interrupted::BrokenOff;
            }
            if let Some(ops) = self.own_batch(&message) {
                self.replica.apply(seq, true, ops);
                self.maybe_snapshot(seq);
                continue;
            }
            match codec::decode::<Batch>(&message.payload) {
                Ok(batch) => {
                    let mine = batch.writer == self.replica.writer();
                    let ops = batch
                        .ops
                        .into_iter()
                        .map(|op| LedgerOp::read(op.id, op.command));
                    self.replica.apply(seq, mine, ops);
                    if mine {
                        self.maybe_snapshot(seq);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, seq, "not a mailbox ledger batch; skipped");
                    self.replica.skip(seq);
                }
            }
        }
    }

    /// The ops of a batch this instance wrote and still holds, by its headers.
    fn own_batch(&self, message: &async_nats::jetstream::Message) -> Option<Vec<LedgerOp>> {
        let headers = message.headers.as_ref()?;
        if headers.get(WRITER_HEADER)?.as_str() != self.replica.writer() {
            return None;
        }
        let number = headers.get(BATCH_HEADER)?.as_str().parse().ok()?;
        self.replica.take_own(number)
    }

    /// The messages after `applied` and before `seq` were purged: loads the
    /// snapshot that covers them. `false` when none does (the replica is broken).
    async fn catch_up(&self, applied: u64, seq: u64) -> bool {
        match self.snapshots.load().await {
            Ok(snapshot) if snapshot.applied + 1 >= seq => {
                self.covers.fetch_max(snapshot.applied, Ordering::Relaxed);
                self.replica.restore(snapshot);
                true
            }
            Ok(snapshot) => {
                self.replica.break_off(format!(
                    "mailbox ledger messages {}..{} are gone and the newest snapshot covers only {}",
                    applied + 1,
                    seq - 1,
                    snapshot.applied
                ));
                false
            }
            Err(error) => {
                self.replica
                    .break_off(format!("mailbox ledger snapshot unreadable: {error}"));
                false
            }
        }
    }

    /// Starts a snapshot when enough batches were applied since the last one.
    fn maybe_snapshot(&self, seq: u64) {
        let due = self.covers.load(Ordering::Relaxed)
            + snapshot::interval(self.min_interval, self.replica.read(|state| state.len()));
        if seq < due || self.snapshotting.swap(true, Ordering::AcqRel) {
            return;
        }
        let (replica, snapshots, stream) = (
            Arc::clone(&self.replica),
            self.snapshots.clone(),
            self.stream.clone(),
        );
        let (covers, snapshotting) = (Arc::clone(&self.covers), Arc::clone(&self.snapshotting));
        let min_interval = self.min_interval;
        tokio::spawn(async move {
            let folded = replica.copy();
            let at = folded.applied;
            let min_gap = snapshot::interval(min_interval, folded.state.len()) / 2;
            match snapshots.write(&folded, min_gap).await {
                Ok(Written::Replaced(previous)) => {
                    covers.fetch_max(at, Ordering::Relaxed);
                    if let Some(previous) = previous
                        && let Err(error) = trim(&stream, &snapshots, previous.covers).await
                    {
                        tracing::warn!(%error, "could not trim the mailbox ledger");
                    }
                }
                Ok(Written::Skipped { newest }) => {
                    covers.fetch_max(newest, Ordering::Relaxed);
                }
                Err(error) => tracing::warn!(%error, "mailbox ledger snapshot failed"),
            }
            snapshotting.store(false, Ordering::Release);
        });
    }
}

/// Removes the stream's messages up to `covers` and the parts of the snapshots up
/// to it.
async fn trim(stream: &Stream, snapshots: &Snapshots, covers: u64) -> Result<(), ClusterError> {
    stream
        .purge()
        .sequence(covers + 1)
        .await
        .map_err(ClusterError::nats)?;
    snapshots.remove_parts_up_to(covers).await
}
