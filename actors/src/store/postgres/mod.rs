//! [`PostgresStore`]: threads, runs and profiles in PostgreSQL, for several nodes.
//!
//! # Schema
//!
//! Tables are named `{prefix}_…` (prefix `awaken` by default) and created by
//! [`PostgresStore::ensure_schema`], which every operation runs once before its first
//! query (idempotent, serialized across processes by an advisory lock on the schema and
//! prefix, so stores in other schemas of the database never wait on it):
//!
//! | table | key | holds |
//! |---|---|---|
//! | `{prefix}_threads` | `id` | `data` (the [`Thread`]), creation `seq`, `fence`, `message_count` |
//! | `{prefix}_messages` | `(thread_id, seq)` | `data` (one [`Message`]), `internal` |
//! | `{prefix}_runs` | `id` | `data` (the [`RunRecord`]), `thread_id`, `status`, `created_at` |
//! | `{prefix}_state` | `thread_id` | `data` (the [`PersistedState`]) |
//! | `{prefix}_profiles` | `(namespace, key)` | `data` (the value) |
//! | `{prefix}_identity` | one row | `store_id`, `schema_version`: which store the tables belong to (module `identity`) |
//! | `{prefix}_webhooks` | `(run_id, id)` | `config`, `progress`, `dead_letters` (JSONB), `thread_id`, `done`, `lease_holder`, `lease_until`, `created_at` (module `webhooks`) |
//!
//! Records are `json` (profiles and webhooks `jsonb`); the columns beside them exist
//! for filtering, ordering and the checkpoint checks. Every table has `updated_at
//! TIMESTAMPTZ`. Id columns use the `"C"` collation so runs order by id exactly as the
//! other stores order them. No table has a foreign key: the checkpoint statement
//! writes a thread's rows only under its thread row's lock, and deleting a thread
//! deletes them under the same lock (decision 0080). Tables an earlier version created
//! (`jsonb` records, messages, runs and state referencing their thread) keep working.
//!
//! # Checkpoints
//!
//! One statement, committed on its own (module `write`): lock the thread row, check
//! the fence and the message count (and that the run is not another thread's), and
//! only then insert the messages, upsert the run and the state and store the new
//! fence and count. A refused checkpoint writes nothing, so it also leaves an absent
//! thread absent. Concurrent writers of one thread queue on the row lock; the second
//! sees the first's count and gets `VersionConflict`. Checkpoints of different
//! threads that wait at the same moment share one statement and one commit flush
//! (group commit, module `group`, decision 0052), each still checked on its own and
//! answered only after the commit.
//!
//! A statement sent whole cannot be left half-done by a paused client, so a node
//! paused mid-checkpoint holds no lock: its statement either ran before the pause
//! or reaches the server after it, where the next owner's fence refuses it. The
//! other writes (thread metadata, runs created outside a checkpoint) are
//! transactions; every session runs with `idle_in_transaction_session_timeout` and
//! `lock_timeout` set to the write hold limit ([`PoolSettings`]), so a client silent
//! inside one cannot keep a thread locked from the next owner.
//! Fencing tokens and `created_at` values above `i64::MAX` are refused (`BIGINT` columns).

/// Sends one statement on one of the store's kept connections ([`held`]) and
/// counts it; the statement's result, its connection settled:
/// `statement!(self, sqlx::query(…).bind(…), fetch_one)`. The parameters are
/// bound (and encoded) before a connection is taken, so none waits on that.
macro_rules! statement {
    ($store:ident, $query:expr, $method:ident) => {{
        let query = $query;
        match $store.lease().await {
            Ok(mut lease) => {
                let result = query.$method(lease.connection()).await;
                lease.settle(&result);
                result
            }
            Err(error) => Err(error),
        }
    }};
}

mod approvals;
mod connect;
mod group;
mod held;
mod identity;
mod json_text;
mod monitor;
mod nodelay;
#[cfg(test)]
mod plans;
mod schema;
mod stats;
mod webhooks;
mod write;

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::postgres::{PgConnection, PgDatabaseError, PgPool, PgSeverity};
use sqlx::types::Json;
use sqlx::{AssertSqlSafe, Postgres, Transaction};
use tokio::sync::OnceCell;

