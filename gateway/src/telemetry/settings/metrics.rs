//! Whether and where the metrics are pushed over OTLP: `OTEL_METRICS_EXPORTER`,
//! `OTEL_METRIC_EXPORT_INTERVAL` / `_TIMEOUT`, the metrics' own
//! `OTEL_EXPORTER_OTLP_METRICS_*` variables over the general ones, and
//! `[telemetry]`. `/metrics` is served either way.

use std::time::Duration;

use super::super::headers::{self, ExportHeaders};
use super::destination::{Destination, Signal, first_of};
use super::{
    Env, TelemetryConfig, TelemetryError, Transport, check_resource_attributes, sdk_disabled,
};

/// Time between two pushes when nothing says (the specification's 60 s).
const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// Time one push may take when nothing says (the specification's 30 s).
const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(30);
/// The temporality variable: sums are cumulative here, as Prometheus keeps them.
const TEMPORALITY: &str = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";

/// Metric push that is on: where to, as whom, how often.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsExportSettings {
    /// How the metrics travel.
    pub transport: Transport,
    /// The full URL they are sent to.
    pub url: String,
    /// `service.name`, the same as the spans'.
    pub service_name: String,
    /// Headers (or gRPC metadata) sent with every push.
    pub headers: ExportHeaders,
    /// How long one push may take: the shorter of the exporter's time limit
    /// (`OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT`) and `OTEL_METRIC_EXPORT_TIMEOUT`.
    pub timeout: Duration,
    /// Time between two pushes (`OTEL_METRIC_EXPORT_INTERVAL`).
    pub interval: Duration,
}

