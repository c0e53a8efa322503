//! [`FileStore`]: threads, runs and profiles as files under one root directory.
//!
//! # Layout
//!
//! ```text
//! <root>/
//!   threads/<thread_id>.json     the thread's head: thread record, creation sequence,
//!                                fence, committed log length (messages and bytes),
//!                                persistent state, run index, last written run
//!   messages/<thread_id>.jsonl   the log: one JSON message per line, append-only
//!   runs/<run_id>.json           one run record
//!   webhooks/<run_id>.json       the run's webhooks with their delivery leases
//!                                (module `file_webhooks`)
//!   approvals/<approval_id>.json an approval of a deleted thread, cancelled
//!                                (a live thread's are in its head)
//!   profiles/<namespace>/<key>.json
//! ```
//!
//! Ids are used as file names verbatim, so ids containing `/`, `\` or `..`, starting
//! with `.` or longer than 240 bytes are refused with [`StorageError::InvalidInput`].
//! Temporary files start with `.` and can therefore never collide with a record.
//!
//! # Atomicity
//!
//! Every file but the log is replaced whole: written to a temporary file in the same
//! directory, fsynced, renamed over the old one, and the directory fsynced (module
//! `file_io`, shared with the webhook files). The head is
//! the commit point of every thread write (see decision 0006). A checkpoint
//!
//! 1. appends the new messages after the committed length of the log (cutting off any
//!    uncommitted tail a crash left there) and fsyncs the log;
//! 2. replaces the head, which now counts the new messages, holds the new state and
//!    the thread's approvals and carries the run record (**commit**);
//! 3. writes `runs/<run_id>.json`.
//!
//! Readers only ever read the log up to the head's committed length, so a crash before
//! step 2 leaves the thread exactly as it was. A crash between 2 and 3 is repaired when
//! the store is next opened: [`FileStore::open`] rolls each head's run forward into
//! `runs/`, removes files that no head refers to (a deletion interrupted after its
//! commit point, which is the removal of the head) and stray temporary files.
//! Deleting a thread writes its cancelled approvals to `approvals/` before that
//! commit point; a file there for an approval a head still holds is a deletion
//! that did not commit, and is removed. What the approval feed is still owed is
//! kept in memory only: one process owns the directory, and its feed (the node's
//! own) does not outlive it.
//!
//! # Concurrency
//!
//! One process owns a root directory. Within it, writes to one thread are serialized by
//! a per-thread async lock that is held until the blocking file work has finished (even
//! if the caller's future is dropped), and [`load_thread_snapshot`] takes the same lock
//! so it reads one committed version. Other reads take no lock: they read one head and
//! then only committed bytes, so they see a committed, possibly slightly older, version.
//!
//! [`load_thread_snapshot`]: ThreadRunStore::load_thread_snapshot

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::OwnedMutexGuard;

use super::approvals::ApprovalTable;
use super::file_io::{
    TMP_PREFIX, decode, entries, file_name, io_error, read_json, remove_file, run_blocking,
    sync_dir, write_json,
};
use super::file_webhooks::WebhookFiles;
use super::memory_webhooks::WebhookTable;
use super::{
    ApprovalPage, ApprovalQuery, Checkpoint, FencingToken, MessagePage, MessageQuery, RunPage,
    RunQuery, ThreadRunStore, ThreadSnapshot, ThreadSummary, WebhookStore, check_checkpoint,
    check_fence, checkpointed_thread, duration_ms, implicit_thread, now_millis, page_of, page_runs,
    run_owned_elsewhere, stamped_new_thread, thread_not_found, updated_metadata,
};
use crate::JsonValue;
use crate::contract::{
    Approval, ApprovalChange, ApprovalEvent, Message, RunRecord, Thread, ThreadMetadata,
};
use crate::error::StorageError;
use crate::ids::{ApprovalId, RunId, ThreadId};
use crate::state::{PersistedState, ProfileStore};

const THREADS: &str = "threads";
const MESSAGES: &str = "messages";
const RUNS: &str = "runs";
const PROFILES: &str = "profiles";
const APPROVALS: &str = "approvals";

/// Durable single-process store: JSON files under a root directory, crash-atomic
/// checkpoints, no database needed.
#[derive(Debug, Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    index: Mutex<Index>,
    thread_locks: Mutex<HashMap<ThreadId, Arc<tokio::sync::Mutex<()>>>>,
    webhooks: WebhookFiles,
}

/// What the process keeps in memory: which threads exist (in creation order) and which
/// thread owns each run id. Rebuilt from the heads on open.
#[derive(Debug, Default)]
struct Index {
    order: BTreeMap<u64, ThreadId>,
    seqs: HashMap<ThreadId, u64>,
    next_seq: u64,
    run_owners: HashMap<RunId, ThreadId>,
    /// Every approval: the live threads' from their heads, the deleted threads'
    /// from `approvals/`.
    approvals: ApprovalTable,
}

