//! [`InMemoryStore`]: the in-process store, built for the run loop's hot path.
//!
//! Each thread lives in its own slot behind its own mutex, so checkpoints of different
//! threads never wait for each other; a checkpoint moves its messages onto the end of
//! the thread's log and never copies the log. Three kinds of lock, always taken in this
//! order and never held across an `.await` (no method awaits while holding one):
//! the catalog (`RwLock`: which threads exist, in creation order), a thread's slot
//! (`Mutex`), the run index (`RwLock`: which thread owns each run id), the
//! approvals (`Mutex`), and the webhook table (`Mutex`, module `memory_webhooks`),
//! which webhook calls take alone.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use async_trait::async_trait;

use super::approvals::ApprovalTable;
use super::memory_webhooks::WebhookTable;
use super::{
    ApprovalPage, ApprovalQuery, Checkpoint, FencingToken, MessagePage, MessageQuery, RunPage,
    RunQuery, ThreadRunStore, ThreadSnapshot, ThreadSummary, WebhookStore, check_checkpoint,
    check_fence, checkpointed_thread, duration_ms, implicit_thread, now_millis, page_of, page_runs,
    run_order_key, run_owned_elsewhere, stamped_new_thread, thread_not_found, updated_metadata,
};
use crate::JsonValue;
use crate::contract::{
    Approval, ApprovalChange, ApprovalEvent, ApprovalWrite, Message, RunRecord, Thread,
    ThreadMetadata,
};
use crate::error::StorageError;
use crate::hashing::FastHashMap;
use crate::ids::{ApprovalId, RunId, ThreadId};
use crate::state::{InMemoryProfileStore, PersistedState, ProfileStore};

/// Keeps threads, logs, runs, state, webhooks and profiles in memory: for tests,
/// benchmarks and single-process use. Nothing survives the process.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    catalog: RwLock<Catalog>,
    run_owners: RwLock<FastHashMap<RunId, ThreadId>>,
    approvals: Mutex<ApprovalTable>,
    webhooks: Mutex<WebhookTable>,
    profiles: InMemoryProfileStore,
}

/// Which threads exist, and in which order they were created.
#[derive(Debug, Default)]
struct Catalog {
    threads: FastHashMap<ThreadId, Arc<Slot>>,
    order: BTreeMap<u64, ThreadId>,
    next_seq: u64,
}

#[derive(Debug)]
struct Slot {
    seq: u64,
    data: Mutex<ThreadData>,
}

/// One thread's records; `deleted` is set when the slot leaves the catalog, so a
/// writer that fetched the slot just before will retry instead of writing to it.
#[derive(Debug)]
struct ThreadData {
    thread: Thread,
    messages: Vec<Message>,
    state: Option<PersistedState>,
    fence: FencingToken,
    /// Boxed: most threads hold one or two runs, and a map sized for a few
    /// records inline kept ~1 KB of empty slots per thread.
    runs: FastHashMap<RunId, Box<RunRecord>>,
    /// The greatest run by [`run_order_key`].
    latest: Option<RunId>,
    /// The runs not done yet (usually none or one): the latest run is the
    /// greatest of these when there is any (see `ThreadRunStore::latest_run`).
    unfinished: BTreeSet<RunId>,
    deleted: bool,
}

impl ThreadData {
    fn new(thread: Thread) -> Self {
        Self {
            thread,
            messages: Vec::new(),
            state: None,
            fence: FencingToken::ZERO,
            runs: FastHashMap::default(),
            latest: None,
            unfinished: BTreeSet::new(),
            deleted: false,
        }
    }

    fn latest_run(&self) -> Option<&RunRecord> {
        let unfinished = self
            .unfinished
            .iter()
            .filter_map(|id| self.runs.get(id))
            .max_by(|a, b| run_order_key(a).cmp(&run_order_key(b)));
        unfinished
            .or_else(|| self.latest.as_ref().and_then(|id| self.runs.get(id)))
            .map(Box::as_ref)
    }

    /// The greatest run by [`run_order_key`].
    fn greatest_run(&self) -> Option<&RunRecord> {
        self.latest
            .as_ref()
            .and_then(|id| self.runs.get(id))
            .map(Box::as_ref)
    }

