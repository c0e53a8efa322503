//! Run events as the AI SDK v6 UI message stream (`ai`'s `UIMessageChunk`s).
//!
//! One run is one assistant UI message whose id is the run id, so the stream that
//! follows an approval continues the message the approval was given in. Text and
//! reasoning blocks are opened and closed around tool calls (the client rejects a
//! delta without its start); suspended calls become `tool-approval-request`s.

use std::collections::HashSet;

use awaken_actors::JsonValue;
use awaken_actors::contract::{
    AgentEvent, StreamEvent, TerminationReason, ToolCallOutcome, ToolResult,
};
use awaken_actors::store::ThreadSnapshot;
use serde::Serialize;
use serde_json::json;

use crate::runs::{Encoder, visible_state};

/// One chunk of the UI message stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
pub(crate) enum UiChunk {
    Start {
        message_id: String,
        message_metadata: JsonValue,
    },
    StartStep,
    FinishStep,
    Finish {
        finish_reason: &'static str,
        message_metadata: JsonValue,
    },
    Abort {
        reason: String,
    },
    Error {
        error_text: String,
    },
    TextStart {
        id: String,
    },
    TextDelta {
        id: String,
        delta: String,
    },
    TextEnd {
        id: String,
    },
    ReasoningStart {
        id: String,
    },
    ReasoningDelta {
        id: String,
        delta: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        provider_metadata: Option<JsonValue>,
    },
    ReasoningEnd {
        id: String,
    },
    ToolInputStart {
        tool_call_id: String,
        tool_name: String,
    },
    ToolInputDelta {
        tool_call_id: String,
        input_text_delta: String,
    },
    ToolInputAvailable {
        tool_call_id: String,
        tool_name: String,
        input: JsonValue,
    },
    ToolApprovalRequest {
        approval_id: String,
        tool_call_id: String,
    },
    ToolOutputAvailable {
        tool_call_id: String,
        output: JsonValue,
    },
    ToolOutputError {
        tool_call_id: String,
        error_text: String,
    },
    ToolOutputDenied {
        tool_call_id: String,
    },
    /// `data-<name>`: state, activity, inference and tool-stream details.
    #[serde(untagged)]
    Data(DataChunk),
}

/// A `data-*` chunk; `transient` ones reach `onData` but are not kept in the
/// message, and one with an `id` replaces the earlier part with that id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DataChunk {
    #[serde(rename = "type")]
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    data: JsonValue,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    transient: bool,
}

impl DataChunk {
    fn kept(name: &str, id: Option<String>, data: JsonValue) -> UiChunk {
        UiChunk::Data(Self {
            kind: format!("data-{name}"),
            id,
            data,
            transient: false,
        })
    }

    fn transient(name: &str, data: JsonValue) -> UiChunk {
        UiChunk::Data(Self {
            kind: format!("data-{name}"),
            id: None,
            data,
            transient: true,
        })
    }
}

/// The encoder of one stream.
#[derive(Debug)]
pub(crate) struct UiEncoder {
    /// Calls the client already knows (their input was sent, here or before).
    known_calls: HashSet<String>,
    /// Calls whose input start was sent (deltas may follow).
    started_calls: HashSet<String>,
    /// Calls the client denied: their cancellation is `tool-output-denied`.
    denied_calls: HashSet<String>,
    text: Option<String>,
    reasoning: Option<String>,
    step_open: bool,
    started: bool,
    finished: bool,
}

impl UiEncoder {
    /// An encoder for a new assistant message.
    pub(crate) fn new() -> Self {
        Self {
            known_calls: HashSet::new(),
            started_calls: HashSet::new(),
            denied_calls: HashSet::new(),
            text: None,
            reasoning: None,
            step_open: false,
            started: false,
            finished: false,
        }
    }

    /// An encoder continuing a message whose tool calls the client holds, some of
    /// which it denied.
    pub(crate) fn continuing(
        known_calls: impl IntoIterator<Item = String>,
        denied_calls: impl IntoIterator<Item = String>,
    ) -> Self {
        let mut encoder = Self::new();
        encoder.known_calls.extend(known_calls);
        encoder.denied_calls.extend(denied_calls);
        encoder
    }

