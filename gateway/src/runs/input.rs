//! Request bodies that start runs: input messages and the run's target.

use std::fmt;

use awaken_actors::contract::{ContentBlock, Message};
use awaken_actors::{AgentId, MessageId, ThreadId};
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
    for block in messages.iter().flat_map(|message| &message.content) {
        if let ContentBlock::Image {
            url,
            data,
            media_type,
        } = block
        {
            check_image(url.as_deref(), data.as_deref(), media_type.as_deref())
                .map_err(ApiError::BadRequest)?;
        }
    }
    Ok(messages)
}

/// Checks an image a client sends, whichever protocol it came by: exactly one of
/// an http(s) or `data:image/…;base64,` URL and base64 `data` (which needs an
/// `image/…` media type). Anything else — `javascript:` or `file:` URLs, bytes that
/// are not base64 — would reach a model provider or a browser as it was sent.
pub(crate) fn check_image(
    url: Option<&str>,
    data: Option<&str>,
    media_type: Option<&str>,
) -> Result<(), String> {
    if let Some(media_type) = media_type
        && !is_image_media_type(media_type)
    {
        return Err(format!("image media type `{media_type}` is not image/…"));
    }
    match (url, data) {
        (Some(url), None) => check_image_url(url),
        (None, Some(data)) => {
            if media_type.is_none() {
                return Err("an image with `data` needs its media type".into());
            }
            check_base64(data)
        }
        _ => Err("an image needs exactly one of `url` and `data`".into()),
    }
}

/// `image/…` in printable ASCII (as media types are written), at most 255 bytes:
/// the OpenAPI document's `MEDIA_TYPE` pattern.
fn is_image_media_type(media_type: &str) -> bool {
    media_type.starts_with("image/")
        && media_type.len() <= 255
        && media_type.bytes().all(|byte| byte.is_ascii_graphic())
}

fn check_image_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("image url is not a URL: {e}"))?;
    match parsed.scheme() {
        "http" | "https" => Ok(()),
        "data" => {
            let (header, payload) = parsed.path().split_once(',').unwrap_or_default();
            match header.strip_suffix(";base64") {
                Some(media) if media.starts_with("image/") => check_base64(payload),
                _ => Err("an image data URL must be `data:image/…;base64,…`".into()),
            }
        }
        other => Err(format!(
            "image url scheme `{other}:` is not http, https or data"
        )),
    }
}

fn check_base64(data: &str) -> Result<(), String> {
    use base64::Engine;
    match base64::engine::general_purpose::STANDARD.decode(data) {
        Ok(bytes) if !bytes.is_empty() => Ok(()),
        Ok(_) => Err("image data is empty".into()),
        Err(error) => Err(format!("image data is not base64: {error}")),
    }
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
    #[serde(default, deserialize_with = "awaken_actors::integral::optional")]
    pub priority: Option<u8>,
    /// A second submission with the same key is refused with 409 (mailbox route).
    #[serde(default, alias = "dedupe_key")]
    pub dedupe_key: Option<String>,
}

#[cfg(test)]
mod image_tests {
    use super::check_image;

    #[test]
    fn images_are_checked_whichever_way_they_come() {
        let png = "iVBORw0KGgo=";
        for good in [
            (Some("https://example.com/cat.png"), None, None),
            (Some("http://example.com/cat.png"), None, Some("image/png")),
            (Some("data:image/png;base64,iVBORw0KGgo="), None, None),
            (None, Some(png), Some("image/png")),
        ] {
            assert!(check_image(good.0, good.1, good.2).is_ok(), "{good:?}");
        }
        for bad in [
            (Some("javascript:alert(1)"), None, None),
            (Some("file:///etc/passwd"), None, None),
            (Some("data:text/html;base64,PGI+"), None, None),
            (Some("data:image/png;base64,not base64!"), None, None),
            (Some("not a url"), None, None),
            (None, Some("not base64!"), Some("image/png")),
            (None, Some(png), None),
            (None, Some(""), Some("image/png")),
            (None, Some(png), Some("text/html")),
            (None, Some(png), Some("image/pñg")),
            (None, Some(png), Some("image/p ng")),
            (
                Some("https://example.com/a.png"),
                Some(png),
                Some("image/png"),
            ),
            (None, None, Some("image/png")),
        ] {
            assert!(check_image(bad.0, bad.1, bad.2).is_err(), "{bad:?}");
        }
    }
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

/// A protocol client's user message as the engine's: 400 when it says nothing;
/// the client's id is kept when it is a valid message id, so the thread's log and
/// the client's view share ids.
pub(crate) fn user_input(
    blocks: Vec<ContentBlock>,
    client_id: Option<&str>,
) -> Result<Message, ApiError> {
    let mut message = Message::user(String::new());
    message.content = blocks;
    if !has_content(&message) {
        return Err(ApiError::BadRequest(
            "the user message has no content".into(),
        ));
    }
    if let Some(id) = client_id.and_then(|id| MessageId::new(id).ok()) {
        message.id = id;
    }
    Ok(message)
}
