//! Webhooks in memory: the [`WebhookTable`] that is the [`InMemoryStore`]'s
//! [`WebhookStore`], and that the [`FileStore`](super::FileStore) keeps as its copy
//! of its webhook files.
//!
//! The table is plain data: it never awaits, so the in-memory store keeps it behind
//! a `std` mutex taken only for the length of one call. Its methods check before
//! they change anything and do not panic, so it is consistent whenever one returns.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{
    InMemoryStore, Webhook, WebhookAdvance, WebhookClaim, WebhookStore, too_many_webhooks,
    webhook_order_key,
};
use crate::error::StorageError;
use crate::hashing::FastHashMap;
use crate::ids::{RunId, ThreadId, WebhookId};

/// Who delivers a webhook, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Lease {
    /// The node that claimed it.
    holder: String,
    /// When the lease ends, in milliseconds: from then on another node may claim it.
    until_ms: u64,
}

/// A webhook with its lease (`None` until first claimed), as the table and the
/// file store's webhook files hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct LeasedWebhook {
    /// The webhook.
    pub(super) webhook: Webhook,
    /// Its delivery lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease: Option<Lease>,
}

impl LeasedWebhook {
    /// Whether a claim at `now_ms` may lease it: not done, and its lease (whoever
    /// held it) ended by then.
    fn claimable_at(&self, now_ms: u64) -> bool {
        !self.webhook.done
            && self
                .lease
                .as_ref()
                .is_none_or(|lease| lease.until_ms <= now_ms)
    }
}

/// Every webhook, by run and then by id.
#[derive(Debug, Default)]
pub(super) struct WebhookTable {
    runs: FastHashMap<RunId, BTreeMap<WebhookId, LeasedWebhook>>,
}

impl WebhookTable {
    /// Stores or replaces a webhook as [`WebhookStore::put_webhook`] says.
    pub(super) fn put(
        &mut self,
        webhook: Webhook,
        max_per_run: usize,
    ) -> Result<Webhook, StorageError> {
        let run_id = &webhook.run_id;
        if let Some(stored) = self
            .runs
            .get_mut(run_id)
            .and_then(|hooks| hooks.get_mut(&webhook.id))
        {
            stored.webhook.config = webhook.config;
            stored.webhook.done = false;
            return Ok(stored.webhook.clone());
        }
        if self.runs.get(run_id).map_or(0, BTreeMap::len) >= max_per_run {
            return Err(too_many_webhooks(run_id, max_per_run));
        }
        self.runs.entry(run_id.clone()).or_default().insert(
            webhook.id.clone(),
            LeasedWebhook {
                webhook: webhook.clone(),
                lease: None,
            },
        );
        Ok(webhook)
    }

    /// The run's webhooks, oldest first.
    pub(super) fn load(&self, run_id: &RunId) -> Vec<Webhook> {
        let mut webhooks: Vec<Webhook> = self
            .entries(run_id)
            .into_iter()
            .map(|leased| leased.webhook.clone())
            .collect();
        webhooks.sort_by(|a, b| webhook_order_key(a).cmp(&webhook_order_key(b)));
        webhooks
    }

    /// Deletes one webhook; whether there was one.
    pub(super) fn delete(&mut self, run_id: &RunId, id: &WebhookId) -> bool {
        let Some(hooks) = self.runs.get_mut(run_id) else {
            return false;
        };
        let deleted = hooks.remove(id).is_some();
        if hooks.is_empty() {
            self.runs.remove(run_id);
        }
        deleted
    }

