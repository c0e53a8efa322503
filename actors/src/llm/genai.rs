//! [`GenaiExecutor`]: real providers through the `genai` crate.
//!
//! One executor serves one [`ProviderSpec`]. Everything that can be checked is checked
//! at construction, so a bad config fails at startup and not on the first user
//! message: the adapter name must be one genai knows, the API key variable (when the
//! spec names one) must be set, the base URL must be `http(s)`.
//!
//! # Routing
//!
//! genai guesses the adapter from the model name and falls back to Ollama for names it
//! does not know; some OpenAI names even go to the Responses API. A registry model
//! name says nothing reliable about the server behind it, so the executor binds the
//! client to the spec's adapter and resolves every call itself: the endpoint is the
//! spec's `base_url` (normalised, see below) or the adapter's default, and the key is
//! the one read at construction. When `api_key_env` is unset the key is empty (genai's
//! OpenAI adapter then sends a bare `Authorization: Bearer`), which local
//! OpenAI-compatible servers ignore.
//!
//! genai joins `chat/completions` onto the base URL, so the URL must end in a version
//! segment and a slash. `http://host:8080`, `http://host:8080/` and
//! `http://host:8080/v1` all become `http://host:8080/v1/`; a URL that already ends
//! in a version segment (`/v1`, `/v4`, `/v1beta`) only gains the slash. The Ollama
//! adapters speak their native protocol at the server root and only get the slash.
//!
//! # Streaming
//!
//! `execute_stream` forwards genai's events as they arrive: text, reasoning, tool-call
//! starts and argument pieces, then usage and `Done`. Usage, content and tool calls
//! are captured by genai and reported on its `End` event, which is taken as the truth
//! for the final [`StreamResult`]. Tool arguments are parsed from the text streamed for
//! each call; when the model stopped at its token limit with an unparsable argument
//! text, the call keeps that raw text as a JSON string and the result is flagged
//! `has_incomplete_tool_calls` (see [`super::truncation`]). `execute` collects the
//! stream.
//!
//! # Errors and timeouts
//!
//! HTTP 429 becomes `RateLimited` (with `retry-after-ms` or `retry-after`, in seconds
//! or as an HTTP date, when sent), 408 and 504 become `Timeout`, other statuses
//! `Provider` with the status and the start of the body. `timeout_ms` bounds the wait
//! for the response headers and every gap between two body chunks (not the total
//! generation time, which legitimately varies); exceeding it is a `Timeout`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ::genai::adapter::AdapterKind;
use ::genai::chat::{
    Binary, ChatMessage, ChatOptions, ChatRequest, ChatStream, ChatStreamEvent, ContentPart,
    MessageContent, ReasoningEffort as GenaiEffort, StopReason as GenaiStopReason, StreamEnd, Tool,
    ToolCall as GenaiToolCall, ToolResponse, Usage,
};
use ::genai::resolver::{AuthData, Endpoint, ServiceTargetResolver};
use ::genai::webc::StreamTimeout;
use ::genai::{Client, ModelIden, ServiceTarget};
use async_trait::async_trait;
use futures::StreamExt;

use super::{
    InferenceChunk, InferenceDelta, InferenceRequest, InferenceStream, LlmExecutor, StopReason,
    StreamResult, collect_stream,
};
use crate::JsonValue;
use crate::contract::{
    ContentBlock, Message, ProviderSpec, ReasoningEffort, Role, TokenUsage, ToolCall,
    ToolDescriptor,
};
use crate::error::InferenceExecutionError;
use crate::ids::ToolCallId;

/// Longest part of an error response body quoted in an error message, in bytes.
const BODY_EXCERPT_BYTES: usize = 512;

