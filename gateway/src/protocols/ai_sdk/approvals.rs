//! What the run records say about a tool call's approval, for the history: the
//! request a waiting run's call waits on, or the decision that answered it. The id
//! is the suspension's — the `approvalId` the stream's `tool-approval-request`
//! carried — so a client that reloads the history finds the request it saw.

use std::collections::HashMap;

use awaken_actors::JsonValue;
use awaken_actors::contract::{RunRecord, RunStatus};
use serde_json::json;

/// A call's approval as the run records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallApproval<'a> {
    /// The run waits for an answer to request `id`.
    Requested {
        /// The request (suspension) id.
        id: &'a str,
    },
    /// Request `id` was answered.
    Responded {
        /// The request (suspension) id.
        id: &'a str,
        /// Whether the answer let the call go on.
        approved: bool,
        /// The answer's reason, if it gave one.
        reason: Option<&'a str>,
    },
}

impl CallApproval<'_> {
    /// The part's `approval` object: `{id}` for a request, `{id, approved,
    /// reason?}` for an answer.
    pub(crate) fn to_json(self) -> JsonValue {
        match self {
            Self::Requested { id } => json!({ "id": id }),
            Self::Responded {
                id,
                approved,
                reason,
            } => {
                let mut approval = json!({"id": id, "approved": approved});
                if let Some(reason) = reason {
                    approval["reason"] = json!(reason);
                }
                approval
            }
        }
    }
}

/// The approvals of a thread's calls, by run and call id (call ids are unique
/// within a run only).
#[derive(Debug, Default)]
pub(crate) struct Approvals<'a> {
    calls: HashMap<(&'a str, &'a str), CallApproval<'a>>,
}

impl<'a> Approvals<'a> {
    /// The approvals `runs` record: each call's last decision, and for a waiting
    /// run the requests it waits on (a call asked again after a decision waits on
    /// the new request). A decision whose request or verdict the record does not
    /// hold (a record from before they were kept) shows no approval.
    pub(crate) fn of(runs: &'a [RunRecord]) -> Self {
        let mut calls = HashMap::new();
        for run in runs {
            let run_id = run.run_id.as_str();
            for decision in &run.decisions {
                let key = (run_id, decision.call_id.as_str());
                match (&decision.ticket_id, decision.approved) {
                    (Some(id), Some(approved)) => {
                        calls.insert(
                            key,
                            CallApproval::Responded {
                                id,
                                approved,
                                reason: decision.reason.as_deref(),
                            },
                        );
                    }
                    _ => {
                        calls.remove(&key);
                    }
                }
            }
            if run.status == RunStatus::Waiting
                && let Some(waiting) = &run.waiting
            {
                for ticket in &waiting.tickets {
                    calls.insert(
                        (run_id, ticket.tool_call_id.as_str()),
                        CallApproval::Requested {
                            id: &ticket.ticket_id,
                        },
                    );
                }
            }
        }
        Self { calls }
    }

    /// The approval of call `call_id` of run `run_id`, if it had one.
    pub(crate) fn of_call(&self, run_id: &str, call_id: &str) -> Option<CallApproval<'a>> {
        self.calls.get(&(run_id, call_id)).copied()
    }
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::{
        AppliedDecision, ResumeDecisionAction, RunIdentity, RunOrigin, RunWaitingState,
        RunWaitingTicket, TerminationReason, ToolCallResume, WaitingReason,
    };
    use awaken_actors::{AgentId, DecisionId, RunId, ThreadId, ToolCallId};

    use super::*;

    pub(crate) fn record(run: &str) -> RunRecord {
        RunRecord::new(
            &RunIdentity::new(
                ThreadId::new("t").unwrap(),
                RunId::new(run).unwrap(),
                AgentId::new("a").unwrap(),
                RunOrigin::User,
            ),
            1,
        )
    }

    pub(crate) fn decided(
        call: &str,
        ticket: &str,
        action: ResumeDecisionAction,
        reason: Option<&str>,
    ) -> AppliedDecision {
        AppliedDecision::of(
            ToolCallId::new(call).unwrap(),
            Some(ticket.to_owned()),
            &ToolCallResume {
                decision_id: DecisionId::new(format!("d-{ticket}")).unwrap(),
                action,
                result: JsonValue::Null,
                reason: reason.map(str::to_owned),
                updated_at: 1,
                trace: None,
            },
        )
    }

    pub(crate) fn waiting_on(run: &mut RunRecord, call: &str, ticket: &str) {
        run.finish(TerminationReason::Suspended, 2).unwrap();
        run.waiting = Some(RunWaitingState {
            reason: WaitingReason::ToolDecision,
            ticket_ids: vec![ticket.to_owned()],
            tickets: vec![RunWaitingTicket {
                ticket_id: ticket.to_owned(),
                tool_call_id: ToolCallId::new(call).unwrap(),
                tool_name: "rm".into(),
                action: "confirm".into(),
                message: "allow?".into(),
            }],
            since_dispatch_id: None,
            message: None,
        });
    }

    #[test]
    fn decisions_and_open_requests_are_found_by_run_and_call() {
        let mut first = record("r1");
        first.decisions.push(decided(
            "c1",
            "p:c1",
            ResumeDecisionAction::Cancel,
            Some("no"),
        ));
        let mut second = record("r2");
        second
            .decisions
            .push(decided("c1", "p:c1", ResumeDecisionAction::Resume, None));
        // Asked again after that decision: the new request is the open one.
        waiting_on(&mut second, "c1", "p:c1:again");
        let mut legacy = record("r3");
        legacy.decisions.push(AppliedDecision {
            decision_id: DecisionId::new("old").unwrap(),
            call_id: ToolCallId::new("c1").unwrap(),
            ticket_id: None,
            approved: None,
            reason: None,
        });
        let runs = [first, second, legacy];
        let approvals = Approvals::of(&runs);
        assert_eq!(
            approvals.of_call("r1", "c1"),
            Some(CallApproval::Responded {
                id: "p:c1",
                approved: false,
                reason: Some("no")
            })
        );
        assert_eq!(
            approvals.of_call("r2", "c1"),
            Some(CallApproval::Requested { id: "p:c1:again" })
        );
        assert_eq!(approvals.of_call("r3", "c1"), None);
        assert_eq!(approvals.of_call("r1", "c2"), None);
        assert_eq!(
            approvals.of_call("r1", "c1").unwrap().to_json(),
            json!({"id": "p:c1", "approved": false, "reason": "no"})
        );
        assert_eq!(
            CallApproval::Requested { id: "x" }.to_json(),
            json!({"id": "x"})
        );
    }
}
