//! The run loop, as segments between external waits.
//!
//! A run alternates between work the thread does itself (phases, commits,
//! checkpoints) and waits for the outside (the model, tools, humans). Each `Driver`
//! method is one such segment: it runs on a task that has borrowed the thread's core,
//! and returns [`Next`] — what the thread actor must wait for before the next
//! segment. The actor never awaits any of this itself.

use crate::clock::now_ms;
use crate::contract::{AgentEvent, Message, TerminationReason, ToolCallResume};
use crate::error::{InferenceExecutionError, StateError, StorageError};
use crate::ids::ToolCallId;
use crate::llm::{InferenceRequest, StreamResult};
use crate::phase::Phase;
use crate::thread::core::{RunCore, ThreadCore};
use crate::thread::deps::ThreadDeps;

mod approvals;
mod decisions;
mod inference;
mod lifecycle;
mod outage;
mod phases;
mod tools;

pub(crate) use inference::CompactionJob;
pub(crate) use outage::STORE_UNAVAILABLE;
pub(crate) use tools::{Launch, ToolOutcome};

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
}
