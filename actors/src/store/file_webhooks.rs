//! [`WebhookFiles`]: the [`FileStore`](super::FileStore)'s webhooks, one file per run.
//!
//! `webhooks/<run_id>.json` holds the run's webhooks with their delivery leases, as
//! a JSON array, and is replaced whole (temporary file, fsync, rename, fsync of the
//! directory) whenever one of them changes; a run without webhooks has no file. The
//! files are read once, when the store opens; from then on a table in memory answers
//! every read, and a tokio mutex over it serializes the changes, each held until its
//! files are written (even if the caller stopped waiting). When a write fails, the
//! runs not written are read back from their files, so the table shows what the
//! files hold. A claim that leases webhooks of several runs writes their files one
//! by one: should one fail, the claim fails, and the webhooks of the runs already
//! written stay leased to the holder until their lease ends.
//!
//! Webhooks do not need their run or thread to exist, so opening the store never
//! sweeps them; deleting a thread deletes its webhooks before its head, so that a
//! crash in between leaves the thread (the delete can be retried), not webhooks of
//! a thread that is gone.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::file_io::{
    TMP_PREFIX, entries, file_name, read_json, remove_file, run_blocking, sync_dir, write_json,
};
use super::memory_webhooks::{LeasedWebhook, WebhookTable};
use super::{Webhook, WebhookAdvance, WebhookClaim, WebhookStore};
use crate::error::StorageError;
use crate::ids::{RunId, ThreadId, WebhookId};

/// The directory of the webhook files, under the store's root.
pub(super) const WEBHOOKS: &str = "webhooks";

/// The webhook files of a store and the table that mirrors them.
#[derive(Debug, Clone)]
pub(super) struct WebhookFiles {
    dir: PathBuf,
    table: Arc<Mutex<WebhookTable>>,
}

impl WebhookFiles {
    /// Opens the webhook files under `root` (blocking): creates the directory,
    /// removes temporary files and reads every run's webhooks.
    pub(super) fn open(root: &Path) -> Result<Self, StorageError> {
        let dir = root.join(WEBHOOKS);
        std::fs::create_dir_all(&dir)
            .map_err(|err| StorageError::Io(format!("{}: {err}", dir.display())))?;
        let mut table = WebhookTable::default();
        for (path, name) in entries(&dir)? {
            let Some(name) = name else { continue };
            if name.starts_with(TMP_PREFIX) {
                remove_file(&path)?;
                continue;
            }
            let Some(run_id) = name
                .strip_suffix(".json")
                .and_then(|stem| RunId::new(stem).ok())
            else {
                continue;
            };
            if let Some(hooks) = read_json::<Vec<LeasedWebhook>>(&path)? {
                table.replace_run(&run_id, hooks);
            }
        }
        Ok(Self {
            dir,
            table: Arc::new(Mutex::new(table)),
        })
    }

    /// Waits for the table; the guard can travel into a blocking task.
    pub(super) async fn lock(&self) -> OwnedMutexGuard<WebhookTable> {
        Arc::clone(&self.table).lock_owned().await
    }

    /// Deletes the thread's webhooks from `table` and their files (blocking).
    pub(super) fn delete_thread(
        &self,
        table: &mut WebhookTable,
        thread_id: &ThreadId,
    ) -> Result<(), StorageError> {
        let changed = table.delete_thread(thread_id);
        self.persist(table, &changed)
    }

    fn path(&self, run_id: &RunId) -> Result<PathBuf, StorageError> {
        let name = file_name("run id", run_id.as_str())?;
        Ok(self.dir.join(format!("{name}.json")))
    }

    /// Applies `work` to the table, then writes the files of the runs it says it
    /// changed, on the blocking pool and still holding the table.
    async fn change<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        F: FnOnce(&mut WebhookTable) -> Result<(T, Vec<RunId>), StorageError>,
    {
        let mut table = self.lock().await;
        let (value, changed) = work(&mut table)?;
        if changed.is_empty() {
            return Ok(value);
        }
        let files = self.clone();
        run_blocking(move || files.persist(&mut table, &changed)).await?;
        Ok(value)
    }

    /// Writes the files of the `changed` runs; on a failure reads back those not
    /// written, so the table holds what the files hold.
    fn persist(&self, table: &mut WebhookTable, changed: &[RunId]) -> Result<(), StorageError> {
        for (written, run_id) in changed.iter().enumerate() {
            if let Err(err) = self.write_run(table, run_id) {
                for run_id in &changed[written..] {
                    self.reload_run(table, run_id);
                }
                return Err(err);
            }
        }
        Ok(())
    }

    fn write_run(&self, table: &WebhookTable, run_id: &RunId) -> Result<(), StorageError> {
        let path = self.path(run_id)?;
        let hooks = table.entries(run_id);
        if hooks.is_empty() {
            remove_file(&path)?;
            sync_dir(&self.dir)
        } else {
            write_json(&path, &hooks)
        }
    }

    fn reload_run(&self, table: &mut WebhookTable, run_id: &RunId) {
        let read = self
            .path(run_id)
            .and_then(|path| read_json::<Vec<LeasedWebhook>>(&path));
        match read {
            Ok(hooks) => table.replace_run(run_id, hooks.unwrap_or_default()),
            Err(err) => {
                tracing::warn!(run_id = %run_id, error = %err, "cannot read back a run's webhooks");
            }
        }
    }
}

