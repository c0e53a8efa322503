//! `ThreadActor`: the single writer of one thread.
//!
//! The actor is a coordinator. Its handlers only do bookkeeping: they validate
//! requests, queue work, and hand the thread's core to one segment task at a time
//! (see `driver`). Inference runs on a task, tools on child `ToolCallActor`s, and
//! every store round trip inside segments — so cancel, decisions and status queries
//! are answered while a run is busy.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use async_trait::async_trait;
use std::panic::AssertUnwindSafe;

use futures::{FutureExt, StreamExt};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use crate::context::Compaction;
use crate::contract::{
    AgentEvent, Message, RunIdentity, RunRecord, RunStatus, ToolCallResume, ToolCallStatus,
};
use crate::error::InferenceExecutionError;
use crate::event_sink::EventSink;
use crate::ids::{AgentId, RunId, ThreadId, ToolCallId};
use crate::inline::EarlyReports;
use crate::llm::{InferenceChunk, InferenceDelta, InferenceRequest, StreamResult};
use crate::runtime::ResolvedAgent;
use crate::telemetry;
use crate::tool_call::{ToolCallActor, ToolCallArgs, ToolCallMsg, ToolOutcomeBox};

use super::control::{Activation, ControlError, DecisionAck, RunSummary, RunTicket, ThreadStatus};
use super::core::{LatestRun, RunCore, ThreadCore, WarmThread};
use super::deps::ThreadDeps;
use super::driver::{Driver, Launch, Next, ToolOutcome};
use super::emitter::RunEmitter;
use super::keys::{RunLifecycleKey, ToolCallStates};
use super::request::RunRequest;
use crate::clock::now_ms;

/// Messages a thread actor handles. The public ones come through the runtime's
/// region; the rest are reports from the actor's own tasks and children.
pub enum ThreadMsg {
    /// New input: starts a run (cancelling an active or waiting one first).
    Start {
        /// The input.
        request: RunRequest,
        /// Where this run's events go.
        sink: Option<Arc<dyn EventSink>>,
        /// Answered with the new run's id as soon as it is accepted.
        reply: RpcReplyPort<Result<RunTicket, ControlError>>,
    },
    /// A dispatch delivers run `run_id`: start it from `request` unless the thread
    /// already knows it (deliveries repeat after failover).
    Activate {
        /// The run the dispatch activates.
        run_id: RunId,
        /// Its input; `None` when only an existing run may be taken up.
        request: Option<RunRequest>,
        /// Where a newly started run's events go.
        sink: Option<Arc<dyn EventSink>>,
        /// Answered with what the thread found.
        reply: RpcReplyPort<Result<Activation, ControlError>>,
    },
    /// A human decision for a suspended tool call.
    Decide {
        /// The suspended call.
        call_id: ToolCallId,
        /// The decision.
        resume: ToolCallResume,
        /// Where the resumed run's events go from now on.
        sink: Option<Arc<dyn EventSink>>,
        /// Answered once the decision is accepted, found a duplicate, or refused.
        reply: RpcReplyPort<Result<DecisionAck, ControlError>>,
    },
    /// Cancels the active or waiting run (a specific one when `run_id` is set).
    Cancel {
        /// The run to cancel; any active run when `None`.
        run_id: Option<RunId>,
        /// Answered with the cancelled run's id.
        reply: RpcReplyPort<Result<RunId, ControlError>>,
    },
    /// Reports the thread's current activity.
    Status {
        /// The answer.
        reply: RpcReplyPort<ThreadStatus>,
    },
    /// A segment task returns the thread's core.
    SegmentDone(Box<SegmentDone>),
    /// A streamed piece of the current inference.
    InferenceDelta {
        /// The run it belongs to.
        run_id: RunId,
        /// The piece.
        delta: InferenceDelta,
    },
    /// The current inference ended.
    InferenceDone {
        /// The run it belongs to.
        run_id: RunId,
        /// The result.
        result: Result<StreamResult, InferenceExecutionError>,
        /// How long it took.
        duration_ms: u64,
    },
    /// The current history summarization ended.
    CompactionDone {
        /// The run it belongs to.
        run_id: RunId,
        /// The compaction, if one was worth making.
        result: Result<Option<Compaction>, InferenceExecutionError>,
    },
    /// A tool call actor finished its execution.
    ToolFinished {
        /// The run it belongs to.
        run_id: RunId,
        /// The call.
        call_id: ToolCallId,
        /// The attempt that finished.
        attempt: u32,
        /// What happened.
        outcome: ToolOutcomeBox,
    },
    /// A progress or activity event from a running tool.
    ToolEvent {
        /// The run it belongs to.
        run_id: RunId,
        /// The event.
        event: AgentEvent,
    },
    /// A segment panicked; the thread's core is lost and the actor must restart from
    /// its last checkpoint.
    SegmentPanicked(String),
    /// Second half of the stop handshake with the region.
    Passivate,
}

