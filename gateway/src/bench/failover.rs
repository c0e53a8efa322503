//! `awaken bench cluster --scenario failover`: the node that owns a waiting run is
//! killed (SIGKILL) and the run's decision is published at once; measured is the
//! time from the kill until the run finished on the surviving node.
//!
//! Two `awaken node` processes (this binary) share the NATS server and a PostgreSQL
//! database. Each round picks the victim (the nodes take turns), submits a
//! `bench-hitl` run to a thread whose shard the victim owns (read from the shard
//! lease bucket), follows its events from this process (a thread-call client, not a
//! node) until it waits for approval, kills the victim, publishes the decision on
//! `awaken.decisions.<thread>` and waits for the run's `RunFinish` on
//! `awaken.events.<run_id>`. Then it starts a fresh node in the victim's place.
//! The time covers the victim's lease and membership expiring (the TTL), the
//! survivor taking the shard, and the decision being applied there.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use awaken_actors::contract::{
    AgentEvent, Message, StreamEvent, TerminationReason, ToolCallOutcome,
};
use awaken_actors::mailbox::{MailboxConfig, SubmitOptions, submit};
use awaken_actors::store::{PoolSettings, PostgresStore, ThreadRunStore};
use awaken_actors::thread::RunRequest;
use awaken_actors::{AgentId, RunId, ThreadId};
use awaken_cluster::codec;
use awaken_cluster::decisions::{DecisionBus, DecisionBusConfig, DecisionPayload};
use awaken_cluster::events::{decode_events, event_subject, follow_run};
use awaken_cluster::inbox::{DEFAULT_INBOX_BUCKET, KvRunInbox};
use awaken_cluster::ledger::{DEFAULT_LEDGER_NAME, LedgerMailbox};
use awaken_cluster::membership::NodeId;
use awaken_cluster::routing::{RouterConfig, ThreadRouter};
use awaken_cluster::shards::{DEFAULT_SHARDS_BUCKET, ShardCount, ShardLease, quota};
use futures::StreamExt;
use tokio::sync::Mutex;

use super::BenchOptions;
use super::child::AwakenChild;
use super::driver::{RunSample, drive};
use super::report::BenchReport;
use crate::demo;
use crate::error::{GatewayError, Result};

/// The scenario's name in reports.
pub const NAME: &str = "failover";

/// The nodes' shard lease and membership TTL (the `awaken node` default).
const LEASE_TTL_S: u64 = 5;

/// How long a node may take to start, or a thread to find an owner on the victim.
const SETUP_DEADLINE: Duration = Duration::from_secs(60);

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

/// Kills `options.runs` owners of waiting runs, one at a time, on the server at
/// `nats_url` with the thread store at `postgres_url`; the nodes are `node_exe node`
/// processes (the `awaken` binary).
pub async fn run(
    nats_url: &str,
    postgres_url: &str,
    node_exe: &Path,
    options: &BenchOptions,
) -> Result<BenchReport> {
    super::jetstream::refuse_a_used_server(nats_url).await?;
    let setup = NodeSetup {
        exe: node_exe.to_owned(),
        nats_url: nats_url.to_owned(),
        postgres_url: postgres_url.to_owned(),
    };
    let nodes = [setup.start().await?, setup.start().await?];
    let client = async_nats::connect(nats_url).await.map_err(bench_error)?;
    let js = jetstream::new(client.clone());
    let harness = Arc::new(Harness {
        setup,
        leases: js
            .get_key_value(DEFAULT_SHARDS_BUCKET)
            .await
            .map_err(bench_error)?,
        mailbox: LedgerMailbox::open(&js, DEFAULT_LEDGER_NAME, 1, MailboxConfig::default())
            .await
            .map_err(bench_error)?,
        inbox: KvRunInbox::open(
            &js,
            DEFAULT_INBOX_BUCKET,
            1,
            awaken_cluster::ledger::ANSWER_DEADLINE,
        )
        .await
        .map_err(bench_error)?,
        bus: DecisionBus::open(js, DecisionBusConfig::default())
            .await
            .map_err(bench_error)?,
        router: ThreadRouter::new(
            client.clone(),
            ShardCount::default(),
            None,
            RouterConfig::default(),
        ),
        // Where a follow reads a run's end its owner no longer buffers.
        store: Arc::new(
            PostgresStore::connect(postgres_url, PoolSettings::default())
                .await
                .map_err(bench_error)?,
        ),
        client,
        nodes: Mutex::new(nodes),
    });
    let job = Arc::clone(&harness);
    let driven = drive(NAME, options.runs, 1, options, move |round| {
        let harness = Arc::clone(&job);
        async move { harness.round(round % 2).await }
    })
    .await?;
    if let Ok(harness) = Arc::try_unwrap(harness) {
        for node in harness.nodes.into_inner() {
            node.stop().await;
        }
    }
    let mut report = driven.report(NAME, 1);
    report.nodes = 2;
    Ok(report
        .with("lease_ttl_s", LEASE_TTL_S)
        .with("failover_p50_us", driven.parts.quantile_us(0.50))
        .with("failover_max_us", driven.parts.max_us()))
}