/// Why a [`ProviderSpec`] could not be turned into a [`GenaiExecutor`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GenaiConfigError {
    /// genai has no adapter by this name.
    #[error("provider `{provider}`: unknown adapter `{adapter}`")]
    UnknownAdapter {
        /// The provider id.
        provider: String,
        /// The adapter name from the spec.
        adapter: String,
    },
    /// The API key variable is unset or empty.
    #[error("provider `{provider}`: environment variable `{var}` (api_key_env) is not set")]
    MissingApiKey {
        /// The provider id.
        provider: String,
        /// The variable name.
        var: String,
    },
    /// Both `api_key_env` and `api_key_file` are set.
    #[error("provider `{provider}`: set `api_key_env` or `api_key_file`, not both")]
    TwoApiKeys {
        /// The provider id.
        provider: String,
    },
    /// The API key file cannot be read, or is empty.
    #[error("provider `{provider}`: api_key_file `{path}`: {reason}")]
    UnreadableApiKeyFile {
        /// The provider id.
        provider: String,
        /// The file named.
        path: String,
        /// Why (never the content).
        reason: String,
    },
    /// The base URL is not an `http` or `https` URL.
    #[error("provider `{provider}`: base_url `{url}` is not an http(s) URL")]
    InvalidBaseUrl {
        /// The provider id.
        provider: String,
        /// The URL from the spec.
        url: String,
    },
    /// genai could not build its HTTP client.
    #[error("provider `{provider}`: cannot build the HTTP client: {message}")]
    Client {
        /// The provider id.
        provider: String,
        /// genai's message.
        message: String,
    },
}

/// Runs inference against one provider through `genai`; see the module docs.
pub struct GenaiExecutor {
    client: Client,
    adapter: AdapterKind,
    provider: String,
    timeout: Option<Duration>,
}

impl std::fmt::Debug for GenaiExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenaiExecutor")
            .field("provider", &self.provider)
            .field("adapter", &self.adapter.as_lower_str())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The API key of `spec`, read now from its variable or file; empty without
/// either (genai's OpenAI-style adapters insist on a key; an empty one carries
/// none).
fn api_key(spec: &ProviderSpec) -> Result<String, GenaiConfigError> {
    match (&spec.api_key_env, &spec.api_key_file) {
        (Some(_), Some(_)) => Err(GenaiConfigError::TwoApiKeys {
            provider: spec.id.clone(),
        }),
        (Some(var), None) => match std::env::var(var) {
            Ok(key) if !key.is_empty() => Ok(key),
            _ => Err(GenaiConfigError::MissingApiKey {
                provider: spec.id.clone(),
                var: var.clone(),
            }),
        },
        (None, Some(path)) => {
            let unreadable = |reason: String| GenaiConfigError::UnreadableApiKeyFile {
                provider: spec.id.clone(),
                path: path.display().to_string(),
                reason,
            };
            let key = std::fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
            // `echo key > file` adds a line break that is not part of the key.
            let key = key.trim_end_matches(['\r', '\n']);
            if key.is_empty() {
                return Err(unreadable("the file is empty".into()));
            }
            Ok(key.to_owned())
        }
        (None, None) => Ok(String::new()),
    }
}

impl GenaiExecutor {
    /// Builds the executor for `spec`, reading its API key from the environment
    /// or its file now.
    pub fn from_spec(spec: &ProviderSpec) -> Result<Self, GenaiConfigError> {
        let adapter =
            AdapterKind::from_lower_str(&spec.adapter.to_ascii_lowercase()).ok_or_else(|| {
                GenaiConfigError::UnknownAdapter {
                    provider: spec.id.clone(),
                    adapter: spec.adapter.clone(),
                }
            })?;
        let auth = AuthData::from_single(api_key(spec)?);
        let endpoint = match &spec.base_url {
            Some(url) => Some(Endpoint::from_owned(
                normalize_base_url(adapter, url).ok_or_else(|| {
                    GenaiConfigError::InvalidBaseUrl {
                        provider: spec.id.clone(),
                        url: url.clone(),
                    }
                })?,
            )),
            None => None,
        };
        let resolver = ServiceTargetResolver::from_resolver_fn(
            move |target: ServiceTarget| -> Result<ServiceTarget, ::genai::resolver::Error> {
                let ServiceTarget {
                    endpoint: default_endpoint,
                    model,
                    ..
                } = target;
                Ok(ServiceTarget {
                    endpoint: endpoint.clone().unwrap_or(default_endpoint),
                    auth: auth.clone(),
                    model: ModelIden::new(adapter, model.model_name),
                })
            },
        );
        let client = Client::builder()
            .with_adapter_kind(adapter)
            .with_service_target_resolver(resolver)
            .build()
            .map_err(|error| GenaiConfigError::Client {
                provider: spec.id.clone(),
                message: error.to_string(),
            })?;
        Ok(Self {
            client,
            adapter,
            provider: spec.id.clone(),
            timeout: spec.timeout_ms.map(Duration::from_millis),
        })
    }

