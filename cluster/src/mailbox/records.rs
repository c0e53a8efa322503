//! What the JetStream mailbox keeps in its bucket, and under which keys.
//!
//! | key | value |
//! |---|---|
//! | `thread.<b64 thread id>` | [`ThreadMailbox`]: the thread's epoch and retained dispatches |
//! | `dispatch.<b64 dispatch id>` | [`IndexEntry`]: which thread holds the dispatch |
//! | `dedupe.<b64 sha-256 of the key>` | [`DedupeEntry`]: which dispatch holds the dedupe key |
//!
//! Ids are base64url-encoded (no padding) because KV keys allow only
//! `[-/_=.A-Za-z0-9]` while ids allow any printable text.

use awaken_actors::contract::{RunDispatch, RunDispatchStatus};
use awaken_actors::ids::{DispatchId, ThreadId};
use awaken_actors::mailbox::QueuedThread;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Key prefix of thread records.
pub(crate) const THREAD_PREFIX: &str = "thread.";
/// Key prefix of dispatch index entries.
pub(crate) const DISPATCH_PREFIX: &str = "dispatch.";
/// Key prefix of dedupe entries.
pub(crate) const DEDUPE_PREFIX: &str = "dedupe.";

/// One thread's mailbox: every write to a thread's dispatches is one compare-and-set
/// of this record, which makes claims, interrupts and epochs atomic per thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ThreadMailbox {
    /// The thread's dispatch epoch; an interrupt bumps it.
    #[serde(default)]
    pub(crate) epoch: u64,
    /// The retained dispatches, in enqueue order.
    #[serde(default)]
    pub(crate) dispatches: Vec<Sequenced>,
}

/// A retained dispatch with its place in the global enqueue order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sequenced {
    /// The revision of the dispatch's index entry: unique and increasing in enqueue
    /// order across the whole bucket.
    pub(crate) seq: u64,
    /// The dispatch.
    pub(crate) dispatch: RunDispatch,
}

impl ThreadMailbox {
    /// The dispatch, if the thread holds it.
    pub(crate) fn get_mut(&mut self, id: &DispatchId) -> Option<&mut RunDispatch> {
        self.dispatches
            .iter_mut()
            .map(|entry| &mut entry.dispatch)
            .find(|dispatch| &dispatch.dispatch_id == id)
    }

    /// The thread and its earliest claimable time, when it holds a `Queued` dispatch.
    pub(crate) fn queued(&self) -> Option<QueuedThread> {
        let mut queued = self
            .dispatches
            .iter()
            .map(|entry| &entry.dispatch)
            .filter(|dispatch| dispatch.status == RunDispatchStatus::Queued);
        let first = queued.next()?;
        Some(QueuedThread {
            thread_id: first.thread_id.clone(),
            available_at: queued
                .map(|dispatch| dispatch.available_at)
                .fold(first.available_at, u64::min),
        })
    }

    /// Whether the record says nothing an absent record would not: no dispatches
    /// and the initial epoch. Garbage collection removes such records.
    pub(crate) fn is_blank(&self) -> bool {
        self.epoch == 0 && self.dispatches.is_empty()
    }

    /// Whether the thread holds the dispatch.
    pub(crate) fn holds(&self, id: &DispatchId) -> bool {
        self.dispatches
            .iter()
            .any(|entry| &entry.dispatch.dispatch_id == id)
    }

    /// Adds a dispatch, keeping enqueue order (concurrent enqueues may commit out of
    /// sequence order).
    pub(crate) fn insert(&mut self, seq: u64, dispatch: RunDispatch) {
        let at = self.dispatches.partition_point(|entry| entry.seq < seq);
        self.dispatches.insert(at, Sequenced { seq, dispatch });
    }
}

/// Maps a dispatch id to its thread; creating it reserves the id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IndexEntry {
    /// The dispatch.
    pub(crate) dispatch_id: DispatchId,
    /// The thread whose mailbox holds the dispatch.
    pub(crate) thread_id: ThreadId,
    /// When the entry was written, unix millis.
    pub(crate) created_at_ms: u64,
}

/// Maps a dedupe key to the dispatch that holds it; creating it reserves the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DedupeEntry {
    /// The dispatch holding the key.
    pub(crate) dispatch_id: DispatchId,
    /// Its thread.
    pub(crate) thread_id: ThreadId,
    /// When the entry was written, unix millis.
    pub(crate) created_at_ms: u64,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The key of a thread's record.
pub(crate) fn thread_key(thread_id: &ThreadId) -> String {
    format!("{THREAD_PREFIX}{}", b64(thread_id.as_str().as_bytes()))
}

/// The key of a dispatch's index entry.
pub(crate) fn dispatch_key(dispatch_id: &DispatchId) -> String {
    format!("{DISPATCH_PREFIX}{}", b64(dispatch_id.as_str().as_bytes()))
}

/// The key of a dedupe entry (a digest: dedupe keys have no length limit).
pub(crate) fn dedupe_key(key: &str) -> String {
    format!("{DEDUPE_PREFIX}{}", b64(&Sha256::digest(key.as_bytes())))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn is_kv_key(key: &str) -> bool {
        key.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-/_=.".contains(&b))
    }

    #[test]
    fn any_id_makes_a_valid_key() {
        let thread = ThreadId::new("a thread/with.dots and ünïcode>*").unwrap();
        assert!(is_kv_key(&thread_key(&thread)));
        let dispatch = DispatchId::new("d.*>").unwrap();
        assert!(is_kv_key(&dispatch_key(&dispatch)));
        assert!(is_kv_key(&dedupe_key(&"k".repeat(10_000))));
        assert_eq!(dedupe_key("k").len(), DEDUPE_PREFIX.len() + 43);
    }

    #[test]
    fn insert_keeps_sequence_order() {
        let thread = ThreadId::new("t").unwrap();
        let run = awaken_actors::ids::RunId::new("r").unwrap();
        let mut mailbox = ThreadMailbox::default();
        for seq in [5, 2, 9, 7] {
            mailbox.insert(seq, RunDispatch::new(thread.clone(), run.clone(), 1, 0));
        }
        let seqs: Vec<u64> = mailbox.dispatches.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [2, 5, 7, 9]);
    }
}
