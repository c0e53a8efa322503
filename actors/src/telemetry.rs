//! What the engine tells an operator: the metrics of [`RunMetrics`], and the
//! spans of a run after the OpenTelemetry GenAI semantic conventions (v1.41):
//! `invoke_agent {agent}` per activation of a run, `chat {model}` per inference,
//! `execute_tool {tool}` per tool call attempt.
//!
//! They are `tracing` spans under [`TARGET`], turned into OpenTelemetry spans by
//! the node's subscriber when export is on (`tracing-opentelemetry`). With export
//! off no layer is interested in [`TARGET`], so the macros below return disabled
//! spans without evaluating a field: the run loop pays a cached interest check.
//!
//! A run's spans hang off the run's [`TraceContext`] (decision 0060), which is in
//! its record: an activation on another node, after a failover or a decision
//! that came a day later, joins the same trace. Prompt and completion content are
//! recorded only when an operator turns capture on (`content`).

mod content;
mod mailbox;
pub(crate) mod messaging;
mod metrics;
mod store;

pub use content::capture_content;
pub(crate) use content::record_input;
pub(crate) use metrics::{AgentMeters, TOOL_OK};
pub use metrics::{DecisionOutcome, DecisionSource, RunMetrics};
pub(crate) use store::{StoreMetrics, StoreOperation};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::contract::{RunIdentity, TerminationReason, ToolCallResume, TraceContext};
use crate::error::{InferenceExecutionError, ToolError};
use crate::ids::ToolCallId;
use crate::llm::{StopReason, StreamResult};

/// The `tracing` target of every span meant for export.
pub const TARGET: &str = "awaken::otel";

/// The span of one activation of a run: from its start (or its taking up after a
/// decision, a restart or a move) until it finishes or waits.
pub(crate) fn invoke_agent(agent_id: &str, identity: &RunIdentity) -> Span {
    // A run in a trace its caller (or the edge's sampler) did not sample builds
    // no spans: its inferences and tool calls hang off a disabled span.
    if identity.trace.is_some_and(|trace| !trace.sampled()) {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = format!("invoke_agent {agent_id}"),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.id = agent_id,
        gen_ai.agent.name = agent_id,
        gen_ai.conversation.id = %identity.thread_id,
        awaken.run.id = %identity.run_id,
        awaken.run.parent_id = identity.parent_run_id.as_ref().map(ToString::to_string),
        awaken.run.outcome = Empty,
        error.type = Empty,
    );
    if let Some(trace) = &identity.trace {
        follow(&span, trace);
    }
    span
}

/// Ends an activation's span with how the run left it.
pub(crate) fn activation_ended(span: &Span, reason: Option<&TerminationReason>) {
    if span.is_disabled() {
        return;
    }
    match reason {
        Some(TerminationReason::Error(message)) => {
            span.record("awaken.run.outcome", "error");
            failed(span, "run_failed");
            span.add_event(
                "exception",
                vec![opentelemetry::KeyValue::new(
                    "exception.message",
                    message.clone(),
                )],
            );
        }
        Some(reason) => {
            span.record("awaken.run.outcome", reason.code());
        }
        None => {
            span.record("awaken.run.outcome", "waiting");
        }
    }
}

/// Marks the arrival of a decision on the activation it resumes, linked to the
/// span that sent it (an HTTP request, a message taken off the decision bus).
pub(crate) fn decision_arrived(span: &Span, call_id: &ToolCallId, resume: &ToolCallResume) {
    if span.is_disabled() {
        return;
    }
    span.add_event(
        "awaken.decision",
        vec![
            opentelemetry::KeyValue::new("gen_ai.tool.call.id", call_id.to_string()),
            opentelemetry::KeyValue::new("awaken.decision.id", resume.decision_id.to_string()),
        ],
    );
    if let Some(sender) = &resume.trace {
        span.add_link(span_context(sender));
    }
}

/// The span of one inference, a child of the activation's span.
pub(crate) fn chat(parent: &Span, provider: &str, model: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        parent: parent,
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        error.type = Empty,
    )
}

