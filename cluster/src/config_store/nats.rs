//! The cluster's config store: one key of a JetStream KV bucket, written with
//! compare-and-set on its revision and watched by every node.

use async_nats::jetstream::{self, kv};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;

use super::{ConfigStore, ConfigVersion, DOCUMENT_KEY, conflict};
use crate::error::ClusterError;
use crate::kv::{BucketSpec, ensure_bucket};

/// The bucket holding the configuration document.
pub const DEFAULT_CONFIG_BUCKET: &str = "awaken_config";

/// The configuration document in a KV bucket every node shares.
#[derive(Debug, Clone)]
pub struct NatsConfigStore {
    kv: kv::Store,
}

impl NatsConfigStore {
    /// Opens the store in `bucket` (created when missing, `replicas` copies).
    pub async fn open(
        js: &jetstream::Context,
        bucket: &str,
        replicas: usize,
    ) -> Result<Self, ClusterError> {
        let spec = BucketSpec::new(bucket).with_replicas(replicas);
        Ok(Self {
            kv: ensure_bucket(js, &spec).await?,
        })
    }
}

fn version(entry: kv::Entry) -> Option<ConfigVersion> {
    (entry.operation == kv::Operation::Put).then_some(ConfigVersion {
        revision: entry.revision,
        document: entry.value,
    })
}

#[async_trait]
impl ConfigStore for NatsConfigStore {
    async fn load(&self) -> Result<Option<ConfigVersion>, ClusterError> {
        let entry = self
            .kv
            .entry(DOCUMENT_KEY)
            .await
            .map_err(ClusterError::nats)?;
        Ok(entry.and_then(version))
    }

    async fn save(&self, document: Bytes, expected: Option<u64>) -> Result<u64, ClusterError> {
        match expected {
            None => match self.kv.create(DOCUMENT_KEY, document).await {
                Ok(revision) => Ok(revision),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Err(conflict()),
                Err(e) => Err(ClusterError::nats(e)),
            },
            Some(revision) => match self.kv.update(DOCUMENT_KEY, document, revision).await {
                Ok(revision) => Ok(revision),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Err(conflict()),
                Err(e) => Err(ClusterError::nats(e)),
            },
        }
    }

    async fn watch(
        &self,
    ) -> Result<BoxStream<'static, Result<ConfigVersion, ClusterError>>, ClusterError> {
        let watcher = self
            .kv
            .watch_with_history(DOCUMENT_KEY)
            .await
            .map_err(ClusterError::nats)?;
        let versions = watcher.filter_map(|entry| async move {
            match entry {
                Ok(entry) => version(entry).map(Ok),
                Err(e) => Some(Err(ClusterError::nats(e))),
            }
        });
        Ok(versions.boxed())
    }
}