use super::{
    ApprovalPage, ApprovalQuery, Checkpoint, FencingToken, MessagePage, MessageQuery, RunPage,
    RunQuery, StoreIoCounts, StoredMessage, THREAD_DELETED, ThreadRunStore, ThreadSnapshot,
    ThreadSummary, WaitingRuns, WebhookStore, now_millis, stamped_new_thread, thread_not_found,
    updated_metadata,
};
use crate::JsonValue;
use crate::contract::{
    Approval, ApprovalChange, ApprovalEvent, ApprovalResolution, Message, RunRecord, Thread,
    ThreadMetadata,
};
use crate::error::StorageError;
use crate::ids::{AgentId, ApprovalId, RunId, ThreadId};
use crate::state::{PersistedState, ProfileStore};
use group::GroupCommit;
use held::{HeldConnections, Lease};
use identity::Identity;
use json_text::JsonText;
use monitor::Monitor;
use stats::StoreStats;

pub use connect::PoolSettings;
use schema::{Statements, validate_prefix};

/// Durable store shared by every node of a cluster: one PostgreSQL database, one
/// statement per checkpoint or per batch of checkpoints waiting together.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    sql: Arc<Statements>,
    schema_ready: Arc<OnceCell<()>>,
    stats: Arc<StoreStats>,
    commits: Arc<GroupCommit>,
    held: Arc<HeldConnections>,
    monitor: Arc<Monitor>,
    /// The database the store writes to, checked on every new connection of
    /// a pool it made itself ([`PostgresStore::connect`]).
    identity: Arc<Identity>,
}

/// A statement text, marked safe: it is built from constants and a validated prefix.
fn sql(statement: &str) -> AssertSqlSafe<String> {
    AssertSqlSafe(statement.to_owned())
}

/// Whether the server ended the session with `error` (a `FATAL` or `PANIC`:
/// shutdown, restart, `pg_terminate_backend`): the connection is gone, and a
/// statement sent on it may or may not have committed.
fn ends_the_session(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|error| error.try_downcast_ref::<PgDatabaseError>())
        .is_some_and(|error| matches!(error.severity(), PgSeverity::Fatal | PgSeverity::Panic))
}

/// Whether `error` says the server is away or could not serve the statement
/// now, not that it refused the statement: the connection broke or could not be
/// had, the server shuts down or is starting (`57P0x`, `FATAL`), a connection
/// exception (`08xxx`), or a serialization failure or deadlock (`40001`,
/// `40P01`) whose transaction was rolled back.
fn is_outage(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(database) => {
            ends_the_session(error)
                || database.code().is_some_and(|code| {
                    code.starts_with("08")
                        || code.starts_with("57P")
                        || code == "40001"
                        || code == "40P01"
                })
        }
        _ => false,
    }
}

fn db_error(err: sqlx::Error) -> StorageError {
    if let Some(refusal) = identity::refusal_in(&err) {
        return StorageError::Unavailable(format!("postgres: {refusal}"));
    }
    match err {
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) | sqlx::Error::Encode(_) => {
            StorageError::Serialization(err.to_string())
        }
        other if is_outage(&other) => StorageError::Unavailable(format!("postgres: {other}")),
        other => StorageError::Io(format!("postgres: {other}")),
    }
}

/// A `u64` as a `BIGINT`, refusing values PostgreSQL cannot hold.
fn bigint(what: &str, value: u64) -> Result<i64, StorageError> {
    i64::try_from(value)
        .map_err(|_| StorageError::InvalidInput(format!("{what} {value} does not fit a BIGINT")))
}