    /// Inserts or replaces a run, keeping `latest` the greatest by `(created_at,
    /// run_id)` and `unfinished` the runs not done.
    fn upsert_run(&mut self, run: RunRecord) {
        let run_id = run.run_id.clone();
        let was_latest = self.latest.as_ref() == Some(&run_id);
        let beats_latest = self
            .greatest_run()
            .is_none_or(|latest| run_order_key(&run) >= run_order_key(latest));
        if run.status.is_terminal() {
            self.unfinished.remove(&run_id);
        } else {
            self.unfinished.insert(run_id.clone());
        }
        self.runs.insert(run_id.clone(), Box::new(run));
        if beats_latest {
            self.latest = Some(run_id);
        } else if was_latest {
            // The latest run moved back in time: find the new maximum.
            self.latest = self
                .runs
                .values()
                .max_by(|a, b| run_order_key(a).cmp(&run_order_key(b)))
                .map(|run| run.run_id.clone());
        }
    }

    fn apply(&mut self, checkpoint: Checkpoint) {
        self.fence = checkpoint.fencing;
        self.messages.extend(checkpoint.new_messages);
        self.state = Some(checkpoint.state);
        self.upsert_run(checkpoint.run);
    }

    fn snapshot(&self) -> ThreadSnapshot {
        ThreadSnapshot {
            thread: self.thread.clone(),
            messages: self.messages.clone(),
            state: self.state.clone(),
            latest_run: self.latest_run().cloned(),
            fence: self.fence,
        }
    }

    fn summary(&self) -> ThreadSummary {
        ThreadSummary {
            thread: self.thread.clone(),
            message_count: self.messages.len() as u64,
            latest_run: self.latest_run().cloned(),
        }
    }
}

/// Recovers a poisoned lock: every critical section here leaves the data consistent
/// (checks run before the first mutation, and mutations do not panic).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The outcome of claiming a run id for a thread in the run index.
enum RunClaim {
    /// The thread already owns the run id.
    Owned,
    /// The run id was free and is now the thread's.
    Claimed,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The webhook table, locked for one call (never across an `.await`).
    pub(super) fn webhook_table(&self) -> MutexGuard<'_, WebhookTable> {
        lock(&self.webhooks)
    }

    /// Applies a checkpoint's approval writes for the thread `data` holds.
    fn apply_approvals(&self, writes: &[ApprovalWrite], data: &ThreadData) -> Vec<ApprovalChange> {
        if writes.is_empty() {
            return Vec::new();
        }
        lock(&self.approvals).apply(writes, data.thread.metadata.tenant())
    }

    fn slot(&self, id: &ThreadId) -> Option<Arc<Slot>> {
        read(&self.catalog).threads.get(id).cloned()
    }

    /// Claims `run_id` for `thread_id`, refusing an id another thread owns.
    fn claim_run(&self, run_id: &RunId, thread_id: &ThreadId) -> Result<RunClaim, StorageError> {
        if let Some(owner) = read(&self.run_owners).get(run_id) {
            return if owner == thread_id {
                Ok(RunClaim::Owned)
            } else {
                Err(run_owned_elsewhere(run_id, owner))
            };
        }
        match write(&self.run_owners).entry(run_id.clone()) {
            Entry::Occupied(owner) if owner.get() == thread_id => Ok(RunClaim::Owned),
            Entry::Occupied(owner) => Err(run_owned_elsewhere(run_id, owner.get())),
            Entry::Vacant(vacant) => {
                vacant.insert(thread_id.clone());
                Ok(RunClaim::Claimed)
            }
        }
    }

    /// Adds a thread to the catalog (the caller holds the catalog's write lock).
    fn insert_slot(catalog: &mut Catalog, data: ThreadData) {
        let seq = catalog.next_seq;
        catalog.next_seq += 1;
        let id = data.thread.id.clone();
        catalog.order.insert(seq, id.clone());
        catalog.threads.insert(
            id,
            Arc::new(Slot {
                seq,
                data: Mutex::new(data),
            }),
        );
    }

    /// The slots of a page of threads, in creation order.
    fn page_of_slots(&self, offset: usize, limit: usize) -> Vec<Arc<Slot>> {
        let catalog = read(&self.catalog);
        catalog
            .order
            .values()
            .skip(offset)
            .take(limit)
            .filter_map(|id| catalog.threads.get(id).cloned())
            .collect()
    }
}