#[async_trait]
impl WebhookStore for WebhookFiles {
    async fn put_webhook(
        &self,
        webhook: Webhook,
        max_per_run: usize,
    ) -> Result<Webhook, StorageError> {
        // A run id that cannot name a file is refused before anything changes.
        self.path(&webhook.run_id)?;
        self.change(move |table| {
            let stored = table.put(webhook, max_per_run)?;
            let changed = vec![stored.run_id.clone()];
            Ok((stored, changed))
        })
        .await
    }

    async fn load_webhooks(&self, run_id: &RunId) -> Result<Vec<Webhook>, StorageError> {
        Ok(self.table.lock().await.load(run_id))
    }

    async fn delete_webhook(&self, run_id: &RunId, id: &WebhookId) -> Result<bool, StorageError> {
        self.change(|table| {
            let deleted = table.delete(run_id, id);
            let changed = if deleted {
                vec![run_id.clone()]
            } else {
                Vec::new()
            };
            Ok((deleted, changed))
        })
        .await
    }

    async fn claim_webhooks(&self, claim: &WebhookClaim) -> Result<Vec<Webhook>, StorageError> {
        self.change(|table| {
            let claimed = table.claim(claim);
            let runs: BTreeSet<&RunId> = claimed.iter().map(|webhook| &webhook.run_id).collect();
            let changed = runs.into_iter().cloned().collect();
            Ok((claimed, changed))
        })
        .await
    }

    async fn advance_webhook(
        &self,
        run_id: &RunId,
        id: &WebhookId,
        holder: &str,
        advance: &WebhookAdvance,
    ) -> Result<bool, StorageError> {
        self.change(|table| {
            let advanced = table.advance(run_id, id, holder, advance);
            let changed = if advanced {
                vec![run_id.clone()]
            } else {
                Vec::new()
            };
            Ok((advanced, changed))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::conformance::{TempDir, rid, tid, webhook, wid};
    use crate::store::{FileStore, ThreadRunStore};

    fn claim(holder: &str, now_ms: u64) -> WebhookClaim {
        WebhookClaim {
            holder: holder.to_owned(),
            now_ms,
            until_ms: now_ms + 1_000,
            limit: 10,
            run_id: None,
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn webhooks_and_their_leases_survive_reopening() {
        let dir = TempDir::new();
        let store = FileStore::open(dir.path()).await.unwrap();
        let thread = tid("t");
        let hooks = store.webhooks();
        hooks
            .put_webhook(webhook(&thread, "r 1", "w1", 1), 4)
            .await
            .unwrap();
        hooks
            .put_webhook(webhook(&thread, "r2", "w2", 2), 4)
            .await
            .unwrap();
        assert_eq!(
            hooks.claim_webhooks(&claim("a", 10)).await.unwrap().len(),
            2
        );
        let advance = WebhookAdvance {
            progress: json!({"sent": 1}),
            done: false,
            dead_letter: Some(json!({"status": "failed"})),
            lease_until_ms: 5_000,
        };
        assert!(
            hooks
                .advance_webhook(&rid("r 1"), &wid("w1"), "a", &advance)
                .await
                .unwrap()
        );
        let before = hooks.load_webhooks(&rid("r 1")).await.unwrap();
        assert_eq!(names(&dir.path().join(WEBHOOKS)), ["r 1.json", "r2.json"]);
        std::fs::write(dir.path().join(WEBHOOKS).join(".tmp-leftover"), b"[").unwrap();
        drop(store);

        let store = FileStore::open(dir.path()).await.unwrap();
        let hooks = store.webhooks();
        assert_eq!(hooks.load_webhooks(&rid("r 1")).await.unwrap(), before);
        // w1's renewed lease (until 5000) holds; w2's (until 1010) has ended.
        let claimed = hooks.claim_webhooks(&claim("b", 2_000)).await.unwrap();
        let claimed: Vec<&str> = claimed.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(claimed, ["w2"]);
        assert!(
            hooks
                .advance_webhook(&rid("r 1"), &wid("w1"), "a", &advance)
                .await
                .unwrap(),
            "a still holds w1"
        );
        assert_eq!(names(&dir.path().join(WEBHOOKS)), ["r 1.json", "r2.json"]);
    }

    #[tokio::test]
    async fn a_run_id_that_cannot_name_a_file_is_refused_and_a_run_without_webhooks_has_no_file() {
        let dir = TempDir::new();
        let store = FileStore::open(dir.path()).await.unwrap();
        let hooks = store.webhooks();
        let thread = tid("t");
        let err = hooks
            .put_webhook(webhook(&thread, "../escape", "w", 1), 4)
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::InvalidInput(_)), "{err:?}");
        assert!(names(&dir.path().join(WEBHOOKS)).is_empty());

        hooks
            .put_webhook(webhook(&thread, "r1", "w", 1), 4)
            .await
            .unwrap();
        assert_eq!(names(&dir.path().join(WEBHOOKS)), ["r1.json"]);
        assert!(hooks.delete_webhook(&rid("r1"), &wid("w")).await.unwrap());
        assert!(names(&dir.path().join(WEBHOOKS)).is_empty());
    }
}
