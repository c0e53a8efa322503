//! Threads and their messages: creation, metadata, deletion, listing and message pages.

use super::*;

/// A created thread loads back with its metadata; missing timestamps are stamped.
pub async fn create_and_load_thread<S: ThreadRunStore + ?Sized>(store: &S) {
    let mut thread = Thread::with_id(tid("t-create")).with_title("Trip");
    thread
        .metadata
        .custom
        .insert("tags".into(), json!(["a", "b"]));
    thread.metadata.parent_thread_id = Some(tid("t-parent"));
    store.create_thread(&thread).await.unwrap();

    let loaded = store.load_thread(&thread.id).await.unwrap().unwrap();
    assert_eq!(loaded.id, thread.id);
    assert_eq!(loaded.metadata.title.as_deref(), Some("Trip"));
    assert_eq!(loaded.metadata.custom, thread.metadata.custom);
    assert_eq!(loaded.metadata.parent_thread_id, Some(tid("t-parent")));
    let created = loaded
        .metadata
        .created_at
        .expect("the store stamps created_at");
    assert_eq!(loaded.metadata.updated_at, Some(created));

    let mut dated = Thread::with_id(tid("t-dated"));
    dated.metadata.created_at = Some(5);
    dated.metadata.updated_at = Some(6);
    store.create_thread(&dated).await.unwrap();
    assert_eq!(store.load_thread(&dated.id).await.unwrap(), Some(dated));
}

/// Creating a thread twice is `AlreadyExists`, and the first one is kept.
pub async fn duplicate_thread_is_refused<S: ThreadRunStore + ?Sized>(store: &S) {
    let first = Thread::with_id(tid("t-dup")).with_title("first");
    store.create_thread(&first).await.unwrap();
    let err = store
        .create_thread(&Thread::with_id(tid("t-dup")).with_title("second"))
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists(_)), "{err:?}");
    let kept = store.load_thread(&first.id).await.unwrap().unwrap();
    assert_eq!(kept.metadata.title.as_deref(), Some("first"));

    // A thread created by a checkpoint is a duplicate too.
    store
        .checkpoint(checkpoint(
            &tid("t-implicit"),
            0,
            0,
            vec![],
            run(&tid("t-implicit"), "r1", 1),
        ))
        .await
        .unwrap();
    let err = store
        .create_thread(&Thread::with_id(tid("t-implicit")))
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists(_)), "{err:?}");
}

/// Metadata is replaced, `created_at` kept, `updated_at` stamped; unknown threads are `NotFound`.
pub async fn update_thread_metadata<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-meta");
    store
        .create_thread(&Thread::with_id(id.clone()).with_title("old"))
        .await
        .unwrap();
    let before = store.load_thread(&id).await.unwrap().unwrap();

    let mut metadata = ThreadMetadata {
        title: Some("new".into()),
        ..ThreadMetadata::default()
    };
    metadata.custom.insert("k".into(), json!({"n": 1}));
    store
        .update_thread_metadata(&id, metadata.clone())
        .await
        .unwrap();

    let after = store.load_thread(&id).await.unwrap().unwrap();
    assert_eq!(after.metadata.title.as_deref(), Some("new"));
    assert_eq!(after.metadata.custom, metadata.custom);
    assert_eq!(after.metadata.created_at, before.metadata.created_at);
    assert!(after.metadata.updated_at >= before.metadata.updated_at);

    let err = store
        .update_thread_metadata(&tid("t-missing"), ThreadMetadata::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound(_)), "{err:?}");
}

/// Deleting a thread deletes its messages, runs, state and fence; the id is free again.
pub async fn delete_thread_removes_everything<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-del");
    let keep = tid("t-keep");
    store
        .checkpoint(checkpoint(
            &id,
            3,
            0,
            user_messages("m", 2),
            run(&id, "r-del-1", 1),
        ))
        .await
        .unwrap();
    store.create_run(&run(&id, "r-del-2", 2)).await.unwrap();
    store
        .checkpoint(checkpoint(
            &keep,
            0,
            0,
            user_messages("k", 1),
            run(&keep, "r-keep", 1),
        ))
        .await
        .unwrap();

    store.delete_thread(&id).await.unwrap();

    assert_eq!(store.load_thread(&id).await.unwrap(), None);
    assert_eq!(store.load_thread_snapshot(&id).await.unwrap(), None);
    let err = store
        .load_messages(&id, &MessageQuery::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound(_)), "{err:?}");
    assert_eq!(store.load_run(&rid("r-del-1")).await.unwrap(), None);
    assert_eq!(store.load_run(&rid("r-del-2")).await.unwrap(), None);
    assert_eq!(store.latest_run(&id).await.unwrap(), None);
    let all = store.list_runs(&RunQuery::default()).await.unwrap();
    assert_eq!((run_ids(&all.runs), all.total), (vec!["r-keep"], 1));
    assert_eq!(store.list_threads(0, 10).await.unwrap(), vec![keep.clone()]);
    assert_eq!(messages_of(store, &keep).await.len(), 1, "others untouched");

    let err = store.delete_thread(&id).await.unwrap_err();
    assert!(matches!(err, StorageError::NotFound(_)), "{err:?}");

    // The id, its fence and its run ids start over.
    store
        .checkpoint(checkpoint(
            &id,
            0,
            0,
            user_messages("again", 1),
            run(&id, "r-del-1", 9),
        ))
        .await
        .unwrap();
    let snapshot = store.load_thread_snapshot(&id).await.unwrap().unwrap();
    assert_eq!(snapshot.messages.len(), 1);
    assert_eq!(snapshot.messages[0].text(), "again1");
    assert_eq!(snapshot.fence, FencingToken(0));
    assert_eq!(snapshot.latest_run.unwrap().created_at, 9);
}