    /// The genai adapter in use.
    pub fn adapter(&self) -> AdapterKind {
        self.adapter
    }

    fn options(&self, request: &InferenceRequest) -> ChatOptions {
        let mut options = ChatOptions::default()
            .with_capture_usage(true)
            .with_capture_content(true)
            .with_capture_reasoning_content(true)
            .with_capture_tool_calls(true);
        if let Some(temperature) = request.temperature {
            options = options.with_temperature(temperature);
        }
        if let Some(max_tokens) = request.max_tokens {
            options = options.with_max_tokens(max_tokens);
        }
        if let Some(top_p) = request.top_p {
            options = options.with_top_p(top_p);
        }
        if let Some(effort) = request.reasoning_effort {
            options = options.with_reasoning_effort(map_effort(effort));
        }
        if let Some(timeout) = self.timeout {
            options = options
                .with_stream_header_timeout(timeout)
                .with_stream_read_timeout(timeout);
        }
        options
    }
}

#[async_trait]
impl LlmExecutor for GenaiExecutor {
    async fn execute(
        &self,
        request: InferenceRequest,
    ) -> Result<StreamResult, InferenceExecutionError> {
        let stream = self
            .client
            .exec_chat_stream(
                ModelIden::new(self.adapter, request.model.as_str()),
                to_chat_request(&request)?,
                Some(&self.options(&request)),
            )
            .await
            .map_err(map_error)?
            .stream;
        collect_stream(translate(stream)).await
    }

    fn execute_stream(self: Arc<Self>, request: InferenceRequest) -> InferenceStream {
        let chat_request = match to_chat_request(&request) {
            Ok(chat_request) => chat_request,
            Err(error) => return futures::stream::iter([Err(error)]).boxed(),
        };
        let options = self.options(&request);
        let model = ModelIden::new(self.adapter, request.model);
        futures::stream::once(async move {
            self.client
                .exec_chat_stream(model, chat_request, Some(&options))
                .await
        })
        .flat_map(|started| match started {
            Ok(response) => translate(response.stream),
            Err(error) => futures::stream::iter([Err(map_error(error))]).boxed(),
        })
        .boxed()
    }

    fn name(&self) -> &str {
        &self.provider
    }
}

// ---------------------------------------------------------------------------------
// Request mapping

/// Our request as genai's chat request (messages and tools).
fn to_chat_request(request: &InferenceRequest) -> Result<ChatRequest, InferenceExecutionError> {
    let mut messages = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        messages.push(to_chat_message(message)?);
    }
    let mut chat = ChatRequest::new(messages);
    if !request.tools.is_empty() {
        chat = chat.with_tools(request.tools.iter().map(to_tool));
    }
    Ok(chat)
}

fn to_chat_message(message: &Message) -> Result<ChatMessage, InferenceExecutionError> {
    Ok(match message.role {
        Role::System => ChatMessage::system(message.text()),
        Role::User => ChatMessage::user(user_content(message)),
        Role::Assistant => ChatMessage::assistant(assistant_content(message)),
        Role::Tool => {
            let call_id = message.tool_call_id.as_ref().ok_or_else(|| {
                InferenceExecutionError::provider(format!(
                    "invalid request: tool message `{}` names no tool call",
                    message.id.as_str()
                ))
            })?;
            ChatMessage::from(ToolResponse::new(call_id.as_str(), message.text()))
        }
    })
}

fn user_content(message: &Message) -> MessageContent {
    let text_only = message
        .content
        .iter()
        .all(|block| matches!(block, ContentBlock::Text { .. }));
    if text_only {
        return MessageContent::from_text(message.text());
    }
    let parts: Vec<ContentPart> = message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(ContentPart::Text(text.clone())),
            ContentBlock::Image {
                url,
                data,
                media_type,
            } => {
                let media_type = media_type.clone().unwrap_or_else(|| "image/png".into());
                match (data, url) {
                    (Some(data), _) => Some(Binary::from_base64(media_type, data.as_str(), None)),
                    (None, Some(url)) => Some(Binary::from_url(media_type, url, None)),
                    (None, None) => None,
                }
                .map(ContentPart::Binary)
            }
            // Reasoning is the model's; it never belongs in a user turn.
            ContentBlock::Reasoning { .. } => None,
        })
        .collect();
    MessageContent::from_parts(parts)
}

