//! Thread calls and run events across nodes on a real nats-server: a node that
//! does not own a thread reaches it through `awaken.shard.<n>.call` (status,
//! cancel, interrupt, forwarded decisions) and follows its runs' events
//! (`awaken.events.<run_id>` plus the owner's replay buffer).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use awaken_actors::contract::{
    AgentEvent, Message, ResumeDecisionAction, RunStatus, StreamEvent, TerminationReason,
    ToolCallOutcome, ToolCallResume,
};
use awaken_actors::mailbox::SubmitOptions;
use awaken_actors::store::FencingToken;
use awaken_actors::thread::{ControlError, EventHub, RunRequest};
use awaken_actors::{AgentId, DecisionId, RunId, ThreadId, ToolCallId};
use awaken_cluster::codec;
use awaken_cluster::decisions::{Decision, DecisionTarget, Delivery, RoutedDecisions};
use awaken_cluster::events::{
    ClusterEventHub, EventsConfig, decode_events, event_subject, follow_run,
};
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use awaken_cluster::routing::{
    CallFrame, CallOutcome, RouteError, RouterConfig, ShardServer, ThreadCall, ThreadHost,
    ThreadRouter, call_subject,
};
use awaken_cluster::shards::{
    LeaseTable, Ownership, ShardCount, ShardEvent, ShardId, ShardOwner, ShardOwnerConfig,
};
use awaken_cluster::testing::NatsServer;
use futures::StreamExt;
use serde_json::json;
use support::{CountingEcho, approver_builder};

/// One node owning every shard, and a second connection that owns none: all its
/// calls travel over NATS.
struct Fixture {
    server: NatsServer,
    node: ClusterNode,
    echo: Arc<CountingEcho>,
    remote: async_nats::Client,
    router: ThreadRouter,
}

async fn fixture() -> Fixture {
    let server = NatsServer::start().await.unwrap();
    let echo = Arc::new(CountingEcho::default());
    let node = ClusterNode::start(
        server.connect().await.unwrap(),
        approver_builder(Arc::clone(&echo)),
        NodeConfig::new(NodeId::new("owner").unwrap()),
    )
    .await
    .unwrap();
    let shards = NodeConfig::new(NodeId::new("owner").unwrap()).shards.count;
    node.ownership()
        .wait_for(|owned| owned.len() == shards.get() as usize)
        .await
        .unwrap();
    let remote = server.connect().await.unwrap();
    let router = ThreadRouter::new(remote.clone(), shards, None, RouterConfig::default());
    Fixture {
        server,
        node,
        echo,
        remote,
        router,
    }
}

fn thread(name: &str) -> ThreadId {
    ThreadId::new(name).unwrap()
}

impl Fixture {
    /// A second node's call server still subscribed to every shard although it
    /// owns none: what a node that just lost its leases looks like until it
    /// notices. Returns once it is seen declining a call.
    async fn stale_server(&self) -> (ShardServer, tokio::sync::watch::Sender<Ownership>) {
        let client = self.server.connect().await.unwrap();
        let table = LeaseTable::open(
            &async_nats::jetstream::new(client.clone()),
            "stale-leases",
            Duration::from_secs(5),
            1,
        )
        .await
        .unwrap();
        let config = ShardOwnerConfig::default();
        let count = config.count;
        let owner = ShardOwner::new(NodeId::new("stale").unwrap(), config, table);
        let host = ThreadHost::new(
            self.node.runtime().clone(),
            owner.fence(),
            Arc::clone(self.node.event_buffers()),
        );
        let every_shard = count.all().map(|shard| (shard, Default::default()));
        let (held, subscribed) = tokio::sync::watch::channel(every_shard.collect::<Ownership>());
        let server = ShardServer::start(client, host, subscribed, Duration::from_secs(1));
        let status = codec::encode(&ThreadCall::Status {
            thread_id: thread("probe"),
        })
        .unwrap();
        let subject = call_subject(count.shard_of(&thread("probe")));
        for _ in 0..1_000 {
            let reply = self
                .remote
                .request(subject.clone(), status.clone())
                .await
                .unwrap();
            let frame: CallFrame = codec::decode(&reply.payload).unwrap();
            if frame
                == (CallFrame::Done {
                    outcome: CallOutcome::NotOwner,
                })
            {
                return (server, held);
            }
        }
        panic!("the stale server never answered");
    }

