//! `InMemoryMailboxStore`: the single-node twin of the JetStream mailbox.
//!
//! One mutex over the whole mailbox: every operation is a few map lookups, so a claim
//! is trivially atomic (exactly one winner) and contention stays far below the cost
//! of the runs the dispatches activate.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use tokio::sync::mpsc;

use super::{
    DispatchPage, DispatchQuery, HeldClaim, MailboxConfig, MailboxError, MailboxStore,
    QUEUE_WATCH_CAPACITY, QueueWatch, QueuedThread, transition,
};
use crate::contract::{MailboxInterrupt, RunDispatch, RunDispatchResult, RunDispatchStatus};
use crate::hashing::FastHashMap;
use crate::ids::{DispatchId, ThreadId};
use crate::store::clamp_limit;

/// Dispatches kept in process memory.
#[derive(Debug, Default)]
pub struct InMemoryMailboxStore {
    config: MailboxConfig,
    inner: Mutex<Inner>,
    watchers: Mutex<Vec<mpsc::Sender<ThreadId>>>,
}

#[derive(Debug, Default)]
struct Inner {
    dispatches: FastHashMap<DispatchId, Entry>,
    /// Enqueue order: sequence number → dispatch.
    order: BTreeMap<u64, DispatchId>,
    threads: FastHashMap<ThreadId, ThreadMailbox>,
    dedupe: FastHashMap<String, DispatchId>,
    next_seq: u64,
}

#[derive(Debug)]
struct Entry {
    seq: u64,
    dispatch: RunDispatch,
}

#[derive(Debug, Default)]
struct ThreadMailbox {
    epoch: u64,
    /// Sequence numbers of the thread's retained dispatches.
    seqs: Vec<u64>,
}

impl InMemoryMailboxStore {
    /// An empty mailbox with `config`.
    pub fn new(config: MailboxConfig) -> Self {
        Self {
            config,
            inner: Mutex::default(),
            watchers: Mutex::default(),
        }
    }

