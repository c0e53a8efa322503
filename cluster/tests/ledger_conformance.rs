//! The ledger mailbox passes every `MailboxStore` rule of seed 000 against a real
//! nats-server 2.9, like the in-process twin does.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use async_nats::jetstream;
use awaken_actors::mailbox::conformance::rules_config;
use awaken_cluster::LedgerMailbox;
use awaken_cluster::ledger::DEFAULT_LEDGER_NAME;
use awaken_cluster::testing::NatsServer;

/// A mailbox on its own fresh server; the server is the guard.
async fn ledger_fixture() -> (LedgerMailbox, NatsServer) {
    let server = NatsServer::start().await.unwrap();
    let js = jetstream::new(server.connect().await.unwrap());
    let mailbox = LedgerMailbox::open(&js, DEFAULT_LEDGER_NAME, 1, rules_config())
        .await
        .unwrap();
    (mailbox, server)
}

mod rules {
    use super::*;

    awaken_actors::mailbox_store_conformance!(ledger_fixture());
}

mod cluster {
    use std::time::Duration;

    use awaken_actors::contract::{RunDispatch, RunDispatchStatus};
    use awaken_actors::ids::{RunId, ThreadId};
    use awaken_actors::mailbox::{DispatchQuery, MailboxError, MailboxStore};
    use awaken_cluster::ledger::{self, LedgerOptions};
    use futures::TryStreamExt;

    use super::*;

    const T0: u64 = 1_000_000;
    const LEASE: u64 = 30_000;

    /// Snapshots every few batches, so a short test trims the stream.
    const SNAPSHOT_OFTEN: LedgerOptions = LedgerOptions {
        replicas: 1,
        snapshot_interval: 4,
        answer_deadline: awaken_cluster::ledger::ANSWER_DEADLINE,
    };

    fn thread(id: &str) -> ThreadId {
        ThreadId::new(id).unwrap()
    }

    fn dispatch(thread_id: &str, run: &str) -> RunDispatch {
        RunDispatch::new(thread(thread_id), RunId::new(run).unwrap(), 0, T0)
    }

    /// Another node: its own connection and its own replica of the ledger.
    async fn node(server: &NatsServer, options: LedgerOptions) -> LedgerMailbox {
        let js = jetstream::new(server.connect().await.unwrap());
        LedgerMailbox::open_with(&js, DEFAULT_LEDGER_NAME, options, rules_config())
            .await
            .unwrap()
    }

