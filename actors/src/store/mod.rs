#![doc = include_str!("README.md")]
//!
//! [`Thread`]: crate::contract::Thread
//! [`RunRecord`]: crate::contract::RunRecord
//! [`PersistedState`]: crate::state::PersistedState
//! [`StorageError::VersionConflict`]: crate::error::StorageError::VersionConflict
//! [`StorageError::Fenced`]: crate::error::StorageError::Fenced

use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::contract::{
    Approval, ApprovalChange, ApprovalEvent, ApprovalWrite, Message, RunRecord, RunStatus, Thread,
    ThreadMetadata,
};
use crate::error::StorageError;
use crate::ids::{AgentId, ApprovalId, RunId, ThreadId, WebhookId};
use crate::state::PersistedState;

mod approvals;
#[cfg(any(test, feature = "testsuite"))]
pub mod conformance;
mod file;
mod file_io;
mod file_webhooks;
mod memory;
mod memory_webhooks;
mod patient;
#[cfg(feature = "postgres")]
mod postgres;
mod timed;
mod webhooks;

pub use approvals::{ApprovalCursor, ApprovalPage, ApprovalQuery, BadCursor, THREAD_DELETED};
pub use file::FileStore;
pub use memory::InMemoryStore;
pub(crate) use patient::PatientStore;
#[cfg(all(feature = "postgres", any(test, feature = "testsuite")))]
pub use postgres::TestSchema;
#[cfg(feature = "postgres")]
pub use postgres::{PoolSettings, PostgresStore};
pub(crate) use timed::TimedStore;
pub use webhooks::{Webhook, WebhookAdvance, WebhookClaim, WebhookStore};

/// Largest page any listing returns; `limit`s are clamped to `1..=MAX_PAGE_LIMIT`.
pub const MAX_PAGE_LIMIT: usize = 200;

/// Page size used when a caller does not choose one.
pub const DEFAULT_PAGE_LIMIT: usize = 50;

/// Monotonic token proving the writer currently owns the thread (a shard lease
/// revision in a cluster; a constant on one node).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token every thread starts at; any writer may present it until a higher one is seen.
    pub const ZERO: FencingToken = FencingToken(0);
}

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One atomic write by the thread's owner: what a run step leaves behind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The thread written to (created if absent).
    pub thread_id: ThreadId,
    /// The writer's proof of ownership.
    pub fencing: FencingToken,
    /// Log length the writer believes the store has (optimistic check).
    pub expected_message_count: u64,
    /// Appended after those (append-only log).
    #[serde(default)]
    pub new_messages: Vec<Message>,
    /// Upserted by `run_id`; its `thread_id` must be the checkpoint's.
    pub run: RunRecord,
    /// The thread's persistent state keys, replaced whole.
    pub state: PersistedState,
    /// The metadata the thread is created with when this checkpoint creates it:
    /// a thread made for its first run is written with that run's first
    /// checkpoint (decision 0071). Ignored when the thread exists; absent, a
    /// created thread is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_thread: Option<Box<ThreadMetadata>>,
    /// The run's approvals this checkpoint asks for or resolves, written with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalWrite>,
}

/// Which slice of a thread's log to read; the HTTP history endpoint's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageQuery {
    /// Return messages after this `seq` (exclusive); `None` starts at the beginning.
    #[serde(default)]
    pub cursor: Option<u64>,
    /// Page size, clamped to `1..=200`.
    pub limit: usize,
    /// Whether [`Visibility::Internal`](crate::contract::Visibility) messages are returned.
    #[serde(default)]
    pub include_internal: bool,
}

impl Default for MessageQuery {
    fn default() -> Self {
        Self {
            cursor: None,
            limit: DEFAULT_PAGE_LIMIT,
            include_internal: false,
        }
    }
}

impl MessageQuery {
    /// The page size actually used: `limit` clamped to `1..=200`.
    pub fn effective_limit(&self) -> usize {
        clamp_limit(self.limit)
    }
}