fn assistant_content(message: &Message) -> MessageContent {
    let mut parts = Vec::with_capacity(message.content.len() + message.tool_calls.len());
    for block in &message.content {
        match block {
            ContentBlock::Text { text } => parts.push(ContentPart::Text(text.clone())),
            ContentBlock::Reasoning { text, signature } => {
                if let Some(signature) = signature {
                    parts.push(ContentPart::ThoughtSignature(signature.clone()));
                }
                parts.push(ContentPart::ReasoningContent(text.clone()));
            }
            ContentBlock::Image { .. } => {}
        }
    }
    for call in &message.tool_calls {
        parts.push(ContentPart::ToolCall(GenaiToolCall {
            call_id: call.id.as_str().to_owned(),
            fn_name: call.name.clone(),
            fn_arguments: call.arguments.clone(),
            thought_signatures: None,
        }));
    }
    MessageContent::from_parts(parts)
}

fn to_tool(descriptor: &ToolDescriptor) -> Tool {
    Tool::new(descriptor.name.as_str())
        .with_description(descriptor.description.as_str())
        .with_schema(descriptor.parameters.clone())
}

fn map_effort(effort: ReasoningEffort) -> GenaiEffort {
    match effort {
        ReasoningEffort::None => GenaiEffort::Zero,
        ReasoningEffort::Low => GenaiEffort::Low,
        ReasoningEffort::Medium => GenaiEffort::Medium,
        ReasoningEffort::High => GenaiEffort::High,
        ReasoningEffort::Max => GenaiEffort::Max,
        ReasoningEffort::Budget(tokens) => GenaiEffort::Budget(tokens),
    }
}

/// The base URL genai should use, or `None` when `url` is not http(s).
fn normalize_base_url(adapter: AdapterKind, url: &str) -> Option<String> {
    let url = url.trim();
    let after_scheme = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let trimmed = url.trim_end_matches('/');
    let host_and_path = after_scheme.trim_end_matches('/');
    if host_and_path.is_empty() {
        return None;
    }
    let native_root = matches!(adapter, AdapterKind::Ollama | AdapterKind::OllamaCloud);
    let path = host_and_path.split_once('/').map_or("", |(_, path)| path);
    let last_segment = path.rsplit('/').next().unwrap_or("");
    if native_root || is_version_segment(last_segment) {
        Some(format!("{trimmed}/"))
    } else {
        Some(format!("{trimmed}/v1/"))
    }
}

/// `v1`, `v4`, `v1beta`: a `v` followed by a digit.
fn is_version_segment(segment: &str) -> bool {
    let mut chars = segment.chars();
    chars.next() == Some('v') && chars.next().is_some_and(|c| c.is_ascii_digit())
}

// ---------------------------------------------------------------------------------
// Stream translation

/// Turns genai's event stream into ours.
fn translate(stream: ChatStream) -> InferenceStream {
    futures::stream::unfold(
        (stream, Translator::default()),
        |(mut stream, mut translator)| async move {
            loop {
                if let Some(chunk) = translator.pending.pop() {
                    return Some((Ok(chunk), (stream, translator)));
                }
                if translator.finished {
                    return None;
                }
                match stream.next().await {
                    Some(Ok(event)) => {
                        if let Err(error) = translator.on_event(event) {
                            translator.finished = true;
                            return Some((Err(error), (stream, translator)));
                        }
                    }
                    Some(Err(error)) => {
                        translator.finished = true;
                        return Some((Err(map_error(error)), (stream, translator)));
                    }
                    // Ended without `End`: the consumer sees a stream without `Done`.
                    None => return None,
                }
            }
        },
    )
    .boxed()
}

