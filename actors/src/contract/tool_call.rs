//! The durable lifecycle of one tool call, and the run status it implies.
//!
//! ```text
//! New --> Running --+--> Succeeded (terminal)
//!                   +--> Failed    (terminal)
//!                   +--> Cancelled (terminal)
//!                   +--> Suspended --> Resuming --+--> Running
//!                                                 +--> Suspended (re-suspend)
//!                                                 +--> Succeeded/Failed/Cancelled
//! ```
//!
//! `New` may also jump straight to `Suspended` or a terminal state, because
//! `BeforeToolExecute` intercepts can suspend, block or set a result before the tool
//! runs. `Suspended` only goes to `Resuming` (a decision arrived) or `Cancelled`.
//! A run's status is derived from all its calls' states by [`derive_run_status`].

use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::contract::message::ToolCall;
use crate::contract::run::RunStatus;
use crate::contract::suspension::{SuspendTicket, ToolCallResume};
use crate::contract::tool::ToolResult;
use crate::ids::{ApprovalId, ToolCallId};

/// Where a tool call is in its lifecycle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    /// Requested by the model, not yet executing.
    #[default]
    New,
    /// Executing.
    Running,
    /// Waiting for an external decision.
    Suspended,
    /// A decision arrived; about to re-execute or settle.
    Resuming,
    /// Completed successfully (terminal).
    Succeeded,
    /// Completed with an error (terminal).
    Failed,
    /// Cancelled (terminal).
    Cancelled,
}

/// A refused [`ToolCallStatus`] transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("tool call status cannot go from {from:?} to {to:?}")]
pub struct ToolCallTransitionError {
    /// The current status.
    pub from: ToolCallStatus,
    /// The refused target.
    pub to: ToolCallStatus,
}

impl ToolCallStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [ToolCallStatus; 7] = [
        Self::New,
        Self::Running,
        Self::Suspended,
        Self::Resuming,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
    ];

    /// Whether the call is settled for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// Whether `self → to` is allowed; every status may "transition" to itself.
    pub fn can_transition_to(self, to: ToolCallStatus) -> bool {
        use ToolCallStatus::*;
        if self == to {
            return true;
        }
        match self {
            New => matches!(to, Running | Suspended | Succeeded | Failed | Cancelled),
            Running => matches!(to, Succeeded | Failed | Cancelled | Suspended),
            Suspended => matches!(to, Resuming | Cancelled),
            Resuming => matches!(to, Running | Suspended | Succeeded | Failed | Cancelled),
            Succeeded | Failed | Cancelled => false,
        }
    }

    /// The new status, or an error naming the refused transition.
    pub fn transition(self, to: ToolCallStatus) -> Result<Self, ToolCallTransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(ToolCallTransitionError { from: self, to })
        }
    }
}

/// How a finished tool call ended, as reported in `ToolCallDone` events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallOutcome {
    /// The tool produced a result.
    Succeeded,
    /// The tool failed.
    Failed,
    /// The call is waiting for a decision.
    Suspended,
}

/// The durable state of one tool call, persisted with thread state across suspensions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallState {
    /// The call.
    pub call_id: ToolCallId,
    /// The tool's name.
    pub tool_name: String,
    /// Arguments for the next execution (a resume mode may replace them).
    pub arguments: JsonValue,
    /// Lifecycle state.
    #[serde(default)]
    pub status: ToolCallStatus,
    /// How many times the call entered `Running`.
    #[serde(default)]
    pub attempt: u32,
    /// The ticket while suspended. Boxed: a ticket is several hundred bytes and
    /// most calls never hold one, while call states are cloned and kept per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<Box<SuspendTicket>>,
    /// The approval its suspension asked for (none for a suspension that waits
    /// elsewhere: a child run's or a remote task's, which has its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<ApprovalId>,
    /// The decision that resumed or cancelled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<ToolCallResume>,
    /// The result once settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ToolResult>,
    /// Last change, unix millis.
    #[serde(default)]
    pub updated_at: u64,
}

impl ToolCallState {
    /// The `New` state of a call the model just requested.
    pub fn new(call: &ToolCall) -> Self {
        Self {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            arguments: call.arguments.clone(),
            status: ToolCallStatus::New,
            attempt: 0,
            ticket: None,
            approval_id: None,
            decision: None,
            result: None,
            updated_at: 0,
        }
    }

