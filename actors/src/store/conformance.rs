//! The rules every [`ThreadRunStore`] and [`ProfileStore`] must follow, as async test
//! functions, and macros that turn them into `#[tokio::test]`s for one store.
//!
//! Each function checks one rule against a fresh, empty store. To run the whole suite
//! against a store of your own, write a fixture (an async expression giving the store
//! and a guard that cleans up when dropped) and invoke the macros in a test module:
//!
//! ```ignore
//! mod my_store {
//!     awaken_actors::thread_run_store_conformance!(my_fixture());
//!     awaken_actors::profile_store_conformance!(my_fixture());
//! }
//! ```
//!
//! The test crate needs `tokio` with the `macros` and `rt-multi-thread` features.

// Test code: a failed expectation is a panic with a message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use super::{
    Checkpoint, FencingToken, FileStore, InMemoryStore, MessagePage, MessageQuery, RunQuery,
    ThreadRunStore, Webhook, WebhookAdvance, WebhookClaim,
};
use crate::JsonValue;
use crate::contract::{
    Message, RunIdentity, RunOrigin, RunRecord, RunStatus, TerminationReason, Thread,
    ThreadMetadata,
};
use crate::error::StorageError;
use crate::ids::{AgentId, MessageId, RunId, ThreadId, WebhookId};
use crate::state::{PersistedState, ProfileStore};

