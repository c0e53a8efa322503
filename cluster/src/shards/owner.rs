//! `ShardOwner`: the handle on the task that keeps this node's fair share of shard
//! leases (the loop itself is in `keeper`), and the fence it feeds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use awaken_actors::ids::ThreadId;
use awaken_actors::store::FencingToken;
use awaken_actors::thread::FenceSource;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::ShardCount;
use super::contract::{Ownership, ShardEvent, ShardOwnerConfig};
use super::keeper::{Departed, Keeper};
use super::lease::LeaseTable;
use super::meters::LeaseMeters;
use super::tenure::Tenure;
use crate::error::ClusterError;
use crate::membership::NodeId;

/// A running shard owner; [`ShardOwner::drain`] stops it gracefully.
pub struct ShardOwner {
    ownership: watch::Receiver<Ownership>,
    tenure: Arc<Tenure>,
    stop: watch::Sender<bool>,
    count: ShardCount,
    meters: LeaseMeters,
    state: OwnerState,
}

/// What a created owner needs to start.
struct Prepared {
    node_id: NodeId,
    config: ShardOwnerConfig,
    table: LeaseTable,
    ownership: watch::Sender<Ownership>,
}

/// Where a [`ShardOwner`] is in its life.
enum OwnerState {
    /// Created, not started.
    Ready(Box<Prepared>),
    /// Keeping leases.
    Running(JoinHandle<Keeper>),
    /// Drained, or being started.
    Stopped,
}

impl std::fmt::Debug for ShardOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardOwner")
            .field("owned", &self.ownership.borrow().len())
            .finish_non_exhaustive()
    }
}

impl ShardOwner {
    /// An owner for `node_id` that owns nothing until [`ShardOwner::start`]; its
    /// [`ShardOwner::fence`] can be handed to the runtime first.
    pub fn new(node_id: NodeId, config: ShardOwnerConfig, table: LeaseTable) -> Self {
        let (ownership, ownership_rx) = watch::channel(Ownership::new());
        let (stop, _) = watch::channel(false);
        Self {
            ownership: ownership_rx,
            tenure: Arc::new(Tenure::new(config.lease_ttl)),
            stop,
            count: config.count,
            meters: LeaseMeters::default(),
            state: OwnerState::Ready(Box::new(Prepared {
                node_id,
                config,
                table,
                ownership,
            })),
        }
    }

    /// Starts keeping the node's share of the shards among `members`, telling
    /// `events` of every change. Starting twice does nothing.
    pub fn start(
        &mut self,
        members: watch::Receiver<BTreeSet<NodeId>>,
        events: Arc<dyn ShardEvent>,
    ) {
        let state = std::mem::replace(&mut self.state, OwnerState::Stopped);
        let OwnerState::Ready(prepared) = state else {
            self.state = state;
            return;
        };
        let Prepared {
            node_id,
            config,
            table,
            ownership,
        } = *prepared;
        let keeper = Keeper {
            node_id,
            config,
            table,
            members,
            events,
            held: BTreeMap::new(),
            ownership,
            tenure: Arc::clone(&self.tenure),
            departed: Departed::default(),
            meters: self.meters.clone(),
        };
        self.state = OwnerState::Running(tokio::spawn(keeper.run(self.stop.subscribe())));
    }

    /// The shards owned now, updated as they change.
    pub fn ownership(&self) -> watch::Receiver<Ownership> {
        self.ownership.clone()
    }

    /// The counters of this owner's lease keeping, for the node's metrics.
    pub fn meters(&self) -> &LeaseMeters {
        &self.meters
    }

    /// The fence source for this node's thread checkpoints.
    pub fn fence(&self) -> ShardedFence {
        ShardedFence {
            count: self.count,
            ownership: self.ownership.clone(),
            tenure: Arc::clone(&self.tenure),
        }
    }

    /// Stops taking shards, drains every owned shard and releases its lease, within
    /// `deadline`; leases not released by then expire on their own.
    pub async fn drain(self, deadline: Duration) -> Result<(), ClusterError> {
        let _ = self.stop.send(true);
        let OwnerState::Running(task) = self.state else {
            return Ok(());
        };
        let mut keeper = task.await?;
        match tokio::time::timeout(deadline, keeper.release_all()).await {
            Ok(result) => result,
            Err(_) => Err(ClusterError::TimedOut {
                doing: "releasing the shard leases (the rest expire)",
                after: deadline,
            }),
        }
    }
}

/// Fencing tokens from shard leases: a thread's checkpoints carry its shard's lease
/// token while this node owns the shard, and the lowest token otherwise, which any
/// store that has seen an owner refuses. Ownership whose tenure lapsed (renewals
/// not written for most of a TTL, e.g. the process was paused) counts as none.
#[derive(Debug, Clone)]
pub struct ShardedFence {
    count: ShardCount,
    ownership: watch::Receiver<Ownership>,
    tenure: Arc<Tenure>,
}

impl ShardedFence {
    /// How many shards the cluster has.
    pub fn count(&self) -> ShardCount {
        self.count
    }

    /// Whether this node owns the thread's shard now, within its tenure.
    pub fn owns(&self, thread_id: &ThreadId) -> bool {
        self.tenure.holds()
            && self
                .ownership
                .borrow()
                .contains_key(&self.count.shard_of(thread_id))
    }

    /// Whether this node's tenure over its leases still runs (whichever shards
    /// they are): what [`FenceSource::holds`] answers for every thread.
    pub fn holds_any(&self) -> bool {
        self.tenure.holds()
    }

    /// Resolves once this node does not own the thread's shard (at once if it does
    /// not now, or if the shard owner stopped).
    pub async fn moved_away(&self, thread_id: &ThreadId) {
        let shard = self.count.shard_of(thread_id);
        let mut ownership = self.ownership.clone();
        let _ = ownership
            .wait_for(|owned| !owned.contains_key(&shard))
            .await;
    }
}

impl FenceSource for ShardedFence {
    fn token(&self, thread_id: &ThreadId) -> FencingToken {
        if !self.tenure.holds() {
            return FencingToken::default();
        }
        self.ownership
            .borrow()
            .get(&self.count.shard_of(thread_id))
            .copied()
            .unwrap_or_default()
    }

    fn fences_on_load(&self) -> bool {
        true
    }

    /// The tenure alone, without hashing the thread id to its shard (this runs
    /// for every message a thread actor takes and every event it publishes): a
    /// lease this node holds cannot pass to another node while the tenure runs,
    /// and the threads of shards it gives up or loses are evicted.
    fn holds(&self, _thread_id: &ThreadId) -> bool {
        self.holds_any()
    }
}
