//! Inputs that start or resume a run.

use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::contract::suspension::ResumeDecisionAction;
use crate::ids::ToolCallId;

/// Something handed to a run: a new user message or a decision for a waiting call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunInput {
    /// A new user message to process.
    UserMessage {
        /// The message text.
        text: String,
    },
    /// A decision that resumes (or cancels) a suspended tool call.
    ResumeDecision {
        /// The suspended call.
        tool_call_id: ToolCallId,
        /// Resume or cancel.
        action: ResumeDecisionAction,
        /// The decision payload; omitted when `null`.
        #[serde(default, skip_serializing_if = "JsonValue::is_null")]
        payload: JsonValue,
    },
}

impl RunInput {
    /// A user message input.
    pub fn user_message(text: impl Into<String>) -> Self {
        Self::UserMessage { text: text.into() }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn user_message_shape() {
        let input = RunInput::user_message("hi");
        let value = serde_json::to_value(&input).unwrap();
        assert_eq!(value, json!({"type": "user_message", "text": "hi"}));
        assert_eq!(serde_json::from_value::<RunInput>(value).unwrap(), input);
    }

    #[test]
    fn resume_decision_omits_null_payload() {
        let input = RunInput::ResumeDecision {
            tool_call_id: ToolCallId::new("c1").unwrap(),
            action: ResumeDecisionAction::Cancel,
            payload: JsonValue::Null,
        };
        let value = serde_json::to_value(&input).unwrap();
        assert_eq!(
            value,
            json!({"type": "resume_decision", "tool_call_id": "c1", "action": "cancel"})
        );
        assert_eq!(serde_json::from_value::<RunInput>(value).unwrap(), input);

        let with_payload = RunInput::ResumeDecision {
            tool_call_id: ToolCallId::new("c1").unwrap(),
            action: ResumeDecisionAction::Resume,
            payload: json!({"approved": true}),
        };
        let value = serde_json::to_value(&with_payload).unwrap();
        assert_eq!(value["payload"], json!({"approved": true}));
        assert_eq!(
            serde_json::from_value::<RunInput>(value).unwrap(),
            with_payload
        );
    }
}
