//! The runtime's spans, written straight to OTLP protobuf (decision 0070): a
//! recorded [`Span`] holds the bytes of its `Span` message, each attribute,
//! event and link is written into them when it is set, and the last clone's
//! drop adds the end time and hands the bytes to the process's
//! [`SpanSink`]. Ids, sampling and the current span are this module's own; no
//! span SDK, span data or owned attribute strings stand between the run loop
//! and the wire.
//!
//! The node installs its [`Tracer`] once ([`install_tracer`]); until it does,
//! every span is disabled and costs one check. A future runs in a span with
//! [`Span::traced`]: while it is polled the span is [`Span::current`], which
//! the JSON log lines and outgoing `traceparent` headers read.

mod attributes;
mod sampling;
pub mod wire;

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};

use futures::future::Either;

pub use attributes::{AttributeValue, Attributes, Shown, Strings};
pub use sampling::{RootSampling, Sampling};

use crate::clock::now_nanos;
use crate::contract::TraceContext;

/// The W3C `sampled` flag.
const SAMPLED: u8 = 0x01;

/// Fields of the OTLP `Span` message this module writes.
mod field {
    pub(super) const TRACE_ID: u32 = 1;
    pub(super) const SPAN_ID: u32 = 2;
    pub(super) const PARENT_SPAN_ID: u32 = 4;
    pub(super) const NAME: u32 = 5;
    pub(super) const KIND: u32 = 6;
    pub(super) const START: u32 = 7;
    pub(super) const END: u32 = 8;
    pub(super) const ATTRIBUTES: u32 = 9;
    pub(super) const EVENTS: u32 = 11;
    pub(super) const LINKS: u32 = 13;
    pub(super) const STATUS: u32 = 15;
    pub(super) const FLAGS: u32 = 16;
}

/// Where finished spans go: each as the body of one OTLP `Span` message.
pub trait SpanSink: Send + Sync + 'static {
    /// Takes one finished span; called on the thread that ended it, so it
    /// must not block.
    fn export(&self, span: &[u8]);
}

/// Builds the process's spans: its sampling rule and where they go.
pub struct Tracer {
    sampling: Sampling,
    sink: Box<dyn SpanSink>,
}

impl fmt::Debug for Tracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracer")
            .field("sampling", &self.sampling)
            .finish_non_exhaustive()
    }
}

/// The tracer every span of the process is built with, once export is on.
static TRACER: OnceLock<Tracer> = OnceLock::new();

/// Turns span export on for the process with `tracer`; false when a tracer was
/// installed already (the first one stays).
pub fn install_tracer(tracer: Tracer) -> bool {
    TRACER.set(tracer).is_ok()
}

/// What a span stands for, as OTLP names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Work inside the process.
    Internal = 1,
    /// Handling a request from a caller.
    Server = 2,
    /// A request to another service.
    Client = 3,
    /// Sending a message that is handled later.
    Producer = 4,
    /// Handling a message.
    Consumer = 5,
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
pub struct Span(Option<Arc<Live>>);

/// A span that exists: its context, and its bytes when it is recorded.
struct Live {
    tracer: &'static Tracer,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
    /// The `Span` message written so far; `None` when the sampler dropped the
    /// span (it still carries its trace's context to what it calls).
    record: Option<Mutex<Vec<u8>>>,
}

impl fmt::Debug for Live {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Live")
            .field("recording", &self.record.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(record) = self.record.take() {
            let mut body = record.into_inner().unwrap_or_else(PoisonError::into_inner);
            wire::fixed64(&mut body, field::END, now_nanos());
            self.tracer.sink.export(&body);
        }
    }
}

/// Bytes a span's message is given to start with: its fixed fields and a
/// handful of attributes fit, so most spans never grow their buffer.
const SPAN_CAPACITY: usize = 512;

impl Tracer {
    /// A tracer deciding with `sampling` and ending spans into `sink`.
    pub fn new(sampling: Sampling, sink: impl SpanSink) -> Self {
        Self {
            sampling,
            sink: Box::new(sink),
        }
    }

