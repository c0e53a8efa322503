//! Runs' input carried in the mailbox ledger with their dispatch (decision
//! 0078), on a real nats-server: every node reads it, a node started from a
//! snapshot too, and the KV inbox is never written; inputs too large for the
//! ledger, and those a node of the inbox placement accepted, still go through
//! the KV inbox and are found from either placement; by default a node carries
//! inputs in the ledger only while every member reads them there.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::sync::Arc;

use async_nats::jetstream;
use awaken_actors::clock::now_ms;
use awaken_actors::contract::{Message, RunDispatch};
use awaken_actors::ids::{RunId, ThreadId};
use awaken_actors::mailbox::conformance::rules_config;
use awaken_actors::mailbox::{MailboxError, MailboxStore, RunInbox, SubmitOptions, submit};
use awaken_actors::thread::RunRequest;
use awaken_cluster::inbox::DEFAULT_INBOX_BUCKET;
use awaken_cluster::ledger::{self, DEFAULT_LEDGER_NAME, LedgerOptions};
use awaken_cluster::membership::{
    MemberFeatures, MemberRecord, Membership, MembershipConfig, NodeId,
};
use awaken_cluster::run_input::{LEDGER_INPUT_LIMIT, RUN_INPUT_IN_LEDGER};
use awaken_cluster::testing::NatsServer;
use awaken_cluster::{ClusterRunInbox, KvRunInbox, LedgerMailbox, RunInputPlacement};

const LEASE: u64 = 30_000;

/// Snapshots every few batches, so a short test trims the stream.
const SNAPSHOT_OFTEN: LedgerOptions = LedgerOptions {
    replicas: 1,
    snapshot_interval: 4,
    answer_deadline: awaken_cluster::ledger::ANSWER_DEADLINE,
};

/// One node's mailbox and inbox, on its own connection.
struct Node {
    mailbox: Arc<LedgerMailbox>,
    inbox: ClusterRunInbox,
}

async fn node(server: &NatsServer, placement: RunInputPlacement) -> Node {
    let js = jetstream::new(server.connect().await.unwrap());
    let mailbox = Arc::new(
        LedgerMailbox::open_with(&js, DEFAULT_LEDGER_NAME, SNAPSHOT_OFTEN, rules_config())
            .await
            .unwrap(),
    );
    let kv = KvRunInbox::open(&js, DEFAULT_INBOX_BUCKET, 1, ledger::ANSWER_DEADLINE)
        .await
        .unwrap();
    Node {
        inbox: ClusterRunInbox::new(placement, Arc::clone(&mailbox), kv),
        mailbox,
    }
}

fn request(thread: &str, text: &str) -> RunRequest {
    RunRequest::new(ThreadId::new(thread).unwrap(), vec![Message::user(text)])
}

async fn accept(node: &Node, request: RunRequest, options: SubmitOptions) -> RunDispatch {
    submit(&*node.mailbox, &node.inbox, request, options)
        .await
        .unwrap()
}

/// Messages the KV inbox's stream has ever stored, and those it holds now.
async fn inbox_stream(server: &NatsServer) -> (u64, u64) {
    let js = jetstream::new(server.connect().await.unwrap());
    let stream = js
        .get_stream(format!("KV_{DEFAULT_INBOX_BUCKET}"))
        .await
        .unwrap();
    let state = stream.get_info().await.unwrap().state;
    (state.last_sequence, state.messages)
}

/// Claims `dispatch` on `node`: once this returns, the node's replica has
/// applied everything up to the claim, the enqueue included.
async fn claim(node: &Node, dispatch: &RunDispatch) -> RunDispatch {
    node.mailbox
        .claim_dispatch(&dispatch.dispatch_id, "node-b", LEASE, now_ms())
        .await
        .unwrap()
}

/// Ends `claimed`'s run on `node` as the mailbox worker does: acks the
/// dispatch, then lets go of the run's input.
async fn finish(node: &Node, claimed: &RunDispatch) {
    let token = claimed.claim_token.as_deref().unwrap();
    node.mailbox
        .ack(&claimed.dispatch_id, token, now_ms())
        .await
        .unwrap();
    node.inbox.remove(&claimed.run_id).await.unwrap();
}

