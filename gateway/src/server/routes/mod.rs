//! The route tree: health, threads, runs, under the server's limits.

mod health;
mod input;
mod runs;
mod shared;
mod threads;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::Uri;
use tower::{BoxError, ServiceBuilder};

use super::error::ApiError;
use super::state::AppState;

/// Every route, with the body limit (413) and the in-flight request limit (503)
/// of `state.config`.
pub fn router(state: AppState) -> Router {
    let limits = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(|error: BoxError| async move {
            overloaded(&error)
        }))
        .load_shed()
        .concurrency_limit(state.config.max_concurrent_requests.max(1));
    Router::new()
        .merge(health::routes())
        .merge(threads::routes())
        .merge(runs::routes())
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(limits)
        .with_state(state)
}

fn overloaded(error: &BoxError) -> ApiError {
    ApiError::Unavailable(format!("server busy: {error}"))
}

async fn no_route(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}