    /// Starts a span of `kind` under `parent`, named by the parts of `name`
    /// one after another (`["chat ", model]`: no formatting); `attributes` are
    /// written only when the span is recorded.
    pub fn start(
        &'static self,
        name: &[&str],
        kind: SpanKind,
        parent: Parent<'_>,
        attributes: impl FnOnce(&mut Attributes<'_>),
    ) -> Span {
        let (trace_id, parent_span, parent_flags, parent_is_remote) = match parent {
            Parent::Root => (new_trace_id(), None, 0, false),
            Parent::Remote(trace) => {
                let (trace_id, span_id, flags) = trace.to_parts();
                (trace_id, Some(span_id), flags, true)
            }
            Parent::Local(Span(Some(live))) => {
                (live.trace_id, Some(live.span_id), live.flags, false)
            }
            Parent::Local(Span(None)) => return Span::none(),
        };
        let sampled = self.sampling.samples(
            parent_span.map(|_| parent_flags & SAMPLED == SAMPLED),
            &trace_id,
        );
        let flags = (parent_flags & !SAMPLED) | if sampled { SAMPLED } else { 0 };
        let span_id = new_span_id();
        let record = sampled.then(|| {
            let mut body = Vec::with_capacity(SPAN_CAPACITY);
            wire::bytes(&mut body, field::TRACE_ID, &trace_id);
            wire::bytes(&mut body, field::SPAN_ID, &span_id);
            if let Some(parent) = parent_span {
                wire::bytes(&mut body, field::PARENT_SPAN_ID, &parent);
            }
            wire::joined(&mut body, field::NAME, name);
            wire::varint(&mut body, field::KIND, kind as u64);
            wire::fixed64(&mut body, field::START, now_nanos());
            wire::fixed32(&mut body, field::FLAGS, span_flags(parent_is_remote, flags));
            attributes(&mut Attributes::new(&mut body, field::ATTRIBUTES));
            Mutex::new(body)
        });
        Span(Some(Arc::new(Live {
            tracer: self,
            trace_id,
            span_id,
            flags,
            record,
        })))
    }
}

/// A new trace for work that came without one (a run started with no
/// `traceparent`), its `sampled` flag set as the installed tracer's rule
/// decides for a new trace, so ratio and parent-based samplers apply to it
/// too; sampled when no tracer is installed (whoever receives it decides).
pub fn new_trace() -> TraceContext {
    match TRACER.get() {
        Some(tracer) => tracer.new_trace(),
        None => TraceContext::root(),
    }
}

impl Tracer {
    /// A new trace, sampled as this tracer's rule decides for one.
    pub fn new_trace(&self) -> TraceContext {
        let root = TraceContext::root();
        let (trace_id, span_id, flags) = root.to_parts();
        let sampled = self.sampling.samples(None, &trace_id);
        let flags = (flags & !SAMPLED) | if sampled { SAMPLED } else { 0 };
        TraceContext::from_parts(trace_id, span_id, flags).unwrap_or(root)
    }
}

impl Span {
    /// The span that records nothing.
    pub const fn none() -> Self {
        Self(None)
    }

