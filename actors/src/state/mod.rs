//! The typed state engine.
//!
//! State is a map of typed slots ([`StateKey`]s) owned by one thread. Readers take a
//! [`Snapshot`] (an `Arc` clone, valid forever); writers produce a [`StateCommand`]
//! (updates, scheduled actions, effects) that the [`StateStore`] commits atomically as
//! one new revision. Run-scoped keys reset at every run start; thread-scoped keys live
//! as long as the thread. Persistent keys are exported to and restored from a
//! [`PersistedState`] at checkpoints.

mod batch;
mod command;
mod key;
mod map;
mod pending;
mod persisted;
mod profile;
mod registry;
mod snapshot;
mod store;

pub use batch::{MutationBatch, TouchedKey};
pub(crate) use command::decode_payload;
pub use command::{EffectSpec, ScheduledAction, ScheduledActionSpec, StateCommand, TypedEffect};
pub use key::{KeyScope, MergeStrategy, StateKey, StateKeyOptions};
pub use map::StateMap;
pub use pending::{
    FailedScheduledAction, FailedScheduledActions, PendingAction, PendingActions,
    PendingActionsUpdate, PendingScheduledActions,
};
pub use persisted::{EncodedValue, PersistedState, UnknownKeyPolicy};
pub use profile::{InMemoryProfileStore, ProfileAccess, ProfileKey, ProfileStore, StateScope};
pub use registry::{KeyRegistration, KeyRegistry};
pub use snapshot::Snapshot;
pub use store::{CommitEvent, CommitHook, CommitOutcome, HandlerCatalog, StateStore};
