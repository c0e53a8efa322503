//! Awaken on NATS: the cluster implementations of the engine's traits.
//!
//! Everything here works on nats-server 2.9.10 and newer without 2.10+ features (see
//! `docs/cluster.md` for every subject, stream, bucket and payload).

pub mod error;
pub mod kv;
pub mod membership;

#[cfg(feature = "testing")]
pub mod testing;

pub use error::ClusterError;
