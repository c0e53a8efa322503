//! Approvals: a suspended tool call as an object of its own, which any node finds,
//! lists and decides by its id, and which says afterwards how it was resolved.
//!
//! An [`Approval`] is written by the thread's owner in the same checkpoint as the
//! suspension that asks for it ([`ApprovalWrite::Requested`]), and resolved in the
//! checkpoint that applies its decision or ends its call another way
//! ([`ApprovalWrite::Resolved`]), so it is never seen without its run's state and
//! never outlives it as `pending`.

use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::contract::suspension::{ResumeDecisionAction, ToolCallResume};
use crate::ids::{AgentId, ApprovalId, DecisionId, RunId, ThreadId, ToolCallId};

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Decided: the call goes on.
    Approved,
    /// Decided: the call does not run.
    Denied,
    /// Its deadline passed without a decision.
    Expired,
    /// Handed to another set of approvers.
    Escalated,
    /// Its call or run ended without a decision (the run cancelled, replaced or
    /// failed, its thread deleted).
    Cancelled,
}

impl ApprovalStatus {
    /// Every status, in the order the API documents them.
    pub const ALL: [ApprovalStatus; 6] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
        ApprovalStatus::Escalated,
        ApprovalStatus::Cancelled,
    ];

    /// The status as stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Escalated => "escalated",
            Self::Cancelled => "cancelled",
        }
    }

    /// The status named `text`, as [`Self::as_str`] writes it.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }

    /// Whether a decision may still resolve it.
    pub fn is_open(self) -> bool {
        matches!(self, Self::Pending | Self::Escalated)
    }

    /// What applying `resume` makes of an approval: a `resume` approves unless its
    /// payload says `"approved": false`; a `cancel` denies.
    pub fn of_answer(resume: &ToolCallResume) -> Self {
        let refused = resume.result.get("approved").and_then(JsonValue::as_bool) == Some(false);
        if resume.action == ResumeDecisionAction::Resume && !refused {
            Self::Approved
        } else {
            Self::Denied
        }
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer a decision gave, as an approval keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalAnswer {
    /// Resume or cancel.
    pub action: ResumeDecisionAction,
    /// The decision's payload.
    #[serde(default, skip_serializing_if = "JsonValue::is_null")]
    pub result: JsonValue,
    /// Why, if the decider said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ApprovalAnswer {
    /// The answer `resume` carries.
    pub fn of(resume: &ToolCallResume) -> Self {
        Self {
            action: resume.action,
            result: resume.result.clone(),
            reason: resume.reason.clone(),
        }
    }
}

/// How an approval was resolved: written once, by the checkpoint that resolved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalResolution {
    /// The status it was resolved to (never `pending`).
    pub status: ApprovalStatus,
    /// When, unix millis.
    pub resolved_at: u64,
    /// The decision that resolved it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<DecisionId>,
    /// That decision's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<ApprovalAnswer>,
    /// Why it ended without a decision (`run_cancelled`, `run_failed`,
    /// `thread_deleted`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

impl ApprovalResolution {
    /// The resolution a decision applied at `now_ms` makes.
    pub fn decided(resume: &ToolCallResume, now_ms: u64) -> Self {
        Self {
            status: ApprovalStatus::of_answer(resume),
            resolved_at: now_ms,
            decision_id: Some(resume.decision_id.clone()),
            answer: Some(ApprovalAnswer::of(resume)),
            cause: None,
        }
    }

    /// The resolution of an approval whose call ended at `now_ms` without a
    /// decision, for `cause`.
    pub fn cancelled(cause: impl Into<String>, now_ms: u64) -> Self {
        Self {
            status: ApprovalStatus::Cancelled,
            resolved_at: now_ms,
            decision_id: None,
            answer: None,
            cause: Some(cause.into()),
        }
    }
}

/// One request for a human's approval of a tool call, and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// Its id, stable for its life.
    pub approval_id: ApprovalId,
    /// The tenant of its thread (set by the store from the thread's metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The agent whose call waits.
    pub agent_id: AgentId,
    /// The thread.
    pub thread_id: ThreadId,
    /// The run.
    pub run_id: RunId,
    /// The suspended call.
    pub call_id: ToolCallId,
    /// The tool's name.
    pub tool_name: String,
    /// The call's arguments.
    #[serde(default)]
    pub arguments: JsonValue,
    /// The suspension's id (the ticket id decisions on the run answer).
    pub ticket_id: String,
    /// What is asked, e.g. `tool_permission`.
    pub action: String,
    /// The prompt for the human.
    pub message: String,
    /// The suspension's parameters.
    #[serde(default, skip_serializing_if = "JsonValue::is_null")]
    pub parameters: JsonValue,
    /// The JSON Schema an answer's `result` must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<JsonValue>,
    /// When it was asked, unix millis.
    pub requested_at: u64,
    /// When it expires, unix millis, if it has a deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// Where it stands.
    pub status: ApprovalStatus,
    /// When it was resolved, unix millis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<u64>,
    /// The decision that resolved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<DecisionId>,
    /// That decision's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<ApprovalAnswer>,
    /// Why it ended without a decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

impl Approval {
    /// Applies `resolution` if the approval is still open; whether it did.
    pub fn resolve(&mut self, resolution: &ApprovalResolution) -> bool {
        if !self.status.is_open() || resolution.status.is_open() {
            return false;
        }
        self.status = resolution.status;
        self.resolved_at = Some(resolution.resolved_at);
        self.decision_id = resolution.decision_id.clone();
        self.answer = resolution.answer.clone();
        self.cause = resolution.cause.clone();
        true
    }

    /// The approval as it was when requested: what a request announced after its
    /// resolution (the feed catching up) carries.
    pub fn as_requested(&self) -> Approval {
        Approval {
            status: ApprovalStatus::Pending,
            resolved_at: None,
            decision_id: None,
            answer: None,
            cause: None,
            ..self.clone()
        }
    }
}

/// Which change of an approval a feed record announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalEvent {
    /// It was asked for.
    Requested,
    /// It was resolved (decided, cancelled, expired).
    Resolved,
}