    /// Starts a span of the process's tracer (see [`Tracer::start`]); disabled
    /// when none is installed.
    pub fn start(
        name: &[&str],
        kind: SpanKind,
        parent: Parent<'_>,
        attributes: impl FnOnce(&mut Attributes<'_>),
    ) -> Self {
        match TRACER.get() {
            Some(tracer) => tracer.start(name, kind, parent, attributes),
            None => Self::none(),
        }
    }

    /// The span whose [`traced`](Self::traced) future is being polled on this
    /// thread.
    pub fn current() -> Self {
        CURRENT.with(|current| {
            let live = current.take();
            let span = Self(live.clone());
            current.set(live);
            span
        })
    }

    /// Whether the span records nothing and carries no context.
    pub fn is_disabled(&self) -> bool {
        self.0.is_none()
    }

    /// Whether what is set on the span is kept (it exists and was sampled).
    pub fn is_recording(&self) -> bool {
        self.0.as_ref().is_some_and(|live| live.record.is_some())
    }

    /// Runs `write` on the span's message, when it is recorded.
    fn write(&self, write: impl FnOnce(&mut Vec<u8>)) {
        if let Some(record) = self.0.as_ref().and_then(|live| live.record.as_ref()) {
            write(&mut record.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// Sets attribute `key` to `value`.
    pub fn set(&self, key: &str, value: impl AttributeValue) {
        self.write(|body| {
            Attributes::new(body, field::ATTRIBUTES).set(key, value);
        });
    }

    /// Marks the span as failed with `error_type` (`error.type`, status
    /// ERROR): the one way every span of the runtime says it failed.
    pub fn failed(&self, error_type: &str) {
        self.write(|body| {
            Attributes::new(body, field::ATTRIBUTES).set("error.type", error_type);
            wire::nested(body, field::STATUS, |status| {
                wire::string(status, 2, error_type);
                wire::varint(status, 3, 2);
            });
        });
    }

    /// Records that `name` happened now, with `attributes`.
    pub fn event(&self, name: &str, attributes: impl FnOnce(&mut Attributes<'_>)) {
        self.write(|body| {
            wire::nested(body, field::EVENTS, |event| {
                wire::fixed64(event, 1, now_nanos());
                wire::string(event, 2, name);
                attributes(&mut Attributes::new(event, 3));
            });
        });
    }

    /// Links the span to `trace`: a context related to it but not its parent
    /// (the sender of a decision, the transport under an MCP call).
    pub fn link(&self, trace: &TraceContext) {
        self.write(|body| {
            let (trace_id, span_id, flags) = trace.to_parts();
            wire::nested(body, field::LINKS, |link| {
                wire::bytes(link, 1, &trace_id);
                wire::bytes(link, 2, &span_id);
                wire::fixed32(link, 6, span_flags(true, flags));
            });
        });
    }

    /// The span's W3C context, for what it calls; `None` when disabled.
    pub fn context(&self) -> Option<TraceContext> {
        let live = self.0.as_ref()?;
        TraceContext::from_parts(live.trace_id, live.span_id, live.flags)
    }

    /// `future`, polled with this span as the current one; left as it is when
    /// the span is disabled (the wrapper would cost every poll).
    pub fn traced<F: Future>(&self, future: F) -> Traced<F> {
        match &self.0 {
            Some(live) => Either::Right(InSpan {
                future,
                span: Some(Arc::clone(live)),
            }),
            None => Either::Left(future),
        }
    }
}

/// A future polled in a span (see [`Span::traced`]).
pub type Traced<F> = Either<F, InSpan<F>>;

thread_local! {
    /// The span of the [`InSpan`] being polled on this thread.
    static CURRENT: Cell<Option<Arc<Live>>> = const { Cell::new(None) };
}

pin_project_lite::pin_project! {
    /// A future that is polled with its span as [`Span::current`].
    pub struct InSpan<F> {
        #[pin]
        future: F,
        // Moved into `CURRENT` for each poll and back: no reference count
        // changes per poll.
        span: Option<Arc<Live>>,
    }
}

impl<F: Future> Future for InSpan<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _current = Entered::new(this.span);
        this.future.poll(cx)
    }
}

impl<F> fmt::Debug for InSpan<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InSpan").finish_non_exhaustive()
    }
}

/// A span made current for one poll; when the poll returns or unwinds, the
/// span goes back to its future and the one before it is current again.
struct Entered<'a> {
    home: &'a mut Option<Arc<Live>>,
    previous: Option<Arc<Live>>,
}

impl<'a> Entered<'a> {
    fn new(home: &'a mut Option<Arc<Live>>) -> Self {
        let span = home.take();
        Self {
            previous: CURRENT.with(|current| current.replace(span)),
            home,
        }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let previous = self.previous.take();
        *self.home = CURRENT.with(|current| current.replace(previous));
    }
}

/// OTLP `SpanFlags`: the W3C flags, and whether the parent (or the linked
/// span) is remote, which is always known here.
fn span_flags(remote: bool, trace_flags: u8) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    u32::from(trace_flags) | HAS_IS_REMOTE | if remote { IS_REMOTE } else { 0 }
}

fn new_trace_id() -> [u8; 16] {
    fastrand::u128(1..).to_be_bytes()
}

fn new_span_id() -> [u8; 8] {
    fastrand::u64(1..).to_be_bytes()
}

#[cfg(test)]
mod tests;
