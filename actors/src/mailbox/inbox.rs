//! `RunInbox`: the input of runs that were accepted but have not started yet.
//!
//! A dispatch carries no request (seed 000): activation rebuilds the run from its
//! input and the thread's message log. Until the run's first checkpoint puts the
//! input into the log, the input waits here, keyed by run id, where any node can
//! read it. The mailbox worker removes it once the dispatch is acked.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::MailboxError;
use crate::hashing::FastHashMap;
use crate::ids::RunId;
use crate::memory::{Charge, Held, NodeMemory, input_bytes};
use crate::thread::RunRequest;

/// Durable storage of accepted runs' input.
#[async_trait]
pub trait RunInbox: Send + Sync + 'static {
    /// Keeps `request` as the input of `run_id` (replacing an earlier one).
    async fn put(&self, run_id: &RunId, request: &RunRequest) -> Result<(), MailboxError>;

    /// The input of `run_id`, if kept.
    async fn get(&self, run_id: &RunId) -> Result<Option<RunRequest>, MailboxError>;

    /// Forgets the input of `run_id` (nothing happens when there is none).
    async fn remove(&self, run_id: &RunId) -> Result<(), MailboxError>;
}

/// The single-node twin: inputs in process memory, each charged to the node's
/// admitted memory while kept — until its dispatch is acked, so a running run's
/// input counts beside its core (an overcount of one input per active run,
/// on the safe side).
#[derive(Debug, Default)]
pub struct InMemoryRunInbox {
    requests: Mutex<FastHashMap<RunId, (RunRequest, Charge)>>,
    memory: Arc<NodeMemory>,
}

impl InMemoryRunInbox {
    /// An inbox whose inputs count against `memory`'s admitted share.
    pub fn with_memory(memory: Arc<NodeMemory>) -> Self {
        Self {
            requests: Mutex::default(),
            memory,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FastHashMap<RunId, (RunRequest, Charge)>> {
        self.requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many inputs are kept (runs accepted and not yet acked).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no input is kept.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[async_trait]
impl RunInbox for InMemoryRunInbox {
    async fn put(&self, run_id: &RunId, request: &RunRequest) -> Result<(), MailboxError> {
        let charge = self
            .memory
            .charge(Held::Queued, input_bytes(&request.messages));
        self.lock()
            .insert(run_id.clone(), (request.clone(), charge));
        Ok(())
    }

    async fn get(&self, run_id: &RunId) -> Result<Option<RunRequest>, MailboxError> {
        Ok(self.lock().get(run_id).map(|(request, _)| request.clone()))
    }

    async fn remove(&self, run_id: &RunId) -> Result<(), MailboxError> {
        self.lock().remove(run_id);
        Ok(())
    }
}