impl std::fmt::Debug for ThreadMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Self::Start { .. } => "Start",
            Self::Activate { .. } => "Activate",
            Self::Decide { .. } => "Decide",
            Self::Cancel { .. } => "Cancel",
            Self::Status { .. } => "Status",
            Self::SegmentDone(_) => "SegmentDone",
            Self::InferenceDelta { .. } => "InferenceDelta",
            Self::InferenceDone { .. } => "InferenceDone",
            Self::CompactionDone { .. } => "CompactionDone",
            Self::ToolFinished { .. } => "ToolFinished",
            Self::ToolEvent { .. } => "ToolEvent",
            Self::SegmentPanicked(_) => "SegmentPanicked",
            Self::Passivate => "Passivate",
        };
        f.write_str(name)
    }
}

/// The cores a segment borrowed, and what the run waits for next.
pub struct SegmentDone {
    thread: Box<ThreadCore>,
    run: Box<RunCore>,
    next: Next,
}

/// Work waiting for the thread's core.
enum Input {
    Start {
        run: Box<RunCore>,
        messages: Vec<Message>,
    },
    Decide {
        call_id: ToolCallId,
        resume: ToolCallResume,
        sink: Option<Arc<dyn EventSink>>,
        reply: RpcReplyPort<Result<DecisionAck, ControlError>>,
    },
    Inference {
        run_id: RunId,
        result: Result<StreamResult, InferenceExecutionError>,
        duration_ms: u64,
    },
    ToolFinished {
        run_id: RunId,
        call_id: ToolCallId,
        attempt: u32,
        outcome: ToolOutcome,
    },
    Compaction {
        run_id: RunId,
        result: Result<Option<Compaction>, InferenceExecutionError>,
    },
    Cancel {
        run_id: RunId,
    },
    Restarted,
    GiveUp(String),
}

/// The answer to a request that starts or takes up a run, held until the run's
/// first segment ran.
enum Answer {
    Start(
        RpcReplyPort<Result<RunTicket, ControlError>>,
        Result<RunTicket, ControlError>,
    ),
    Activate(
        RpcReplyPort<Result<Activation, ControlError>>,
        Result<Activation, ControlError>,
    ),
}

impl Answer {
    fn send(self) {
        // A caller that stopped waiting needs no answer.
        match self {
            Self::Start(reply, answer) => drop(reply.send(answer)),
            Self::Activate(reply, answer) => drop(reply.send(answer)),
        }
    }
}

/// A validated input, ready to run as a segment.
enum Work {
    Start(Vec<Message>),
    Decide(ToolCallId, ToolCallResume),
    Inference(Result<StreamResult, InferenceExecutionError>, u64),
    ToolFinished(ToolCallId, u32, ToolOutcome),
    Compaction(Result<Option<Compaction>, InferenceExecutionError>),
    Cancel,
    Restarted,
    GiveUp(String),
}

