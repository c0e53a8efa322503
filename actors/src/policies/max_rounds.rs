//! `MaxRoundsPlugin`: the round limit alone, as a stop-condition plugin.

use std::sync::Arc;

use super::builtin::MaxRoundsPolicy;
use super::plugin::StopConditionPlugin;
use crate::error::StateError;
use crate::plugin::{Plugin, PluginDescriptor, PluginRegistrar};

/// A [`StopConditionPlugin`] holding only a [`MaxRoundsPolicy`], for hosts that want
/// the round limit and nothing else (book: the convenience wrapper).
///
/// It registers the same state keys as `StopConditionPlugin`, so installing both is
/// `StateError::KeyAlreadyRegistered`. The resolver does not use it: every resolved
/// agent gets one `StopConditionPlugin` that already includes `max_rounds`.
#[derive(Debug, Clone)]
pub struct MaxRoundsPlugin {
    inner: StopConditionPlugin,
}

impl MaxRoundsPlugin {
    /// The id the book registers it under.
    pub const ID: &'static str = "stop-condition:max-rounds";

    /// Stops runs after `max_rounds` steps; 0 disables the limit.
    pub fn new(max_rounds: u32) -> Self {
        Self {
            inner: StopConditionPlugin::new(vec![Arc::new(MaxRoundsPolicy::new(max_rounds))]),
        }
    }
}

impl Plugin for MaxRoundsPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new(Self::ID, "Ends the run after max_rounds steps")
    }

    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        self.inner.register(r)
    }
}