/// `threads/<id>.json`: everything about a thread except its log and run records.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Head {
    thread: Thread,
    /// Creation sequence: threads list in this order.
    seq: u64,
    fence: FencingToken,
    /// Committed messages in the log.
    message_count: u64,
    /// Committed bytes of the log; anything after them is an interrupted append.
    log_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<PersistedState>,
    /// The thread's runs, by id, with their `created_at` (to find the latest).
    #[serde(default)]
    runs: BTreeMap<RunId, u64>,
    /// Those of them not done yet (the latest run is one of these when any is).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    unfinished: BTreeSet<RunId>,
    /// The run this head's write stored; rolled forward into `runs/` on open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_run: Option<RunRecord>,
    /// The thread's approvals, as the last checkpoint left them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    approvals: Vec<Approval>,
}

impl Head {
    fn new(thread: Thread, seq: u64) -> Self {
        Self {
            thread,
            seq,
            fence: FencingToken::ZERO,
            message_count: 0,
            log_bytes: 0,
            state: None,
            runs: BTreeMap::new(),
            unfinished: BTreeSet::new(),
            last_run: None,
            approvals: Vec::new(),
        }
    }

    /// The latest run: the greatest unfinished one, else the greatest.
    fn latest_run_id(&self) -> Option<&RunId> {
        self.runs
            .iter()
            .map(|(id, created_at)| (self.unfinished.contains(id), *created_at, id))
            .max()
            .map(|(_, _, id)| id)
    }

    fn record_run(&mut self, run: RunRecord) {
        self.runs.insert(run.run_id.clone(), run.created_at);
        if run.status.is_terminal() {
            self.unfinished.remove(&run.run_id);
        } else {
            self.unfinished.insert(run.run_id.clone());
        }
        self.last_run = Some(run);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Critical sections only insert into or remove from maps; they leave them consistent.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Inner {
    fn head_path(&self, id: &ThreadId) -> Result<PathBuf, StorageError> {
        let name = file_name("thread id", id.as_str())?;
        Ok(self.root.join(THREADS).join(format!("{name}.json")))
    }

    fn log_path(&self, id: &ThreadId) -> Result<PathBuf, StorageError> {
        let name = file_name("thread id", id.as_str())?;
        Ok(self.root.join(MESSAGES).join(format!("{name}.jsonl")))
    }

    fn approval_path(&self, id: &ApprovalId) -> Result<PathBuf, StorageError> {
        let name = file_name("approval id", id.as_str())?;
        Ok(self.root.join(APPROVALS).join(format!("{name}.json")))
    }

    fn run_path(&self, id: &RunId) -> Result<PathBuf, StorageError> {
        let name = file_name("run id", id.as_str())?;
        Ok(self.root.join(RUNS).join(format!("{name}.json")))
    }

    fn profile_path(&self, namespace: &str, key: &str) -> Result<PathBuf, StorageError> {
        let namespace = file_name("profile namespace", namespace)?;
        let key = file_name("profile key", key)?;
        Ok(self
            .root
            .join(PROFILES)
            .join(namespace)
            .join(format!("{key}.json")))
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        lock(&self.index)
    }

    fn exists(&self, id: &ThreadId) -> bool {
        self.index().seqs.contains_key(id)
    }

    fn read_head(&self, id: &ThreadId) -> Result<Option<Head>, StorageError> {
        if !self.exists(id) {
            return Ok(None);
        }
        read_json(&self.head_path(id)?)
    }

    fn read_run(&self, id: &RunId) -> Result<Option<RunRecord>, StorageError> {
        read_json(&self.run_path(id)?)
    }

    /// The committed part of the thread's log.
    fn read_log(&self, id: &ThreadId, head: &Head) -> Result<Vec<Message>, StorageError> {
        if head.log_bytes == 0 {
            return Ok(Vec::new());
        }
        let path = self.log_path(id)?;
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|file| file.take(head.log_bytes).read_to_end(&mut bytes))
            .map_err(|err| io_error(path.display(), err))?;
        if bytes.len() as u64 != head.log_bytes {
            return Err(StorageError::Io(format!(
                "{}: {} committed bytes expected, {} found",
                path.display(),
                head.log_bytes,
                bytes.len()
            )));
        }
        bytes
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| decode(&path, line))
            .collect()
    }

    /// Appends `messages` after the committed bytes, returning the new committed length.
    fn append_log(
        &self,
        id: &ThreadId,
        head: &Head,
        messages: &[Message],
    ) -> Result<u64, StorageError> {
        if messages.is_empty() {
            return Ok(head.log_bytes);
        }
        let mut buf = Vec::new();
        for message in messages {
            serde_json::to_writer(&mut buf, message)
                .map_err(|err| StorageError::Serialization(err.to_string()))?;
            buf.push(b'\n');
        }
        let path = self.log_path(id)?;
        let appended = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .and_then(|mut file| {
                if file.metadata()?.len() != head.log_bytes {
                    // An append that never committed (or a deleted thread's log).
                    file.set_len(head.log_bytes)?;
                }
                file.seek(SeekFrom::Start(head.log_bytes))?;
                file.write_all(&buf)?;
                file.sync_data()
            });
        appended.map_err(|err| io_error(path.display(), err))?;
        if head.log_bytes == 0 {
            // A new file: make its directory entry durable too.
            sync_dir(&self.root.join(MESSAGES))?;
        }
        Ok(head.log_bytes + buf.len() as u64)
    }