/// Per-stream bookkeeping: what was announced and the argument text of each call.
#[derive(Default)]
struct Translator {
    /// Chunks to emit, in reverse order (popped from the end).
    pending: Vec<InferenceChunk>,
    /// Tool calls seen so far: id and the argument text streamed for it.
    calls: Vec<(String, String)>,
    finished: bool,
}

impl Translator {
    fn on_event(&mut self, event: ChatStreamEvent) -> Result<(), InferenceExecutionError> {
        let mut chunks = Vec::new();
        match event {
            ChatStreamEvent::Chunk(chunk) if !chunk.content.is_empty() => {
                chunks.push(InferenceChunk::Delta(InferenceDelta::Text {
                    delta: chunk.content,
                }));
            }
            ChatStreamEvent::ReasoningChunk(chunk) if !chunk.content.is_empty() => {
                chunks.push(InferenceChunk::Delta(InferenceDelta::Reasoning {
                    delta: chunk.content,
                }));
            }
            ChatStreamEvent::ToolCallChunk(chunk) => {
                self.on_tool_chunk(chunk.tool_call, &mut chunks)?
            }
            ChatStreamEvent::End(end) => {
                let result = self.finish(end)?;
                if let Some(usage) = result.usage {
                    chunks.push(InferenceChunk::Delta(InferenceDelta::Usage { usage }));
                }
                chunks.push(InferenceChunk::Done(result));
                self.finished = true;
            }
            _ => {}
        }
        chunks.reverse();
        // `pending` is empty here: it is drained before the next event is read.
        self.pending = chunks;
        Ok(())
    }

    fn on_tool_chunk(
        &mut self,
        call: GenaiToolCall,
        chunks: &mut Vec<InferenceChunk>,
    ) -> Result<(), InferenceExecutionError> {
        let text = match &call.fn_arguments {
            JsonValue::String(text) => text.clone(),
            JsonValue::Null => String::new(),
            other => other.to_string(),
        };
        let id = tool_call_id(&call.call_id)?;
        let index = match self
            .calls
            .iter()
            .position(|(seen, _)| *seen == call.call_id)
        {
            Some(index) => index,
            None => {
                chunks.push(InferenceChunk::Delta(InferenceDelta::ToolCallStart {
                    id: id.clone(),
                    name: call.fn_name.clone(),
                }));
                self.calls.push((call.call_id.clone(), String::new()));
                self.calls.len() - 1
            }
        };
        // With tool-call capture on, genai sends the accumulated text; other adapters
        // may send only the new piece. Handle both.
        let streamed = &mut self.calls[index].1;
        let delta = match text.strip_prefix(streamed.as_str()) {
            Some(rest) => rest.to_owned(),
            None => text,
        };
        if !delta.is_empty() {
            streamed.push_str(&delta);
            chunks.push(InferenceChunk::Delta(InferenceDelta::ToolCallDelta {
                id,
                args_delta: delta,
            }));
        }
        Ok(())
    }

    /// The final result from genai's `End` event.
    fn finish(&mut self, end: StreamEnd) -> Result<StreamResult, InferenceExecutionError> {
        let StreamEnd {
            captured_usage,
            captured_stop_reason,
            captured_content,
            captured_reasoning_content,
            ..
        } = end;
        let mut content = Vec::new();
        let mut calls = Vec::new();
        let mut signature = None;
        let mut has_reasoning = false;
        for part in captured_content
            .map(MessageContent::into_parts)
            .unwrap_or_default()
        {
            match part {
                ContentPart::Text(text) if !text.is_empty() => {
                    content.push(ContentBlock::text(text));
                }
                ContentPart::ThoughtSignature(value) => signature = Some(value),
                ContentPart::ReasoningContent(text) => {
                    has_reasoning = true;
                    content.push(ContentBlock::Reasoning {
                        text,
                        signature: signature.take(),
                    });
                }
                ContentPart::ToolCall(call) => calls.push(call),
                _ => {}
            }
        }
        if !has_reasoning
            && let Some(text) = captured_reasoning_content.filter(|text| !text.is_empty())
        {
            content.insert(
                0,
                ContentBlock::Reasoning {
                    text,
                    signature: signature.take(),
                },
            );
        }
        if let Some(signature) = signature {
            // A signature without readable reasoning (redacted thinking) must still go
            // back to the provider with the next turn.
            content.insert(
                0,
                ContentBlock::Reasoning {
                    text: String::new(),
                    signature: Some(signature),
                },
            );
        }

        let mut tool_calls = Vec::with_capacity(calls.len());
        let mut any_unparsable = false;
        for call in calls {
            let streamed = self
                .calls
                .iter()
                .find(|(id, _)| *id == call.call_id)
                .map(|(_, text)| text.as_str());
            let (arguments, parsed) = parse_arguments(streamed, call.fn_arguments);
            any_unparsable |= !parsed;
            tool_calls.push(ToolCall::new(
                tool_call_id(&call.call_id)?,
                call.fn_name,
                arguments,
            ));
        }
        let stop_reason = map_stop_reason(captured_stop_reason, !tool_calls.is_empty());
        Ok(StreamResult {
            content,
            has_incomplete_tool_calls: any_unparsable && stop_reason == StopReason::MaxTokens,
            tool_calls,
            usage: captured_usage.as_ref().map(map_usage),
            stop_reason: Some(stop_reason),
        })
    }
}

