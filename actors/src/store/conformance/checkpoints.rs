//! Checkpoints and fencing: what a checkpoint writes, what it refuses, and the fence.

use super::*;

/// Checkpoints append messages, upsert the run, replace the state, and create the thread.
pub async fn checkpoint_appends_and_creates_the_thread<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-cp");
    let mut record = run(&id, "r1", 100);
    let first = vec![Message::user("question")];
    store
        .checkpoint(checkpoint(&id, 1, 0, first.clone(), record.clone()))
        .await
        .unwrap();

    let thread = store.load_thread(&id).await.unwrap().expect("created");
    assert!(thread.metadata.created_at.is_some());
    let snapshot = store.load_thread_snapshot(&id).await.unwrap().unwrap();
    assert_eq!(snapshot.messages, first);
    assert_eq!(snapshot.state, Some(state(0)));
    assert_eq!(snapshot.latest_run.as_ref(), Some(&record));
    assert_eq!(snapshot.fence, FencingToken(1));

    record.steps = 1;
    record.input_tokens = 12;
    record
        .finish(TerminationReason::NaturalEnd, 101)
        .expect("running can finish");
    let second = vec![Message::assistant("answer"), Message::user("thanks")];
    store
        .checkpoint(checkpoint(&id, 1, 1, second.clone(), record.clone()))
        .await
        .unwrap();

    let expected: Vec<Message> = first.iter().chain(&second).cloned().collect();
    assert_eq!(messages_of(store, &id).await, expected);
    assert_eq!(
        store.load_run(&record.run_id).await.unwrap(),
        Some(record.clone())
    );
    let snapshot = store.load_thread_snapshot(&id).await.unwrap().unwrap();
    assert_eq!(snapshot.state, Some(state(1)), "replaced whole");
    assert_eq!(snapshot.latest_run.unwrap().status, RunStatus::Done);

    // A checkpoint without messages still updates run and state.
    record.steps = 2;
    store
        .checkpoint(checkpoint(&id, 1, 3, vec![], record.clone()))
        .await
        .unwrap();
    let snapshot = store.load_thread_snapshot(&id).await.unwrap().unwrap();
    assert_eq!(snapshot.messages.len(), 3);
    assert_eq!(snapshot.state, Some(state(2)));
    assert_eq!(snapshot.latest_run.unwrap().steps, 2);
}

/// A checkpoint carrying a new thread's metadata creates the thread with it, once:
/// a refused one creates nothing, and a later one cannot overwrite the thread.
pub async fn a_first_checkpoint_writes_its_new_thread<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-new");
    let mut metadata = ThreadMetadata {
        title: Some("made for its run".to_owned()),
        ..ThreadMetadata::default()
    };
    metadata
        .custom
        .insert("tenant".to_owned(), JsonValue::String("acme".to_owned()));
    let record = run(&id, "r-new", 100);
    let with_metadata = |expected, metadata: &ThreadMetadata| Checkpoint {
        new_thread: Some(Box::new(metadata.clone())),
        approvals: Vec::new(),
        ..checkpoint(&id, 1, expected, user_messages("m", 1), record.clone())
    };

    let refused = store.checkpoint(with_metadata(3, &metadata)).await;
    assert!(
        matches!(refused, Err(StorageError::VersionConflict { .. })),
        "{refused:?}"
    );
    assert_eq!(
        store.load_thread(&id).await.unwrap(),
        None,
        "nothing created"
    );

    store.checkpoint(with_metadata(0, &metadata)).await.unwrap();
    let created = store.load_thread(&id).await.unwrap().expect("created");
    assert_eq!(created.metadata.title, metadata.title);
    assert_eq!(created.metadata.custom, metadata.custom);
    assert!(created.metadata.created_at.is_some(), "stamped");
    assert_eq!(created.metadata.updated_at, created.metadata.created_at);

    let other = ThreadMetadata {
        title: Some("another".to_owned()),
        ..ThreadMetadata::default()
    };
    store.checkpoint(with_metadata(1, &other)).await.unwrap();
    assert_eq!(store.load_thread(&id).await.unwrap(), Some(created));
    assert_eq!(messages_of(store, &id).await.len(), 2);
}

