//! The route tree: health, threads, runs, config and the frontend protocols, under
//! the server's limits.

mod a2a;
mod ag_ui;
mod ai_sdk;
mod config;
mod health;
mod input;
mod mcp;
mod openapi;
mod protocol;
mod runs;
mod shared;
mod table;
mod threads;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::header::CONNECTION;
use axum::http::{Method, Uri};
use axum::response::IntoResponse;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::{BoxError, ServiceBuilder};

use super::error::ApiError;
use super::state::AppState;
use super::{auth, body, metrics};
use table::Routes;

pub(crate) use a2a::PushNotifications;
pub(crate) use mcp::{McpService, service as mcp_service};

/// Every route, with the body limit (413) and the in-flight request limit (503)
/// of `state.config`. Health probes are outside the limit: a busy node is alive.
/// Bodies are read before routing (inside the in-flight limit: a body still
/// arriving is a request in flight), so no answer closes a kept-alive connection.
pub fn router(state: AppState) -> Router {
    // One semaphore for all routes (a plain concurrency limit is per route).
    let limits = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(|error: BoxError| async move {
            overloaded(&error)
        }))
        .load_shed()
        .layer(GlobalConcurrencyLimitLayer::new(
            state.config.max_concurrent_requests.max(1),
        ));
    let api = api_routes()
        .into_router()
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    let api = body::read_first(api, &state)
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(limits);
    let observed =
        health::metrics_routes()
            .into_router()
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                auth::require_key,
            ));
    let cards = a2a::card_routes().into_router();
    Router::new()
        .merge(body::read_first(health::routes().into_router(), &state))
        .merge(
            body::read_first(cards, &state)
                .layer(DefaultBodyLimit::max(state.config.max_body_bytes)),
        )
        .merge(body::read_first(observed, &state))
        .merge(api)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::record,
        ))
        .with_state(state)
}

/// The routes behind the API keys and the request limit.
fn api_routes() -> Routes {
    threads::routes()
        .merge(runs::routes())
        .merge(ai_sdk::routes())
        .merge(ag_ui::routes())
        .merge(config::routes())
        .merge(openapi::routes())
        .merge(a2a::routes())
        .merge(mcp::routes())
}

/// Every `(method, path template)` the server answers: what the OpenAPI
/// document must describe.
pub fn served_routes() -> Vec<(Method, &'static str)> {
    let all = health::routes()
        .merge(health::metrics_routes())
        .merge(a2a::card_routes())
        .merge(api_routes());
    all.served().to_vec()
}

/// A request refused for load is answered without reading its body, so the
/// answer says the connection closes: hyper closes it whenever that body had not
/// fully arrived, and a client must not be left to find out on its next request.
fn overloaded(error: &BoxError) -> impl IntoResponse + use<> {
    (
        [(CONNECTION, "close")],
        ApiError::Unavailable(format!("server busy: {error}")),
    )
}

async fn no_route(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}
