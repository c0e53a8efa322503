//! State keys the run loop itself owns: tool-call states and run lifecycle.
//!
//! They live in the thread's state like any plugin key, so they are checkpointed with
//! it and plugins can read them (`__runtime.tool_call_states`).

use serde::{Deserialize, Serialize};

use crate::contract::{ToolCallState, ToolCallStatus};
use crate::ids::ToolCallId;
use crate::state::{KeyScope, StateKey};

/// The calls of the current step, in the order the model requested them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCalls {
    /// One state per call.
    pub calls: Vec<ToolCallState>,
}

impl ToolCalls {
    /// The state of one call.
    pub fn get(&self, id: &ToolCallId) -> Option<&ToolCallState> {
        self.calls.iter().find(|c| &c.call_id == id)
    }

    /// Calls in a given status, in request order.
    pub fn with_status(&self, status: ToolCallStatus) -> impl Iterator<Item = &ToolCallState> {
        self.calls.iter().filter(move |c| c.status == status)
    }

    /// Whether any call has this status.
    pub fn any(&self, status: ToolCallStatus) -> bool {
        self.with_status(status).next().is_some()
    }

    /// Whether every call reached a terminal status.
    pub fn all_terminal(&self) -> bool {
        self.calls.iter().all(|c| c.status.is_terminal())
    }
}

/// Changes to [`ToolCalls`].
#[derive(Debug)]
pub enum ToolCallsUpdate {
    /// Starts a new step's calls.
    Replace(Vec<ToolCallState>),
    /// Replaces one call's state (matched by id).
    Put(Box<ToolCallState>),
}

/// State key: the tool calls of the current step.
#[derive(Debug)]
pub struct ToolCallStates;

impl StateKey for ToolCallStates {
    const KEY: &'static str = "__runtime.tool_call_states";
    type Value = ToolCalls;
    type Update = ToolCallsUpdate;

    fn apply(value: &mut ToolCalls, update: ToolCallsUpdate) {
        match update {
            ToolCallsUpdate::Replace(calls) => value.calls = calls,
            ToolCallsUpdate::Put(state) => {
                match value.calls.iter_mut().find(|c| c.call_id == state.call_id) {
                    Some(slot) => *slot = *state,
                    None => value.calls.push(*state),
                }
            }
        }
    }
}

/// Counters of the current run that must survive passivation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLifecycle {
    /// Steps started so far (1-based once the first step starts).
    pub step: u32,
    /// Sequence number of the next event of the run.
    pub next_event_seq: u64,
    /// The id of the current step's assistant message, kept so a step reopened after
    /// rehydration announces the same message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_message_id: Option<crate::ids::MessageId>,
    /// The step whose history was last checked for compaction (once per step).
    #[serde(default)]
    pub compaction_checked_step: u32,
}

/// State key: [`RunLifecycle`] (`__runtime.run_lifecycle`).
#[derive(Debug)]
pub struct RunLifecycleKey;

impl StateKey for RunLifecycleKey {
    const KEY: &'static str = "__runtime.run_lifecycle";
    const SCOPE: KeyScope = KeyScope::Run;
    type Value = RunLifecycle;
    type Update = RunLifecycle;

    fn apply(value: &mut RunLifecycle, update: RunLifecycle) {
        *value = update;
    }
}