#[async_trait]
impl ThreadRunStore for InMemoryStore {
    async fn create_thread(&self, thread: &Thread) -> Result<(), StorageError> {
        let mut catalog = write(&self.catalog);
        if catalog.threads.contains_key(&thread.id) {
            return Err(StorageError::AlreadyExists(format!(
                "thread `{}`",
                thread.id
            )));
        }
        let thread = stamped_new_thread(thread, now_millis());
        Self::insert_slot(&mut catalog, ThreadData::new(thread));
        Ok(())
    }

    async fn load_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StorageError> {
        Ok(self.slot(id).and_then(|slot| {
            let data = lock(&slot.data);
            (!data.deleted).then(|| data.thread.clone())
        }))
    }

    async fn update_thread_metadata(
        &self,
        id: &ThreadId,
        metadata: ThreadMetadata,
    ) -> Result<(), StorageError> {
        let slot = self.slot(id).ok_or_else(|| thread_not_found(id))?;
        let mut data = lock(&slot.data);
        if data.deleted {
            return Err(thread_not_found(id));
        }
        data.thread.metadata = updated_metadata(&data.thread.metadata, metadata, now_millis());
        Ok(())
    }

    async fn delete_thread(&self, id: &ThreadId) -> Result<Vec<ApprovalChange>, StorageError> {
        let slot = {
            let mut catalog = write(&self.catalog);
            let slot = catalog
                .threads
                .remove(id)
                .ok_or_else(|| thread_not_found(id))?;
            catalog.order.remove(&slot.seq);
            slot
        };
        let mut data = lock(&slot.data);
        data.deleted = true;
        let mut owners = write(&self.run_owners);
        for run_id in data.runs.keys() {
            owners.remove(run_id);
        }
        let cancelled = lock(&self.approvals).cancel_thread(id, now_millis());
        self.webhook_table().delete_thread(id);
        Ok(cancelled)
    }

