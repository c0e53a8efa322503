//! Run lifecycle: status, termination reasons, waiting state and the run record.
//!
//! A run's coarse lifecycle is [`RunStatus`]:
//!
//! ```text
//! Running --+--> Waiting --+--> Running (resume)
//!           |              |
//!           +--> Done      +--> Done
//! ```
//!
//! `Done` is terminal. When a run ends, a [`TerminationReason`] says why; a suspended
//! run is not finished but `Waiting`, and its [`RunWaitingState`] lists what it waits
//! for. [`RunRecord`] is what run stores persist.

use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::contract::identity::{RunIdentity, RunOrigin};
use crate::contract::suspension::{ResumeDecisionAction, ToolCallResume};
use crate::contract::trace::TraceContext;
use crate::ids::{AgentId, DecisionId, DispatchId, RunId, ThreadId, ToolCallId};
use crate::state::PersistedState;

/// A run's coarse lifecycle state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Actively executing.
    #[default]
    Running,
    /// Paused, waiting for external decisions or input.
    Waiting,
    /// Finished; cannot transition further.
    Done,
}

/// A refused [`RunStatus`] transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("run status cannot go from {} to {}", from.as_str(), to.as_str())]
pub struct RunStatusTransitionError {
    /// The current status.
    pub from: RunStatus,
    /// The refused target.
    pub to: RunStatus,
}

impl RunStatus {
    /// The snake_case name, as in JSON and query parameters.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Done => "done",
        }
    }

    /// Whether the run can never change status again.
    pub fn is_terminal(self) -> bool {
        self == Self::Done
    }

    /// Whether `self → to` is allowed (self-transitions are; `Done` only goes to itself).
    pub fn can_transition_to(self, to: RunStatus) -> bool {
        match self {
            Self::Running | Self::Waiting => true,
            Self::Done => to == Self::Done,
        }
    }

    /// The new status, or an error naming the refused transition.
    pub fn transition(self, to: RunStatus) -> Result<RunStatus, RunStatusTransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(RunStatusTransitionError { from: self, to })
        }
    }
}

/// Why a stop condition ended a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoppedReason {
    /// Machine-readable code, e.g. `max_rounds`.
    pub code: String,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl StoppedReason {
    /// A reason with a code and no detail.
    pub fn new(code: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            detail: None,
        }
    }

    /// Adds a human-readable detail.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// Why a run ended (or, for `Suspended`, paused).
///
/// Serialized as `{"type": "...", "value": ...}`; unit variants have no `value`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum TerminationReason {
    /// The model answered without tool calls.
    NaturalEnd,
    /// A plugin asked to skip inference.
    BehaviorRequested,
    /// A stop condition fired.
    Stopped(StoppedReason),
    /// An external cancellation signal.
    Cancelled,
    /// A permission check blocked the run.
    Blocked(String),
    /// Waiting for tool-call decisions; the run can resume.
    Suspended,
    /// The run failed.
    Error(String),
}

impl TerminationReason {
    /// The run status this reason leaves the run in (`Suspended` → `Waiting`, else `Done`).
    pub fn to_run_status(&self) -> RunStatus {
        match self {
            Self::Suspended => RunStatus::Waiting,
            _ => RunStatus::Done,
        }
    }

    /// A short code for records and metrics: the variant name, or the stop code.
    pub fn code(&self) -> &str {
        match self {
            Self::NaturalEnd => "natural_end",
            Self::BehaviorRequested => "behavior_requested",
            Self::Stopped(reason) => &reason.code,
            Self::Cancelled => "cancelled",
            Self::Blocked(_) => "blocked",
            Self::Suspended => "suspended",
            Self::Error(_) => "error",
        }
    }
}

/// What a waiting run waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitingReason {
    /// Decisions on suspended tool calls.
    ToolDecision,
    /// More input from the user.
    UserInput,
}

/// One open question a waiting run needs answered (a suspended tool call).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunWaitingTicket {
    /// The suspension's id.
    pub ticket_id: String,
    /// The suspended call.
    pub tool_call_id: ToolCallId,
    /// The suspended tool's name.
    pub tool_name: String,
    /// What is asked, e.g. `confirm`.
    pub action: String,
    /// Prompt shown to the human.
    pub message: String,
}

