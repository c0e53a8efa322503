//! The span processor: each span written to protobuf when it ends, on the
//! thread that ends it, and sent in batches by a thread of its own
//! (decision 0069).
//!
//! Writing a span where it ends frees its strings on the thread that
//! allocated them and leaves the export thread nothing per span but bytes to
//! send; the SDK's batch processor moved every `SpanData` through a channel
//! and had its thread free every string of every span, across threads (over
//! HTTP, exporting every span cost 18 % of throughput that way, 10 % this way;
//! `docs/benchmarks.md`). The queue is bounded: spans beyond `OTEL_BSP_MAX_QUEUE_SIZE`
//! written and not yet handed to the transport are dropped and counted in
//! `awaken_telemetry_spans_dropped_total`, so a slow or absent collector never
//! holds a run up.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

use super::otlp::{self, EncodedResource, ScopeBatch};
use super::transport::SpanTransport;

/// Spans dropped since the process started, over every processor it built.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Spans this process dropped because the export queue was full.
pub fn spans_dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

thread_local! {
    /// Where a span is written before it joins the queue, so the queue's lock
    /// is held for a copy only.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// When batches leave (the `OTEL_BSP_*` settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSettings {
    /// Spans written and not yet sent, at most (`OTEL_BSP_MAX_QUEUE_SIZE`).
    pub queue_size: usize,
    /// A batch leaves as soon as this many spans wait
    /// (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`)...
    pub batch_size: usize,
    /// ... or this long after the last one left (`OTEL_BSP_SCHEDULE_DELAY`).
    pub delay: Duration,
}

/// Spans waiting for the export thread, in chunks of at most a batch.
#[derive(Debug, Default)]
struct Queue {
    /// Oldest first; only the last one is still being filled.
    chunks: VecDeque<Chunk>,
    /// Chunks sent and emptied, their buffers kept for the next spans.
    spare: Vec<Chunk>,
    /// Spans in `chunks`.
    spans: usize,
    /// Flushes asked for, and the last one done.
    flushes_asked: u64,
    flushes_done: u64,
    stopping: bool,
}

/// The spans of one export request, by scope.
#[derive(Debug, Default)]
struct Chunk {
    batches: Vec<ScopeBatch>,
    spans: usize,
}

impl Chunk {
    /// Appends the span whose body is `body` under `scope`.
    fn push(&mut self, scope: &InstrumentationScope, body: &[u8]) {
        let index = match self
            .batches
            .iter()
            .position(|batch| same(&batch.scope, scope))
        {
            Some(index) => index,
            None => {
                self.batches.push(ScopeBatch {
                    scope: scope.clone(),
                    spans: Vec::new(),
                });
                self.batches.len() - 1
            }
        };
        if let Some(batch) = self.batches.get_mut(index) {
            otlp::push_scope_span(&mut batch.spans, body);
        }
        self.spans += 1;
    }

    fn clear(&mut self) {
        for batch in &mut self.batches {
            batch.spans.clear();
        }
        self.spans = 0;
    }
}

/// Whether `a` and `b` are the same scope; every span of one tracer carries a
/// clone of its scope, whose name is then the same `'static` text, so that is
/// checked first.
fn same(a: &InstrumentationScope, b: &InstrumentationScope) -> bool {
    let (x, y) = (a.name(), b.name());
    (std::ptr::eq(x.as_ptr(), y.as_ptr())
        && x.len() == y.len()
        && a.version() == b.version()
        && a.schema_url() == b.schema_url()
        && a.attributes().eq(b.attributes()))
        || a == b
}

/// Emptied chunks kept for reuse, at most: enough for a steady stream.
const SPARE_CHUNKS: usize = 2;

impl Queue {
    /// Appends the span written in `bytes` under `scope`; whether that filled
    /// a batch of `batch_size`.
    fn push(&mut self, scope: &InstrumentationScope, bytes: &[u8], batch_size: usize) -> bool {
        let chunk = match self.chunks.back_mut() {
            Some(chunk) if chunk.spans < batch_size => chunk,
            _ => {
                let fresh = self.spare.pop().unwrap_or_default();
                self.chunks.push_back(fresh);
                let Some(chunk) = self.chunks.back_mut() else {
                    return false;
                };
                chunk
            }
        };
        chunk.push(scope, bytes);
        self.spans += 1;
        chunk.spans == batch_size
    }

