//! The writer: publishes a mailbox instance's commands to the ledger stream in
//! batches (group commit).
//!
//! One batch is in flight at a time. Commands issued meanwhile gather into the
//! next, and before it leaves the writer yields a few times so that callers just
//! woken by the previous batch's answers can add their next command: under load
//! one publish carries a command from nearly every caller, and the stream's cost
//! per command falls as the load rises. (More batches in flight measured slower:
//! smaller batches cost the server and the client more per command.)
//!
//! Each batch names its writer and number in headers, and the writer keeps the
//! batch's commands: when the feed brings the batch back, this node applies the
//! commands it already holds instead of decoding its own message.

use std::sync::Arc;

use async_nats::HeaderMap;
use async_nats::jetstream;
use awaken_actors::mailbox::MailboxError;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::command::Command;
use super::replica::{LedgerOp, Replica};
use super::wire::{BATCH_HEADER, MAX_COMMAND, WRITER_HEADER, splice_batch};

/// How many times the writer yields while commands keep joining a batch.
const GATHER_ROUNDS: usize = 4;

/// A command on its way to the stream.
#[derive(Debug)]
pub(crate) struct Submission {
    /// The op's id (its caller waits on it).
    pub(crate) id: u64,
    /// The encoded [`Op`](super::wire::Op).
    pub(crate) op: Bytes,
    /// The command, applied from here when the batch comes back.
    pub(crate) command: Command,
    /// Whether this node's queue watchers were told of it already.
    pub(crate) watchers_told: bool,
}

/// Starts the writer; it stops when every sender is dropped.
pub(crate) fn spawn(
    js: jetstream::Context,
    subject: String,
    replica: Arc<Replica>,
) -> mpsc::UnboundedSender<Submission> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(
        Writer {
            js,
            subject,
            replica,
        }
        .run(rx),
    );
    tx
}

struct Writer {
    js: jetstream::Context,
    subject: String,
    replica: Arc<Replica>,
}

impl Writer {
    async fn run(self, mut submissions: mpsc::UnboundedReceiver<Submission>) {
        let mut carried: Option<Submission> = None;
        let mut number: u64 = 0;
        loop {
            let first = match carried.take() {
                Some(first) => first,
                None => match submissions.recv().await {
                    Some(first) => first,
                    None => return,
                },
            };
            let (batch, over) = gather(first, &mut submissions).await;
            carried = over;
            number += 1;
            self.publish(number, batch).await;
        }
    }

    /// Publishes one batch and waits for the stream to take it.
    async fn publish(&self, number: u64, batch: Vec<Submission>) {
        let mut ids = Vec::with_capacity(batch.len());
        let mut ops = Vec::with_capacity(batch.len());
        let mut commands = Vec::with_capacity(batch.len());
        for Submission {
            id,
            op,
            command,
            watchers_told,
        } in batch
        {
            ids.push(id);
            ops.push(op);
            commands.push(LedgerOp {
                id,
                command,
                watchers_told,
            });
        }
        let refuse = |error: &dyn std::fmt::Display| {
            self.replica.take_own(number);
            // The batch may still have landed; its ops then apply, and their
            // callers, already answered, are not told twice.
            self.replica
                .fail(&ids, &MailboxError::Unavailable(error.to_string()));
        };
        let payload = match splice_batch(self.replica.writer(), &ops) {
            Ok(payload) => payload,
            Err(error) => return refuse(&error),
        };
        let mut headers = HeaderMap::new();
        headers.insert(WRITER_HEADER, self.replica.writer());
        headers.insert(BATCH_HEADER, number.to_string().as_str());
        // Held before publishing: the feed may bring the batch back first.
        self.replica.hold_own(number, commands);
        let ack = match self
            .js
            .publish_with_headers(self.subject.clone(), headers, payload.into())
            .await
        {
            Ok(ack) => ack,
            Err(error) => return refuse(&error),
        };
        match ack.await {
            Ok(ack) => self.replica.note_known(ack.sequence),
            Err(error) => refuse(&error),
        }
    }
}

/// Takes every command waiting after `first`, yielding while more keep coming
/// (up to [`GATHER_ROUNDS`] times); returns the batch and a command that did not
/// fit, if any.
async fn gather(
    first: Submission,
    submissions: &mut mpsc::UnboundedReceiver<Submission>,
) -> (Vec<Submission>, Option<Submission>) {
    let mut size = first.op.len();
    let mut batch = vec![first];
    for round in 0..=GATHER_ROUNDS {
        let before = batch.len();
        while let Ok(next) = submissions.try_recv() {
            if size + next.op.len() > MAX_COMMAND {
                return (batch, Some(next));
            }
            size += next.op.len();
            batch.push(next);
        }
        if round == GATHER_ROUNDS || (round > 0 && batch.len() == before) {
            break;
        }
        tokio::task::yield_now().await;
    }
    (batch, None)
}
