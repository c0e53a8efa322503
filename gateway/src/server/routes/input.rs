//! Request bodies that start runs: input messages and the run's target.

use std::fmt;

use awaken_actors::contract::{ContentBlock, Message};
use awaken_actors::{AgentId, ThreadId};
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use crate::server::error::ApiError;

/// Most messages one request may bring.
const MAX_INPUT_MESSAGES: usize = 256;

/// A message a client sends: only users start or continue runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InputMessage {
    role: InputRole,
    content: InputContent,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum InputRole {
    User,
}

/// Text, or content blocks (text, images).
///
/// Read by its JSON type rather than as an untagged enum, which buffers the value
/// and tries each variant in turn: a string is text, an array holds blocks.
#[derive(Debug, Clone)]
enum InputContent {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

impl<'de> Deserialize<'de> for InputContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor;

        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = InputContent;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of content blocks")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(InputContent::Text(text.to_owned()))
            }

            fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok(InputContent::Text(text))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Vec::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(InputContent::Blocks)
            }
        }

        deserializer.deserialize_any(ContentVisitor)
    }
}

impl InputMessage {
    fn into_message(self) -> Message {
        let InputRole::User = self.role;
        match self.content {
            InputContent::Text(text) => Message::user(text),
            InputContent::Blocks(blocks) => {
                let mut message = Message::user(String::new());
                message.content = blocks;
                message
            }
        }
    }
}

/// The messages of a request as the engine's, refusing an empty or huge list and
/// messages without content.
pub(crate) fn user_messages(input: Vec<InputMessage>) -> Result<Vec<Message>, ApiError> {
    if input.is_empty() {
        return Err(ApiError::BadRequest(
            "`messages` must hold at least one message".into(),
        ));
    }
    if input.len() > MAX_INPUT_MESSAGES {
        return Err(ApiError::BadRequest(format!(
            "at most {MAX_INPUT_MESSAGES} messages per request"
        )));
    }
    let messages: Vec<Message> = input.into_iter().map(InputMessage::into_message).collect();
    if messages.iter().any(|message| !has_content(message)) {
        return Err(ApiError::BadRequest("a message has no content".into()));
    }
    Ok(messages)
}

/// Whether a message says anything: blank text alone does not count.
pub(crate) fn has_content(message: &Message) -> bool {
    message.content.iter().any(|block| match block {
        ContentBlock::Text { text } | ContentBlock::Reasoning { text, .. } => {
            !text.trim().is_empty()
        }
        _ => true,
    })
}

/// `POST /v1/runs`: which agent, which thread, what input.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct StartRunBody {
    /// The agent; the thread's previous one, then the default agent, when absent.
    #[serde(default, alias = "agent_id")]
    pub agent_id: Option<AgentId>,
    /// The thread; a new one when absent.
    #[serde(default, alias = "thread_id")]
    pub thread_id: Option<ThreadId>,
    /// The user input.
    pub messages: Vec<InputMessage>,
}

/// Bodies that add input to a known thread (`/v1/threads/:id/messages`,
/// `/v1/threads/:id/mailbox`, `/v1/runs/:id/inputs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct InputBody {
    /// The agent; the thread's previous one, then the default agent, when absent.
    #[serde(default, alias = "agent_id")]
    pub agent_id: Option<AgentId>,
    /// The user input.
    pub messages: Vec<InputMessage>,
    /// Queue priority, 0 highest (mailbox route).
    #[serde(default)]
    pub priority: Option<u8>,
    /// A second submission with the same key is refused with 409 (mailbox route).
    #[serde(default, alias = "dedupe_key")]
    pub dedupe_key: Option<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn body(json: &str) -> Result<StartRunBody, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn content_is_text_or_blocks() {
        let text = body(r#"{"messages":[{"role":"user","content":"go"}]}"#).unwrap();
        let messages = user_messages(text.messages).unwrap();
        assert_eq!(messages[0].text(), "go");

        let blocks =
            body(r#"{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#)
                .unwrap();
        let messages = user_messages(blocks.messages).unwrap();
        assert_eq!(messages[0].text(), "hi");
    }

    #[test]
    fn other_content_is_refused_with_what_was_expected() {
        let error = body(r#"{"messages":[{"role":"user","content":42}]}"#).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("a string or an array of content blocks"),
            "{error}"
        );
        let error =
            body(r#"{"messages":[{"role":"user","content":[{"type":"nope"}]}]}"#).unwrap_err();
        assert!(error.to_string().contains("nope"), "{error}");
        assert!(user_messages(body(r#"{"messages":[]}"#).unwrap().messages).is_err());
        let blank = body(r#"{"messages":[{"role":"user","content":"  "}]}"#).unwrap();
        assert!(user_messages(blank.messages).is_err());
    }
}
