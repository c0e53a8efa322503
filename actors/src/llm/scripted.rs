//! A deterministic, stateless model for tests, demos and benchmarks.
//!
//! [`ScriptedExecutor`] answers from a [`ScriptSpec`] instead of a provider. It keeps
//! no state between calls: the answer is a pure function of the request, so one
//! executor serves any number of threads concurrently, and a thread that is replayed,
//! resumed or moved to another node gets the same answers.
//!
//! # Which step answers
//!
//! The step index is the number of assistant messages after the last user message
//! that is visible to users (internal user messages, such as reminders or truncation
//! continuations, are runtime-injected and do not start a new turn). So each new user
//! turn starts the script from step 0, and each tool round-trip moves it one step on.
//! Past the last step, `after_last` decides: `"repeat_last"` (the default) answers
//! with the last step again; `{"text": "..."}` answers with that text. A repeated
//! tool-call step keeps calling tools until the run's round limit stops it.
//!
//! # Format
//!
//! The script is plain serde data, so it can live in JSON, YAML or TOML config:
//!
//! ```json
//! {
//!   "steps": [
//!     {"tool_calls": [{"name": "delete_file", "arguments": {"path": "a.txt"}}]},
//!     {"text": "Done: {last_tool_result}"}
//!   ],
//!   "after_last": {"text": "Nothing left to do."}
//! }
//! ```
//!
//! A step may set `text`, `reasoning`, `tool_calls` (`name` plus `arguments`, default
//! `{}`), `usage` (a `TokenUsage`), `stop_reason` (default: `tool_use` when the step
//! calls tools, else `end_turn`), `has_incomplete_tool_calls`, or `error` (an
//! `InferenceExecutionError` such as `{"kind": "rate_limited", "message": "slow"}`,
//! returned instead of an answer). Text may contain two placeholders:
//! `{last_user_text}` (the last visible user message) and `{last_tool_result}` (the
//! last tool message); any other `{...}` is kept as written.
//!
//! Tool call ids are `call_<n>_<i>`, where `n` is the number of messages in the request
//! and `i` the call's position in the step: deterministic, and unique within a thread
//! because the history only grows.
//!
//! # Cost
//!
//! The script is validated and its templates are split into segments once, at
//! construction; tool arguments are rendered to JSON text once. A call walks the
//! history backwards once and clones the step's strings. `execute_stream` streams the
//! same answer as deltas, with the text cut into up to three pieces at fixed places, so
//! streaming consumers are exercised.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::{
    InferenceChunk, InferenceDelta, InferenceRequest, InferenceStream, LlmExecutor, StopReason,
    StreamResult,
};
use crate::JsonValue;
use crate::contract::{ContentBlock, Message, Role, TokenUsage, ToolCall};
use crate::error::InferenceExecutionError;
use crate::ids::ToolCallId;

/// A script: the answers, in order, and what to do once they are used up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptSpec {
    /// The answers; step `i` answers the `i`-th inference of a user turn.
    pub steps: Vec<ScriptStep>,
    /// What to answer past the last step.
    #[serde(default)]
    pub after_last: AfterLast,
}

impl ScriptSpec {
    /// A script with these steps that repeats the last one.
    pub fn new(steps: Vec<ScriptStep>) -> Self {
        Self {
            steps,
            after_last: AfterLast::RepeatLast,
        }
    }

    /// Sets what to answer past the last step.
    pub fn with_after_last(mut self, after_last: AfterLast) -> Self {
        self.after_last = after_last;
        self
    }
}

/// What a script answers once its steps are used up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterLast {
    /// Answer with the last step again.
    #[default]
    RepeatLast,
    /// Answer with this text (placeholders allowed).
    Text(String),
}

/// One scripted answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptStep {
    /// Answer text; may contain `{last_user_text}` and `{last_tool_result}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Reasoning text, returned as a reasoning block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Tool calls to request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Token usage to report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// Stop reason; by default `tool_use` with tool calls, else `end_turn`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// Marks the tool calls as cut off (to exercise truncation recovery).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub has_incomplete_tool_calls: bool,
    /// Fail with this error instead of answering.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<InferenceExecutionError>,
}

