//! Admission: the memory that cannot be given back — active runs and the input
//! queued for runs not started — charged to the admitted share, and the checks
//! that refuse new work past it (decision 0089).
//!
//! Two checks, because the two kinds free memory differently. Queued input
//! leaves only when its run is claimed and ends, so a node must keep claiming
//! while queued input fills the share, or the queue never drains: the claim
//! check looks at active runs alone. New work adds to both, so the submit check
//! looks at the whole share.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{NodeMemory, Share, message_bytes};
use crate::contract::Message;

/// What an active run costs besides its thread's messages and state: its actor,
/// run core, emitter, tool-call map, its event buffer and the stream of the
/// client following it (measured ~60 KB per active run over HTTP, core
/// included: docs/benchmarks.md "Memory per item").
pub const RUN_BYTES: u64 = 56 * 1024;

/// What a charge holds, which decides the checks it weighs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A thread with a live actor: its core and its run.
    Active,
    /// Input of runs accepted and not started, held in memory by the inbox or
    /// the mailbox replica.
    Queued,
}

/// Bytes counted against the admitted share for as long as the charge lives:
/// every way its holder goes (stop, panic, drop) gives them back.
pub struct Charge {
    memory: Arc<NodeMemory>,
    held: Held,
    bytes: u64,
}

impl Charge {
    /// The bytes charged now.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Charges `bytes` instead of what was charged: the holder grew or shrank.
    pub fn set(&mut self, bytes: u64) {
        if bytes >= self.bytes {
            self.memory.add_admitted(self.held, bytes - self.bytes);
        } else {
            self.memory.sub_admitted(self.held, self.bytes - bytes);
        }
        self.bytes = bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.memory.sub_admitted(self.held, self.bytes);
    }
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Charge")
            .field("held", &self.held)
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// Why new work was refused: the admitted share is full.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this node's memory budget is full: active runs and queued input hold {held} of the {limit} bytes admitted work may use; try again shortly"
)]
pub struct Refused {
    /// What active runs and queued input hold.
    pub held: u64,
    /// The admitted share.
    pub limit: u64,
}

/// What a queued run holds besides its messages: the request's ids, lineage and
/// options, and its dispatch in the mailbox (measured 1,458 bytes per queued
/// W input with its one message, `awaken bench local --scenario mailbox-memory`).
const REQUEST_BYTES: u64 = 1152;

/// What a run's input of `messages` holds while the run is queued.
pub fn input_bytes(messages: &[Message]) -> u64 {
    REQUEST_BYTES + message_bytes(messages) as u64
}

/// What admitting a run with the input `messages` may add: its input, then
/// its run.
pub fn run_bytes(messages: &[Message]) -> u64 {
    RUN_BYTES + input_bytes(messages)
}

/// The active-run part of the admitted share.
#[derive(Debug, Default)]
pub(super) struct ActiveBytes(AtomicU64);

impl ActiveBytes {
    pub(super) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    pub(super) fn add(&self, bytes: u64) {
        self.0.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Subtracts `bytes`; returns what was held before.
    pub(super) fn sub(&self, bytes: u64) -> u64 {
        match self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(bytes))
            }) {
            Ok(before) | Err(before) => before,
        }
    }
}

impl NodeMemory {
    /// Charges `bytes` held as `held` to the admitted share until the charge
    /// drops.
    pub fn charge(self: &Arc<Self>, held: Held, bytes: u64) -> Charge {
        self.add_admitted(held, bytes);
        Charge {
            memory: Arc::clone(self),
            held,
            bytes,
        }
    }

    fn add_admitted(&self, held: Held, bytes: u64) {
        self.meter(Share::Admitted).add(bytes);
        if held == Held::Active {
            self.active().add(bytes);
        }
    }

    fn sub_admitted(&self, held: Held, bytes: u64) {
        self.meter(Share::Admitted).sub(bytes);
        if held == Held::Active {
            let before = self.active().sub(bytes);
            let claimable = self.claim_limit();
            if before > claimable && before.saturating_sub(bytes) <= claimable {
                self.room().notify_waiters();
            }
        }
    }

