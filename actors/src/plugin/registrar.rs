//! `PluginRegistrar`: the registration API a plugin's `register` receives.

use std::sync::Arc;

use super::action::{ActionRegistration, TypedActionAdapter, TypedScheduledActionHandler};
use super::effect::{EffectRegistration, TypedEffectAdapter, TypedEffectHandler};
use super::hook::{PhaseHook, TaggedPhaseHook};
use super::transform::{InferenceRequestTransform, TaggedRequestTransform};
use crate::contract::AgentOverlay;
use crate::error::StateError;
use crate::phase::Phase;
use crate::state::{
    EffectSpec, KeyRegistration, ProfileKey, ScheduledActionSpec, StateKey, StateKeyOptions,
};
use crate::tool::Tool;

/// Collects one plugin's declarations; duplicates within the plugin are refused
/// here, duplicates across plugins when the [`ExecutionEnv`](super::ExecutionEnv) is built.
#[derive(Debug)]
pub struct PluginRegistrar {
    plugin_id: Arc<str>,
    pub(crate) keys: Vec<KeyRegistration>,
    pub(crate) hooks: Vec<TaggedPhaseHook>,
    pub(crate) tools: Vec<(String, Arc<dyn Tool>)>,
    pub(crate) actions: Vec<ActionRegistration>,
    pub(crate) effects: Vec<EffectRegistration>,
    pub(crate) transforms: Vec<TaggedRequestTransform>,
    pub(crate) profile_keys: Vec<&'static str>,
    pub(crate) variants: Vec<(String, AgentOverlay)>,
}

impl PluginRegistrar {
    /// A registrar for the plugin with this id.
    pub fn new(plugin_id: impl Into<Arc<str>>) -> Self {
        Self {
            plugin_id: plugin_id.into(),
            keys: Vec::new(),
            hooks: Vec::new(),
            tools: Vec::new(),
            actions: Vec::new(),
            effects: Vec::new(),
            transforms: Vec::new(),
            profile_keys: Vec::new(),
            variants: Vec::new(),
        }
    }

    /// The id of the plugin being registered.
    pub fn plugin_id(&self) -> &str {
        &self.plugin_id
    }

    /// Declares a state key.
    pub fn register_key<K: StateKey>(
        &mut self,
        options: StateKeyOptions,
    ) -> Result<(), StateError> {
        if self.keys.iter().any(|k| k.key == K::KEY) {
            return Err(StateError::KeyAlreadyRegistered {
                key: K::KEY.to_owned(),
            });
        }
        self.keys.push(KeyRegistration::of::<K>(options));
        Ok(())
    }

    /// Adds a hook, named for diagnostics, that runs at `phase`.
    pub fn register_phase_hook(
        &mut self,
        name: impl Into<Arc<str>>,
        phase: Phase,
        hook: impl PhaseHook,
    ) -> Result<(), StateError> {
        let name = name.into();
        if self
            .hooks
            .iter()
            .any(|h| h.phase == phase && h.name == name)
        {
            return Err(StateError::HookAlreadyRegistered {
                plugin_id: self.plugin_id.to_string(),
                hook: name.to_string(),
                phase,
            });
        }
        self.hooks.push(TaggedPhaseHook {
            plugin_id: Arc::clone(&self.plugin_id),
            name,
            phase,
            hook: Arc::new(hook),
        });
        Ok(())
    }

    /// Adds a tool the model can call while this plugin is active.
    pub fn register_tool(
        &mut self,
        id: impl Into<String>,
        tool: Arc<dyn Tool>,
    ) -> Result<(), StateError> {
        let id = id.into();
        if self.tools.iter().any(|(existing, _)| *existing == id) {
            return Err(StateError::ToolAlreadyRegistered { tool_id: id });
        }
        self.tools.push((id, tool));
        Ok(())
    }

    /// Handles action `A` in its phase's EXECUTE stage.
    pub fn register_scheduled_action<A, H>(&mut self, handler: H) -> Result<(), StateError>
    where
        A: ScheduledActionSpec,
        H: TypedScheduledActionHandler<A>,
    {
        if self.actions.iter().any(|a| a.key == A::KEY) {
            return Err(StateError::HandlerAlreadyRegistered {
                key: A::KEY.to_owned(),
            });
        }
        self.actions.push(ActionRegistration {
            key: A::KEY,
            phase: A::PHASE,
            plugin_id: Arc::clone(&self.plugin_id),
            handler: Arc::new(TypedActionAdapter::<A, H>::new(handler)),
        });
        Ok(())
    }

    /// Handles effect `E` after commits that emit it.
    pub fn register_effect<E, H>(&mut self, handler: H) -> Result<(), StateError>
    where
        E: EffectSpec,
        H: TypedEffectHandler<E>,
    {
        if self.effects.iter().any(|e| e.key == E::KEY) {
            return Err(StateError::EffectHandlerAlreadyRegistered {
                key: E::KEY.to_owned(),
            });
        }
        self.effects.push(EffectRegistration {
            key: E::KEY,
            plugin_id: Arc::clone(&self.plugin_id),
            handler: Arc::new(TypedEffectAdapter::<E, H>::new(handler)),
        });
        Ok(())
    }

    /// Adds a transform applied to every inference request while this plugin is active.
    pub fn register_request_transform(
        &mut self,
        name: impl Into<Arc<str>>,
        transform: impl InferenceRequestTransform,
    ) -> Result<(), StateError> {
        self.transforms.push(TaggedRequestTransform {
            plugin_id: Arc::clone(&self.plugin_id),
            name: name.into(),
            transform: Arc::new(transform),
        });
        Ok(())
    }

    /// Declares a profile or shared-state namespace.
    pub fn register_profile_key<K: ProfileKey>(&mut self) -> Result<(), StateError> {
        if self.profile_keys.contains(&K::KEY) {
            return Err(StateError::ProfileKeyAlreadyRegistered {
                key: K::KEY.to_owned(),
            });
        }
        self.profile_keys.push(K::KEY);
        Ok(())
    }

    /// Declares a handoff variant of the agent: the overlay a thread runs with while
    /// the variant is active (see [`crate::handoff`]).
    pub fn register_agent_variant(
        &mut self,
        name: impl Into<String>,
        overlay: AgentOverlay,
    ) -> Result<(), StateError> {
        let name = name.into();
        if self.variants.iter().any(|(existing, _)| *existing == name) {
            return Err(StateError::AgentVariantAlreadyRegistered { variant: name });
        }
        self.variants.push((name, overlay));
        Ok(())
    }
}
