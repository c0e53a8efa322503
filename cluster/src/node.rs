//! `ClusterNode`: one node of the cluster, all parts wired together.
//!
//! ```text
//! ClusterNode
//! ├─ Membership      heartbeats in `awaken_members`; the member set drives…
//! ├─ ShardOwner      …the node's fair share of shard leases (fencing tokens)
//! ├─ AgentRuntime    thread actors; checkpoints carry the shard's token
//! ├─ MailboxWorker   claims the owned threads' dispatches (JetStream mailbox),
//! │                  reading runs' input from the KV inbox
//! └─ DecisionBus     applies decisions for owned threads, gives others back
//! ```
//!
//! Any node accepts runs ([`ClusterNode::submit`]) and decisions; the owner of the
//! thread's shard executes them. When a node dies its leases expire, the survivors
//! take its shards, reclaim its dispatch claims and receive its unacknowledged
//! decisions again: runs continue from their last checkpoint.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use async_trait::async_trait;
use awaken_actors::ThreadId;
use awaken_actors::contract::RunDispatch;
use awaken_actors::mailbox::{
    MailboxConfig, MailboxError, MailboxWorker, SubmitOptions, now_ms, submit,
};
use awaken_actors::runtime::{AgentRuntime, AgentRuntimeBuilder};
use awaken_actors::store::FencingToken;
use awaken_actors::thread::RunRequest;

use crate::decisions::{DecisionBus, DecisionBusConfig, DecisionWorker, RuntimeDecisions};
use crate::error::ClusterError;
use crate::inbox::{DEFAULT_INBOX_BUCKET, KvRunInbox};
use crate::mailbox::{DEFAULT_MAILBOX_BUCKET, JetStreamMailbox};
use crate::membership::{MemberRecord, Membership, MembershipConfig, NodeId};
use crate::shards::{
    DEFAULT_SHARDS_BUCKET, LeaseTable, RuntimeShards, ShardCount, ShardEvent, ShardId, ShardOwner,
    ShardOwnerConfig, ShardedFence,
};

/// Everything a node is configured with.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id (unique in the cluster).
    pub node_id: NodeId,
    /// Shard count and lease TTL.
    pub shards: ShardOwnerConfig,
    /// Copies of every bucket and stream on a clustered NATS.
    pub replicas: usize,
    /// Mailbox leases, sweeps, retries, GC.
    pub mailbox: MailboxConfig,
    /// Decision bus settings (`replicas` is taken from this config).
    pub decisions: DecisionBusConfig,
    /// Heartbeat TTL: keep it equal to the shard lease TTL, or a dead node's
    /// shards wait for its membership to expire before the others take them.
    pub membership: MembershipConfig,
    /// Where this node's gateway listens, published to the other members.
    pub http_url: Option<String>,
}

impl NodeConfig {
    /// The defaults for a node named `node_id`: 256 shards with 5 s leases and
    /// membership TTL, one replica, and mailbox timings suited to failover within
    /// seconds (10 s claim leases renewed every 2 s, swept every second).
    pub fn new(node_id: NodeId) -> Self {
        let shards = ShardOwnerConfig::default();
        Self {
            node_id,
            membership: MembershipConfig {
                ttl: shards.lease_ttl,
                ..MembershipConfig::default()
            },
            shards,
            replicas: 1,
            mailbox: MailboxConfig {
                lease_ms: 10_000,
                lease_renewal_interval: Duration::from_secs(2),
                sweep_interval: Duration::from_secs(1),
                ..MailboxConfig::default()
            },
            decisions: DecisionBusConfig::default(),
            http_url: None,
        }
    }
}