/// One page of a thread's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagePage {
    /// The messages, in log order.
    pub messages: Vec<StoredMessage>,
    /// Pass as the next query's `cursor` to continue; `None` when nothing matching remains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<u64>,
}

/// A message with its position in the log, so clients can page and deduplicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    /// 1-based position in the log (counting internal messages too).
    pub seq: u64,
    /// The message.
    pub message: Message,
}

/// Which runs to list: the HTTP runs endpoint's filters and paging.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunQuery {
    /// Only runs of this thread.
    #[serde(default)]
    pub thread_id: Option<ThreadId>,
    /// Only runs in this status.
    #[serde(default)]
    pub status: Option<RunStatus>,
    /// Only runs of this agent.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
    /// Matching runs to skip.
    #[serde(default)]
    pub offset: usize,
    /// Page size, clamped to `1..=200`.
    pub limit: usize,
}

impl Default for RunQuery {
    fn default() -> Self {
        Self {
            thread_id: None,
            status: None,
            agent_id: None,
            offset: 0,
            limit: DEFAULT_PAGE_LIMIT,
        }
    }
}

impl RunQuery {
    /// The page size actually used: `limit` clamped to `1..=200`.
    pub fn effective_limit(&self) -> usize {
        clamp_limit(self.limit)
    }

    /// Whether `run` passes the filters (paging aside).
    pub fn matches(&self, run: &RunRecord) -> bool {
        self.thread_id
            .as_ref()
            .is_none_or(|id| *id == run.thread_id)
            && self.status.is_none_or(|status| status == run.status)
            && self.agent_id.as_ref().is_none_or(|id| *id == run.agent_id)
    }
}

/// One page of runs, ordered by `created_at` then run id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPage {
    /// The runs on this page.
    pub runs: Vec<RunRecord>,
    /// How many runs match the filters in all.
    pub total: usize,
}

/// A thread with what a thread list shows beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSummary {
    /// The thread.
    pub thread: Thread,
    /// Length of its log, internal messages included.
    pub message_count: u64,
    /// Its most recent run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_run: Option<RunRecord>,
}

/// Everything needed to rehydrate a thread actor, read in one consistent call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSnapshot {
    /// The thread.
    pub thread: Thread,
    /// The whole log, internal messages included.
    pub messages: Vec<Message>,
    /// The state of the last checkpoint; `None` before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<PersistedState>,
    /// The most recent run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_run: Option<RunRecord>,
    /// The highest fencing token the thread has seen; a new owner writes with one at least as high.
    pub fence: FencingToken,
}

