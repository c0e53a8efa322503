//! Tool calls: preparing and launching them, their outcomes, suspending and settling them.

use std::sync::Arc;

use crate::actions::{ToolInterceptKey, ToolInterceptPayload, ToolInterceptUpdate};
use crate::clock::now_ms;
use crate::contract::{
    AgentEvent, Message, PendingToolCall, SuspendTicket, Suspension, TerminationReason,
    ToolCallOutcome, ToolCallResumeMode, ToolCallState, ToolCallStatus, ToolExecutionMode,
    ToolResult, ToolStatus,
};
use crate::error::ToolError;
use crate::ids::{MessageId, ToolCallId};
use crate::phase::{Phase, ToolCallView};
use crate::state::{Snapshot, StateCommand};
use crate::telemetry;
use crate::thread::keys::ToolCalls;
use crate::tool::{ResumedCall, Tool, ToolCallContext, ToolOutput};

use super::phases::state_failure;
use super::{Driver, Next, Step};

/// One tool call execution for a `ToolCallActor`.
pub(crate) struct Launch {
    pub(crate) call_id: ToolCallId,
    pub(crate) attempt: u32,
    pub(crate) tool: Arc<dyn Tool>,
    pub(crate) args: serde_json::Value,
    pub(crate) ctx: ToolCallContext,
    /// The attempt's `execute_tool` span.
    pub(crate) span: telemetry::Span,
    /// Where the attempt's duration is recorded.
    pub(crate) metrics: Arc<telemetry::RunMetrics>,
}

/// How a tool call execution ended, as its actor reports it.
#[derive(Debug)]
pub(crate) enum ToolOutcome {
    /// The tool returned.
    Output(Box<ToolOutput>),
    /// The tool returned an error.
    Error(ToolError),
    /// The tool panicked.
    Panicked(String),
    /// The execution was cancelled before it finished.
    Cancelled,
}

pub(super) enum Prepared {
    Launch(Box<Launch>),
    Settled,
    Blocked(String),
}

