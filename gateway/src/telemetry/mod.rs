//! The process's logs and traces: a `tracing` subscriber writing log lines on
//! stderr (`RUST_LOG`, warnings by default; text or JSON) and, when export is
//! on, the tracer the runtime's spans are built with
//! ([`awaken_actors::telemetry::Span`]), sent over OTLP/HTTP or OTLP/gRPC.
//!
//! Spans and log lines are separate paths (decision 0067): spans never go
//! through the `tracing` subscriber, and with export off no tracer is installed,
//! so every span is disabled. Each span is written to protobuf as it is
//! recorded (decision 0070) and sent by an export thread behind a bounded
//! queue (decision 0069): a slow or absent collector drops spans, never delays
//! a run.

mod batcher;
mod headers;
mod json_lines;
mod metric_push;
mod otlp;
mod settings;
mod transport;

use std::sync::atomic::{AtomicBool, Ordering};

use awaken_actors::telemetry::Tracer;
use opentelemetry_sdk::Resource;
use tracing::Dispatch;
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, fmt};

use batcher::SpanBatcher;
use otlp::EncodedResource;
use transport::SpanTransport;

pub use batcher::{BatchSettings, spans_dropped};
pub use headers::ExportHeaders;
pub use json_lines::{LogConfig, LogFormat};
pub use metric_push::{MetricPush, MetricSource};
pub use settings::{
    Env, ExportSettings, MetricsExportSettings, ProcessEnv, RootSampling, Sampling,
    TelemetryConfig, TelemetryError, Transport,
};

/// Whether the installed sampler follows a caller's sampled flag (the
/// parent-based ones, the default): then a request whose caller did not sample
/// its trace needs no span at all, and the edge builds none.
static PARENT_DECIDES: AtomicBool = AtomicBool::new(false);

/// Whether a caller's unsampled `traceparent` settles that nothing is recorded.
pub(crate) fn parent_decides() -> bool {
    PARENT_DECIDES.load(Ordering::Relaxed)
}

/// The installed subscriber's exporter; dropping it flushes the spans still
/// queued (at most the export timeout).
#[derive(Debug, Default)]
pub struct Telemetry {
    /// The export thread and its queue, and how long the last flush may take.
    batcher: Option<(SpanBatcher, std::time::Duration)>,
    /// The runtime under the gRPC exporter's connections (none for OTLP/HTTP):
    /// the subscriber is installed before the process's own runtime exists, and
    /// outlives it.
    grpc: Option<tokio::runtime::Runtime>,
}

impl Telemetry {
    /// Installs the process's subscriber: logs to stderr in `format`, and spans to
    /// `export` when given. Call once, before anything logs.
    pub fn install(
        format: LogFormat,
        export: Option<&ExportSettings>,
    ) -> Result<Self, TelemetryError> {
        let grpc = match export.map(|export| export.transport) {
            Some(Transport::Grpc) => Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("otlp-grpc")
                    .enable_all()
                    .build()
                    .map_err(|_| TelemetryError::internal("the OTLP/gRPC runtime"))?,
            ),
            _ => None,
        };
        let batcher = export
            .map(|export| batcher(export, grpc.as_ref()))
            .transpose()?;
        PARENT_DECIDES.store(
            export.is_some_and(|export| matches!(export.sampling, Sampling::ParentBased(_))),
            Ordering::Relaxed,
        );
        let log_filter =
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
        tracing::dispatcher::set_global_default(subscriber(format, log_filter, std::io::stderr))
            .map_err(|_| TelemetryError::internal("a second subscriber"))?;
        if let (Some(batcher), Some(export)) = (&batcher, export) {
            awaken_actors::telemetry::capture_content(export.capture_content);
            let tracer = Tracer::new(export.sampling, batcher.queue());
            if !awaken_actors::telemetry::install_tracer(tracer) {
                return Err(TelemetryError::internal("a second tracer"));
            }
        }
        Ok(Self {
            batcher: batcher.zip(export.map(|export| export.timeout)),
            grpc,
        })
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some((mut batcher, timeout)) = self.batcher.take()
            && !batcher.shutdown(timeout)
        {
            eprintln!("telemetry: spans not flushed at exit within {timeout:?}");
        }
        // After the flush, which may still need its connections.
        if let Some(runtime) = self.grpc.take() {
            runtime.shutdown_background();
        }
    }
}

/// The subscriber: log lines in `format` through `log_filter` to `writer`.
fn subscriber<W>(format: LogFormat, log_filter: EnvFilter, writer: W) -> Dispatch
where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let logs = match format {
        LogFormat::Text => fmt::layer()
            .with_writer(writer)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(log_filter)
            .boxed(),
        LogFormat::Json => json_lines::JsonLines::new(writer)
            .with_filter(log_filter)
            .boxed(),
    };
    Dispatch::new(tracing_subscriber::registry().with(logs))
}

/// The export thread for `export`, started.
fn batcher(
    export: &ExportSettings,
    grpc: Option<&tokio::runtime::Runtime>,
) -> Result<SpanBatcher, TelemetryError> {
    let transport = match grpc {
        None => SpanTransport::http(&export.traces_url, &export.headers)?,
        // The channel's connection tasks live on the gRPC runtime; the export
        // thread drives each call to completion there.
        Some(runtime) => SpanTransport::grpc(
            &export.traces_url,
            &export.headers,
            runtime.handle().clone(),
        )?,
    };
    // `service.name`, `OTEL_RESOURCE_ATTRIBUTES` and the SDK's attributes, as
    // the metric push sends them.
    let resource = Resource::builder()
        .with_service_name(export.service_name.clone())
        .build();
    SpanBatcher::start(
        transport,
        EncodedResource::new(&resource),
        export.batches,
        export.timeout,
    )
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use awaken_actors::telemetry::{Parent, Sampling, SpanKind, SpanSink, Tracer};
    use serde_json::Value;

    use super::*;

    /// A sink for spans nobody reads.
    struct Discard;

    impl SpanSink for Discard {
        fn export(&self, _span: &[u8]) {}
    }

    /// Log lines written to memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> fmt::MakeWriter<'w> for Lines {
        type Writer = Self;

        fn make_writer(&'w self) -> Self::Writer {
            self.clone()
        }
    }

    impl Lines {
        fn json(&self) -> Vec<Value> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect()
        }
    }

    #[test]
    fn json_lines_name_the_exported_span_they_are_written_in() {
        let lines = Lines::default();
        let subscriber = subscriber(LogFormat::Json, EnvFilter::new("warn"), lines.clone());
        let tracer: &'static Tracer = Box::leak(Box::new(Tracer::new(Sampling::AlwaysOn, Discard)));
        let span = tracer.start(&["invoke_agent"], SpanKind::Internal, Parent::Root, |_| {});
        let trace = span.context().expect("a sampled span");
        tracing::dispatcher::with_default(&subscriber, || {
            futures::executor::block_on(span.traced(async {
                tracing::warn!(answer = 42, "inside");
            }));
            tracing::warn!("outside");
        });
        let lines = lines.json();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0]["message"], "inside");
        assert_eq!(lines[0]["level"], "WARN");
        assert_eq!(lines[0]["fields"]["answer"], 42);
        assert_eq!(lines[0]["trace_id"], trace.trace_id());
        assert_eq!(lines[0]["span_id"], trace.span_id());
        assert_eq!(lines[1]["message"], "outside");
        assert!(lines[1].get("trace_id").is_none(), "{}", lines[1]);
    }
}