    async fn everything(mailbox: &LedgerMailbox) -> Vec<RunDispatch> {
        mailbox
            .list_dispatches(&DispatchQuery {
                limit: 1_000,
                ..DispatchQuery::default()
            })
            .await
            .unwrap()
            .dispatches
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_nodes_racing_for_one_dispatch_have_one_winner() {
        let (a, server) = ledger_fixture().await;
        let b = node(&server, LedgerOptions::default()).await;
        for round in 0..10 {
            let queued = a
                .enqueue(dispatch("t1", &format!("r{round}")), T0)
                .await
                .unwrap();
            let (a_won, b_won) = tokio::join!(
                a.claim_dispatch(&queued.dispatch_id, "node-a", LEASE, T0),
                b.claim_dispatch(&queued.dispatch_id, "node-b", LEASE, T0),
            );
            let winners = [&a_won, &b_won].iter().filter(|r| r.is_ok()).count();
            assert_eq!(winners, 1, "round {round}: {a_won:?} / {b_won:?}");
            let loser = if a_won.is_ok() { b_won } else { a_won };
            assert!(matches!(
                loser,
                Err(MailboxError::WrongState {
                    status: RunDispatchStatus::Claimed,
                    ..
                })
            ));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dedupe_key_is_unique_across_nodes_and_threads() {
        let (a, server) = ledger_fixture().await;
        let b = node(&server, LedgerOptions::default()).await;
        let (from_a, from_b) = tokio::join!(
            a.enqueue(dispatch("t1", "r1").with_dedupe_key("k"), T0),
            b.enqueue(dispatch("t2", "r2").with_dedupe_key("k"), T0),
        );
        let stored = [&from_a, &from_b].iter().filter(|r| r.is_ok()).count();
        assert_eq!(stored, 1, "{from_a:?} / {from_b:?}");
        assert_eq!(everything(&a).await, everything(&b).await);
        assert_eq!(everything(&a).await.len(), 1);
    }

    #[tokio::test]
    async fn what_one_node_did_another_sees_at_once() {
        let (a, server) = ledger_fixture().await;
        let b = node(&server, LedgerOptions::default()).await;
        let queued = a.enqueue(dispatch("t1", "r1"), T0).await.unwrap();
        assert_eq!(
            b.load_dispatch(&queued.dispatch_id).await.unwrap(),
            Some(queued.clone())
        );
        let taken = b
            .claim(&thread("t1"), "node-b", 1, LEASE, T0)
            .await
            .unwrap();
        assert_eq!(taken.len(), 1);
        assert!(
            a.claim(&thread("t1"), "node-a", 1, LEASE, T0)
                .await
                .unwrap()
                .is_empty(),
            "b holds the claim"
        );
        let token = taken[0].claim_token.as_deref().unwrap();
        let back = b
            .nack(&queued.dispatch_id, token, "retry", T0)
            .await
            .unwrap();
        let again = a
            .claim(&thread("t1"), "node-a", 1, LEASE, back.available_at)
            .await
            .unwrap();
        assert_eq!(again.len(), 1, "a sees the dispatch b gave back");
        assert_eq!(again[0].attempt_count, 2);
    }

    #[tokio::test]
    async fn an_enqueued_dispatch_survives_a_server_crash() {
        let (mailbox, mut server) = ledger_fixture().await;
        let queued = mailbox
            .enqueue(dispatch("t1", "r1").with_dedupe_key("k1"), T0)
            .await
            .unwrap();
        server.restart().await.unwrap();
        let after = node(&server, LedgerOptions::default()).await;
        assert_eq!(
            after.load_dispatch(&queued.dispatch_id).await.unwrap(),
            Some(queued.clone())
        );
        assert!(matches!(
            after
                .enqueue(dispatch("t2", "r2").with_dedupe_key("k1"), T0)
                .await,
            Err(MailboxError::Duplicate(_))
        ));
        let claimed = after
            .claim(&thread("t1"), "node-b", 1, LEASE, T0)
            .await
            .unwrap();
        assert_eq!(claimed[0].dispatch_id, queued.dispatch_id);
    }

    /// Waits (bounded) until the ledger stream no longer starts at its first
    /// message: a snapshot was taken and the stream trimmed behind it.
    /// Waits until the stream no longer holds sequence `past`; its first sequence.
    async fn trimmed(server: &NatsServer, past: u64) -> u64 {
        let js = jetstream::new(server.connect().await.unwrap());
        let stream = js
            .get_stream(ledger::stream_name(DEFAULT_LEDGER_NAME))
            .await
            .unwrap();
        for _ in 0..200 {
            let first = stream.get_info().await.unwrap().state.first_sequence;
            if first > past {
                return first;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the ledger stream was never trimmed");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn snapshots_trim_the_stream_and_a_new_node_starts_from_one() {
        let server = NatsServer::start().await.unwrap();
        let options = SNAPSHOT_OFTEN;
        let a = node(&server, options).await;
        let mut kept = Vec::new();
        for round in 0..40 {
            let thread_id = format!("t{}", round % 7);
            let queued = a
                .enqueue(dispatch(&thread_id, &format!("r{round}")), T0)
                .await
                .unwrap();
            if round % 3 == 0 {
                let claimed = a
                    .claim_dispatch(&queued.dispatch_id, "node-a", LEASE, T0)
                    .await
                    .unwrap();
                kept.push(claimed);
            }
        }
        a.interrupt(&thread("t6"), T0).await.unwrap();
        let first = trimmed(&server, 1).await;
        assert!(first > 1);
        let b = node(&server, options).await;
        let seen_by_a = everything(&a).await;
        assert_eq!(everything(&b).await, seen_by_a);
        assert_eq!(seen_by_a.len(), 40);
        // The snapshot carried the epochs too: t6's next dispatch takes epoch 1.
        let after = b.enqueue(dispatch("t6", "late"), T0).await.unwrap();
        assert_eq!(after.dispatch_epoch, 1);
        assert!(kept.iter().all(|claimed| seen_by_a.contains(claimed)));
    }

    /// Parts no head points to (a writer's that lost a race for the head) go with
    /// the next trim that passes them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_trim_removes_parts_no_head_points_to() {
        use futures::StreamExt;

        let server = NatsServer::start().await.unwrap();
        let options = SNAPSHOT_OFTEN;
        let a = node(&server, options).await;
        let js = jetstream::new(server.connect().await.unwrap());
        let snapshots = js
            .get_key_value(ledger::snapshot_bucket(DEFAULT_LEDGER_NAME))
            .await
            .unwrap();
        let stray = "part.1.0";
        snapshots.put(stray, "left behind".into()).await.unwrap();
        let mut removed = snapshots.watch(stray).await.unwrap();
        for round in 0..40 {
            a.enqueue(
                dispatch(&format!("t{}", round % 5), &format!("r{round}")),
                T0,
            )
            .await
            .unwrap();
        }
        let event = tokio::time::timeout(Duration::from_secs(10), removed.next())
            .await
            .expect("the stray part was never removed")
            .unwrap()
            .unwrap();
        assert_ne!(event.operation, async_nats::jetstream::kv::Operation::Put);
        // The head's own parts stay: a new node starts from them.
        let b = node(&server, options).await;
        assert_eq!(everything(&b).await, everything(&a).await);
    }

    /// A node whose consumer vanished while the stream was trimmed past it finds
    /// a gap when it reads on, and goes on from the snapshot.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_that_fell_behind_a_trim_goes_on_from_the_snapshot() {
        let server = NatsServer::start().await.unwrap();
        let options = SNAPSHOT_OFTEN;
        let behind = node(&server, options).await;
        behind.enqueue(dispatch("t0", "early"), T0).await.unwrap();
        let js = jetstream::new(server.connect().await.unwrap());
        let stream = js
            .get_stream(ledger::stream_name(DEFAULT_LEDGER_NAME))
            .await
            .unwrap();
        let consumers: Vec<String> = stream.consumer_names().try_collect().await.unwrap();
        assert_eq!(consumers.len(), 1, "only the lagging node follows yet");
        stream.delete_consumer(&consumers[0]).await.unwrap();
        let last_seen = stream.clone().get_info().await.unwrap().state.last_sequence;

        let a = node(&server, options).await;
        for round in 0..40 {
            let thread_id = format!("t{}", round % 5);
            a.enqueue(dispatch(&thread_id, &format!("r{round}")), T0)
                .await
                .unwrap();
        }
        assert!(trimmed(&server, last_seen + 1).await > last_seen + 1);

        let seen_by_a = everything(&a).await;
        assert_eq!(seen_by_a.len(), 41);
        assert_eq!(everything(&behind).await, seen_by_a);
        let after = behind.enqueue(dispatch("t0", "late"), T0).await.unwrap();
        assert_eq!(everything(&a).await.last(), Some(&after));
    }

    /// The next thread a queue watch reports.
    /// A channel the mailbox's queue watch reports to.
    async fn watch(mailbox: &LedgerMailbox) -> tokio::sync::mpsc::UnboundedReceiver<ThreadId> {
        let (heard, watch) = tokio::sync::mpsc::unbounded_channel();
        mailbox
            .watch_queued(awaken_actors::mailbox::QueueWatch::new(
                move |thread_id: &ThreadId| heard.send(thread_id.clone()).is_ok(),
            ))
            .await
            .unwrap();
        watch
    }

    async fn next_queued(watch: &mut tokio::sync::mpsc::UnboundedReceiver<ThreadId>) -> ThreadId {
        tokio::time::timeout(Duration::from_secs(30), watch.recv())
            .await
            .expect("the watch reports queued work")
            .expect("the watch is open")
    }

    /// The threads a node's sweep would wake, sorted.
    async fn queued_ids(mailbox: &LedgerMailbox) -> Vec<ThreadId> {
        let mut queued: Vec<ThreadId> = mailbox
            .queued_threads()
            .await
            .unwrap()
            .into_iter()
            .map(|q| q.thread_id)
            .collect();
        queued.sort();
        queued
    }

    /// Sweeps read the node's replica: another node's enqueues, claims and acks
    /// reach it in stream order, so once its watch reports a later enqueue, the
    /// earlier changes are in.
    #[tokio::test]
    async fn another_nodes_work_reaches_the_sweeps() {
        let (a, server) = ledger_fixture().await;
        let b = node(&server, LedgerOptions::default()).await;
        let mut watch = watch(&b).await;

        let first = a.enqueue(dispatch("t1", "r1"), T0).await.unwrap();
        assert_eq!(next_queued(&mut watch).await, thread("t1"));
        assert_eq!(queued_ids(&b).await, [thread("t1")]);

        let claimed = a
            .claim(&thread("t1"), "node-a", 1, LEASE, T0)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        a.enqueue(dispatch("t2", "r2"), T0).await.unwrap();
        assert_eq!(next_queued(&mut watch).await, thread("t2"));
        assert_eq!(queued_ids(&b).await, [thread("t2")], "t1 is claimed now");

        assert!(
            b.reclaim_expired_leases(T0 + LEASE - 1)
                .await
                .unwrap()
                .is_empty()
        );
        let reclaimed = b.reclaim_expired_leases(T0 + LEASE).await.unwrap();
        assert_eq!(reclaimed.len(), 1);
        assert_eq!(reclaimed[0].dispatch_id, first.dispatch_id);
        assert_eq!(reclaimed[0].status, RunDispatchStatus::Queued);
        assert!(
            b.reclaim_expired_leases(T0 + LEASE)
                .await
                .unwrap()
                .is_empty(),
            "reclaimed once"
        );
        assert_eq!(queued_ids(&b).await, [thread("t1"), thread("t2")]);

        // Acked work leaves every node's sweeps.
        let later = T0 + LEASE + 60_000;
        let taken = b
            .claim(&thread("t1"), "node-b", 1, LEASE, later)
            .await
            .unwrap();
        b.ack(
            &taken[0].dispatch_id,
            taken[0].claim_token.as_deref().unwrap(),
            later,
        )
        .await
        .unwrap();
        a.enqueue(dispatch("t3", "r3"), T0).await.unwrap();
        // The reclaim queued t1 again, which the watch reported too.
        while next_queued(&mut watch).await != thread("t3") {}
        assert_eq!(queued_ids(&b).await, [thread("t2"), thread("t3")]);
        assert_eq!(queued_ids(&a).await, [thread("t2"), thread("t3")]);
        assert!(
            b.reclaim_expired_leases(u64::MAX).await.unwrap().is_empty(),
            "nothing claimed anywhere"
        );
    }

    /// A node's own enqueue tells its queue watchers as it is submitted, so the
    /// node's claim follows it in the writer's order instead of a round trip
    /// later; applying it does not tell them again. Another node hears of it
    /// when it applies it.
    #[tokio::test]
    async fn an_enqueue_tells_its_own_node_at_once_and_others_when_applied() {
        let (a, server) = ledger_fixture().await;
        let b = node(&server, LedgerOptions::default()).await;
        let mut heard_a = watch(&a).await;
        let mut heard_b = watch(&b).await;

        let mut enqueue = std::pin::pin!(a.enqueue(dispatch("t1", "r1"), T0));
        assert!(
            futures::poll!(enqueue.as_mut()).is_pending(),
            "the answer needs the stream"
        );
        assert_eq!(
            heard_a.try_recv().ok(),
            Some(thread("t1")),
            "told as it was submitted"
        );
        enqueue.await.unwrap();
        // A later command's answer comes after the enqueue's batch was applied
        // whole, watchers included.
        a.claim(&thread("other"), "node-a", 1, LEASE, T0)
            .await
            .unwrap();
        assert!(heard_a.try_recv().is_err(), "applying it told nobody again");
        assert_eq!(next_queued(&mut heard_b).await, thread("t1"));
    }

    /// Tells the test when the ledger logs that its open is being retried.
    struct RetrySeen(tokio::sync::mpsc::UnboundedSender<()>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RetrySeen {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            if *event.metadata().level() == tracing::Level::WARN
                && event
                    .metadata()
                    .target()
                    .starts_with("awaken_cluster::ledger")
            {
                let _ = self.0.send(());
            }
        }
    }

    /// A node started while JetStream does not answer (here: its server is down)
    /// waits for it instead of failing, and works once it is back.
    #[tokio::test]
    async fn a_ledger_opened_while_jetstream_is_down_opens_when_it_is_back() {
        use tracing_subscriber::layer::SubscriberExt;

        let (retried_tx, mut retried) = tokio::sync::mpsc::unbounded_channel();
        // A current-thread runtime: the open and everything it spawns log here.
        let _logs = tracing::subscriber::set_default(
            tracing_subscriber::registry().with(RetrySeen(retried_tx)),
        );
        let mut server = NatsServer::start().await.unwrap();
        let js = jetstream::ContextBuilder::new()
            .timeout(Duration::from_millis(500))
            .build(server.connect().await.unwrap());
        server.kill().await;

        let mut open = std::pin::pin!(LedgerMailbox::open(
            &js,
            DEFAULT_LEDGER_NAME,
            1,
            rules_config()
        ));
        let opened = tokio::select! {
            // Before any retry: the server is down, so this can only be its error.
            opened = &mut open => opened,
            _ = retried.recv() => {
                server.restart().await.unwrap();
                open.await
            }
        };
        let mailbox = opened.unwrap();
        mailbox.enqueue(dispatch("t1", "r1"), T0).await.unwrap();
        assert_eq!(queued_ids(&mailbox).await, [thread("t1")]);
    }

    #[tokio::test]
    async fn a_message_that_is_not_a_batch_is_skipped() {
        let (a, server) = ledger_fixture().await;
        let js = jetstream::new(server.connect().await.unwrap());
        js.publish(ledger::subject(DEFAULT_LEDGER_NAME), "not a batch".into())
            .await
            .unwrap()
            .await
            .unwrap();
        let queued = a.enqueue(dispatch("t1", "r1"), T0).await.unwrap();
        let b = node(&server, LedgerOptions::default()).await;
        assert_eq!(everything(&b).await, [queued]);
    }

    #[tokio::test]
    async fn an_oversized_command_is_refused_and_changes_nothing() {
        let (a, _server) = ledger_fixture().await;
        let huge = "k".repeat(600 * 1024);
        let refused = a
            .enqueue(dispatch("t1", "r1").with_dedupe_key(huge), T0)
            .await;
        assert!(
            matches!(&refused, Err(MailboxError::InvalidInput(why)) if why.contains("exceeds")),
            "{refused:?}"
        );
        assert!(everything(&a).await.is_empty());
        assert!(a.enqueue(dispatch("t1", "r1"), T0).await.is_ok());
    }
}