    fn close_blocks(&mut self, out: &mut Vec<UiChunk>) {
        if let Some(id) = self.text.take() {
            out.push(UiChunk::TextEnd { id });
        }
        if let Some(id) = self.reasoning.take() {
            out.push(UiChunk::ReasoningEnd { id });
        }
    }

    fn text_block(&mut self, seq: u64, out: &mut Vec<UiChunk>) -> String {
        if let Some(id) = self.reasoning.take() {
            out.push(UiChunk::ReasoningEnd { id });
        }
        self.text
            .get_or_insert_with(|| {
                let id = format!("text-{seq}");
                out.push(UiChunk::TextStart { id: id.clone() });
                id
            })
            .clone()
    }

    fn reasoning_block(&mut self, seq: u64, out: &mut Vec<UiChunk>) -> String {
        if let Some(id) = self.text.take() {
            out.push(UiChunk::TextEnd { id });
        }
        self.reasoning
            .get_or_insert_with(|| {
                let id = format!("reasoning-{seq}");
                out.push(UiChunk::ReasoningStart { id: id.clone() });
                id
            })
            .clone()
    }

    fn tool_done(
        &mut self,
        call_id: String,
        result: &ToolResult,
        outcome: ToolCallOutcome,
        out: &mut Vec<UiChunk>,
    ) {
        self.close_blocks(out);
        if !self.known_calls.contains(&call_id) {
            // Its input went by before this stream (a replay cut short): the client
            // needs the part before it accepts an output for it.
            self.known_calls.insert(call_id.clone());
            out.push(UiChunk::ToolInputAvailable {
                tool_call_id: call_id.clone(),
                tool_name: result.tool_name.clone(),
                input: JsonValue::Null,
            });
        }
        out.push(match outcome {
            // Denied here, whatever it ended with: a delegate call told its child
            // no and returned the child's answer, but the client's part holds a
            // refusal, and `ai` accepts no output after one.
            ToolCallOutcome::Succeeded | ToolCallOutcome::Failed
                if self.denied_calls.contains(&call_id) =>
            {
                UiChunk::ToolOutputDenied {
                    tool_call_id: call_id,
                }
            }
            ToolCallOutcome::Succeeded => UiChunk::ToolOutputAvailable {
                tool_call_id: call_id,
                output: result.data.clone(),
            },
            ToolCallOutcome::Failed => UiChunk::ToolOutputError {
                tool_call_id: call_id,
                error_text: result
                    .message
                    .clone()
                    .unwrap_or_else(|| "the tool failed".to_owned()),
            },
            ToolCallOutcome::Suspended => UiChunk::ToolApprovalRequest {
                approval_id: result
                    .suspension
                    .as_ref()
                    .map_or_else(|| call_id.clone(), |ticket| ticket.suspension.id.clone()),
                tool_call_id: call_id,
            },
        });
    }

    fn finish(
        &mut self,
        event: &StreamEvent,
        snapshot: Option<&ThreadSnapshot>,
        out: &mut Vec<UiChunk>,
    ) {
        let AgentEvent::RunFinish {
            thread_id,
            run_id,
            termination,
            ..
        } = &event.event
        else {
            return;
        };
        self.close_blocks(out);
        if std::mem::take(&mut self.step_open) {
            out.push(UiChunk::FinishStep);
        }
        if let Some(state) = snapshot.and_then(|snapshot| snapshot.state.as_ref()) {
            out.push(DataChunk::kept(
                "state-snapshot",
                Some("state".to_owned()),
                visible_state(state),
            ));
        }
        self.finished = true;
        if let TerminationReason::Cancelled = termination {
            out.push(UiChunk::Abort {
                reason: "the run was cancelled".to_owned(),
            });
            return;
        }
        if let TerminationReason::Error(message) = termination {
            out.push(UiChunk::Error {
                error_text: message.clone(),
            });
        }
        out.push(UiChunk::Finish {
            finish_reason: finish_reason(termination),
            message_metadata: json!({
                "threadId": thread_id,
                "runId": run_id,
                "termination": termination.code(),
            }),
        });
    }
}

