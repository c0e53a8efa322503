//! The route tree: health, threads, runs, config and the frontend protocols, under
//! the server's limits.

use axum::Router;
use axum::http::{Method, Uri};

use super::edge::{self, Edge};
use super::error::ApiError;
use super::state::AppState;
use super::table::Routes;
use crate::api::{approvals, config, health, openapi, runs, threads};
use crate::protocols::a2a::server as a2a;
use crate::protocols::mcp::server as mcp;
use crate::protocols::{ag_ui, ai_sdk};

/// Every route, behind the server's edge (`server::edge`): metrics, the body read
/// before routing answers (so no answer closes a kept-alive connection), the body
/// limit (413), the API keys and, for the API, the in-flight request limit (503).
/// Health probes, agent cards and metrics are outside the limit: a busy node is
/// alive.
pub fn router(state: AppState) -> Router {
    let api = api_routes()
        .into_router()
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method);
    Router::new()
        .merge(edge::guard(
            health::routes().into_router(),
            &state,
            Edge::OPEN,
        ))
        .merge(edge::guard(
            a2a::card_routes().into_router(),
            &state,
            Edge::OPEN,
        ))
        .merge(edge::guard(
            health::metrics_routes().into_router(),
            &state,
            Edge::KEYED,
        ))
        .merge(edge::guard(api, &state, Edge::API))
        .with_state(state)
}

/// The routes behind the API keys and the request limit.
fn api_routes() -> Routes<AppState> {
    threads::routes()
        .merge(runs::routes())
        .merge(approvals::routes())
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

async fn no_route(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}
