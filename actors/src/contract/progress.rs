//! Structured progress of a running tool call.
//!
//! A tool reports progress through its context; the runtime wraps the
//! [`ToolCallProgressState`] in an `ActivitySnapshot` event whose `activity_type` is
//! [`TOOL_CALL_PROGRESS_ACTIVITY_TYPE`], so frontends can render progress bars.

use serde::{Deserialize, Serialize};

use crate::ids::ToolCallId;

/// The `activity_type` of tool progress activity events.
pub const TOOL_CALL_PROGRESS_ACTIVITY_TYPE: &str = "tool-call-progress";

/// The `schema` value of [`ToolCallProgressState`], versioning its shape.
pub const TOOL_CALL_PROGRESS_SCHEMA: &str = "tool-call-progress.v1";

/// Where a tool call is, as reported in progress events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressStatus {
    /// Queued, not started.
    Pending,
    /// Executing.
    Running,
    /// Completed successfully.
    Done,
    /// Completed with an error.
    Failed,
    /// Cancelled before completion.
    Cancelled,
}

/// One progress snapshot of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallProgressState {
    /// Shape version, [`TOOL_CALL_PROGRESS_SCHEMA`].
    pub schema: String,
    /// Node in the progress tree; the call id.
    pub node_id: String,
    /// The call.
    pub call_id: ToolCallId,
    /// The tool's name.
    pub tool_name: String,
    /// Current status.
    pub status: ProgressStatus,
    /// Fraction done in `0.0..=1.0`; `None` if indeterminate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    /// Absolute amount done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded: Option<u64>,
    /// Absolute total amount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Human-readable status line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Parent node (for nested calls such as sub-agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_node_id: Option<String>,
    /// Parent call (for nested calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_call_id: Option<ToolCallId>,
}

impl ToolCallProgressState {
    /// A snapshot for a call, with `node_id` set to the call id.
    pub fn new(call_id: ToolCallId, tool_name: impl Into<String>, status: ProgressStatus) -> Self {
        Self {
            schema: TOOL_CALL_PROGRESS_SCHEMA.to_owned(),
            node_id: call_id.as_str().to_owned(),
            call_id,
            tool_name: tool_name.into(),
            status,
            progress: None,
            loaded: None,
            total: None,
            message: None,
            parent_node_id: None,
            parent_call_id: None,
        }
    }

    /// Sets the fraction done, clamped to `0.0..=1.0` (NaN is dropped).
    pub fn with_progress(mut self, progress: f64) -> Self {
        self.progress = (!progress.is_nan()).then(|| progress.clamp(0.0, 1.0));
        self
    }

    /// Sets the status line.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn status_names() {
        let names: Vec<_> = [
            ProgressStatus::Pending,
            ProgressStatus::Running,
            ProgressStatus::Done,
            ProgressStatus::Failed,
            ProgressStatus::Cancelled,
        ]
        .iter()
        .map(|s| serde_json::to_value(s).unwrap())
        .collect();
        assert_eq!(
            names,
            vec![
                json!("pending"),
                json!("running"),
                json!("done"),
                json!("failed"),
                json!("cancelled")
            ]
        );
    }

    #[test]
    fn minimal_state_omits_optionals() {
        let state = ToolCallProgressState::new(
            ToolCallId::new("c1").unwrap(),
            "index",
            ProgressStatus::Running,
        );
        assert_eq!(
            serde_json::to_value(&state).unwrap(),
            json!({
                "schema": "tool-call-progress.v1",
                "node_id": "c1",
                "call_id": "c1",
                "tool_name": "index",
                "status": "running"
            })
        );
    }

    #[test]
    fn full_state_round_trips() {
        let mut state = ToolCallProgressState::new(
            ToolCallId::new("c2").unwrap(),
            "index",
            ProgressStatus::Done,
        )
        .with_progress(1.5)
        .with_message("Indexed batch 10/10");
        state.loaded = Some(10);
        state.total = Some(10);
        state.parent_node_id = Some("c1".into());
        state.parent_call_id = Some(ToolCallId::new("c1").unwrap());
        assert_eq!(state.progress, Some(1.0), "clamped");
        let value = serde_json::to_value(&state).unwrap();
        assert_eq!(value["progress"], json!(1.0));
        assert_eq!(value["parent_call_id"], json!("c1"));
        assert_eq!(
            serde_json::from_value::<ToolCallProgressState>(value).unwrap(),
            state
        );
        assert_eq!(TOOL_CALL_PROGRESS_ACTIVITY_TYPE, "tool-call-progress");
    }
}
