//! [`PatientStore`]: a database-backed store whose requests wait out an outage.
//!
//! A database restart or failover makes every operation fail for a few seconds
//! with [`StorageError::Unavailable`] (nothing was done). Reads, and writes that
//! failed that way, are tried again with back-off for up to the backend wait
//! (`server.backend_wait_secs`), so an API request or a thread's activation
//! costs latency during a blip rather than an error. A write that may have
//! landed ([`StorageError::MaybeWritten`]) is not repeated blindly: its caller
//! decides. A create tried again that finds its record there already checks
//! whether the record is the one it wrote, and a delete tried again that finds
//! nothing succeeds (an unanswered try that landed). Checkpoints pass straight through: the run loop retries them under
//! its own, longer `store.outage_timeout` (decision 0086).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{
    ApprovalPage, ApprovalQuery, Checkpoint, FencingToken, MessagePage, MessageQuery, RunPage,
    RunQuery, StoreIoCounts, ThreadRunStore, ThreadSnapshot, ThreadSummary, WaitingRuns,
    WebhookStore,
};
use crate::backoff::Backoff;
use crate::contract::{Approval, ApprovalChange, ApprovalEvent, RunRecord, Thread, ThreadMetadata};
use crate::error::StorageError;
use crate::ids::{ApprovalId, RunId, ThreadId};
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

