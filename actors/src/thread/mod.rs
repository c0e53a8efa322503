//! Thread actors: one supervised actor per active thread, the single writer of the
//! thread's messages, state and runs.
//!
//! * [`ThreadRegion`] routes messages to thread actors, starting them on demand
//!   (rehydrated from the store), passivating idle ones and restarting failed ones.
//! * `ThreadActor` coordinates a run: it queues inputs (new messages, inference
//!   results, tool outcomes, decisions, cancellation) and lends the thread's core to
//!   one segment of the run loop at a time.
//! * The run loop (`run`) walks the book's phases, runs tool calls through
//!   `ToolCallActor`s in the agent's execution mode, suspends for human decisions,
//!   and checkpoints at every step end, suspension and run end.

mod actor;
mod control;
mod core;
mod deps;
mod emitter;
mod keys;
mod region;
mod request;
mod run;
mod tool_call;
mod warm;

pub use actor::{
    DecideRequest, FollowRun, SegmentDone, ThreadActor, ThreadActorArgs, ThreadActorState,
    ThreadMsg,
};
pub use control::{Activation, ControlError, DecisionAck, RunSummary, RunTicket, ThreadStatus};
/// The activity type of the events that say a run waits for its store.
pub const STORE_UNAVAILABLE_ACTIVITY: &str = run::STORE_UNAVAILABLE;
pub use deps::{
    DEFAULT_STORE_OUTAGE_TIMEOUT, DEFAULT_STORE_REQUEST_WAIT, FenceSource, SingleNodeFence,
    ThreadConfig, ThreadDeps,
};
pub use emitter::{EventHub, NullEventHub};
pub use keys::{RunLifecycle, RunLifecycleKey, ToolCallStates, ToolCalls, ToolCallsUpdate};
pub use region::ThreadRegion;
pub use request::RunRequest;
pub(crate) use run::{Launch, ToolOutcome};
pub use tool_call::{ToolCallActor, ToolCallMsg, ToolOutcomeBox};
