//! Estimates of the heap bytes a value holds, for caches that keep within a
//! byte budget.
//!
//! Estimates, not measurements: strings count their length, containers their
//! elements plus a fixed overhead per element for the allocation and the
//! container's own slots. Allocator slack is the budget's unshared fifth.

use crate::JsonValue;
use crate::contract::{AgentEvent, ContentBlock, Message, StreamEvent, ToolCall, ToolResult};

/// What one heap allocation costs beyond its bytes (header, rounding).
const ALLOCATION: usize = 16;
/// What an `Arc<str>` id costs beyond its text (counts and allocation).
const ID: usize = 32;

/// A value whose heap use can be estimated.
pub trait Footprint {
    /// Approximately how many bytes the value holds on the heap (not counting
    /// its own inline size).
    fn heap_bytes(&self) -> usize;
}

impl Footprint for String {
    fn heap_bytes(&self) -> usize {
        if self.capacity() == 0 {
            0
        } else {
            self.capacity() + ALLOCATION
        }
    }
}

impl<T: Footprint> Footprint for Option<T> {
    fn heap_bytes(&self) -> usize {
        self.as_ref().map_or(0, Footprint::heap_bytes)
    }
}

impl Footprint for JsonValue {
    fn heap_bytes(&self) -> usize {
        let slot = std::mem::size_of::<JsonValue>();
        match self {
            JsonValue::Null | JsonValue::Bool(_) | JsonValue::Number(_) => 0,
            JsonValue::String(text) => text.heap_bytes(),
            JsonValue::Array(items) => {
                ALLOCATION
                    + items
                        .iter()
                        .map(|item| slot + item.heap_bytes())
                        .sum::<usize>()
            }
            // A map entry: its key string, its value slot, its node's links.
            JsonValue::Object(fields) => fields
                .iter()
                .map(|(key, value)| {
                    key.heap_bytes() + slot + value.heap_bytes() + 3 * std::mem::size_of::<usize>()
                })
                .sum(),
        }
    }
}

impl Footprint for ContentBlock {
    fn heap_bytes(&self) -> usize {
        match self {
            ContentBlock::Text { text } => text.heap_bytes(),
            ContentBlock::Image {
                url,
                data,
                media_type,
            } => url.heap_bytes() + data.heap_bytes() + media_type.heap_bytes(),
            ContentBlock::Reasoning { text, signature } => {
                text.heap_bytes() + signature.heap_bytes()
            }
        }
    }
}

impl Footprint for ToolCall {
    fn heap_bytes(&self) -> usize {
        ID + self.id.as_str().len() + self.name.heap_bytes() + self.arguments.heap_bytes()
    }
}

impl Footprint for Message {
    fn heap_bytes(&self) -> usize {
        let ids = ID
            + self.id.as_str().len()
            + self
                .tool_call_id
                .as_ref()
                .map_or(0, |id| ID + id.as_str().len())
            + self.run_id.as_ref().map_or(0, |id| ID + id.as_str().len());
        slice_bytes(&self.content) + slice_bytes(&self.tool_calls) + ids
    }
}

impl Footprint for ToolResult {
    fn heap_bytes(&self) -> usize {
        self.tool_name.heap_bytes()
            + self.data.heap_bytes()
            + self.message.heap_bytes()
            + self.error_code.heap_bytes()
            + self
                .suspension
                .as_ref()
                .map_or(0, |ticket| ALLOCATION + std::mem::size_of_val(&**ticket))
    }
}

impl Footprint for AgentEvent {
    fn heap_bytes(&self) -> usize {
        match self {
            AgentEvent::RunStart { .. } | AgentEvent::StepStart { .. } | AgentEvent::StepEnd => 0,
            AgentEvent::ToolCallStart { name, .. } => name.heap_bytes(),
            AgentEvent::RunFinish { result, .. } => result.heap_bytes(),
            AgentEvent::TextDelta { delta }
            | AgentEvent::ReasoningDelta { delta }
            | AgentEvent::ToolCallDelta {
                args_delta: delta, ..
            }
            | AgentEvent::ToolCallStreamDelta { delta, .. } => delta.heap_bytes(),
            AgentEvent::ReasoningEncryptedValue { encrypted_value } => encrypted_value.heap_bytes(),
            AgentEvent::ToolCallReady { arguments, .. } => arguments.heap_bytes(),
            AgentEvent::ToolCallDone { result, .. } => result.heap_bytes(),
            AgentEvent::ToolCallResumed { result, .. } => result.heap_bytes(),
            AgentEvent::MessagesSnapshot { messages: values }
            | AgentEvent::ActivityDelta { patch: values, .. }
            | AgentEvent::StateDelta { delta: values } => slice_bytes(values),
            AgentEvent::ActivitySnapshot { content, .. } => content.heap_bytes(),
            AgentEvent::InferenceComplete { model, .. } => model.heap_bytes(),
            AgentEvent::StateSnapshot { snapshot } => snapshot.heap_bytes(),
            AgentEvent::Error { message, code } => message.heap_bytes() + code.heap_bytes(),
        }
    }
}

impl Footprint for StreamEvent {
    /// The event behind its `Arc`: the allocation holding it, and what it holds
    /// (its timestamp is shared by the events of one millisecond).
    fn heap_bytes(&self) -> usize {
        ALLOCATION + std::mem::size_of::<StreamEvent>() + self.event.heap_bytes()
    }
}

/// The heap bytes of a vector's buffer holding `items`: their slots and what
/// each holds; nothing for an empty one (it allocates nothing).
fn slice_bytes<T: Footprint>(items: &[T]) -> usize {
    if items.is_empty() {
        return 0;
    }
    ALLOCATION
        + items
            .iter()
            .map(|item| std::mem::size_of::<T>() + item.heap_bytes())
            .sum::<usize>()
}

/// The heap bytes of a message log, its slots included.
pub fn message_bytes(messages: &[Message]) -> usize {
    slice_bytes(messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_longer_message_weighs_more_by_its_text() {
        let short = Message::user("hi");
        let long = Message::user("x".repeat(10_000));
        let difference = long.heap_bytes() - short.heap_bytes();
        assert!((9_990..10_100).contains(&difference), "{difference}");
    }

    #[test]
    fn json_counts_keys_and_nested_values() {
        let flat = serde_json::json!({"a": 1});
        let nested = serde_json::json!({"a": {"b": "y".repeat(500)}});
        assert!(nested.heap_bytes() > flat.heap_bytes() + 500);
        assert_eq!(JsonValue::Null.heap_bytes(), 0);
    }

    #[test]
    fn a_log_counts_every_message() {
        let one = vec![Message::user("hello")];
        let two = vec![Message::user("hello"), Message::assistant("hi there")];
        assert!(message_bytes(&two) > message_bytes(&one) + std::mem::size_of::<Message>());
    }
}
