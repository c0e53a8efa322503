//! The core scheduled actions every agent has (book: "Core Actions").
//!
//! [`LoopActionHandlersPlugin`] is injected into every resolved agent; it registers
//! the state keys these actions write and their handlers. The run loop reads the
//! keys after the phase the action targets (context messages, override and tool
//! filter after BeforeInference; intercepts after each BeforeToolExecute).

mod context_message;
mod inference_override;
mod skip_inference;
mod tool_filter;
mod tool_intercept;

pub use context_message::{
    AddContextMessage, ContextLifetime, ContextMessage, ContextMessages, ContextMessagesKey,
    ContextMessagesUpdate,
};
pub use inference_override::{InferenceOverrideKey, InferenceOverrideUpdate, SetInferenceOverride};
pub use skip_inference::{BehaviorRequestKey, SkipInference};
pub use tool_filter::{ExcludeTool, IncludeOnlyTools, ToolFilter, ToolFilterKey, ToolFilterUpdate};
pub use tool_intercept::{
    ToolInterceptAction, ToolInterceptKey, ToolInterceptPayload, ToolInterceptUpdate,
};

use crate::error::StateError;
use crate::plugin::{Plugin, PluginDescriptor, PluginRegistrar};
use crate::state::StateKeyOptions;

/// Registers the core actions' handlers and keys; always part of a resolved agent.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoopActionHandlersPlugin;

impl LoopActionHandlersPlugin {
    /// The id the resolver installs it under.
    pub const ID: &'static str = "__runtime.loop_actions";
}

impl Plugin for LoopActionHandlersPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new(Self::ID, "Core scheduled actions of the run loop")
    }

    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        r.register_key::<ContextMessagesKey>(StateKeyOptions::default())?;
        r.register_key::<InferenceOverrideKey>(StateKeyOptions::default())?;
        r.register_key::<ToolFilterKey>(StateKeyOptions::default())?;
        r.register_key::<ToolInterceptKey>(StateKeyOptions::default())?;
        // The run loop's own keys ride on this always-installed plugin.
        r.register_key::<crate::thread::ToolCallStates>(StateKeyOptions::default())?;
        r.register_key::<crate::thread::RunLifecycleKey>(StateKeyOptions::default())?;
        r.register_key::<crate::llm::truncation::TruncationState>(StateKeyOptions::default())?;
        r.register_scheduled_action::<AddContextMessage, _>(
            context_message::AddContextMessageHandler,
        )?;
        r.register_scheduled_action::<SetInferenceOverride, _>(
            inference_override::SetInferenceOverrideHandler,
        )?;
        r.register_key::<BehaviorRequestKey>(StateKeyOptions::default())?;
        r.register_scheduled_action::<SkipInference, _>(skip_inference::SkipInferenceHandler)?;
        r.register_scheduled_action::<ExcludeTool, _>(tool_filter::ExcludeToolHandler)?;
        r.register_scheduled_action::<IncludeOnlyTools, _>(tool_filter::IncludeOnlyToolsHandler)?;
        r.register_scheduled_action::<ToolInterceptAction, _>(
            tool_intercept::ToolInterceptHandler,
        )?;
        Ok(())
    }
}