fn tool_call_id(id: &str) -> Result<ToolCallId, InferenceExecutionError> {
    ToolCallId::new(id)
        .map_err(|error| InferenceExecutionError::provider(format!("bad tool call id: {error}")))
}

/// A call's arguments and whether they parsed: the streamed text when there was any
/// (genai gives up parsing silently), else genai's value. Empty text means `{}`.
fn parse_arguments(streamed: Option<&str>, captured: JsonValue) -> (JsonValue, bool) {
    let text = match (streamed, captured) {
        (Some(text), _) => text.to_owned(),
        (None, JsonValue::String(text)) => text,
        (None, value) => return (value, true),
    };
    if text.trim().is_empty() {
        return (JsonValue::Object(serde_json::Map::new()), true);
    }
    match serde_json::from_str(&text) {
        Ok(value) => (value, true),
        Err(_) => (JsonValue::String(text), false),
    }
}

fn map_stop_reason(reason: Option<GenaiStopReason>, has_tool_calls: bool) -> StopReason {
    match reason {
        Some(GenaiStopReason::MaxTokens(_)) => StopReason::MaxTokens,
        Some(GenaiStopReason::ContentFilter(_)) => StopReason::ContentFilter,
        Some(GenaiStopReason::StopSequence(_)) => StopReason::StopSequence,
        Some(GenaiStopReason::ToolCall(_)) => StopReason::ToolUse,
        // Some servers say `stop` even when the turn ends in tool calls.
        _ if has_tool_calls => StopReason::ToolUse,
        _ => StopReason::EndTurn,
    }
}

fn map_usage(usage: &Usage) -> TokenUsage {
    let count = |value: Option<i32>| value.and_then(|v| u64::try_from(v).ok());
    let prompt = usage.prompt_tokens_details.as_ref();
    let completion = usage.completion_tokens_details.as_ref();
    TokenUsage {
        prompt_tokens: count(usage.prompt_tokens),
        completion_tokens: count(usage.completion_tokens),
        total_tokens: count(usage.total_tokens),
        cache_read_tokens: count(prompt.and_then(|d| d.cached_tokens)),
        cache_creation_tokens: count(prompt.and_then(|d| d.cache_creation_tokens)),
        thinking_tokens: count(completion.and_then(|d| d.reasoning_tokens)),
    }
}

// ---------------------------------------------------------------------------------
// Error mapping

/// Our error for a genai error.
fn map_error(error: ::genai::Error) -> InferenceExecutionError {
    if let Some(timeout) = find_stream_timeout(&error) {
        return InferenceExecutionError::timeout(timeout.to_string());
    }
    let Some(failure) = HttpFailure::find(&error) else {
        return InferenceExecutionError::provider(excerpt(&error.to_string()));
    };
    let message = format!("HTTP {}: {}", failure.status, excerpt(failure.body));
    match failure.status {
        429 => InferenceExecutionError::RateLimited {
            message,
            retry_after_ms: failure.retry_after_ms(SystemTime::now()),
        },
        408 | 504 => InferenceExecutionError::Timeout { message },
        _ => InferenceExecutionError::Provider { message },
    }
}

