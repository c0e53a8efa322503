//! Runtime-owned keys that carry scheduled actions between phases.

use serde::{Deserialize, Serialize};

use super::command::ScheduledAction;
use super::key::{KeyScope, StateKey};
use crate::JsonValue;
use crate::phase::Phase;

/// A scheduled action waiting for its phase, with a store-assigned sequence id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingAction {
    /// Monotonic id within the run; preserves scheduling order.
    pub id: u64,
    /// The action.
    #[serde(flatten)]
    pub action: ScheduledAction,
}

/// Actions scheduled but not yet executed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingActions {
    /// Next id to assign.
    pub next_id: u64,
    /// Waiting actions in scheduling order.
    pub actions: Vec<PendingAction>,
}

impl PendingActions {
    /// The waiting actions that belong to `phase`, in scheduling order.
    pub fn due(&self, phase: Phase) -> impl Iterator<Item = &PendingAction> {
        self.actions.iter().filter(move |p| p.action.phase == phase)
    }

    /// Whether any action waits for `phase`.
    pub fn has_due(&self, phase: Phase) -> bool {
        self.due(phase).next().is_some()
    }
}

/// Changes to [`PendingActions`].
#[derive(Debug)]
pub enum PendingActionsUpdate {
    /// Appends actions, assigning ids.
    Push(Vec<ScheduledAction>),
    /// Removes the actions with these ids.
    Remove(Vec<u64>),
}

/// The queue of scheduled actions (`PendingScheduledActions` in the book).
#[derive(Debug)]
pub struct PendingScheduledActions;

impl StateKey for PendingScheduledActions {
    const KEY: &'static str = "__runtime.pending_actions";
    const SCOPE: KeyScope = KeyScope::Run;
    type Value = PendingActions;
    type Update = PendingActionsUpdate;

    fn apply(value: &mut PendingActions, update: PendingActionsUpdate) {
        match update {
            PendingActionsUpdate::Push(actions) => {
                for action in actions {
                    value.actions.push(PendingAction {
                        id: value.next_id,
                        action,
                    });
                    value.next_id += 1;
                }
            }
            PendingActionsUpdate::Remove(ids) => value.actions.retain(|p| !ids.contains(&p.id)),
        }
    }
}

/// An action whose handler returned an error; recorded, not retried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedScheduledAction {
    /// The action key.
    pub key: String,
    /// The phase it ran in.
    pub phase: Phase,
    /// Its payload.
    pub payload: JsonValue,
    /// The handler's error.
    pub error: String,
}

/// Actions that failed during this run, for plugins and tests to inspect.
#[derive(Debug)]
pub struct FailedScheduledActions;

impl StateKey for FailedScheduledActions {
    const KEY: &'static str = "__runtime.failed_actions";
    const SCOPE: KeyScope = KeyScope::Run;
    type Value = Vec<FailedScheduledAction>;
    type Update = FailedScheduledAction;

    fn apply(value: &mut Vec<FailedScheduledAction>, update: FailedScheduledAction) {
        value.push(update);
    }
}