/// Generates one `#[tokio::test]` per [`ThreadRunStore`] rule, each on a store made by
/// `$fixture` (an async expression giving `(store, guard)`).
#[macro_export]
macro_rules! thread_run_store_conformance {
    ($fixture:expr) => {
        $crate::thread_run_store_conformance!(@each $fixture;
            create_and_load_thread,
            duplicate_thread_is_refused,
            update_thread_metadata,
            delete_thread_removes_everything,
            list_threads_in_creation_order,
            list_thread_summaries,
            message_pages_follow_the_cursor,
            message_limit_is_clamped,
            internal_messages_are_hidden_unless_asked,
            unknown_ids,
            checkpoint_appends_and_creates_the_thread,
            a_first_checkpoint_writes_its_new_thread,
            refused_checkpoint_changes_nothing,
            fencing_rules,
            fence_on_unknown_thread_holds,
            fence_and_load_reads_after_the_fence,
            runs_create_load_latest,
            an_unfinished_run_is_the_latest,
            list_runs_filters_and_pages,
            snapshot_is_complete,
            odd_ids_round_trip,
            webhook_put_and_load,
            webhook_put_again_replaces_the_config,
            webhook_max_per_run_refuses_new_ones_only,
            webhook_delete,
            webhook_claims_follow_the_leases,
            webhook_advance_needs_the_lease,
            webhook_done_and_handed_back,
            webhook_delete_thread_deletes_the_threads_webhooks,
            webhook_debug_leaves_the_config_out
        );

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn concurrent_checkpoints_one_wins() {
            let (store, _guard) = $fixture.await;
            $crate::store::conformance::concurrent_checkpoints_one_wins(::std::sync::Arc::new(
                store,
            ))
            .await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_snapshot_is_one_moment() {
            let (store, _guard) = $fixture.await;
            $crate::store::conformance::a_snapshot_is_one_moment(::std::sync::Arc::new(store))
                .await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn webhook_concurrent_claims_lease_each_once() {
            let (store, _guard) = $fixture.await;
            $crate::store::conformance::webhook_concurrent_claims_lease_each_once(
                ::std::sync::Arc::new(store),
            )
            .await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn webhook_concurrent_puts_respect_the_max() {
            let (store, _guard) = $fixture.await;
            $crate::store::conformance::webhook_concurrent_puts_respect_the_max(
                ::std::sync::Arc::new(store),
            )
            .await;
        }
    };
    (@each $fixture:expr; $($rule:ident),* $(,)?) => {
        $(
            #[::tokio::test]
            async fn $rule() {
                let (store, _guard) = $fixture.await;
                $crate::store::conformance::$rule(&store).await;
            }
        )*
    };
}

/// Generates one `#[tokio::test]` per [`ProfileStore`] rule, each on a store made by
/// `$fixture` (an async expression giving `(store, guard)`).
#[macro_export]
macro_rules! profile_store_conformance {
    ($fixture:expr) => {
        $crate::profile_store_conformance!(@each $fixture;
            profile_get_put_delete,
            profile_odd_keys_round_trip
        );
    };
    (@each $fixture:expr; $($rule:ident),* $(,)?) => {
        $(
            #[::tokio::test]
            async fn $rule() {
                let (store, _guard) = $fixture.await;
                $crate::store::conformance::$rule(&store).await;
            }
        )*
    };
}

// ---------------------------------------------------------------------------------
// Fixtures

/// A fresh [`InMemoryStore`]; it needs no cleanup.
pub async fn memory_fixture() -> (InMemoryStore, ()) {
    (InMemoryStore::new(), ())
}

/// A fresh [`FileStore`] in a new temporary directory, removed when the guard drops.
pub async fn file_fixture() -> (FileStore, TempDir) {
    let dir = TempDir::new();
    let store = FileStore::open(dir.path()).await.unwrap();
    (store, dir)
}

/// A fresh [`PostgresStore`](super::PostgresStore) in its own schema, dropped with the guard.
///
/// # Panics
/// When PostgreSQL is unreachable (see [`PostgresStore::for_tests`](super::PostgresStore::for_tests)).
#[cfg(feature = "postgres")]
pub async fn postgres_fixture() -> (super::PostgresStore, super::TestSchema) {
    super::PostgresStore::for_tests().await
}

/// A fresh [`PostgresStore`](super::PostgresStore) on tables an earlier version
/// created, in its own schema, dropped with the guard.
///
/// # Panics
/// When PostgreSQL is unreachable (see [`PostgresStore::for_tests`](super::PostgresStore::for_tests)).
#[cfg(feature = "postgres")]
pub async fn postgres_earlier_tables_fixture() -> (super::PostgresStore, super::TestSchema) {
    super::PostgresStore::for_tests_on_earlier_tables().await
}

/// A directory under the system's temporary directory, removed with its contents on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a new, empty directory.
    pub fn new() -> Self {
        let path =
            std::env::temp_dir().join(format!("awaken-store-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

// ---------------------------------------------------------------------------------
// Builders

/// A thread id from a literal.
pub fn tid(id: &str) -> ThreadId {
    ThreadId::new(id).unwrap()
}

/// A run id from a literal.
pub fn rid(id: &str) -> RunId {
    RunId::new(id).unwrap()
}

/// A `Running` run of `thread` created at `created_at` (unix seconds).
pub fn run(thread: &ThreadId, run: &str, created_at: u64) -> RunRecord {
    let identity = RunIdentity::new(
        thread.clone(),
        rid(run),
        AgentId::new("agent").unwrap(),
        RunOrigin::User,
    );
    RunRecord::new(&identity, created_at)
}

/// A persisted state with one key whose value is `revision`.
pub fn state(revision: u64) -> PersistedState {
    let mut state = PersistedState {
        revision,
        ..PersistedState::default()
    };
    state.extensions.insert(
        format!("key.{revision}"),
        json!({"revision": revision}).into(),
    );
    state
}

/// A checkpoint of `thread` writing `messages`, `run` and `state(run.steps)`.
pub fn checkpoint(
    thread: &ThreadId,
    fencing: u64,
    expected_message_count: u64,
    new_messages: Vec<Message>,
    run: RunRecord,
) -> Checkpoint {
    Checkpoint {
        thread_id: thread.clone(),
        fencing: FencingToken(fencing),
        expected_message_count,
        new_messages,
        state: state(u64::from(run.steps)),
        run,
        new_thread: None,
    }
}

/// `count` user messages with texts `"{prefix}{i}"`.
pub fn user_messages(prefix: &str, count: usize) -> Vec<Message> {
    (1..=count)
        .map(|i| Message::user(format!("{prefix}{i}")))
        .collect()
}

fn seqs(page: &MessagePage) -> Vec<u64> {
    page.messages.iter().map(|m| m.seq).collect()
}

fn query(cursor: Option<u64>, limit: usize, include_internal: bool) -> MessageQuery {
    MessageQuery {
        cursor,
        limit,
        include_internal,
    }
}

fn run_ids(runs: &[RunRecord]) -> Vec<&str> {
    runs.iter().map(|run| run.run_id.as_str()).collect()
}

async fn messages_of<S: ThreadRunStore + ?Sized>(store: &S, id: &ThreadId) -> Vec<Message> {
    let page = store
        .load_messages(id, &query(None, 200, true))
        .await
        .unwrap();
    page.messages.into_iter().map(|m| m.message).collect()
}

// ---------------------------------------------------------------------------------
// Threads

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
    not_found(store.delete_thread(&id).await);
    not_found(store.create_run(&run(&id, "r-orphan", 1)).await);
    assert_eq!(
        store.load_thread(&id).await.unwrap(),
        None,
        "nothing created"
    );
    assert!(store.list_threads(0, 10).await.unwrap().is_empty());
}

// ---------------------------------------------------------------------------------
// Checkpoints and fencing

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
    assert_eq!(write(3, 2).await, fenced(3, 7));
    assert_eq!(fence(6).await, fenced(6, 7));
    fence(7).await.expect("an equal token is accepted");
    assert_eq!(current().await, FencingToken(7));

    // A checkpoint with a higher token raises the fence itself.
    write(8, 2).await.unwrap();
    assert_eq!(current().await, FencingToken(8));
    assert_eq!(write(7, 3).await, fenced(7, 8));
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

// ---------------------------------------------------------------------------------
// Runs

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
            (Ok(()), Err(err)) => ("a", err.clone()),
            (Err(err), Ok(())) => ("b", err.clone()),
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

// ---------------------------------------------------------------------------------
// Webhooks

/// The secret every [`webhook`]'s config carries; it must never reach a `Debug` output.
pub const WEBHOOK_TOKEN: &str = "webhook-secret-7f3a9c";

/// A webhook id from a literal.
pub fn wid(id: &str) -> WebhookId {
    WebhookId::new(id).unwrap()
}

/// A new webhook `id` on run `run` of `thread`, stored at `created_at`; its config
/// names a receiver and carries [`WEBHOOK_TOKEN`].
pub fn webhook(thread: &ThreadId, run: &str, id: &str, created_at: u64) -> Webhook {
    Webhook {
        run_id: rid(run),
        thread_id: thread.clone(),
        id: wid(id),
        config: json!({
            "url": format!("https://receiver.example/{id}"),
            "token": WEBHOOK_TOKEN,
        }),
        progress: JsonValue::Null,
        done: false,
        dead_letters: Vec::new(),
        created_at,
    }
}

/// A claim by `holder` at `now_ms` until `until_ms`, of up to 100 webhooks of any run.
fn claim_by(holder: &str, now_ms: u64, until_ms: u64) -> WebhookClaim {
    WebhookClaim {
        holder: holder.to_owned(),
        now_ms,
        until_ms,
        limit: 100,
        run_id: None,
    }
}

/// An advance recording `progress`, not done, without a dead letter.
fn progress_until(progress: JsonValue, lease_until_ms: u64) -> WebhookAdvance {
    WebhookAdvance {
        progress,
        done: false,
        dead_letter: None,
        lease_until_ms,
    }
}

/// `run/id` of each webhook, in order.
fn hook_keys(webhooks: &[Webhook]) -> Vec<String> {
    webhooks
        .iter()
        .map(|webhook| format!("{}/{}", webhook.run_id, webhook.id))
        .collect()
}

async fn claimed_keys<S: ThreadRunStore + ?Sized>(store: &S, claim: &WebhookClaim) -> Vec<String> {
    hook_keys(&store.webhooks().claim_webhooks(claim).await.unwrap())
}

/// A put webhook loads back whole; a run's webhooks list oldest first, ties by
/// id; a run without any has none; neither run nor thread needs to exist.
pub async fn webhook_put_and_load<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    assert!(
        hooks
            .load_webhooks(&rid("r-none"))
            .await
            .unwrap()
            .is_empty()
    );

    let mut first = webhook(&thread, "r1", "b", 20);
    first.config["nested"] = json!({"list": [1, "two", null], "ü": true});
    let stored = hooks.put_webhook(first.clone(), 10).await.unwrap();
    assert_eq!(stored, first);
    for (run, id, created_at) in [("r1", "a", 20), ("r1", "c", 10), ("r2", "z", 5)] {
        hooks
            .put_webhook(webhook(&thread, run, id, created_at), 10)
            .await
            .unwrap();
    }

    let loaded = hooks.load_webhooks(&rid("r1")).await.unwrap();
    assert_eq!(hook_keys(&loaded), ["r1/c", "r1/a", "r1/b"]);
    assert_eq!(loaded[2], first, "config, progress and all round-trip");
    assert_eq!(loaded[0], webhook(&thread, "r1", "c", 10));
    assert_eq!(
        hook_keys(&hooks.load_webhooks(&rid("r2")).await.unwrap()),
        ["r2/z"]
    );
    assert_eq!(store.load_thread(&thread).await.unwrap(), None);
    assert_eq!(store.load_run(&rid("r1")).await.unwrap(), None);
}

/// Putting a webhook id the run has already replaces its config only: progress,
/// dead letters, creation time and lease are kept, and a done webhook is
/// delivered to again.
pub async fn webhook_put_again_replaces_the_config<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    let (run, id) = (rid("r1"), wid("w"));
    hooks
        .put_webhook(webhook(&thread, "r1", "w", 10), 10)
        .await
        .unwrap();
    assert_eq!(
        claimed_keys(store, &claim_by("n1", 100, 1_000)).await,
        ["r1/w"]
    );
    let finished = WebhookAdvance {
        progress: json!({"sent": 3}),
        done: true,
        dead_letter: Some(json!({"status": "lost"})),
        lease_until_ms: 1_000,
    };
    assert!(
        hooks
            .advance_webhook(&run, &id, "n1", &finished)
            .await
            .unwrap()
    );

    let mut again = webhook(&thread, "r1", "w", 99);
    again.config = json!({"url": "https://receiver.example/new"});
    again.progress = json!("ignored");
    again.done = true;
    again.dead_letters = vec![json!("ignored")];
    let stored = hooks.put_webhook(again, 10).await.unwrap();

    let mut expected = webhook(&thread, "r1", "w", 10);
    expected.config = json!({"url": "https://receiver.example/new"});
    expected.progress = json!({"sent": 3});
    expected.dead_letters = vec![json!({"status": "lost"})];
    assert_eq!(stored, expected);
    assert_eq!(hooks.load_webhooks(&run).await.unwrap(), vec![expected]);
    // The lease is n1's still, until 1000.
    assert!(
        claimed_keys(store, &claim_by("n2", 500, 2_000))
            .await
            .is_empty()
    );
    assert!(
        hooks
            .advance_webhook(&run, &id, "n1", &progress_until(json!({"sent": 4}), 1_000))
            .await
            .unwrap()
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n2", 1_000, 2_000)).await,
        ["r1/w"]
    );
}

/// A new webhook beyond `max_per_run` is `InvalidInput` and changes nothing;
/// replacing one of a run at the most is fine, and other runs count on their own.
pub async fn webhook_max_per_run_refuses_new_ones_only<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    let run = rid("r1");
    for (id, created_at) in [("w1", 1), ("w2", 2)] {
        hooks
            .put_webhook(webhook(&thread, "r1", id, created_at), 2)
            .await
            .unwrap();
    }
    let before = hooks.load_webhooks(&run).await.unwrap();

    let err = hooks
        .put_webhook(webhook(&thread, "r1", "w3", 3), 2)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::InvalidInput(_)), "{err:?}");
    assert_eq!(hooks.load_webhooks(&run).await.unwrap(), before);

    let mut replaced = webhook(&thread, "r1", "w1", 1);
    replaced.config = json!({"url": "https://receiver.example/moved"});
    hooks.put_webhook(replaced.clone(), 2).await.unwrap();
    assert_eq!(hooks.load_webhooks(&run).await.unwrap()[0], replaced);

    hooks
        .put_webhook(webhook(&thread, "r2", "w3", 3), 2)
        .await
        .expect("another run has its own count");
    let err = hooks
        .put_webhook(webhook(&thread, "r3", "w1", 1), 0)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::InvalidInput(_)), "{err:?}");
    assert!(hooks.load_webhooks(&rid("r3")).await.unwrap().is_empty());
}