    /// Whether the oldest chunk is a whole batch.
    fn full(&self, batch_size: usize) -> bool {
        self.chunks
            .front()
            .is_some_and(|chunk| chunk.spans >= batch_size)
    }
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// The export thread waits here for a full batch, a flush or the stop.
    work: Condvar,
    /// Flushes wait here for the export thread.
    flushed: Condvar,
    settings: BatchSettings,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock leaves bytes, never a broken invariant.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The SDK span processor of an exporting process.
#[derive(Debug)]
pub(super) struct SpanBatcher {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Until the provider hands over its resource.
    pending: Option<(SpanTransport, Duration)>,
}

impl SpanBatcher {
    /// A processor sending through `transport`, each send bounded by `timeout`.
    pub(super) fn new(
        transport: SpanTransport,
        settings: BatchSettings,
        timeout: Duration,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                work: Condvar::new(),
                flushed: Condvar::new(),
                settings,
            }),
            thread: Mutex::new(None),
            pending: Some((transport, timeout)),
        }
    }

    /// Starts the export thread, whose requests carry `resource`.
    fn start(&mut self, resource: EncodedResource) {
        let Some((transport, timeout)) = self.pending.take() else {
            return;
        };
        let shared = Arc::clone(&self.shared);
        let exporter = Exporter {
            shared,
            transport,
            resource,
            timeout,
            failing: false,
        };
        match std::thread::Builder::new()
            .name("otlp-export".to_owned())
            .spawn(move || exporter.run())
        {
            Ok(handle) => {
                *self.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle);
            }
            Err(error) => tracing::error!(%error, "telemetry: no export thread, spans are dropped"),
        }
    }

    /// Asks the export thread for a flush (or its stop) and waits up to `timeout`.
    fn flush(&self, stop: bool, timeout: Duration) -> OTelSdkResult {
        let deadline = Instant::now() + timeout;
        let mut queue = self.shared.queue();
        queue.flushes_asked += 1;
        queue.stopping |= stop;
        let asked = queue.flushes_asked;
        self.shared.work.notify_one();
        while queue.flushes_done < asked {
            match wait_until(&self.shared.flushed, queue, deadline) {
                Ok(woken) => queue = woken,
                Err(_) => return Err(OTelSdkError::Timeout(timeout)),
            }
        }
        Ok(())
    }
}

impl SpanProcessor for SpanBatcher {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        SCRATCH.with_borrow_mut(|scratch| {
            otlp::span_body(scratch, &span);
            let mut queue = self.shared.queue();
            if queue.spans >= self.shared.settings.queue_size || queue.stopping {
                DROPPED.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let batch_size = self.shared.settings.batch_size;
            if queue.push(&span.instrumentation_scope, scratch, batch_size) {
                self.shared.work.notify_one();
            }
        });
        // `span` is dropped here, on the thread that built it.
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.flush(false, Duration::from_secs(30))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let flushed = self.flush(true, timeout);
        if flushed.is_ok()
            && let Some(thread) = self
                .thread
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        {
            // It said it is done: this returns at once.
            let _ = thread.join();
        }
        flushed
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.start(EncodedResource::new(resource));
    }
}

/// Waits on `condvar` until woken or `deadline`: `Err` with the lock still
/// held once the deadline passed.
fn wait_until<'a>(
    condvar: &Condvar,
    queue: MutexGuard<'a, Queue>,
    deadline: Instant,
) -> Result<MutexGuard<'a, Queue>, MutexGuard<'a, Queue>> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(queue);
    }
    Ok(condvar
        .wait_timeout(queue, left)
        .unwrap_or_else(PoisonError::into_inner)
        .0)
}

/// What the export thread took from the queue.
struct Taken {
    chunk: Option<Chunk>,
    /// The flushes this completes, when it emptied the queue.
    flushed: Option<u64>,
    stopping: bool,
}

/// The export thread's state.
struct Exporter {
    shared: Arc<Shared>,
    transport: SpanTransport,
    resource: EncodedResource,
    timeout: Duration,
    /// Whether the last send failed: failures are logged when they start and
    /// when they end, not once per batch.
    failing: bool,
}

impl Exporter {
    fn run(mut self) {
        // The size of the last request: the next one is about as big, and its
        // buffer is handed to the transport whole.
        let mut last_len = 0;
        loop {
            let Taken {
                chunk,
                flushed,
                stopping,
            } = self.next_chunk();
            if let Some(mut chunk) = chunk {
                if chunk.spans > 0 {
                    let mut body = Vec::with_capacity(last_len + last_len / 8);
                    otlp::export_request(&chunk.batches, &self.resource, &mut body);
                    last_len = body.len();
                    self.send(body, chunk.spans);
                }
                chunk.clear();
                let mut queue = self.shared.queue();
                if queue.spare.len() < SPARE_CHUNKS {
                    queue.spare.push(chunk);
                }
            }
            if let Some(asked) = flushed {
                let mut queue = self.shared.queue();
                queue.flushes_done = queue.flushes_done.max(asked);
                self.shared.flushed.notify_all();
                if stopping {
                    return;
                }
            }
        }
    }

