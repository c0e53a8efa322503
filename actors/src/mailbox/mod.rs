//! The mailbox: the durable queue of [`RunDispatch`]es that activate runs (seed 000).
//!
//! Two tracks live on one record and never mix: the *queue lifecycle* (`status`,
//! attempts, claim and lease) and the *runtime projection* (`run_status`,
//! `termination`, … written by [`MailboxStore::record_dispatch_start`] and
//! [`MailboxStore::record_run_result`]). `Acked` closes the queue lifecycle; whether
//! the run succeeded is the projection's (and the run record's) business.
//!
//! Every method takes the current time (`now_ms`, unix millis) from the caller, so
//! leases, back-off and garbage collection are deterministic under test and every
//! node of a cluster applies one clock per operation.

mod config;
mod inbox;
mod memory;
mod settled;
mod state;
mod submit;
pub mod transition;
mod worker;

#[cfg(any(test, feature = "testsuite"))]
pub mod conformance;

use async_trait::async_trait;

pub use config::{DEFAULT_MAX_SETTLED, GcRules, MailboxConfig};
pub use inbox::{InMemoryRunInbox, RunInbox};
pub use memory::InMemoryMailboxStore;
pub use settled::{MARK_BYTES, Mark, MarkDigest, SettledMarks};
pub use state::{DEAD_LETTERS_KEPT, MailboxState, SETTLED_KEPT, SequencedDispatch};
pub use submit::{SubmitOptions, submit};
pub use worker::{Claimant, Liveness, MailboxWorker, Placement};

use crate::contract::{MailboxInterrupt, RunDispatch, RunDispatchResult, RunDispatchStatus};
use crate::ids::{DispatchId, ThreadId};

/// Why a mailbox operation was refused. A refused operation changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MailboxError {
    /// No dispatch with this id (never enqueued, or settled and forgotten: see
    /// [`MailboxState`]).
    #[error("dispatch {0} not found")]
    NotFound(DispatchId),
    /// A retained dispatch already has this dispatch id or dedupe key.
    #[error("duplicate dispatch: {0}")]
    Duplicate(String),
    /// The dispatch is not in a status that allows the operation.
    #[error("dispatch {dispatch_id} is {status:?}; cannot {operation}")]
    WrongState {
        /// The dispatch.
        dispatch_id: DispatchId,
        /// Its current status.
        status: RunDispatchStatus,
        /// What was attempted.
        operation: &'static str,
    },
    /// The claim token does not match the dispatch's current claim (a stale or
    /// foreign consumer).
    #[error("claim token does not match the current claim of dispatch {0}")]
    ClaimMismatch(DispatchId),
    /// The request itself is invalid.
    #[error("invalid mailbox request: {0}")]
    InvalidInput(String),
    /// The backing service could not be reached or failed.
    #[error("mailbox unavailable: {0}")]
    Unavailable(String),
}

/// Which dispatches [`MailboxStore::list_dispatches`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatchQuery {
    /// Only this thread's dispatches.
    pub thread_id: Option<ThreadId>,
    /// Only dispatches in one of these statuses (all when empty).
    pub statuses: Vec<RunDispatchStatus>,
    /// Dispatches to skip, in enqueue order.
    pub offset: usize,
    /// Page size, clamped to `1..=200`.
    pub limit: usize,
}

impl DispatchQuery {
    /// A query for one thread's dispatches.
    pub fn thread(thread_id: ThreadId) -> Self {
        Self {
            thread_id: Some(thread_id),
            ..Self::default()
        }
    }

    /// Restricts the query to `statuses`.
    pub fn with_statuses(mut self, statuses: impl IntoIterator<Item = RunDispatchStatus>) -> Self {
        self.statuses = statuses.into_iter().collect();
        self
    }

    /// Whether `dispatch` passes the filters.
    pub fn matches(&self, dispatch: &RunDispatch) -> bool {
        self.thread_id
            .as_ref()
            .is_none_or(|thread| &dispatch.thread_id == thread)
            && (self.statuses.is_empty() || self.statuses.contains(&dispatch.status))
    }
}

