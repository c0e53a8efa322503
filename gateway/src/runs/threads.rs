//! Threads as the native API manages them: pages of the caller's threads,
//! creating, updating and deleting one, and its message history.

use awaken_actors::ThreadId;
use awaken_actors::contract::{Thread, ThreadMetadata};
use awaken_actors::store::{MessagePage, MessageQuery, ThreadSummary};
use awaken_cluster::routing::{CallOutcome, ThreadCall};

use super::{RunService, unexpected};
use crate::server::auth::Caller;
use crate::server::error::ApiError;

impl RunService {
    /// A page of thread ids; with API keys, the caller's among those it spans.
    pub(crate) async fn thread_ids(
        &self,
        caller: &Caller,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadId>, ApiError> {
        let store = self.control.store();
        let threads = store.list_threads(offset, limit).await?;
        if !caller.is_tenant() {
            return Ok(threads);
        }
        let mut own = Vec::with_capacity(threads.len());
        for thread_id in threads {
            if let Some(thread) = store.load_thread(&thread_id).await?
                && caller.owns(&thread)
            {
                own.push(thread_id);
            }
        }
        Ok(own)
    }

    /// A page of thread summaries, the caller's among those it spans.
    pub(crate) async fn thread_summaries(
        &self,
        caller: &Caller,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadSummary>, ApiError> {
        let mut summaries = self
            .control
            .store()
            .list_thread_summaries(offset, limit)
            .await?;
        summaries.retain(|summary| caller.owns(&summary.thread));
        Ok(summaries)
    }

    /// Creates `thread` for the caller; the thread as stored.
    pub(crate) async fn create_thread(
        &self,
        caller: &Caller,
        mut thread: Thread,
    ) -> Result<Thread, ApiError> {
        caller.stamp(&mut thread);
        let store = self.control.store();
        store.create_thread(&thread).await?;
        Ok(store.load_thread(&thread.id).await?.unwrap_or(thread))
    }

    /// Replaces the thread's metadata; the thread as stored.
    pub(crate) async fn update_thread(
        &self,
        thread_id: &ThreadId,
        metadata: ThreadMetadata,
    ) -> Result<Thread, ApiError> {
        let store = self.control.store();
        store.update_thread_metadata(thread_id, metadata).await?;
        store
            .load_thread(thread_id)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("thread `{thread_id}` was deleted")))
    }

    /// Deletes an idle thread (checked first): 409 while it has an active,
    /// waiting or queued run.
    pub(crate) async fn delete_thread(
        &self,
        caller: &Caller,
        thread_id: &ThreadId,
    ) -> Result<(), ApiError> {
        self.check_thread(caller, thread_id).await?;
        let answer = self
            .control
            .call(ThreadCall::Status {
                thread_id: thread_id.clone(),
            })
            .await?;
        match answer.outcome {
            CallOutcome::Status(status) => {
                if let Some(run) = status.run {
                    return Err(ApiError::Conflict(format!(
                        "thread `{thread_id}` has run `{}` ({:?}); cancel it first",
                        run.run_id, run.status
                    )));
                }
            }
            CallOutcome::Failed(refused) => return Err(refused.into()),
            other => return Err(unexpected("status", &other)),
        }
        let queued = self.queued_dispatches(thread_id).await?;
        if !queued.is_empty() {
            return Err(ApiError::Conflict(format!(
                "thread `{thread_id}` has {} queued run(s); cancel them first",
                queued.len()
            )));
        }
        self.control.store().delete_thread(thread_id).await?;
        Ok(())
    }

    /// A page of the thread's messages (checked first).
    pub(crate) async fn messages(
        &self,
        caller: &Caller,
        thread_id: &ThreadId,
        query: &MessageQuery,
    ) -> Result<MessagePage, ApiError> {
        self.check_thread(caller, thread_id).await?;
        Ok(self.control.store().load_messages(thread_id, query).await?)
    }
}
