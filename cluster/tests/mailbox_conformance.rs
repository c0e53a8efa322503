//! The JetStream mailbox passes every `MailboxStore` rule of seed 000 against a real
//! nats-server 2.9, like the in-process twin does; plus what only a shared, durable
//! mailbox can show: two processes' worth of stores racing, and a server restart.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use async_nats::jetstream;
use awaken_actors::mailbox::conformance::rules_config;
use awaken_cluster::JetStreamMailbox;
use awaken_cluster::mailbox::DEFAULT_MAILBOX_BUCKET;
use awaken_cluster::testing::NatsServer;

/// A mailbox on its own fresh server; the server is the guard.
async fn jetstream_fixture() -> (JetStreamMailbox, NatsServer) {
    let server = NatsServer::start().await.unwrap();
    let js = jetstream::new(server.connect().await.unwrap());
    let mailbox = JetStreamMailbox::open(&js, DEFAULT_MAILBOX_BUCKET, 1, rules_config())
        .await
        .unwrap();
    (mailbox, server)
}

mod rules {
    use super::*;

    awaken_actors::mailbox_store_conformance!(jetstream_fixture());
}

mod cluster {
    use awaken_actors::contract::{RunDispatch, RunDispatchStatus};
    use awaken_actors::ids::{DispatchId, RunId, ThreadId};
    use awaken_actors::mailbox::{DispatchQuery, MailboxError, MailboxStore};
    use awaken_cluster::codec;
    use awaken_cluster::mailbox::ORPHAN_GRACE_MS;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use futures::StreamExt;
    use serde::{Deserialize, Serialize};
    use sha2::{Digest, Sha256};

    use super::*;

    const T0: u64 = 1_000_000;
    const LEASE: u64 = 30_000;

    fn thread(id: &str) -> ThreadId {
        ThreadId::new(id).unwrap()
    }

    fn dispatch(thread_id: &str, run: &str) -> RunDispatch {
        RunDispatch::new(thread(thread_id), RunId::new(run).unwrap(), 0, T0)
    }

    /// A second node: its own connection and its own mailbox handle on the bucket.
    async fn node(server: &NatsServer) -> JetStreamMailbox {
        let js = jetstream::new(server.connect().await.unwrap());
        JetStreamMailbox::open(&js, DEFAULT_MAILBOX_BUCKET, 1, rules_config())
            .await
            .unwrap()
    }

    /// Enqueues a dispatch on `thread_id` and runs it to `Acked` (claimed by node-a).
    async fn enqueue_and_ack(mailbox: &JetStreamMailbox, thread_id: &str, run: &str) {
        let queued = mailbox.enqueue(dispatch(thread_id, run), T0).await.unwrap();
        let taken = mailbox
            .claim(&thread(thread_id), "node-a", 1, LEASE, T0)
            .await
            .unwrap();
        mailbox
            .ack(
                &queued.dispatch_id,
                taken[0].claim_token.as_deref().unwrap(),
                T0,
            )
            .await
            .unwrap();
    }

    async fn bucket(server: &NatsServer) -> async_nats::jetstream::kv::Store {
        jetstream::new(server.connect().await.unwrap())
            .get_key_value(DEFAULT_MAILBOX_BUCKET)
            .await
            .unwrap()
    }

    fn b64(text: &str) -> String {
        URL_SAFE_NO_PAD.encode(text.as_bytes())
    }

    /// The documented index entry (`dispatch.<b64 id>`), as docs/cluster.md gives it.
    #[derive(Serialize, Deserialize)]
    struct IndexEntry {
        dispatch_id: String,
        thread_id: String,
        created_at_ms: u64,
    }

