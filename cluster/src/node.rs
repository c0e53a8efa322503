//! `ClusterNode`: one node of the cluster, all parts wired together.
//!
//! ```text
//! ClusterNode
//! ├─ Membership      heartbeats in `awaken_members`; the member set drives…
//! ├─ ShardOwner      …the node's fair share of shard leases (fencing tokens)
//! ├─ AgentRuntime    thread actors; checkpoints carry the shard's token
//! ├─ MailboxWorker   claims the owned threads' dispatches (the mailbox ledger),
//! │                  reading runs' input from the KV inbox
//! ├─ DecisionBus     takes decisions for any thread, forwards them to the owner
//! ├─ ShardServer     answers thread calls (cancel, interrupt, status, decisions,
//! │                  event replays) on the subjects of the owned shards
//! └─ ClusterEventHub publishes runs' events on `awaken.events.<run_id>`, keeping
//!                    a replay buffer per run
//! ```
//!
//! Any node accepts runs ([`ClusterNode::submit`]) and decisions; the owner of the
//! thread's shard executes them. When a node dies its leases expire, the survivors
//! take its shards, reclaim its dispatch claims and receive its unacknowledged
//! decisions again: runs continue from their last checkpoint.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use async_trait::async_trait;
use awaken_actors::clock::now_ms;
use awaken_actors::contract::RunDispatch;
use awaken_actors::mailbox::{
    Claimant, MailboxConfig, MailboxError, MailboxStore, MailboxWorker, RunInbox, SubmitOptions,
    submit,
};
use awaken_actors::runtime::{AgentRuntime, AgentRuntimeBuilder};
use awaken_actors::store::FencingToken;
use awaken_actors::thread::RunRequest;
use awaken_actors::{RunId, ThreadId};
use prometheus_client::registry::Registry;

use crate::approvals::{ApprovalFeedConfig, JetStreamFeed};
use crate::assembly::{Assembly, Parts};
use crate::config_store::{ConfigStore, DEFAULT_CONFIG_BUCKET, NatsConfigStore};
use crate::control::{RunControl, probe_store};
use crate::decisions::{DecisionBus, DecisionBusConfig, DecisionWorker, RoutedDecisions};
use crate::delegation::Reach;
use crate::error::ClusterError;
use crate::events::{ClusterEventHub, EventsConfig, ReplayBuffers, RunFollow, follow_run};
use crate::inbox::{DEFAULT_INBOX_BUCKET, KvRunInbox};
use crate::ledger::{DEFAULT_LEDGER_NAME, LedgerMailbox, LedgerOptions};
use crate::membership::{MemberRecord, Membership, MembershipConfig, NodeId};
use crate::node_metrics::NodeGauges;
use crate::routing::{Answer, RouteError, RouterConfig, ShardServer, ThreadCall, ThreadRouter};
use crate::run_input::{ClusterRunInbox, RUN_INPUT_IN_LEDGER, RunInputPlacement};
use crate::shards::{
    DEFAULT_SHARDS_BUCKET, HandOffs, LeaseTable, Ownership, RuntimeShards, ShardEvent, ShardId,
    ShardOwner, ShardOwnerConfig, ShardPlacement, ShardedFence, quota,
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
    /// The approval feed's stream (`replicas` is taken from this config).
    pub approvals: ApprovalFeedConfig,
    /// Heartbeat TTL: keep it equal to the shard lease TTL, or a dead node's
    /// shards wait for its membership to expire before the others take them.
    pub membership: MembershipConfig,
    /// Run event publishing and replay buffers.
    pub events: EventsConfig,
    /// Thread calls to other nodes.
    pub routing: RouterConfig,
    /// Where this node's gateway listens, published to the other members.
    pub http_url: Option<String>,
    /// Where the input of runs this node accepts is kept (decision 0078).
    pub run_input: RunInputPlacement,
    /// How long a mailbox operation waits out a NATS reconnect or a stream
    /// election before it is refused (`server.backend_wait_secs`).
    pub backend_wait: Duration,
}

