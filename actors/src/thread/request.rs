//! `RunRequest`: what starts (or continues) a run on a thread.

use serde::{Deserialize, Serialize};

use crate::contract::{InferenceOverride, Message, RunOrigin, TraceContext};
use crate::ids::{AgentId, RunId, ThreadId, ToolCallId};

/// New input for a thread: messages to append and who should answer them.
///
/// A request on a thread whose previous run is still active or waiting cancels that
/// run first and starts a continuation run whose `parent_run_id` is the old run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The thread; created on first use.
    pub thread_id: ThreadId,
    /// The agent; defaults to the thread's previous agent, then the runtime's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<AgentId>,
    /// Messages to append before the run starts (usually one user message).
    pub messages: Vec<Message>,
    /// A run id chosen by the caller (e.g. the mailbox); generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// Lineage: the run this one continues or was delegated from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    /// Lineage: the thread of the delegating run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_thread_id: Option<ThreadId>,
    /// Lineage: the delegating run's tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<ToolCallId>,
    /// Where the request came from.
    #[serde(default)]
    pub origin: RunOrigin,
    /// Inference parameters for every step of this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<InferenceOverride>,
    /// The trace the run joins (the caller's `traceparent`); a new one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}

impl RunRequest {
    /// A request appending `messages` to `thread_id`.
    pub fn new(thread_id: ThreadId, messages: Vec<Message>) -> Self {
        Self {
            thread_id,
            agent_id: None,
            messages,
            run_id: None,
            parent_run_id: None,
            parent_thread_id: None,
            parent_tool_call_id: None,
            origin: RunOrigin::User,
            overrides: None,
            trace: None,
        }
    }

    /// Runs this agent.
    pub fn with_agent_id(mut self, agent_id: AgentId) -> Self {
        self.agent_id = Some(agent_id);
        self
    }

    /// Uses a caller-chosen run id.
    pub fn with_run_id(mut self, run_id: RunId) -> Self {
        self.run_id = Some(run_id);
        self
    }

    /// Records the parent run.
    pub fn with_parent_run_id(mut self, run_id: RunId) -> Self {
        self.parent_run_id = Some(run_id);
        self
    }

    /// Records the delegating run: its thread, the run, and the tool call that
    /// started this one.
    pub fn with_delegation_lineage(
        mut self,
        thread_id: ThreadId,
        run_id: RunId,
        call_id: ToolCallId,
    ) -> Self {
        self.parent_thread_id = Some(thread_id);
        self.parent_run_id = Some(run_id);
        self.parent_tool_call_id = Some(call_id);
        self
    }

    /// Sets the origin.
    pub fn with_origin(mut self, origin: RunOrigin) -> Self {
        self.origin = origin;
        self
    }

    /// Joins the run to `trace` (a new trace starts when `None`).
    pub fn with_trace(mut self, trace: Option<TraceContext>) -> Self {
        self.trace = trace;
        self
    }

    /// Sets run-wide inference overrides.
    pub fn with_overrides(mut self, overrides: InferenceOverride) -> Self {
        self.overrides = Some(overrides);
        self
    }
}
