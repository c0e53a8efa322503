//! Plugins: how lifecycle logic joins the runtime.
//!
//! A [`Plugin`] declares its parts through a [`PluginRegistrar`]. Structural parts —
//! state keys, scheduled-action handlers, effect handlers, profile keys — are always
//! installed. Behavioural parts — phase hooks, tools, request transforms — only take
//! part when the agent's `active_hook_filter` is empty or names the plugin. The
//! [`ExecutionEnv`] is the assembled result for one resolved agent.

mod action;
mod effect;
mod env;
mod hook;
#[allow(clippy::module_inception)]
mod plugin;
mod registrar;
mod transform;

pub use action::{ActionRegistration, ScheduledActionHandler, TypedScheduledActionHandler};
pub use effect::{EffectHandler, EffectRegistration, TypedEffectHandler};
pub use env::{ExecutionEnv, PluginEntry, PluginTool};
pub use hook::{PhaseHook, TaggedPhaseHook};
pub use plugin::{ConfigSchema, Plugin, PluginConfigError, PluginDescriptor, schema_violations};
pub use registrar::PluginRegistrar;
pub use transform::{InferenceRequestTransform, TaggedRequestTransform};
