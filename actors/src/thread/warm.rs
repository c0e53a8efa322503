//! `WarmCores`: the cores of idle threads a node keeps in memory, within the
//! warm-threads share of its memory budget.
//!
//! A warm core is a cache: the store holds everything in it, except the one
//! kind of core [`WarmThread::is_unwritten`] marks (a thread made for a run that
//! has not checkpointed yet), which is never evicted. Past the share the oldest
//! cores go first; a core taken back by a new actor and left again when it stops
//! is younger, so insertion order is least-recently-used order.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dashmap::mapref::entry::Entry;

use crate::hashing::FastDashMap;
use crate::ids::ThreadId;
use crate::memory::{CacheMeter, Footprint, NodeMemory, Share};

use super::core::{LatestRun, STATE_VALUE_BYTES, WarmThread};

/// A thread without an actor, still in memory.
struct Dormant {
    warm: WarmThread,
    since: Instant,
    /// This core's place in the eviction order.
    generation: u64,
    /// What the meter counts for it.
    bytes: u64,
}

/// The eviction order: `(thread, generation)` oldest first; an entry whose
/// generation no longer matches the core's was left behind by a removal and is
/// skipped.
#[derive(Default)]
struct Order {
    queue: VecDeque<(ThreadId, u64)>,
    /// Entries the last compaction kept: the next one is due at twice as many,
    /// so compactions cost O(1) per insert and never count the cores.
    kept: usize,
}

/// The warm cores of a node and their eviction order.
pub(super) struct WarmCores {
    cores: FastDashMap<ThreadId, Dormant>,
    order: Mutex<Order>,
    generations: AtomicU64,
    memory: Arc<NodeMemory>,
}

impl WarmCores {
    pub(super) fn new(memory: Arc<NodeMemory>) -> Self {
        Self {
            cores: FastDashMap::default(),
            order: Mutex::new(Order::default()),
            generations: AtomicU64::new(0),
            memory,
        }
    }

    fn meter(&self) -> &CacheMeter {
        self.memory.meter(Share::WarmThreads)
    }

    /// A leaf lock: nothing else is taken while it is held.
    fn order(&self) -> MutexGuard<'_, Order> {
        self.order
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues a core for eviction; returns its generation. Entries left behind
    /// by removals are compacted away once the queue doubled since the last
    /// compaction, so it stays within twice the cores it held at most, however
    /// threads come and go. The compaction only tries the cores' locks (the
    /// caller may hold one): an entry whose core is busy stays.
    fn enqueue(&self, thread_id: &ThreadId) -> u64 {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let mut order = self.order();
        order.queue.push_back((thread_id.clone(), generation));
        if order.queue.len() > 2 * order.kept + 64 {
            order.queue.retain(
                |(thread_id, generation)| match self.cores.try_get(thread_id) {
                    dashmap::try_result::TryResult::Present(dormant) => {
                        dormant.generation == *generation
                    }
                    dashmap::try_result::TryResult::Absent => false,
                    dashmap::try_result::TryResult::Locked => true,
                },
            );
            order.kept = order.queue.len();
        }
        generation
    }

    fn dormant(&self, thread_id: &ThreadId, warm: WarmThread) -> Dormant {
        let bytes = footprint(&warm) as u64;
        self.meter().add(bytes);
        Dormant {
            generation: self.enqueue(thread_id),
            since: Instant::now(),
            warm,
            bytes,
        }
    }

    fn forget(&self, dormant: &Dormant) {
        self.meter().sub(dormant.bytes);
    }

    /// Keeps `warm` for `thread_id`. The caller holds the thread's slot, so no
    /// actor starts meanwhile, and calls [`Self::evict_over_share`] after.
    pub(super) fn insert(&self, thread_id: &ThreadId, warm: WarmThread) {
        let dormant = self.dormant(thread_id, warm);
        if let Some(replaced) = self.cores.insert(thread_id.clone(), dormant) {
            self.forget(&replaced);
        }
    }

