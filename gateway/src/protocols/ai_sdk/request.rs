//! What `useChat` (`DefaultChatTransport`) POSTs: the chat id, the whole message
//! list and a trigger. Only the last message is new: a user message starts a run,
//! an assistant message with answered approvals resumes the waiting one.

use awaken_actors::contract::{ContentBlock, Message, ResumeDecisionAction};
use awaken_actors::{AgentId, JsonValue, ThreadId};
use awaken_cluster::decisions::DecisionPayload;
use serde::Deserialize;
use serde_json::json;

use crate::runs::input::{check_image, user_input};
use crate::server::error::ApiError;

/// Most messages one request may carry (clients send the whole chat).
const MAX_CHAT_MESSAGES: usize = 10_000;

/// The request body. Unknown fields are allowed: transports merge the
/// application's own `body` fields into it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChatRequest {
    /// The chat id: the thread.
    #[serde(default)]
    id: Option<String>,
    /// The thread, when the client names it apart from the chat id.
    #[serde(default, alias = "thread_id")]
    thread_id: Option<String>,
    /// The agent; the thread's previous one, then the default agent, when absent.
    #[serde(default, alias = "agent_id")]
    pub agent_id: Option<AgentId>,
    /// The chat so far.
    messages: Vec<UiMessage>,
    /// Why the client sends it.
    #[serde(default)]
    trigger: Option<Trigger>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Trigger {
    SubmitMessage,
    RegenerateMessage,
}

/// A UI message: parts (v5+) or, from older clients, a plain `content` string.
#[derive(Debug, Deserialize)]
struct UiMessage {
    #[serde(default)]
    id: Option<String>,
    role: UiRole,
    #[serde(default)]
    parts: Vec<JsonValue>,
    #[serde(default)]
    content: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum UiRole {
    System,
    User,
    Assistant,
}

/// What a chat request asks for.
#[derive(Debug)]
pub(crate) enum ChatInput {
    /// A new user message: a new run.
    Message(Message),
    /// Answers to approval requests of the waiting run.
    Approvals(Vec<Approval>),
}

/// One answered `tool-approval-request`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Approval {
    /// The tool call it answers.
    pub tool_call_id: String,
    /// The request's id (the suspension ticket).
    pub approval_id: String,
    /// Whether the call may run.
    pub approved: bool,
    /// Why, if the user said.
    pub reason: Option<String>,
}

impl Approval {
    /// The decision it is. Its id derives from the approval, so a retried request
    /// is recognised as a duplicate.
    pub(crate) fn decision(&self) -> DecisionPayload {
        let mut decision = DecisionPayload::resume(
            self.tool_call_id.clone(),
            format!("ai-sdk:{}", self.approval_id),
            json!({"approved": self.approved}),
        );
        if !self.approved {
            decision.action = ResumeDecisionAction::Cancel;
        }
        decision.reason = self.reason.clone();
        decision
    }
}

impl ChatRequest {
    /// The thread: `threadId`, else the chat `id`; `None` for a new thread. 400
    /// when it names one that cannot be an id.
    pub(crate) fn thread_id(&self) -> Result<Option<ThreadId>, ApiError> {
        self.thread_id
            .as_ref()
            .or(self.id.as_ref())
            .map(|id| ThreadId::new(id.clone()))
            .transpose()
            .map_err(|error| ApiError::BadRequest(format!("chat id: {error}")))
    }

    /// What the last message asks for.
    pub(crate) fn input(&self) -> Result<ChatInput, ApiError> {
        if self.trigger == Some(Trigger::RegenerateMessage) {
            return Err(ApiError::BadRequest(
                "regenerating a message is not supported: the thread keeps its answers; send a new message instead"
                    .into(),
            ));
        }
        if self.messages.len() > MAX_CHAT_MESSAGES {
            return Err(ApiError::BadRequest(format!(
                "at most {MAX_CHAT_MESSAGES} messages per request"
            )));
        }
        let Some(last) = self.messages.last() else {
            return Err(ApiError::BadRequest(
                "`messages` must hold at least one message".into(),
            ));
        };
        match last.role {
            UiRole::User => user_message(last).map(ChatInput::Message),
            UiRole::Assistant => {
                let approvals = approvals(last)?;
                if approvals.is_empty() {
                    return Err(ApiError::BadRequest(
                        "the last message must be a user message or answer tool approvals".into(),
                    ));
                }
                Ok(ChatInput::Approvals(approvals))
            }
            UiRole::System => Err(ApiError::BadRequest(
                "the last message must be a user message or answer tool approvals".into(),
            )),
        }
    }

