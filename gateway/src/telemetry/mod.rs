//! The process's logs and traces: one `tracing` subscriber with two layers, the
//! log lines on stderr (`RUST_LOG`, warnings by default) and, when export is on,
//! the spans of [`awaken_actors::telemetry::TARGET`] sent over OTLP/HTTP.
//!
//! The layers filter each on their own: log lines never carry the exported
//! spans (nor pay for formatting their fields), and with export off no layer
//! wants those spans, so the engine's span macros return disabled spans at the
//! cost of a cached interest check. Export runs on the SDK's batch thread with a
//! bounded queue: a slow or absent collector drops spans, never delays a run.

mod settings;

use awaken_actors::telemetry::TARGET;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

pub use settings::{
    Env, ExportSettings, ProcessEnv, RootSampling, Sampling, TelemetryConfig, TelemetryError,
};

/// The installed subscriber's exporter; dropping it flushes the spans still
/// queued (at most the export timeout).
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Installs the process's subscriber: logs to stderr, and spans to `export`
    /// when given. Call once, before anything logs.
    pub fn install(export: Option<&ExportSettings>) -> Result<Self, TelemetryError> {
        // The exported spans stay out of the log lines whatever `RUST_LOG` says.
        let log_filter = EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new("warn"))
            .add_directive(
                format!("{TARGET}=off")
                    .parse()
                    .map_err(|_| TelemetryError::internal("the log filter"))?,
            );
        let logs = fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(log_filter);
        let provider = export.map(provider).transpose()?;
        let spans = provider.as_ref().map(|provider| {
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("awaken"))
                .with_filter(Targets::new().with_target(TARGET, LevelFilter::INFO))
        });
        tracing_subscriber::registry()
            .with(logs)
            .with(spans)
            .try_init()
            .map_err(|_| TelemetryError::internal("a second subscriber"))?;
        Ok(Self { provider })
    }

    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("telemetry: spans not flushed at exit: {error}");
        }
    }
}

fn provider(export: &ExportSettings) -> Result<SdkTracerProvider, TelemetryError> {
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(export.traces_url.as_str())
        .build()
        // The builder's errors can quote the endpoint, which may hold credentials.
        .map_err(|_| TelemetryError::internal("the OTLP/HTTP exporter"))?;
    let resource = Resource::builder()
        .with_service_name(export.service_name.clone())
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler(export.sampling))
        .with_resource(resource)
        .build())
}

fn sampler(sampling: Sampling) -> Sampler {
    match sampling {
        Sampling::AlwaysOn => Sampler::AlwaysOn,
        Sampling::AlwaysOff => Sampler::AlwaysOff,
        Sampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        Sampling::ParentBased(root) => Sampler::ParentBased(Box::new(match root {
            RootSampling::AlwaysOn => Sampler::AlwaysOn,
            RootSampling::AlwaysOff => Sampler::AlwaysOff,
            RootSampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        })),
    }
}
