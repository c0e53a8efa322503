//! Webhooks on runs: who is told of a run's status changes, how far delivery got,
//! and which node delivers now.
//!
//! They live beside the runs they watch, so every node of a cluster sees them and
//! they survive restarts. Delivery is leased: one node at a time holds a webhook
//! until its lease runs out, renews the lease while it works, and records its
//! progress under it; when that node dies its lease runs out and another node
//! claims the webhook and goes on from the recorded progress. The store keeps the
//! protocol's config and the deliverer's progress as opaque JSON.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::error::StorageError;
use crate::ids::{RunId, ThreadId, WebhookId};

/// One webhook on a run, as stored.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Webhook {
    /// The run whose status changes are delivered.
    pub run_id: RunId,
    /// The run's thread (deleting the thread deletes its webhooks).
    pub thread_id: ThreadId,
    /// Unique per run.
    pub id: WebhookId,
    /// Where and how to deliver, as the protocol that made the webhook says (it may
    /// hold the receiver's token: never logged).
    pub config: JsonValue,
    /// How far delivery got, as the deliverer records it; `Null` before anything.
    pub progress: JsonValue,
    /// Delivery is over: the run's final status was delivered (or given up on).
    pub done: bool,
    /// The notifications given up on after every retry, oldest first.
    pub dead_letters: Vec<JsonValue>,
    /// When it was first stored, in milliseconds since the epoch.
    pub created_at: u64,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config is left out: it carries the receiver's credentials.
        f.debug_struct("Webhook")
            .field("run_id", &self.run_id)
            .field("thread_id", &self.thread_id)
            .field("id", &self.id)
            .field("progress", &self.progress)
            .field("done", &self.done)
            .field("dead_letters", &self.dead_letters.len())
            .field("created_at", &self.created_at)
            .finish_non_exhaustive()
    }
}

/// What a node asks for when it claims webhooks to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookClaim {
    /// The claiming node (any stable name; a node id).
    pub holder: String,
    /// The time now, in milliseconds: leases that ended by then are free.
    pub now_ms: u64,
    /// Until when the claimed webhooks are leased to `holder`.
    pub until_ms: u64,
    /// The most webhooks one claim takes.
    pub limit: usize,
    /// Only this run's webhooks (a node that just stored one claims it at once).
    pub run_id: Option<RunId>,
}

/// What a deliverer records about one webhook.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookAdvance {
    /// The progress now (replaces the stored one).
    pub progress: JsonValue,
    /// Whether delivery is over.
    pub done: bool,
    /// A notification given up on, appended to the dead letters.
    pub dead_letter: Option<JsonValue>,
    /// The lease's new end (a deliverer that records nothing new renews with its
    /// progress unchanged); `0` hands the webhook back at once.
    pub lease_until_ms: u64,
}

/// Persistence of webhooks and their delivery leases. Every implementation passes
/// the webhook part of the `conformance` suite (feature `testsuite`).
#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// Stores a new webhook, or replaces the config of the run's webhook with the
    /// same id (its progress, dead letters and lease are kept, and it is delivered
    /// to again if it was done). A new webhook beyond `max_per_run` of its run is
    /// refused with [`StorageError::InvalidInput`]. Returns the stored webhook.
    async fn put_webhook(
        &self,
        webhook: Webhook,
        max_per_run: usize,
    ) -> Result<Webhook, StorageError>;

    /// The run's webhooks, oldest first (ties by id).
    async fn load_webhooks(&self, run_id: &RunId) -> Result<Vec<Webhook>, StorageError>;

    /// Deletes one webhook; `false` when the run has none with that id.
    async fn delete_webhook(&self, run_id: &RunId, id: &WebhookId) -> Result<bool, StorageError>;

    /// Leases to the claim's holder, oldest first, up to `limit` webhooks that are
    /// not done and whose lease ended by `now_ms` (whoever held it: a holder's
    /// own live leases are not claimed again, so a node that delivers many
    /// webhooks still finds the free ones).
    async fn claim_webhooks(&self, claim: &WebhookClaim) -> Result<Vec<Webhook>, StorageError>;

    /// Records `advance` and extends the lease if `holder` holds the webhook's
    /// lease (even one that ended, as long as nobody claimed it since); `false`,
    /// changing nothing, when it does not (another node claimed it, or it was
    /// deleted).
    async fn advance_webhook(
        &self,
        run_id: &RunId,
        id: &WebhookId,
        holder: &str,
        advance: &WebhookAdvance,
    ) -> Result<bool, StorageError>;
}
