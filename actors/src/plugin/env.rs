//! `ExecutionEnv`: everything the plugins of one resolved agent contribute.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use super::action::ActionRegistration;
use super::effect::EffectRegistration;
use super::hook::TaggedPhaseHook;
use super::plugin::Plugin;
use super::registrar::PluginRegistrar;
use super::transform::TaggedRequestTransform;
use crate::contract::AgentOverlay;
use crate::error::StateError;
use crate::llm::InferenceRequest;
use crate::phase::Phase;
use crate::state::{
    FailedScheduledActions, HandlerCatalog, KeyRegistration, KeyRegistry, PendingScheduledActions,
    Snapshot, StateKey, StateKeyOptions, StateStore,
};
use crate::tool::Tool;

/// A plugin as the resolver hands it to [`ExecutionEnv::from_plugins`].
#[derive(Clone)]
pub struct PluginEntry {
    /// The id the plugin is registered under.
    pub id: String,
    /// The plugin.
    pub plugin: Arc<dyn Plugin>,
    /// Runtime-required plugins are active whatever the agent's hook filter says.
    pub always_active: bool,
}

impl PluginEntry {
    /// A plugin subject to the agent's `active_hook_filter`.
    pub fn new(id: impl Into<String>, plugin: Arc<dyn Plugin>) -> Self {
        Self {
            id: id.into(),
            plugin,
            always_active: false,
        }
    }

    /// A runtime-required plugin, exempt from the hook filter.
    pub fn required(id: impl Into<String>, plugin: Arc<dyn Plugin>) -> Self {
        Self {
            id: id.into(),
            plugin,
            always_active: true,
        }
    }
}

impl fmt::Debug for PluginEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginEntry")
            .field("id", &self.id)
            .field("always_active", &self.always_active)
            .finish()
    }
}

/// A tool contributed by a plugin.
#[derive(Clone)]
pub struct PluginTool {
    /// The contributing plugin.
    pub plugin_id: Arc<str>,
    /// The tool.
    pub tool: Arc<dyn Tool>,
}

impl fmt::Debug for PluginTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginTool")
            .field("plugin_id", &self.plugin_id)
            .finish()
    }
}

/// Hooks, handlers, transforms, keys and tools assembled from an agent's plugins.
///
/// Built fresh by every resolve; never shared between agents.
#[derive(Default)]
pub struct ExecutionEnv {
    hooks: [Vec<TaggedPhaseHook>; 8],
    actions: HashMap<&'static str, ActionRegistration>,
    effects: HashMap<&'static str, EffectRegistration>,
    transforms: Vec<TaggedRequestTransform>,
    keys: Vec<KeyRegistration>,
    tools: BTreeMap<String, PluginTool>,
    profile_keys: Vec<&'static str>,
    variants: BTreeMap<String, AgentOverlay>,
    plugins: Vec<PluginEntry>,
    catalog: HandlerCatalog,
    /// Every key a thread running this environment has (the runtime's own included),
    /// shared by all those threads.
    registry: Arc<KeyRegistry>,
}

