//! The owner's bounded memory of each run's recent events, for reconnects.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use awaken_actors::RunId;
use awaken_actors::contract::{AgentEvent, StreamEvent};
use awaken_actors::hashing::FastDashMap;
use awaken_actors::memory::{CacheMeter, Footprint, NodeMemory, Share};
use dashmap::mapref::entry::Entry;

/// Default events kept per run (the book's `replay_buffer_capacity`).
pub const DEFAULT_REPLAY_CAPACITY: usize = 1024;
/// Default number of ended runs whose buffers are kept.
pub const DEFAULT_RETAINED_RUNS: usize = 1024;

/// Events a new run's buffer has room for before it grows: a short run (a tool call
/// and an answer) fits without reallocating.
const FIRST_ROOM: usize = 32;

struct RunBuffer {
    /// Shared with the live channel of a local follower: one copy per event.
    events: VecDeque<Arc<StreamEvent>>,
    /// Set while the run's last activation has ended: the generation of that end.
    ended: Option<u64>,
    /// Local followers reading this buffer; while there are any it is not dropped.
    pins: usize,
    /// It left the retained queue while pinned: dropped when the last pin goes.
    outlived: bool,
    /// What `events` hold (estimated).
    bytes: u64,
}

impl RunBuffer {
    fn new(capacity: usize) -> Self {
        Self {
            events: VecDeque::with_capacity(capacity.min(FIRST_ROOM)),
            ended: None,
            pins: 0,
            outlived: false,
            bytes: 0,
        }
    }

    /// What the ended-runs share counts for it: its bytes once its run ended.
    fn counted(&self) -> u64 {
        if self.ended.is_some() { self.bytes } else { 0 }
    }
}

/// What one buffered event is counted for.
fn event_bytes(event: &StreamEvent) -> u64 {
    (std::mem::size_of::<Arc<StreamEvent>>() + event.heap_bytes()) as u64
}

/// Per-run ring buffers of the newest events, kept while a run is active and for
/// the `retained_runs` most recently ended runs.
///
/// Memory is bounded by `capacity` events per active run, plus for ended runs
/// the `retained_runs` most recent or what the node's ended-runs share holds
/// (decision 0089), whichever is less, plus one buffer per run a local follower
/// reads (pinned: a follower never misses events because other runs ended
/// first). A run that ends (finishes or waits) joins the retained queue; one that
/// resumes leaves it.
pub struct ReplayBuffers {
    capacity: usize,
    retained_runs: usize,
    runs: FastDashMap<RunId, RunBuffer>,
    ended: Mutex<VecDeque<(RunId, u64)>>,
    generation: AtomicU64,
    memory: Arc<NodeMemory>,
}

impl std::fmt::Debug for ReplayBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayBuffers")
            .field("capacity", &self.capacity)
            .field("retained_runs", &self.retained_runs)
            .field("runs", &self.runs.len())
            .finish()
    }
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// The buffered events after the requested `seq`, in order.
    pub events: Vec<Arc<StreamEvent>>,
    /// Whether these are all the events after the requested `seq` (false when the
    /// run is unknown here or its oldest events were already dropped).
    pub complete: bool,
}

/// What [`ReplayBuffers::read_after`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// The run has a buffer here; `taken` events were appended. `missed` is set
    /// when the buffer had already dropped events right after the requested `seq`.
    Buffered {
        /// Events appended.
        taken: usize,
        /// Whether events between the requested `seq` and the first taken are gone.
        missed: bool,
    },
    /// No buffer: the run has published nothing here yet, or it ended and its
    /// buffer was dropped.
    NoBuffer,
}

