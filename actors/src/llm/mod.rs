//! The model execution layer: requests, responses and the `LlmExecutor` trait.
//!
//! An [`LlmExecutor`] turns an [`InferenceRequest`] into a [`StreamResult`], either at
//! once (`execute`) or as a stream of [`InferenceDelta`]s ending in `Done`
//! (`execute_stream`). Executors compose as decorators:
//!
//! - [`GenaiExecutor`] talks to a real provider through `genai`, streaming for real;
//! - [`ScriptedExecutor`] answers from a script, deterministically (tests, benchmarks);
//! - [`CircuitBreakerExecutor`] refuses calls to a model that keeps failing;
//! - [`RetryingExecutor`] retries with backoff and falls back to other models, and
//!   wraps the breaker: `Retrying(CircuitBreaker(Genai))`.
//!
//! [`truncation`] holds the pure helpers the run loop uses when a model ran out of
//! output tokens in the middle of a tool call. Decision 0007 explains the streaming
//! retry rule, the stateless scripted model and where the breaker sits.

mod circuit_breaker;
mod genai;
mod retry;
mod scripted;
pub mod truncation;

pub use self::genai::{GenaiConfigError, GenaiExecutor};
pub use circuit_breaker::{
    CircuitBreaker, CircuitBreakerConfig, CircuitBreakerConfigKey, CircuitBreakerExecutor,
    CircuitPermit, CircuitState,
};
pub use retry::{LlmRetryPolicy, RetryConfigKey, RetryingExecutor};
pub use scripted::{
    AfterLast, ScriptError, ScriptSpec, ScriptStep, ScriptToolCall, ScriptedExecutor,
};
pub use truncation::{TruncationCounter, TruncationRecovery, TruncationState, TruncationUpdate};

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::contract::{
    ContentBlock, InferenceOverride, Message, ReasoningEffort, TokenUsage, ToolCall, ToolDescriptor,
};
use crate::error::InferenceExecutionError;
use crate::ids::ToolCallId;

/// One call to a model: the conversation, the offered tools and the parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InferenceRequest {
    /// Upstream model name.
    pub model: String,
    /// Models to try, in order, after `model` exhausts its retries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_models: Vec<String>,
    /// The conversation, system messages first.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDescriptor>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Output token limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Reasoning effort for models that support it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
}

impl InferenceRequest {
    /// A request for `model` over `messages`, with no tools and default parameters.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            fallback_models: Vec::new(),
            messages,
            tools: Vec::new(),
            temperature: None,
            max_tokens: None,
            top_p: None,
            reasoning_effort: None,
        }
    }

    /// Offers these tools.
    pub fn with_tools(mut self, tools: Vec<ToolDescriptor>) -> Self {
        self.tools = tools;
        self
    }

    /// Applies the fields an override sets; unset fields keep their values.
    pub fn apply_override(&mut self, overrides: &InferenceOverride) {
        if let Some(model) = &overrides.model {
            self.model = model.clone();
        }
        if let Some(fallbacks) = &overrides.fallback_models {
            self.fallback_models = fallbacks.clone();
        }
        if overrides.temperature.is_some() {
            self.temperature = overrides.temperature;
        }
        if overrides.max_tokens.is_some() {
            self.max_tokens = overrides.max_tokens;
        }
        if overrides.top_p.is_some() {
            self.top_p = overrides.top_p;
        }
        if overrides.reasoning_effort.is_some() {
            self.reasoning_effort = overrides.reasoning_effort;
        }
    }
}

/// Why the model stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its turn.
    EndTurn,
    /// The model wants tool results.
    ToolUse,
    /// The output token limit was hit.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// The provider filtered the output.
    ContentFilter,
}

/// A complete model response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    /// Text and reasoning blocks.
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    /// Tool calls requested.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Token usage, when the provider reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// Why generation stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// Whether a tool call's arguments were cut off (MaxTokens mid-call).
    #[serde(default)]
    pub has_incomplete_tool_calls: bool,
}

