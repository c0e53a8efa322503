//! `MailboxWorker`: turns queued dispatches into runs on this node's runtime.
//!
//! ```text
//! watch / sweep / wake ──> claim (per thread, one claim loop at a time)
//!   for each claimed dispatch, in claim order:
//!     record_dispatch_start → watch_run → activate(run id, input from the inbox)
//!       Started | Running ──> hold the claim (renew the lease) until the run
//!                             finishes or waits → complete (result + ack)
//!       Waiting | Finished ──> complete (a repeated delivery)
//!       input gone / refused ─> dead-letter      thread unavailable ─> nack
//!   dead-lettered (at once, or its attempts used up) ─> the run ends as failed
//! ```
//!
//! A claim is held for as long as the run executes, so a node that dies mid-run
//! leaves a claim behind. The sweep gives it back to the queue — as soon as the
//! thread runs here and the claimer is gone (a consumer that left the cluster, or
//! an earlier run of this node), else when its lease expires — and the thread's
//! next owner activates the run again, which continues from its last checkpoint.
//! A run waiting for a human holds no claim (seed 000).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::now_ms;

use dashmap::DashSet;
use dashmap::mapref::entry::Entry;
use tokio::sync::Notify;
use tokio_util::task::AbortOnDropHandle;

use super::{MailboxConfig, MailboxError, MailboxStore, QueueWatch, RunInbox};
use crate::contract::{RunDispatch, RunDispatchResult, RunDispatchStatus, RunStatus};
use crate::hashing::FastDashMap;
use crate::ids::ThreadId;
use crate::memory::Share;
use crate::runtime::{AgentRuntime, RunEnd, RunWatch};
use crate::telemetry::messaging::{self, Delivery};
use crate::thread::{Activation, ControlError};

/// Where this node runs threads (in a cluster: the shards it owns).
pub trait Placement: Send + Sync {
    /// Whether this node owns the thread now; a claim it holds is given back
    /// once it does not.
    fn owns(&self, thread_id: &ThreadId) -> bool;

    /// Whether to start new work on the thread here: as [`Self::owns`], except
    /// while the thread's shard is being handed to another node (its runs
    /// executing here finish first, no new one starts).
    fn admits(&self, thread_id: &ThreadId) -> bool {
        self.owns(thread_id)
    }
}

impl<F: Fn(&ThreadId) -> bool + Send + Sync> Placement for F {
    fn owns(&self, thread_id: &ThreadId) -> bool {
        self(thread_id)
    }
}

/// Whether a consumer (in a cluster: a node) is still there to hold its claims.
pub type Liveness = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Who a mailbox worker claims as: the node's consumer name, the threads it
/// runs, and which other consumers are still there to hold their claims.
pub struct Claimant {
    /// The consumer name its claims carry (in a cluster: the node id).
    pub consumer: String,
    /// The threads it runs.
    pub placement: Arc<dyn Placement>,
    /// Which consumers still hold their claims; the others' are reclaimed.
    pub live: Liveness,
}

impl Claimant {
    /// A node alone: it runs every thread, and nobody else claims (its mailbox
    /// lives and dies with it).
    pub fn single_node(consumer: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            placement: Arc::new(|_: &ThreadId| true),
            live: Arc::new(|_: &str| true),
        }
    }
}

/// Dispatches claimed per claim round of one thread.
const CLAIM_BATCH: usize = 8;

/// Claims and delivers the dispatches of the threads this node runs.
pub struct MailboxWorker {
    shared: Arc<Shared>,
    /// The sweeper and the collector; they end with the worker.
    _loops: [AbortOnDropHandle<()>; 2],
}

impl std::fmt::Debug for MailboxWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailboxWorker")
            .field("consumer", &self.shared.consumer)
            .finish_non_exhaustive()
    }
}