/// Deleting a webhook is `true` once, then `false`; a deleted webhook is not claimed.
pub async fn webhook_delete<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    let run = rid("r1");
    for (id, created_at) in [("w1", 1), ("w2", 2)] {
        hooks
            .put_webhook(webhook(&thread, "r1", id, created_at), 10)
            .await
            .unwrap();
    }
    assert!(hooks.delete_webhook(&run, &wid("w1")).await.unwrap());
    assert!(!hooks.delete_webhook(&run, &wid("w1")).await.unwrap());
    assert!(
        !hooks
            .delete_webhook(&rid("r-none"), &wid("w2"))
            .await
            .unwrap()
    );
    assert_eq!(
        hook_keys(&hooks.load_webhooks(&run).await.unwrap()),
        ["r1/w2"]
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n1", 1, 100)).await,
        ["r1/w2"]
    );

    assert!(hooks.delete_webhook(&run, &wid("w2")).await.unwrap());
    assert!(hooks.load_webhooks(&run).await.unwrap().is_empty());
    assert!(
        claimed_keys(store, &claim_by("n2", 1_000, 2_000))
            .await
            .is_empty()
    );
}

/// A claim leases, oldest first and up to its limit, the webhooks not done whose
/// lease ended, whoever held it; a live lease, even the claiming holder's own, is
/// left alone; a claim for one run takes only that run's.
pub async fn webhook_claims_follow_the_leases<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    for (run, id, created_at) in [("r1", "b", 2), ("r2", "c", 3), ("r1", "a", 1)] {
        hooks
            .put_webhook(webhook(&thread, run, id, created_at), 10)
            .await
            .unwrap();
    }
    let limited = WebhookClaim {
        limit: 2,
        ..claim_by("n1", 100, 200)
    };
    assert_eq!(claimed_keys(store, &limited).await, ["r1/a", "r1/b"]);
    assert_eq!(
        claimed_keys(store, &claim_by("n2", 150, 300)).await,
        ["r2/c"],
        "a and b are n1's until 200"
    );
    assert!(
        claimed_keys(store, &claim_by("n1", 199, 400))
            .await
            .is_empty(),
        "a holder's own live leases are not claimed again"
    );
    assert!(
        claimed_keys(store, &claim_by("n3", 199, 500))
            .await
            .is_empty()
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n3", 200, 500)).await,
        ["r1/a", "r1/b"],
        "n1's leases ended at 200; c is n2's until 300"
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n2", 300, 600)).await,
        ["r2/c"],
        "a holder's own lease that ended is claimed like any other"
    );

    let one_run = WebhookClaim {
        run_id: Some(rid("r2")),
        ..claim_by("n4", 1_000, 2_000)
    };
    assert_eq!(claimed_keys(store, &one_run).await, ["r2/c"]);
    let one = WebhookClaim {
        limit: 1,
        ..claim_by("n4", 1_000, 2_000)
    };
    assert_eq!(claimed_keys(store, &one).await, ["r1/a"]);
    let none = WebhookClaim {
        limit: 0,
        ..claim_by("n5", 10_000, 20_000)
    };
    assert!(claimed_keys(store, &none).await.is_empty());
    let absent = WebhookClaim {
        run_id: Some(rid("r-none")),
        ..claim_by("n5", 10_000, 20_000)
    };
    assert!(claimed_keys(store, &absent).await.is_empty());
}

