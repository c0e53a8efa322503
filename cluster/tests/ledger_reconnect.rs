//! The mailbox ledger across a nats-server restart: a command issued while the
//! server is away waits for it (its batch published again under the same
//! `Nats-Msg-Id`, so the stream keeps it once) and is answered when the server
//! is back; past the answer deadline it is refused as unavailable.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use async_nats::jetstream;
use awaken_actors::clock::now_ms;
use awaken_actors::contract::RunDispatch;
use awaken_actors::ids::{RunId, ThreadId};
use awaken_actors::mailbox::conformance::rules_config;
use awaken_actors::mailbox::{DispatchQuery, MailboxError, MailboxStore};
use awaken_cluster::LedgerMailbox;
use awaken_cluster::ledger::{self, DEFAULT_LEDGER_NAME, LedgerOptions};
use awaken_cluster::testing::NatsServer;

/// Longer than one publish's wait for its answer (2 s, the client's own is
/// 5 s): the first publish of a batch goes unanswered, and only a later one
/// can land it.
const OUTAGE: Duration = Duration::from_secs(6);

async fn mailbox(server: &NatsServer, answer_deadline: Duration) -> LedgerMailbox {
    let js = jetstream::new(server.connect().await.unwrap());
    let options = LedgerOptions {
        answer_deadline,
        ..LedgerOptions::default()
    };
    LedgerMailbox::open_with(&js, DEFAULT_LEDGER_NAME, options, rules_config())
        .await
        .unwrap()
}

fn dispatch(thread: &ThreadId, run: &str) -> RunDispatch {
    RunDispatch::new(thread.clone(), RunId::new(run).unwrap(), 0, now_ms())
}

/// Batches the ledger stream holds.
async fn batches(server: &NatsServer) -> u64 {
    let js = jetstream::new(server.connect().await.unwrap());
    let stream = js
        .get_stream(ledger::stream_name(DEFAULT_LEDGER_NAME))
        .await
        .unwrap();
    stream.get_info().await.unwrap().state.messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_while_the_server_restarts_waits_and_lands_once() {
    let mut server = NatsServer::start().await.unwrap();
    let mailbox = mailbox(&server, Duration::from_secs(20)).await;
    let thread = ThreadId::new("through-a-restart").unwrap();
    mailbox
        .enqueue(dispatch(&thread, "before"), now_ms())
        .await
        .unwrap();
    let before = batches(&server).await;

    server.kill().await;
    let pending = {
        let mailbox = mailbox.clone();
        let thread = thread.clone();
        tokio::spawn(async move { mailbox.enqueue(dispatch(&thread, "during"), now_ms()).await })
    };
    tokio::time::sleep(OUTAGE).await;
    server.restart().await.unwrap();

    let enqueued = pending.await.unwrap();
    assert!(enqueued.is_ok(), "{enqueued:?}");
    let page = mailbox
        .list_dispatches(&DispatchQuery {
            limit: 10,
            ..DispatchQuery::thread(thread)
        })
        .await
        .unwrap();
    let runs: Vec<&str> = page.dispatches.iter().map(|d| d.run_id.as_str()).collect();
    assert_eq!(runs, ["before", "during"]);
    assert_eq!(
        batches(&server).await,
        before + 1,
        "the batch published twice is kept once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_past_the_answer_deadline_is_refused_as_unavailable() {
    let mut server = NatsServer::start().await.unwrap();
    let mailbox = mailbox(&server, Duration::from_secs(1)).await;
    let thread = ThreadId::new("server-gone").unwrap();
    server.kill().await;

    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        mailbox.enqueue(dispatch(&thread, "late"), now_ms()),
    )
    .await
    .expect("refused within the deadline and a sweep");
    assert!(
        matches!(&refused, Err(MailboxError::Unavailable(reason)) if reason.contains("1s")),
        "{refused:?}"
    );
}