    /// Tells every watcher that `threads` got queued work; forgets closed watches.
    fn notify<'a>(&self, threads: impl IntoIterator<Item = &'a ThreadId>) {
        let mut watchers = self
            .watchers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if watchers.is_empty() {
            return;
        }
        for thread_id in threads {
            watchers.retain(|watcher| {
                !matches!(
                    watcher.try_send(thread_id.clone()),
                    Err(mpsc::error::TrySendError::Closed(_))
                )
            });
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Inner {
    fn get_mut(&mut self, id: &DispatchId) -> Result<&mut RunDispatch, MailboxError> {
        self.dispatches
            .get_mut(id)
            .map(|entry| &mut entry.dispatch)
            .ok_or_else(|| MailboxError::NotFound(id.clone()))
    }

    /// The dispatch, if it is in `status`.
    fn in_status(
        &mut self,
        id: &DispatchId,
        status: RunDispatchStatus,
        operation: &'static str,
    ) -> Result<&mut RunDispatch, MailboxError> {
        let dispatch = self.get_mut(id)?;
        transition::check_status(dispatch, status, operation)?;
        Ok(dispatch)
    }

    /// The dispatch, if it is claimed under `token`.
    fn claimed(
        &mut self,
        id: &DispatchId,
        token: &str,
        operation: &'static str,
    ) -> Result<&mut RunDispatch, MailboxError> {
        let dispatch = self.get_mut(id)?;
        transition::check_claimed(dispatch, token, operation)?;
        Ok(dispatch)
    }

    /// The thread's dispatches in enqueue order.
    fn thread_entries(&self, thread_id: &ThreadId) -> impl Iterator<Item = &Entry> {
        self.threads
            .get(thread_id)
            .into_iter()
            .flat_map(|mailbox| mailbox.seqs.iter())
            .filter_map(|seq| self.order.get(seq))
            .filter_map(|id| self.dispatches.get(id))
    }

    fn remove(&mut self, id: &DispatchId) {
        let Some(entry) = self.dispatches.remove(id) else {
            return;
        };
        self.order.remove(&entry.seq);
        let thread_id = &entry.dispatch.thread_id;
        if let Some(mailbox) = self.threads.get_mut(thread_id) {
            mailbox.seqs.retain(|seq| *seq != entry.seq);
            // Holding nothing and at the initial epoch, it is what an absent
            // mailbox would be: the map does not grow with every thread ever run.
            if mailbox.seqs.is_empty() && mailbox.epoch == 0 {
                self.threads.remove(thread_id);
            }
        }
        if let Some(key) = &entry.dispatch.dedupe_key
            && self.dedupe.get(key) == Some(id)
        {
            self.dedupe.remove(key);
        }
    }
}

#[async_trait]
impl MailboxStore for InMemoryMailboxStore {
    async fn enqueue(
        &self,
        dispatch: RunDispatch,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let mut inner = self.lock();
        if inner.dispatches.contains_key(&dispatch.dispatch_id) {
            return Err(MailboxError::Duplicate(format!(
                "dispatch id {}",
                dispatch.dispatch_id
            )));
        }
        if let Some(key) = &dispatch.dedupe_key
            && inner.dedupe.contains_key(key)
        {
            return Err(MailboxError::Duplicate(format!("dedupe key {key:?}")));
        }
        let mut dispatch = dispatch;
        let epoch = inner
            .threads
            .get(&dispatch.thread_id)
            .map_or(0, |mailbox| mailbox.epoch);
        transition::prepare_enqueue(&self.config, &mut dispatch, epoch, now_ms);
        let seq = inner.next_seq;
        inner.next_seq += 1;
        if let Some(key) = &dispatch.dedupe_key {
            inner
                .dedupe
                .insert(key.clone(), dispatch.dispatch_id.clone());
        }
        inner.order.insert(seq, dispatch.dispatch_id.clone());
        inner
            .threads
            .entry(dispatch.thread_id.clone())
            .or_default()
            .seqs
            .push(seq);
        inner.dispatches.insert(
            dispatch.dispatch_id.clone(),
            Entry {
                seq,
                dispatch: dispatch.clone(),
            },
        );
        drop(inner);
        self.notify([&dispatch.thread_id]);
        Ok(dispatch)
    }

    async fn claim(
        &self,
        thread_id: &ThreadId,
        consumer: &str,
        limit: usize,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<RunDispatch>, MailboxError> {
        let mut inner = self.lock();
        let chosen = transition::claim_order(
            inner.thread_entries(thread_id).map(|entry| {
                (
                    entry.seq,
                    &entry.dispatch,
                    entry.dispatch.dispatch_id.clone(),
                )
            }),
            limit,
            now_ms,
        );
        let mut claimed = Vec::new();
        for id in chosen {
            let dispatch = inner.get_mut(&id)?;
            transition::claim(dispatch, consumer, lease_ms, now_ms);
            claimed.push(dispatch.clone());
        }
        Ok(claimed)
    }

    async fn claim_dispatch(
        &self,
        dispatch_id: &DispatchId,
        consumer: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let mut inner = self.lock();
        let dispatch = inner.get_mut(dispatch_id)?;
        if !transition::claimable(dispatch, now_ms) {
            return Err(transition::wrong_state(dispatch, "claim"));
        }
        transition::claim(dispatch, consumer, lease_ms, now_ms);
        Ok(dispatch.clone())
    }

    async fn ack(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let mut inner = self.lock();
        let dispatch = inner.claimed(dispatch_id, claim_token, "ack")?;
        transition::release(dispatch, RunDispatchStatus::Acked, now_ms);
        Ok(dispatch.clone())
    }

    async fn nack(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let mut inner = self.lock();
        let dispatch = inner.claimed(dispatch_id, claim_token, "nack")?;
        transition::fail_attempt(&self.config, dispatch, error, now_ms);
        let dispatch = dispatch.clone();
        drop(inner);
        if dispatch.status == RunDispatchStatus::Queued {
            self.notify([&dispatch.thread_id]);
        }
        Ok(dispatch)
    }

    async fn dead_letter(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let mut inner = self.lock();
        let dispatch = inner.claimed(dispatch_id, claim_token, "dead-letter")?;
        dispatch.last_error = Some(error.to_owned());
        transition::release(dispatch, RunDispatchStatus::DeadLetter, now_ms);
        Ok(dispatch.clone())
    }

    async fn cancel(
        &self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let mut inner = self.lock();
        let dispatch = inner.in_status(dispatch_id, RunDispatchStatus::Queued, "cancel")?;
        transition::release(dispatch, RunDispatchStatus::Cancelled, now_ms);
        Ok(dispatch.clone())
    }

    async fn extend_lease(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let mut inner = self.lock();
        let dispatch = inner.claimed(dispatch_id, claim_token, "extend the lease of")?;
        dispatch.lease_until = Some(now_ms.saturating_add(lease_ms));
        dispatch.updated_at = now_ms;
        Ok(dispatch.clone())
    }

    async fn interrupt(
        &self,
        thread_id: &ThreadId,
        now_ms: u64,
    ) -> Result<MailboxInterrupt, MailboxError> {
        let mut inner = self.lock();
        let mailbox = inner.threads.entry(thread_id.clone()).or_default();
        mailbox.epoch += 1;
        let new_dispatch_epoch = mailbox.epoch;
        let ids: Vec<DispatchId> = inner
            .thread_entries(thread_id)
            .map(|entry| entry.dispatch.dispatch_id.clone())
            .collect();
        let mut interrupting = transition::Interrupting::default();
        for id in ids {
            interrupting.visit(inner.get_mut(&id)?, now_ms);
        }
        Ok(interrupting.finish(new_dispatch_epoch))
    }

    async fn supersede_claimed(
        &self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let mut inner = self.lock();
        let dispatch = inner.in_status(dispatch_id, RunDispatchStatus::Claimed, "supersede")?;
        transition::release(dispatch, RunDispatchStatus::Superseded, now_ms);
        Ok(dispatch.clone())
    }

    async fn record_dispatch_start(
        &self,
        dispatch_id: &DispatchId,
        dispatch_instance_id: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let mut inner = self.lock();
        let dispatch = inner.get_mut(dispatch_id)?;
        transition::record_start(dispatch, dispatch_instance_id, now_ms);
        Ok(dispatch.clone())
    }

    async fn record_run_result(
        &self,
        dispatch_id: &DispatchId,
        result: RunDispatchResult,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let mut inner = self.lock();
        let dispatch = inner.get_mut(dispatch_id)?;
        transition::record_result(dispatch, result, now_ms)?;
        Ok(dispatch.clone())
    }

    async fn load_dispatch(
        &self,
        dispatch_id: &DispatchId,
    ) -> Result<Option<RunDispatch>, MailboxError> {
        Ok(self
            .lock()
            .dispatches
            .get(dispatch_id)
            .map(|entry| entry.dispatch.clone()))
    }

    async fn list_dispatches(&self, query: &DispatchQuery) -> Result<DispatchPage, MailboxError> {
        let inner = self.lock();
        let matching: Vec<&RunDispatch> = match &query.thread_id {
            Some(thread_id) => inner
                .thread_entries(thread_id)
                .map(|entry| &entry.dispatch)
                .filter(|d| query.matches(d))
                .collect(),
            None => inner
                .order
                .values()
                .filter_map(|id| inner.dispatches.get(id))
                .map(|entry| &entry.dispatch)
                .filter(|d| query.matches(d))
                .collect(),
        };
        Ok(DispatchPage {
            total: matching.len(),
            dispatches: matching
                .into_iter()
                .skip(query.offset)
                .take(clamp_limit(query.limit))
                .cloned()
                .collect(),
        })
    }

    async fn reclaim_expired_leases(&self, now_ms: u64) -> Result<Vec<RunDispatch>, MailboxError> {
        let mut inner = self.lock();
        let expired: Vec<DispatchId> = inner
            .order
            .values()
            .filter_map(|id| inner.dispatches.get(id))
            .map(|entry| &entry.dispatch)
            .filter(|d| transition::lease_expired(d, now_ms))
            .map(|d| d.dispatch_id.clone())
            .collect();
        let mut reclaimed = Vec::with_capacity(expired.len());
        for id in expired {
            let dispatch = inner.get_mut(&id)?;
            transition::fail_attempt(&self.config, dispatch, "lease expired", now_ms);
            reclaimed.push(dispatch.clone());
        }
        drop(inner);
        self.notify(
            reclaimed
                .iter()
                .filter(|d| d.status == RunDispatchStatus::Queued)
                .map(|d| &d.thread_id),
        );
        Ok(reclaimed)
    }

    async fn claims(&self) -> Result<Vec<HeldClaim>, MailboxError> {
        Ok(self
            .lock()
            .dispatches
            .values()
            .filter_map(|entry| HeldClaim::of(&entry.dispatch))
            .collect())
    }

    async fn queued_threads(&self) -> Result<Vec<QueuedThread>, MailboxError> {
        let inner = self.lock();
        let mut earliest: HashMap<&ThreadId, u64> = HashMap::new();
        for dispatch in inner.dispatches.values().map(|entry| &entry.dispatch) {
            if dispatch.status == RunDispatchStatus::Queued {
                let at = earliest
                    .entry(&dispatch.thread_id)
                    .or_insert(dispatch.available_at);
                *at = (*at).min(dispatch.available_at);
            }
        }
        Ok(earliest
            .into_iter()
            .map(|(thread_id, available_at)| QueuedThread {
                thread_id: thread_id.clone(),
                available_at,
            })
            .collect())
    }

    async fn watch_queued(&self) -> Result<QueueWatch, MailboxError> {
        let (tx, rx) = mpsc::channel(QUEUE_WATCH_CAPACITY);
        self.watchers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(tx);
        Ok(rx)
    }

    async fn gc(&self, now_ms: u64) -> Result<usize, MailboxError> {
        let ttl = self.config.gc_ttl_ms();
        let mut inner = self.lock();
        let expired: Vec<DispatchId> = inner
            .dispatches
            .values()
            .map(|entry| &entry.dispatch)
            .filter(|d| transition::collectable(d, ttl, now_ms))
            .map(|d| d.dispatch_id.clone())
            .collect();
        for id in &expired {
            inner.remove(id);
        }
        Ok(expired.len())
    }
}
