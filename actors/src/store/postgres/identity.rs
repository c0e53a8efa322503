//! Which database a store writes to: a row naming the store, made with its
//! tables, and checked on every connection opened after it was first read.
//!
//! A database that comes back from an outage may not be the one that went away:
//! a server restarted on an empty volume, a failover onto a replica restored
//! from another cluster, a URL that now resolves elsewhere. Writing there would
//! split a thread's history between two databases, so the store refuses: once
//! it has read its identity, every new connection reads the row again and is
//! dropped when the row is gone or differs. The refusal is an outage (nothing
//! was written, the same request passes once the right database is back), so
//! runs wait for it up to `store.outage_timeout` and readiness stays false.

use std::sync::{Mutex, OnceLock};

use sqlx::postgres::PgConnection;

use super::sql;
use crate::error::StorageError;

/// The layout of the tables this build writes. A database recorded with a
/// newer one was written by a newer build, which this one cannot serve.
pub(super) const SCHEMA_VERSION: i32 = 1;

/// SQLSTATE `undefined_table`: the identity row's table does not exist.
const UNDEFINED_TABLE: &str = "42P01";

/// A store's identity as its database records it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recorded {
    store_id: String,
    schema_version: i32,
}

/// Why a connection was refused: it reached a database other than the store's.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct WrongDatabase(String);

/// The identity a store expects, and the statements that make and read it.
#[derive(Debug)]
pub(super) struct Identity {
    expected: OnceLock<Recorded>,
    /// Why the latest new connection was refused, until one is accepted again:
    /// what a request that found no connection is told, and logged once per
    /// episode rather than once per connection attempt.
    refusal: Mutex<Option<String>>,
    pub(super) schema: String,
    insert: String,
    read: String,
}

impl Identity {
    /// The identity of the store on tables `{p}_…`.
    pub(super) fn new(p: &str) -> Self {
        Self {
            expected: OnceLock::new(),
            refusal: Mutex::new(None),
            schema: format!(
                "CREATE TABLE IF NOT EXISTS {p}_identity (
                    singleton BOOLEAN PRIMARY KEY DEFAULT true CHECK (singleton),
                    store_id TEXT NOT NULL,
                    schema_version INTEGER NOT NULL,
                    created_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            ),
            insert: format!(
                "INSERT INTO {p}_identity (store_id, schema_version) VALUES ($1, $2)
                 ON CONFLICT (singleton) DO NOTHING"
            ),
            read: format!("SELECT store_id, schema_version FROM {p}_identity"),
        }
    }

    /// Names the tables' store if they have no name yet (tables created now,
    /// or by a build before the identity existed), inside the creating
    /// transaction.
    pub(super) async fn name(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        let store_id = uuid::Uuid::now_v7().to_string();
        sqlx::query(sql(&self.insert))
            .bind(store_id)
            .bind(SCHEMA_VERSION)
            .execute(conn)
            .await
            .map(|_| ())
    }

    /// Reads the identity the tables record and expects it from now on; a
    /// layout newer than this build's is refused.
    pub(super) async fn learn(&self, conn: &mut PgConnection) -> Result<(), StorageError> {
        let recorded = self
            .recorded(conn)
            .await
            .map_err(super::db_error)?
            .ok_or_else(|| {
                StorageError::Io("the store's tables have no identity row".to_owned())
            })?;
        if recorded.schema_version > SCHEMA_VERSION {
            return Err(StorageError::InvalidInput(format!(
                "the database's tables have schema version {}, newer than this build's \
                 {SCHEMA_VERSION}: run a build that knows it, or point store.url elsewhere",
                recorded.schema_version
            )));
        }
        // Learned once per store: a store's schema is made once.
        let _ = self.expected.set(recorded);
        Ok(())
    }

    /// Checks a new connection: `Ok` when the store has not learned its
    /// identity yet or the database records the same one.
    pub(super) async fn verify(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        let Some(expected) = self.expected.get() else {
            return Ok(());
        };
        let found = match self.recorded(conn).await {
            Ok(found) => found,
            Err(error) if is_undefined_table(&error) => None,
            Err(error) => return Err(error),
        };
        let refusal = match found {
            Some(found) if found == *expected => {
                self.refused(None);
                return Ok(());
            }
            Some(found) => format!(
                "the database is not the one this store started on: it records store {} \
                 (schema version {}), this store is {} (schema version {}); refusing to \
                 write to it until store.url reaches the store's own database again",
                found.store_id, found.schema_version, expected.store_id, expected.schema_version
            ),
            None => format!(
                "the database has no record of this store (an empty database came \
                 back?): refusing to write to it until store.url reaches store {}'s own \
                 database again",
                expected.store_id
            ),
        };
        self.refused(Some(&refusal));
        Err(wrong_database(refusal))
    }

    /// Notes the latest connection's verdict, logging a new refusal.
    fn refused(&self, refusal: Option<&str>) {
        let mut latest = self
            .refusal
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(refusal) = refusal
            && latest.as_deref() != Some(refusal)
        {
            tracing::error!(error = %refusal, "refusing the database");
        }
        *latest = refusal.map(str::to_owned);
    }

    /// `error` from waiting for a connection, saying why there was none when
    /// every new one was refused: a pool that only sees refused connections
    /// times out, which alone would hide the reason.
    pub(super) fn explain(&self, error: sqlx::Error) -> sqlx::Error {
        if !matches!(error, sqlx::Error::PoolTimedOut) {
            return error;
        }
        let latest = self
            .refusal
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match latest.as_ref() {
            Some(refusal) => wrong_database(refusal.clone()),
            None => error,
        }
    }

