//! Phase hooks.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::StateError;
use crate::phase::{Phase, PhaseContext};
use crate::state::StateCommand;

/// Plugin logic run at one phase: reads a frozen snapshot, returns a command.
///
/// Hooks must be pure with respect to the snapshot — the engine may run a hook a
/// second time on a fresher snapshot when its writes conflict with another hook's.
#[async_trait]
pub trait PhaseHook: Send + Sync + 'static {
    /// Computes this hook's updates, actions and effects.
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError>;
}

/// A hook with its owner, name and phase.
#[derive(Clone)]
pub struct TaggedPhaseHook {
    /// The plugin that registered it.
    pub plugin_id: Arc<str>,
    /// The hook's name within the plugin.
    pub name: Arc<str>,
    /// The phase it runs at.
    pub phase: Phase,
    /// The hook.
    pub hook: Arc<dyn PhaseHook>,
}

impl TaggedPhaseHook {
    /// `plugin/hook`, for diagnostics.
    pub fn label(&self) -> String {
        format!("{}/{}", self.plugin_id, self.name)
    }
}

impl fmt::Debug for TaggedPhaseHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaggedPhaseHook")
            .field("plugin_id", &self.plugin_id)
            .field("name", &self.name)
            .field("phase", &self.phase)
            .finish()
    }
}