impl NodeConfig {
    /// The defaults for a node named `node_id`: 256 shards with 5 s leases and
    /// membership TTL, one replica, mailbox timings suited to failover within
    /// seconds (10 s claim leases renewed every 2 s, swept every second), and a
    /// decision `ack_wait` of one lease TTL.
    pub fn new(node_id: NodeId) -> Self {
        let shards = ShardOwnerConfig::default();
        let lease_ttl = shards.lease_ttl;
        Self {
            node_id,
            membership: MembershipConfig {
                ttl: lease_ttl,
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
            // A decision handed to a node that died (even one pulled by its
            // connection's last, stale request) comes back within a lease TTL.
            decisions: DecisionBusConfig {
                ack_wait: lease_ttl,
                ..DecisionBusConfig::default()
            },
            approvals: ApprovalFeedConfig::default(),
            events: EventsConfig::default(),
            routing: RouterConfig::default(),
            http_url: None,
            run_input: RunInputPlacement::default(),
            backend_wait: crate::ledger::ANSWER_DEADLINE,
        }
    }
}

/// A running cluster node.
pub struct ClusterNode {
    node_id: NodeId,
    runtime: AgentRuntime,
    mailbox: Arc<LedgerMailbox>,
    inbox: Arc<ClusterRunInbox>,
    worker: Arc<MailboxWorker>,
    bus: DecisionBus,
    decisions: DecisionWorker,
    client: async_nats::Client,
    router: ThreadRouter,
    events: Arc<ClusterEventHub>,
    calls: ShardServer,
    owner: ShardOwner,
    membership: Membership,
    fence: ShardedFence,
    config_store: Arc<NatsConfigStore>,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNode")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl ClusterNode {
    /// Joins the cluster on `client`: builds the runtime from `builder` (with the
    /// shard fence and the cluster's event hub; the builder brings agents, models
    /// and the shared thread store), opens the mailbox, inbox and decision bus,
    /// serves thread calls and starts taking shards.
    pub async fn start(
        client: async_nats::Client,
        builder: AgentRuntimeBuilder,
        config: NodeConfig,
    ) -> Result<Self, ClusterError> {
        // Boxed: the start holds the node's whole configuration and builder
        // across its waits, more than a caller's future should carry.
        Box::pin(Self::join(client, builder, config)).await
    }

