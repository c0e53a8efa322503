//! Where one signal's exports go — protocol, URL, headers, time limit — from
//! the signal's own `OTEL_EXPORTER_OTLP_<SIGNAL>_*` variables, then the general
//! `OTEL_EXPORTER_OTLP_*` ones, then `[telemetry]`, as the specification orders
//! them. Traces and metrics each resolve their own.

use std::time::Duration;

use super::super::headers::{self, ExportHeaders};
use super::{Env, TelemetryConfig, TelemetryError, Transport};

/// Where an OTLP/HTTP collector listens when nothing says otherwise.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
/// Where an OTLP/GRPC collector listens when nothing says otherwise.
const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";

/// What is exported: each has its own variables and OTLP/HTTP path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Signal {
    Traces,
    Metrics,
}

/// The names one signal is configured by.
struct SignalNames {
    protocol: &'static str,
    endpoint: &'static str,
    headers: &'static str,
    timeout: &'static str,
    /// The OTLP/HTTP path under a base endpoint.
    path: &'static str,
}

impl Signal {
    const fn names(self) -> &'static SignalNames {
        match self {
            Self::Traces => &SignalNames {
                protocol: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                endpoint: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                headers: "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                timeout: "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                path: "v1/traces",
            },
            Self::Metrics => &SignalNames {
                protocol: "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
                endpoint: "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                headers: "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                timeout: "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
                path: "v1/metrics",
            },
        }
    }
}

/// One signal's collector, as configured.
#[derive(Debug, Clone)]
pub(super) struct Destination {
    pub(super) signal: Signal,
    pub(super) transport: Transport,
    /// The full URL, when an endpoint was configured.
    pub(super) url: Option<String>,
    pub(super) headers: ExportHeaders,
    pub(super) timeout: Duration,
}

impl Destination {
    /// Reads `signal`'s destination from `env` and `config`, checking every value.
    pub(super) fn resolve(
        config: &TelemetryConfig,
        env: &(impl Env + ?Sized),
        signal: Signal,
    ) -> Result<Self, TelemetryError> {
        let names = signal.names();
        let protocol =
            first_of(env, &[names.protocol, "OTEL_EXPORTER_OTLP_PROTOCOL"]).or_else(|| {
                config
                    .protocol
                    .clone()
                    .map(|value| ("telemetry.protocol", value))
            });
        let transport = match protocol {
            None => Transport::HttpProtobuf,
            Some((name, value)) => match value.trim() {
                "http/protobuf" => Transport::HttpProtobuf,
                "grpc" => Transport::Grpc,
                _ => {
                    return Err(TelemetryError::invalid(
                        name,
                        &value,
                        "`http/protobuf` or `grpc` (`http/json` is not supported)",
                    ));
                }
            },
        };
        let url = match env.var(names.endpoint) {
            Some(url) => Some(checked_url(names.endpoint, &url)?),
            None => match env.var("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(base) => Some(under(
                    transport,
                    signal,
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    &base,
                )?),
                None => match &config.endpoint {
                    Some(base) => Some(under(transport, signal, "telemetry.endpoint", base)?),
                    None => None,
                },
            },
        };
        let headers = match first_of(env, &[names.headers, "OTEL_EXPORTER_OTLP_HEADERS"]) {
            Some((name, value)) => ExportHeaders::parse(name, &value)?,
            None => ExportHeaders::default(),
        };
        let timeout = match first_of(env, &[names.timeout, "OTEL_EXPORTER_OTLP_TIMEOUT"]) {
            Some((name, value)) => headers::parse_millis(name, &value)?,
            None => headers::DEFAULT_TIMEOUT,
        };
        Ok(Self {
            signal,
            transport,
            url,
            headers,
            timeout,
        })
    }

    /// The configured URL, or the signal's default one for the transport.
    pub(super) fn url_or_default(&self) -> Result<String, TelemetryError> {
        match &self.url {
            Some(url) => Ok(url.clone()),
            None => {
                let base = match self.transport {
                    Transport::HttpProtobuf => DEFAULT_ENDPOINT,
                    Transport::Grpc => DEFAULT_GRPC_ENDPOINT,
                };
                under(self.transport, self.signal, "telemetry.endpoint", base)
            }
        }
    }
}

/// The first of the variables `names` that is set, with its name.
pub(super) fn first_of<'n>(
    env: &(impl Env + ?Sized),
    names: &[&'n str],
) -> Option<(&'n str, String)> {
    names
        .iter()
        .find_map(|name| env.var(name).map(|value| (*name, value)))
}

/// `signal`'s URL under the base endpoint `base` (named `name` in errors): the
/// signal's path appended for OTLP/HTTP, the base as given for gRPC.
fn under(
    transport: Transport,
    signal: Signal,
    name: &str,
    base: &str,
) -> Result<String, TelemetryError> {
    let base = checked_url(name, base)?;
    Ok(match transport {
        Transport::HttpProtobuf => {
            format!("{}/{}", base.trim_end_matches('/'), signal.names().path)
        }
        Transport::Grpc => base,
    })
}

fn checked_url(name: &str, value: &str) -> Result<String, TelemetryError> {
    let value = value.trim();
    let parsed = reqwest::Url::parse(value)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some());
    match parsed {
        // The URL as given: it may carry credentials, so errors never echo it.
        Some(_) => Ok(value.to_owned()),
        None => Err(TelemetryError(format!(
            "{name} is not valid: expected an http:// or https:// URL with a host"
        ))),
    }
}
