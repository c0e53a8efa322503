//! `MailboxState`: every dispatch of a mailbox and the rules that move them, as a
//! synchronous state machine.
//!
//! It is deterministic: the caller supplies the time, the configuration and the
//! claim tokens, so applying the same operations in the same order to the same
//! state gives the same state and the same answers. The in-process twin keeps one
//! behind a mutex; the cluster's ledger mailbox keeps one per node and applies the
//! operations every node reads from one JetStream stream, which is why nothing here
//! may draw on randomness or a clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::settled::{MARK_BYTES, Mark, MarkDigest, SettledMarks};
use super::transition;
use super::{
    DispatchPage, DispatchQuery, GcRules, HeldClaim, MailboxConfig, MailboxError, QueuedThread,
};
use crate::contract::{MailboxInterrupt, RunDispatch, RunDispatchResult, RunDispatchStatus};
use crate::hashing::FastHashMap;
use crate::ids::{DispatchId, ThreadId};
use crate::store::clamp_limit;

/// What a settled dispatch kept whole holds: its entry, ids, result and
/// reason text (an estimate; results are short, `run_response` aside).
const WHOLE_DISPATCH_BYTES: u64 = 1024;

/// Settled dispatches kept whole, for operators (and the thread's mailbox page)
/// to read: beyond them the earliest enqueued go, leaving their marks. A
/// number, not a time, so every replica of a replicated mailbox keeps the same.
pub const SETTLED_KEPT: usize = 1024;

/// Dead letters kept whole, beside [`SETTLED_KEPT`] others: a burst of acks does
/// not push them out.
pub const DEAD_LETTERS_KEPT: usize = 1024;

/// The dispatches of a mailbox, their enqueue order and the threads' epochs.
///
/// Retained whole are the dispatches in flight (`Queued`, `Claimed`), the
/// latest [`SETTLED_KEPT`] settled ones and [`DEAD_LETTERS_KEPT`] dead letters;
/// older settled dispatches are remembered only by their [`SettledMarks`]
/// (decision 0089).
#[derive(Debug, Default, Clone)]
pub struct MailboxState {
    /// Boxed: the map grows with every retained dispatch, and a box moves in 8
    /// bytes where a dispatch moves in hundreds when the table doubles.
    dispatches: FastHashMap<DispatchId, Box<Entry>>,
    /// Enqueue order: sequence number → dispatch.
    order: BTreeMap<u64, DispatchId>,
    /// Sequence numbers of the dispatches in flight (`Queued` or `Claimed`), so
    /// sweeps cost the work in flight rather than every retained dispatch.
    live: BTreeSet<u64>,
    threads: FastHashMap<ThreadId, ThreadMailbox>,
    dedupe: FastHashMap<String, DispatchId>,
    next_seq: u64,
    /// Sequence numbers of the settled dispatches kept whole, dead letters aside.
    recent: BTreeSet<u64>,
    /// Sequence numbers of the retained dead letters.
    dead_letters: BTreeSet<u64>,
    /// Ids and dedupe keys of settled dispatches.
    settled: SettledMarks,
}

#[derive(Debug, Clone)]
struct Entry {
    seq: u64,
    dispatch: RunDispatch,
}

#[derive(Debug, Default, Clone)]
struct ThreadMailbox {
    epoch: u64,
    /// Sequence numbers of the thread's retained dispatches, ascending.
    seqs: Vec<u64>,
}

/// A dispatch with its place in the enqueue order, as a snapshot holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequencedDispatch {
    /// Unique and increasing in enqueue order.
    pub seq: u64,
    /// The dispatch as stored.
    pub dispatch: RunDispatch,
}