/// What the actor knows about the current run without its core.
struct RunCtl {
    run_id: RunId,
    status: RunStatus,
    step_inferring: bool,
    events: Arc<RunEmitter>,
    cancellation: crate::cancellation::CancellationToken,
    tools: HashMap<ToolCallId, ActorRef<ToolCallMsg>>,
}

/// The thread actor (a unit struct; everything lives in its state).
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadActor;

/// What a thread actor sees of its region: its supervision and the passivation
/// handshake.
pub(crate) trait RegionView: Send + Sync {
    /// Notes that `actor` serves the thread after `restarts` restarts, so its
    /// supervisor can restart it; called before it links to the supervisor.
    fn supervise(&self, thread_id: &ThreadId, actor: &ActorRef<ThreadMsg>, restarts: u32);
    /// Forgets an actor that stopped: its registration and, if still its, its route.
    fn stopped(&self, thread_id: &ThreadId, actor: &ActorRef<ThreadMsg>);
    /// Starts buffering messages for the thread; `false` if `actor` is not its actor.
    fn begin(&self, thread_id: &ThreadId, actor: &ActorRef<ThreadMsg>) -> bool;
    /// Stops buffering and returns what was buffered (the actor stays).
    fn cancel(&self, thread_id: &ThreadId, actor: &ActorRef<ThreadMsg>) -> Vec<ThreadMsg>;
    /// Removes the actor if nothing was buffered, keeping `warm` (if any) for the
    /// next message; otherwise keeps the actor and hands back the buffer and `warm`.
    fn finish(
        &self,
        thread_id: &ThreadId,
        actor: &ActorRef<ThreadMsg>,
        warm: Option<WarmThread>,
    ) -> Result<(), Kept>;
}

/// What a thread actor keeps when it cannot stop: messages that arrived meanwhile.
pub(crate) struct Kept {
    pub(crate) buffered: Vec<ThreadMsg>,
    pub(crate) warm: Option<WarmThread>,
}

/// What a thread actor starts with.
pub struct ThreadActorArgs {
    pub(crate) thread_id: ThreadId,
    pub(crate) deps: Arc<ThreadDeps>,
    pub(crate) region: Arc<dyn RegionView>,
    /// The supervisor the actor links to on its first message.
    pub(crate) supervisor: ActorCell,
    pub(crate) restarts: u32,
    pub(crate) warm: Option<WarmThread>,
}

/// The state of a thread actor.
pub struct ThreadActorState {
    thread_id: ThreadId,
    deps: Arc<ThreadDeps>,
    region: Arc<dyn RegionView>,
    /// The supervisor to link to, and the restarts so far, until the first message.
    unlinked: Option<(ActorCell, u32)>,
    core: Option<Box<ThreadCore>>,
    run: Option<Box<RunCore>>,
    ctl: Option<RunCtl>,
    queue: VecDeque<Input>,
    busy: bool,
    last_run: Option<RunId>,
    passivating: bool,
    active_since_passivation: bool,
}

