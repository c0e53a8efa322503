//! Shard leases and fair ownership on a real nats-server 2.9.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use async_trait::async_trait;
use awaken_actors::error::StorageError;
use awaken_actors::ids::ThreadId;
use awaken_actors::store::{FencingToken, InMemoryStore, ThreadRunStore};
use awaken_actors::thread::FenceSource;
use awaken_cluster::codec;
use awaken_cluster::membership::NodeId;
use awaken_cluster::shards::{
    DEFAULT_SHARDS_BUCKET, LeaseTable, Ownership, ShardCount, ShardEvent, ShardId, ShardLease,
    ShardOwner, ShardOwnerConfig,
};
use awaken_cluster::testing::NatsServer;
use tokio::sync::watch;

const TTL: Duration = Duration::from_secs(1);

fn node(id: &str) -> NodeId {
    NodeId::new(id).unwrap()
}

async fn table(server: &NatsServer) -> LeaseTable {
    let js = jetstream::new(server.connect().await.unwrap());
    LeaseTable::open(&js, DEFAULT_SHARDS_BUCKET, TTL, 1)
        .await
        .unwrap()
}

/// Waits until `condition` holds for the ownership, failing after `within`.
async fn until(
    rx: &mut watch::Receiver<Ownership>,
    within: Duration,
    condition: impl Fn(&Ownership) -> bool,
) -> Ownership {
    tokio::time::timeout(within, rx.wait_for(|o| condition(o)))
        .await
        .expect("ownership did not converge in time")
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_lease_has_one_holder_and_a_later_holder_fences_the_earlier() {
    let server = NatsServer::start().await.unwrap();
    let (a, b) = (table(&server).await, table(&server).await);
    let shard = ShardId(7);
    let mut held_a = a.acquire(shard, &node("a"), 0).await.unwrap().unwrap();
    assert!(b.acquire(shard, &node("b"), 0).await.unwrap().is_none());
    assert!(a.renew(&mut held_a, &node("a")).await.unwrap());
    let holders = b.holders().await.unwrap();
    assert_eq!(holders[&shard].node_id, node("a"));
    assert_eq!(
        holders[&shard].token, held_a.token,
        "renewal keeps the token"
    );

    // Node a falls silent (paused): the server expires its lease.
    let held_b = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(held) = b.acquire(shard, &node("b"), 0).await.unwrap() {
                return held;
            }
            tokio::time::sleep(TTL / 10).await;
        }
    })
    .await
    .expect("the silent lease expires");
    assert!(
        held_b.token > held_a.token,
        "a later holder has a higher token"
    );
    assert!(
        !a.renew(&mut held_a, &node("a")).await.unwrap(),
        "a learns it lost"
    );

    // The new owner raises the thread's fence before it reads; the old owner's
    // writes are refused from then on.
    let store = InMemoryStore::default();
    let thread = ThreadId::new("t-fenced").unwrap();
    store.fence(&thread, held_b.token).await.unwrap();
    assert!(matches!(
        store.fence(&thread, held_a.token).await,
        Err(StorageError::Fenced { .. })
    ));

    // Releasing a lost lease leaves the new holder's alone.
    a.release(held_a).await.unwrap();
    assert_eq!(b.holders().await.unwrap()[&shard].node_id, node("b"));
    b.release(held_b).await.unwrap();
    assert!(b.holders().await.unwrap().is_empty());
}

/// A renewal whose answer was lost may still have landed: the holder's next
/// renewal, one revision behind its own write, keeps the lease; a stale holder
/// whose lease someone else took still learns it lost.
#[tokio::test]
async fn a_renewal_that_landed_unanswered_does_not_lose_the_lease() {
    let server = NatsServer::start().await.unwrap();
    let (a, b) = (table(&server).await, table(&server).await);
    let shard = ShardId(3);
    let mut held = a.acquire(shard, &node("a"), 0).await.unwrap().unwrap();
    let mut unanswered = held.clone();
    assert!(a.renew(&mut unanswered, &node("a")).await.unwrap());

    assert!(
        a.renew(&mut held, &node("a")).await.unwrap(),
        "the lease is still a's"
    );
    let holders = b.holders().await.unwrap();
    assert_eq!(holders[&shard].node_id, node("a"));
    assert_eq!(holders[&shard].token, held.token);
    assert!(
        a.renew(&mut held, &node("a")).await.unwrap(),
        "renewed from the revision it took"
    );

    // Another node with a's id but a newer token (a's lease expired and a
    // restarted a took it again) is not the stale holder's lease.
    let retaken = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(held) = a.acquire(shard, &node("a"), 0).await.unwrap() {
                return held;
            }
            tokio::time::sleep(TTL / 10).await;
        }
    })
    .await
    .expect("the silent lease expires");
    assert!(retaken.token > held.token);
    assert!(
        !a.renew(&mut held, &node("a")).await.unwrap(),
        "an expired tenure stays lost"
    );
}

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(&'static str, ShardId)>>,
}

