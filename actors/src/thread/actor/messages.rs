//! What a thread actor is sent: requests from the region, reports from its own tasks and children.

use std::sync::Arc;

use ractor::RpcReplyPort;

use crate::context::Compaction;
use crate::contract::{AgentEvent, ToolCallResume};
use crate::error::InferenceExecutionError;
use crate::event_sink::EventSink;
use crate::ids::{RunId, ToolCallId};
use crate::llm::{InferenceDelta, StreamResult};
use crate::thread::control::{Activation, ControlError, DecisionAck, RunTicket, ThreadStatus};
use crate::thread::core::{RunCore, ThreadCore};
use crate::thread::request::RunRequest;
use crate::thread::run::Next;
use crate::thread::tool_call::ToolOutcomeBox;

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
    /// A human decision for a suspended tool call (queued as it came).
    Decide(DecideRequest),
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
            Self::Decide(_) => "Decide",
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

/// A human decision for a suspended tool call, as sent and as queued.
pub struct DecideRequest {
    /// The run the decision is meant for; refused when the thread's active or
    /// waiting run is another (`None`: whichever it is).
    pub(crate) run_id: Option<RunId>,
    /// The suspended call.
    pub(crate) call_id: ToolCallId,
    /// The decision.
    pub(crate) resume: ToolCallResume,
    /// Where the resumed run's events go from now on.
    pub(crate) sink: Option<Arc<dyn EventSink>>,
    /// Called with the run when it executes on from the decision, before the
    /// answer: its end cannot slip by a watch registered there.
    pub(crate) follow: Option<FollowRun>,
    /// Answered once the decision is accepted, found a duplicate, or refused.
    pub(crate) reply: RpcReplyPort<Result<DecisionAck, ControlError>>,
}

/// What a decision's sender does with the run the decision resumed, from inside
/// the thread actor (it registers a watch on the run's end).
pub struct FollowRun(pub(crate) Box<dyn FnOnce(&RunId) + Send>);

impl std::fmt::Debug for FollowRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FollowRun")
    }
}

/// The cores a segment borrowed, and what the run waits for next.
pub struct SegmentDone {
    pub(super) thread: Box<ThreadCore>,
    pub(super) run: Box<RunCore>,
    pub(super) next: Next,
}
