//! A follow over NATS gets what its subscription lost: run events go out at most
//! once, so a message lost in a server restart or a reconnect is asked for again
//! (on a gap in `seq`, or once the run is quiet) from the owner's replay buffer,
//! or, when the owner no longer buffers the run, from the run's stored record.
//!
//! Losing a message is played by putting events in the owner's buffer without
//! publishing them: what a follower sees when the message went out while it was
//! disconnected.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;
use std::time::Duration;

use awaken_actors::contract::{
    AgentEvent, Message, ResumeDecisionAction, StreamEvent, TerminationReason, ToolCallOutcome,
    ToolCallResume,
};
use awaken_actors::mailbox::SubmitOptions;
use awaken_actors::thread::RunRequest;
use awaken_actors::{AgentId, DecisionId, RunId, ThreadId, ToolCallId};
use awaken_cluster::codec;
use awaken_cluster::decisions::{Decision, DecisionTarget, Delivery, RoutedDecisions};
use awaken_cluster::events::{RunFollow, event_subject, follow_run};
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use awaken_cluster::routing::{RouterConfig, ThreadRouter};
use awaken_cluster::testing::{CLUSTER_SIZE, NatsCluster, NatsServer};
use serde_json::json;
use support::{CountingEcho, approver_builder};

/// Longer than the quiet spell after which a follow asks its owner (3 s).
const WELL_PAST_A_PROBE: Duration = Duration::from_secs(10);

/// One node owning every shard (its buffers keep a single ended run), and a
/// second connection that owns none, following over NATS.
struct Fixture {
    /// Kept: the server lives as long as the fixture.
    _server: NatsServer,
    node: ClusterNode,
    remote: async_nats::Client,
    router: ThreadRouter,
}

async fn fixture() -> Fixture {
    let server = NatsServer::start().await.unwrap();
    let mut config = NodeConfig::new(NodeId::new("owner").unwrap());
    config.events.retained_runs = 1;
    let shards = config.shards.count;
    let node = ClusterNode::start(
        server.connect().await.unwrap(),
        approver_builder(Arc::new(CountingEcho::default())),
        config,
    )
    .await
    .unwrap();
    node.ownership()
        .wait_for(|owned| owned.len() == shards.get() as usize)
        .await
        .unwrap();
    let remote = server.connect().await.unwrap();
    let router = ThreadRouter::new(remote.clone(), shards, None, RouterConfig::default());
    Fixture {
        _server: server,
        node,
        remote,
        router,
    }
}

impl Fixture {
    async fn follow(&self, thread: &ThreadId, run: &RunId, after: Option<u64>) -> RunFollow {
        follow_run(
            &self.remote,
            &self.router,
            self.node.runtime().store(),
            thread,
            run,
            after,
        )
        .await
        .unwrap()
    }

    /// Puts `seq` in the owner's buffer only: its message never reached anyone.
    fn lose(&self, run: &RunId, seq: u64, event: AgentEvent) {
        self.node
            .event_buffers()
            .push(run, Arc::new(stamped(seq, event)));
    }

    /// Puts `seq` in the owner's buffer and on the run's subject.
    async fn deliver(&self, run: &RunId, seq: u64, event: AgentEvent) {
        let event = stamped(seq, event);
        self.node.event_buffers().push(run, Arc::new(event.clone()));
        let payload = codec::encode(&vec![event]).unwrap();
        self.remote
            .publish(event_subject(run), payload)
            .await
            .unwrap();
    }

    /// A run of the approver agent on `thread`, followed until it waits: its
    /// events and the suspended call.
    async fn waiting_run(&self, thread: &ThreadId) -> (RunId, Vec<StreamEvent>, ToolCallId) {
        let run_id = RunId::generate();
        let request = RunRequest::new(thread.clone(), vec![Message::user("go")])
            .with_agent_id(AgentId::new("approver").unwrap())
            .with_run_id(run_id.clone());
        let mut follow = self.follow(thread, &run_id, None).await;
        self.node
            .submit(request, SubmitOptions::default())
            .await
            .unwrap();
        let events = drain(&mut follow).await;
        let call = suspended_call(&events);
        (run_id, events, call)
    }
}

/// The call a run's events show suspended.
fn suspended_call(events: &[StreamEvent]) -> ToolCallId {
    events
        .iter()
        .find_map(|event| match &event.event {
            AgentEvent::ToolCallDone {
                id,
                outcome: ToolCallOutcome::Suspended,
                ..
            } => Some(id.clone()),
            _ => None,
        })
        .expect("the run suspended")
}