    /// Submits a run on `thread` and follows it from the remote connection until it
    /// waits for approval; returns the run, its events and the suspended call.
    async fn waiting_run(&self, thread: &ThreadId) -> (RunId, Vec<StreamEvent>, ToolCallId) {
        let run_id = RunId::generate();
        let request = RunRequest::new(thread.clone(), vec![Message::user("go")])
            .with_agent_id(AgentId::new("approver").unwrap())
            .with_run_id(run_id.clone());
        let mut follow = follow_run(
            &self.remote,
            &self.router,
            self.node.runtime().store(),
            thread,
            &run_id,
            None,
        )
        .await
        .unwrap();
        self.node
            .submit(request, SubmitOptions::default())
            .await
            .unwrap();
        let events = drain(&mut follow).await;
        let call = events
            .iter()
            .find_map(|event| match &event.event {
                AgentEvent::ToolCallDone {
                    id,
                    outcome: ToolCallOutcome::Suspended,
                    ..
                } => Some(id.clone()),
                _ => None,
            })
            .expect("the run suspended");
        (run_id, events, call)
    }
}

async fn drain(follow: &mut awaken_cluster::events::RunFollow) -> Vec<StreamEvent> {
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(10), follow.next())
        .await
        .expect("the run's events keep coming")
    {
        events.push(StreamEvent::clone(&event));
    }
    events
}

