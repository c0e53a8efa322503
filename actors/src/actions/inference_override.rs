//! `SetInferenceOverride`: per-step inference parameter overrides.

use async_trait::async_trait;

use crate::contract::InferenceOverride;
use crate::error::StateError;
use crate::phase::{Phase, PhaseContext};
use crate::plugin::TypedScheduledActionHandler;
use crate::state::{ScheduledActionSpec, StateCommand, StateKey};

/// Changes to the step's merged override.
#[derive(Debug)]
pub enum InferenceOverrideUpdate {
    /// Merges an override, each set field winning over the previous value.
    Merge(InferenceOverride),
    /// Drops the override (after the inference it applied to).
    Clear,
}

/// State key holding the merged override for the coming inference.
#[derive(Debug)]
pub struct InferenceOverrideKey;

impl StateKey for InferenceOverrideKey {
    const KEY: &'static str = "runtime.inference_override";
    type Value = InferenceOverride;
    type Update = InferenceOverrideUpdate;

    fn apply(value: &mut InferenceOverride, update: InferenceOverrideUpdate) {
        match update {
            InferenceOverrideUpdate::Merge(other) => value.merge(other),
            InferenceOverrideUpdate::Clear => *value = InferenceOverride::default(),
        }
    }
}

/// Overrides model, temperature, max tokens, top-p or reasoning effort for the
/// current step (book: `SetInferenceOverride`); last writer wins per field.
#[derive(Debug)]
pub struct SetInferenceOverride;

impl ScheduledActionSpec for SetInferenceOverride {
    const KEY: &'static str = "runtime.set_inference_override";
    const PHASE: Phase = Phase::BeforeInference;
    type Payload = InferenceOverride;
}

pub(super) struct SetInferenceOverrideHandler;

#[async_trait]
impl TypedScheduledActionHandler<SetInferenceOverride> for SetInferenceOverrideHandler {
    async fn handle_typed(
        &self,
        _ctx: &PhaseContext,
        payload: InferenceOverride,
    ) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        command.update::<InferenceOverrideKey>(InferenceOverrideUpdate::Merge(payload));
        Ok(command)
    }
}