impl fmt::Debug for ExecutionEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutionEnv")
            .field("plugins", &self.plugins)
            .field("hooks", &self.hooks.iter().map(Vec::len).sum::<usize>())
            .field("actions", &self.actions.len())
            .field("effects", &self.effects.len())
            .field("transforms", &self.transforms.len())
            .field("keys", &self.keys.len())
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("variants", &self.variants.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ExecutionEnv {
    /// Registers every plugin and assembles the result.
    ///
    /// Structural parts of every plugin are installed; behavioural parts only for
    /// plugins that are `always_active`, or when `active_hook_filter` is empty or
    /// contains the plugin id. Any duplicate across plugins is an error.
    pub fn from_plugins(
        plugins: impl IntoIterator<Item = PluginEntry>,
        active_hook_filter: &BTreeSet<String>,
    ) -> Result<Self, StateError> {
        let mut env = Self::default();
        let mut seen_ids = HashSet::new();
        let mut key_names: HashSet<&'static str> =
            [PendingScheduledActions::KEY, FailedScheduledActions::KEY]
                .into_iter()
                .collect();
        for entry in plugins {
            if !seen_ids.insert(entry.id.clone()) {
                return Err(StateError::PluginAlreadyInstalled { name: entry.id });
            }
            let mut registrar = PluginRegistrar::new(entry.id.as_str());
            entry.plugin.register(&mut registrar)?;
            let active = entry.always_active
                || active_hook_filter.is_empty()
                || active_hook_filter.contains(&entry.id);

            for key in registrar.keys {
                if !key_names.insert(key.key) {
                    return Err(StateError::KeyAlreadyRegistered {
                        key: key.key.to_owned(),
                    });
                }
                env.keys.push(key);
            }
            for action in registrar.actions {
                if env.actions.contains_key(action.key) {
                    return Err(StateError::HandlerAlreadyRegistered {
                        key: action.key.to_owned(),
                    });
                }
                env.catalog.add_action(action.key, action.phase);
                env.actions.insert(action.key, action);
            }
            for effect in registrar.effects {
                if env.effects.contains_key(effect.key) {
                    return Err(StateError::EffectHandlerAlreadyRegistered {
                        key: effect.key.to_owned(),
                    });
                }
                env.catalog.add_effect(effect.key);
                env.effects.insert(effect.key, effect);
            }
            for key in registrar.profile_keys {
                if env.profile_keys.contains(&key) {
                    return Err(StateError::ProfileKeyAlreadyRegistered {
                        key: key.to_owned(),
                    });
                }
                env.profile_keys.push(key);
            }
            for (name, overlay) in registrar.variants {
                if env.variants.contains_key(&name) {
                    return Err(StateError::AgentVariantAlreadyRegistered { variant: name });
                }
                env.variants.insert(name, overlay);
            }
            if active {
                for hook in registrar.hooks {
                    env.hooks[hook.phase.index()].push(hook);
                }
                env.transforms.extend(registrar.transforms);
                for (tool_id, tool) in registrar.tools {
                    if env.tools.contains_key(&tool_id) {
                        return Err(StateError::ToolAlreadyRegistered { tool_id });
                    }
                    env.tools.insert(
                        tool_id,
                        PluginTool {
                            plugin_id: Arc::from(entry.id.as_str()),
                            tool,
                        },
                    );
                }
            }
            env.plugins.push(entry);
        }
        let mut registry = KeyRegistry::default();
        for registration in [
            KeyRegistration::of::<PendingScheduledActions>(StateKeyOptions::default()),
            KeyRegistration::of::<FailedScheduledActions>(StateKeyOptions::default()),
        ]
        .into_iter()
        .chain(env.keys.iter().copied())
        {
            registry.insert(registration)?;
        }
        env.registry = Arc::new(registry);
        Ok(env)
    }

    /// Active hooks of `phase`, in registration order.
    pub fn hooks_for_phase(&self, phase: Phase) -> &[TaggedPhaseHook] {
        &self.hooks[phase.index()]
    }

    /// The handler of an action key.
    pub fn action_handler(&self, key: &str) -> Option<&ActionRegistration> {
        self.actions.get(key)
    }

    /// The handler of an effect key.
    pub fn effect_handler(&self, key: &str) -> Option<&EffectRegistration> {
        self.effects.get(key)
    }

    /// Active request transforms, in registration order.
    pub fn request_transforms(&self) -> &[TaggedRequestTransform] {
        &self.transforms
    }

    /// Runs every active transform over `request`, in registration order.
    pub fn apply_request_transforms(&self, request: &mut InferenceRequest, snapshot: &Snapshot) {
        for tagged in &self.transforms {
            tagged.transform.transform(request, snapshot);
        }
    }

    /// Declared state keys.
    pub fn key_registrations(&self) -> &[KeyRegistration] {
        &self.keys
    }

    /// Declared profile namespaces.
    pub fn profile_keys(&self) -> &[&'static str] {
        &self.profile_keys
    }

    /// Tools contributed by active plugins, by id.
    pub fn tools(&self) -> &BTreeMap<String, PluginTool> {
        &self.tools
    }

    /// Handoff variants the plugins declare, by name.
    pub fn agent_variants(&self) -> &BTreeMap<String, AgentOverlay> {
        &self.variants
    }

    /// The plugins, in registration order.
    pub fn plugins(&self) -> &[PluginEntry] {
        &self.plugins
    }

    /// The action and effect keys this environment handles.
    pub fn handler_catalog(&self) -> &HandlerCatalog {
        &self.catalog
    }

    /// Makes `store` match this environment: registers missing keys, uninstalls keys
    /// no plugin declares any more (keeping those marked `retain_on_uninstall`), and
    /// sets the accepted action and effect keys. Existing values are kept.
    pub fn install(&self, store: &mut StateStore) -> Result<(), StateError> {
        // Fast path: a fresh store, or one that ran this environment before.
        if store.adopt_registry(Arc::clone(&self.registry)).is_ok() {
            store.set_handlers(self.catalog.clone());
            return Ok(());
        }
        let declared: HashMap<&str, &KeyRegistration> =
            self.keys.iter().map(|k| (k.key, k)).collect();
        // Keys no plugin declares any more, or declared now with another type.
        let stale: Vec<String> = store
            .registered_keys()
            .filter(|key| {
                *key != PendingScheduledActions::KEY && *key != FailedScheduledActions::KEY
            })
            .filter(|key| match (declared.get(key), store.registration(key)) {
                (Some(wanted), Some(current)) => !wanted.same_key_type(current),
                _ => true,
            })
            .map(str::to_owned)
            .collect();
        for key in stale {
            store.uninstall_key(&key)?;
        }
        for registration in &self.keys {
            if !store.is_registered(registration.key) {
                store.register(*registration)?;
            }
        }
        store.set_handlers(self.catalog.clone());
        Ok(())
    }
}
