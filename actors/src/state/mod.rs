//! The typed state engine.

mod persisted;

pub use persisted::{PersistedState, UnknownKeyPolicy};
