//! The payloads of thread calls: what a node asks a thread's owner, and the frames
//! the owner answers with.

use std::sync::Arc;

use awaken_actors::contract::StreamEvent;
use awaken_actors::thread::{ControlError, ThreadStatus};
use awaken_actors::{RunId, ThreadId};
use serde::{Deserialize, Serialize};

use crate::decisions::{Decision, Delivery};
use crate::shards::ShardId;

/// Prefix of the subjects thread calls are sent on: `awaken.shard.<n>.call`.
pub const SHARD_SUBJECT_PREFIX: &str = "awaken.shard.";

/// The subject the owner of `shard` serves thread calls on.
pub fn call_subject(shard: ShardId) -> String {
    format!("{SHARD_SUBJECT_PREFIX}{}.call", shard.0)
}

/// A request for the owner of a thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ThreadCall {
    /// What the thread is doing now.
    Status {
        /// The thread.
        thread_id: ThreadId,
    },
    /// Cancel the thread's active or waiting run (the named one, when given).
    Cancel {
        /// The thread.
        thread_id: ThreadId,
        /// Only this run; refused when it is not the active one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<RunId>,
    },
    /// Cancel the active run if there is one (the runtime half of a mailbox
    /// interrupt).
    Interrupt {
        /// The thread.
        thread_id: ThreadId,
    },
    /// Apply a decision; answered once the run it resumed stops again.
    Decide {
        /// The decision.
        decision: Decision,
    },
    /// The run's events the owner still buffers, after `after_seq` (all when absent).
    Replay {
        /// The run's thread (it picks the shard).
        thread_id: ThreadId,
        /// The run.
        run_id: RunId,
        /// Only events with a larger `seq` (`Last-Event-ID`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_seq: Option<u64>,
    },
}

impl ThreadCall {
    /// The call's operation, as its span names it.
    pub fn operation(&self) -> &'static str {
        match self {
            Self::Status { .. } => "status",
            Self::Cancel { .. } => "cancel",
            Self::Interrupt { .. } => "interrupt",
            Self::Decide { .. } => "decide",
            Self::Replay { .. } => "replay",
        }
    }

    /// Whether the call changes nothing at its owner, so that sending it again
    /// after its answer was lost is safe.
    pub fn only_reads(&self) -> bool {
        matches!(self, Self::Status { .. } | Self::Replay { .. })
    }

    /// The thread the call is about: its shard's owner answers it.
    pub fn thread_id(&self) -> &ThreadId {
        match self {
            Self::Status { thread_id }
            | Self::Cancel { thread_id, .. }
            | Self::Interrupt { thread_id }
            | Self::Replay { thread_id, .. } => thread_id,
            Self::Decide { decision } => &decision.thread_id,
        }
    }
}

/// One reply message of a call; a call is answered by zero or more `Working` and
/// `Events` frames and one final `Done`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "frame", rename_all = "snake_case")]
pub enum CallFrame {
    /// The owner is still at it (sent every heartbeat interval); silence for three
    /// intervals means the owner is gone.
    Working,
    /// A chunk of replayed events, in `seq` order.
    Events {
        /// The events.
        events: Vec<Arc<StreamEvent>>,
    },
    /// The call's outcome; no frame follows.
    Done {
        /// The outcome.
        outcome: CallOutcome,
    },
}

/// How the owner answered a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// Answer to `Status`.
    Status(ThreadStatus),
    /// Answer to `Cancel`: the run that was cancelled.
    Cancelled(RunId),
    /// Answer to `Interrupt`: the run that was cancelled, if one was active.
    Interrupted(Option<RunId>),
    /// Answer to `Decide`.
    Delivered(Delivery),
    /// Answer to `Replay`, after the `Events` frames. `complete` is false when the
    /// buffer no longer reaches back to `after_seq` (or does not know the run): the
    /// frames are then only the newest events the owner has.
    Replayed {
        /// Whether every event after `after_seq` was sent.
        complete: bool,
    },
    /// The thread refused the call.
    Failed(ControlError),
    /// This node does not own the thread's shard (any more): ask again.
    NotOwner,
    /// The request could not be read; it changed nothing.
    Malformed(String),
}

impl CallOutcome {
    /// The outcome's kind, as a span records it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Status(_) => "status",
            Self::Cancelled(_) => "cancelled",
            Self::Interrupted(_) => "interrupted",
            Self::Delivered(_) => "delivered",
            Self::Replayed { .. } => "replayed",
            Self::Failed(_) => "failed",
            Self::NotOwner => "not_owner",
            Self::Malformed(_) => "malformed",
        }
    }
}
