//! Events a run emits while it executes, and their wire envelope.
//!
//! Every [`AgentEvent`] serializes with an `event_type` tag in snake_case
//! (`{"event_type": "text_delta", "delta": "hi"}`); optional fields are omitted when
//! `None`. Protocol encoders (AI SDK, AG-UI, A2A) translate these into their own
//! shapes. On the wire, each event is wrapped in a [`StreamEvent`] that adds a
//! per-run sequence number and a timestamp, flattened into the same object.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::contract::run::TerminationReason;
use crate::contract::tool::ToolResult;
use crate::contract::tool_call::ToolCallOutcome;
use crate::contract::usage::TokenUsage;
use crate::ids::{MessageId, RunId, ThreadId, ToolCallId};

/// One thing that happened during a run, streamed to clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event_type", rename_all = "snake_case")]
pub enum AgentEvent {
    /// A run started (or resumed).
    RunStart {
        /// The run's thread.
        thread_id: ThreadId,
        /// The run.
        run_id: RunId,
        /// The delegating run, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_run_id: Option<RunId>,
    },
    /// A run ended or paused.
    RunFinish {
        /// The run's thread.
        thread_id: ThreadId,
        /// The run.
        run_id: RunId,
        /// The final result (see [`AgentEvent::extract_response`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<JsonValue>,
        /// Why it ended.
        termination: TerminationReason,
    },
    /// A chunk of assistant text.
    TextDelta {
        /// The new text.
        delta: String,
    },
    /// A chunk of model reasoning.
    ReasoningDelta {
        /// The new reasoning text.
        delta: String,
    },
    /// Encrypted reasoning the provider wants sent back verbatim.
    ReasoningEncryptedValue {
        /// The opaque value.
        encrypted_value: String,
    },
    /// The model began a tool call.
    ToolCallStart {
        /// The call.
        id: ToolCallId,
        /// The tool's name.
        name: String,
    },
    /// A chunk of a tool call's argument JSON.
    ToolCallDelta {
        /// The call.
        id: ToolCallId,
        /// The new argument text.
        args_delta: String,
    },
    /// A tool call's arguments are complete.
    ToolCallReady {
        /// The call.
        id: ToolCallId,
        /// The tool's name.
        name: String,
        /// The parsed arguments.
        arguments: JsonValue,
    },
    /// A tool call finished (or suspended).
    ToolCallDone {
        /// The call.
        id: ToolCallId,
        /// The tool message that carries the result.
        message_id: MessageId,
        /// What the tool returned.
        result: ToolResult,
        /// How the call ended.
        outcome: ToolCallOutcome,
    },
    /// Streaming output from a running tool.
    ToolCallStreamDelta {
        /// The call.
        id: ToolCallId,
        /// The tool's name.
        name: String,
        /// The new output.
        delta: String,
    },
    /// A suspended call was resumed by a decision.
    ToolCallResumed {
        /// The resumed call.
        target_id: ToolCallId,
        /// The decision payload.
        result: JsonValue,
    },
    /// The full message list, e.g. after a resume.
    MessagesSnapshot {
        /// The messages as JSON.
        messages: Vec<JsonValue>,
    },
    /// The full content of an activity (e.g. tool progress).
    ActivitySnapshot {
        /// The activity's message.
        message_id: MessageId,
        /// What kind of activity, e.g. `tool-call-progress`.
        activity_type: String,
        /// The activity content.
        content: JsonValue,
        /// Whether this replaces earlier content.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replace: Option<bool>,
    },
    /// An incremental change to an activity, as JSON Patch operations.
    ActivityDelta {
        /// The activity's message.
        message_id: MessageId,
        /// What kind of activity.
        activity_type: String,
        /// JSON Patch operations.
        patch: Vec<JsonValue>,
    },
    /// An inference round began.
    StepStart {
        /// The assistant message the step produces.
        message_id: MessageId,
    },
    /// An inference round ended.
    StepEnd,
    /// The model call finished.
    InferenceComplete {
        /// The model that answered.
        model: String,
        /// Tokens used, when reported.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<TokenUsage>,
        /// Wall time of the call.
        duration_ms: u64,
    },
    /// The full state, as JSON.
    StateSnapshot {
        /// The state.
        snapshot: JsonValue,
    },
    /// A state change, as JSON Patch operations.
    StateDelta {
        /// JSON Patch operations.
        delta: Vec<JsonValue>,
    },
    /// Something went wrong.
    Error {
        /// What happened.
        message: String,
        /// A machine-readable code.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
}

impl AgentEvent {
    /// The `event_type` tag of this event, as in JSON.
    pub fn event_type(&self) -> &'static str {
        match self {
            Self::RunStart { .. } => "run_start",
            Self::RunFinish { .. } => "run_finish",
            Self::TextDelta { .. } => "text_delta",
            Self::ReasoningDelta { .. } => "reasoning_delta",
            Self::ReasoningEncryptedValue { .. } => "reasoning_encrypted_value",
            Self::ToolCallStart { .. } => "tool_call_start",
            Self::ToolCallDelta { .. } => "tool_call_delta",
            Self::ToolCallReady { .. } => "tool_call_ready",
            Self::ToolCallDone { .. } => "tool_call_done",
            Self::ToolCallStreamDelta { .. } => "tool_call_stream_delta",
            Self::ToolCallResumed { .. } => "tool_call_resumed",
            Self::MessagesSnapshot { .. } => "messages_snapshot",
            Self::ActivitySnapshot { .. } => "activity_snapshot",
            Self::ActivityDelta { .. } => "activity_delta",
            Self::StepStart { .. } => "step_start",
            Self::StepEnd => "step_end",
            Self::InferenceComplete { .. } => "inference_complete",
            Self::StateSnapshot { .. } => "state_snapshot",
            Self::StateDelta { .. } => "state_delta",
            Self::Error { .. } => "error",
        }
    }