/// The holder's advance records progress and done, appends the dead letter and
/// renews the lease; anybody else's, or the old holder's once another node claimed
/// the webhook, is `false` and changes nothing.
pub async fn webhook_advance_needs_the_lease<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    let (run, id) = (rid("r1"), wid("w"));
    hooks
        .put_webhook(webhook(&thread, "r1", "w", 1), 10)
        .await
        .unwrap();
    let nobody = progress_until(json!("x"), 5_000);
    assert!(
        !hooks
            .advance_webhook(&run, &id, "n1", &nobody)
            .await
            .unwrap(),
        "nobody holds a webhook never claimed"
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n1", 100, 200)).await,
        ["r1/w"]
    );
    let untouched = hooks.load_webhooks(&run).await.unwrap();

    assert!(
        !hooks
            .advance_webhook(&run, &id, "n2", &nobody)
            .await
            .unwrap()
    );
    assert!(
        !hooks
            .advance_webhook(&run, &wid("other"), "n1", &nobody)
            .await
            .unwrap()
    );
    assert!(
        !hooks
            .advance_webhook(&rid("r-none"), &id, "n1", &nobody)
            .await
            .unwrap()
    );
    assert_eq!(hooks.load_webhooks(&run).await.unwrap(), untouched);

    for (n, until) in [(1, 250), (2, 300)] {
        let advance = WebhookAdvance {
            progress: json!({"sent": n}),
            done: false,
            dead_letter: Some(json!({"lost": n})),
            lease_until_ms: until,
        };
        assert!(
            hooks
                .advance_webhook(&run, &id, "n1", &advance)
                .await
                .unwrap()
        );
    }
    let mut expected = webhook(&thread, "r1", "w", 1);
    expected.progress = json!({"sent": 2});
    expected.dead_letters = vec![json!({"lost": 1}), json!({"lost": 2})];
    assert_eq!(
        hooks.load_webhooks(&run).await.unwrap(),
        vec![expected.clone()]
    );
    // A lease that ended is still the holder's while nobody claimed it since.
    assert!(
        hooks
            .advance_webhook(&run, &id, "n1", &progress_until(json!({"sent": 2}), 300))
            .await
            .unwrap()
    );

    assert!(
        claimed_keys(store, &claim_by("n2", 299, 900))
            .await
            .is_empty(),
        "renewed until 300"
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n2", 300, 900)).await,
        ["r1/w"]
    );
    let late = WebhookAdvance {
        progress: json!("late"),
        done: true,
        dead_letter: Some(json!("late")),
        lease_until_ms: 10_000,
    };
    assert!(!hooks.advance_webhook(&run, &id, "n1", &late).await.unwrap());
    assert_eq!(hooks.load_webhooks(&run).await.unwrap(), vec![expected]);
    assert!(
        hooks
            .advance_webhook(&run, &id, "n2", &progress_until(json!({"sent": 3}), 900))
            .await
            .unwrap()
    );
    assert!(hooks.delete_webhook(&run, &id).await.unwrap());
    assert!(
        !hooks
            .advance_webhook(&run, &id, "n2", &progress_until(json!({"sent": 4}), 900))
            .await
            .unwrap(),
        "a deleted webhook has no holder"
    );
}

