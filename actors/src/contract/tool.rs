//! Tool data: what a tool is ([`ToolDescriptor`]) and what it returned ([`ToolResult`]).
//!
//! The `Tool` trait itself lives with the execution layer; these are the pure values
//! it exchanges. A [`ToolResult`] with [`ToolStatus::Error`] is a *recoverable*
//! failure sent back to the model; a `ToolError` (in [`crate::error`]) fails the call.

use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::contract::suspension::SuspendTicket;

fn default_parameters() -> JsonValue {
    serde_json::json!({"type": "object", "properties": {}})
}

/// A tool's identity and parameter schema, as registered and shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDescriptor {
    /// Registry id (unique within a runtime).
    pub id: String,
    /// The function name the model sees.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments; defaults to an object with no properties.
    #[serde(default = "default_parameters")]
    pub parameters: JsonValue,
    /// Optional grouping, e.g. `filesystem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
}

impl ToolDescriptor {
    /// A descriptor that takes an empty argument object.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            description: description.into(),
            parameters: default_parameters(),
            category: None,
        }
    }

    /// Sets the arguments' JSON Schema.
    pub fn with_parameters(mut self, schema: JsonValue) -> Self {
        self.parameters = schema;
        self
    }

    /// Sets the category.
    pub fn with_category(mut self, category: impl Into<String>) -> Self {
        self.category = Some(category.into());
        self
    }
}

/// The outcome class of a tool execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// The tool succeeded.
    Success,
    /// Suspended, waiting for an external decision.
    Pending,
    /// The tool failed; the failure is reported to the model.
    Error,
}

/// The message of the result of a call closed because its run was cancelled
/// (code `cancelled`, as a call a decision cancelled, whose message is the
/// decision's reason): how a thread's log tells the two apart.
pub const RUN_CANCELLED_MESSAGE: &str = "the run was cancelled";

/// What a tool execution produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The tool that ran.
    pub tool_name: String,
    /// Success, pending or error.
    pub status: ToolStatus,
    /// The result payload (`null` for errors and suspensions).
    #[serde(default)]
    pub data: JsonValue,
    /// A human-readable message (the error text for errors, the prompt for pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A machine-readable error code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The suspension ticket of a pending result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Box<SuspendTicket>>,
}

impl ToolResult {
    fn base(tool_name: impl Into<String>, status: ToolStatus) -> Self {
        Self {
            tool_name: tool_name.into(),
            status,
            data: JsonValue::Null,
            message: None,
            error_code: None,
            suspension: None,
        }
    }

    /// A successful result.
    pub fn success(tool_name: impl Into<String>, data: JsonValue) -> Self {
        let mut result = Self::base(tool_name, ToolStatus::Success);
        result.data = data;
        result
    }

    /// A successful result with a description.
    pub fn success_with_message(
        tool_name: impl Into<String>,
        data: JsonValue,
        message: impl Into<String>,
    ) -> Self {
        let mut result = Self::success(tool_name, data);
        result.message = Some(message.into());
        result
    }

    /// A recoverable failure, reported to the model.
    pub fn error(tool_name: impl Into<String>, message: impl Into<String>) -> Self {
        let mut result = Self::base(tool_name, ToolStatus::Error);
        result.message = Some(message.into());
        result
    }

    /// A recoverable failure with a machine-readable code.
    pub fn error_with_code(
        tool_name: impl Into<String>,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        let mut result = Self::error(tool_name, message);
        result.error_code = Some(code.into());
        result
    }

    /// A suspension without a ticket (the runtime builds one).
    pub fn suspended(tool_name: impl Into<String>, message: impl Into<String>) -> Self {
        let mut result = Self::base(tool_name, ToolStatus::Pending);
        result.message = Some(message.into());
        result
    }

    /// A suspension carrying its ticket.
    pub fn suspended_with(
        tool_name: impl Into<String>,
        message: impl Into<String>,
        ticket: SuspendTicket,
    ) -> Self {
        let mut result = Self::suspended(tool_name, message);
        result.suspension = Some(Box::new(ticket));
        result
    }

    /// Whether the tool succeeded.
    pub fn is_success(&self) -> bool {
        self.status == ToolStatus::Success
    }

    /// Whether the call is suspended.
    pub fn is_pending(&self) -> bool {
        self.status == ToolStatus::Pending
    }

    /// Whether the tool failed.
    pub fn is_error(&self) -> bool {
        self.status == ToolStatus::Error
    }

