//! The export queue, bounded and counted: spans beyond `OTEL_BSP_MAX_QUEUE_SIZE`
//! are dropped before they reach the SDK's batch processor, and counted in
//! `awaken_telemetry_spans_dropped_total` (the SDK drops them too, but only logs
//! the first). A span counts as queued from its end until its batch is handed to
//! the exporter, so the batch processor's own queue, of the same size, never
//! fills.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor,
};

/// Spans dropped since the process started, over every provider it built.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Spans this process dropped because the export queue was full.
pub fn spans_dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// How many spans wait for export, against the most that may.
#[derive(Debug)]
struct Queued {
    spans: AtomicUsize,
    limit: usize,
}

/// `exporter` behind a batch processor whose queue holds `limit` spans at most.
pub(super) fn bounded<E: SpanExporter + 'static>(exporter: E, limit: usize) -> Bounded {
    let queued = Arc::new(Queued {
        spans: AtomicUsize::new(0),
        limit,
    });
    let batch = BatchSpanProcessor::builder(Handed {
        inner: exporter,
        queued: Arc::clone(&queued),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(limit)
            .build(),
    )
    .build();
    Bounded {
        inner: batch,
        queued,
    }
}

/// The batch processor, admitting spans while fewer than the limit are queued.
#[derive(Debug)]
pub(super) struct Bounded {
    inner: BatchSpanProcessor,
    queued: Arc<Queued>,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.queued.spans.fetch_add(1, Ordering::AcqRel) >= self.queued.limit {
            self.queued.spans.fetch_sub(1, Ordering::AcqRel);
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter, marking every batch it is handed as no longer queued.
#[derive(Debug)]
struct Handed<E> {
    inner: E,
    queued: Arc<Queued>,
}

impl<E: SpanExporter> SpanExporter for Handed<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        // Saturating: a count that wrapped would read as a full queue forever.
        let handed = batch.len();
        let _ = self
            .queued
            .spans
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                Some(queued.saturating_sub(handed))
            });
        self.inner.export(batch)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