    /// The response text of a `RunFinish` result.
    ///
    /// A string result is the text; an object with a string `"response"` field yields
    /// that field; anything else (including no result) yields an empty string.
    pub fn extract_response(result: &Option<JsonValue>) -> String {
        match result {
            Some(JsonValue::String(text)) => text.clone(),
            Some(JsonValue::Object(object)) => object
                .get("response")
                .and_then(JsonValue::as_str)
                .unwrap_or_default()
                .to_owned(),
            _ => String::new(),
        }
    }
}

/// The wire envelope of an event: sequence number and timestamp, flattened in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamEvent {
    /// Monotonically increasing within a run; used for replay on reconnect.
    pub seq: u64,
    /// ISO 8601 timestamp; events of the same millisecond share the text.
    pub timestamp: Arc<str>,
    /// The wrapped event.
    #[serde(flatten)]
    pub event: AgentEvent,
}

impl StreamEvent {
    /// Wraps an event.
    pub fn new(seq: u64, timestamp: impl Into<Arc<str>>, event: AgentEvent) -> Self {
        Self {
            seq,
            timestamp: timestamp.into(),
            event,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::contract::run::StoppedReason;

    fn tid() -> ThreadId {
        ThreadId::new("t1").unwrap()
    }
    fn rid() -> RunId {
        RunId::new("r1").unwrap()
    }
    fn cid() -> ToolCallId {
        ToolCallId::new("c1").unwrap()
    }
    fn mid() -> MessageId {
        MessageId::new("m1").unwrap()
    }

    /// One value of every variant, with its exact JSON.
    fn samples() -> Vec<(AgentEvent, JsonValue)> {
        vec![
            (
                AgentEvent::RunStart {
                    thread_id: tid(),
                    run_id: rid(),
                    parent_run_id: None,
                },
                json!({"event_type": "run_start", "thread_id": "t1", "run_id": "r1"}),
            ),
            (
                AgentEvent::RunStart {
                    thread_id: tid(),
                    run_id: rid(),
                    parent_run_id: Some(RunId::new("r0").unwrap()),
                },
                json!({"event_type": "run_start", "thread_id": "t1", "run_id": "r1", "parent_run_id": "r0"}),
            ),
            (
                AgentEvent::RunFinish {
                    thread_id: tid(),
                    run_id: rid(),
                    result: Some(json!({"response": "done"})),
                    termination: TerminationReason::Stopped(StoppedReason::new("max_rounds")),
                },
                json!({
                    "event_type": "run_finish", "thread_id": "t1", "run_id": "r1",
                    "result": {"response": "done"},
                    "termination": {"type": "stopped", "value": {"code": "max_rounds"}}
                }),
            ),
            (
                AgentEvent::RunFinish {
                    thread_id: tid(),
                    run_id: rid(),
                    result: None,
                    termination: TerminationReason::NaturalEnd,
                },
                json!({
                    "event_type": "run_finish", "thread_id": "t1", "run_id": "r1",
                    "termination": {"type": "natural_end"}
                }),
            ),
            (
                AgentEvent::TextDelta { delta: "hi".into() },
                json!({"event_type": "text_delta", "delta": "hi"}),
            ),
            (
                AgentEvent::ReasoningDelta {
                    delta: "hmm".into(),
                },
                json!({"event_type": "reasoning_delta", "delta": "hmm"}),
            ),
            (
                AgentEvent::ReasoningEncryptedValue {
                    encrypted_value: "xyz".into(),
                },
                json!({"event_type": "reasoning_encrypted_value", "encrypted_value": "xyz"}),
            ),
            (
                AgentEvent::ToolCallStart {
                    id: cid(),
                    name: "search".into(),
                },
                json!({"event_type": "tool_call_start", "id": "c1", "name": "search"}),
            ),
            (
                AgentEvent::ToolCallDelta {
                    id: cid(),
                    args_delta: "{\"q\"".into(),
                },
                json!({"event_type": "tool_call_delta", "id": "c1", "args_delta": "{\"q\""}),
            ),
            (
                AgentEvent::ToolCallReady {
                    id: cid(),
                    name: "search".into(),
                    arguments: json!({"q": "x"}),
                },
                json!({"event_type": "tool_call_ready", "id": "c1", "name": "search", "arguments": {"q": "x"}}),
            ),
            (
                AgentEvent::ToolCallDone {
                    id: cid(),
                    message_id: mid(),
                    result: ToolResult::success("search", json!(["a"])),
                    outcome: ToolCallOutcome::Succeeded,
                },
                json!({
                    "event_type": "tool_call_done", "id": "c1", "message_id": "m1",
                    "result": {"tool_name": "search", "status": "success", "data": ["a"]},
                    "outcome": "succeeded"
                }),
            ),
            (
                AgentEvent::ToolCallStreamDelta {
                    id: cid(),
                    name: "sh".into(),
                    delta: "out".into(),
                },
                json!({"event_type": "tool_call_stream_delta", "id": "c1", "name": "sh", "delta": "out"}),
            ),
            (
                AgentEvent::ToolCallResumed {
                    target_id: cid(),
                    result: json!({"approved": true}),
                },
                json!({"event_type": "tool_call_resumed", "target_id": "c1", "result": {"approved": true}}),
            ),
            (
                AgentEvent::MessagesSnapshot {
                    messages: vec![json!({"role": "user"})],
                },
                json!({"event_type": "messages_snapshot", "messages": [{"role": "user"}]}),
            ),
            (
                AgentEvent::ActivitySnapshot {
                    message_id: mid(),
                    activity_type: "tool-call-progress".into(),
                    content: json!({"status": "running"}),
                    replace: Some(true),
                },
                json!({
                    "event_type": "activity_snapshot", "message_id": "m1",
                    "activity_type": "tool-call-progress", "content": {"status": "running"},
                    "replace": true
                }),
            ),
            (
                AgentEvent::ActivityDelta {
                    message_id: mid(),
                    activity_type: "code".into(),
                    patch: vec![json!({"op": "add", "path": "/a", "value": 1})],
                },
                json!({
                    "event_type": "activity_delta", "message_id": "m1", "activity_type": "code",
                    "patch": [{"op": "add", "path": "/a", "value": 1}]
                }),
            ),
            (
                AgentEvent::StepStart { message_id: mid() },
                json!({"event_type": "step_start", "message_id": "m1"}),
            ),
            (AgentEvent::StepEnd, json!({"event_type": "step_end"})),
            (
                AgentEvent::InferenceComplete {
                    model: "gpt-4o".into(),
                    usage: Some(TokenUsage::new(1, 2)),
                    duration_ms: 30,
                },
                json!({
                    "event_type": "inference_complete", "model": "gpt-4o",
                    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
                    "duration_ms": 30
                }),
            ),
            (
                AgentEvent::InferenceComplete {
                    model: "m".into(),
                    usage: None,
                    duration_ms: 0,
                },
                json!({"event_type": "inference_complete", "model": "m", "duration_ms": 0}),
            ),
            (
                AgentEvent::StateSnapshot {
                    snapshot: json!({"k": 1}),
                },
                json!({"event_type": "state_snapshot", "snapshot": {"k": 1}}),
            ),
            (
                AgentEvent::StateDelta {
                    delta: vec![json!({"op": "remove", "path": "/k"})],
                },
                json!({"event_type": "state_delta", "delta": [{"op": "remove", "path": "/k"}]}),
            ),
            (
                AgentEvent::Error {
                    message: "boom".into(),
                    code: Some("E1".into()),
                },
                json!({"event_type": "error", "message": "boom", "code": "E1"}),
            ),
            (
                AgentEvent::Error {
                    message: "boom".into(),
                    code: None,
                },
                json!({"event_type": "error", "message": "boom"}),
            ),
        ]
    }

    #[test]
    fn every_variant_has_exact_json_and_round_trips() {
        for (event, expected) in samples() {
            let value = serde_json::to_value(&event).unwrap();
            assert_eq!(value, expected, "{}", event.event_type());
            assert_eq!(value["event_type"], json!(event.event_type()));
            assert_eq!(serde_json::from_value::<AgentEvent>(value).unwrap(), event);
        }
    }

    #[test]
    fn samples_cover_every_event_type() {
        let types: std::collections::BTreeSet<_> =
            samples().iter().map(|(e, _)| e.event_type()).collect();
        assert_eq!(types.len(), 20);
    }

    #[test]
    fn stream_event_flattens() {
        let event = StreamEvent::new(
            1,
            "2026-01-01T00:00:00Z",
            AgentEvent::TextDelta { delta: "hi".into() },
        );
        let value = serde_json::to_value(&event).unwrap();
        assert_eq!(
            value,
            json!({"seq": 1, "timestamp": "2026-01-01T00:00:00Z", "event_type": "text_delta", "delta": "hi"})
        );
        assert_eq!(serde_json::from_value::<StreamEvent>(value).unwrap(), event);

        let end = StreamEvent::new(2, "t", AgentEvent::StepEnd);
        let value = serde_json::to_value(&end).unwrap();
        assert_eq!(
            value,
            json!({"seq": 2, "timestamp": "t", "event_type": "step_end"})
        );
        assert_eq!(serde_json::from_value::<StreamEvent>(value).unwrap(), end);
    }

    #[test]
    fn extract_response_rules() {
        assert_eq!(AgentEvent::extract_response(&Some(json!("plain"))), "plain");
        assert_eq!(
            AgentEvent::extract_response(&Some(json!({"response": "inner", "x": 1}))),
            "inner"
        );
        assert_eq!(
            AgentEvent::extract_response(&Some(json!({"response": 5}))),
            ""
        );
        assert_eq!(AgentEvent::extract_response(&Some(json!([1]))), "");
        assert_eq!(AgentEvent::extract_response(&None), "");
    }
}