impl ApprovalEvent {
    /// Both, in the order an approval goes through them.
    pub const ALL: [ApprovalEvent; 2] = [ApprovalEvent::Requested, ApprovalEvent::Resolved];

    /// The event as subjects and SSE event names spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Resolved => "resolved",
        }
    }
}

/// An approval as one stored change left it: what the feed announces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalChange {
    /// Which change.
    pub event: ApprovalEvent,
    /// The approval right after it.
    pub approval: Approval,
}

impl ApprovalChange {
    /// `approval`, just requested.
    pub fn requested(approval: Approval) -> Self {
        Self {
            event: ApprovalEvent::Requested,
            approval,
        }
    }

    /// `approval`, just resolved.
    pub fn resolved(approval: Approval) -> Self {
        Self {
            event: ApprovalEvent::Resolved,
            approval,
        }
    }
}

/// What a checkpoint changes of its run's approvals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ApprovalWrite {
    /// A suspension asked for it: stored unless already there (a checkpoint
    /// written again after a lost answer changes nothing).
    Requested(Box<Approval>),
    /// It was resolved: applied only while it is open, so the first resolution
    /// stays.
    Resolved {
        /// Which approval.
        approval_id: ApprovalId,
        /// How.
        resolution: ApprovalResolution,
    },
}

impl ApprovalWrite {
    /// The approval it writes.
    pub fn approval_id(&self) -> &ApprovalId {
        match self {
            Self::Requested(approval) => &approval.approval_id,
            Self::Resolved { approval_id, .. } => approval_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn resume(action: ResumeDecisionAction, result: JsonValue) -> ToolCallResume {
        ToolCallResume {
            decision_id: DecisionId::new("d1").unwrap(),
            action,
            result,
            reason: None,
            updated_at: 1,
            trace: None,
        }
    }

    fn approval() -> Approval {
        Approval {
            approval_id: ApprovalId::new("a1").unwrap(),
            tenant: None,
            agent_id: AgentId::new("agent").unwrap(),
            thread_id: ThreadId::new("t").unwrap(),
            run_id: RunId::new("r").unwrap(),
            call_id: ToolCallId::new("c").unwrap(),
            tool_name: "delete_file".into(),
            arguments: json!({"path": "/tmp/x"}),
            ticket_id: "permission:c".into(),
            action: "tool_permission".into(),
            message: "Allow?".into(),
            parameters: JsonValue::Null,
            response_schema: None,
            requested_at: 10,
            expires_at: None,
            status: ApprovalStatus::Pending,
            resolved_at: None,
            decision_id: None,
            answer: None,
            cause: None,
        }
    }

    #[test]
    fn answers_approve_unless_they_refuse() {
        use ResumeDecisionAction::{Cancel, Resume};
        let status = |action, result| ApprovalStatus::of_answer(&resume(action, result));
        assert_eq!(status(Resume, json!(true)), ApprovalStatus::Approved);
        assert_eq!(
            status(Resume, json!({"approved": true})),
            ApprovalStatus::Approved
        );
        assert_eq!(
            status(Resume, json!({"approved": false})),
            ApprovalStatus::Denied
        );
        assert_eq!(status(Cancel, JsonValue::Null), ApprovalStatus::Denied);
    }

    #[test]
    fn the_first_resolution_stays() {
        let mut approval = approval();
        let denied =
            ApprovalResolution::decided(&resume(ResumeDecisionAction::Cancel, JsonValue::Null), 20);
        assert!(approval.resolve(&denied));
        assert!(!approval.resolve(&ApprovalResolution::cancelled("run_cancelled", 30)));
        assert_eq!(approval.status, ApprovalStatus::Denied);
        assert_eq!(approval.resolved_at, Some(20));
        assert_eq!(approval.cause, None);
    }

    #[test]
    fn statuses_round_trip_through_their_names() {
        for status in ApprovalStatus::ALL {
            assert_eq!(ApprovalStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                json!(status.as_str())
            );
        }
        assert_eq!(ApprovalStatus::parse("done"), None);
    }

    #[test]
    fn a_pending_approval_omits_what_it_does_not_have() {
        let value = serde_json::to_value(approval()).unwrap();
        for absent in [
            "tenant",
            "expires_at",
            "resolved_at",
            "answer",
            "cause",
            "parameters",
        ] {
            assert!(value.get(absent).is_none(), "{absent} in {value}");
        }
        assert_eq!(
            serde_json::from_value::<Approval>(value).unwrap(),
            approval()
        );
    }
}
