//! What the engine tells an operator: the metrics of [`RunMetrics`], and the
//! spans of a run after the OpenTelemetry GenAI semantic conventions (v1.41):
//! `invoke_agent {agent}` per activation of a run, `chat {model}` per inference,
//! `execute_tool {tool}` per tool call attempt.
//!
//! They are OTLP spans written straight to protobuf ([`Span`], decision 0070);
//! with export off every span is disabled and costs nothing but the check that
//! there is no tracer.
//!
//! A run's spans hang off the run's [`TraceContext`](crate::contract::TraceContext) (decision 0060), which is in
//! its record: an activation on another node, after a failover or a decision
//! that came a day later, joins the same trace. Prompt and completion content are
//! recorded only when an operator turns capture on (`content`).

mod content;
mod mailbox;
pub(crate) mod messaging;
mod metrics;
mod span;
mod store;

pub use content::capture_content;
pub(crate) use content::record_input;
pub(crate) use metrics::{AgentMeters, TOOL_OK};
pub use metrics::{DecisionOutcome, DecisionSource, RunMetrics};
pub(crate) use store::{StoreMetrics, StoreOperation};

pub use span::{
    AttributeValue, Attributes, InSpan, Parent, RootSampling, Sampling, Shown, Span, SpanKind,
    SpanSink, Strings, Traced, Tracer, install_tracer, new_trace, wire,
};

use crate::contract::{RunIdentity, TerminationReason, ToolCallResume};
use crate::error::{InferenceExecutionError, ToolError};
use crate::ids::ToolCallId;
use crate::llm::{StopReason, StreamResult};

/// The span of one activation of a run: from its start (or its taking up after a
/// decision, a restart or a move) until it finishes or waits.
pub(crate) fn invoke_agent(agent_id: &str, identity: &RunIdentity) -> Span {
    // A run in a trace its caller (or the edge's sampler) did not sample builds
    // no spans: its inferences and tool calls hang off a disabled span.
    if identity.trace.is_some_and(|trace| !trace.sampled()) {
        return Span::none();
    }
    Span::start(
        &["invoke_agent ", agent_id],
        SpanKind::Internal,
        identity.trace.as_ref().into(),
        |attributes| {
            attributes
                .set("gen_ai.operation.name", "invoke_agent")
                .set("gen_ai.agent.id", agent_id)
                .set("gen_ai.agent.name", agent_id)
                .set("gen_ai.conversation.id", identity.thread_id.as_str())
                .set("awaken.run.id", identity.run_id.as_str());
            if let Some(parent) = &identity.parent_run_id {
                attributes.set("awaken.run.parent_id", parent.as_str());
            }
        },
    )
}

/// Ends an activation's span with how the run left it.
pub(crate) fn activation_ended(span: &Span, reason: Option<&TerminationReason>) {
    if !span.is_recording() {
        return;
    }
    match reason {
        Some(TerminationReason::Error(message)) => {
            span.set("awaken.run.outcome", "error");
            span.failed("run_failed");
            span.event("exception", |attributes| {
                attributes.set("exception.message", message);
            });
        }
        Some(reason) => span.set("awaken.run.outcome", reason.code()),
        None => span.set("awaken.run.outcome", "waiting"),
    }
}

/// Marks the arrival of a decision on the activation it resumes, linked to the
/// span that sent it (an HTTP request, a message taken off the decision bus).
pub(crate) fn decision_arrived(span: &Span, call_id: &ToolCallId, resume: &ToolCallResume) {
    if !span.is_recording() {
        return;
    }
    span.event("awaken.decision", |attributes| {
        attributes
            .set("gen_ai.tool.call.id", call_id.as_str())
            .set("awaken.decision.id", resume.decision_id.as_str());
    });
    if let Some(sender) = &resume.trace {
        span.link(sender);
    }
}

/// The span of one inference, a child of the activation's span.
pub(crate) fn chat(parent: &Span, provider: &str, model: &str) -> Span {
    Span::start(
        &["chat ", model],
        SpanKind::Client,
        Parent::Local(parent),
        |attributes| {
            attributes
                .set("gen_ai.operation.name", "chat")
                .set("gen_ai.provider.name", provider)
                .set("gen_ai.request.model", model);
        },
    )
}

/// Records what the model answered (or why it did not) on its `chat` span.
pub(crate) fn chat_ended(
    span: &Span,
    answering_model: Option<&str>,
    result: &Result<StreamResult, InferenceExecutionError>,
) {
    if !span.is_recording() {
        return;
    }
    match result {
        Ok(result) => {
            content::record_output(span, result);
            if let Some(model) = answering_model {
                span.set("gen_ai.response.model", model);
            }
            if let Some(usage) = &result.usage {
                if let Some(tokens) = usage.prompt_tokens {
                    span.set("gen_ai.usage.input_tokens", saturating_i64(tokens));
                }
                if let Some(tokens) = usage.completion_tokens {
                    span.set("gen_ai.usage.output_tokens", saturating_i64(tokens));
                }
            }
            if let Some(reason) = &result.stop_reason {
                span.set(
                    "gen_ai.response.finish_reasons",
                    Strings(&[finish_reason(reason)]),
                );
            }
        }
        Err(error) => span.failed(inference_error_type(error)),
    }
}

/// The span of one attempt of a tool call, a child of the activation's span.
pub(crate) fn execute_tool(parent: &Span, tool: &str, call_id: &ToolCallId) -> Span {
    Span::start(
        &["execute_tool ", tool],
        SpanKind::Internal,
        Parent::Local(parent),
        |attributes| {
            attributes
                .set("gen_ai.operation.name", "execute_tool")
                .set("gen_ai.tool.name", tool)
                .set("gen_ai.tool.type", "function")
                .set("gen_ai.tool.call.id", call_id.as_str());
        },
    )
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

/// A count as an attribute value (OpenTelemetry integers are signed).
fn saturating_i64(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}
