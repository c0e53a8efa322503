//! The serialized form of a state map, as stores keep it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::JsonValue;

/// Persistent state keys of one thread, encoded as JSON by each key's `encode`.
///
/// Stores save it with every checkpoint; `StateStore::restore` turns it back into a
/// typed map. Keys are sorted so the encoding is deterministic.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PersistedState {
    /// Store revision at export time.
    pub revision: u64,
    /// Encoded value per state key string.
    #[serde(default)]
    pub extensions: BTreeMap<String, JsonValue>,
}

/// What `restore` does with a persisted key that no plugin registered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownKeyPolicy {
    /// Refuse the whole restore (nothing is changed).
    #[default]
    Error,
    /// Restore the rest; the unknown key is kept aside untouched, re-exported with
    /// the next checkpoint and handed back if a plugin registers it later.
    Skip,
}