fn stamped(seq: u64, event: AgentEvent) -> StreamEvent {
    StreamEvent::new(seq, "2026-12-02T00:00:00.000Z", event)
}

fn finish(thread: &ThreadId, run: &RunId) -> AgentEvent {
    AgentEvent::RunFinish {
        thread_id: thread.clone(),
        run_id: run.clone(),
        result: Some(json!({"response": "done"})),
        termination: TerminationReason::NaturalEnd,
    }
}

fn approve() -> ToolCallResume {
    ToolCallResume {
        decision_id: DecisionId::new("approve").unwrap(),
        action: ResumeDecisionAction::Resume,
        result: json!({"approved": true}),
        reason: None,
        updated_at: 0,
        trace: None,
    }
}

fn thread(name: &str) -> ThreadId {
    ThreadId::new(name).unwrap()
}

/// Every event until the follow ends; fails if it stalls.
async fn drain(follow: &mut RunFollow) -> Vec<StreamEvent> {
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(WELL_PAST_A_PROBE, follow.next())
        .await
        .expect("the follow ends")
    {
        events.push(StreamEvent::clone(&event));
    }
    events
}

fn seqs(events: &[StreamEvent]) -> Vec<u64> {
    events.iter().map(|event| event.seq).collect()
}

/// The event as a client sees it, without its timestamp.
fn body(event: &StreamEvent) -> (u64, serde_json::Value) {
    (event.seq, serde_json::to_value(&event.event).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_in_seq_is_filled_from_the_owners_buffer_in_order() {
    let f = fixture().await;
    let (thread, run) = (thread("gap"), RunId::generate());
    let mut follow = f.follow(&thread, &run, None).await;
    f.deliver(&run, 0, AgentEvent::StepEnd).await;
    f.lose(&run, 1, AgentEvent::StepEnd);
    f.lose(&run, 2, AgentEvent::StepEnd);
    f.deliver(&run, 3, finish(&thread, &run)).await;

    let events = drain(&mut follow).await;
    assert_eq!(seqs(&events), [0, 1, 2, 3]);
    assert_eq!(events[3].event, finish(&thread, &run));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_run_finish_ends_the_follow_once_the_run_is_quiet() {
    let f = fixture().await;
    let (thread, run) = (thread("quiet"), RunId::generate());
    let mut follow = f.follow(&thread, &run, None).await;
    f.deliver(&run, 0, AgentEvent::StepEnd).await;
    f.lose(&run, 1, finish(&thread, &run));

    let events = drain(&mut follow).await;
    assert_eq!(seqs(&events), [0, 1]);
    assert_eq!(events[1].event, finish(&thread, &run));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_run_still_at_work_is_waited_for() {
    let f = fixture().await;
    let (thread, run) = (thread("busy"), RunId::generate());
    let mut follow = f.follow(&thread, &run, None).await;
    f.deliver(&run, 0, AgentEvent::StepEnd).await;
    assert_eq!(follow.next().await.map(|event| event.seq), Some(0));

    // Past several probes the owner still knows the run and has nothing newer:
    // the follow keeps waiting, and takes the next event when it comes.
    let waited = tokio::time::timeout(Duration::from_secs(7), follow.next()).await;
    assert!(
        waited.is_err(),
        "the follow ended or made up an event: {waited:?}"
    );
    f.deliver(&run, 1, finish(&thread, &run)).await;
    assert_eq!(seqs(&drain(&mut follow).await), [1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_its_owner_no_longer_buffers_ends_as_its_record_says() {
    let f = fixture().await;
    let first = thread("evicted-a");
    let (run, events, call) = f.waiting_run(&first).await;
    let waited = events.last().unwrap().clone();
    // Another run ends: the owner keeps one ended run's buffer, no longer this one's.
    f.waiting_run(&thread("evicted-b")).await;

    // A follower that saw all but the `RunFinish` gets it, rebuilt from the
    // record: the same event a client would have seen.
    let mut follow = f.follow(&first, &run, Some(waited.seq - 1)).await;
    assert!(!follow.complete(), "the owner no longer buffers the run");
    let ended = drain(&mut follow).await;
    assert_eq!(ended.iter().map(body).collect::<Vec<_>>(), [body(&waited)]);

    // Decided, the run finishes; once another run ends its buffer is gone again,
    // and the finished run's end is read from the store with its response.
    let mut resumed = f.follow(&first, &run, Some(waited.seq)).await;
    let decided = RoutedDecisions::new(f.router.clone())
        .deliver(Decision {
            thread_id: first.clone(),
            call_id: call,
            run_id: None,
            resume: approve(),
        })
        .await;
    assert_eq!(decided, Delivery::Applied { duplicate: false });
    let finished = drain(&mut resumed).await;
    let real_finish = finished.last().unwrap().clone();
    assert!(matches!(
        &real_finish.event,
        AgentEvent::RunFinish {
            result: Some(_),
            termination: TerminationReason::NaturalEnd,
            ..
        }
    ));
    f.waiting_run(&thread("evicted-c")).await;

    let mut late = f.follow(&first, &run, Some(real_finish.seq - 1)).await;
    let ended = drain(&mut late).await;
    assert_eq!(
        ended.iter().map(body).collect::<Vec<_>>(),
        [body(&real_finish)]
    );

    // A follow of the finished run (replaying only, as the gateway follows a
    // run whose record says it is done) ends with that end too, not empty.
    let mut replayed = f.follow(&first, &run, None).await.replay_only();
    let ended = drain(&mut replayed).await;
    assert_eq!(
        ended.iter().map(|event| &event.event).collect::<Vec<_>>(),
        [&real_finish.event]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_no_record_yet_is_waited_for() {
    let f = fixture().await;
    let (thread, run) = (thread("queued"), RunId::generate());
    let mut follow = f.follow(&thread, &run, None).await;
    let waited = tokio::time::timeout(Duration::from_secs(7), follow.next()).await;
    assert!(waited.is_err(), "a run not started yet ended: {waited:?}");
}

/// Events published while a follower's server is down reach nobody: the
/// follower, back on its server, still ends with the run's own `RunFinish`.
/// The owner and the follower are on different servers of a three-server
/// cluster, each on its own alone, so the loss is certain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_server_was_down_ends_with_the_runs_finish() {
    let mut cluster = NatsCluster::start().await.unwrap();
    let mut config = NodeConfig::new(NodeId::new("owner").unwrap());
    config.replicas = CLUSTER_SIZE;
    let shards = config.shards.count;
    let node = ClusterNode::start(
        cluster.connect_to(0).await.unwrap(),
        approver_builder(Arc::new(CountingEcho::default())),
        config,
    )
    .await
    .unwrap();
    node.ownership()
        .wait_for(|owned| owned.len() == shards.get() as usize)
        .await
        .unwrap();
    let remote = cluster.connect_to(1).await.unwrap();
    let router = ThreadRouter::new(remote.clone(), shards, None, RouterConfig::default());
    let follow = |thread: ThreadId, run: RunId, after: Option<u64>| {
        let (remote, router, store) = (&remote, &router, node.runtime().store());
        async move {
            follow_run(remote, router, store, &thread, &run, after)
                .await
                .unwrap()
        }
    };

    let thread = thread("server-down");
    let run = RunId::generate();
    let mut waiting = follow(thread.clone(), run.clone(), None).await;
    node.submit(
        RunRequest::new(thread.clone(), vec![Message::user("go")])
            .with_agent_id(AgentId::new("approver").unwrap())
            .with_run_id(run.clone()),
        SubmitOptions::default(),
    )
    .await
    .unwrap();
    let events = drain(&mut waiting).await;
    let call = suspended_call(&events);
    let mut resumed = follow(thread.clone(), run, events.last().map(|e| e.seq)).await;

    cluster.kill(1).await;
    let decided = node
        .runtime()
        .decide_and_wait(&thread, call, approve(), None)
        .await
        .unwrap();
    assert_eq!(decided.termination, TerminationReason::NaturalEnd);
    cluster.restart(1).await.unwrap();

    let finished = drain(&mut resumed).await;
    assert_eq!(
        finished.first().map(|event| event.seq),
        events.last().map(|event| event.seq + 1),
        "the follow resumed where it was"
    );
    assert!(
        matches!(
            finished.last().map(|event| &event.event),
            Some(AgentEvent::RunFinish {
                termination: TerminationReason::NaturalEnd,
                ..
            })
        ),
        "{finished:?}"
    );
}
