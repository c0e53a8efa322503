//! Awaken on NATS: the cluster implementations of the engine's traits.
//!
//! Everything here works on nats-server 2.9.10 and newer without 2.10+ features (see
//! `docs/cluster.md` for every subject, stream, bucket and payload).

pub mod approvals;
mod assembly;
pub mod codec;
pub mod config_store;
pub mod control;
pub mod decisions;
mod delegation;
pub mod error;
pub mod events;
mod expiry;
#[cfg(test)]
mod golden;
pub mod inbox;
pub mod kv;
mod kv_scan;
pub mod ledger;
pub mod local;
pub mod membership;
pub mod node;
mod node_metrics;
mod reconnects;
pub mod routing;
pub mod run_input;
pub mod shards;
mod streams;
mod trace_headers;

#[cfg(feature = "testing")]
pub mod testing;

pub use control::RunControl;
pub use error::ClusterError;
pub use inbox::KvRunInbox;
pub use ledger::LedgerMailbox;
pub use local::LocalNode;
pub use run_input::{ClusterRunInbox, RunInputPlacement};