impl Driver<'_> {
    /// Starts every call that may start now and decides what the run waits for.
    pub(super) async fn advance(&mut self) -> Step<Next> {
        let mode = self.run.agent.spec.tool_execution_mode;
        // Parallel modes give every call launched together one frozen snapshot.
        let mut frozen: Option<Snapshot> = None;
        let mut launches = Vec::new();
        loop {
            let candidates = startable(self.calls(), mode);
            if candidates.is_empty() {
                break;
            }
            let mut settled_any = false;
            for call_id in candidates {
                match self.prepare(&call_id, mode, &mut frozen).await? {
                    Prepared::Launch(launch) => launches.push(*launch),
                    Prepared::Settled => settled_any = true,
                    Prepared::Blocked(reason) => {
                        return self.finish(TerminationReason::Blocked(reason)).await;
                    }
                }
            }
            // Sequential mode starts the next call once one settled without running.
            if !launches.is_empty() || !settled_any {
                break;
            }
        }
        if !launches.is_empty() {
            return Ok(Next::Launch(launches));
        }
        let calls = self.calls();
        if calls.any(ToolCallStatus::Running) {
            return Ok(Next::Launch(Vec::new()));
        }
        // Nothing runs: calls still open wait for decisions (a decided call in batch
        // mode waits for its siblings' decisions, a new call in sequential mode for
        // the suspension before it).
        if !calls.all_terminal() {
            return self.suspend_run().await;
        }
        self.end_step(false).await
    }

    pub(super) async fn prepare(
        &mut self,
        call_id: &ToolCallId,
        mode: ToolExecutionMode,
        frozen: &mut Option<Snapshot>,
    ) -> Step<Prepared> {
        let Some(mut state) = self.calls().get(call_id).cloned() else {
            return Ok(Prepared::Settled);
        };
        let resuming = state.status == ToolCallStatus::Resuming;
        let decision = if resuming {
            state.decision.clone()
        } else {
            None
        };
        if let (Some(decision), Some(ticket)) = (&decision, &state.ticket) {
            match ticket.resume_mode {
                ToolCallResumeMode::UseDecisionAsToolResult => {
                    let result =
                        ToolResult::success(state.tool_name.clone(), decision.result.clone());
                    self.settle_call(call_id, result).await?;
                    return Ok(Prepared::Settled);
                }
                ToolCallResumeMode::PassDecisionToTool => state.arguments = decision.result.clone(),
                ToolCallResumeMode::ReplayToolCall => {}
            }
        }
        let Some(tool) = self.run.agent.tools.get(&state.tool_name).cloned() else {
            let message = format!("tool `{}` is not available to this agent", state.tool_name);
            self.settle_call(
                call_id,
                ToolResult::error_with_code(state.tool_name.clone(), "tool_not_found", message),
            )
            .await?;
            return Ok(Prepared::Settled);
        };
        if let Err(error) = tool.validate_args(&state.arguments) {
            self.settle_call(call_id, tool_error_result(&state.tool_name, &error))
                .await?;
            return Ok(Prepared::Settled);
        }
        if self.runs_phase(Phase::BeforeToolExecute) {
            let view = ToolCallView {
                call_id: call_id.clone(),
                tool_name: state.tool_name.clone(),
                arguments: state.arguments.clone(),
                result: None,
                decision: decision.clone(),
            };
            self.phase(Phase::BeforeToolExecute, Some(view)).await?;
        }
        let intercept = self
            .thread
            .store
            .get::<ToolInterceptKey>()
            .and_then(|all| all.get(call_id).cloned());
        if intercept.is_some() {
            let mut clear = StateCommand::new();
            clear.update::<ToolInterceptKey>(ToolInterceptUpdate::Clear(call_id.clone()));
            self.thread.store.commit(clear)?;
        }
        match intercept {
            Some(ToolInterceptPayload::Block { reason }) => {
                let result =
                    ToolResult::error_with_code(state.tool_name.clone(), "blocked", reason.clone());
                self.settle_call(call_id, result).await?;
                Ok(Prepared::Blocked(reason))
            }
            Some(ToolInterceptPayload::Suspend(ticket)) => {
                self.suspend_call(call_id, ticket)?;
                Ok(Prepared::Settled)
            }
            Some(ToolInterceptPayload::SetResult(result)) => {
                self.settle_call(call_id, result).await?;
                Ok(Prepared::Settled)
            }
            None => {
                state
                    .transition_to(ToolCallStatus::Running, now_ms())
                    .map_err(state_failure)?;
                let attempt = state.attempt;
                let args = state.arguments.clone();
                let resumed = match (state.ticket.clone(), decision) {
                    (Some(ticket), Some(decision)) => Some(ResumedCall {
                        ticket: *ticket,
                        decision,
                    }),
                    _ => None,
                };
                // The agent's tools are keyed by their descriptor's id.
                let tool_id = state.tool_name.clone();
                self.put_call(state)?;
                let snapshot = match mode {
                    ToolExecutionMode::Sequential => self.thread.store.snapshot(),
                    _ => frozen
                        .get_or_insert_with(|| self.thread.store.snapshot())
                        .clone(),
                };
                let mut ctx = ToolCallContext::new(
                    call_id.clone(),
                    tool_id,
                    Arc::clone(&self.run.identity),
                    Arc::clone(&self.run.agent.spec),
                    snapshot,
                );
                ctx.attempt = attempt;
                ctx.profile = self.deps.profile.clone();
                ctx.children = self.deps.children.get();
                ctx.resumed = resumed;
                let span = telemetry::execute_tool(&self.run.span, &ctx.tool_name, call_id);
                if let Some(trace) = span.context() {
                    ctx.trace = Some(trace);
                }
                Ok(Prepared::Launch(Box::new(Launch {
                    call_id: call_id.clone(),
                    attempt,
                    tool,
                    args,
                    ctx,
                    span,
                    metrics: Arc::clone(&self.deps.metrics),
                })))
            }
        }
    }

    pub(super) async fn try_tool_finished(
        &mut self,
        call_id: ToolCallId,
        attempt: u32,
        outcome: ToolOutcome,
    ) -> Step<Next> {
        let Some(state) = self.calls().get(&call_id) else {
            return Ok(Next::Launch(Vec::new()));
        };
        if state.status != ToolCallStatus::Running || state.attempt != attempt {
            // A late report of an execution that was cancelled or superseded.
            return Ok(Next::Launch(Vec::new()));
        }
        let tool_name = state.tool_name.clone();
        let result = match outcome {
            ToolOutcome::Output(output) => {
                let ToolOutput { result, command } = *output;
                match self.thread.store.commit(command) {
                    Ok(commit) => {
                        self.dispatch_effects(commit.effects);
                        result
                    }
                    Err(error) => ToolResult::error_with_code(
                        tool_name.clone(),
                        "state_refused",
                        format!("the tool's state changes were refused: {error}"),
                    ),
                }
            }
            ToolOutcome::Error(error) => tool_error_result(&tool_name, &error),
            ToolOutcome::Panicked(message) => ToolResult::error_with_code(
                tool_name.clone(),
                "tool_panicked",
                format!("the tool panicked: {message}"),
            ),
            ToolOutcome::Cancelled => ToolResult::error_with_code(
                tool_name.clone(),
                "cancelled",
                "the tool call was cancelled",
            ),
        };
        if result.status == ToolStatus::Pending {
            let ticket = match result.suspension.as_deref() {
                Some(ticket) => ticket.clone(),
                None => match self.calls().get(&call_id) {
                    Some(state) => default_ticket(state, result.message.as_deref()),
                    None => return self.advance().await,
                },
            };
            self.suspend_call(&call_id, ticket)?;
        } else {
            self.settle_call(&call_id, result).await?;
        }
        self.advance().await
    }

    /// Marks a call suspended with its ticket and tells the stream.
    pub(super) fn suspend_call(&mut self, call_id: &ToolCallId, ticket: SuspendTicket) -> Step<()> {
        let Some(mut state) = self.calls().get(call_id).cloned() else {
            return Ok(());
        };
        state
            .transition_to(ToolCallStatus::Suspended, now_ms())
            .map_err(state_failure)?;
        let result = ToolResult::suspended_with(
            state.tool_name.clone(),
            ticket.suspension.message.clone(),
            ticket.clone(),
        );
        state.approval_id = self.request_approval(&state, &ticket);
        state.ticket = Some(Box::new(ticket));
        state.result = None;
        self.put_call(state)?;
        self.emit(AgentEvent::ToolCallDone {
            id: call_id.clone(),
            message_id: self.run.step_message_id.clone(),
            result,
            outcome: ToolCallOutcome::Suspended,
        });
        Ok(())
    }

    /// Records a terminal result for a call: status from the result, result message,
    /// ToolCallDone, then the AfterToolExecute phase.
    pub(super) async fn settle_call(
        &mut self,
        call_id: &ToolCallId,
        result: ToolResult,
    ) -> Step<()> {
        let status = if result.is_error() {
            ToolCallStatus::Failed
        } else {
            ToolCallStatus::Succeeded
        };
        if !self.runs_phase(Phase::AfterToolExecute) {
            return self.close_call(call_id, status, result).await;
        }
        self.close_call(call_id, status, result.clone()).await?;
        let Some(state) = self.calls().get(call_id) else {
            return Ok(());
        };
        let view = ToolCallView {
            call_id: call_id.clone(),
            tool_name: state.tool_name.clone(),
            arguments: state.arguments.clone(),
            result: Some(result),
            decision: state.decision.clone(),
        };
        self.phase(Phase::AfterToolExecute, Some(view)).await?;
        Ok(())
    }

    pub(super) async fn close_call(
        &mut self,
        call_id: &ToolCallId,
        status: ToolCallStatus,
        result: ToolResult,
    ) -> Step<()> {
        let Some(mut state) = self.calls().get(call_id).cloned() else {
            return Ok(());
        };
        state
            .transition_to(status, now_ms())
            .map_err(state_failure)?;
        state.result = Some(result.clone());
        self.put_call(state)?;
        let message_id = MessageId::generate();
        let mut message = Message::tool_result(call_id.clone(), result.to_json_text())
            .with_run_id(self.run.identity.run_id.clone());
        message.id = message_id.clone();
        self.thread.push_message(message);
        let outcome = if status == ToolCallStatus::Succeeded {
            ToolCallOutcome::Succeeded
        } else {
            ToolCallOutcome::Failed
        };
        self.emit(AgentEvent::ToolCallDone {
            id: call_id.clone(),
            message_id,
            result,
            outcome,
        });
        Ok(())
    }
}

