//! Who a run is: its ids, its lineage and where the request came from.
//!
//! A [`RunIdentity`] travels with every run (tools see it in their context, records
//! copy it). Lineage (`parent_run_id`, `parent_thread_id`, `parent_tool_call_id`) links a
//! delegated sub-agent run to the run and the tool call that started it.

use super::trace::TraceContext;
use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, RunId, ThreadId, ToolCallId};

/// Where a run request came from; the book also calls this `RunRequestOrigin`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOrigin {
    /// The HTTP API or an SDK, on behalf of a user.
    #[default]
    User,
    /// Another agent, over the Agent-to-Agent protocol.
    A2a,
    /// The runtime itself: child-run notifications, handoffs.
    Internal,
}

/// The ids and lineage that identify one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunIdentity {
    /// The thread the run works on.
    pub thread_id: ThreadId,
    /// The run itself.
    pub run_id: RunId,
    /// The run that started this one (delegation), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    /// The thread of the parent run, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_thread_id: Option<ThreadId>,
    /// The parent's tool call that delegated this run, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<ToolCallId>,
    /// The agent executing the run.
    pub agent_id: AgentId,
    /// Where the request came from.
    #[serde(default)]
    pub origin: RunOrigin,
    /// The trace the run belongs to: the starting request's `traceparent`, or
    /// a new trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}

impl RunIdentity {
    /// A top-level run identity without lineage.
    pub fn new(thread_id: ThreadId, run_id: RunId, agent_id: AgentId, origin: RunOrigin) -> Self {
        Self {
            thread_id,
            run_id,
            parent_run_id: None,
            parent_thread_id: None,
            parent_tool_call_id: None,
            agent_id,
            origin,
            trace: None,
        }
    }

    /// Records the run that started this one.
    pub fn with_parent_run_id(mut self, parent_run_id: RunId) -> Self {
        self.parent_run_id = Some(parent_run_id);
        self
    }

    /// Records the thread of the run that started this one.
    pub fn with_parent_thread_id(mut self, parent_thread_id: ThreadId) -> Self {
        self.parent_thread_id = Some(parent_thread_id);
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn identity() -> RunIdentity {
        RunIdentity::new(
            ThreadId::new("t1").unwrap(),
            RunId::new("r1").unwrap(),
            AgentId::new("a1").unwrap(),
            RunOrigin::A2a,
        )
    }

    #[test]
    fn origin_names() {
        assert_eq!(
            serde_json::to_value(RunOrigin::User).unwrap(),
            json!("user")
        );
        assert_eq!(serde_json::to_value(RunOrigin::A2a).unwrap(), json!("a2a"));
        assert_eq!(
            serde_json::to_value(RunOrigin::Internal).unwrap(),
            json!("internal")
        );
    }

    #[test]
    fn top_level_identity_omits_lineage() {
        assert_eq!(
            serde_json::to_value(identity()).unwrap(),
            json!({"thread_id": "t1", "run_id": "r1", "agent_id": "a1", "origin": "a2a"})
        );
    }

    #[test]
    fn child_identity_round_trips() {
        let child = identity()
            .with_parent_run_id(RunId::new("r0").unwrap())
            .with_parent_thread_id(ThreadId::new("t0").unwrap());
        let value = serde_json::to_value(&child).unwrap();
        assert_eq!(value["parent_run_id"], json!("r0"));
        assert_eq!(value["parent_thread_id"], json!("t0"));
        assert_eq!(serde_json::from_value::<RunIdentity>(value).unwrap(), child);
    }

    #[test]
    fn origin_defaults_to_user() {
        let id: RunIdentity =
            serde_json::from_value(json!({"thread_id": "t", "run_id": "r", "agent_id": "a"}))
                .unwrap();
        assert_eq!(id.origin, RunOrigin::User);
    }
}