impl MailboxState {
    /// Rebuilds a state from what [`Self::sequenced`], [`Self::epochs`],
    /// [`Self::settled`] and [`Self::next_seq`] gave: the same dispatches, order,
    /// epochs, dedupe keys and marks (settled dispatches beyond what is kept
    /// whole, as states before decision 0089 had, leave their marks instead).
    pub fn restore(
        next_seq: u64,
        dispatches: impl IntoIterator<Item = SequencedDispatch>,
        epochs: impl IntoIterator<Item = (ThreadId, u64)>,
        settled: impl IntoIterator<Item = Mark>,
    ) -> Self {
        let mut state = Self {
            next_seq,
            ..Self::default()
        };
        for mark in settled {
            state.settled.insert(mark);
        }
        for (thread_id, epoch) in epochs {
            state.threads.entry(thread_id).or_default().epoch = epoch;
        }
        let mut entries: Vec<SequencedDispatch> = dispatches.into_iter().collect();
        entries.sort_unstable_by_key(|entry| entry.seq);
        for SequencedDispatch { seq, dispatch } in entries {
            state.next_seq = state.next_seq.max(seq.saturating_add(1));
            let settles = dispatch.status.is_terminal();
            state.insert(seq, dispatch);
            if settles {
                state.settle(seq);
            }
        }
        state
    }

    /// The marks of settled dispatches, oldest first.
    pub fn settled(&self) -> impl Iterator<Item = &Mark> {
        self.settled.iter()
    }

    /// What the settled dispatches kept whole and the marks of the others hold
    /// (estimated).
    pub fn settled_bytes(&self) -> u64 {
        let whole = (self.recent.len() + self.dead_letters.len()) as u64;
        self.settled.len() as u64 * MARK_BYTES + whole * WHOLE_DISPATCH_BYTES
    }

    /// How many settled dispatches' ids and keys are remembered.
    pub fn settled_len(&self) -> usize {
        self.settled.len()
    }

    /// Every retained dispatch in enqueue order.
    pub fn sequenced(&self) -> impl Iterator<Item = (u64, &RunDispatch)> {
        self.order
            .iter()
            .filter_map(|(seq, id)| self.dispatches.get(id).map(|e| (*seq, &e.dispatch)))
    }

    /// Every thread whose epoch an interrupt raised, with that epoch.
    pub fn epochs(&self) -> impl Iterator<Item = (&ThreadId, u64)> {
        self.threads
            .iter()
            .filter(|(_, mailbox)| mailbox.epoch > 0)
            .map(|(thread_id, mailbox)| (thread_id, mailbox.epoch))
    }

    /// The sequence number the next enqueue takes.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// How many dispatches are retained.
    pub fn len(&self) -> usize {
        self.dispatches.len()
    }

    /// Whether no dispatch is retained.
    pub fn is_empty(&self) -> bool {
        self.dispatches.is_empty()
    }

    /// Stores a dispatch as `Queued` under its thread's epoch (see
    /// [`MailboxStore::enqueue`](super::MailboxStore::enqueue)).
    pub fn enqueue(
        &mut self,
        config: &MailboxConfig,
        mut dispatch: RunDispatch,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        if self.dispatches.contains_key(&dispatch.dispatch_id)
            || self
                .settled
                .get(&MarkDigest::of_id(&dispatch.dispatch_id))
                .is_some()
        {
            return Err(MailboxError::Duplicate(format!(
                "dispatch id {}",
                dispatch.dispatch_id
            )));
        }
        if let Some(key) = &dispatch.dedupe_key
            && (self.dedupe.contains_key(key)
                || self.settled.get(&MarkDigest::of_key(key)).is_some())
        {
            return Err(MailboxError::Duplicate(format!("dedupe key {key:?}")));
        }
        let epoch = self
            .threads
            .get(&dispatch.thread_id)
            .map_or(0, |mailbox| mailbox.epoch);
        transition::prepare_enqueue(config, &mut dispatch, epoch, now_ms);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.insert(seq, dispatch.clone());
        Ok(dispatch)
    }

    /// Claims up to `limit` of the thread's claimable dispatches, each under the
    /// next token `tokens` gives.
    pub fn claim(
        &mut self,
        thread_id: &ThreadId,
        consumer: &str,
        limit: usize,
        lease_ms: u64,
        now_ms: u64,
        mut tokens: impl FnMut() -> String,
    ) -> Vec<RunDispatch> {
        let chosen = transition::claim_order(
            self.thread_entries(thread_id).map(|entry| {
                (
                    entry.seq,
                    &entry.dispatch,
                    entry.dispatch.dispatch_id.clone(),
                )
            }),
            limit,
            now_ms,
        );
        let mut claimed = Vec::with_capacity(chosen.len());
        for id in chosen {
            let taken = self.change(&id, "claim", |dispatch| {
                transition::claim(dispatch, consumer, lease_ms, now_ms, tokens());
                Ok(())
            });
            if let Ok(dispatch) = taken {
                claimed.push(dispatch);
            }
        }
        claimed
    }

