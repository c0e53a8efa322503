//! `RunControl`: the server-side control surface of seed 000 (`RunControlService`),
//! the same whether the node stands alone or is one of a cluster.
//!
//! The gateway talks only to this trait: it accepts runs into the mailbox, reaches
//! a thread's owner for status, cancel, interrupt and decisions, and follows a
//! run's events with replay. [`LocalNode`](crate::local::LocalNode) implements it
//! in process, [`ClusterNode`](crate::node::ClusterNode) over NATS.

use std::sync::Arc;

use async_trait::async_trait;
use awaken_actors::clock::now_ms;
use awaken_actors::contract::{MailboxInterrupt, RunDispatch};
use awaken_actors::mailbox::{MailboxError, MailboxStore, SubmitOptions};
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::store::{RunQuery, ThreadRunStore};
use awaken_actors::thread::RunRequest;
use awaken_actors::{RunId, ThreadId};
use prometheus_client::registry::Registry;

use crate::config_store::ConfigStore;
use crate::events::RunFollow;
use crate::routing::{Answer, CallOutcome, RouteError, ThreadCall};

/// What an interrupt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    /// The mailbox's side: new epoch, superseded queued dispatches.
    pub mailbox: MailboxInterrupt,
    /// The run that was cancelled, when one was active.
    pub cancelled_run: Option<RunId>,
}

/// Why an interrupt did not complete.
#[derive(Debug, thiserror::Error)]
pub enum InterruptError {
    /// The mailbox refused or failed.
    #[error(transparent)]
    Mailbox(#[from] MailboxError),
    /// The thread's owner could not be reached; queued work is superseded already.
    #[error(transparent)]
    Route(#[from] RouteError),
}

/// A node's control surface for runs and threads.
#[async_trait]
pub trait RunControl: Send + Sync + 'static {
    /// This node's runtime: agents, models, and the thread store every node shares.
    fn runtime(&self) -> &AgentRuntime;

    /// The mailbox every node shares.
    fn mailbox(&self) -> Arc<dyn MailboxStore>;

    /// The configuration document every node shares (the config API's entries).
    fn config_store(&self) -> Arc<dyn ConfigStore>;

    /// Registers the node's own metrics (cluster membership, shards, NATS) in
    /// `awaken`, the server's prefixed registry; a single node has none.
    fn register_metrics(&self, _awaken: &mut Registry) {}

    /// Accepts a run for any thread; the thread's owner executes it.
    async fn submit(
        &self,
        request: RunRequest,
        options: SubmitOptions,
    ) -> Result<RunDispatch, MailboxError>;

    /// The input of a run that was accepted and has not started yet (its record
    /// appears in the thread store at its first checkpoint).
    async fn accepted_run(&self, run_id: &RunId) -> Result<Option<RunRequest>, MailboxError>;

    /// Sends `call` to the thread's owner, wherever it is.
    async fn call(&self, call: ThreadCall) -> Result<Answer, RouteError>;

    /// Follows a run's events after `after_seq`: buffered ones, then live ones,
    /// until the activation ends.
    async fn follow(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
        after_seq: Option<u64>,
    ) -> Result<RunFollow, RouteError>;

    /// Whether what the node depends on answers (`Err` says what does not).
    async fn check_ready(&self) -> Result<(), String>;

    /// The shared thread store.
    fn store(&self) -> Arc<dyn ThreadRunStore> {
        Arc::clone(self.runtime().store())
    }

    /// Interrupts a thread (seed 000): a new dispatch epoch supersedes its queued
    /// work, then the active run, if any, is cancelled by its owner.
    async fn interrupt_thread(&self, thread_id: &ThreadId) -> Result<Interrupted, InterruptError> {
        let mailbox = self.mailbox().interrupt(thread_id, now_ms()).await?;
        let answer = self
            .call(ThreadCall::Interrupt {
                thread_id: thread_id.clone(),
            })
            .await?;
        let cancelled_run = match answer.outcome {
            CallOutcome::Interrupted(run) => run,
            CallOutcome::Failed(refused) => {
                return Err(RouteError::Refused(refused).into());
            }
            other => {
                return Err(RouteError::Unexpected {
                    call: "interrupt",
                    outcome: Box::new(other),
                }
                .into());
            }
        };
        Ok(Interrupted {
            mailbox,
            cancelled_run,
        })
    }
}

/// How long a readiness probe waits for the store: Kubernetes' own probe
/// timeout (1 s by default). The store's requests wait out an outage for the
/// backend wait; readiness must say at once that the store is away.
const STORE_PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Probes the thread store with the cheapest query it answers.
pub(crate) async fn probe_store(store: &dyn ThreadRunStore) -> Result<(), String> {
    let query = RunQuery {
        limit: 1,
        ..RunQuery::default()
    };
    match tokio::time::timeout(STORE_PROBE_WAIT, store.list_runs(&query)).await {
        Ok(answer) => answer.map(drop).map_err(|e| format!("thread store: {e}")),
        Err(_) => Err(format!(
            "thread store: no answer within {STORE_PROBE_WAIT:?}"
        )),
    }
}