    fn latest_run(&self, head: &Head) -> Result<Option<RunRecord>, StorageError> {
        match head.latest_run_id() {
            Some(run_id) => self.read_run(run_id),
            None => Ok(None),
        }
    }

    /// Reserves `run_id` for `thread_id`; `Ok(true)` if newly reserved (release it if the
    /// write then fails), `Ok(false)` if the thread already owns it.
    fn claim_run(&self, run_id: &RunId, thread_id: &ThreadId) -> Result<bool, StorageError> {
        let mut index = self.index();
        match index.run_owners.get(run_id) {
            Some(owner) if owner == thread_id => Ok(false),
            Some(owner) => Err(run_owned_elsewhere(run_id, owner)),
            None => {
                index.run_owners.insert(run_id.clone(), thread_id.clone());
                Ok(true)
            }
        }
    }

    fn release_run(&self, run_id: &RunId) {
        self.index().run_owners.remove(run_id);
    }

    /// The thread's head, or a fresh one of `created(now)` (with a reserved
    /// creation sequence) if absent.
    fn head_or_new(
        &self,
        id: &ThreadId,
        created: impl FnOnce(u64) -> Thread,
    ) -> Result<(Head, bool), StorageError> {
        if let Some(head) = self.read_head(id)? {
            return Ok((head, false));
        }
        let seq = self.reserve_seq();
        Ok((Head::new(created(now_millis()), seq), true))
    }

    /// A fresh creation sequence number (a failed creation leaves a harmless gap).
    fn reserve_seq(&self) -> u64 {
        let mut index = self.index();
        let seq = index.next_seq;
        index.next_seq += 1;
        seq
    }

    /// Commits a head; a new thread enters the index once its head is durable.
    fn commit_head(&self, head: &Head, is_new: bool) -> Result<(), StorageError> {
        write_json(&self.head_path(&head.thread.id)?, head)?;
        if is_new {
            let mut index = self.index();
            index.order.insert(head.seq, head.thread.id.clone());
            index.seqs.insert(head.thread.id.clone(), head.seq);
        }
        Ok(())
    }

    /// Commits a head whose write stored `run` (checkpoint, create_run), then the run file.
    fn commit_with_run(
        &self,
        head: &Head,
        is_new: bool,
        run: &RunRecord,
    ) -> Result<(), StorageError> {
        let run_path = self.run_path(&run.run_id)?;
        let claimed = self.claim_run(&run.run_id, &head.thread.id)?;
        if let Err(err) = self.commit_head(head, is_new) {
            if claimed {
                self.release_run(&run.run_id);
            }
            return Err(err);
        }
        // Committed. Should this fail, the head's `last_run` is rolled forward on open.
        write_json(&run_path, run)
    }

    fn checkpoint(&self, checkpoint: Checkpoint) -> Result<Vec<ApprovalChange>, StorageError> {
        let id = &checkpoint.thread_id;
        self.run_path(&checkpoint.run.run_id)?;
        let (mut head, is_new) =
            self.head_or_new(id, |now| checkpointed_thread(&checkpoint, now))?;
        check_checkpoint(&checkpoint, head.fence, head.message_count)?;
        // Appended bytes stay uncommitted (and invisible) unless the head below commits.
        head.log_bytes = self.append_log(id, &head, &checkpoint.new_messages)?;
        head.message_count += checkpoint.new_messages.len() as u64;
        head.fence = checkpoint.fencing;
        head.state = Some(checkpoint.state);
        let mut changed = Vec::new();
        if !checkpoint.approvals.is_empty() {
            let mut approvals = ApprovalTable::default();
            for approval in std::mem::take(&mut head.approvals) {
                approvals.insert(approval);
            }
            changed = approvals.apply(&checkpoint.approvals, head.thread.metadata.tenant());
            head.approvals = approvals.of_thread(id);
        }
        let run = checkpoint.run;
        head.record_run(run.clone());
        self.commit_with_run(&head, is_new, &run)?;
        if !checkpoint.approvals.is_empty() {
            let mut index = self.index();
            for approval in &head.approvals {
                index.approvals.insert(approval.clone());
            }
            index.approvals.owe_all(&changed);
        }
        Ok(changed)
    }

    fn delete_thread(
        &self,
        id: &ThreadId,
        webhooks: &mut WebhookTable,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        let head_path = self.head_path(id)?;
        let Some(head) = self.read_head(id)? else {
            return Err(thread_not_found(id));
        };
        // Before the commit point: webhooks may outlive any thread, so nothing
        // could tell those of a thread deleted by a crashed delete from the others.
        self.webhooks.delete_thread(webhooks, id)?;
        // Also before it: the approvals outlive the thread, cancelled.
        let mut cancelled = ApprovalTable::default();
        for approval in &head.approvals {
            cancelled.insert(approval.clone());
        }
        let changed = cancelled.cancel_thread(id, now_millis());
        let approvals = cancelled.of_thread(id);
        for approval in &approvals {
            write_json(&self.approval_path(&approval.approval_id)?, approval)?;
        }
        // The commit point: without its head the thread does not exist.
        remove_file(&head_path)?;
        sync_dir(&self.root.join(THREADS))?;
        {
            let mut index = self.index();
            if let Some(seq) = index.seqs.remove(id) {
                index.order.remove(&seq);
            }
            for run_id in head.runs.keys() {
                index.run_owners.remove(run_id);
            }
            for approval in approvals {
                index.approvals.insert(approval);
            }
            index.approvals.owe_all(&changed);
        }
        // Leftovers are invisible (nothing refers to them) and are swept on open.
        let leftovers = std::iter::once(self.log_path(id))
            .chain(head.runs.keys().map(|run_id| self.run_path(run_id)));
        for path in leftovers {
            if let Err(err) = path.and_then(|path| remove_file(&path)) {
                tracing::warn!(thread_id = %id, error = %err, "cannot remove a deleted thread's file");
            }
        }
        Ok(changed)
    }

