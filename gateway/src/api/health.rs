//! `/health` and `/health/ready` (readiness: the node has joined, is not
//! draining, its store and NATS answer, a request place is free and its
//! memory budget has room for a run),
//! `/health/live` (the process answers), and `/metrics` (Prometheus).

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::server::error::ApiError;
use crate::server::metrics::CONTENT_TYPE;
use crate::server::state::AppState;
use crate::server::table::Routes;

/// The health routes (never behind authentication).
pub(crate) fn routes() -> Routes<AppState> {
    Routes::new()
        .get("/health", ready)
        .get("/health/ready", ready)
        .get("/health/live", live)
}

async fn ready(State(state): State<AppState>) -> Response {
    // Shutting down: in-flight requests finish, new work goes to other nodes.
    if *state.stopping().borrow() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "draining",
                "error": "the node is shutting down"})),
        )
            .into_response();
    }
    // Every request place taken: the node would answer 503 to real work, so it
    // is not ready for more (a load balancer sends it elsewhere meanwhile).
    if state.in_flight.available_permits() == 0 {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "saturated",
                "error": "every in-flight request place is taken"})),
        )
            .into_response();
    }
    // Active runs and queued input fill the admitted memory: new work would be
    // refused, so the node is not ready for more (decision 0089).
    if !state.control.runtime().memory().admitting() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "memory_full",
                "error": "active runs and queued input fill the node's memory budget"})),
        )
            .into_response();
    }
    match state.control.check_ready().await {
        Ok(()) => Json(serde_json::json!({"status": "ok"})).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "unavailable", "error": reason})),
        )
            .into_response(),
    }
}

/// The metrics route: outside the request limit, so a busy node can be observed,
/// but behind the API keys like every route other than the probes.
pub(crate) fn metrics_routes() -> Routes<AppState> {
    Routes::new().get("/metrics", metrics)
}

async fn metrics(State(state): State<AppState>) -> Response {
    match state.metrics.render(state.control.as_ref()).await {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(error) => ApiError::Internal(format!("metrics not encodable: {error}")).into_response(),
    }
}

async fn live() -> Response {
    Json(serde_json::json!({"status": "ok"})).into_response()
}
