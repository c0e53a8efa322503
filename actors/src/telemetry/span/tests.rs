//! Ids, sampling, ending and the current span. What the bytes decode to is
//! tested where OTLP's own protobuf definitions are at hand (the gateway's
//! `telemetry::otlp`).

use std::sync::{Arc, Mutex};

use super::*;

/// The finished spans of a test's tracer.
#[derive(Clone, Default)]
struct Ended(Arc<Mutex<Vec<Vec<u8>>>>);

impl SpanSink for Ended {
    fn export(&self, span: &[u8]) {
        self.0.lock().unwrap().push(span.to_vec());
    }
}

impl Ended {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn contains(&self, index: usize, bytes: &[u8]) -> bool {
        self.0.lock().unwrap()[index]
            .windows(bytes.len())
            .any(|window| window == bytes)
    }
}

/// A tracer of the test's own (the process-wide one stays uninstalled).
fn tracer(sampling: Sampling) -> (&'static Tracer, Ended) {
    let ended = Ended::default();
    let tracer = Box::leak(Box::new(Tracer::new(sampling, ended.clone())));
    (tracer, ended)
}

fn root(tracer: &'static Tracer, name: &str) -> Span {
    tracer.start(&[name], SpanKind::Internal, Parent::Root, |_| {})
}

#[test]
fn without_a_tracer_spans_are_disabled_and_carry_no_context() {
    let span = Span::start(&["invoke_agent"], SpanKind::Internal, Parent::Root, |_| {
        panic!("attributes of a span that is not exported are never written")
    });
    assert!(span.is_disabled());
    assert!(span.context().is_none());
    let child = Span::start(&["chat"], SpanKind::Client, Parent::Local(&span), |_| {});
    assert!(child.is_disabled());
}

#[test]
fn a_span_ends_once_when_its_last_clone_is_dropped() {
    let (tracer, ended) = tracer(Sampling::AlwaysOn);
    let span = root(tracer, "invoke_agent");
    let clone = span.clone();
    span.set("gen_ai.agent.id", "writer");
    drop(span);
    assert_eq!(ended.count(), 0);
    drop(clone);
    assert_eq!(ended.count(), 1);
    assert!(ended.contains(0, b"gen_ai.agent.id"));
    assert!(ended.contains(0, b"writer"));
}

#[test]
fn children_share_the_trace_and_name_their_parent() {
    let (tracer, ended) = tracer(Sampling::AlwaysOn);
    let parent = root(tracer, "invoke_agent");
    let child = tracer.start(
        &["chat ", "m"],
        SpanKind::Client,
        Parent::Local(&parent),
        |attributes| {
            attributes.set("gen_ai.request.model", "m");
        },
    );
    let (parent_trace, child_trace) = (parent.context().unwrap(), child.context().unwrap());
    assert_eq!(parent_trace.trace_id(), child_trace.trace_id());
    assert_ne!(parent_trace.span_id(), child_trace.span_id());
    assert!(child_trace.sampled());
    drop(child);
    let (_, parent_id, _) = parent_trace.to_parts();
    assert!(ended.contains(0, &parent_id), "the child names its parent");
    assert!(ended.contains(0, b"chat m"));
}

#[test]
fn a_remote_parent_keeps_its_trace() {
    let (tracer, _ended) = tracer(Sampling::ParentBased(RootSampling::AlwaysOff));
    let caller =
        TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
    let span = tracer.start(
        &["POST /runs"],
        SpanKind::Server,
        Parent::Remote(&caller),
        |_| {},
    );
    let context = span.context().unwrap();
    assert_eq!(context.trace_id(), caller.trace_id());
    assert_ne!(context.span_id(), caller.span_id());
    assert!(span.is_recording());
}

#[test]
fn a_dropped_span_carries_its_trace_unsampled_and_writes_nothing() {
    let (tracer, ended) = tracer(Sampling::ParentBased(RootSampling::AlwaysOn));
    let caller =
        TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00").unwrap();
    let span = tracer.start(
        &["POST /runs"],
        SpanKind::Server,
        Parent::Remote(&caller),
        |_| panic!("a dropped span writes no attributes"),
    );
    assert!(!span.is_recording());
    assert!(!span.is_disabled());
    span.set("ignored", true);
    let context = span.context().unwrap();
    assert_eq!(context.trace_id(), caller.trace_id());
    assert!(!context.sampled());
    let child = tracer.start(&["chat"], SpanKind::Client, Parent::Local(&span), |_| {});
    assert!(
        !child.is_recording(),
        "a parent-based child follows its parent"
    );
    drop((span, child));
    assert_eq!(ended.count(), 0);
}

#[test]
fn the_current_span_is_the_one_being_polled() {
    let (tracer, _ended) = tracer(Sampling::AlwaysOn);
    let outer = root(tracer, "outer");
    let inner = root(tracer, "inner");
    assert!(Span::current().is_disabled());
    let (outer_id, inner_id) = (outer.context(), inner.context());
    let seen = futures::executor::block_on(outer.traced(async {
        let before = Span::current().context();
        let within = inner.traced(async { Span::current().context() }).await;
        let after = Span::current().context();
        (before, within, after)
    }));
    assert_eq!(seen, (outer_id, inner_id, outer_id));
    assert!(
        Span::current().is_disabled(),
        "nothing is current after the poll"
    );
}

#[test]
fn a_traced_future_keeps_its_span_open_until_it_is_dropped() {
    let (tracer, ended) = tracer(Sampling::AlwaysOn);
    let future = root(tracer, "segment").traced(async { Span::current().context() });
    assert_eq!(ended.count(), 0, "the span lives in the future");
    let seen = futures::executor::block_on(future);
    assert!(seen.is_some());
    assert_eq!(ended.count(), 1);
}

#[test]
fn a_failed_span_and_its_events_and_links_are_written() {
    let (tracer, ended) = tracer(Sampling::AlwaysOn);
    let span = root(tracer, "execute_tool");
    let sender = TraceContext::root();
    span.event("awaken.decision", |attributes| {
        attributes.set("awaken.decision.id", Shown(42));
    });
    span.link(&sender);
    span.failed("denied");
    drop(span);
    let (_, sender_span, _) = sender.to_parts();
    assert!(ended.contains(0, b"awaken.decision.id"));
    assert!(ended.contains(0, b"42"));
    assert!(ended.contains(0, &sender_span));
    assert!(ended.contains(0, b"error.type"));
    assert!(ended.contains(0, b"denied"));
}

#[test]
fn a_new_trace_is_sampled_as_the_rule_for_new_traces_decides() {
    let (never, _) = tracer(Sampling::ParentBased(RootSampling::AlwaysOff));
    let (always, _) = tracer(Sampling::ParentBased(RootSampling::AlwaysOn));
    let (half, _) = tracer(Sampling::ParentBased(RootSampling::Ratio(0.5)));
    assert!(!never.new_trace().sampled());
    assert!(always.new_trace().sampled());
    let sampled = (0..2000).filter(|_| half.new_trace().sampled()).count();
    assert!((800..1200).contains(&sampled), "{sampled} of 2000");
    // A run under an unsampled new trace records nothing below it.
    let trace = never.new_trace();
    let run = never.start(
        &["invoke_agent"],
        SpanKind::Internal,
        Parent::Remote(&trace),
        |_| panic!("nothing is written under an unsampled trace"),
    );
    assert!(!run.is_recording());
    assert_eq!(run.context().unwrap().trace_id(), trace.trace_id());
}