/// Threads list in creation order (explicit or implicit), with offset and limit.
pub async fn list_threads_in_creation_order<S: ThreadRunStore + ?Sized>(store: &S) {
    for id in ["c", "a", "b"] {
        store
            .create_thread(&Thread::with_id(tid(id)))
            .await
            .unwrap();
    }
    store
        .checkpoint(checkpoint(
            &tid("d"),
            0,
            0,
            vec![],
            run(&tid("d"), "r-d", 1),
        ))
        .await
        .unwrap();
    store.fence(&tid("e"), FencingToken(1)).await.unwrap();

    let ids = |ids: &[&str]| ids.iter().map(|id| tid(id)).collect::<Vec<_>>();
    assert_eq!(
        store.list_threads(0, 100).await.unwrap(),
        ids(&["c", "a", "b", "d", "e"])
    );
    assert_eq!(store.list_threads(1, 2).await.unwrap(), ids(&["a", "b"]));
    assert_eq!(store.list_threads(4, 10).await.unwrap(), ids(&["e"]));
    assert!(store.list_threads(5, 10).await.unwrap().is_empty());
    assert!(store.list_threads(0, 0).await.unwrap().is_empty());

    store.delete_thread(&tid("a")).await.unwrap();
    assert_eq!(
        store.list_threads(0, 100).await.unwrap(),
        ids(&["c", "b", "d", "e"])
    );
}

/// Summaries carry the message count and the latest run, in creation order.
pub async fn list_thread_summaries<S: ThreadRunStore + ?Sized>(store: &S) {
    let (empty, busy) = (tid("s-empty"), tid("s-busy"));
    store
        .create_thread(&Thread::with_id(empty.clone()).with_title("empty"))
        .await
        .unwrap();
    store
        .checkpoint(checkpoint(
            &busy,
            0,
            0,
            user_messages("m", 2),
            run(&busy, "r-old", 1),
        ))
        .await
        .unwrap();
    store.create_run(&run(&busy, "r-new", 2)).await.unwrap();

    let summaries = store.list_thread_summaries(0, 10).await.unwrap();
    assert_eq!(summaries.len(), 2);
    assert_eq!(summaries[0].thread.id, empty);
    assert_eq!(summaries[0].thread.metadata.title.as_deref(), Some("empty"));
    assert_eq!(summaries[0].message_count, 0);
    assert_eq!(summaries[0].latest_run, None);
    assert_eq!(summaries[1].thread.id, busy);
    assert_eq!(summaries[1].message_count, 2);
    assert_eq!(
        summaries[1].latest_run.as_ref().map(|r| r.run_id.as_str()),
        Some("r-new")
    );

    let page = store.list_thread_summaries(1, 1).await.unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].thread.id, busy);
    assert!(store.list_thread_summaries(2, 1).await.unwrap().is_empty());
}

// ---------------------------------------------------------------------------------
// Messages