    async fn recorded(&self, conn: &mut PgConnection) -> Result<Option<Recorded>, sqlx::Error> {
        let row: Option<(String, i32)> =
            sqlx::query_as(sql(&self.read)).fetch_optional(conn).await?;
        Ok(row.map(|(store_id, schema_version)| Recorded {
            store_id,
            schema_version,
        }))
    }
}

fn wrong_database(refusal: String) -> sqlx::Error {
    sqlx::Error::Configuration(Box::new(WrongDatabase(refusal)))
}

/// The refusal `error` carries, when it is one by [`Identity::verify`].
pub(super) fn refusal_in(error: &sqlx::Error) -> Option<&str> {
    match error {
        sqlx::Error::Configuration(source) => source
            .downcast_ref::<WrongDatabase>()
            .map(|wrong| wrong.0.as_str()),
        _ => None,
    }
}

fn is_undefined_table(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|error| error.code())
        .is_some_and(|code| code == UNDEFINED_TABLE)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use super::super::{PoolSettings, PostgresStore};
    use super::*;
    use crate::contract::Thread;
    use crate::store::ThreadRunStore;

    /// Moves every table of schema `from` into schema `to`.
    async fn move_tables(admin: &PostgresStore, from: &str, to: &str) {
        let tables: Vec<(String,)> =
            sqlx::query_as("SELECT tablename::text FROM pg_tables WHERE schemaname = $1")
                .bind(from)
                .fetch_all(admin.pool())
                .await
                .unwrap();
        for (table,) in tables {
            sqlx::query(sql(&format!("ALTER TABLE {from}.{table} SET SCHEMA {to}")))
                .execute(admin.pool())
                .await
                .unwrap();
        }
    }

    /// Ends every session named `application`, as a server restart does.
    async fn restart_sessions(admin: &PostgresStore, application: &str) {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(application)
        .execute(admin.pool())
        .await
        .unwrap();
    }

    /// Creates a thread, once its store has noticed its sessions ended (the
    /// first try may still be sent on a connection that is gone): the outcome.
    async fn create(store: &PostgresStore, id: &str) -> Result<(), StorageError> {
        let thread = Thread::with_id(crate::ids::ThreadId::new(id).unwrap());
        for _ in 0..3 {
            match store.create_thread(&thread).await {
                Err(StorageError::Unavailable(reason)) if !reason.contains("refusing") => {}
                outcome => return outcome,
            }
        }
        store.create_thread(&thread).await
    }

    async fn count(admin: &PostgresStore, schema: &str, table: &str) -> Option<i64> {
        sqlx::query_as::<_, (i64,)>(sql(&format!("SELECT count(*) FROM {schema}.{table}")))
            .fetch_one(admin.pool())
            .await
            .ok()
            .map(|(n,)| n)
    }

    #[tokio::test]
    async fn a_database_that_comes_back_empty_or_another_is_refused_until_its_own_is_back() {
        let (admin, home) = PostgresStore::for_tests().await;
        let (_, away) = PostgresStore::for_tests().await;
        let application = format!("{}_node", home.name());
        let settings = PoolSettings {
            max_connections: 2,
            connect_wait: Duration::from_secs(1),
            ..PoolSettings::default()
        };
        let store = PostgresStore::connect_with(home.connect_options(&application), settings)
            .await
            .unwrap();
        create(&store, "before").await.unwrap();

        // The database comes back empty: every table gone from the schema.
        move_tables(&admin, home.name(), away.name()).await;
        restart_sessions(&admin, &application).await;
        let refused = create(&store, "into-the-empty-one").await.unwrap_err();
        assert!(
            matches!(&refused, StorageError::Unavailable(reason)
                if reason.contains("no record of this store")),
            "{refused}"
        );
        assert_eq!(
            count(&admin, home.name(), "awaken_threads").await,
            None,
            "no table was made in the empty database"
        );

        // Another store's database: tables of their own, another identity.
        let stranger =
            PostgresStore::connect_with(home.connect_options("stranger"), PoolSettings::default())
                .await
                .unwrap();
        stranger.ensure_schema().await.unwrap();
        restart_sessions(&admin, &application).await;
        let refused = create(&store, "into-another-one").await.unwrap_err();
        assert!(
            matches!(&refused, StorageError::Unavailable(reason)
                if reason.contains("not the one this store started on")),
            "{refused}"
        );
        assert_eq!(count(&admin, home.name(), "awaken_threads").await, Some(0));

        // Its own database back: served again, and nothing went elsewhere.
        stranger.pool().close().await;
        sqlx::query(sql(&format!("DROP SCHEMA {} CASCADE", home.name())))
            .execute(admin.pool())
            .await
            .unwrap();
        sqlx::query(sql(&format!("CREATE SCHEMA {}", home.name())))
            .execute(admin.pool())
            .await
            .unwrap();
        move_tables(&admin, away.name(), home.name()).await;
        restart_sessions(&admin, &application).await;
        create(&store, "after").await.unwrap();
        assert_eq!(count(&admin, home.name(), "awaken_threads").await, Some(2));
    }

    #[tokio::test]
    async fn tables_of_a_newer_schema_version_are_refused_at_start() {
        let (admin, home) = PostgresStore::for_tests().await;
        admin.ensure_schema().await.unwrap();
        sqlx::query(sql(&format!(
            "UPDATE {}.awaken_identity SET schema_version = {}",
            home.name(),
            SCHEMA_VERSION + 1
        )))
        .execute(admin.pool())
        .await
        .unwrap();
        let store =
            PostgresStore::connect_with(home.connect_options("newer"), PoolSettings::default())
                .await
                .unwrap();
        let refused = store.ensure_schema().await.unwrap_err();
        assert!(
            matches!(&refused, StorageError::InvalidInput(reason)
                if reason.contains("schema version 2, newer than this build's 1")),
            "{refused}"
        );
    }
}
