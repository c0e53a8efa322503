//! `SkipInference`: a plugin ends the run instead of calling the model.

use async_trait::async_trait;

use crate::error::StateError;
use crate::phase::{Phase, PhaseContext};
use crate::plugin::TypedScheduledActionHandler;
use crate::state::{ScheduledActionSpec, StateCommand, StateKey};

/// State key: why a plugin asked to skip the coming inference (and end the run with
/// `TerminationReason::BehaviorRequested`).
#[derive(Debug)]
pub struct BehaviorRequestKey;

impl StateKey for BehaviorRequestKey {
    const KEY: &'static str = "runtime.behavior_request";
    type Value = Option<String>;
    type Update = String;

    /// The first request wins.
    fn apply(value: &mut Option<String>, update: String) {
        value.get_or_insert(update);
    }
}

/// Skips the coming inference and ends the run (book: "Plugins can skip inference by
/// setting a behavior flag"); the payload says why.
#[derive(Debug)]
pub struct SkipInference;

impl ScheduledActionSpec for SkipInference {
    const KEY: &'static str = "runtime.skip_inference";
    const PHASE: Phase = Phase::BeforeInference;
    type Payload = String;
}

pub(super) struct SkipInferenceHandler;

#[async_trait]
impl TypedScheduledActionHandler<SkipInference> for SkipInferenceHandler {
    async fn handle_typed(
        &self,
        _ctx: &PhaseContext,
        reason: String,
    ) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        command.update::<BehaviorRequestKey>(reason);
        Ok(command)
    }
}
