//! The metrics of `/metrics` pushed to an OTLP collector every interval (and
//! once more when the process stops), over OTLP/HTTP or OTLP/gRPC.
//!
//! There is one set of meters, the Prometheus registry: a push reads it the way
//! a scrape does (gauges refreshed from their sources first) and sends its
//! Prometheus data model converted to OTLP ([`convert`]). A push that fails is
//! logged (once, until one lands again) and the next one carries the values
//! again (sums are cumulative), so a collector that is down loses resolution,
//! not counts.

mod convert;

use std::future::Future;
use std::time::Duration;

use awaken_actors::clock::now_nanos;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::MetricFamily;
use prost::Message;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::metadata::MetadataMap;
use tonic::transport::{Channel, Endpoint};

use super::{MetricsExportSettings, TelemetryError, Transport};
use convert::Window;

/// What a push reads: the metrics as of now, gauges refreshed.
pub trait MetricSource: Send + Sync + 'static {
    /// The registry's metrics; `None` when they cannot be read (logged).
    fn collect(&self) -> impl Future<Output = Option<Vec<MetricFamily>>> + Send;
}

/// The running push; [`MetricPush::finish`] pushes a last time and stops it.
#[derive(Debug)]
pub struct MetricPush {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl MetricPush {
    /// Starts pushing `source`'s metrics as `settings` say. Call inside the
    /// process's runtime, when the metrics exist.
    pub fn start(
        settings: &MetricsExportSettings,
        source: impl MetricSource,
    ) -> Result<Self, TelemetryError> {
        let mut pusher = Pusher {
            client: Client::new(settings)?,
            resource: resource(&settings.service_name),
            start_ns: now_nanos(),
            timeout: settings.timeout,
            failing: false,
        };
        let interval = settings.interval;
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ticks =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticks.tick() => pusher.push(&source).await,
                    _ = &mut stopped => break,
                }
            }
            // The last values: what happened since the last tick is not lost.
            pusher.push(&source).await;
        });
        Ok(Self { stop, task })
    }

    /// Pushes the metrics a last time (bounded by the push time limit) and stops.
    pub async fn finish(self) {
        let _ = self.stop.send(());
        if let Err(error) = self.task.await {
            tracing::warn!(%error, "metrics: the last push did not finish");
        }
    }
}

/// The push loop's state.
struct Pusher {
    client: Client,
    resource: Resource,
    start_ns: u64,
    timeout: Duration,
    /// Whether the last push failed: failures are logged when they start and
    /// when they end, not once per interval.
    failing: bool,
}

impl Pusher {
    async fn push(&mut self, source: &impl MetricSource) {
        let Some(families) = source.collect().await else {
            return;
        };
        let window = Window {
            start_ns: self.start_ns,
            now_ns: now_nanos(),
        };
        let request = convert::export_request(families, &self.resource, window);
        let failure = match tokio::time::timeout(self.timeout, self.client.send(request)).await {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error.to_string()),
            Err(_) => Some(format!("no answer within {:?}", self.timeout)),
        };
        match failure {
            None if std::mem::take(&mut self.failing) => {
                tracing::warn!("metrics: the collector takes pushes again");
            }
            None => {}
            Some(error) if !std::mem::replace(&mut self.failing, true) => {
                tracing::warn!(%error, "metrics: push failed (logged once until a push lands)");
            }
            Some(_) => {}
        }
    }
}

/// The connection to the collector.
enum Client {
    Http {
        client: reqwest::Client,
        url: String,
    },
    Grpc {
        /// Boxed: a channel is much bigger than an HTTP client handle.
        client: Box<MetricsServiceClient<Channel>>,
        metadata: MetadataMap,
    },
}

impl Client {
    fn new(settings: &MetricsExportSettings) -> Result<Self, TelemetryError> {
        // The builders' errors can quote the endpoint, which may hold credentials.
        match settings.transport {
            Transport::HttpProtobuf => {
                let mut headers = settings.headers.map().clone();
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/x-protobuf"),
                );
                let client = reqwest::Client::builder()
                    .default_headers(headers)
                    .timeout(settings.timeout)
                    .build()
                    .map_err(|_| TelemetryError::internal("the OTLP/HTTP metrics client"))?;
                Ok(Self::Http {
                    client,
                    url: settings.url.clone(),
                })
            }
            Transport::Grpc => {
                let channel = Endpoint::from_shared(settings.url.clone())
                    .map_err(|_| TelemetryError::internal("the OTLP/gRPC metrics channel"))?
                    .timeout(settings.timeout)
                    .connect_lazy();
                let metadata = settings
                    .headers
                    .grpc_metadata("OTEL_EXPORTER_OTLP_METRICS_HEADERS")?;
                Ok(Self::Grpc {
                    client: Box::new(MetricsServiceClient::new(channel)),
                    metadata,
                })
            }
        }
    }

    async fn send(&mut self, request: ExportMetricsServiceRequest) -> Result<(), PushError> {
        match self {
            Self::Http { client, url } => {
                // Errors name neither the URL nor the headers: both may hold
                // credentials.
                let response = client
                    .post(url.as_str())
                    .body(request.encode_to_vec())
                    .send()
                    .await
                    .map_err(|error| PushError::Unreachable(with_causes(&error.without_url())))?;
                let status = response.status();
                // Read to the end so the connection is kept for the next push.
                let _ = response.bytes().await;
                if status.is_success() {
                    Ok(())
                } else {
                    Err(PushError::Refused(status.to_string()))
                }
            }
            Self::Grpc { client, metadata } => {
                let request =
                    tonic::Request::from_parts(metadata.clone(), Default::default(), request);
                client
                    .export(request)
                    .await
                    .map(drop)
                    .map_err(|status| PushError::Refused(format!("{:?}", status.code())))
            }
        }
    }
}

/// Why a push did not land.
#[derive(Debug, thiserror::Error)]
enum PushError {
    #[error("the collector could not be reached: {0}")]
    Unreachable(String),
    #[error("the collector answered {0}")]
    Refused(String),
}

/// `error` and its causes, as one line ("connection refused" is a cause).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        line.push_str(": ");
        line.push_str(&error.to_string());
        cause = error.source();
    }
    line
}

/// The resource the spans carry too: `service.name`, the SDK's attributes and
/// `OTEL_RESOURCE_ATTRIBUTES`.
fn resource(service_name: &str) -> Resource {
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service_name.to_owned())
        .build();
    Resource {
        attributes: ResourceAttributesWithSchema::from(&resource).attributes.0,
        ..Resource::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::ExportHeaders;

    #[tokio::test]
    async fn a_failed_push_names_neither_the_url_nor_the_headers() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        for transport in [Transport::HttpProtobuf, Transport::Grpc] {
            let settings = MetricsExportSettings {
                transport,
                url: format!("http://user:hunter2@127.0.0.1:{port}/v1/metrics"),
                service_name: "test".into(),
                headers: ExportHeaders::default(),
                timeout: Duration::from_secs(5),
                interval: Duration::from_secs(60),
            };
            let mut client = Client::new(&settings).unwrap();
            let error = client
                .send(ExportMetricsServiceRequest::default())
                .await
                .unwrap_err()
                .to_string();
            assert!(!error.contains("hunter2"), "{error}");
            assert!(!error.contains(&port.to_string()), "{error}");
        }
    }
}
