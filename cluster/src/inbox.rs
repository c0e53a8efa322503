//! `KvRunInbox`: accepted runs' input in a JetStream KV bucket, so the node that
//! claims a dispatch can start the run whichever node accepted it.
//!
//! Key `run.<base64url run id>`, value the [`RunRequest`] (MessagePack, named
//! fields). The mailbox worker deletes the entry once the run's dispatch is acked.

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, kv};
use async_trait::async_trait;
use awaken_actors::RunId;
use awaken_actors::mailbox::{MailboxError, RunInbox};
use awaken_actors::thread::RunRequest;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;

use crate::codec;
use crate::error::ClusterError;
use crate::kv::{BucketSpec, ensure_bucket};

/// The bucket runs' input is kept in unless configured otherwise.
pub const DEFAULT_INBOX_BUCKET: &str = "awaken_inbox";

/// Runs' input in a KV bucket.
#[derive(Debug, Clone)]
pub struct KvRunInbox {
    bucket: kv::Store,
}

fn key(run_id: &RunId) -> String {
    format!("run.{}", URL_SAFE_NO_PAD.encode(run_id.as_str()))
}

fn unavailable(error: impl std::fmt::Display) -> MailboxError {
    MailboxError::Unavailable(error.to_string())
}

impl KvRunInbox {
    /// Opens the inbox in `bucket` (created when missing, `replicas` copies).
    pub async fn open(
        js: &jetstream::Context,
        bucket: &str,
        replicas: usize,
    ) -> Result<Self, ClusterError> {
        let spec = BucketSpec::new(bucket).with_replicas(replicas);
        Ok(Self {
            bucket: ensure_bucket(js, &spec).await?,
        })
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
        self.bucket
            .put(key(run_id), payload)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn get(&self, run_id: &RunId) -> Result<Option<RunRequest>, MailboxError> {
        let payload = match self.bucket.get(key(run_id)).await.map_err(unavailable)? {
            Some(payload) => Some(payload),
            None => self.get_from_leader(run_id).await?,
        };
        let Some(payload) = payload else {
            return Ok(None);
        };
        codec::decode(&payload).map(Some).map_err(unavailable)
    }

    async fn remove(&self, run_id: &RunId) -> Result<(), MailboxError> {
        // A stream purge of the key's subject, not a KV delete or purge: nothing,
        // not even a marker, stays behind for a finished run.
        self.bucket
            .stream
            .purge()
            .filter(format!("{}{}", self.bucket.prefix, key(run_id)))
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}