struct Shared {
    runtime: AgentRuntime,
    mailbox: Arc<dyn MailboxStore>,
    inbox: Arc<dyn RunInbox>,
    config: MailboxConfig,
    consumer: String,
    placement: Arc<dyn Placement>,
    live: Liveness,
    /// Threads with a claim loop running; `true` when work arrived meanwhile.
    claiming: FastDashMap<ThreadId, bool>,
    /// Tokens of the claims this worker holds. A token is added before its
    /// thread's claim loop ends, so a sweep that sees a claim of this consumer in
    /// neither place knows it is an earlier process's.
    held: DashSet<String>,
    accepting: AtomicBool,
    /// Claims wait for the node's admitted memory to have room.
    deferred: AtomicBool,
    /// Asks the sweeper for a sweep now; requests made meanwhile coalesce.
    sweep_soon: Notify,
    /// Where claim tasks run: the store's watch may call from outside a task.
    tasks: tokio::runtime::Handle,
}

impl MailboxWorker {
    /// Starts claiming as `claimant`: watches the mailbox for new work, sweeps
    /// every `sweep_interval` (reclaiming expired leases and the claims of
    /// consumers the claimant's `live` says are gone) and garbage-collects every
    /// `gc_interval`.
    pub async fn start(
        runtime: AgentRuntime,
        mailbox: Arc<dyn MailboxStore>,
        inbox: Arc<dyn RunInbox>,
        config: MailboxConfig,
        claimant: Claimant,
    ) -> Result<Self, MailboxError> {
        let Claimant {
            consumer,
            placement,
            live,
        } = claimant;
        let shared = Arc::new(Shared {
            runtime,
            mailbox,
            inbox,
            config,
            consumer,
            placement,
            live,
            claiming: FastDashMap::default(),
            held: DashSet::new(),
            accepting: AtomicBool::new(true),
            deferred: AtomicBool::new(false),
            sweep_soon: Notify::new(),
            tasks: tokio::runtime::Handle::current(),
        });
        // Called in the store's write path: work enqueued on this node starts its
        // claim task right there, with no listener in between. Weak: the store
        // keeps the watch and the worker keeps the store.
        let watching = Arc::downgrade(&shared);
        shared
            .mailbox
            .watch_queued(QueueWatch::new(move |thread_id: &ThreadId| {
                let Some(shared) = watching.upgrade() else {
                    return false;
                };
                Shared::wake(&shared, thread_id.clone());
                true
            }))
            .await?;
        let sweeper = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let mut every = every_at_least_1ms(shared.config.sweep_interval);
                loop {
                    tokio::select! {
                        _ = every.tick() => {}
                        () = shared.sweep_soon.notified() => {}
                    }
                    Shared::sweep(&shared).await;
                }
            })
        };
        let collector = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let mut every = every_at_least_1ms(shared.config.gc_interval);
                loop {
                    every.tick().await;
                    if let Err(error) = shared.mailbox.gc(now_ms()).await {
                        tracing::warn!(%error, "mailbox gc failed");
                    }
                    shared
                        .runtime
                        .memory()
                        .meter(Share::SettledDispatches)
                        .set(shared.mailbox.settled_bytes());
                }
            })
        };
        Ok(Self {
            shared,
            _loops: [
                AbortOnDropHandle::new(sweeper),
                AbortOnDropHandle::new(collector),
            ],
        })
    }

    /// Asks for a sweep (reclaim expired leases, wake every thread with queued
    /// work) as soon as the running one is done; many requests in a burst (a node
    /// taking over many shards) make one sweep.
    pub fn sweep_soon(&self) {
        self.shared.sweep_soon.notify_one();
    }

    /// Stops claiming new work (graceful drain); runs in flight keep their claims.
    pub fn stop_claiming(&self) {
        self.shared.accepting.store(false, Ordering::SeqCst);
    }

    /// Whether a claim of this worker is still held: its run executes, or its
    /// result is being recorded and acked.
    pub fn holds_claims(&self) -> bool {
        !self.shared.held.is_empty()
    }
}

impl Drop for MailboxWorker {
    fn drop(&mut self) {
        self.stop_claiming();
    }
}

impl Shared {
    fn wants(&self, thread_id: &ThreadId) -> bool {
        self.accepting.load(Ordering::SeqCst) && self.placement.admits(thread_id)
    }