    /// The documented dedupe entry (`dedupe.<b64 sha-256>`).
    #[derive(Serialize, Deserialize)]
    struct DedupeEntry {
        dispatch_id: String,
        thread_id: String,
        created_at_ms: u64,
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_nodes_racing_for_one_dispatch_have_one_winner() {
        let (a, server) = jetstream_fixture().await;
        let b = node(&server).await;
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

    /// A node answers from what it wrote last only when a write confirms it: work
    /// another node gave back is seen, and work another node took is not taken twice.
    #[tokio::test]
    async fn a_node_never_answers_from_a_stale_record() {
        let (a, server) = jetstream_fixture().await;
        let b = node(&server).await;
        let queued = a.enqueue(dispatch("t1", "r1"), T0).await.unwrap();
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
            "a's record still says queued, but b holds the claim"
        );
        let back = b
            .nack(
                &queued.dispatch_id,
                taken[0].claim_token.as_deref().unwrap(),
                "retry",
                T0,
            )
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
        let (mailbox, mut server) = jetstream_fixture().await;
        let queued = mailbox
            .enqueue(dispatch("t1", "r1").with_dedupe_key("k1"), T0)
            .await
            .unwrap();
        server.restart().await.unwrap();
        let after = node(&server).await;
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

    /// The next thread a queue watch reports.
    async fn next_queued(watch: &mut awaken_actors::mailbox::QueueWatch) -> ThreadId {
        tokio::time::timeout(std::time::Duration::from_secs(30), watch.recv())
            .await
            .expect("the watch reports queued work")
            .expect("the watch is open")
    }

    /// The threads a node's sweep would wake, sorted.
    async fn queued_ids(mailbox: &JetStreamMailbox) -> Vec<ThreadId> {
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

    /// Sweeps read the node's index of threads with work in flight, fed by the
    /// bucket's change feed: another node's enqueues, claims and acks reach it in
    /// order, so once its watch reports a later enqueue, the earlier changes are in.
    #[tokio::test]
    async fn another_nodes_work_reaches_the_sweeps() {
        let (a, server) = jetstream_fixture().await;
        let b = node(&server).await;
        let mut watch = b.watch_queued().await.unwrap();

        let first = a.enqueue(dispatch("t1", "r1"), T0).await.unwrap();
        assert_eq!(next_queued(&mut watch).await, thread("t1"));
        let queued = b.queued_threads().await.unwrap();
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].thread_id, thread("t1"));

        let claimed = a
            .claim(&thread("t1"), "node-a", 1, LEASE, T0)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        a.enqueue(dispatch("t2", "r2"), T0).await.unwrap();
        assert_eq!(next_queued(&mut watch).await, thread("t2"));
        let queued = b.queued_threads().await.unwrap();
        assert_eq!(queued.len(), 1, "t1 is claimed now: {queued:?}");
        assert_eq!(queued[0].thread_id, thread("t2"));

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
        let taken = b
            .claim(&thread("t1"), "node-b", 1, LEASE, T0 + LEASE + 60_000)
            .await
            .unwrap();
        b.ack(
            &taken[0].dispatch_id,
            taken[0].claim_token.as_deref().unwrap(),
            T0 + LEASE + 60_000,
        )
        .await
        .unwrap();
        a.enqueue(dispatch("t3", "r3"), T0).await.unwrap();
        // The reclaim queued t1 again, which the watch reported too.
        while next_queued(&mut watch).await != thread("t3") {}
        assert_eq!(queued_ids(&b).await, [thread("t2"), thread("t3")]);
        assert!(
            b.reclaim_expired_leases(u64::MAX).await.unwrap().is_empty(),
            "nothing claimed anywhere"
        );
    }

    /// An enqueue on a thread this node never touched tries to create its record
    /// first; when another node already has, it joins the existing record: the
    /// epoch is kept and nothing is overwritten.
    #[tokio::test]
    async fn an_enqueue_joins_a_record_another_node_created() {
        let (a, server) = jetstream_fixture().await;
        let b = node(&server).await;
        let first = a.enqueue(dispatch("t1", "r1"), T0).await.unwrap();
        a.interrupt(&thread("t1"), T0).await.unwrap();
        let second = b.enqueue(dispatch("t1", "r2"), T0).await.unwrap();
        assert_eq!(second.dispatch_epoch, 1, "{second:?}");
        let listed = a
            .list_dispatches(&DispatchQuery {
                limit: 10,
                ..DispatchQuery::thread(thread("t1"))
            })
            .await
            .unwrap();
        let ids: Vec<&DispatchId> = listed.dispatches.iter().map(|d| &d.dispatch_id).collect();
        assert_eq!(ids, [&first.dispatch_id, &second.dispatch_id]);
        assert_eq!(listed.dispatches[0].status, RunDispatchStatus::Superseded);
    }

