//! [`PostgresStore`]: threads, runs and profiles in PostgreSQL, for several nodes.
//!
//! # Schema
//!
//! Tables are named `{prefix}_…` (prefix `awaken` by default) and created by
//! [`PostgresStore::ensure_schema`], which every operation runs once before its first
//! query (idempotent, serialized across processes by an advisory lock):
//!
//! | table | key | holds |
//! |---|---|---|
//! | `{prefix}_threads` | `id` | `data` (the [`Thread`]), creation `seq`, `fence`, `message_count` |
//! | `{prefix}_messages` | `(thread_id, seq)` | `data` (one [`Message`]), `internal` |
//! | `{prefix}_runs` | `id` | `data` (the [`RunRecord`]), `thread_id`, `status`, `created_at` |
//! | `{prefix}_state` | `thread_id` | `data` (the [`PersistedState`]) |
//! | `{prefix}_profiles` | `(namespace, key)` | `data` (the value) |
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

mod group;
mod held;
mod json_text;
mod monitor;
mod nodelay;
mod stats;
mod webhooks;
mod write;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::types::Json;
use sqlx::{AssertSqlSafe, Connection, Postgres, Transaction};
use tokio::sync::OnceCell;

use super::{
    Checkpoint, FencingToken, MessagePage, MessageQuery, RunPage, RunQuery, StoreIoCounts,
    StoredMessage, ThreadRunStore, ThreadSnapshot, ThreadSummary, WaitingRuns, WebhookStore,
    now_millis, stamped_new_thread, thread_not_found, updated_metadata,
};
use crate::JsonValue;
use crate::contract::{Message, RunRecord, Thread, ThreadMetadata};
use crate::error::StorageError;
use crate::ids::{AgentId, RunId, ThreadId};
use crate::state::{PersistedState, ProfileStore};
use group::GroupCommit;
use held::{HeldConnections, Lease};
use json_text::JsonText;
use monitor::Monitor;
use stats::StoreStats;

/// Longest accepted prefix: keeps every table and index name within PostgreSQL's 63 bytes.
const MAX_PREFIX_LEN: usize = 40;

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
}

/// How [`PostgresStore::connect`] sets up its connection pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Connections at most: checkpoints of different threads run in parallel over
    /// them, each one statement.
    pub max_connections: u32,
    /// How long a transaction may stay open while its client says nothing
    /// (`idle_in_transaction_session_timeout`: the server ends the session and
    /// rolls it back) and how long a writer waits for a thread's row lock
    /// (`lock_timeout`). A node paused in the middle of a write would otherwise
    /// keep the thread's row locked for the whole pause, so the next owner could
    /// not raise the fence, and commit after it resumed. Keep it below the shard
    /// lease TTL: then a paused owner's write is gone before another node can own
    /// the thread. At least one millisecond.
    pub write_hold_limit: Duration,
    /// Checkpoint batches in flight at most (decisions 0052, 0064): checkpoints
    /// that arrive while a batch is written wait and go together in the next one;
    /// another batch starts beside it only when enough wait or the one in flight
    /// is stuck. At least one, and at most `max_connections`.
    pub checkpoint_writers: usize,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            max_connections: 16,
            write_hold_limit: Duration::from_secs(2),
            checkpoint_writers: 2,
        }
    }
}

