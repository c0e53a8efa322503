//! `awaken serve`: the HTTP gateway on a single node or a cluster member.

mod cluster;
pub mod config;
mod store;

pub use cluster::ClusterConfig;
pub use config::{ServeConfig, TOP_LEVEL_ENV_KEYS};
pub use store::{PgSslMode, PostgresConfig, StoreConfig};