/// Whether `stored` is the thread a create wrote: a try that failed as
/// unavailable may have landed all the same (its statement went out before the
/// connection broke), and the try after it then finds the thread there. The
/// store stamps the times the creator left unset.
fn is_the_thread_written(stored: &Thread, written: &Thread) -> bool {
    let mut stored = stored.clone();
    if written.metadata.created_at.is_none() {
        stored.metadata.created_at = None;
    }
    if written.metadata.updated_at.is_none() {
        stored.metadata.updated_at = None;
    }
    stored == *written
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
        let tries = AtomicU32::new(0);
        let created = patient!(self, async {
            tries.fetch_add(1, Ordering::Relaxed);
            self.inner.create_thread(thread).await
        });
        match created {
            Err(StorageError::AlreadyExists(what)) if tries.into_inner() > 1 => {
                let stored = patient!(self, self.inner.load_thread(&thread.id))?;
                if stored.is_some_and(|stored| is_the_thread_written(&stored, thread)) {
                    Ok(())
                } else {
                    Err(StorageError::AlreadyExists(what))
                }
            }
            other => other,
        }
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

    async fn delete_thread(&self, id: &ThreadId) -> Result<Vec<ApprovalChange>, StorageError> {
        let tries = AtomicU32::new(0);
        let deleted = patient!(self, async {
            tries.fetch_add(1, Ordering::Relaxed);
            self.inner.delete_thread(id).await
        });
        match deleted {
            // An unanswered try deleted it: gone, as asked (what it cancelled
            // is owed to the feed, which catches up with it).
            Err(StorageError::NotFound(_)) if tries.into_inner() > 1 => Ok(Vec::new()),
            other => other,
        }
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
        let tries = AtomicU32::new(0);
        let created = patient!(self, async {
            tries.fetch_add(1, Ordering::Relaxed);
            self.inner.create_run(record).await
        });
        match created {
            Err(StorageError::AlreadyExists(what)) if tries.into_inner() > 1 => {
                let stored = patient!(self, self.inner.load_run(&record.run_id))?;
                if stored.is_some_and(|stored| stored == *record) {
                    Ok(())
                } else {
                    Err(StorageError::AlreadyExists(what))
                }
            }
            other => other,
        }
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

    async fn checkpoint(
        &self,
        checkpoint: Checkpoint,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
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

    async fn load_approval(&self, id: &ApprovalId) -> Result<Option<Approval>, StorageError> {
        patient!(self, self.inner.load_approval(id))
    }

    async fn list_approvals(&self, query: &ApprovalQuery) -> Result<ApprovalPage, StorageError> {
        patient!(self, self.inner.list_approvals(query))
    }

    async fn unpublished_approvals(
        &self,
        older_than: Duration,
        limit: usize,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        patient!(self, self.inner.unpublished_approvals(older_than, limit))
    }

    async fn approvals_published(
        &self,
        published: &[(ApprovalId, ApprovalEvent)],
    ) -> Result<(), StorageError> {
        patient!(self, self.inner.approvals_published(published))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::store::InMemoryStore;

    /// The in-memory store whose first create is answered as if the connection
    /// broke before the answer, whatever it did (it may have landed, as a
    /// database crash mid-statement leaves it).
    #[derive(Default)]
    struct LandsUnanswered {
        inner: InMemoryStore,
        answered_once: AtomicBool,
    }

    #[async_trait]
    impl ThreadRunStore for LandsUnanswered {
        async fn create_thread(&self, thread: &Thread) -> Result<(), StorageError> {
            let created = self.inner.create_thread(thread).await;
            if self.answered_once.swap(true, Ordering::SeqCst) {
                created
            } else {
                Err(StorageError::Unavailable("connection reset".to_owned()))
            }
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
            let deleted = self.inner.delete_thread(id).await;
            if self.answered_once.swap(true, Ordering::SeqCst) {
                deleted
            } else {
                Err(StorageError::Unavailable("connection reset".to_owned()))
            }
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
        async fn latest_run(
            &self,
            thread_id: &ThreadId,
        ) -> Result<Option<RunRecord>, StorageError> {
            self.inner.latest_run(thread_id).await
        }
        async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StorageError> {
            self.inner.list_runs(query).await
        }
        async fn checkpoint(
            &self,
            checkpoint: Checkpoint,
        ) -> Result<Vec<ApprovalChange>, StorageError> {
            self.inner.checkpoint(checkpoint).await
        }
        async fn fence(&self, id: &ThreadId, token: FencingToken) -> Result<(), StorageError> {
            self.inner.fence(id, token).await
        }
        async fn load_approval(&self, id: &ApprovalId) -> Result<Option<Approval>, StorageError> {
            self.inner.load_approval(id).await
        }
        async fn list_approvals(
            &self,
            query: &ApprovalQuery,
        ) -> Result<ApprovalPage, StorageError> {
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

    fn patient(inner: Arc<dyn ThreadRunStore>) -> PatientStore {
        PatientStore {
            inner,
            wait: Duration::from_secs(5),
            metrics: Arc::default(),
        }
    }

    #[tokio::test]
    async fn a_create_that_landed_unanswered_is_not_refused_on_its_retry() {
        let store = patient(Arc::new(LandsUnanswered::default()));
        let thread = Thread::new();
        store.create_thread(&thread).await.unwrap();
        assert_eq!(
            store.load_thread(&thread.id).await.unwrap().unwrap().id,
            thread.id
        );
    }

    #[tokio::test]
    async fn a_delete_that_landed_unanswered_is_not_refused_on_its_retry() {
        let inner = Arc::new(LandsUnanswered::default());
        let thread = Thread::new();
        inner.inner.create_thread(&thread).await.unwrap();
        let store = patient(Arc::clone(&inner) as Arc<dyn ThreadRunStore>);
        store.delete_thread(&thread.id).await.unwrap();
        assert!(store.load_thread(&thread.id).await.unwrap().is_none());
        // Answered at the first try, an unknown thread is still not found.
        let unknown = store.delete_thread(&ThreadId::generate()).await;
        assert!(
            matches!(unknown, Err(StorageError::NotFound(_))),
            "{unknown:?}"
        );
    }

    #[tokio::test]
    async fn a_thread_already_there_is_still_refused() {
        let inner = Arc::new(LandsUnanswered::default());
        let thread = Thread::new();
        // Created before, and answered at the first try: refused as it is.
        inner.inner.create_thread(&thread).await.unwrap();
        inner.answered_once.store(true, Ordering::SeqCst);
        let store = patient(Arc::clone(&inner) as Arc<dyn ThreadRunStore>);
        let again = store.create_thread(&thread).await;
        assert!(
            matches!(again, Err(StorageError::AlreadyExists(_))),
            "{again:?}"
        );

        // Another thread under the id, found by the retry of an unanswered try:
        // not the one written.
        let inner = Arc::new(LandsUnanswered::default());
        let mut theirs = Thread::with_id(thread.id.clone());
        theirs.metadata.title = Some("theirs".to_owned());
        inner.inner.create_thread(&theirs).await.unwrap();
        let store = patient(Arc::clone(&inner) as Arc<dyn ThreadRunStore>);
        let mut ours = Thread::with_id(thread.id.clone());
        ours.metadata.title = Some("ours".to_owned());
        let clash = store.create_thread(&ours).await;
        assert!(
            matches!(clash, Err(StorageError::AlreadyExists(_))),
            "{clash:?}"
        );
        let stored = store.load_thread(&thread.id).await.unwrap().unwrap();
        assert_eq!(stored.metadata.title.as_deref(), Some("theirs"));
    }
}
