//! Truncation recovery: what to do when the model ran out of output tokens mid tool call.
//!
//! A model that hits its output limit while writing a tool call's arguments leaves
//! JSON that cannot be parsed: the call cannot run, and asking again with the same
//! history usually ends the same way. Executors flag this as
//! `stop_reason == MaxTokens` with `has_incomplete_tool_calls`; an incomplete call's
//! `arguments` holds the raw, cut-off argument text as a JSON string.
//!
//! The run loop then drops the truncated turn, appends the [`continuation_message`]
//! (an internal user message asking the model to split the work into smaller pieces
//! and carry on) and infers again — at most `max_continuation_retries` times per run,
//! counted in the run-scoped [`TruncationState`] key. [`plan_recovery`] bundles the
//! decision; the other functions are its parts. Everything here is pure.

use serde::{Deserialize, Serialize};

use super::{StopReason, StreamResult};
use crate::contract::{Message, ToolCall, Visibility};
use crate::state::StateKey;

/// Continuations allowed per run unless configured otherwise.
pub const DEFAULT_MAX_CONTINUATION_RETRIES: u32 = 3;

/// State key: how many truncation continuations this run has used.
#[derive(Debug)]
pub struct TruncationState;

/// The value of [`TruncationState`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruncationCounter {
    /// Continuation prompts injected so far in this run.
    pub continuation_retries: u32,
}

/// Changes to [`TruncationState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruncationUpdate {
    /// One more continuation was injected.
    Continued,
    /// Start counting again.
    Reset,
}

impl StateKey for TruncationState {
    const KEY: &'static str = "__runtime.truncation";
    type Value = TruncationCounter;
    type Update = TruncationUpdate;

    fn apply(value: &mut TruncationCounter, update: TruncationUpdate) {
        match update {
            TruncationUpdate::Continued => {
                value.continuation_retries = value.continuation_retries.saturating_add(1);
            }
            TruncationUpdate::Reset => *value = TruncationCounter::default(),
        }
    }
}

/// What the run loop should do with an inference result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TruncationRecovery {
    /// The result is not a truncated tool call; carry on as usual.
    NotTruncated,
    /// Drop the truncated turn, append this message, apply
    /// [`TruncationUpdate::Continued`] and infer again.
    Continue(Message),
    /// Truncated, but the run has used all its continuations.
    Exhausted,
}

/// Whether the model stopped at its token limit in the middle of a tool call.
pub fn is_truncated_tool_call(result: &StreamResult) -> bool {
    result.stop_reason == Some(StopReason::MaxTokens) && result.has_incomplete_tool_calls
}

/// Whether another continuation is allowed.
pub fn should_retry(state: &TruncationCounter, max_continuation_retries: u32) -> bool {
    state.continuation_retries < max_continuation_retries
}

/// The tool calls whose arguments were cut off (their arguments are the raw text).
pub fn incomplete_tool_calls(result: &StreamResult) -> impl Iterator<Item = &ToolCall> {
    let flagged = result.has_incomplete_tool_calls;
    result
        .tool_calls
        .iter()
        .filter(move |call| flagged && call.arguments.is_string())
}

/// The internal user message asking the model to split its work and continue.
pub fn continuation_message(result: &StreamResult) -> Message {
    let mut names: Vec<&str> = incomplete_tool_calls(result)
        .map(|call| call.name.as_str())
        .collect();
    names.dedup();
    let which = if names.is_empty() {
        String::from("a tool call")
    } else {
        let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
        format!("a call to {}", quoted.join(", "))
    };
    let text = format!(
        "Your previous response hit the output token limit while writing the arguments of \
         {which}, so the call was cut off and discarded; nothing was executed. Break the \
         work into smaller pieces: make several smaller tool calls (for example, write a \
         large file in parts) and keep each call's arguments short. Continue from where \
         you left off."
    );
    Message::user(text).with_visibility(Visibility::Internal)
}

