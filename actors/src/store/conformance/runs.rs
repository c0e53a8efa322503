//! Runs, snapshots, odd ids, and writers racing on one store.

use super::*;

/// Runs are created once, load back, and the latest is by `created_at` then run id.
pub async fn runs_create_load_latest<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-runs");
    let other = tid("t-runs-other");
    let err = store.create_run(&run(&id, "r-b", 10)).await.unwrap_err();
    assert!(matches!(err, StorageError::NotFound(_)), "{err:?}");

    store
        .create_thread(&Thread::with_id(id.clone()))
        .await
        .unwrap();
    store
        .create_thread(&Thread::with_id(other.clone()))
        .await
        .unwrap();
    let b = run(&id, "r-b", 10);
    store.create_run(&b).await.unwrap();
    assert_eq!(store.load_run(&b.run_id).await.unwrap(), Some(b.clone()));
    let err = store.create_run(&b).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists(_)), "{err:?}");
    let err = store.create_run(&run(&other, "r-b", 10)).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists(_)), "{err:?}");

    store.create_run(&run(&id, "r-a", 10)).await.unwrap();
    store.create_run(&run(&id, "r-c", 5)).await.unwrap();
    let latest = store.latest_run(&id).await.unwrap().unwrap();
    assert_eq!(latest.run_id, rid("r-b"), "same second: the greater run id");
    assert_eq!(store.latest_run(&other).await.unwrap(), None);

    let d = run(&id, "r-d", 20);
    store.create_run(&d).await.unwrap();
    assert_eq!(store.latest_run(&id).await.unwrap(), Some(d.clone()));

    // The latest run moved back in time: the next one takes over.
    let mut earlier = d.clone();
    earlier.created_at = 1;
    store
        .checkpoint(checkpoint(&id, 0, 0, vec![], earlier.clone()))
        .await
        .unwrap();
    assert_eq!(
        store.latest_run(&id).await.unwrap().unwrap().run_id,
        rid("r-b")
    );
    assert_eq!(store.load_run(&d.run_id).await.unwrap(), Some(earlier));
}

/// A thread's unfinished run is its latest, whatever its `created_at` and id: a
/// run the thread took after another within the same second may have the smaller
/// id, and a node taking the thread over must continue that one.
pub async fn an_unfinished_run_is_the_latest<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-unfinished");
    let mut before = run(&id, "r-z", 10);
    before.status = RunStatus::Done;
    store
        .checkpoint(checkpoint(&id, 0, 0, user_messages("z", 1), before.clone()))
        .await
        .unwrap();
    let after = run(&id, "r-a", 10);
    store
        .checkpoint(checkpoint(&id, 0, 1, user_messages("a", 1), after.clone()))
        .await
        .unwrap();

    assert_eq!(store.latest_run(&id).await.unwrap(), Some(after.clone()));
    let snapshot = store.load_thread_snapshot(&id).await.unwrap().unwrap();
    assert_eq!(snapshot.latest_run, Some(after.clone()));
    let summaries = store.list_thread_summaries(0, 10).await.unwrap();
    assert_eq!(summaries[0].latest_run, Some(after.clone()));

    // Once it ends, the order by `created_at` and id holds again.
    let mut ended = after;
    ended.status = RunStatus::Done;
    store
        .checkpoint(checkpoint(&id, 0, 2, vec![], ended))
        .await
        .unwrap();
    assert_eq!(store.latest_run(&id).await.unwrap(), Some(before));
}

