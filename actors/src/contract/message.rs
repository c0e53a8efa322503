//! Conversation messages: the thread's log and the model's input.
//!
//! A [`Message`] has a [`Role`], a list of [`ContentBlock`]s and, for assistant
//! messages, the [`ToolCall`]s the model requested. Tool results are `Tool`-role
//! messages that name the call they answer in `tool_call_id`. Messages the runtime
//! injects for the model only (reminders, summaries) carry
//! [`Visibility::Internal`] so user-facing history can hide them.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::ids::{MessageId, RunId, ToolCallId};

/// Who authored a message; decides how providers render it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions from the agent definition or the runtime.
    System,
    /// The human (or calling agent) talking to the agent.
    User,
    /// The model's own output.
    Assistant,
    /// The result of a tool call, answering one assistant tool call.
    Tool,
}

/// One piece of message content; messages mix text, images and reasoning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, by URL or inline base64 data.
    Image {
        /// Where the image can be fetched.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// Base64-encoded image bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        /// MIME type of `data`, e.g. `image/png`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        media_type: Option<String>,
    },
    /// Model reasoning ("thinking") that some providers return and want back.
    Reasoning {
        /// The reasoning text.
        text: String,
        /// Provider signature that authenticates the reasoning when sent back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
}

impl ContentBlock {
    /// A text block; the common case.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The text of a `Text` block, `None` for other blocks.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            _ => None,
        }
    }
}

/// Who may see a message; internal messages are for the model only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Shown to users and sent to the model.
    #[default]
    All,
    /// Sent to the model but hidden from user-facing history.
    Internal,
}

impl Visibility {
    /// Whether this is the default visibility (used to omit it from JSON).
    pub fn is_all(&self) -> bool {
        matches!(self, Self::All)
    }
}

/// A tool invocation requested by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-chosen id that the tool result must echo.
    pub id: ToolCallId,
    /// The tool's name as the model saw it.
    pub name: String,
    /// Arguments as JSON (normally an object).
    pub arguments: JsonValue,
}

impl ToolCall {
    /// A tool call with the given id, tool name and arguments.
    pub fn new(id: ToolCallId, name: impl Into<String>, arguments: JsonValue) -> Self {
        Self {
            id,
            name: name.into(),
            arguments,
        }
    }
}

/// One entry in a thread's message log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Unique id of this message.
    pub id: MessageId,
    /// Author of the message.
    pub role: Role,
    /// Content blocks in order.
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    /// Tool calls requested by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Tool` messages: the call this result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<ToolCallId>,
    /// Who may see the message.
    #[serde(default, skip_serializing_if = "Visibility::is_all")]
    pub visibility: Visibility,
    /// The run that produced the message, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// Creation time, unix millis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
}

impl Message {
    fn with_role_text(role: Role, text: impl Into<String>) -> Self {
        Self {
            id: MessageId::generate(),
            role,
            content: vec![ContentBlock::text(text)],
            tool_calls: Vec::new(),
            tool_call_id: None,
            visibility: Visibility::All,
            run_id: None,
            created_at: None,
        }
    }

    /// A system message visible to everyone.
    pub fn system(text: impl Into<String>) -> Self {
        Self::with_role_text(Role::System, text)
    }

    /// A system message for the model only (reminders, summaries).
    pub fn internal_system(text: impl Into<String>) -> Self {
        Self::system(text).with_visibility(Visibility::Internal)
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::with_role_text(Role::User, text)
    }

    /// An assistant message with text only.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::with_role_text(Role::Assistant, text)
    }

    /// An assistant message that requests tool calls; empty text adds no block.
    pub fn assistant_with_tool_calls(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        let text = text.into();
        let mut message = Self::with_role_text(Role::Assistant, String::new());
        message.content = if text.is_empty() {
            Vec::new()
        } else {
            vec![ContentBlock::text(text)]
        };
        message.tool_calls = tool_calls;
        message
    }

    /// The result of one tool call, sent back to the model.
    pub fn tool_result(call_id: ToolCallId, content: impl Into<String>) -> Self {
        let mut message = Self::with_role_text(Role::Tool, content);
        message.tool_call_id = Some(call_id);
        message
    }

    /// Records which run produced the message.
    pub fn with_run_id(mut self, run_id: RunId) -> Self {
        self.run_id = Some(run_id);
        self
    }

    /// Sets who may see the message.
    pub fn with_visibility(mut self, visibility: Visibility) -> Self {
        self.visibility = visibility;
        self
    }

    /// The concatenation of all text blocks (reasoning and images excluded).
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(ContentBlock::as_text)
            .collect()
    }

    /// Whether the message is hidden from user-facing history.
    pub fn is_internal(&self) -> bool {
        self.visibility == Visibility::Internal
    }

    /// Whether the message requests any tool calls.
    pub fn has_tool_calls(&self) -> bool {
        !self.tool_calls.is_empty()
    }
}