impl ScriptStep {
    /// A step that answers with text.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A step that calls one tool.
    pub fn tool_call(name: impl Into<String>, arguments: JsonValue) -> Self {
        Self::default().with_tool_call(name, arguments)
    }

    /// A step that fails with `error`.
    pub fn error(error: InferenceExecutionError) -> Self {
        Self {
            error: Some(error),
            ..Self::default()
        }
    }

    /// Adds a tool call.
    pub fn with_tool_call(mut self, name: impl Into<String>, arguments: JsonValue) -> Self {
        self.tool_calls.push(ScriptToolCall {
            name: name.into(),
            arguments,
        });
        self
    }

    /// Sets the reported usage.
    pub fn with_usage(mut self, usage: TokenUsage) -> Self {
        self.usage = Some(usage);
        self
    }
}

fn empty_object() -> JsonValue {
    JsonValue::Object(serde_json::Map::new())
}

/// A scripted tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// The tool's name.
    pub name: String,
    /// The arguments; `{}` when omitted.
    #[serde(default = "empty_object")]
    pub arguments: JsonValue,
}

/// Why a script was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// `after_last` is `repeat_last` but there is no step to repeat.
    #[error("the script has no steps and nothing to answer after them")]
    NoSteps,
    /// A tool call has an empty name.
    #[error("step {step}: tool call {index} has an empty name")]
    EmptyToolName {
        /// The step's index.
        step: usize,
        /// The call's index within the step.
        index: usize,
    },
}

/// A model that answers from a [`ScriptSpec`]; see the module docs.
#[derive(Debug, Clone)]
pub struct ScriptedExecutor {
    steps: Arc<[CompiledStep]>,
    /// How many of `steps` are scripted steps (an `after_last` text comes after them).
    scripted: usize,
    /// Index into `steps` answering past the last scripted step.
    after_last: usize,
}

impl ScriptedExecutor {
    /// Validates and compiles `spec`.
    pub fn new(spec: ScriptSpec) -> Result<Self, ScriptError> {
        let mut steps = spec
            .steps
            .into_iter()
            .enumerate()
            .map(|(index, step)| CompiledStep::compile(index, step))
            .collect::<Result<Vec<_>, _>>()?;
        let scripted = steps.len();
        let after_last = match spec.after_last {
            AfterLast::RepeatLast => steps.len().checked_sub(1).ok_or(ScriptError::NoSteps)?,
            AfterLast::Text(text) => {
                steps.push(CompiledStep::compile(steps.len(), ScriptStep::text(text))?);
                steps.len() - 1
            }
        };
        Ok(Self {
            steps: steps.into(),
            scripted,
            after_last,
        })
    }

    /// A script with one text answer, repeated forever.
    pub fn always(text: impl Into<String>) -> Self {
        let step = CompiledStep {
            text: Some(Template::parse(&text.into())),
            reasoning: None,
            tool_calls: Vec::new(),
            usage: None,
            stop_reason: StopReason::EndTurn,
            has_incomplete_tool_calls: false,
            error: None,
        };
        Self {
            steps: Arc::from([step]),
            scripted: 1,
            after_last: 0,
        }
    }

    /// The step that answers `messages`.
    fn step_for(&self, messages: &[Message]) -> &CompiledStep {
        let answered = messages
            .iter()
            .rev()
            .take_while(|m| !starts_turn(m))
            .filter(|m| m.role == Role::Assistant)
            .count();
        let index = if answered < self.scripted {
            answered
        } else {
            self.after_last
        };
        &self.steps[index]
    }

