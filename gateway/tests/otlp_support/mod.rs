//! A collector for the tests: an HTTP (or gRPC) server taking OTLP trace and
//! metric exports and decoding them with the OpenTelemetry project's own
//! protobuf definitions, so a test sees exactly the spans and metrics a process
//! sent.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsServiceServer;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use prost::Message;
use tokio::sync::mpsc;

mod metrics;

pub use metrics::Export;

/// Longest the spans a test waits for may take to arrive (exports are batched
/// every 50 ms in the tests' processes).
pub const ARRIVAL: Duration = Duration::from_secs(30);

/// One received span, its ids in hex and its attributes as text.
#[derive(Debug, Clone)]
pub struct Received {
    pub name: String,
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: HashMap<String, String>,
    pub events: Vec<String>,
    pub service: String,
    /// The resource's attributes (`service.instance.id`, ...).
    pub resource: HashMap<String, String>,
    /// The spans this one links to, as (trace id, span id).
    pub links: Vec<(String, String)>,
    /// Start and end, unix nanoseconds.
    pub start_ns: u64,
    pub end_ns: u64,
    /// The `authorization` header (or gRPC metadata) of the export it came in.
    pub authorization: Option<String>,
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        Some(Any::ArrayValue(array)) => {
            let items: Vec<String> = array.values.iter().map(|v| text(Some(v))).collect();
            format!("[{}]", items.join(","))
        }
        other => format!("{other:?}"),
    }
}

pub(crate) fn attributes(pairs: &[KeyValue]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sends every span of `request`, which came with `authorization`, to `tx`.
fn received(
    request: ExportTraceServiceRequest,
    authorization: Option<String>,
    tx: &mpsc::UnboundedSender<Received>,
) {
    for resource in request.resource_spans {
        let resource_attributes = resource
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service = resource_attributes
            .get("service.name")
            .cloned()
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                let _ = tx.send(Received {
                    name: span.name.clone(),
                    kind: span.kind,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    events: span.events.iter().map(|e| e.name.clone()).collect(),
                    service: service.clone(),
                    resource: resource_attributes.clone(),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                        .collect(),
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                    authorization: authorization.clone(),
                });
            }
        }
    }
}

/// What a collector received: spans one by one, metric exports whole.
pub struct Collector {
    /// The base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub endpoint: String,
    pub spans: mpsc::UnboundedReceiver<Received>,
    pub metrics: mpsc::UnboundedReceiver<Export>,
}

/// A collector on a free port; every span it receives goes to the receiver.
pub async fn collector() -> (String, mpsc::UnboundedReceiver<Received>) {
    let collector = full_collector().await;
    (collector.endpoint, collector.spans)
}

/// An OTLP/HTTP collector of spans and metrics on a free port.
pub async fn full_collector() -> Collector {
    let (tx, spans) = mpsc::unbounded_channel();
    let (metrics_tx, metrics) = mpsc::unbounded_channel();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(move |headers: axum::http::HeaderMap, body: Bytes| {
                let tx = tx.clone();
                async move {
                    let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    received(request, authorization(&headers), &tx);
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        )
        .route(
            "/v1/metrics",
            post(move |headers: axum::http::HeaderMap, body: Bytes| {
                let tx = metrics_tx.clone();
                async move {
                    let request = ExportMetricsServiceRequest::decode(body).expect("OTLP protobuf");
                    metrics::received(request, authorization(&headers), &tx);
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportMetricsServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Collector {
        endpoint: format!("http://{address}"),
        spans,
        metrics,
    }
}

fn authorization(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get("authorization")
        .map(|value| value.to_str().unwrap().to_owned())
}

/// The OTLP/gRPC trace service of [`grpc_collector`].
struct GrpcTraces(mpsc::UnboundedSender<Received>);

#[tonic::async_trait]
impl TraceService for GrpcTraces {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let authorization = request
            .metadata()
            .get("authorization")
            .map(|value| value.to_str().unwrap().to_owned());
        received(request.into_inner(), authorization, &self.0);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A collector speaking OTLP/gRPC (the OpenTelemetry project's service
/// definition, served by tonic) on a free port.
pub async fn grpc_collector() -> (String, mpsc::UnboundedReceiver<Received>) {
    let collector = full_grpc_collector().await;
    (collector.endpoint, collector.spans)
}

/// An OTLP/gRPC collector of spans and metrics on a free port.
pub async fn full_grpc_collector() -> Collector {
    let (tx, spans) = mpsc::unbounded_channel();
    let (metrics_tx, metrics) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(GrpcTraces(tx)))
            .add_service(MetricsServiceServer::new(metrics::GrpcMetrics(metrics_tx)))
            .serve_with_incoming(incoming),
    );
    Collector {
        endpoint: format!("http://{address}"),
        spans,
        metrics,
    }
}

/// Metric exports from `rx` until one satisfies `done`; that one.
pub async fn export_where(
    rx: &mut mpsc::UnboundedReceiver<Export>,
    done: impl Fn(&Export) -> bool,
) -> Export {
    let mut seen = 0;
    tokio::time::timeout(ARRIVAL, async {
        loop {
            let export = rx.recv().await.expect("the collector runs");
            seen += 1;
            if done(&export) {
                return export;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no matching metric export among {seen}"))
}

/// Spans from `rx` until `done` holds for what arrived.
pub async fn spans_until(
    rx: &mut mpsc::UnboundedReceiver<Received>,
    done: impl Fn(&[Received]) -> bool,
) -> Vec<Received> {
    let mut spans = Vec::new();
    tokio::time::timeout(ARRIVAL, async {
        while !done(&spans) {
            spans.push(rx.recv().await.expect("the collector runs"));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("spans missing; received {spans:#?}"));
    spans
}

/// Writes `spans` as JSON to the file `AWAKEN_TRACE_DUMP` names, when set: the
/// input of `scripts/trace_picture.py`, which draws the trace in the docs.
pub fn dump_if_asked(spans: &[Received]) {
    let Ok(path) = std::env::var("AWAKEN_TRACE_DUMP") else {
        return;
    };
    let spans: Vec<serde_json::Value> = spans
        .iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name, "kind": s.kind, "trace_id": s.trace_id, "span_id": s.span_id,
                "parent_span_id": s.parent_span_id, "service": s.service,
                "instance": s.resource.get("service.instance.id"),
                "attributes": s.attributes, "events": s.events, "links": s.links,
                "start_ns": s.start_ns, "end_ns": s.end_ns,
            })
        })
        .collect();
    std::fs::write(path, serde_json::to_vec_pretty(&spans).unwrap()).unwrap();
}

pub fn one<'a>(spans: &'a [Received], name: &str) -> &'a Received {
    let found: Vec<&Received> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one `{name}` in {spans:#?}");
    found[0]
}
