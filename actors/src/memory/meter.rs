//! `CacheMeter` and `NodeMemory`: what each share holds now, and what it gave back.

use std::sync::atomic::{AtomicU64, Ordering};

use super::admission::ActiveBytes;
use super::{MemoryBudget, Share};

/// The bytes one share holds, against its limit.
///
/// Holders add what they keep and subtract what they drop, so the meter is the
/// sum of their estimates; evictions count entries given back to stay within
/// the limit (not entries dropped for other reasons).
#[derive(Debug)]
pub struct CacheMeter {
    share: Share,
    limit: u64,
    bytes: AtomicU64,
    evictions: AtomicU64,
}

impl CacheMeter {
    fn new(share: Share, limit: u64) -> Self {
        Self {
            share,
            limit,
            bytes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// The share this meter counts.
    pub fn share(&self) -> Share {
        self.share
    }

    /// The bytes the share may hold.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The bytes it holds now (an estimate).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Entries given back to stay within the limit, since the node started.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// Whether the share holds more than its limit.
    pub fn over(&self) -> bool {
        self.bytes() > self.limit
    }

    /// Whether `more` bytes still fit.
    pub fn fits(&self, more: u64) -> bool {
        self.bytes().saturating_add(more) <= self.limit
    }

    /// Counts `bytes` held now, for holders that know their total rather than
    /// their changes.
    pub fn set(&self, bytes: u64) {
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    /// Counts `bytes` kept.
    pub fn add(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts `bytes` dropped; never below zero, whatever the order of holders'
    /// updates.
    pub fn sub(&self, bytes: u64) {
        let _ = self
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(bytes))
            });
    }

    /// Counts `entries` evicted.
    pub fn evicted(&self, entries: u64) {
        self.evictions.fetch_add(entries, Ordering::Relaxed);
    }
}

/// A node's budget and the meters of its shares, shared by the caches that
/// keep within them, admission and `/metrics`.
#[derive(Debug)]
pub struct NodeMemory {
    budget: MemoryBudget,
    warm_threads: CacheMeter,
    ended_runs: CacheMeter,
    settled_dispatches: CacheMeter,
    admitted: CacheMeter,
    /// The part of `admitted` active runs hold (the rest is queued input).
    active: ActiveBytes,
    /// Woken when active runs give back enough for claims to resume.
    room: tokio::sync::Notify,
}

impl NodeMemory {
    /// Meters dividing `budget`.
    pub fn new(budget: MemoryBudget) -> Self {
        let meter = |share| CacheMeter::new(share, budget.share(share));
        Self {
            budget,
            warm_threads: meter(Share::WarmThreads),
            ended_runs: meter(Share::EndedRuns),
            settled_dispatches: meter(Share::SettledDispatches),
            admitted: meter(Share::Admitted),
            active: ActiveBytes::default(),
            room: tokio::sync::Notify::new(),
        }
    }

    /// The budget divided.
    pub fn budget(&self) -> MemoryBudget {
        self.budget
    }

    /// The meter of `share`.
    pub fn meter(&self, share: Share) -> &CacheMeter {
        match share {
            Share::WarmThreads => &self.warm_threads,
            Share::EndedRuns => &self.ended_runs,
            Share::SettledDispatches => &self.settled_dispatches,
            Share::Admitted => &self.admitted,
        }
    }

    pub(super) fn active(&self) -> &ActiveBytes {
        &self.active
    }

    pub(super) fn room(&self) -> &tokio::sync::Notify {
        &self.room
    }

    /// Every meter, in [`Share::ALL`] order.
    pub fn meters(&self) -> impl Iterator<Item = &CacheMeter> {
        Share::ALL.into_iter().map(|share| self.meter(share))
    }
}

impl Default for NodeMemory {
    fn default() -> Self {
        Self::new(MemoryBudget::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meter_never_goes_below_zero() {
        let memory = NodeMemory::default();
        let meter = memory.meter(Share::WarmThreads);
        meter.add(10);
        meter.sub(25);
        assert_eq!(meter.bytes(), 0);
        assert!(meter.fits(meter.limit()));
        assert!(!meter.fits(meter.limit() + 1));
    }
}