/// Waits until the ledger stream no longer holds its first batch.
async fn trimmed(server: &NatsServer) {
    let js = jetstream::new(server.connect().await.unwrap());
    let stream = js
        .get_stream(ledger::stream_name(DEFAULT_LEDGER_NAME))
        .await
        .unwrap();
    let mut first = 1;
    for _ in 0..400 {
        first = stream.get_info().await.unwrap().state.first_sequence;
        if first > 1 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the ledger stream was never trimmed (first sequence {first})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_in_the_ledger_is_read_everywhere_and_survives_a_snapshot() {
    let server = NatsServer::start().await.unwrap();
    let a = node(&server, RunInputPlacement::Ledger).await;
    let b = node(&server, RunInputPlacement::Inbox).await;
    let asked = request("t-carried", "carry me");
    let queued = accept(&a, asked.clone(), SubmitOptions::default()).await;
    let run_id = queued.run_id.clone();
    let expected = asked.with_run_id(run_id.clone());

    let claimed = claim(&b, &queued).await;
    assert_eq!(b.inbox.get(&run_id).await.unwrap(), Some(expected.clone()));
    assert_eq!(a.inbox.get(&run_id).await.unwrap(), Some(expected.clone()));

    // Enough batches for a snapshot and a trim: a node starting now loads the
    // claimed dispatch, and its input, from the snapshot.
    for i in 0..24 {
        accept(
            &a,
            request("t-filler", &format!("filler {i}")),
            SubmitOptions::default(),
        )
        .await;
    }
    trimmed(&server).await;
    let c = node(&server, RunInputPlacement::Ledger).await;
    assert_eq!(c.inbox.get(&run_id).await.unwrap(), Some(expected));

    // The run ends: its input goes with the dispatch; the KV inbox never held one.
    finish(&b, &claimed).await;
    assert_eq!(inbox_stream(&server).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_too_large_for_the_ledger_goes_through_the_inbox() {
    let server = NatsServer::start().await.unwrap();
    let a = node(&server, RunInputPlacement::Ledger).await;
    let b = node(&server, RunInputPlacement::Ledger).await;
    let large = request("t-large", &"x".repeat(LEDGER_INPUT_LIMIT + 1));
    let queued = accept(&a, large.clone(), SubmitOptions::default()).await;
    let run_id = queued.run_id.clone();
    assert_eq!(inbox_stream(&server).await, (1, 1), "one put in the inbox");

    let claimed = claim(&b, &queued).await;
    assert_eq!(
        b.inbox.get(&run_id).await.unwrap(),
        Some(large.with_run_id(run_id.clone()))
    );
    finish(&b, &claimed).await;
    assert_eq!(inbox_stream(&server).await, (1, 0), "purged after the run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_keeping_inputs_in_the_ledger_reads_those_accepted_into_the_inbox() {
    let server = NatsServer::start().await.unwrap();
    let old = node(&server, RunInputPlacement::Inbox).await;
    let new = node(&server, RunInputPlacement::Ledger).await;
    let asked = request("t-mixed", "from the inbox");
    let queued = accept(&old, asked.clone(), SubmitOptions::default()).await;
    let run_id = queued.run_id.clone();
    claim(&new, &queued).await;
    assert_eq!(
        new.inbox.get(&run_id).await.unwrap(),
        Some(asked.with_run_id(run_id.clone()))
    );
    new.inbox.remove(&run_id).await.unwrap();
    assert_eq!(inbox_stream(&server).await, (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_enqueue_leaves_no_input_behind() {
    let server = NatsServer::start().await.unwrap();
    let a = node(&server, RunInputPlacement::Ledger).await;
    let once = SubmitOptions {
        dedupe_key: Some("message-1".into()),
        ..SubmitOptions::default()
    };
    accept(&a, request("t-dup", "first"), once.clone()).await;
    let again = RunId::generate();
    let refused = submit(
        &*a.mailbox,
        &a.inbox,
        request("t-dup", "second").with_run_id(again.clone()),
        once,
    )
    .await;
    assert!(
        matches!(refused, Err(MailboxError::Duplicate(_))),
        "{refused:?}"
    );
    assert_eq!(a.inbox.get(&again).await.unwrap(), None);
    assert_eq!(a.mailbox.carried_input(&again), None);
    assert_eq!(inbox_stream(&server).await, (0, 0));
}

/// A member of the membership bucket, listing `features`.
async fn member(server: &NatsServer, name: &str, features: &[&str]) -> Membership {
    let js = jetstream::new(server.connect().await.unwrap());
    Membership::join(
        &js,
        &MembershipConfig::default(),
        MemberRecord {
            node_id: NodeId::new(name).unwrap(),
            joined_at_ms: now_ms(),
            http_url: None,
            features: features.iter().map(|f| (*f).to_owned()).collect(),
        },
    )
    .await
    .unwrap()
}

/// Waits until `features` says every member has the ledger feature or not.
async fn everyone_reads_the_ledger(features: &MemberFeatures, wanted: bool) {
    let mut changes = features.clone();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while features.everyone_has(RUN_INPUT_IN_LEDGER) != wanted {
        tokio::time::timeout_at(deadline, changes.changed())
            .await
            .expect("the membership view never changed as expected")
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_carries_inputs_in_the_ledger_once_every_member_reads_them_there() {
    let server = NatsServer::start().await.unwrap();
    let new = member(&server, "new", &[RUN_INPUT_IN_LEDGER]).await;
    let features = new.features();
    everyone_reads_the_ledger(&features, true).await;
    let a = node(&server, RunInputPlacement::Auto).await;
    let a = Node {
        inbox: a.inbox.with_members(features.clone()),
        mailbox: a.mailbox,
    };

    // A node of an earlier version joins: inputs go where it can read them.
    let old = member(&server, "old", &[]).await;
    everyone_reads_the_ledger(&features, false).await;
    accept(&a, request("t-auto", "while old"), SubmitOptions::default()).await;
    assert_eq!(inbox_stream(&server).await, (1, 1));

    // It left: inputs travel with their dispatch again.
    old.leave().await.unwrap();
    everyone_reads_the_ledger(&features, true).await;
    let queued = accept(&a, request("t-auto", "all new"), SubmitOptions::default()).await;
    assert_eq!(
        inbox_stream(&server).await,
        (1, 1),
        "nothing more in the inbox"
    );
    assert!(a.mailbox.holds_carried_input(&queued.run_id));
}