    /// Keeps the core `make` builds unless the thread has one; whether it kept
    /// it. The caller calls [`Self::evict_over_share`] after.
    pub(super) fn insert_if_absent(
        &self,
        thread_id: &ThreadId,
        make: impl FnOnce() -> WarmThread,
    ) -> bool {
        if self.cores.contains_key(thread_id) {
            return false;
        }
        // Made outside the entry's lock: queueing it reads the map's length.
        let dormant = self.dormant(thread_id, make());
        match self.cores.entry(thread_id.clone()) {
            Entry::Occupied(_) => {
                self.forget(&dormant);
                false
            }
            Entry::Vacant(vacant) => {
                vacant.insert(dormant);
                true
            }
        }
    }

    /// Takes the thread's core away, for its new actor.
    pub(super) fn remove(&self, thread_id: &ThreadId) -> Option<WarmThread> {
        let (_, dormant) = self.cores.remove(thread_id)?;
        self.forget(&dormant);
        Some(dormant.warm)
    }

    /// Takes the thread's core away if it is unwritten.
    pub(super) fn remove_unwritten(&self, thread_id: &ThreadId) -> Option<WarmThread> {
        let (_, dormant) = self
            .cores
            .remove_if(thread_id, |_, dormant| dormant.warm.is_unwritten())?;
        self.forget(&dormant);
        Some(dormant.warm)
    }

    /// Drops the cores `drop` picks; how many.
    pub(super) fn drop_where(
        &self,
        drop: impl Fn(&ThreadId, &WarmThread, Instant) -> bool,
    ) -> usize {
        let mut dropped = 0;
        self.cores.retain(|thread_id, dormant| {
            let going = drop(thread_id, &dormant.warm, dormant.since);
            if going {
                self.forget(dormant);
                dropped += 1;
            }
            !going
        });
        dropped
    }

    /// Drops cores idle for `keep` or longer, except unwritten ones; how many.
    pub(super) fn sweep(&self, keep: Duration) -> usize {
        let now = Instant::now();
        self.drop_where(|_, warm, since| {
            !warm.is_unwritten() && now.saturating_duration_since(since) >= keep
        })
    }

    /// Drops every core.
    pub(super) fn clear(&self) {
        self.drop_where(|_, _, _| true);
        *self.order() = Order::default();
    }

    pub(super) fn contains(&self, thread_id: &ThreadId) -> bool {
        self.cores.contains_key(thread_id)
    }

    pub(super) fn len(&self) -> usize {
        self.cores.len()
    }

    /// Evicts the oldest written cores until the share holds its limit again
    /// (or only unwritten cores are left to give back); how many.
    pub(super) fn evict_over_share(&self) -> u64 {
        let meter = self.meter();
        let mut evicted = 0;
        while meter.over() {
            let Some((thread_id, generation)) = self.order().queue.pop_front() else {
                break;
            };
            let removed = self.cores.remove_if(&thread_id, |_, dormant| {
                dormant.generation == generation && !dormant.warm.is_unwritten()
            });
            if let Some((_, dormant)) = removed {
                self.forget(&dormant);
                evicted += 1;
            }
        }
        if evicted > 0 {
            meter.evicted(evicted);
        }
        evicted
    }
}