/// A webhook advanced as done is never claimed again (until it is put again); a
/// lease advanced to end at `0` lets another holder claim at once.
pub async fn webhook_done_and_handed_back<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    let run = rid("r1");
    for (id, created_at) in [("w1", 1), ("w2", 2)] {
        hooks
            .put_webhook(webhook(&thread, "r1", id, created_at), 10)
            .await
            .unwrap();
    }
    assert_eq!(
        claimed_keys(store, &claim_by("n1", 100, 1_000)).await,
        ["r1/w1", "r1/w2"]
    );
    let done = WebhookAdvance {
        progress: json!({"final": true}),
        done: true,
        dead_letter: None,
        lease_until_ms: 1_000,
    };
    assert!(
        hooks
            .advance_webhook(&run, &wid("w1"), "n1", &done)
            .await
            .unwrap()
    );
    let handed_back = progress_until(json!({"sent": 1}), 0);
    assert!(
        hooks
            .advance_webhook(&run, &wid("w2"), "n1", &handed_back)
            .await
            .unwrap()
    );

    assert_eq!(
        claimed_keys(store, &claim_by("n2", 101, 2_000)).await,
        ["r1/w2"],
        "w2 was handed back, w1 is done"
    );
    assert!(
        claimed_keys(store, &claim_by("n1", 5_000, 6_000))
            .await
            .iter()
            .all(|key| key != "r1/w1"),
        "done is never claimed, not even by its holder"
    );
    let loaded = hooks.load_webhooks(&run).await.unwrap();
    assert!(loaded[0].done && !loaded[1].done);

    hooks
        .put_webhook(webhook(&thread, "r1", "w1", 1), 10)
        .await
        .unwrap();
    let claimed = claimed_keys(store, &claim_by("n3", 10_000, 11_000)).await;
    assert_eq!(
        claimed,
        ["r1/w1", "r1/w2"],
        "put again, w1 is delivered to again"
    );
}

