//! The mailbox worker records a dispatch's start beside the run's activation,
//! not before it: a start record that is slow to land (a replicated mailbox's
//! round trip) does not hold the run back, and one that lands after the run
//! settled leaves the settled dispatch as it is.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use awaken_actors::contract::{
    MailboxInterrupt, RunDispatch, RunDispatchResult, RunDispatchStatus, RunStatus,
    TerminationReason, ToolExecutionMode,
};
use awaken_actors::ids::{DispatchId, ThreadId};
use awaken_actors::mailbox::{
    Claimant, DispatchPage, DispatchQuery, HeldClaim, InMemoryMailboxStore, InMemoryRunInbox,
    MailboxConfig, MailboxError, MailboxStore, MailboxWorker, QueueWatch, QueuedThread,
    SubmitOptions, submit,
};
use awaken_actors::thread::RunRequest;
use support::*;
use tokio::sync::{Notify, Semaphore};

/// The in-memory mailbox, except that recording a start waits for a permit
/// and says when it landed.
struct SlowStartRecord {
    inner: InMemoryMailboxStore,
    permits: Semaphore,
    recorded: Notify,
}

#[async_trait]
impl MailboxStore for SlowStartRecord {
    async fn record_dispatch_start(
        &self,
        dispatch_id: &DispatchId,
        dispatch_instance_id: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.permits.acquire().await.unwrap().forget();
        let recorded = self
            .inner
            .record_dispatch_start(dispatch_id, dispatch_instance_id, now_ms)
            .await;
        self.recorded.notify_one();
        recorded
    }

    async fn enqueue(&self, d: RunDispatch, now: u64) -> Result<RunDispatch, MailboxError> {
        self.inner.enqueue(d, now).await
    }
    async fn claim(
        &self,
        thread_id: &ThreadId,
        consumer: &str,
        limit: usize,
        lease_ms: u64,
        now: u64,
    ) -> Result<Vec<RunDispatch>, MailboxError> {
        self.inner
            .claim(thread_id, consumer, limit, lease_ms, now)
            .await
    }
    async fn claim_dispatch(
        &self,
        id: &DispatchId,
        consumer: &str,
        lease_ms: u64,
        now: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.inner.claim_dispatch(id, consumer, lease_ms, now).await
    }
    async fn ack(
        &self,
        id: &DispatchId,
        token: &str,
        now: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.inner.ack(id, token, now).await
    }
    async fn nack(
        &self,
        id: &DispatchId,
        token: &str,
        error: &str,
        now: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.inner.nack(id, token, error, now).await
    }
    async fn dead_letter(
        &self,
        id: &DispatchId,
        token: &str,
        error: &str,
        now: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.inner.dead_letter(id, token, error, now).await
    }
    async fn cancel(&self, id: &DispatchId, now: u64) -> Result<RunDispatch, MailboxError> {
        self.inner.cancel(id, now).await
    }
    async fn extend_lease(
        &self,
        id: &DispatchId,
        token: &str,
        lease_ms: u64,
        now: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.inner.extend_lease(id, token, lease_ms, now).await
    }
    async fn interrupt(
        &self,
        thread_id: &ThreadId,
        now: u64,
    ) -> Result<MailboxInterrupt, MailboxError> {
        self.inner.interrupt(thread_id, now).await
    }
    async fn supersede_claimed(
        &self,
        id: &DispatchId,
        now: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.inner.supersede_claimed(id, now).await
    }
    async fn record_run_result(
        &self,
        id: &DispatchId,
        result: RunDispatchResult,
        now: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.inner.record_run_result(id, result, now).await
    }
    async fn complete(
        &self,
        id: &DispatchId,
        token: &str,
        result: RunDispatchResult,
        now: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.inner.complete(id, token, result, now).await
    }
    async fn load_dispatch(&self, id: &DispatchId) -> Result<Option<RunDispatch>, MailboxError> {
        self.inner.load_dispatch(id).await
    }
    async fn list_dispatches(&self, query: &DispatchQuery) -> Result<DispatchPage, MailboxError> {
        self.inner.list_dispatches(query).await
    }
    async fn reclaim_expired_leases(&self, now: u64) -> Result<Vec<RunDispatch>, MailboxError> {
        self.inner.reclaim_expired_leases(now).await
    }
    async fn claims(&self) -> Result<Vec<HeldClaim>, MailboxError> {
        self.inner.claims().await
    }
    async fn queued_threads(&self) -> Result<Vec<QueuedThread>, MailboxError> {
        self.inner.queued_threads().await
    }
    async fn watch_queued(&self, watch: QueueWatch) -> Result<(), MailboxError> {
        self.inner.watch_queued(watch).await
    }
    async fn gc(&self, now: u64) -> Result<usize, MailboxError> {
        self.inner.gc(now).await
    }

    fn settled_bytes(&self) -> u64 {
        self.inner.settled_bytes()
    }
}

#[tokio::test]
async fn a_run_does_not_wait_for_its_start_record_and_a_late_one_changes_nothing() {
    let config = MailboxConfig::default();
    let mailbox = Arc::new(SlowStartRecord {
        inner: InMemoryMailboxStore::new(config.clone()),
        permits: Semaphore::new(0),
        recorded: Notify::new(),
    });
    let inbox = Arc::new(InMemoryRunInbox::default());
    let llm = ScriptedLlm::new(vec![Turn::Text("done before its start was recorded")]);
    let runtime = plain_runtime(llm, ToolExecutionMode::Sequential, vec![]);
    let _worker = MailboxWorker::start(
        runtime.clone(),
        mailbox.clone(),
        inbox.clone(),
        config,
        Claimant::single_node("node-1"),
    )
    .await
    .unwrap();

    let request = RunRequest::new(tid("slow-start"), user("hi"));
    let queued = submit(&*mailbox, &*inbox, request, SubmitOptions::default())
        .await
        .unwrap();
    let mut watch = runtime.watch_run(&queued.run_id);
    let end = tokio::time::timeout(Duration::from_secs(10), watch.ended())
        .await
        .expect("the run waited for its start record")
        .expect("the runtime stopped");
    assert_eq!(end.termination, TerminationReason::NaturalEnd);
    assert_eq!(end.response, "done before its start was recorded");

    // Settled while its start record still waits.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let settled = loop {
        let dispatch = mailbox.load_dispatch(&queued.dispatch_id).await.unwrap();
        let dispatch = dispatch.unwrap();
        if dispatch.status.is_terminal() {
            break dispatch;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dispatch never settled: {dispatch:?}"
        );
        tokio::task::yield_now().await;
    };
    assert_eq!(settled.status, RunDispatchStatus::Acked);
    assert_eq!(settled.run_status, Some(RunStatus::Done));
    assert_eq!(settled.dispatch_instance_id.as_deref(), Some("node-1"));

    mailbox.permits.add_permits(1);
    tokio::time::timeout(Duration::from_secs(10), mailbox.recorded.notified())
        .await
        .expect("the start record never landed");
    assert_eq!(
        mailbox.load_dispatch(&queued.dispatch_id).await.unwrap(),
        Some(settled),
        "the late start record changed nothing"
    );
}
