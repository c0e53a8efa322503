//! `/health` (readiness: the store and NATS answer) and `/health/live`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use crate::server::state::AppState;

/// The health routes (never behind authentication).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/health", get(ready))
        .route("/health/live", get(live))
}

async fn ready(State(state): State<AppState>) -> Response {
    match state.control.check_ready().await {
        Ok(()) => Json(serde_json::json!({"status": "ok"})).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "unavailable", "error": reason})),
        )
            .into_response(),
    }
}

async fn live() -> Response {
    Json(serde_json::json!({"status": "ok"})).into_response()
}
