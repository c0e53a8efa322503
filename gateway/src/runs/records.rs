//! What the native API reads about runs: pages of run records, one run (started
//! or still queued), the thread's latest run and its mailbox.

use awaken_actors::contract::{RunRecord, RunStatus};
use awaken_actors::mailbox::{DispatchPage, DispatchQuery};
use awaken_actors::store::{RunPage, RunQuery, ThreadSnapshot};
use awaken_actors::thread::RunRequest;
use awaken_actors::{RunId, ThreadId};
use awaken_cluster::events::RunFollow;

use super::RunService;
use crate::server::auth::Caller;
use crate::server::error::ApiError;

/// A run as the node knows it.
#[derive(Debug)]
pub(crate) enum RunLookup {
    /// Started: its record.
    Recorded(Box<RunRecord>),
    /// Accepted, waiting in the mailbox: its request.
    Queued(Box<RunRequest>),
}

impl RunLookup {
    /// The run's thread.
    pub(crate) fn thread_id(&self) -> &ThreadId {
        match self {
            Self::Recorded(record) => &record.thread_id,
            Self::Queued(request) => &request.thread_id,
        }
    }
}

impl RunService {
    /// A page of run records; with API keys, the caller's among those it spans.
    pub(crate) async fn runs(
        &self,
        caller: &Caller,
        query: &RunQuery,
    ) -> Result<RunPage, ApiError> {
        let store = self.control.store();
        let mut page = store.list_runs(query).await?;
        if caller.is_tenant() {
            let mut own = Vec::with_capacity(page.runs.len());
            for run in page.runs {
                if let Some(thread) = store.load_thread(&run.thread_id).await?
                    && caller.owns(&thread)
                {
                    own.push(run);
                }
            }
            page.runs = own;
        }
        Ok(page)
    }

    /// The run: its record once started, its request while queued; 404 when
    /// unknown or on a thread the caller may not touch.
    pub(crate) async fn run(&self, caller: &Caller, run_id: &RunId) -> Result<RunLookup, ApiError> {
        let lookup = self
            .lookup_run(run_id)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("unknown run `{run_id}`")))?;
        self.check_run_thread(caller, run_id, lookup.thread_id())
            .await?;
        Ok(lookup)
    }

    /// The run as the node knows it, unchecked: for callers that scope runs
    /// themselves (A2A's tasks belong to an agent).
    pub(crate) async fn lookup_run(&self, run_id: &RunId) -> Result<Option<RunLookup>, ApiError> {
        if let Some(record) = self.control.store().load_run(run_id).await? {
            return Ok(Some(RunLookup::Recorded(Box::new(record))));
        }
        Ok(self
            .control
            .accepted_run(run_id)
            .await?
            .map(|request| RunLookup::Queued(Box::new(request))))
    }

    /// A page of run records, unfiltered by caller: for callers that scope
    /// runs themselves (A2A lists an agent's tasks on a thread it checked).
    pub(crate) async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, ApiError> {
        Ok(self.control.store().list_runs(query).await?)
    }

    /// Follows the run's events after `after_seq` (from the oldest buffered one
    /// without), until the activation ends; a run that has finished yields what
    /// is still buffered.
    pub(crate) async fn follow_run(
        &self,
        caller: &Caller,
        run_id: &RunId,
        after_seq: Option<u64>,
    ) -> Result<RunFollow, ApiError> {
        let thread_id = self.thread_of_run(caller, run_id).await?;
        let follow = self.control.follow(&thread_id, run_id, after_seq).await?;
        // Re-read: the run may have finished between the first read and subscribing.
        let finished = self
            .control
            .store()
            .load_run(run_id)
            .await?
            .is_some_and(|record| record.status == RunStatus::Done);
        Ok(if finished {
            follow.replay_only()
        } else {
            follow
        })
    }

    /// A page of the thread's runs (the thread checked first).
    pub(crate) async fn thread_runs(
        &self,
        caller: &Caller,
        thread_id: &ThreadId,
        query: &RunQuery,
    ) -> Result<RunPage, ApiError> {
        self.check_thread(caller, thread_id).await?;
        Ok(self.control.store().list_runs(query).await?)
    }

    /// The thread's latest run (the thread checked first); 404 when it has none.
    pub(crate) async fn latest_run(
        &self,
        caller: &Caller,
        thread_id: &ThreadId,
    ) -> Result<Option<RunRecord>, ApiError> {
        self.check_thread(caller, thread_id).await?;
        Ok(self.control.store().latest_run(thread_id).await?)
    }

    /// The thread's messages and state, unchecked: for callers that checked
    /// the thread.
    pub(crate) async fn thread_snapshot(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Option<ThreadSnapshot>, ApiError> {
        Ok(self.control.store().load_thread_snapshot(thread_id).await?)
    }

    /// The thread's dispatches in every status, unchecked: for callers that
    /// checked the thread.
    pub(crate) async fn thread_dispatches(
        &self,
        thread_id: &ThreadId,
    ) -> Result<DispatchPage, ApiError> {
        Ok(self
            .control
            .mailbox()
            .list_dispatches(&DispatchQuery::thread(thread_id.clone()))
            .await?)
    }

    /// A page of the thread's mailbox (the thread checked first), without the
    /// claim tokens: a token lets its holder ack or fail the dispatch.
    pub(crate) async fn mailbox(
        &self,
        caller: &Caller,
        thread_id: &ThreadId,
        offset: usize,
        limit: usize,
    ) -> Result<DispatchPage, ApiError> {
        self.check_thread(caller, thread_id).await?;
        let mut page = self
            .control
            .mailbox()
            .list_dispatches(&DispatchQuery {
                thread_id: Some(thread_id.clone()),
                statuses: Vec::new(),
                offset,
                limit,
            })
            .await?;
        for dispatch in &mut page.dispatches {
            dispatch.claim_token = None;
        }
        Ok(page)
    }
}
