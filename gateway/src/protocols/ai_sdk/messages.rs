//! A thread's log as AI SDK `UIMessage`s, for `useChat`'s initial messages.
//!
//! A run's assistant and tool messages fold into one assistant UI message whose id
//! is the run id (as in the stream), one `step-start` per model turn, tool results
//! filled into their tool parts. Each tool part carries what the `ai` package's
//! schema requires of its state; what the log does not say — that a call waits
//! for approval, or how it was decided — the run records do ([`Approvals`]).

use awaken_actors::JsonValue;
use awaken_actors::contract::{ContentBlock, Message, Role};
use serde_json::json;

use super::approvals::{Approvals, CallApproval};

/// The UI messages of `messages`, in order, with the approvals of their calls.
pub(crate) fn ui_messages(messages: &[Message], approvals: &Approvals<'_>) -> Vec<JsonValue> {
    let mut out: Vec<JsonValue> = Vec::new();
    let mut assistant: Option<AssistantMessage> = None;
    for message in messages {
        match message.role {
            Role::User | Role::System => {
                if let Some(done) = assistant.take() {
                    out.push(done.into_json(approvals));
                }
                out.push(json!({
                    "id": message.id,
                    "role": if message.role == Role::User { "user" } else { "system" },
                    "parts": content_parts(&message.content),
                }));
            }
            Role::Assistant => {
                let run_id = message.run_id.as_ref().map(ToString::to_string);
                let id = run_id.clone().unwrap_or_else(|| message.id.to_string());
                if assistant.as_ref().is_some_and(|current| current.id != id)
                    && let Some(done) = assistant.take()
                {
                    out.push(done.into_json(approvals));
                }
                let current = assistant.get_or_insert_with(|| AssistantMessage {
                    id,
                    run_id,
                    parts: Vec::new(),
                });
                current
                    .parts
                    .push(Part::Other(json!({"type": "step-start"})));
                current
                    .parts
                    .extend(content_parts(&message.content).into_iter().map(Part::Other));
                for call in &message.tool_calls {
                    current.parts.push(Part::Tool(ToolPart {
                        name: call.name.clone(),
                        call_id: call.id.to_string(),
                        input: call.arguments.clone(),
                        result: None,
                    }));
                }
            }
            Role::Tool => {
                let (Some(current), Some(call_id)) = (assistant.as_mut(), &message.tool_call_id)
                else {
                    continue;
                };
                if let Some(part) = current.parts.iter_mut().find_map(|part| match part {
                    Part::Tool(tool) if tool.call_id == call_id.as_str() => Some(tool),
                    _ => None,
                }) {
                    part.result = Some(CallResult::of(&message.text()));
                }
            }
        }
    }
    if let Some(done) = assistant {
        out.push(done.into_json(approvals));
    }
    out
}

/// A call's result as the log keeps it (`awaken_actors::contract::ToolResult::to_json`).
#[derive(Debug)]
enum CallResult {
    /// A success and its output.
    Output(JsonValue),
    /// A failure (`{"error": …, "code"?: …}`, nothing else) and its message.
    Error(String),
}

impl CallResult {
    fn of(text: &str) -> Self {
        let output: JsonValue =
            serde_json::from_str(text).unwrap_or_else(|_| JsonValue::String(text.to_owned()));
        match failure_message(&output) {
            Some("") => Self::Error("the tool failed".to_owned()),
            Some(message) => Self::Error(message.to_owned()),
            None => Self::Output(output),
        }
    }
}

/// The message of a failed call's logged result.
fn failure_message(output: &JsonValue) -> Option<&str> {
    let fields = output.as_object()?;
    let message = fields.get("error")?.as_str()?;
    let code = match fields.get("code") {
        Some(code) => Some(code.as_str()?),
        None => None,
    };
    let expected = 1 + usize::from(code.is_some());
    (fields.len() == expected).then_some(message)
}

/// One tool call of an assistant message, and its result once the log has it.
#[derive(Debug)]
struct ToolPart {
    name: String,
    call_id: String,
    input: JsonValue,
    result: Option<CallResult>,
}

impl ToolPart {
    /// The part in the state its result and approval give it, as the stream
    /// showed it: `approval-requested` while the run waits on it,
    /// `approval-responded` once answered and not yet settled, `output-denied`
    /// once settled after an answer that refused it, else its output or error —
    /// with the approval that let it run. A call refused without being asked (a
    /// permission rule) is an `output-error`.
    fn into_json(self, approval: Option<CallApproval<'_>>) -> JsonValue {
        let mut part = json!({
            "type": format!("tool-{}", self.name),
            "toolCallId": self.call_id,
            "input": self.input,
        });
        let state = match (self.result, approval) {
            (None, None) => "input-available",
            (None, Some(approval @ CallApproval::Requested { .. })) => {
                part["approval"] = approval.to_json();
                "approval-requested"
            }
            (None, Some(approval @ CallApproval::Responded { .. })) => {
                part["approval"] = approval.to_json();
                "approval-responded"
            }
            (
                Some(_),
                Some(
                    approval @ CallApproval::Responded {
                        approved: false, ..
                    },
                ),
            ) => {
                part["approval"] = approval.to_json();
                "output-denied"
            }
            (Some(result), approval) => {
                if let Some(approval @ CallApproval::Responded { .. }) = approval {
                    part["approval"] = approval.to_json();
                }
                match result {
                    CallResult::Output(output) => {
                        part["output"] = output;
                        "output-available"
                    }
                    CallResult::Error(message) => {
                        part["errorText"] = json!(message);
                        "output-error"
                    }
                }
            }
        };
        part["state"] = json!(state);
        part
    }
}

