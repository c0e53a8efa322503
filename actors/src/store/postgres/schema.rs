//! The store's tables and the text of every statement, with the prefix filled in.

use super::{PostgresStore, Tx, approvals, db_error, sql, webhooks, write};
use crate::error::StorageError;

/// Longest accepted prefix: keeps every table and index name within PostgreSQL's 63 bytes.
const MAX_PREFIX_LEN: usize = 40;

/// Every statement, with the table prefix filled in once.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) prefix: String,
    pub(super) schema: Vec<String>,
    pub(super) insert_thread: String,
    pub(super) load_thread: String,
    pub(super) lock_thread_data: String,
    /// Locks a thread's row before `delete_thread` deletes its rows (decision 0080).
    pub(super) lock_thread: String,
    pub(super) update_thread_data: String,
    pub(super) delete_thread: String,
    pub(super) list_threads: String,
    pub(super) list_summaries: String,
    pub(super) checkpoint: String,
    pub(super) one_checkpoint: String,
    pub(super) fence: String,
    pub(super) current_fence: String,
    /// Locks a thread's row and gives it a new version, so that a fenced read
    /// waiting on it knows its snapshot missed the write (`create_run`).
    pub(super) touch_thread: String,
    pub(super) thread_exists: String,
    pub(super) snapshot: String,
    pub(super) fenced_snapshot: String,
    pub(super) page_messages: String,
    pub(super) insert_run: String,
    pub(super) load_run: String,
    pub(super) latest_run: String,
    pub(super) count_runs: String,
    pub(super) page_runs: String,
    pub(super) waiting_runs: String,
    pub(super) get_profile: String,
    pub(super) put_profile: String,
    pub(super) delete_profile: String,
    pub(super) webhooks: webhooks::WebhookStatements,
    pub(super) approvals: approvals::ApprovalStatements,
}

