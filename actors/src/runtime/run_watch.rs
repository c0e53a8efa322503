//! Waiting for an activation of a run to end, whoever started it.
//!
//! The mailbox worker holds a dispatch's claim until the run it activated finishes
//! or waits; the decision bus holds a decision until the run it resumed does. Both
//! may attach to a run that is already executing (e.g. continued after a node
//! failed over), so they watch the runtime's event stream rather than a sink of
//! their own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, oneshot};

use crate::contract::{AgentEvent, RunStatus, StreamEvent, TerminationReason, TraceContext};
use crate::hashing::FastHashMap;
use crate::ids::{RunId, ThreadId};
use crate::thread::EventHub;

/// How an activation of a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    /// Why it stopped; `Suspended` means it waits for decisions.
    pub termination: TerminationReason,
    /// The last assistant text.
    pub response: String,
}

impl RunEnd {
    /// The run's status afterwards: `Waiting` when suspended, else `Done`.
    pub fn status(&self) -> RunStatus {
        if self.termination == TerminationReason::Suspended {
            RunStatus::Waiting
        } else {
            RunStatus::Done
        }
    }
}

type Waiters = FastHashMap<RunId, Vec<(u64, oneshot::Sender<RunEnd>)>>;

/// The watchers of every run, and a signal for when none is left.
#[derive(Debug, Default)]
struct Watchers {
    map: Mutex<Waiters>,
    /// Notified each time the last watcher goes.
    emptied: Notify,
}

impl Watchers {
    fn lock(&self) -> MutexGuard<'_, Waiters> {
        // Critical sections never panic midway; a poisoned lock holds consistent data.
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Drops `run_id`'s watchers (answering them `None` unless sent to first).
    fn remove(&self, run_id: &RunId) -> Option<Vec<(u64, oneshot::Sender<RunEnd>)>> {
        let mut map = self.lock();
        let removed = map.remove(run_id);
        if removed.is_some() && map.is_empty() {
            self.emptied.notify_waiters();
        }
        removed
    }
}

/// The runtime's hub: forwards every event to the configured hub and tells
/// watchers when a run's activation ends (`RunFinish`).
pub(crate) struct WatchingHub {
    inner: Arc<dyn EventHub>,
    waiters: Arc<Watchers>,
    next_id: AtomicU64,
}

impl WatchingHub {
    pub(crate) fn new(inner: Arc<dyn EventHub>) -> Self {
        Self {
            inner,
            waiters: Arc::default(),
            next_id: AtomicU64::new(0),
        }
    }

    /// Registers interest in the next end of `run_id`'s activation.
    pub(crate) fn watch(&self, run_id: &RunId) -> RunWatch {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.waiters
            .lock()
            .entry(run_id.clone())
            .or_default()
            .push((id, tx));
        RunWatch {
            run_id: run_id.clone(),
            id,
            rx,
            waiters: Arc::clone(&self.waiters),
        }
    }

    /// Resolves once no activation is watched: every run the mailbox worker or
    /// the decision bus delivered has finished or waits.
    pub(crate) async fn settled(&self) {
        loop {
            let emptied = self.waiters.emptied.notified();
            tokio::pin!(emptied);
            emptied.as_mut().enable();
            if self.waiters.lock().is_empty() {
                return;
            }
            emptied.await;
        }
    }
}

impl EventHub for WatchingHub {
    fn publish(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
        event: &Arc<StreamEvent>,
        trace: Option<&TraceContext>,
    ) {
        self.inner.publish(thread_id, run_id, event, trace);
        if let AgentEvent::RunFinish {
            termination,
            result,
            ..
        } = &event.event
        {
            let Some(waiters) = self.waiters.remove(run_id) else {
                return;
            };
            let end = RunEnd {
                termination: termination.clone(),
                response: AgentEvent::extract_response(result),
            };
            for (_, waiter) in waiters {
                let _ = waiter.send(end.clone());
            }
        }
    }

    fn abandoned(&self, thread_id: &ThreadId, run_id: &RunId) {
        // Dropping the senders answers every watcher `None` at once.
        self.waiters.remove(run_id);
        self.inner.abandoned(thread_id, run_id);
    }
}

/// Resolves when the watched run's activation ends; unregisters when dropped.
#[derive(Debug)]
pub struct RunWatch {
    run_id: RunId,
    id: u64,
    rx: oneshot::Receiver<RunEnd>,
    waiters: Arc<Watchers>,
}

impl RunWatch {
    /// Waits for the end of the activation; `None` if it stopped on this node
    /// without ending (the runtime went away, or the thread actor was fenced off
    /// or stopped mid-run): then the run is someone else's to continue.
    pub async fn ended(&mut self) -> Option<RunEnd> {
        (&mut self.rx).await.ok()
    }

    /// The end, if the activation already ended (e.g. it completed while being
    /// activated); `None` while it runs or if the runtime went away.
    pub fn ended_already(&mut self) -> Option<RunEnd> {
        self.rx.try_recv().ok()
    }
}

impl Drop for RunWatch {
    fn drop(&mut self) {
        let mut waiters = self.waiters.lock();
        if let Some(list) = waiters.get_mut(&self.run_id) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                waiters.remove(&self.run_id);
                if waiters.is_empty() {
                    self.waiters.emptied.notify_waiters();
                }
            }
        }
    }
}
