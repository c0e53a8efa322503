//! The `traceparent` of the request being handled (W3C Trace Context): a run
//! started while handling it joins the caller's trace. The edge sets it for the
//! handler's future; the places that submit runs read it. A header that is not a
//! valid `traceparent` is ignored, as the recommendation asks (a new trace starts).

use std::future::Future;

use awaken_actors::contract::TraceContext;
use axum::http::HeaderMap;

tokio::task_local! {
    static INCOMING: Option<TraceContext>;
}

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
