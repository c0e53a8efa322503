//! What every thread actor on a node shares: resolver, store, event hub, settings.

use std::sync::Arc;
use std::time::Duration;

use crate::delegation::ChildRunsSlot;
use crate::ids::{AgentId, ThreadId};
use crate::memory::NodeMemory;
use crate::phase::PhaseRuntime;
use crate::runtime::AgentResolver;
use crate::state::ProfileAccess;
use crate::store::{FencingToken, ThreadRunStore};
use crate::telemetry::RunMetrics;

use super::emitter::EventHub;

/// Hands out the fencing token a thread's checkpoints must carry: a constant on one
/// node, the shard lease revision in a cluster.
pub trait FenceSource: Send + Sync {
    /// The current token for `thread_id`.
    fn token(&self, thread_id: &ThreadId) -> FencingToken;

    /// Whether a thread's fence is raised to this node's token before its state is
    /// loaded: needed where owners change (a cluster), so the previous owner's
    /// writes are refused from the moment this node reads.
    fn fences_on_load(&self) -> bool {
        false
    }

    /// Whether this node may act for `thread_id` now: run its work, start its
    /// tools, publish its events. `false` once another node may own it (its lease
    /// lapsed, e.g. after a pause): the thread's actor stops without another step.
    fn holds(&self, _thread_id: &ThreadId) -> bool {
        true
    }
}

/// The token source of a single node that owns every thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleNodeFence;

impl FenceSource for SingleNodeFence {
    fn token(&self, _thread_id: &ThreadId) -> FencingToken {
        FencingToken(1)
    }
}

/// Tunables of thread actors.
#[derive(Debug, Clone)]
pub struct ThreadConfig {
    /// How long an idle thread stays warm. A thread's actor stops as soon as the
    /// thread is idle; its core stays in memory this long, so the next message
    /// starts a new actor without reading the store, then the thread passivates
    /// (nothing left on the node). Zero passivates idle threads at once.
    pub idle_passivation: Duration,
    /// Passivate a run waiting for a human at once instead of keeping it warm (the
    /// Hector rule: waiting must not hold memory). Off, waiting threads stay warm
    /// like idle ones.
    pub passivate_while_waiting: bool,
    /// Agent used when neither the request nor the thread names one.
    pub default_agent: Option<AgentId>,
    /// Restarts after panics before the thread's run is ended with an error.
    pub max_restarts: u32,
    /// How long a run waits for a store that went away (a restart, a failover)
    /// before its checkpoint fails and the run ends in error.
    pub store_outage_timeout: Duration,
    /// How long a store read (or a write that did nothing) waits for a store
    /// that went away before it fails (`server.backend_wait_secs`).
    pub store_request_wait: Duration,
}

/// Rides out a database restart; a longer outage is better answered 503.
pub const DEFAULT_STORE_REQUEST_WAIT: Duration = Duration::from_secs(10);

/// Covers a managed database's failover (typically 20 to 60 seconds).
pub const DEFAULT_STORE_OUTAGE_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for ThreadConfig {
    fn default() -> Self {
        Self {
            idle_passivation: Duration::from_secs(300),
            passivate_while_waiting: true,
            default_agent: None,
            max_restarts: 3,
            store_outage_timeout: DEFAULT_STORE_OUTAGE_TIMEOUT,
            store_request_wait: DEFAULT_STORE_REQUEST_WAIT,
        }
    }
}

/// Shared dependencies of thread actors.
#[derive(Clone)]
pub struct ThreadDeps {
    /// Resolves agent ids.
    pub resolver: Arc<dyn AgentResolver>,
    /// Threads, messages, runs and checkpoints.
    pub store: Arc<dyn ThreadRunStore>,
    /// Profile and shared state for hooks and tools.
    pub profile: Option<ProfileAccess>,
    /// Receives every event of every run.
    pub hub: Arc<dyn EventHub>,
    /// Checkpoint fencing.
    pub fence: Arc<dyn FenceSource>,
    /// The phase engine.
    pub phases: PhaseRuntime,
    /// Tunables.
    pub config: ThreadConfig,
    /// The delegation transport tools reach child runs through, once installed.
    pub children: Arc<ChildRunsSlot>,
    /// The metrics runs record into.
    pub metrics: Arc<RunMetrics>,
    /// The node's memory budget, which warm cores keep within.
    pub memory: Arc<NodeMemory>,
}

impl std::fmt::Debug for ThreadDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadDeps")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