    fn snapshot(&self, id: &ThreadId) -> Result<Option<ThreadSnapshot>, StorageError> {
        let Some(head) = self.read_head(id)? else {
            return Ok(None);
        };
        Ok(Some(ThreadSnapshot {
            messages: self.read_log(id, &head)?,
            latest_run: self.latest_run(&head)?,
            fence: head.fence,
            state: head.state,
            thread: head.thread,
        }))
    }

    fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StorageError> {
        let run_ids: Vec<RunId> = match &query.thread_id {
            Some(thread_id) => match self.read_head(thread_id)? {
                Some(head) => head.runs.into_keys().collect(),
                None => Vec::new(),
            },
            None => self.index().run_owners.keys().cloned().collect(),
        };
        let mut runs = Vec::with_capacity(run_ids.len());
        for run_id in &run_ids {
            // A run deleted since we listed it is simply skipped.
            if let Some(run) = self.read_run(run_id)? {
                runs.push(run);
            }
        }
        Ok(page_runs(runs, query))
    }

    /// Rebuilds the index from the heads and repairs what a crash can leave behind.
    fn recover(&self) -> Result<(), StorageError> {
        for dir in [THREADS, MESSAGES, RUNS, PROFILES, APPROVALS] {
            let dir = self.root.join(dir);
            fs::create_dir_all(&dir).map_err(|err| io_error(dir.display(), err))?;
        }
        self.remove_temporaries()?;
        let mut index = Index::default();
        let mut live_logs = std::collections::HashSet::new();
        for (path, name) in entries(&self.root.join(THREADS))? {
            if !name.is_some_and(|name| name.ends_with(".json")) {
                continue;
            }
            let Some(head) = read_json::<Head>(&path)? else {
                continue;
            };
            let id = head.thread.id.clone();
            live_logs.insert(self.log_path(&id)?);
            index.next_seq = index.next_seq.max(head.seq + 1);
            index.order.insert(head.seq, id.clone());
            index.seqs.insert(id.clone(), head.seq);
            for run_id in head.runs.keys() {
                index.run_owners.insert(run_id.clone(), id.clone());
            }
            for approval in &head.approvals {
                index.approvals.insert(approval.clone());
            }
            if let Some(run) = &head.last_run {
                let run_path = self.run_path(&run.run_id)?;
                if read_json::<RunRecord>(&run_path)?.as_ref() != Some(run) {
                    write_json(&run_path, run)?;
                }
            }
        }
        for (path, name) in entries(&self.root.join(MESSAGES))? {
            if name.is_some() && !live_logs.contains(&path) {
                remove_file(&path)?;
            }
        }
        for (path, name) in entries(&self.root.join(APPROVALS))? {
            if !name.is_some_and(|name| name.ends_with(".json")) {
                continue;
            }
            let Some(approval) = read_json::<Approval>(&path)? else {
                continue;
            };
            if index.approvals.get(&approval.approval_id).is_some() {
                // Its thread's deletion did not commit: the head has it.
                remove_file(&path)?;
            } else {
                index.approvals.insert(approval);
            }
        }
        for (path, name) in entries(&self.root.join(RUNS))? {
            let owned = name
                .as_deref()
                .and_then(|name| name.strip_suffix(".json"))
                .is_some_and(|stem| index.run_owners.contains_key(stem));
            if !owned {
                remove_file(&path)?;
            }
        }
        *self.index() = index;
        Ok(())
    }

    fn remove_temporaries(&self) -> Result<(), StorageError> {
        let mut dirs = vec![
            self.root.join(THREADS),
            self.root.join(MESSAGES),
            self.root.join(RUNS),
            self.root.join(APPROVALS),
        ];
        for (path, _) in entries(&self.root.join(PROFILES))? {
            if path.is_dir() {
                dirs.push(path);
            }
        }
        for dir in dirs {
            for (path, name) in entries(&dir)? {
                if name.is_some_and(|name| name.starts_with(TMP_PREFIX)) {
                    remove_file(&path)?;
                }
            }
        }
        Ok(())
    }
}