    async fn join(
        client: async_nats::Client,
        mut builder: AgentRuntimeBuilder,
        mut config: NodeConfig,
    ) -> Result<Self, ClusterError> {
        let js = jetstream::new(client.clone());
        let node_id = config.node_id.clone();
        let table = LeaseTable::open(
            &js,
            DEFAULT_SHARDS_BUCKET,
            config.shards.lease_ttl,
            config.replicas,
        )
        .await
        .map_err(|e| e.during("opening the shard lease bucket"))?;
        let mut owner = ShardOwner::new(node_id.clone(), config.shards.clone(), table);
        let fence = owner.fence();
        let hub = Arc::new(ClusterEventHub::start(
            client.clone(),
            &config.events,
            fence.clone(),
            builder.memory(),
        ));
        let buffers = Arc::clone(hub.buffers());
        let approvals = JetStreamFeed::open(
            js.clone(),
            &ApprovalFeedConfig {
                replicas: config.replicas,
                ..config.approvals.clone()
            },
        )
        .await
        .map_err(|e| e.during("opening the approval feed"))?;
        builder = builder.with_approval_sink(Arc::new(approvals));
        let runtime = Assembly::runtime(builder, Arc::clone(&hub) as _, Some(&fence))?;
        config.mailbox = config.mailbox.clone().within(runtime.memory());

        let mailbox = Arc::new(
            LedgerMailbox::open_with(
                &js,
                DEFAULT_LEDGER_NAME,
                LedgerOptions {
                    replicas: config.replicas,
                    answer_deadline: config.backend_wait,
                    ..LedgerOptions::default()
                },
                config.mailbox.clone(),
            )
            .await
            .map_err(|e| e.during("opening the mailbox ledger"))?,
        );
        mailbox.charge_inputs_to(runtime.memory());
        let kv_inbox = KvRunInbox::open(
            &js,
            DEFAULT_INBOX_BUCKET,
            config.replicas,
            config.backend_wait,
        )
        .await
        .map_err(|e| e.during("opening the run inbox"))?;
        let config_store = Arc::new(
            NatsConfigStore::open(&js, DEFAULT_CONFIG_BUCKET, config.replicas)
                .await
                .map_err(|e| e.during("opening the config bucket"))?,
        );
        let membership = Membership::join(
            &js,
            &MembershipConfig {
                replicas: config.replicas,
                ..config.membership.clone()
            },
            MemberRecord {
                node_id: node_id.clone(),
                joined_at_ms: now_ms(),
                http_url: config.http_url.clone(),
                features: vec![RUN_INPUT_IN_LEDGER.to_owned()],
            },
        )
        .await
        .map_err(|e| e.during("joining the membership bucket"))?;
        let inbox = Arc::new(
            ClusterRunInbox::new(config.run_input, Arc::clone(&mailbox), kv_inbox)
                .with_members(membership.features()),
        );
        let handoffs = Arc::new(HandOffs::default());
        let placement = Arc::new(ShardPlacement::new(fence.clone(), Arc::clone(&handoffs)));
        let live = {
            let members = membership.subscribe();
            Arc::new(move |consumer: &str| {
                members
                    .borrow()
                    .iter()
                    .any(|node| node.as_str() == consumer)
            })
        };
        let assembly = Assembly::assemble(
            runtime,
            Parts {
                buffers: Arc::clone(&buffers),
                fence: Some(fence.clone()),
                mailbox: Arc::clone(&mailbox) as _,
                inbox: Arc::clone(&inbox) as _,
                mailbox_config: config.mailbox.clone(),
                claimant: Claimant {
                    consumer: node_id.as_str().to_owned(),
                    placement,
                    live,
                },
            },
        )
        .await?;

        let bus = DecisionBus::open(
            js.clone(),
            DecisionBusConfig {
                replicas: config.replicas,
                ..config.decisions.clone()
            },
        )
        .await
        .map_err(|e| e.during("opening the decision bus"))?;
        let calls = ShardServer::start(
            client.clone(),
            assembly.host.clone(),
            owner.ownership(),
            config.routing.heartbeat,
        );
        let router = ThreadRouter::new(
            client.clone(),
            config.shards.count,
            Some(assembly.host.clone()),
            config.routing.clone(),
        );
        let decisions = bus
            .serve(
                Arc::new(RoutedDecisions::new(router.clone())),
                Arc::clone(assembly.runtime.metrics()),
            )
            .await?;
        assembly.deliver_child_runs(Reach::Cluster {
            client: client.clone(),
            router: Box::new(router.clone()),
        });
        let Assembly {
            runtime, worker, ..
        } = assembly;

        owner.start(
            membership.subscribe(),
            Arc::new(NodeShards {
                runtime: RuntimeShards::new(runtime.clone(), config.shards.count, handoffs),
                worker: Arc::clone(&worker),
            }),
        );
        Ok(Self {
            node_id,
            runtime,
            mailbox,
            inbox,
            worker,
            bus,
            decisions,
            client,
            router,
            events: hub,
            calls,
            owner,
            membership,
            fence,
            config_store,
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
    pub fn mailbox(&self) -> &Arc<LedgerMailbox> {
        &self.mailbox
    }

    /// The decision bus (publish decisions for any thread).
    pub fn decision_bus(&self) -> &DecisionBus {
        &self.bus
    }

    /// Sends thread calls (cancel, interrupt, status, replay) to any thread's owner.
    pub fn router(&self) -> &ThreadRouter {
        &self.router
    }

    /// The replay buffers of the runs this node executes.
    pub fn event_buffers(&self) -> &Arc<ReplayBuffers> {
        self.events.buffers()
    }

    /// Follows a run's events from this node, wherever the run executes: what its
    /// owner still buffers after `after_seq`, then live events until the activation
    /// ends.
    pub async fn follow_run(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
        after_seq: Option<u64>,
    ) -> Result<RunFollow, RouteError> {
        follow_run(
            &self.client,
            &self.router,
            self.runtime.store(),
            thread_id,
            run_id,
            after_seq,
        )
        .await
    }

    /// The shards this node owns (with their fencing tokens), as they change.
    pub fn ownership(&self) -> tokio::sync::watch::Receiver<Ownership> {
        self.owner.ownership()
    }

    /// Whether this node owns the thread's shard now.
    pub fn owns(&self, thread_id: &ThreadId) -> bool {
        self.fence.owns(thread_id)
    }

    /// Resolves once this node holds its fair share of the shards among `members`
    /// (what it holds after their joins and leaves settle): `true`, or `false`
    /// when its shard owner stopped first.
    pub async fn fair_share_held(&self, members: &BTreeSet<NodeId>) -> bool {
        let share = quota(self.fence.count(), members, &self.node_id) as usize;
        self.ownership()
            .wait_for(|owned| owned.len() == share)
            .await
            .is_ok()
    }

    /// Accepts a run for any thread; the owner of its shard executes it.
    pub async fn submit(
        &self,
        request: RunRequest,
        options: SubmitOptions,
    ) -> Result<RunDispatch, MailboxError> {
        submit(&*self.mailbox, &*self.inbox, request, options).await
    }

    /// Leaves the cluster gracefully within `deadline`: stops claiming, lets the
    /// runs executing here finish or reach a wait (so their tool calls are not
    /// run again by the next owner), stops taking decisions, stops every thread
    /// at its last checkpoint, releases the shard leases (other nodes take over
    /// at once) and deregisters. Runs still executing when the deadline is near
    /// are stopped at their last checkpoint and continue on the next owner.
    pub async fn drain(self, deadline: Duration) -> Result<(), ClusterError> {
        let started = tokio::time::Instant::now();
        self.worker.stop_claiming();
        tracing::info!(node_id = %self.node_id, "draining: no new claims");
        // Half the deadline at most, so releasing the leases keeps the rest. A
        // run's end is published before its dispatch is acked: wait for both.
        let worker = Arc::clone(&self.worker);
        let settled = tokio::time::timeout(deadline / 2, async {
            self.runtime.activations_settled().await;
            while worker.holds_claims() {
                tokio::time::sleep(CLAIM_RELEASE_POLL).await;
            }
        })
        .await
        .is_ok();
        if settled {
            tracing::info!(node_id = %self.node_id, after = ?started.elapsed(), "draining: runs settled");
        } else {
            tracing::warn!(node_id = %self.node_id, "runs still executing at the drain's half-time: the next owners continue them from their checkpoints");
        }
        drop(self.decisions);
        drop(self.calls);
        let drained = self
            .owner
            .drain(deadline.saturating_sub(started.elapsed()))
            .await;
        let left = self.membership.leave().await;
        self.runtime.shutdown().await;
        drained.and(left)
    }
}

/// How often a draining node looks whether its last claims are acked.
const CLAIM_RELEASE_POLL: Duration = Duration::from_millis(10);

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

    async fn handing_off(&self, shards: &[ShardId]) {
        self.runtime.handing_off(shards).await;
    }

    async fn draining(&self, shards: &[ShardId]) {
        self.runtime.draining(shards).await;
    }

    async fn lost(&self, shard: ShardId) {
        self.runtime.lost(shard).await;
    }
}

#[async_trait]
impl RunControl for ClusterNode {
    fn runtime(&self) -> &AgentRuntime {
        &self.runtime
    }

    fn mailbox(&self) -> Arc<dyn MailboxStore> {
        Arc::clone(&self.mailbox) as _
    }

    fn config_store(&self) -> Arc<dyn ConfigStore> {
        Arc::clone(&self.config_store) as _
    }

    fn register_metrics(&self, awaken: &mut Registry) {
        NodeGauges {
            members: self.membership.subscribe(),
            ownership: self.owner.ownership(),
            shards: self.fence.count(),
            client: self.client.clone(),
            leases: self.owner.meters().clone(),
            events: Arc::clone(&self.events),
        }
        .register(awaken);
    }

    async fn submit(
        &self,
        request: RunRequest,
        options: SubmitOptions,
    ) -> Result<RunDispatch, MailboxError> {
        ClusterNode::submit(self, request, options).await
    }

    async fn accepted_run(&self, run_id: &RunId) -> Result<Option<RunRequest>, MailboxError> {
        if let Some(input) = self.inbox.get(run_id).await? {
            return Ok(Some(input));
        }
        // A run accepted through another node a moment ago: this node's replica
        // may not have applied its enqueue yet.
        self.mailbox.carried_input_synced(run_id).await
    }

    async fn call(&self, call: ThreadCall) -> Result<Answer, RouteError> {
        self.router.call(call).await
    }

    async fn follow(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
        after_seq: Option<u64>,
    ) -> Result<RunFollow, RouteError> {
        self.follow_run(thread_id, run_id, after_seq).await
    }

    async fn check_ready(&self) -> Result<(), String> {
        if self.client.connection_state() != async_nats::connection::State::Connected {
            return Err(format!("NATS: {}", self.client.connection_state()));
        }
        probe_store(&**self.runtime.store()).await
    }
}
