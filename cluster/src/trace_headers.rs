//! W3C trace context in NATS headers: the `traceparent` a message carries from
//! the span that sent it, so the node that takes it up continues the trace.

use async_nats::HeaderMap;
use awaken_actors::contract::TraceContext;
use awaken_actors::telemetry;

/// The header's name, as the W3C specification spells it.
pub(crate) const TRACEPARENT: &str = "traceparent";

/// The `traceparent` of `headers`, if a valid one.
pub(crate) fn traceparent(headers: Option<&HeaderMap>) -> Option<TraceContext> {
    let value = headers?.get(TRACEPARENT)?;
    TraceContext::parse(value.as_str()).ok()
}

/// Headers carrying the current span's context, when it is exported; `None`
/// otherwise (a message then goes without headers, as before).
pub(crate) fn current() -> Option<HeaderMap> {
    let trace = telemetry::context_of(&tracing::Span::current())?;
    let mut headers = HeaderMap::new();
    headers.insert(TRACEPARENT, trace.to_string().as_str());
    Some(headers)
}
