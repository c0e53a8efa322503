//! `StateCommand`: what a hook, action handler or tool hands back to the runtime.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::batch::MutationBatch;
use super::key::StateKey;
use crate::JsonValue;
use crate::error::StateError;
use crate::phase::Phase;

/// A typed request for work in a given phase's EXECUTE stage.
///
/// Payloads travel as JSON so pending actions can be checkpointed with the state.
pub trait ScheduledActionSpec: 'static + Send + Sync {
    /// Globally unique action key, `"<plugin>.<action>"` by convention.
    const KEY: &'static str;
    /// The phase whose EXECUTE stage runs the action.
    const PHASE: Phase;
    /// The action's argument.
    type Payload: Serialize + DeserializeOwned + Send + Sync + 'static;
}

/// A scheduled action in erased form: key, target phase and JSON payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduledAction {
    /// The action key.
    pub key: String,
    /// The phase that runs it.
    pub phase: Phase,
    /// The encoded payload.
    pub payload: JsonValue,
}

impl ScheduledAction {
    /// Encodes a typed action.
    pub fn from_spec<A: ScheduledActionSpec>(payload: A::Payload) -> Result<Self, StateError> {
        let payload = encode_payload(A::KEY, &payload)?;
        Ok(Self {
            key: A::KEY.to_owned(),
            phase: A::PHASE,
            payload,
        })
    }

    /// Decodes the payload as `A`'s.
    pub fn decode<A: ScheduledActionSpec>(&self) -> Result<A::Payload, StateError> {
        decode_payload(A::KEY, self.payload.clone())
    }
}

/// A typed, fire-and-forget side effect dispatched after commit.
pub trait EffectSpec: 'static + Send + Sync {
    /// Globally unique effect key, `"<plugin>.<effect>"` by convention.
    const KEY: &'static str;
    /// The effect's payload.
    type Payload: Serialize + DeserializeOwned + Send + Sync + 'static;
}

/// An effect in erased form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypedEffect {
    /// The effect key.
    pub key: String,
    /// The encoded payload.
    pub payload: JsonValue,
}

impl TypedEffect {
    /// Encodes a typed effect.
    pub fn from_spec<E: EffectSpec>(payload: E::Payload) -> Result<Self, StateError> {
        let payload = encode_payload(E::KEY, &payload)?;
        Ok(Self {
            key: E::KEY.to_owned(),
            payload,
        })
    }

    /// Decodes the payload as `E`'s.
    pub fn decode<E: EffectSpec>(&self) -> Result<E::Payload, StateError> {
        decode_payload(E::KEY, self.payload.clone())
    }
}

/// Encodes a key's, action's or effect's value as JSON, naming the key on failure.
pub(crate) fn encode_payload<T: Serialize + ?Sized>(
    key: &str,
    value: &T,
) -> Result<JsonValue, StateError> {
    serde_json::to_value(value).map_err(|e| StateError::KeyEncode {
        key: key.to_owned(),
        message: e.to_string(),
    })
}

/// Decodes a key's, action's or effect's JSON value, naming the key on failure.
pub(crate) fn decode_payload<T: DeserializeOwned>(
    key: &str,
    payload: JsonValue,
) -> Result<T, StateError> {
    serde_json::from_value(payload).map_err(|e| StateError::KeyDecode {
        key: key.to_owned(),
        message: e.to_string(),
    })
}

/// State updates plus scheduled actions plus effects, committed as one unit.
#[derive(Debug, Default)]
pub struct StateCommand {
    batch: MutationBatch,
    actions: Vec<ScheduledAction>,
    effects: Vec<TypedEffect>,
}

impl StateCommand {
    /// An empty command.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues an update for `K`.
    pub fn update<K: StateKey>(&mut self, update: K::Update) -> &mut Self {
        self.batch.update::<K>(update);
        self
    }

    /// Schedules an action for `A::PHASE`.
    pub fn schedule_action<A: ScheduledActionSpec>(
        &mut self,
        payload: A::Payload,
    ) -> Result<&mut Self, StateError> {
        self.actions.push(ScheduledAction::from_spec::<A>(payload)?);
        Ok(self)
    }

    /// Schedules an already-erased action.
    pub fn schedule(&mut self, action: ScheduledAction) -> &mut Self {
        self.actions.push(action);
        self
    }

    /// Emits an effect, dispatched after this command commits.
    pub fn emit<E: EffectSpec>(&mut self, payload: E::Payload) -> Result<&mut Self, StateError> {
        self.effects.push(TypedEffect::from_spec::<E>(payload)?);
        Ok(self)
    }

    /// Appends another command's contents after this one's.
    pub fn extend(&mut self, other: StateCommand) -> Result<(), StateError> {
        self.batch.extend(other.batch)?;
        self.actions.extend(other.actions);
        self.effects.extend(other.effects);
        Ok(())
    }

    /// Whether the command does nothing.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.actions.is_empty() && self.effects.is_empty()
    }

    /// The state updates.
    pub fn batch(&self) -> &MutationBatch {
        &self.batch
    }

    /// The state updates, mutably (e.g. to stamp a base revision).
    pub fn batch_mut(&mut self) -> &mut MutationBatch {
        &mut self.batch
    }

    /// The scheduled actions.
    pub fn actions(&self) -> &[ScheduledAction] {
        &self.actions
    }

    /// The effects.
    pub fn effects(&self) -> &[TypedEffect] {
        &self.effects
    }

    /// Splits the command into its three parts.
    pub fn into_parts(self) -> (MutationBatch, Vec<ScheduledAction>, Vec<TypedEffect>) {
        (self.batch, self.actions, self.effects)
    }
}

impl From<MutationBatch> for StateCommand {
    fn from(batch: MutationBatch) -> Self {
        Self {
            batch,
            ..Self::default()
        }
    }
}
