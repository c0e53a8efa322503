//! Running work that is already complete without a task hop.
//!
//! The actor rules say long work runs on a task that reports back. Much of that work
//! — a run segment against an in-memory store, a scripted model, a quick tool — is
//! in fact finished the first time it is polled, and a task plus a message costs more
//! than the work itself (each hop may wake another worker thread). [`ready_or_spawn`]
//! polls the work once where it is; only if it is not finished does it move, as is,
//! to a task. A spawned task is always polled again, so the throwaway waker of the
//! first poll is never relied on.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};

/// Polls `future` once. If it is complete, returns its output; otherwise spawns it
/// on the current tokio runtime and hands its output to `then` when it completes.
pub(crate) fn ready_or_spawn<T, F, C>(future: F, then: C) -> Option<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
    C: FnOnce(T) + Send + 'static,
{
    let mut future: Pin<Box<F>> = Box::pin(future);
    match poll_once(future.as_mut()) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => {
            tokio::spawn(async move { then(future.await) });
            None
        }
    }
}

/// Polls a future once with a waker that does nothing. Only for futures that are
/// either complete now or then handed to a task (which polls them again).
pub(crate) fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    future.poll(&mut cx)
}

/// What work reports while it is polled in place, kept in order for the poller.
///
/// Once the poller has taken them, later reports are handed back to be sent as
/// messages; a poller that is an actor handles those after its current handler,
/// so the order holds across the switch.
pub(crate) struct EarlyReports<T>(Mutex<Option<Vec<T>>>);

impl<T> EarlyReports<T> {
    /// Reports kept from now until [`EarlyReports::take`].
    pub(crate) fn new() -> Self {
        Self(Mutex::new(Some(Vec::new())))
    }

    /// Keeps `report` while the in-place poll lasts; afterwards hands it back.
    pub(crate) fn keep(&self, report: T) -> Option<T> {
        match self.lock().as_mut() {
            Some(kept) => {
                kept.push(report);
                None
            }
            None => Some(report),
        }
    }

    /// Ends the in-place poll and returns what was reported during it.
    pub(crate) fn take(&self) -> Vec<T> {
        self.lock().take().unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<T>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn ready_work_runs_in_place() {
        let called = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&called);
        let out = ready_or_spawn(async { 7 }, move |_| flag.store(true, Ordering::SeqCst));
        assert_eq!(out, Some(7));
        assert!(!called.load(Ordering::SeqCst));
    }

    #[test]
    fn early_reports_are_kept_until_taken_then_handed_back() {
        let reports = EarlyReports::new();
        assert_eq!(reports.keep(1), None);
        assert_eq!(reports.keep(2), None);
        assert_eq!(reports.take(), vec![1, 2]);
        assert_eq!(reports.keep(3), Some(3));
        assert!(reports.take().is_empty());
    }

    #[tokio::test]
    async fn pending_work_moves_to_a_task_and_completes() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let gate = Arc::new(tokio::sync::Notify::new());
        let wait = Arc::clone(&gate);
        let out = ready_or_spawn(
            async move {
                wait.notified().await;
                5
            },
            move |v| {
                let _ = tx.send(v);
            },
        );
        assert_eq!(out, None);
        gate.notify_one();
        assert_eq!(rx.await.unwrap(), 5);
    }
}
