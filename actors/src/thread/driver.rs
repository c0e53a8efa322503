//! The run loop, as segments between external waits.
//!
//! A run alternates between work the thread does itself (phases, commits,
//! checkpoints) and waits for the outside (the model, tools, humans). Each `Driver`
//! method is one such segment: it runs on a task that has borrowed the thread's core,
//! and returns [`Next`] — what the thread actor must wait for before the next
//! segment. The actor never awaits any of this itself.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::now_ms;

use serde_json::json;

use crate::actions::{
    BehaviorRequestKey, ContextMessagesKey, ContextMessagesUpdate, InferenceOverrideKey,
    InferenceOverrideUpdate, ToolFilter, ToolFilterKey, ToolFilterUpdate, ToolInterceptKey,
    ToolInterceptPayload, ToolInterceptUpdate,
};
use crate::context::{
    Compaction, CompactionConfig, CompactionConfigKey, CompactionState, DefaultSummarizer, compact,
    compacted_view, estimate_message_tokens,
};
use crate::contract::{
    AgentEvent, AppliedDecision, ContentBlock, ContextWindowPolicy, Message, PendingToolCall,
    RUN_CANCELLED_MESSAGE, ResumeDecisionAction, RunStatus, RunWaitingState, RunWaitingTicket,
    StoppedReason, SuspendTicket, Suspension, TerminationReason, ToolCallOutcome, ToolCallResume,
    ToolCallResumeMode, ToolCallState, ToolCallStatus, ToolExecutionMode, ToolResult, ToolStatus,
    Visibility, WaitingReason, strip_unpaired_tool_calls,
};
use crate::error::{InferenceExecutionError, StateError, StorageError, ToolError};
use crate::handoff::{ActiveAgentKey, HandoffAction};
use crate::ids::{MessageId, ToolCallId};
use crate::llm::truncation::{
    TruncationRecovery, TruncationState, TruncationUpdate, is_truncated_tool_call, plan_recovery,
};
use crate::llm::{InferenceRequest, LlmExecutor, StreamResult};
use crate::phase::{EffectBatch, Phase, PhaseContext, ToolCallView};
use crate::policies::StopRequest;
use crate::state::{PendingScheduledActions, Snapshot, StateCommand};
use crate::store::Checkpoint;
use crate::telemetry;
use crate::tool::{CancelledCall, ResumedCall, Tool, ToolCallContext, ToolOutput};

use super::core::{RunCore, ThreadCore};
use super::deps::ThreadDeps;
use super::keys::{RunLifecycle, RunLifecycleKey, ToolCallStates, ToolCalls, ToolCallsUpdate};

/// What the thread must wait for after a segment.
pub(crate) enum Next {
    /// Run inference with this request.
    Infer(InferenceRequest),
    /// Summarize older history first (the agent's `autocompact_threshold` was passed).
    Compact(Box<CompactionJob>),
    /// Start these tool calls (possibly none: calls already running will report).
    Launch(Vec<Launch>),
    /// The run waits for decisions; it was checkpointed.
    Wait,
    /// The run ended; it was checkpointed.
    Finished,
    /// Another node owns the thread now: stop without writing anything else.
    Fenced,
}

/// An LLM summarization of older history, run outside the thread like inference.
pub(crate) struct CompactionJob {
    pub(crate) history: Vec<Message>,
    pub(crate) policy: ContextWindowPolicy,
    pub(crate) config: CompactionConfig,
    pub(crate) executor: Arc<dyn LlmExecutor>,
    pub(crate) model: String,
}

impl CompactionJob {
    /// Runs the summarization.
    pub(crate) async fn run(self) -> Result<Option<Compaction>, InferenceExecutionError> {
        let summarizer = DefaultSummarizer::new(self.executor, &self.model, self.config.clone());
        compact(
            &self.history,
            &self.policy,
            &self.config,
            &summarizer,
            now_ms(),
        )
        .await
    }
}

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

enum Prepared {
    Launch(Box<Launch>),
    Settled,
    Blocked(String),
}

/// A segment failure: state errors end the run with `Error`; a refused fencing token
/// stops the thread.
enum Failure {
    State(String),
    Fenced,
}

impl From<StateError> for Failure {
    fn from(err: StateError) -> Self {
        Self::State(err.to_string())
    }
}

