//! The thread controls every API offers alike, as handlers: the native API,
//! the AI SDK and AG-UI routes all serve them.

use awaken_actors::ThreadId;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::RunService;
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::extract::ApiPath;

/// `POST …/threads/{thread_id}/cancel`: cancels the thread's active or queued
/// run (202).
pub(crate) async fn cancel_thread(
    State(runs): State<RunService>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
) -> Result<Response, ApiError> {
    runs.check_thread(&caller, &thread_id).await?;
    let answer = runs.cancel(&thread_id, None).await?;
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}

/// `POST …/threads/{thread_id}/interrupt`: cancels the active run and
/// supersedes what waits in the mailbox (202).
pub(crate) async fn interrupt_thread(
    State(runs): State<RunService>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
) -> Result<Response, ApiError> {
    runs.check_thread(&caller, &thread_id).await?;
    let interrupted = runs.control.interrupt_thread(&thread_id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({
            "status": "interrupt_requested",
            "superseded_jobs": interrupted.mailbox.superseded_count,
            "dispatch_epoch": interrupted.mailbox.new_dispatch_epoch,
            "cancelled_run_id": interrupted.cancelled_run,
        })),
    )
        .into_response())
}
