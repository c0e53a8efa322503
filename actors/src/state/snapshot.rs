//! `Snapshot`: an immutable, versioned view of the state.

use std::sync::{Arc, LazyLock};

use super::key::StateKey;
use super::map::StateMap;

/// The state as of one revision; what hooks, actions, effects and tools read.
///
/// Taking one is an `Arc` clone, so every phase and every tool call can have its own
/// consistent view without copying values.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The store revision this view was taken at.
    pub revision: u64,
    /// The values.
    pub ext: Arc<StateMap>,
}

impl Default for Snapshot {
    /// An empty view at revision 0. Empty views share one map, so making one (the
    /// phase engine does, to let go of a frozen view before each commit) allocates
    /// nothing.
    fn default() -> Self {
        static EMPTY: LazyLock<Arc<StateMap>> = LazyLock::new(Arc::default);
        Self {
            revision: 0,
            ext: Arc::clone(&EMPTY),
        }
    }
}

impl Snapshot {
    /// A snapshot of `ext` at `revision`.
    pub fn new(revision: u64, ext: Arc<StateMap>) -> Self {
        Self { revision, ext }
    }

    /// The store revision this view was taken at.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The value of `K` at this revision.
    pub fn get<K: StateKey>(&self) -> Option<&K::Value> {
        self.ext.get::<K>()
    }

    /// The underlying map.
    pub fn ext(&self) -> &StateMap {
        &self.ext
    }
}