/// Pages follow `next_cursor` to the end; `seq` is the 1-based log position.
pub async fn message_pages_follow_the_cursor<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-pages");
    let first = user_messages("a", 3);
    let second = user_messages("b", 4);
    let all: Vec<Message> = first.iter().chain(&second).cloned().collect();
    store
        .checkpoint(checkpoint(&id, 0, 0, first, run(&id, "r1", 1)))
        .await
        .unwrap();
    store
        .checkpoint(checkpoint(&id, 0, 3, second, run(&id, "r1", 1)))
        .await
        .unwrap();

    let page = store
        .load_messages(&id, &query(None, 3, false))
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.next_cursor), (vec![1, 2, 3], Some(3)));
    assert_eq!(page.messages[0].message, all[0]);
    let page = store
        .load_messages(&id, &query(page.next_cursor, 3, false))
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.next_cursor), (vec![4, 5, 6], Some(6)));
    assert_eq!(page.messages[0].message, all[3]);
    let page = store
        .load_messages(&id, &query(page.next_cursor, 3, false))
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.next_cursor), (vec![7], None));
    assert_eq!(page.messages[0].message, all[6]);

    // A page that ends exactly at the end of the log has no next cursor.
    let page = store
        .load_messages(&id, &query(Some(3), 4, false))
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.next_cursor), (vec![4, 5, 6, 7], None));
    let page = store
        .load_messages(&id, &query(Some(7), 3, false))
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.next_cursor), (vec![], None));
    let page = store
        .load_messages(&id, &MessageQuery::default())
        .await
        .unwrap();
    let messages: Vec<Message> = page.messages.into_iter().map(|m| m.message).collect();
    assert_eq!(messages, all);
}

/// `limit` is clamped to `1..=200`.
pub async fn message_limit_is_clamped<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-limit");
    store
        .checkpoint(checkpoint(
            &id,
            0,
            0,
            user_messages("m", 205),
            run(&id, "r1", 1),
        ))
        .await
        .unwrap();

    let page = store
        .load_messages(&id, &query(None, 0, false))
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.next_cursor), (vec![1], Some(1)));
    let page = store
        .load_messages(&id, &query(None, 10_000, false))
        .await
        .unwrap();
    assert_eq!(page.messages.len(), 200);
    assert_eq!(page.next_cursor, Some(200));
    let page = store
        .load_messages(&id, &query(page.next_cursor, 10_000, false))
        .await
        .unwrap();
    assert_eq!(
        (seqs(&page), page.next_cursor),
        (vec![201, 202, 203, 204, 205], None)
    );
}

/// Internal messages are hidden unless `include_internal`; they keep their `seq` and
/// never make a page look unfinished.
pub async fn internal_messages_are_hidden_unless_asked<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-visibility");
    let log = vec![
        Message::user("u1"),
        Message::internal_system("reminder"),
        Message::assistant("a3"),
        Message::internal_system("summary"),
        Message::user("u5"),
        Message::internal_system("trailing"),
    ];
    store
        .checkpoint(checkpoint(&id, 0, 0, log.clone(), run(&id, "r1", 1)))
        .await
        .unwrap();

    let visible = store
        .load_messages(&id, &MessageQuery::default())
        .await
        .unwrap();
    assert_eq!((seqs(&visible), visible.next_cursor), (vec![1, 3, 5], None));
    assert_eq!(visible.messages[1].message, log[2]);

    let all = store
        .load_messages(&id, &query(None, 50, true))
        .await
        .unwrap();
    assert_eq!(seqs(&all), vec![1, 2, 3, 4, 5, 6]);
    assert!(all.messages[1].message.is_internal());

    let page = store
        .load_messages(&id, &query(None, 2, false))
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.next_cursor), (vec![1, 3], Some(3)));
    let page = store
        .load_messages(&id, &query(page.next_cursor, 2, false))
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.next_cursor), (vec![5], None));
    let page = store
        .load_messages(&id, &query(Some(3), 2, true))
        .await
        .unwrap();
    assert_eq!((seqs(&page), page.next_cursor), (vec![4, 5], Some(5)));
}

/// Unknown ids: `Ok(None)` from loads, `NotFound` where the record is needed.
pub async fn unknown_ids<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-nobody");
    assert_eq!(store.load_thread(&id).await.unwrap(), None);
    assert_eq!(store.load_thread_snapshot(&id).await.unwrap(), None);
    assert_eq!(store.latest_run(&id).await.unwrap(), None);
    assert_eq!(store.load_run(&rid("r-nobody")).await.unwrap(), None);
    let runs = store
        .list_runs(&RunQuery {
            thread_id: Some(id.clone()),
            ..RunQuery::default()
        })
        .await
        .unwrap();
    assert_eq!((runs.runs.len(), runs.total), (0, 0));

    let not_found = |result: Result<(), StorageError>| {
        assert!(
            matches!(result, Err(StorageError::NotFound(_))),
            "{result:?}"
        );
    };
    not_found(
        store
            .load_messages(&id, &MessageQuery::default())
            .await
            .map(|_| ()),
    );
    not_found(
        store
            .update_thread_metadata(&id, ThreadMetadata::default())
            .await,
    );
    not_found(store.delete_thread(&id).await.map(drop));
    not_found(store.create_run(&run(&id, "r-orphan", 1)).await);
    assert_eq!(
        store.load_thread(&id).await.unwrap(),
        None,
        "nothing created"
    );
    assert!(store.list_threads(0, 10).await.unwrap().is_empty());
}