impl ReplayBuffers {
    /// Buffers of `capacity` events (at least one) per run, keeping `retained_runs`
    /// ended runs.
    pub fn new(capacity: usize, retained_runs: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            retained_runs,
            runs: FastDashMap::default(),
            ended: Mutex::new(VecDeque::new()),
            generation: AtomicU64::new(0),
            memory: Arc::default(),
        }
    }

    /// These buffers, their ended runs' events counted against `memory`'s
    /// ended-runs share and given back past it, oldest first.
    #[must_use]
    pub fn within(mut self, memory: Arc<NodeMemory>) -> Self {
        self.memory = memory;
        self
    }

    fn meter(&self) -> &CacheMeter {
        self.memory.meter(Share::EndedRuns)
    }

    /// Counts the change of `buffer`'s ended bytes from `before`.
    fn recount(&self, before: u64, buffer: &RunBuffer) {
        let after = buffer.counted();
        if after >= before {
            self.meter().add(after - before);
        } else {
            self.meter().sub(before - after);
        }
    }

    fn ended_queue(&self) -> MutexGuard<'_, VecDeque<(RunId, u64)>> {
        // Critical sections never panic midway; a poisoned lock holds consistent data.
        self.ended
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records one event of `run_id` (a copy others may share).
    pub fn push(&self, run_id: &RunId, event: Arc<StreamEvent>) {
        let ends = matches!(event.event, AgentEvent::RunFinish { .. });
        let generation = ends.then(|| self.generation.fetch_add(1, Ordering::Relaxed));
        {
            // Most pushes find the run's buffer: look it up without cloning the id.
            let mut buffer = match self.runs.get_mut(run_id) {
                Some(buffer) => buffer,
                None => self
                    .runs
                    .entry(run_id.clone())
                    .or_insert_with(|| RunBuffer::new(self.capacity)),
            };
            let before = buffer.counted();
            if buffer.events.len() == self.capacity
                && let Some(dropped) = buffer.events.pop_front()
            {
                buffer.bytes = buffer.bytes.saturating_sub(event_bytes(&dropped));
            }
            buffer.bytes += event_bytes(&event);
            buffer.events.push_back(event);
            buffer.ended = generation;
            buffer.outlived = false;
            self.recount(before, &buffer);
        }
        if let Some(generation) = generation {
            self.retain(run_id, generation);
        }
    }

    /// Queues an ended run for retention and drops the buffers beyond it.
    fn retain(&self, run_id: &RunId, generation: u64) {
        let mut ended = self.ended_queue();
        ended.push_back((run_id.clone(), generation));
        let mut evicted = 0;
        while ended.len() > self.retained_runs || self.meter().over() {
            let for_memory = ended.len() <= self.retained_runs;
            let Some((run_id, generation)) = ended.pop_front() else {
                break;
            };
            let Entry::Occupied(mut buffer) = self.runs.entry(run_id) else {
                continue;
            };
            // A run that resumed since is active again and stays; a pinned one
            // stays until its last follower leaves.
            if buffer.get().ended != Some(generation) {
                continue;
            }
            if buffer.get().pins == 0 {
                self.meter().sub(buffer.remove().counted());
                evicted += u64::from(for_memory);
            } else {
                buffer.get_mut().outlived = true;
            }
        }
        if evicted > 0 {
            self.meter().evicted(evicted);
        }
    }

    /// Keeps `run_id`'s buffer (made now if the run has published nothing yet)
    /// until [`unpin`](Self::unpin): a follower that opened before the run
    /// started reads it from its first event however many runs end meanwhile.
    pub fn pin(&self, run_id: &RunId) {
        self.runs
            .entry(run_id.clone())
            .or_insert_with(|| RunBuffer::new(self.capacity))
            .pins += 1;
    }

    /// Releases a [`pin`](Self::pin). A buffer left with no pin and no events
    /// (its run never published) is dropped; one that outlived its retention is
    /// retained once more as if its run had just ended.
    pub fn unpin(&self, run_id: &RunId) {
        let requeue = {
            let Entry::Occupied(mut buffer) = self.runs.entry(run_id.clone()) else {
                return;
            };
            let entry = buffer.get_mut();
            entry.pins = entry.pins.saturating_sub(1);
            if entry.pins > 0 {
                return;
            }
            if entry.events.is_empty() {
                self.meter().sub(buffer.remove().counted());
                return;
            }
            if !entry.outlived {
                return;
            }
            entry.outlived = false;
            entry.ended
        };
        if let Some(generation) = requeue {
            self.retain(run_id, generation);
        }
    }

    /// The buffered events of `run_id` with a `seq` above `after_seq` (all when
    /// `None`).
    pub fn replay(&self, run_id: &RunId, after_seq: Option<u64>) -> Replay {
        let Some(buffer) = self.runs.get(run_id) else {
            return Replay {
                events: Vec::new(),
                complete: false,
            };
        };
        let needed_from = after_seq.map_or(0, |seq| seq.saturating_add(1));
        // An empty buffer is a followed run that has published nothing yet: every
        // event is still to come.
        let complete = buffer
            .events
            .front()
            .is_none_or(|first| first.seq <= needed_from);
        let events = buffer
            .events
            .iter()
            .filter(|event| after_seq.is_none_or(|after| event.seq > after))
            .cloned()
            .collect();
        Replay { events, complete }
    }

    /// Appends to `into` the first `max` buffered events of `run_id` with a `seq`
    /// above `after_seq` (all when `None`): how a follower on this node reads the
    /// run live, straight from the one copy the buffer holds.
    pub fn read_after(
        &self,
        run_id: &RunId,
        after_seq: Option<u64>,
        max: usize,
        into: &mut VecDeque<Arc<StreamEvent>>,
    ) -> Read {
        let Some(buffer) = self.runs.get(run_id) else {
            return Read::NoBuffer;
        };
        let events = &buffer.events;
        let from = after_seq.map_or(0, |after| events.partition_point(|e| e.seq <= after));
        let taken = events.len().saturating_sub(from).min(max);
        let needed_from = after_seq.map_or(0, |seq| seq.saturating_add(1));
        let missed = taken > 0 && events[from].seq > needed_from;
        into.extend(events.range(from..from + taken).cloned());
        Read::Buffered { taken, missed }
    }

    /// Runs with a buffer now (active or retained).
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether no run has a buffer.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::TerminationReason;

    use super::*;

    fn event(seq: u64, finish: bool) -> Arc<StreamEvent> {
        let event = if finish {
            AgentEvent::RunFinish {
                thread_id: awaken_actors::ThreadId::new("t").unwrap(),
                run_id: run("r"),
                result: None,
                termination: TerminationReason::NaturalEnd,
            }
        } else {
            AgentEvent::TextDelta {
                delta: format!("d{seq}"),
            }
        };
        Arc::new(StreamEvent::new(seq, "2026-01-01T00:00:00Z", event))
    }

    fn run(id: &str) -> RunId {
        RunId::new(id).unwrap()
    }

    #[test]
    fn replays_after_a_seq_and_knows_when_it_reaches_back() {
        let buffers = ReplayBuffers::new(3, 8);
        let r = run("r1");
        for seq in 0..3 {
            buffers.push(&r, event(seq, false));
        }
        let all = buffers.replay(&r, None);
        assert!(all.complete);
        assert_eq!(all.events.len(), 3);
        let tail = buffers.replay(&r, Some(0));
        assert_eq!(
            tail.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2]
        );
        assert!(tail.complete);

        buffers.push(&r, event(3, false));
        let all = buffers.replay(&r, None);
        assert!(!all.complete, "seq 0 was dropped");
        assert_eq!(
            all.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert!(buffers.replay(&r, Some(0)).complete);
        assert!(buffers.replay(&r, Some(3)).events.is_empty());
    }

    #[test]
    fn unknown_runs_replay_nothing_and_incomplete() {
        let buffers = ReplayBuffers::new(4, 4);
        let replay = buffers.replay(&run("nobody"), Some(2));
        assert!(replay.events.is_empty());
        assert!(!replay.complete);
    }

    #[test]
    fn only_the_newest_ended_runs_are_retained() {
        let buffers = ReplayBuffers::new(4, 2);
        let active = run("active");
        buffers.push(&active, event(0, false));
        for name in ["a", "b", "c"] {
            buffers.push(&run(name), event(0, false));
            buffers.push(&run(name), event(1, true));
        }
        assert!(buffers.replay(&run("a"), None).events.is_empty());
        assert_eq!(buffers.replay(&run("b"), None).events.len(), 2);
        assert_eq!(buffers.replay(&run("c"), None).events.len(), 2);
        assert_eq!(buffers.replay(&active, None).events.len(), 1);
        assert_eq!(buffers.len(), 3);
    }

    #[test]
    fn a_resumed_run_is_not_evicted_by_its_earlier_end() {
        let buffers = ReplayBuffers::new(8, 1);
        let waiting = run("waiting");
        buffers.push(&waiting, event(0, true));
        buffers.push(&waiting, event(1, false));
        buffers.push(&run("other"), event(0, true));
        assert_eq!(buffers.replay(&waiting, None).events.len(), 2);
    }

    fn delta(seq: u64, bytes: usize) -> Arc<StreamEvent> {
        Arc::new(StreamEvent::new(
            seq,
            "2026-01-01T00:00:00Z",
            AgentEvent::TextDelta {
                delta: "x".repeat(bytes),
            },
        ))
    }

    #[test]
    fn ended_runs_past_their_memory_share_go_oldest_first_and_active_ones_stay() {
        use awaken_actors::memory::MemoryBudget;

        let memory = Arc::new(NodeMemory::new(
            MemoryBudget::new(MemoryBudget::MINIMUM).unwrap(),
        ));
        let meter = memory.meter(Share::EndedRuns);
        let buffers = ReplayBuffers::new(16, 1024).within(Arc::clone(&memory));
        let active = run("active");
        for seq in 0..8 {
            buffers.push(&active, delta(seq, 100_000));
        }
        assert_eq!(
            meter.bytes(),
            0,
            "an active run's buffer is not the share's"
        );
        let runs = 40;
        for n in 0..runs {
            let id = run(&format!("r{n}"));
            for seq in 0..4 {
                buffers.push(&id, delta(seq, 100_000));
            }
            buffers.push(&id, event(4, true));
            assert!(
                meter.bytes() <= meter.limit(),
                "{} > {}",
                meter.bytes(),
                meter.limit()
            );
        }
        let kept = buffers.len() - 1;
        assert!(kept > 0 && kept < runs, "{kept} of {runs} kept");
        assert_eq!(meter.evictions(), (runs - kept) as u64);
        assert!(buffers.replay(&run("r0"), None).events.is_empty());
        let newest = run(&format!("r{}", runs - 1));
        assert_eq!(buffers.replay(&newest, None).events.len(), 5);
        assert_eq!(buffers.replay(&active, None).events.len(), 8);

        // Resuming takes a run out of the share; ending again puts it back.
        let held = meter.bytes();
        buffers.push(&newest, delta(5, 10));
        assert!(
            meter.bytes() < held - 400_000,
            "{} of {held}",
            meter.bytes()
        );
        buffers.push(&newest, event(6, true));
        assert!(meter.bytes() > held);
    }
}

