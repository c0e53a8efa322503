//! `/v1/approvals`: the inbox of tool calls waiting for a human, cluster-wide and
//! tenant-scoped; its changes as they come (SSE); one approval; a decision by
//! its id.

use awaken_actors::ApprovalId;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use crate::runs::approval_stream::ApprovalStreamQuery;
use crate::runs::approvals::{ApprovalDecisionBody, ApprovalListQuery};
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::extract::{ApiJson, ApiPath, ApiQuery};
use crate::server::sse_frames;
use crate::server::state::AppState;
use crate::server::table::Routes;

/// The approval routes.
pub(crate) fn routes() -> Routes<AppState> {
    Routes::new()
        .get("/v1/approvals", list_approvals)
        .get("/v1/approvals/stream", stream_approvals)
        .get("/v1/approvals/{approval_id}", get_approval)
        .post("/v1/approvals/{approval_id}/decision", decide_approval)
}

async fn list_approvals(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ApprovalListQuery>,
) -> Result<Response, ApiError> {
    let page = state.runs.approvals(&caller, query).await?;
    Ok(Json(page).into_response())
}

/// The approval feed as SSE, resumed after `Last-Event-ID`.
async fn stream_approvals(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<ApprovalStreamQuery>,
) -> Result<Response, ApiError> {
    let open_for = state.config.approval_stream_max();
    let frames = state
        .runs
        .approval_stream(&caller, query, &headers, open_for)
        .await?;
    Ok(sse_frames::response(frames).await)
}

async fn get_approval(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(approval_id): ApiPath<ApprovalId>,
) -> Result<Response, ApiError> {
    let approval = state.runs.approval(&caller, &approval_id).await?;
    Ok(Json(approval).into_response())
}

/// Decides the approval's call; answers once the decision is applied (or is a
/// duplicate of the one that resolved it).
async fn decide_approval(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(approval_id): ApiPath<ApprovalId>,
    ApiJson(body): ApiJson<ApprovalDecisionBody>,
) -> Result<Response, ApiError> {
    let answer = state
        .runs
        .decide_approval(&caller, &approval_id, body)
        .await?;
    Ok(Json(answer).into_response())
}