/// The boxed cause of a streaming error, if it is another genai error.
fn stream_cause(
    error: &::genai::Error,
) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
    match error {
        ::genai::Error::WebStream { error, .. } => Some(error.as_ref()),
        _ => None,
    }
}

fn find_stream_timeout(error: &::genai::Error) -> Option<&StreamTimeout> {
    let cause = stream_cause(error)?;
    cause.downcast_ref::<StreamTimeout>().or_else(|| {
        cause
            .downcast_ref::<::genai::Error>()
            .and_then(find_stream_timeout)
    })
}

/// An HTTP error response found in a genai error.
struct HttpFailure<'a> {
    status: u16,
    body: &'a str,
    retry_after: Option<&'a str>,
    retry_after_ms: Option<&'a str>,
}

impl<'a> HttpFailure<'a> {
    fn find(error: &'a ::genai::Error) -> Option<Self> {
        if let Some(inner) = stream_cause(error).and_then(|cause| cause.downcast_ref()) {
            return Self::find(inner);
        }
        let status = error.status()?.as_u16();
        let body = match error {
            ::genai::Error::HttpError { body, .. } => body.as_str(),
            ::genai::Error::WebModelCall {
                webc_error: ::genai::webc::Error::ResponseFailedStatus { body, .. },
                ..
            } => body.as_str(),
            _ => "",
        };
        let header = |name: &str| {
            error
                .headers()
                .and_then(|headers| headers.get(name))
                .and_then(|value| value.to_str().ok())
        };
        Some(Self {
            status,
            body,
            retry_after: header("retry-after"),
            retry_after_ms: header("retry-after-ms"),
        })
    }

    fn retry_after_ms(&self, now: SystemTime) -> Option<u64> {
        if let Some(ms) = self
            .retry_after_ms
            .and_then(|v| v.trim().parse::<f64>().ok())
            && ms.is_finite()
            && ms >= 0.0
        {
            return Some(ms.ceil() as u64);
        }
        parse_retry_after(self.retry_after?, now)
    }
}

/// `Retry-After` in milliseconds: delay-seconds (fractions tolerated) or an HTTP date.
fn parse_retry_after(value: &str, now: SystemTime) -> Option<u64> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds.saturating_mul(1000));
    }
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| (seconds * 1000.0).ceil() as u64);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let wait = at.duration_since(now).unwrap_or(Duration::ZERO);
    Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
}

