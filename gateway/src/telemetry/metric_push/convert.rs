//! The metrics of `/metrics`, as the registry's Prometheus data model gives
//! them, turned into one OTLP `ExportMetricsServiceRequest`: counters as
//! cumulative monotonic sums, gauges as gauges, histograms as cumulative
//! explicit-bucket histograms.
//!
//! Names: the unit and `_total` suffixes go (the unit moves to `unit`), the
//! GenAI families take their convention names (`gen_ai_client_token_usage` →
//! `gen_ai.client.token.usage`), the runtime's keep their words under the
//! `awaken.` namespace (`awaken_runs_started_total` → `awaken.runs_started`).
//! A backend that turns OTLP names back into Prometheus ones (dots to
//! underscores, unit and `_total` suffixes added) arrives at the names
//! `/metrics` serves, so one dashboard reads both.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValueKind;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model as prom;

/// Units the conventions give that a Prometheus name cannot carry.
const CONVENTION_UNITS: [(&str, &str); 1] = [("gen_ai.client.token.usage", "{token}")];

/// When the values were taken and since when they accumulate (unix ns).
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    /// When accumulation started: the process's metrics were created.
    pub(super) start_ns: u64,
    /// When the values were read.
    pub(super) now_ns: u64,
}

/// `families` as one export request from `resource`.
pub(super) fn export_request(
    families: Vec<prom::MetricFamily>,
    resource: &Resource,
    window: Window,
) -> ExportMetricsServiceRequest {
    let metrics = families
        .into_iter()
        .filter_map(|family| metric(family, window))
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource.clone()),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "awaken".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..InstrumentationScope::default()
                }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// The OTLP metric of `family`; `None` for the kinds the registry does not
