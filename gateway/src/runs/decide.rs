//! Decisions and cancellations, sent to the thread's owner: one decision
//! answered once applied, the decisions that resume a waiting run followed as
//! the run's events, and cancelling the active or queued run.

use std::time::Duration;

use awaken_actors::backoff::Backoff;
use awaken_actors::clock::now_ms;
use awaken_actors::contract::{RunDispatchStatus, RunRecord};
use awaken_actors::telemetry::{DecisionOutcome, DecisionSource};
use awaken_actors::thread::ControlError;
use awaken_actors::{RunId, ThreadId};
use awaken_cluster::decisions::{Decision, DecisionPayload, Delivery};
use awaken_cluster::routing::{CallOutcome, ThreadCall};

use super::RunService;
use super::stream::RunEvents;
use crate::server::error::ApiError;

/// How long a cancel waits for a run whose dispatch was just claimed to become
/// active on its thread, so the cancel reaches it (claim and activation are two
/// steps; between them the run is neither queued nor active).
const STARTING_WAIT: Duration = Duration::from_secs(2);

/// The first pause before a decision the owner asked to retry is sent again.
const DECIDE_RETRY_PAUSE: Duration = Duration::from_millis(50);

impl RunService {
    /// Reads a decision body for `thread_id` (optionally pinned to `run_id`) and hands
    /// it to the thread's owner; answers once it is applied and the run it resumed has
    /// stopped or waits again, so an answered decision is never lost.
    pub(crate) async fn decide(
        &self,
        thread_id: &ThreadId,
        run_id: Option<&RunId>,
        mut payload: DecisionPayload,
    ) -> Result<serde_json::Value, ApiError> {
        if let Some(run_id) = run_id {
            match &payload.run_id {
                Some(named) if named != run_id.as_str() => {
                    return Err(ApiError::BadRequest(format!(
                        "the body names run `{named}` but the path names `{run_id}`"
                    )));
                }
                _ => payload.run_id = Some(run_id.to_string()),
            }
        }
        let metrics = self.control.runtime().metrics();
        let mut decision = match payload.into_decision(thread_id.clone(), now_ms()) {
            Ok(decision) => decision,
            Err(error) => {
                metrics.decision(DecisionSource::Http, DecisionOutcome::Rejected);
                return Err(ApiError::BadRequest(error));
            }
        };
        decision.resume.trace = crate::server::trace::incoming();
        let (outcome, retried) = self.deliver(decision).await?;
        match outcome {
            // Asked again after its thread moved mid-run, the decision this
            // request applied the first time comes back as a duplicate of itself.
            CallOutcome::Delivered(Delivery::Applied { duplicate }) => {
                let duplicate = duplicate && !retried;
                let outcome = if duplicate {
                    DecisionOutcome::Duplicate
                } else {
                    DecisionOutcome::Applied
                };
                metrics.decision(DecisionSource::Http, outcome);
                Ok(serde_json::json!({
                    "status": "decision_applied",
                    "duplicate": duplicate,
                }))
            }
            CallOutcome::Delivered(Delivery::Refused(reason)) => {
                metrics.decision(DecisionSource::Http, DecisionOutcome::Rejected);
                Err(ApiError::Conflict(reason))
            }
            CallOutcome::Delivered(Delivery::Retry(reason)) => Err(ApiError::Unavailable(reason)),
            CallOutcome::Failed(refused) => {
                metrics.decision(DecisionSource::Http, DecisionOutcome::Rejected);
                Err(refused.into())
            }
            other => Err(unexpected("decide", &other)),
        }
    }

    /// Hands `decision` to its thread's owner, again while the owner answers
    /// "try again" (its thread changing hands, the run it resumed cut off
    /// before it stopped), for up to the backend wait: the outcome, and whether
    /// it was sent more than once.
    async fn deliver(&self, decision: Decision) -> Result<(CallOutcome, bool), ApiError> {
        let started = tokio::time::Instant::now();
        let mut backoff = Backoff::new(DECIDE_RETRY_PAUSE, DECIDE_RETRY_PAUSE * 10);
        let mut retried = false;
        loop {
            let answer = self
                .control
                .call(ThreadCall::Decide {
                    decision: decision.clone(),
                })
                .await?;
            let CallOutcome::Delivered(Delivery::Retry(reason)) = &answer.outcome else {
                return Ok((answer.outcome, retried));
            };
            let pause = backoff.next_pause();
            if started.elapsed() + pause >= self.backend_wait {
                return Ok((answer.outcome, retried));
            }
            tracing::debug!(%reason, "decision handed over again");
            retried = true;
            tokio::time::sleep(pause).await;
        }
    }