    /// Claims one specific dispatch under `token`.
    pub fn claim_dispatch(
        &mut self,
        dispatch_id: &DispatchId,
        consumer: &str,
        lease_ms: u64,
        now_ms: u64,
        token: String,
    ) -> Result<RunDispatch, MailboxError> {
        self.change(dispatch_id, "claim", |dispatch| {
            if !transition::claimable(dispatch, now_ms) {
                return Err(transition::wrong_state(dispatch, "claim"));
            }
            transition::claim(dispatch, consumer, lease_ms, now_ms, token);
            Ok(())
        })
    }

    /// Closes the queue lifecycle of a claimed dispatch.
    pub fn ack(
        &mut self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.change(dispatch_id, "ack", |dispatch| {
            transition::check_claimed(dispatch, claim_token, "ack")?;
            transition::release(dispatch, RunDispatchStatus::Acked, now_ms);
            Ok(())
        })
    }

    /// A failed attempt of a claimed dispatch: retried after the back-off, or
    /// dead-lettered when its attempts are used up.
    pub fn nack(
        &mut self,
        config: &MailboxConfig,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.change(dispatch_id, "nack", |dispatch| {
            transition::check_claimed(dispatch, claim_token, "nack")?;
            transition::fail_attempt(config, dispatch, error, now_ms);
            Ok(())
        })
    }

    /// Fails a claimed dispatch for good.
    pub fn dead_letter(
        &mut self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.change(dispatch_id, "dead-letter", |dispatch| {
            transition::check_claimed(dispatch, claim_token, "dead-letter")?;
            dispatch.last_error = Some(error.to_owned());
            transition::release(dispatch, RunDispatchStatus::DeadLetter, now_ms);
            Ok(())
        })
    }

    /// Cancels a queued dispatch.
    pub fn cancel(
        &mut self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.change(dispatch_id, "cancel", |dispatch| {
            transition::check_status(dispatch, RunDispatchStatus::Queued, "cancel")?;
            transition::release(dispatch, RunDispatchStatus::Cancelled, now_ms);
            Ok(())
        })
    }

    /// Renews the lease of a claimed dispatch.
    pub fn extend_lease(
        &mut self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.change(dispatch_id, "extend the lease of", |dispatch| {
            transition::check_claimed(dispatch, claim_token, "extend the lease of")?;
            dispatch.lease_until = Some(now_ms.saturating_add(lease_ms));
            dispatch.updated_at = now_ms;
            Ok(())
        })
    }

    /// Bumps the thread's epoch and supersedes its queued dispatches; names the
    /// claimed one the caller must cancel.
    pub fn interrupt(&mut self, thread_id: &ThreadId, now_ms: u64) -> MailboxInterrupt {
        let mailbox = self.threads.entry(thread_id.clone()).or_default();
        mailbox.epoch += 1;
        let new_dispatch_epoch = mailbox.epoch;
        let ids: Vec<DispatchId> = self
            .thread_entries(thread_id)
            .map(|entry| entry.dispatch.dispatch_id.clone())
            .collect();
        let mut interrupting = transition::Interrupting::default();
        for id in ids {
            // Every id was just read from the map, so the change finds it.
            let _visited = self.change(&id, "interrupt", |dispatch| {
                interrupting.visit(dispatch, now_ms);
                Ok(())
            });
        }
        interrupting.finish(new_dispatch_epoch)
    }

    /// Supersedes a claimed dispatch (a newer epoch arrived).
    pub fn supersede_claimed(
        &mut self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.change(dispatch_id, "supersede", |dispatch| {
            transition::check_status(dispatch, RunDispatchStatus::Claimed, "supersede")?;
            transition::release(dispatch, RunDispatchStatus::Superseded, now_ms);
            Ok(())
        })
    }

