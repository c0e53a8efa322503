//! `KvRunInbox`: accepted runs' input in a JetStream KV bucket, so the node that
//! claims a dispatch can start the run whichever node accepted it.
//!
//! Key `run.<base64url run id>`, value the [`RunRequest`] (MessagePack, named
//! fields). The mailbox worker deletes the entry once the run's dispatch is acked.
//!
//! Every operation waits out a NATS reconnect or a stream election (tried again
//! with back-off while it fails as unavailable, for up to the node's backend
//! wait), so a request that needs an input during a blip is slower, not
//! refused. Retrying is safe: a put writes the same value under the same key, a
//! removal of what is gone is a no-op.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, kv};
use async_trait::async_trait;
use awaken_actors::RunId;
use awaken_actors::backoff::Backoff;
use awaken_actors::mailbox::{MailboxError, RunInbox};
use awaken_actors::thread::RunRequest;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use tokio::time::Instant;

use crate::codec;
use crate::error::ClusterError;
use crate::kv::{BucketSpec, ensure_bucket};

/// The bucket runs' input is kept in unless configured otherwise.
pub const DEFAULT_INBOX_BUCKET: &str = "awaken_inbox";

/// The first pause before an operation is tried again; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two tries of an operation.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How long one try may take before it is made again: a request sent as the
/// connection broke is lost, and the client would wait its whole request
/// timeout (10 s) for the answer. The bucket answers within milliseconds.
const ATTEMPT: Duration = Duration::from_secs(2);

/// Runs' input in a KV bucket.
#[derive(Debug, Clone)]
pub struct KvRunInbox {
    bucket: kv::Store,
    /// How long an operation waits for NATS before it is refused.
    patience: Duration,
}

fn key(run_id: &RunId) -> String {
    format!("run.{}", URL_SAFE_NO_PAD.encode(run_id.as_str()))
}

fn unavailable(error: impl std::fmt::Display) -> MailboxError {
    MailboxError::Unavailable(error.to_string())
}

impl KvRunInbox {
    /// Opens the inbox in `bucket` (created when missing, `replicas` copies),
    /// its operations waiting up to `patience` for NATS.
    pub async fn open(
        js: &jetstream::Context,
        bucket: &str,
        replicas: usize,
        patience: Duration,
    ) -> Result<Self, ClusterError> {
        let spec = BucketSpec::new(bucket).with_replicas(replicas);
        Ok(Self {
            bucket: ensure_bucket(js, &spec).await?,
            patience,
        })
    }

    /// Awaits `attempt` until it does not fail as unavailable; every try, and
    /// all of them together, within the patience.
    async fn patiently<T, Attempt>(
        &self,
        mut attempt: impl FnMut() -> Attempt,
    ) -> Result<T, MailboxError>
    where
        Attempt: Future<Output = Result<T, MailboxError>>,
    {
        let give_up = Instant::now() + self.patience;
        let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
        loop {
            let try_until = give_up.min(Instant::now() + ATTEMPT);
            let reason = match tokio::time::timeout_at(try_until, attempt()).await {
                Ok(Err(MailboxError::Unavailable(reason))) => reason,
                Ok(answered) => return answered,
                Err(_) if try_until < give_up => format!("no answer within {ATTEMPT:?}"),
                Err(_) => {
                    return Err(unavailable(format!(
                        "the run inbox did not answer within {:?}",
                        self.patience
                    )));
                }
            };
            let pause = backoff.next_pause();
            if Instant::now() + pause >= give_up {
                return Err(MailboxError::Unavailable(reason));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// The entry as the bucket's stream leader has it. A KV read is a direct
    /// get, which any replica may answer: one that restarted or lags says "not
    /// found" for an entry written moments ago, and a run whose input seems gone
    /// is dead-lettered. So "not found" is only believed from the leader.
    async fn get_from_leader(&self, run_id: &RunId) -> Result<Option<Bytes>, MailboxError> {
        let subject = format!("{}{}", self.bucket.prefix, key(run_id));
        match self
            .bucket
            .stream
            .get_last_raw_message_by_subject(&subject)
            .await
        {
            Ok(message) => Ok(Some(message.payload)),
            Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(error) => Err(unavailable(error)),
        }
    }
}

#[async_trait]
impl RunInbox for KvRunInbox {
    async fn put(&self, run_id: &RunId, request: &RunRequest) -> Result<(), MailboxError> {
        let payload = codec::encode(request).map_err(unavailable)?;
        self.patiently(|| async {
            self.bucket
                .put(key(run_id), payload.clone())
                .await
                .map_err(unavailable)
                .map(|_| ())
        })
        .await
    }

    async fn get(&self, run_id: &RunId) -> Result<Option<RunRequest>, MailboxError> {
        let payload = self
            .patiently(|| async {
                match self.bucket.get(key(run_id)).await.map_err(unavailable)? {
                    Some(payload) => Ok(Some(payload)),
                    None => self.get_from_leader(run_id).await,
                }
            })
            .await?;
        let Some(payload) = payload else {
            return Ok(None);
        };
        codec::decode(&payload).map(Some).map_err(unavailable)
    }

    async fn remove(&self, run_id: &RunId) -> Result<(), MailboxError> {
        // A stream purge of the key's subject, not a KV delete or purge: nothing,
        // not even a marker, stays behind for a finished run.
        let subject = format!("{}{}", self.bucket.prefix, key(run_id));
        self.patiently(|| async {
            self.bucket
                .stream
                .purge()
                .filter(subject.clone())
                .await
                .map_err(unavailable)
                .map(|_| ())
        })
        .await
    }
}
