//! Executing thread calls on the node that owns the thread.

use std::sync::Arc;

use awaken_actors::ThreadId;
use awaken_actors::contract::StreamEvent;
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::thread::ControlError;

use super::wire::{CallOutcome, ThreadCall};
use crate::decisions::{DecisionTarget, RuntimeDecisions};
use crate::events::ReplayBuffers;
use crate::shards::ShardedFence;

/// A call's full answer: replayed events (for `Replay`) and the outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// Replayed events, in `seq` order (empty for other calls).
    pub events: Vec<Arc<StreamEvent>>,
    /// The outcome.
    pub outcome: CallOutcome,
}

impl Answer {
    fn outcome(outcome: CallOutcome) -> Self {
        Self {
            events: Vec::new(),
            outcome,
        }
    }
}

/// What a node needs to answer calls for the threads it owns.
#[derive(Debug, Clone)]
pub struct ThreadHost {
    runtime: AgentRuntime,
    /// `None` on a single node, which owns every thread.
    fence: Option<ShardedFence>,
    decisions: RuntimeDecisions,
    buffers: Arc<ReplayBuffers>,
}

impl ThreadHost {
    /// A host over this node's runtime, ownership and replay buffers.
    pub fn new(runtime: AgentRuntime, fence: ShardedFence, buffers: Arc<ReplayBuffers>) -> Self {
        let decisions = RuntimeDecisions::owned_by(runtime.clone(), fence.clone());
        Self {
            runtime,
            fence: Some(fence),
            decisions,
            buffers,
        }
    }

    /// A host for a single node, which owns every thread.
    pub fn single_node(runtime: AgentRuntime, buffers: Arc<ReplayBuffers>) -> Self {
        let decisions = RuntimeDecisions::single_node(runtime.clone());
        Self {
            runtime,
            fence: None,
            decisions,
            buffers,
        }
    }

    /// Whether this node owns the thread's shard now.
    pub fn owns(&self, thread_id: &ThreadId) -> bool {
        self.fence
            .as_ref()
            .is_none_or(|fence| fence.owns(thread_id))
    }

    /// Answers `call` here; `NotOwner` when this node does not own its thread.
    pub async fn handle(&self, call: ThreadCall) -> Answer {
        if !self.owns(call.thread_id()) {
            return Answer::outcome(CallOutcome::NotOwner);
        }
        let outcome = match call {
            ThreadCall::Status { thread_id } => refused_or(
                self.runtime.thread_status(&thread_id).await,
                CallOutcome::Status,
            ),
            ThreadCall::Cancel {
                thread_id,
                run_id: None,
            } => refused_or(
                self.runtime.cancel_thread(&thread_id).await,
                CallOutcome::Cancelled,
            ),
            ThreadCall::Cancel {
                thread_id,
                run_id: Some(run_id),
            } => refused_or(
                self.runtime.cancel_thread_run(&thread_id, &run_id).await,
                CallOutcome::Cancelled,
            ),
            ThreadCall::Interrupt { thread_id } => refused_or(
                self.runtime.interrupt_thread(&thread_id).await,
                CallOutcome::Interrupted,
            ),
            ThreadCall::Decide { decision } => {
                CallOutcome::Delivered(self.decisions.deliver(decision).await)
            }
            ThreadCall::Replay {
                run_id, after_seq, ..
            } => {
                let replay = self.buffers.replay(&run_id, after_seq);
                return Answer {
                    events: replay.events,
                    outcome: CallOutcome::Replayed {
                        complete: replay.complete,
                    },
                };
            }
        };
        Answer::outcome(outcome)
    }
}

fn refused_or<T>(
    result: Result<T, ControlError>,
    ok: impl FnOnce(T) -> CallOutcome,
) -> CallOutcome {
    result.map_or_else(CallOutcome::Failed, ok)
}