/// Deleting a thread deletes the webhooks of its runs (also of runs it has not
/// stored yet) and no others; deleting an unknown thread deletes none.
pub async fn webhook_delete_thread_deletes_the_threads_webhooks<S: ThreadRunStore + ?Sized>(
    store: &S,
) {
    let hooks = store.webhooks();
    let (gone, kept, absent) = (tid("t-gone"), tid("t-kept"), tid("t-absent"));
    for (thread, run_id) in [(&gone, "r-gone"), (&kept, "r-kept")] {
        store
            .checkpoint(checkpoint(
                thread,
                0,
                0,
                user_messages("m", 1),
                run(thread, run_id, 1),
            ))
            .await
            .unwrap();
    }
    for (thread, run, id, created_at) in [
        (&gone, "r-gone", "w1", 1),
        (&gone, "r-gone-later", "w2", 2),
        (&kept, "r-kept", "w3", 3),
        (&absent, "r-absent", "w4", 4),
    ] {
        hooks
            .put_webhook(webhook(thread, run, id, created_at), 10)
            .await
            .unwrap();
    }

    store.delete_thread(&gone).await.unwrap();
    assert!(
        hooks
            .load_webhooks(&rid("r-gone"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        hooks
            .load_webhooks(&rid("r-gone-later"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        hook_keys(&hooks.load_webhooks(&rid("r-kept")).await.unwrap()),
        ["r-kept/w3"]
    );

    let err = store.delete_thread(&absent).await.unwrap_err();
    assert!(matches!(err, StorageError::NotFound(_)), "{err:?}");
    assert_eq!(
        claimed_keys(store, &claim_by("n1", 1, 100)).await,
        ["r-kept/w3", "r-absent/w4"]
    );
}

/// A webhook's `Debug` leaves its config, and the receiver's token in it, out.
pub async fn webhook_debug_leaves_the_config_out<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let stored = hooks
        .put_webhook(webhook(&tid("t-hooks"), "r1", "w", 1), 10)
        .await
        .unwrap();
    let claimed = hooks.claim_webhooks(&claim_by("n1", 1, 100)).await.unwrap();
    let loaded = hooks.load_webhooks(&rid("r1")).await.unwrap();
    for shown in [
        format!("{stored:?}"),
        format!("{claimed:?}"),
        format!("{loaded:#?}"),
    ] {
        assert!(shown.contains("Webhook"), "{shown}");
        assert!(!shown.contains(WEBHOOK_TOKEN), "the token leaked: {shown}");
        assert!(
            !shown.contains("receiver.example"),
            "the config leaked: {shown}"
        );
    }
}

/// Nodes claiming at the same moment never lease one webhook to two of them.
pub async fn webhook_concurrent_claims_lease_each_once<S: ThreadRunStore>(store: Arc<S>) {
    const WEBHOOKS: u64 = 24;
    let thread = tid("t-hooks");
    for i in 0..WEBHOOKS {
        store
            .webhooks()
            .put_webhook(
                webhook(&thread, &format!("r{}", i % 5), &format!("w{i}"), i),
                100,
            )
            .await
            .unwrap();
    }
    let claimers: Vec<_> = (0..4)
        .map(|node| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let claim = WebhookClaim {
                    limit: 3,
                    ..claim_by(&format!("n{node}"), 1_000, 60_000)
                };
                let mut claimed = Vec::new();
                loop {
                    let got = store.webhooks().claim_webhooks(&claim).await.unwrap();
                    if got.is_empty() {
                        return claimed;
                    }
                    claimed.extend(hook_keys(&got));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for claimer in claimers {
        all.extend(claimer.await.unwrap());
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "leased twice: {all:?}");
    assert_eq!(all.len() as u64, WEBHOOKS);
}

/// New webhooks put on one run at the same moment never exceed its most.
pub async fn webhook_concurrent_puts_respect_the_max<S: ThreadRunStore>(store: Arc<S>) {
    const MAX: usize = 3;
    let thread = tid("t-hooks");
    for round in 0..5 {
        let run = format!("r-race-{round}");
        let putters: Vec<_> = (0..8)
            .map(|i| {
                let store = Arc::clone(&store);
                let hook = webhook(&thread, &run, &format!("w{i}"), i);
                tokio::spawn(async move { store.webhooks().put_webhook(hook, MAX).await })
            })
            .collect();
        let mut stored = 0;
        for putter in putters {
            match putter.await.unwrap() {
                Ok(_) => stored += 1,
                Err(StorageError::InvalidInput(_)) => {}
                Err(err) => panic!("round {round}: {err}"),
            }
        }
        assert_eq!(stored, MAX, "round {round}");
        let loaded = store.webhooks().load_webhooks(&rid(&run)).await.unwrap();
        assert_eq!(loaded.len(), MAX, "round {round}");
    }
}

// ---------------------------------------------------------------------------------
// Profiles

/// Values are stored per namespace and key, replaced by `put`, removed by `delete`.
pub async fn profile_get_put_delete<S: ProfileStore + ?Sized>(store: &S) {
    assert_eq!(store.get("locale", "alice").await.unwrap(), None);
    store.put("locale", "alice", json!("en-US")).await.unwrap();
    assert_eq!(
        store.get("locale", "alice").await.unwrap(),
        Some(json!("en-US"))
    );
    store
        .put("locale", "alice", json!({"lang": "nb", "region": "NO"}))
        .await
        .unwrap();
    assert_eq!(
        store.get("locale", "alice").await.unwrap(),
        Some(json!({"lang": "nb", "region": "NO"}))
    );
    assert_eq!(store.get("locale", "bob").await.unwrap(), None);
    assert_eq!(store.get("theme", "alice").await.unwrap(), None);

    store.put("theme", "alice", json!([1, 2, 3])).await.unwrap();
    store.delete("locale", "alice").await.unwrap();
    assert_eq!(store.get("locale", "alice").await.unwrap(), None);
    assert_eq!(
        store.get("theme", "alice").await.unwrap(),
        Some(json!([1, 2, 3]))
    );
    store
        .delete("locale", "alice")
        .await
        .expect("deleting an absent value is not an error");
}

/// Namespaces and keys with separators, spaces and unicode round-trip.
pub async fn profile_odd_keys_round_trip<S: ProfileStore + ?Sized>(store: &S) {
    let keys = [
        ("shared", "global"),
        ("shared", "parent_thread::t1"),
        ("agent type ✓", "ünïcødé key 🚀"),
        ("ns", "quote'and\"double"),
    ];
    for (i, (namespace, key)) in keys.iter().enumerate() {
        store.put(namespace, key, json!({"i": i})).await.unwrap();
    }
    for (i, (namespace, key)) in keys.iter().enumerate() {
        assert_eq!(
            store.get(namespace, key).await.unwrap(),
            Some(json!({"i": i}))
        );
        store.delete(namespace, key).await.unwrap();
        assert_eq!(store.get(namespace, key).await.unwrap(), None);
    }
}
