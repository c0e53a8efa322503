//! `SettledMarks`: what a mailbox remembers of dispatches that settled — their id
//! and dedupe key as digests, their last status, when they settled — for as
//! long as duplicates must be refused (decision 0089).
//!
//! A settled dispatch leaves memory at once: the run it started has its own
//! record. What stays is 16 bytes of SHA-256 per id and per dedupe key, so a
//! repeated enqueue (a retry after a lost answer, a client resending its dedupe
//! key) is refused within the dedupe window, and an operation on a settled
//! dispatch is told its status rather than `NotFound`. Marks go after the window
//! or, oldest first, past a count, both only in `gc`: every replica of a
//! replicated mailbox applies the same `gc` and so remembers the same marks.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::contract::RunDispatchStatus;
use crate::hashing::FastHashMap;
use crate::ids::DispatchId;

/// What one mark costs in memory: its digest in the map and in the order, the
/// mark, and the map's slot overhead (measured 97–99 bytes per settled dispatch,
/// `awaken bench local --scenario mailbox-memory`, docs/benchmarks.md).
pub const MARK_BYTES: u64 = 100;

/// The first 16 bytes of SHA-256 of a dispatch id or a dedupe key: a collision
/// would need 2^64 marks, and no caller can choose one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MarkDigest(u64, u64);

impl MarkDigest {
    fn of(kind: &[u8], text: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(kind);
        hasher.update(text.as_bytes());
        let full = hasher.finalize();
        let half = |at: usize| {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(&full[at..at + 8]);
            u64::from_be_bytes(bytes)
        };
        Self(half(0), half(8))
    }

    /// The mark of a dispatch id.
    pub fn of_id(id: &DispatchId) -> Self {
        Self::of(b"id\0", id.as_str())
    }

    /// The mark of a dedupe key.
    pub fn of_key(key: &str) -> Self {
        Self::of(b"key\0", key)
    }
}

/// A settled dispatch's last status and when it settled (the caller's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// The mark's digest.
    pub digest: MarkDigest,
    /// The dispatch's status when it settled.
    pub status: RunDispatchStatus,
    /// When it settled, unix ms.
    pub at_ms: u64,
}

/// The marks of settled dispatches, oldest first.
#[derive(Debug, Default, Clone)]
pub struct SettledMarks {
    marks: FastHashMap<MarkDigest, Mark>,
    /// Settling order; a digest marked again (never, for ids) moves nothing.
    order: VecDeque<MarkDigest>,
}

impl SettledMarks {
    /// Remembers `mark`; one already there keeps its place.
    pub fn insert(&mut self, mark: Mark) {
        if self.marks.insert(mark.digest, mark).is_none() {
            self.order.push_back(mark.digest);
        }
    }

    /// The mark of `digest`, if remembered.
    pub fn get(&self, digest: &MarkDigest) -> Option<&Mark> {
        self.marks.get(digest)
    }

    /// How many marks are remembered.
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// Every mark, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Mark> {
        self.order
            .iter()
            .filter_map(|digest| self.marks.get(digest))
    }

    /// Whether [`Self::trim`] would forget anything.
    pub fn trims(&self, window_ms: u64, max: usize, now_ms: u64) -> bool {
        self.marks.len() > max
            || self
                .iter()
                .next()
                .is_some_and(|mark| mark.at_ms.saturating_add(window_ms) <= now_ms)
    }

    /// Forgets marks settled `window_ms` or longer before `now_ms`, then the
    /// oldest past `max` marks; how many went.
    pub fn trim(&mut self, window_ms: u64, max: usize, now_ms: u64) -> usize {
        let before = self.marks.len();
        while let Some(digest) = self.order.front() {
            let expired = self
                .marks
                .get(digest)
                .is_none_or(|mark| mark.at_ms.saturating_add(window_ms) <= now_ms);
            if !expired && self.marks.len() <= max {
                break;
            }
            if let Some(digest) = self.order.pop_front() {
                self.marks.remove(&digest);
            }
        }
        before - self.marks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(key: &str, at_ms: u64) -> Mark {
        Mark {
            digest: MarkDigest::of_key(key),
            status: RunDispatchStatus::Acked,
            at_ms,
        }
    }

    #[test]
    fn ids_and_keys_of_the_same_text_differ() {
        let id = DispatchId::new("same").unwrap();
        assert_ne!(MarkDigest::of_id(&id), MarkDigest::of_key("same"));
        assert_eq!(MarkDigest::of_key("same"), MarkDigest::of_key("same"));
    }

    #[test]
    fn trimming_takes_the_expired_then_the_oldest_past_the_count() {
        let mut marks = SettledMarks::default();
        for n in 0..10 {
            marks.insert(mark(&n.to_string(), 100 + n));
        }
        assert_eq!(marks.trim(1000, 100, 1099), 0);
        assert_eq!(marks.trim(1000, 100, 1102), 3, "settled at 100, 101, 102");
        assert_eq!(marks.trim(1000, 5, 1102), 2, "the oldest past five");
        let left: Vec<u64> = marks.iter().map(|m| m.at_ms).collect();
        assert_eq!(left, [105, 106, 107, 108, 109]);
    }
}