impl TelemetryConfig {
    /// The metric push this config and `env` ask for: `None` when off. On
    /// exactly when `OTEL_METRICS_EXPORTER=otlp`, else when `metrics` or
    /// `enabled` says so, else when an endpoint is configured.
    pub fn resolve_metrics(
        &self,
        env: &(impl Env + ?Sized),
    ) -> Result<Option<MetricsExportSettings>, TelemetryError> {
        if sdk_disabled(env)? {
            return Ok(None);
        }
        let chosen = match env.var("OTEL_METRICS_EXPORTER") {
            None => None,
            Some(exporter) => match exporter.trim() {
                "otlp" => Some(true),
                // `prometheus` is the pull exporter: `/metrics`, always served.
                "none" | "prometheus" => Some(false),
                other => {
                    return Err(TelemetryError::invalid(
                        "OTEL_METRICS_EXPORTER",
                        other,
                        "`otlp`, `prometheus` or `none`",
                    ));
                }
            },
        };
        let destination = Destination::resolve(self, env, Signal::Metrics)?;
        let interval = match env.var("OTEL_METRIC_EXPORT_INTERVAL") {
            Some(value) => headers::parse_millis("OTEL_METRIC_EXPORT_INTERVAL", &value)?,
            None => match self.metrics_interval_secs {
                Some(0) => {
                    return Err(TelemetryError::invalid(
                        "telemetry.metrics_interval_secs",
                        "0",
                        "a positive number of seconds",
                    ));
                }
                Some(secs) => Duration::from_secs(secs),
                None => DEFAULT_INTERVAL,
            },
        };
        let export_timeout = match first_of(env, &["OTEL_METRIC_EXPORT_TIMEOUT"]) {
            Some((name, value)) => headers::parse_millis(name, &value)?,
            None => DEFAULT_EXPORT_TIMEOUT,
        };
        if let Some(temporality) = env.var(TEMPORALITY)
            && !temporality.trim().eq_ignore_ascii_case("cumulative")
        {
            return Err(TelemetryError::invalid(
                TEMPORALITY,
                &temporality,
                "`cumulative` (sums and histograms are exported as Prometheus keeps them)",
            ));
        }
        if let Some(attributes) = env.var("OTEL_RESOURCE_ATTRIBUTES") {
            check_resource_attributes(&attributes)?;
        }
        let on = chosen
            .or(self.metrics)
            .or(self.enabled)
            .unwrap_or(destination.url.is_some());
        if !on {
            return Ok(None);
        }
        Ok(Some(MetricsExportSettings {
            transport: destination.transport,
            url: destination.url_or_default()?,
            service_name: self.service_name(env),
            headers: destination.headers,
            timeout: destination.timeout.min(export_timeout),
            interval,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(config: &TelemetryConfig, env: &[(&str, &str)]) -> MetricsExportSettings {
        config
            .resolve_metrics(env)
            .unwrap()
            .expect("metric push on")
    }

    const ENDPOINT: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/");

    #[test]
    fn pushed_to_the_same_collector_as_the_spans_with_the_specifications_defaults() {
        let config = TelemetryConfig::default();
        assert_eq!(config.resolve_metrics(&[][..]).unwrap(), None);
        let push = on(&config, &[ENDPOINT]);
        assert_eq!(push.url, "http://collector:4318/v1/metrics");
        assert_eq!(push.transport, Transport::HttpProtobuf);
        assert_eq!(push.service_name, "awaken");
        assert_eq!(push.interval, Duration::from_secs(60));
        assert_eq!(push.timeout, Duration::from_secs(10));
        let grpc = on(
            &config,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
        );
        assert_eq!(grpc.transport, Transport::Grpc);
        assert_eq!(grpc.url, "http://collector:4317");
    }

    #[test]
    fn the_metrics_variables_win_over_the_general_ones_and_the_file() {
        let config = TelemetryConfig {
            endpoint: Some("http://file:4318".into()),
            metrics_interval_secs: Some(15),
            service_name: Some("from-file".into()),
            ..TelemetryConfig::default()
        };
        let from_file = on(&config, &[]);
        assert_eq!(from_file.url, "http://file:4318/v1/metrics");
        assert_eq!(from_file.interval, Duration::from_secs(15));
        assert_eq!(from_file.service_name, "from-file");
        let push = on(
            &config,
            &[
                ENDPOINT,
                (
                    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                    "http://metrics:9090/otlp",
                ),
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-general=1"),
                ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-metrics=2"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "20000"),
                ("OTEL_METRIC_EXPORT_TIMEOUT", "5000"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "250"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
                (TEMPORALITY, "Cumulative"),
            ],
        );
        assert_eq!(push.url, "http://metrics:9090/otlp");
        assert_eq!(push.transport, Transport::HttpProtobuf);
        assert_eq!(push.headers.map()["x-metrics"], "2");
        assert!(!push.headers.map().contains_key("x-general"));
        assert_eq!(push.timeout, Duration::from_secs(5));
        assert_eq!(push.interval, Duration::from_millis(250));
    }

    #[test]
    fn switched_on_and_off_apart_from_the_spans() {
        let config = TelemetryConfig::default();
        let none = [ENDPOINT, ("OTEL_METRICS_EXPORTER", "none")];
        assert_eq!(config.resolve_metrics(&none[..]).unwrap(), None);
        assert!(
            config.resolve(&none[..]).unwrap().is_some(),
            "spans still go"
        );
        let pull = [ENDPOINT, ("OTEL_METRICS_EXPORTER", "prometheus")];
        assert_eq!(config.resolve_metrics(&pull[..]).unwrap(), None);
        let spans_off = [ENDPOINT, ("OTEL_TRACES_EXPORTER", "none")];
        assert!(config.resolve_metrics(&spans_off[..]).unwrap().is_some());
        let asked = on(&config, &[("OTEL_METRICS_EXPORTER", "otlp")]);
        assert_eq!(asked.url, "http://localhost:4318/v1/metrics");
        let disabled = [ENDPOINT, ("OTEL_SDK_DISABLED", "true")];
        assert_eq!(config.resolve_metrics(&disabled[..]).unwrap(), None);
        let file_off = TelemetryConfig {
            metrics: Some(false),
            ..TelemetryConfig::default()
        };
        assert_eq!(file_off.resolve_metrics(&[ENDPOINT][..]).unwrap(), None);
        assert!(file_off.resolve(&[ENDPOINT][..]).unwrap().is_some());
        let all_off = TelemetryConfig {
            enabled: Some(false),
            ..TelemetryConfig::default()
        };
        assert_eq!(all_off.resolve_metrics(&[ENDPOINT][..]).unwrap(), None);
    }

    #[test]
    fn invalid_values_are_start_up_errors_that_name_the_variable() {
        for (name, value) in [
            ("OTEL_METRICS_EXPORTER", "statsd"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "0"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1m"),
            ("OTEL_METRIC_EXPORT_TIMEOUT", "-5"),
            (TEMPORALITY, "delta"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "collector:4318"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "no-equals-sign"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "soon"),
            ("OTEL_RESOURCE_ATTRIBUTES", "team"),
        ] {
            let error = TelemetryConfig::default()
                .resolve_metrics(&[ENDPOINT, (name, value)][..])
                .unwrap_err();
            assert!(error.to_string().contains(name), "{error}");
            assert!(!error.to_string().contains("no-equals-sign"), "{error}");
        }
        let zero = TelemetryConfig {
            metrics_interval_secs: Some(0),
            ..TelemetryConfig::default()
        };
        let error = zero.resolve_metrics(&[ENDPOINT][..]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("telemetry.metrics_interval_secs")
        );
    }
}
