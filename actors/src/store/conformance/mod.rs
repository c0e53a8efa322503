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

mod approvals;
mod checkpoints;
mod profiles;
mod runs;
mod threads;
mod webhooks;

pub use approvals::*;
pub use checkpoints::*;
pub use profiles::*;
pub use runs::*;
pub use threads::*;
pub use webhooks::*;

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
            webhook_debug_leaves_the_config_out,
            approvals_are_written_with_their_checkpoint,
            an_approval_keeps_its_first_resolution,
            approvals_list_filters_and_pages,
            deleting_a_thread_cancels_its_approvals,
            the_feed_is_owed_every_change_until_published
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
        approvals: Vec::new(),
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
