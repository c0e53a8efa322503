//! The writer: publishes a mailbox instance's commands to the ledger stream in
//! batches (group commit).
//!
//! A few batches are in flight at once; commands issued while they are gather into
//! the next one, so under load one publish carries many commands and the stream's
//! cost per command falls as the load rises. Batches from one connection reach the
//! stream in the order they were published.

use std::sync::Arc;

use async_nats::jetstream;
use awaken_actors::mailbox::MailboxError;
use bytes::Bytes;
use tokio::sync::{Semaphore, mpsc};

use super::replica::Replica;
use super::wire::{MAX_COMMAND, splice_batch};

/// Batches published and not yet acknowledged by the stream.
const IN_FLIGHT: usize = 2;

/// An encoded op on its way to the stream.
#[derive(Debug)]
pub(crate) struct Submission {
    /// The op's id (its caller waits on it).
    pub(crate) id: u64,
    /// The encoded [`Op`](super::wire::Op).
    pub(crate) op: Bytes,
}

/// Starts the writer; it stops when every sender is dropped.
pub(crate) fn spawn(
    js: jetstream::Context,
    subject: String,
    replica: Arc<Replica>,
) -> mpsc::UnboundedSender<Submission> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(js, subject, replica, rx));
    tx
}

async fn run(
    js: jetstream::Context,
    subject: String,
    replica: Arc<Replica>,
    mut submissions: mpsc::UnboundedReceiver<Submission>,
) {
    let room = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut carried: Option<Submission> = None;
    loop {
        let first = match carried.take() {
            Some(first) => first,
            None => match submissions.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        // Wait for room before gathering: what arrives meanwhile joins this batch.
        let Ok(permit) = Arc::clone(&room).acquire_owned().await else {
            return;
        };
        let mut size = first.op.len();
        let mut batch = vec![first];
        while let Ok(next) = submissions.try_recv() {
            if size + next.op.len() > MAX_COMMAND {
                carried = Some(next);
                break;
            }
            size += next.op.len();
            batch.push(next);
        }
        let ids: Vec<u64> = batch.iter().map(|submission| submission.id).collect();
        let ops: Vec<Bytes> = batch.into_iter().map(|submission| submission.op).collect();
        let payload = match splice_batch(replica.writer(), &ops) {
            Ok(payload) => payload,
            Err(error) => {
                replica.fail(&ids, &MailboxError::Unavailable(error.to_string()));
                continue;
            }
        };
        match js.publish(subject.clone(), payload.into()).await {
            Ok(ack) => {
                let replica = Arc::clone(&replica);
                tokio::spawn(async move {
                    if let Err(error) = ack.await {
                        // The batch may still have landed; its ops then apply, and
                        // their callers, already answered, are not told twice.
                        replica.fail(&ids, &MailboxError::Unavailable(error.to_string()));
                    }
                    drop(permit);
                });
            }
            Err(error) => replica.fail(&ids, &MailboxError::Unavailable(error.to_string())),
        }
    }
}