    /// The JSON sent back to the model as the tool message's content.
    ///
    /// The model only needs what helps it continue, so: a success sends `data` as is
    /// (the message is for humans and logs); an error sends `{"error": message}` plus
    /// `"code"` when there is one, so the model can tell a failure from a result that
    /// merely looks like one; a suspension sends `{"pending": message}`.
    pub fn to_json(&self) -> JsonValue {
        let message = self.message.clone().unwrap_or_default();
        match self.status {
            ToolStatus::Success => self.data.clone(),
            ToolStatus::Error => {
                let mut object = serde_json::Map::new();
                object.insert("error".into(), JsonValue::String(message));
                if let Some(code) = &self.error_code {
                    object.insert("code".into(), JsonValue::String(code.clone()));
                }
                JsonValue::Object(object)
            }
            ToolStatus::Pending => serde_json::json!({ "pending": message }),
        }
    }

    /// [`Self::to_json`] as JSON text: what a tool result message carries. A
    /// success's data is written as it is, without a copy.
    pub fn to_json_text(&self) -> String {
        match self.status {
            ToolStatus::Success => self.data.to_string(),
            ToolStatus::Error | ToolStatus::Pending => self.to_json().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::contract::suspension::{PendingToolCall, Suspension, ToolCallResumeMode};
    use crate::ids::ToolCallId;

    #[test]
    fn descriptor_defaults_and_builders() {
        let d = ToolDescriptor::new("greet", "greet", "Greet a user");
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            json!({
                "id": "greet",
                "name": "greet",
                "description": "Greet a user",
                "parameters": {"type": "object", "properties": {}}
            })
        );
        let d = d
            .with_parameters(json!({"type": "object", "required": ["name"]}))
            .with_category("social");
        let value = serde_json::to_value(&d).unwrap();
        assert_eq!(value["category"], json!("social"));
        assert_eq!(serde_json::from_value::<ToolDescriptor>(value).unwrap(), d);

        let parsed: ToolDescriptor =
            serde_json::from_value(json!({"id": "x", "name": "x", "description": ""})).unwrap();
        assert_eq!(parsed.parameters, default_parameters());
    }

    #[test]
    fn constructors_and_predicates() {
        let ok = ToolResult::success("calc", json!(42));
        assert!(ok.is_success() && !ok.is_error() && !ok.is_pending());
        let msg = ToolResult::success_with_message("calc", json!(42), "computed");
        assert_eq!(msg.message.as_deref(), Some("computed"));
        let err = ToolResult::error_with_code("calc", "div_zero", "division by zero");
        assert!(err.is_error());
        assert_eq!(err.error_code.as_deref(), Some("div_zero"));
        let pending = ToolResult::suspended("calc", "approve?");
        assert!(pending.is_pending());
        assert!(pending.suspension.is_none());
    }

    #[test]
    fn to_json_per_status() {
        assert_eq!(
            ToolResult::success("t", json!({"a": 1})).to_json(),
            json!({"a": 1})
        );
        assert_eq!(
            ToolResult::error("t", "bad input").to_json(),
            json!({"error": "bad input"})
        );
        assert_eq!(
            ToolResult::error_with_code("t", "E1", "bad input").to_json(),
            json!({"error": "bad input", "code": "E1"})
        );
        assert_eq!(
            ToolResult::suspended("t", "waiting for approval").to_json(),
            json!({"pending": "waiting for approval"})
        );
    }

    #[test]
    fn to_json_text_is_to_json_written_out() {
        for result in [
            ToolResult::success("t", json!({"a": [1, "two"], "b": null})),
            ToolResult::error_with_code("t", "E1", "bad input"),
            ToolResult::suspended("t", "waiting for approval"),
        ] {
            assert_eq!(result.to_json_text(), result.to_json().to_string());
        }
    }

    #[test]
    fn result_json_shapes() {
        assert_eq!(
            serde_json::to_value(ToolResult::success("t", json!([1, 2]))).unwrap(),
            json!({"tool_name": "t", "status": "success", "data": [1, 2]})
        );
        assert_eq!(
            serde_json::to_value(ToolResult::error_with_code("t", "E", "m")).unwrap(),
            json!({"tool_name": "t", "status": "error", "data": null, "message": "m", "error_code": "E"})
        );

        let ticket = SuspendTicket::new(
            Suspension::new("s1", "confirm", "ok?"),
            PendingToolCall {
                id: ToolCallId::new("c1").unwrap(),
                name: "t".into(),
                arguments: json!({}),
            },
            ToolCallResumeMode::UseDecisionAsToolResult,
        );
        let suspended = ToolResult::suspended_with("t", "ok?", ticket);
        let value = serde_json::to_value(&suspended).unwrap();
        assert_eq!(value["status"], json!("pending"));
        assert_eq!(value["suspension"]["suspension"]["id"], json!("s1"));
        assert_eq!(
            serde_json::from_value::<ToolResult>(value).unwrap(),
            suspended
        );
    }
}
