//! `InMemoryMailboxStore`: the single-node twin of the JetStream mailbox.
//!
//! One mutex over the whole mailbox: every operation is a few map lookups, so a claim
//! is trivially atomic (exactly one winner) and contention stays far below the cost
//! of the runs the dispatches activate.

use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use super::state::MailboxState;
use super::{
    DispatchPage, DispatchQuery, HeldClaim, MailboxConfig, MailboxError, MailboxStore, QueueWatch,
    QueueWatchers, QueuedThread, transition,
};
use crate::contract::{MailboxInterrupt, RunDispatch, RunDispatchResult, RunDispatchStatus};
use crate::ids::{DispatchId, ThreadId};

/// Dispatches kept in process memory.
#[derive(Debug, Default)]
pub struct InMemoryMailboxStore {
    config: MailboxConfig,
    state: Mutex<MailboxState>,
    watchers: QueueWatchers,
}

impl InMemoryMailboxStore {
    /// An empty mailbox with `config`.
    pub fn new(config: MailboxConfig) -> Self {
        Self {
            config,
            state: Mutex::default(),
            watchers: QueueWatchers::default(),
        }
    }

    /// Tells every watcher that `threads` got queued work; forgets closed watches.
    fn notify<'a>(&self, threads: impl IntoIterator<Item = &'a ThreadId>) {
        self.watchers.notify(threads);
    }

    fn lock(&self) -> MutexGuard<'_, MailboxState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl MailboxStore for InMemoryMailboxStore {
    async fn enqueue(
        &self,
        dispatch: RunDispatch,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let dispatch = self.lock().enqueue(&self.config, dispatch, now_ms)?;
        self.notify([&dispatch.thread_id]);
        Ok(dispatch)
    }

    async fn claim(
        &self,
        thread_id: &ThreadId,
        consumer: &str,
        limit: usize,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<RunDispatch>, MailboxError> {
        Ok(self.lock().claim(
            thread_id,
            consumer,
            limit,
            lease_ms,
            now_ms,
            transition::new_claim_token,
        ))
    }

    async fn claim_dispatch(
        &self,
        dispatch_id: &DispatchId,
        consumer: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.lock().claim_dispatch(
            dispatch_id,
            consumer,
            lease_ms,
            now_ms,
            transition::new_claim_token(),
        )
    }

    async fn ack(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.lock().ack(dispatch_id, claim_token, now_ms)
    }

    async fn nack(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let dispatch = self
            .lock()
            .nack(&self.config, dispatch_id, claim_token, error, now_ms)?;
        if dispatch.status == RunDispatchStatus::Queued {
            self.notify([&dispatch.thread_id]);
        }
        Ok(dispatch)
    }

    async fn dead_letter(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.lock()
            .dead_letter(dispatch_id, claim_token, error, now_ms)
    }

    async fn cancel(
        &self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.lock().cancel(dispatch_id, now_ms)
    }

    async fn extend_lease(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.lock()
            .extend_lease(dispatch_id, claim_token, lease_ms, now_ms)
    }

    async fn interrupt(
        &self,
        thread_id: &ThreadId,
        now_ms: u64,
    ) -> Result<MailboxInterrupt, MailboxError> {
        Ok(self.lock().interrupt(thread_id, now_ms))
    }

    async fn supersede_claimed(
        &self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.lock().supersede_claimed(dispatch_id, now_ms)
    }

    async fn record_dispatch_start(
        &self,
        dispatch_id: &DispatchId,
        dispatch_instance_id: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.lock()
            .record_dispatch_start(dispatch_id, dispatch_instance_id, now_ms)
    }

    async fn record_run_result(
        &self,
        dispatch_id: &DispatchId,
        result: RunDispatchResult,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.lock().record_run_result(dispatch_id, result, now_ms)
    }

    async fn complete(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        result: RunDispatchResult,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.lock()
            .complete(dispatch_id, claim_token, result, now_ms)
    }

    async fn load_dispatch(
        &self,
        dispatch_id: &DispatchId,
    ) -> Result<Option<RunDispatch>, MailboxError> {
        Ok(self.lock().get(dispatch_id).cloned())
    }

    async fn list_dispatches(&self, query: &DispatchQuery) -> Result<DispatchPage, MailboxError> {
        Ok(self.lock().list(query))
    }

    async fn reclaim_expired_leases(&self, now_ms: u64) -> Result<Vec<RunDispatch>, MailboxError> {
        let reclaimed = self.lock().reclaim_expired_leases(&self.config, now_ms);
        self.notify(
            reclaimed
                .iter()
                .filter(|d| d.status == RunDispatchStatus::Queued)
                .map(|d| &d.thread_id),
        );
        Ok(reclaimed)
    }

    async fn claims(&self) -> Result<Vec<HeldClaim>, MailboxError> {
        Ok(self.lock().claims())
    }

    async fn queued_threads(&self) -> Result<Vec<QueuedThread>, MailboxError> {
        Ok(self.lock().queued_threads())
    }

    async fn watch_queued(&self, watch: QueueWatch) -> Result<(), MailboxError> {
        self.watchers.subscribe(watch);
        Ok(())
    }

    async fn gc(&self, now_ms: u64) -> Result<usize, MailboxError> {
        Ok(self.lock().gc(&self.config.gc_rules(), now_ms))
    }

    fn settled_bytes(&self) -> u64 {
        self.lock().settled_bytes()
    }
}
