//! The actor's own lifecycle: joining its supervisor and passivating when idle.

use ractor::ActorRef;

use crate::contract::RunStatus;
use crate::memory::RUN_BYTES;
use crate::thread::core::{LatestRun, WarmThread};

use super::{Kept, ThreadActorState, ThreadMsg};

impl ThreadActorState {
    /// Registers with the region and links to the supervisor, once, on the first
    /// message; `false` when the supervisor is gone (the node is shutting down).
    pub(super) fn join_supervision(&mut self, myself: &ActorRef<ThreadMsg>) -> bool {
        let Some((supervisor, restarts)) = self.unlinked.take() else {
            return true;
        };
        // Registered first: a supervision event always finds the thread.
        self.region.supervise(&self.thread_id, myself, restarts);
        myself.get_cell().link(supervisor);
        myself.try_get_supervisor().is_some()
    }

    /// Charges what the thread holds now to the admitted memory: its core (while
    /// it is home) and its run. A segment's growth is counted when it hands the
    /// core back.
    pub(super) fn recharge(&mut self) {
        if let Some(core) = &self.core {
            let run = if self.ctl.is_some() { RUN_BYTES } else { 0 };
            self.held.set(core.heap_estimate() as u64 + run);
        }
    }

    pub(super) fn idle(&self) -> bool {
        !self.busy
            && self.queue.is_empty()
            && self
                .ctl
                .as_ref()
                .is_none_or(|c| c.status == RunStatus::Waiting && c.tools.is_empty())
    }

    pub(super) fn begin_passivation(&mut self, myself: &ActorRef<ThreadMsg>) {
        if self.passivating || !self.idle() {
            return;
        }
        if self.region.begin(&self.thread_id, myself) {
            self.passivating = true;
            self.active_since_passivation = false;
            let _ = myself.send_message(ThreadMsg::Passivate);
        }
    }

    /// Returns `true` when the actor must stop now.
    pub(super) fn on_passivate(&mut self, myself: &ActorRef<ThreadMsg>) -> bool {
        if !self.passivating {
            return false;
        }
        self.passivating = false;
        if self.active_since_passivation || !self.idle() {
            for message in self.region.cancel(&self.thread_id, myself) {
                let _ = myself.send_message(message);
            }
            return false;
        }
        let warm = self.take_warm();
        match self.region.finish(&self.thread_id, myself, warm) {
            Ok(()) => true,
            Err(Kept { buffered, warm }) => {
                if let Some(warm) = warm {
                    self.core = Some(warm.core);
                }
                for message in buffered {
                    let _ = myself.send_message(message);
                }
                false
            }
        }
    }

    /// The core an idle actor leaves in memory when it stops, if the thread stays
    /// warm: idle threads do for `idle_passivation`; waiting ones only when
    /// `passivate_while_waiting` is off.
    pub(super) fn take_warm(&mut self) -> Option<WarmThread> {
        let config = &self.deps.config;
        let waiting = self.ctl.is_some();
        if config.idle_passivation.is_zero() || (waiting && config.passivate_while_waiting) {
            return None;
        }
        let latest_run = match (waiting, &self.run, &self.last_run) {
            (true, Some(run), _) => LatestRun::Unfinished(Box::new(run.record.clone())),
            (_, _, Some(run_id)) => LatestRun::Finished(run_id.clone()),
            _ => LatestRun::None,
        };
        let core = self.core.take()?;
        Some(WarmThread { core, latest_run })
    }
}
