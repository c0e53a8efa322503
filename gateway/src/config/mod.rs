//! A node's configuration: `awaken.toml` and the `AWAKEN_*` environment, as
//! `awaken serve` and `awaken node` read it (`ServeConfig` and its `[store]` and
//! `[cluster]` sections).

mod cluster;
pub mod file;
mod node;
mod store;

pub use cluster::ClusterConfig;
pub use file::{ServeConfig, TOP_LEVEL_ENV_KEYS};
pub use node::{BudgetOrigin, NodeConfig, container_limit};
pub use store::{PgSslMode, PostgresConfig, StoreConfig};
