//! Connecting a store: the pool, its session settings and its connections' options.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::identity::Identity;
use super::stats::StoreStats;
use super::{PostgresStore, db_error, held, nodelay};
use crate::error::StorageError;

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
    /// How long an operation waits for a connection (the pool's acquire
    /// timeout): while the server is away, or refused (module `identity`), the
    /// pool keeps trying to connect until then.
    pub connect_wait: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            max_connections: 16,
            write_hold_limit: Duration::from_secs(2),
            checkpoint_writers: 2,
            connect_wait: Duration::from_secs(10),
        }
    }
}

impl PoolSettings {
    /// The session settings every connection of the pool starts with, for
    /// [`PgConnectOptions::options`] (pools built by hand should add them too).
    ///
    /// `jit` is off: the store's statements are short lookups, but without
    /// statistics (a new database, autovacuum off) the planner's estimates grow
    /// with the tables until they pass `jit_above_cost`, and then every thread
    /// read is compiled first — tens of milliseconds of the server's CPU for a
    /// statement that takes a fraction of one (decision 0090).
    pub fn session_options(&self) -> [(&'static str, String); 3] {
        let ms = self.write_hold_limit.as_millis().clamp(1, i32::MAX as u128);
        [
            ("idle_in_transaction_session_timeout", ms.to_string()),
            ("lock_timeout", ms.to_string()),
            ("jit", "off".to_owned()),
        ]
    }
}

/// Connection options for `url`, as a clear error rather than sqlx's.
pub(super) fn connect_options(url: &str) -> Result<PgConnectOptions, StorageError> {
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
        let identity = Arc::new(Identity::new(PostgresStore::DEFAULT_PREFIX));
        let verifier = Arc::clone(&identity);
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections.max(1))
            .acquire_timeout(settings.connect_wait)
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
            .after_connect(move |conn, _| {
                let identity = Arc::clone(&verifier);
                Box::pin(async move {
                    if let Some(port) = tcp_port {
                        nodelay::on_connections_to(port);
                    }
                    identity.verify(conn).await
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
            identity,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::sql;
    use super::*;

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

    /// The pool's sessions start with the settings the store relies on.
    #[tokio::test]
    async fn a_stores_sessions_run_without_jit_and_with_its_time_limits() {
        let url = std::env::var("AWAKEN_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let settings = PoolSettings {
            write_hold_limit: Duration::from_millis(1500),
            ..PoolSettings::default()
        };
        let store = PostgresStore::connect(&url, settings).await.unwrap();
        let mut connection = store.pool().acquire().await.unwrap();
        let mut shown = Vec::new();
        for setting in ["jit", "lock_timeout", "idle_in_transaction_session_timeout"] {
            let value: String = sqlx::query_scalar(sql(&format!("SHOW {setting}")))
                .fetch_one(&mut *connection)
                .await
                .unwrap();
            shown.push(value);
        }
        assert_eq!(shown, ["off", "1500ms", "1500ms"]);
    }

    fn options_host(url: &str) -> String {
        connect_options(url).unwrap().get_host().to_owned()
    }
}
