//! Work outside the thread: a step's inference and its tool calls.

use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use async_trait::async_trait;
use futures::StreamExt;
use ractor::{Actor, ActorRef};

use crate::contract::AgentEvent;
use crate::error::InferenceExecutionError;
use crate::event_sink::EventSink;
use crate::ids::RunId;
use crate::inline::EarlyReports;
use crate::llm::{InferenceChunk, InferenceRequest};
use crate::telemetry;
use crate::thread::core::RunCore;
use crate::thread::run::{Launch, ToolOutcome};
use crate::thread::tool_call::{ToolCallActor, ToolCallArgs};

use super::{Input, ThreadActorState, ThreadMsg};

impl ThreadActorState {
    /// Runs the step's inference outside the handler. A model that answers at once
    /// (scripted, cached) finishes during the first poll: its deltas and result are
    /// taken here, without a message per piece; a model that has to wait continues
    /// on a task that reports each piece by message.
    pub(super) fn start_inference(
        &mut self,
        run: &RunCore,
        request: InferenceRequest,
        myself: &ActorRef<ThreadMsg>,
    ) {
        let executor = Arc::clone(&run.agent.executor);
        let cancellation = run.cancellation.clone();
        let run_id = run.identity.run_id.clone();
        let span = telemetry::chat(&run.span, &run.agent.model.provider, &request.model);
        telemetry::record_input(&span, &request.messages);
        // Which model answered is certain only without fallbacks.
        let answering_model = (span.is_recording() && request.fallback_models.is_empty())
            .then(|| request.model.clone());
        let traced = span.clone();
        let metrics = Arc::clone(&self.deps.metrics);
        let meters = metrics.agent(
            run.agent.spec.id.as_str(),
            &run.agent.model.provider,
            &run.agent.model.model,
        );
        // Deltas of the first poll are handled by this handler; the task sends later
        // ones as messages, which the actor handles after this one.
        let early = Arc::new(EarlyReports::new());
        let pieces = Arc::clone(&early);
        let reporter = myself.clone();
        let delta_run = run_id.clone();
        let inference = async move {
            let started = Instant::now();
            let mut stream = executor.execute_stream(request);
            let result = loop {
                tokio::select! {
                    biased;
                    () = cancellation.cancelled() => break Err(InferenceExecutionError::Cancelled),
                    item = stream.next() => match item {
                        None => break Err(InferenceExecutionError::provider("the model stream ended without a result")),
                        Some(Err(error)) => break Err(error),
                        Some(Ok(InferenceChunk::Done(result))) => break Ok(result),
                        Some(Ok(InferenceChunk::Delta(delta))) => {
                            if let Some(delta) = pieces.keep(delta) {
                                let _ = reporter.send_message(ThreadMsg::InferenceDelta {
                                    run_id: delta_run.clone(),
                                    delta,
                                });
                            }
                        }
                    },
                }
            };
            let elapsed = started.elapsed();
            let duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
            telemetry::chat_ended(&span, answering_model.as_deref(), &result);
            match &result {
                Ok(answer) => {
                    let usage = answer.usage.as_ref();
                    meters.chat_answered(
                        elapsed,
                        usage.and_then(|u| u.prompt_tokens),
                        usage.and_then(|u| u.completion_tokens),
                    );
                }
                Err(error) => {
                    metrics.chat_failed(&meters, telemetry::inference_error_type(error), elapsed);
                }
            }
            (result, duration_ms)
        };
        let reporter = myself.clone();
        let done_run = run_id.clone();
        let report = move |(result, duration_ms)| {
            let _ = reporter.send_message(ThreadMsg::InferenceDone {
                run_id: done_run,
                result,
                duration_ms,
            });
        };
        let finished = crate::inline::ready_or_spawn(traced.traced(inference), report);
        for delta in early.take() {
            self.on_delta(&run_id, delta);
        }
        match finished {
            Some((result, duration_ms)) => self.queue.push_back(Input::Inference {
                run_id,
                result,
                duration_ms,
            }),
            None => {
                if let Some(ctl) = self.ctl.as_mut().filter(|c| c.run_id == run_id) {
                    ctl.step_inferring = true;
                }
            }
        }
    }

    /// Starts one tool call attempt. An execution that is finished the first time it
    /// is polled reports at once (decision 0037); one that has to wait continues in
    /// a child `ToolCallActor`.
    pub(super) async fn launch(
        &mut self,
        run_id: &RunId,
        mut launch: Launch,
        myself: &ActorRef<ThreadMsg>,
    ) {
        let call_id = launch.call_id.clone();
        let attempt = launch.attempt;
        let early = Arc::new(EarlyReports::new());
        launch.ctx.activity_sink = Some(Arc::new(ActivityForwarder {
            thread: myself.clone(),
            run_id: run_id.clone(),
            early: Arc::clone(&early),
        }));
        let (mut execution, cancellation) = crate::thread::tool_call::execution(launch);
        let polled = crate::inline::poll_once(execution.as_mut());
        // What the tool reported during that poll comes first; later reports arrive
        // by message, after this handler.
        if let Some(ctl) = self.ctl.as_ref().filter(|c| &c.run_id == run_id) {
            for event in early.take() {
                ctl.events.emit(event);
            }
        }
        if let Poll::Ready(outcome) = polled {
            self.queue.push_back(Input::ToolFinished {
                run_id: run_id.clone(),
                call_id,
                attempt,
                outcome,
            });
            return;
        }
        let args = ToolCallArgs {
            thread: myself.clone(),
            run_id: run_id.clone(),
            call_id: call_id.clone(),
            attempt,
            cancellation,
            execution,
        };
        match Box::pin(Actor::spawn_linked(
            None,
            ToolCallActor,
            args,
            myself.get_cell(),
        ))
        .await
        {
            Ok((actor, _)) => {
                if let Some(ctl) = self.ctl.as_mut().filter(|c| &c.run_id == run_id) {
                    ctl.tools.insert(call_id, actor);
                }
            }
            Err(error) => {
                self.queue.push_back(Input::ToolFinished {
                    run_id: run_id.clone(),
                    call_id,
                    attempt,
                    outcome: ToolOutcome::Error(crate::error::ToolError::Internal(format!(
                        "cannot start the tool call actor: {error}"
                    ))),
                });
            }
        }
    }
}

/// Routes a tool's progress and activity reports through the thread actor, so they
/// are ordered with the run's other events.
pub(super) struct ActivityForwarder {
    thread: ActorRef<ThreadMsg>,
    run_id: RunId,
    /// Reports made while the thread actor polls the call in place.
    early: Arc<EarlyReports<AgentEvent>>,
}

#[async_trait]
impl EventSink for ActivityForwarder {
    async fn emit(&self, event: AgentEvent) {
        if let Some(event) = self.early.keep(event) {
            let _ = self.thread.send_message(ThreadMsg::ToolEvent {
                run_id: self.run_id.clone(),
                event,
            });
        }
    }
}