/// Removes tool calls that no `Tool`-role message answers, so the history stays valid.
///
/// A cancelled run can leave an assistant message whose tool calls never got results;
/// providers refuse such histories. Each unanswered call is removed from its assistant
/// message, and an assistant message left with neither content nor tool calls is dropped.
/// Results are matched by `tool_call_id` anywhere in the history. Messages that had no
/// tool calls to begin with are never touched.
pub fn strip_unpaired_tool_calls(messages: &mut Vec<Message>) {
    let answered: HashSet<ToolCallId> = messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.clone())
        .collect();
    messages.retain_mut(|message| {
        if message.role != Role::Assistant || message.tool_calls.is_empty() {
            return true;
        }
        message
            .tool_calls
            .retain(|call| answered.contains(&call.id));
        !(message.tool_calls.is_empty() && message.content.is_empty())
    });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call_id(s: &str) -> ToolCallId {
        ToolCallId::new(s).unwrap()
    }

    #[test]
    fn constructors_set_role_and_text() {
        let m = Message::user("hello");
        assert_eq!(m.role, Role::User);
        assert_eq!(m.text(), "hello");
        assert!(!m.is_internal());
        assert!(!m.has_tool_calls());

        let s = Message::internal_system("remember");
        assert_eq!(s.role, Role::System);
        assert!(s.is_internal());

        let t = Message::tool_result(call_id("c1"), "42");
        assert_eq!(t.role, Role::Tool);
        assert_eq!(t.tool_call_id, Some(call_id("c1")));

        let a = Message::assistant_with_tool_calls(
            "",
            vec![ToolCall::new(call_id("c1"), "calc", json!({}))],
        );
        assert!(a.content.is_empty());
        assert!(a.has_tool_calls());
        assert_ne!(Message::user("x").id, Message::user("x").id);
    }

    #[test]
    fn text_concatenates_text_blocks_only() {
        let mut m = Message::assistant("a");
        m.content.push(ContentBlock::Reasoning {
            text: "hidden".into(),
            signature: None,
        });
        m.content.push(ContentBlock::text("b"));
        assert_eq!(m.text(), "ab");
    }

    #[test]
    fn user_message_json_omits_defaults() {
        let run = RunId::new("r1").unwrap();
        let mut m = Message::user("hi").with_run_id(run);
        m.id = MessageId::new("m1").unwrap();
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({
                "id": "m1",
                "role": "user",
                "content": [{"type": "text", "text": "hi"}],
                "run_id": "r1"
            })
        );
    }

    #[test]
    fn assistant_and_tool_json_shapes() {
        let mut a = Message::assistant_with_tool_calls(
            "checking",
            vec![ToolCall::new(
                call_id("c1"),
                "weather",
                json!({"city": "Oslo"}),
            )],
        )
        .with_visibility(Visibility::Internal);
        a.id = MessageId::new("m2").unwrap();
        a.created_at = Some(7);
        let value = serde_json::to_value(&a).unwrap();
        assert_eq!(
            value,
            json!({
                "id": "m2",
                "role": "assistant",
                "content": [{"type": "text", "text": "checking"}],
                "tool_calls": [{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}],
                "visibility": "internal",
                "created_at": 7
            })
        );
        let back: Message = serde_json::from_value(value).unwrap();
        assert_eq!(back, a);

        let mut t = Message::tool_result(call_id("c1"), "sunny");
        t.id = MessageId::new("m3").unwrap();
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({
                "id": "m3",
                "role": "tool",
                "content": [{"type": "text", "text": "sunny"}],
                "tool_call_id": "c1"
            })
        );
    }

    #[test]
    fn content_block_shapes() {
        let image = ContentBlock::Image {
            url: None,
            data: Some("aGk=".into()),
            media_type: Some("image/png".into()),
        };
        assert_eq!(
            serde_json::to_value(&image).unwrap(),
            json!({"type": "image", "data": "aGk=", "media_type": "image/png"})
        );
        let reasoning = ContentBlock::Reasoning {
            text: "hmm".into(),
            signature: Some("sig".into()),
        };
        let value = serde_json::to_value(&reasoning).unwrap();
        assert_eq!(
            value,
            json!({"type": "reasoning", "text": "hmm", "signature": "sig"})
        );
        assert_eq!(
            serde_json::from_value::<ContentBlock>(value).unwrap(),
            reasoning
        );
    }

    #[test]
    fn missing_optional_fields_deserialize() {
        let m: Message = serde_json::from_value(json!({"id": "m1", "role": "system"})).unwrap();
        assert!(m.content.is_empty());
        assert_eq!(m.visibility, Visibility::All);
    }

    #[test]
    fn strip_unpaired_tool_calls_removes_unanswered_calls() {
        let answered = ToolCall::new(call_id("a"), "t", json!({}));
        let unanswered = ToolCall::new(call_id("b"), "t", json!({}));
        let orphan_only = ToolCall::new(call_id("c"), "t", json!({}));
        let mut messages = vec![
            Message::user("go"),
            Message::assistant_with_tool_calls("", vec![answered.clone(), unanswered]),
            Message::tool_result(call_id("a"), "ok"),
            Message::assistant_with_tool_calls("thinking aloud", vec![orphan_only.clone()]),
            Message::assistant_with_tool_calls("", vec![orphan_only]),
            Message::assistant("done"),
        ];
        strip_unpaired_tool_calls(&mut messages);

        assert_eq!(
            messages.len(),
            5,
            "the empty orphan-only message is dropped"
        );
        assert_eq!(messages[1].tool_calls, vec![answered]);
        assert_eq!(messages[2].role, Role::Tool);
        assert_eq!(messages[3].text(), "thinking aloud");
        assert!(
            !messages[3].has_tool_calls(),
            "content survives, call removed"
        );
        assert_eq!(messages[4].text(), "done");
    }

    #[test]
    fn strip_unpaired_tool_calls_keeps_complete_history() {
        let mut messages = vec![
            Message::user("go"),
            Message::assistant_with_tool_calls(
                "",
                vec![ToolCall::new(call_id("a"), "t", json!({}))],
            ),
            Message::tool_result(call_id("a"), "ok"),
        ];
        let before = messages.clone();
        strip_unpaired_tool_calls(&mut messages);
        assert_eq!(messages, before);
    }
}
