//! `ThreadActor`: the single writer of one thread.
//!
//! The actor is a coordinator. Its handlers only do bookkeeping: they validate
//! requests, queue work, and hand the thread's core to one segment task at a time
//! (see `run`). Inference runs on a task, tools on child `ToolCallActor`s, and
//! every store round trip inside segments — so cancel, decisions and status queries
//! are answered while a run is busy.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use crate::context::Compaction;
use crate::contract::{Message, RunStatus, ToolCallResume};
use crate::error::InferenceExecutionError;
use crate::ids::{RunId, ThreadId, ToolCallId};
use crate::llm::StreamResult;
use crate::memory::{Charge, Held, RUN_BYTES};

use super::control::{Activation, ControlError, RunTicket};
use super::core::{LatestRun, RunCore, ThreadCore, WarmThread};
use super::deps::ThreadDeps;
use super::emitter::RunEmitter;
use super::run::ToolOutcome;
use super::tool_call::ToolCallMsg;

mod lifecycle;
mod messages;
mod reopen;
mod runs;
mod segments;
mod work;

pub use messages::{DecideRequest, FollowRun, SegmentDone, ThreadMsg};
use reopen::rehydrate;

/// Work waiting for the thread's core.
enum Input {
    Start {
        run: Box<RunCore>,
        messages: Vec<Message>,
    },
    Decide(DecideRequest),
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
    /// What the thread holds while it has an actor, charged to the node's
    /// admitted memory until the actor stops.
    held: Charge,
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
        let held = deps.memory.charge(Held::Active, RUN_BYTES);
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
            held,
        };
        match latest {
            LatestRun::None => {}
            LatestRun::Finished(run_id) => state.last_run = Some(run_id),
            LatestRun::Unfinished(record) => state.reopen(&mut core, *record, restarts)?,
        }
        state.core = Some(core);
        state.recharge();
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
            ThreadMsg::Decide(request) => state.queue.push_back(Input::Decide(request)),
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
