//! [`HandoffPlugin`]: the variants and the hook that promotes requests.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;

use super::state::{ActiveAgentKey, HandoffAction};
use crate::contract::{AgentOverlay, HandoffState};
use crate::error::StateError;
use crate::phase::{Phase, PhaseContext};
use crate::plugin::{PhaseHook, Plugin, PluginDescriptor, PluginRegistrar};
use crate::state::{StateCommand, StateKeyOptions};

/// The id the handoff plugin must be registered under.
pub const HANDOFF_PLUGIN_ID: &str = "agent_handoff";

/// Declares an agent's handoff variants and keeps [`ActiveAgentKey`] in sync.
///
/// It registers the key (so only one handoff plugin fits an agent), one variant per
/// overlay, and a sync hook at RunStart and StepEnd that promotes a pending request
/// for a known variant. Requests for unknown variants are left to the run loop,
/// which refuses them with an error event.
#[derive(Debug, Clone)]
pub struct HandoffPlugin {
    overlays: Arc<BTreeMap<String, AgentOverlay>>,
}

impl HandoffPlugin {
    /// A plugin offering these variants.
    pub fn new(overlays: HashMap<String, AgentOverlay>) -> Self {
        Self {
            overlays: Arc::new(overlays.into_iter().collect()),
        }
    }

    /// The overlay of `variant`, if the plugin offers it.
    pub fn overlay(&self, variant: &str) -> Option<&AgentOverlay> {
        self.overlays.get(variant)
    }

    /// The variant the thread runs next: the pending request if any, else the
    /// active one; `None` is the base agent.
    pub fn effective_agent(state: &HandoffState) -> Option<&String> {
        state
            .requested_agent
            .as_ref()
            .or(state.active_agent.as_ref())
    }
}

impl Plugin for HandoffPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new(
            HANDOFF_PLUGIN_ID,
            "switches the thread between variants of its agent at step boundaries",
        )
    }

    fn register(&self, registrar: &mut PluginRegistrar) -> Result<(), StateError> {
        registrar.register_key::<ActiveAgentKey>(StateKeyOptions::default())?;
        for (name, overlay) in self.overlays.iter() {
            registrar.register_agent_variant(name.clone(), overlay.clone())?;
        }
        for phase in [Phase::RunStart, Phase::StepEnd] {
            registrar.register_phase_hook(
                "sync",
                phase,
                HandoffSyncHook {
                    overlays: Arc::clone(&self.overlays),
                },
            )?;
        }
        Ok(())
    }
}

/// Promotes a pending request for a known variant to the active one.
struct HandoffSyncHook {
    overlays: Arc<BTreeMap<String, AgentOverlay>>,
}

#[async_trait]
impl PhaseHook for HandoffSyncHook {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        let requested = ctx
            .state::<ActiveAgentKey>()
            .and_then(|state| state.requested_agent.as_ref());
        if let Some(variant) = requested
            && self.overlays.contains_key(variant)
        {
            command.update::<ActiveAgentKey>(HandoffAction::Activate(variant.clone()));
        }
        Ok(command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::request_handoff;
    use crate::state::StateStore;

    fn plugin() -> HandoffPlugin {
        HandoffPlugin::new(HashMap::from([(
            "researcher".to_owned(),
            AgentOverlay {
                system_prompt: Some("You research.".into()),
                ..AgentOverlay::default()
            },
        )]))
    }

    /// The state after the sync hook ran once on a thread whose last action was
    /// `action`.
    async fn synced_after(action: HandoffAction) -> HandoffState {
        let mut store = StateStore::new();
        store
            .register_key::<ActiveAgentKey>(StateKeyOptions::default())
            .unwrap();
        let mut command = StateCommand::new();
        command.update::<ActiveAgentKey>(action);
        store.commit(command).unwrap();
        let ctx = PhaseContext::test_default().with_snapshot(store.snapshot());
        let hook = HandoffSyncHook {
            overlays: Arc::clone(&plugin().overlays),
        };
        store.commit(hook.run(&ctx).await.unwrap()).unwrap();
        store.get::<ActiveAgentKey>().cloned().unwrap_or_default()
    }

    #[tokio::test]
    async fn a_request_for_a_known_variant_is_promoted() {
        let state = synced_after(request_handoff("researcher")).await;
        assert_eq!(state.active_agent.as_deref(), Some("researcher"));
        assert_eq!(state.requested_agent, None);
    }

    #[tokio::test]
    async fn a_request_for_an_unknown_variant_is_left_to_the_run_loop() {
        let state = synced_after(request_handoff("nobody")).await;
        assert_eq!(state.active_agent, None);
        assert_eq!(state.requested_agent.as_deref(), Some("nobody"));
    }

    #[test]
    fn the_effective_agent_prefers_the_pending_request() {
        let state = HandoffState {
            active_agent: Some("writer".into()),
            requested_agent: Some("researcher".into()),
        };
        assert_eq!(
            HandoffPlugin::effective_agent(&state).map(String::as_str),
            Some("researcher")
        );
        assert_eq!(
            plugin()
                .overlay("researcher")
                .and_then(|o| o.system_prompt.as_deref()),
            Some("You research.")
        );
        assert!(plugin().overlay("nobody").is_none());
    }
}