/// An `awaken node` child process; killed when dropped.
struct Node {
    id: String,
    child: AwakenChild,
}

/// How to start a node.
struct NodeSetup {
    exe: PathBuf,
    nats_url: String,
    postgres_url: String,
}

impl NodeSetup {
    async fn start(&self) -> Result<Node> {
        let id = format!("bench-failover-{}", uuid::Uuid::now_v7().simple());
        let ttl = LEASE_TTL_S.to_string();
        let args = [
            "node",
            "--nats-url",
            &self.nats_url,
            "--postgres-url",
            &self.postgres_url,
            "--node-id",
            &id,
            "--lease-ttl-s",
            &ttl,
        ];
        let (child, ready) = AwakenChild::start(&self.exe, &args, &[], SETUP_DEADLINE).await?;
        if !ready.contains(r#""event":"ready""#) {
            return Err(bench_error(format!(
                "node {id} did not start (check --postgres-url and --nats-url): {ready:?}"
            )));
        }
        Ok(Node { id, child })
    }
}

impl Node {
    /// Drains the node (SIGTERM) so it leaves the cluster at once; killed if it
    /// takes longer than its drain deadline.
    async fn stop(self) {
        self.child.stop(Duration::from_secs(15)).await;
    }
}

struct Harness {
    setup: NodeSetup,
    client: async_nats::Client,
    leases: kv::Store,
    mailbox: LedgerMailbox,
    inbox: KvRunInbox,
    bus: DecisionBus,
    router: ThreadRouter,
    store: Arc<dyn ThreadRunStore>,
    nodes: Mutex<[Node; 2]>,
}

