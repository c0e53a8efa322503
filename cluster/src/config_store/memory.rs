//! The in-process config store: a single node's document, optionally kept in a
//! file so it survives restarts.

use std::path::PathBuf;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::watch;

use super::{ConfigStore, ConfigVersion, conflict};
use crate::error::ClusterError;

/// The document in memory, written through to `path` when one is given.
#[derive(Debug)]
pub struct MemoryConfigStore {
    latest: watch::Sender<Option<ConfigVersion>>,
    path: Option<PathBuf>,
    /// Serializes writes so the file and memory always agree.
    writing: tokio::sync::Mutex<()>,
}

impl Default for MemoryConfigStore {
    fn default() -> Self {
        Self::from_version(None, None)
    }
}

impl MemoryConfigStore {
    /// An empty store that forgets everything when the process ends.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store kept in the file at `path`, starting from its contents when it
    /// exists (the revision restarts at 1: it orders writes, it is no history).
    pub async fn open(path: PathBuf) -> Result<Self, ClusterError> {
        let document = match tokio::fs::read(&path).await {
            Ok(bytes) => Some(ConfigVersion {
                revision: 1,
                document: Bytes::from(bytes),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(file_error(&path, e)),
        };
        Ok(Self::from_version(document, Some(path)))
    }

    fn from_version(latest: Option<ConfigVersion>, path: Option<PathBuf>) -> Self {
        Self {
            latest: watch::Sender::new(latest),
            path,
            writing: tokio::sync::Mutex::new(()),
        }
    }

    fn revision(&self) -> Option<u64> {
        self.latest.borrow().as_ref().map(|v| v.revision)
    }
}

fn file_error(path: &std::path::Path, error: std::io::Error) -> ClusterError {
    ClusterError::InvalidInput(format!("config file {}: {error}", path.display()))
}

#[async_trait]
impl ConfigStore for MemoryConfigStore {
    async fn load(&self) -> Result<Option<ConfigVersion>, ClusterError> {
        Ok(self.latest.borrow().clone())
    }

    async fn save(&self, document: Bytes, expected: Option<u64>) -> Result<u64, ClusterError> {
        let _writing = self.writing.lock().await;
        if self.revision() != expected {
            return Err(conflict());
        }
        if let Some(path) = &self.path {
            // Write beside, then rename: a crash leaves the old file or the new one.
            let staged = path.with_extension("tmp");
            tokio::fs::write(&staged, &document)
                .await
                .map_err(|e| file_error(&staged, e))?;
            tokio::fs::rename(&staged, path)
                .await
                .map_err(|e| file_error(path, e))?;
        }
        let revision = expected.unwrap_or(0) + 1;
        self.latest
            .send_replace(Some(ConfigVersion { revision, document }));
        Ok(revision)
    }

    async fn watch(
        &self,
    ) -> Result<BoxStream<'static, Result<ConfigVersion, ClusterError>>, ClusterError> {
        let mut receiver = self.latest.subscribe();
        receiver.mark_changed();
        let versions = futures::stream::unfold(receiver, |mut receiver| async move {
            loop {
                receiver.changed().await.ok()?;
                let latest = receiver.borrow_and_update().clone();
                if let Some(version) = latest {
                    return Some((Ok(version), receiver));
                }
            }
        });
        Ok(versions.boxed())
    }
}