/// The bytes a warm core is counted for.
fn footprint(warm: &WarmThread) -> usize {
    let core = &warm.core;
    let run = match &warm.latest_run {
        LatestRun::Unfinished(record) => {
            std::mem::size_of_val(&**record)
                + record
                    .state
                    .as_ref()
                    .map_or(0, |state| state.extensions.len() * STATE_VALUE_BYTES)
        }
        LatestRun::None | LatestRun::Finished(_) => 0,
    };
    let unwritten = core.unwritten.as_ref().map_or(0, |metadata| {
        std::mem::size_of_val(&**metadata)
            + metadata.title.heap_bytes()
            + metadata
                .custom
                .iter()
                .map(|(key, value)| key.heap_bytes() + value.heap_bytes())
                .sum::<usize>()
    });
    core.heap_estimate() + run + unwritten
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Message, Thread};
    use crate::memory::MemoryBudget;

    /// A written core holding one message of `size` bytes.
    fn core(thread_id: &ThreadId, size: usize) -> WarmThread {
        let mut warm = WarmThread::empty(thread_id);
        warm.core.push_message(Message::user("x".repeat(size)));
        warm
    }

    fn id(n: usize) -> ThreadId {
        ThreadId::new(format!("t-{n}")).unwrap()
    }

    fn cores() -> (WarmCores, Arc<NodeMemory>) {
        let budget = MemoryBudget::new(MemoryBudget::MINIMUM).unwrap();
        let memory = Arc::new(NodeMemory::new(budget));
        (WarmCores::new(Arc::clone(&memory)), memory)
    }

    /// Cores of this size fill the minimum budget's share after about 48.
    const BIG: usize = 200_000;

    #[test]
    fn past_the_share_the_oldest_cores_go_first() {
        let (warm, memory) = cores();
        let meter = memory.meter(Share::WarmThreads);
        for n in 0..100 {
            warm.insert(&id(n), core(&id(n), BIG));
            warm.evict_over_share();
        }
        assert!(meter.bytes() <= meter.limit());
        let kept = warm.len();
        let fit = usize::try_from(meter.limit()).unwrap() / BIG;
        assert!((fit - 2..=fit).contains(&kept), "{kept} of {fit}");
        assert_eq!(meter.evictions(), (100 - kept) as u64);
        assert!((0..100 - kept).all(|n| !warm.contains(&id(n))));
        assert!((100 - kept..100).all(|n| warm.contains(&id(n))));
    }

    #[test]
    fn a_core_taken_and_left_again_is_young_again() {
        let (warm, _memory) = cores();
        for n in 0..40 {
            warm.insert(&id(n), core(&id(n), BIG));
        }
        let oldest = warm.remove(&id(0)).unwrap();
        warm.insert(&id(0), oldest);
        for n in 40..60 {
            warm.insert(&id(n), core(&id(n), BIG));
            warm.evict_over_share();
        }
        assert!(warm.contains(&id(0)), "used last, evicted last");
        assert!(!warm.contains(&id(1)));
    }

    #[test]
    fn unwritten_cores_are_never_evicted() {
        let (warm, memory) = cores();
        let thread = Thread::with_id(id(1000));
        assert!(warm.insert_if_absent(&thread.id, || WarmThread::unwritten(&thread)));
        for n in 0..100 {
            warm.insert(&id(n), core(&id(n), BIG));
            warm.evict_over_share();
        }
        assert!(warm.contains(&thread.id), "only memory holds it");
        assert!(memory.meter(Share::WarmThreads).evictions() > 0);
    }

    #[test]
    fn the_meter_follows_every_way_out() {
        let (warm, memory) = cores();
        let meter = memory.meter(Share::WarmThreads);
        for n in 0..10 {
            warm.insert(&id(n), core(&id(n), 1000));
        }
        assert!(meter.bytes() > 10_000);
        warm.remove(&id(0)).unwrap();
        warm.drop_where(|thread_id, _, _| thread_id == &id(1));
        assert_eq!(warm.sweep(Duration::ZERO), 8);
        assert_eq!((warm.len(), meter.bytes()), (0, 0));
        warm.insert(&id(0), core(&id(0), 1000));
        warm.clear();
        assert_eq!(meter.bytes(), 0);
    }

    #[test]
    fn the_order_stays_within_twice_the_cores() {
        let (warm, _memory) = cores();
        warm.insert(&id(0), core(&id(0), 10));
        for _ in 0..10_000 {
            let again = warm.remove(&id(0)).unwrap();
            warm.insert(&id(0), again);
        }
        assert!(warm.order().queue.len() <= 2 * warm.len() + 65);
    }
}
