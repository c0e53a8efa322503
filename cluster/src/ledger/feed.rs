//! The feed: one ordered consumer per mailbox instance that applies every batch
//! of the ledger stream to the node's [`Replica`], and takes snapshots.
//!
//! Messages arrive in stream order. A jump in the stream sequence means the
//! messages in between were purged behind a snapshot: the replica then loads the
//! newest snapshot and goes on from there. Taking snapshots falls to the node whose
//! batch crosses the interval, so under load the nodes that write share the work.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_nats::jetstream::consumer::{DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::stream::Stream;
use futures::StreamExt;
use tokio::task::JoinHandle;

use super::command::Command;
use super::replica::Replica;
use super::snapshot::{self, Snapshots, Written};
use super::wire::{BATCH_HEADER, Batch, WRITER_HEADER};
use crate::codec;
use crate::error::ClusterError;

/// Keeps the replica following the stream while it lives.
#[derive(Debug)]
pub(crate) struct Feed {
    task: JoinHandle<()>,
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the feed needs besides the consumer.
struct Follower {
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

/// Starts applying the stream after the replica's applied sequence.
pub(crate) async fn follow(
    client: &async_nats::Client,
    stream: Stream,
    replica: Arc<Replica>,
    snapshots: Snapshots,
    min_interval: u64,
) -> Result<Feed, ClusterError> {
    let applied = replica.applied();
    let deliver_policy = if applied == 0 {
        DeliverPolicy::All
    } else {
        DeliverPolicy::ByStartSequence {
            start_sequence: applied + 1,
        }
    };
    let consumer = stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: client.new_inbox(),
            description: Some("awaken mailbox ledger".to_owned()),
            deliver_policy,
            replay_policy: ReplayPolicy::Instant,
            ..Default::default()
        })
        .await
        .map_err(ClusterError::nats)?;
    let messages = consumer.messages().await.map_err(ClusterError::nats)?;
    let follower = Follower {
        covers: Arc::new(AtomicU64::new(applied)),
        snapshotting: Arc::new(AtomicBool::new(false)),
        min_interval,
        replica,
        stream,
        snapshots,
    };
    Ok(Feed {
        task: tokio::spawn(follower.run(messages)),
    })
}

impl Follower {
    async fn run(self, mut messages: push::Ordered) {
        while let Some(message) = messages.next().await {
            let message = match message {
                Ok(message) => message,
                // The ordered consumer re-creates itself after such errors.
                Err(error) => {
                    tracing::warn!(%error, "mailbox ledger feed interrupted");
                    continue;
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
                return;
            }
            if let Some(ops) = self.own_batch(&message) {
                self.replica.apply(seq, true, ops);
                self.maybe_snapshot(seq);
                continue;
            }
            match codec::decode::<Batch>(&message.payload) {
                Ok(batch) => {
                    let mine = batch.writer == self.replica.writer();
                    let ops = batch.ops.into_iter().map(|op| (op.id, op.command));
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
        self.replica
            .break_off("the mailbox ledger's consumer ended".to_owned());
    }

    /// The ops of a batch this instance wrote and still holds, by its headers.
    fn own_batch(&self, message: &async_nats::jetstream::Message) -> Option<Vec<(u64, Command)>> {
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
            let (state, at) = replica.copy();
            let min_gap = snapshot::interval(min_interval, state.len()) / 2;
            match snapshots.write(&state, at, min_gap).await {
                Ok(Written::Replaced(previous)) => {
                    covers.fetch_max(at, Ordering::Relaxed);
                    if let Some(previous) = previous
                        && let Err(error) =
                            trim(&stream, &snapshots, previous.covers, previous.parts).await
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

/// Removes the stream's messages up to `covers` and that snapshot's parts.
async fn trim(
    stream: &Stream,
    snapshots: &Snapshots,
    covers: u64,
    parts: u32,
) -> Result<(), ClusterError> {
    stream
        .purge()
        .sequence(covers + 1)
        .await
        .map_err(ClusterError::nats)?;
    snapshots.remove_parts(covers, parts).await
}
