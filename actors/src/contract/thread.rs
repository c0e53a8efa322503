//! Threads: persistent conversations.
//!
//! A [`Thread`] holds an id and metadata only; its messages are stored and loaded
//! separately (a thread store keeps them as a list of
//! [`Message`](crate::contract::message::Message)s). Timestamps are filled in by the
//! store, so constructing a thread never reads the clock.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::ids::ThreadId;

/// A conversation: the unit of ownership in the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    /// Unique thread id (UUID v7 when generated).
    pub id: ThreadId,
    /// Descriptive metadata.
    #[serde(default)]
    pub metadata: ThreadMetadata,
}

impl Thread {
    /// A thread with a freshly generated, time-ordered id.
    pub fn new() -> Self {
        Self::with_id(ThreadId::generate())
    }

    /// A thread with a caller-chosen id.
    pub fn with_id(id: ThreadId) -> Self {
        Self {
            id,
            metadata: ThreadMetadata::default(),
        }
    }

    /// Sets the thread's title.
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.metadata.title = Some(title.into());
        self
    }
}

impl Default for Thread {
    fn default() -> Self {
        Self::new()
    }
}

/// The `custom` key of the tenant that created a thread (set by the server when API
/// keys are on, never by a client): listings of what belongs to threads, such as
/// approvals, are scoped by it.
pub const TENANT_KEY: &str = "awaken.tenant";

/// Thread metadata that can change without touching messages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadMetadata {
    /// Creation time, unix millis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
    /// Last update time, unix millis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<u64>,
    /// Human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The thread this one was forked or delegated from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_thread_id: Option<ThreadId>,
    /// Application-defined key-value pairs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub custom: BTreeMap<String, JsonValue>,
}

impl ThreadMetadata {
    /// The tenant that created the thread, if one did.
    pub fn tenant(&self) -> Option<&str> {
        self.custom.get(TENANT_KEY).and_then(JsonValue::as_str)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn new_threads_get_distinct_ids() {
        assert_ne!(Thread::new().id, Thread::new().id);
        assert_eq!(Thread::default().metadata, ThreadMetadata::default());
    }

    #[test]
    fn empty_metadata_serializes_as_empty_object() {
        let thread = Thread::with_id(ThreadId::new("t1").unwrap());
        assert_eq!(
            serde_json::to_value(&thread).unwrap(),
            json!({"id": "t1", "metadata": {}})
        );
    }

    #[test]
    fn full_metadata_round_trips() {
        let mut thread = Thread::with_id(ThreadId::new("t1").unwrap()).with_title("Trip");
        thread.metadata.created_at = Some(1);
        thread.metadata.updated_at = Some(2);
        thread.metadata.parent_thread_id = Some(ThreadId::new("t0").unwrap());
        thread
            .metadata
            .custom
            .insert("tags".into(), json!(["a", "b"]));
        let value = serde_json::to_value(&thread).unwrap();
        assert_eq!(
            value,
            json!({
                "id": "t1",
                "metadata": {
                    "created_at": 1,
                    "updated_at": 2,
                    "title": "Trip",
                    "parent_thread_id": "t0",
                    "custom": {"tags": ["a", "b"]}
                }
            })
        );
        assert_eq!(serde_json::from_value::<Thread>(value).unwrap(), thread);
    }

    #[test]
    fn metadata_may_be_missing() {
        let thread: Thread = serde_json::from_value(json!({"id": "t1"})).unwrap();
        assert_eq!(thread.metadata, ThreadMetadata::default());
    }
}