/// Runs list by `created_at` then id, filtered by thread and status, paged, with a total.
pub async fn list_runs_filters_and_pages<S: ThreadRunStore + ?Sized>(store: &S) {
    let (t1, t2) = (tid("t1"), tid("t2"));
    store
        .create_thread(&Thread::with_id(t1.clone()))
        .await
        .unwrap();
    store
        .create_thread(&Thread::with_id(t2.clone()))
        .await
        .unwrap();
    let runs = [
        (&t1, "r01", 1, RunStatus::Running),
        (&t1, "r02", 2, RunStatus::Done),
        (&t1, "r03", 3, RunStatus::Waiting),
        (&t1, "r04", 4, RunStatus::Done),
        (&t2, "r05", 1, RunStatus::Done),
        (&t2, "r06", 5, RunStatus::Running),
    ];
    for (thread, id, created_at, status) in runs {
        let mut record = run(thread, id, created_at);
        record.status = status;
        if id == "r03" || id == "r05" {
            record.agent_id = AgentId::new("other").unwrap();
        }
        store.create_run(&record).await.unwrap();
    }

    let list = |thread_id: Option<&ThreadId>, status, offset, limit| {
        let query = RunQuery {
            thread_id: thread_id.cloned(),
            status,
            offset,
            limit,
            ..RunQuery::default()
        };
        async move {
            let page = store.list_runs(&query).await.unwrap();
            let ids: Vec<String> = page.runs.iter().map(|r| r.run_id.to_string()).collect();
            (ids, page.total)
        }
    };
    let expect = |ids: &[&str], total: usize| {
        (
            ids.iter().map(|id| id.to_string()).collect::<Vec<_>>(),
            total,
        )
    };

    assert_eq!(
        list(None, None, 0, 50).await,
        expect(&["r01", "r05", "r02", "r03", "r04", "r06"], 6)
    );
    assert_eq!(
        list(Some(&t1), None, 0, 50).await,
        expect(&["r01", "r02", "r03", "r04"], 4)
    );
    assert_eq!(
        list(None, Some(RunStatus::Done), 0, 50).await,
        expect(&["r05", "r02", "r04"], 3)
    );
    assert_eq!(
        list(Some(&t1), Some(RunStatus::Done), 0, 50).await,
        expect(&["r02", "r04"], 2)
    );
    assert_eq!(
        list(Some(&t2), Some(RunStatus::Waiting), 0, 50).await,
        expect(&[], 0)
    );
    assert_eq!(list(None, None, 1, 2).await, expect(&["r05", "r02"], 6));
    assert_eq!(list(None, None, 10, 2).await, expect(&[], 6));
    assert_eq!(
        list(None, None, 0, 0).await,
        expect(&["r01"], 6),
        "limit 0 → 1"
    );
    assert_eq!(
        list(Some(&tid("t-none")), None, 0, 50).await,
        expect(&[], 0)
    );

    let of_agent = |agent: &str, thread_id: Option<&ThreadId>| {
        let query = RunQuery {
            thread_id: thread_id.cloned(),
            agent_id: Some(AgentId::new(agent).unwrap()),
            ..RunQuery::default()
        };
        async move {
            let page = store.list_runs(&query).await.unwrap();
            let ids: Vec<String> = page.runs.iter().map(|r| r.run_id.to_string()).collect();
            (ids, page.total)
        }
    };
    assert_eq!(of_agent("other", None).await, expect(&["r05", "r03"], 2));
    assert_eq!(of_agent("other", Some(&t1)).await, expect(&["r03"], 1));
    assert_eq!(
        of_agent("agent", None).await,
        expect(&["r01", "r02", "r04", "r06"], 4)
    );
    assert_eq!(of_agent("nobody", None).await, expect(&[], 0));
}

/// A snapshot holds the thread, the whole log, the state, the latest run and the fence.
pub async fn snapshot_is_complete<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-snap");
    store
        .create_thread(&Thread::with_id(id.clone()).with_title("snap"))
        .await
        .unwrap();
    store.fence(&id, FencingToken(4)).await.unwrap();
    let log = vec![
        Message::user("hi"),
        Message::internal_system("note"),
        Message::assistant("hello"),
    ];
    let mut first = run(&id, "r1", 1);
    first.steps = 3;
    store
        .checkpoint(checkpoint(&id, 4, 0, log.clone(), first))
        .await
        .unwrap();
    let second = run(&id, "r2", 2);
    store.create_run(&second).await.unwrap();

    let snapshot = store.load_thread_snapshot(&id).await.unwrap().unwrap();
    assert_eq!(snapshot.thread.id, id);
    assert_eq!(snapshot.thread.metadata.title.as_deref(), Some("snap"));
    assert_eq!(snapshot.messages, log);
    assert_eq!(snapshot.state, Some(state(3)));
    assert_eq!(snapshot.latest_run, Some(second));
    assert_eq!(snapshot.fence, FencingToken(4));
    assert_eq!(Some(snapshot.thread), store.load_thread(&id).await.unwrap());
}

