//! Opening the configured thread store.

use std::sync::Arc;
use std::time::Duration;

use awaken_actors::store::{FileStore, InMemoryStore, PoolSettings, PostgresStore, ThreadRunStore};

use super::invalid;
use crate::error::Result;
use crate::serve::StoreConfig;

/// The PostgreSQL pool of a node. In a cluster (`lease_ttl` set) its writes may
/// hold a thread's row lock for half the shard lease TTL at most, and no more than
/// the default (so a paused owner's open transaction is rolled back before another
/// node can own its threads).
fn pool_settings(lease_ttl: Option<Duration>) -> PoolSettings {
    let mut settings = PoolSettings::default();
    if let Some(ttl) = lease_ttl {
        settings.write_hold_limit = settings.write_hold_limit.min(ttl / 2);
    }
    settings
}

/// Opens the configured thread store (a PostgreSQL schema is created or
/// migrated); `lease_ttl` is the shard lease of a cluster member.
pub async fn open_store(
    config: &StoreConfig,
    lease_ttl: Option<Duration>,
) -> Result<Arc<dyn ThreadRunStore>> {
    Ok(match config {
        StoreConfig::Memory => Arc::new(InMemoryStore::new()),
        StoreConfig::File { path } => Arc::new(
            FileStore::open(path.clone())
                .await
                .map_err(|e| invalid("store.path", e))?,
        ),
        StoreConfig::Postgres {
            url,
            pool_size,
            checkpoint_writers,
        } => {
            let mut settings = pool_settings(lease_ttl);
            settings.max_connections = *pool_size;
            settings.checkpoint_writers = *checkpoint_writers;
            let store = PostgresStore::connect(url, settings)
                .await
                .map_err(|e| invalid("store.url", e))?;
            store
                .ensure_schema()
                .await
                .map_err(|e| invalid("postgres", e))?;
            Arc::new(store)
        }
    })
}
