//! [`FeedingStore`]: the thread store, with every approval change it makes
//! announced to the node's [`ApprovalFeed`] once it is stored.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::ApprovalFeed;
use crate::contract::{Approval, ApprovalChange, ApprovalEvent, RunRecord, Thread, ThreadMetadata};
use crate::error::StorageError;
use crate::ids::{ApprovalId, RunId, ThreadId};
use crate::store::{
    ApprovalPage, ApprovalQuery, Checkpoint, FencingToken, MessagePage, MessageQuery, RunPage,
    RunQuery, StoreIoCounts, ThreadRunStore, ThreadSnapshot, ThreadSummary, WaitingRuns,
    WebhookStore,
};

/// A store whose approval changes are announced to a feed.
pub struct FeedingStore {
    inner: Arc<dyn ThreadRunStore>,
    feed: Arc<ApprovalFeed>,
}

impl FeedingStore {
    /// `inner`, announcing its approval changes to `feed`.
    pub fn new(inner: Arc<dyn ThreadRunStore>, feed: Arc<ApprovalFeed>) -> Self {
        Self { inner, feed }
    }

    fn announced(
        &self,
        changes: Result<Vec<ApprovalChange>, StorageError>,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        if let Ok(changes) = &changes {
            self.feed.announce(changes.clone());
        }
        changes
    }
}

#[async_trait]
impl ThreadRunStore for FeedingStore {
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
        let changes = self.inner.delete_thread(id).await;
        self.announced(changes)
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
        let changes = self.inner.checkpoint(checkpoint).await;
        self.announced(changes)
    }

    async fn fence(&self, id: &ThreadId, token: FencingToken) -> Result<(), StorageError> {
        self.inner.fence(id, token).await
    }

    async fn fence_and_load(
        &self,
        id: &ThreadId,
        token: FencingToken,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        self.inner.fence_and_load(id, token).await
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

    fn io_counts(&self) -> Option<StoreIoCounts> {
        self.inner.io_counts()
    }

    async fn waiting_runs(&self) -> Result<WaitingRuns, StorageError> {
        self.inner.waiting_runs().await
    }
}
