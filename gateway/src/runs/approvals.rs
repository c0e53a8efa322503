//! Approvals for the inbox: pages of them, one of them, and a decision by its id,
//! scoped like everything else to the caller's tenant.
//!
//! A decision by approval id is a decision on its run's call, sent to the
//! thread's owner as the run decision routes send it. Its decision id, unless
//! the caller names one, is derived from the approval and the answer: the same
//! answer sent twice (a double click, a retry after a lost response) is one
//! decision, and a different answer racing it is refused by the run as a call
//! that no longer waits. Either way the approval then says what became of it.

use awaken_actors::clock::now_ms;
use awaken_actors::contract::{Approval, ApprovalAnswer, ResumeDecisionAction};
use awaken_actors::store::{ApprovalCursor, ApprovalPage, ApprovalQuery};
use awaken_actors::{AgentId, ApprovalId, ThreadId};
use awaken_cluster::decisions::DecisionPayload;
use serde::Deserialize;
use serde_json::{Value as JsonValue, json};
use sha2::{Digest as _, Sha256};

use super::RunService;
use crate::server::auth::Caller;
use crate::server::error::ApiError;

/// The inbox's filters and paging, as the query string gives them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalListQuery {
    /// `pending`, `approved`, `denied`, `expired`, `escalated` or `cancelled`.
    #[serde(default)]
    pub status: Option<awaken_actors::contract::ApprovalStatus>,
    /// Only this agent's.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
    /// Only calls of this tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// Only this thread's.
    #[serde(default)]
    pub thread_id: Option<ThreadId>,
    /// Only those asked for at least this many seconds ago.
    #[serde(default)]
    pub older_than: Option<u64>,
    /// Only those asked for less than this many seconds ago.
    #[serde(default)]
    pub newer_than: Option<u64>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub after: Option<ApprovalCursor>,
    /// Page size, clamped to 1..=200.
    #[serde(default)]
    pub limit: Option<usize>,
}

impl ApprovalListQuery {
    /// The store query for `caller` at `now_ms`.
    fn into_query(self, caller: &Caller, now_ms: u64) -> ApprovalQuery {
        let ago = |seconds: u64| now_ms.saturating_sub(seconds.saturating_mul(1000));
        ApprovalQuery {
            tenant: caller.tenant().map(str::to_owned),
            status: self.status,
            agent_id: self.agent_id,
            tool_name: self.tool,
            thread_id: self.thread_id,
            requested_from: self
                .newer_than
                .map(|seconds| ago(seconds).saturating_add(1)),
            requested_before: self
                .older_than
                .map(|seconds| ago(seconds).saturating_add(1)),
            after: self.after,
            limit: self.limit.unwrap_or(0),
        }
    }
}

/// A decision on an approval: the answer alone, the approval names the call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalDecisionBody {
    /// `resume` or `cancel`.
    pub action: ResumeDecisionAction,
    /// The answer (`{"approved": true}`, edited arguments, a tool result).
    #[serde(default)]
    pub result: JsonValue,
    /// Why (shown to the model and kept with the approval).
    #[serde(default)]
    pub reason: Option<String>,
    /// The decision's idempotency key; derived from the approval and the answer
    /// when absent.
    #[serde(default)]
    pub decision_id: Option<String>,
}

impl ApprovalDecisionBody {
    /// Whether `answer` is this body's answer (the reason aside).
    fn answered(&self, answer: Option<&ApprovalAnswer>) -> bool {
        answer.is_some_and(|answer| answer.action == self.action && answer.result == self.result)
    }

    /// The decision id: the caller's, or one derived from `approval` and the answer.
    fn decision_id(&self, approval: &ApprovalId) -> String {
        if let Some(id) = &self.decision_id {
            return id.clone();
        }
        let mut hasher = Sha256::new();
        hasher.update(approval.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(serde_json::to_vec(&(self.action, &self.result)).unwrap_or_default());
        let digest = hasher.finalize();
        let hex: String = digest[..12]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        format!("approval:{approval}:{hex}")
    }
}

/// A `tool` filter: free text, but never a control character (a NUL would reach
/// the database as a parameter it refuses).
pub(super) fn check_tool_filter(tool: Option<&str>) -> Result<(), ApiError> {
    if tool.is_some_and(|tool| tool.chars().any(char::is_control)) {
        return Err(ApiError::BadRequest(
            "`tool` must not contain control characters".to_owned(),
        ));
    }
    Ok(())
}

impl RunService {
    /// A page of the approvals the caller may see.
    pub(crate) async fn approvals(
        &self,
        caller: &Caller,
        query: ApprovalListQuery,
    ) -> Result<ApprovalPage, ApiError> {
        check_tool_filter(query.tool.as_deref())?;
        let query = query.into_query(caller, now_ms());
        Ok(self.control.store().list_approvals(&query).await?)
    }