    async fn list_threads(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadId>, StorageError> {
        Ok(read(&self.catalog)
            .order
            .values()
            .skip(offset)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn list_thread_summaries(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadSummary>, StorageError> {
        Ok(self
            .page_of_slots(offset, limit)
            .iter()
            .filter_map(|slot| {
                let data = lock(&slot.data);
                (!data.deleted).then(|| data.summary())
            })
            .collect())
    }

    async fn load_messages(
        &self,
        id: &ThreadId,
        query: &MessageQuery,
    ) -> Result<MessagePage, StorageError> {
        let slot = self.slot(id).ok_or_else(|| thread_not_found(id))?;
        let data = lock(&slot.data);
        if data.deleted {
            return Err(thread_not_found(id));
        }
        Ok(page_of(&data.messages, query))
    }

    async fn load_thread_snapshot(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        Ok(self.slot(id).and_then(|slot| {
            let data = lock(&slot.data);
            (!data.deleted).then(|| data.snapshot())
        }))
    }

    async fn create_run(&self, record: &RunRecord) -> Result<(), StorageError> {
        let thread_id = &record.thread_id;
        let slot = self
            .slot(thread_id)
            .ok_or_else(|| thread_not_found(thread_id))?;
        let mut data = lock(&slot.data);
        if data.deleted {
            return Err(thread_not_found(thread_id));
        }
        match self.claim_run(&record.run_id, thread_id)? {
            RunClaim::Owned => Err(StorageError::AlreadyExists(format!(
                "run `{}`",
                record.run_id
            ))),
            RunClaim::Claimed => {
                data.upsert_run(record.clone());
                Ok(())
            }
        }
    }

    async fn load_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StorageError> {
        let Some(owner) = read(&self.run_owners).get(run_id).cloned() else {
            return Ok(None);
        };
        Ok(self.slot(&owner).and_then(|slot| {
            let data = lock(&slot.data);
            data.runs
                .get(run_id)
                .filter(|_| !data.deleted)
                .map(|run| RunRecord::clone(run))
        }))
    }

    async fn latest_run(&self, thread_id: &ThreadId) -> Result<Option<RunRecord>, StorageError> {
        Ok(self.slot(thread_id).and_then(|slot| {
            let data = lock(&slot.data);
            data.latest_run().filter(|_| !data.deleted).cloned()
        }))
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StorageError> {
        let slots: Vec<Arc<Slot>> = match &query.thread_id {
            Some(id) => self.slot(id).into_iter().collect(),
            None => read(&self.catalog).threads.values().cloned().collect(),
        };
        let mut runs = Vec::new();
        for slot in slots {
            let data = lock(&slot.data);
            if !data.deleted {
                runs.extend(
                    data.runs
                        .values()
                        .filter(|run| query.matches(run))
                        .map(|run| RunRecord::clone(run)),
                );
            }
        }
        Ok(page_runs(runs, query))
    }

    async fn checkpoint(
        &self,
        mut checkpoint: Checkpoint,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        let approvals = std::mem::take(&mut checkpoint.approvals);
        loop {
            if let Some(slot) = self.slot(&checkpoint.thread_id) {
                let mut data = lock(&slot.data);
                if data.deleted {
                    continue; // deleted since we fetched it: start over
                }
                check_checkpoint(&checkpoint, data.fence, data.messages.len() as u64)?;
                self.claim_run(&checkpoint.run.run_id, &checkpoint.thread_id)?;
                data.apply(checkpoint);
                return Ok(self.apply_approvals(&approvals, &data));
            }
            let mut catalog = write(&self.catalog);
            if catalog.threads.contains_key(&checkpoint.thread_id) {
                continue; // created since we looked: take the slot path
            }
            check_checkpoint(&checkpoint, FencingToken::ZERO, 0)?;
            self.claim_run(&checkpoint.run.run_id, &checkpoint.thread_id)?;
            let mut data = ThreadData::new(checkpointed_thread(&checkpoint, now_millis()));
            data.apply(checkpoint);
            let changed = self.apply_approvals(&approvals, &data);
            Self::insert_slot(&mut catalog, data);
            return Ok(changed);
        }
    }

    async fn fence(&self, id: &ThreadId, token: FencingToken) -> Result<(), StorageError> {
        loop {
            if let Some(slot) = self.slot(id) {
                let mut data = lock(&slot.data);
                if data.deleted {
                    continue;
                }
                check_fence(token, data.fence)?;
                data.fence = token;
                return Ok(());
            }
            let mut catalog = write(&self.catalog);
            if catalog.threads.contains_key(id) {
                continue;
            }
            let mut data = ThreadData::new(implicit_thread(id, now_millis()));
            data.fence = token;
            Self::insert_slot(&mut catalog, data);
            return Ok(());
        }
    }

    async fn load_approval(&self, id: &ApprovalId) -> Result<Option<Approval>, StorageError> {
        Ok(lock(&self.approvals).get(id).cloned())
    }

    async fn list_approvals(&self, query: &ApprovalQuery) -> Result<ApprovalPage, StorageError> {
        Ok(lock(&self.approvals).page(query))
    }

    async fn unpublished_approvals(
        &self,
        older_than: Duration,
        limit: usize,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        let before = now_millis().saturating_sub(duration_ms(older_than));
        Ok(lock(&self.approvals).unpublished(before, limit))
    }

    async fn approvals_published(
        &self,
        published: &[(ApprovalId, ApprovalEvent)],
    ) -> Result<(), StorageError> {
        lock(&self.approvals).published(published);
        Ok(())
    }

    fn webhooks(&self) -> &dyn WebhookStore {
        self
    }
}

#[async_trait]
impl ProfileStore for InMemoryStore {
    async fn get(&self, namespace: &str, key: &str) -> Result<Option<JsonValue>, StorageError> {
        self.profiles.get(namespace, key).await
    }

    async fn put(&self, namespace: &str, key: &str, value: JsonValue) -> Result<(), StorageError> {
        self.profiles.put(namespace, key, value).await
    }

    async fn delete(&self, namespace: &str, key: &str) -> Result<(), StorageError> {
        self.profiles.delete(namespace, key).await
    }
}
