//! Context-window management: keeping every inference request within the model's
//! window (book: "Optimize the Context Window").
//!
//! [`ContextTransformPlugin`] is added by the resolver to every agent that sets
//! `context_policy`. Its request transform first compacts oversized tool results, then
//! drops the oldest history that does not fit. It changes only the request sent to
//! the model, never the thread's stored messages.

mod window;

pub use window::{
    ARTIFACT_COMPACT_THRESHOLD_TOKENS, ARTIFACT_PREVIEW_MAX_CHARS, ARTIFACT_PREVIEW_MAX_LINES,
    compact_artifacts, estimate_message_tokens, estimate_tool_tokens, truncate_to_budget,
};

use crate::contract::ContextWindowPolicy;
use crate::error::StateError;
use crate::llm::InferenceRequest;
use crate::plugin::{InferenceRequestTransform, Plugin, PluginDescriptor, PluginRegistrar};
use crate::state::Snapshot;

/// Applies an agent's [`ContextWindowPolicy`] to every inference request.
#[derive(Debug, Clone)]
pub struct ContextTransformPlugin {
    policy: ContextWindowPolicy,
}

impl ContextTransformPlugin {
    /// The id the resolver installs it under.
    pub const ID: &'static str = "__runtime.context_transform";

    /// A plugin enforcing `policy`.
    pub fn new(policy: ContextWindowPolicy) -> Self {
        Self { policy }
    }
}

struct ContextTransform {
    policy: ContextWindowPolicy,
}

impl InferenceRequestTransform for ContextTransform {
    fn transform(&self, request: &mut InferenceRequest, _snapshot: &Snapshot) {
        let compacted = compact_artifacts(&mut request.messages);
        let dropped = truncate_to_budget(&mut request.messages, &request.tools, &self.policy);
        if compacted > 0 || dropped > 0 {
            tracing::debug!(compacted, dropped, "fitted request into the context window");
        }
    }
}

impl Plugin for ContextTransformPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new(Self::ID, "Fits inference requests into the context window")
    }

    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        r.register_request_transform(
            "context_window",
            ContextTransform {
                policy: self.policy.clone(),
            },
        )
    }
}