/// Which calls may start now, in request order.
pub(super) fn startable(calls: &ToolCalls, mode: ToolExecutionMode) -> Vec<ToolCallId> {
    match mode {
        ToolExecutionMode::Sequential => {
            for call in &calls.calls {
                match call.status {
                    ToolCallStatus::New | ToolCallStatus::Resuming => {
                        return vec![call.call_id.clone()];
                    }
                    // One at a time; and a suspension stops the calls after it.
                    ToolCallStatus::Running | ToolCallStatus::Suspended => return Vec::new(),
                    _ => {}
                }
            }
            Vec::new()
        }
        ToolExecutionMode::ParallelStreaming => calls
            .calls
            .iter()
            .filter(|c| matches!(c.status, ToolCallStatus::New | ToolCallStatus::Resuming))
            .map(|c| c.call_id.clone())
            .collect(),
        ToolExecutionMode::ParallelBatchApproval => {
            // Decided calls replay only once every suspended call has a decision.
            let all_decided = !calls.any(ToolCallStatus::Suspended);
            calls
                .calls
                .iter()
                .filter(|c| {
                    c.status == ToolCallStatus::New
                        || (all_decided && c.status == ToolCallStatus::Resuming)
                })
                .map(|c| c.call_id.clone())
                .collect()
        }
    }
}

pub(super) fn tool_error_result(tool_name: &str, error: &ToolError) -> ToolResult {
    let code = match error {
        ToolError::InvalidArguments(_) => "invalid_arguments",
        ToolError::ExecutionFailed(_) => "execution_failed",
        ToolError::Denied(_) => "denied",
        ToolError::NotFound(_) => "not_found",
        _ => "internal",
    };
    ToolResult::error_with_code(tool_name.to_owned(), code, error.to_string())
}

/// The ticket of a tool that suspended without one: replay it after approval.
pub(super) fn default_ticket(state: &ToolCallState, message: Option<&str>) -> SuspendTicket {
    SuspendTicket {
        suspension: Suspension {
            id: format!("suspension:{}:{}", state.call_id, state.attempt),
            action: "tool_pending".to_owned(),
            message: message
                .unwrap_or("the tool is waiting for a decision")
                .to_owned(),
            parameters: state.arguments.clone(),
            response_schema: None,
        },
        pending: PendingToolCall {
            id: state.call_id.clone(),
            name: state.tool_name.clone(),
            arguments: state.arguments.clone(),
        },
        resume_mode: ToolCallResumeMode::ReplayToolCall,
        child: None,
        remote: None,
    }
}
