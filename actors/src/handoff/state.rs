//! [`ActiveAgentKey`] and the actions that change it.

use crate::contract::HandoffState;
use crate::state::{KeyScope, StateKey};

/// A change to a thread's [`HandoffState`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoffAction {
    /// Switch to this variant at the next RunStart or StepEnd.
    Request(String),
    /// Make this variant active now (no pending step boundary).
    Activate(String),
    /// Back to the base agent; any pending request is dropped.
    Clear,
    /// Drop the pending request, keeping the active variant (a refused request).
    Withdraw,
}

/// Thread-scoped state key: the thread's [`HandoffState`], persisted with its
/// checkpoints so the next run starts with the variant the last one left active.
#[derive(Debug)]
pub struct ActiveAgentKey;

impl StateKey for ActiveAgentKey {
    const KEY: &'static str = "agent_handoff.active_agent";
    const SCOPE: KeyScope = KeyScope::Thread;
    type Value = HandoffState;
    type Update = HandoffAction;

    fn apply(value: &mut HandoffState, update: HandoffAction) {
        match update {
            HandoffAction::Request(variant) => value.requested_agent = Some(variant),
            HandoffAction::Activate(variant) => {
                value.active_agent = Some(variant);
                value.requested_agent = None;
            }
            HandoffAction::Clear => *value = HandoffState::default(),
            HandoffAction::Withdraw => value.requested_agent = None,
        }
    }
}

/// Asks for a switch to `variant` at the next step boundary.
pub fn request_handoff(variant: impl Into<String>) -> HandoffAction {
    HandoffAction::Request(variant.into())
}

/// Makes `variant` active without waiting for a request to be promoted.
pub fn activate_handoff(variant: impl Into<String>) -> HandoffAction {
    HandoffAction::Activate(variant.into())
}

/// Returns the thread to its base agent.
pub fn clear_handoff() -> HandoffAction {
    HandoffAction::Clear
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(start: HandoffState, action: HandoffAction) -> HandoffState {
        let mut value = start;
        ActiveAgentKey::apply(&mut value, action);
        value
    }

    #[test]
    fn a_request_waits_beside_the_active_variant() {
        let state = applied(
            applied(HandoffState::default(), activate_handoff("writer")),
            request_handoff("researcher"),
        );
        assert_eq!(state.active_agent.as_deref(), Some("writer"));
        assert_eq!(state.requested_agent.as_deref(), Some("researcher"));
    }

    #[test]
    fn activation_consumes_the_request() {
        let state = applied(
            applied(HandoffState::default(), request_handoff("researcher")),
            activate_handoff("researcher"),
        );
        assert_eq!(state.active_agent.as_deref(), Some("researcher"));
        assert_eq!(state.requested_agent, None);
    }

    #[test]
    fn clear_returns_to_the_base_and_withdraw_keeps_the_active_variant() {
        let both = HandoffState {
            active_agent: Some("writer".into()),
            requested_agent: Some("nobody".into()),
        };
        assert_eq!(
            applied(both.clone(), clear_handoff()),
            HandoffState::default()
        );
        let withdrawn = applied(both, HandoffAction::Withdraw);
        assert_eq!(withdrawn.active_agent.as_deref(), Some("writer"));
        assert_eq!(withdrawn.requested_agent, None);
    }
}
