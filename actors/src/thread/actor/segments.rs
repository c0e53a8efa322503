//! The work queue: validating queued inputs and lending the core to one run segment at a time.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use ractor::{ActorProcessingErr, ActorRef};

use crate::contract::{RunStatus, ToolCallStatus};
use crate::ids::{RunId, ToolCallId};
use crate::telemetry;
use crate::thread::control::{ControlError, DecisionAck};
use crate::thread::keys::ToolCallStates;
use crate::thread::run::{Driver, Next};

use super::{
    DecideRequest, Input, RunCtl, SegmentDone, ThreadActorState, ThreadMsg, Work, segment_panic,
};

impl ThreadActorState {
    /// Runs queued work while the core is home.
    pub(super) async fn pump(
        &mut self,
        myself: &ActorRef<ThreadMsg>,
    ) -> Result<(), ActorProcessingErr> {
        while !self.busy {
            let Some(input) = self.queue.pop_front() else {
                return Ok(());
            };
            let Some(work) = self.validate(input) else {
                continue;
            };
            match self.run_segment(work, myself) {
                Some(ThreadMsg::SegmentDone(done)) => {
                    Box::pin(self.on_segment_done(*done, myself)).await;
                }
                Some(ThreadMsg::SegmentPanicked(message)) => return Err(segment_panic(&message)),
                _ => {}
            }
        }
        Ok(())
    }

    /// Turns an input into work, or answers/drops it when it no longer applies.
    pub(super) fn validate(&mut self, input: Input) -> Option<Work> {
        let current = self.ctl.as_ref().map(|c| c.run_id.clone());
        match input {
            Input::Start { run, messages } => {
                let events = Arc::clone(&run.events);
                self.ctl = Some(RunCtl {
                    run_id: run.identity.run_id.clone(),
                    status: RunStatus::Running,
                    step_inferring: false,
                    events,
                    cancellation: run.cancellation.clone(),
                    tools: HashMap::new(),
                });
                self.last_run = Some(run.identity.run_id.clone());
                self.run = Some(run);
                Some(Work::Start(messages))
            }
            Input::Decide(DecideRequest {
                run_id,
                call_id,
                resume,
                sink,
                follow,
                reply,
            }) => match self.check_decision(run_id.as_ref(), &call_id, &resume) {
                Ok(Some(mut ack)) => {
                    // Applied before, and its run executes on (a decision
                    // delivered again after a failover, as the run continues from
                    // its checkpoint): the caller follows it to its end too.
                    if let (Some(follow), Some(ctl)) = (follow, &self.ctl)
                        && ctl.status == RunStatus::Running
                    {
                        (follow.0)(&ctl.run_id);
                        ack.resumed = true;
                    }
                    let _ = reply.send(Ok(ack));
                    None
                }
                Ok(None) => {
                    let ack = DecisionAck {
                        run_id: current.clone()?,
                        call_id: call_id.clone(),
                        decision_id: resume.decision_id.clone(),
                        duplicate: false,
                        resumed: true,
                    };
                    if let Some(ctl) = &self.ctl {
                        if let Some(sink) = sink {
                            ctl.events.attach(sink);
                        }
                        if let Some(follow) = follow {
                            (follow.0)(&ctl.run_id);
                        }
                    }
                    if let Some(ctl) = &mut self.ctl {
                        ctl.status = RunStatus::Running;
                    }
                    let _ = reply.send(Ok(ack));
                    Some(Work::Decide(call_id, resume))
                }
                Err(error) => {
                    let _ = reply.send(Err(error));
                    None
                }
            },
            Input::Inference {
                run_id,
                result,
                duration_ms,
            } => {
                (current.as_ref() == Some(&run_id)).then_some(Work::Inference(result, duration_ms))
            }
            Input::ToolFinished {
                run_id,
                call_id,
                attempt,
                outcome,
            } => (current.as_ref() == Some(&run_id))
                .then_some(Work::ToolFinished(call_id, attempt, outcome)),
            Input::Compaction { run_id, result } => {
                (current.as_ref() == Some(&run_id)).then_some(Work::Compaction(result))
            }
            Input::Cancel { run_id } => (current.as_ref() == Some(&run_id)).then_some(Work::Cancel),
            Input::Restarted => current.map(|_| Work::Restarted),
            Input::GiveUp(reason) => current.map(|_| Work::GiveUp(reason)),
        }
    }

    /// `Ok(Some(ack))` for a duplicate, `Ok(None)` for a decision to apply.
    pub(super) fn check_decision(
        &self,
        run_id: Option<&RunId>,
        call_id: &ToolCallId,
        resume: &crate::contract::ToolCallResume,
    ) -> Result<Option<DecisionAck>, ControlError> {
        let ctl = match (&self.ctl, run_id) {
            (Some(ctl), Some(expected)) if ctl.run_id != *expected => None,
            (ctl, _) => ctl.as_ref(),
        };
        let Some(ctl) = ctl else {
            return Err(match run_id {
                Some(expected) => ControlError::RunNotActive {
                    run_id: expected.clone(),
                },
                None => ControlError::NoActiveRun {
                    thread_id: self.thread_id.clone(),
                },
            });
        };
        // Applied earlier in this run, to a call of an earlier step perhaps.
        if let Some(applied) = self
            .run
            .as_ref()
            .and_then(|run| run.record.applied_decision(&resume.decision_id))
            .filter(|applied| &applied.call_id == call_id)
        {
            return Ok(Some(DecisionAck {
                run_id: ctl.run_id.clone(),
                call_id: applied.call_id.clone(),
                decision_id: applied.decision_id.clone(),
                duplicate: true,
                resumed: false,
            }));
        }
        let call = self
            .core
            .as_ref()
            .and_then(|core| core.store.get::<ToolCallStates>())
            .and_then(|calls| calls.get(call_id).cloned())
            .ok_or_else(|| ControlError::UnknownToolCall {
                call_id: call_id.clone(),
            })?;
        if call
            .decision
            .as_ref()
            .is_some_and(|d| d.decision_id == resume.decision_id)
        {
            return Ok(Some(DecisionAck {
                run_id: ctl.run_id.clone(),
                call_id: call_id.clone(),
                decision_id: resume.decision_id.clone(),
                duplicate: true,
                resumed: false,
            }));
        }
        match call.status {
            ToolCallStatus::Suspended => Ok(None),
            status if status.is_terminal() => Err(ControlError::CallFinished {
                call_id: call_id.clone(),
                status,
            }),
            status => Err(ControlError::CallNotSuspended {
                call_id: call_id.clone(),
                status,
            }),
        }
    }