/// The AI SDK's finish reason for how a run ended (or paused).
fn finish_reason(termination: &TerminationReason) -> &'static str {
    match termination {
        TerminationReason::NaturalEnd | TerminationReason::BehaviorRequested => "stop",
        // Paused on tool calls that wait for approval.
        TerminationReason::Suspended => "tool-calls",
        TerminationReason::Stopped(reason) if reason.code == "max_tokens" => "length",
        TerminationReason::Blocked(_) => "content-filter",
        TerminationReason::Error(_) => "error",
        TerminationReason::Stopped(_) | TerminationReason::Cancelled => "other",
    }
}

impl Encoder for UiEncoder {
    type Frame = UiChunk;

    fn encode(
        &mut self,
        event: &StreamEvent,
        snapshot: Option<&ThreadSnapshot>,
        out: &mut Vec<UiChunk>,
    ) {
        match &event.event {
            AgentEvent::RunStart {
                thread_id, run_id, ..
            } => {
                if !std::mem::replace(&mut self.started, true) {
                    out.push(UiChunk::Start {
                        message_id: run_id.to_string(),
                        message_metadata: json!({"threadId": thread_id, "runId": run_id}),
                    });
                }
            }
            AgentEvent::RunFinish { .. } => self.finish(event, snapshot, out),
            AgentEvent::StepStart { .. } => {
                self.close_blocks(out);
                if self.step_open {
                    out.push(UiChunk::FinishStep);
                }
                self.step_open = true;
                out.push(UiChunk::StartStep);
            }
            AgentEvent::StepEnd => {
                self.close_blocks(out);
                if std::mem::take(&mut self.step_open) {
                    out.push(UiChunk::FinishStep);
                }
            }
            AgentEvent::TextDelta { delta } => {
                let id = self.text_block(event.seq, out);
                out.push(UiChunk::TextDelta {
                    id,
                    delta: delta.clone(),
                });
            }
            AgentEvent::ReasoningDelta { delta } => {
                let id = self.reasoning_block(event.seq, out);
                out.push(UiChunk::ReasoningDelta {
                    id,
                    delta: delta.clone(),
                    provider_metadata: None,
                });
            }
            AgentEvent::ReasoningEncryptedValue { encrypted_value } => {
                let id = self.reasoning_block(event.seq, out);
                out.push(UiChunk::ReasoningDelta {
                    id,
                    delta: String::new(),
                    provider_metadata: Some(json!({"awaken": {"encryptedValue": encrypted_value}})),
                });
            }
            AgentEvent::ToolCallStart { id, name } => {
                self.close_blocks(out);
                self.started_calls.insert(id.to_string());
                out.push(UiChunk::ToolInputStart {
                    tool_call_id: id.to_string(),
                    tool_name: name.clone(),
                });
            }
            AgentEvent::ToolCallDelta { id, args_delta } => {
                // Without its start (and so its name) the client would reject it.
                if self.started_calls.contains(id.as_str()) {
                    out.push(UiChunk::ToolInputDelta {
                        tool_call_id: id.to_string(),
                        input_text_delta: args_delta.clone(),
                    });
                }
            }
            AgentEvent::ToolCallReady {
                id,
                name,
                arguments,
            } => {
                self.close_blocks(out);
                self.known_calls.insert(id.to_string());
                out.push(UiChunk::ToolInputAvailable {
                    tool_call_id: id.to_string(),
                    tool_name: name.clone(),
                    input: arguments.clone(),
                });
            }
            AgentEvent::ToolCallDone {
                id,
                result,
                outcome,
                ..
            } => self.tool_done(id.to_string(), result, *outcome, out),
            AgentEvent::ToolCallStreamDelta { id, name, delta } => out.push(DataChunk::transient(
                "tool-output-delta",
                json!({"toolCallId": id, "toolName": name, "delta": delta}),
            )),
            AgentEvent::ToolCallResumed { target_id, result } => out.push(DataChunk::transient(
                "tool-call-resumed",
                json!({"toolCallId": target_id, "result": result}),
            )),
            AgentEvent::MessagesSnapshot { messages } => out.push(DataChunk::transient(
                "messages-snapshot",
                json!({ "messages": messages }),
            )),
            AgentEvent::ActivitySnapshot {
                message_id,
                activity_type,
                content,
                replace,
            } => out.push(DataChunk::kept(
                "activity-snapshot",
                Some(message_id.to_string()),
                json!({"activityType": activity_type, "content": content, "replace": replace}),
            )),
            AgentEvent::ActivityDelta {
                message_id,
                activity_type,
                patch,
            } => out.push(DataChunk::transient(
                "activity-delta",
                json!({"messageId": message_id, "activityType": activity_type, "patch": patch}),
            )),
            AgentEvent::InferenceComplete {
                model,
                usage,
                duration_ms,
            } => out.push(DataChunk::kept(
                "inference-complete",
                None,
                json!({"model": model, "usage": usage, "durationMs": duration_ms}),
            )),
            AgentEvent::StateSnapshot { snapshot } => out.push(DataChunk::kept(
                "state-snapshot",
                Some("state".to_owned()),
                snapshot.clone(),
            )),
            AgentEvent::StateDelta { delta } => {
                out.push(DataChunk::transient("state-delta", json!(delta)));
            }
            AgentEvent::Error { message, .. } => out.push(UiChunk::Error {
                error_text: message.clone(),
            }),
        }
    }