    /// Projection: the dispatch's run started.
    pub fn record_dispatch_start(
        &mut self,
        dispatch_id: &DispatchId,
        dispatch_instance_id: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.change(dispatch_id, "record the start of", |dispatch| {
            transition::record_start(dispatch, dispatch_instance_id, now_ms);
            Ok(())
        })
    }

    /// Projection: the compact result of the dispatch's run.
    pub fn record_run_result(
        &mut self,
        dispatch_id: &DispatchId,
        result: RunDispatchResult,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.change(dispatch_id, "record the result of", |dispatch| {
            transition::record_result(dispatch, result, now_ms)
        })
    }

    /// Records the run's result and acks, in one change; a result that cannot be
    /// recorded (a projection) is logged and the ack still happens.
    pub fn complete(
        &mut self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        result: RunDispatchResult,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.change(dispatch_id, "ack", |dispatch| {
            transition::check_claimed(dispatch, claim_token, "ack")?;
            if let Err(error) = transition::record_result(dispatch, result, now_ms) {
                tracing::warn!(%dispatch_id, %error, "recording the run result failed");
            }
            transition::release(dispatch, RunDispatchStatus::Acked, now_ms);
            Ok(())
        })
    }

    /// The dispatch, if retained.
    pub fn get(&self, dispatch_id: &DispatchId) -> Option<&RunDispatch> {
        self.dispatches
            .get(dispatch_id)
            .map(|entry| &entry.dispatch)
    }

    /// One page of the dispatches `query` selects, in enqueue order.
    pub fn list(&self, query: &DispatchQuery) -> DispatchPage {
        let matching: Vec<&RunDispatch> = match &query.thread_id {
            Some(thread_id) => self
                .thread_entries(thread_id)
                .map(|entry| &entry.dispatch)
                .filter(|d| query.matches(d))
                .collect(),
            None => self
                .sequenced()
                .map(|(_, dispatch)| dispatch)
                .filter(|d| query.matches(d))
                .collect(),
        };
        DispatchPage {
            total: matching.len(),
            dispatches: matching
                .into_iter()
                .skip(query.offset)
                .take(clamp_limit(query.limit))
                .cloned()
                .collect(),
        }
    }

    /// Fails the attempt of every claim whose lease ended by `now_ms`; returns them
    /// in enqueue order.
    pub fn reclaim_expired_leases(
        &mut self,
        config: &MailboxConfig,
        now_ms: u64,
    ) -> Vec<RunDispatch> {
        let expired: Vec<DispatchId> = self
            .in_flight()
            .filter(|d| transition::lease_expired(d, now_ms))
            .map(|d| d.dispatch_id.clone())
            .collect();
        expired
            .iter()
            .filter_map(|id| {
                self.change(id, "reclaim", |dispatch| {
                    transition::fail_attempt(config, dispatch, "lease expired", now_ms);
                    Ok(())
                })
                .ok()
            })
            .collect()
    }

    /// Every claim held.
    pub fn claims(&self) -> Vec<HeldClaim> {
        self.in_flight().filter_map(HeldClaim::of).collect()
    }

    /// Every thread with a queued dispatch and when its earliest one is claimable.
    pub fn queued_threads(&self) -> Vec<QueuedThread> {
        let mut earliest: HashMap<&ThreadId, u64> = HashMap::new();
        for dispatch in self.in_flight() {
            if dispatch.status == RunDispatchStatus::Queued {
                let at = earliest
                    .entry(&dispatch.thread_id)
                    .or_insert(dispatch.available_at);
                *at = (*at).min(dispatch.available_at);
            }
        }
        earliest
            .into_iter()
            .map(|(thread_id, available_at)| QueuedThread {
                thread_id: thread_id.clone(),
                available_at,
            })
            .collect()
    }

