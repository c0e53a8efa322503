//! Suspension and resume: how a tool call waits for a human and how the answer returns.
//!
//! A tool (or a permission hook) that needs approval produces a [`SuspendTicket`]: the
//! external [`Suspension`] prompt, the [`PendingToolCall`] it holds back, and a
//! [`ToolCallResumeMode`] telling the loop what to do with the answer. The answer
//! arrives as a [`ToolCallResume`] whose [`ResumeDecisionAction`] resumes or cancels.

use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::contract::message::ToolCall;
use crate::contract::trace::TraceContext;
use crate::ids::{AgentId, DecisionId, RunId, ThreadId, ToolCallId};

/// The external-facing description of what input a suspended call needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspension {
    /// Unique suspension id (the ticket id).
    pub id: String,
    /// Action identifier, e.g. `confirm` or `approve`.
    pub action: String,
    /// Human-readable prompt.
    pub message: String,
    /// Action-specific parameters.
    #[serde(default, skip_serializing_if = "JsonValue::is_null")]
    pub parameters: JsonValue,
    /// JSON Schema the response must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<JsonValue>,
}

impl Suspension {
    /// A suspension prompt without parameters or response schema.
    pub fn new(
        id: impl Into<String>,
        action: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            action: action.into(),
            message: message.into(),
            parameters: JsonValue::Null,
            response_schema: None,
        }
    }

    /// Adds action-specific parameters.
    pub fn with_parameters(mut self, parameters: JsonValue) -> Self {
        self.parameters = parameters;
        self
    }

    /// Adds the JSON Schema the response must match.
    pub fn with_response_schema(mut self, schema: JsonValue) -> Self {
        self.response_schema = Some(schema);
        self
    }
}

/// The held-back tool call, as shown to the frontend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingToolCall {
    /// The call's id.
    pub id: ToolCallId,
    /// The tool's name.
    pub name: String,
    /// The original arguments.
    pub arguments: JsonValue,
}

impl From<&ToolCall> for PendingToolCall {
    fn from(call: &ToolCall) -> Self {
        Self {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        }
    }
}

/// What the loop does with a decision once it arrives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallResumeMode {
    /// Re-execute the original call (the decision only unlocks it).
    #[default]
    ReplayToolCall,
    /// Use the decision payload as the tool result; the tool does not run.
    UseDecisionAsToolResult,
    /// Re-execute the tool with the decision payload as its arguments.
    PassDecisionToTool,
}

/// Everything needed to suspend a tool call and later resume it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuspendTicket {
    /// The prompt for the outside world.
    pub suspension: Suspension,
    /// The call being held back.
    pub pending: PendingToolCall,
    /// How to use the decision.
    #[serde(default)]
    pub resume_mode: ToolCallResumeMode,
    /// Set when the suspension belongs to a delegated child run: any decision for
    /// the call (resume or cancel) is handed to the child's call instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<Box<ChildSuspension>>,
    /// Set when the suspension belongs to a task of a remote agent (A2A): any
    /// decision for the call is forwarded to that task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<Box<RemoteSuspension>>,
}

/// Where a suspension shown on a delegating call really waits: a call of a child run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSuspension {
    /// The delegate agent.
    pub agent_id: AgentId,
    /// The child run's thread.
    pub thread_id: ThreadId,
    /// The child run.
    pub run_id: RunId,
    /// The child's suspended call.
    pub call_id: ToolCallId,
}

/// Where a suspension shown on a remote delegate's call really waits: a task of the
/// remote agent that asks for input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSuspension {
    /// The remote delegate agent (its local id).
    pub agent_id: AgentId,
    /// The remote task that waits.
    pub task_id: String,
    /// The remote task's context.
    pub context_id: String,
    /// The remote task's open tool calls, when it names them: a decision answers
    /// each of them alike.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_ids: Vec<String>,
}

impl SuspendTicket {
    /// A ticket from its three parts.
    pub fn new(
        suspension: Suspension,
        pending: PendingToolCall,
        resume_mode: ToolCallResumeMode,
    ) -> Self {
        Self {
            suspension,
            pending,
            resume_mode,
            child: None,
            remote: None,
        }
    }

    /// Marks the ticket as a child run's suspension, so decisions go to the child.
    pub fn with_child(mut self, child: ChildSuspension) -> Self {
        self.child = Some(Box::new(child));
        self
    }

