//! The one middleware in front of every route: request metrics, the body read
//! first (decision 0036), the in-flight limit, the body limit and the API key
//! check, in that order. The limit comes after the body (decision 0083): a
//! request takes a place only for the work it costs the node, not for the time
//! its sender takes.
//!
//! axum boxes a route's service once per `Router::layer` and clones every box of
//! that chain for each request; the five layers these steps were cost ~14,000
//! instructions and ~50 allocations per request (decision 0041). As one layer,
//! only the steps themselves are paid for.

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::CONNECTION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower::{Layer, ServiceExt};

use super::error::ApiError;
use super::metrics::Observation;
use super::state::AppState;
use super::{auth, body, trace};

/// Which steps a group of routes goes through besides metrics, body read and
/// body limit, which every route has.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Edge {
    /// Counts against `max_concurrent_requests`; beyond it the answer is 503.
    limited: bool,
    /// Needs an API key when keys are configured (handlers get a `Caller`).
    keyed: bool,
}

impl Edge {
    /// Health probes and agent cards: open, and outside the limit (a busy node is
    /// alive).
    pub(crate) const OPEN: Self = Self {
        limited: false,
        keyed: false,
    };
    /// The metrics endpoint: behind the keys, outside the limit.
    pub(crate) const KEYED: Self = Self {
        limited: false,
        keyed: true,
    };
    /// The API: behind the keys and the limit.
    pub(crate) const API: Self = Self {
        limited: true,
        keyed: true,
    };
}

/// `router` with every route (and its fallbacks) behind `edge`.
pub(crate) fn guard(router: Router<AppState>, state: &AppState, edge: Edge) -> Router<AppState> {
    router.layer(axum::middleware::from_fn_with_state(
        (state.clone(), edge),
        pass,
    ))
}

async fn pass(
    State((state, edge)): State<(AppState, Edge)>,
    request: Request,
    next: Next,
) -> Response {
    let observation = Observation::start(&state.metrics, &request);
    let response = admit(&state, edge, request, next).await;
    observation.finish(&response);
    response
}

async fn admit(state: &AppState, edge: Edge, request: Request, next: Next) -> Response {
    let limit = state.config.max_body_bytes;
    let deadline = Duration::from_secs(state.config.body_read_timeout_secs);
    let arrived = match body::read_first(request, limit, deadline, &state.arriving).await {
        Ok(arrived) => arrived,
        Err(refused) => return unread(refused),
    };
    // Held until the handler answered: a stream stops counting once it started.
    let _permit = if edge.limited {
        match state.in_flight.try_acquire() {
            Ok(permit) => Some(permit),
            Err(_) => return overloaded(arrived.whole),
        }
    } else {
        None
    };
    let mut request = arrived.request;
    if edge.keyed
        && let Err(refused) = auth::check_key(&state.config.api_keys, &mut request)
    {
        return refused.into_response();
    }
    if let Err(refused) = body::refuse_nul(&request) {
        return refused.into_response();
    }
    let incoming = trace::of(request.headers());
    let span = trace::server_span(&request, incoming.as_ref());
    // Runs started here join the request's span when it is exported.
    let context = span.context().or(incoming);
    request
        .extensions_mut()
        .insert(trace::RequestTrace(context));
    let handled = DefaultBodyLimit::max(limit).layer(next).oneshot(request);
    let handled = trace::within(context, handled);
    let response = match span.traced(handled).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    trace::answered(&span, &response);
    response
}

/// A request refused for load. Its body was read, so the connection stays
/// usable; only a body past the limit, unread beyond it, makes the answer say the
/// connection closes (hyper closes it, and a client must not be left to find out
/// on its next request).
fn overloaded(whole: bool) -> Response {
    let refused = ApiError::Unavailable("server busy: too many requests in flight".into());
    if whole {
        refused.into_response()
    } else {
        ([(CONNECTION, "close")], refused).into_response()
    }
}

/// A request whose body did not arrive (too slow, no room for it, broken): hyper
/// closes the connection after the answer, which says so.
fn unread(refused: ApiError) -> Response {
    ([(CONNECTION, "close")], refused).into_response()
}
