//! A thread's log as AI SDK `UIMessage`s, for `useChat`'s initial messages.
//!
//! A run's assistant and tool messages fold into one assistant UI message whose id
//! is the run id (as in the stream), one `step-start` per model turn, tool results
//! filled into their tool parts.

use awaken_actors::JsonValue;
use awaken_actors::contract::{ContentBlock, Message, RUN_CANCELLED_MESSAGE, Role};
use serde_json::json;

/// The UI messages of `messages`, in order.
pub(crate) fn ui_messages(messages: &[Message]) -> Vec<JsonValue> {
    let mut out: Vec<JsonValue> = Vec::new();
    let mut assistant: Option<AssistantMessage> = None;
    for message in messages {
        match message.role {
            Role::User | Role::System => {
                if let Some(done) = assistant.take() {
                    out.push(done.into_json());
                }
                out.push(json!({
                    "id": message.id,
                    "role": if message.role == Role::User { "user" } else { "system" },
                    "parts": content_parts(&message.content),
                }));
            }
            Role::Assistant => {
                let id = message
                    .run_id
                    .as_ref()
                    .map_or_else(|| message.id.to_string(), ToString::to_string);
                if assistant.as_ref().is_some_and(|current| current.id != id)
                    && let Some(done) = assistant.take()
                {
                    out.push(done.into_json());
                }
                let current = assistant.get_or_insert_with(|| AssistantMessage {
                    id,
                    parts: Vec::new(),
                });
                current.parts.push(json!({"type": "step-start"}));
                current.parts.extend(content_parts(&message.content));
                for call in &message.tool_calls {
                    current.parts.push(json!({
                        "type": format!("tool-{}", call.name),
                        "toolCallId": call.id,
                        "state": "input-available",
                        "input": call.arguments,
                    }));
                }
            }
            Role::Tool => {
                let (Some(current), Some(call_id)) = (assistant.as_mut(), &message.tool_call_id)
                else {
                    continue;
                };
                if let Some(part) = current
                    .parts
                    .iter_mut()
                    .find(|part| part["toolCallId"] == json!(call_id))
                {
                    fill_output(part, &message.text());
                }
            }
        }
    }
    if let Some(done) = assistant {
        out.push(done.into_json());
    }
    out
}

/// Completes a tool part with the call's result as the log keeps it
/// (`awaken_actors::contract::ToolResult::to_json`): a success keeps its output; a failure
/// (`{"error": …, "code"?: …}`, nothing else) becomes `output-error` with its
/// message, or `output-denied` for a call the user denied (a permission rule or
/// a cancelling decision, not the run's cancellation), as the stream showed them.
fn fill_output(part: &mut JsonValue, text: &str) {
    let output: JsonValue =
        serde_json::from_str(text).unwrap_or_else(|_| JsonValue::String(text.to_owned()));
    match failure(&output) {
        None => {
            part["state"] = json!("output-available");
            part["output"] = output;
        }
        Some((message, code)) => {
            let message = message.to_owned();
            let denied = match code {
                Some("denied") => true,
                Some("cancelled") => message != RUN_CANCELLED_MESSAGE,
                _ => false,
            };
            if denied {
                part["state"] = json!("output-denied");
            } else {
                part["state"] = json!("output-error");
                part["errorText"] = json!(if message.is_empty() {
                    "the tool failed".to_owned()
                } else {
                    message
                });
            }
        }
    }
}

/// The message and code of a failed call's logged result.
fn failure(output: &JsonValue) -> Option<(&str, Option<&str>)> {
    let fields = output.as_object()?;
    let message = fields.get("error")?.as_str()?;
    let code = match fields.get("code") {
        Some(code) => Some(code.as_str()?),
        None => None,
    };
    let expected = 1 + usize::from(code.is_some());
    (fields.len() == expected).then_some((message, code))
}

struct AssistantMessage {
    id: String,
    parts: Vec<JsonValue>,
}

impl AssistantMessage {
    fn into_json(self) -> JsonValue {
        json!({"id": self.id, "role": "assistant", "parts": self.parts})
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

    use awaken_actors::contract::{ToolCall, ToolResult};
    use awaken_actors::{RunId, ToolCallId};

    use super::*;

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
        let ui = ui_messages(&[Message::user("hi"), asked, result, answer]);
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
    }

    #[test]
    fn failed_and_denied_calls_show_as_such_not_as_outputs() {
        let run = RunId::new("run-1").unwrap();
        let calls = ["c-failed", "c-denied", "c-refused", "c-run-cancelled"];
        let asked = Message::assistant_with_tool_calls(
            "",
            calls
                .iter()
                .map(|id| ToolCall::new(ToolCallId::new(*id).unwrap(), "rm", json!({})))
                .collect(),
        )
        .with_run_id(run.clone());
        let results = [
            ToolResult::error_with_code("rm", "tool_error", "disk full"),
            ToolResult::error_with_code("rm", "cancelled", "not that file"),
            ToolResult::error_with_code("rm", "denied", "rule `rm` denies it"),
            ToolResult::error_with_code("rm", "cancelled", RUN_CANCELLED_MESSAGE),
        ];
        let mut log = vec![Message::user("hi"), asked];
        for (id, result) in calls.iter().zip(results) {
            let call = ToolCallId::new(*id).unwrap();
            log.push(Message::tool_result(call, result.to_json_text()).with_run_id(run.clone()));
        }
        let ui = ui_messages(&log);
        let parts = ui[1]["parts"].as_array().unwrap();
        let part = |id: &str| parts.iter().find(|p| p["toolCallId"] == id).unwrap();
        assert_eq!(part("c-failed")["state"], "output-error");
        assert_eq!(part("c-failed")["errorText"], "disk full");
        assert_eq!(part("c-denied")["state"], "output-denied");
        assert_eq!(part("c-refused")["state"], "output-denied");
        assert_eq!(part("c-run-cancelled")["state"], "output-error");
        assert_eq!(part("c-run-cancelled")["errorText"], RUN_CANCELLED_MESSAGE);
        assert!(parts.iter().all(|p| p.get("output").is_none()), "{parts:?}");
    }
}