impl PoolSettings {
    /// The session settings every connection of the pool starts with, for
    /// [`PgConnectOptions::options`] (pools built by hand should add them too).
    pub fn session_options(&self) -> [(&'static str, u128); 2] {
        let ms = self.write_hold_limit.as_millis().clamp(1, i32::MAX as u128);
        [
            ("idle_in_transaction_session_timeout", ms),
            ("lock_timeout", ms),
        ]
    }
}

/// Every statement, with the table prefix filled in once.
#[derive(Debug)]
struct Statements {
    prefix: String,
    schema: Vec<String>,
    insert_thread: String,
    load_thread: String,
    lock_thread_data: String,
    /// Locks a thread's row before `delete_thread` deletes its rows (decision 0080).
    lock_thread: String,
    update_thread_data: String,
    delete_thread: String,
    list_threads: String,
    list_summaries: String,
    checkpoint: String,
    one_checkpoint: String,
    fence: String,
    current_fence: String,
    share_lock_thread: String,
    thread_exists: String,
    snapshot: String,
    fenced_snapshot: String,
    page_messages: String,
    insert_run: String,
    load_run: String,
    latest_run: String,
    count_runs: String,
    page_runs: String,
    waiting_runs: String,
    get_profile: String,
    put_profile: String,
    delete_profile: String,
    webhooks: webhooks::WebhookStatements,
}

impl Statements {
    fn new(p: &str) -> Self {
        let latest = latest_run_of(p, "$1");
        // A thread's snapshot, as columns over its row `t` (a `SnapshotRow`).
        let snapshot_columns = format!(
            "t.data, t.fence,
             ARRAY(SELECT m.data FROM {p}_messages m WHERE m.thread_id = t.id ORDER BY m.seq),
             (SELECT s.data FROM {p}_state s WHERE s.thread_id = t.id),
             ({latest_of_t})",
            latest_of_t = latest_run_of(p, "t.id"),
        );
        Self {
            prefix: p.to_owned(),
            schema: vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {p}_threads (
                        id TEXT COLLATE \"C\" PRIMARY KEY,
                        seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
                        data JSON NOT NULL,
                        fence BIGINT NOT NULL DEFAULT 0,
                        message_count BIGINT NOT NULL DEFAULT 0,
                        updated_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {p}_messages (
                        thread_id TEXT COLLATE \"C\" NOT NULL,
                        seq BIGINT NOT NULL,
                        internal BOOLEAN NOT NULL,
                        data JSON NOT NULL,
                        updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                        PRIMARY KEY (thread_id, seq))"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {p}_runs (
                        id TEXT COLLATE \"C\" PRIMARY KEY,
                        thread_id TEXT COLLATE \"C\" NOT NULL,
                        status TEXT NOT NULL,
                        created_at BIGINT NOT NULL,
                        data JSON NOT NULL,
                        updated_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                ),
                format!(
                    "CREATE INDEX IF NOT EXISTS {p}_runs_by_thread ON {p}_runs (thread_id, created_at, id)"
                ),
                format!(
                    "CREATE INDEX IF NOT EXISTS {p}_runs_by_creation ON {p}_runs (created_at, id)"
                ),
                format!(
                    "CREATE INDEX IF NOT EXISTS {p}_runs_unfinished
                     ON {p}_runs (thread_id, created_at, id) WHERE status <> 'done'"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {p}_state (
                        thread_id TEXT COLLATE \"C\" PRIMARY KEY,
                        data JSON NOT NULL,
                        updated_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {p}_profiles (
                        namespace TEXT COLLATE \"C\" NOT NULL,
                        key TEXT COLLATE \"C\" NOT NULL,
                        data JSONB NOT NULL,
                        updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                        PRIMARY KEY (namespace, key))"
                ),
            ],
            insert_thread: format!(
                "INSERT INTO {p}_threads (id, data) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING"
            ),
            load_thread: format!("SELECT data FROM {p}_threads WHERE id = $1"),
            lock_thread_data: format!("SELECT data FROM {p}_threads WHERE id = $1 FOR UPDATE"),
            update_thread_data: format!(
                "UPDATE {p}_threads SET data = $2, updated_at = now() WHERE id = $1"
            ),
            lock_thread: format!("SELECT 1 FROM {p}_threads WHERE id = $1 FOR UPDATE"),
            delete_thread: format!(
                "WITH messages AS (DELETE FROM {p}_messages WHERE thread_id = $1),
                      runs AS (DELETE FROM {p}_runs WHERE thread_id = $1),
                      state AS (DELETE FROM {p}_state WHERE thread_id = $1),
                      webhooks AS (DELETE FROM {p}_webhooks WHERE thread_id = $1)
                 DELETE FROM {p}_threads WHERE id = $1"
            ),
            list_threads: format!("SELECT id FROM {p}_threads ORDER BY seq OFFSET $1 LIMIT $2"),
            list_summaries: format!(
                "SELECT t.data, t.message_count, r.data FROM {p}_threads t
                 LEFT JOIN LATERAL ({latest_of_t}) r ON true
                 ORDER BY t.seq OFFSET $1 LIMIT $2",
                latest_of_t = latest_run_of(p, "t.id"),
            ),
            checkpoint: write::checkpoint_statement(p),
            one_checkpoint: write::one_checkpoint_statement(p),
            fence: write::fence_statement(p),
            current_fence: format!("SELECT fence FROM {p}_threads WHERE id = $1"),
            share_lock_thread: format!("SELECT 1 FROM {p}_threads WHERE id = $1 FOR SHARE"),
            thread_exists: format!("SELECT EXISTS (SELECT 1 FROM {p}_threads WHERE id = $1)"),
            snapshot: format!("SELECT {snapshot_columns} FROM {p}_threads t WHERE t.id = $1"),
            fenced_snapshot: write::fenced_snapshot_statement(p, &snapshot_columns),
            page_messages: format!(
                "SELECT seq, data FROM {p}_messages
                 WHERE thread_id = $1 AND seq > $2 AND ($3 OR NOT internal)
                 ORDER BY seq LIMIT $4"
            ),
            insert_run: format!(
                "INSERT INTO {p}_runs (id, thread_id, status, created_at, data)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING"
            ),
            load_run: format!("SELECT data FROM {p}_runs WHERE id = $1"),
            latest_run: latest,
            count_runs: format!(
                "SELECT count(*) FROM {p}_runs
                 WHERE ($1::text IS NULL OR thread_id = $1) AND ($2::text IS NULL OR status = $2)
                   AND ($3::text IS NULL OR data->>'agent_id' = $3)"
            ),
            // On the partial index of unfinished runs.
            waiting_runs: format!(
                "SELECT count(*), min((data->>'updated_at')::bigint) FROM {p}_runs
                 WHERE status = 'waiting'"
            ),
            page_runs: format!(
                "SELECT data FROM {p}_runs
                 WHERE ($1::text IS NULL OR thread_id = $1) AND ($2::text IS NULL OR status = $2)
                   AND ($3::text IS NULL OR data->>'agent_id' = $3)
                 ORDER BY created_at, id OFFSET $4 LIMIT $5"
            ),
            get_profile: format!(
                "SELECT data FROM {p}_profiles WHERE namespace = $1 AND key = $2"
            ),
            put_profile: format!(
                "INSERT INTO {p}_profiles (namespace, key, data) VALUES ($1, $2, $3)
                 ON CONFLICT (namespace, key) DO UPDATE SET data = EXCLUDED.data, updated_at = now()"
            ),
            delete_profile: format!(
                "DELETE FROM {p}_profiles WHERE namespace = $1 AND key = $2"
            ),
            webhooks: webhooks::WebhookStatements::new(p),
        }
    }
}