/// hold here (summaries, gauge histograms).
fn metric(family: prom::MetricFamily, window: Window) -> Option<Metric> {
    let kind = prom::MetricType::try_from(family.r#type).ok()?;
    let name = otel_name(&family.name, &family.unit, kind);
    let unit = unit(&name, &family.unit);
    let data = match kind {
        prom::MetricType::Counter => Data::Sum(Sum {
            data_points: number_points(family.metric, window, |m| {
                m.counter.as_ref().map(|c| c.value)
            }),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        }),
        prom::MetricType::Gauge => Data::Gauge(Gauge {
            data_points: number_points(family.metric, window, |m| {
                m.gauge.as_ref().map(|g| g.value)
            }),
        }),
        prom::MetricType::Untyped => Data::Gauge(Gauge {
            data_points: number_points(family.metric, window, |m| {
                m.untyped.as_ref().map(|u| u.value)
            }),
        }),
        prom::MetricType::Histogram => Data::Histogram(Histogram {
            data_points: family
                .metric
                .into_iter()
                .filter_map(|metric| histogram_point(metric, window))
                .collect(),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
        prom::MetricType::Summary | prom::MetricType::GaugeHistogram => return None,
    };
    Some(Metric {
        name,
        description: family.help,
        unit,
        metadata: Vec::new(),
        data: Some(data),
    })
}

/// The OTLP name of the Prometheus family `family` of `kind` registered with
/// `unit` (see the module doc).
fn otel_name(family: &str, unit: &str, kind: prom::MetricType) -> String {
    let mut base = family;
    if kind == prom::MetricType::Counter {
        base = base.strip_suffix("_total").unwrap_or(base);
    }
    if !unit.is_empty() {
        base = base
            .strip_suffix(unit)
            .and_then(|rest| rest.strip_suffix('_'))
            .unwrap_or(base);
    }
    if let Some(rest) = base.strip_prefix("gen_ai_") {
        format!("gen_ai.{}", rest.replace('_', "."))
    } else if let Some(rest) = base.strip_prefix("awaken_") {
        format!("awaken.{rest}")
    } else {
        base.to_owned()
    }
}

/// The attribute a label stands for: the conventions' attributes
/// (`gen_ai_request_model` → `gen_ai.request.model`, `error_type` →
/// `error.type`) get their dots back, the runtime's own labels stay.
fn attribute_key(label: String) -> String {
    if let Some(rest) = label.strip_prefix("gen_ai_") {
        format!("gen_ai.{}", rest.replace('_', "."))
    } else if label == "error_type" {
        "error.type".to_owned()
    } else {
        label
    }
}

/// The UCUM unit of the metric `name` registered with the Prometheus `unit`.
fn unit(name: &str, unit: &str) -> String {
    let unit = match unit {
        "seconds" => "s",
        "bytes" => "By",
        "ratios" => "1",
        "" => CONVENTION_UNITS
            .iter()
            .find(|(metric, _)| *metric == name)
            .map_or("", |(_, unit)| unit),
        other => other,
    };
    unit.to_owned()
}

/// The labels as attributes; an empty label is an absent one in Prometheus,
/// and left out.
fn attributes(labels: Vec<prom::LabelPair>) -> Vec<KeyValue> {
    labels
        .into_iter()
        .filter(|label| !label.value.is_empty())
        .map(|label| KeyValue {
            key: attribute_key(label.name),
            value: Some(AnyValue {
                value: Some(AnyValueKind::StringValue(label.value)),
            }),
            ..KeyValue::default()
        })
        .collect()
}

/// The points of a counter or gauge family, each value read by `value`.
fn number_points(
    metrics: Vec<prom::Metric>,
    window: Window,
    value: impl Fn(&prom::Metric) -> Option<f64>,
) -> Vec<NumberDataPoint> {
    metrics
        .into_iter()
        .filter_map(|metric| {
            let value = value(&metric)?;
            Some(NumberDataPoint {
                attributes: attributes(metric.label),
                start_time_unix_nano: window.start_ns,
                time_unix_nano: window.now_ns,
                value: Some(number(value)),
                ..NumberDataPoint::default()
            })
        })
        .collect()
}

/// A whole value as an integer (counts stay counts), any other as a double.
fn number(value: f64) -> Number {
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let whole = value.fract() == 0.0 && value.abs() < (1u64 << 53) as f64;
    if whole {
        #[allow(clippy::cast_possible_truncation)]
        Number::AsInt(value as i64)
    } else {
        Number::AsDouble(value)
    }
}

/// The histogram point of `metric`. Prometheus counts each bucket with all
/// the ones below it; OTLP's `bucket_counts` hold each bucket's own count, and
/// the open-ended last bucket's bound stays implicit.
fn histogram_point(metric: prom::Metric, window: Window) -> Option<HistogramDataPoint> {
    let histogram = metric.histogram?;
    let mut explicit_bounds = Vec::with_capacity(histogram.bucket.len());
    let mut bucket_counts = Vec::with_capacity(histogram.bucket.len() + 1);
    let mut below = 0;
    for bucket in &histogram.bucket {
        bucket_counts.push(bucket.cumulative_count.saturating_sub(below));
        below = bucket.cumulative_count;
        if bucket.upper_bound.is_finite() && bucket.upper_bound < f64::MAX {
            explicit_bounds.push(bucket.upper_bound);
        }
    }
    // Without the open-ended bucket: what lies above the last bound.
    if bucket_counts.len() == explicit_bounds.len() {
        bucket_counts.push(histogram.sample_count.saturating_sub(below));
    }
    Some(HistogramDataPoint {
        attributes: attributes(metric.label),
        start_time_unix_nano: window.start_ns,
        time_unix_nano: window.now_ns,
        count: histogram.sample_count,
        sum: Some(histogram.sample_sum),
        bucket_counts,
        explicit_bounds,
        ..HistogramDataPoint::default()
    })
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::EncodeLabelSet;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge as PromGauge;
    use prometheus_client::metrics::histogram::Histogram as PromHistogram;
    use prometheus_client::registry::{Registry, Unit};

    use super::*;

    #[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Agent {
        agent: String,
    }

    const WINDOW: Window = Window {
        start_ns: 1_000,
        now_ns: 2_000,
    };

    fn exported(registry: &Registry) -> Vec<Metric> {
        let families = prometheus_client::encoding::prometheus_protobuf::encode(registry).unwrap();
        let resource = Resource::default();
        let mut request = export_request(families, &resource, WINDOW);
        let mut resources = std::mem::take(&mut request.resource_metrics);
        assert_eq!(resources.len(), 1);
        let mut scopes = std::mem::take(&mut resources[0].scope_metrics);
        assert_eq!(scopes[0].scope.as_ref().unwrap().name, "awaken");
        std::mem::take(&mut scopes[0].metrics)
    }

    fn named<'m>(metrics: &'m [Metric], name: &str) -> &'m Metric {
        metrics
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("{name} in {:?}", names(metrics)))
    }

    fn names(metrics: &[Metric]) -> Vec<&str> {
        metrics.iter().map(|m| m.name.as_str()).collect()
    }

    fn text(attributes: &[KeyValue]) -> Vec<(String, String)> {
        attributes
            .iter()
            .map(
                |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(AnyValueKind::StringValue(s)) => (kv.key.clone(), s.clone()),
                    other => panic!("not a string: {other:?}"),
                },
            )
            .collect()
    }

    #[test]
    fn counters_gauges_and_histograms_keep_their_values_labels_and_units() {
        let mut root = Registry::default();
        let tokens = PromHistogram::new([10.0, 100.0]);
        root.register("gen_ai_client_token_usage", "Tokens", tokens.clone());
        let awaken = root.sub_registry_with_prefix("awaken");
        let started = Family::<Agent, Counter>::default();
        awaken.register("runs_started", "Runs started", started.clone());
        let waiting = PromGauge::<i64, std::sync::atomic::AtomicI64>::default();
        awaken.register("runs_waiting", "Runs waiting", waiting.clone());
        let duration = PromHistogram::new([0.5, 1.0]);
        awaken.register_with_unit("run_duration", "Run time", Unit::Seconds, duration.clone());
        started
            .get_or_create(&Agent {
                agent: "bench".into(),
            })
            .inc_by(3);
        waiting.set(2);
        for value in [0.2, 0.7, 0.8, 5.0] {
            duration.observe(value);
        }
        for value in [5.0, 50.0, 60.0] {
            tokens.observe(value);
        }

        let metrics = exported(&root);
        assert_eq!(
            names(&metrics),
            [
                "gen_ai.client.token.usage",
                "awaken.runs_started",
                "awaken.runs_waiting",
                "awaken.run_duration"
            ]
        );

        let started = named(&metrics, "awaken.runs_started");
        assert_eq!(started.description, "Runs started.");
        let Some(Data::Sum(sum)) = &started.data else {
            panic!("{started:?}")
        };
        assert!(sum.is_monotonic);
        assert_eq!(
            sum.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        assert_eq!(sum.data_points.len(), 1);
        let point = &sum.data_points[0];
        assert_eq!(point.value, Some(Number::AsInt(3)));
        assert_eq!(
            text(&point.attributes),
            [("agent".to_owned(), "bench".to_owned())]
        );
        assert_eq!(
            (point.start_time_unix_nano, point.time_unix_nano),
            (1_000, 2_000)
        );

        let waiting = named(&metrics, "awaken.runs_waiting");
        let Some(Data::Gauge(gauge)) = &waiting.data else {
            panic!("{waiting:?}")
        };
        assert_eq!(gauge.data_points[0].value, Some(Number::AsInt(2)));

        let duration = named(&metrics, "awaken.run_duration");
        assert_eq!(duration.unit, "s");
        let Some(Data::Histogram(histogram)) = &duration.data else {
            panic!("{duration:?}")
        };
        assert_eq!(
            histogram.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        let point = &histogram.data_points[0];
        assert_eq!(point.count, 4);
        assert_eq!(point.sum, Some(0.2 + 0.7 + 0.8 + 5.0));
        assert_eq!(point.explicit_bounds, [0.5, 1.0]);
        // Per bucket, not running totals: ≤0.5, ≤1, above.
        assert_eq!(point.bucket_counts, [1, 2, 1]);

        let tokens = named(&metrics, "gen_ai.client.token.usage");
        assert_eq!(tokens.unit, "{token}");
        let Some(Data::Histogram(histogram)) = &tokens.data else {
            panic!("{tokens:?}")
        };
        assert_eq!(histogram.data_points[0].bucket_counts, [1, 2, 0]);
    }

    #[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Operation {
        gen_ai_request_model: String,
        error_type: &'static str,
    }

    #[test]
    fn convention_labels_become_their_attributes_and_empty_ones_are_left_out() {
        let mut root = Registry::default();
        let calls = Family::<Operation, Counter>::default();
        root.register("gen_ai_calls", "Calls", calls.clone());
        for error_type in ["", "timeout"] {
            calls
                .get_or_create(&Operation {
                    gen_ai_request_model: "m".into(),
                    error_type,
                })
                .inc();
        }
        let metrics = exported(&root);
        let Some(Data::Sum(sum)) = &named(&metrics, "gen_ai.calls").data else {
            panic!("{metrics:?}")
        };
        let mut sets: Vec<_> = sum
            .data_points
            .iter()
            .map(|p| text(&p.attributes))
            .collect();
        sets.sort();
        assert_eq!(
            sets,
            [
                vec![("gen_ai.request.model".to_owned(), "m".to_owned())],
                vec![
                    ("gen_ai.request.model".to_owned(), "m".to_owned()),
                    ("error.type".to_owned(), "timeout".to_owned())
                ],
            ]
        );
    }

    #[test]
    fn names_follow_the_conventions_and_map_back_to_the_scraped_ones() {
        use prom::MetricType::{Counter, Gauge, Histogram};
        assert_eq!(
            otel_name(
                "gen_ai_client_operation_duration_seconds",
                "seconds",
                Histogram
            ),
            "gen_ai.client.operation.duration"
        );
        assert_eq!(
            otel_name("awaken_mailbox_redeliveries_total", "", Counter),
            "awaken.mailbox_redeliveries"
        );
        assert_eq!(
            otel_name("awaken_mailbox_claim_lag_seconds", "seconds", Histogram),
            "awaken.mailbox_claim_lag"
        );
        // A gauge's `_total` is its name, not a suffix.
        assert_eq!(
            otel_name("awaken_runs_total", "", Gauge),
            "awaken.runs_total"
        );
        assert_eq!(otel_name("process_cpu", "", Gauge), "process_cpu");
        assert_eq!(
            attribute_key("gen_ai_request_model".into()),
            "gen_ai.request.model"
        );
        assert_eq!(attribute_key("error_type".into()), "error.type");
        assert_eq!(attribute_key("agent".into()), "agent");
        assert_eq!(number(3.0), Number::AsInt(3));
        assert_eq!(number(0.25), Number::AsDouble(0.25));
        assert_eq!(unit("gen_ai.client.operation.duration", "seconds"), "s");
        assert_eq!(unit("awaken.store_statements", ""), "");
    }
}