impl FileStore {
    /// Opens (creating if needed) a store under `root`, repairing what an earlier crash
    /// left behind. One process at a time may own a root.
    pub async fn open(root: impl Into<PathBuf>) -> Result<Self, StorageError> {
        let root: PathBuf = root.into();
        let webhook_root = root.clone();
        let webhooks = run_blocking(move || WebhookFiles::open(&webhook_root)).await?;
        let inner = Arc::new(Inner {
            root,
            index: Mutex::new(Index::default()),
            thread_locks: Mutex::new(HashMap::new()),
            webhooks,
        });
        let recovering = Arc::clone(&inner);
        run_blocking(move || recovering.recover()).await?;
        Ok(Self { inner })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Waits for the thread's write lock; the guard travels into the blocking task.
    async fn lock_thread(&self, id: &ThreadId) -> OwnedMutexGuard<()> {
        let lock = Arc::clone(
            lock(&self.inner.thread_locks)
                .entry(id.clone())
                .or_default(),
        );
        lock.lock_owned().await
    }

    /// Forgets a deleted (or absent) thread's lock unless someone else holds or awaits it.
    fn release_thread_lock(&self, id: &ThreadId) {
        let mut locks = lock(&self.inner.thread_locks);
        // The delete's guard is gone; any other reference is a holder or a waiter.
        if locks
            .get(id)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            locks.remove(id);
        }
    }

    /// Runs `work` on the blocking pool.
    async fn read<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StorageError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        run_blocking(move || work(&inner)).await
    }

    /// Runs `work` on the blocking pool while holding the thread's lock; the lock is
    /// released when `work` ends, even if the caller stopped waiting.
    async fn write<T, F>(&self, id: &ThreadId, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StorageError> + Send + 'static,
    {
        let guard = self.lock_thread(id).await;
        let inner = Arc::clone(&self.inner);
        run_blocking(move || {
            let result = work(&inner);
            drop(guard);
            result
        })
        .await
    }
}

#[async_trait]
impl ThreadRunStore for FileStore {
    async fn create_thread(&self, thread: &Thread) -> Result<(), StorageError> {
        self.inner.head_path(&thread.id)?;
        let thread = thread.clone();
        self.write(&thread.id.clone(), move |inner| {
            if inner.exists(&thread.id) {
                return Err(StorageError::AlreadyExists(format!(
                    "thread `{}`",
                    thread.id
                )));
            }
            let seq = inner.reserve_seq();
            let head = Head::new(stamped_new_thread(&thread, now_millis()), seq);
            inner.commit_head(&head, true)
        })
        .await
    }

    async fn load_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StorageError> {
        let id = id.clone();
        self.read(move |inner| Ok(inner.read_head(&id)?.map(|head| head.thread)))
            .await
    }

    async fn update_thread_metadata(
        &self,
        id: &ThreadId,
        metadata: ThreadMetadata,
    ) -> Result<(), StorageError> {
        let id = id.clone();
        self.write(&id.clone(), move |inner| {
            let mut head = inner.read_head(&id)?.ok_or_else(|| thread_not_found(&id))?;
            head.thread.metadata = updated_metadata(&head.thread.metadata, metadata, now_millis());
            inner.commit_head(&head, false)
        })
        .await
    }

    async fn delete_thread(&self, id: &ThreadId) -> Result<Vec<ApprovalChange>, StorageError> {
        let owned = id.clone();
        // The thread's lock, then the webhooks' (webhook calls take theirs alone).
        let thread = self.lock_thread(id).await;
        let mut webhooks = self.inner.webhooks.lock().await;
        let inner = Arc::clone(&self.inner);
        let result = run_blocking(move || {
            let result = inner.delete_thread(&owned, &mut webhooks);
            drop(thread);
            result
        })
        .await;
        self.release_thread_lock(id);
        result
    }

