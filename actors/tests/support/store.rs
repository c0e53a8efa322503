//! `HookedStore`: the in-memory store with counters and a gate on checkpoints, so a
//! test can see how often a thread touches the store and hold its segments open.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use std::time::Duration;

use awaken_actors::contract::{
    Approval, ApprovalChange, ApprovalEvent, RunRecord, Thread, ThreadMetadata,
};
use awaken_actors::store::{
    ApprovalPage, ApprovalQuery, Checkpoint, FencingToken, InMemoryStore, MessagePage,
    MessageQuery, RunPage, RunQuery, ThreadRunStore, ThreadSnapshot, ThreadSummary, WebhookStore,
};
use awaken_actors::{ApprovalId, RunId, StorageError, ThreadId};
use tokio::sync::{Notify, watch};

/// The in-memory store, counting rehydrations and checkpoints; checkpoints wait
/// while the gate is closed (it starts open).
pub struct HookedStore {
    pub inner: InMemoryStore,
    snapshot_loads: AtomicUsize,
    checkpoints: AtomicUsize,
    /// Woken at every checkpoint asked for.
    asked: Notify,
    /// Refuses every checkpoint while set.
    failing: std::sync::atomic::AtomicBool,
    /// Whether checkpoints meet an outage, and which.
    outage: std::sync::Mutex<Option<Outage>>,
    gate: watch::Sender<bool>,
}

/// How the store is away for checkpoints, as a database restart leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// Nothing is written; the answer is `Unavailable`.
    Unreachable,
    /// The checkpoint is written, but the answer is `MaybeWritten` (the
    /// connection was lost before the commit was confirmed).
    LostAfterCommit,
}

impl Default for HookedStore {
    fn default() -> Self {
        Self {
            inner: InMemoryStore::default(),
            snapshot_loads: AtomicUsize::new(0),
            checkpoints: AtomicUsize::new(0),
            asked: Notify::new(),
            failing: std::sync::atomic::AtomicBool::new(false),
            outage: std::sync::Mutex::new(None),
            gate: watch::channel(true).0,
        }
    }
}

impl HookedStore {
    /// Thread snapshots loaded so far.
    pub fn loads(&self) -> usize {
        self.snapshot_loads.load(Ordering::SeqCst)
    }

    /// Checkpoints asked for so far (held ones included).
    pub fn checkpoints(&self) -> usize {
        self.checkpoints.load(Ordering::SeqCst)
    }

    /// Resolves once `n` checkpoints were asked for (held ones included).
    pub async fn asked_for(&self, n: usize) {
        loop {
            let asked = self.asked.notified();
            tokio::pin!(asked);
            asked.as_mut().enable();
            if self.checkpoints() >= n {
                return;
            }
            asked.await;
        }
    }

    /// Refuses every checkpoint from now on (`failing`) or lets them through.
    pub fn fail_checkpoints(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// Checkpoints meet `outage` from now on (`None`: the store is back).
    pub fn outage(&self, outage: Option<Outage>) {
        *self.outage.lock().unwrap() = outage;
    }

    /// Holds every checkpoint from now on until [`HookedStore::open`].
    pub fn close(&self) {
        self.gate.send_replace(false);
    }

    /// Lets held and later checkpoints through.
    pub fn open(&self) {
        self.gate.send_replace(true);
    }
}

#[async_trait]
impl ThreadRunStore for HookedStore {
    async fn create_thread(&self, thread: &Thread) -> Result<(), StorageError> {
        self.inner.create_thread(thread).await
    }
    async fn load_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StorageError> {
        self.inner.load_thread(id).await
    }
    async fn update_thread_metadata(
        &self,
        id: &ThreadId,
        metadata: ThreadMetadata,
    ) -> Result<(), StorageError> {
        self.inner.update_thread_metadata(id, metadata).await
    }
    async fn delete_thread(&self, id: &ThreadId) -> Result<Vec<ApprovalChange>, StorageError> {
        self.inner.delete_thread(id).await
    }
    async fn list_threads(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadId>, StorageError> {
        self.inner.list_threads(offset, limit).await
    }
    async fn list_thread_summaries(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadSummary>, StorageError> {
        self.inner.list_thread_summaries(offset, limit).await
    }
    async fn load_messages(
        &self,
        id: &ThreadId,
        query: &MessageQuery,
    ) -> Result<MessagePage, StorageError> {
        self.inner.load_messages(id, query).await
    }
    async fn load_thread_snapshot(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        self.snapshot_loads.fetch_add(1, Ordering::SeqCst);
        self.inner.load_thread_snapshot(id).await
    }
    async fn create_run(&self, record: &RunRecord) -> Result<(), StorageError> {
        self.inner.create_run(record).await
    }
    async fn load_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StorageError> {
        self.inner.load_run(run_id).await
    }
    async fn latest_run(&self, thread_id: &ThreadId) -> Result<Option<RunRecord>, StorageError> {
        self.inner.latest_run(thread_id).await
    }
    async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StorageError> {
        self.inner.list_runs(query).await
    }
    async fn checkpoint(
        &self,
        checkpoint: Checkpoint,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        self.checkpoints.fetch_add(1, Ordering::SeqCst);
        self.asked.notify_waiters();
        let mut gate = self.gate.subscribe();
        // The sender lives as long as the store, so the wait cannot fail.
        let _ = gate.wait_for(|open| *open).await;
        if self.failing.load(Ordering::SeqCst) {
            return Err(StorageError::Io("the store refuses checkpoints".to_owned()));
        }
        let outage = *self.outage.lock().unwrap();
        match outage {
            None => self.inner.checkpoint(checkpoint).await,
            Some(Outage::Unreachable) => {
                Err(StorageError::Unavailable("connection refused".to_owned()))
            }
            Some(Outage::LostAfterCommit) => {
                self.inner.checkpoint(checkpoint).await?;
                Err(StorageError::MaybeWritten(
                    "connection reset before the commit was confirmed".to_owned(),
                ))
            }
        }
    }
    async fn fence(&self, id: &ThreadId, token: FencingToken) -> Result<(), StorageError> {
        self.inner.fence(id, token).await
    }
    async fn load_approval(&self, id: &ApprovalId) -> Result<Option<Approval>, StorageError> {
        self.inner.load_approval(id).await
    }
    async fn list_approvals(&self, query: &ApprovalQuery) -> Result<ApprovalPage, StorageError> {
        self.inner.list_approvals(query).await
    }
    async fn unpublished_approvals(
        &self,
        older_than: Duration,
        limit: usize,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        self.inner.unpublished_approvals(older_than, limit).await
    }
    async fn approvals_published(
        &self,
        published: &[(ApprovalId, ApprovalEvent)],
    ) -> Result<(), StorageError> {
        self.inner.approvals_published(published).await
    }
    fn webhooks(&self) -> &dyn WebhookStore {
        self.inner.webhooks()
    }
}
