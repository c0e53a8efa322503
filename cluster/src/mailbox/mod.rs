//! `JetStreamMailbox`: the [`MailboxStore`] of a cluster, in a JetStream KV bucket.
//!
//! Each thread's dispatches live in one record (`thread.<id>`, see [`records`]) that
//! every operation changes by compare-and-set on its revision: a claim has exactly
//! one winner, an interrupt bumps the epoch and supersedes queued work in one write,
//! and an enqueue takes the epoch it is stored under atomically. Two small entries
//! reserve what must be unique across threads: the dispatch id (`dispatch.<id>`,
//! which also finds a dispatch's thread) and the dedupe key (`dedupe.<digest>`);
//! they are created before the thread record is written and released if the
//! enqueue is refused. A reservation left behind by a crash between those writes is
//! an *orphan* (no thread record holds its dispatch); it can be taken over after
//! [`ORPHAN_GRACE_MS`] and garbage collection removes it.
//!
//! Sweeps — waking threads with queued work, reclaiming expired leases — read a
//! [`index::PendingIndex`] of the threads with work in flight, kept current from
//! the bucket's change feed, so they cost what is pending rather than every
//! thread ever run. Listing all dispatches and garbage collection scan the thread
//! records with one consumer; they are rare (an operator's listing, `gc_interval`).

mod cache;
mod index;
pub(crate) mod records;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_nats::jetstream::{self, kv};
use async_trait::async_trait;
use awaken_actors::contract::{
    MailboxInterrupt, RunDispatch, RunDispatchResult, RunDispatchStatus,
};
use awaken_actors::ids::{DispatchId, ThreadId};
use awaken_actors::mailbox::{
    DispatchPage, DispatchQuery, HeldClaim, MailboxConfig, MailboxError, MailboxStore,
    QUEUE_WATCH_CAPACITY, QueueWatch, QueuedThread, transition,
};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use self::cache::Bounded;
use self::index::{Follower, PendingIndex};
use self::records::{
    DEDUPE_PREFIX, DISPATCH_PREFIX, DedupeEntry, IndexEntry, THREAD_PREFIX, ThreadMailbox,
    dedupe_key, dispatch_key, thread_key,
};
use crate::codec;
use crate::error::ClusterError;
use crate::kv::{BucketSpec, ensure_bucket};
use crate::kv_scan::{Latest, latest_under};

/// The KV bucket the mailbox lives in, unless configured otherwise.
pub const DEFAULT_MAILBOX_BUCKET: &str = "awaken_mailbox";

/// How long a reservation whose dispatch no thread holds is left to the enqueue
/// that may still be writing it, before another enqueue may take it over.
pub const ORPHAN_GRACE_MS: u64 = 30_000;

/// Compare-and-set rounds before an operation on a hotly contested thread gives up.
const MAX_CAS_ROUNDS: usize = 64;

/// The mailbox on NATS: durable, shared by every node of the cluster.
#[derive(Debug, Clone)]
pub struct JetStreamMailbox {
    config: MailboxConfig,
    client: async_nats::Client,
    bucket: kv::Store,
    /// Thread records this node wrote or was told of last, by key.
    records: Arc<RecordCache>,
    /// Which thread holds a dispatch (immutable while the dispatch exists).
    threads_of: Arc<Bounded<DispatchId, ThreadId>>,
    /// The threads with queued or claimed dispatches.
    pending: Arc<PendingIndex>,
    /// Keeps `pending` current while any clone of the mailbox lives.
    _follower: Arc<Follower>,
}

/// Thread records and dispatch locations a node remembers.
const CACHE_CAPACITY: usize = 16_384;
/// How long [`JetStreamMailbox::open`] keeps retrying a JetStream that does not answer.
pub const OPEN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);
/// The first pause between open attempts (doubling, up to 16 times this).
const OPEN_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

/// Thread records by key, with their revisions.
type RecordCache = Bounded<String, (u64, ThreadMailbox)>;