    async fn list_threads(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadId>, StorageError> {
        Ok(self
            .inner
            .index()
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
        let ids = self.list_threads(offset, limit).await?;
        self.read(move |inner| {
            let mut summaries = Vec::with_capacity(ids.len());
            for id in &ids {
                // A thread deleted since we listed it is skipped.
                if let Some(head) = inner.read_head(id)? {
                    summaries.push(ThreadSummary {
                        message_count: head.message_count,
                        latest_run: inner.latest_run(&head)?,
                        thread: head.thread,
                    });
                }
            }
            Ok(summaries)
        })
        .await
    }

    async fn load_messages(
        &self,
        id: &ThreadId,
        query: &MessageQuery,
    ) -> Result<MessagePage, StorageError> {
        let id = id.clone();
        let query = *query;
        self.read(move |inner| {
            let head = inner.read_head(&id)?.ok_or_else(|| thread_not_found(&id))?;
            let log = inner.read_log(&id, &head)?;
            Ok(page_of(&log, &query))
        })
        .await
    }

    async fn load_thread_snapshot(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        let owned = id.clone();
        let snapshot = self.write(id, move |inner| inner.snapshot(&owned)).await;
        if matches!(snapshot, Ok(None)) {
            // Do not keep a lock for every id anyone asked about.
            self.release_thread_lock(id);
        }
        snapshot
    }

    async fn create_run(&self, record: &RunRecord) -> Result<(), StorageError> {
        self.inner.run_path(&record.run_id)?;
        let record = record.clone();
        self.write(&record.thread_id.clone(), move |inner| {
            let thread_id = &record.thread_id;
            let mut head = inner
                .read_head(thread_id)?
                .ok_or_else(|| thread_not_found(thread_id))?;
            if inner.index().run_owners.contains_key(&record.run_id) {
                return Err(StorageError::AlreadyExists(format!(
                    "run `{}`",
                    record.run_id
                )));
            }
            head.record_run(record.clone());
            inner.commit_with_run(&head, false, &record)
        })
        .await
    }

    async fn load_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StorageError> {
        if !self.inner.index().run_owners.contains_key(run_id) {
            return Ok(None);
        }
        let run_id = run_id.clone();
        self.read(move |inner| inner.read_run(&run_id)).await
    }

    async fn latest_run(&self, thread_id: &ThreadId) -> Result<Option<RunRecord>, StorageError> {
        let thread_id = thread_id.clone();
        self.read(move |inner| match inner.read_head(&thread_id)? {
            Some(head) => inner.latest_run(&head),
            None => Ok(None),
        })
        .await
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StorageError> {
        let query = query.clone();
        self.read(move |inner| inner.list_runs(&query)).await
    }

    async fn checkpoint(
        &self,
        checkpoint: Checkpoint,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        self.inner.head_path(&checkpoint.thread_id)?;
        self.write(&checkpoint.thread_id.clone(), move |inner| {
            inner.checkpoint(checkpoint)
        })
        .await
    }

    async fn fence(&self, id: &ThreadId, token: FencingToken) -> Result<(), StorageError> {
        self.inner.head_path(id)?;
        let id = id.clone();
        self.write(&id.clone(), move |inner| {
            let (mut head, is_new) = inner.head_or_new(&id, |now| implicit_thread(&id, now))?;
            check_fence(token, head.fence)?;
            head.fence = token;
            inner.commit_head(&head, is_new)
        })
        .await
    }

    async fn load_approval(&self, id: &ApprovalId) -> Result<Option<Approval>, StorageError> {
        Ok(self.inner.index().approvals.get(id).cloned())
    }

    async fn list_approvals(&self, query: &ApprovalQuery) -> Result<ApprovalPage, StorageError> {
        Ok(self.inner.index().approvals.page(query))
    }

    async fn unpublished_approvals(
        &self,
        older_than: Duration,
        limit: usize,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        let before = now_millis().saturating_sub(duration_ms(older_than));
        Ok(self.inner.index().approvals.unpublished(before, limit))
    }

    async fn approvals_published(
        &self,
        published: &[(ApprovalId, ApprovalEvent)],
    ) -> Result<(), StorageError> {
        self.inner.index().approvals.published(published);
        Ok(())
    }

    fn webhooks(&self) -> &dyn WebhookStore {
        &self.inner.webhooks
    }
}

#[async_trait]
impl ProfileStore for FileStore {
    async fn get(&self, namespace: &str, key: &str) -> Result<Option<JsonValue>, StorageError> {
        let path = self.inner.profile_path(namespace, key)?;
        self.read(move |_| read_json(&path)).await
    }

    async fn put(&self, namespace: &str, key: &str, value: JsonValue) -> Result<(), StorageError> {
        let path = self.inner.profile_path(namespace, key)?;
        self.read(move |_| {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir).map_err(|err| io_error(dir.display(), err))?;
            }
            write_json(&path, &value)
        })
        .await
    }

    async fn delete(&self, namespace: &str, key: &str) -> Result<(), StorageError> {
        let path = self.inner.profile_path(namespace, key)?;
        self.read(move |_| remove_file(&path)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::{TempDir, checkpoint, rid, run, tid, user_messages};
    use crate::store::file_io::MAX_FILE_ID_LEN;
    use crate::store::file_webhooks::WEBHOOKS;

    async fn store() -> (FileStore, TempDir) {
        let dir = TempDir::new();
        (FileStore::open(dir.path()).await.unwrap(), dir)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn ids_that_cannot_name_files_are_refused() {
        let (store, dir) = store().await;
        let long = "x".repeat(MAX_FILE_ID_LEN + 1);
        for bad in [
            "a/b",
            "a\\b",
            "..",
            "a..b",
            ".hidden",
            "../escape",
            long.as_str(),
        ] {
            let id = tid(bad);
            let invalid = |result: Result<(), StorageError>| {
                let err = result.unwrap_err();
                assert!(
                    matches!(err, StorageError::InvalidInput(_)),
                    "{bad}: {err:?}"
                );
                assert!(err.to_string().contains("cannot name a file"), "{err}");
            };
            invalid(store.create_thread(&Thread::with_id(id.clone())).await);
            invalid(
                store
                    .checkpoint(checkpoint(
                        &id,
                        0,
                        0,
                        user_messages("m", 1),
                        run(&id, "r", 1),
                    ))
                    .await
                    .map(drop),
            );
            invalid(store.fence(&id, FencingToken(1)).await);
            invalid(store.put(bad, "key", JsonValue::Null).await);
            invalid(store.put("ns", bad, JsonValue::Null).await);
            invalid(store.get("ns", bad).await.map(|_| ()));
            assert_eq!(store.load_thread(&id).await.unwrap(), None);
        }
        // A good thread with a run id that cannot name a file writes nothing.
        let good = tid("good");
        invalid_run(&store, &good).await;
        assert_eq!(store.load_thread(&good).await.unwrap(), None);
        assert!(store.list_threads(0, 10).await.unwrap().is_empty());
        assert!(names(&dir.path().join(MESSAGES)).is_empty());
        // Nothing escaped the root.
        assert_eq!(
            names(dir.path()),
            vec![APPROVALS, MESSAGES, PROFILES, RUNS, THREADS, WEBHOOKS]
        );
    }

    async fn invalid_run(store: &FileStore, thread: &ThreadId) {
        let err = store
            .checkpoint(checkpoint(
                thread,
                0,
                0,
                user_messages("m", 1),
                run(thread, "runs/../x", 1),
            ))
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::InvalidInput(_)), "{err:?}");
    }

    #[tokio::test]
    async fn files_follow_the_documented_layout() {
        let (store, dir) = store().await;
        let id = tid("t 1");
        store
            .checkpoint(checkpoint(
                &id,
                0,
                0,
                user_messages("m", 2),
                run(&id, "r 1", 1),
            ))
            .await
            .unwrap();
        store.put("locale", "alice", "en".into()).await.unwrap();

        let root = dir.path();
        assert_eq!(names(&root.join(THREADS)), vec!["t 1.json"]);
        assert_eq!(names(&root.join(MESSAGES)), vec!["t 1.jsonl"]);
        assert_eq!(names(&root.join(RUNS)), vec!["r 1.json"]);
        assert_eq!(
            names(&root.join(PROFILES).join("locale")),
            vec!["alice.json"]
        );
        let log = fs::read_to_string(root.join(MESSAGES).join("t 1.jsonl")).unwrap();
        assert_eq!(log.lines().count(), 2, "one message per line");
        let head: Head = read_json(&root.join(THREADS).join("t 1.json"))
            .unwrap()
            .unwrap();
        assert_eq!((head.message_count, head.log_bytes), (2, log.len() as u64));
    }

    #[tokio::test]
    async fn approvals_survive_reopening_also_those_of_deleted_threads() {
        use crate::contract::{ApprovalResolution, ApprovalStatus, ApprovalWrite};
        use crate::store::conformance::approval;
        let (store, dir) = store().await;
        let (kept, deleted) = (tid("kept"), tid("deleted"));
        for (id, approval_id) in [(&kept, "a-kept"), (&deleted, "a-deleted")] {
            let mut first = checkpoint(
                id,
                1,
                0,
                user_messages("m", 1),
                run(id, &format!("r-{id}"), 1),
            );
            first.approvals = vec![ApprovalWrite::Requested(Box::new(approval(
                approval_id,
                id,
                &format!("r-{id}"),
                "delete_file",
                10,
            )))];
            store.checkpoint(first).await.unwrap();
        }
        let mut resolving = checkpoint(&kept, 1, 1, vec![], run(&kept, "r-kept", 1));
        resolving.approvals = vec![ApprovalWrite::Resolved {
            approval_id: ApprovalId::new("a-kept").unwrap(),
            resolution: ApprovalResolution::cancelled("run_cancelled", 20),
        }];
        store.checkpoint(resolving).await.unwrap();
        store.delete_thread(&deleted).await.unwrap();
        let before = store
            .list_approvals(&ApprovalQuery::default())
            .await
            .unwrap();
        drop(store);

        let store = FileStore::open(dir.path()).await.unwrap();
        let after = store
            .list_approvals(&ApprovalQuery::default())
            .await
            .unwrap();
        assert_eq!(after, before);
        let statuses: Vec<(&str, ApprovalStatus, Option<&str>)> = after
            .items
            .iter()
            .map(|a| (a.approval_id.as_str(), a.status, a.cause.as_deref()))
            .collect();
        assert_eq!(
            statuses,
            [
                (
                    "a-deleted",
                    ApprovalStatus::Cancelled,
                    Some("thread_deleted")
                ),
                ("a-kept", ApprovalStatus::Cancelled, Some("run_cancelled")),
            ]
        );
    }

    #[tokio::test]
    async fn reopening_restores_everything() {
        let (store, dir) = store().await;
        for id in ["b", "a"] {
            store
                .create_thread(&Thread::with_id(tid(id)))
                .await
                .unwrap();
        }
        let id = tid("c");
        store.fence(&id, FencingToken(3)).await.unwrap();
        store
            .checkpoint(checkpoint(
                &id,
                3,
                0,
                user_messages("m", 3),
                run(&id, "r1", 1),
            ))
            .await
            .unwrap();
        let before = store.load_thread_snapshot(&id).await.unwrap();
        drop(store);

        let store = FileStore::open(dir.path()).await.unwrap();
        assert_eq!(store.load_thread_snapshot(&id).await.unwrap(), before);
        store
            .create_thread(&Thread::with_id(tid("d")))
            .await
            .unwrap();
        let order: Vec<String> = store
            .list_threads(0, 10)
            .await
            .unwrap()
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(order, ["b", "a", "c", "d"]);
        assert!(store.load_run(&rid("r1")).await.unwrap().is_some());
        let err = store
            .checkpoint(checkpoint(&id, 2, 3, vec![], run(&id, "r1", 1)))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StorageError::Fenced { current: 3, .. }),
            "the fence survives"
        );
    }