impl StreamResult {
    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// One streamed piece of a model response, forwarded to clients as it arrives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InferenceDelta {
    /// More answer text.
    Text {
        /// The new text.
        delta: String,
    },
    /// More reasoning text.
    Reasoning {
        /// The new text.
        delta: String,
    },
    /// The model started a tool call.
    ToolCallStart {
        /// The call id.
        id: ToolCallId,
        /// The tool's name.
        name: String,
    },
    /// More of a tool call's JSON arguments.
    ToolCallDelta {
        /// The call id.
        id: ToolCallId,
        /// The new argument text.
        args_delta: String,
    },
    /// Token usage, as soon as the provider reports it.
    Usage {
        /// The usage.
        usage: TokenUsage,
    },
}

/// An item of an inference stream: deltas, then exactly one final result.
#[derive(Debug, Clone, PartialEq)]
pub enum InferenceChunk {
    /// A partial piece of the response.
    Delta(InferenceDelta),
    /// The complete, parsed response; always the last item of a successful stream.
    Done(StreamResult),
}

/// A streaming model response. A stream that ends without `Done` has failed.
pub type InferenceStream = BoxStream<'static, Result<InferenceChunk, InferenceExecutionError>>;

/// Runs inference against one provider.
///
/// `execute` is required; `execute_stream` defaults to running `execute` and
/// replaying its result as deltas. Streaming providers override `execute_stream` and
/// implement `execute` with [`collect_stream`].
#[async_trait]
pub trait LlmExecutor: Send + Sync + 'static {
    /// Sends the request and returns the complete response.
    async fn execute(
        &self,
        request: InferenceRequest,
    ) -> Result<StreamResult, InferenceExecutionError>;

    /// Sends the request and streams the response.
    fn execute_stream(self: Arc<Self>, request: InferenceRequest) -> InferenceStream {
        futures::stream::once(async move { self.execute(request).await })
            .flat_map(|outcome| match outcome {
                Ok(result) => {
                    futures::stream::iter(replay_as_chunks(result).into_iter().map(Ok)).boxed()
                }
                Err(error) => futures::stream::iter([Err(error)]).boxed(),
            })
            .boxed()
    }

    /// A short name for logs.
    fn name(&self) -> &str;
}

/// The deltas a complete result would have streamed, followed by `Done`.
pub fn replay_as_chunks(result: StreamResult) -> Vec<InferenceChunk> {
    let mut chunks = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                chunks.push(InferenceChunk::Delta(InferenceDelta::Text {
                    delta: text.clone(),
                }));
            }
            ContentBlock::Reasoning { text, .. } if !text.is_empty() => {
                chunks.push(InferenceChunk::Delta(InferenceDelta::Reasoning {
                    delta: text.clone(),
                }));
            }
            _ => {}
        }
    }
    for call in &result.tool_calls {
        chunks.push(InferenceChunk::Delta(InferenceDelta::ToolCallStart {
            id: call.id.clone(),
            name: call.name.clone(),
        }));
        chunks.push(InferenceChunk::Delta(InferenceDelta::ToolCallDelta {
            id: call.id.clone(),
            args_delta: call.arguments.to_string(),
        }));
    }
    if let Some(usage) = &result.usage {
        chunks.push(InferenceChunk::Delta(InferenceDelta::Usage {
            usage: *usage,
        }));
    }
    chunks.push(InferenceChunk::Done(result));
    chunks
}

/// Drains a stream to its final result.
pub async fn collect_stream(
    mut stream: InferenceStream,
) -> Result<StreamResult, InferenceExecutionError> {
    while let Some(item) = stream.next().await {
        if let InferenceChunk::Done(result) = item? {
            return Ok(result);
        }
    }
    Err(InferenceExecutionError::provider(
        "stream ended without a final result",
    ))
}

impl std::fmt::Debug for dyn LlmExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmExecutor")
            .field("name", &self.name())
            .finish()
    }
}