    /// Active bytes at or below which one more run may be claimed.
    fn claim_limit(&self) -> u64 {
        self.meter(Share::Admitted)
            .limit()
            .saturating_sub(RUN_BYTES)
    }

    /// Whether new work of `bytes` fits the admitted share; refused past it.
    pub fn admit(&self, bytes: u64) -> Result<(), Refused> {
        let meter = self.meter(Share::Admitted);
        if meter.fits(bytes) {
            return Ok(());
        }
        Err(Refused {
            held: meter.bytes(),
            limit: meter.limit(),
        })
    }

    /// Whether the node takes new work at all (readiness): a run with a short
    /// input still fits.
    pub fn admitting(&self) -> bool {
        self.meter(Share::Admitted).fits(RUN_BYTES)
    }

    /// Whether the worker may claim queued work: active runs leave room for one
    /// more. Queued input does not count (only claiming drains it).
    pub fn may_claim(&self) -> bool {
        self.active().get() <= self.claim_limit()
    }

    /// Resolves once claims may resume ([`Self::may_claim`]).
    pub async fn claimable(&self) {
        loop {
            let room = self.room().notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.may_claim() {
                return;
            }
            room.await;
        }
    }

    /// What active runs hold, of the admitted share.
    pub fn active_bytes(&self) -> u64 {
        self.active().get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryBudget;

    fn memory() -> Arc<NodeMemory> {
        Arc::new(NodeMemory::new(
            MemoryBudget::new(MemoryBudget::MINIMUM).unwrap(),
        ))
    }

    #[test]
    fn a_charge_gives_back_what_it_holds_however_it_changed() {
        let memory = memory();
        let meter = memory.meter(Share::Admitted);
        let mut active = memory.charge(Held::Active, 1_000);
        let queued = memory.charge(Held::Queued, 500);
        assert_eq!((meter.bytes(), memory.active_bytes()), (1_500, 1_000));
        active.set(4_000);
        assert_eq!((meter.bytes(), memory.active_bytes()), (4_500, 4_000));
        active.set(10);
        assert_eq!((meter.bytes(), memory.active_bytes()), (510, 10));
        drop(active);
        drop(queued);
        assert_eq!((meter.bytes(), memory.active_bytes()), (0, 0));
    }

    #[test]
    fn new_work_is_refused_past_the_share_and_admitted_again_below_it() {
        let memory = memory();
        let limit = memory.meter(Share::Admitted).limit();
        assert!(memory.admit(limit).is_ok());
        let held = memory.charge(Held::Queued, limit - RUN_BYTES / 2);
        let refused = memory.admit(RUN_BYTES).unwrap_err();
        assert_eq!(refused.limit, limit);
        assert_eq!(refused.held, limit - RUN_BYTES / 2);
        assert!(refused.to_string().contains("memory budget is full"));
        assert!(!memory.admitting());
        drop(held);
        assert!(memory.admit(RUN_BYTES).is_ok());
        assert!(memory.admitting());
    }

    #[test]
    fn queued_input_never_stops_claims_but_active_runs_do() {
        let memory = memory();
        let limit = memory.meter(Share::Admitted).limit();
        let queued = memory.charge(Held::Queued, limit * 2);
        assert!(memory.may_claim(), "claiming is how queued input drains");
        assert!(!memory.admitting());
        drop(queued);
        let active = memory.charge(Held::Active, limit);
        assert!(!memory.may_claim());
        drop(active);
        assert!(memory.may_claim());
    }

    #[tokio::test]
    async fn claims_resume_when_active_runs_give_memory_back() {
        let memory = memory();
        let limit = memory.meter(Share::Admitted).limit();
        let active = memory.charge(Held::Active, limit);
        let waiting = tokio::spawn({
            let memory = Arc::clone(&memory);
            async move { memory.claimable().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(active);
        waiting.await.unwrap();
    }
}