    /// Sends `decisions` for the waiting `run` and follows what they resume. The
    /// decisions must answer every open ticket of the run (400 otherwise), so the run
    /// does resume. A refused decision is an error response as long as no event was
    /// streamed; once the run resumed, the stream carries what happens.
    pub(crate) async fn resume_followed(
        &self,
        run: &RunRecord,
        decisions: Vec<DecisionPayload>,
    ) -> Result<RunEvents, ApiError> {
        let open: Vec<&str> = run
            .waiting
            .iter()
            .flat_map(|waiting| waiting.tickets.iter())
            .map(|ticket| ticket.tool_call_id.as_str())
            .collect();
        if let Some(unknown) = decisions
            .iter()
            .find(|decision| !open.contains(&decision.call_id.as_str()))
        {
            return Err(ApiError::Conflict(format!(
                "tool call `{}` of run `{}` does not wait for a decision",
                unknown.call_id, run.run_id
            )));
        }
        let missing: Vec<&str> = open
            .iter()
            .copied()
            .filter(|call| !decisions.iter().any(|decision| decision.call_id == *call))
            .collect();
        if !missing.is_empty() {
            return Err(ApiError::BadRequest(format!(
                "answer every open request of run `{}`; unanswered tool calls: {}",
                run.run_id,
                missing.join(", ")
            )));
        }
        let (thread_id, run_id) = (run.thread_id.clone(), run.run_id.clone());
        let mut follow = self
            .control
            .follow(&thread_id, &run_id, None)
            .await?
            .skip_backlog();
        let after = follow.last_seq();
        let deciding = {
            let runs = self.clone();
            let (thread_id, run_id) = (thread_id.clone(), run_id.clone());
            tokio::spawn(async move {
                for decision in decisions {
                    if let Err(error) = runs.decide(&thread_id, Some(&run_id), decision).await {
                        tracing::warn!(%thread_id, %run_id, %error, "protocol decision not applied");
                        return Err(error);
                    }
                }
                Ok(())
            })
        };
        tokio::pin!(deciding);
        tokio::select! {
            first = follow.next() => match first {
                Some(event) => Ok(RunEvents::taken(event, follow)),
                None => Err(ApiError::Unavailable("the run's event stream closed".into())),
            },
            decided = &mut deciding => {
                decided.map_err(|error| ApiError::Internal(error.to_string()))??;
                // Applied, and what they resumed has stopped again: its events are in
                // the owner's buffer.
                let follow = self.control.follow(&thread_id, &run_id, after).await?.replay_only();
                Ok(RunEvents::from(follow))
            }
        }
    }

    /// Cancels the thread's active run (`run_id` pins which), or else its queued
    /// dispatches (only the one of `run_id` when given). A run whose dispatch is
    /// claimed but not yet active is waited for (at most [`STARTING_WAIT`]) and then
    /// cancelled. 409 when nothing matched.
    pub(crate) async fn cancel(
        &self,
        thread_id: &ThreadId,
        run_id: Option<&RunId>,
    ) -> Result<serde_json::Value, ApiError> {
        let deadline = tokio::time::Instant::now() + STARTING_WAIT;
        loop {
            if let Some(cancelled) = self.cancel_active(thread_id, run_id).await? {
                return Ok(serde_json::json!({"status": "cancel_requested", "run_id": cancelled}));
            }
            let cancelled = self.cancel_queued(thread_id, run_id).await?;
            if !cancelled.is_empty() {
                return Ok(serde_json::json!({"status": "cancel_requested", "run_ids": cancelled}));
            }
            let starting = self
                .dispatches(thread_id, RunDispatchStatus::Claimed)
                .await?
                .iter()
                .any(|dispatch| run_id.is_none_or(|run| *run == dispatch.run_id));
            if !starting || tokio::time::Instant::now() >= deadline {
                let what = run_id.map_or_else(
                    || format!("thread `{thread_id}` has no active or queued run"),
                    |run| format!("run `{run}` is neither active nor queued"),
                );
                return Err(ApiError::Conflict(what));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Cancels the thread's active run (`run_id` pins which); `None` when it has
    /// none (or another one).
    async fn cancel_active(
        &self,
        thread_id: &ThreadId,
        run_id: Option<&RunId>,
    ) -> Result<Option<RunId>, ApiError> {
        let answer = self
            .control
            .call(ThreadCall::Cancel {
                thread_id: thread_id.clone(),
                run_id: run_id.cloned(),
            })
            .await?;
        match answer.outcome {
            CallOutcome::Cancelled(run_id) => Ok(Some(run_id)),
            CallOutcome::Failed(
                ControlError::NoActiveRun { .. } | ControlError::RunNotActive { .. },
            ) => Ok(None),
            CallOutcome::Failed(refused) => Err(refused.into()),
            other => Err(unexpected("cancel", &other)),
        }
    }

    async fn cancel_queued(
        &self,
        thread_id: &ThreadId,
        run_id: Option<&RunId>,
    ) -> Result<Vec<RunId>, ApiError> {
        let mailbox = self.control.mailbox();
        let mut cancelled = Vec::new();
        for dispatch in self.queued_dispatches(thread_id).await? {
            if run_id.is_some_and(|run| *run != dispatch.run_id) {
                continue;
            }
            // Claimed meanwhile: the run is starting; the caller waits for it.
            if let Ok(dispatch) = mailbox.cancel(&dispatch.dispatch_id, now_ms()).await {
                cancelled.push(dispatch.run_id);
            }
        }
        Ok(cancelled)
    }
}

pub(crate) fn unexpected(call: &str, outcome: &CallOutcome) -> ApiError {
    ApiError::Internal(format!("unexpected answer to {call}: {outcome:?}"))
}