impl std::fmt::Debug for ThreadActorState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadActorState")
            .field("thread_id", &self.thread_id)
            .field("busy", &self.busy)
            .field("queued", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl Actor for ThreadActor {
    type Msg = ThreadMsg;
    type State = ThreadActorState;
    type Arguments = ThreadActorArgs;

    /// Starts from the thread's warm core, else rehydrates it from its last
    /// checkpoint (a new thread when absent).
    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let ThreadActorArgs {
            thread_id,
            deps,
            region,
            supervisor,
            restarts,
            warm,
        } = args;
        let (mut core, latest) = match warm {
            Some(WarmThread { core, latest_run }) => (core, latest_run),
            None => rehydrate(&deps, &thread_id).await?,
        };
        let mut state = ThreadActorState {
            thread_id,
            deps,
            region,
            unlinked: Some((supervisor, restarts)),
            core: None,
            run: None,
            ctl: None,
            queue: VecDeque::new(),
            busy: false,
            last_run: None,
            passivating: false,
            active_since_passivation: false,
        };
        match latest {
            LatestRun::None => {}
            LatestRun::Finished(run_id) => state.last_run = Some(run_id),
            LatestRun::Unfinished(record) => state.reopen(&mut core, *record, restarts)?,
        }
        state.core = Some(core);
        state.pump(&myself).await?;
        if state.idle() {
            // The region cannot take a stop request before the actor is live; this
            // message runs the idle check once it is (work done during rehydration
            // sends no message of its own).
            let _ = myself.send_message(ThreadMsg::Passivate);
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if !state.join_supervision(&myself) {
            myself.stop(Some("the node is shutting down".to_owned()));
            return Ok(());
        }
        if !state.deps.fence.holds(&state.thread_id) {
            // Another node may own the thread now (e.g. this process was paused
            // past its lease): no further step, event or tool start here. Pending
            // callers see the actor gone; the owner continues from the checkpoint.
            tracing::warn!(thread_id = %state.thread_id, "this node no longer holds the thread; stopping");
            state.abandon_runs();
            myself.stop(Some("fenced".to_owned()));
            return Ok(());
        }
        if state.passivating && !matches!(message, ThreadMsg::Passivate) {
            state.active_since_passivation = true;
        }
        let mut answer = None;
        match message {
            ThreadMsg::Start {
                request,
                sink,
                reply,
            } => answer = Some(Answer::Start(reply, state.accept_start(request, sink))),
            ThreadMsg::Activate {
                run_id,
                request,
                sink,
                reply,
            } => {
                answer = Some(Answer::Activate(
                    reply,
                    state.on_activate(run_id, request, sink),
                ))
            }
            ThreadMsg::Decide {
                call_id,
                resume,
                sink,
                reply,
            } => state.queue.push_back(Input::Decide {
                call_id,
                resume,
                sink,
                reply,
            }),
            ThreadMsg::Cancel { run_id, reply } => {
                let _ = reply.send(state.on_cancel(run_id));
            }
            ThreadMsg::Status { reply } => {
                let _ = reply.send(state.status());
            }
            ThreadMsg::SegmentDone(done) => Box::pin(state.on_segment_done(*done, &myself)).await,
            ThreadMsg::InferenceDelta { run_id, delta } => state.on_delta(&run_id, delta),
            ThreadMsg::InferenceDone {
                run_id,
                result,
                duration_ms,
            } => {
                if let Some(ctl) = state.ctl.as_mut().filter(|c| c.run_id == run_id) {
                    ctl.step_inferring = false;
                }
                state.queue.push_back(Input::Inference {
                    run_id,
                    result,
                    duration_ms,
                });
            }
            ThreadMsg::ToolFinished {
                run_id,
                call_id,
                attempt,
                outcome,
            } => {
                if let Some(ctl) = state.ctl.as_mut().filter(|c| c.run_id == run_id) {
                    ctl.tools.remove(&call_id);
                }
                state.queue.push_back(Input::ToolFinished {
                    run_id,
                    call_id,
                    attempt,
                    outcome: *outcome.0,
                });
            }
            ThreadMsg::CompactionDone { run_id, result } => {
                state.queue.push_back(Input::Compaction { run_id, result });
            }
            ThreadMsg::ToolEvent { run_id, event } => {
                if let Some(ctl) = state.ctl.as_ref().filter(|c| c.run_id == run_id) {
                    ctl.events.emit(event);
                }
            }
            ThreadMsg::SegmentPanicked(message) => return Err(segment_panic(&message)),
            ThreadMsg::Passivate => {
                if state.on_passivate(&myself) {
                    myself.stop(None);
                    return Ok(());
                }
            }
        }
        // Boxed: every live actor keeps its handler future's frame, so it stays small.
        let pumped = Box::pin(state.pump(&myself)).await;
        // A start is answered after the run's first segment: a run that finishes in
        // place then wakes its caller once (answer and result together), not twice.
        if let Some(answer) = answer {
            answer.send();
        }
        pumped?;
        // Whatever woke the actor (a run, a query, a refused request), an idle thread
        // gives its actor up.
        state.begin_passivation(&myself);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A tool call actor that dies without reporting fails its call only.
        if let SupervisionEvent::ActorFailed(cell, error) = event {
            let failed = state.ctl.as_mut().and_then(|ctl| {
                let call_id = ctl
                    .tools
                    .iter()
                    .find(|(_, actor)| actor.get_id() == cell.get_id())
                    .map(|(id, _)| id.clone())?;
                ctl.tools.remove(&call_id);
                Some((ctl.run_id.clone(), call_id))
            });
            if let Some((run_id, call_id)) = failed {
                let attempt = state.current_attempt(&call_id);
                state.queue.push_back(Input::ToolFinished {
                    run_id,
                    call_id,
                    attempt,
                    outcome: ToolOutcome::Panicked(error.to_string()),
                });
                state.pump(&myself).await?;
            }
        }
        Ok(())
    }

    /// A stopped actor (passivated, fenced, evicted) forgets itself and unlinks, so
    /// its stop wakes no supervisor; only failures reach it.
    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.abandon_runs();
        state.region.stopped(&state.thread_id, &myself);
        if let Some(supervisor) = myself.try_get_supervisor() {
            myself.get_cell().unlink(supervisor);
        }
        Ok(())
    }
}

