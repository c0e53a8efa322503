//! Opening the configured thread store.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use awaken_actors::state::ProfileStore;
use awaken_actors::store::{FileStore, InMemoryStore, PoolSettings, PostgresStore, ThreadRunStore};
use sqlx::postgres::{PgConnectOptions, PgSslMode as SslMode};

use super::invalid;
use crate::config::{PgSslMode, PostgresConfig, StoreConfig};
use crate::error::Result;

/// The PostgreSQL pool of a node. In a cluster (`lease_ttl` set) its writes may
/// hold a thread's row lock for half the shard lease TTL at most, and no more than
/// the default (so a paused owner's open transaction is rolled back before another
/// node can own its threads). While the database is away, an operation waits
/// for a connection no longer than a request (`backend_wait`) or a run
/// (`store.outage_timeout_secs`) waits for the store in all: each waits by
/// trying again, and one try waiting longer would overrun both.
fn pool_settings(
    config: &PostgresConfig,
    lease_ttl: Option<Duration>,
    backend_wait: Duration,
) -> PoolSettings {
    let mut settings = PoolSettings {
        max_connections: config.pool_size,
        checkpoint_writers: config.checkpoint_writers,
        ..PoolSettings::default()
    };
    if let Some(ttl) = lease_ttl {
        settings.write_hold_limit = settings.write_hold_limit.min(ttl / 2);
    }
    let outage_timeout = Duration::from_secs(config.outage_timeout_secs);
    settings.connect_wait = settings.connect_wait.min(backend_wait).min(outage_timeout);
    settings
}

/// How to reach the database of `config`: its URL, with the TLS settings of
/// the file over the URL's own.
fn connect_options(config: &PostgresConfig) -> Result<PgConnectOptions> {
    // sqlx's parse errors name the part that is wrong, never the URL itself.
    let mut options =
        PgConnectOptions::from_str(config.url.expose()).map_err(|e| invalid("store.url", e))?;
    if let Some(mode) = config.ssl_mode {
        options = options.ssl_mode(match mode {
            PgSslMode::Disable => SslMode::Disable,
            PgSslMode::Allow => SslMode::Allow,
            PgSslMode::Prefer => SslMode::Prefer,
            PgSslMode::Require => SslMode::Require,
            PgSslMode::VerifyCa => SslMode::VerifyCa,
            PgSslMode::VerifyFull => SslMode::VerifyFull,
        });
    }
    if let Some(path) = &config.ssl_root_cert_file {
        options = options.ssl_root_cert(path);
    }
    if let (Some(cert), Some(key)) = (&config.ssl_client_cert_file, &config.ssl_client_key_file) {
        options = options.ssl_client_cert(cert).ssl_client_key(key);
    }
    Ok(options)
}

/// A node's store, seen as what it keeps: threads and runs, and profile state
/// (the same database).
#[derive(Clone)]
pub struct NodeStore {
    /// Threads, runs, their state and webhooks.
    pub threads: Arc<dyn ThreadRunStore>,
    /// Profile and shared state (and what tools keep across a failover).
    pub profiles: Arc<dyn ProfileStore>,
}

impl NodeStore {
    fn of<S: ThreadRunStore + ProfileStore>(store: S) -> Self {
        let store = Arc::new(store);
        Self {
            threads: Arc::clone(&store) as Arc<dyn ThreadRunStore>,
            profiles: store,
        }
    }
}

/// Opens the configured store (a PostgreSQL schema is created or migrated);
/// `lease_ttl` is the shard lease of a cluster member, `backend_wait` how long
/// its requests wait for what is away (`server.backend_wait_secs`).
pub async fn open_store(
    config: &StoreConfig,
    lease_ttl: Option<Duration>,
    backend_wait: Duration,
) -> Result<NodeStore> {
    Ok(match config {
        StoreConfig::Memory => NodeStore::of(InMemoryStore::new()),
        StoreConfig::File { path } => NodeStore::of(
            FileStore::open(path.clone())
                .await
                .map_err(|e| invalid("store.path", e))?,
        ),
        StoreConfig::Postgres(postgres) => {
            let settings = pool_settings(postgres, lease_ttl, backend_wait);
            let store = PostgresStore::connect_with(connect_options(postgres)?, settings)
                .await
                .map_err(|e| invalid("store.url", e))?;
            store
                .ensure_schema()
                .await
                .map_err(|e| invalid("postgres", e))?;
            NodeStore::of(store)
        }
    })
}