impl Harness {
    /// One kill: returns the failover time as the run's decision latency.
    async fn round(&self, victim: usize) -> std::result::Result<RunSample, String> {
        let mut nodes = self.nodes.lock().await;
        let members: Vec<&str> = nodes.iter().map(|node| node.id.as_str()).collect();
        let thread = self.thread_owned_by(&nodes[victim].id, &members).await?;
        let run_id = RunId::generate();
        let request = RunRequest::new(thread.clone(), vec![Message::user("go")])
            .with_agent_id(AgentId::new(demo::BENCH_HITL_AGENT).map_err(|e| e.to_string())?)
            .with_run_id(run_id.clone());
        let mut waiting = follow_run(
            &self.client,
            &self.router,
            &self.store,
            &thread,
            &run_id,
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
        submit(
            &self.mailbox,
            &self.inbox,
            request,
            SubmitOptions::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let mut events = Vec::new();
        while let Some(event) = tokio::time::timeout(SETUP_DEADLINE, waiting.next())
            .await
            .map_err(|_| "the run did not reach its approval")?
        {
            events.push(event);
        }
        let call = suspended_call(&events).ok_or("the run did not wait for approval")?;

        let mut resumed = self
            .client
            .subscribe(event_subject(&run_id))
            .await
            .map_err(|e| e.to_string())?;
        self.client.flush().await.map_err(|e| e.to_string())?;
        let killed = Instant::now();
        nodes[victim]
            .child
            .kill()
            .await
            .map_err(|e| format!("kill: {e}"))?;
        self.approve(&thread, &run_id, &call).await?;
        let ended = loop {
            let message = tokio::time::timeout(SETUP_DEADLINE, resumed.next())
                .await
                .map_err(|_| "the run was not resumed after the kill")?
                .ok_or("the connection closed")?;
            let events = decode_events(&message.payload).map_err(|e| e.to_string())?;
            let finish = events.into_iter().find_map(|event| match event.event {
                AgentEvent::RunFinish { termination, .. } => Some(termination),
                _ => None,
            });
            if let Some(termination) = finish {
                break termination;
            }
        };
        let failover = killed.elapsed();
        if ended != TerminationReason::NaturalEnd {
            return Err(format!("the resumed run ended {ended:?}"));
        }
        nodes[victim] = self.setup.start().await.map_err(|e| e.to_string())?;
        Ok(RunSample {
            part: Some(failover),
        })
    }

    /// A new thread whose shard `node_id` owns, once the shards are settled: every
    /// shard held and each of `members` holding exactly its fair share. Before that
    /// a shard may still move to the other node, and a round that picked it would
    /// time that hand-over instead of a failover.
    async fn thread_owned_by(
        &self,
        node_id: &str,
        members: &[&str],
    ) -> std::result::Result<ThreadId, String> {
        let shards = ShardCount::default();
        let members: BTreeSet<NodeId> = members
            .iter()
            .map(|id| NodeId::new(*id))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + SETUP_DEADLINE;
        while Instant::now() < deadline {
            let owners = self.shard_owners(shards).await?;
            let settled = owners.len() == shards.get() as usize
                && members.iter().all(|member| {
                    let held = owners.values().filter(|owner| *owner == member).count();
                    held == quota(shards, &members, member) as usize
                });
            if settled {
                // The node holds about half the shards: a few tries find one.
                loop {
                    let thread = ThreadId::generate();
                    if owners
                        .get(&shards.shard_of(&thread).0)
                        .is_some_and(|owner| owner.as_str() == node_id)
                    {
                        return Ok(thread);
                    }
                }
            }
            // Nodes are still taking or handing over their shares.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "the shards did not settle on {members:?} within {SETUP_DEADLINE:?}"
        ))
    }

    /// The holder of every shard that has a lease now.
    async fn shard_owners(
        &self,
        shards: ShardCount,
    ) -> std::result::Result<HashMap<u32, NodeId>, String> {
        let mut owners = HashMap::new();
        for shard in shards.all() {
            let value = self
                .leases
                .get(format!("shard.{}", shard.0))
                .await
                .map_err(|e| e.to_string())?;
            if let Some(lease) = value.and_then(|value| codec::decode::<ShardLease>(&value).ok()) {
                owners.insert(shard.0, lease.node_id);
            }
        }
        Ok(owners)
    }

    async fn approve(
        &self,
        thread: &ThreadId,
        run_id: &RunId,
        call: &str,
    ) -> std::result::Result<(), String> {
        let decision = DecisionPayload::resume(
            call,
            format!("approve-{run_id}"),
            serde_json::json!({"approved": true}),
        );
        self.bus
            .publish(thread.as_str(), &decision)
            .await
            .map_err(|e| e.to_string())
    }
}

fn suspended_call(events: &[Arc<StreamEvent>]) -> Option<String> {
    events.iter().find_map(|event| match &event.event {
        AgentEvent::ToolCallDone {
            id,
            outcome: ToolCallOutcome::Suspended,
            ..
        } => Some(id.to_string()),
        _ => None,
    })
}
