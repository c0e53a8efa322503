//! `MaxRoundsPlugin`: ends a run after `max_rounds` steps.

use async_trait::async_trait;

use super::StopRequest;
use crate::contract::StoppedReason;
use crate::error::StateError;
use crate::phase::{Phase, PhaseContext};
use crate::plugin::{PhaseHook, Plugin, PluginDescriptor, PluginRegistrar};
use crate::state::{StateCommand, StateKeyOptions};

/// Enforces the agent's `max_rounds`; injected into every resolved agent.
#[derive(Debug, Clone, Copy)]
pub struct MaxRoundsPlugin {
    max_rounds: u32,
}

impl MaxRoundsPlugin {
    /// The id the resolver installs it under.
    pub const ID: &'static str = "stop-condition:max-rounds";

    /// Stops runs after `max_rounds` steps; 0 disables the limit.
    pub fn new(max_rounds: u32) -> Self {
        Self { max_rounds }
    }
}

struct MaxRoundsHook {
    max_rounds: u32,
}

#[async_trait]
impl PhaseHook for MaxRoundsHook {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        if self.max_rounds > 0 && ctx.step >= self.max_rounds {
            command.update::<StopRequest>(StoppedReason {
                code: "max_rounds".to_owned(),
                detail: Some(format!("reached the limit of {} rounds", self.max_rounds)),
            });
        }
        Ok(command)
    }
}

impl Plugin for MaxRoundsPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new(Self::ID, "Ends the run after max_rounds steps")
    }

    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        r.register_key::<StopRequest>(StateKeyOptions::default())?;
        r.register_phase_hook(
            "max_rounds",
            Phase::StepEnd,
            MaxRoundsHook {
                max_rounds: self.max_rounds,
            },
        )
    }
}