/// A refused checkpoint (count, fence, foreign run) changes nothing at all.
pub async fn refused_checkpoint_changes_nothing<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-refuse");
    let mut record = run(&id, "r1", 1);
    record.steps = 1;
    store
        .checkpoint(checkpoint(&id, 2, 0, user_messages("m", 2), record.clone()))
        .await
        .unwrap();
    let before = store.load_thread_snapshot(&id).await.unwrap().unwrap();

    let mut changed = record.clone();
    changed.steps = 7;
    let attempt = |fencing, expected, run: RunRecord| {
        checkpoint(&id, fencing, expected, user_messages("x", 1), run)
    };
    let refusals = [
        (
            attempt(2, 1, changed.clone()),
            StorageError::VersionConflict {
                expected: 1,
                actual: 2,
            },
        ),
        (
            attempt(2, 3, changed.clone()),
            StorageError::VersionConflict {
                expected: 3,
                actual: 2,
            },
        ),
        (
            attempt(1, 2, changed.clone()),
            StorageError::Fenced {
                presented: 1,
                current: 2,
            },
        ),
        // A deposed writer learns it is fenced, whatever else is wrong.
        (
            attempt(1, 0, changed.clone()),
            StorageError::Fenced {
                presented: 1,
                current: 2,
            },
        ),
        (
            attempt(2, 1, run(&id, "r-new", 5)),
            StorageError::VersionConflict {
                expected: 1,
                actual: 2,
            },
        ),
    ];
    for (refused, expected_err) in refusals {
        let err = store.checkpoint(refused).await.unwrap_err();
        assert_eq!(err, expected_err);
        assert_eq!(
            store.load_thread_snapshot(&id).await.unwrap().unwrap(),
            before,
            "refused by {expected_err}"
        );
        assert_eq!(
            store.load_run(&record.run_id).await.unwrap(),
            Some(record.clone())
        );
    }
    assert_eq!(store.load_run(&rid("r-new")).await.unwrap(), None);

    // A run recorded under another thread's id.
    let err = store
        .checkpoint(attempt(2, 2, run(&tid("t-other"), "r-other", 1)))
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::InvalidInput(_)), "{err:?}");
    assert_eq!(store.load_thread(&tid("t-other")).await.unwrap(), None);
    assert_eq!(store.load_run(&rid("r-other")).await.unwrap(), None);

    // A run id another thread owns: refused, and the other thread is not created.
    let thief = tid("t-thief");
    let err = store
        .checkpoint(checkpoint(
            &thief,
            0,
            0,
            user_messages("t", 1),
            run(&thief, "r1", 1),
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists(_)), "{err:?}");
    assert_eq!(store.load_thread(&thief).await.unwrap(), None);
    assert_eq!(
        store.load_run(&record.run_id).await.unwrap(),
        Some(record.clone())
    );

    // A wrong count on an absent thread does not create it.
    let ghost = tid("t-ghost");
    let err = store
        .checkpoint(checkpoint(
            &ghost,
            0,
            5,
            user_messages("g", 1),
            run(&ghost, "r-g", 1),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StorageError::VersionConflict {
            expected: 5,
            actual: 0
        }
    );
    assert_eq!(store.load_thread(&ghost).await.unwrap(), None);
    assert_eq!(store.load_run(&rid("r-g")).await.unwrap(), None);
    assert_eq!(store.list_threads(0, 10).await.unwrap(), vec![id.clone()]);
    assert_eq!(
        store.load_thread_snapshot(&id).await.unwrap().unwrap(),
        before
    );
}

