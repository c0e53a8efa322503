//! Remote delegates: agents with an `endpoint`, reached through a [`RemoteBackend`]
//! registered for the endpoint's `backend` (the gateway registers A2A).
//!
//! The engine knows nothing of HTTP: a backend turns one delegate call into work on
//! the remote agent and reports how it stands — finished, or waiting for input —
//! in the terms below. See `docs/decisions/0028-remote-delegates-behind-a-backend.md`.

use std::fmt;

use async_trait::async_trait;

use crate::JsonValue;
use crate::contract::{DelegateRunStatus, RemoteEndpoint, TraceContext};
use crate::ids::AgentId;

/// A remote agent as its backend describes it (A2A: its agent card), read when the
/// runtime starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteAgentCard {
    /// The agent's own name.
    pub name: String,
    /// What the agent says it does; quoted in the delegate tool's description.
    pub description: String,
    /// The backend can stream a task's progress; otherwise it is polled.
    pub streaming: bool,
}

/// A unit of work on the remote agent (A2A: a task in its context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTask {
    /// The task's id on the remote side.
    pub task_id: String,
    /// The conversation the task belongs to.
    pub context_id: String,
}

/// One open request of a remote task that waits for input.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteRequest {
    /// The remote tool call that waits, when the remote agent names it.
    pub call_id: Option<String>,
    /// That call's tool.
    pub tool_name: Option<String>,
    /// What is asked (e.g. `tool:AskUserQuestion`), when said.
    pub action: Option<String>,
    /// The question for a human.
    pub message: String,
    /// The waiting call's arguments.
    pub arguments: JsonValue,
}

/// Where a remote task stands when the call stops waiting for it.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteOutcome {
    /// The task ended.
    Finished {
        /// The task.
        task: RemoteTask,
        /// How it ended.
        status: DelegateRunStatus,
        /// The agent's answer, if it gave one.
        response: Option<String>,
    },
    /// The task waits for input.
    InputRequired {
        /// The task.
        task: RemoteTask,
        /// The agent's words about what it needs.
        message: String,
        /// What it waits on, one entry per open request (may be empty when the
        /// remote agent only says it in words).
        requests: Vec<RemoteRequest>,
    },
}

/// A decision handed on to a remote task that waits for input.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteAnswer {
    /// Approve (resume) or deny (cancel) what was asked.
    pub approved: bool,
    /// The remote calls answered; empty when the task named none.
    pub call_ids: Vec<String>,
    /// Why, for a denial.
    pub reason: Option<String>,
    /// The decision's payload (`true`/`false` for a plain approval).
    pub result: JsonValue,
}

/// What a delegate call asks of the remote agent.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteAct {
    /// Start a task with this prompt.
    Start {
        /// The task for the agent.
        prompt: String,
    },
    /// Answer a task that waits for input.
    Answer {
        /// The waiting task.
        task: RemoteTask,
        /// The decision.
        answer: RemoteAnswer,
    },
    /// Follow a task this call started on a node that stopped before the task
    /// ended (a failover): nothing is sent, so the remote work runs once.
    Follow {
        /// The task already started.
        task: RemoteTask,
    },
}

/// Hears a remote task while a call waits for it.
#[async_trait]
pub trait RemoteProgress: Send + Sync {
    /// The backend knows the task's ids: from now on a timeout or an abandoned
    /// call cancels that task, and a node taking the call over follows it
    /// (awaited: the task is on record before the backend reads on).
    async fn task_known(&self, task: &RemoteTask);

    /// One progress item in the backend's own form (A2A: a `StreamResponse`).
    async fn event(&self, event: JsonValue);
}

/// One execution of a remote delegate call.
pub struct RemoteCall<'a> {
    /// The delegate (its local id).
    pub agent_id: &'a AgentId,
    /// Where and how to reach it.
    pub endpoint: &'a RemoteEndpoint,
    /// Its card, when it was discovered.
    pub card: Option<&'a RemoteAgentCard>,
    /// What to do.
    pub act: RemoteAct,
    /// Stable per call and attempt: a backend may use it as its message id.
    pub idempotency_key: String,
    /// The trace context to send (the run's trace, a span of this call).
    pub trace: Option<TraceContext>,
    /// Where progress goes.
    pub progress: &'a dyn RemoteProgress,
}

impl fmt::Debug for RemoteCall<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteCall")
            .field("agent_id", &self.agent_id)
            .field("endpoint", &self.endpoint.base_url)
            .field("act", &self.act)
            .field("idempotency_key", &self.idempotency_key)
            .finish_non_exhaustive()
    }
}

/// Why a remote agent could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The endpoint's settings cannot work (bad URL, unknown auth type, ...).
    #[error("remote endpoint misconfigured: {0}")]
    Config(String),
    /// The remote agent could not be reached.
    #[error("remote agent unreachable: {0}")]
    Unreachable(String),
    /// The remote agent refused the request.
    #[error("remote agent refused the request: {0}")]
    Refused(String),
    /// The remote agent answered something this backend cannot read.
    #[error("unexpected answer from the remote agent: {0}")]
    Protocol(String),
}

/// A remote agent cannot be used as configured (no such backend, or an endpoint
/// the backend refuses), found when its card is read at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot discover remote agent `{agent}`: {reason}")]
pub struct DiscoveryError {
    /// The remote agent's local id.
    pub agent: String,
    /// What went wrong, with the URLs tried.
    pub reason: String,
}

/// A protocol that runs agents in other services (A2A in the gateway).
#[async_trait]
pub trait RemoteBackend: Send + Sync + fmt::Debug {
    /// Refuses endpoint settings this backend cannot use (unknown options, auth
    /// types); checked whenever an agent delegating to it is resolved, so a bad
    /// entry is refused when it is configured.
    fn check_endpoint(&self, endpoint: &RemoteEndpoint) -> Result<(), RemoteError>;

    /// Reads the agent's card; run once per remote agent when the runtime starts.
    async fn discover(
        &self,
        agent: &AgentId,
        endpoint: &RemoteEndpoint,
    ) -> Result<RemoteAgentCard, RemoteError>;

    /// Performs `call.act` and follows the task until it ends or waits for input.
    /// Time limits are the caller's: the future may be dropped at any point.
    async fn execute(&self, call: RemoteCall<'_>) -> Result<RemoteOutcome, RemoteError>;

    /// Cancels a task nobody waits for any more.
    async fn cancel(&self, endpoint: &RemoteEndpoint, task: &RemoteTask)
    -> Result<(), RemoteError>;
}
