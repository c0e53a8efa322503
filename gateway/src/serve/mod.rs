//! `awaken serve`: the HTTP gateway on a single node or a cluster member.

pub mod config;

pub use config::{ClusterConfig, ServeConfig, StoreConfig};