/// A non-negative `BIGINT` read back as a `u64`.
fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A page offset or size as a `BIGINT`, saturating (no table holds `i64::MAX` rows).
fn count(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

type Tx = Transaction<'static, Postgres>;

/// A thread's snapshot as one row: data, fence, messages, state, latest run.
type SnapshotRow = (
    Json<Thread>,
    i64,
    Vec<Json<Message>>,
    Option<Json<PersistedState>>,
    Option<Json<RunRecord>>,
);

/// A snapshot row as the store's answer.
fn snapshot_of((Json(thread), fence, messages, state, latest_run): SnapshotRow) -> ThreadSnapshot {
    ThreadSnapshot {
        thread,
        messages: messages.into_iter().map(|Json(m)| m).collect(),
        state: state.map(|Json(s)| s),
        latest_run: latest_run.map(|Json(run)| run),
        fence: FencingToken(unsigned(fence)),
    }
}

impl PostgresStore {
    /// The table prefix the book documents.
    pub const DEFAULT_PREFIX: &'static str = "awaken";

    /// A store over `pool` using the default `awaken_…` tables.
    pub fn new(pool: PgPool) -> Self {
        Self::build(pool, Self::DEFAULT_PREFIX)
    }

    /// A store over `pool` using `{prefix}_…` tables; the prefix must be an SQL identifier.
    pub fn with_prefix(pool: PgPool, prefix: &str) -> Result<Self, StorageError> {
        validate_prefix(prefix)?;
        Ok(Self::build(pool, prefix))
    }

    fn build(pool: PgPool, prefix: &str) -> Self {
        let writers = PoolSettings::default().checkpoint_writers;
        let identity = Arc::new(Identity::new(prefix));
        Self::counted_by(pool, prefix, Arc::default(), writers, identity)
    }

    fn counted_by(
        pool: PgPool,
        prefix: &str,
        stats: Arc<StoreStats>,
        checkpoint_writers: usize,
        identity: Arc<Identity>,
    ) -> Self {
        Self {
            identity,
            commits: Arc::new(GroupCommit::new(checkpoint_writers)),
            held: Arc::new(HeldConnections::new(pool.clone())),
            monitor: Arc::new(Monitor::default()),
            pool,
            sql: Arc::new(Statements::new(prefix)),
            schema_ready: Arc::new(OnceCell::new()),
            stats,
        }
    }

    /// A kept connection for one statement ([`held`]), the statement counted:
    /// every statement goes through here (by [`statement!`]) or
    /// [`Self::send_in`].
    async fn lease(&self) -> Result<Lease<'_>, sqlx::Error> {
        self.stats.statement();
        let leased = self.held.lease(&self.stats).await;
        leased.map_err(|error| self.identity.explain(error))
    }

    /// A transaction on a connection of the pool, which tests it when the
    /// transaction gives it back (one round trip, counted).
    async fn begin_with(&self, statement: &'static str) -> Result<Tx, StorageError> {
        self.stats.statement();
        self.stats.released(1);
        let begun = self.pool.begin_with(statement).await;
        begun.map_err(|error| db_error(self.identity.explain(error)))
    }

    /// The transaction's connection, to send one statement on (counted).
    fn send_in<'t>(&self, tx: &'t mut Tx) -> &'t mut PgConnection {
        self.stats.statement();
        tx
    }

    /// The table prefix.
    pub fn prefix(&self) -> &str {
        &self.sql.prefix
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A writing transaction (bounded by the pool's write hold limit).
    async fn begin(&self) -> Result<Tx, StorageError> {
        self.ready().await?;
        self.begin_with("BEGIN").await
    }

    /// A read-only transaction that sees one snapshot for all its statements.
    async fn begin_snapshot(&self) -> Result<Tx, StorageError> {
        self.ready().await?;
        self.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
    }

    async fn list_runs_in(&self, tx: &mut Tx, query: &RunQuery) -> Result<RunPage, StorageError> {
        let thread_id = query.thread_id.as_ref().map(ThreadId::as_str);
        let status = query.status.map(|status| status.as_str());
        let agent_id = query.agent_id.as_ref().map(AgentId::as_str);
        let total: i64 = sqlx::query_scalar(sql(&self.sql.count_runs))
            .bind(thread_id)
            .bind(status)
            .bind(agent_id)
            .fetch_one(self.send_in(tx))
            .await
            .map_err(db_error)?;
        let runs: Vec<Json<RunRecord>> = sqlx::query_scalar(sql(&self.sql.page_runs))
            .bind(thread_id)
            .bind(status)
            .bind(agent_id)
            .bind(count(query.offset))
            .bind(count(query.effective_limit()))
            .fetch_all(self.send_in(tx))
            .await
            .map_err(db_error)?;
        Ok(RunPage {
            runs: runs.into_iter().map(|Json(run)| run).collect(),
            total: usize::try_from(total).unwrap_or(usize::MAX),
        })
    }
}

/// Runs `work` in `tx`, committing on success and rolling back on error.
macro_rules! in_transaction {
    ($store:ident, $tx:ident, $work:expr) => {{
        let result = $work;
        $store.stats.statement();
        match result {
            Ok(value) => {
                $tx.commit().await.map_err(db_error)?;
                Ok(value)
            }
            Err(err) => {
                // The refusal is what the caller needs; a failed rollback only means the
                // connection is gone, and the server discards the transaction then.
                let _ = $tx.rollback().await;
                Err(err)
            }
        }
    }};
}
// For `webhooks`, whose puts are transactions too.
use in_transaction;

#[async_trait]
impl ThreadRunStore for PostgresStore {
    async fn create_thread(&self, thread: &Thread) -> Result<(), StorageError> {
        self.ready().await?;
        let inserted = statement!(
            self,
            sqlx::query(sql(&self.sql.insert_thread))
                .bind(thread.id.as_str())
                .bind(JsonText(stamped_new_thread(thread, now_millis()))),
            execute
        )
        .map_err(db_error)?;
        if inserted.rows_affected() == 0 {
            return Err(StorageError::AlreadyExists(format!(
                "thread `{}`",
                thread.id
            )));
        }
        Ok(())
    }

    async fn load_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StorageError> {
        self.ready().await?;
        let row: Option<Json<Thread>> = statement!(
            self,
            sqlx::query_scalar(sql(&self.sql.load_thread)).bind(id.as_str()),
            fetch_optional
        )
        .map_err(db_error)?;
        Ok(row.map(|Json(thread)| thread))
    }

    async fn update_thread_metadata(
        &self,
        id: &ThreadId,
        metadata: ThreadMetadata,
    ) -> Result<(), StorageError> {
        let mut tx = self.begin().await?;
        in_transaction!(self, tx, {
            async {
                let row: Option<Json<Thread>> = sqlx::query_scalar(sql(&self.sql.lock_thread_data))
                    .bind(id.as_str())
                    .fetch_optional(self.send_in(&mut tx))
                    .await
                    .map_err(db_error)?;
                let Json(mut thread) = row.ok_or_else(|| thread_not_found(id))?;
                thread.metadata = updated_metadata(&thread.metadata, metadata, now_millis());
                sqlx::query(sql(&self.sql.update_thread_data))
                    .bind(id.as_str())
                    .bind(JsonText(&thread))
                    .execute(self.send_in(&mut tx))
                    .await
                    .map_err(db_error)?;
                Ok(())
            }
            .await
        })
    }

    async fn delete_thread(&self, id: &ThreadId) -> Result<Vec<ApprovalChange>, StorageError> {
        let mut tx = self.begin().await?;
        in_transaction!(self, tx, {
            async {
                // Locked first, the rows are deleted with a snapshot taken after
                // any checkpoint of the thread committed, so none is left behind.
                let found: Option<i32> = sqlx::query_scalar(sql(&self.sql.lock_thread))
                    .bind(id.as_str())
                    .fetch_optional(self.send_in(&mut tx))
                    .await
                    .map_err(db_error)?;
                if found.is_none() {
                    return Err(thread_not_found(id));
                }
                let now = now_millis();
                let cancelled = ApprovalResolution::cancelled(THREAD_DELETED, now);
                let rows: Vec<approvals::ApprovalRow> =
                    sqlx::query_as(sql(&self.sql.delete_thread))
                        .bind(id.as_str())
                        .bind(bigint("resolved_at", now)?)
                        .bind(JsonText(&cancelled))
                        .fetch_all(self.send_in(&mut tx))
                        .await
                        .map_err(db_error)?;
                Ok(approvals::resolved_changes(rows))
            }
            .await
        })
    }

    async fn list_threads(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadId>, StorageError> {
        self.ready().await?;
        let ids: Vec<String> = statement!(
            self,
            sqlx::query_scalar(sql(&self.sql.list_threads))
                .bind(count(offset))
                .bind(count(limit)),
            fetch_all
        )
        .map_err(db_error)?;
        ids.into_iter()
            .map(|id| ThreadId::new(id).map_err(|err| StorageError::Serialization(err.to_string())))
            .collect()
    }

    async fn list_thread_summaries(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadSummary>, StorageError> {
        self.ready().await?;
        let rows: Vec<(Json<Thread>, i64, Option<Json<RunRecord>>)> = statement!(
            self,
            sqlx::query_as(sql(&self.sql.list_summaries))
                .bind(count(offset))
                .bind(count(limit)),
            fetch_all
        )
        .map_err(db_error)?;
        Ok(rows
            .into_iter()
            .map(|(Json(thread), message_count, latest)| ThreadSummary {
                thread,
                message_count: unsigned(message_count),
                latest_run: latest.map(|Json(run)| run),
            })
            .collect())
    }

    async fn load_messages(
        &self,
        id: &ThreadId,
        query: &MessageQuery,
    ) -> Result<MessagePage, StorageError> {
        self.ready().await?;
        let limit = query.effective_limit();
        let mut rows: Vec<(i64, Json<Message>)> = statement!(
            self,
            sqlx::query_as(sql(&self.sql.page_messages))
                .bind(id.as_str())
                .bind(bigint("cursor", query.cursor.unwrap_or(0)).unwrap_or(i64::MAX))
                .bind(query.include_internal)
                .bind(count(limit + 1)),
            fetch_all
        )
        .map_err(db_error)?;
        if rows.is_empty() {
            let exists: bool = statement!(
                self,
                sqlx::query_scalar(sql(&self.sql.thread_exists)).bind(id.as_str()),
                fetch_one
            )
            .map_err(db_error)?;
            if !exists {
                return Err(thread_not_found(id));
            }
        }
        let more = rows.len() > limit;
        rows.truncate(limit);
        let messages: Vec<StoredMessage> = rows
            .into_iter()
            .map(|(seq, Json(message))| StoredMessage {
                seq: unsigned(seq),
                message,
            })
            .collect();
        let next_cursor = if more {
            messages.last().map(|m| m.seq)
        } else {
            None
        };
        Ok(MessagePage {
            messages,
            next_cursor,
        })
    }

    async fn load_thread_snapshot(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        self.ready().await?;
        // One statement reads with one snapshot: its parts agree without a
        // transaction, in one round trip.
        let row: Option<SnapshotRow> = statement!(
            self,
            sqlx::query_as(sql(&self.sql.snapshot)).bind(id.as_str()),
            fetch_optional
        )
        .map_err(db_error)?;
        Ok(row.map(snapshot_of))
    }

    async fn create_run(&self, record: &RunRecord) -> Result<(), StorageError> {
        let created_at = bigint("run created_at", record.created_at)?;
        let mut tx = self.begin().await?;
        in_transaction!(self, tx, {
            async {
                let thread: Option<i32> = sqlx::query_scalar(sql(&self.sql.touch_thread))
                    .bind(record.thread_id.as_str())
                    .fetch_optional(self.send_in(&mut tx))
                    .await
                    .map_err(db_error)?;
                if thread.is_none() {
                    return Err(thread_not_found(&record.thread_id));
                }
                let inserted = sqlx::query(sql(&self.sql.insert_run))
                    .bind(record.run_id.as_str())
                    .bind(record.thread_id.as_str())
                    .bind(record.status.as_str())
                    .bind(created_at)
                    .bind(JsonText(record))
                    .execute(self.send_in(&mut tx))
                    .await
                    .map_err(db_error)?;
                if inserted.rows_affected() == 0 {
                    return Err(StorageError::AlreadyExists(format!(
                        "run `{}`",
                        record.run_id
                    )));
                }
                Ok(())
            }
            .await
        })
    }

    async fn load_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StorageError> {
        self.ready().await?;
        let row: Option<Json<RunRecord>> = statement!(
            self,
            sqlx::query_scalar(sql(&self.sql.load_run)).bind(run_id.as_str()),
            fetch_optional
        )
        .map_err(db_error)?;
        Ok(row.map(|Json(run)| run))
    }

    async fn latest_run(&self, thread_id: &ThreadId) -> Result<Option<RunRecord>, StorageError> {
        self.ready().await?;
        let row: Option<Json<RunRecord>> = statement!(
            self,
            sqlx::query_scalar(sql(&self.sql.latest_run)).bind(thread_id.as_str()),
            fetch_optional
        )
        .map_err(db_error)?;
        Ok(row.map(|Json(run)| run))
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StorageError> {
        let mut tx = self.begin_snapshot().await?;
        in_transaction!(self, tx, self.list_runs_in(&mut tx, query).await)
    }

    async fn checkpoint(
        &self,
        checkpoint: Checkpoint,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        self.stats.checkpoint();
        if checkpoint.approvals.is_empty() {
            self.commits.submit(self, checkpoint).await?;
            Ok(Vec::new())
        } else {
            self.checkpoint_with_approvals(checkpoint).await
        }
    }

    async fn fence(&self, id: &ThreadId, token: FencingToken) -> Result<(), StorageError> {
        self.write_fence(id, token).await
    }

    async fn fence_and_load(
        &self,
        id: &ThreadId,
        token: FencingToken,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        self.fence_and_read(id, token).await
    }

    async fn load_approval(&self, id: &ApprovalId) -> Result<Option<Approval>, StorageError> {
        self.read_approval(id).await
    }

    async fn list_approvals(&self, query: &ApprovalQuery) -> Result<ApprovalPage, StorageError> {
        self.page_approvals(query).await
    }

    async fn unpublished_approvals(
        &self,
        older_than: std::time::Duration,
        limit: usize,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        self.read_unpublished(older_than, limit).await
    }

    async fn approvals_published(
        &self,
        published: &[(ApprovalId, ApprovalEvent)],
    ) -> Result<(), StorageError> {
        self.mark_published(published).await
    }

    fn webhooks(&self) -> &dyn WebhookStore {
        self
    }

    async fn waiting_runs(&self) -> Result<WaitingRuns, StorageError> {
        self.ready().await?;
        let options = self.pool.connect_options();
        self.monitor
            .waiting_runs(&options, &self.sql.waiting_runs)
            .await
    }

    fn io_counts(&self) -> Option<StoreIoCounts> {
        Some(self.stats.counts())
    }
}

#[async_trait]
impl ProfileStore for PostgresStore {
    async fn get(&self, namespace: &str, key: &str) -> Result<Option<JsonValue>, StorageError> {
        self.ready().await?;
        let row: Option<Json<JsonValue>> = statement!(
            self,
            sqlx::query_scalar(sql(&self.sql.get_profile))
                .bind(namespace)
                .bind(key),
            fetch_optional
        )
        .map_err(db_error)?;
        Ok(row.map(|Json(value)| value))
    }

    async fn put(&self, namespace: &str, key: &str, value: JsonValue) -> Result<(), StorageError> {
        self.ready().await?;
        statement!(
            self,
            sqlx::query(sql(&self.sql.put_profile))
                .bind(namespace)
                .bind(key)
                .bind(Json(value)),
            execute
        )
        .map_err(db_error)?;
        Ok(())
    }

    async fn delete(&self, namespace: &str, key: &str) -> Result<(), StorageError> {
        self.ready().await?;
        statement!(
            self,
            sqlx::query(sql(&self.sql.delete_profile))
                .bind(namespace)
                .bind(key),
            execute
        )
        .map_err(db_error)?;
        Ok(())
    }
}

#[cfg(any(test, feature = "testsuite"))]
pub use testing::TestSchema;

#[cfg(any(test, feature = "testsuite"))]
mod testing;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_values_are_refused_not_wrapped() {
        assert_eq!(bigint("token", 7).unwrap(), 7);
        assert!(matches!(
            bigint("token", u64::MAX),
            Err(StorageError::InvalidInput(_))
        ));
    }

    #[tokio::test]
    async fn statements_and_round_trips_are_counted_as_sent() {
        use crate::store::conformance::{checkpoint, rid, run, tid, user_messages, webhook, wid};
        use crate::store::{WebhookAdvance, WebhookClaim};

        let (store, _guard) = PostgresStore::for_tests().await;
        store.ready().await.unwrap();
        let id = tid("t-counted");
        let sent = |before: StoreIoCounts| {
            let now = store.io_counts().unwrap();
            (
                now.checkpoints - before.checkpoints,
                now.statements - before.statements,
                now.round_trips - before.round_trips,
            )
        };

        let before = store.io_counts().unwrap();
        store
            .checkpoint(checkpoint(
                &id,
                0,
                0,
                user_messages("m", 2),
                run(&id, "r1", 1),
            ))
            .await
            .unwrap();
        assert_eq!(sent(before), (1, 1, 1), "a checkpoint is one statement");

        let before = store.io_counts().unwrap();
        let refused = store
            .checkpoint(checkpoint(
                &id,
                0,
                0,
                user_messages("m", 1),
                run(&id, "r1", 1),
            ))
            .await;
        assert!(matches!(refused, Err(StorageError::VersionConflict { .. })));
        assert_eq!(sent(before), (1, 1, 1), "a refused checkpoint too");

        let before = store.io_counts().unwrap();
        assert!(store.load_thread_snapshot(&id).await.unwrap().is_some());
        assert_eq!(sent(before), (0, 1, 1), "a snapshot is one statement");

        let before = store.io_counts().unwrap();
        store.create_run(&run(&id, "r2", 2)).await.unwrap();
        assert_eq!(
            sent(before),
            (0, 4, 5),
            "BEGIN, lock, insert, COMMIT, and the pool's test of the connection given back"
        );

        let hooks = store.webhooks();
        let before = store.io_counts().unwrap();
        hooks
            .put_webhook(webhook(&id, "r2", "w", 1), 1)
            .await
            .unwrap();
        assert_eq!(
            sent(before),
            (0, 4, 5),
            "BEGIN, lock the run, upsert, COMMIT, the pool's test"
        );

        let before = store.io_counts().unwrap();
        let claim = WebhookClaim {
            holder: "n1".to_owned(),
            now_ms: 1,
            until_ms: 100,
            limit: 10,
            run_id: None,
        };
        assert_eq!(hooks.claim_webhooks(&claim).await.unwrap().len(), 1);
        let advance = WebhookAdvance {
            progress: JsonValue::Null,
            done: true,
            dead_letter: None,
            lease_until_ms: 100,
        };
        assert!(
            hooks
                .advance_webhook(&rid("r2"), &wid("w"), "n1", &advance)
                .await
                .unwrap()
        );
        assert_eq!(sent(before), (0, 2, 2), "a claim and an advance, one each");

        let before = store.io_counts().unwrap();
        store.delete_thread(&id).await.unwrap();
        assert_eq!(
            sent(before),
            (0, 4, 5),
            "BEGIN, lock the thread, delete its rows, COMMIT, the pool's test"
        );
        assert!(hooks.load_webhooks(&rid("r2")).await.unwrap().is_empty());
    }
}