    /// The answer to `request`, and the tool calls' argument text for streaming.
    fn answer(
        &self,
        request: &InferenceRequest,
    ) -> Result<(StreamResult, Vec<Arc<str>>), InferenceExecutionError> {
        let step = self.step_for(&request.messages);
        if let Some(error) = &step.error {
            return Err(error.clone());
        }
        let mut content = Vec::with_capacity(2);
        if let Some(reasoning) = &step.reasoning {
            content.push(ContentBlock::Reasoning {
                text: reasoning.clone(),
                signature: None,
            });
        }
        if let Some(text) = &step.text {
            content.push(ContentBlock::text(text.render(&request.messages)));
        }
        let prefix = request.messages.len();
        let mut tool_calls = Vec::with_capacity(step.tool_calls.len());
        let mut arguments_text = Vec::with_capacity(step.tool_calls.len());
        for (i, call) in step.tool_calls.iter().enumerate() {
            let id = ToolCallId::new(format!("call_{prefix}_{i}"))
                .map_err(|e| InferenceExecutionError::provider(e.to_string()))?;
            tool_calls.push(ToolCall::new(id, call.name.clone(), call.arguments.clone()));
            arguments_text.push(Arc::clone(&call.arguments_text));
        }
        let result = StreamResult {
            content,
            tool_calls,
            usage: step.usage,
            stop_reason: Some(step.stop_reason.clone()),
            has_incomplete_tool_calls: step.has_incomplete_tool_calls,
        };
        Ok((result, arguments_text))
    }
}

#[async_trait]
impl LlmExecutor for ScriptedExecutor {
    async fn execute(
        &self,
        request: InferenceRequest,
    ) -> Result<StreamResult, InferenceExecutionError> {
        self.answer(&request).map(|(result, _)| result)
    }

    fn execute_stream(self: Arc<Self>, request: InferenceRequest) -> InferenceStream {
        let items: Vec<Result<InferenceChunk, InferenceExecutionError>> =
            match self.answer(&request) {
                Ok((result, arguments_text)) => stream_chunks(result, &arguments_text)
                    .into_iter()
                    .map(Ok)
                    .collect(),
                Err(error) => vec![Err(error)],
            };
        futures::stream::iter(items).boxed()
    }

    fn name(&self) -> &str {
        "scripted"
    }
}

/// The deltas of `result` (text cut into up to three pieces) followed by `Done`.
fn stream_chunks(result: StreamResult, arguments_text: &[Arc<str>]) -> Vec<InferenceChunk> {
    let mut chunks = Vec::with_capacity(8);
    for block in &result.content {
        match block {
            ContentBlock::Reasoning { text, .. } if !text.is_empty() => {
                chunks.push(InferenceChunk::Delta(InferenceDelta::Reasoning {
                    delta: text.clone(),
                }));
            }
            ContentBlock::Text { text } => {
                for piece in split_in_three(text) {
                    chunks.push(InferenceChunk::Delta(InferenceDelta::Text {
                        delta: piece.to_owned(),
                    }));
                }
            }
            _ => {}
        }
    }
    for (call, args) in result.tool_calls.iter().zip(arguments_text) {
        chunks.push(InferenceChunk::Delta(InferenceDelta::ToolCallStart {
            id: call.id.clone(),
            name: call.name.clone(),
        }));
        chunks.push(InferenceChunk::Delta(InferenceDelta::ToolCallDelta {
            id: call.id.clone(),
            args_delta: args.to_string(),
        }));
    }
    if let Some(usage) = result.usage {
        chunks.push(InferenceChunk::Delta(InferenceDelta::Usage { usage }));
    }
    chunks.push(InferenceChunk::Done(result));
    chunks
}

/// Splits `text` into up to three non-empty pieces at fixed char boundaries.
fn split_in_three(text: &str) -> impl Iterator<Item = &str> {
    let boundary = |at: usize| {
        let mut at = at.min(text.len());
        while !text.is_char_boundary(at) {
            at += 1;
        }
        at
    };
    let first = boundary(text.len() / 3);
    let second = boundary(text.len() * 2 / 3);
    [&text[..first], &text[first..second], &text[second..]]
        .into_iter()
        .filter(|piece| !piece.is_empty())
}

/// A step ready to answer with.
#[derive(Debug)]
struct CompiledStep {
    text: Option<Template>,
    reasoning: Option<String>,
    tool_calls: Vec<CompiledToolCall>,
    usage: Option<TokenUsage>,
    stop_reason: StopReason,
    has_incomplete_tool_calls: bool,
    error: Option<InferenceExecutionError>,
}

