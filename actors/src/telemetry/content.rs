//! Prompt and completion content on `chat` spans — only when an operator turns it
//! on (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` or
//! `telemetry.capture_content`): conversations hold whatever users and tools put
//! in them. Recorded as the GenAI conventions' opt-in attributes
//! `gen_ai.system_instructions`, `gen_ai.input.messages` and
//! `gen_ai.output.messages` (JSON text: role, parts, finish reason). Images are
//! named by their media type, never copied.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::Span;
use crate::contract::{ContentBlock, Message, Role};
use crate::llm::{StopReason, StreamResult};

/// Whether content is recorded: process-wide, like the subscriber it feeds.
static CAPTURE: AtomicBool = AtomicBool::new(false);

/// Turns content capture on or off for every `chat` span from now on.
pub fn capture_content(on: bool) {
    CAPTURE.store(on, Ordering::Relaxed);
}

/// Whether `span` should carry content: capture is on and the span is recorded.
fn capturing(span: &Span) -> bool {
    CAPTURE.load(Ordering::Relaxed) && span.is_recording()
}

/// Records the system instructions and the conversation sent to the model.
pub(crate) fn record_input(span: &Span, messages: &[Message]) {
    if !capturing(span) {
        return;
    }
    let (system, conversation): (Vec<&Message>, Vec<&Message>) = messages
        .iter()
        .partition(|message| message.role == Role::System);
    let instructions: Vec<Value> = system
        .iter()
        .flat_map(|message| message.content.iter().map(part))
        .collect();
    if !instructions.is_empty() {
        span.set(
            "gen_ai.system_instructions",
            Value::Array(instructions).to_string(),
        );
    }
    let input: Vec<Value> = conversation.into_iter().map(input_message).collect();
    span.set("gen_ai.input.messages", Value::Array(input).to_string());
}

/// Records what the model answered.
pub(crate) fn record_output(span: &Span, result: &StreamResult) {
    if !capturing(span) {
        return;
    }
    let mut parts: Vec<Value> = result.content.iter().map(part).collect();
    parts.extend(result.tool_calls.iter().map(|call| {
        json!({"type": "tool_call", "id": call.id.to_string(), "name": call.name,
               "arguments": call.arguments})
    }));
    let finish = result.stop_reason.as_ref().map_or("stop", finish_reason);
    let output = json!([{"role": "assistant", "parts": parts, "finish_reason": finish}]);
    span.set("gen_ai.output.messages", output.to_string());
}

fn input_message(message: &Message) -> Value {
    let role = match message.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let parts: Vec<Value> = if message.role == Role::Tool {
        let response: Vec<Value> = message.content.iter().map(part).collect();
        vec![json!({"type": "tool_call_response",
                    "id": message.tool_call_id.as_ref().map(ToString::to_string),
                    "response": response})]
    } else {
        message
            .content
            .iter()
            .map(part)
            .chain(message.tool_calls.iter().map(|call| {
                json!({"type": "tool_call", "id": call.id.to_string(), "name": call.name,
                       "arguments": call.arguments})
            }))
            .collect()
    };
    json!({"role": role, "parts": parts})
}

fn part(block: &ContentBlock) -> Value {
    match block {
        ContentBlock::Text { text } => json!({"type": "text", "content": text}),
        ContentBlock::Reasoning { text, .. } => json!({"type": "reasoning", "content": text}),
        ContentBlock::Image { media_type, .. } => {
            json!({"type": "image", "media_type": media_type})
        }
    }
}

/// The conventions' finish reasons (`stop`, `length`, `content_filter`,
/// `tool_call`).
fn finish_reason(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn | StopReason::StopSequence => "stop",
        StopReason::ToolUse => "tool_call",
        StopReason::MaxTokens => "length",
        StopReason::ContentFilter => "content_filter",
    }
}
