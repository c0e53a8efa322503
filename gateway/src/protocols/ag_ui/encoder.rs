//! Run events as AG-UI events (`@ag-ui/core` 1.0).
//!
//! The stream is one AG-UI run: `RUN_STARTED` first, then text, reasoning, tool
//! calls and steps, each opened before use and closed before the end (the client
//! verifies this), then the thread's `MESSAGES_SNAPSHOT` and `STATE_SNAPSHOT`, and
//! `RUN_FINISHED` — with an `interrupt` outcome when the run waits for decisions —
//! or `RUN_ERROR`.

use awaken_actors::JsonValue;
use awaken_actors::contract::{AgentEvent, StreamEvent, TerminationReason, ToolCallOutcome};
use awaken_actors::store::ThreadSnapshot;
use serde::Serialize;
use serde_json::json;

use super::messages::ag_ui_messages;
use crate::runs::{Encoder, visible_state};

/// One AG-UI event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "SCREAMING_SNAKE_CASE",
    rename_all_fields = "camelCase"
)]
pub(crate) enum AgUiEvent {
    RunStarted {
        thread_id: String,
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_run_id: Option<String>,
    },
    RunFinished {
        thread_id: String,
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<JsonValue>,
        outcome: JsonValue,
    },
    RunError {
        message: String,
        code: String,
    },
    StepStarted {
        step_name: String,
    },
    StepFinished {
        step_name: String,
    },
    TextMessageStart {
        message_id: String,
        role: &'static str,
    },
    TextMessageContent {
        message_id: String,
        delta: String,
    },
    TextMessageEnd {
        message_id: String,
    },
    ReasoningStart {
        message_id: String,
    },
    ReasoningMessageStart {
        message_id: String,
        role: &'static str,
    },
    ReasoningMessageContent {
        message_id: String,
        delta: String,
    },
    ReasoningMessageEnd {
        message_id: String,
    },
    ReasoningEnd {
        message_id: String,
    },
    ReasoningEncryptedValue {
        subtype: &'static str,
        entity_id: String,
        encrypted_value: String,
    },
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    ToolCallArgs {
        tool_call_id: String,
        delta: String,
    },
    ToolCallEnd {
        tool_call_id: String,
    },
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: String,
        role: &'static str,
    },
    StateSnapshot {
        snapshot: JsonValue,
    },
    StateDelta {
        delta: Vec<JsonValue>,
    },
    MessagesSnapshot {
        messages: Vec<JsonValue>,
    },
    ActivitySnapshot {
        message_id: String,
        activity_type: String,
        content: JsonValue,
        #[serde(skip_serializing_if = "Option::is_none")]
        replace: Option<bool>,
    },
    ActivityDelta {
        message_id: String,
        activity_type: String,
        patch: Vec<JsonValue>,
    },
    Custom {
        name: &'static str,
        value: JsonValue,
    },
}

/// A tool call whose `TOOL_CALL_START` went out and whose `TOOL_CALL_END` did not.
#[derive(Debug)]
struct OpenCall {
    id: String,
    args_sent: bool,
}

/// The encoder of one AG-UI run.
#[derive(Debug)]
pub(crate) struct AgUiEncoder {
    thread_id: String,
    /// The run id the client knows (its own `runId`, or the engine's).
    run_id: String,
    parent_run_id: Option<String>,
    /// The assistant message of the current step.
    message_id: Option<String>,
    text: Option<String>,
    reasoning: Option<String>,
    step: Option<String>,
    steps: u32,
    calls: Vec<OpenCall>,
    interrupts: Vec<JsonValue>,
    started: bool,
    finished: bool,
}

impl AgUiEncoder {
    /// An encoder reporting the run as `run_id` on `thread_id`.
    pub(crate) fn new(thread_id: String, run_id: String, parent_run_id: Option<String>) -> Self {
        Self {
            thread_id,
            run_id,
            parent_run_id,
            message_id: None,
            text: None,
            reasoning: None,
            step: None,
            steps: 0,
            calls: Vec::new(),
            interrupts: Vec::new(),
            started: false,
            finished: false,
        }
    }

