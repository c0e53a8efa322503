//! Steps: building the inference request, compaction, and what an inference result leads to.

use std::sync::Arc;

use crate::actions::{
    BehaviorRequestKey, ContextMessagesKey, ContextMessagesUpdate, InferenceOverrideKey,
    InferenceOverrideUpdate, ToolFilter, ToolFilterKey, ToolFilterUpdate,
};
use crate::clock::now_ms;
use crate::context::{
    Compaction, CompactionConfig, CompactionConfigKey, CompactionState, DefaultSummarizer, compact,
    compacted_view, estimate_message_tokens,
};
use crate::contract::{
    AgentEvent, ContentBlock, ContextWindowPolicy, Message, TerminationReason, ToolCallState,
    Visibility, strip_unpaired_tool_calls,
};
use crate::error::InferenceExecutionError;
use crate::ids::MessageId;
use crate::llm::truncation::{
    TruncationRecovery, TruncationState, TruncationUpdate, is_truncated_tool_call, plan_recovery,
};
use crate::llm::{InferenceRequest, LlmExecutor, StreamResult};
use crate::phase::Phase;
use crate::state::StateCommand;
use crate::thread::keys::{ToolCallStates, ToolCallsUpdate};

use super::{Driver, Failure, Next, Step};

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

impl Driver<'_> {
    pub(super) async fn next_step(&mut self) -> Step<Next> {
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
    pub(super) fn compaction_job(&mut self, step: u32) -> Step<Option<CompactionJob>> {
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

    pub(super) fn try_compaction_done(
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
    pub(super) fn history_view(&self) -> Vec<Message> {
        match self.thread.store.get::<CompactionState>() {
            Some(compactions) => compacted_view(&self.thread.messages, compactions),
            None => self.thread.messages.to_vec(),
        }
    }

    pub(super) fn build_request(&mut self, step: u32) -> Step<InferenceRequest> {
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

    pub(super) async fn try_inference_done(
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
    pub(super) async fn recover_truncation(&mut self, response: &StreamResult) -> Step<Next> {
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
}
