//! The runtime's spans, built with the OpenTelemetry API directly (decision
//! 0067): a [`Span`] is an OpenTelemetry context holding one SDK span, or
//! nothing when export is off. No `tracing` span, registry slot or bridge layer
//! stands between the run loop and the SDK, so a span costs what the SDK charges
//! for it and, with export off, a span is one `None`.
//!
//! The node installs its tracer once ([`install_tracer`]); until it does, every
//! span is disabled. A future runs in a span's context with [`Span::traced`]:
//! while it is polled the span is the current OpenTelemetry context, which is
//! what [`Span::current`] and the JSON log lines read.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::OnceLock;

use futures::future::Either;
use opentelemetry::context::{FutureExt as _, WithContext};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _,
};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::SdkTracer;

use crate::contract::TraceContext;

/// The tracer every span of the process is built with, once export is on.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Turns span export on for the process with `tracer`; false when a tracer was
/// installed already (the first one stays).
pub fn install_tracer(tracer: SdkTracer) -> bool {
    TRACER.set(tracer).is_ok()
}

/// Where a new span hangs in its trace.
#[derive(Debug, Clone, Copy)]
pub enum Parent<'a> {
    /// A new trace.
    Root,
    /// A context that came from elsewhere (a `traceparent`, a run's record).
    Remote(&'a TraceContext),
    /// A span of this process; no span when it is disabled.
    Local(&'a Span),
}

impl<'a> From<Option<&'a TraceContext>> for Parent<'a> {
    fn from(trace: Option<&'a TraceContext>) -> Self {
        trace.map_or(Parent::Root, Parent::Remote)
    }
}

/// One span of the runtime, ended when its last clone is dropped; disabled
/// (every method a no-op) when export is off or its parent is disabled.
#[derive(Debug, Clone, Default)]
pub struct Span(Option<Context>);

impl Span {
    /// The span that records nothing.
    pub const fn none() -> Self {
        Self(None)
    }

    /// Starts a span named `name` (formatted only when spans are exported) of
    /// `kind` under `parent`; `attributes` are
    /// built for a span the sampler keeps (and, under a ratio sampler, for the
    /// new traces it drops).
    pub fn start(
        name: fmt::Arguments<'_>,
        kind: SpanKind,
        parent: Parent<'_>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self::none();
        };
        let parent = match parent {
            Parent::Root => Context::new(),
            Parent::Remote(trace) => Context::new().with_remote_span_context(span_context(trace)),
            Parent::Local(Span(Some(context))) => context.clone(),
            Parent::Local(Span(None)) => return Self::none(),
        };
        let name: Cow<'static, str> = match name.as_str() {
            Some(fixed) => Cow::Borrowed(fixed),
            None => Cow::Owned(name.to_string()),
        };
        let builder = tracer.span_builder(name).with_kind(kind);
        // Where the sampler will most likely keep the span (a new trace, or a
        // sampled parent), its attributes go in with it, as one vector; else
        // they are built only if it did.
        let parent_sampled = parent.span().span_context().is_sampled();
        let span = if parent_sampled || !parent.has_active_span() {
            builder
                .with_attributes(attributes())
                .start_with_context(tracer, &parent)
        } else {
            let mut span = builder.start_with_context(tracer, &parent);
            if opentelemetry::trace::Span::is_recording(&span) {
                opentelemetry::trace::Span::set_attributes(&mut span, attributes());
            }
            span
        };
        Self(Some(parent.with_span(span)))
    }

    /// The span of the current OpenTelemetry context: the one whose
    /// [`traced`](Self::traced) future is being polled on this thread.
    pub fn current() -> Self {
        let current = Context::current();
        Self(current.has_active_span().then_some(current))
    }

    /// Whether the span records nothing and carries no context.
    pub fn is_disabled(&self) -> bool {
        self.0.is_none()
    }

    /// Whether what is set on the span is kept (it exists and was sampled).
    pub fn is_recording(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|context| context.span().is_recording())
    }

    /// Sets attribute `key` to `value`.
    pub fn set(&self, key: &'static str, value: impl Into<Value>) {
        if let Some(context) = &self.0 {
            context.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// Marks the span as failed with `error_type` (`error.type`, status
    /// ERROR): the one way every span of the runtime says it failed.
    pub fn failed(&self, error_type: impl Into<Cow<'static, str>>) {
        if let Some(context) = &self.0 {
            let error_type = error_type.into();
            let span = context.span();
            span.set_attribute(KeyValue::new("error.type", error_type.clone()));
            span.set_status(Status::error(error_type));
        }
    }

    /// Records that `name` happened now, with `attributes`.
    pub fn event(&self, name: &'static str, attributes: Vec<KeyValue>) {
        if let Some(context) = &self.0 {
            context.span().add_event(name, attributes);
        }
    }

    /// Links the span to `trace`: a context related to it but not its parent
    /// (the sender of a decision, the transport under an MCP call).
    pub fn link(&self, trace: &TraceContext) {
        if let Some(context) = &self.0 {
            context.span().add_link(span_context(trace), Vec::new());
        }
    }

    /// The span's W3C context, for what it calls; `None` when disabled.
    pub fn context(&self) -> Option<TraceContext> {
        trace_context_of(self.0.as_ref()?.span().span_context())
    }

    /// `future`, polled in the span's context; left as it is when the span is
    /// disabled (the wrapper would cost every poll).
    pub fn traced<F: Future>(&self, future: F) -> Traced<F> {
        match &self.0 {
            Some(context) => Either::Right(future.with_context(context.clone())),
            None => Either::Left(future),
        }
    }
}

/// A future polled in a span's context (see [`Span::traced`]).
pub type Traced<F> = Either<F, WithContext<F>>;

/// The W3C context of an OpenTelemetry span context, when it is valid.
pub fn trace_context_of(span_context: &SpanContext) -> Option<TraceContext> {
    if !span_context.is_valid() {
        return None;
    }
    TraceContext::from_parts(
        span_context.trace_id().to_bytes(),
        span_context.span_id().to_bytes(),
        span_context.trace_flags().to_u8(),
    )
}

fn span_context(trace: &TraceContext) -> SpanContext {
    let (trace_id, span_id, flags) = trace.to_parts();
    SpanContext::new(
        TraceId::from_bytes(trace_id),
        SpanId::from_bytes(span_id),
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    )
}
