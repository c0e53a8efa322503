//! The run service: what every protocol and the native Run API do with runs,
//! on a [`RunControl`] node — check what a request names, open threads, start
//! runs (in the background or followed), send decisions and cancellations to a
//! thread's owner, and stream a run's events through a protocol's encoder.
//!
//! Handlers take it as `State<RunService>` (see [`axum::extract::FromRef`]), so
//! a protocol needs nothing else of the server's state to serve runs.

pub(crate) mod approval_stream;
pub(crate) mod approvals;
mod checks;
mod decide;
pub(crate) mod handlers;
mod history;
pub(crate) mod input;
mod records;
mod stream;
mod submit;
mod threads;

use std::sync::Arc;

use awaken_actors::contract::ToolDescriptor;
use awaken_actors::runtime::RegistrySet;
use awaken_actors::{AgentId, RunId, ThreadId};
use awaken_cluster::RunControl;
use awaken_cluster::events::RunFollow;
use tokio::sync::watch;

use crate::server::error::ApiError;

pub(crate) use decide::unexpected;
pub(crate) use records::RunLookup;
pub(crate) use stream::{Encoder, RunEvents, visible_state};

/// Runs, threads and decisions on this node, for request handlers.
#[derive(Clone)]
pub struct RunService {
    /// The node: a single one or a cluster member. Only this module reaches
    /// its store, runtime and mailbox.
    control: Arc<dyn RunControl>,
    /// Turns true when the server starts shutting down: open streams end then.
    stopping: watch::Receiver<bool>,
    /// How long a request waits out a backend that is away or a thread that
    /// changes hands (`server.backend_wait_secs`).
    backend_wait: std::time::Duration,
}

impl std::fmt::Debug for RunService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunService").finish_non_exhaustive()
    }
}

impl RunService {
    /// A service over `control` whose streams end when `stopping` turns true,
    /// its requests waiting up to `backend_wait` for what is away.
    pub fn new(
        control: Arc<dyn RunControl>,
        stopping: watch::Receiver<bool>,
        backend_wait: std::time::Duration,
    ) -> Self {
        Self {
            control,
            stopping,
            backend_wait,
        }
    }

    /// The node's agents, tools and models as they are now.
    pub(crate) fn registries(&self) -> Arc<RegistrySet> {
        self.control.runtime().registries()
    }

    /// The agent a run uses when the request names none.
    pub(crate) fn default_agent(&self) -> Option<AgentId> {
        self.control.runtime().default_agent().cloned()
    }

    /// The tools `agent` offers its model; `None` when it does not resolve.
    pub(crate) fn agent_tools(&self, agent: &AgentId) -> Option<Arc<[ToolDescriptor]>> {
        let resolved = self.control.runtime().resolve(agent.as_str()).ok()?;
        Some(resolved.tool_descriptors)
    }

    /// Follows the run's events after `after_seq` (from the oldest buffered
    /// one without), unchecked: the caller checked the run.
    pub(crate) async fn follow(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
        after_seq: Option<u64>,
    ) -> Result<RunFollow, ApiError> {
        Ok(self.control.follow(thread_id, run_id, after_seq).await?)
    }

    /// Watches for the server's shutdown.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.clone()
    }
}