/// Failing the actor hands the thread to its supervisor, which restarts it from the
/// last checkpoint.
fn segment_panic(message: &str) -> ActorProcessingErr {
    format!("run segment panicked: {message}").into()
}

/// Loads a thread's last checkpoint (a new, empty thread when the store has none).
async fn rehydrate(
    deps: &ThreadDeps,
    thread_id: &ThreadId,
) -> Result<(Box<ThreadCore>, LatestRun), ActorProcessingErr> {
    let loaded = if deps.fence.fences_on_load() {
        let token = deps.fence.token(thread_id);
        deps.store.fence_and_load(thread_id, token).await?
    } else {
        deps.store.load_thread_snapshot(thread_id).await?
    };
    let Some(snapshot) = loaded else {
        let WarmThread { core, latest_run } = WarmThread::empty(thread_id);
        return Ok((core, latest_run));
    };
    let mut core = ThreadCore::new(snapshot.thread, snapshot.messages, snapshot.state);
    let latest = match snapshot.latest_run {
        None => LatestRun::None,
        Some(record) => {
            core.last_agent = Some(record.agent_id.clone());
            if record.status.is_terminal() {
                LatestRun::Finished(record.run_id)
            } else {
                LatestRun::Unfinished(Box::new(record))
            }
        }
    };
    Ok((Box::new(core), latest))
}

fn identity_of(record: &RunRecord) -> RunIdentity {
    let mut identity = RunIdentity::new(
        record.thread_id.clone(),
        record.run_id.clone(),
        record.agent_id.clone(),
        record.origin,
    );
    identity.parent_run_id = record.parent_run_id.clone();
    identity.parent_thread_id = record.parent_thread_id.clone();
    identity.parent_tool_call_id = record.parent_tool_call_id.clone();
    identity.trace = record.trace;
    identity
}