    /// Removes the settled dispatches kept whole that are older than the rules'
    /// `ttl_ms` and forgets the marks past the dedupe window or count; how many
    /// of both.
    pub fn gc(&mut self, rules: &GcRules, now_ms: u64) -> usize {
        let expired: Vec<DispatchId> = self
            .recent
            .iter()
            .chain(&self.dead_letters)
            .filter_map(|seq| self.order.get(seq))
            .filter_map(|id| self.dispatches.get(id))
            .map(|entry| &entry.dispatch)
            .filter(|d| transition::collectable(d, rules.ttl_ms, now_ms))
            .map(|d| d.dispatch_id.clone())
            .collect();
        for id in &expired {
            self.remove(id);
        }
        let forgotten = self
            .settled
            .trim(rules.dedupe_window_ms, rules.max_settled, now_ms);
        expired.len() + forgotten
    }

    /// Whether [`Self::gc`] by `rules` at `now_ms` would remove anything: a
    /// replicated mailbox skips the command otherwise.
    pub fn gc_due(&self, rules: &GcRules, now_ms: u64) -> bool {
        self.recent
            .iter()
            .chain(&self.dead_letters)
            .filter_map(|seq| self.order.get(seq))
            .filter_map(|id| self.dispatches.get(id))
            .any(|entry| transition::collectable(&entry.dispatch, rules.ttl_ms, now_ms))
            || self
                .settled
                .trims(rules.dedupe_window_ms, rules.max_settled, now_ms)
    }

    /// The dispatches in flight, in enqueue order.
    fn in_flight(&self) -> impl Iterator<Item = &RunDispatch> {
        self.live
            .iter()
            .filter_map(|seq| self.order.get(seq))
            .filter_map(|id| self.dispatches.get(id))
            .map(|entry| &entry.dispatch)
    }

    /// Applies `op` to the dispatch and keeps the in-flight set in step; the
    /// dispatch as changed. A refusal from `op` must leave the dispatch untouched.
    /// A dispatch that settles leaves (see [`Self::settle`]); `operation` names
    /// what was attempted on one that already left.
    fn change(
        &mut self,
        id: &DispatchId,
        operation: &'static str,
        op: impl FnOnce(&mut RunDispatch) -> Result<(), MailboxError>,
    ) -> Result<RunDispatch, MailboxError> {
        let Some(entry) = self.dispatches.get_mut(id) else {
            return Err(match self.settled.get(&MarkDigest::of_id(id)) {
                Some(mark) => MailboxError::WrongState {
                    dispatch_id: id.clone(),
                    status: mark.status,
                    operation,
                },
                None => MailboxError::NotFound(id.clone()),
            });
        };
        let was_settled = entry.dispatch.status.is_terminal();
        op(&mut entry.dispatch)?;
        let (seq, changed) = (entry.seq, entry.dispatch.clone());
        if !changed.status.is_terminal() {
            self.live.insert(seq);
        } else if !was_settled {
            self.live.remove(&seq);
            self.settle(seq);
        }
        Ok(changed)
    }

    /// A dispatch just settled: it stays whole among the kept ones, and the
    /// earliest enqueued beyond their number leave, remembered by marks.
    fn settle(&mut self, seq: u64) {
        let Some(id) = self.order.get(&seq) else {
            return;
        };
        let dead = self
            .dispatches
            .get(id)
            .is_some_and(|entry| entry.dispatch.status == RunDispatchStatus::DeadLetter);
        let (kept, limit) = if dead {
            (&mut self.dead_letters, DEAD_LETTERS_KEPT)
        } else {
            (&mut self.recent, SETTLED_KEPT)
        };
        kept.insert(seq);
        let mut leaving = Vec::new();
        while kept.len() > limit {
            if let Some(earliest) = kept.pop_first() {
                leaving.push(earliest);
            }
        }
        for earliest in leaving {
            if let Some(id) = self.order.get(&earliest).cloned() {
                self.retire(&id);
            }
        }
    }

    /// Removes a settled dispatch, leaving the marks of its id and dedupe key.
    fn retire(&mut self, id: &DispatchId) {
        let Some(entry) = self.dispatches.get(id) else {
            return;
        };
        let (status, at_ms) = (entry.dispatch.status, entry.dispatch.updated_at);
        let key = entry.dispatch.dedupe_key.clone();
        self.remove(id);
        self.settled.insert(Mark {
            digest: MarkDigest::of_id(id),
            status,
            at_ms,
        });
        if let Some(key) = key {
            self.settled.insert(Mark {
                digest: MarkDigest::of_key(&key),
                status,
                at_ms,
            });
        }
    }

