//! The mailbox's spans after the OpenTelemetry messaging conventions: `send
//! awaken.mailbox` (producer) where a run is accepted, `process awaken.mailbox`
//! (consumer) where a node takes its dispatch and activates the run — on any
//! node, hours later for a retried one. Both hang off the run's trace context,
//! so a run accepted on one node and executed on another shows both hops in its
//! trace. A run without a trace context (no request started it) gets neither.

use super::{Parent, Span, SpanKind};
use crate::contract::{RunDispatch, TraceContext};
use crate::ids::DispatchId;

/// The destination the spans name: the one mailbox every node shares.
const DESTINATION: &str = "awaken.mailbox";

/// Whether a run in `trace` gets mailbox spans.
fn traced(trace: Option<&TraceContext>) -> Option<&TraceContext> {
    trace.filter(|trace| trace.sampled())
}

/// The span of enqueueing a run's dispatch, in the run's trace.
pub(crate) fn send(trace: Option<&TraceContext>) -> Span {
    let Some(trace) = traced(trace) else {
        return Span::none();
    };
    Span::start(
        &["send awaken.mailbox"],
        SpanKind::Producer,
        Parent::Remote(trace),
        |attributes| {
            attributes
                .set("messaging.system", "awaken")
                .set("messaging.operation.type", "send")
                .set("messaging.operation.name", "enqueue")
                .set("messaging.destination.name", DESTINATION);
        },
    )
}

/// Records the dispatch `send` enqueued, or why it was refused.
pub(crate) fn sent(span: &Span, outcome: Result<&DispatchId, &'static str>) {
    if !span.is_recording() {
        return;
    }
    match outcome {
        Ok(id) => span.set("messaging.message.id", id.as_str()),
        Err(error_type) => span.failed(error_type),
    }
}

/// The span of one delivery attempt of `dispatch` by `consumer`, in the run's
/// trace.
pub(crate) fn process(
    dispatch: &RunDispatch,
    consumer: &str,
    trace: Option<&TraceContext>,
) -> Span {
    let Some(trace) = traced(trace) else {
        return Span::none();
    };
    Span::start(
        &["process awaken.mailbox"],
        SpanKind::Consumer,
        Parent::Remote(trace),
        |attributes| {
            attributes
                .set("messaging.system", "awaken")
                .set("messaging.operation.type", "process")
                .set("messaging.destination.name", DESTINATION)
                .set("messaging.consumer.group.name", "awaken")
                .set("messaging.client.id", consumer)
                .set("messaging.message.id", dispatch.dispatch_id.as_str())
                .set("awaken.run.id", dispatch.run_id.as_str())
                .set("awaken.dispatch.attempt", i64::from(dispatch.attempt_count));
        },
    )
}

/// What a delivery attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// The run was activated (started, or already running).
    Activated,
    /// The run waits for a human; the dispatch is done.
    Waiting,
    /// The run had ended already; the dispatch is done.
    Ended,
    /// Given back to the queue, to be tried again.
    GivenBack,
    /// Dead-lettered: it will not be tried again.
    DeadLettered,
}

/// Records what `span`'s delivery attempt came to.
pub(crate) fn processed(span: &Span, delivery: Delivery) {
    if !span.is_recording() {
        return;
    }
    let outcome = match delivery {
        Delivery::Activated => "activated",
        Delivery::Waiting => "waiting",
        Delivery::Ended => "ended",
        Delivery::GivenBack => "given_back",
        Delivery::DeadLettered => "dead_lettered",
    };
    span.set("awaken.dispatch.outcome", outcome);
    if matches!(delivery, Delivery::GivenBack | Delivery::DeadLettered) {
        span.failed(outcome);
    }
}