/// Why and on what a run is waiting; persisted on the run record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunWaitingState {
    /// The kind of wait.
    pub reason: WaitingReason,
    /// Ids of the open tickets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ticket_ids: Vec<String>,
    /// The open tickets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tickets: Vec<RunWaitingTicket>,
    /// The dispatch during which the run started waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_dispatch_id: Option<DispatchId>,
    /// Human-readable summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A run as run stores persist it: the business truth about one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run.
    pub run_id: RunId,
    /// Its thread.
    pub thread_id: ThreadId,
    /// The agent that ran it.
    pub agent_id: AgentId,
    /// The run that started it, if delegated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    /// The parent run's thread, if delegated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_thread_id: Option<ThreadId>,
    /// The parent's tool call that delegated this run, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<ToolCallId>,
    /// Where the request came from.
    #[serde(default)]
    pub origin: RunOrigin,
    /// The trace the run belongs to (kept, so a run resumed on another node
    /// stays in its trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
    /// Current lifecycle state.
    #[serde(default)]
    pub status: RunStatus,
    /// Why the run ended or paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<TerminationReason>,
    /// `termination.code()`, kept as a string for filtering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_code: Option<String>,
    /// Creation time, unix seconds.
    pub created_at: u64,
    /// Last update time, unix seconds.
    pub updated_at: u64,
    /// Completed inference rounds.
    #[serde(default)]
    pub steps: u32,
    /// Prompt tokens consumed.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens produced.
    #[serde(default)]
    pub output_tokens: u64,
    /// Persistent state at the last checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<PersistedState>,
    /// What the run waits for while `Waiting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<RunWaitingState>,
    /// The decisions applied to the run's calls, in order: a repeat of one is a
    /// duplicate whenever it comes, also after the run moved on or ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<AppliedDecision>,
}

/// A decision a run applied to one of its tool calls: what histories show of it
/// after the call settled (which request it answered, and how).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedDecision {
    /// The decision's idempotency key.
    pub decision_id: DecisionId,
    /// The call it decided.
    pub call_id: ToolCallId,
    /// The suspension it answered (the ticket id), when the call held one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket_id: Option<String>,
    /// Whether it let the call go on: a `resume` whose payload does not say
    /// `"approved": false`. `None` in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<bool>,
    /// The decision's reason, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl AppliedDecision {
    /// The record of `resume` applied to `call_id` while it waited on `ticket_id`.
    pub fn of(call_id: ToolCallId, ticket_id: Option<String>, resume: &ToolCallResume) -> Self {
        let refused = resume.result.get("approved").and_then(JsonValue::as_bool) == Some(false);
        Self {
            decision_id: resume.decision_id.clone(),
            call_id,
            ticket_id,
            approved: Some(resume.action == ResumeDecisionAction::Resume && !refused),
            reason: resume.reason.clone(),
        }
    }
}

impl RunRecord {
    /// A fresh `Running` record for a run, created at `now_secs` (unix seconds).
    pub fn new(identity: &RunIdentity, now_secs: u64) -> Self {
        Self {
            run_id: identity.run_id.clone(),
            thread_id: identity.thread_id.clone(),
            agent_id: identity.agent_id.clone(),
            parent_run_id: identity.parent_run_id.clone(),
            parent_thread_id: identity.parent_thread_id.clone(),
            parent_tool_call_id: identity.parent_tool_call_id.clone(),
            origin: identity.origin,
            trace: identity.trace,
            status: RunStatus::Running,
            termination: None,
            termination_code: None,
            created_at: now_secs,
            updated_at: now_secs,
            steps: 0,
            input_tokens: 0,
            output_tokens: 0,
            state: None,
            waiting: None,
            decisions: Vec::new(),
        }
    }

    /// The applied decision with id `decision_id`, if the run applied it.
    pub fn applied_decision(&self, decision_id: &DecisionId) -> Option<&AppliedDecision> {
        self.decisions
            .iter()
            .find(|d| &d.decision_id == decision_id)
    }