/// Records what the model answered (or why it did not) on its `chat` span.
pub(crate) fn chat_ended(
    span: &Span,
    answering_model: Option<&str>,
    result: &Result<StreamResult, InferenceExecutionError>,
) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(result) => {
            content::record_output(span, result);
            if let Some(model) = answering_model {
                span.record("gen_ai.response.model", model);
            }
            if let Some(usage) = &result.usage {
                if let Some(tokens) = usage.prompt_tokens {
                    span.record("gen_ai.usage.input_tokens", tokens);
                }
                if let Some(tokens) = usage.completion_tokens {
                    span.record("gen_ai.usage.output_tokens", tokens);
                }
            }
            if let Some(reason) = &result.stop_reason {
                span.set_attribute(
                    "gen_ai.response.finish_reasons",
                    opentelemetry::Value::Array(opentelemetry::Array::String(vec![
                        opentelemetry::StringValue::from(finish_reason(reason)),
                    ])),
                );
            }
        }
        Err(error) => failed(span, inference_error_type(error)),
    }
}

/// The span of one attempt of a tool call, a child of the activation's span.
pub(crate) fn execute_tool(parent: &Span, tool: &str, call_id: &ToolCallId) -> Span {
    tracing::info_span!(
        target: TARGET,
        parent: parent,
        "execute_tool",
        otel.name = format!("execute_tool {tool}"),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.type = "function",
        gen_ai.tool.call.id = %call_id,
        error.type = Empty,
    )
}

/// Marks `span` as failed with `error_type` (`error.type`, status ERROR): the
/// one way every span of the runtime says it failed. The span must declare
/// `error.type` and `otel.status_code` as empty fields.
pub fn failed(span: &Span, error_type: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("error.type", error_type);
    span.record("otel.status_code", "ERROR");
}

/// The `error.type` of a tool error.
pub(crate) fn tool_error_type(error: &ToolError) -> &'static str {
    match error {
        ToolError::InvalidArguments(_) => "invalid_arguments",
        ToolError::ExecutionFailed(_) => "execution_failed",
        ToolError::Denied(_) => "denied",
        ToolError::NotFound(_) => "not_found",
        ToolError::Internal(_) => "internal",
    }
}

/// The W3C context of `span` for what it calls, when it is exported.
pub fn context_of(span: &Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_ref = context.span();
    trace_context_of(span_ref.span_context())
}

/// The W3C context of an OpenTelemetry span context, when it is valid.
pub fn trace_context_of(span_context: &SpanContext) -> Option<TraceContext> {
    if !span_context.is_valid() {
        return None;
    }
    TraceContext::from_parts(
        span_context.trace_id().to_bytes(),
        span_context.span_id().to_bytes(),
        span_context.trace_flags().to_u8(),
    )
}

/// Links `span` to `trace`: a context related to it but not its parent (the
/// transport's request under an MCP call that carried its own context).
pub fn link(span: &Span, trace: &TraceContext) {
    if span.is_disabled() {
        return;
    }
    span.add_link(span_context(trace));
}

/// Makes `span` a child of `trace`, a context that came from elsewhere (a
/// `traceparent`, a run's record).
pub fn follow(span: &Span, trace: &TraceContext) {
    if span.is_disabled() {
        return;
    }
    // Refused only for a span already started or without the layer: it then
    // stays in the trace it has.
    let _ = span
        .set_parent(opentelemetry::Context::new().with_remote_span_context(span_context(trace)));
}

fn span_context(trace: &TraceContext) -> SpanContext {
    let (trace_id, span_id, flags) = trace.to_parts();
    SpanContext::new(
        TraceId::from_bytes(trace_id),
        SpanId::from_bytes(span_id),
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    )
}

fn finish_reason(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn => "stop",
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
        StopReason::StopSequence => "stop",
        StopReason::ContentFilter => "content_filter",
    }
}

/// The `error.type` of a failed model call.
pub(crate) fn inference_error_type(error: &InferenceExecutionError) -> &'static str {
    match error {
        InferenceExecutionError::Provider { .. } => "provider_error",
        InferenceExecutionError::RateLimited { .. } => "rate_limited",
        InferenceExecutionError::Timeout { .. } => "timeout",
        InferenceExecutionError::Cancelled => "cancelled",
        InferenceExecutionError::CircuitOpen { .. } => "circuit_open",
    }
}
