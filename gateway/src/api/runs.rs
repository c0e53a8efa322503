//! `/v1/runs`: start a run and stream it, read runs, add input, cancel, decide.

use awaken_actors::RunId;
use awaken_actors::ThreadId;
use awaken_actors::contract::RunStatus;
use awaken_actors::store::RunQuery;
use awaken_cluster::decisions::DecisionPayload;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::runs::RunLookup;
use crate::runs::input::{InputBody, StartRunBody};
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::extract::{ApiJson, ApiPath, ApiQuery};
use crate::server::sse::{last_event_id, run_events};
use crate::server::state::AppState;
use crate::server::table::Routes;

/// The run routes.
pub(crate) fn routes() -> Routes<AppState> {
    Routes::new()
        .get("/v1/runs", list_runs)
        .post("/v1/runs", start_run)
        .get("/v1/runs/{run_id}", get_run)
        .get("/v1/runs/{run_id}/events", follow_run)
        .post("/v1/runs/{run_id}/inputs", add_input)
        .post("/v1/runs/{run_id}/cancel", cancel_run)
        .post("/v1/runs/{run_id}/decision", run_decision)
}

/// Paging and filters of run lists.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunListQuery {
    #[serde(default)]
    pub status: Option<RunStatus>,
    #[serde(default)]
    pub offset: usize,
    #[serde(default = "default_limit")]
    pub limit: usize,
}

pub(crate) fn default_limit() -> usize {
    50
}

impl RunListQuery {
    pub(crate) fn into_query(self, thread_id: Option<ThreadId>) -> RunQuery {
        RunQuery {
            thread_id,
            status: self.status,
            offset: self.offset,
            limit: self.limit,
            ..RunQuery::default()
        }
    }
}

async fn list_runs(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<RunListQuery>,
) -> Result<Response, ApiError> {
    let page = state.runs.runs(&caller, &query.into_query(None)).await?;
    Ok(Json(page).into_response())
}

/// Accepts the run, then streams its events (SSE) until it finishes or waits for
/// a decision. The run belongs to the mailbox, not to this connection: closing the
/// stream does not cancel it.
async fn start_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<StartRunBody>,
) -> Result<Response, ApiError> {
    let follow = state.runs.start_run(&caller, body).await?;
    Ok(run_events(follow, state.runs.stopping())
        .await
        .into_response())
}

async fn get_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(run_id): ApiPath<RunId>,
) -> Result<Response, ApiError> {
    match state.runs.run(&caller, &run_id).await? {
        RunLookup::Recorded(record) => Ok(Json(record).into_response()),
        RunLookup::Queued(request) => Ok((
            StatusCode::ACCEPTED,
            Json(serde_json::json!({
                "run_id": run_id,
                "thread_id": request.thread_id,
                "status": "queued",
            })),
        )
            .into_response()),
    }
}

/// Streams a run's events from any node, after `Last-Event-ID` when the client
/// reconnects (from the oldest buffered event otherwise), until the activation
/// ends. A waiting run with nothing new is followed until it resumes and stops
/// again; a finished run yields what is still buffered.
async fn follow_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(run_id): ApiPath<RunId>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after_seq = last_event_id(&headers)?;
    let follow = state.runs.follow_run(&caller, &run_id, after_seq).await?;
    Ok(run_events(follow, state.runs.stopping())
        .await
        .into_response())
}

/// Follow-up input to a run's thread: a continuation run in the background.
async fn add_input(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(run_id): ApiPath<RunId>,
    ApiJson(body): ApiJson<InputBody>,
) -> Result<Response, ApiError> {
    let thread_id = state.runs.thread_of_run(&caller, &run_id).await?;
    state.runs.accept_input(thread_id, body, Some(run_id)).await
}

async fn cancel_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(run_id): ApiPath<RunId>,
) -> Result<Response, ApiError> {
    let thread_id = state.runs.thread_of_run(&caller, &run_id).await?;
    let answer = state.runs.cancel(&thread_id, Some(&run_id)).await?;
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}

async fn run_decision(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(run_id): ApiPath<RunId>,
    ApiJson(payload): ApiJson<DecisionPayload>,
) -> Result<Response, ApiError> {
    let thread_id = state.runs.thread_of_run(&caller, &run_id).await?;
    let answer = state
        .runs
        .decide(&thread_id, Some(&run_id), payload)
        .await?;
    Ok(Json(answer).into_response())
}