    fn start(&mut self, out: &mut Vec<AgUiEvent>) {
        if !std::mem::replace(&mut self.started, true) {
            out.push(AgUiEvent::RunStarted {
                thread_id: self.thread_id.clone(),
                run_id: self.run_id.clone(),
                parent_run_id: self.parent_run_id.clone(),
            });
        }
    }

    fn close_text(&mut self, out: &mut Vec<AgUiEvent>) {
        if let Some(message_id) = self.text.take() {
            out.push(AgUiEvent::TextMessageEnd { message_id });
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<AgUiEvent>) {
        if let Some(message_id) = self.reasoning.take() {
            out.push(AgUiEvent::ReasoningMessageEnd {
                message_id: message_id.clone(),
            });
            out.push(AgUiEvent::ReasoningEnd { message_id });
        }
    }

    /// `TOOL_CALL_START` of a call in the current step's assistant message (open
    /// text and reasoning closed first).
    fn open_call(&mut self, call_id: &str, name: &str, out: &mut Vec<AgUiEvent>) {
        self.close_text(out);
        self.close_reasoning(out);
        self.calls.push(OpenCall {
            id: call_id.to_owned(),
            args_sent: false,
        });
        out.push(AgUiEvent::ToolCallStart {
            tool_call_id: call_id.to_owned(),
            tool_call_name: name.to_owned(),
            parent_message_id: self.message_id.clone(),
        });
    }

    fn end_call(&mut self, call_id: &str, arguments: Option<&JsonValue>, out: &mut Vec<AgUiEvent>) {
        let Some(index) = self.calls.iter().position(|call| call.id == call_id) else {
            return;
        };
        let call = self.calls.remove(index);
        if !call.args_sent
            && let Some(arguments) = arguments
        {
            out.push(AgUiEvent::ToolCallArgs {
                tool_call_id: call.id.clone(),
                delta: arguments.to_string(),
            });
        }
        out.push(AgUiEvent::ToolCallEnd {
            tool_call_id: call.id,
        });
    }

    /// Closes everything still open: the client refuses to finish a run otherwise.
    fn close_all(&mut self, out: &mut Vec<AgUiEvent>) {
        self.close_text(out);
        self.close_reasoning(out);
        for call in std::mem::take(&mut self.calls) {
            out.push(AgUiEvent::ToolCallEnd {
                tool_call_id: call.id,
            });
        }
        if let Some(step_name) = self.step.take() {
            out.push(AgUiEvent::StepFinished { step_name });
        }
    }

    fn message_id(&self, seq: u64) -> String {
        self.message_id
            .clone()
            .unwrap_or_else(|| format!("{}-{seq}", self.run_id))
    }

    fn finish(
        &mut self,
        result: Option<&JsonValue>,
        termination: &TerminationReason,
        snapshot: Option<&ThreadSnapshot>,
        out: &mut Vec<AgUiEvent>,
    ) {
        self.start(out);
        self.close_all(out);
        if let Some(snapshot) = snapshot {
            out.push(AgUiEvent::MessagesSnapshot {
                messages: ag_ui_messages(&snapshot.messages),
            });
            if let Some(state) = &snapshot.state {
                out.push(AgUiEvent::StateSnapshot {
                    snapshot: visible_state(state),
                });
            }
        }
        self.finished = true;
        let outcome = match termination {
            TerminationReason::Error(message) => {
                out.push(AgUiEvent::RunError {
                    message: message.clone(),
                    code: "error".into(),
                });
                return;
            }
            TerminationReason::Blocked(reason) => {
                out.push(AgUiEvent::RunError {
                    message: reason.clone(),
                    code: "blocked".into(),
                });
                return;
            }
            TerminationReason::Suspended => {
                let interrupts = self.open_interrupts(snapshot);
                if interrupts.is_empty() {
                    json!({"type": "success"})
                } else {
                    json!({"type": "interrupt", "interrupts": interrupts})
                }
            }
            TerminationReason::Cancelled => json!({"type": "cancelled"}),
            _ => json!({"type": "success"}),
        };
        out.push(AgUiEvent::RunFinished {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            result: result.filter(|result| !result.is_null()).cloned(),
            outcome,
        });
    }

    /// Every open request of the waiting run: from its record when the snapshot
    /// has it (calls suspended in earlier activations included), else those this
    /// stream saw.
    fn open_interrupts(&mut self, snapshot: Option<&ThreadSnapshot>) -> Vec<JsonValue> {
        let recorded = snapshot
            .and_then(|snapshot| snapshot.latest_run.as_ref())
            .and_then(|run| run.waiting.as_ref());
        match recorded {
            Some(waiting) if !waiting.tickets.is_empty() => waiting
                .tickets
                .iter()
                .map(|ticket| {
                    json!({
                        "id": ticket.ticket_id,
                        "reason": ticket.action,
                        "message": ticket.message,
                        "toolCallId": ticket.tool_call_id,
                    })
                })
                .collect(),
            _ => std::mem::take(&mut self.interrupts),
        }
    }
}

impl Encoder for AgUiEncoder {
    type Frame = AgUiEvent;