    /// Starts a claim loop for the thread unless one runs; then it runs once more.
    fn wake(shared: &Arc<Self>, thread_id: ThreadId) {
        if !shared.wants(&thread_id) {
            return;
        }
        match shared.claiming.entry(thread_id.clone()) {
            Entry::Occupied(mut running) => {
                *running.get_mut() = true;
            }
            Entry::Vacant(vacant) => {
                vacant.insert(false);
                let claimer = Arc::clone(shared);
                shared
                    .tasks
                    .spawn(async move { claimer.claim_loop(thread_id).await });
            }
        }
    }

    /// Wakes `thread_id` at `at_ms` (a retry's back-off).
    fn wake_at(shared: &Arc<Self>, thread_id: ThreadId, at_ms: u64) {
        let delay = Duration::from_millis(at_ms.saturating_sub(now_ms()));
        let shared = Arc::clone(shared);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            Self::wake(&shared, thread_id);
        });
    }

    async fn sweep(shared: &Arc<Self>) {
        Self::give_back_orphaned_claims(shared).await;
        let now = now_ms();
        match shared.mailbox.reclaim_expired_leases(now).await {
            Ok(reclaimed) if !reclaimed.is_empty() => {
                tracing::info!(count = reclaimed.len(), "reclaimed expired dispatch leases");
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "reclaiming expired leases failed"),
        }
        match shared.mailbox.queued_threads().await {
            Ok(queued) => {
                // Work due before the next sweep gets a timer; later work is left
                // to a later sweep, so repeated sweeps do not pile up timers.
                let next_sweep = now.saturating_add(
                    u64::try_from(shared.config.sweep_interval.as_millis()).unwrap_or(u64::MAX),
                );
                for thread in queued {
                    if thread.available_at <= now {
                        Self::wake(shared, thread.thread_id);
                    } else if thread.available_at < next_sweep && shared.wants(&thread.thread_id) {
                        Self::wake_at(shared, thread.thread_id, thread.available_at);
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "listing queued threads failed"),
        }
    }

    /// Gives back the claims on threads this node runs whose claimer is gone: a
    /// consumer that left, or this consumer in an earlier process (a restart under
    /// the same name). Their work returns to the queue now, not after the lease.
    async fn give_back_orphaned_claims(shared: &Arc<Self>) {
        // Listed before the checks below: a claim this worker makes is in
        // `claiming` or `held` from its write until it is released.
        let claims = match shared.mailbox.claims().await {
            Ok(claims) => claims,
            Err(error) => {
                tracing::warn!(%error, "listing claims failed");
                return;
            }
        };
        for claim in claims {
            let orphaned = if claim.claimed_by == shared.consumer {
                !shared.held.contains(&claim.claim_token)
            } else {
                !(shared.live)(&claim.claimed_by)
            };
            if !orphaned
                || !shared.wants(&claim.thread_id)
                || shared.claiming.contains_key(&claim.thread_id)
            {
                continue;
            }
            let reason = format!("its claimer {} is gone", claim.claimed_by);
            match shared
                .mailbox
                .nack(&claim.dispatch_id, &claim.claim_token, &reason, now_ms())
                .await
            {
                Ok(back) if back.status == RunDispatchStatus::Queued => {
                    tracing::info!(dispatch_id = %claim.dispatch_id, claimer = %claim.claimed_by, "gave back an orphaned claim");
                    Self::wake_at(shared, back.thread_id, back.available_at);
                }
                Ok(dead) => {
                    tracing::warn!(dispatch_id = %claim.dispatch_id, %reason, "dispatch dead-lettered");
                    shared.end_unstarted(&dead, &reason).await;
                }
                // Released or claimed anew since the listing.
                Err(
                    MailboxError::ClaimMismatch(_)
                    | MailboxError::WrongState { .. }
                    | MailboxError::NotFound(_),
                ) => {}
                Err(error) => {
                    tracing::warn!(dispatch_id = %claim.dispatch_id, %error, "giving back an orphaned claim failed");
                }
            }
        }
    }

    async fn claim_loop(self: Arc<Self>, thread_id: ThreadId) {
        loop {
            if self.wants(&thread_id) {
                if self.runtime.memory().may_claim() {
                    self.claim_round(&thread_id).await;
                } else {
                    self.defer_claims();
                }
            }
            // Finish only if no work arrived while claiming; else claim again.
            let again = match self.claiming.entry(thread_id.clone()) {
                Entry::Occupied(mut entry) if *entry.get() => {
                    *entry.get_mut() = false;
                    true
                }
                Entry::Occupied(entry) => {
                    entry.remove();
                    false
                }
                Entry::Vacant(_) => false,
            };
            if !again {
                return;
            }
        }
    }

    /// Leaves queued work queued while active runs fill the admitted memory;
    /// one task waits for room and then sweeps, which wakes every thread with
    /// queued work (decision 0089).
    fn defer_claims(self: &Arc<Self>) {
        self.runtime.metrics().mailbox().claim_deferred();
        if self.deferred.swap(true, Ordering::SeqCst) {
            return;
        }
        let memory = Arc::clone(self.runtime.memory());
        let shared = Arc::downgrade(self);
        self.tasks.spawn(async move {
            memory.claimable().await;
            if let Some(shared) = shared.upgrade() {
                shared.deferred.store(false, Ordering::SeqCst);
                shared.sweep_soon.notify_one();
            }
        });
    }

    async fn claim_round(self: &Arc<Self>, thread_id: &ThreadId) {
        let now = now_ms();
        let claimed = match self
            .mailbox
            .claim(
                thread_id,
                &self.consumer,
                CLAIM_BATCH,
                self.config.lease_ms,
                now,
            )
            .await
        {
            Ok(claimed) => claimed,
            Err(error) => {
                tracing::warn!(%thread_id, %error, "claim failed");
                return;
            }
        };
        let more = claimed.len() == CLAIM_BATCH;
        let meters = self.runtime.metrics().mailbox();
        for dispatch in &claimed {
            self.held.insert(claim_token(dispatch).to_owned());
            meters.claimed(dispatch, now);
        }
        // Activations go to the thread in claim order; waiting happens apart.
        for dispatch in claimed {
            self.deliver(dispatch).await;
        }
        if more && let Some(mut entry) = self.claiming.get_mut(thread_id) {
            *entry = true;
        }
    }

    /// Delivers a claimed dispatch. Its start is recorded beside the
    /// activation, not before it: the record is a projection for readers of the
    /// dispatch, and on a replicated mailbox waiting for it would cost every run
    /// a round trip. It is submitted first (the join polls it first), so an
    /// ordered store applies it before anything the delivery writes after.
    async fn deliver(self: &Arc<Self>, dispatch: RunDispatch) {
        let id = dispatch.dispatch_id.clone();
        let record = async {
            if let Err(error) = self
                .mailbox
                .record_dispatch_start(&id, &self.consumer, now_ms())
                .await
            {
                tracing::warn!(dispatch_id = %id, %error, "recording the dispatch start failed");
            }
        };
        futures::join!(record, self.activate(dispatch));
    }

    async fn activate(self: &Arc<Self>, dispatch: RunDispatch) {
        let id = &dispatch.dispatch_id;
        tracing::debug!(dispatch_id = %id, run_id = %dispatch.run_id, attempt = dispatch.attempt_count, "delivering a dispatch");
        if dispatch.attempt_count > 1 && self.ended_before(&dispatch).await {
            return;
        }
        let request = match self.inbox.get(&dispatch.run_id).await {
            Ok(request) => request,
            Err(error) => {
                self.give_back(&dispatch, &error.to_string()).await;
                return;
            }
        };
        let span = messaging::process(
            &dispatch,
            &self.consumer,
            request.as_ref().and_then(|r| r.trace.as_ref()),
        );
        let mut watch = self.runtime.watch_run(&dispatch.run_id);
        let activation = self
            .runtime
            .activate(&dispatch.thread_id, dispatch.run_id.clone(), request, None)
            .await;
        tracing::debug!(dispatch_id = %id, run_id = %dispatch.run_id, ?activation, "activated");
        messaging::processed(
            &span,
            match &activation {
                Ok(Activation::Started | Activation::Running) => Delivery::Activated,
                Ok(Activation::Waiting) => Delivery::Waiting,
                Ok(Activation::Finished) => Delivery::Ended,
                Err(ControlError::Unavailable(_)) => Delivery::GivenBack,
                Err(_) => Delivery::DeadLettered,
            },
        );
        drop(span);
        match activation {
            Ok(Activation::Started | Activation::Running) => {
                // A run that completed while it was activated needs no claim holder.
                if let Some(end) = watch.ended_already() {
                    self.finish(&dispatch, end.status(), Some(&end)).await;
                    return;
                }
                let shared = Arc::clone(self);
                tokio::spawn(async move { shared.hold(dispatch, watch).await });
            }
            Ok(Activation::Waiting) => self.finish(&dispatch, RunStatus::Waiting, None).await,
            Ok(Activation::Finished) => {
                // It ended before this activation reached it (e.g. it continued
                // from its checkpoint as its thread was loaded): report its end.
                if !self.ended_before(&dispatch).await {
                    self.finish(&dispatch, RunStatus::Done, None).await;
                }
            }
            Err(ControlError::Unavailable(reason)) => self.give_back(&dispatch, &reason).await,
            Err(ControlError::RunNotFound { .. }) => {
                self.dead_letter(&dispatch, "the run's input is gone").await;
            }
            Err(refused) => self.dead_letter(&dispatch, &refused.to_string()).await,
        }
    }

    /// Whether the run's record says it already waits or ended; then the
    /// dispatch is completed from that record. A repeated delivery checks this
    /// first (its claimer died before acking): activating it instead would start
    /// the run anew as new input, which cancels whatever runs on the thread now.
    /// A first delivery cannot have a record yet, so it skips the read.
    async fn ended_before(&self, dispatch: &RunDispatch) -> bool {
        let record = match self.runtime.store().load_run(&dispatch.run_id).await {
            Ok(Some(record)) if record.status != RunStatus::Running => record,
            Ok(_) => return false,
            Err(error) => {
                // Activation checks the thread itself; a read that failed only
                // loses the shortcut for runs the thread still knows.
                tracing::warn!(run_id = %dispatch.run_id, %error, "reading a redelivered run failed");
                return false;
            }
        };
        let result = RunDispatchResult {
            run_id: dispatch.run_id.clone(),
            dispatch_instance_id: self.consumer.clone(),
            status: record.status,
            termination: record.termination,
            response: None,
            error: None,
        };
        self.complete(dispatch, result).await;
        true
    }

    /// Holds the claim while the run executes, renewing its lease, then acks.
    async fn hold(self: Arc<Self>, dispatch: RunDispatch, mut watch: RunWatch) {
        let token = claim_token(&dispatch);
        let mut renew = every_at_least_1ms(self.config.lease_renewal_interval);
        loop {
            tokio::select! {
                end = watch.ended() => {
                    match end {
                        Some(end) => self.finish(&dispatch, end.status(), Some(&end)).await,
                        None => self.give_back(&dispatch, "the run stopped on this node without ending").await,
                    }
                    return;
                }
                _ = renew.tick() => {
                    if !self.placement.owns(&dispatch.thread_id) {
                        // The shard moved: the new owner takes the run up from its
                        // checkpoint once this claim is given back.
                        self.give_back(&dispatch, "the thread moved to another node").await;
                        return;
                    }
                    match self
                        .mailbox
                        .extend_lease(&dispatch.dispatch_id, token, self.config.lease_ms, now_ms())
                        .await
                    {
                        Ok(_) => {}
                        Err(MailboxError::Unavailable(error)) => {
                            tracing::warn!(dispatch_id = %dispatch.dispatch_id, %error, "lease renewal failed; retrying");
                        }
                        Err(lost) => {
                            tracing::warn!(dispatch_id = %dispatch.dispatch_id, error = %lost, "claim lost");
                            self.held.remove(token);
                            return;
                        }
                    }
                }
            }
        }
    }

    async fn finish(&self, dispatch: &RunDispatch, status: RunStatus, end: Option<&RunEnd>) {
        let result = RunDispatchResult {
            run_id: dispatch.run_id.clone(),
            dispatch_instance_id: self.consumer.clone(),
            status,
            termination: end.map(|e| e.termination.clone()),
            response: end.map(|e| e.response.clone()),
            error: None,
        };
        self.complete(dispatch, result).await;
    }

    /// Records the run's result, acks the dispatch and drops the run's input.
    async fn complete(&self, dispatch: &RunDispatch, result: RunDispatchResult) {
        let id = &dispatch.dispatch_id;
        tracing::debug!(dispatch_id = %id, run_id = %dispatch.run_id, status = ?result.status, "completing a dispatch");
        match self
            .mailbox
            .complete(id, claim_token(dispatch), result, now_ms())
            .await
        {
            Ok(_) => {
                if let Err(error) = self.inbox.remove(&dispatch.run_id).await {
                    tracing::warn!(run_id = %dispatch.run_id, %error, "dropping the run input failed");
                }
            }
            Err(error) => {
                tracing::warn!(dispatch_id = %id, %error, "completing the dispatch failed")
            }
        }
        self.held.remove(claim_token(dispatch));
    }

    /// Returns the dispatch for a retry after back-off (dead-lettered when its
    /// attempts are used up).
    async fn give_back(self: &Arc<Self>, dispatch: &RunDispatch, reason: &str) {
        let id = &dispatch.dispatch_id;
        tracing::debug!(dispatch_id = %id, run_id = %dispatch.run_id, %reason, "giving a dispatch back");
        match self
            .mailbox
            .nack(id, claim_token(dispatch), reason, now_ms())
            .await
        {
            Ok(back) if back.status == RunDispatchStatus::Queued => {
                Self::wake_at(self, back.thread_id, back.available_at);
            }
            Ok(dead) => {
                tracing::warn!(dispatch_id = %id, %reason, "dispatch dead-lettered");
                self.end_unstarted(&dead, reason).await;
            }
            Err(error) => tracing::warn!(dispatch_id = %id, %error, "nack failed"),
        }
        self.held.remove(claim_token(dispatch));
    }

    async fn dead_letter(&self, dispatch: &RunDispatch, reason: &str) {
        let id = &dispatch.dispatch_id;
        tracing::warn!(dispatch_id = %id, run_id = %dispatch.run_id, %reason, "dead-lettering dispatch");
        match self
            .mailbox
            .dead_letter(id, claim_token(dispatch), reason, now_ms())
            .await
        {
            Ok(dead) => self.end_unstarted(&dead, reason).await,
            Err(error) => tracing::warn!(dispatch_id = %id, %error, "dead-letter failed"),
        }
        self.held.remove(claim_token(dispatch));
    }

    /// A dead-lettered dispatch's run will never start here or anywhere: it
    /// ends as failed with the cause, so its submitter sees why (a run that did
    /// start keeps its record and goes on when its thread is loaded next).
    async fn end_unstarted(&self, dispatch: &RunDispatch, reason: &str) {
        // Only this rare path reads the input again, to record who asked.
        let request = self.inbox.get(&dispatch.run_id).await.ok().flatten();
        let reason = format!(
            "the run could not start on node `{}`: {reason}",
            self.consumer
        );
        if let Err(error) = self
            .runtime
            .end_unstarted(
                &dispatch.thread_id,
                &dispatch.run_id,
                request.as_ref(),
                &reason,
            )
            .await
        {
            tracing::warn!(run_id = %dispatch.run_id, %error, "ending a run that could not start failed");
        }
    }
}

fn claim_token(dispatch: &RunDispatch) -> &str {
    dispatch.claim_token.as_deref().unwrap_or_default()
}

/// A ticker for a configured period whose first tick is a period from now; a
/// zero period (which `tokio` refuses with a panic) ticks every millisecond
/// instead. Not `interval`'s immediate first tick: awaiting an elapsed timer
/// still waits for the timer wheel's next millisecond.
fn every_at_least_1ms(period: Duration) -> tokio::time::Interval {
    let period = period.max(Duration::from_millis(1));
    tokio::time::interval_at(tokio::time::Instant::now() + period, period)
}
