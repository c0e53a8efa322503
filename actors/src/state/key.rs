//! `StateKey`: a typed, scoped slot in a thread's state.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::persisted::EncodedValue;
use crate::error::StateError;

/// When a key's value is cleared relative to run boundaries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyScope {
    /// Reset to its default at the start of every run.
    #[default]
    Run,
    /// Survives across runs on the same thread.
    Thread,
}

/// How concurrent updates to one key from parallel hooks or tools are reconciled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeStrategy {
    /// Concurrent writes conflict; the phase engine falls back to serial execution.
    #[default]
    Exclusive,
    /// Updates commute; concurrent batches are concatenated.
    Commutative,
}

/// A typed state slot, declared at compile time by a plugin or tool.
///
/// The key type itself is a zero-sized marker; `Value` is what the slot holds and
/// `Update` is the command that transforms it. `apply` is the only way a value
/// changes, which is what makes commits replayable and merges well defined.
pub trait StateKey: 'static + Send + Sync {
    /// Unique string identifier, used in persistence and diagnostics.
    const KEY: &'static str;
    /// Parallel merge strategy.
    const MERGE: MergeStrategy = MergeStrategy::Exclusive;
    /// Lifetime scope.
    const SCOPE: KeyScope = KeyScope::Run;

    /// The stored value.
    type Value: Clone + Default + Serialize + DeserializeOwned + Send + Sync + 'static;
    /// The update command.
    type Update: Send + 'static;

    /// Applies one update to the current value.
    fn apply(value: &mut Self::Value, update: Self::Update);

    /// Encodes a value for persistence.
    fn encode(value: &Self::Value) -> Result<EncodedValue, StateError> {
        EncodedValue::encode(value).map_err(|e| StateError::KeyEncode {
            key: Self::KEY.to_owned(),
            message: e.to_string(),
        })
    }

    /// Decodes a persisted value.
    fn decode(value: &EncodedValue) -> Result<Self::Value, StateError> {
        value.decode().map_err(|e| StateError::KeyDecode {
            key: Self::KEY.to_owned(),
            message: e.to_string(),
        })
    }
}

/// Options given when a key is registered with the runtime.
///
/// `scope` is optional: `None` keeps the key's own [`StateKey::SCOPE`], so registering
/// with `StateKeyOptions::default()` never silently changes a thread-scoped key into a
/// run-scoped one (see `docs/decisions/0002-state-key-scope-option.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateKeyOptions {
    /// Whether the key is exported in checkpoints.
    pub persistent: bool,
    /// Whether the key's value survives uninstalling its plugin.
    pub retain_on_uninstall: bool,
    /// Scope override; `None` uses the key's declared scope.
    pub scope: Option<KeyScope>,
}

impl Default for StateKeyOptions {
    fn default() -> Self {
        Self {
            persistent: true,
            retain_on_uninstall: false,
            scope: None,
        }
    }
}

impl StateKeyOptions {
    /// Options for a key that lives in memory only (never checkpointed).
    pub fn transient() -> Self {
        Self {
            persistent: false,
            ..Self::default()
        }
    }

    /// Overrides the key's declared scope.
    pub fn with_scope(mut self, scope: KeyScope) -> Self {
        self.scope = Some(scope);
        self
    }
}