    /// Garbage collection removes the records of threads that hold nothing any
    /// more (and were never interrupted), so the bucket holds the threads with
    /// retained work, not every thread ever run.
    #[tokio::test]
    async fn gc_removes_records_that_hold_nothing() {
        let (a, server) = jetstream_fixture().await;
        let ttl = rules_config().gc_ttl_ms();
        for t in ["t1", "t2", "t3"] {
            enqueue_and_ack(&a, t, "r1").await;
        }
        a.interrupt(&thread("t2"), T0).await.unwrap();
        a.enqueue(dispatch("t3", "r2"), T0 + ttl).await.unwrap();
        assert_eq!(a.gc(T0 + ttl).await.unwrap(), 3);

        let kv = bucket(&server).await;
        let keys: Vec<String> = kv
            .keys()
            .await
            .unwrap()
            .map(|key| key.unwrap())
            .collect()
            .await;
        let mut threads: Vec<String> = keys
            .into_iter()
            .filter(|key| key.starts_with("thread."))
            .collect();
        threads.sort();
        let mut expected = vec![
            format!("thread.{}", b64("t2")),
            format!("thread.{}", b64("t3")),
        ];
        expected.sort();
        assert_eq!(threads, expected, "t1 held nothing and was forgotten");

        // The forgotten thread starts over, from this node and from another.
        let again = a.enqueue(dispatch("t1", "r2"), T0 + ttl).await.unwrap();
        assert_eq!(again.dispatch_epoch, 0);
        let b = node(&server).await;
        let claimed = b
            .claim(&thread("t1"), "node-b", 1, LEASE, T0 + ttl)
            .await
            .unwrap();
        assert_eq!(claimed[0].dispatch_id, again.dispatch_id);
    }

    /// A node that opens the mailbox later (or after a server restart) starts with
    /// every thread that has work in flight, and its feed goes on after the restart.
    #[tokio::test]
    async fn a_node_opened_later_knows_the_work_in_flight() {
        let (a, mut server) = jetstream_fixture().await;
        let first = a.enqueue(dispatch("t1", "r1"), T0).await.unwrap();
        a.claim(&thread("t1"), "node-a", 1, LEASE, T0)
            .await
            .unwrap();
        a.enqueue(dispatch("t2", "r2"), T0).await.unwrap();
        enqueue_and_ack(&a, "t3", "r3").await;

        let late = node(&server).await;
        let queued = late.queued_threads().await.unwrap();
        assert_eq!(queued.len(), 1, "{queued:?}");
        assert_eq!(queued[0].thread_id, thread("t2"));
        let reclaimed = late.reclaim_expired_leases(T0 + LEASE).await.unwrap();
        assert_eq!(reclaimed.len(), 1);
        assert_eq!(reclaimed[0].dispatch_id, first.dispatch_id);

        server.restart().await.unwrap();
        let mut watch = late.watch_queued().await.unwrap();
        node(&server)
            .await
            .enqueue(dispatch("t4", "r4"), T0)
            .await
            .unwrap();
        assert_eq!(next_queued(&mut watch).await, thread("t4"));
        assert_eq!(late.queued_threads().await.unwrap().len(), 3);
    }

