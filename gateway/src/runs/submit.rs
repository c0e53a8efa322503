//! Starting runs: threads opened by a protocol's client-chosen id, runs
//! accepted in the background (202) or followed from their first event, and the
//! replay of a run's latest activation.

use awaken_actors::contract::{Message, RunDispatch, RunStatus, Thread};
use awaken_actors::mailbox::SubmitOptions;
use awaken_actors::thread::RunRequest;
use awaken_actors::{AgentId, RunId, ThreadId};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::input::{InputBody, StartRunBody, user_messages};
use super::stream::RunEvents;
use super::{RunLookup, RunService};
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use awaken_cluster::events::RunFollow;

/// What a background submission answers (202).
#[derive(Debug, Serialize)]
pub(crate) struct Accepted {
    pub status: &'static str,
    pub thread_id: ThreadId,
    pub run_id: RunId,
    pub dispatch_id: String,
}

impl From<RunDispatch> for Accepted {
    fn from(dispatch: RunDispatch) -> Self {
        Self {
            status: "queued",
            thread_id: dispatch.thread_id,
            run_id: dispatch.run_id,
            dispatch_id: dispatch.dispatch_id.to_string(),
        }
    }
}

impl RunService {
    /// Accepts a run of the Run API's `POST /v1/runs` and follows it from its
    /// first event: on the named thread (checked), or on a new one for the
    /// caller. The agent is checked before a new thread is made; a refused
    /// submission forgets the new thread again.
    pub(crate) async fn start_run(
        &self,
        caller: &Caller,
        body: StartRunBody,
    ) -> Result<RunFollow, ApiError> {
        let messages = user_messages(body.messages)?;
        if let Some(thread_id) = &body.thread_id {
            self.check_thread(caller, thread_id).await?;
        }
        self.check_room(&messages)?;
        self.check_agent(body.agent_id.as_ref(), body.thread_id.as_ref())
            .await?;
        let new_thread = body.thread_id.is_none();
        let thread_id = match body.thread_id {
            Some(thread_id) => thread_id,
            None => {
                let mut thread = Thread::new();
                caller.stamp(&mut thread);
                // A new id: nothing else can have written the thread, and its
                // run's first checkpoint may write it.
                if !self.control.runtime().adopt_new_thread(&thread).await? {
                    self.control.store().create_thread(&thread).await?;
                }
                thread.id
            }
        };
        let run_id = RunId::generate();
        let mut request = RunRequest::new(thread_id.clone(), messages).with_run_id(run_id.clone());
        request.agent_id = body.agent_id;
        request.trace = crate::server::trace::incoming();
        // Follow first, so not one event is published before the stream listens.
        let follow = self.control.follow(&thread_id, &run_id, None).await?;
        if let Err(refused) = self.control.submit(request, SubmitOptions::default()).await {
            if new_thread {
                self.control.runtime().forget_new_thread(&thread_id).await?;
            }
            return Err(refused.into());
        }
        Ok(follow)
    }

    /// Accepts `body` as a background run on `thread_id` (continuing
    /// `parent_run_id` when given): 202 with the run's ids.
    pub(crate) async fn accept_input(
        &self,
        thread_id: ThreadId,
        body: InputBody,
        parent_run_id: Option<RunId>,
    ) -> Result<Response, ApiError> {
        let messages = user_messages(body.messages)?;
        self.check_agent(body.agent_id.as_ref(), Some(&thread_id))
            .await?;
        self.check_room(&messages)?;
        let mut request = RunRequest::new(thread_id, messages);
        request.agent_id = body.agent_id;
        request.parent_run_id = parent_run_id;
        request.trace = crate::server::trace::incoming();
        let options = SubmitOptions {
            priority: body.priority,
            dedupe_key: body.dedupe_key,
            max_attempts: 0,
        };
        let dispatch = self.control.submit(request, options).await?;
        Ok((StatusCode::ACCEPTED, Json(Accepted::from(dispatch))).into_response())
    }

    /// The thread a protocol request names, ready for a run of `agent_id`: created
    /// (for the caller) when it does not exist yet, since protocol clients choose their
    /// chat ids, or a new thread when the request names none. The agent is checked
    /// first, so a refused request creates nothing.
    pub(crate) async fn open_thread(
        &self,
        caller: &Caller,
        thread_id: Option<ThreadId>,
        agent_id: Option<&AgentId>,
    ) -> Result<ThreadId, ApiError> {
        let store = self.control.store();
        let existing = match &thread_id {
            Some(thread_id) => store.load_thread(thread_id).await?,
            None => None,
        };
        if let Some(thread) = existing {
            caller.authorize(&thread)?;
            self.check_agent(agent_id, Some(&thread.id)).await?;
            return Ok(thread.id);
        }
        self.check_agent(agent_id, None).await?;
        // A run follows: a node with no room for it makes no thread either.
        self.check_room(&[])?;
        let generated = thread_id.is_none();
        let mut thread = thread_id.map_or_else(Thread::new, Thread::with_id);
        caller.stamp(&mut thread);
        store.create_thread(&thread).await?;
        // Only an id made here is certainly new: a client's id may be in use by a
        // request racing this one.
        if generated {
            self.control.runtime().seed_new_thread(&thread.id).await?;
        }
        Ok(thread.id)
    }

    /// Accepts a run of `messages` on `thread_id` (see [`open_thread`]) and follows it
    /// from its first event.
    pub(crate) async fn start_followed(
        &self,
        thread_id: ThreadId,
        agent_id: Option<AgentId>,
        messages: Vec<Message>,
        run_id: RunId,
    ) -> Result<RunEvents, ApiError> {
        let mut request = RunRequest::new(thread_id, messages).with_run_id(run_id.clone());
        request.agent_id = agent_id;
        self.submit_followed(request, &run_id).await
    }

    /// Accepts `request` (whose run id is `run_id`) and follows the run from its first
    /// event.
    pub(crate) async fn submit_followed(
        &self,
        mut request: RunRequest,
        run_id: &RunId,
    ) -> Result<RunEvents, ApiError> {
        self.check_room(&request.messages)?;
        request.trace = request.trace.or_else(crate::server::trace::incoming);
        // Follow first, so not one event is published before the stream listens.
        let follow = self
            .control
            .follow(&request.thread_id, run_id, None)
            .await?;
        self.control
            .submit(request, SubmitOptions::default())
            .await?;
        Ok(RunEvents::from(follow))
    }

    /// Replays the latest activation of `run_id` and, when the run is executing,
    /// follows it to its end.
    pub(crate) async fn replay_followed(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
    ) -> Result<RunEvents, ApiError> {
        let follow = self
            .control
            .follow(thread_id, run_id, None)
            .await?
            .from_last_activation();
        let executing = match self.lookup_run(run_id).await? {
            Some(RunLookup::Recorded(record)) => record.status == RunStatus::Running,
            Some(RunLookup::Queued(_)) => true,
            None => false,
        };
        Ok(RunEvents::from(if executing {
            follow
        } else {
            follow.replay_only()
        }))
    }
}
