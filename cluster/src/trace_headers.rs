//! W3C trace context in NATS headers: the `traceparent` a message carries from
//! the span that sent it, so the node that takes it up continues the trace.

use async_nats::HeaderMap;
use awaken_actors::contract::TraceContext;
use awaken_actors::telemetry;

/// The header's name, as the W3C specification spells it.
const TRACEPARENT: &str = "traceparent";

/// The `traceparent` of `headers`, if a valid one.
pub(crate) fn traceparent(headers: Option<&HeaderMap>) -> Option<TraceContext> {
    let value = headers?.get(TRACEPARENT)?;
    TraceContext::parse(value.as_str()).ok()
}

/// Adds `trace` to `headers` as their `traceparent`.
pub(crate) fn insert(headers: &mut HeaderMap, trace: &TraceContext) {
    headers.insert(TRACEPARENT, trace.to_string().as_str());
}

/// Adds the current span's context to `headers` when it is exported; whether
/// it did.
pub(crate) fn insert_current(headers: &mut HeaderMap) -> bool {
    let Some(trace) = telemetry::Span::current().context() else {
        return false;
    };
    insert(headers, &trace);
    true
}

/// Headers carrying the current span's context, when it is exported; `None`
/// otherwise (a message then goes without headers, as before).
pub(crate) fn current() -> Option<HeaderMap> {
    let mut headers = HeaderMap::new();
    insert_current(&mut headers).then_some(headers)
}