    /// Runs one segment: in place when it completes at once (the common case with
    /// a local store), otherwise on a task that reports `SegmentDone` (see
    /// `crate::inline`). Returns the segment's report when it completed in place.
    pub(super) fn run_segment(
        &mut self,
        work: Work,
        myself: &ActorRef<ThreadMsg>,
    ) -> Option<ThreadMsg> {
        let (Some(mut thread), Some(mut run)) = (self.core.take(), self.run.take()) else {
            return None;
        };
        self.busy = true;
        if run.span.is_disabled() {
            run.span = telemetry::invoke_agent(run.agent.spec.id.as_str(), &run.identity);
            if let Some(trace) = run.span.context() {
                run.events.trace_with(trace);
            }
        }
        if let Work::Decide(call_id, resume) = &work {
            telemetry::decision_arrived(&run.span, call_id, resume);
        }
        let span = run.span.clone();
        let deps = Arc::clone(&self.deps);
        let segment = async move {
            let outcome = AssertUnwindSafe(async {
                let mut driver = Driver {
                    thread: &mut thread,
                    run: &mut run,
                    deps: &deps,
                };
                match work {
                    Work::Start(messages) => driver.start(messages).await,
                    Work::Decide(call_id, resume) => driver.decide(call_id, resume).await,
                    Work::Inference(result, duration_ms) => {
                        driver.inference_done(result, duration_ms).await
                    }
                    Work::ToolFinished(call_id, attempt, outcome) => {
                        driver.tool_finished(call_id, attempt, outcome).await
                    }
                    Work::Compaction(result) => driver.compaction_done(result).await,
                    Work::Cancel => driver.cancel().await,
                    Work::Restarted => driver.resume_after_restart().await,
                    Work::GiveUp(reason) => driver.give_up(reason).await,
                }
            })
            .catch_unwind()
            .await;
            match outcome {
                Ok(next) => ThreadMsg::SegmentDone(Box::new(SegmentDone { thread, run, next })),
                // The borrowed cores are in an unknown state: drop them.
                Err(panic) => ThreadMsg::SegmentPanicked(crate::thread::tool_call::panic_message(
                    panic.as_ref(),
                )),
            }
        };
        let myself = myself.clone();
        let report = move |report| {
            let _ = myself.send_message(report);
        };
        // If the actor is gone when a spawned segment ends, the cores go with it; the
        // store has the last checkpoint.
        crate::inline::ready_or_spawn(span.traced(segment), report)
    }

    pub(super) async fn on_segment_done(
        &mut self,
        done: SegmentDone,
        myself: &ActorRef<ThreadMsg>,
    ) {
        let SegmentDone {
            thread,
            mut run,
            next,
        } = done;
        self.busy = false;
        let run_id = run.identity.run_id.clone();
        let agent_id = run.record.agent_id.clone();
        match next {
            Next::Infer(request) => self.start_inference(&run, request, myself),
            Next::Compact(job) => {
                let run_id = run_id.clone();
                let myself = myself.clone();
                let summarize = async move {
                    let result = job.run().await;
                    let _ = myself.send_message(ThreadMsg::CompactionDone { run_id, result });
                };
                crate::inline::ready_or_spawn(summarize, |()| {});
            }
            Next::Launch(launches) => {
                // A segment can outlast the node's hold on the thread (a pause
                // mid-segment): then its tools do not start here.
                if self.deps.fence.holds(&self.thread_id) {
                    for launch in launches {
                        self.launch(&run_id, launch, myself).await;
                    }
                } else {
                    self.ctl = None;
                    myself.stop(Some("fenced".to_owned()));
                }
            }
            Next::Wait => {
                if let Some(ctl) = &mut self.ctl {
                    ctl.status = RunStatus::Waiting;
                }
                run.events.detach();
                telemetry::activation_ended(&run.span, None);
                run.span = telemetry::Span::none();
            }
            Next::Finished => {
                run.events.detach();
                telemetry::activation_ended(&run.span, run.record.termination.as_ref());
                if self.ctl.as_ref().is_some_and(|c| c.run_id == run_id) {
                    self.ctl = None;
                }
            }
            Next::Fenced => {
                tracing::warn!(thread_id = %self.thread_id, "another node owns this thread; stopping");
                self.ctl = None;
                myself.stop(Some("fenced".to_owned()));
            }
        }
        let mut thread = thread;
        thread.last_agent = Some(agent_id);
        self.core = Some(thread);
        // A finished run's core is dead weight on an idle thread.
        if self.ctl.as_ref().is_some_and(|c| c.run_id == run_id) {
            self.run = Some(run);
        }
        self.recharge();
    }
}
