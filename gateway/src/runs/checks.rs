//! What a request names, checked before anything changes: the agent, the
//! thread (and whether the caller may touch it), the run, and what the thread
//! runs or waits for now.

use awaken_actors::contract::{
    Message, RunDispatch, RunDispatchStatus, RunRecord, RunStatus, Thread, Visibility,
};
use awaken_actors::mailbox::DispatchQuery;
use awaken_actors::memory::run_bytes;
use awaken_actors::{AgentId, RunId, ThreadId};

use super::RunService;
use crate::server::auth::Caller;
use crate::server::error::ApiError;

impl RunService {
    /// The agent a run on `thread_id` will use: the requested one (404 unless it is
    /// registered), else the thread's previous one, else the default agent; 400 when
    /// there is none, rather than accepting a run that can never start.
    pub(crate) async fn check_agent(
        &self,
        requested: Option<&AgentId>,
        thread_id: Option<&ThreadId>,
    ) -> Result<AgentId, ApiError> {
        let runtime = self.control.runtime();
        if let Some(agent) = requested {
            if !runtime.registries().agents.contains(agent.as_str()) {
                return Err(ApiError::NotFound(format!("unknown agent `{agent}`")));
            }
            return Ok(agent.clone());
        }
        if let Some(thread_id) = thread_id
            && let Some(run) = self.control.store().latest_run(thread_id).await?
        {
            return Ok(run.agent_id);
        }
        runtime.default_agent().cloned().ok_or_else(|| {
            let registries = runtime.registries();
            let known: Vec<&str> = registries.agents.ids().collect();
            ApiError::BadRequest(format!(
                "no agent: name one in `agentId` (known: {})",
                known.join(", ")
            ))
        })
    }

    /// Room for a new run with the input `messages` in the node's admitted
    /// memory: 503 with `Retry-After` past it, before anything is written
    /// (decision 0089).
    pub(crate) fn check_room(&self, messages: &[Message]) -> Result<(), ApiError> {
        self.control
            .runtime()
            .memory()
            .admit(run_bytes(messages))
            .map_err(|refused| ApiError::Unavailable(refused.to_string()))
    }

    /// The thread: 404 unless it exists and the caller may touch it.
    pub(crate) async fn check_thread(
        &self,
        caller: &Caller,
        thread_id: &ThreadId,
    ) -> Result<Thread, ApiError> {
        match self.control.store().load_thread(thread_id).await? {
            Some(thread) => {
                caller.authorize(&thread)?;
                Ok(thread)
            }
            None => Err(ApiError::NotFound(format!("unknown thread `{thread_id}`"))),
        }
    }

    /// The thread of a run that exists (started, or accepted and queued) on a
    /// thread the caller may touch: 404 otherwise, the same either way.
    pub(crate) async fn thread_of_run(
        &self,
        caller: &Caller,
        run_id: &RunId,
    ) -> Result<ThreadId, ApiError> {
        Ok(self.run(caller, run_id).await?.thread_id().clone())
    }

    /// 404 `unknown run` unless the caller may touch `thread_id`, the run's thread:
    /// another tenant's run is answered as one that does not exist.
    pub(crate) async fn check_run_thread(
        &self,
        caller: &Caller,
        run_id: &RunId,
        thread_id: &ThreadId,
    ) -> Result<(), ApiError> {
        match self.check_thread(caller, thread_id).await {
            Ok(_) => Ok(()),
            Err(ApiError::NotFound(_)) => {
                Err(ApiError::NotFound(format!("unknown run `{run_id}`")))
            }
            Err(other) => Err(other),
        }
    }

    /// The thread's run that waits for decisions: 409 when none does.
    pub(crate) async fn waiting_run(
        &self,
        caller: &Caller,
        thread_id: &ThreadId,
    ) -> Result<RunRecord, ApiError> {
        self.check_thread(caller, thread_id).await?;
        match self.control.store().latest_run(thread_id).await? {
            Some(run) if run.status == RunStatus::Waiting => Ok(run),
            _ => Err(ApiError::Conflict(format!(
                "no run of thread `{thread_id}` waits for a decision"
            ))),
        }
    }

    /// The run a thread is executing (or has accepted and not started), for stream
    /// resumption; `None` when it runs nothing.
    pub(crate) async fn running_run(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Option<RunId>, ApiError> {
        if let Some(run) = self.control.store().latest_run(thread_id).await?
            && run.status == RunStatus::Running
        {
            return Ok(Some(run.run_id));
        }
        Ok(self
            .queued_dispatches(thread_id)
            .await?
            .into_iter()
            .next()
            .map(|dispatch| dispatch.run_id))
    }

    /// The thread's log as users see it (internal messages left out): 404 for an
    /// unknown thread or another tenant's.
    pub(crate) async fn visible_messages(
        &self,
        caller: &Caller,
        thread_id: &ThreadId,
    ) -> Result<Vec<Message>, ApiError> {
        self.check_thread(caller, thread_id).await?;
        let snapshot = self
            .control
            .store()
            .load_thread_snapshot(thread_id)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("unknown thread `{thread_id}`")))?;
        Ok(snapshot
            .messages
            .into_iter()
            .filter(|message| message.visibility == Visibility::All)
            .collect())
    }

    /// The thread's dispatches that wait in the mailbox.
    pub(crate) async fn queued_dispatches(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Vec<RunDispatch>, ApiError> {
        self.dispatches(thread_id, RunDispatchStatus::Queued).await
    }

    /// The thread's dispatches in `status`.
    pub(super) async fn dispatches(
        &self,
        thread_id: &ThreadId,
        status: RunDispatchStatus,
    ) -> Result<Vec<RunDispatch>, ApiError> {
        let page = self
            .control
            .mailbox()
            .list_dispatches(&DispatchQuery {
                thread_id: Some(thread_id.clone()),
                statuses: vec![status],
                offset: 0,
                limit: 200,
            })
            .await?;
        Ok(page.dispatches)
    }
}