    fn encode(
        &mut self,
        event: &StreamEvent,
        snapshot: Option<&ThreadSnapshot>,
        out: &mut Vec<AgUiEvent>,
    ) {
        if let AgentEvent::RunFinish {
            result,
            termination,
            ..
        } = &event.event
        {
            self.finish(result.as_ref(), termination, snapshot, out);
            return;
        }
        self.start(out);
        match &event.event {
            AgentEvent::RunStart { .. } | AgentEvent::RunFinish { .. } => {}
            AgentEvent::StepStart { message_id } => {
                self.close_all(out);
                self.steps += 1;
                let step_name = format!("step-{}", self.steps);
                self.step = Some(step_name.clone());
                self.message_id = Some(message_id.to_string());
                out.push(AgUiEvent::StepStarted { step_name });
            }
            AgentEvent::StepEnd => self.close_all(out),
            AgentEvent::TextDelta { delta } => {
                self.close_reasoning(out);
                if delta.is_empty() {
                    return;
                }
                if self.text.is_none() {
                    let message_id = self.message_id(event.seq);
                    self.text = Some(message_id.clone());
                    out.push(AgUiEvent::TextMessageStart {
                        message_id,
                        role: "assistant",
                    });
                }
                if let Some(message_id) = self.text.clone() {
                    out.push(AgUiEvent::TextMessageContent {
                        message_id,
                        delta: delta.clone(),
                    });
                }
            }
            AgentEvent::ReasoningDelta { delta } => {
                self.close_text(out);
                if delta.is_empty() {
                    return;
                }
                if self.reasoning.is_none() {
                    let message_id =
                        format!("{}-reasoning-{}", self.message_id(event.seq), event.seq);
                    self.reasoning = Some(message_id.clone());
                    out.push(AgUiEvent::ReasoningStart {
                        message_id: message_id.clone(),
                    });
                    out.push(AgUiEvent::ReasoningMessageStart {
                        message_id,
                        role: "reasoning",
                    });
                }
                if let Some(message_id) = self.reasoning.clone() {
                    out.push(AgUiEvent::ReasoningMessageContent {
                        message_id,
                        delta: delta.clone(),
                    });
                }
            }
            AgentEvent::ReasoningEncryptedValue { encrypted_value } => {
                out.push(AgUiEvent::ReasoningEncryptedValue {
                    subtype: "message",
                    entity_id: self.message_id(event.seq),
                    encrypted_value: encrypted_value.clone(),
                });
            }
            AgentEvent::ToolCallStart { id, name } => self.open_call(id.as_str(), name, out),
            AgentEvent::ToolCallDelta { id, args_delta } => {
                if let Some(call) = self.calls.iter_mut().find(|call| call.id == id.as_str()) {
                    call.args_sent = true;
                    out.push(AgUiEvent::ToolCallArgs {
                        tool_call_id: id.to_string(),
                        delta: args_delta.clone(),
                    });
                }
            }
            AgentEvent::ToolCallReady {
                id,
                name,
                arguments,
            } => {
                if !self.calls.iter().any(|call| call.id == id.as_str()) {
                    self.open_call(id.as_str(), name, out);
                }
                self.end_call(id.as_str(), Some(arguments), out);
            }
            AgentEvent::ToolCallDone {
                id,
                message_id,
                result,
                outcome,
            } => {
                self.end_call(id.as_str(), None, out);
                match outcome {
                    ToolCallOutcome::Suspended => {
                        if let Some(ticket) = &result.suspension {
                            let mut interrupt = json!({
                                "id": ticket.suspension.id,
                                "reason": ticket.suspension.action,
                                "message": ticket.suspension.message,
                                "toolCallId": id,
                            });
                            if let Some(schema) = &ticket.suspension.response_schema
                                && schema.is_object()
                            {
                                interrupt["responseSchema"] = schema.clone();
                            }
                            self.interrupts.push(interrupt);
                        }
                    }
                    ToolCallOutcome::Succeeded | ToolCallOutcome::Failed => {
                        let content = match outcome {
                            ToolCallOutcome::Succeeded => match &result.data {
                                JsonValue::String(text) => text.clone(),
                                data => data.to_string(),
                            },
                            _ => result
                                .message
                                .clone()
                                .unwrap_or_else(|| "the tool failed".into()),
                        };
                        out.push(AgUiEvent::ToolCallResult {
                            message_id: message_id.to_string(),
                            tool_call_id: id.to_string(),
                            content,
                            role: "tool",
                        });
                    }
                }
            }
            AgentEvent::ToolCallStreamDelta { id, name, delta } => out.push(AgUiEvent::Custom {
                name: "tool_call_stream_delta",
                value: json!({"toolCallId": id, "toolName": name, "delta": delta}),
            }),
            AgentEvent::ToolCallResumed { target_id, result } => out.push(AgUiEvent::Custom {
                name: "tool_call_resumed",
                value: json!({"toolCallId": target_id, "result": result}),
            }),
            AgentEvent::MessagesSnapshot { messages } => {
                let messages: Vec<_> = messages
                    .iter()
                    .filter_map(|message| serde_json::from_value(message.clone()).ok())
                    .collect();
                out.push(AgUiEvent::MessagesSnapshot {
                    messages: ag_ui_messages(&messages),
                });
            }
            AgentEvent::ActivitySnapshot {
                message_id,
                activity_type,
                content,
                replace,
            } => out.push(AgUiEvent::ActivitySnapshot {
                message_id: message_id.to_string(),
                activity_type: activity_type.clone(),
                // The protocol wants an object.
                content: if content.is_object() {
                    content.clone()
                } else {
                    json!({ "value": content })
                },
                replace: *replace,
            }),
            AgentEvent::ActivityDelta {
                message_id,
                activity_type,
                patch,
            } => out.push(AgUiEvent::ActivityDelta {
                message_id: message_id.to_string(),
                activity_type: activity_type.clone(),
                patch: patch.clone(),
            }),
            AgentEvent::InferenceComplete {
                model,
                usage,
                duration_ms,
            } => out.push(AgUiEvent::Custom {
                name: "inference_complete",
                value: json!({"model": model, "usage": usage, "durationMs": duration_ms}),
            }),
            AgentEvent::StateSnapshot { snapshot } => out.push(AgUiEvent::StateSnapshot {
                snapshot: snapshot.clone(),
            }),
            AgentEvent::StateDelta { delta } => out.push(AgUiEvent::StateDelta {
                delta: delta.clone(),
            }),
            // Not fatal to the run (a fatal error ends it with `RUN_ERROR`).
            AgentEvent::Error { message, code } => out.push(AgUiEvent::Custom {
                name: "error",
                value: json!({"message": message, "code": code}),
            }),
        }
    }