/// One page of dispatches, in enqueue order, with the number that matched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatchPage {
    /// The page.
    pub dispatches: Vec<RunDispatch>,
    /// How many dispatches matched the filters in total.
    pub total: usize,
}

/// A thread with queued work, as a consumer's sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedThread {
    /// The thread.
    pub thread_id: ThreadId,
    /// When its earliest `Queued` dispatch becomes claimable, unix millis.
    pub available_at: u64,
}

/// A dispatch held under a claim, as a worker's sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldClaim {
    /// The dispatch's thread.
    pub thread_id: ThreadId,
    /// The claimed dispatch.
    pub dispatch_id: DispatchId,
    /// The claim's token (each claim gets a fresh one).
    pub claim_token: String,
    /// The consumer holding the claim.
    pub claimed_by: String,
    /// When the claim's lease ends, unix millis.
    pub lease_until: u64,
}

impl HeldClaim {
    /// The claim on `dispatch`, when it is `Claimed`.
    pub fn of(dispatch: &RunDispatch) -> Option<Self> {
        if dispatch.status != RunDispatchStatus::Claimed {
            return None;
        }
        Some(Self {
            thread_id: dispatch.thread_id.clone(),
            dispatch_id: dispatch.dispatch_id.clone(),
            claim_token: dispatch.claim_token.clone().unwrap_or_default(),
            claimed_by: dispatch.claimed_by.clone().unwrap_or_default(),
            lease_until: dispatch.lease_until.unwrap_or_default(),
        })
    }
}

/// Told of each thread whose mailbox got queued work (enqueue, retry, reclaim),
/// from any writer, as the store applies the change; answers `false` once it wants
/// no more calls.
///
/// It runs inside the store's write path, so it hands the thread on (a worker
/// starts a claim task) and never blocks or calls back into the store; the store
/// needs no queue between writer and consumer, and a consumer on the writer's
/// node hears of new work with no task hop. Consumers also sweep with
/// [`MailboxStore::queued_threads`].
#[derive(Clone)]
pub struct QueueWatch(std::sync::Arc<dyn Fn(&ThreadId) -> bool + Send + Sync>);

impl QueueWatch {
    /// A watch calling `heard` with each thread that got queued work.
    pub fn new(heard: impl Fn(&ThreadId) -> bool + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(heard))
    }

    /// Tells the watch of `thread_id`; `false` once it wants no more calls.
    pub fn notify(&self, thread_id: &ThreadId) -> bool {
        (self.0)(thread_id)
    }
}

impl std::fmt::Debug for QueueWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueWatch")
    }
}

/// The watches a mailbox store tells of queued work: every store keeps its
/// subscribers here, so they are told (and closed ones forgotten) the same way.
#[derive(Debug, Default)]
pub struct QueueWatchers(std::sync::Mutex<Vec<QueueWatch>>);

impl QueueWatchers {
    /// Adds a watch.
    pub fn subscribe(&self, watch: QueueWatch) {
        self.lock().push(watch);
    }

