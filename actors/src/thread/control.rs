//! The answers and errors of run control: start, decide, cancel, status.

use serde::{Deserialize, Serialize};

use crate::contract::{RunStatus, ToolCallStatus};
use crate::ids::{DecisionId, RunId, ThreadId, ToolCallId};

/// A run was accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTicket {
    /// The thread.
    pub thread_id: ThreadId,
    /// The new run.
    pub run_id: RunId,
}

/// What activating a run by its dispatch found (the mailbox's delivery step).
///
/// A dispatch may be delivered more than once (a node died holding its claim), so
/// activation is idempotent: a run the thread already knows is not started again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// The run was new and is starting now.
    Started,
    /// The run is already executing on this thread (e.g. continued after a restart).
    Running,
    /// The run is waiting for decisions.
    Waiting,
    /// The run already finished.
    Finished,
}

/// A decision was accepted (or recognised as already applied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionAck {
    /// The run the decision belongs to.
    pub run_id: RunId,
    /// The call it decides.
    pub call_id: ToolCallId,
    /// Its idempotency key.
    pub decision_id: DecisionId,
    /// `true` when this decision id was already applied; nothing was done again.
    pub duplicate: bool,
    /// `true` when the run executes on now (resumed by this decision, or — for a
    /// duplicate — still executing from it): whoever follows it (the decision's
    /// sink, its watch) sees it to its end or its next wait.
    #[serde(default)]
    pub resumed: bool,
}

/// What a thread is doing, answered without waiting for its run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStatus {
    /// The thread.
    pub thread_id: ThreadId,
    /// The active or waiting run, if any.
    pub run: Option<RunSummary>,
    /// Whether a segment of the run is executing right now.
    pub busy: bool,
    /// Inputs queued behind it.
    pub queued: usize,
}

/// The active run of a thread, as its actor sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run.
    pub run_id: RunId,
    /// Running or Waiting.
    pub status: RunStatus,
    /// Tool calls executing now.
    pub running_tools: usize,
    /// Whether inference is in flight.
    pub inferring: bool,
}

/// Why a control request was refused; nothing was changed.
///
/// On the wire (thread calls) it is `{"kind": ..., "detail": ...}`: adjacent
/// tagging, because some variants carry a bare string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ControlError {
    /// The request carried no messages.
    #[error("the request has no input messages")]
    EmptyInput,
    /// Neither the request, the thread nor the runtime names an agent.
    #[error("no agent: name one in the request or configure a default agent")]
    NoAgent,
    /// The agent could not be resolved.
    #[error("cannot resolve the agent: {0}")]
    Resolve(String),
    /// The thread has no active or waiting run.
    #[error("thread `{thread_id}` has no active run")]
    NoActiveRun {
        /// The thread.
        thread_id: ThreadId,
    },
    /// The named run is not the thread's active run.
    #[error("run `{run_id}` is not active")]
    RunNotActive {
        /// The run.
        run_id: RunId,
    },
    /// No run has this id.
    #[error("run `{run_id}` not found")]
    RunNotFound {
        /// The run.
        run_id: RunId,
    },
    /// The run has no tool call with this id.
    #[error("tool call `{call_id}` not found in the active run")]
    UnknownToolCall {
        /// The call.
        call_id: ToolCallId,
    },
    /// The call already finished; decisions can no longer change it.
    #[error("tool call `{call_id}` already finished ({status:?})")]
    CallFinished {
        /// The call.
        call_id: ToolCallId,
        /// Its terminal status.
        status: ToolCallStatus,
    },
    /// The call is not waiting for a decision.
    #[error("tool call `{call_id}` is not suspended ({status:?})")]
    CallNotSuspended {
        /// The call.
        call_id: ToolCallId,
        /// Its status.
        status: ToolCallStatus,
    },
    /// The thread's actor could not be reached or started.
    #[error("thread unavailable: {0}")]
    Unavailable(String),
}