/// Higher and equal tokens are accepted and become current; lower ones are `Fenced`.
pub async fn fencing_rules<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-fence");
    let record = run(&id, "r1", 1);
    let write = |fencing: u64, expected: u64| {
        let cp = checkpoint(
            &id,
            fencing,
            expected,
            user_messages("m", 1),
            record.clone(),
        );
        store.checkpoint(cp)
    };
    let fence = |token: u64| store.fence(&id, FencingToken(token));
    let fenced = |presented, current| Err(StorageError::Fenced { presented, current });
    let current = || async {
        store
            .load_thread_snapshot(&id)
            .await
            .unwrap()
            .unwrap()
            .fence
    };

    write(3, 0).await.unwrap();
    assert_eq!(current().await, FencingToken(3));
    write(3, 1).await.expect("an equal token is accepted");

    // The new owner fences the thread: the old owner's writes are refused from now on.
    fence(7).await.unwrap();
    assert_eq!(current().await, FencingToken(7));
    assert_eq!(write(3, 2).await.map(drop), fenced(3, 7));
    assert_eq!(fence(6).await, fenced(6, 7));
    fence(7).await.expect("an equal token is accepted");
    assert_eq!(current().await, FencingToken(7));

    // A checkpoint with a higher token raises the fence itself.
    write(8, 2).await.unwrap();
    assert_eq!(current().await, FencingToken(8));
    assert_eq!(write(7, 3).await.map(drop), fenced(7, 8));
    assert_eq!(fence(7).await, fenced(7, 8));
    assert_eq!(messages_of(store, &id).await.len(), 3);
}

/// `fence_and_load` raises the fence, then reads: a new thread exists (empty),
/// a known one comes whole with the raised fence, a lower token is refused and
/// changes nothing, and the old owner's writes are refused afterwards.
pub async fn fence_and_load_reads_after_the_fence<S: ThreadRunStore + ?Sized>(store: &S) {
    let fresh = tid("t-fenced-load-new");
    let snapshot = store
        .fence_and_load(&fresh, FencingToken(3))
        .await
        .unwrap()
        .expect("a fenced thread exists");
    assert_eq!(snapshot.thread.id, fresh);
    assert!(snapshot.messages.is_empty());
    assert_eq!(snapshot.fence, FencingToken(3));

    let id = tid("t-fenced-load");
    let first = run(&id, "r1", 1);
    store
        .checkpoint(checkpoint(&id, 1, 0, user_messages("m", 2), first.clone()))
        .await
        .unwrap();
    let snapshot = store
        .fence_and_load(&id, FencingToken(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(snapshot.fence, FencingToken(5));
    assert_eq!(snapshot.messages.len(), 2);
    assert_eq!(
        snapshot.latest_run.map(|r| r.run_id),
        Some(first.run_id.clone())
    );
    assert_eq!(snapshot.state, Some(state(u64::from(first.steps))));

    let refused = store.fence_and_load(&id, FencingToken(4)).await;
    assert_eq!(
        refused.unwrap_err(),
        StorageError::Fenced {
            presented: 4,
            current: 5
        }
    );
    let old_owner = store
        .checkpoint(checkpoint(&id, 1, 2, user_messages("late", 1), first))
        .await;
    assert_eq!(
        old_owner.unwrap_err(),
        StorageError::Fenced {
            presented: 1,
            current: 5
        }
    );
    let after = store.load_thread_snapshot(&id).await.unwrap().unwrap();
    assert_eq!((after.fence, after.messages.len()), (FencingToken(5), 2));
}

/// Fencing a thread that does not exist yet creates it empty, and the fence holds.
pub async fn fence_on_unknown_thread_holds<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-fence-new");
    store.fence(&id, FencingToken(5)).await.unwrap();
    let snapshot = store.load_thread_snapshot(&id).await.unwrap().unwrap();
    assert_eq!(snapshot.thread.id, id);
    assert!(snapshot.messages.is_empty());
    assert_eq!(snapshot.state, None);
    assert_eq!(snapshot.latest_run, None);
    assert_eq!(snapshot.fence, FencingToken(5));

    let err = store
        .checkpoint(checkpoint(
            &id,
            4,
            0,
            user_messages("m", 1),
            run(&id, "r1", 1),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StorageError::Fenced {
            presented: 4,
            current: 5
        }
    );
    store
        .checkpoint(checkpoint(
            &id,
            5,
            0,
            user_messages("m", 1),
            run(&id, "r1", 1),
        ))
        .await
        .unwrap();
    assert_eq!(messages_of(store, &id).await.len(), 1);
}
