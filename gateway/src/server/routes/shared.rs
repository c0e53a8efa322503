//! Steps several routes share: checking ids, accepting runs, sending decisions and
//! cancellations to a thread's owner.

use std::time::Duration;

use awaken_actors::clock::now_ms;
use awaken_actors::contract::{RunDispatch, RunDispatchStatus, Thread};
use awaken_actors::mailbox::{DispatchQuery, SubmitOptions};
use awaken_actors::telemetry::{DecisionOutcome, DecisionSource};
use awaken_actors::thread::{ControlError, RunRequest};
use awaken_actors::{AgentId, RunId, ThreadId};
use awaken_cluster::decisions::{DecisionPayload, Delivery};
use awaken_cluster::routing::{CallOutcome, ThreadCall};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::input::{InputBody, user_messages};
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::state::AppState;

/// The agent a run on `thread_id` will use: the requested one (404 unless it is
/// registered), else the thread's previous one, else the default agent; 400 when
/// there is none, rather than accepting a run that can never start.
pub(crate) async fn check_agent(
    state: &AppState,
    requested: Option<&AgentId>,
    thread_id: Option<&ThreadId>,
) -> Result<AgentId, ApiError> {
    let runtime = state.control.runtime();
    if let Some(agent) = requested {
        if !runtime.registries().agents.contains(agent.as_str()) {
            return Err(ApiError::NotFound(format!("unknown agent `{agent}`")));
        }
        return Ok(agent.clone());
    }
    if let Some(thread_id) = thread_id
        && let Some(run) = state.control.store().latest_run(thread_id).await?
    {
        return Ok(run.agent_id);
    }
    runtime.default_agent().cloned().ok_or_else(|| {
        let registries = runtime.registries();
        let known: Vec<&str> = registries.agents.ids().collect();
        ApiError::BadRequest(format!(
            "no agent: name one in `agentId` (known: {})",
            known.join(", ")
        ))
    })
}

/// The thread: 404 unless it exists and the caller may touch it.
pub(crate) async fn check_thread(
    state: &AppState,
    caller: &Caller,
    thread_id: &ThreadId,
) -> Result<Thread, ApiError> {
    match state.control.store().load_thread(thread_id).await? {
        Some(thread) => {
            caller.authorize(&thread)?;
            Ok(thread)
        }
        None => Err(ApiError::NotFound(format!("unknown thread `{thread_id}`"))),
    }
}

/// The thread of a run that exists (started, or accepted and queued) on a
/// thread the caller may touch: 404 otherwise, the same either way.
pub(crate) async fn thread_of_run(
    state: &AppState,
    caller: &Caller,
    run_id: &RunId,
) -> Result<ThreadId, ApiError> {
    let thread_id = if let Some(record) = state.control.store().load_run(run_id).await? {
        record.thread_id
    } else {
        match state.control.accepted_run(run_id).await? {
            Some(request) => request.thread_id,
            None => return Err(ApiError::NotFound(format!("unknown run `{run_id}`"))),
        }
    };
    check_run_thread(state, caller, run_id, &thread_id).await?;
    Ok(thread_id)
}

/// 404 `unknown run` unless the caller may touch `thread_id`, the run's thread:
/// another tenant's run is answered as one that does not exist.
pub(crate) async fn check_run_thread(
    state: &AppState,
    caller: &Caller,
    run_id: &RunId,
    thread_id: &ThreadId,
) -> Result<(), ApiError> {
    match check_thread(state, caller, thread_id).await {
        Ok(_) => Ok(()),
        Err(ApiError::NotFound(_)) => Err(ApiError::NotFound(format!("unknown run `{run_id}`"))),
        Err(other) => Err(other),
    }
}

/// What a background submission answers (202).
#[derive(Debug, Serialize)]
pub(crate) struct Accepted {
    pub status: &'static str,
    pub thread_id: ThreadId,
    pub run_id: RunId,
    pub dispatch_id: String,
}

impl From<RunDispatch> for Accepted {
    fn from(dispatch: RunDispatch) -> Self {
        Self {
            status: "queued",
            thread_id: dispatch.thread_id,
            run_id: dispatch.run_id,
            dispatch_id: dispatch.dispatch_id.to_string(),
        }
    }
}

