//! The Awaken engine: contract types, the typed state engine, the plugin and phase
//! engine, and (in later layers) thread and tool-call actors.
//!
//! This crate knows nothing about NATS or HTTP. It defines the traits the cluster and
//! gateway crates implement and ships in-process implementations of them.

pub mod actions;
pub mod approval_feed;
pub mod backoff;
pub mod cancellation;
pub mod clock;
pub mod codec;
pub mod context;
pub mod contract;
pub mod delegation;
pub mod error;
pub mod event_sink;
pub mod handoff;
pub mod hashing;
pub mod ids;
mod inline;
pub mod integral;
pub mod llm;
pub mod mailbox;
pub mod memory;
pub mod permission;
pub mod phase;
pub mod plugin;
pub mod policies;
pub mod runtime;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod thread;
pub mod tool;

pub use error::{
    BuildError, InferenceExecutionError, ResolveError, RuntimeError, StateError, StorageError,
    ToolError,
};
pub use ids::{
    AgentId, ApprovalId, DecisionId, DispatchId, ID_PATTERN, IdError, MAX_ID_LEN, MessageId, RunId,
    ThreadId, ToolCallId, WebhookId,
};
pub use phase::Phase;

/// JSON values as used in tool arguments, state encoding and config sections.
pub type JsonValue = serde_json::Value;
