//! Requests about runs: starting, activating, cancelling, and the thread's status.

use std::sync::Arc;

use crate::clock::now_ms;
use crate::contract::{AgentEvent, RunIdentity, RunRecord, RunStatus};
use crate::event_sink::EventSink;
use crate::ids::{AgentId, RunId, ToolCallId};
use crate::llm::InferenceDelta;
use crate::runtime::ResolvedAgent;
use crate::thread::control::{Activation, ControlError, RunSummary, RunTicket, ThreadStatus};
use crate::thread::core::RunCore;
use crate::thread::emitter::RunEmitter;
use crate::thread::keys::ToolCallStates;
use crate::thread::request::RunRequest;
use crate::thread::tool_call::ToolCallMsg;

use super::{Input, ThreadActorState};

impl ThreadActorState {
    pub(super) fn agent_for(&self, request: &RunRequest) -> Result<AgentId, ControlError> {
        request
            .agent_id
            .clone()
            .or_else(|| self.core.as_ref().and_then(|c| c.last_agent.clone()))
            .or_else(|| self.run.as_ref().map(|r| r.record.agent_id.clone()))
            .or_else(|| self.deps.config.default_agent.clone())
            .ok_or(ControlError::NoAgent)
    }

    pub(super) fn on_activate(
        &mut self,
        run_id: RunId,
        request: Option<RunRequest>,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<Activation, ControlError> {
        if let Some(ctl) = self.ctl.as_ref().filter(|c| c.run_id == run_id) {
            return Ok(match ctl.status {
                RunStatus::Waiting => Activation::Waiting,
                _ => Activation::Running,
            });
        }
        if self
            .queued_start()
            .is_some_and(|queued| queued.identity.run_id == run_id)
        {
            return Ok(Activation::Running);
        }
        if self.last_run.as_ref() == Some(&run_id) {
            return Ok(Activation::Finished);
        }
        let Some(request) = request else {
            return Err(ControlError::RunNotFound { run_id });
        };
        self.accept_start(request.with_run_id(run_id), sink)?;
        Ok(Activation::Started)
    }

    pub(super) fn accept_start(
        &mut self,
        request: RunRequest,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<RunTicket, ControlError> {
        if request.messages.is_empty() {
            return Err(ControlError::EmptyInput);
        }
        let agent_id = self.agent_for(&request)?;
        let agent: ResolvedAgent = self
            .deps
            .resolver
            .resolve(agent_id.as_str())
            .map_err(|e| ControlError::Resolve(e.to_string()))?;
        // New input on a busy thread cancels the run before it first (book:
        // Cancellation). That is the newest accepted run: one still queued behind
        // the segment in flight is started and then cancelled in turn, so it ends
        // like any other run.
        let previous = match self.queued_start() {
            Some(queued) => {
                queued.cancellation.cancel();
                Some(queued.identity.run_id.clone())
            }
            None => {
                self.cancel_now();
                self.ctl.as_ref().map(|c| c.run_id.clone())
            }
        };
        tracing::debug!(thread_id = %self.thread_id, run_id = ?request.run_id, ?previous, "new input");
        if let Some(run_id) = &previous {
            self.queue.push_back(Input::Cancel {
                run_id: run_id.clone(),
            });
        }
        let run_id = request.run_id.clone().unwrap_or_else(RunId::generate);
        let mut identity = RunIdentity::new(
            self.thread_id.clone(),
            run_id.clone(),
            agent_id,
            request.origin,
        );
        identity.parent_run_id = request
            .parent_run_id
            .clone()
            .or_else(|| previous.clone())
            .or_else(|| self.last_run.clone());
        identity.parent_thread_id = request.parent_thread_id.clone();
        identity.parent_tool_call_id = request.parent_tool_call_id.clone();
        // A run that came without a trace starts one, sampled as the node's
        // sampler decides for a new trace.
        identity.trace = Some(request.trace.unwrap_or_else(crate::telemetry::new_trace));
        let record = RunRecord::new(&identity, now_ms() / 1000);
        let events = Arc::new(RunEmitter::new(
            self.thread_id.clone(),
            run_id.clone(),
            Arc::clone(&self.deps.hub),
            0,
        ));
        if let Some(sink) = sink {
            events.attach(sink);
        }
        let run = RunCore::new(agent, identity, record, events, request.overrides.clone());
        self.queue.push_back(Input::Start {
            run: Box::new(run),
            messages: request.messages,
        });
        Ok(RunTicket {
            thread_id: self.thread_id.clone(),
            run_id,
        })
    }

    /// The newest run accepted but not started yet (queued behind a segment).
    pub(super) fn queued_start(&self) -> Option<&RunCore> {
        self.queue.iter().rev().find_map(|input| match input {
            Input::Start { run, .. } => Some(&**run),
            _ => None,
        })
    }

    /// Lets go of the runs this actor drives or has queued, which stop here
    /// without ending: the hub tells whoever waits for their end (the mailbox
    /// worker holding their dispatches gives them back, so they are activated
    /// again, from their checkpoint, wherever the thread lives next). A waiting
    /// run has told its watchers already.
    pub(super) fn abandon_runs(&mut self) {
        let current = self
            .ctl
            .take()
            .filter(|ctl| ctl.status == RunStatus::Running)
            .map(|ctl| ctl.run_id);
        let queued = self.queue.drain(..).filter_map(|input| match input {
            Input::Start { run, .. } => Some(run.identity.run_id.clone()),
            _ => None,
        });
        for run_id in current.into_iter().chain(queued) {
            self.deps.hub.abandoned(&self.thread_id, &run_id);
        }
    }

    /// Signals cancellation to everything the current run has in flight.
    pub(super) fn cancel_now(&mut self) {
        if let Some(ctl) = &mut self.ctl {
            ctl.cancellation.cancel();
            for (_, tool) in ctl.tools.drain() {
                let _ = tool.send_message(ToolCallMsg::Cancel);
            }
        }
    }

    pub(super) fn on_cancel(&mut self, run_id: Option<RunId>) -> Result<RunId, ControlError> {
        let Some(active) = self.ctl.as_ref().map(|c| c.run_id.clone()) else {
            return Err(ControlError::NoActiveRun {
                thread_id: self.thread_id.clone(),
            });
        };
        if let Some(requested) = run_id
            && requested != active
        {
            return Err(ControlError::RunNotActive { run_id: requested });
        }
        self.cancel_now();
        self.queue.push_back(Input::Cancel {
            run_id: active.clone(),
        });
        Ok(active)
    }

    pub(super) fn status(&self) -> ThreadStatus {
        ThreadStatus {
            thread_id: self.thread_id.clone(),
            run: self.ctl.as_ref().map(|ctl| RunSummary {
                run_id: ctl.run_id.clone(),
                status: ctl.status,
                running_tools: ctl.tools.len(),
                inferring: ctl.step_inferring,
            }),
            busy: self.busy,
            queued: self.queue.len(),
        }
    }

    pub(super) fn on_delta(&self, run_id: &RunId, delta: InferenceDelta) {
        let Some(ctl) = self.ctl.as_ref().filter(|c| &c.run_id == run_id) else {
            return;
        };
        let event = match delta {
            InferenceDelta::Text { delta } => AgentEvent::TextDelta { delta },
            InferenceDelta::Reasoning { delta } => AgentEvent::ReasoningDelta { delta },
            InferenceDelta::ToolCallStart { id, name } => AgentEvent::ToolCallStart { id, name },
            InferenceDelta::ToolCallDelta { id, args_delta } => {
                AgentEvent::ToolCallDelta { id, args_delta }
            }
            // Usage is reported once, with InferenceComplete.
            InferenceDelta::Usage { .. } => return,
        };
        ctl.events.emit(event);
    }

    pub(super) fn current_attempt(&self, call_id: &ToolCallId) -> u32 {
        self.core
            .as_ref()
            .and_then(|core| core.store.get::<ToolCallStates>())
            .and_then(|calls| calls.get(call_id))
            .map_or(0, |call| call.attempt)
    }
}