#[derive(Debug)]
struct CompiledToolCall {
    name: String,
    arguments: JsonValue,
    /// The arguments as JSON text, rendered once for streaming.
    arguments_text: Arc<str>,
}

impl CompiledStep {
    fn compile(index: usize, step: ScriptStep) -> Result<Self, ScriptError> {
        let tool_calls = step
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| {
                if call.name.is_empty() {
                    return Err(ScriptError::EmptyToolName {
                        step: index,
                        index: i,
                    });
                }
                Ok(CompiledToolCall {
                    arguments_text: Arc::from(call.arguments.to_string()),
                    name: call.name,
                    arguments: call.arguments,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let stop_reason = step.stop_reason.unwrap_or(if tool_calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        });
        Ok(Self {
            text: step.text.as_deref().map(Template::parse),
            reasoning: step.reasoning,
            tool_calls,
            usage: step.usage,
            stop_reason,
            has_incomplete_tool_calls: step.has_incomplete_tool_calls,
            error: step.error,
        })
    }
}

/// Text split into literal pieces and placeholders, once.
#[derive(Debug)]
struct Template {
    segments: Vec<Segment>,
}

#[derive(Debug)]
enum Segment {
    Literal(String),
    LastUserText,
    LastToolResult,
}

impl Template {
    fn parse(text: &str) -> Self {
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let (before, from_brace) = rest.split_at(open);
            literal.push_str(before);
            let placeholder = from_brace.find('}').and_then(|close| {
                let segment = match &from_brace[1..close] {
                    "last_user_text" => Segment::LastUserText,
                    "last_tool_result" => Segment::LastToolResult,
                    _ => return None,
                };
                Some((segment, close))
            });
            match placeholder {
                Some((segment, close)) => {
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    segments.push(segment);
                    rest = &from_brace[close + 1..];
                }
                None => {
                    literal.push('{');
                    rest = &from_brace[1..];
                }
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Self { segments }
    }

    fn render(&self, messages: &[Message]) -> String {
        if let [Segment::Literal(text)] = self.segments.as_slice() {
            return text.clone();
        }
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => out.push_str(text),
                Segment::LastUserText => {
                    if let Some(message) = messages.iter().rev().find(|m| starts_turn(m)) {
                        push_text(&mut out, message);
                    }
                }
                Segment::LastToolResult => {
                    if let Some(message) = messages.iter().rev().find(|m| m.role == Role::Tool) {
                        push_text(&mut out, message);
                    }
                }
            }
        }
        out
    }
}

/// Whether `message` starts a user turn: a user message visible to users.
fn starts_turn(message: &Message) -> bool {
    message.role == Role::User && !message.is_internal()
}

fn push_text(out: &mut String, message: &Message) {
    for block in &message.content {
        if let Some(text) = block.as_text() {
            out.push_str(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm::collect_stream;

    fn spec_from_json(value: JsonValue) -> ScriptSpec {
        serde_json::from_value(value).unwrap()
    }

    fn delete_then_report() -> ScriptedExecutor {
        ScriptedExecutor::new(spec_from_json(json!({
            "steps": [
                {"tool_calls": [{"name": "delete_file", "arguments": {"path": "a.txt"}}]},
                {"text": "Done: {last_tool_result}"}
            ]
        })))
        .unwrap()
    }

    fn request(messages: Vec<Message>) -> InferenceRequest {
        InferenceRequest::new("scripted-model", messages)
    }

    /// Appends the executor's answer to `messages`, as the run loop would.
    fn append_answer(messages: &mut Vec<Message>, result: &StreamResult) {
        messages.push(Message::assistant_with_tool_calls(
            result.text(),
            result.tool_calls.clone(),
        ));
    }

    #[tokio::test]
    async fn walks_the_steps_through_a_tool_round_trip() {
        let exec = delete_then_report();
        let mut messages = vec![Message::system("sys"), Message::user("clean up")];

        let first = exec.execute(request(messages.clone())).await.unwrap();
        assert_eq!(first.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(first.tool_calls.len(), 1);
        let call = &first.tool_calls[0];
        assert_eq!(call.id.as_str(), "call_2_0");
        assert_eq!(call.name, "delete_file");
        assert_eq!(call.arguments, json!({"path": "a.txt"}));
        append_answer(&mut messages, &first);
        messages.push(Message::tool_result(call.id.clone(), "deleted a.txt"));

        let second = exec.execute(request(messages.clone())).await.unwrap();
        assert_eq!(second.text(), "Done: deleted a.txt");
        assert_eq!(second.stop_reason, Some(StopReason::EndTurn));
        assert!(second.tool_calls.is_empty());

        // Past the end: the last step repeats.
        append_answer(&mut messages, &second);
        let third = exec.execute(request(messages.clone())).await.unwrap();
        assert_eq!(third, second);

        // A new user turn starts over, with fresh call ids.
        messages.push(Message::user("again"));
        let again = exec.execute(request(messages.clone())).await.unwrap();
        assert_eq!(again.tool_calls[0].id.as_str(), "call_6_0");
    }

    #[tokio::test]
    async fn is_a_pure_function_of_the_request() {
        let exec = delete_then_report();
        let messages = vec![Message::user("go")];
        let a = exec.execute(request(messages.clone())).await.unwrap();
        let b = exec.execute(request(messages)).await.unwrap();
        assert_eq!(a, b);
    }

    #[tokio::test]
    async fn internal_user_messages_do_not_restart_the_script() {
        let exec = delete_then_report();
        let mut messages = vec![Message::user("go")];
        let first = exec.execute(request(messages.clone())).await.unwrap();
        append_answer(&mut messages, &first);
        messages.push(Message::tool_result(first.tool_calls[0].id.clone(), "ok"));
        messages
            .push(Message::user("reminder").with_visibility(crate::contract::Visibility::Internal));
        let second = exec.execute(request(messages)).await.unwrap();
        assert_eq!(second.text(), "Done: ok");
    }

    #[tokio::test]
    async fn after_last_text_and_user_placeholder() {
        let spec = spec_from_json(json!({
            "steps": [{"text": "You said {last_user_text} {unknown} {"}],
            "after_last": {"text": "That is all."}
        }));
        let exec = ScriptedExecutor::new(spec).unwrap();
        let mut messages = vec![Message::user("hello")];
        let first = exec.execute(request(messages.clone())).await.unwrap();
        assert_eq!(first.text(), "You said hello {unknown} {");
        append_answer(&mut messages, &first);
        let second = exec.execute(request(messages.clone())).await.unwrap();
        assert_eq!(second.text(), "That is all.");
        append_answer(&mut messages, &second);
        let third = exec.execute(request(messages)).await.unwrap();
        assert_eq!(third.text(), "That is all.");
    }

    #[tokio::test]
    async fn scripted_errors_usage_and_truncation() {
        let spec = spec_from_json(json!({
            "steps": [
                {"error": {"kind": "rate_limited", "message": "slow down", "retry_after_ms": 10}},
            ]
        }));
        let exec = ScriptedExecutor::new(spec).unwrap();
        assert_eq!(
            exec.execute(request(vec![Message::user("x")])).await,
            Err(InferenceExecutionError::RateLimited {
                message: "slow down".into(),
                retry_after_ms: Some(10),
            })
        );

        let spec = spec_from_json(json!({
            "steps": [{
                "tool_calls": [{"name": "write_file"}],
                "stop_reason": "max_tokens",
                "has_incomplete_tool_calls": true,
                "usage": {"prompt_tokens": 3, "completion_tokens": 4}
            }]
        }));
        let exec = ScriptedExecutor::new(spec).unwrap();
        let result = exec
            .execute(request(vec![Message::user("x")]))
            .await
            .unwrap();
        assert_eq!(result.stop_reason, Some(StopReason::MaxTokens));
        assert!(result.has_incomplete_tool_calls);
        assert_eq!(result.tool_calls[0].arguments, json!({}));
        assert_eq!(result.usage.unwrap().completion_tokens, Some(4));
    }

    #[test]
    fn refuses_bad_scripts() {
        assert_eq!(
            ScriptedExecutor::new(ScriptSpec::new(vec![])).unwrap_err(),
            ScriptError::NoSteps
        );
        assert!(
            ScriptedExecutor::new(
                ScriptSpec::new(vec![]).with_after_last(AfterLast::Text("ok".into()))
            )
            .is_ok()
        );
        assert_eq!(
            ScriptedExecutor::new(ScriptSpec::new(vec![ScriptStep::tool_call("", json!({}))]))
                .unwrap_err(),
            ScriptError::EmptyToolName { step: 0, index: 0 }
        );
        let unknown = serde_json::from_value::<ScriptSpec>(json!({"steps": [{"txt": "typo"}]}));
        assert!(unknown.is_err(), "typos are refused");
    }

    #[test]
    fn spec_reads_from_yaml_and_round_trips() {
        let yaml = "steps:\n  - tool_calls:\n      - name: search\n        arguments: {q: rust}\n  - text: found it\nafter_last: repeat_last\n";
        let spec: ScriptSpec = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(
            spec,
            ScriptSpec::new(vec![
                ScriptStep::tool_call("search", json!({"q": "rust"})),
                ScriptStep::text("found it"),
            ])
        );
        let value = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            value,
            json!({
                "steps": [
                    {"tool_calls": [{"name": "search", "arguments": {"q": "rust"}}]},
                    {"text": "found it"}
                ],
                "after_last": "repeat_last"
            })
        );
        assert_eq!(serde_json::from_value::<ScriptSpec>(value).unwrap(), spec);
    }

    #[tokio::test]
    async fn streams_text_in_pieces_then_done() {
        let spec = ScriptSpec::new(vec![
            ScriptStep {
                reasoning: Some("thinking".into()),
                ..ScriptStep::text("héllo wörld!")
            }
            .with_tool_call("t", json!({"a": 1}))
            .with_usage(TokenUsage::new(1, 2)),
        ]);
        let exec = Arc::new(ScriptedExecutor::new(spec).unwrap());
        let req = request(vec![Message::user("x")]);
        let items: Vec<_> = Arc::clone(&exec)
            .execute_stream(req.clone())
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let texts: Vec<&str> = items
            .iter()
            .filter_map(|item| match item {
                InferenceChunk::Delta(InferenceDelta::Text { delta }) => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts.len(), 3);
        assert_eq!(texts.concat(), "héllo wörld!");
        assert!(matches!(
            &items[0],
            InferenceChunk::Delta(InferenceDelta::Reasoning { delta }) if delta == "thinking"
        ));
        assert!(items.iter().any(|item| matches!(
            item,
            InferenceChunk::Delta(InferenceDelta::ToolCallDelta { args_delta, .. }) if args_delta == r#"{"a":1}"#
        )));
        assert!(matches!(
            items[items.len() - 2],
            InferenceChunk::Delta(InferenceDelta::Usage { .. })
        ));
        let streamed = collect_stream(Arc::clone(&exec).execute_stream(req.clone()))
            .await
            .unwrap();
        assert_eq!(streamed, exec.execute(req).await.unwrap());
    }

    #[test]
    fn split_in_three_handles_short_and_multibyte_text() {
        fn pieces(s: &str) -> Vec<&str> {
            split_in_three(s).collect()
        }
        assert_eq!(pieces(""), Vec::<&str>::new());
        assert_eq!(pieces("a"), vec!["a"]);
        assert_eq!(pieces("ab"), vec!["a", "b"]);
        assert_eq!(pieces("abcdef"), vec!["ab", "cd", "ef"]);
        assert_eq!(pieces("ééé").concat(), "ééé");
    }

    #[tokio::test]
    async fn always_answers_the_same_text() {
        let exec = ScriptedExecutor::always("hi {last_user_text}");
        let result = exec
            .execute(request(vec![Message::user("bob")]))
            .await
            .unwrap();
        assert_eq!(result.text(), "hi bob");
        assert_eq!(exec.name(), "scripted");
    }
}