/// Persistence of threads, their message logs, runs and persistent state.
///
/// Every implementation passes the `conformance` suite (feature `testsuite`). Errors: unknown
/// ids give `Ok(None)` from `load_*`/`latest_run` and [`StorageError::NotFound`] from
/// operations that need the record; duplicates give [`StorageError::AlreadyExists`].
#[async_trait]
pub trait ThreadRunStore: Send + Sync + 'static {
    /// Stores a new thread, filling missing timestamps; `AlreadyExists` on a duplicate id.
    async fn create_thread(&self, thread: &Thread) -> Result<(), StorageError>;

    /// The thread, if it exists.
    async fn load_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StorageError>;

    /// Replaces the thread's metadata (keeping `created_at` when the new one has none,
    /// stamping `updated_at`); `NotFound` for an unknown thread.
    async fn update_thread_metadata(
        &self,
        id: &ThreadId,
        metadata: ThreadMetadata,
    ) -> Result<(), StorageError>;

    /// Deletes the thread with its messages, runs, state, fence and its runs'
    /// webhooks; `NotFound` for an unknown thread. Its open approvals are
    /// cancelled (`thread_deleted`) and kept: the changes are returned, and owed
    /// to the feed like a checkpoint's.
    async fn delete_thread(&self, id: &ThreadId) -> Result<Vec<ApprovalChange>, StorageError>;

    /// Thread ids in creation order, skipping `offset` and returning at most `limit`.
    async fn list_threads(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadId>, StorageError>;

    /// Like [`list_threads`](Self::list_threads), with each thread's message count and latest run.
    async fn list_thread_summaries(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadSummary>, StorageError>;

    /// One page of the thread's log; `NotFound` for an unknown thread.
    async fn load_messages(
        &self,
        id: &ThreadId,
        query: &MessageQuery,
    ) -> Result<MessagePage, StorageError>;

    /// Thread, log, state, latest run and fence, read consistently; `None` for an unknown thread.
    async fn load_thread_snapshot(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadSnapshot>, StorageError>;

    /// Stores a new run of an existing thread; `AlreadyExists` on a duplicate run id,
    /// `NotFound` when the thread does not exist.
    async fn create_run(&self, record: &RunRecord) -> Result<(), StorageError>;

    /// The run, if it exists.
    async fn load_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StorageError>;

    /// The thread's current run: its unfinished (running or waiting) run if it has
    /// one, else the run with the greatest `created_at`, ties broken by the greater
    /// run id. `created_at` is in seconds and run ids are chosen by submitters, so
    /// among runs accepted within one second their order is not the order the
    /// thread took them in; the unfinished one (a thread has at most one, as new
    /// input ends the run before it) is the one the thread is on.
    async fn latest_run(&self, thread_id: &ThreadId) -> Result<Option<RunRecord>, StorageError>;

    /// Runs matching the query's filters, by `created_at` then run id, with the total count.
    async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StorageError>;

    /// Atomic: messages appended + run upserted + state replaced, or nothing. Creates the thread if absent.
    ///
    /// Refuses (changing nothing) a token lower than the highest the thread has seen:
    /// [`StorageError::Fenced`]; a token `>=` current is accepted and becomes current.
    /// Refuses a wrong `expected_message_count`: [`StorageError::VersionConflict`]. A run
    /// whose `thread_id` is not the checkpoint's is [`StorageError::InvalidInput`]; a run id
    /// that belongs to another thread is [`StorageError::AlreadyExists`].
    ///
    /// Returns the approval changes it made ([`Checkpoint::approvals`] that
    /// applied), each also owed to the feed until [`Self::approvals_published`].
    async fn checkpoint(&self, checkpoint: Checkpoint)
    -> Result<Vec<ApprovalChange>, StorageError>;

    /// Raises the thread's fence without writing (a new owner calls this when it takes
    /// over, so the old owner's writes are refused from then on). Lower tokens are refused
    /// with `Fenced`. An unknown thread is created empty, so the fence holds even before
    /// its first checkpoint.
    async fn fence(&self, id: &ThreadId, token: FencingToken) -> Result<(), StorageError>;

    /// [`Self::fence`], then [`Self::load_thread_snapshot`]: what a new owner does
    /// when it takes a thread over. The snapshot is read after the fence holds (so
    /// it has every checkpoint the old owner got in), and the thread exists by then.
    /// A store that can do both in one trip to its database overrides this.
    async fn fence_and_load(
        &self,
        id: &ThreadId,
        token: FencingToken,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        self.fence(id, token).await?;
        self.load_thread_snapshot(id).await
    }

    /// The approval `id`, from any thread, resolved or not.
    async fn load_approval(&self, id: &ApprovalId) -> Result<Option<Approval>, StorageError>;

    /// One page of approvals, oldest request first, as `query` filters them.
    async fn list_approvals(&self, query: &ApprovalQuery) -> Result<ApprovalPage, StorageError>;

    /// Up to `limit` approval changes the feed is owed that are at least
    /// `older_than` old (a feed that announced them itself is given that long to
    /// publish them), oldest request first: what a feed catches up with after a
    /// crash or an outage between a change and its publication.
    async fn unpublished_approvals(
        &self,
        older_than: std::time::Duration,
        limit: usize,
    ) -> Result<Vec<ApprovalChange>, StorageError>;

    /// Records that the feed published these changes, so they are not owed any more.
    async fn approvals_published(
        &self,
        published: &[(ApprovalId, ApprovalEvent)],
    ) -> Result<(), StorageError>;

    /// The webhooks on this store's runs.
    fn webhooks(&self) -> &dyn WebhookStore;

    /// What this store has sent to its database so far, for benchmarks and
    /// metrics; `None` for a store without one (memory, files).
    fn io_counts(&self) -> Option<StoreIoCounts> {
        None
    }

    /// The runs waiting for a human decision, store-wide: the node's approvals
    /// gauge. Pages through [`Self::list_runs`]; a store that can count in its
    /// database overrides this.
    async fn waiting_runs(&self) -> Result<WaitingRuns, StorageError> {
        let mut waiting = WaitingRuns::default();
        let mut query = RunQuery {
            status: Some(RunStatus::Waiting),
            limit: MAX_PAGE_LIMIT,
            ..RunQuery::default()
        };
        loop {
            let page = self.list_runs(&query).await?;
            for run in &page.runs {
                waiting.count += 1;
                waiting.since_secs = Some(
                    waiting
                        .since_secs
                        .map_or(run.updated_at, |oldest| oldest.min(run.updated_at)),
                );
            }
            query.offset += page.runs.len();
            if page.runs.is_empty() || query.offset >= page.total {
                return Ok(waiting);
            }
        }
    }
}

/// What [`ThreadRunStore::waiting_runs`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitingRuns {
    /// Runs in status `waiting`.
    pub count: u64,
    /// When the longest-waiting of them last changed (its suspension), unix
    /// seconds like the run records; `None` when none waits.
    pub since_secs: Option<u64>,
}

/// Totals of a database-backed store's traffic since it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoreIoCounts {
    /// Checkpoints written or refused.
    pub checkpoints: u64,
    /// Statements sent and answered, `BEGIN`/`COMMIT`/`ROLLBACK` included.
    pub statements: u64,
    /// Waits for the server: the statements plus pings of idle connections (the
    /// one extra round trip in which a connection first prepares a statement is
    /// not counted).
    pub round_trips: u64,
}