/// What an operation on a thread record decided.
enum Change<R> {
    /// Write the changed record, then answer `R`.
    Write(R),
    /// Nothing changed; answer `R` without writing.
    Keep(R),
}

/// A record as read, with the revision to compare-and-set against (0: absent).
struct Loaded<T> {
    revision: u64,
    value: T,
}

fn unavailable(error: impl std::fmt::Display) -> MailboxError {
    MailboxError::Unavailable(error.to_string())
}

fn from_cluster(error: ClusterError) -> MailboxError {
    MailboxError::Unavailable(error.to_string())
}

impl JetStreamMailbox {
    /// Opens the mailbox in `bucket` (created when missing, `replicas` copies);
    /// returns once it knows every thread with work in flight.
    ///
    /// JetStream answers API requests only while its cluster has a leader: a node
    /// started during an election (or right after a server restart) retries for
    /// up to [`OPEN_DEADLINE`] before giving up with the last error.
    pub async fn open(
        js: &jetstream::Context,
        bucket: &str,
        replicas: usize,
        config: MailboxConfig,
    ) -> Result<Self, ClusterError> {
        let deadline = tokio::time::Instant::now() + OPEN_DEADLINE;
        let mut delay = OPEN_RETRY_DELAY;
        loop {
            // Boxed: the attempt's future is large and lives in every caller's.
            match Box::pin(Self::open_once(js, bucket, replicas, config.clone())).await {
                Err(ClusterError::Nats(error))
                    if tokio::time::Instant::now() + delay < deadline =>
                {
                    tracing::warn!(%error, bucket, "the mailbox could not open yet; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(OPEN_RETRY_DELAY * 16);
                }
                opened => return opened,
            }
        }
    }

    async fn open_once(
        js: &jetstream::Context,
        bucket: &str,
        replicas: usize,
        config: MailboxConfig,
    ) -> Result<Self, ClusterError> {
        let spec = BucketSpec::new(bucket).with_replicas(replicas);
        let bucket = ensure_bucket(js, &spec).await?;
        let pending = Arc::new(PendingIndex::default());
        let records = Arc::new(Bounded::new(CACHE_CAPACITY));
        let follower = index::follow(
            js.client(),
            bucket.clone(),
            Arc::clone(&pending),
            Arc::clone(&records),
        )
        .await?;
        Ok(Self {
            config,
            client: js.client(),
            bucket,
            records,
            threads_of: Arc::new(Bounded::new(CACHE_CAPACITY)),
            pending,
            _follower: Arc::new(follower),
        })
    }

    /// Reads and decodes a key; `None` when absent or deleted.
    async fn read<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<Loaded<T>>, MailboxError> {
        let entry = self.bucket.entry(key).await.map_err(unavailable)?;
        match entry {
            Some(entry) if entry.operation == kv::Operation::Put => Ok(Some(Loaded {
                revision: entry.revision,
                value: codec::decode(&entry.value).map_err(from_cluster)?,
            })),
            _ => Ok(None),
        }
    }

    /// Writes `value` if the key is still at `revision` (0: absent). `None` when
    /// another writer won.
    async fn write_if(
        &self,
        key: &str,
        revision: u64,
        value: Bytes,
    ) -> Result<Option<u64>, MailboxError> {
        if revision == 0 {
            match self.bucket.create(key, value).await {
                Ok(revision) => Ok(Some(revision)),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(None),
                Err(e) => Err(unavailable(e)),
            }
        } else {
            match self.bucket.update(key, value, revision).await {
                Ok(revision) => Ok(Some(revision)),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
                Err(e) => Err(unavailable(e)),
            }
        }
    }

    /// Removes a key if it is still at `revision`, leaving no delete marker behind
    /// (a stream purge of the key's subject up to that revision); whether it was.
    async fn remove_if(&self, key: &str, revision: u64) -> Result<bool, MailboxError> {
        let response = self
            .bucket
            .stream
            .purge()
            .filter(format!("{}{key}", self.bucket.prefix))
            .sequence(revision.saturating_add(1))
            .await
            .map_err(unavailable)?;
        Ok(response.purged > 0)
    }

    async fn load_thread(&self, thread_id: &ThreadId) -> Result<ThreadMailbox, MailboxError> {
        Ok(self
            .read(&thread_key(thread_id))
            .await?
            .map(|loaded| loaded.value)
            .unwrap_or_default())
    }

    /// Runs `op` on the thread's record and commits its change by compare-and-set,
    /// re-reading and re-running it when another writer got there first. `op` must
    /// therefore be free of side effects; an error from it changes nothing.
    async fn with_thread<R>(
        &self,
        thread_id: &ThreadId,
        mut op: impl FnMut(&mut ThreadMailbox) -> Result<Change<R>, MailboxError>,
    ) -> Result<R, MailboxError> {
        let key = thread_key(thread_id);
        let mut cached = self.records.get(&key);
        for _ in 0..MAX_CAS_ROUNDS {
            let from_cache = cached.is_some();
            let (revision, mut value) = match cached.take() {
                Some(entry) => entry,
                None => self
                    .read(&key)
                    .await?
                    .map_or((0, ThreadMailbox::default()), |l| (l.revision, l.value)),
            };
            match op(&mut value) {
                Ok(Change::Write(answer)) => {
                    if self.commit(&key, revision, value).await? {
                        return Ok(answer);
                    }
                    self.records.forget(&key);
                }
                // Only a fresh read may answer without writing.
                Ok(Change::Keep(_)) | Err(_) if from_cache => self.records.forget(&key),
                Ok(Change::Keep(answer)) => return Ok(answer),
                Err(refused) => return Err(refused),
            }
        }
        Err(MailboxError::Unavailable(format!(
            "thread {thread_id}: gave up after {MAX_CAS_ROUNDS} conflicting writes"
        )))
    }

    /// Writes a thread record if it is still at `revision` (0: absent) and, when
    /// the write wins, remembers it and puts it in the pending index.
    async fn commit(
        &self,
        key: &str,
        revision: u64,
        value: ThreadMailbox,
    ) -> Result<bool, MailboxError> {
        let payload = codec::encode(&value).map_err(from_cluster)?;
        let Some(revision) = self.write_if(key, revision, payload).await? else {
            return Ok(false);
        };
        self.pending.apply(key, revision, Some(&value), false);
        self.records.put(key.to_owned(), (revision, value));
        Ok(true)
    }

    /// [`Self::with_thread`] for an enqueue: when this node holds no copy of the
    /// record, it first tries to create it (most enqueues start a new thread) and
    /// reads it only when it exists, saving a round trip per new thread.
    async fn with_new_thread<R>(
        &self,
        thread_id: &ThreadId,
        mut op: impl FnMut(&mut ThreadMailbox) -> Result<Change<R>, MailboxError>,
    ) -> Result<R, MailboxError> {
        let key = thread_key(thread_id);
        if self.records.get(&key).is_none() {
            let mut value = ThreadMailbox::default();
            // An answer for an empty record counts only if the record is new.
            if let Ok(Change::Write(answer)) = op(&mut value)
                && self.commit(&key, 0, value).await?
            {
                return Ok(answer);
            }
        }
        self.with_thread(thread_id, op).await
    }

    /// The thread holding the dispatch, from its index entry.
    async fn thread_of(&self, dispatch_id: &DispatchId) -> Result<Option<ThreadId>, MailboxError> {
        let thread_id = self
            .read::<IndexEntry>(&dispatch_key(dispatch_id))
            .await?
            .map(|loaded| loaded.value.thread_id);
        if let Some(thread_id) = &thread_id {
            self.threads_of.put(dispatch_id.clone(), thread_id.clone());
        }
        Ok(thread_id)
    }

    /// Runs `op` on one dispatch inside its thread's record (see [`Self::with_thread`]).
    async fn with_dispatch<R>(
        &self,
        dispatch_id: &DispatchId,
        mut op: impl FnMut(&mut RunDispatch) -> Result<Change<R>, MailboxError>,
    ) -> Result<R, MailboxError> {
        let not_found = || MailboxError::NotFound(dispatch_id.clone());
        if let Some(thread_id) = self.threads_of.get(dispatch_id) {
            let answer = self
                .with_thread(&thread_id, |mailbox| {
                    op(mailbox.get_mut(dispatch_id).ok_or_else(not_found)?)
                })
                .await;
            match answer {
                // The id was collected (and maybe reused elsewhere): ask the index.
                Err(MailboxError::NotFound(_)) => self.threads_of.forget(dispatch_id),
                answer => return answer,
            }
        }
        let thread_id = self.thread_of(dispatch_id).await?.ok_or_else(not_found)?;
        self.with_thread(&thread_id, |mailbox| {
            op(mailbox.get_mut(dispatch_id).ok_or_else(not_found)?)
        })
        .await
    }

    /// Whether the thread holds the dispatch (with `dedupe_key`, when given).
    async fn thread_holds(
        &self,
        thread_id: &ThreadId,
        dispatch_id: &DispatchId,
        dedupe: Option<&str>,
    ) -> Result<bool, MailboxError> {
        let mut mailbox = self.load_thread(thread_id).await?;
        Ok(mailbox
            .get_mut(dispatch_id)
            .is_some_and(|held| dedupe.is_none_or(|key| held.dedupe_key.as_deref() == Some(key))))
    }

    /// Reserves the dispatch's dedupe key; returns the entry's key and revision.
    async fn reserve_dedupe(
        &self,
        dedupe: &str,
        dispatch: &RunDispatch,
        now_ms: u64,
    ) -> Result<(String, u64), MailboxError> {
        let key = dedupe_key(dedupe);
        let ours = codec::encode(&DedupeEntry {
            dispatch_id: dispatch.dispatch_id.clone(),
            thread_id: dispatch.thread_id.clone(),
            created_at_ms: now_ms,
        })
        .map_err(from_cluster)?;
        let duplicate = || MailboxError::Duplicate(format!("dedupe key {dedupe:?}"));
        // Most reservations are new: try to create before reading.
        let mut known_taken = false;
        for _ in 0..MAX_CAS_ROUNDS {
            let existing = if known_taken {
                self.read::<DedupeEntry>(&key).await?
            } else {
                None
            };
            known_taken = true;
            let revision = match existing {
                None => 0,
                Some(Loaded { revision, value }) => {
                    if self
                        .thread_holds(&value.thread_id, &value.dispatch_id, Some(dedupe))
                        .await?
                    {
                        return Err(duplicate());
                    }
                    // An orphan: ours from an earlier attempt, or old enough that
                    // no enqueue can still be writing it.
                    let same = value.dispatch_id == dispatch.dispatch_id
                        && value.thread_id == dispatch.thread_id;
                    if !same && now_ms < value.created_at_ms.saturating_add(ORPHAN_GRACE_MS) {
                        return Err(duplicate());
                    }
                    revision
                }
            };
            if let Some(revision) = self.write_if(&key, revision, ours.clone()).await? {
                return Ok((key, revision));
            }
        }
        Err(duplicate())
    }

    /// Reserves the dispatch id; returns the entry's revision, which orders the
    /// dispatch among all enqueued ones.
    async fn reserve_id(&self, dispatch: &RunDispatch, now_ms: u64) -> Result<u64, MailboxError> {
        let key = dispatch_key(&dispatch.dispatch_id);
        let ours = codec::encode(&IndexEntry {
            dispatch_id: dispatch.dispatch_id.clone(),
            thread_id: dispatch.thread_id.clone(),
            created_at_ms: now_ms,
        })
        .map_err(from_cluster)?;
        let duplicate = || MailboxError::Duplicate(format!("dispatch id {}", dispatch.dispatch_id));
        // Most reservations are new: try to create before reading.
        let mut known_taken = false;
        for _ in 0..MAX_CAS_ROUNDS {
            let existing = if known_taken {
                self.read::<IndexEntry>(&key).await?
            } else {
                None
            };
            known_taken = true;
            let revision = match existing {
                None => 0,
                Some(Loaded { revision, value }) => {
                    if self
                        .thread_holds(&value.thread_id, &dispatch.dispatch_id, None)
                        .await?
                    {
                        return Err(duplicate());
                    }
                    // Taking over our own thread's orphan is safe at once: if an
                    // enqueue of the same id is still writing, the thread record
                    // accepts only one of us.
                    let same = value.thread_id == dispatch.thread_id;
                    if !same && now_ms < value.created_at_ms.saturating_add(ORPHAN_GRACE_MS) {
                        return Err(duplicate());
                    }
                    revision
                }
            };
            if let Some(revision) = self.write_if(&key, revision, ours.clone()).await? {
                self.threads_of
                    .put(dispatch.dispatch_id.clone(), dispatch.thread_id.clone());
                return Ok(revision);
            }
        }
        Err(duplicate())
    }

    /// Every thread record.
    async fn all_threads(&self) -> Result<Vec<ThreadMailbox>, MailboxError> {
        self.scan(THREAD_PREFIX)
            .await?
            .iter()
            .map(|entry| codec::decode(&entry.value).map_err(from_cluster))
            .collect()
    }

    /// Removes the reservations of dispatches no thread holds: those of the
    /// dispatches garbage collection just purged, and orphans older than
    /// [`ORPHAN_GRACE_MS`]. `threads` is the state after the purge.
    async fn sweep_reservations(
        &self,
        threads: &[ThreadMailbox],
        purged: &HashMap<DispatchId, Purged>,
        now_ms: u64,
    ) -> Result<(), MailboxError> {
        let mut held = HashSet::new();
        let mut held_dedupe = HashSet::new();
        for dispatch in threads
            .iter()
            .flat_map(|t| &t.dispatches)
            .map(|e| &e.dispatch)
        {
            held.insert(dispatch.dispatch_id.clone());
            if let Some(key) = &dispatch.dedupe_key {
                held_dedupe.insert((dedupe_key(key), dispatch.dispatch_id.clone()));
            }
        }
        let stale = |created_at_ms: u64| now_ms >= created_at_ms.saturating_add(ORPHAN_GRACE_MS);
        for entry in self.scan(DISPATCH_PREFIX).await? {
            let Ok(index) = codec::decode::<IndexEntry>(&entry.value) else {
                continue;
            };
            let just_purged = purged
                .get(&index.dispatch_id)
                .is_some_and(|p| p.seq == entry.revision);
            if !held.contains(&index.dispatch_id) && (just_purged || stale(index.created_at_ms)) {
                self.remove_if(&entry.key, entry.revision).await?;
            }
        }
        for entry in self.scan(DEDUPE_PREFIX).await? {
            let Ok(dedupe) = codec::decode::<DedupeEntry>(&entry.value) else {
                continue;
            };
            let just_purged = purged
                .get(&dedupe.dispatch_id)
                .is_some_and(|p| p.created_at_ms == dedupe.created_at_ms);
            let live = held_dedupe.contains(&(entry.key.clone(), dedupe.dispatch_id.clone()));
            if !live && (just_purged || stale(dedupe.created_at_ms)) {
                self.remove_if(&entry.key, entry.revision).await?;
            }
        }
        Ok(())
    }

    /// Removes a thread record that holds nothing (see [`ThreadMailbox::is_blank`])
    /// if it is still at `revision`: the bucket keeps only threads with retained
    /// dispatches or a raised epoch, so it does not grow with every thread ever run.
    async fn remove_blank(&self, key: &str, revision: u64) -> Result<bool, MailboxError> {
        self.records.forget(&key.to_owned());
        self.remove_if(key, revision).await
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<Latest>, MailboxError> {
        latest_under(&self.client, &self.bucket, prefix)
            .await
            .map_err(from_cluster)
    }
}

/// What garbage collection remembers of a purged dispatch to recognise its
/// reservations (and not a newer enqueue's under the same id).
struct Purged {
    seq: u64,
    created_at_ms: u64,
}

#[async_trait]
impl MailboxStore for JetStreamMailbox {
    async fn enqueue(
        &self,
        dispatch: RunDispatch,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let dedupe = match &dispatch.dedupe_key {
            Some(key) => Some(self.reserve_dedupe(key, &dispatch, now_ms).await?),
            None => None,
        };
        let seq = match self.reserve_id(&dispatch, now_ms).await {
            Ok(seq) => seq,
            Err(refused) => {
                if let Some((key, revision)) = dedupe {
                    self.remove_if(&key, revision).await?;
                }
                return Err(refused);
            }
        };
        // Not released when this write fails: it may have landed. A retry takes
        // the reservations over, and the thread record accepts the id only once.
        self.with_new_thread(&dispatch.thread_id, |mailbox| {
            if mailbox.holds(&dispatch.dispatch_id) {
                return Err(MailboxError::Duplicate(format!(
                    "dispatch id {}",
                    dispatch.dispatch_id
                )));
            }
            let mut stored = dispatch.clone();
            transition::prepare_enqueue(&self.config, &mut stored, mailbox.epoch, now_ms);
            mailbox.insert(seq, stored.clone());
            Ok(Change::Write(stored))
        })
        .await
    }

    async fn claim(
        &self,
        thread_id: &ThreadId,
        consumer: &str,
        limit: usize,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<RunDispatch>, MailboxError> {
        self.with_thread(thread_id, |mailbox| {
            let chosen = transition::claim_order(
                mailbox
                    .dispatches
                    .iter()
                    .enumerate()
                    .map(|(at, entry)| (entry.seq, &entry.dispatch, at)),
                limit,
                now_ms,
            );
            let claimed: Vec<RunDispatch> = chosen
                .into_iter()
                .map(|at| {
                    let dispatch = &mut mailbox.dispatches[at].dispatch;
                    transition::claim(
                        dispatch,
                        consumer,
                        lease_ms,
                        now_ms,
                        transition::new_claim_token(),
                    );
                    dispatch.clone()
                })
                .collect();
            Ok(if claimed.is_empty() {
                Change::Keep(claimed)
            } else {
                Change::Write(claimed)
            })
        })
        .await
        .inspect(|claimed| {
            // The claimer's next operations name the dispatch, not the thread.
            for dispatch in claimed {
                self.threads_of
                    .put(dispatch.dispatch_id.clone(), thread_id.clone());
            }
        })
    }

    async fn claim_dispatch(
        &self,
        dispatch_id: &DispatchId,
        consumer: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.with_dispatch(dispatch_id, |dispatch| {
            if !transition::claimable(dispatch, now_ms) {
                return Err(transition::wrong_state(dispatch, "claim"));
            }
            transition::claim(
                dispatch,
                consumer,
                lease_ms,
                now_ms,
                transition::new_claim_token(),
            );
            Ok(Change::Write(dispatch.clone()))
        })
        .await
    }

    async fn ack(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.with_dispatch(dispatch_id, |dispatch| {
            transition::check_claimed(dispatch, claim_token, "ack")?;
            transition::release(dispatch, RunDispatchStatus::Acked, now_ms);
            Ok(Change::Write(dispatch.clone()))
        })
        .await
    }

    async fn nack(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.with_dispatch(dispatch_id, |dispatch| {
            transition::check_claimed(dispatch, claim_token, "nack")?;
            transition::fail_attempt(&self.config, dispatch, error, now_ms);
            Ok(Change::Write(dispatch.clone()))
        })
        .await
    }

    async fn dead_letter(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.with_dispatch(dispatch_id, |dispatch| {
            transition::check_claimed(dispatch, claim_token, "dead-letter")?;
            dispatch.last_error = Some(error.to_owned());
            transition::release(dispatch, RunDispatchStatus::DeadLetter, now_ms);
            Ok(Change::Write(dispatch.clone()))
        })
        .await
    }

    async fn cancel(
        &self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.with_dispatch(dispatch_id, |dispatch| {
            transition::check_status(dispatch, RunDispatchStatus::Queued, "cancel")?;
            transition::release(dispatch, RunDispatchStatus::Cancelled, now_ms);
            Ok(Change::Write(dispatch.clone()))
        })
        .await
    }

    async fn extend_lease(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.with_dispatch(dispatch_id, |dispatch| {
            transition::check_claimed(dispatch, claim_token, "extend the lease of")?;
            dispatch.lease_until = Some(now_ms.saturating_add(lease_ms));
            dispatch.updated_at = now_ms;
            Ok(Change::Write(dispatch.clone()))
        })
        .await
    }

    async fn interrupt(
        &self,
        thread_id: &ThreadId,
        now_ms: u64,
    ) -> Result<MailboxInterrupt, MailboxError> {
        self.with_thread(thread_id, |mailbox| {
            mailbox.epoch += 1;
            let mut interrupting = transition::Interrupting::default();
            for entry in &mut mailbox.dispatches {
                interrupting.visit(&mut entry.dispatch, now_ms);
            }
            Ok(Change::Write(interrupting.finish(mailbox.epoch)))
        })
        .await
    }

    async fn supersede_claimed(
        &self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.with_dispatch(dispatch_id, |dispatch| {
            transition::check_status(dispatch, RunDispatchStatus::Claimed, "supersede")?;
            transition::release(dispatch, RunDispatchStatus::Superseded, now_ms);
            Ok(Change::Write(dispatch.clone()))
        })
        .await
    }

    async fn record_dispatch_start(
        &self,
        dispatch_id: &DispatchId,
        dispatch_instance_id: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.with_dispatch(dispatch_id, |dispatch| {
            transition::record_start(dispatch, dispatch_instance_id, now_ms);
            Ok(Change::Write(dispatch.clone()))
        })
        .await
    }

    async fn record_run_result(
        &self,
        dispatch_id: &DispatchId,
        result: RunDispatchResult,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.with_dispatch(dispatch_id, |dispatch| {
            transition::record_result(dispatch, result.clone(), now_ms)?;
            Ok(Change::Write(dispatch.clone()))
        })
        .await
    }

    async fn load_dispatch(
        &self,
        dispatch_id: &DispatchId,
    ) -> Result<Option<RunDispatch>, MailboxError> {
        let Some(thread_id) = self.thread_of(dispatch_id).await? else {
            return Ok(None);
        };
        let mut mailbox = self.load_thread(&thread_id).await?;
        Ok(mailbox
            .get_mut(dispatch_id)
            .map(|dispatch| dispatch.clone()))
    }

    async fn list_dispatches(&self, query: &DispatchQuery) -> Result<DispatchPage, MailboxError> {
        let threads = match &query.thread_id {
            Some(thread_id) => vec![self.load_thread(thread_id).await?],
            None => self.all_threads().await?,
        };
        let mut matching: Vec<(u64, RunDispatch)> = threads
            .into_iter()
            .flat_map(|mailbox| mailbox.dispatches)
            .filter(|entry| query.matches(&entry.dispatch))
            .map(|entry| (entry.seq, entry.dispatch))
            .collect();
        matching.sort_unstable_by_key(|(seq, _)| *seq);
        Ok(DispatchPage {
            total: matching.len(),
            dispatches: matching
                .into_iter()
                .skip(query.offset)
                .take(awaken_actors::store::clamp_limit(query.limit))
                .map(|(_, dispatch)| dispatch)
                .collect(),
        })
    }

    async fn reclaim_expired_leases(&self, now_ms: u64) -> Result<Vec<RunDispatch>, MailboxError> {
        let mut reclaimed = Vec::new();
        for thread_id in self.pending.expired(now_ms) {
            let mut expired = self
                .with_thread(&thread_id, |mailbox| {
                    let mut expired = Vec::new();
                    for entry in &mut mailbox.dispatches {
                        if transition::lease_expired(&entry.dispatch, now_ms) {
                            transition::fail_attempt(
                                &self.config,
                                &mut entry.dispatch,
                                "lease expired",
                                now_ms,
                            );
                            expired.push((entry.seq, entry.dispatch.clone()));
                        }
                    }
                    Ok(if expired.is_empty() {
                        Change::Keep(expired)
                    } else {
                        Change::Write(expired)
                    })
                })
                .await?;
            reclaimed.append(&mut expired);
        }
        reclaimed.sort_unstable_by_key(|(seq, _)| *seq);
        Ok(reclaimed
            .into_iter()
            .map(|(_, dispatch)| dispatch)
            .collect())
    }

    async fn claims(&self) -> Result<Vec<HeldClaim>, MailboxError> {
        Ok(self.pending.claims())
    }

    async fn queued_threads(&self) -> Result<Vec<QueuedThread>, MailboxError> {
        Ok(self.pending.queued())
    }

    async fn watch_queued(&self) -> Result<QueueWatch, MailboxError> {
        let (tx, rx) = mpsc::channel(QUEUE_WATCH_CAPACITY);
        self.pending.subscribe(tx);
        Ok(rx)
    }

    async fn gc(&self, now_ms: u64) -> Result<usize, MailboxError> {
        let ttl = self.config.gc_ttl_ms();
        let mut purged = HashMap::new();
        let mut after = Vec::new();
        let collectable = |mailbox: &ThreadMailbox| {
            mailbox
                .dispatches
                .iter()
                .any(|entry| transition::collectable(&entry.dispatch, ttl, now_ms))
        };
        let mut remember = |removed: Vec<records::Sequenced>| {
            for entry in removed {
                purged.insert(
                    entry.dispatch.dispatch_id,
                    Purged {
                        seq: entry.seq,
                        created_at_ms: entry.dispatch.created_at,
                    },
                );
            }
        };
        for entry in self.scan(THREAD_PREFIX).await? {
            let mailbox: ThreadMailbox = codec::decode(&entry.value).map_err(from_cluster)?;
            // Nothing would be left: remove the record as scanned in one step, unless
            // it changed since (then collect through a compare-and-set below).
            let all_collectable = mailbox
                .dispatches
                .iter()
                .all(|entry| transition::collectable(&entry.dispatch, ttl, now_ms));
            if mailbox.epoch == 0
                && all_collectable
                && self.remove_blank(&entry.key, entry.revision).await?
            {
                remember(mailbox.dispatches);
                continue;
            }
            if !collectable(&mailbox) {
                after.push(mailbox);
                continue;
            }
            let Some(first) = mailbox.dispatches.first() else {
                continue;
            };
            let thread_id = first.dispatch.thread_id.clone();
            let (kept, removed) = self
                .with_thread(&thread_id, |mailbox| {
                    let (removed, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut mailbox.dispatches)
                        .into_iter()
                        .partition(|entry| transition::collectable(&entry.dispatch, ttl, now_ms));
                    mailbox.dispatches = kept;
                    let answer = (mailbox.clone(), removed);
                    Ok(if answer.1.is_empty() {
                        Change::Keep(answer)
                    } else {
                        Change::Write(answer)
                    })
                })
                .await?;
            remember(removed);
            if kept.is_blank() {
                if let Some((revision, _)) = self.records.get(&entry.key) {
                    self.remove_blank(&entry.key, revision).await?;
                }
            } else {
                after.push(kept);
            }
        }
        self.sweep_reservations(&after, &purged, now_ms).await?;
        Ok(purged.len())
    }
}
