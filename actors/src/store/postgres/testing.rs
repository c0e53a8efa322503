use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};

use super::connect::connect_options;
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

    /// Options connecting to the schema, the sessions named `application`.
    pub fn connect_options(&self, application: &str) -> PgConnectOptions {
        connect_options(&self.url)
            .unwrap_or_else(|err| panic!("the test URL: {err}"))
            .application_name(application)
            .options([("search_path", self.name.as_str())])
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
    /// their thread `ON DELETE CASCADE` (decision 0080), approvals without the
    /// feed's column. The store must work on them as on its own.
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
            // As the first build with approvals made it: no `feed` column.
            format!(
                "CREATE TABLE {p}_approvals (
                    id TEXT COLLATE \"C\" PRIMARY KEY,
                    thread_id TEXT COLLATE \"C\" NOT NULL,
                    tenant TEXT COLLATE \"C\",
                    agent_id TEXT COLLATE \"C\" NOT NULL,
                    tool_name TEXT COLLATE \"C\" NOT NULL,
                    status TEXT NOT NULL,
                    requested_at BIGINT NOT NULL,
                    expires_at BIGINT,
                    resolved_at BIGINT,
                    data JSON NOT NULL,
                    resolution JSON,
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
