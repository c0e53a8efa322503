//! The owner's bounded memory of each run's recent events, for reconnects.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use awaken_actors::RunId;
use awaken_actors::contract::{AgentEvent, StreamEvent};
use awaken_actors::hashing::FastDashMap;

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
}

/// Per-run ring buffers of the newest events, kept while a run is active and for
/// the `retained_runs` most recently ended runs.
///
/// Memory is bounded by `capacity` events per active run plus `capacity ×
/// retained_runs` for ended ones. A run that ends (finishes or waits) joins the
/// retained queue; one that resumes leaves it.
pub struct ReplayBuffers {
    capacity: usize,
    retained_runs: usize,
    runs: FastDashMap<RunId, RunBuffer>,
    ended: Mutex<VecDeque<(RunId, u64)>>,
    generation: AtomicU64,
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
        /// Whether the run's latest activation has ended (its `RunFinish` is the
        /// newest event buffered).
        ended: bool,
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
                    .or_insert_with(|| RunBuffer {
                        events: VecDeque::with_capacity(self.capacity.min(FIRST_ROOM)),
                        ended: None,
                    }),
            };
            if buffer.events.len() == self.capacity {
                buffer.events.pop_front();
            }
            buffer.events.push_back(event);
            buffer.ended = generation;
        }
        if let Some(generation) = generation {
            let mut ended = self.ended_queue();
            ended.push_back((run_id.clone(), generation));
            while ended.len() > self.retained_runs {
                let Some((run_id, generation)) = ended.pop_front() else {
                    break;
                };
                // A run that resumed since is active again and stays.
                self.runs
                    .remove_if(&run_id, |_, buffer| buffer.ended == Some(generation));
            }
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
        let complete = buffer
            .events
            .front()
            .is_some_and(|first| first.seq <= needed_from);
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
        Read::Buffered {
            taken,
            missed,
            ended: buffer.ended.is_some(),
        }
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
}