/// Decides how to recover from `result` given the run's counter.
pub fn plan_recovery(
    result: &StreamResult,
    state: &TruncationCounter,
    max_continuation_retries: u32,
) -> TruncationRecovery {
    if !is_truncated_tool_call(result) {
        TruncationRecovery::NotTruncated
    } else if should_retry(state, max_continuation_retries) {
        TruncationRecovery::Continue(continuation_message(result))
    } else {
        TruncationRecovery::Exhausted
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::contract::Role;
    use crate::ids::ToolCallId;
    use crate::state::KeyScope;

    fn truncated() -> StreamResult {
        StreamResult {
            tool_calls: vec![
                ToolCall::new(
                    ToolCallId::new("c1").unwrap(),
                    "read_file",
                    json!({"path": "a"}),
                ),
                ToolCall::new(
                    ToolCallId::new("c2").unwrap(),
                    "write_file",
                    json!("{\"path\": \"b\", \"content\": \"lo"),
                ),
            ],
            stop_reason: Some(StopReason::MaxTokens),
            has_incomplete_tool_calls: true,
            ..StreamResult::default()
        }
    }

    #[test]
    fn detects_only_max_tokens_with_incomplete_calls() {
        assert!(is_truncated_tool_call(&truncated()));
        let mut complete = truncated();
        complete.has_incomplete_tool_calls = false;
        assert!(!is_truncated_tool_call(&complete));
        assert_eq!(incomplete_tool_calls(&complete).count(), 0);
        let mut ended = truncated();
        ended.stop_reason = Some(StopReason::ToolUse);
        assert!(!is_truncated_tool_call(&ended));
        assert!(!is_truncated_tool_call(&StreamResult::default()));
    }

    #[test]
    fn continuation_message_is_internal_and_names_the_cut_tool() {
        let message = continuation_message(&truncated());
        assert_eq!(message.role, Role::User);
        assert_eq!(message.visibility, Visibility::Internal);
        let text = message.text();
        assert!(text.contains("`write_file`"), "{text}");
        assert!(!text.contains("read_file"), "{text}");
        assert!(text.contains("smaller pieces"), "{text}");

        let mut anonymous = truncated();
        anonymous.tool_calls.clear();
        assert!(
            continuation_message(&anonymous)
                .text()
                .contains("a tool call")
        );
    }

    #[test]
    fn counter_bounds_the_retries() {
        let mut counter = TruncationCounter::default();
        assert!(should_retry(&counter, 2));
        TruncationState::apply(&mut counter, TruncationUpdate::Continued);
        assert!(should_retry(&counter, 2));
        TruncationState::apply(&mut counter, TruncationUpdate::Continued);
        assert!(!should_retry(&counter, 2));
        assert!(!should_retry(&TruncationCounter::default(), 0));
        TruncationState::apply(&mut counter, TruncationUpdate::Reset);
        assert_eq!(counter, TruncationCounter::default());
        assert_eq!(TruncationState::SCOPE, KeyScope::Run);
    }

    #[test]
    fn plan_recovery_walks_the_three_outcomes() {
        let result = truncated();
        let fresh = TruncationCounter::default();
        assert!(matches!(
            plan_recovery(&result, &fresh, DEFAULT_MAX_CONTINUATION_RETRIES),
            TruncationRecovery::Continue(message) if message.is_internal()
        ));
        let used = TruncationCounter {
            continuation_retries: DEFAULT_MAX_CONTINUATION_RETRIES,
        };
        assert_eq!(
            plan_recovery(&result, &used, DEFAULT_MAX_CONTINUATION_RETRIES),
            TruncationRecovery::Exhausted
        );
        assert_eq!(
            plan_recovery(&StreamResult::default(), &fresh, 3),
            TruncationRecovery::NotTruncated
        );
    }

    #[test]
    fn counter_round_trips_through_the_key_codec() {
        let counter = TruncationCounter {
            continuation_retries: 2,
        };
        let encoded = TruncationState::encode(&counter).unwrap();
        assert_eq!(encoded, json!({"continuation_retries": 2}));
        assert_eq!(TruncationState::decode(&encoded).unwrap(), counter);
    }
}