/// A running cluster node.
pub struct ClusterNode {
    node_id: NodeId,
    shard_count: ShardCount,
    runtime: AgentRuntime,
    mailbox: Arc<JetStreamMailbox>,
    inbox: Arc<KvRunInbox>,
    worker: Arc<MailboxWorker>,
    bus: DecisionBus,
    decisions: DecisionWorker,
    owner: ShardOwner,
    membership: Membership,
    fence: ShardedFence,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNode")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

fn mailbox_error(error: MailboxError) -> ClusterError {
    ClusterError::Nats(error.to_string())
}

impl ClusterNode {
    /// Joins the cluster on `client`: builds the runtime from `builder` (with the
    /// shard fence; the builder brings agents, models and the shared thread store),
    /// opens the mailbox, inbox and decision bus, and starts taking shards.
    pub async fn start(
        client: async_nats::Client,
        builder: AgentRuntimeBuilder,
        config: NodeConfig,
    ) -> Result<Self, ClusterError> {
        let js = jetstream::new(client);
        let node_id = config.node_id.clone();
        let table = LeaseTable::open(
            &js,
            DEFAULT_SHARDS_BUCKET,
            config.shards.lease_ttl,
            config.replicas,
        )
        .await?;
        let mut owner = ShardOwner::new(node_id.clone(), config.shards.clone(), table);
        let fence = owner.fence();
        let runtime = builder
            .with_fence_source(Arc::new(fence.clone()))
            .build()
            .map_err(|e| ClusterError::InvalidInput(e.to_string()))?;

        let mailbox = Arc::new(
            JetStreamMailbox::open(
                &js,
                DEFAULT_MAILBOX_BUCKET,
                config.replicas,
                config.mailbox.clone(),
            )
            .await?,
        );
        let inbox = Arc::new(KvRunInbox::open(&js, DEFAULT_INBOX_BUCKET, config.replicas).await?);
        let placement = {
            let fence = fence.clone();
            Arc::new(move |thread_id: &ThreadId| fence.owns(thread_id))
        };
        let worker = Arc::new(
            MailboxWorker::start(
                runtime.clone(),
                Arc::clone(&mailbox) as _,
                Arc::clone(&inbox) as _,
                config.mailbox.clone(),
                node_id.as_str(),
                placement,
            )
            .await
            .map_err(mailbox_error)?,
        );

        let bus = DecisionBus::open(
            js.clone(),
            DecisionBusConfig {
                replicas: config.replicas,
                ..config.decisions.clone()
            },
        )
        .await?;
        let decisions = bus
            .serve(Arc::new(RuntimeDecisions::owned_by(
                runtime.clone(),
                fence.clone(),
            )))
            .await?;

        let membership = Membership::join(
            &js,
            &config.membership,
            MemberRecord {
                node_id: node_id.clone(),
                joined_at_ms: now_ms(),
                http_url: config.http_url.clone(),
            },
        )
        .await?;
        owner.start(
            membership.subscribe(),
            Arc::new(NodeShards {
                runtime: RuntimeShards::new(runtime.clone(), config.shards.count),
                worker: Arc::clone(&worker),
            }),
        );
        Ok(Self {
            node_id,
            shard_count: config.shards.count,
            runtime,
            mailbox,
            inbox,
            worker,
            bus,
            decisions,
            owner,
            membership,
            fence,
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> &NodeId {
        &self.node_id
    }

    /// The node's runtime (runs of the threads it owns).
    pub fn runtime(&self) -> &AgentRuntime {
        &self.runtime
    }

    /// The cluster's mailbox.
    pub fn mailbox(&self) -> &Arc<JetStreamMailbox> {
        &self.mailbox
    }

    /// The decision bus (publish decisions for any thread).
    pub fn decision_bus(&self) -> &DecisionBus {
        &self.bus
    }

    /// Whether this node owns every shard of the cluster now (it is alone).
    pub fn owns_every_shard(&self) -> bool {
        self.owner.ownership().borrow().len() == self.shard_count.get() as usize
    }

    /// Whether this node owns the thread's shard now.
    pub fn owns(&self, thread_id: &ThreadId) -> bool {
        self.fence.owns(thread_id)
    }

    /// Accepts a run for any thread; the owner of its shard executes it.
    pub async fn submit(
        &self,
        request: RunRequest,
        options: SubmitOptions,
    ) -> Result<RunDispatch, MailboxError> {
        submit(&*self.mailbox, &*self.inbox, request, options).await
    }

    /// Leaves the cluster gracefully within `deadline`: stops claiming and taking
    /// decisions, stops every thread at its last checkpoint, releases the shard
    /// leases (other nodes take over at once) and deregisters.
    pub async fn drain(self, deadline: Duration) -> Result<(), ClusterError> {
        self.worker.stop_claiming();
        drop(self.decisions);
        let drained = self.owner.drain(deadline).await;
        let left = self.membership.leave().await;
        self.runtime.shutdown().await;
        drained.and(left)
    }
}

/// Shard changes on a node: evict threads that left, sweep for work that came.
struct NodeShards {
    runtime: RuntimeShards,
    worker: Arc<MailboxWorker>,
}

#[async_trait]
impl ShardEvent for NodeShards {
    async fn acquired(&self, shard: ShardId, token: FencingToken) {
        self.runtime.acquired(shard, token).await;
        self.worker.sweep_soon();
    }

    async fn draining(&self, shard: ShardId) {
        self.runtime.draining(shard).await;
    }

    async fn lost(&self, shard: ShardId) {
        self.runtime.lost(shard).await;
    }
}