impl Recorder {
    fn of(&self, kind: &str) -> BTreeSet<ShardId> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, s)| *s)
            .collect()
    }
}

#[async_trait]
impl ShardEvent for Recorder {
    async fn acquired(&self, shard: ShardId, _token: FencingToken) {
        self.events.lock().unwrap().push(("acquired", shard));
    }
    async fn draining(&self, shards: &[ShardId]) {
        let mut events = self.events.lock().unwrap();
        events.extend(shards.iter().map(|shard| ("draining", *shard)));
    }
    async fn lost(&self, shard: ShardId) {
        self.events.lock().unwrap().push(("lost", shard));
    }
}

struct Node {
    owner: ShardOwner,
    events: Arc<Recorder>,
}

async fn start_node(
    server: &NatsServer,
    id: &str,
    members: &watch::Sender<BTreeSet<NodeId>>,
    count: u32,
) -> Node {
    let events = Arc::new(Recorder::default());
    let config = ShardOwnerConfig {
        count: ShardCount::new(count).unwrap(),
        lease_ttl: TTL,
    };
    let mut owner = ShardOwner::new(node(id), config, table(server).await);
    owner.start(
        members.subscribe(),
        Arc::clone(&events) as Arc<dyn ShardEvent>,
    );
    Node { owner, events }
}

