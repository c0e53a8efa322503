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
//!
//! A batch whose publish fails or goes unanswered (a reconnect, a stream
//! leader election) is published again, with the same `Nats-Msg-Id`, until
//! the answer deadline: the stream drops a copy of a batch that had landed,
//! so a blip of the connection costs the callers time, not an error.

use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use awaken_actors::backoff::Backoff;
use awaken_actors::mailbox::MailboxError;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::command::Command;
use super::replica::{LedgerOp, Replica};
use super::wire::{BATCH_HEADER, MAX_COMMAND, WRITER_HEADER, splice_batch};

/// How many times the writer yields while commands keep joining a batch.
const GATHER_ROUNDS: usize = 4;

/// The first pause before a batch is published again; it doubles up to
/// [`REPUBLISH_PAUSE_MAX`].
const REPUBLISH_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two publishes of one batch.
const REPUBLISH_PAUSE_MAX: Duration = Duration::from_secs(1);

/// How long one publish of a batch waits for the stream's answer before the
/// batch goes out again (the client's own wait is 5 s): an answer lost in a
/// reconnect would otherwise hold every mailbox operation of the node that
/// long. The stream answers a healthy publish within milliseconds.
const PUBLISH_ATTEMPT: Duration = Duration::from_secs(2);

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

/// Starts the writer; it stops when every sender is dropped. A batch not taken
/// by the stream within `answer_deadline` is refused.
pub(crate) fn spawn(
    js: jetstream::Context,
    subject: String,
    replica: Arc<Replica>,
    answer_deadline: Duration,
) -> mpsc::UnboundedSender<Submission> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(
        Writer {
            js,
            subject,
            replica,
            answer_deadline,
        }
        .run(rx),
    );
    tx
}

struct Writer {
    js: jetstream::Context,
    subject: String,
    replica: Arc<Replica>,
    answer_deadline: Duration,
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
        let msg_id = format!("{}-{number}", self.replica.writer());
        headers.insert(async_nats::header::NATS_MESSAGE_ID, msg_id.as_str());
        // Held before publishing: the feed may bring the batch back first.
        self.replica.hold_own(number, commands);
        let payload = Bytes::from(payload);
        let give_up = tokio::time::Instant::now() + self.answer_deadline;
        let mut backoff = Backoff::new(REPUBLISH_PAUSE, REPUBLISH_PAUSE_MAX);
        loop {
            let wait =
                PUBLISH_ATTEMPT.min(give_up.saturating_duration_since(tokio::time::Instant::now()));
            let error = match self
                .publish_once(headers.clone(), payload.clone(), wait)
                .await
            {
                Ok(sequence) => return self.replica.note_known(sequence),
                Err(error) => error,
            };
            let pause = backoff.next_pause();
            if tokio::time::Instant::now() + pause >= give_up {
                return refuse(&format!(
                    "the mailbox ledger did not take the batch within {:?}: {error}",
                    self.answer_deadline
                ));
            }
            tracing::debug!(%error, batch = number, "mailbox batch not taken yet; publishing it again");
            tokio::time::sleep(pause).await;
        }
    }

    /// One publish of a batch and the stream's answer within `wait`: the
    /// batch's sequence.
    async fn publish_once(
        &self,
        headers: HeaderMap,
        payload: Bytes,
        wait: Duration,
    ) -> Result<u64, String> {
        let published = async {
            let ack = self
                .js
                .publish_with_headers(self.subject.clone(), headers, payload)
                .await
                .map_err(|e| e.to_string())?;
            let ack = ack.await.map_err(|e| e.to_string())?;
            Ok(ack.sequence)
        };
        tokio::time::timeout(wait, published)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {wait:?}")))
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
