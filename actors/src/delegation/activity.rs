//! The `delegate-run` activity: a delegate call's view of its delegate's progress
//! in the parent's stream.

use std::sync::Arc;

use serde_json::json;

use crate::JsonValue;
use crate::contract::AgentEvent;
use crate::event_sink::EventSink;
use crate::ids::{MessageId, ToolCallId};

/// The activity type under which a delegate's progress appears in the parent's stream.
pub const DELEGATE_ACTIVITY_TYPE: &str = "delegate-run";

/// One delegate call's activity: opened with what it delegates to, then one entry
/// per delegate event under `events`.
pub(super) struct DelegateActivity {
    message_id: MessageId,
    /// `None` when the call has no sink or the agent does not stream delegate events.
    sink: Option<Arc<dyn EventSink>>,
}

impl DelegateActivity {
    /// The activity of `call_id`, reported to `sink`.
    pub(super) fn new(call_id: &ToolCallId, sink: Option<Arc<dyn EventSink>>) -> Self {
        Self {
            message_id: MessageId::new(format!("delegate:{call_id}"))
                .unwrap_or_else(|_| MessageId::generate()),
            sink,
        }
    }

    /// Opens (or reopens) the activity with `about` and no events yet.
    pub(super) async fn open(&self, mut about: JsonValue) {
        let Some(sink) = &self.sink else {
            return;
        };
        about["events"] = json!([]);
        sink.emit(AgentEvent::ActivitySnapshot {
            message_id: self.message_id.clone(),
            activity_type: DELEGATE_ACTIVITY_TYPE.to_owned(),
            content: about,
            replace: Some(true),
        })
        .await;
    }

    /// Appends one delegate event.
    pub(super) async fn append(&self, event: JsonValue) {
        let Some(sink) = &self.sink else {
            return;
        };
        sink.emit(AgentEvent::ActivityDelta {
            message_id: self.message_id.clone(),
            activity_type: DELEGATE_ACTIVITY_TYPE.to_owned(),
            patch: vec![json!({"op": "add", "path": "/events/-", "value": event})],
        })
        .await;
    }
}