/// The start of `text`, cut at a char boundary.
fn excerpt(text: &str) -> String {
    let text = text.trim();
    if text.len() <= BODY_EXCERPT_BYTES {
        return text.to_owned();
    }
    let mut end = BODY_EXCERPT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn base_urls_end_in_a_version_and_a_slash() {
        let openai = |url| normalize_base_url(AdapterKind::OpenAI, url);
        for url in [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "http://127.0.0.1:8080/v1",
            "http://127.0.0.1:8080/v1/",
        ] {
            assert_eq!(
                openai(url).as_deref(),
                Some("http://127.0.0.1:8080/v1/"),
                "{url}"
            );
        }
        assert_eq!(
            openai("https://gw.example/openai").as_deref(),
            Some("https://gw.example/openai/v1/")
        );
        assert_eq!(
            openai("https://api.z.ai/api/paas/v4").as_deref(),
            Some("https://api.z.ai/api/paas/v4/")
        );
        assert_eq!(
            normalize_base_url(AdapterKind::Gemini, "https://g.example/v1beta").as_deref(),
            Some("https://g.example/v1beta/")
        );
        assert_eq!(
            normalize_base_url(AdapterKind::Ollama, "http://localhost:11434").as_deref(),
            Some("http://localhost:11434/")
        );
        assert_eq!(openai("ftp://x"), None);
        assert_eq!(openai("http://"), None);
        assert_eq!(openai("localhost:8080"), None);
    }

    #[test]
    fn construction_checks_adapter_key_and_url() {
        let spec = ProviderSpec::new("p", "no-such-adapter");
        assert!(matches!(
            GenaiExecutor::from_spec(&spec),
            Err(GenaiConfigError::UnknownAdapter { .. })
        ));
        let spec =
            ProviderSpec::new("p", "openai").with_api_key_env("AWAKEN_TEST_SURELY_UNSET_KEY_4F2A");
        let err = GenaiExecutor::from_spec(&spec).unwrap_err();
        assert_eq!(
            err.to_string(),
            "provider `p`: environment variable `AWAKEN_TEST_SURELY_UNSET_KEY_4F2A` (api_key_env) is not set"
        );
        let spec = ProviderSpec::new("p", "openai").with_base_url("127.0.0.1:1");
        assert!(matches!(
            GenaiExecutor::from_spec(&spec),
            Err(GenaiConfigError::InvalidBaseUrl { .. })
        ));
        let spec = ProviderSpec::new("p", "OpenAI").with_base_url("http://127.0.0.1:1");
        let exec = GenaiExecutor::from_spec(&spec).unwrap();
        assert_eq!(exec.adapter(), AdapterKind::OpenAI);
        assert_eq!(exec.name(), "p");
    }

    #[test]
    fn retry_after_seconds_dates_and_milliseconds() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(parse_retry_after("1", now), Some(1000));
        assert_eq!(parse_retry_after(" 0 ", now), Some(0));
        assert_eq!(parse_retry_after("1.5", now), Some(1500));
        assert_eq!(parse_retry_after("-3", now), None);
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(parse_retry_after(&later, now), Some(30_000));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(parse_retry_after(&earlier, now), Some(0));
        assert_eq!(parse_retry_after("soon", now), None);

        let failure = HttpFailure {
            status: 429,
            body: "",
            retry_after: Some("7"),
            retry_after_ms: Some("250"),
        };
        assert_eq!(
            failure.retry_after_ms(now),
            Some(250),
            "the precise header wins"
        );
    }

    #[test]
    fn arguments_parse_from_the_streamed_text() {
        assert_eq!(
            parse_arguments(Some(r#"{"a":1}"#), JsonValue::Null),
            (json!({"a": 1}), true)
        );
        assert_eq!(
            parse_arguments(Some(""), JsonValue::Null),
            (json!({}), true)
        );
        assert_eq!(
            parse_arguments(Some(r#"{"a":"#), json!(r#"{"a":"#)),
            (json!(r#"{"a":"#), false)
        );
        assert_eq!(
            parse_arguments(None, json!({"b": 2})),
            (json!({"b": 2}), true)
        );
        assert_eq!(
            parse_arguments(None, json!("[1, 2]")),
            (json!([1, 2]), true)
        );
    }

    #[test]
    fn stop_reasons_and_usage_map() {
        let reason = |s: &str| Some(GenaiStopReason::from(s.to_owned()));
        assert_eq!(map_stop_reason(reason("stop"), false), StopReason::EndTurn);
        assert_eq!(map_stop_reason(reason("stop"), true), StopReason::ToolUse);
        assert_eq!(
            map_stop_reason(reason("length"), true),
            StopReason::MaxTokens
        );
        assert_eq!(
            map_stop_reason(reason("tool_calls"), true),
            StopReason::ToolUse
        );
        assert_eq!(
            map_stop_reason(reason("content_filter"), false),
            StopReason::ContentFilter
        );
        assert_eq!(map_stop_reason(None, false), StopReason::EndTurn);

        let usage: Usage = serde_json::from_value(json!({
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 2}
        }))
        .unwrap();
        assert_eq!(
            map_usage(&usage),
            TokenUsage {
                prompt_tokens: Some(10),
                completion_tokens: Some(5),
                total_tokens: Some(15),
                cache_read_tokens: Some(4),
                cache_creation_tokens: None,
                thinking_tokens: Some(2),
            }
        );
    }

    #[test]
    fn tool_messages_need_a_call_id() {
        let mut message = Message::tool_result(ToolCallId::new("c1").unwrap(), "ok");
        assert!(to_chat_message(&message).is_ok());
        message.tool_call_id = None;
        assert!(to_chat_message(&message).is_err());
    }

    #[test]
    fn excerpts_cut_long_bodies_at_char_boundaries() {
        assert_eq!(excerpt("  short  "), "short");
        let long = "é".repeat(BODY_EXCERPT_BYTES);
        let cut = excerpt(&long);
        assert!(cut.len() <= BODY_EXCERPT_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }
}