    /// The approval `id`: 404 when unknown or another tenant's.
    pub(crate) async fn approval(
        &self,
        caller: &Caller,
        id: &ApprovalId,
    ) -> Result<Approval, ApiError> {
        let approval = self.control.store().load_approval(id).await?;
        match approval {
            Some(approval)
                if caller
                    .tenant()
                    .is_none_or(|tenant| approval.tenant.as_deref() == Some(tenant)) =>
            {
                Ok(approval)
            }
            _ => Err(ApiError::NotFound(format!("unknown approval `{id}`"))),
        }
    }

    /// Decides the approval `id` with `body`: applied once; the same answer to a
    /// resolved approval is a duplicate, a different one 409 naming its status.
    pub(crate) async fn decide_approval(
        &self,
        caller: &Caller,
        id: &ApprovalId,
        body: ApprovalDecisionBody,
    ) -> Result<JsonValue, ApiError> {
        let approval = self.approval(caller, id).await?;
        if !approval.status.is_open() {
            return resolved_answer(&approval, &body);
        }
        let payload = DecisionPayload {
            call_id: approval.call_id.to_string(),
            decision_id: body.decision_id(id),
            action: body.action,
            result: body.result.clone(),
            reason: body.reason.clone(),
            thread_id: None,
            run_id: None,
            updated_at: None,
        };
        let decided = self
            .decide(&approval.thread_id, Some(&approval.run_id), payload)
            .await;
        match decided {
            Ok(answer) => {
                let duplicate = answer.get("duplicate").cloned().unwrap_or(json!(false));
                let approval = self.approval(caller, id).await?;
                Ok(json!({
                    "status": "decision_applied",
                    "duplicate": duplicate,
                    "approval": approval,
                }))
            }
            // The call stopped waiting meanwhile: another decision, the run's end.
            Err(ApiError::Conflict(reason)) => {
                let approval = self.approval(caller, id).await?;
                if approval.status.is_open() {
                    return Err(ApiError::Conflict(reason));
                }
                resolved_answer(&approval, &body)
            }
            Err(other) => Err(other),
        }
    }
}

/// The answer to `body` for an approval already resolved.
fn resolved_answer(
    approval: &Approval,
    body: &ApprovalDecisionBody,
) -> Result<JsonValue, ApiError> {
    if body.answered(approval.answer.as_ref()) {
        return Ok(json!({
            "status": "decision_applied",
            "duplicate": true,
            "approval": approval,
        }));
    }
    Err(ApiError::Conflict(format!(
        "approval `{}` is {}{}",
        approval.approval_id,
        approval.status,
        approval
            .cause
            .as_deref()
            .map(|cause| format!(" ({cause})"))
            .unwrap_or_default()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(action: ResumeDecisionAction, result: JsonValue) -> ApprovalDecisionBody {
        ApprovalDecisionBody {
            action,
            result,
            reason: None,
            decision_id: None,
        }
    }

    #[test]
    fn a_derived_decision_id_is_the_answers() {
        let id = ApprovalId::new("a1").unwrap();
        let yes = body(ResumeDecisionAction::Resume, json!({"approved": true}));
        let no = body(ResumeDecisionAction::Resume, json!({"approved": false}));
        assert_eq!(yes.decision_id(&id), yes.clone().decision_id(&id));
        assert_ne!(yes.decision_id(&id), no.decision_id(&id));
        assert_ne!(
            yes.decision_id(&id),
            yes.decision_id(&ApprovalId::new("a2").unwrap())
        );
        let named = ApprovalDecisionBody {
            decision_id: Some("mine".to_owned()),
            ..yes
        };
        assert_eq!(named.decision_id(&id), "mine");
    }

    #[test]
    fn ages_become_request_times() {
        let query = ApprovalListQuery {
            older_than: Some(60),
            newer_than: Some(3600),
            ..ApprovalListQuery::default()
        }
        .into_query(&Caller::anonymous(), 10_000_000);
        assert_eq!(query.requested_before, Some(10_000_000 - 60_000 + 1));
        assert_eq!(query.requested_from, Some(10_000_000 - 3_600_000 + 1));
    }
}