    /// The tool calls of the last (assistant) message: the ones the client knows.
    pub(crate) fn known_calls(&self) -> Vec<String> {
        self.messages
            .last()
            .map(|message| {
                message
                    .parts
                    .iter()
                    .filter(|part| is_tool_part(part))
                    .filter_map(|part| part.get("toolCallId")?.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn is_tool_part(part: &JsonValue) -> bool {
    part.get("type")
        .and_then(JsonValue::as_str)
        .is_some_and(|kind| kind.starts_with("tool-") || kind == "dynamic-tool")
}

/// The user message as the engine's: text parts, and images by URL.
fn user_message(message: &UiMessage) -> Result<Message, ApiError> {
    let mut blocks = Vec::new();
    if let Some(content) = &message.content {
        blocks.push(ContentBlock::text(content.clone()));
    }
    for part in &message.parts {
        match part.get("type").and_then(JsonValue::as_str) {
            Some("text") => {
                let text = part
                    .get("text")
                    .and_then(JsonValue::as_str)
                    .ok_or_else(|| {
                        ApiError::BadRequest("a text part has no `text` string".into())
                    })?;
                blocks.push(ContentBlock::text(text));
            }
            Some("file") => {
                let media_type = part.get("mediaType").and_then(JsonValue::as_str);
                let url = part.get("url").and_then(JsonValue::as_str);
                match (media_type, url) {
                    (Some(media_type), Some(url)) if media_type.starts_with("image/") => {
                        check_image(Some(url), None, Some(media_type))
                            .map_err(ApiError::BadRequest)?;
                        blocks.push(ContentBlock::Image {
                            url: Some(url.to_owned()),
                            data: None,
                            media_type: Some(media_type.to_owned()),
                        });
                    }
                    _ => {
                        return Err(ApiError::BadRequest(
                            "only image files (with `mediaType` and `url`) can be sent".into(),
                        ));
                    }
                }
            }
            // Data parts, step markers and the like are the client's own.
            _ => {}
        }
    }
    user_input(blocks, message.id.as_deref())
}

/// The tool parts the client answered (`approval-responded`).
fn approvals(message: &UiMessage) -> Result<Vec<Approval>, ApiError> {
    let mut approvals = Vec::new();
    for part in message.parts.iter().filter(|part| is_tool_part(part)) {
        if part.get("state").and_then(JsonValue::as_str) != Some("approval-responded") {
            continue;
        }
        let bad = |what: &str| ApiError::BadRequest(format!("an answered tool part {what}"));
        let tool_call_id = part
            .get("toolCallId")
            .and_then(JsonValue::as_str)
            .ok_or_else(|| bad("has no `toolCallId`"))?;
        let approval = part
            .get("approval")
            .ok_or_else(|| bad("has no `approval`"))?;
        let approval_id = approval
            .get("id")
            .and_then(JsonValue::as_str)
            .ok_or_else(|| bad("has no `approval.id`"))?;
        let approved = approval
            .get("approved")
            .and_then(JsonValue::as_bool)
            .ok_or_else(|| bad("has no boolean `approval.approved`"))?;
        let reason = approval
            .get("reason")
            .and_then(JsonValue::as_str)
            .map(str::to_owned);
        approvals.push(Approval {
            tool_call_id: tool_call_id.to_owned(),
            approval_id: approval_id.to_owned(),
            approved,
            reason,
        });
    }
    Ok(approvals)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn request(body: JsonValue) -> ChatRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn the_last_user_message_is_the_input_and_the_chat_id_the_thread() {
        let chat = request(json!({
            "id": "chat-1", "trigger": "submit-message", "extra": 1,
            "messages": [
                {"id": "u0", "role": "user", "parts": [{"type": "text", "text": "old"}]},
                {"id": "a0", "role": "assistant", "parts": [{"type": "text", "text": "hi"}]},
                {"id": "u1", "role": "user", "parts": [
                    {"type": "text", "text": "hello"},
                    {"type": "file", "mediaType": "image/png", "url": "https://x/y.png"}
                ]}
            ]
        }));
        assert_eq!(chat.thread_id().unwrap().unwrap().as_str(), "chat-1");
        let ChatInput::Message(message) = chat.input().unwrap() else {
            panic!("a user message")
        };
        assert_eq!(message.id.as_str(), "u1");
        assert_eq!(message.text(), "hello");
        assert_eq!(message.content.len(), 2);
    }

    #[test]
    fn answered_approvals_become_decisions() {
        let chat = request(json!({
            "id": "chat-1",
            "messages": [{"id": "r1", "role": "assistant", "parts": [
                {"type": "tool-rm", "toolCallId": "c1", "state": "approval-responded",
                 "input": {}, "approval": {"id": "t1", "approved": false, "reason": "no"}},
                {"type": "tool-ls", "toolCallId": "c2", "state": "output-available",
                 "input": {}, "output": 1}
            ]}]
        }));
        let ChatInput::Approvals(approvals) = chat.input().unwrap() else {
            panic!("approvals")
        };
        assert_eq!(approvals.len(), 1);
        let decision = approvals[0].decision();
        assert_eq!(decision.call_id, "c1");
        assert_eq!(decision.decision_id, "ai-sdk:t1");
        assert_eq!(decision.action, ResumeDecisionAction::Cancel);
        assert_eq!(decision.reason.as_deref(), Some("no"));
        assert_eq!(chat.known_calls(), ["c1", "c2"]);
    }

    #[test]
    fn bad_requests_are_refused_with_a_reason() {
        for body in [
            json!({"messages": []}),
            json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": "  "}]}]}),
            json!({"messages": [{"role": "user", "parts": [{"type": "text"}]}]}),
            json!({"messages": [{"role": "user", "parts": [{"type": "file", "mediaType": "application/pdf", "url": "u"}]}]}),
            json!({"messages": [{"role": "assistant", "parts": [{"type": "text", "text": "x"}]}]}),
            json!({"messages": [{"role": "assistant", "parts": [{"type": "tool-x", "toolCallId": "c", "state": "approval-responded"}]}]}),
            json!({"trigger": "regenerate-message", "messages": [{"role": "user", "content": "x"}]}),
        ] {
            let error = request(body.clone()).input().unwrap_err();
            assert!(
                matches!(error, ApiError::BadRequest(_)),
                "{body}: {error:?}"
            );
        }
        let long = request(json!({"id": "x".repeat(300), "messages": []}));
        assert!(long.thread_id().is_err());
    }
}