    fn close(&mut self, out: &mut Vec<UiChunk>) {
        if self.started && !self.finished {
            self.close_blocks(out);
        }
    }

    fn terminator(&self) -> Option<&'static str> {
        Some("[DONE]")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::{PendingToolCall, SuspendTicket, Suspension};
    use awaken_actors::{MessageId, RunId, ThreadId, ToolCallId};

    use super::*;

    fn encode_all(encoder: &mut UiEncoder, events: Vec<AgentEvent>) -> Vec<JsonValue> {
        let mut out = Vec::new();
        for (seq, event) in events.into_iter().enumerate() {
            encoder.encode(&StreamEvent::new(seq as u64, "t", event), None, &mut out);
        }
        encoder.close(&mut out);
        out.iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect()
    }

    fn start() -> AgentEvent {
        AgentEvent::RunStart {
            thread_id: ThreadId::new("t").unwrap(),
            run_id: RunId::new("r").unwrap(),
            parent_run_id: None,
        }
    }

    fn finish(termination: TerminationReason) -> AgentEvent {
        AgentEvent::RunFinish {
            thread_id: ThreadId::new("t").unwrap(),
            run_id: RunId::new("r").unwrap(),
            result: None,
            termination,
        }
    }

    fn call() -> ToolCallId {
        ToolCallId::new("c1").unwrap()
    }

