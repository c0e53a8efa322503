//! Cooperative cancellation shared by a run, its inference task and its tool calls.
//!
//! Not tokio-util's `CancellationToken`: that one keeps a parent/child tree and
//! takes a mutex on every clone and drop, which a run pays several times (+0.8
//! to +1.1 % instructions per in-process run, measured twice; see
//! `docs/benchmarks.md`, "Structure steps of 2026-11-28: one clock, and a token
//! tried and reverted"). Nothing here needs child tokens, so a flag and a
//! `Notify` do.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Inner {
    cancelled: AtomicBool,
    notify: Notify,
}

/// A cloneable cancellation flag; cancelling any clone cancels all of them.
///
/// Cancellation is cooperative: work observes it by polling [`is_cancelled`] or by
/// awaiting [`cancelled`] in a `select!`.
///
/// [`is_cancelled`]: CancellationToken::is_cancelled
/// [`cancelled`]: CancellationToken::cancelled
#[derive(Debug, Clone, Default)]
pub struct CancellationToken {
    inner: Arc<Inner>,
}

impl CancellationToken {
    /// A new, uncancelled token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Signals cancellation and wakes every waiter; idempotent.
    pub fn cancel(&self) {
        if !self.inner.cancelled.swap(true, Ordering::SeqCst) {
            self.inner.notify.notify_waiters();
        }
    }

    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once cancellation is requested (immediately if it already was).
    pub async fn cancelled(&self) {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            // Register interest before checking the flag, so a `cancel` between the
            // check and the await cannot be missed.
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clones_share_state_and_waiters_wake() {
        let token = CancellationToken::new();
        let clone = token.clone();
        assert!(!clone.is_cancelled());
        let waiter = tokio::spawn(async move { clone.cancelled().await });
        tokio::task::yield_now().await;
        token.cancel();
        token.cancel();
        waiter.await.unwrap();
        assert!(token.is_cancelled());
    }

    #[tokio::test]
    async fn cancelled_resolves_immediately_when_already_cancelled() {
        let token = CancellationToken::new();
        token.cancel();
        token.cancelled().await;
    }
}