    /// Leases what `claim` may take, oldest first, and returns it.
    pub(super) fn claim(&mut self, claim: &WebhookClaim) -> Vec<Webhook> {
        let mut claimable: Vec<&mut LeasedWebhook> = match &claim.run_id {
            Some(run_id) => self
                .runs
                .get_mut(run_id)
                .into_iter()
                .flat_map(BTreeMap::values_mut)
                .filter(|leased| leased.claimable_at(claim.now_ms))
                .collect(),
            None => self
                .runs
                .values_mut()
                .flat_map(BTreeMap::values_mut)
                .filter(|leased| leased.claimable_at(claim.now_ms))
                .collect(),
        };
        claimable.sort_by(|a, b| webhook_order_key(&a.webhook).cmp(&webhook_order_key(&b.webhook)));
        claimable
            .into_iter()
            .take(claim.limit)
            .map(|leased| {
                leased.lease = Some(Lease {
                    holder: claim.holder.clone(),
                    until_ms: claim.until_ms,
                });
                leased.webhook.clone()
            })
            .collect()
    }

    /// Records `advance` if `holder` holds the lease; whether it did.
    pub(super) fn advance(
        &mut self,
        run_id: &RunId,
        id: &WebhookId,
        holder: &str,
        advance: &WebhookAdvance,
    ) -> bool {
        let Some(leased) = self
            .runs
            .get_mut(run_id)
            .and_then(|hooks| hooks.get_mut(id))
        else {
            return false;
        };
        let Some(lease) = leased.lease.as_mut().filter(|lease| lease.holder == holder) else {
            return false;
        };
        lease.until_ms = advance.lease_until_ms;
        let webhook = &mut leased.webhook;
        webhook.progress = advance.progress.clone();
        webhook.done = advance.done;
        webhook.dead_letters.extend(advance.dead_letter.clone());
        true
    }

    /// Deletes the thread's webhooks, returning the runs that had some.
    pub(super) fn delete_thread(&mut self, thread_id: &ThreadId) -> Vec<RunId> {
        let mut changed = Vec::new();
        self.runs.retain(|run_id, hooks| {
            let before = hooks.len();
            hooks.retain(|_, leased| leased.webhook.thread_id != *thread_id);
            if hooks.len() != before {
                changed.push(run_id.clone());
            }
            !hooks.is_empty()
        });
        changed
    }

    /// The run's webhooks with their leases, in id order (what a file holds).
    pub(super) fn entries(&self, run_id: &RunId) -> Vec<&LeasedWebhook> {
        self.runs
            .get(run_id)
            .map(|hooks| hooks.values().collect())
            .unwrap_or_default()
    }

    /// Replaces the run's webhooks with `entries` (those of other runs are ignored).
    pub(super) fn replace_run(&mut self, run_id: &RunId, entries: Vec<LeasedWebhook>) {
        let hooks: BTreeMap<WebhookId, LeasedWebhook> = entries
            .into_iter()
            .filter(|leased| leased.webhook.run_id == *run_id)
            .map(|leased| (leased.webhook.id.clone(), leased))
            .collect();
        if hooks.is_empty() {
            self.runs.remove(run_id);
        } else {
            self.runs.insert(run_id.clone(), hooks);
        }
    }
}

#[async_trait]
impl WebhookStore for InMemoryStore {
    async fn put_webhook(
        &self,
        webhook: Webhook,
        max_per_run: usize,
    ) -> Result<Webhook, StorageError> {
        self.webhook_table().put(webhook, max_per_run)
    }

    async fn load_webhooks(&self, run_id: &RunId) -> Result<Vec<Webhook>, StorageError> {
        Ok(self.webhook_table().load(run_id))
    }

    async fn delete_webhook(&self, run_id: &RunId, id: &WebhookId) -> Result<bool, StorageError> {
        Ok(self.webhook_table().delete(run_id, id))
    }

    async fn claim_webhooks(&self, claim: &WebhookClaim) -> Result<Vec<Webhook>, StorageError> {
        Ok(self.webhook_table().claim(claim))
    }

    async fn advance_webhook(
        &self,
        run_id: &RunId,
        id: &WebhookId,
        holder: &str,
        advance: &WebhookAdvance,
    ) -> Result<bool, StorageError> {
        Ok(self.webhook_table().advance(run_id, id, holder, advance))
    }
}