    #[test]
    fn text_blocks_close_around_tool_calls_and_steps_pair() {
        let chunks = encode_all(
            &mut UiEncoder::new(),
            vec![
                start(),
                AgentEvent::StepStart {
                    message_id: MessageId::new("m1").unwrap(),
                },
                AgentEvent::TextDelta { delta: "a".into() },
                AgentEvent::ToolCallStart {
                    id: call(),
                    name: "echo".into(),
                },
                AgentEvent::ToolCallDelta {
                    id: call(),
                    args_delta: "{}".into(),
                },
                AgentEvent::ToolCallReady {
                    id: call(),
                    name: "echo".into(),
                    arguments: json!({}),
                },
                AgentEvent::ToolCallDone {
                    id: call(),
                    message_id: MessageId::new("m2").unwrap(),
                    result: ToolResult::success("echo", json!("ok")),
                    outcome: ToolCallOutcome::Succeeded,
                },
                AgentEvent::StepEnd,
                finish(TerminationReason::NaturalEnd),
            ],
        );
        let types: Vec<&str> = chunks.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "start",
                "start-step",
                "text-start",
                "text-delta",
                "text-end",
                "tool-input-start",
                "tool-input-delta",
                "tool-input-available",
                "tool-output-available",
                "finish-step",
                "finish",
            ]
        );
        assert_eq!(chunks[0]["messageId"], "r");
        assert_eq!(chunks[2]["id"], chunks[4]["id"]);
        assert_eq!(chunks[8]["output"], "ok");
        assert_eq!(chunks[10]["finishReason"], "stop");
    }

    #[test]
    fn a_suspended_call_asks_for_approval_and_a_denial_is_reported() {
        let ticket = SuspendTicket::new(
            Suspension::new("ticket-1", "confirm", "allow?"),
            PendingToolCall {
                id: call(),
                name: "rm".into(),
                arguments: json!({}),
            },
            Default::default(),
        );
        let asked = encode_all(
            &mut UiEncoder::new(),
            vec![
                start(),
                AgentEvent::ToolCallReady {
                    id: call(),
                    name: "rm".into(),
                    arguments: json!({}),
                },
                AgentEvent::ToolCallDone {
                    id: call(),
                    message_id: MessageId::new("m").unwrap(),
                    result: ToolResult::suspended_with("rm", "allow?", ticket),
                    outcome: ToolCallOutcome::Suspended,
                },
                finish(TerminationReason::Suspended),
            ],
        );
        assert_eq!(asked[2]["type"], "tool-approval-request");
        assert_eq!(asked[2]["approvalId"], "ticket-1");
        assert_eq!(asked[3]["finishReason"], "tool-calls");

        let denied = encode_all(
            &mut UiEncoder::continuing(["c1".to_owned()], ["c1".to_owned()]),
            vec![
                start(),
                AgentEvent::ToolCallDone {
                    id: call(),
                    message_id: MessageId::new("m").unwrap(),
                    result: ToolResult::error_with_code("rm", "cancelled", "no"),
                    outcome: ToolCallOutcome::Failed,
                },
                finish(TerminationReason::NaturalEnd),
            ],
        );
        assert_eq!(
            denied[1],
            json!({"type": "tool-output-denied", "toolCallId": "c1"})
        );

        // A delegate call told its child no, and the child answered: still denied.
        let forwarded = encode_all(
            &mut UiEncoder::continuing(["c1".to_owned()], ["c1".to_owned()]),
            vec![
                start(),
                AgentEvent::ToolCallDone {
                    id: call(),
                    message_id: MessageId::new("m").unwrap(),
                    result: ToolResult::success("agent_run_demo", json!({"response": "kept"})),
                    outcome: ToolCallOutcome::Succeeded,
                },
                finish(TerminationReason::NaturalEnd),
            ],
        );
        assert_eq!(
            forwarded[1],
            json!({"type": "tool-output-denied", "toolCallId": "c1"})
        );
    }

    #[test]
    fn an_unknown_call_gets_its_part_before_its_output_and_cancels_abort() {
        let chunks = encode_all(
            &mut UiEncoder::new(),
            vec![
                start(),
                AgentEvent::ToolCallDelta {
                    id: call(),
                    args_delta: "{".into(),
                },
                AgentEvent::ToolCallDone {
                    id: call(),
                    message_id: MessageId::new("m").unwrap(),
                    result: ToolResult::error_with_code("rm", "boom", "failed"),
                    outcome: ToolCallOutcome::Failed,
                },
                finish(TerminationReason::Cancelled),
            ],
        );
        let types: Vec<&str> = chunks.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "start",
                "tool-input-available",
                "tool-output-error",
                "abort"
            ]
        );
    }

    #[test]
    fn data_chunks_are_named_and_errors_finish_with_error() {
        let chunks = encode_all(
            &mut UiEncoder::new(),
            vec![
                start(),
                AgentEvent::ReasoningDelta { delta: "hm".into() },
                AgentEvent::TextDelta { delta: "x".into() },
                AgentEvent::StateDelta {
                    delta: vec![json!({"op": "remove", "path": "/a"})],
                },
                finish(TerminationReason::Error("bad".into())),
            ],
        );
        let types: Vec<&str> = chunks.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "start",
                "reasoning-start",
                "reasoning-delta",
                "reasoning-end",
                "text-start",
                "text-delta",
                "data-state-delta",
                "text-end",
                "error",
                "finish",
            ]
        );
        assert_eq!(chunks[6]["transient"], true);
        assert_eq!(chunks[9]["finishReason"], "error");
    }
}
