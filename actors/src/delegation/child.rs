//! Child runs: how a delegate call reaches the run it started, wherever it executes.

use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use futures::stream::BoxStream;
use sha2::{Digest, Sha256};

use crate::contract::{AgentEvent, ToolCallResume};
use crate::error::StorageError;
use crate::ids::{AgentId, RunId, ThreadId, ToolCallId};
use crate::store::ThreadRunStore;
use crate::thread::RunRequest;

/// A delegated child run: its agent, thread and run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildRef {
    /// The delegate agent.
    pub agent_id: AgentId,
    /// The child's own thread.
    pub thread_id: ThreadId,
    /// The child run.
    pub run_id: RunId,
}

impl ChildRef {
    /// The child of call `call_id` in run `parent_run`.
    ///
    /// The ids are a function of the delegating call, so every execution of that
    /// call (a replay after a decision, a re-run after failover) finds the same child
    /// instead of starting another one.
    pub fn of_call(agent_id: &AgentId, parent_run: &RunId, call_id: &ToolCallId) -> Self {
        let derive = |kind: &str| {
            let mut hash = Sha256::new();
            for part in [kind, parent_run.as_str(), call_id.as_str()] {
                hash.update(part.as_bytes());
                hash.update([0]);
            }
            let digest = hash.finalize();
            let mut bytes = [0u8; 16];
            bytes.copy_from_slice(&digest[..16]);
            uuid::Uuid::new_v8(bytes)
        };
        Self {
            agent_id: agent_id.clone(),
            thread_id: ThreadId::from_uuid(derive("thread")),
            run_id: RunId::from_uuid(derive("run")),
        }
    }
}

/// A child run's events from now until its current activation ends (its
/// `RunFinish`), or until the source closes.
pub type ChildEvents = BoxStream<'static, AgentEvent>;

/// Why a child run could not be reached or changed.
#[derive(Debug, thiserror::Error)]
pub enum DelegationError {
    /// The child's node or the transport cannot be reached now; trying again may
    /// work (an owner failing over, a NATS reconnect).
    #[error("the child run cannot be reached: {0}")]
    Unavailable(String),
    /// The child refused the request for good (e.g. a decision for a call that is
    /// no longer suspended).
    #[error("the child run refused: {0}")]
    Refused(String),
    /// The shared store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The transport of delegation: accepts child runs and reaches them, on this node
/// or another. A single node implements it in process, a cluster over NATS; the
/// delegate tool does the rest with the shared store.
#[async_trait]
pub trait ChildRuns: Send + Sync {
    /// The thread store every node shares, where child runs' records are read.
    fn store(&self) -> Arc<dyn ThreadRunStore>;

    /// Accepts `request` (which names the child's thread and run id and carries its
    /// lineage) durably, for execution wherever its thread is owned. A run id that
    /// was accepted before is not accepted again, and that is not an error.
    async fn submit(&self, request: RunRequest) -> Result<(), DelegationError>;

    /// Follows the child run's new events (not the ones it emitted before the call).
    async fn follow(&self, child: &ChildRef) -> Result<ChildEvents, DelegationError>;

    /// Applies a decision to a suspended call of the child run; returns once it is
    /// applied (or found a duplicate), normally after the run it resumed stopped.
    async fn decide(
        &self,
        child: &ChildRef,
        call_id: ToolCallId,
        resume: ToolCallResume,
    ) -> Result<(), DelegationError>;

    /// Cancels the child run, whether it is queued, running or waiting.
    async fn cancel(&self, child: &ChildRef) -> Result<(), DelegationError>;
}

/// Where a runtime finds its delegation transport, installed after the runtime is
/// built (the transport itself needs the runtime) and removed at shutdown.
#[derive(Default)]
pub struct ChildRunsSlot(RwLock<Option<Arc<dyn ChildRuns>>>);

impl std::fmt::Debug for ChildRunsSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ChildRunsSlot")
            .field(&self.get().is_some())
            .finish()
    }
}

impl ChildRunsSlot {
    /// The installed transport, if any.
    pub fn get(&self) -> Option<Arc<dyn ChildRuns>> {
        // The lock only guards an `Option<Arc>` swap: a poisoned one is consistent.
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Installs (or, with `None`, removes) the transport.
    pub fn set(&self, children: Option<Arc<dyn ChildRuns>>) {
        *self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = children;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(run: &str, call: &str) -> ChildRef {
        ChildRef::of_call(
            &AgentId::new("worker").unwrap(),
            &RunId::new(run).unwrap(),
            &ToolCallId::new(call).unwrap(),
        )
    }

    #[test]
    fn the_same_call_always_has_the_same_child() {
        assert_eq!(ids("r1", "c1"), ids("r1", "c1"));
        assert_ne!(ids("r1", "c1").run_id, ids("r1", "c2").run_id);
        assert_ne!(ids("r1", "c1").thread_id, ids("r2", "c1").thread_id);
        let child = ids("r1", "c1");
        assert_ne!(child.thread_id.as_str(), child.run_id.as_str());
        assert!(uuid::Uuid::parse_str(child.run_id.as_str()).is_ok());
    }

    #[test]
    fn parts_cannot_run_into_each_other() {
        assert_ne!(ids("r1", "1c").run_id, ids("r11", "c").run_id);
    }
}