impl From<StorageError> for Failure {
    fn from(err: StorageError) -> Self {
        match err {
            StorageError::Fenced { .. } => Self::Fenced,
            other => Self::State(other.to_string()),
        }
    }
}

type Step<T> = Result<T, Failure>;

fn now_secs() -> u64 {
    now_ms() / 1000
}

/// One segment's view of a thread and its run.
pub(crate) struct Driver<'a> {
    pub(crate) thread: &'a mut ThreadCore,
    pub(crate) run: &'a mut RunCore,
    pub(crate) deps: &'a ThreadDeps,
}

impl Driver<'_> {
    // ------------------------------------------------------------- entry points

    /// A new run: append its input, RunStart, checkpoint, first step.
    ///
    /// A run that writes its thread holds its events until its first checkpoint
    /// commits, so no listener learns of a thread the store does not have
    /// (decision 0071).
    pub(crate) async fn start(&mut self, input: Vec<Message>) -> Next {
        let holding = self.thread.unwritten.is_some();
        if holding {
            self.run.events.hold();
        }
        let outcome = self.try_start(input).await;
        let next = self.settle(outcome).await;
        if !holding {
            return next;
        }
        if self.thread.unwritten.take().is_some() {
            // The run ended without writing its thread (the store refused every
            // checkpoint): nobody can reach the thread, so its core is left to
            // the idle sweep like any other.
            tracing::warn!(thread_id = %self.thread.thread_id, "a new thread's run ended before the thread was written");
        }
        if matches!(next, Next::Fenced) {
            // Another node owns the thread now and runs this dispatch from the
            // start: nothing of this activation was recorded or may be seen.
            self.run.events.discard();
        } else {
            // The run ended without a recorded checkpoint: its listeners still
            // learn how.
            self.run.events.release();
        }
        next
    }

    async fn try_start(&mut self, input: Vec<Message>) -> Step<Next> {
        self.thread.install(&self.run.agent)?;
        self.thread.store.begin_run();
        self.meters().run_started();
        self.emit(AgentEvent::RunStart {
            thread_id: self.thread.thread_id.clone(),
            run_id: self.run.identity.run_id.clone(),
            parent_run_id: self.run.identity.parent_run_id.clone(),
        });
        for message in input {
            let message = message.with_run_id(self.run.identity.run_id.clone());
            self.thread.push_message(message);
        }
        self.phase(Phase::RunStart, None).await?;
        self.apply_handoff()?;
        self.checkpoint().await?;
        self.next_step().await
    }

    /// Continues a run found `Running` when the thread was restarted after a crash:
    /// from its last checkpoint, which is always between steps or at a suspension.
    pub(crate) async fn resume_after_restart(&mut self) -> Next {
        self.emit(AgentEvent::RunStart {
            thread_id: self.thread.thread_id.clone(),
            run_id: self.run.identity.run_id.clone(),
            parent_run_id: self.run.identity.parent_run_id.clone(),
        });
        let outcome = if let Err(failure) = self.apply_handoff() {
            Err(failure)
        } else if self.calls().all_terminal() {
            self.next_step().await
        } else {
            self.reopen_step();
            self.advance().await
        };
        self.settle(outcome).await
    }

    /// Ends a run that crashed its thread too often.
    pub(crate) async fn give_up(&mut self, reason: String) -> Next {
        let outcome = self.finish(TerminationReason::Error(reason)).await;
        self.settle(outcome).await
    }

    /// The model answered (or failed).
    pub(crate) async fn inference_done(
        &mut self,
        result: Result<StreamResult, InferenceExecutionError>,
        duration_ms: u64,
    ) -> Next {
        let outcome = self.try_inference_done(result, duration_ms).await;
        self.settle(outcome).await
    }

    /// A tool call execution ended.
    pub(crate) async fn tool_finished(
        &mut self,
        call_id: ToolCallId,
        attempt: u32,
        outcome: ToolOutcome,
    ) -> Next {
        let outcome = self.try_tool_finished(call_id, attempt, outcome).await;
        self.settle(outcome).await
    }

    /// A validated decision for a suspended call.
    pub(crate) async fn decide(&mut self, call_id: ToolCallId, resume: ToolCallResume) -> Next {
        let outcome = self.try_decide(call_id, resume).await;
        self.settle(outcome).await
    }

    /// Cancels the run: every unfinished call is cancelled, then RunEnd.
    pub(crate) async fn cancel(&mut self) -> Next {
        let outcome = self.try_cancel().await;
        self.settle(outcome).await
    }

    /// Turns a failed segment into the end of the run.
    async fn settle(&mut self, outcome: Step<Next>) -> Next {
        match outcome {
            Ok(next) => next,
            Err(Failure::Fenced) => Next::Fenced,
            Err(Failure::State(message)) => {
                tracing::warn!(run_id = %self.run.identity.run_id, %message, "run failed");
                self.emit(AgentEvent::Error {
                    message: message.clone(),
                    code: Some("run_failed".to_owned()),
                });
                match self.finish(TerminationReason::Error(message.clone())).await {
                    Ok(next) => next,
                    Err(Failure::Fenced) => Next::Fenced,
                    // The end of the run could not even be recorded: still tell the
                    // listeners; the store keeps the last good checkpoint.
                    Err(Failure::State(_)) => {
                        self.emit(AgentEvent::RunFinish {
                            thread_id: self.thread.thread_id.clone(),
                            run_id: self.run.identity.run_id.clone(),
                            result: None,
                            termination: TerminationReason::Error(message),
                        });
                        Next::Finished
                    }
                }
            }
        }
    }

    // ------------------------------------------------------------- steps

    async fn next_step(&mut self) -> Step<Next> {
        if self.run.cancellation.is_cancelled() {
            return self.finish(TerminationReason::Cancelled).await;
        }
        let mut lifecycle = self.lifecycle();
        lifecycle.step += 1;
        let step = lifecycle.step;
        self.run.step_message_id = MessageId::generate();
        lifecycle.step_message_id = Some(self.run.step_message_id.clone());
        self.set_lifecycle(lifecycle)?;
        self.run.record.steps = step;
        self.emit(AgentEvent::StepStart {
            message_id: self.run.step_message_id.clone(),
        });
        self.phase(Phase::StepStart, None).await?;
        self.phase(Phase::BeforeInference, None).await?;
        if let Some(Some(reason)) = self.thread.store.get::<BehaviorRequestKey>() {
            tracing::debug!(run_id = %self.run.identity.run_id, %reason, "a plugin skipped inference");
            self.emit(AgentEvent::StepEnd);
            return self.finish(TerminationReason::BehaviorRequested).await;
        }
        if let Some(job) = self.compaction_job(step)? {
            return Ok(Next::Compact(Box::new(job)));
        }
        let request = self.build_request(step)?;
        Ok(Next::Infer(request))
    }

    /// A summarization of older history, when the agent's context policy asks for one
    /// and this step has not been checked yet.
    fn compaction_job(&mut self, step: u32) -> Step<Option<CompactionJob>> {
        let spec = Arc::clone(&self.run.agent.spec);
        let Some(policy) = spec.context_policy.clone() else {
            return Ok(None);
        };
        let Some(threshold) = policy.autocompact_threshold else {
            return Ok(None);
        };
        let mut lifecycle = self.lifecycle();
        if lifecycle.compaction_checked_step == step {
            return Ok(None);
        }
        lifecycle.compaction_checked_step = step;
        self.set_lifecycle(lifecycle)?;
        let history = self.history_view();
        let tokens: usize = history.iter().map(estimate_message_tokens).sum();
        if (tokens as u64) < threshold {
            return Ok(None);
        }
        Ok(Some(CompactionJob {
            history,
            policy,
            config: spec.config::<CompactionConfigKey>()?,
            executor: Arc::clone(&self.run.agent.executor),
            model: self.run.agent.model.model.clone(),
        }))
    }

    /// The summarization finished: record it (a failure only skips it), then infer.
    pub(crate) async fn compaction_done(
        &mut self,
        result: Result<Option<Compaction>, InferenceExecutionError>,
    ) -> Next {
        let outcome = self.try_compaction_done(result);
        self.settle(outcome).await
    }

    fn try_compaction_done(
        &mut self,
        result: Result<Option<Compaction>, InferenceExecutionError>,
    ) -> Step<Next> {
        match result {
            Ok(Some(compaction)) => {
                let mut command = StateCommand::new();
                command.update::<CompactionState>(compaction.record);
                self.thread.store.commit(command)?;
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(run_id = %self.run.identity.run_id, %error, "compaction failed; continuing with the full history");
            }
        }
        let step = self.lifecycle().step;
        let request = self.build_request(step)?;
        Ok(Next::Infer(request))
    }

    /// The history as the model sees it: after the latest compaction, its summary and
    /// the messages it did not cover.
    fn history_view(&self) -> Vec<Message> {
        match self.thread.store.get::<CompactionState>() {
            Some(compactions) => compacted_view(&self.thread.messages, compactions),
            None => self.thread.messages.to_vec(),
        }
    }

    fn build_request(&mut self, step: u32) -> Step<InferenceRequest> {
        let spec = Arc::clone(&self.run.agent.spec);
        let snapshot = self.thread.store.snapshot();
        let mut messages = Vec::new();
        if !spec.system_prompt.is_empty() {
            messages.push(Message::system(spec.system_prompt.clone()));
        }
        let mut consume = StateCommand::new();
        if let Some(context) = snapshot.get::<ContextMessagesKey>() {
            let injected = context.for_step(step);
            if !injected.is_empty() {
                consume.update::<ContextMessagesKey>(ContextMessagesUpdate::Injected { step });
            }
            for injected in injected {
                let mut message = match injected.role {
                    crate::contract::Role::User => Message::user(injected.content.clone()),
                    _ => Message::system(injected.content.clone()),
                };
                message.visibility = Visibility::Internal;
                messages.push(message);
            }
        }
        let mut history = self.history_view();
        strip_unpaired_tool_calls(&mut history);
        messages.extend(history);

        let offered = self.run.agent.tool_descriptors.to_vec();
        let tools = match snapshot.get::<ToolFilterKey>() {
            Some(filter) => filter.apply(offered),
            None => offered,
        };
        let mut request =
            InferenceRequest::new(self.run.agent.model.model.clone(), messages).with_tools(tools);
        if let Some(overrides) = &self.run.overrides {
            request.apply_override(overrides);
        }
        if let Some(overrides) = snapshot.get::<InferenceOverrideKey>() {
            request.apply_override(overrides);
        }
        self.run
            .agent
            .env
            .apply_request_transforms(&mut request, &snapshot);

        // The step's context, override and filter are consumed by this request; a
        // step that had none of them commits nothing.
        if snapshot
            .get::<InferenceOverrideKey>()
            .is_some_and(|o| !o.is_empty())
        {
            consume.update::<InferenceOverrideKey>(InferenceOverrideUpdate::Clear);
        }
        if snapshot
            .get::<ToolFilterKey>()
            .is_some_and(|f| *f != ToolFilter::default())
        {
            consume.update::<ToolFilterKey>(ToolFilterUpdate::Clear);
        }
        if !consume.is_empty() {
            self.thread.store.commit(consume)?;
        }
        Ok(request)
    }

    async fn try_inference_done(
        &mut self,
        result: Result<StreamResult, InferenceExecutionError>,
        duration_ms: u64,
    ) -> Step<Next> {
        let response = match result {
            Ok(response) => response,
            Err(InferenceExecutionError::Cancelled) => {
                return self.finish(TerminationReason::Cancelled).await;
            }
            Err(error) => {
                return Err(Failure::State(format!("inference failed: {error}")));
            }
        };
        if let Some(usage) = &response.usage {
            self.run.record.input_tokens += usage.prompt_tokens.unwrap_or(0);
            self.run.record.output_tokens += usage.completion_tokens.unwrap_or(0);
        }
        self.emit(AgentEvent::InferenceComplete {
            model: self.run.agent.model.model.clone(),
            usage: response.usage,
            duration_ms,
        });

        let truncated = is_truncated_tool_call(&response);
        // Broken tool calls of a truncated response are never executed.
        let tool_calls = if truncated {
            Vec::new()
        } else {
            response.tool_calls.clone()
        };
        let mut assistant = Message::assistant_with_tool_calls("", tool_calls.clone())
            .with_run_id(self.run.identity.run_id.clone());
        assistant.content = response
            .content
            .iter()
            .filter(|b| !matches!(b, ContentBlock::Text { text } if text.is_empty()))
            .cloned()
            .collect();
        assistant.id = self.run.step_message_id.clone();
        if !assistant.content.is_empty() || !assistant.tool_calls.is_empty() {
            self.thread.push_message(assistant);
        }
        let response = Arc::new(response);
        self.run.last_response = Some(Arc::clone(&response));
        self.phase(Phase::AfterInference, None).await?;

        if truncated {
            return self.recover_truncation(&response).await;
        }
        if tool_calls.is_empty() {
            return self.end_step(true).await;
        }
        let states: Vec<ToolCallState> = tool_calls.iter().map(ToolCallState::new).collect();
        for call in &tool_calls {
            self.emit(AgentEvent::ToolCallReady {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        let mut command = StateCommand::new();
        command.update::<ToolCallStates>(ToolCallsUpdate::Replace(states));
        self.thread.store.commit(command)?;
        self.advance().await
    }

    /// A response cut off mid tool call: ask the model to continue in smaller pieces,
    /// a bounded number of times (`max_continuation_retries`).
    async fn recover_truncation(&mut self, response: &StreamResult) -> Step<Next> {
        let counter = self
            .thread
            .store
            .get::<TruncationState>()
            .copied()
            .unwrap_or_default();
        match plan_recovery(
            response,
            &counter,
            self.run.agent.spec.max_continuation_retries,
        ) {
            TruncationRecovery::Continue(prompt) => {
                let mut command = StateCommand::new();
                command.update::<TruncationState>(TruncationUpdate::Continued);
                self.thread.store.commit(command)?;
                self.thread
                    .push_message(prompt.with_run_id(self.run.identity.run_id.clone()));
                self.end_step(false).await
            }
            TruncationRecovery::Exhausted | TruncationRecovery::NotTruncated => {
                self.finish(TerminationReason::Error(
                    "the model's output was truncated mid tool call too many times".to_owned(),
                ))
                .await
            }
        }
    }

    /// StepEnd: phase, checkpoint, then the next step or the end of the run.
    async fn end_step(&mut self, natural_end: bool) -> Step<Next> {
        self.phase(Phase::StepEnd, None).await?;
        self.apply_handoff()?;
        self.emit(AgentEvent::StepEnd);
        let ending = if self.run.cancellation.is_cancelled() {
            Some(TerminationReason::Cancelled)
        } else if let Some(Some(stop)) = self.thread.store.get::<StopRequest>() {
            let stop: StoppedReason = stop.clone();
            Some(TerminationReason::Stopped(stop))
        } else {
            natural_end.then_some(TerminationReason::NaturalEnd)
        };
        match ending {
            // The run's end checkpoint, right after, persists this step with it:
            // one write instead of two.
            Some(reason) => self.finish(reason).await,
            None => {
                self.checkpoint().await?;
                self.next_step().await
            }
        }
    }

    /// RunEnd: phase, record, checkpoint, RunFinish.
    async fn finish(&mut self, reason: TerminationReason) -> Step<Next> {
        if let Err(error) = self.phase(Phase::RunEnd, None).await {
            tracing::warn!(run_id = %self.run.identity.run_id, error = %error_text(&error), "RunEnd phase failed");
        }
        if let Err(error) = self.run.record.finish(reason.clone(), now_secs()) {
            tracing::warn!(run_id = %self.run.identity.run_id, %error, "run already finished");
        }
        self.checkpoint_before(1).await?;
        let lived = Duration::from_secs(now_secs().saturating_sub(self.run.record.created_at));
        self.deps.metrics.run_finished(
            self.run.agent.spec.id.as_str(),
            &self.meters(),
            reason.code(),
            lived,
        );
        let response = self
            .thread
            .messages
            .iter()
            .rev()
            .find(|m| m.role == crate::contract::Role::Assistant)
            .map(Message::text)
            .unwrap_or_default();
        self.emit(AgentEvent::RunFinish {
            thread_id: self.thread.thread_id.clone(),
            run_id: self.run.identity.run_id.clone(),
            result: Some(json!({ "response": response })),
            termination: reason.clone(),
        });
        Ok(Next::Finished)
    }

    // ------------------------------------------------------------- handoff

    /// Runs the run on the variant the thread's [`ActiveAgentKey`] names: refuses a
    /// request or an active variant the agent does not have (an error event, and the
    /// thread stays on what it ran), and re-resolves the agent when the variant
    /// changed. Called where the book's switch happens (RunStart, StepEnd) and where
    /// a passivated run is taken up again.
    fn apply_handoff(&mut self) -> Step<()> {
        let Some(state) = self.thread.store.get::<ActiveAgentKey>().cloned() else {
            return Ok(());
        };
        let variants = self.run.agent.env.agent_variants();
        let mut refusal = None;
        if let Some(requested) = &state.requested_agent
            && !variants.contains_key(requested)
        {
            refusal = Some((requested.clone(), HandoffAction::Withdraw));
        }
        if let Some(active) = &state.active_agent
            && !variants.contains_key(active)
        {
            refusal = Some((active.clone(), HandoffAction::Clear));
        }
        if let Some((variant, action)) = refusal {
            self.emit(AgentEvent::Error {
                message: format!(
                    "handoff refused: agent `{}` has no variant `{variant}`",
                    self.run.identity.agent_id
                ),
                code: Some("handoff_unknown_variant".to_owned()),
            });
            let mut command = StateCommand::new();
            command.update::<ActiveAgentKey>(action);
            self.thread.store.commit(command)?;
        }
        let active = self
            .thread
            .store
            .get::<ActiveAgentKey>()
            .and_then(|state| state.active_agent.clone());
        if active == self.run.variant {
            return Ok(());
        }
        let agent_id = self.run.identity.agent_id.as_str();
        let agent = match &active {
            Some(variant) => self.deps.resolver.resolve_variant(agent_id, variant),
            None => self.deps.resolver.resolve(agent_id),
        }
        .map_err(state_failure)?;
        tracing::debug!(run_id = %self.run.identity.run_id, from = ?self.run.variant, to = ?active, "handoff");
        self.thread.install(&agent)?;
        self.run.agent = agent;
        self.run.variant = active;
        Ok(())
    }

    // ------------------------------------------------------------- tool calls

    /// Starts every call that may start now and decides what the run waits for.
    async fn advance(&mut self) -> Step<Next> {
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

    async fn prepare(
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

    async fn try_tool_finished(
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

    async fn try_decide(&mut self, call_id: ToolCallId, resume: ToolCallResume) -> Step<Next> {
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
        self.run.record.decisions.push(AppliedDecision {
            decision_id: resume.decision_id.clone(),
            call_id: call_id.clone(),
        });
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

    async fn try_cancel(&mut self) -> Step<Next> {
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
    fn notify_cancelled(&self, call: &ToolCallState) {
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

    /// Marks a call suspended with its ticket and tells the stream.
    fn suspend_call(&mut self, call_id: &ToolCallId, ticket: SuspendTicket) -> Step<()> {
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
    async fn settle_call(&mut self, call_id: &ToolCallId, result: ToolResult) -> Step<()> {
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

    async fn close_call(
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

    async fn suspend_run(&mut self) -> Step<Next> {
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
    fn reopen_step(&mut self) {
        self.emit(AgentEvent::StepStart {
            message_id: self.run.step_message_id.clone(),
        });
    }

    // ------------------------------------------------------------- plumbing

    /// The step's call states, borrowed: cloning them copies every call's
    /// arguments and result.
    fn calls(&self) -> &ToolCalls {
        static NO_CALLS: ToolCalls = ToolCalls { calls: Vec::new() };
        self.thread
            .store
            .get::<ToolCallStates>()
            .unwrap_or(&NO_CALLS)
    }

    fn put_call(&mut self, state: ToolCallState) -> Step<()> {
        let mut command = StateCommand::new();
        command.update::<ToolCallStates>(ToolCallsUpdate::Put(Box::new(state)));
        self.thread.store.commit(command)?;
        Ok(())
    }

    fn lifecycle(&self) -> RunLifecycle {
        self.thread
            .store
            .get::<RunLifecycleKey>()
            .cloned()
            .unwrap_or_default()
    }

    fn set_lifecycle(&mut self, lifecycle: RunLifecycle) -> Step<()> {
        let mut command = StateCommand::new();
        command.update::<RunLifecycleKey>(lifecycle);
        self.thread.store.commit(command)?;
        Ok(())
    }

    fn emit(&self, event: AgentEvent) {
        self.run.events.emit(event);
    }

    /// The meters of the agent (and model) this run runs on now.
    fn meters(&self) -> std::sync::Arc<telemetry::AgentMeters> {
        let agent = &self.run.agent;
        self.deps.metrics.agent(
            agent.spec.id.as_str(),
            &agent.model.provider,
            &agent.model.model,
        )
    }

    /// Whether `phase` has anything to run: hooks, or scheduled actions due in it.
    /// Callers skip building what only the phase would read.
    fn runs_phase(&self, phase: Phase) -> bool {
        !self.run.agent.env.hooks_for_phase(phase).is_empty()
            || self
                .thread
                .store
                .get::<PendingScheduledActions>()
                .is_some_and(|p| p.has_due(phase))
    }

    async fn phase(&mut self, phase: Phase, tool_call: Option<ToolCallView>) -> Step<()> {
        if !self.runs_phase(phase) {
            return Ok(());
        }
        let env = Arc::clone(&self.run.agent.env);
        let mut ctx = PhaseContext::new(
            phase,
            Arc::clone(&self.run.agent.spec),
            Arc::clone(&self.run.identity),
            self.thread.messages_view(),
            self.run.cancellation.clone(),
        )
        .with_step(self.lifecycle().step);
        if let Some(call) = tool_call {
            ctx = ctx.with_tool_call(call);
        }
        if let Some(response) = &self.run.last_response {
            ctx = ctx.with_inference(Arc::clone(response));
        }
        if let Some(profile) = &self.deps.profile {
            ctx = ctx.with_profile(profile.clone());
        }
        let report = self
            .deps
            .phases
            .run_phase(&env, &mut self.thread.store, ctx)
            .await?;
        if !report.effects.is_empty() {
            tokio::spawn(async move {
                report.effects.dispatch(&env).await;
            });
        }
        Ok(())
    }

    fn dispatch_effects(&self, effects: Vec<crate::state::TypedEffect>) {
        if effects.is_empty() {
            return;
        }
        let env = Arc::clone(&self.run.agent.env);
        let batch = EffectBatch::from_commit(effects, &self.thread.store.snapshot());
        tokio::spawn(async move {
            batch.dispatch(&env).await;
        });
    }

    /// Persists new messages, the run record and the state, atomically and fenced.
    async fn checkpoint(&mut self) -> Step<()> {
        self.checkpoint_before(0).await
    }

    /// A checkpoint followed by `trailing_events` events that close the activation
    /// (`StepEnd`, `RunFinish`): their seqs are reserved, so the next activation,
    /// which starts from this checkpoint, numbers on after them.
    async fn checkpoint_before(&mut self, trailing_events: u64) -> Step<()> {
        let mut lifecycle = self.lifecycle();
        lifecycle.next_event_seq = self.run.events.next_seq() + trailing_events;
        self.set_lifecycle(lifecycle)?;
        let state = self.thread.store.checkpoint_state();
        self.run.record.updated_at = now_secs();
        let checkpoint = Checkpoint {
            thread_id: self.thread.thread_id.clone(),
            fencing: self.deps.fence.token(&self.thread.thread_id),
            expected_message_count: self.thread.persisted_messages,
            new_messages: self.thread.unpersisted_messages(),
            run: self.run.record.clone(),
            state,
            new_thread: self.thread.unwritten.clone(),
        };
        let appended = checkpoint.new_messages.len() as u64;
        self.deps.store.checkpoint(checkpoint).await?;
        self.thread.persisted_messages += appended;
        if self.thread.unwritten.take().is_some() {
            self.run.events.release();
        }
        Ok(())
    }
}

/// Which calls may start now, in request order.
fn startable(calls: &ToolCalls, mode: ToolExecutionMode) -> Vec<ToolCallId> {
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

fn tool_error_result(tool_name: &str, error: &ToolError) -> ToolResult {
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
fn default_ticket(state: &ToolCallState, message: Option<&str>) -> SuspendTicket {
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

fn state_failure(error: impl std::fmt::Display) -> Failure {
    Failure::State(error.to_string())
}

fn error_text(failure: &Failure) -> String {
    match failure {
        Failure::State(message) => message.clone(),
        Failure::Fenced => "fenced".to_owned(),
    }
}