impl Statements {
    /// The statements for tables `{p}_…`.
    pub(super) fn new(p: &str) -> Self {
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
            // The thread's open approvals are cancelled (`$2` when, `$3` the
            // resolution) and kept, and returned for the feed: module `approvals`.
            delete_thread: format!(
                "WITH messages AS (DELETE FROM {p}_messages WHERE thread_id = $1),
                      runs AS (DELETE FROM {p}_runs WHERE thread_id = $1),
                      state AS (DELETE FROM {p}_state WHERE thread_id = $1),
                      webhooks AS (DELETE FROM {p}_webhooks WHERE thread_id = $1),
                      approvals AS ({cancel_approvals}),
                      threads AS (DELETE FROM {p}_threads WHERE id = $1)
                 SELECT {approval_columns} FROM approvals",
                cancel_approvals = approvals::cancel_thread_statement(p),
                approval_columns = approvals::COLUMNS,
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
            touch_thread: format!(
                "UPDATE {p}_threads SET updated_at = now() WHERE id = $1 RETURNING 1"
            ),
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
            // On the partial index of unfinished runs: its predicate is repeated
            // because the planner does not infer it from `status = 'waiting'`.
            waiting_runs: format!(
                "SELECT count(*), min((data->>'updated_at')::bigint) FROM {p}_runs
                 WHERE status <> 'done' AND status = 'waiting'"
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
            approvals: approvals::ApprovalStatements::new(p),
        }
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

/// Refuses a prefix that is not a plain SQL identifier.
pub(super) fn validate_prefix(prefix: &str) -> Result<(), StorageError> {
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

/// The first schema a `search_path` setting names, as PostgreSQL resolves it
/// (`$user` skipped): quoted as written, unquoted folded to lower case.
fn first_schema(search_path: &str) -> Option<String> {
    search_path
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty() && *name != "\"$user\"" && *name != "$user")
        .map(
            |name| match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
                Some(quoted) => quoted.replace("\"\"", "\""),
                None => name.to_ascii_lowercase(),
            },
        )
        .next()
}

/// The table or index a schema statement creates (`CREATE … IF NOT EXISTS name`).
fn created_relation(statement: &str) -> Option<&str> {
    // `ALTER TABLE … ADD COLUMN IF NOT EXISTS` creates no relation.
    if !statement.trim_start().starts_with("CREATE") {
        return None;
    }
    let (_, rest) = statement.split_once("IF NOT EXISTS")?;
    rest.split_whitespace().next()
}

/// `name` as a quoted SQL identifier.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl PostgresStore {
    /// Creates the tables and indexes if absent. Idempotent; safe to run from several
    /// processes at once. Operations call it themselves before their first query;
    /// a store creates them once (a second call, or the first operation after it,
    /// sends nothing).
    pub async fn ensure_schema(&self) -> Result<(), StorageError> {
        self.ready().await
    }

    async fn create_schema(&self) -> Result<(), StorageError> {
        let mut tx = self.begin_with("BEGIN").await?;
        // The URL may name a schema (`search_path`) that does not exist yet:
        // PostgreSQL then has nowhere to create the tables, so create it first.
        let relations: Vec<&str> = self
            .sql
            .schema
            .iter()
            .chain(&self.sql.webhooks.schema)
            .chain(&self.sql.approvals.schema)
            .chain([&self.identity.schema])
            .filter_map(|statement| created_relation(statement))
            .collect();
        let (current, search_path, present): (Option<String>, String, i64) = sqlx::query_as(
            "SELECT current_schema()::text, current_setting('search_path'),
                    (SELECT count(*) FROM pg_class c
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = current_schema() AND c.relname = ANY($1))",
        )
        .bind(&relations)
        .fetch_one(self.send_in(&mut tx))
        .await
        .map_err(db_error)?;
        // All there (every start but a cluster's first): no DDL, whose
        // `CREATE INDEX IF NOT EXISTS` would lock the tables against every
        // node's writes while it checks, even for an index that exists.
        if usize::try_from(present).is_ok_and(|present| present == relations.len()) {
            return self.know_identity(tx).await;
        }
        let missing = current.is_none();
        let schema = match current {
            Some(schema) => schema,
            None => first_schema(&search_path).ok_or_else(|| {
                StorageError::InvalidInput(format!(
                    "the search_path `{search_path}` names no schema to create the tables in: \
                     name one (`?options=-c%20search_path%3DNAME`)"
                ))
            })?,
        };
        // Creators of the same tables queue here, so `IF NOT EXISTS` never races;
        // the key names the schema, so stores in the database's other schemas
        // (tenants, tests) never wait behind a creation stuck in this one.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!("awaken-schema:{schema}:{}", self.sql.prefix))
            .execute(self.send_in(&mut tx))
            .await
            .map_err(db_error)?;
        if missing {
            sqlx::query(sql(&format!(
                "CREATE SCHEMA IF NOT EXISTS {}",
                quote_identifier(&schema)
            )))
            .execute(self.send_in(&mut tx))
            .await
            .map_err(db_error)?;
        }
        let statements = self
            .sql
            .schema
            .iter()
            .chain(&self.sql.webhooks.schema)
            .chain(&self.sql.approvals.schema);
        for statement in statements.chain([&self.identity.schema]) {
            sqlx::query(sql(statement))
                .execute(self.send_in(&mut tx))
                .await
                .map_err(db_error)?;
        }
        self.know_identity(tx).await
    }

    /// Names the tables' store if they have no name yet (new tables, or ones a
    /// build before the identity made), learns the name (module `identity`)
    /// and commits.
    async fn know_identity(&self, mut tx: Tx) -> Result<(), StorageError> {
        self.identity
            .name(self.send_in(&mut tx))
            .await
            .map_err(db_error)?;
        self.identity.learn(self.send_in(&mut tx)).await?;
        self.stats.statement();
        tx.commit().await.map_err(db_error)
    }

    /// Creates the schema once per store, before the first statement needs it.
    pub(super) async fn ready(&self) -> Result<(), StorageError> {
        self.schema_ready
            .get_or_try_init(|| self.create_schema())
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::postgres::PgPoolOptions;

    use super::*;
    use crate::contract::Thread;
    use crate::ids::ThreadId;
    use crate::store::ThreadRunStore;
    use crate::store::postgres::PoolSettings;
    use crate::store::postgres::connect::connect_options;

    #[test]
    fn the_first_schema_of_a_search_path_is_found_and_quoted() {
        assert_eq!(first_schema("tenant_a").as_deref(), Some("tenant_a"));
        assert_eq!(first_schema("\"$user\", public").as_deref(), Some("public"));
        assert_eq!(
            first_schema("\"My \"\"App\"\"\"").as_deref(),
            Some("My \"App\"")
        );
        assert_eq!(first_schema("\"$user\""), None);
        assert_eq!(first_schema("Tenant_A").as_deref(), Some("tenant_a"));
        assert_eq!(first_schema("\"Tenant_A\"").as_deref(), Some("Tenant_A"));
        assert_eq!(quote_identifier("My \"App\""), "\"My \"\"App\"\"\"");
    }

    #[tokio::test]
    async fn a_schema_named_by_the_search_path_is_created_when_missing() {
        let (store, schema) = PostgresStore::for_tests().await;
        // Unquoted, as users write it: PostgreSQL folds it to lower case.
        let missing = format!("{}_Fresh", schema.name());
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
        let created = if result.is_ok() {
            tables(&fresh).await.len()
        } else {
            0
        };
        // Dropped whatever happened, before the assertions.
        let _ = sqlx::query(sql(&format!("DROP SCHEMA IF EXISTS {missing} CASCADE")))
            .execute(store.pool())
            .await;
        result.unwrap();
        assert_eq!(
            created, 8,
            "the tables are in the schema the search_path names"
        );
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
                "awaken_approvals",
                "awaken_identity",
                "awaken_messages",
                "awaken_profiles",
                "awaken_runs",
                "awaken_state",
                "awaken_threads",
                "awaken_webhooks",
                "myapp_approvals",
                "myapp_identity",
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_starting_on_existing_tables_waits_for_no_write() {
        let (store, schema) = PostgresStore::for_tests().await;
        store.ensure_schema().await.unwrap();
        // Another node's write, not yet committed, on a table with indexes.
        let mut writing = store.pool().begin().await.unwrap();
        sqlx::query(
            "INSERT INTO awaken_runs (id, thread_id, status, created_at, data)
             VALUES ('r-busy', 't-busy', 'running', 0, '{}')",
        )
        .execute(&mut *writing)
        .await
        .unwrap();
        let url = std::env::var("AWAKEN_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let options = connect_options(&url)
            .unwrap()
            .options([("search_path", schema.name())]);
        let starting = PostgresStore::connect_with(options, PoolSettings::default())
            .await
            .unwrap();

        let ready = starting.ensure_schema().await;

        writing.rollback().await.unwrap();
        starting.pool().close().await;
        ready.expect("ready without waiting for the write (nor its lock timeout)");
    }

    #[test]
    fn every_schema_statement_names_what_it_creates() {
        let statements = Statements::new("awaken");
        let created: Vec<&str> = statements
            .schema
            .iter()
            .chain(&statements.webhooks.schema)
            .map(|statement| created_relation(statement).unwrap_or_else(|| panic!("{statement}")))
            .collect();
        assert!(created.contains(&"awaken_threads"), "{created:?}");
        assert!(created.contains(&"awaken_runs_unfinished"), "{created:?}");
        assert!(
            created.iter().all(|name| name.starts_with("awaken_")),
            "{created:?}"
        );
    }

    #[tokio::test]
    async fn a_creation_stuck_in_one_schema_holds_up_no_other() {
        let (stuck, stuck_schema) = PostgresStore::for_tests().await;
        let (other, _other_schema) = PostgresStore::for_tests().await;
        // A transaction left open after creating one of the tables: `stuck`'s
        // creation waits on it, holding its lock on creating these tables.
        let mut blocker = stuck.pool().begin().await.unwrap();
        sqlx::query("CREATE TABLE awaken_threads (id TEXT)")
            .execute(&mut *blocker)
            .await
            .unwrap();
        let creating = tokio::spawn({
            let stuck = stuck.clone();
            async move { stuck.ensure_schema().await }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
            )
            .bind(stuck_schema.name())
            .fetch_one(other.pool())
            .await
            .unwrap();
            if waiting > 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the stuck creation never waited"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        tokio::time::timeout(Duration::from_secs(10), other.ensure_schema())
            .await
            .expect("a store in another schema creates its tables meanwhile")
            .unwrap();
        assert_eq!(tables(&other).await.len(), 8);

        blocker.rollback().await.unwrap();
        creating.await.unwrap().unwrap();
        assert_eq!(tables(&stuck).await.len(), 8);
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
        assert_eq!(tables(&store).await.len(), 8);
        let identities: (i64,) = sqlx::query_as("SELECT count(*) FROM awaken_identity")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(identities.0, 1, "the racers agreed on one identity");
    }

    #[tokio::test]
    async fn a_bad_prefix_is_refused() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let err = PostgresStore::with_prefix(store.pool().clone(), "x; DROP TABLE y").unwrap_err();
        assert!(matches!(err, StorageError::InvalidInput(_)), "{err:?}");
    }
}