    /// Tells every watch that `threads` got queued work; forgets closed ones.
    pub fn notify<'a>(&self, threads: impl IntoIterator<Item = &'a ThreadId>) {
        let mut watches = self.lock();
        if watches.is_empty() {
            return;
        }
        for thread_id in threads {
            watches.retain(|watch| watch.notify(thread_id));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<QueueWatch>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The persistent queue of run activations (seed 000, `MailboxStore`).
///
/// Guarantees every implementation gives (the conformance suite checks them): a
/// successful enqueue is durable; a claim has exactly one winner; ack, nack and
/// dead-letter validate the claim token; an interrupt bumps the epoch and supersedes
/// queued work atomically.
#[async_trait]
pub trait MailboxStore: Send + Sync + 'static {
    /// Stores `dispatch` as `Queued` under the thread's current dispatch epoch and
    /// returns it as stored. `max_attempts` of 0 takes the configured default.
    /// `Duplicate` when a retained dispatch has the same id or dedupe key.
    async fn enqueue(
        &self,
        dispatch: RunDispatch,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError>;

    /// Claims up to `limit` of the thread's claimable dispatches (`Queued`, available
    /// by `now_ms`), highest priority first (0 is highest), then in enqueue order.
    /// Each gets a fresh claim token, `claimed_by = consumer`, a lease of `lease_ms`,
    /// and one more attempt.
    async fn claim(
        &self,
        thread_id: &ThreadId,
        consumer: &str,
        limit: usize,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<RunDispatch>, MailboxError>;

    /// Claims one specific dispatch (inline streaming); `WrongState` unless it is
    /// `Queued` and available.
    async fn claim_dispatch(
        &self,
        dispatch_id: &DispatchId,
        consumer: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError>;

    /// Closes the queue lifecycle of a claimed dispatch (`Acked`).
    async fn ack(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError>;

    /// Gives a claimed dispatch back for a retry after the configured exponential
    /// back-off, or dead-letters it when its attempts are used up.
    async fn nack(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError>;

    /// Fails a claimed dispatch permanently (`DeadLetter`, kept and listable).
    async fn dead_letter(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError>;

    /// Cancels a `Queued` dispatch.
    async fn cancel(
        &self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError>;

    /// Extends the lease of a claimed dispatch to `now_ms + lease_ms`.
    async fn extend_lease(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError>;

    /// Bumps the thread's dispatch epoch, supersedes its queued dispatches, and
    /// returns its claimed dispatch (if any) so the caller cancels that run.
    async fn interrupt(
        &self,
        thread_id: &ThreadId,
        now_ms: u64,
    ) -> Result<MailboxInterrupt, MailboxError>;

    /// Supersedes a claimed dispatch that a newer epoch replaced.
    async fn supersede_claimed(
        &self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError>;

    /// Projection: the run behind the dispatch started (`run_status = Running`).
    async fn record_dispatch_start(
        &self,
        dispatch_id: &DispatchId,
        dispatch_instance_id: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError>;

    /// Projection: the compact run result. Does not touch the queue lifecycle.
    async fn record_run_result(
        &self,
        dispatch_id: &DispatchId,
        result: RunDispatchResult,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError>;

    /// Ends a delivery whose run finished or waits: records the run's result and
    /// acks, in one write where the store can. The answer is the ack's: a refused
    /// ack (the claim is no longer this caller's) leaves the dispatch claimed, and
    /// a result that cannot be recorded (a projection) is logged, not a failure.
    async fn complete(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        result: RunDispatchResult,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        if let Err(error) = self.record_run_result(dispatch_id, result, now_ms).await {
            tracing::warn!(%dispatch_id, %error, "recording the run result failed");
        }
        self.ack(dispatch_id, claim_token, now_ms).await
    }

    /// The dispatch, if retained.
    async fn load_dispatch(
        &self,
        dispatch_id: &DispatchId,
    ) -> Result<Option<RunDispatch>, MailboxError>;

    /// A page of dispatches matching `query`, in enqueue order.
    async fn list_dispatches(&self, query: &DispatchQuery) -> Result<DispatchPage, MailboxError>;

    /// Gives claimed dispatches whose lease ended by `now_ms` back to the queue
    /// (counted as a failed attempt: dead-lettered when attempts are used up) and
    /// returns them as they are now.
    async fn reclaim_expired_leases(&self, now_ms: u64) -> Result<Vec<RunDispatch>, MailboxError>;

    /// Every `Claimed` dispatch, so a worker can give back the claims of a consumer
    /// that is gone (with [`Self::nack`] and the claim's token) without waiting for
    /// their leases.
    async fn claims(&self) -> Result<Vec<HeldClaim>, MailboxError>;

    /// Every thread holding a `Queued` dispatch, with the earliest time one of them
    /// becomes claimable.
    async fn queued_threads(&self) -> Result<Vec<QueuedThread>, MailboxError>;

    /// Starts watching for threads that get queued work.
    async fn watch_queued(&self, watch: QueueWatch) -> Result<(), MailboxError>;

    /// Purges terminal dispatches last updated `gc_ttl` or longer before `now_ms`;
    /// returns how many. Their dedupe keys become free again.
    async fn gc(&self, now_ms: u64) -> Result<usize, MailboxError>;

    /// What this node holds of settled dispatches (kept whole, and marks), for
    /// the memory budget's settled share (decision 0089).
    fn settled_bytes(&self) -> u64;
}