    /// Moves to `to` at `now_ms`; a refused transition changes nothing.
    ///
    /// Entering `Running` from another status counts one more attempt.
    pub fn transition_to(
        &mut self,
        to: ToolCallStatus,
        now_ms: u64,
    ) -> Result<(), ToolCallTransitionError> {
        let from = self.status;
        self.status = from.transition(to)?;
        if to == ToolCallStatus::Running && from != ToolCallStatus::Running {
            self.attempt = self.attempt.saturating_add(1);
        }
        self.updated_at = now_ms;
        Ok(())
    }
}

/// The run status implied by its tool calls' states.
///
/// Follows the book's decision table: any `Running` or `Resuming` call → `Running`;
/// otherwise any `Suspended` call → `Waiting`; otherwise `Done` (every call settled,
/// the step can proceed). One addition: calls still `New` (requested but not yet
/// started, as at the start of a step) keep the run `Running` when nothing is
/// suspended, as the book's timeline shows at t0; when something is suspended they do
/// not prevent `Waiting` (sequential execution stops at the first suspension and
/// leaves later calls `New`). No calls at all → `Done`.
pub fn derive_run_status<'a>(calls: impl IntoIterator<Item = &'a ToolCallState>) -> RunStatus {
    let mut has_suspended = false;
    let mut has_new = false;
    for call in calls {
        match call.status {
            ToolCallStatus::Running | ToolCallStatus::Resuming => return RunStatus::Running,
            ToolCallStatus::Suspended => has_suspended = true,
            ToolCallStatus::New => has_new = true,
            ToolCallStatus::Succeeded | ToolCallStatus::Failed | ToolCallStatus::Cancelled => {}
        }
    }
    if has_suspended {
        RunStatus::Waiting
    } else if has_new {
        RunStatus::Running
    } else {
        RunStatus::Done
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use ToolCallStatus::*;

    #[test]
    fn exhaustive_transition_table() {
        // Rows: from; columns: to, in ToolCallStatus::ALL order
        // (New, Running, Suspended, Resuming, Succeeded, Failed, Cancelled).
        let table: [(ToolCallStatus, [bool; 7]); 7] = [
            (New, [true, true, true, false, true, true, true]),
            (Running, [false, true, true, false, true, true, true]),
            (Suspended, [false, false, true, true, false, false, true]),
            (Resuming, [false, true, true, true, true, true, true]),
            (Succeeded, [false, false, false, false, true, false, false]),
            (Failed, [false, false, false, false, false, true, false]),
            (Cancelled, [false, false, false, false, false, false, true]),
        ];
        for (from, row) in table {
            for (to, allowed) in ToolCallStatus::ALL.into_iter().zip(row) {
                assert_eq!(from.can_transition_to(to), allowed, "{from:?} -> {to:?}");
                match from.transition(to) {
                    Ok(next) => {
                        assert!(allowed, "{from:?} -> {to:?} should be refused");
                        assert_eq!(next, to);
                    }
                    Err(err) => {
                        assert!(!allowed, "{from:?} -> {to:?} should be allowed");
                        assert_eq!(err, ToolCallTransitionError { from, to });
                    }
                }
            }
        }
    }

    #[test]
    fn terminal_statuses() {
        let terminal: Vec<_> = ToolCallStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(terminal, vec![Succeeded, Failed, Cancelled]);
    }

    #[test]
    fn status_and_outcome_json_names() {
        let names: Vec<_> = ToolCallStatus::ALL
            .iter()
            .map(|s| serde_json::to_value(s).unwrap())
            .collect();
        assert_eq!(
            names,
            vec![
                json!("new"),
                json!("running"),
                json!("suspended"),
                json!("resuming"),
                json!("succeeded"),
                json!("failed"),
                json!("cancelled")
            ]
        );
        assert_eq!(
            serde_json::to_value(ToolCallOutcome::Suspended).unwrap(),
            json!("suspended")
        );
    }

    fn state(id: &str) -> ToolCallState {
        ToolCallState::new(&ToolCall::new(
            ToolCallId::new(id).unwrap(),
            "tool",
            json!({"n": 1}),
        ))
    }

    #[test]
    fn transition_to_updates_or_refuses_cleanly() {
        let mut s = state("c1");
        s.transition_to(Running, 10).unwrap();
        assert_eq!((s.status, s.attempt, s.updated_at), (Running, 1, 10));
        s.transition_to(Running, 11).unwrap();
        assert_eq!(s.attempt, 1, "a self-transition is not a new attempt");
        s.transition_to(Suspended, 12).unwrap();
        let before = s.clone();
        let err = s.transition_to(Running, 13).unwrap_err();
        assert_eq!(
            err,
            ToolCallTransitionError {
                from: Suspended,
                to: Running
            }
        );
        assert_eq!(s, before, "a refused transition changes nothing");
        s.transition_to(Resuming, 14).unwrap();
        s.transition_to(Running, 15).unwrap();
        assert_eq!(s.attempt, 2);
        s.transition_to(Succeeded, 16).unwrap();
        assert!(s.transition_to(Failed, 17).is_err());
    }

    #[test]
    fn state_json_round_trip() {
        let mut s = state("c1");
        s.result = Some(ToolResult::success("tool", json!("ok")));
        s.status = Succeeded;
        let value = serde_json::to_value(&s).unwrap();
        assert_eq!(
            value,
            json!({
                "call_id": "c1",
                "tool_name": "tool",
                "arguments": {"n": 1},
                "status": "succeeded",
                "attempt": 0,
                "result": {"tool_name": "tool", "status": "success", "data": "ok"},
                "updated_at": 0
            })
        );
        assert_eq!(serde_json::from_value::<ToolCallState>(value).unwrap(), s);
    }

    fn with_statuses(statuses: &[ToolCallStatus]) -> Vec<ToolCallState> {
        statuses
            .iter()
            .enumerate()
            .map(|(i, status)| {
                let mut s = state(&format!("c{i}"));
                s.status = *status;
                s
            })
            .collect()
    }

    #[test]
    fn decision_table() {
        // Any Running/Resuming → Running, whatever else is there.
        for active in [Running, Resuming] {
            for other in ToolCallStatus::ALL {
                assert_eq!(
                    derive_run_status(&with_statuses(&[other, active])),
                    RunStatus::Running
                );
            }
        }
        // No Running/Resuming, some Suspended → Waiting.
        for other in [New, Suspended, Succeeded, Failed, Cancelled] {
            assert_eq!(
                derive_run_status(&with_statuses(&[Suspended, other])),
                RunStatus::Waiting
            );
        }
        // Neither → Done when all calls are terminal.
        assert_eq!(
            derive_run_status(&with_statuses(&[Succeeded, Failed, Cancelled])),
            RunStatus::Done
        );
        assert_eq!(derive_run_status(&[]), RunStatus::Done);
        // Calls not yet started keep the step running.
        assert_eq!(
            derive_run_status(&with_statuses(&[New, Succeeded])),
            RunStatus::Running
        );
    }

    #[test]
    fn book_parallel_timeline() {
        // tool_A and tool_B need approval; tool_C runs normally.
        let timeline = [
            ("t0", [New, New, New], RunStatus::Running),
            ("t1", [Suspended, New, Running], RunStatus::Running),
            ("t2", [Suspended, Suspended, Running], RunStatus::Running),
            ("t3", [Suspended, Suspended, Succeeded], RunStatus::Waiting),
            ("t4", [Resuming, Suspended, Succeeded], RunStatus::Running),
            ("t5", [Succeeded, Suspended, Succeeded], RunStatus::Waiting),
            ("t6", [Succeeded, Resuming, Succeeded], RunStatus::Running),
            ("t7", [Succeeded, Succeeded, Succeeded], RunStatus::Done),
        ];
        let mut calls = with_statuses(&[New, New, New]);
        let mut now = 0;
        for (label, statuses, expected) in timeline {
            for (call, to) in calls.iter_mut().zip(statuses) {
                now += 1;
                call.transition_to(to, now)
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
            }
            assert_eq!(derive_run_status(&calls), expected, "{label}");
        }
    }
}