/// A statement text, marked safe: it is built from constants and a validated prefix.
fn sql(statement: &str) -> AssertSqlSafe<String> {
    AssertSqlSafe(statement.to_owned())
}

fn db_error(err: sqlx::Error) -> StorageError {
    match err {
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) | sqlx::Error::Encode(_) => {
            StorageError::Serialization(err.to_string())
        }
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

/// Refuses a prefix that is not a plain SQL identifier.
fn validate_prefix(prefix: &str) -> Result<(), StorageError> {
    let mut chars = prefix.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && prefix.len() <= MAX_PREFIX_LEN;
    if valid {
        Ok(())
    } else {
        Err(StorageError::InvalidInput(format!(
            "table prefix `{}` must be an SQL identifier (ASCII letters, digits and `_`, \
             not starting with a digit, at most {MAX_PREFIX_LEN} bytes)",
            prefix.escape_debug()
        )))
    }
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
        Self::counted_by(pool, prefix, Arc::default(), writers)
    }

    fn counted_by(
        pool: PgPool,
        prefix: &str,
        stats: Arc<StoreStats>,
        checkpoint_writers: usize,
    ) -> Self {
        Self {
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
        self.held.lease(&self.stats).await
    }

    /// A transaction on a connection of the pool, which tests it when the
    /// transaction gives it back (one round trip, counted).
    async fn begin_with(&self, statement: &'static str) -> Result<Tx, StorageError> {
        self.stats.statement();
        self.stats.released(1);
        self.pool.begin_with(statement).await.map_err(db_error)
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

    /// Creates the tables and indexes if absent. Idempotent; safe to run from several
    /// processes at once. Operations call it themselves before their first query;
    /// a store creates them once (a second call, or the first operation after it,
    /// sends nothing).
    pub async fn ensure_schema(&self) -> Result<(), StorageError> {
        self.ready().await
    }

    async fn create_schema(&self) -> Result<(), StorageError> {
        let mut tx = self.begin_with("BEGIN").await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
            .bind(format!("awaken-schema:{}", self.sql.prefix))
            .execute(self.send_in(&mut tx))
            .await
            .map_err(db_error)?;
        // The URL may name a schema (`search_path`) that does not exist yet:
        // PostgreSQL then has nowhere to create the tables, so create it first.
        let (missing, search_path): (bool, String) =
            sqlx::query_as("SELECT current_schema() IS NULL, current_setting('search_path')")
                .fetch_one(self.send_in(&mut tx))
                .await
                .map_err(db_error)?;
        if missing {
            let schema = first_schema(&search_path).ok_or_else(|| {
                StorageError::InvalidInput(format!(
                    "the search_path `{search_path}` names no schema to create the tables in: \
                     name one (`?options=-c%20search_path%3DNAME`)"
                ))
            })?;
            sqlx::query(sql(&format!(
                "CREATE SCHEMA IF NOT EXISTS {}",
                quote_identifier(&schema)
            )))
            .execute(self.send_in(&mut tx))
            .await
            .map_err(db_error)?;
        }
        for statement in self.sql.schema.iter().chain(&self.sql.webhooks.schema) {
            sqlx::query(sql(statement))
                .execute(self.send_in(&mut tx))
                .await
                .map_err(db_error)?;
        }
        self.stats.statement();
        tx.commit().await.map_err(db_error)
    }

    async fn ready(&self) -> Result<(), StorageError> {
        self.schema_ready
            .get_or_try_init(|| self.create_schema())
            .await
            .map(|_| ())
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

    async fn delete_thread(&self, id: &ThreadId) -> Result<(), StorageError> {
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
                sqlx::query(sql(&self.sql.delete_thread))
                    .bind(id.as_str())
                    .execute(self.send_in(&mut tx))
                    .await
                    .map_err(db_error)?;
                Ok(())
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
                let thread: Option<i32> = sqlx::query_scalar(sql(&self.sql.share_lock_thread))
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

    async fn checkpoint(&self, checkpoint: Checkpoint) -> Result<(), StorageError> {
        self.stats.checkpoint();
        self.commits.submit(self, checkpoint).await
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

/// The latest run of thread `thread` (a parameter or column), as
/// `ThreadRunStore::latest_run` defines it: its unfinished run if any, else the
/// greatest by `created_at` and id; each part one index read.
fn latest_run_of(p: &str, thread: &str) -> String {
    format!(
        "SELECT data FROM (
             (SELECT data, 0 AS part FROM {p}_runs WHERE thread_id = {thread} AND status <> 'done'
              ORDER BY created_at DESC, id DESC LIMIT 1)
             UNION ALL
             (SELECT data, 1 AS part FROM {p}_runs WHERE thread_id = {thread}
              ORDER BY created_at DESC, id DESC LIMIT 1)
         ) latest ORDER BY part LIMIT 1"
    )
}

/// The first schema a `search_path` setting names, unquoted (`$user` skipped).
fn first_schema(search_path: &str) -> Option<String> {
    search_path
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty() && *name != "\"$user\"" && *name != "$user")
        .map(
            |name| match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
                Some(quoted) => quoted.replace("\"\"", "\""),
                None => name.to_owned(),
            },
        )
        .next()
}

/// `name` as a quoted SQL identifier.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Connection options for `url`, as a clear error rather than sqlx's.
fn connect_options(url: &str) -> Result<PgConnectOptions, StorageError> {
    PgConnectOptions::from_str(url)
        .map_err(|err| StorageError::InvalidInput(format!("postgres url: {err}")))
}

impl PostgresStore {
    /// Connects a pool to `url` as `settings` say and returns a store using the
    /// default prefix.
    pub async fn connect(url: &str, settings: PoolSettings) -> Result<Self, StorageError> {
        Self::connect_with(connect_options(url)?, settings).await
    }

    /// Connects a pool with `options` (TLS, credentials) as `settings` say and
    /// returns a store using the default prefix.
    pub async fn connect_with(
        options: PgConnectOptions,
        settings: PoolSettings,
    ) -> Result<Self, StorageError> {
        let options = options.options(settings.session_options());
        let tcp_port = options.get_socket().is_none().then(|| options.get_port());
        let stats = Arc::new(StoreStats::default());
        let pinged = Arc::clone(&stats);
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections.max(1))
            .acquire_timeout(Duration::from_secs(10))
            // sqlx pings every connection it hands out: a round trip more per
            // statement. One used a moment ago is alive; only one idle for a while
            // (it may have outlived a server restart) is pinged first.
            .test_before_acquire(false)
            .before_acquire(move |conn, meta| {
                let pinged = Arc::clone(&pinged);
                Box::pin(async move {
                    if meta.idle_for >= held::FRESH_FOR {
                        pinged.ping();
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .after_connect(move |_, _| {
                Box::pin(async move {
                    if let Some(port) = tcp_port {
                        nodelay::on_connections_to(port);
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await
            .map_err(db_error)?;
        Ok(Self::counted_by(
            pool,
            Self::DEFAULT_PREFIX,
            stats,
            settings.checkpoint_writers,
        ))
    }
}

#[cfg(any(test, feature = "testsuite"))]
pub use testing::TestSchema;

#[cfg(any(test, feature = "testsuite"))]
mod testing {
    //! A throw-away schema per test.

    use sqlx::Connection;
    use sqlx::postgres::PgConnection;

    use super::*;

    /// Where tests find PostgreSQL unless `AWAKEN_TEST_POSTGRES_URL` says otherwise.
    const DEFAULT_TEST_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

    /// A freshly created schema that is dropped (with everything in it) when this guard
    /// drops, also when the test panics.
    #[derive(Debug)]
    pub struct TestSchema {
        url: String,
        name: String,
    }

    impl TestSchema {
        /// The schema's name.
        pub fn name(&self) -> &str {
            &self.name
        }
    }

    impl PostgresStore {
        /// A store in a new, empty schema of the test database, with its guard.
        ///
        /// # Panics
        /// When PostgreSQL is unreachable: the postgres tests must fail, not pass silently.
        pub async fn for_tests() -> (PostgresStore, TestSchema) {
            let url = std::env::var("AWAKEN_TEST_POSTGRES_URL")
                .unwrap_or_else(|_| DEFAULT_TEST_URL.to_owned());
            let name = format!("awaken_test_{}", uuid::Uuid::now_v7().simple());
            let unreachable = |err: &dyn std::fmt::Display| -> ! {
                panic!(
                    "PostgreSQL is not reachable at {url}: {err}. The postgres store tests \
                     need it: start it, or point AWAKEN_TEST_POSTGRES_URL at one"
                )
            };
            let options = connect_options(&url).unwrap_or_else(|err| unreachable(&err));
            let mut admin = PgConnection::connect_with(&options)
                .await
                .unwrap_or_else(|err| unreachable(&err));
            sqlx::query(sql(&format!("CREATE SCHEMA {name}")))
                .execute(&mut admin)
                .await
                .unwrap_or_else(|err| unreachable(&err));
            let _ = admin.close().await;
            let guard = TestSchema {
                url: url.clone(),
                name: name.clone(),
            };
            let pool = PgPoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(
                    options
                        .application_name(&name)
                        .options([("search_path", name.as_str())]),
                )
                .await
                .unwrap_or_else(|err| unreachable(&err));
            (PostgresStore::new(pool), guard)
        }

        /// A store as [`Self::for_tests`] gives, on tables an earlier version
        /// created: `jsonb` records, and messages, runs and state referencing
        /// their thread `ON DELETE CASCADE` (decision 0080). The store must work
        /// on them as on its own.
        pub async fn for_tests_on_earlier_tables() -> (PostgresStore, TestSchema) {
            let (store, guard) = Self::for_tests().await;
            let p = Self::DEFAULT_PREFIX;
            let tables = [
                format!(
                    "CREATE TABLE {p}_threads (
                        id TEXT COLLATE \"C\" PRIMARY KEY,
                        seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
                        data JSONB NOT NULL,
                        fence BIGINT NOT NULL DEFAULT 0,
                        message_count BIGINT NOT NULL DEFAULT 0,
                        updated_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                ),
                format!(
                    "CREATE TABLE {p}_messages (
                        thread_id TEXT COLLATE \"C\" NOT NULL
                            REFERENCES {p}_threads (id) ON DELETE CASCADE,
                        seq BIGINT NOT NULL,
                        internal BOOLEAN NOT NULL,
                        data JSONB NOT NULL,
                        updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                        PRIMARY KEY (thread_id, seq))"
                ),
                format!(
                    "CREATE TABLE {p}_runs (
                        id TEXT COLLATE \"C\" PRIMARY KEY,
                        thread_id TEXT COLLATE \"C\" NOT NULL
                            REFERENCES {p}_threads (id) ON DELETE CASCADE,
                        status TEXT NOT NULL,
                        created_at BIGINT NOT NULL,
                        data JSONB NOT NULL,
                        updated_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                ),
                format!(
                    "CREATE TABLE {p}_state (
                        thread_id TEXT COLLATE \"C\" PRIMARY KEY
                            REFERENCES {p}_threads (id) ON DELETE CASCADE,
                        data JSONB NOT NULL,
                        updated_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                ),
            ];
            for table in tables {
                sqlx::query(sql(&table))
                    .execute(store.pool())
                    .await
                    .unwrap_or_else(|err| panic!("cannot create the earlier tables: {err}"));
            }
            (store, guard)
        }
    }

    impl Drop for TestSchema {
        fn drop(&mut self) {
            let url = self.url.clone();
            let name = self.name.clone();
            // Drop runs inside the test's runtime, which cannot be blocked on: use a
            // thread with a runtime of its own.
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|err| err.to_string())?;
                runtime.block_on(async {
                    let options = connect_options(&url).map_err(|err| err.to_string())?;
                    let mut conn = PgConnection::connect_with(&options)
                        .await
                        .map_err(|err| err.to_string())?;
                    // Connections the test left behind may hold locks on the schema.
                    sqlx::query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE application_name = $1 AND pid <> pg_backend_pid()",
                    )
                    .bind(&name)
                    .execute(&mut conn)
                    .await
                    .map_err(|err| err.to_string())?;
                    sqlx::query(sql(&format!("DROP SCHEMA IF EXISTS {name} CASCADE")))
                        .execute(&mut conn)
                        .await
                        .map_err(|err| err.to_string())?;
                    let _ = conn.close().await;
                    Ok::<(), String>(())
                })
            })
            .join();
            match dropped {
                Ok(Ok(())) => {}
                Ok(Err(err)) => eprintln!("cannot drop test schema {}: {err}", self.name),
                Err(_) => eprintln!("cannot drop test schema {}: cleanup panicked", self.name),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_schema_of_a_search_path_is_found_and_quoted() {
        assert_eq!(first_schema("tenant_a").as_deref(), Some("tenant_a"));
        assert_eq!(first_schema("\"$user\", public").as_deref(), Some("public"));
        assert_eq!(
            first_schema("\"My \"\"App\"\"\"").as_deref(),
            Some("My \"App\"")
        );
        assert_eq!(first_schema("\"$user\""), None);
        assert_eq!(quote_identifier("My \"App\""), "\"My \"\"App\"\"\"");
    }

    #[tokio::test]
    async fn a_stores_connections_send_without_nagles_delay() {
        let url = std::env::var("AWAKEN_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let options = connect_options(&url).unwrap();
        let port = options.get_port();
        let store = PostgresStore::connect_with(options, PoolSettings::default())
            .await
            .unwrap();
        let (first, second) = (store.pool().acquire().await, store.pool().acquire().await);
        let (mut first, _second) = (first.unwrap(), second.unwrap());
        sqlx::query("SELECT 1").execute(&mut *first).await.unwrap();
        // A plain connection to the same port, which has Nagle's algorithm on.
        let plain = tokio::net::TcpStream::connect((options_host(&url), port))
            .await
            .unwrap();
        assert!(!plain.nodelay().unwrap());
        assert_eq!(
            nodelay::on_connections_to(port),
            1,
            "only the plain connection lacked TCP_NODELAY"
        );
    }

    fn options_host(url: &str) -> String {
        connect_options(url).unwrap().get_host().to_owned()
    }

    #[tokio::test]
    async fn a_schema_named_by_the_search_path_is_created_when_missing() {
        let (store, schema) = PostgresStore::for_tests().await;
        let missing = format!("{}_fresh", schema.name());
        let url = std::env::var("AWAKEN_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let options = connect_options(&url)
            .unwrap()
            .options([("search_path", missing.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .unwrap();
        let fresh = PostgresStore::new(pool.clone());
        let result = fresh.ensure_schema().await;
        // Dropped whatever happened, before the assertions.
        let _ = sqlx::query(sql(&format!("DROP SCHEMA IF EXISTS {missing} CASCADE")))
            .execute(store.pool())
            .await;
        result.unwrap();
        drop(fresh);
        pool.close().await;
    }

    #[test]
    fn prefixes_must_be_identifiers() {
        for good in ["awaken", "my_app2", "_x", "A"] {
            assert!(validate_prefix(good).is_ok(), "{good}");
        }
        for bad in ["", "2fast", "a-b", "a b", "a;drop", "é", &"x".repeat(41)] {
            assert!(
                matches!(validate_prefix(bad), Err(StorageError::InvalidInput(_))),
                "{bad}"
            );
        }
    }

    async fn tables(store: &PostgresStore) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() ORDER BY table_name",
        )
        .fetch_all(store.pool())
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn schema_is_created_once_per_prefix_and_prefixes_are_independent() {
        let (store, _schema) = PostgresStore::for_tests().await;
        store.ensure_schema().await.unwrap();
        store.ensure_schema().await.expect("idempotent");
        let custom = PostgresStore::with_prefix(store.pool().clone(), "myapp").unwrap();
        custom.ensure_schema().await.unwrap();
        assert_eq!(
            tables(&store).await,
            [
                "awaken_messages",
                "awaken_profiles",
                "awaken_runs",
                "awaken_state",
                "awaken_threads",
                "awaken_webhooks",
                "myapp_messages",
                "myapp_profiles",
                "myapp_runs",
                "myapp_state",
                "myapp_threads",
                "myapp_webhooks",
            ]
        );

        let id = ThreadId::new("t").unwrap();
        custom
            .create_thread(&Thread::with_id(id.clone()))
            .await
            .unwrap();
        assert!(custom.load_thread(&id).await.unwrap().is_some());
        assert_eq!(store.load_thread(&id).await.unwrap(), None);
    }

    #[tokio::test]
    async fn concurrent_schema_creation_succeeds() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let racers: Vec<_> = (0..4)
            .map(|_| {
                let store = PostgresStore::new(store.pool().clone());
                tokio::spawn(async move { store.ensure_schema().await })
            })
            .collect();
        for racer in racers {
            racer.await.unwrap().unwrap();
        }
        assert_eq!(tables(&store).await.len(), 6);
    }

    #[tokio::test]
    async fn a_bad_prefix_is_refused() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let err = PostgresStore::with_prefix(store.pool().clone(), "x; DROP TABLE y").unwrap_err();
        assert!(matches!(err, StorageError::InvalidInput(_)), "{err:?}");
    }

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