#[cfg(test)]
mod pinning {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::TerminationReason;

    use super::*;

    fn finish(run_id: &RunId, seq: u64) -> Arc<StreamEvent> {
        Arc::new(StreamEvent::new(
            seq,
            "2026-01-01T00:00:00Z",
            AgentEvent::RunFinish {
                thread_id: awaken_actors::ThreadId::new("t").unwrap(),
                run_id: run_id.clone(),
                result: None,
                termination: TerminationReason::NaturalEnd,
            },
        ))
    }

    fn start(seq: u64) -> Arc<StreamEvent> {
        Arc::new(StreamEvent::new(
            seq,
            "2026-01-01T00:00:00Z",
            AgentEvent::TextDelta {
                delta: format!("d{seq}"),
            },
        ))
    }

    /// Ends `count` other runs of two events each.
    fn end_others(buffers: &ReplayBuffers, count: usize) {
        for _ in 0..count {
            let other = RunId::generate();
            buffers.push(&other, start(0));
            buffers.push(&other, finish(&other, 1));
        }
    }

    #[test]
    fn a_pinned_run_keeps_its_buffer_however_many_runs_end_after_it() {
        let buffers = ReplayBuffers::new(8, 2);
        let followed = RunId::generate();
        buffers.pin(&followed);
        buffers.push(&followed, start(0));
        buffers.push(&followed, finish(&followed, 1));
        end_others(&buffers, 10);
        let replay = buffers.replay(&followed, None);
        assert!(replay.complete);
        assert_eq!(
            replay.events.len(),
            2,
            "the follower still reads from seq 0"
        );
        assert_eq!(buffers.len(), 3, "besides it, only the two retained runs");

        // Its follower leaves: it is retained like a run that just ended, then
        // dropped as others end.
        buffers.unpin(&followed);
        assert_eq!(buffers.replay(&followed, None).events.len(), 2);
        end_others(&buffers, 2);
        assert!(buffers.replay(&followed, None).events.is_empty());
        assert_eq!(buffers.len(), 2);
    }

    #[test]
    fn a_pin_on_a_run_that_never_published_leaves_nothing_behind() {
        let buffers = ReplayBuffers::new(8, 2);
        let never = RunId::generate();
        buffers.pin(&never);
        buffers.pin(&never);
        buffers.unpin(&never);
        assert_eq!(buffers.len(), 1, "still pinned once");
        buffers.unpin(&never);
        assert!(buffers.is_empty());
    }
}
