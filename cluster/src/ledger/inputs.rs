//! `RunInputs`: the run inputs that travelled in the ledger with their
//! dispatches (decision 0078), kept beside the replica's mailbox state for as
//! long as their dispatch may still start a run.
//!
//! An input is kept while its dispatch is queued or claimed. Once the dispatch
//! settled (acked, cancelled, superseded, dead-lettered or collected) the input
//! survives one more sweep, so the node that settled it can still read it (a
//! dead-lettered run is ended with who asked for it); the sweep after drops it.
//! Sweeps run every [`SWEEP_EVERY`] applied batches: the cost is the inputs held,
//! not the commands applied.

use awaken_actors::contract::{RunDispatch, RunDispatchStatus};
use awaken_actors::hashing::FastHashMap;
use awaken_actors::ids::{DispatchId, RunId};
use awaken_actors::mailbox::MailboxState;
use awaken_actors::memory::input_bytes;
use awaken_actors::thread::RunRequest;

/// Batches applied between two sweeps.
pub(crate) const SWEEP_EVERY: u32 = 256;

/// One run's input and the dispatch it belongs to.
#[derive(Debug, Clone)]
struct Held {
    dispatch_id: DispatchId,
    input: Box<RunRequest>,
    /// What the input holds (the node's admitted memory counts it).
    bytes: u64,
    /// The last sweep found the dispatch settled: the next one drops the input.
    settled: bool,
}

/// The inputs carried by enqueues, by run.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunInputs {
    held: FastHashMap<RunId, Held>,
    /// What every held input holds, summed.
    bytes: u64,
    since_sweep: u32,
}

/// Whether `dispatch_id` may still start a run (so its input is still needed).
fn in_flight(state: &MailboxState, dispatch_id: &DispatchId) -> bool {
    state.get(dispatch_id).is_some_and(|dispatch| {
        matches!(
            dispatch.status,
            RunDispatchStatus::Queued | RunDispatchStatus::Claimed
        )
    })
}

impl RunInputs {
    /// Takes note of the accepted enqueue of `dispatch`: keeps the input it
    /// carried, or forgets an earlier dispatch's input for the same run when it
    /// carried none (that run's input is now in the KV inbox).
    pub(crate) fn accepted(&mut self, dispatch: &RunDispatch, input: Option<Box<RunRequest>>) {
        match input {
            Some(input) => {
                self.insert(dispatch.run_id.clone(), dispatch.dispatch_id.clone(), input)
            }
            None => self.forget(&dispatch.run_id),
        }
    }

    fn forget(&mut self, run_id: &RunId) {
        if let Some(gone) = self.held.remove(run_id) {
            self.bytes = self.bytes.saturating_sub(gone.bytes);
        }
    }

    /// Keeps `input` for the run of the accepted dispatch `dispatch_id`.
    pub(crate) fn insert(
        &mut self,
        run_id: RunId,
        dispatch_id: DispatchId,
        input: Box<RunRequest>,
    ) {
        let bytes = input_bytes(&input.messages);
        self.bytes += bytes;
        let replaced = self.held.insert(
            run_id,
            Held {
                dispatch_id,
                input,
                bytes,
                settled: false,
            },
        );
        if let Some(replaced) = replaced {
            self.bytes = self.bytes.saturating_sub(replaced.bytes);
        }
    }

    /// What the held inputs hold.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The input of `run_id`, while held.
    pub(crate) fn get(&self, run_id: &RunId) -> Option<&RunRequest> {
        self.held.get(run_id).map(|held| &*held.input)
    }

    /// How many inputs are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    /// Counts an applied batch; sweeps when enough have been applied.
    pub(crate) fn batch_applied(&mut self, state: &MailboxState) {
        self.since_sweep += 1;
        if self.since_sweep >= SWEEP_EVERY {
            self.sweep(state);
        }
    }

    /// Drops the inputs whose dispatch was settled at the previous sweep already
    /// and marks those settled since.
    pub(crate) fn sweep(&mut self, state: &MailboxState) {
        self.since_sweep = 0;
        let mut dropped = 0;
        self.held.retain(|_, held| {
            if in_flight(state, &held.dispatch_id) {
                held.settled = false;
                true
            } else {
                let keep = !held.settled;
                held.settled = true;
                if !keep {
                    dropped += held.bytes;
                }
                keep
            }
        });
        self.bytes = self.bytes.saturating_sub(dropped);
    }

