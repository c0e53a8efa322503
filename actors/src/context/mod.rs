//! Context-window management: keeping every inference request within the model's
//! window (book: "Optimize the Context Window").
//!
//! The resolver adds two plugins to every agent that sets `context_policy`:
//! [`ContextTransformPlugin`], whose request transform compacts oversized tool results
//! and then drops the oldest history that does not fit (it changes only the request,
//! never the stored messages), and [`CompactionPlugin`], which declares the
//! `compaction` config section and the [`CompactionState`] key that the run loop uses
//! when it summarizes history past `autocompact_threshold` (see [`compact`]).

mod compaction;
mod window;

pub use compaction::{
    Compaction, CompactionConfig, CompactionConfigKey, CompactionRecord, CompactionState,
    ContextSummarizer, DefaultSummarizer, MIN_COMPACTION_GAIN_TOKENS, SUMMARY_CLOSE_TAG,
    SUMMARY_OPEN_TAG, compact, compacted_view, find_compaction_boundary, is_summary,
    render_transcript, trim_to_compaction_boundary,
};

pub use window::{
    ARTIFACT_COMPACT_THRESHOLD_TOKENS, ARTIFACT_PREVIEW_MAX_CHARS, ARTIFACT_PREVIEW_MAX_LINES,
    compact_artifacts, estimate_message_tokens, estimate_tool_tokens, truncate_to_budget,
};

use crate::contract::ContextWindowPolicy;
use crate::error::StateError;
use crate::llm::InferenceRequest;
use crate::plugin::ConfigSchema;
use crate::plugin::{InferenceRequestTransform, Plugin, PluginDescriptor, PluginRegistrar};
use crate::state::{Snapshot, StateKeyOptions};

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

/// Declares the `compaction` section and the thread-scoped [`CompactionState`].
#[derive(Debug, Clone, Default)]
pub struct CompactionPlugin {
    config: CompactionConfig,
}

impl CompactionPlugin {
    /// The id the resolver installs it under.
    pub const ID: &'static str = "__runtime.compaction";

    /// A plugin with the agent's compaction settings.
    pub fn new(config: CompactionConfig) -> Self {
        Self { config }
    }

    /// The settings the run loop summarizes with.
    pub fn config(&self) -> &CompactionConfig {
        &self.config
    }
}

impl Plugin for CompactionPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new(Self::ID, "Summarizes older history past the threshold")
    }

    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        r.register_key::<CompactionState>(StateKeyOptions::default())
    }

    fn config_schemas(&self) -> Vec<ConfigSchema> {
        vec![ConfigSchema::of::<CompactionConfigKey>()]
    }
}
