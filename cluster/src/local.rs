//! `LocalNode`: the in-process twin of [`ClusterNode`](crate::node::ClusterNode),
//! for a single node with no NATS at all.
//!
//! ```text
//! LocalNode
//! ├─ AgentRuntime    thread actors (the builder brings agents, models, the store)
//! ├─ MailboxWorker   claims every dispatch of the in-memory mailbox
//! ├─ ThreadHost      answers thread calls in place (the node owns every thread)
//! └─ LocalEventHub   replay buffers and live followers of runs' events
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use awaken_actors::contract::{RunDispatch, RunStatus};
use awaken_actors::mailbox::{
    Claimant, InMemoryMailboxStore, InMemoryRunInbox, MailboxConfig, MailboxError, MailboxStore,
    MailboxWorker, RunInbox, SubmitOptions, submit,
};
use awaken_actors::runtime::{AgentRuntime, AgentRuntimeBuilder};
use awaken_actors::store::RunQuery;
use awaken_actors::thread::RunRequest;
use awaken_actors::{RunId, ThreadId};

use crate::assembly::{Assembly, Parts};
use crate::config_store::{ConfigStore, MemoryConfigStore};
use crate::control::{RunControl, probe_store};
use crate::delegation::Reach;
use crate::error::ClusterError;
use crate::events::{EventsConfig, LocalEventHub, RunFollow, follow_local};
use crate::routing::{Answer, RouteError, ThreadCall, ThreadHost};

/// Everything a single node is configured with.
#[derive(Debug, Clone, Default)]
pub struct LocalNodeConfig {
    /// The mailbox's leases, retries and sweeps.
    pub mailbox: MailboxConfig,
    /// Replay buffer sizes.
    pub events: EventsConfig,
    /// Keeps the config API's document in this file; in memory when `None`.
    pub config_file: Option<PathBuf>,
}

/// A single node: runs, decisions and event streams, all in this process.
pub struct LocalNode {
    runtime: AgentRuntime,
    mailbox: Arc<InMemoryMailboxStore>,
    inbox: Arc<InMemoryRunInbox>,
    worker: Arc<MailboxWorker>,
    hub: Arc<LocalEventHub>,
    host: ThreadHost,
    config_store: Arc<MemoryConfigStore>,
}

impl std::fmt::Debug for LocalNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalNode").finish_non_exhaustive()
    }
}

impl LocalNode {
    /// Builds the runtime from `builder` (adding the node's event hub) and starts
    /// claiming the mailbox's dispatches.
    pub async fn start(
        mut builder: AgentRuntimeBuilder,
        config: LocalNodeConfig,
    ) -> Result<Self, ClusterError> {
        let hub = Arc::new(LocalEventHub::within(&config.events, builder.memory()));
        let config_store = Arc::new(match config.config_file {
            Some(path) => MemoryConfigStore::open(path).await?,
            None => MemoryConfigStore::new(),
        });
        let runtime = Assembly::runtime(builder, Arc::clone(&hub) as _, None)?;
        let mailbox_config = config.mailbox.clone().within(runtime.memory());
        let mailbox = Arc::new(InMemoryMailboxStore::new(mailbox_config.clone()));
        let inbox = Arc::new(InMemoryRunInbox::with_memory(Arc::clone(runtime.memory())));
        let assembly = Assembly::assemble(
            runtime,
            Parts {
                buffers: Arc::clone(hub.buffers()),
                fence: None,
                mailbox: Arc::clone(&mailbox) as _,
                inbox: Arc::clone(&inbox) as _,
                mailbox_config,
                claimant: Claimant::single_node("local"),
            },
        )
        .await?;
        assembly.deliver_child_runs(Reach::Local {
            host: assembly.host.clone(),
            hub: Arc::clone(&hub),
        });
        let Assembly {
            runtime,
            worker,
            host,
            ..
        } = assembly;
        Ok(Self {
            runtime,
            mailbox,
            inbox,
            worker,
            hub,
            host,
            config_store,
        })
    }

    /// The node's event hub (replay buffers and live followers).
    pub fn events(&self) -> &Arc<LocalEventHub> {
        &self.hub
    }

    /// Stops claiming and stops every thread at its last checkpoint.
    pub async fn shutdown(self) {
        self.worker.stop_claiming();
        self.runtime.shutdown().await;
    }

    /// Stops claiming, lets the runs executing now finish (or reach a wait) for
    /// at most `deadline`, then stops every thread at its last checkpoint.
    /// `false` when runs were still executing at the deadline (a durable store
    /// resumes them at the next start, see [`Self::resume_unfinished`]).
    pub async fn drain(self, deadline: Duration) -> bool {
        self.worker.stop_claiming();
        let drained = tokio::time::timeout(deadline, self.runtime.all_stopped())
            .await
            .is_ok();
        self.runtime.shutdown().await;
        drained
    }

    /// Takes up the runs the store holds as running: a single node that stopped
    /// mid-run (killed, or past its drain deadline) left them with no actor and,
    /// its mailbox being in memory, no dispatch to deliver them again. Each
    /// continues from its last checkpoint. How many were taken up; a run that
    /// cannot be (its thread has a later run) is logged and left as it is.
    pub async fn resume_unfinished(&self) -> Result<usize, ClusterError> {
        let store = self.runtime.store();
        // Listed whole first: runs taken up finish and leave the listing.
        let mut unfinished = Vec::new();
        loop {
            let page = store
                .list_runs(&RunQuery {
                    status: Some(RunStatus::Running),
                    offset: unfinished.len(),
                    limit: 200,
                    ..RunQuery::default()
                })
                .await?;
            if page.runs.is_empty() {
                break;
            }
            unfinished.extend(page.runs);
        }
        let mut taken_up = 0;
        for run in unfinished {
            match self
                .runtime
                .activate(&run.thread_id, run.run_id.clone(), None, None)
                .await
            {
                Ok(_) => {
                    taken_up += 1;
                    tracing::info!(run_id = %run.run_id, thread_id = %run.thread_id, "unfinished run taken up");
                }
                Err(error) => {
                    tracing::warn!(run_id = %run.run_id, %error, "an unfinished run could not be taken up");
                }
            }
        }
        Ok(taken_up)
    }
}

#[async_trait]
impl RunControl for LocalNode {
    fn runtime(&self) -> &AgentRuntime {
        &self.runtime
    }

    fn mailbox(&self) -> Arc<dyn MailboxStore> {
        Arc::clone(&self.mailbox) as _
    }

    fn config_store(&self) -> Arc<dyn ConfigStore> {
        Arc::clone(&self.config_store) as _
    }

    async fn submit(
        &self,
        request: RunRequest,
        options: SubmitOptions,
    ) -> Result<RunDispatch, MailboxError> {
        submit(&*self.mailbox, &*self.inbox, request, options).await
    }

    async fn accepted_run(&self, run_id: &RunId) -> Result<Option<RunRequest>, MailboxError> {
        self.inbox.get(run_id).await
    }

    async fn call(&self, call: ThreadCall) -> Result<Answer, RouteError> {
        Ok(self.host.handle(call).await)
    }

    async fn follow(
        &self,
        _thread_id: &ThreadId,
        run_id: &RunId,
        after_seq: Option<u64>,
    ) -> Result<RunFollow, RouteError> {
        Ok(follow_local(&self.hub, run_id, after_seq))
    }

    async fn check_ready(&self) -> Result<(), String> {
        probe_store(&**self.runtime.store()).await
    }
}