    /// Marks the ticket as a remote task's request, so decisions go to that task.
    pub fn with_remote(mut self, remote: RemoteSuspension) -> Self {
        self.remote = Some(Box::new(remote));
        self
    }

    /// Whether the call only mirrors a suspension that waits elsewhere (a child run
    /// or a remote task): its decision, whatever it says, is handed on by replaying
    /// the call.
    pub fn is_forwarded(&self) -> bool {
        self.child.is_some() || self.remote.is_some()
    }
}

/// Whether a decision lets the call proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeDecisionAction {
    /// Proceed according to the ticket's resume mode.
    Resume,
    /// Cancel the call.
    Cancel,
}

/// A decision on a suspended tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallResume {
    /// Idempotency key: the same decision applied twice has one effect.
    pub decision_id: DecisionId,
    /// Resume or cancel.
    pub action: ResumeDecisionAction,
    /// The decision payload.
    #[serde(default)]
    pub result: JsonValue,
    /// Human-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the decision was made, unix millis.
    pub updated_at: u64,
    /// The trace of whoever sent the decision (their request's or message's
    /// span): the activation it resumes links to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ticket() -> SuspendTicket {
        let call = ToolCall::new(
            ToolCallId::new("c1").unwrap(),
            "delete_file",
            json!({"path": "/tmp/x"}),
        );
        SuspendTicket::new(
            Suspension::new("s1", "confirm", "Delete /tmp/x?")
                .with_parameters(json!({"path": "/tmp/x"})),
            PendingToolCall::from(&call),
            ToolCallResumeMode::ReplayToolCall,
        )
    }

    #[test]
    fn ticket_json_shape() {
        let value = serde_json::to_value(ticket()).unwrap();
        assert_eq!(
            value,
            json!({
                "suspension": {
                    "id": "s1",
                    "action": "confirm",
                    "message": "Delete /tmp/x?",
                    "parameters": {"path": "/tmp/x"}
                },
                "pending": {"id": "c1", "name": "delete_file", "arguments": {"path": "/tmp/x"}},
                "resume_mode": "replay_tool_call"
            })
        );
        assert_eq!(
            serde_json::from_value::<SuspendTicket>(value).unwrap(),
            ticket()
        );
    }

    #[test]
    fn null_parameters_are_omitted_and_default() {
        let s =
            Suspension::new("s", "approve", "ok?").with_response_schema(json!({"type": "boolean"}));
        let value = serde_json::to_value(&s).unwrap();
        assert_eq!(
            value,
            json!({"id": "s", "action": "approve", "message": "ok?", "response_schema": {"type": "boolean"}})
        );
        assert_eq!(serde_json::from_value::<Suspension>(value).unwrap(), s);
    }

    #[test]
    fn resume_modes_and_actions() {
        assert_eq!(
            serde_json::to_value(ToolCallResumeMode::UseDecisionAsToolResult).unwrap(),
            json!("use_decision_as_tool_result")
        );
        assert_eq!(
            serde_json::to_value(ToolCallResumeMode::PassDecisionToTool).unwrap(),
            json!("pass_decision_to_tool")
        );
        assert_eq!(
            ToolCallResumeMode::default(),
            ToolCallResumeMode::ReplayToolCall
        );
        assert_eq!(
            serde_json::to_value(ResumeDecisionAction::Cancel).unwrap(),
            json!("cancel")
        );
    }

    #[test]
    fn decision_json_shape() {
        let decision = ToolCallResume {
            decision_id: DecisionId::new("d1").unwrap(),
            action: ResumeDecisionAction::Resume,
            result: json!({"approved": true}),
            reason: Some("looks fine".into()),
            updated_at: 1_700_000_000_000,
            trace: None,
        };
        let value = serde_json::to_value(&decision).unwrap();
        assert_eq!(
            value,
            json!({
                "decision_id": "d1",
                "action": "resume",
                "result": {"approved": true},
                "reason": "looks fine",
                "updated_at": 1_700_000_000_000u64
            })
        );
        assert_eq!(
            serde_json::from_value::<ToolCallResume>(value).unwrap(),
            decision
        );
        let minimal: ToolCallResume = serde_json::from_value(
            json!({"decision_id": "d2", "action": "cancel", "updated_at": 1}),
        )
        .unwrap();
        assert_eq!(minimal.result, JsonValue::Null);
    }
}