    /// The inputs a snapshot of `state` needs: those of dispatches in flight.
    pub(crate) fn in_flight(&self, state: &MailboxState) -> Self {
        let held: FastHashMap<RunId, Held> = self
            .held
            .iter()
            .filter(|(_, held)| in_flight(state, &held.dispatch_id))
            .map(|(run_id, held)| (run_id.clone(), held.clone()))
            .collect();
        Self {
            bytes: held.values().map(|held| held.bytes).sum(),
            held,
            since_sweep: 0,
        }
    }

    /// The held input of the run of `dispatch_id`'s dispatch `run_id`, for a snapshot.
    pub(crate) fn of_dispatch(
        &self,
        run_id: &RunId,
        dispatch_id: &DispatchId,
    ) -> Option<&RunRequest> {
        self.held
            .get(run_id)
            .filter(|held| &held.dispatch_id == dispatch_id)
            .map(|held| &*held.input)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::ids::ThreadId;
    use awaken_actors::mailbox::MailboxConfig;

    use super::*;

    fn request(run: &str) -> Box<RunRequest> {
        Box::new(
            RunRequest::new(ThreadId::new("t").unwrap(), Vec::new())
                .with_run_id(RunId::new(run).unwrap()),
        )
    }

    fn queued(state: &mut MailboxState, run: &str) -> RunDispatch {
        let dispatch =
            RunDispatch::new(ThreadId::new("t").unwrap(), RunId::new(run).unwrap(), 0, 1);
        state
            .enqueue(&MailboxConfig::default(), dispatch, 1)
            .unwrap()
    }

    #[test]
    fn an_input_outlives_its_dispatch_by_one_sweep() {
        let mut state = MailboxState::default();
        let dispatch = queued(&mut state, "r1");
        let mut inputs = RunInputs::default();
        inputs.insert(
            dispatch.run_id.clone(),
            dispatch.dispatch_id.clone(),
            request("r1"),
        );

        inputs.sweep(&state);
        assert!(inputs.get(&dispatch.run_id).is_some(), "queued: kept");
        state.cancel(&dispatch.dispatch_id, 2).unwrap();
        inputs.sweep(&state);
        assert!(
            inputs.get(&dispatch.run_id).is_some(),
            "settled once: still readable"
        );
        inputs.sweep(&state);
        assert!(
            inputs.get(&dispatch.run_id).is_none(),
            "settled twice: dropped"
        );
    }

    #[test]
    fn a_later_enqueue_of_the_run_without_an_input_forgets_the_carried_one() {
        let mut state = MailboxState::default();
        let first = queued(&mut state, "r1");
        let mut inputs = RunInputs::default();
        inputs.accepted(&first, Some(request("r1")));
        assert!(inputs.get(&first.run_id).is_some());
        state.cancel(&first.dispatch_id, 2).unwrap();
        let mut again = RunDispatch::new(ThreadId::new("t").unwrap(), first.run_id.clone(), 0, 3);
        again.dispatch_id = DispatchId::new("again").unwrap();
        let again = state.enqueue(&MailboxConfig::default(), again, 3).unwrap();
        inputs.accepted(&again, None);
        assert!(
            inputs.get(&first.run_id).is_none(),
            "the run's input is where the new dispatch put it, not with the old one"
        );
    }

    #[test]
    fn sweeps_come_every_so_many_batches() {
        let state = MailboxState::default();
        let mut inputs = RunInputs::default();
        let run_id = RunId::new("gone").unwrap();
        inputs.insert(
            run_id.clone(),
            DispatchId::new("unknown").unwrap(),
            request("gone"),
        );
        for _ in 0..2 * SWEEP_EVERY - 1 {
            inputs.batch_applied(&state);
        }
        assert_eq!(inputs.len(), 1, "one sweep marked it");
        inputs.batch_applied(&state);
        assert_eq!(inputs.len(), 0, "the second dropped it");
    }

    #[test]
    fn a_snapshot_takes_only_the_inputs_of_dispatches_in_flight() {
        let mut state = MailboxState::default();
        let live = queued(&mut state, "live");
        let done = queued(&mut state, "done");
        state.cancel(&done.dispatch_id, 2).unwrap();
        let mut inputs = RunInputs::default();
        inputs.insert(
            live.run_id.clone(),
            live.dispatch_id.clone(),
            request("live"),
        );
        inputs.insert(
            done.run_id.clone(),
            done.dispatch_id.clone(),
            request("done"),
        );

        let kept = inputs.in_flight(&state);
        assert_eq!(kept.len(), 1);
        assert!(kept.of_dispatch(&live.run_id, &live.dispatch_id).is_some());
        assert!(kept.of_dispatch(&live.run_id, &done.dispatch_id).is_none());
    }
}
