//! [`TimedStore`]: a database-backed store with each operation's latency
//! recorded in the node's metrics. The runtime wraps only stores that talk to a
//! database ([`ThreadRunStore::io_counts`] is `Some`): an in-memory store's
//! latency tells an operator nothing and its hot path stays untouched.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{
    ApprovalPage, ApprovalQuery, Checkpoint, FencingToken, MessagePage, MessageQuery, RunPage,
    RunQuery, StoreIoCounts, ThreadRunStore, ThreadSnapshot, ThreadSummary, WaitingRuns,
    WebhookStore,
};
use crate::contract::{Approval, ApprovalChange, ApprovalEvent, RunRecord, Thread, ThreadMetadata};
use crate::error::StorageError;
use crate::ids::{ApprovalId, RunId, ThreadId};
use crate::telemetry::{StoreMetrics, StoreOperation};

/// A store whose operations are timed into [`StoreMetrics`].
pub(crate) struct TimedStore {
    inner: Arc<dyn ThreadRunStore>,
    metrics: Arc<StoreMetrics>,
}

impl TimedStore {
    /// `inner`, timed when it is database-backed; as it is otherwise.
    pub(crate) fn wrap(
        inner: Arc<dyn ThreadRunStore>,
        metrics: &Arc<StoreMetrics>,
    ) -> Arc<dyn ThreadRunStore> {
        if inner.io_counts().is_none() {
            return inner;
        }
        Arc::new(Self {
            inner,
            metrics: Arc::clone(metrics),
        })
    }
}

/// Awaits `$call`, recording its latency as `$operation`.
macro_rules! timed {
    ($self:ident, $operation:ident, $call:expr) => {{
        let started = Instant::now();
        let result = $call.await;
        $self
            .metrics
            .observe(StoreOperation::$operation, started.elapsed());
        result
    }};
}

#[async_trait]
impl ThreadRunStore for TimedStore {
    async fn create_thread(&self, thread: &Thread) -> Result<(), StorageError> {
        timed!(self, CreateThread, self.inner.create_thread(thread))
    }

    async fn load_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StorageError> {
        timed!(self, LoadThread, self.inner.load_thread(id))
    }

    async fn update_thread_metadata(
        &self,
        id: &ThreadId,
        metadata: ThreadMetadata,
    ) -> Result<(), StorageError> {
        timed!(
            self,
            UpdateThread,
            self.inner.update_thread_metadata(id, metadata)
        )
    }

    async fn delete_thread(&self, id: &ThreadId) -> Result<Vec<ApprovalChange>, StorageError> {
        timed!(self, DeleteThread, self.inner.delete_thread(id))
    }

    async fn list_threads(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadId>, StorageError> {
        timed!(self, ListThreads, self.inner.list_threads(offset, limit))
    }

    async fn list_thread_summaries(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadSummary>, StorageError> {
        timed!(
            self,
            ListThreads,
            self.inner.list_thread_summaries(offset, limit)
        )
    }

    async fn load_messages(
        &self,
        id: &ThreadId,
        query: &MessageQuery,
    ) -> Result<MessagePage, StorageError> {
        timed!(self, LoadMessages, self.inner.load_messages(id, query))
    }

    async fn load_thread_snapshot(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        timed!(self, LoadSnapshot, self.inner.load_thread_snapshot(id))
    }

    async fn create_run(&self, record: &RunRecord) -> Result<(), StorageError> {
        timed!(self, CreateRun, self.inner.create_run(record))
    }

    async fn load_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StorageError> {
        timed!(self, LoadRun, self.inner.load_run(run_id))
    }

    async fn latest_run(&self, thread_id: &ThreadId) -> Result<Option<RunRecord>, StorageError> {
        timed!(self, LatestRun, self.inner.latest_run(thread_id))
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StorageError> {
        timed!(self, ListRuns, self.inner.list_runs(query))
    }

    async fn checkpoint(
        &self,
        checkpoint: Checkpoint,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        timed!(self, Checkpoint, self.inner.checkpoint(checkpoint))
    }

    async fn fence(&self, id: &ThreadId, token: FencingToken) -> Result<(), StorageError> {
        timed!(self, Fence, self.inner.fence(id, token))
    }

    async fn fence_and_load(
        &self,
        id: &ThreadId,
        token: FencingToken,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        timed!(self, FenceAndLoad, self.inner.fence_and_load(id, token))
    }

    async fn load_approval(&self, id: &ApprovalId) -> Result<Option<Approval>, StorageError> {
        timed!(self, LoadApproval, self.inner.load_approval(id))
    }

    async fn list_approvals(&self, query: &ApprovalQuery) -> Result<ApprovalPage, StorageError> {
        timed!(self, ListApprovals, self.inner.list_approvals(query))
    }

    async fn unpublished_approvals(
        &self,
        older_than: Duration,
        limit: usize,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        timed!(
            self,
            UnpublishedApprovals,
            self.inner.unpublished_approvals(older_than, limit)
        )
    }

    async fn approvals_published(
        &self,
        published: &[(ApprovalId, ApprovalEvent)],
    ) -> Result<(), StorageError> {
        timed!(
            self,
            ApprovalsPublished,
            self.inner.approvals_published(published)
        )
    }

    fn webhooks(&self) -> &dyn WebhookStore {
        self.inner.webhooks()
    }

    fn io_counts(&self) -> Option<StoreIoCounts> {
        self.inner.io_counts()
    }

    async fn waiting_runs(&self) -> Result<WaitingRuns, StorageError> {
        self.inner.waiting_runs().await
    }
}