fn total(nodes: &[&Node]) -> usize {
    nodes
        .iter()
        .map(|n| n.owner.ownership().borrow().len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_spread_fairly_and_move_on_leave() {
    let server = NatsServer::start().await.unwrap();
    let members = watch::Sender::new(BTreeSet::from([node("a"), node("b"), node("c")]));
    let a = start_node(&server, "a", &members, 32).await;
    let b = start_node(&server, "b", &members, 32).await;
    let c = start_node(&server, "c", &members, 32).await;

    // Quotas for 32 shards over a, b, c: 11, 11, 10.
    for (n, share) in [(&a, 11), (&b, 11), (&c, 10)] {
        until(&mut n.owner.ownership(), Duration::from_secs(10), |o| {
            o.len() == share
        })
        .await;
    }
    assert_eq!(total(&[&a, &b, &c]), 32);
    let owned_by_c: BTreeSet<ShardId> = c.owner.ownership().borrow().keys().copied().collect();

    // c leaves gracefully: it drains every shard before releasing it, and a and b
    // split the cluster between them.
    members.send_replace(BTreeSet::from([node("a"), node("b")]));
    let c_events = Arc::clone(&c.events);
    c.owner.drain(Duration::from_secs(5)).await.unwrap();
    assert!(owned_by_c.is_subset(&c_events.of("draining")));
    for n in [&a, &b] {
        until(&mut n.owner.ownership(), Duration::from_secs(10), |o| {
            o.len() == 16
        })
        .await;
    }
    let fence = a.owner.fence();
    let thread = (0..)
        .map(|i| ThreadId::new(format!("t-{i}")).unwrap())
        .find(|t| fence.owns(t))
        .unwrap();
    let shard = ShardCount::new(32).unwrap().shard_of(&thread);
    assert_eq!(fence.token(&thread), a.owner.ownership().borrow()[&shard]);
    assert!(a.events.of("lost").is_empty() && b.events.of("lost").is_empty());
}

#[tokio::test]
async fn a_lease_taken_away_is_reported_lost() {
    let server = NatsServer::start().await.unwrap();
    let members = watch::Sender::new(BTreeSet::from([node("a")]));
    let a = start_node(&server, "a", &members, 4).await;
    let mut ownership = a.owner.ownership();
    until(&mut ownership, Duration::from_secs(10), |o| o.len() == 4).await;

    // Another writer replaces shard 2's lease, as a new owner would after expiry.
    let kv = jetstream::new(server.connect().await.unwrap())
        .get_key_value(DEFAULT_SHARDS_BUCKET)
        .await
        .unwrap();
    let thief = ShardLease {
        node_id: node("z"),
        token: 0,
        acquired_at_ms: 0,
    };
    kv.put("shard.2", codec::encode(&thief).unwrap())
        .await
        .unwrap();
    until(&mut ownership, Duration::from_secs(10), |o| {
        !o.contains_key(&ShardId(2))
    })
    .await;
    assert_eq!(a.events.of("lost"), BTreeSet::from([ShardId(2)]));
    let fence = a.owner.fence();
    let lost_thread = (0..)
        .map(|i| ThreadId::new(format!("t-{i}")).unwrap())
        .find(|t| ShardCount::new(4).unwrap().shard_of(t) == ShardId(2))
        .unwrap();
    assert_eq!(fence.token(&lost_thread), FencingToken::default());
    a.owner.drain(Duration::from_secs(5)).await.unwrap();
}

/// A node that loses a shard keeps no memory of its threads: the warm core goes,
/// and the next owner's token fences any write the old node might still attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_shard_leaves_no_thread_behind_in_the_runtime() {
    use awaken_actors::AgentId;
    use awaken_actors::contract::AgentEvent;
    use awaken_actors::contract::{AgentSpec, Message, ModelSpec, TerminationReason};
    use awaken_actors::event_sink::EventSink;
    use awaken_actors::llm::{ScriptSpec, ScriptStep, ScriptedExecutor};
    use awaken_actors::runtime::AgentRuntimeBuilder;
    use awaken_actors::thread::RunRequest;

    struct Ignore;
    #[async_trait]
    impl EventSink for Ignore {
        async fn emit(&self, _event: AgentEvent) {}
    }
    use awaken_cluster::shards::RuntimeShards;

    let server = NatsServer::start().await.unwrap();
    let count = ShardCount::new(4).unwrap();
    let config = ShardOwnerConfig {
        count,
        lease_ttl: TTL,
    };
    let mut owner = ShardOwner::new(node("a"), config, table(&server).await);
    let store = Arc::new(InMemoryStore::default());
    let runtime = AgentRuntimeBuilder::new()
        .with_thread_run_store(store.clone())
        .with_fence_source(Arc::new(owner.fence()))
        .with_model(
            "scripted",
            ModelSpec::new("scripted", "scripted", "scripted"),
        )
        .with_provider(
            "scripted",
            Arc::new(ScriptedExecutor::new(ScriptSpec::new(vec![ScriptStep::text("hi")])).unwrap()),
        )
        .with_agent_spec(AgentSpec::new(AgentId::new("a").unwrap()).with_model("scripted"))
        .build()
        .unwrap();
    let members = watch::Sender::new(BTreeSet::from([node("a")]));
    owner.start(
        members.subscribe(),
        Arc::new(RuntimeShards::new(
            runtime.clone(),
            count,
            Default::default(),
        )),
    );
    let mut ownership = owner.ownership();
    let owned = until(&mut ownership, Duration::from_secs(10), |o| o.len() == 4).await;

    let thread = ThreadId::new("t-resident").unwrap();
    let shard = count.shard_of(&thread);
    let request = RunRequest::new(thread.clone(), vec![Message::user("hello")])
        .with_agent_id(AgentId::new("a").unwrap());
    let result = runtime.run(request, Arc::new(Ignore)).await.unwrap();
    assert_eq!(result.termination, TerminationReason::NaturalEnd);
    runtime.thread_stopped(&thread).await;
    assert!(runtime.is_thread_warm(&thread));
    let snapshot = store.load_thread_snapshot(&thread).await.unwrap().unwrap();
    assert_eq!(
        snapshot.fence, owned[&shard],
        "checkpoints carry the lease token"
    );

    let kv = jetstream::new(server.connect().await.unwrap())
        .get_key_value(DEFAULT_SHARDS_BUCKET)
        .await
        .unwrap();
    let thief = ShardLease {
        node_id: node("z"),
        token: 0,
        acquired_at_ms: 0,
    };
    kv.put(format!("shard.{shard}"), codec::encode(&thief).unwrap())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), runtime.thread_passivated(&thread))
        .await
        .expect("the lost shard's thread is evicted");
    assert!(!runtime.is_thread_warm(&thread));
    owner.drain(Duration::from_secs(5)).await.unwrap();
}

