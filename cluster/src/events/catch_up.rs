//! What a follow over NATS does when it may have missed events.
//!
//! Run events go out on core NATS, at most once: a message in flight when a
//! server restarts, or published while its sender reconnects, is gone. A
//! follower notices (a gap in `seq`, or a quiet stream) and asks the run's
//! owner for what it missed; when the owner no longer knows the run (its buffer
//! was evicted, or the thread moved), the run's record in the store says how
//! the activation ended.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use awaken_actors::contract::{
    AgentEvent, Role, RunRecord, RunStatus, StreamEvent, TerminationReason,
};
use awaken_actors::store::ThreadRunStore;
use awaken_actors::{RunId, ThreadId};
use serde_json::json;

use crate::routing::{CallOutcome, RouteError, ThreadCall, ThreadRouter};

/// How long a followed run may be silent before its owner is asked whether
/// anything was missed: a lost `RunFinish` ends the stream within about this
/// long of the run's end. Model calls and tools are often quieter than this; a
/// probe is one small request to the owner, answered from memory.
pub(super) const QUIET_PROBE: Duration = Duration::from_secs(2);

/// How long a catch-up waits for the thread's owner to answer (or for the
/// thread to have one) before it reads the run's record instead: a stream whose
/// run ended while its shard moves ends within a probe and this.
const OWNER_WAIT: Duration = Duration::from_millis(1500);

/// Where a follow over NATS refills what the subscription did not deliver.
pub(super) struct CatchUp {
    router: ThreadRouter,
    store: Arc<dyn ThreadRunStore>,
    thread_id: ThreadId,
    run_id: RunId,
}

/// What a catch-up found.
#[derive(Debug)]
pub(super) struct Missed {
    /// Events after the asked `seq`, in order (possibly none).
    pub events: Vec<Arc<StreamEvent>>,
    /// False when some events after the asked `seq` are gone for good.
    pub complete: bool,
}

impl std::fmt::Debug for CatchUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUp")
            .field("thread_id", &self.thread_id)
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl CatchUp {
    pub(super) fn new(
        router: ThreadRouter,
        store: Arc<dyn ThreadRunStore>,
        thread_id: ThreadId,
        run_id: RunId,
    ) -> Self {
        Self {
            router,
            store,
            thread_id,
            run_id,
        }
    }

    /// The events after `after_seq` the owner still buffers; when it does not
    /// know the run, or the thread has no owner to ask within
    /// [`OWNER_WAIT`] (its shard changing hands), the `RunFinish` the stored
    /// record implies, if the run is no longer executing.
    pub(super) async fn missed(&self, after_seq: Option<u64>) -> Result<Missed, RouteError> {
        let asked = self
            .router
            .call_within(
                ThreadCall::Replay {
                    thread_id: self.thread_id.clone(),
                    run_id: self.run_id.clone(),
                    after_seq,
                },
                OWNER_WAIT,
            )
            .await;
        let answer = match asked {
            Ok(answer) => answer,
            Err(error @ (RouteError::NoOwner { .. } | RouteError::OwnerSilent { .. })) => {
                tracing::debug!(%error, run_id = %self.run_id, "no owner to ask; reading the run's record");
                return self.recorded(after_seq).await;
            }
            Err(error) => return Err(error),
        };
        let complete = replayed(answer.outcome)?;
        // A buffer that knows the run answers `complete` with nothing new while
        // the run is still at work; an unknown run is empty and incomplete.
        if complete || !answer.events.is_empty() {
            return Ok(Missed {
                events: answer.events,
                complete,
            });
        }
        self.recorded(after_seq).await
    }

    /// What the run's record says was missed: its end, if it is not executing.
    async fn recorded(&self, after_seq: Option<u64>) -> Result<Missed, RouteError> {
        let ended = self
            .recorded_end(after_seq)
            .await
            .map_err(|e| RouteError::Transport(e.to_string()))?;
        Ok(Missed {
            events: ended.into_iter().collect(),
            complete: false,
        })
    }

    /// The activation's end as the store recorded it, numbered after
    /// `after_seq`; `None` while the record says the run executes (or there is
    /// none yet: the run is still queued).
    async fn recorded_end(
        &self,
        after_seq: Option<u64>,
    ) -> Result<Option<Arc<StreamEvent>>, awaken_actors::StorageError> {
        let Some(record) = self.store.load_run(&self.run_id).await? else {
            return Ok(None);
        };
        let result = match record.status {
            RunStatus::Running => return Ok(None),
            RunStatus::Waiting => None,
            RunStatus::Done => Some(json!({ "response": self.last_response().await? })),
        };
        let finish = AgentEvent::RunFinish {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            result,
            termination: termination(&record),
        };
        let seq = after_seq.map_or(0, |seq| seq.saturating_add(1));
        tracing::debug!(run_id = %self.run_id, seq, "run's end read from its record");
        Ok(Some(Arc::new(StreamEvent::new(
            seq,
            timestamp(record.updated_at),
            finish,
        ))))
    }

    /// The text of the thread's last assistant message: what a finished run's
    /// `RunFinish` reports as its response.
    async fn last_response(&self) -> Result<String, awaken_actors::StorageError> {
        let snapshot = self.store.load_thread_snapshot(&self.thread_id).await?;
        Ok(snapshot
            .and_then(|snapshot| {
                snapshot
                    .messages
                    .iter()
                    .rev()
                    .find(|message| message.role == Role::Assistant)
                    .map(|message| message.text())
            })
            .unwrap_or_default())
    }
}

/// Whether a `Replay` answer says it sent every event asked for; an error for
/// any other answer.
pub(super) fn replayed(outcome: CallOutcome) -> Result<bool, RouteError> {
    match outcome {
        CallOutcome::Replayed { complete } => Ok(complete),
        CallOutcome::Malformed(error) => Err(RouteError::Malformed(error)),
        other => Err(RouteError::Unexpected {
            call: "replay",
            outcome: Box::new(other),
        }),
    }
}

/// Why the recorded activation ended: a waiting run is suspended; a finished
/// one says why (a record without the reason was written before it was kept).
fn termination(record: &RunRecord) -> TerminationReason {
    match (&record.status, &record.termination) {
        (RunStatus::Waiting, _) => TerminationReason::Suspended,
        (_, Some(reason)) => reason.clone(),
        (_, None) => TerminationReason::NaturalEnd,
    }
}

fn timestamp(unix_secs: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_secs(unix_secs)).to_string()
}