    #[tokio::test]
    async fn an_append_that_never_committed_is_invisible_and_cut() {
        let (store, dir) = store().await;
        let id = tid("t");
        store
            .checkpoint(checkpoint(
                &id,
                0,
                0,
                user_messages("m", 2),
                run(&id, "r1", 1),
            ))
            .await
            .unwrap();
        let before = store.load_thread_snapshot(&id).await.unwrap().unwrap();
        // A crash after step 1 of a checkpoint: messages appended, head not replaced.
        let log = dir.path().join(MESSAGES).join("t.jsonl");
        let mut file = OpenOptions::new().append(true).open(&log).unwrap();
        let message = serde_json::to_string(&Message::user("lost")).unwrap();
        writeln!(file, "{message}").unwrap();
        write!(file, "{{\"torn").unwrap();
        drop(file);

        assert_eq!(
            store.load_thread_snapshot(&id).await.unwrap().unwrap(),
            before
        );
        let store = FileStore::open(dir.path()).await.unwrap();
        assert_eq!(
            store.load_thread_snapshot(&id).await.unwrap().unwrap(),
            before
        );
        let page = store
            .load_messages(&id, &MessageQuery::default())
            .await
            .unwrap();
        assert_eq!(page.messages.len(), 2);

        store
            .checkpoint(checkpoint(
                &id,
                0,
                2,
                user_messages("n", 1),
                run(&id, "r1", 1),
            ))
            .await
            .unwrap();
        let texts: Vec<String> = store
            .load_thread_snapshot(&id)
            .await
            .unwrap()
            .unwrap()
            .messages
            .iter()
            .map(Message::text)
            .collect();
        assert_eq!(texts, ["m1", "m2", "n1"]);
        assert_eq!(fs::read_to_string(&log).unwrap().lines().count(), 3);
    }

