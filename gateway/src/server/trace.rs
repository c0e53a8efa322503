//! The `traceparent` of the request being handled (W3C Trace Context): a run
//! started while handling it joins the caller's trace. The edge sets it for the
//! handler's future; the places that submit runs read it. A header that is not a
//! valid `traceparent` is ignored, as the recommendation asks (a new trace starts).
//!
//! With export on, the edge also opens the request's server span (a child of the
//! caller's `traceparent`), and that span is the context runs join.

use std::future::Future;

use awaken_actors::contract::TraceContext;
use awaken_actors::telemetry::{Span, SpanKind};
use axum::extract::{MatchedPath, Request};
use axum::http::HeaderMap;
use axum::response::Response;

tokio::task_local! {
    static INCOMING: Option<TraceContext>;
}

/// The context of the request being handled (its exported server span, else the
/// caller's `traceparent`), in the request's extensions for handlers that run
/// outside the edge's task, where [`incoming`] cannot reach (the MCP service).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestTrace(pub(crate) Option<TraceContext>);

/// The trace context `headers` carry, if a valid one.
pub(crate) fn of(headers: &HeaderMap) -> Option<TraceContext> {
    headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| TraceContext::parse(value).ok())
}

/// Runs `handler` with `incoming` as the caller's trace context.
pub(crate) async fn within<F: Future>(incoming: Option<TraceContext>, handler: F) -> F::Output {
    INCOMING.scope(incoming, handler).await
}

/// The caller's trace context, if the request being handled has one.
pub(crate) fn incoming() -> Option<TraceContext> {
    INCOMING.try_with(|incoming| *incoming).ok().flatten()
}

/// Routes that get no span: probes and scrapes come every few seconds from every
/// kubelet and Prometheus, start no run, and would fill a tracing backend with
/// one-span traces.
const UNTRACED: [&str; 4] = ["/health", "/health/ready", "/health/live", "/metrics"];

/// The server span of `request` (HTTP semantic conventions), a child of
/// `incoming`; disabled when spans are not exported, for probes and scrapes,
/// and for a caller's unsampled trace under a parent-based sampler.
pub(crate) fn server_span(request: &Request, incoming: Option<&TraceContext>) -> Span {
    let method = request.method().as_str();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    if route.is_some_and(|route| UNTRACED.contains(&route)) {
        return Span::none();
    }
    // The sampler would drop it: building it first would cost as much as
    // recording it (the run under it builds nothing either: its context stays
    // the caller's, unsampled).
    if incoming.is_some_and(|trace| !trace.sampled()) && crate::telemetry::parent_decides() {
        return Span::none();
    }
    // `{method} {route}`, or the method alone for a path no route matched.
    let (gap, named) = route.map_or(("", ""), |route| (" ", route));
    Span::start(
        &[method, gap, named],
        SpanKind::Server,
        incoming.into(),
        |attributes| {
            attributes
                .set("http.request.method", method)
                .set("url.path", request.uri().path());
            if let Some(route) = route {
                attributes.set("http.route", route);
            }
        },
    )
}

/// Records `response`'s status on its server span.
pub(crate) fn answered(span: &Span, response: &Response) {
    if !span.is_recording() {
        return;
    }
    let status = response.status();
    span.set("http.response.status_code", i64::from(status.as_u16()));
    // The HTTP conventions' `error.type` of a server error: its status code.
    if status.is_server_error() {
        span.failed(status.as_str());
    }
}
