//! The metrics side of the test collector: OTLP metric exports over HTTP and
//! gRPC, decoded with the OpenTelemetry project's own protobuf definitions,
//! each export handed to the test whole (one export is one reading of a
//! process's meters).

use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsService;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use tokio::sync::mpsc;

use super::attributes;

/// One export: the process's metrics as it read them at one moment.
#[derive(Debug, Clone)]
pub struct Export {
    /// The resource's attributes (`service.name`, ...).
    pub resource: HashMap<String, String>,
    /// The instrumentation scope's name.
    pub scope: String,
    pub metrics: Vec<ReceivedMetric>,
    /// The `authorization` header (or gRPC metadata) it came with.
    pub authorization: Option<String>,
}

/// One metric of an export.
#[derive(Debug, Clone)]
pub struct ReceivedMetric {
    pub name: String,
    pub unit: String,
    pub description: String,
    pub data: Data,
}

impl Export {
    /// The metric `name`; panics when the export lacks it.
    pub fn metric(&self, name: &str) -> &ReceivedMetric {
        self.metrics
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no `{name}` in {:?}", self.names()))
    }

    /// The names of the export's metrics.
    pub fn names(&self) -> Vec<&str> {
        self.metrics.iter().map(|m| m.name.as_str()).collect()
    }

    /// Whether the export has `name`.
    pub fn has(&self, name: &str) -> bool {
        self.metrics.iter().any(|m| m.name == name)
    }
}

impl ReceivedMetric {
    /// The value of the counter or gauge point whose attributes include all
    /// of `labels`, as a float.
    pub fn value(&self, labels: &[(&str, &str)]) -> Option<f64> {
        let points = match &self.data {
            Data::Sum(sum) => &sum.data_points,
            Data::Gauge(gauge) => &gauge.data_points,
            _ => return None,
        };
        points
            .iter()
            .find(|p| matches(&attributes(&p.attributes), labels))
            .and_then(|p| match p.value? {
                Number::AsInt(value) => Some(value as f64),
                Number::AsDouble(value) => Some(value),
            })
    }

    /// The count of the histogram point whose attributes include `labels`.
    pub fn count(&self, labels: &[(&str, &str)]) -> Option<u64> {
        let Data::Histogram(histogram) = &self.data else {
            return None;
        };
        histogram
            .data_points
            .iter()
            .find(|p| matches(&attributes(&p.attributes), labels))
            .map(|p| p.count)
    }

    /// The attribute sets of every point.
    pub fn attribute_sets(&self) -> Vec<HashMap<String, String>> {
        match &self.data {
            Data::Sum(sum) => sum
                .data_points
                .iter()
                .map(|p| attributes(&p.attributes))
                .collect(),
            Data::Gauge(gauge) => gauge
                .data_points
                .iter()
                .map(|p| attributes(&p.attributes))
                .collect(),
            Data::Histogram(histogram) => histogram
                .data_points
                .iter()
                .map(|p| attributes(&p.attributes))
                .collect(),
            _ => Vec::new(),
        }
    }
}

fn matches(attributes: &HashMap<String, String>, labels: &[(&str, &str)]) -> bool {
    labels
        .iter()
        .all(|(key, value)| attributes.get(*key).is_some_and(|v| v == value))
}

/// Sends `request`, which came with `authorization`, to `tx` as exports.
pub(super) fn received(
    request: ExportMetricsServiceRequest,
    authorization: Option<String>,
    tx: &mpsc::UnboundedSender<Export>,
) {
    for resource in request.resource_metrics {
        let resource_attributes = resource
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope in resource.scope_metrics {
            let _ = tx.send(Export {
                resource: resource_attributes.clone(),
                scope: scope.scope.map(|s| s.name).unwrap_or_default(),
                metrics: scope
                    .metrics
                    .into_iter()
                    .filter_map(|m| {
                        Some(ReceivedMetric {
                            name: m.name,
                            unit: m.unit,
                            description: m.description,
                            data: m.data?,
                        })
                    })
                    .collect(),
                authorization: authorization.clone(),
            });
        }
    }
}

/// The OTLP/gRPC metrics service of the gRPC collector.
pub(super) struct GrpcMetrics(pub(super) mpsc::UnboundedSender<Export>);

#[tonic::async_trait]
impl MetricsService for GrpcMetrics {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let authorization = request
            .metadata()
            .get("authorization")
            .map(|value| value.to_str().unwrap().to_owned());
        received(request.into_inner(), authorization, &self.0);
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}