    fn close(&mut self, out: &mut Vec<AgUiEvent>) {
        if self.started && !self.finished {
            self.close_all(out);
            out.push(AgUiEvent::RunError {
                message: "the run's event stream ended before the run finished".into(),
                code: "stream_ended".into(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::{PendingToolCall, SuspendTicket, Suspension, ToolResult};
    use awaken_actors::{MessageId, RunId, ThreadId, ToolCallId};

    use super::*;

    fn encode_all(events: Vec<AgentEvent>) -> Vec<JsonValue> {
        let mut encoder = AgUiEncoder::new("t".into(), "client-run".into(), None);
        let mut out = Vec::new();
        for (seq, event) in events.into_iter().enumerate() {
            encoder.encode(&StreamEvent::new(seq as u64, "t", event), None, &mut out);
        }
        encoder.close(&mut out);
        out.iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect()
    }

    fn types(events: &[JsonValue]) -> Vec<&str> {
        events.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    fn finish(termination: TerminationReason) -> AgentEvent {
        AgentEvent::RunFinish {
            thread_id: ThreadId::new("t").unwrap(),
            run_id: RunId::new("r").unwrap(),
            result: Some(json!({"response": "ok"})),
            termination,
        }
    }

    fn call() -> ToolCallId {
        ToolCallId::new("c1").unwrap()
    }

    #[test]
    fn a_suspended_call_ends_the_run_with_an_interrupt() {
        let ticket = SuspendTicket::new(
            Suspension::new("ticket-1", "confirm", "allow?"),
            PendingToolCall {
                id: call(),
                name: "rm".into(),
                arguments: json!({}),
            },
            Default::default(),
        );
        let events = encode_all(vec![
            AgentEvent::RunStart {
                thread_id: ThreadId::new("t").unwrap(),
                run_id: RunId::new("r").unwrap(),
                parent_run_id: None,
            },
            AgentEvent::StepStart {
                message_id: MessageId::new("m1").unwrap(),
            },
            AgentEvent::TextDelta { delta: "ok".into() },
            AgentEvent::ToolCallStart {
                id: call(),
                name: "rm".into(),
            },
            AgentEvent::ToolCallReady {
                id: call(),
                name: "rm".into(),
                arguments: json!({"path": "x"}),
            },
            AgentEvent::ToolCallDone {
                id: call(),
                message_id: MessageId::new("m1").unwrap(),
                result: ToolResult::suspended_with("rm", "allow?", ticket),
                outcome: ToolCallOutcome::Suspended,
            },
            finish(TerminationReason::Suspended),
        ]);
        assert_eq!(
            types(&events),
            [
                "RUN_STARTED",
                "STEP_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "STEP_FINISHED",
                "RUN_FINISHED",
            ]
        );
        assert_eq!(events[0]["runId"], "client-run");
        assert_eq!(events[2]["messageId"], "m1");
        assert_eq!(events[5]["parentMessageId"], "m1");
        assert_eq!(events[6]["delta"], "{\"path\":\"x\"}");
        let outcome = &events[9]["outcome"];
        assert_eq!(outcome["type"], "interrupt");
        assert_eq!(outcome["interrupts"][0]["id"], "ticket-1");
        assert_eq!(outcome["interrupts"][0]["toolCallId"], "c1");
    }

    #[test]
    fn results_errors_and_cancellation() {
        let done = encode_all(vec![
            AgentEvent::ToolCallDone {
                id: call(),
                message_id: MessageId::new("tool-msg").unwrap(),
                result: ToolResult::success("ls", json!(["a"])),
                outcome: ToolCallOutcome::Succeeded,
            },
            finish(TerminationReason::Cancelled),
        ]);
        assert_eq!(
            types(&done),
            ["RUN_STARTED", "TOOL_CALL_RESULT", "RUN_FINISHED"]
        );
        assert_eq!(done[1]["content"], "[\"a\"]");
        assert_eq!(done[2]["outcome"]["type"], "cancelled");

        let failed = encode_all(vec![
            AgentEvent::ReasoningDelta { delta: "hm".into() },
            finish(TerminationReason::Error("boom".into())),
        ]);
        assert_eq!(
            types(&failed),
            [
                "RUN_STARTED",
                "REASONING_START",
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT",
                "REASONING_MESSAGE_END",
                "REASONING_END",
                "RUN_ERROR",
            ]
        );

        let cut = encode_all(vec![AgentEvent::ToolCallStart {
            id: call(),
            name: "rm".into(),
        }]);
        assert_eq!(
            types(&cut),
            [
                "RUN_STARTED",
                "TOOL_CALL_START",
                "TOOL_CALL_END",
                "RUN_ERROR"
            ]
        );
    }
}