/// Accepts `body` as a background run on `thread_id` (continuing
/// `parent_run_id` when given): 202 with the run's ids.
pub(crate) async fn accept_input(
    state: &AppState,
    thread_id: ThreadId,
    body: InputBody,
    parent_run_id: Option<RunId>,
) -> Result<Response, ApiError> {
    let messages = user_messages(body.messages)?;
    check_agent(state, body.agent_id.as_ref(), Some(&thread_id)).await?;
    let mut request = RunRequest::new(thread_id, messages);
    request.agent_id = body.agent_id;
    request.parent_run_id = parent_run_id;
    request.trace = crate::server::trace::incoming();
    let options = SubmitOptions {
        priority: body.priority,
        dedupe_key: body.dedupe_key,
        max_attempts: 0,
    };
    let dispatch = state.control.submit(request, options).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted::from(dispatch))).into_response())
}

/// Reads a decision body for `thread_id` (optionally pinned to `run_id`) and hands
/// it to the thread's owner; answers once it is applied and the run it resumed has
/// stopped or waits again, so an answered decision is never lost.
pub(crate) async fn decide(
    state: &AppState,
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
    let metrics = state.control.runtime().metrics();
    let mut decision = match payload.into_decision(thread_id.clone(), now_ms()) {
        Ok(decision) => decision,
        Err(error) => {
            metrics.decision(DecisionSource::Http, DecisionOutcome::Rejected);
            return Err(ApiError::BadRequest(error));
        }
    };
    decision.resume.trace = crate::server::trace::incoming();
    let answer = state.control.call(ThreadCall::Decide { decision }).await?;
    match answer.outcome {
        CallOutcome::Delivered(Delivery::Applied { duplicate }) => {
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

/// How long a cancel waits for a run whose dispatch was just claimed to become
/// active on its thread, so the cancel reaches it (claim and activation are two
/// steps; between them the run is neither queued nor active).
const STARTING_WAIT: Duration = Duration::from_secs(2);

/// Cancels the thread's active run (`run_id` pins which), or else its queued
/// dispatches (only the one of `run_id` when given). A run whose dispatch is
/// claimed but not yet active is waited for (at most [`STARTING_WAIT`]) and then
/// cancelled. 409 when nothing matched.
pub(crate) async fn cancel(
    state: &AppState,
    thread_id: &ThreadId,
    run_id: Option<&RunId>,
) -> Result<serde_json::Value, ApiError> {
    let deadline = tokio::time::Instant::now() + STARTING_WAIT;
    loop {
        if let Some(cancelled) = cancel_active(state, thread_id, run_id).await? {
            return Ok(serde_json::json!({"status": "cancel_requested", "run_id": cancelled}));
        }
        let cancelled = cancel_queued(state, thread_id, run_id).await?;
        if !cancelled.is_empty() {
            return Ok(serde_json::json!({"status": "cancel_requested", "run_ids": cancelled}));
        }
        let starting = dispatches(state, thread_id, RunDispatchStatus::Claimed)
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
    state: &AppState,
    thread_id: &ThreadId,
    run_id: Option<&RunId>,
) -> Result<Option<RunId>, ApiError> {
    let answer = state
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

/// The thread's dispatches that wait in the mailbox.
pub(crate) async fn queued_dispatches(
    state: &AppState,
    thread_id: &ThreadId,
) -> Result<Vec<RunDispatch>, ApiError> {
    dispatches(state, thread_id, RunDispatchStatus::Queued).await
}

/// The thread's dispatches in `status`.
async fn dispatches(
    state: &AppState,
    thread_id: &ThreadId,
    status: RunDispatchStatus,
) -> Result<Vec<RunDispatch>, ApiError> {
    let page = state
        .control
        .mailbox()
        .list_dispatches(&DispatchQuery {
            thread_id: Some(thread_id.clone()),
            statuses: vec![status],
            offset: 0,
            limit: 200,
        })
        .await?;
    Ok(page.dispatches)
}

async fn cancel_queued(
    state: &AppState,
    thread_id: &ThreadId,
    run_id: Option<&RunId>,
) -> Result<Vec<RunId>, ApiError> {
    let mailbox = state.control.mailbox();
    let mut cancelled = Vec::new();
    for dispatch in queued_dispatches(state, thread_id).await? {
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

pub(crate) fn unexpected(call: &str, outcome: &CallOutcome) -> ApiError {
    ApiError::Internal(format!("unexpected answer to {call}: {outcome:?}"))
}