impl ThreadActorState {
    /// Takes up an unfinished run again: a waiting one waits on, a running one
    /// continues from the checkpoint (or gives up after too many restarts).
    fn reopen(
        &mut self,
        core: &mut ThreadCore,
        record: RunRecord,
        restarts: u32,
    ) -> Result<(), ActorProcessingErr> {
        self.last_run = Some(record.run_id.clone());
        let agent = match self.deps.resolver.resolve(record.agent_id.as_str()) {
            Ok(agent) => agent,
            Err(error) => {
                tracing::error!(thread_id = %self.thread_id, %error, "cannot resolve the agent of an unfinished run");
                return Ok(());
            }
        };
        core.install(&agent)?;
        let lifecycle = core
            .store
            .get::<RunLifecycleKey>()
            .cloned()
            .unwrap_or_default();
        let events = Arc::new(RunEmitter::new(
            self.thread_id.clone(),
            record.run_id.clone(),
            Arc::clone(&self.deps.hub),
            lifecycle.next_event_seq,
        ));
        let status = record.status;
        let identity = identity_of(&record);
        let mut run = RunCore::new(agent, identity, record, Arc::clone(&events), None);
        if let Some(message_id) = lifecycle.step_message_id {
            run.step_message_id = message_id;
        }
        self.ctl = Some(RunCtl {
            run_id: run.identity.run_id.clone(),
            status,
            step_inferring: false,
            events,
            cancellation: run.cancellation.clone(),
            tools: HashMap::new(),
        });
        self.run = Some(Box::new(run));
        if status == RunStatus::Running {
            // The node or the actor died mid-run: continue from the last
            // checkpoint, unless it keeps dying.
            if restarts > self.deps.config.max_restarts {
                self.queue.push_back(Input::GiveUp(format!(
                    "the thread actor restarted {restarts} times"
                )));
            } else {
                self.queue.push_back(Input::Restarted);
            }
        }
        Ok(())
    }

    fn agent_for(&self, request: &RunRequest) -> Result<AgentId, ControlError> {
        request
            .agent_id
            .clone()
            .or_else(|| self.core.as_ref().and_then(|c| c.last_agent.clone()))
            .or_else(|| self.run.as_ref().map(|r| r.record.agent_id.clone()))
            .or_else(|| self.deps.config.default_agent.clone())
            .ok_or(ControlError::NoAgent)
    }