fn seqs(events: &[StreamEvent]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

fn termination(events: &[StreamEvent]) -> TerminationReason {
    match &events.last().expect("events").event {
        AgentEvent::RunFinish { termination, .. } => termination.clone(),
        other => panic!("the stream ended with {other:?}"),
    }
}

fn decision(thread: &ThreadId, call: &ToolCallId, decision_id: &str) -> Decision {
    Decision {
        thread_id: thread.clone(),
        call_id: call.clone(),
        run_id: None,
        resume: ToolCallResume {
            decision_id: DecisionId::new(decision_id).unwrap(),
            action: ResumeDecisionAction::Resume,
            result: json!({"approved": true}),
            reason: None,
            updated_at: 0,
            trace: None,
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_node_follows_a_run_from_its_first_event_and_from_a_last_event_id() {
    let f = fixture().await;
    let thread = thread("follow");
    let (run_id, events, _) = f.waiting_run(&thread).await;
    assert_eq!(seqs(&events), (0..events.len() as u64).collect::<Vec<_>>());
    assert_eq!(termination(&events), TerminationReason::Suspended);

    // A reconnect with Last-Event-ID gets exactly what came after it, from the
    // owner's buffer (the activation has ended: nothing is live any more).
    let mut again = follow_run(
        &f.remote,
        &f.router,
        f.node.runtime().store(),
        &thread,
        &run_id,
        Some(2),
    )
    .await
    .unwrap();
    assert!(again.complete());
    let tail = drain(&mut again).await;
    assert_eq!(seqs(&tail), seqs(&events)[3..].to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_taken_by_another_node_is_forwarded_to_the_owner_once() {
    let f = fixture().await;
    let thread = thread("forwarded");
    let (run_id, events, call) = f.waiting_run(&thread).await;
    let forward = RoutedDecisions::new(f.router.clone());

    let unknown = forward
        .deliver(decision(
            &thread,
            &ToolCallId::new("no-such-call").unwrap(),
            "d0",
        ))
        .await;
    assert!(matches!(unknown, Delivery::Refused(_)), "{unknown:?}");
    assert_eq!(f.echo.0.load(Ordering::SeqCst), 0);

    // Follow the resumed activation, then decide from the remote side: the answer
    // comes once the resumed run has stopped.
    let last = events.last().map(|e| e.seq);
    let mut resumed = follow_run(
        &f.remote,
        &f.router,
        f.node.runtime().store(),
        &thread,
        &run_id,
        last,
    )
    .await
    .unwrap();
    let applied = forward.deliver(decision(&thread, &call, "d1")).await;
    assert_eq!(applied, Delivery::Applied { duplicate: false });
    let status = f.router.thread_status(&thread).await.unwrap();
    assert!(status.run.is_none(), "the run had finished: {status:?}");
    let rest = drain(&mut resumed).await;
    assert_eq!(rest.first().map(|e| e.seq), last.map(|s| s + 1));
    assert_eq!(termination(&rest), TerminationReason::NaturalEnd);

    // Once the run is over, a repeat is recognised from the run's record: a
    // duplicate, and nothing changes.
    let again = forward.deliver(decision(&thread, &call, "d1")).await;
    assert_eq!(again, Delivery::Applied { duplicate: true });
    assert_eq!(f.echo.0.load(Ordering::SeqCst), 1, "the tool ran once");
    let record = f
        .node
        .runtime()
        .store()
        .load_run(&run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RunStatus::Done);
}

/// While a lease changes hands the node that lost it can still be subscribed to
/// the shard's calls and decline them: a decision sent then is applied once and
/// answered as applied, not as a duplicate of itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_also_reaches_a_node_that_lost_the_shard_is_applied_once() {
    let f = fixture().await;
    let _stale = f.stale_server().await;
    for n in 0..8 {
        let thread = thread(&format!("handover-{n}"));
        let (_, _, call) = f.waiting_run(&thread).await;
        let answer = f
            .router
            .call(ThreadCall::Decide {
                decision: decision(&thread, &call, "d1"),
            })
            .await
            .unwrap();
        assert_eq!(
            answer.outcome,
            CallOutcome::Delivered(Delivery::Applied { duplicate: false }),
            "decision {n}"
        );
    }
    assert_eq!(f.echo.0.load(Ordering::SeqCst), 8, "each tool ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_interrupt_reach_the_owner_and_refuse_what_does_not_fit() {
    let f = fixture().await;
    let thread = thread("cancelled");
    let (run_id, events, _) = f.waiting_run(&thread).await;
    let mut ending = follow_run(
        &f.remote,
        &f.router,
        f.node.runtime().store(),
        &thread,
        &run_id,
        events.last().map(|e| e.seq),
    )
    .await
    .unwrap();

    let status = f.router.thread_status(&thread).await.unwrap();
    assert_eq!(status.run.map(|run| run.run_id), Some(run_id.clone()));

    let wrong = RunId::new("not-this-run").unwrap();
    let refused = f.router.cancel(&thread, Some(wrong.clone())).await;
    assert_eq!(
        refused,
        Err(RouteError::Refused(ControlError::RunNotActive {
            run_id: wrong
        }))
    );
    assert_eq!(
        f.router.cancel(&thread, Some(run_id.clone())).await,
        Ok(run_id.clone())
    );
    assert_eq!(
        termination(&drain(&mut ending).await),
        TerminationReason::Cancelled
    );
    let status = f.router.thread_status(&thread).await.unwrap();
    assert!(status.run.is_none(), "{status:?}");

    assert_eq!(
        f.router.interrupt(&thread).await,
        Ok(None),
        "nothing left to interrupt"
    );
    let nothing = f.router.cancel(&thread, None).await;
    assert!(
        matches!(
            nothing,
            Err(RouteError::Refused(ControlError::NoActiveRun { .. }))
        ),
        "{nothing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_an_unknown_run_says_it_is_incomplete() {
    let f = fixture().await;
    let answer = f
        .router
        .call(ThreadCall::Replay {
            thread_id: thread("t"),
            run_id: RunId::new("never-ran").unwrap(),
            after_seq: None,
        })
        .await
        .unwrap();
    assert!(answer.events.is_empty());
    assert_eq!(answer.outcome, CallOutcome::Replayed { complete: false });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_call_is_answered_as_such_and_changes_nothing() {
    let f = fixture().await;
    let shards = ShardCount::new(256).unwrap();
    let subject = call_subject(shards.shard_of(&thread("t")));
    let reply = f
        .remote
        .request(subject, bytes::Bytes::from_static(b"\xc1 not msgpack"))
        .await
        .unwrap();
    let frame: CallFrame = codec::decode(&reply.payload).unwrap();
    assert!(
        matches!(
            frame,
            CallFrame::Done {
                outcome: CallOutcome::Malformed(_)
            }
        ),
        "{frame:?}"
    );
    assert_eq!(f.node.runtime().live_threads(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_for_a_thread_nobody_owns_gives_up_after_the_owner_wait() {
    let server = NatsServer::start().await.unwrap();
    let client = server.connect().await.unwrap();
    let router = ThreadRouter::new(
        client.clone(),
        ShardCount::new(16).unwrap(),
        None,
        RouterConfig {
            owner_wait: Duration::from_millis(300),
            ..RouterConfig::default()
        },
    );
    let error = router.thread_status(&thread("orphan")).await.unwrap_err();
    assert!(
        matches!(&error, RouteError::NoOwner { thread_id, waited }
            if thread_id.as_str() == "orphan" && *waited >= Duration::from_millis(300)),
        "{error:?}"
    );
}

/// A shard owner's events, not needed here.
struct Unheeded;

#[async_trait::async_trait]
impl ShardEvent for Unheeded {
    async fn acquired(&self, _shard: ShardId, _token: FencingToken) {}
    async fn draining(&self, _shards: &[ShardId]) {}
    async fn lost(&self, _shard: ShardId) {}
}

/// Events a thread emits together reach a subscriber of the run's subject as one
/// message, an array of them in the order emitted (decision 0077). The test runs
/// on one thread, so the publishing task finds all of a burst queued.
#[tokio::test]
async fn events_emitted_together_go_out_as_one_message_in_order() {
    let server = NatsServer::start().await.unwrap();
    let client = server.connect().await.unwrap();
    let (owner, _members) = owning_every_shard(&client).await;
    let hub = ClusterEventHub::start(
        client.clone(),
        &EventsConfig::default(),
        owner.fence(),
        std::sync::Arc::default(),
    );
    let (thread, run_id) = (thread("bursts"), RunId::generate());
    let mut published = client.subscribe(event_subject(&run_id)).await.unwrap();
    client.flush().await.unwrap();
    let emit = |seq: u64| {
        let event = StreamEvent::new(seq, "2026-11-28T00:00:00.000Z", AgentEvent::StepEnd);
        hub.publish(&thread, &run_id, &Arc::new(event), None);
    };

    (0..5).for_each(emit);
    let burst = published.next().await.unwrap();
    assert_eq!(
        seqs(&decode_events(&burst.payload).unwrap()),
        [0, 1, 2, 3, 4]
    );
    emit(5);
    let alone = published.next().await.unwrap();
    assert_eq!(seqs(&decode_events(&alone.payload).unwrap()), [5]);
}

/// A shard owner (on `client`'s server) holding every shard, and the member
/// set it watches (dropping it would stop the owner).
async fn owning_every_shard(
    client: &async_nats::Client,
) -> (ShardOwner, tokio::sync::watch::Sender<BTreeSet<NodeId>>) {
    let table = LeaseTable::open(
        &async_nats::jetstream::new(client.clone()),
        "event-leases",
        Duration::from_secs(5),
        1,
    )
    .await
    .unwrap();
    let config = ShardOwnerConfig::default();
    let shards = config.count.get() as usize;
    let node = NodeId::new("publisher").unwrap();
    let mut owner = ShardOwner::new(node.clone(), config, table);
    let members = tokio::sync::watch::Sender::new(BTreeSet::from([node]));
    owner.start(members.subscribe(), Arc::new(Unheeded));
    owner
        .ownership()
        .wait_for(|owned| owned.len() == shards)
        .await
        .unwrap();
    (owner, members)
}

/// Events waiting for a connection that does not take them are bounded by
/// bytes as well as by count: past `publish_queue_bytes` they are dropped (and
/// counted), not kept, while the count limit alone would keep them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_a_stalled_connection_does_not_take_are_bounded_by_bytes() {
    let leases = NatsServer::start().await.unwrap();
    let (owner, _members) = owning_every_shard(&leases.connect().await.unwrap()).await;
    // The hub publishes through a server of its own, which then goes away:
    // the client stops taking messages, so the hub's queue fills.
    let mut events_server = NatsServer::start().await.unwrap();
    let events_client = events_server.connect().await.unwrap();
    events_server.kill().await;
    const EVENTS: u64 = 20_000;
    let config = EventsConfig {
        publish_queue: 2 * EVENTS as usize,
        publish_queue_bytes: 64 * 1024,
        ..EventsConfig::default()
    };
    let hub = ClusterEventHub::start(events_client, &config, owner.fence(), Arc::default());
    let (thread, run_id) = (thread("stalled"), RunId::generate());
    for seq in 0..EVENTS {
        let event = StreamEvent::new(seq, "2026-12-03T00:00:00.000Z", AgentEvent::StepEnd);
        hub.publish(&thread, &run_id, &Arc::new(event), None);
    }
    // The client buffers a few thousand messages and one batch is being handed
    // to it; 64 KiB holds a few hundred of these events. Everything else goes.
    assert!(
        hub.dropped() >= EVENTS / 2,
        "{} of {EVENTS} dropped",
        hub.dropped()
    );
}

/// A call that only reads is asked again when its answer is lost: a status
/// asked while the server is down (longer than three heartbeats, so the first
/// try is given up on) is answered once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_asked_while_the_server_restarts_is_answered_once_it_is_back() {
    let mut f = fixture().await;
    let thread = thread("status-through-a-restart");
    f.server.kill().await;
    let asked = {
        let router = f.router.clone();
        tokio::spawn(async move { router.thread_status(&thread).await })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    f.server.restart().await.unwrap();
    let status = asked.await.unwrap();
    assert!(status.is_ok(), "{status:?}");
}
