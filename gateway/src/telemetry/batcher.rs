//! The span queue: each span arrives as protobuf bytes from the thread that
//! ended it (decision 0070) and is sent in batches by a thread of its own
//! (decision 0069).
//!
//! Writing a span where it ends frees its buffer on the thread that
//! allocated it and leaves the export thread nothing per span but bytes to
//! send. The queue is bounded: spans beyond `OTEL_BSP_MAX_QUEUE_SIZE` waiting
//! to be handed to the transport are dropped and counted in
//! `awaken_telemetry_spans_dropped_total`, so a slow or absent collector never
//! holds a run up.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use awaken_actors::telemetry::SpanSink;

use super::TelemetryError;
use super::otlp::{self, EncodedResource};
use super::transport::SpanTransport;

/// Spans dropped since the process started, over every batcher it built.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Spans this process dropped because the export queue was full.
pub fn spans_dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
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

/// The spans of one export request.
#[derive(Debug, Default)]
struct Chunk {
    /// `ScopeSpans.spans` fields, one per span.
    bytes: Vec<u8>,
    spans: usize,
}

/// Emptied chunks kept for reuse, at most: enough for a steady stream.
const SPARE_CHUNKS: usize = 2;

impl Queue {
    /// Appends the span written in `body`; whether that filled a batch of
    /// `batch_size`.
    fn push(&mut self, body: &[u8], batch_size: usize) -> bool {
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
        otlp::push_scope_span(&mut chunk.bytes, body);
        chunk.spans += 1;
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

/// The export thread of an exporting process, and the queue it sends from.
#[derive(Debug)]
pub(super) struct SpanBatcher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// What the tracer ends spans into: the batcher's queue.
#[derive(Debug, Clone)]
pub(super) struct BatchQueue(Arc<Shared>);

impl SpanSink for BatchQueue {
    fn export(&self, span: &[u8]) {
        let shared = &self.0;
        let mut queue = shared.queue();
        if queue.spans >= shared.settings.queue_size || queue.stopping {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if queue.push(span, shared.settings.batch_size) {
            shared.work.notify_one();
        }
    }
}

impl SpanBatcher {
    /// Starts the export thread, sending batches under `resource` through
    /// `transport`, each send bounded by `timeout`.
    pub(super) fn start(
        transport: SpanTransport,
        resource: EncodedResource,
        settings: BatchSettings,
        timeout: Duration,
    ) -> Result<Self, TelemetryError> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            flushed: Condvar::new(),
            settings,
        });
        let exporter = Exporter {
            shared: Arc::clone(&shared),
            transport,
            resource,
            timeout,
            failing: false,
        };
        let thread = std::thread::Builder::new()
            .name("otlp-export".to_owned())
            .spawn(move || exporter.run())
            .map_err(|_| TelemetryError::internal("the span export thread"))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// The queue spans are ended into.
    pub(super) fn queue(&self) -> BatchQueue {
        BatchQueue(Arc::clone(&self.shared))
    }

    /// Sends what is queued and stops the export thread, waiting up to
    /// `timeout`; false when the time ran out first. Spans ended later are
    /// dropped.
    pub(super) fn shutdown(&mut self, timeout: Duration) -> bool {
        let flushed = self.flush(true, timeout);
        if flushed && let Some(thread) = self.thread.take() {
            // It said it is done: this returns at once.
            let _ = thread.join();
        }
        flushed
    }

    /// Asks the export thread for a flush (or its stop) and waits up to
    /// `timeout`; false when the time ran out first.
    fn flush(&self, stop: bool, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut queue = self.shared.queue();
        queue.flushes_asked += 1;
        queue.stopping |= stop;
        let asked = queue.flushes_asked;
        self.shared.work.notify_one();
        while queue.flushes_done < asked {
            match wait_until(&self.shared.flushed, queue, deadline) {
                Ok(woken) => queue = woken,
                Err(_) => return false,
            }
        }
        true
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
                    otlp::export_request(&chunk.bytes, &self.resource, &mut body);
                    last_len = body.len();
                    self.send(body, chunk.spans);
                }
                chunk.bytes.clear();
                chunk.spans = 0;
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
    use awaken_actors::telemetry::{Parent, Sampling, SpanKind, Tracer};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
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

    /// A tracer ending its spans into `batcher`'s queue.
    fn tracer(batcher: &SpanBatcher) -> &'static Tracer {
        Box::leak(Box::new(Tracer::new(Sampling::AlwaysOn, batcher.queue())))
    }

    fn end_span(tracer: &'static Tracer, name: &str) {
        drop(tracer.start(&[name], SpanKind::Internal, Parent::Root, |_| {}));
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
        let mut batcher = tokio::task::spawn_blocking(move || {
            let transport = SpanTransport::http(&url, &ExportHeaders::default()).unwrap();
            let batcher = SpanBatcher::start(
                transport,
                EncodedResource::default(),
                settings,
                Duration::from_secs(5),
            )
            .unwrap();
            let tracer = tracer(&batcher);
            for name in ["one", "two", "three", "four"] {
                end_span(tracer, name);
            }
            batcher
        })
        .await
        .unwrap();
        assert_eq!(next(&mut exports).await, ["one", "two", "three"]);
        let stopped = tokio::task::spawn_blocking(move || batcher.shutdown(Duration::from_secs(5)))
            .await
            .unwrap();
        assert!(stopped);
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
        let batcher = SpanBatcher::start(
            transport,
            EncodedResource::default(),
            settings,
            Duration::from_secs(1),
        )
        .unwrap();
        let tracer = tracer(&batcher);
        let before = spans_dropped();
        // Four fill the queue (and may be taken by the export thread, which is
        // then stuck); of the next ten, at least six find it full.
        for _ in 0..14 {
            end_span(tracer, "span");
        }
        assert!(
            spans_dropped() - before >= 6,
            "{}",
            spans_dropped() - before
        );
        drop(closed);
    }
}