    fn on_activate(
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

    fn accept_start(
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
    fn queued_start(&self) -> Option<&RunCore> {
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
    fn abandon_runs(&mut self) {
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
    fn cancel_now(&mut self) {
        if let Some(ctl) = &mut self.ctl {
            ctl.cancellation.cancel();
            for (_, tool) in ctl.tools.drain() {
                let _ = tool.send_message(ToolCallMsg::Cancel);
            }
        }
    }

    fn on_cancel(&mut self, run_id: Option<RunId>) -> Result<RunId, ControlError> {
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

    fn status(&self) -> ThreadStatus {
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

    fn on_delta(&self, run_id: &RunId, delta: InferenceDelta) {
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

    fn current_attempt(&self, call_id: &ToolCallId) -> u32 {
        self.core
            .as_ref()
            .and_then(|core| core.store.get::<ToolCallStates>())
            .and_then(|calls| calls.get(call_id))
            .map_or(0, |call| call.attempt)
    }

    /// Runs queued work while the core is home.
    async fn pump(&mut self, myself: &ActorRef<ThreadMsg>) -> Result<(), ActorProcessingErr> {
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
    fn validate(&mut self, input: Input) -> Option<Work> {
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
            Input::Decide {
                call_id,
                resume,
                sink,
                reply,
            } => match self.check_decision(&call_id, &resume) {
                Ok(Some(ack)) => {
                    let _ = reply.send(Ok(ack));
                    None
                }
                Ok(None) => {
                    let ack = DecisionAck {
                        run_id: current.clone()?,
                        call_id: call_id.clone(),
                        decision_id: resume.decision_id.clone(),
                        duplicate: false,
                    };
                    if let (Some(sink), Some(ctl)) = (sink, &self.ctl) {
                        ctl.events.attach(sink);
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
    fn check_decision(
        &self,
        call_id: &ToolCallId,
        resume: &crate::contract::ToolCallResume,
    ) -> Result<Option<DecisionAck>, ControlError> {
        let Some(ctl) = &self.ctl else {
            return Err(ControlError::NoActiveRun {
                thread_id: self.thread_id.clone(),
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
    fn run_segment(&mut self, work: Work, myself: &ActorRef<ThreadMsg>) -> Option<ThreadMsg> {
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
                Err(panic) => {
                    ThreadMsg::SegmentPanicked(crate::tool_call::panic_message(panic.as_ref()))
                }
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

    async fn on_segment_done(&mut self, done: SegmentDone, myself: &ActorRef<ThreadMsg>) {
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
    }

    /// Runs the step's inference outside the handler. A model that answers at once
    /// (scripted, cached) finishes during the first poll: its deltas and result are
    /// taken here, without a message per piece; a model that has to wait continues
    /// on a task that reports each piece by message.
    fn start_inference(
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
    async fn launch(&mut self, run_id: &RunId, mut launch: Launch, myself: &ActorRef<ThreadMsg>) {
        let call_id = launch.call_id.clone();
        let attempt = launch.attempt;
        let early = Arc::new(EarlyReports::new());
        launch.ctx.activity_sink = Some(Arc::new(ActivityForwarder {
            thread: myself.clone(),
            run_id: run_id.clone(),
            early: Arc::clone(&early),
        }));
        let (mut execution, cancellation) = crate::tool_call::execution(launch);
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

    /// Registers with the region and links to the supervisor, once, on the first
    /// message; `false` when the supervisor is gone (the node is shutting down).
    fn join_supervision(&mut self, myself: &ActorRef<ThreadMsg>) -> bool {
        let Some((supervisor, restarts)) = self.unlinked.take() else {
            return true;
        };
        // Registered first: a supervision event always finds the thread.
        self.region.supervise(&self.thread_id, myself, restarts);
        myself.get_cell().link(supervisor);
        myself.try_get_supervisor().is_some()
    }

    fn idle(&self) -> bool {
        !self.busy
            && self.queue.is_empty()
            && self
                .ctl
                .as_ref()
                .is_none_or(|c| c.status == RunStatus::Waiting && c.tools.is_empty())
    }

    fn begin_passivation(&mut self, myself: &ActorRef<ThreadMsg>) {
        if self.passivating || !self.idle() {
            return;
        }
        if self.region.begin(&self.thread_id, myself) {
            self.passivating = true;
            self.active_since_passivation = false;
            let _ = myself.send_message(ThreadMsg::Passivate);
        }
    }

    /// Returns `true` when the actor must stop now.
    fn on_passivate(&mut self, myself: &ActorRef<ThreadMsg>) -> bool {
        if !self.passivating {
            return false;
        }
        self.passivating = false;
        if self.active_since_passivation || !self.idle() {
            for message in self.region.cancel(&self.thread_id, myself) {
                let _ = myself.send_message(message);
            }
            return false;
        }
        let warm = self.take_warm();
        match self.region.finish(&self.thread_id, myself, warm) {
            Ok(()) => true,
            Err(Kept { buffered, warm }) => {
                if let Some(warm) = warm {
                    self.core = Some(warm.core);
                }
                for message in buffered {
                    let _ = myself.send_message(message);
                }
                false
            }
        }
    }

    /// The core an idle actor leaves in memory when it stops, if the thread stays
    /// warm: idle threads do for `idle_passivation`; waiting ones only when
    /// `passivate_while_waiting` is off.
    fn take_warm(&mut self) -> Option<WarmThread> {
        let config = &self.deps.config;
        let waiting = self.ctl.is_some();
        if config.idle_passivation.is_zero() || (waiting && config.passivate_while_waiting) {
            return None;
        }
        let latest_run = match (waiting, &self.run, &self.last_run) {
            (true, Some(run), _) => LatestRun::Unfinished(Box::new(run.record.clone())),
            (_, _, Some(run_id)) => LatestRun::Finished(run_id.clone()),
            _ => LatestRun::None,
        };
        let core = self.core.take()?;
        Some(WarmThread { core, latest_run })
    }
}

/// Routes a tool's progress and activity reports through the thread actor, so they
/// are ordered with the run's other events.
struct ActivityForwarder {
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