/// A part of an assistant message.
#[derive(Debug)]
enum Part {
    Tool(ToolPart),
    Other(JsonValue),
}

struct AssistantMessage {
    id: String,
    /// The run that wrote it, whose record holds its calls' approvals.
    run_id: Option<String>,
    parts: Vec<Part>,
}

impl AssistantMessage {
    fn into_json(self, approvals: &Approvals<'_>) -> JsonValue {
        let run_id = self.run_id;
        let parts: Vec<JsonValue> = self
            .parts
            .into_iter()
            .map(|part| match part {
                Part::Tool(tool) => {
                    let approval = run_id
                        .as_deref()
                        .and_then(|run| approvals.of_call(run, &tool.call_id));
                    tool.into_json(approval)
                }
                Part::Other(part) => part,
            })
            .collect();
        json!({"id": self.id, "role": "assistant", "parts": parts})
    }
}

fn content_parts(content: &[ContentBlock]) -> Vec<JsonValue> {
    content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                Some(json!({"type": "text", "text": text, "state": "done"}))
            }
            ContentBlock::Text { .. } => None,
            ContentBlock::Reasoning { text, .. } => {
                Some(json!({"type": "reasoning", "text": text, "state": "done"}))
            }
            ContentBlock::Image {
                url: Some(url),
                media_type,
                ..
            } => Some(json!({
                "type": "file",
                "url": url,
                "mediaType": media_type.as_deref().unwrap_or("image/*"),
            })),
            ContentBlock::Image { .. } => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::{
        RUN_CANCELLED_MESSAGE, ResumeDecisionAction, RunRecord, ToolCall, ToolResult,
    };
    use awaken_actors::{RunId, ToolCallId};

    use super::super::approvals::tests::{decided, record, waiting_on};
    use super::*;

    /// A run `run` that asked for `calls` (tool `rm`) and logged `results`.
    fn run_log(run: &str, calls: &[&str], results: Vec<(&str, ToolResult)>) -> Vec<Message> {
        let run = RunId::new(run).unwrap();
        let asked = Message::assistant_with_tool_calls(
            "",
            calls
                .iter()
                .map(|id| ToolCall::new(ToolCallId::new(*id).unwrap(), "rm", json!({"p": id})))
                .collect(),
        )
        .with_run_id(run.clone());
        let mut log = vec![Message::user("hi"), asked];
        for (id, result) in results {
            let call = ToolCallId::new(id).unwrap();
            log.push(Message::tool_result(call, result.to_json_text()).with_run_id(run.clone()));
        }
        log
    }

    fn part<'a>(ui: &'a [JsonValue], call: &str) -> &'a JsonValue {
        ui.iter()
            .flat_map(|message| message["parts"].as_array().unwrap())
            .find(|p| p["toolCallId"] == call)
            .unwrap()
    }

    #[test]
    fn a_run_folds_into_one_assistant_message_with_its_tool_results() {
        let run = RunId::new("run-1").unwrap();
        let call = ToolCallId::new("c1").unwrap();
        let asked = Message::assistant_with_tool_calls(
            "let me look",
            vec![ToolCall::new(call.clone(), "ls", json!({"dir": "."}))],
        )
        .with_run_id(run.clone());
        let result = Message::tool_result(call, "[\"a\"]").with_run_id(run.clone());
        let answer = Message::assistant("found a").with_run_id(run);
        let ui = ui_messages(
            &[Message::user("hi"), asked, result, answer],
            &Approvals::default(),
        );
        assert_eq!(ui.len(), 2);
        assert_eq!(ui[0]["role"], "user");
        assert_eq!(ui[0]["parts"][0]["text"], "hi");
        assert_eq!(ui[1]["id"], "run-1");
        let types: Vec<&str> = ui[1]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            ["step-start", "text", "tool-ls", "step-start", "text"]
        );
        assert_eq!(ui[1]["parts"][2]["state"], "output-available");
        assert_eq!(ui[1]["parts"][2]["output"], json!(["a"]));
        assert!(ui[1]["parts"][2].get("approval").is_none());
    }

    #[test]
    fn denied_calls_carry_their_approval_and_failures_their_error() {
        let calls = [
            "c-failed",
            "c-denied",
            "c-ruled",
            "c-run-cancelled",
            "c-ran",
        ];
        let log = run_log(
            "r1",
            &calls,
            vec![
                (
                    "c-failed",
                    ToolResult::error_with_code("rm", "tool_error", "disk full"),
                ),
                (
                    "c-denied",
                    ToolResult::error_with_code("rm", "cancelled", "not that file"),
                ),
                (
                    "c-ruled",
                    ToolResult::error_with_code("rm", "denied", "rule `rm` denies it"),
                ),
                (
                    "c-run-cancelled",
                    ToolResult::error_with_code("rm", "cancelled", RUN_CANCELLED_MESSAGE),
                ),
                (
                    "c-ran",
                    ToolResult::error_with_code("rm", "not_found", "no such file"),
                ),
            ],
        );
        let mut run = record("r1");
        run.decisions.push(decided(
            "c-denied",
            "p:c-denied",
            ResumeDecisionAction::Cancel,
            Some("not that file"),
        ));
        run.decisions.push(decided(
            "c-ran",
            "p:c-ran",
            ResumeDecisionAction::Resume,
            None,
        ));
        let runs = [run];
        let ui = ui_messages(&log, &Approvals::of(&runs));

        assert_eq!(part(&ui, "c-failed")["state"], "output-error");
        assert_eq!(part(&ui, "c-failed")["errorText"], "disk full");
        assert!(part(&ui, "c-failed").get("approval").is_none());
        let denied = part(&ui, "c-denied");
        assert_eq!(denied["state"], "output-denied");
        assert_eq!(
            denied["approval"],
            json!({"id": "p:c-denied", "approved": false, "reason": "not that file"})
        );
        assert!(denied.get("errorText").is_none());
        // Refused by a rule, never asked: the stream showed an error, so does the history.
        assert_eq!(part(&ui, "c-ruled")["state"], "output-error");
        assert_eq!(part(&ui, "c-ruled")["errorText"], "rule `rm` denies it");
        assert_eq!(part(&ui, "c-run-cancelled")["state"], "output-error");
        assert_eq!(
            part(&ui, "c-run-cancelled")["errorText"],
            RUN_CANCELLED_MESSAGE
        );
        let ran = part(&ui, "c-ran");
        assert_eq!(ran["state"], "output-error");
        assert_eq!(ran["approval"], json!({"id": "p:c-ran", "approved": true}));
        let parts = ui[1]["parts"].as_array().unwrap();
        assert!(parts.iter().all(|p| p.get("output").is_none()), "{parts:?}");
    }

    #[test]
    fn waiting_and_answered_calls_show_the_request_the_stream_sent() {
        // r1 waits on c1; c2 of the same step was approved and waits for c1's answer.
        let mut waiting = record("r1");
        waiting
            .decisions
            .push(decided("c2", "p:c2", ResumeDecisionAction::Resume, None));
        waiting_on(&mut waiting, "c1", "p:c1");
        let mut log = run_log("r1", &["c1", "c2"], Vec::new());
        // r2 reuses the call id c1: approved, and its output follows the approval.
        log.extend(run_log(
            "r2",
            &["c1"],
            vec![("c1", ToolResult::success("rm", json!({"deleted": "x"})))],
        ));
        let mut approved = record("r2");
        approved
            .decisions
            .push(decided("c1", "p:r2:c1", ResumeDecisionAction::Resume, None));
        // r3: a delegate call whose child was told no, and that answered anyway.
        log.extend(run_log(
            "r3",
            &["c3"],
            vec![("c3", ToolResult::success("rm", json!({"response": "kept"})))],
        ));
        let mut forwarded = record("r3");
        forwarded
            .decisions
            .push(decided("c3", "c3/p:c1", ResumeDecisionAction::Cancel, None));
        let runs: Vec<RunRecord> = vec![waiting, approved, forwarded];
        let ui = ui_messages(&log, &Approvals::of(&runs));
        assert_eq!(ui.len(), 6, "{ui:?}");

        let asked = &ui[1]["parts"][1];
        assert_eq!(asked["state"], "approval-requested");
        assert_eq!(asked["approval"], json!({"id": "p:c1"}));
        let answered = &ui[1]["parts"][2];
        assert_eq!(answered["state"], "approval-responded");
        assert_eq!(
            answered["approval"],
            json!({"id": "p:c2", "approved": true})
        );
        let ran = &ui[3]["parts"][1];
        assert_eq!(ran["state"], "output-available");
        assert_eq!(ran["approval"], json!({"id": "p:r2:c1", "approved": true}));
        assert_eq!(ran["output"], json!({"deleted": "x"}));
        let refused = &ui[5]["parts"][1];
        assert_eq!(refused["state"], "output-denied");
        assert_eq!(
            refused["approval"],
            json!({"id": "c3/p:c1", "approved": false})
        );
        assert!(refused.get("output").is_none());
    }
}