    /// Waits for a whole batch, the delay, a flush or the stop, and takes the
    /// oldest chunk.
    fn next_chunk(&self) -> Taken {
        let settings = self.shared.settings;
        let deadline = Instant::now() + settings.delay;
        let mut queue = self.shared.queue();
        while !queue.full(settings.batch_size)
            && !queue.stopping
            && queue.flushes_done == queue.flushes_asked
        {
            match wait_until(&self.shared.work, queue, deadline) {
                Ok(woken) => queue = woken,
                Err(late) => {
                    queue = late;
                    break;
                }
            }
        }
        let chunk = queue.chunks.pop_front();
        if let Some(chunk) = &chunk {
            queue.spans -= chunk.spans;
        }
        // A flush (or the stop) is done once nothing older than it is left.
        let flushed = queue.chunks.is_empty().then_some(queue.flushes_asked);
        Taken {
            chunk,
            flushed,
            stopping: queue.stopping,
        }
    }

    fn send(&mut self, body: Vec<u8>, spans: usize) {
        match self.transport.send(body, self.timeout) {
            Ok(()) => {
                if std::mem::take(&mut self.failing) {
                    tracing::warn!("telemetry: the collector takes spans again");
                }
            }
            Err(error) => {
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(%error, spans, "telemetry: spans not exported (logged once until the collector takes them again)");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use prost::Message;
    use tokio::sync::mpsc;

    use super::*;
    use crate::telemetry::ExportHeaders;

    /// A collector answering every export; the span names of each one go to
    /// the receiver.
    async fn collector() -> (String, mpsc::UnboundedReceiver<Vec<String>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let tx = tx.clone();
                async move {
                    let request = ExportTraceServiceRequest::decode(body).unwrap();
                    let names = request
                        .resource_spans
                        .iter()
                        .flat_map(|r| &r.scope_spans)
                        .flat_map(|s| &s.spans)
                        .map(|span| span.name.clone())
                        .collect();
                    let _ = tx.send(names);
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{address}/v1/traces"), rx)
    }

    async fn next(rx: &mut mpsc::UnboundedReceiver<Vec<String>>) -> Vec<String> {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("an export in time")
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_batch_leaves_at_once_and_the_rest_at_shutdown() {
        let (url, mut exports) = collector().await;
        let settings = BatchSettings {
            queue_size: 10,
            batch_size: 3,
            // Never, within the test: what leaves, leaves for another reason.
            delay: Duration::from_secs(3600),
        };
        // The blocking HTTP client lives outside the test's runtime.
        let provider = tokio::task::spawn_blocking(move || {
            let transport = SpanTransport::http(&url, &ExportHeaders::default()).unwrap();
            let batcher = SpanBatcher::new(transport, settings, Duration::from_secs(5));
            let provider = SdkTracerProvider::builder()
                .with_span_processor(batcher)
                .build();
            let tracer = provider.tracer("awaken");
            for name in ["one", "two", "three", "four"] {
                tracer.start(name).end();
            }
            provider
        })
        .await
        .unwrap();
        assert_eq!(next(&mut exports).await, ["one", "two", "three"]);
        tokio::task::spawn_blocking(move || provider.shutdown())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(next(&mut exports).await, ["four"]);
    }

    #[test]
    fn spans_beyond_the_queue_are_dropped_and_counted() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", closed.local_addr().unwrap());
        // Bound, never accepted: each export waits for its time limit.
        let transport = SpanTransport::http(&url, &ExportHeaders::default()).unwrap();
        let settings = BatchSettings {
            queue_size: 4,
            batch_size: 4,
            delay: Duration::from_secs(3600),
        };
        let batcher = SpanBatcher::new(transport, settings, Duration::from_secs(1));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batcher)
            .build();
        let tracer = provider.tracer("awaken");
        let before = spans_dropped();
        // Four fill the queue (and may be taken by the export thread, which is
        // then stuck); of the next ten, at least six find it full.
        for _ in 0..14 {
            tracer.start("span").end();
        }
        assert!(
            spans_dropped() - before >= 6,
            "{}",
            spans_dropped() - before
        );
        drop(closed);
    }
}