    fn insert(&mut self, seq: u64, dispatch: RunDispatch) {
        let id = dispatch.dispatch_id.clone();
        if let Some(key) = &dispatch.dedupe_key {
            self.dedupe.insert(key.clone(), id.clone());
        }
        if !dispatch.status.is_terminal() {
            self.live.insert(seq);
        }
        let seqs = &mut self
            .threads
            .entry(dispatch.thread_id.clone())
            .or_default()
            .seqs;
        let at = seqs.partition_point(|s| *s < seq);
        seqs.insert(at, seq);
        self.order.insert(seq, id.clone());
        self.dispatches
            .insert(id, Box::new(Entry { seq, dispatch }));
    }

    /// The thread's dispatches in enqueue order.
    fn thread_entries(&self, thread_id: &ThreadId) -> impl Iterator<Item = &Entry> {
        self.threads
            .get(thread_id)
            .into_iter()
            .flat_map(|mailbox| mailbox.seqs.iter())
            .filter_map(|seq| self.order.get(seq))
            .filter_map(|id| self.dispatches.get(id).map(|entry| &**entry))
    }

    fn remove(&mut self, id: &DispatchId) {
        let Some(entry) = self.dispatches.remove(id) else {
            return;
        };
        self.order.remove(&entry.seq);
        self.live.remove(&entry.seq);
        self.recent.remove(&entry.seq);
        self.dead_letters.remove(&entry.seq);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::ids::RunId;

    const NOW: u64 = 1_000;

    fn claimed(state: &mut MailboxState, n: usize) -> RunDispatch {
        let thread_id = ThreadId::new(format!("t-{n}")).unwrap();
        let dispatch = RunDispatch::new(
            thread_id.clone(),
            RunId::new(format!("r-{n}")).unwrap(),
            0,
            NOW,
        );
        let config = MailboxConfig::default();
        state.enqueue(&config, dispatch, NOW).unwrap();
        let mut claimed = state.claim(&thread_id, "n", 1, 1000, NOW, || format!("tok-{n}"));
        claimed.pop().unwrap()
    }

    #[test]
    fn dead_letters_are_kept_apart_from_other_settled_dispatches() {
        let mut state = MailboxState::default();
        let dead: Vec<RunDispatch> = (0..DEAD_LETTERS_KEPT + 2)
            .map(|n| {
                let d = claimed(&mut state, n);
                let token = d.claim_token.clone().unwrap();
                state.dead_letter(&d.dispatch_id, &token, "x", NOW).unwrap()
            })
            .collect();
        for n in 0..SETTLED_KEPT {
            let d = claimed(&mut state, 10_000 + n);
            let token = d.claim_token.clone().unwrap();
            state.ack(&d.dispatch_id, &token, NOW).unwrap();
        }
        assert_eq!(state.len(), DEAD_LETTERS_KEPT + SETTLED_KEPT);
        assert!(
            state.get(&dead[0].dispatch_id).is_none(),
            "the earliest left"
        );
        assert!(
            state.get(&dead[2].dispatch_id).is_some(),
            "acks push none out"
        );
        assert_eq!(state.settled_len(), 2);
    }

    #[test]
    fn a_restored_state_keeps_what_the_original_kept() {
        let mut state = MailboxState::default();
        for n in 0..SETTLED_KEPT + 10 {
            let d = claimed(&mut state, n);
            let token = d.claim_token.clone().unwrap();
            state.ack(&d.dispatch_id, &token, NOW).unwrap();
        }
        let restored = MailboxState::restore(
            state.next_seq(),
            state.sequenced().map(|(seq, dispatch)| SequencedDispatch {
                seq,
                dispatch: dispatch.clone(),
            }),
            Vec::new(),
            state.settled().copied(),
        );
        assert_eq!(restored.len(), state.len());
        assert_eq!(
            restored.settled().collect::<Vec<_>>(),
            state.settled().collect::<Vec<_>>()
        );
    }
}