/// Ids with spaces, unicode and punctuation work everywhere.
pub async fn odd_ids_round_trip<S: ThreadRunStore + ?Sized>(store: &S) {
    let odd = [
        ("thread with spaces ✓ ünïcødé 🚀", "run ☃ 1"),
        ("スレッド", "実行"),
        ("quote'and\"double;--", "%20 & <run>"),
        ("-dash:colon@at", "UPPER lower"),
    ];
    for (thread, run_id) in odd {
        let id = tid(thread);
        let mut message = Message::user(format!("hello {thread}"));
        message.id = MessageId::new(format!("msg {run_id} ✓")).unwrap();
        store
            .create_thread(&Thread::with_id(id.clone()).with_title(thread))
            .await
            .unwrap();
        let record = run(&id, run_id, 1);
        store
            .checkpoint(checkpoint(&id, 0, 0, vec![message.clone()], record.clone()))
            .await
            .unwrap();

        let loaded = store.load_thread(&id).await.unwrap().unwrap();
        assert_eq!(loaded.metadata.title.as_deref(), Some(thread));
        assert_eq!(messages_of(store, &id).await, vec![message.clone()]);
        assert_eq!(
            store.load_run(&rid(run_id)).await.unwrap(),
            Some(record.clone())
        );
        assert_eq!(store.latest_run(&id).await.unwrap(), Some(record.clone()));
        let runs = store
            .list_runs(&RunQuery {
                thread_id: Some(id.clone()),
                ..RunQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(runs.runs, vec![record.clone()]);
        let snapshot = store.load_thread_snapshot(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.messages, vec![message]);
    }
    let listed: BTreeSet<ThreadId> = store
        .list_threads(0, 10)
        .await
        .unwrap()
        .into_iter()
        .collect();
    let expected: BTreeSet<ThreadId> = odd.iter().map(|(thread, _)| tid(thread)).collect();
    assert_eq!(listed, expected);
    for (thread, run_id) in odd {
        store.delete_thread(&tid(thread)).await.unwrap();
        assert_eq!(store.load_run(&rid(run_id)).await.unwrap(), None);
    }
    assert!(store.list_threads(0, 10).await.unwrap().is_empty());
}

/// Two writers checkpointing one thread with the same expected count: exactly one wins.
pub async fn concurrent_checkpoints_one_wins<S: ThreadRunStore>(store: Arc<S>) {
    for round in 0..20 {
        let id = tid(&format!("t-race-{round}"));
        if round % 2 == 1 {
            // Odd rounds race on an existing thread, even rounds on creating it.
            store
                .create_thread(&Thread::with_id(id.clone()))
                .await
                .unwrap();
        }
        let writer = |name: &str| {
            let store = Arc::clone(&store);
            let cp = checkpoint(
                &id,
                1,
                0,
                vec![Message::user(name)],
                run(&id, &format!("r-{name}-{round}"), 1),
            );
            tokio::spawn(async move { store.checkpoint(cp).await })
        };
        let (a, b) = (writer("a"), writer("b"));
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        let (winner, loser_err) = match (&a, &b) {
            (Ok(_), Err(err)) => ("a", err.clone()),
            (Err(err), Ok(_)) => ("b", err.clone()),
            _ => panic!("round {round}: exactly one writer must win, got {a:?} and {b:?}"),
        };
        assert_eq!(
            loser_err,
            StorageError::VersionConflict {
                expected: 0,
                actual: 1
            }
        );
        let messages = messages_of(&*store, &id).await;
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].text(), winner);
        let loser = if winner == "a" { "b" } else { "a" };
        assert_eq!(
            store
                .load_run(&rid(&format!("r-{loser}-{round}")))
                .await
                .unwrap(),
            None
        );
    }
}

/// A snapshot read while checkpoints land shows one moment: its messages, state and
/// latest run are those of the same checkpoint.
pub async fn a_snapshot_is_one_moment<S: ThreadRunStore>(store: Arc<S>) {
    const CHECKPOINTS: u32 = 40;
    let id = tid("t-moment");
    let writer = {
        let store = Arc::clone(&store);
        let id = id.clone();
        tokio::spawn(async move {
            for step in 1..=CHECKPOINTS {
                let mut record = run(&id, "r-moment", 1);
                record.steps = step;
                let cp = checkpoint(
                    &id,
                    0,
                    u64::from(step - 1),
                    user_messages(&format!("s{step}-"), 1),
                    record,
                );
                store.checkpoint(cp).await.unwrap();
            }
        })
    };
    let mut seen = 0;
    while seen < CHECKPOINTS {
        let Some(snapshot) = store.load_thread_snapshot(&id).await.unwrap() else {
            continue;
        };
        let steps = snapshot.latest_run.as_ref().map_or(0, |run| run.steps);
        assert_eq!(
            snapshot.messages.len(),
            steps as usize,
            "messages of another moment"
        );
        assert_eq!(
            snapshot.state,
            Some(state(u64::from(steps))),
            "state of another moment"
        );
        seen = steps;
    }
    writer.await.unwrap();
}