/// A departed node's shards are taken as its leases expire, not at the survivor's
/// next renewal tick (up to a third of a TTL later): a failover takes one TTL.
#[tokio::test]
async fn a_departed_nodes_shards_are_taken_as_its_leases_expire() {
    let server = NatsServer::start().await.unwrap();
    let ttl = Duration::from_secs(6);
    let tick = ttl / 3;
    let js = jetstream::new(server.connect().await.unwrap());
    let count = ShardCount::new(4).unwrap();
    let leases = LeaseTable::open(&js, DEFAULT_SHARDS_BUCKET, ttl, 1)
        .await
        .unwrap();
    for shard in count.all() {
        assert!(
            leases
                .acquire(shard, &node("gone"), 0)
                .await
                .unwrap()
                .is_some()
        );
    }
    let expiry = leases
        .holders()
        .await
        .unwrap()
        .values()
        .map(|holder| holder.expires_at)
        .max()
        .unwrap();
    // Starting half a tick later puts the expiry halfway between two of the
    // owner's ticks, where waiting for a tick would cost half a tick.
    tokio::time::sleep(tick / 2).await;
    let members = watch::Sender::new(BTreeSet::from([node("a")]));
    let mut owner = ShardOwner::new(
        node("a"),
        ShardOwnerConfig {
            count,
            lease_ttl: ttl,
        },
        LeaseTable::open(&js, DEFAULT_SHARDS_BUCKET, ttl, 1)
            .await
            .unwrap(),
    );
    owner.start(members.subscribe(), Arc::new(Recorder::default()));
    until(&mut owner.ownership(), 2 * ttl, |o| o.len() == 4).await;
    let late = std::time::SystemTime::now()
        .duration_since(expiry)
        .unwrap_or_default();
    assert!(
        late < tick / 4,
        "the shards were taken {late:?} after the leases expired"
    );
    owner.drain(Duration::from_secs(5)).await.unwrap();
}

/// Runs that never finish on the shards being handed off.
struct Busy {
    asked: tokio::sync::Notify,
}

#[async_trait]
impl ShardEvent for Busy {
    async fn acquired(&self, _shard: ShardId, _token: FencingToken) {}
    async fn draining(&self, _shards: &[ShardId]) {}
    async fn lost(&self, _shard: ShardId) {}
    async fn handing_off(&self, _shards: &[ShardId]) {
        self.asked.notify_one();
        std::future::pending::<()>().await;
    }
}

#[tokio::test]
async fn a_node_stopping_while_it_hands_shards_off_does_not_wait_for_the_runs() {
    let server = NatsServer::start().await.unwrap();
    // Long leases: the hand-off would wait two of them (20 s) for the runs.
    let ttl = Duration::from_secs(10);
    let js = jetstream::new(server.connect().await.unwrap());
    let table = LeaseTable::open(&js, DEFAULT_SHARDS_BUCKET, ttl, 1)
        .await
        .unwrap();
    let members = watch::Sender::new(BTreeSet::from([node("a")]));
    let config = ShardOwnerConfig {
        count: ShardCount::new(8).unwrap(),
        lease_ttl: ttl,
    };
    let mut owner = ShardOwner::new(node("a"), config, table);
    let busy = Arc::new(Busy {
        asked: tokio::sync::Notify::new(),
    });
    owner.start(
        members.subscribe(),
        Arc::clone(&busy) as Arc<dyn ShardEvent>,
    );
    until(&mut owner.ownership(), Duration::from_secs(10), |o| {
        o.len() == 8
    })
    .await;

    // A node joins: a hands half its shards off, waiting for their runs.
    members.send_replace(BTreeSet::from([node("a"), node("b")]));
    tokio::time::timeout(Duration::from_secs(10), busy.asked.notified())
        .await
        .expect("the hand-off starts");

    // Stopping now ends the wait: the drain is done well before the hand-off's
    // own limit.
    tokio::time::timeout(Duration::from_secs(5), owner.drain(Duration::from_secs(5)))
        .await
        .expect("the drain does not wait for the hand-off")
        .unwrap();
}
