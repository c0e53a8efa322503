//! `ConfigStore`: the one versioned configuration document (the config API's
//! agents, models, providers and MCP servers) that every node of a cluster reads.
//!
//! The document is opaque here: the gateway encodes and validates it. Writes are
//! compare-and-set on the document's revision, so each write is checked against
//! exactly the document it replaces and the stored document is always one that was
//! validated whole. Nodes follow the store with [`ConfigStore::watch`] and swap
//! their registries when a new revision arrives.

mod memory;
mod nats;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

pub use memory::MemoryConfigStore;
pub use nats::{DEFAULT_CONFIG_BUCKET, NatsConfigStore};

use crate::error::ClusterError;

/// One revision of the configuration document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigVersion {
    /// Grows with every write; the compare-and-set token.
    pub revision: u64,
    /// The encoded document.
    pub document: Bytes,
}

/// Keeps the configuration document every node reads.
#[async_trait]
pub trait ConfigStore: Send + Sync + 'static {
    /// The latest document; `None` before the first write.
    async fn load(&self) -> Result<Option<ConfigVersion>, ClusterError>;

    /// Writes `document` if the latest revision is still `expected` (`None`: no
    /// document yet) and returns the new revision; [`ClusterError::Conflict`]
    /// when another write came first.
    async fn save(&self, document: Bytes, expected: Option<u64>) -> Result<u64, ClusterError>;

    /// The latest document, then every later one, in revision order. A slow reader
    /// may skip revisions, never see them out of order: only the latest matters.
    async fn watch(
        &self,
    ) -> Result<BoxStream<'static, Result<ConfigVersion, ClusterError>>, ClusterError>;
}

/// The key every config conflict reports.
pub(crate) const DOCUMENT_KEY: &str = "document";

fn conflict() -> ClusterError {
    ClusterError::Conflict {
        key: DOCUMENT_KEY.to_owned(),
    }
}
