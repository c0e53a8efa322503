//! What trace export a process runs with: `[telemetry]` of `awaken.toml` under the
//! standard `OTEL_*` variables, which win where both say something. Every value
//! is checked here, at start-up: a typo in a sampler or an endpoint is an error
//! that names the variable, not a silent fallback.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::batcher::BatchSettings;
use super::headers::{self, ExportHeaders};
use destination::{Destination, Signal};

mod destination;
mod metrics;

pub use awaken_actors::telemetry::{RootSampling, Sampling};
pub use metrics::MetricsExportSettings;
/// The variable the GenAI instrumentations read to record message content.
const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// The batching when the `OTEL_BSP_*` variables are not set (the
/// specification's defaults).
const DEFAULT_BATCHES: BatchSettings = BatchSettings {
    queue_size: 2048,
    batch_size: 512,
    delay: Duration::from_secs(5),
};
/// How long one batch export may take when `OTEL_BSP_EXPORT_TIMEOUT` is not set.
const DEFAULT_BATCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The service name when neither `OTEL_SERVICE_NAME` nor the config sets one.
const DEFAULT_SERVICE_NAME: &str = "awaken";

/// `[telemetry]` in `awaken.toml`: trace and metric export over OTLP, off by
/// default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Export traces (and metrics, unless `metrics` says otherwise). Unset: on
    /// exactly when an endpoint is configured (here or in
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`).
    pub enabled: Option<bool>,
    /// Push the metrics of `/metrics` over OTLP too. Unset: as `enabled`; the
    /// variable `OTEL_METRICS_EXPORTER` (`otlp` or `none`) wins.
    pub metrics: Option<bool>,
    /// Seconds between two metric pushes (60 by default), as
    /// `OTEL_METRIC_EXPORT_INTERVAL` (which counts milliseconds).
    pub metrics_interval_secs: Option<u64>,
    /// The collector's base URL (`/v1/traces` and `/v1/metrics` are appended), as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: Option<String>,
    /// `http/protobuf` (the default) or `grpc`, as `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub protocol: Option<String>,
    /// `service.name` of the spans, as `OTEL_SERVICE_NAME`.
    pub service_name: Option<String>,
    /// Share of new traces recorded (0 to 1); a run in a caller's trace follows
    /// the caller's decision. As `OTEL_TRACES_SAMPLER=parentbased_traceidratio`
    /// with `OTEL_TRACES_SAMPLER_ARG`.
    pub sample_ratio: Option<f64>,
    /// Record prompts and completions on `chat` spans (off by default: they hold
    /// whatever users and tools wrote), as
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`.
    pub capture_content: Option<bool>,
}

/// How spans travel to the collector (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// OTLP/HTTP with protobuf bodies, to `{endpoint}/v1/traces` (the default).
    HttpProtobuf,
    /// OTLP/gRPC, to the endpoint as given.
    Grpc,
}

/// Export that is on: where to, as whom, what share.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportSettings {
    /// How spans travel.
    pub transport: Transport,
    /// The full URL traces are sent to.
    pub traces_url: String,
    /// `service.name`.
    pub service_name: String,
    /// Which traces are recorded.
    pub sampling: Sampling,
    /// When batches leave, and how many spans may wait (`OTEL_BSP_*`); the
    /// ones beyond are dropped and counted.
    pub batches: BatchSettings,
    /// Whether `chat` spans carry the prompts and completions.
    pub capture_content: bool,
    /// Headers (or gRPC metadata) sent with every export
    /// (`OTEL_EXPORTER_OTLP_HEADERS`).
    pub headers: ExportHeaders,
    /// How long one export may take: the shorter of `OTEL_EXPORTER_OTLP_TIMEOUT`
    /// and `OTEL_BSP_EXPORT_TIMEOUT`.
    pub timeout: Duration,
}

/// A telemetry setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("telemetry: {0}")]
pub struct TelemetryError(String);

impl TelemetryError {
    pub(crate) fn internal(what: &str) -> Self {
        Self(format!("cannot set up {what}"))
    }

    /// A value that may hold a secret: named, never quoted.
    pub(super) fn secret(name: &str, problem: &str) -> Self {
        Self(format!(
            "{name} is not valid: {problem} (the value is not shown)"
        ))
    }

    pub(super) fn invalid(name: &str, value: &str, expected: &str) -> Self {
        Self(format!(
            "{name} = {value:?} is not valid: expected {expected}"
        ))
    }
}

/// The environment variables this module reads, looked up by name.
pub trait Env {
    /// The value of `name`, if set (an empty value counts as unset, as the
    /// OpenTelemetry specification says).
    fn var(&self, name: &str) -> Option<String>;
}

/// The process's environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name)
            .ok()
            .filter(|value| !value.trim().is_empty())
    }
}

/// Fixed variables, for tests.
#[cfg(test)]
impl Env for [(&str, &str)] {
    fn var(&self, name: &str) -> Option<String> {
        self.iter()
            .find(|(key, value)| *key == name && !value.trim().is_empty())
            .map(|(_, value)| (*value).to_owned())
    }
}

impl TelemetryConfig {
    /// The export this config and `env` ask for: `None` when off.
    pub fn resolve(
        &self,
        env: &(impl Env + ?Sized),
    ) -> Result<Option<ExportSettings>, TelemetryError> {
        if sdk_disabled(env)? {
            return Ok(None);
        }
        if let Some(exporter) = env.var("OTEL_TRACES_EXPORTER") {
            match exporter.trim() {
                "none" => return Ok(None),
                "otlp" => {}
                other => {
                    return Err(TelemetryError::invalid(
                        "OTEL_TRACES_EXPORTER",
                        other,
                        "`otlp` or `none`",
                    ));
                }
            }
        }
        let destination = Destination::resolve(self, env, Signal::Traces)?;
        let sampling = self.sampling(env)?;
        let batches = batches(env)?;
        let batch_timeout = match env.var("OTEL_BSP_EXPORT_TIMEOUT") {
            Some(value) => headers::parse_millis("OTEL_BSP_EXPORT_TIMEOUT", &value)?,
            None => DEFAULT_BATCH_TIMEOUT,
        };
        let capture_content = match env.var(CAPTURE_CONTENT) {
            Some(value) => parse_bool(CAPTURE_CONTENT, &value)?,
            None => self.capture_content.unwrap_or(false),
        };
        if let Some(attributes) = env.var("OTEL_RESOURCE_ATTRIBUTES") {
            check_resource_attributes(&attributes)?;
        }
        if !self.enabled.unwrap_or(destination.url.is_some()) {
            return Ok(None);
        }
        Ok(Some(ExportSettings {
            transport: destination.transport,
            traces_url: destination.url_or_default()?,
            service_name: self.service_name(env),
            sampling,
            batches,
            capture_content,
            headers: destination.headers,
            timeout: destination.timeout.min(batch_timeout),
        }))
    }

    /// `service.name`: `OTEL_SERVICE_NAME`, the config's, or the default.
    fn service_name(&self, env: &(impl Env + ?Sized)) -> String {
        env.var("OTEL_SERVICE_NAME")
            .or_else(|| self.service_name.clone())
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned())
    }

    fn sampling(&self, env: &(impl Env + ?Sized)) -> Result<Sampling, TelemetryError> {
        let Some(sampler) = env.var("OTEL_TRACES_SAMPLER") else {
            return match self.sample_ratio {
                Some(ratio) => Ok(Sampling::ParentBased(RootSampling::Ratio(checked_ratio(
                    "telemetry.sample_ratio",
                    &ratio.to_string(),
                )?))),
                None => Ok(Sampling::ParentBased(RootSampling::AlwaysOn)),
            };
        };
        let ratio = || -> Result<f64, TelemetryError> {
            match env.var("OTEL_TRACES_SAMPLER_ARG") {
                Some(arg) => checked_ratio("OTEL_TRACES_SAMPLER_ARG", &arg),
                None => Ok(1.0),
            }
        };
        Ok(match sampler.trim() {
            "always_on" => Sampling::AlwaysOn,
            "always_off" => Sampling::AlwaysOff,
            "traceidratio" => Sampling::Ratio(ratio()?),
            "parentbased_always_on" => Sampling::ParentBased(RootSampling::AlwaysOn),
            "parentbased_always_off" => Sampling::ParentBased(RootSampling::AlwaysOff),
            "parentbased_traceidratio" => Sampling::ParentBased(RootSampling::Ratio(ratio()?)),
            other => {
                return Err(TelemetryError::invalid(
                    "OTEL_TRACES_SAMPLER",
                    other,
                    "always_on, always_off, traceidratio, parentbased_always_on, \
                     parentbased_always_off or parentbased_traceidratio",
                ));
            }
        })
    }
}

/// The batching the `OTEL_BSP_*` variables ask for; a batch is never bigger
/// than the queue (as the specification has it).
fn batches(env: &(impl Env + ?Sized)) -> Result<BatchSettings, TelemetryError> {
    let count = |name: &str, default: usize| match env.var(name) {
        Some(value) => value
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|size| *size > 0)
            .ok_or_else(|| TelemetryError::invalid(name, &value, "a positive integer")),
        None => Ok(default),
    };
    let queue_size = count("OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_BATCHES.queue_size)?;
    let batch_size = count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_BATCHES.batch_size)?;
    let delay = match env.var("OTEL_BSP_SCHEDULE_DELAY") {
        Some(value) => headers::parse_millis("OTEL_BSP_SCHEDULE_DELAY", &value)?,
        None => DEFAULT_BATCHES.delay,
    };
    Ok(BatchSettings {
        queue_size,
        batch_size: batch_size.min(queue_size),
        delay,
    })
}

/// Whether `OTEL_SDK_DISABLED` turns every signal off.
pub(super) fn sdk_disabled(env: &(impl Env + ?Sized)) -> Result<bool, TelemetryError> {
    match env.var("OTEL_SDK_DISABLED") {
        Some(value) => parse_bool("OTEL_SDK_DISABLED", &value),
        None => Ok(false),
    }
}

pub(super) fn parse_bool(name: &str, value: &str) -> Result<bool, TelemetryError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(TelemetryError::invalid(name, value, "`true` or `false`")),
    }
}

fn checked_ratio(name: &str, value: &str) -> Result<f64, TelemetryError> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|ratio| (0.0..=1.0).contains(ratio))
        .ok_or_else(|| TelemetryError::invalid(name, value, "a number from 0 to 1"))
}

pub(super) fn check_resource_attributes(value: &str) -> Result<(), TelemetryError> {
    let well_formed = value.split(',').all(|pair| {
        pair.split_once('=')
            .is_some_and(|(key, _)| !key.trim().is_empty())
    });
    if well_formed {
        Ok(())
    } else {
        Err(TelemetryError(
            "OTEL_RESOURCE_ATTRIBUTES is not valid: expected key=value pairs separated by commas"
                .to_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(config: &TelemetryConfig, env: &[(&str, &str)]) -> ExportSettings {
        config.resolve(env).unwrap().expect("export on")
    }

    #[test]
    fn headers_and_time_limit_come_from_the_traces_variable_first() {
        let config = TelemetryConfig::default();
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        let export = on(&config, &[endpoint]);
        assert!(export.headers.map().is_empty());
        assert_eq!(export.timeout, Duration::from_secs(10));
        let export = on(
            &config,
            &[
                endpoint,
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-general=1"),
                ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-traces=2"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "500"),
            ],
        );
        assert_eq!(export.headers.map()["x-traces"], "2");
        assert!(!export.headers.map().contains_key("x-general"));
        assert_eq!(export.timeout, Duration::from_millis(500));
        for (name, value) in [
            ("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
        ] {
            let error = config.resolve(&[endpoint, (name, value)][..]).unwrap_err();
            assert!(error.to_string().contains(name), "{error}");
            assert!(!error.to_string().contains("no-equals-sign"), "{error}");
        }
    }

    #[test]
    fn off_unless_an_endpoint_or_the_switch_says_otherwise() {
        let config = TelemetryConfig::default();
        assert_eq!(
            config.resolve(&[("OTEL_SERVICE_NAME", "x")][..]).unwrap(),
            None
        );
        let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")];
        let export = on(&config, &env);
        assert_eq!(export.traces_url, "http://collector:4318/v1/traces");
        assert_eq!(export.service_name, "awaken");
        assert_eq!(
            export.sampling,
            Sampling::ParentBased(RootSampling::AlwaysOn)
        );
        let switched = TelemetryConfig {
            enabled: Some(true),
            ..TelemetryConfig::default()
        };
        assert_eq!(
            on(&switched, &[][..]).traces_url,
            "http://localhost:4318/v1/traces"
        );
        let vetoed = TelemetryConfig {
            enabled: Some(false),
            ..TelemetryConfig::default()
        };
        assert_eq!(vetoed.resolve(&env[..]).unwrap(), None);
    }

    #[test]
    fn the_standard_variables_win_over_the_file() {
        let config = TelemetryConfig {
            endpoint: Some("http://file:4318".into()),
            service_name: Some("from-file".into()),
            sample_ratio: Some(0.5),
            ..TelemetryConfig::default()
        };
        let from_file = on(&config, &[][..]);
        assert_eq!(from_file.traces_url, "http://file:4318/v1/traces");
        assert_eq!(from_file.service_name, "from-file");
        assert_eq!(
            from_file.sampling,
            Sampling::ParentBased(RootSampling::Ratio(0.5))
        );
        let env = [
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://env:4318/custom",
            ),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
        ];
        let from_env = on(&config, &env);
        assert_eq!(from_env.traces_url, "https://env:4318/custom");
        assert_eq!(from_env.service_name, "from-env");
        assert_eq!(from_env.sampling, Sampling::Ratio(0.1));
        assert_eq!(
            from_env.batches,
            BatchSettings {
                queue_size: 100,
                batch_size: 100,
                delay: Duration::from_secs(5)
            },
            "a batch no bigger than the queue"
        );
        assert_eq!(on(&config, &[]).batches, DEFAULT_BATCHES);
        let tuned = on(
            &config,
            &[
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64"),
                ("OTEL_BSP_SCHEDULE_DELAY", "250"),
                ("OTEL_BSP_EXPORT_TIMEOUT", "2000"),
            ],
        );
        assert_eq!(tuned.batches.batch_size, 64);
        assert_eq!(tuned.batches.delay, Duration::from_millis(250));
        assert_eq!(tuned.timeout, Duration::from_secs(2));
        // Content stays out unless asked for, here or in the variable.
        assert!(!from_env.capture_content);
        let capturing = TelemetryConfig {
            capture_content: Some(true),
            ..config.clone()
        };
        assert!(on(&capturing, &[]).capture_content);
        assert!(
            !on(
                &capturing,
                &[(
                    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                    "false"
                )]
            )
            .capture_content
        );
    }

    #[test]
    fn grpc_sends_to_the_endpoint_as_given() {
        let config = TelemetryConfig::default();
        let grpc = on(
            &config,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
        );
        assert_eq!(grpc.transport, Transport::Grpc);
        assert_eq!(grpc.traces_url, "http://collector:4317");
        let default = on(
            &TelemetryConfig {
                enabled: Some(true),
                protocol: Some("grpc".into()),
                ..TelemetryConfig::default()
            },
            &[],
        );
        assert_eq!(default.traces_url, "http://localhost:4317");
        let http = on(
            &config,
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")],
        );
        assert_eq!(http.transport, Transport::HttpProtobuf);
        assert_eq!(http.traces_url, "http://collector:4318/v1/traces");
    }

    #[test]
    fn off_switches_of_the_specification() {
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert_eq!(TelemetryConfig::default().resolve(&env[..]).unwrap(), None);
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ];
        assert_eq!(TelemetryConfig::default().resolve(&env[..]).unwrap(), None);
    }

    #[test]
    fn invalid_values_are_start_up_errors_that_name_the_variable() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        for (env, name) in [
            (
                vec![endpoint, ("OTEL_TRACES_SAMPLER", "sometimes")],
                "OTEL_TRACES_SAMPLER",
            ),
            (
                vec![
                    endpoint,
                    ("OTEL_TRACES_SAMPLER", "traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "1.5"),
                ],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
            (
                vec![endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (
                vec![endpoint, ("OTEL_SDK_DISABLED", "maybe")],
                "OTEL_SDK_DISABLED",
            ),
            (
                vec![endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")],
                "OTEL_TRACES_EXPORTER",
            ),
            (
                vec![endpoint, ("OTEL_RESOURCE_ATTRIBUTES", "team")],
                "OTEL_RESOURCE_ATTRIBUTES",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                vec![endpoint, ("OTEL_BSP_MAX_QUEUE_SIZE", "0")],
                "OTEL_BSP_MAX_QUEUE_SIZE",
            ),
            (
                vec![
                    endpoint,
                    ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "yes"),
                ],
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
            ),
            (
                vec![endpoint, ("OTEL_BSP_MAX_QUEUE_SIZE", "lots")],
                "OTEL_BSP_MAX_QUEUE_SIZE",
            ),
            (
                vec![endpoint, ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0")],
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
            ),
            (
                vec![endpoint, ("OTEL_BSP_SCHEDULE_DELAY", "5s")],
                "OTEL_BSP_SCHEDULE_DELAY",
            ),
            (
                vec![endpoint, ("OTEL_BSP_EXPORT_TIMEOUT", "-1")],
                "OTEL_BSP_EXPORT_TIMEOUT",
            ),
        ] {
            let error = TelemetryConfig::default()
                .resolve(env.as_slice())
                .unwrap_err();
            assert!(error.to_string().contains(name), "{error}");
        }
        let bad_ratio = TelemetryConfig {
            sample_ratio: Some(-0.1),
            endpoint: Some("http://collector:4318".into()),
            ..TelemetryConfig::default()
        };
        assert!(
            bad_ratio
                .resolve(&[][..])
                .unwrap_err()
                .to_string()
                .contains("telemetry.sample_ratio")
        );
    }

    #[test]
    fn an_endpoint_with_credentials_is_never_echoed() {
        let env = [(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "ftp://user:hunter2@collector/v1/traces",
        )];
        let error = TelemetryConfig::default().resolve(&env[..]).unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }
}