    /// Records how the run ended (or paused, for `Suspended`).
    ///
    /// The status follows [`TerminationReason::to_run_status`] through
    /// [`RunStatus::transition`]; a refused transition changes nothing. Reaching `Done`
    /// clears `waiting`, since a finished run waits for nothing.
    pub fn finish(
        &mut self,
        reason: TerminationReason,
        now_secs: u64,
    ) -> Result<(), RunStatusTransitionError> {
        self.status = self.status.transition(reason.to_run_status())?;
        if self.status.is_terminal() {
            self.waiting = None;
        }
        self.termination_code = Some(reason.code().to_owned());
        self.termination = Some(reason);
        self.updated_at = now_secs;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ALL: [RunStatus; 3] = [RunStatus::Running, RunStatus::Waiting, RunStatus::Done];

    #[test]
    fn status_transition_table() {
        use RunStatus::*;
        let allowed = [
            (Running, Running),
            (Running, Waiting),
            (Running, Done),
            (Waiting, Running),
            (Waiting, Waiting),
            (Waiting, Done),
            (Done, Done),
        ];
        for from in ALL {
            for to in ALL {
                let expected = allowed.contains(&(from, to));
                assert_eq!(from.can_transition_to(to), expected, "{from:?} -> {to:?}");
                assert_eq!(from.transition(to).is_ok(), expected, "{from:?} -> {to:?}");
            }
        }
        assert_eq!(
            Done.transition(Running).unwrap_err().to_string(),
            "run status cannot go from done to running"
        );
    }

    #[test]
    fn status_json_names() {
        for status in ALL {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                json!(status.as_str())
            );
        }
    }

    #[test]
    fn termination_reason_json_shapes() {
        let stopped = TerminationReason::Stopped(
            StoppedReason::new("max_rounds").with_detail("hit 16 rounds"),
        );
        let cases = [
            (
                stopped,
                json!({"type": "stopped", "value": {"code": "max_rounds", "detail": "hit 16 rounds"}}),
            ),
            (
                TerminationReason::NaturalEnd,
                json!({"type": "natural_end"}),
            ),
            (
                TerminationReason::BehaviorRequested,
                json!({"type": "behavior_requested"}),
            ),
            (TerminationReason::Cancelled, json!({"type": "cancelled"})),
            (
                TerminationReason::Blocked("denied".into()),
                json!({"type": "blocked", "value": "denied"}),
            ),
            (TerminationReason::Suspended, json!({"type": "suspended"})),
            (
                TerminationReason::Error("boom".into()),
                json!({"type": "error", "value": "boom"}),
            ),
        ];
        for (reason, expected) in cases {
            assert_eq!(serde_json::to_value(&reason).unwrap(), expected);
            assert_eq!(
                serde_json::from_value::<TerminationReason>(expected).unwrap(),
                reason
            );
        }
    }

    #[test]
    fn termination_codes_and_statuses() {
        let stopped = TerminationReason::Stopped(StoppedReason::new("token_budget"));
        assert_eq!(stopped.code(), "token_budget");
        assert_eq!(stopped.to_run_status(), RunStatus::Done);
        assert_eq!(TerminationReason::NaturalEnd.code(), "natural_end");
        assert_eq!(TerminationReason::Blocked("x".into()).code(), "blocked");
        assert_eq!(
            TerminationReason::Suspended.to_run_status(),
            RunStatus::Waiting
        );
        assert_eq!(
            TerminationReason::Error("x".into()).to_run_status(),
            RunStatus::Done
        );
    }

    fn identity() -> RunIdentity {
        RunIdentity::new(
            ThreadId::new("t1").unwrap(),
            RunId::new("r1").unwrap(),
            AgentId::new("a1").unwrap(),
            RunOrigin::User,
        )
    }

    #[test]
    fn record_json_shape_and_defaults() {
        let record = RunRecord::new(&identity(), 100);
        let value = serde_json::to_value(&record).unwrap();
        assert_eq!(
            value,
            json!({
                "run_id": "r1",
                "thread_id": "t1",
                "agent_id": "a1",
                "origin": "user",
                "status": "running",
                "created_at": 100,
                "updated_at": 100,
                "steps": 0,
                "input_tokens": 0,
                "output_tokens": 0
            })
        );
        let minimal: RunRecord = serde_json::from_value(json!({
            "run_id": "r1", "thread_id": "t1", "agent_id": "a1",
            "created_at": 100, "updated_at": 100
        }))
        .unwrap();
        assert_eq!(minimal, record);
    }

