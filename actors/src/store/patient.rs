//! [`PatientStore`]: a database-backed store whose requests wait out an outage.
//!
//! A database restart or failover makes every operation fail for a few seconds
//! with [`StorageError::Unavailable`] (nothing was done). Reads, and writes that
//! failed that way, are tried again with back-off for up to the backend wait
//! (`server.backend_wait_secs`), so an API request or a thread's activation
//! costs latency during a blip rather than an error. A write that may have
//! landed ([`StorageError::MaybeWritten`]) is not repeated blindly: its caller
//! decides. Checkpoints pass straight through: the run loop retries them under
//! its own, longer `store.outage_timeout` (decision 0086).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{
    Checkpoint, FencingToken, MessagePage, MessageQuery, RunPage, RunQuery, StoreIoCounts,
    ThreadRunStore, ThreadSnapshot, ThreadSummary, WaitingRuns, WebhookStore,
};
use crate::backoff::Backoff;
use crate::contract::{RunRecord, Thread, ThreadMetadata};
use crate::error::StorageError;
use crate::ids::{RunId, ThreadId};
use crate::telemetry::StoreMetrics;

/// The first pause before a request is tried again; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two tries of a request.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// A store whose requests wait up to `wait` for the database to come back.
pub(crate) struct PatientStore {
    inner: Arc<dyn ThreadRunStore>,
    wait: Duration,
    metrics: Arc<StoreMetrics>,
}

impl PatientStore {
    /// `inner`, patient when it is database-backed; as it is otherwise (an
    /// in-memory or file store is never away).
    pub(crate) fn wrap(
        inner: Arc<dyn ThreadRunStore>,
        wait: Duration,
        metrics: &Arc<StoreMetrics>,
    ) -> Arc<dyn ThreadRunStore> {
        if inner.io_counts().is_none() {
            return inner;
        }
        Arc::new(Self {
            inner,
            wait,
            metrics: Arc::clone(metrics),
        })
    }

    /// Whether a request that first failed at `since` may try again after
    /// `pause`; records the wait when it gives up.
    fn may_retry(&self, since: Instant, pause: Duration) -> bool {
        let retry = since.elapsed() + pause < self.wait;
        if !retry {
            self.metrics.request_waited(since.elapsed(), false);
        }
        retry
    }
}

/// Awaits `$call` until it does not fail with `Unavailable`, or the wait is over.
macro_rules! patient {
    ($self:ident, $call:expr) => {{
        let mut failing: Option<(Instant, Backoff)> = None;
        loop {
            match $call.await {
                Err(StorageError::Unavailable(reason)) => {
                    let (since, backoff) =
                        failing.get_or_insert_with(|| (Instant::now(), Backoff::new(FIRST_PAUSE, MAX_PAUSE)));
                    let pause = backoff.next_pause();
                    if !$self.may_retry(*since, pause) {
                        break Err(StorageError::Unavailable(reason));
                    }
                    tracing::debug!(%reason, "thread store unavailable; trying again");
                    tokio::time::sleep(pause).await;
                }
                done => {
                    if let Some((since, _)) = failing {
                        $self.metrics.request_waited(since.elapsed(), true);
                    }
                    break done;
                }
            }
        }
    }};
}

#[async_trait]
impl ThreadRunStore for PatientStore {
    async fn create_thread(&self, thread: &Thread) -> Result<(), StorageError> {
        patient!(self, self.inner.create_thread(thread))
    }

    async fn load_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StorageError> {
        patient!(self, self.inner.load_thread(id))
    }

    async fn update_thread_metadata(
        &self,
        id: &ThreadId,
        metadata: ThreadMetadata,
    ) -> Result<(), StorageError> {
        patient!(
            self,
            self.inner.update_thread_metadata(id, metadata.clone())
        )
    }

    async fn delete_thread(&self, id: &ThreadId) -> Result<(), StorageError> {
        patient!(self, self.inner.delete_thread(id))
    }

    async fn list_threads(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadId>, StorageError> {
        patient!(self, self.inner.list_threads(offset, limit))
    }

    async fn list_thread_summaries(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadSummary>, StorageError> {
        patient!(self, self.inner.list_thread_summaries(offset, limit))
    }

    async fn load_messages(
        &self,
        id: &ThreadId,
        query: &MessageQuery,
    ) -> Result<MessagePage, StorageError> {
        patient!(self, self.inner.load_messages(id, query))
    }

    async fn load_thread_snapshot(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        patient!(self, self.inner.load_thread_snapshot(id))
    }

    async fn create_run(&self, record: &RunRecord) -> Result<(), StorageError> {
        patient!(self, self.inner.create_run(record))
    }

    async fn load_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StorageError> {
        patient!(self, self.inner.load_run(run_id))
    }

    async fn latest_run(&self, thread_id: &ThreadId) -> Result<Option<RunRecord>, StorageError> {
        patient!(self, self.inner.latest_run(thread_id))
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StorageError> {
        patient!(self, self.inner.list_runs(query))
    }

    async fn checkpoint(&self, checkpoint: Checkpoint) -> Result<(), StorageError> {
        self.inner.checkpoint(checkpoint).await
    }

    async fn fence(&self, id: &ThreadId, token: FencingToken) -> Result<(), StorageError> {
        patient!(self, self.inner.fence(id, token))
    }

    async fn fence_and_load(
        &self,
        id: &ThreadId,
        token: FencingToken,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        patient!(self, self.inner.fence_and_load(id, token))
    }

    fn webhooks(&self) -> &dyn WebhookStore {
        self.inner.webhooks()
    }

    fn io_counts(&self) -> Option<StoreIoCounts> {
        self.inner.io_counts()
    }

    async fn waiting_runs(&self) -> Result<WaitingRuns, StorageError> {
        patient!(self, self.inner.waiting_runs())
    }
}