    /// Tells the test when the mailbox logs that its open is being retried.
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
                    .starts_with("awaken_cluster::mailbox")
            {
                let _ = self.0.send(());
            }
        }
    }

    /// A node started while JetStream does not answer (here: its server is down)
    /// waits for it instead of failing, and works once it is back.
    #[tokio::test]
    async fn a_mailbox_opened_while_jetstream_is_down_opens_when_it_is_back() {
        use tracing_subscriber::layer::SubscriberExt;

        let (retried_tx, mut retried) = tokio::sync::mpsc::unbounded_channel();
        // A current-thread runtime: the open and everything it spawns log here.
        let _logs = tracing::subscriber::set_default(
            tracing_subscriber::registry().with(RetrySeen(retried_tx)),
        );
        let mut server = NatsServer::start().await.unwrap();
        let js = jetstream::ContextBuilder::new()
            .timeout(std::time::Duration::from_millis(500))
            .build(server.connect().await.unwrap());
        server.kill().await;

        let mut open = std::pin::pin!(JetStreamMailbox::open(
            &js,
            DEFAULT_MAILBOX_BUCKET,
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
        let queued = mailbox.queued_threads().await.unwrap();
        assert_eq!(queued.len(), 1, "{queued:?}");
    }

    /// A node that died after reserving a dispatch id but before writing the thread
    /// record leaves an orphan index entry: a retry on the same thread takes it over
    /// at once; another thread must wait out the grace; garbage collection removes it.
    #[tokio::test]
    async fn orphaned_reservations_are_taken_over_and_collected() {
        let (mailbox, server) = jetstream_fixture().await;
        let kv = bucket(&server).await;
        let orphan = |id: &str, thread_id: &str| {
            codec::encode(&IndexEntry {
                dispatch_id: id.into(),
                thread_id: thread_id.into(),
                created_at_ms: T0,
            })
            .unwrap()
        };
        kv.put(
            format!("dispatch.{}", b64("d-retry")),
            orphan("d-retry", "t1"),
        )
        .await
        .unwrap();
        let mut retry = dispatch("t1", "r1");
        retry.dispatch_id = DispatchId::new("d-retry").unwrap();
        mailbox
            .enqueue(retry, T0 + 1)
            .await
            .expect("a retry on the same thread takes over");

        kv.put(
            format!("dispatch.{}", b64("d-moved")),
            orphan("d-moved", "t9"),
        )
        .await
        .unwrap();
        let mut moved = dispatch("t2", "r2");
        moved.dispatch_id = DispatchId::new("d-moved").unwrap();
        assert!(matches!(
            mailbox.enqueue(moved.clone(), T0 + 1).await,
            Err(MailboxError::Duplicate(_))
        ));
        mailbox
            .enqueue(moved, T0 + ORPHAN_GRACE_MS)
            .await
            .expect("after the grace another thread may take the id");

        let digest = URL_SAFE_NO_PAD.encode(Sha256::digest(b"key-of-the-dead"));
        let dedupe_key = format!("dedupe.{digest}");
        let entry = DedupeEntry {
            dispatch_id: "d-dead".into(),
            thread_id: "t3".into(),
            created_at_ms: T0,
        };
        kv.put(&dedupe_key, codec::encode(&entry).unwrap())
            .await
            .unwrap();
        kv.put(
            format!("dispatch.{}", b64("d-dead")),
            orphan("d-dead", "t3"),
        )
        .await
        .unwrap();
        assert!(matches!(
            mailbox
                .enqueue(
                    dispatch("t4", "r4").with_dedupe_key("key-of-the-dead"),
                    T0 + 1
                )
                .await,
            Err(MailboxError::Duplicate(_))
        ));
        assert_eq!(mailbox.gc(T0 + 1).await.unwrap(), 0);
        assert!(
            kv.get(&dedupe_key).await.unwrap().is_some(),
            "too young to sweep"
        );
        assert_eq!(mailbox.gc(T0 + ORPHAN_GRACE_MS).await.unwrap(), 0);
        assert!(
            kv.get(&dedupe_key).await.unwrap().is_none(),
            "orphans are swept"
        );
        assert!(
            kv.get(format!("dispatch.{}", b64("d-dead")))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            kv.get(format!("dispatch.{}", b64("d-retry")))
                .await
                .unwrap()
                .is_some(),
            "a live dispatch keeps its index entry"
        );
        mailbox
            .enqueue(
                dispatch("t4", "r4").with_dedupe_key("key-of-the-dead"),
                T0 + 1,
            )
            .await
            .expect("the swept dedupe key is free");
    }

    /// The thread record is documented wire format: pin its field names.
    #[tokio::test]
    async fn the_thread_record_has_the_documented_shape() {
        let (mailbox, server) = jetstream_fixture().await;
        let queued = mailbox
            .enqueue(dispatch("thread.with dots", "r1").with_priority(3), T0)
            .await
            .unwrap();
        mailbox
            .interrupt(&thread("thread.with dots"), T0)
            .await
            .unwrap();
        let kv = bucket(&server).await;
        let raw = kv
            .get(format!("thread.{}", b64("thread.with dots")))
            .await
            .unwrap()
            .expect("the record is under thread.<b64 id>");
        let record: serde_json::Value = codec::decode(&raw).unwrap();
        assert_eq!(record["epoch"], 1);
        let entry = &record["dispatches"][0];
        assert!(entry["seq"].as_u64().unwrap() > 0);
        assert_eq!(
            entry["dispatch"]["dispatch_id"],
            queued.dispatch_id.as_str()
        );
        assert_eq!(entry["dispatch"]["thread_id"], "thread.with dots");
        assert_eq!(entry["dispatch"]["status"], "superseded");
        assert_eq!(entry["dispatch"]["priority"], 3);
        let index = kv
            .get(format!("dispatch.{}", b64(queued.dispatch_id.as_str())))
            .await
            .unwrap()
            .unwrap();
        let index: IndexEntry = codec::decode(&index).unwrap();
        assert_eq!(index.thread_id, "thread.with dots");
    }
}
