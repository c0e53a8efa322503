//! `/v1/threads`: thread CRUD, history, background input, mailbox, runs, and
//! control (cancel, interrupt, decision).

use std::collections::BTreeMap;

use awaken_actors::ThreadId;
use awaken_actors::contract::{Thread, ThreadMetadata};
use awaken_actors::store::MessageQuery;
use awaken_cluster::decisions::DecisionPayload;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value as JsonValue;

use super::runs::{RunListQuery, default_limit};
use crate::runs::handlers::{cancel_thread, interrupt_thread};
use crate::runs::input::InputBody;
use crate::server::auth::{Caller, TENANT_KEY, refuse_reserved};
use crate::server::error::ApiError;
use crate::server::extract::{ApiJson, ApiPath, ApiQuery};
use crate::server::state::AppState;
use crate::server::table::Routes;

/// The thread routes.
pub(crate) fn routes() -> Routes<AppState> {
    Routes::new()
        .get("/v1/threads", list_threads)
        .post("/v1/threads", create_thread)
        .get("/v1/threads/summaries", list_summaries)
        .get("/v1/threads/{thread_id}", get_thread)
        .patch("/v1/threads/{thread_id}", patch_thread)
        .delete("/v1/threads/{thread_id}", delete_thread)
        .patch("/v1/threads/{thread_id}/metadata", patch_thread)
        .post("/v1/threads/{thread_id}/cancel", cancel_thread)
        .post("/v1/threads/{thread_id}/decision", thread_decision)
        .post("/v1/threads/{thread_id}/interrupt", interrupt_thread)
        .get("/v1/threads/{thread_id}/messages", list_messages)
        .post("/v1/threads/{thread_id}/messages", post_messages)
        .get("/v1/threads/{thread_id}/mailbox", list_mailbox)
        .post("/v1/threads/{thread_id}/mailbox", post_messages)
        .get("/v1/threads/{thread_id}/runs", list_thread_runs)
        .get("/v1/threads/{thread_id}/runs/latest", latest_run)
}

/// Offset paging.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Paging {
    #[serde(default)]
    pub(super) offset: usize,
    #[serde(default = "default_limit")]
    limit: usize,
}

impl Paging {
    /// The page size, clamped to 1..=200.
    pub(super) fn limit(&self) -> usize {
        awaken_actors::store::clamp_limit(self.limit)
    }
}

async fn list_threads(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(paging): ApiQuery<Paging>,
) -> Result<Response, ApiError> {
    let threads = state
        .runs
        .thread_ids(&caller, paging.offset, paging.limit())
        .await?;
    Ok(Json(serde_json::json!({ "threads": threads })).into_response())
}

async fn list_summaries(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(paging): ApiQuery<Paging>,
) -> Result<Response, ApiError> {
    let summaries = state
        .runs
        .thread_summaries(&caller, paging.offset, paging.limit())
        .await?;
    Ok(Json(serde_json::json!({ "threads": summaries })).into_response())
}

/// `POST /v1/threads` and `PATCH` bodies: the metadata a client may set.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThreadBody {
    /// A caller-chosen id (create only); generated when absent.
    #[serde(default)]
    id: Option<ThreadId>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    custom: Option<BTreeMap<String, JsonValue>>,
}

async fn create_thread(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<ThreadBody>,
) -> Result<Response, ApiError> {
    let mut thread = body.id.map_or_else(Thread::new, Thread::with_id);
    thread.metadata.title = body.title;
    thread.metadata.custom = body.custom.unwrap_or_default();
    refuse_reserved(&thread.metadata.custom)?;
    let created = state.runs.create_thread(&caller, thread).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

async fn get_thread(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
) -> Result<Response, ApiError> {
    let thread = state.runs.check_thread(&caller, &thread_id).await?;
    Ok(Json(thread).into_response())
}

/// Sets the given fields (a `custom` map replaces the old one) and keeps the rest.
async fn patch_thread(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
    ApiJson(body): ApiJson<ThreadBody>,
) -> Result<Response, ApiError> {
    if body.id.is_some() {
        return Err(ApiError::BadRequest("a thread's id cannot change".into()));
    }
    let thread = state.runs.check_thread(&caller, &thread_id).await?;
    let custom = match body.custom {
        Some(mut custom) => {
            refuse_reserved(&custom)?;
            if let Some(tenant) = thread.metadata.custom.get(TENANT_KEY) {
                custom.insert(TENANT_KEY.to_owned(), tenant.clone());
            }
            custom
        }
        None => thread.metadata.custom,
    };
    let metadata = ThreadMetadata {
        title: body.title.or(thread.metadata.title),
        custom,
        ..thread.metadata
    };
    let updated = state.runs.update_thread(&thread_id, metadata).await?;
    Ok(Json(updated).into_response())
}

/// Deletes an idle thread; 409 while it has an active, waiting or queued run.
async fn delete_thread(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
) -> Result<Response, ApiError> {
    state.runs.delete_thread(&caller, &thread_id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn thread_decision(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
    ApiJson(payload): ApiJson<DecisionPayload>,
) -> Result<Response, ApiError> {
    state.runs.check_thread(&caller, &thread_id).await?;
    let answer = state.runs.decide(&thread_id, None, payload).await?;
    Ok(Json(answer).into_response())
}

/// `?cursor=&limit=&visibility=all`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    #[serde(default)]
    cursor: Option<u64>,
    #[serde(default = "default_limit")]
    limit: usize,
    #[serde(default)]
    visibility: Option<VisibilityFilter>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum VisibilityFilter {
    /// Internal messages too.
    All,
    /// What users see (the default).
    External,
}

async fn list_messages(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
    ApiQuery(query): ApiQuery<HistoryQuery>,
) -> Result<Response, ApiError> {
    let query = MessageQuery {
        cursor: query.cursor,
        limit: query.limit,
        include_internal: matches!(query.visibility, Some(VisibilityFilter::All)),
    };
    let page = state.runs.messages(&caller, &thread_id, &query).await?;
    Ok(Json(page).into_response())
}

/// Input for the thread as a background run (202 with the run id).
async fn post_messages(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
    ApiJson(body): ApiJson<InputBody>,
) -> Result<Response, ApiError> {
    state.runs.check_thread(&caller, &thread_id).await?;
    state.runs.accept_input(thread_id, body, None).await
}

async fn list_mailbox(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
    ApiQuery(paging): ApiQuery<Paging>,
) -> Result<Response, ApiError> {
    let page = state
        .runs
        .mailbox(&caller, &thread_id, paging.offset, paging.limit())
        .await?;
    Ok(Json(serde_json::json!({
        "dispatches": page.dispatches,
        "total": page.total,
    }))
    .into_response())
}

async fn list_thread_runs(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
    ApiQuery(query): ApiQuery<RunListQuery>,
) -> Result<Response, ApiError> {
    let query = query.into_query(Some(thread_id.clone()));
    let page = state.runs.thread_runs(&caller, &thread_id, &query).await?;
    Ok(Json(page).into_response())
}

async fn latest_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
) -> Result<Response, ApiError> {
    // A thread that exists but has run nothing yet: no content, unlike an
    // unknown thread (404).
    match state.runs.latest_run(&caller, &thread_id).await? {
        Some(run) => Ok(Json(run).into_response()),
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}