    #[tokio::test]
    async fn a_run_the_head_committed_is_rolled_forward_on_open() {
        let (store, dir) = store().await;
        let id = tid("t");
        let mut record = run(&id, "r1", 1);
        store
            .checkpoint(checkpoint(&id, 0, 0, vec![], record.clone()))
            .await
            .unwrap();
        let stale = fs::read(dir.path().join(RUNS).join("r1.json")).unwrap();
        record.steps = 4;
        store
            .checkpoint(checkpoint(&id, 0, 0, user_messages("m", 1), record.clone()))
            .await
            .unwrap();
        // A crash between steps 2 and 3: the head committed, the run file is the old one.
        fs::write(dir.path().join(RUNS).join("r1.json"), stale).unwrap();

        let store = FileStore::open(dir.path()).await.unwrap();
        assert_eq!(
            store.load_run(&rid("r1")).await.unwrap(),
            Some(record.clone())
        );
        assert_eq!(store.latest_run(&id).await.unwrap(), Some(record));
    }

    #[tokio::test]
    async fn an_interrupted_delete_and_temporaries_are_swept_on_open() {
        let (store, dir) = store().await;
        let (gone, kept) = (tid("gone"), tid("kept"));
        for id in [&gone, &kept] {
            store
                .checkpoint(checkpoint(
                    id,
                    0,
                    0,
                    user_messages("m", 1),
                    run(id, &format!("r-{id}"), 1),
                ))
                .await
                .unwrap();
        }
        drop(store);
        // A delete that crashed right after its commit point (removing the head).
        let root = dir.path();
        fs::remove_file(root.join(THREADS).join("gone.json")).unwrap();
        fs::write(root.join(THREADS).join(".tmp-leftover"), b"{").unwrap();
        fs::create_dir_all(root.join(PROFILES).join("ns")).unwrap();
        fs::write(root.join(PROFILES).join("ns").join(".tmp-x"), b"1").unwrap();

        let store = FileStore::open(root).await.unwrap();
        assert_eq!(store.list_threads(0, 10).await.unwrap(), vec![kept.clone()]);
        assert_eq!(store.load_run(&rid("r-gone")).await.unwrap(), None);
        assert_eq!(names(&root.join(THREADS)), vec!["kept.json"]);
        assert_eq!(names(&root.join(MESSAGES)), vec!["kept.jsonl"]);
        assert_eq!(names(&root.join(RUNS)), vec!["r-kept.json"]);
        assert!(names(&root.join(PROFILES).join("ns")).is_empty());
        assert!(store.load_run(&rid("r-kept")).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn concurrent_writers_of_one_thread_are_serialized() {
        let (store, _dir) = store().await;
        let id = tid("t");
        let writers: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                let id = id.clone();
                tokio::spawn(async move {
                    // Each writer retries until its message lands after the others'.
                    loop {
                        let count = store
                            .load_thread_snapshot(&id)
                            .await
                            .unwrap()
                            .map_or(0, |s| s.messages.len() as u64);
                        let cp = checkpoint(
                            &id,
                            0,
                            count,
                            user_messages(&format!("w{i}-"), 1),
                            run(&id, "r", 1),
                        );
                        match store.checkpoint(cp).await {
                            Ok(_) => return,
                            Err(StorageError::VersionConflict { .. }) => continue,
                            Err(err) => panic!("{err}"),
                        }
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
        let snapshot = store.load_thread_snapshot(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.messages.len(), 8);
    }
}
