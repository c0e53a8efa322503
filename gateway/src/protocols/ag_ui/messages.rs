//! A thread's log as AG-UI `Message`s (for `MESSAGES_SNAPSHOT` and the history
//! route): the engine's message ids, so a snapshot reconciles with what the
//! client built from the stream.

use awaken_actors::JsonValue;
use awaken_actors::contract::{Message, Role, Visibility};
use serde_json::json;

/// The visible messages of a log, as AG-UI messages.
pub(crate) fn ag_ui_messages(messages: &[Message]) -> Vec<JsonValue> {
    messages
        .iter()
        .filter(|message| message.visibility == Visibility::All)
        .map(ag_ui_message)
        .collect()
}

fn ag_ui_message(message: &Message) -> JsonValue {
    let text = message.text();
    match message.role {
        Role::User => json!({"id": message.id, "role": "user", "content": text}),
        Role::System => json!({"id": message.id, "role": "system", "content": text}),
        Role::Tool => json!({
            "id": message.id,
            "role": "tool",
            "toolCallId": message.tool_call_id.as_ref().map(ToString::to_string).unwrap_or_default(),
            "content": text,
        }),
        Role::Assistant => {
            let mut out = json!({"id": message.id, "role": "assistant"});
            if !text.is_empty() {
                out["content"] = json!(text);
            }
            if !message.tool_calls.is_empty() {
                out["toolCalls"] = message
                    .tool_calls
                    .iter()
                    .map(|call| {
                        json!({
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments.to_string()},
                        })
                    })
                    .collect();
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::ToolCallId;
    use awaken_actors::contract::ToolCall;

    use super::*;

    #[test]
    fn roles_map_to_ag_ui_shapes_and_internal_messages_are_left_out() {
        let call = ToolCallId::new("c1").unwrap();
        let messages = [
            Message::user("hi"),
            Message::assistant_with_tool_calls(
                "",
                vec![ToolCall::new(call.clone(), "ls", json!({"dir": "."}))],
            ),
            Message::tool_result(call, "[]"),
            Message::assistant("done"),
            Message::user("secret").with_visibility(Visibility::Internal),
        ];
        let out = ag_ui_messages(&messages);
        assert_eq!(out.len(), 4);
        assert_eq!(out[0]["content"], "hi");
        assert!(out[1].get("content").is_none());
        assert_eq!(
            out[1]["toolCalls"][0]["function"]["arguments"],
            "{\"dir\":\".\"}"
        );
        assert_eq!(out[2]["toolCallId"], "c1");
        assert_eq!(out[3]["content"], "done");
    }
}
