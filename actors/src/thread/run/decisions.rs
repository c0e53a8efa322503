//! Decisions on suspended calls, cancellation, and waiting for them.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::now_ms;
use crate::contract::{
    AgentEvent, AppliedDecision, ApprovalResolution, ApprovalWrite, RUN_CANCELLED_MESSAGE,
    ResumeDecisionAction, RunStatus, RunWaitingState, RunWaitingTicket, SuspendTicket,
    TerminationReason, ToolCallResume, ToolCallState, ToolCallStatus, ToolResult, WaitingReason,
};
use crate::ids::ToolCallId;
use crate::tool::CancelledCall;

use super::phases::state_failure;
use super::{Driver, Failure, Next, Step};

impl Driver<'_> {
    pub(super) async fn try_decide(
        &mut self,
        call_id: ToolCallId,
        resume: ToolCallResume,
    ) -> Step<Next> {
        if self.run.record.status == RunStatus::Waiting {
            self.run.record.status = RunStatus::Running;
            self.run.record.waiting = None;
            self.emit(AgentEvent::RunStart {
                thread_id: self.thread.thread_id.clone(),
                run_id: self.run.identity.run_id.clone(),
                parent_run_id: self.run.identity.parent_run_id.clone(),
            });
            // A waiting run may have been passivated: its agent is the base one
            // until the thread's variant is applied again.
            self.apply_handoff()?;
            self.reopen_step();
        }
        let Some(mut state) = self.calls().get(&call_id).cloned() else {
            return self.advance().await;
        };
        if state.status == ToolCallStatus::Suspended {
            let waited = now_ms().saturating_sub(state.updated_at);
            self.deps
                .metrics
                .decided_after(Duration::from_millis(waited));
        }
        let ticket_id = state
            .ticket
            .as_ref()
            .map(|ticket| ticket.suspension.id.clone());
        if state.status == ToolCallStatus::Suspended
            && let Some(approval_id) = &state.approval_id
        {
            self.run.approvals.push(ApprovalWrite::Resolved {
                approval_id: approval_id.clone(),
                resolution: ApprovalResolution::decided(&resume, now_ms()),
            });
        }
        self.run
            .record
            .decisions
            .push(AppliedDecision::of(call_id.clone(), ticket_id, &resume));
        // A child run's or remote task's suspension shown on this call: the
        // decision, whatever it says, is theirs, so the call replays and hands it on.
        let forwarded = state
            .ticket
            .as_deref()
            .is_some_and(SuspendTicket::is_forwarded);
        let action = if forwarded {
            ResumeDecisionAction::Resume
        } else {
            resume.action
        };
        match action {
            ResumeDecisionAction::Cancel => {
                self.notify_cancelled(&state);
                let reason = resume
                    .reason
                    .clone()
                    .unwrap_or_else(|| "cancelled by decision".to_owned());
                state.decision = Some(resume);
                self.put_call(state)?;
                let result = ToolResult::error_with_code(
                    self.calls()
                        .get(&call_id)
                        .map(|c| c.tool_name.clone())
                        .unwrap_or_default(),
                    "cancelled",
                    reason,
                );
                self.close_call(&call_id, ToolCallStatus::Cancelled, result)
                    .await?;
            }
            ResumeDecisionAction::Resume => {
                self.emit(AgentEvent::ToolCallResumed {
                    target_id: call_id.clone(),
                    result: resume.result.clone(),
                });
                state
                    .transition_to(ToolCallStatus::Resuming, now_ms())
                    .map_err(state_failure)?;
                state.decision = Some(resume);
                self.put_call(state)?;
            }
        }
        self.advance().await
    }

    pub(super) async fn try_cancel(&mut self) -> Step<Next> {
        self.run.cancellation.cancel();
        let open: Vec<ToolCallState> = self
            .calls()
            .calls
            .iter()
            .filter(|c| !c.status.is_terminal())
            .cloned()
            .collect();
        for call in open {
            if matches!(
                call.status,
                ToolCallStatus::Running | ToolCallStatus::Suspended
            ) {
                self.notify_cancelled(&call);
            }
            let result = ToolResult::error_with_code(
                call.tool_name.clone(),
                "cancelled",
                RUN_CANCELLED_MESSAGE,
            );
            self.close_call(&call.call_id, ToolCallStatus::Cancelled, result)
                .await?;
        }
        if self.run.record.status == RunStatus::Waiting {
            self.run.record.status = RunStatus::Running;
            self.run.record.waiting = None;
        }
        self.finish(TerminationReason::Cancelled).await
    }

    /// Tells a cancelled call's tool, on a task of its own, so it can stop work it
    /// started elsewhere (a delegate's child run).
    pub(super) fn notify_cancelled(&self, call: &ToolCallState) {
        let Some(tool) = self.run.agent.tools.get(&call.tool_name).cloned() else {
            return;
        };
        let cancelled = CancelledCall {
            run_identity: Arc::clone(&self.run.identity),
            call_id: call.call_id.clone(),
            ticket: call.ticket.as_deref().cloned(),
            children: self.deps.children.get(),
        };
        tokio::spawn(async move { tool.cancelled(cancelled).await });
    }

    pub(super) async fn suspend_run(&mut self) -> Step<Next> {
        let calls = self.calls();
        let tickets: Vec<RunWaitingTicket> = calls
            .with_status(ToolCallStatus::Suspended)
            .filter_map(|call| {
                call.ticket.as_ref().map(|ticket| RunWaitingTicket {
                    ticket_id: ticket.suspension.id.clone(),
                    tool_call_id: call.call_id.clone(),
                    tool_name: call.tool_name.clone(),
                    action: ticket.suspension.action.clone(),
                    message: ticket.suspension.message.clone(),
                })
            })
            .collect();
        self.run.record.status = self
            .run
            .record
            .status
            .transition(RunStatus::Waiting)
            .map_err(|e| Failure::State(e.to_string()))?;
        self.run.record.waiting = Some(RunWaitingState {
            reason: WaitingReason::ToolDecision,
            ticket_ids: tickets.iter().map(|t| t.ticket_id.clone()).collect(),
            tickets,
            since_dispatch_id: None,
            message: None,
        });
        self.checkpoint_before(2).await?;
        // Each activation closes the steps it opened; the resumed activation reopens.
        self.emit(AgentEvent::StepEnd);
        self.emit(AgentEvent::RunFinish {
            thread_id: self.thread.thread_id.clone(),
            run_id: self.run.identity.run_id.clone(),
            result: None,
            termination: TerminationReason::Suspended,
        });
        Ok(Next::Wait)
    }

    /// Announces the continuation of a step begun in an earlier activation.
    pub(super) fn reopen_step(&mut self) {
        self.emit(AgentEvent::StepStart {
            message_id: self.run.step_message_id.clone(),
        });
    }
}
