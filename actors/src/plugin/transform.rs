//! Inference request transforms.

use std::fmt;
use std::sync::Arc;

use crate::llm::InferenceRequest;
use crate::state::Snapshot;

/// Rewrites the inference request just before it reaches the model (system prompt
/// injection, tool filtering, truncation). Transforms run in registration order.
pub trait InferenceRequestTransform: Send + Sync + 'static {
    /// Edits the request in place; `snapshot` is the state after BeforeInference.
    fn transform(&self, request: &mut InferenceRequest, snapshot: &Snapshot);
}

/// A transform with its owner and name.
#[derive(Clone)]
pub struct TaggedRequestTransform {
    /// The plugin that registered it.
    pub plugin_id: Arc<str>,
    /// The transform's name within the plugin.
    pub name: Arc<str>,
    /// The transform.
    pub transform: Arc<dyn InferenceRequestTransform>,
}

impl fmt::Debug for TaggedRequestTransform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaggedRequestTransform")
            .field("plugin_id", &self.plugin_id)
            .field("name", &self.name)
            .finish()
    }
}