    #[test]
    fn record_finish_suspend_then_resume_then_done() {
        let mut record = RunRecord::new(&identity(), 100);
        record.waiting = Some(RunWaitingState {
            reason: WaitingReason::ToolDecision,
            ticket_ids: vec!["s1".into()],
            tickets: vec![RunWaitingTicket {
                ticket_id: "s1".into(),
                tool_call_id: ToolCallId::new("c1").unwrap(),
                tool_name: "delete".into(),
                action: "confirm".into(),
                message: "Delete it?".into(),
            }],
            since_dispatch_id: Some(DispatchId::new("d1").unwrap()),
            message: None,
        });
        record.finish(TerminationReason::Suspended, 101).unwrap();
        assert_eq!(record.status, RunStatus::Waiting);
        assert_eq!(record.termination_code.as_deref(), Some("suspended"));
        assert!(record.waiting.is_some());

        let value = serde_json::to_value(&record).unwrap();
        assert_eq!(value["termination"], json!({"type": "suspended"}));
        assert_eq!(value["waiting"]["reason"], json!("tool_decision"));
        assert_eq!(serde_json::from_value::<RunRecord>(value).unwrap(), record);

        record.finish(TerminationReason::NaturalEnd, 102).unwrap();
        assert_eq!(record.status, RunStatus::Done);
        assert_eq!(record.updated_at, 102);
        assert!(record.waiting.is_none());
    }

    #[test]
    fn finished_record_refuses_to_reopen() {
        let mut record = RunRecord::new(&identity(), 1);
        record.finish(TerminationReason::Cancelled, 2).unwrap();
        let before = record.clone();
        let err = record.finish(TerminationReason::Suspended, 3).unwrap_err();
        assert_eq!(err.from, RunStatus::Done);
        assert_eq!(err.to, RunStatus::Waiting);
        assert_eq!(record, before, "a refused finish changes nothing");
        record
            .finish(TerminationReason::Error("late".into()), 4)
            .unwrap();
        assert_eq!(record.termination_code.as_deref(), Some("error"));
    }

    fn resume(action: ResumeDecisionAction, result: JsonValue) -> ToolCallResume {
        ToolCallResume {
            decision_id: DecisionId::new("d1").unwrap(),
            action,
            result,
            reason: Some("why".into()),
            updated_at: 1,
            trace: None,
        }
    }

    #[test]
    fn applied_decisions_keep_the_ticket_the_verdict_and_the_reason() {
        let call = ToolCallId::new("c1").unwrap();
        let ticket = || Some("permission:c1".to_owned());
        let approved = |action, result| {
            AppliedDecision::of(call.clone(), ticket(), &resume(action, result)).approved
        };
        assert_eq!(
            approved(ResumeDecisionAction::Resume, JsonValue::Null),
            Some(true)
        );
        assert_eq!(
            approved(ResumeDecisionAction::Resume, json!({"approved": true})),
            Some(true)
        );
        assert_eq!(
            approved(ResumeDecisionAction::Resume, json!({"approved": false})),
            Some(false)
        );
        assert_eq!(
            approved(ResumeDecisionAction::Cancel, json!({"approved": true})),
            Some(false)
        );

        let applied = AppliedDecision::of(
            call.clone(),
            ticket(),
            &resume(ResumeDecisionAction::Cancel, JsonValue::Null),
        );
        let value = serde_json::to_value(&applied).unwrap();
        assert_eq!(
            value,
            json!({"decision_id": "d1", "call_id": "c1", "ticket_id": "permission:c1",
                   "approved": false, "reason": "why"})
        );
        // Records written before the ticket and verdict were kept still read.
        let old: AppliedDecision =
            serde_json::from_value(json!({"decision_id": "d1", "call_id": "c1"})).unwrap();
        assert_eq!(
            (old.ticket_id, old.approved, old.reason),
            (None, None, None)
        );
    }
}