/// `limit` clamped to `1..=MAX_PAGE_LIMIT`, as the HTTP API documents.
pub fn clamp_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_PAGE_LIMIT)
}

/// Unix milliseconds now, for thread timestamps.
pub(crate) fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `duration` in whole milliseconds, saturating.
pub(crate) fn duration_ms(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A thread as a store saves it on creation: timestamps filled in when missing.
pub(crate) fn stamped_new_thread(thread: &Thread, now: u64) -> Thread {
    let mut thread = thread.clone();
    let created = *thread.metadata.created_at.get_or_insert(now);
    thread.metadata.updated_at.get_or_insert(created);
    thread
}

/// The thread `checkpoint` creates when its thread is absent.
pub(crate) fn checkpointed_thread(checkpoint: &Checkpoint, now: u64) -> Thread {
    match &checkpoint.new_thread {
        Some(metadata) => stamped_new_thread(
            &Thread {
                id: checkpoint.thread_id.clone(),
                metadata: ThreadMetadata::clone(metadata),
            },
            now,
        ),
        None => implicit_thread(&checkpoint.thread_id, now),
    }
}

/// An empty thread, as `checkpoint` and `fence` create it.
pub(crate) fn implicit_thread(id: &ThreadId, now: u64) -> Thread {
    stamped_new_thread(&Thread::with_id(id.clone()), now)
}

/// `metadata` as stored by `update_thread_metadata`: creation time kept, update time stamped.
pub(crate) fn updated_metadata(
    old: &ThreadMetadata,
    mut metadata: ThreadMetadata,
    now: u64,
) -> ThreadMetadata {
    if metadata.created_at.is_none() {
        metadata.created_at = old.created_at;
    }
    metadata.updated_at = Some(now);
    metadata
}

/// The order runs are listed in; a thread's latest run is the greatest of its
/// unfinished runs, else of all (see [`ThreadRunStore::latest_run`]).
pub(crate) fn run_order_key(run: &RunRecord) -> (u64, &RunId) {
    (run.created_at, &run.run_id)
}

/// The fence and count checks every store runs before a checkpoint writes anything.
pub(crate) fn check_checkpoint(
    checkpoint: &Checkpoint,
    current_fence: FencingToken,
    message_count: u64,
) -> Result<(), StorageError> {
    check_run_thread(&checkpoint.run, &checkpoint.thread_id)?;
    check_fence(checkpoint.fencing, current_fence)?;
    if checkpoint.expected_message_count != message_count {
        return Err(StorageError::VersionConflict {
            expected: checkpoint.expected_message_count,
            actual: message_count,
        });
    }
    Ok(())
}

/// `Fenced` unless `presented` is at least `current`.
pub(crate) fn check_fence(
    presented: FencingToken,
    current: FencingToken,
) -> Result<(), StorageError> {
    if presented < current {
        return Err(StorageError::Fenced {
            presented: presented.0,
            current: current.0,
        });
    }
    Ok(())
}

/// `InvalidInput` unless the run belongs to `thread_id`.
pub(crate) fn check_run_thread(run: &RunRecord, thread_id: &ThreadId) -> Result<(), StorageError> {
    if run.thread_id != *thread_id {
        return Err(StorageError::InvalidInput(format!(
            "run `{}` belongs to thread `{}`, not `{thread_id}`",
            run.run_id, run.thread_id
        )));
    }
    Ok(())
}

/// `AlreadyExists` naming a run id that another thread owns.
pub(crate) fn run_owned_elsewhere(run_id: &RunId, owner: &ThreadId) -> StorageError {
    StorageError::AlreadyExists(format!("run `{run_id}` belongs to thread `{owner}`"))
}

/// The order webhooks are claimed in: oldest first, then by id, then by run id (a
/// run's webhooks list in this order too).
pub(crate) fn webhook_order_key(webhook: &Webhook) -> (u64, &WebhookId, &RunId) {
    (webhook.created_at, &webhook.id, &webhook.run_id)
}

/// `InvalidInput` refusing a new webhook on a run that has `max_per_run` already.
pub(crate) fn too_many_webhooks(run_id: &RunId, max_per_run: usize) -> StorageError {
    StorageError::InvalidInput(format!(
        "run `{run_id}` has {max_per_run} webhooks already, the most it may have"
    ))
}

/// `NotFound` naming a thread.
pub(crate) fn thread_not_found(id: &ThreadId) -> StorageError {
    StorageError::NotFound(format!("thread `{id}`"))
}

/// One page of `log` (the whole log, in order) as `query` asks for it.
pub(crate) fn page_of<'a, I>(log: I, query: &MessageQuery) -> MessagePage
where
    I: IntoIterator<Item = &'a Message>,
{
    let limit = query.effective_limit();
    let start = query.cursor.unwrap_or(0);
    let mut matching = log
        .into_iter()
        .zip(1u64..)
        .skip(usize::try_from(start).unwrap_or(usize::MAX))
        .filter(|(message, _)| query.include_internal || !message.is_internal());
    let messages: Vec<StoredMessage> = matching
        .by_ref()
        .take(limit)
        .map(|(message, seq)| StoredMessage {
            seq,
            message: message.clone(),
        })
        .collect();
    let next_cursor = match (messages.last(), matching.next()) {
        (Some(last), Some(_)) => Some(last.seq),
        _ => None,
    };
    MessagePage {
        messages,
        next_cursor,
    }
}

/// One page of `runs` (any order) as `query` asks for it.
pub(crate) fn page_runs(mut runs: Vec<RunRecord>, query: &RunQuery) -> RunPage {
    runs.retain(|run| query.matches(run));
    runs.sort_by(|a, b| run_order_key(a).cmp(&run_order_key(b)));
    let total = runs.len();
    let runs = runs
        .into_iter()
        .skip(query.offset)
        .take(query.effective_limit())
        .collect();
    RunPage { runs, total }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Visibility;

    fn log(internal: &[bool]) -> Vec<Message> {
        internal
            .iter()
            .enumerate()
            .map(|(i, &internal)| {
                let visibility = if internal {
                    Visibility::Internal
                } else {
                    Visibility::All
                };
                Message::user(format!("m{}", i + 1)).with_visibility(visibility)
            })
            .collect()
    }

    fn seqs(page: &MessagePage) -> Vec<u64> {
        page.messages.iter().map(|m| m.seq).collect()
    }

    #[test]
    fn limits_clamp_to_one_through_two_hundred() {
        assert_eq!(clamp_limit(0), 1);
        assert_eq!(clamp_limit(7), 7);
        assert_eq!(clamp_limit(10_000), MAX_PAGE_LIMIT);
        assert_eq!(
            MessageQuery::default().effective_limit(),
            DEFAULT_PAGE_LIMIT
        );
    }

    #[test]
    fn pages_follow_the_cursor() {
        let log = log(&[false; 5]);
        let mut query = MessageQuery {
            limit: 2,
            ..MessageQuery::default()
        };
        let first = page_of(&log, &query);
        assert_eq!((seqs(&first), first.next_cursor), (vec![1, 2], Some(2)));
        query.cursor = first.next_cursor;
        let second = page_of(&log, &query);
        assert_eq!((seqs(&second), second.next_cursor), (vec![3, 4], Some(4)));
        query.cursor = second.next_cursor;
        let last = page_of(&log, &query);
        assert_eq!((seqs(&last), last.next_cursor), (vec![5], None));
        query.cursor = Some(99);
        assert!(page_of(&log, &query).messages.is_empty());
    }

    #[test]
    fn hidden_messages_keep_their_seq_and_do_not_extend_pages() {
        let log = log(&[false, true, false, true]);
        let query = MessageQuery {
            limit: 2,
            ..MessageQuery::default()
        };
        let page = page_of(&log, &query);
        assert_eq!((seqs(&page), page.next_cursor), (vec![1, 3], None));
        let all = page_of(
            &log,
            &MessageQuery {
                include_internal: true,
                ..query
            },
        );
        assert_eq!((seqs(&all), all.next_cursor), (vec![1, 2], Some(2)));
    }

    #[test]
    fn fence_and_count_checks() {
        assert!(check_fence(FencingToken(2), FencingToken(2)).is_ok());
        assert!(check_fence(FencingToken(3), FencingToken(2)).is_ok());
        assert_eq!(
            check_fence(FencingToken(1), FencingToken(2)),
            Err(StorageError::Fenced {
                presented: 1,
                current: 2
            })
        );
        assert_eq!(
            serde_json::to_string(&FencingToken(9)).unwrap(),
            "9",
            "transparent"
        );
    }

    #[test]
    fn metadata_updates_keep_creation_time() {
        let old = ThreadMetadata {
            created_at: Some(5),
            ..ThreadMetadata::default()
        };
        let new = updated_metadata(&old, ThreadMetadata::default(), 9);
        assert_eq!((new.created_at, new.updated_at), (Some(5), Some(9)));
        let thread = stamped_new_thread(&Thread::with_id(ThreadId::new("t").unwrap()), 3);
        assert_eq!(
            (thread.metadata.created_at, thread.metadata.updated_at),
            (Some(3), Some(3))
        );
    }
}
