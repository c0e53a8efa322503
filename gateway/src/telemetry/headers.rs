//! The headers and time limit of OTLP/HTTP exports
//! (`OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`, `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`).
//! Headers usually hold a backend's API key: their values never appear in a
//! debug print, a log line or an error.

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};

use super::TelemetryError;

/// How long one export may take when nothing says (the specification's 10 s).
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Headers sent with every export; printed without their values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ExportHeaders(HeaderMap);

impl ExportHeaders {
    /// The headers of `value` (`key=value,key2=value2`, values percent-encoded,
    /// as the W3C baggage format the specification names); `name` is the
    /// variable they came from, for the error.
    pub(super) fn parse(name: &str, value: &str) -> Result<Self, TelemetryError> {
        let mut headers = HeaderMap::new();
        for member in value.split(',').filter(|member| !member.trim().is_empty()) {
            let Some((key, raw)) = member.split_once('=') else {
                return Err(TelemetryError::secret(name, "a member without `=`"));
            };
            let key = HeaderName::from_bytes(key.trim().as_bytes())
                .map_err(|_| TelemetryError::secret(name, "a header name that is not a token"))?;
            let decoded = percent_encoding::percent_decode_str(raw.trim()).collect::<Vec<u8>>();
            let mut value = HeaderValue::from_bytes(&decoded)
                .map_err(|_| TelemetryError::secret(name, "a value with control characters"))?;
            value.set_sensitive(true);
            headers.append(key, value);
        }
        Ok(Self(headers))
    }

    /// The headers, to send.
    pub(super) fn map(&self) -> &HeaderMap {
        &self.0
    }

    /// The headers as gRPC metadata; `name` is the variable they came from,
    /// for the error.
    pub(super) fn grpc_metadata(&self, name: &str) -> Result<MetadataMap, TelemetryError> {
        let mut metadata = MetadataMap::new();
        for (key, value) in &self.0 {
            let key = MetadataKey::from_bytes(key.as_str().as_bytes());
            let value = MetadataValue::try_from(value.as_bytes());
            let (Ok(key), Ok(value)) = (key, value) else {
                return Err(TelemetryError::secret(name, "a header gRPC cannot carry"));
            };
            metadata.append(key, value);
        }
        Ok(metadata)
    }
}

impl fmt::Debug for ExportHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// A duration in milliseconds, as the `*_TIMEOUT` and `*_INTERVAL` variables give it.
pub(super) fn parse_millis(name: &str, value: &str) -> Result<Duration, TelemetryError> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|millis| *millis > 0)
        .map(Duration::from_millis)
        .ok_or_else(|| TelemetryError::invalid(name, value, "a positive number of milliseconds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_split_trimmed_and_percent_decoded() {
        let headers = ExportHeaders::parse("H", "api-key=s%3Dcr%2Ct , x-team = core,,").unwrap();
        assert_eq!(headers.map()["api-key"], "s=cr,t");
        assert_eq!(headers.map()["x-team"], "core");
        assert_eq!(headers.map().len(), 2);
    }

    #[test]
    fn values_stay_out_of_debug_prints_and_errors() {
        let headers = ExportHeaders::parse("H", "authorization=Bearer%20hunter2").unwrap();
        assert!(!format!("{headers:?}").contains("hunter2"));
        for bad in ["hunter2", "bad name=hunter2", "k=hunter2%0A"] {
            let error = ExportHeaders::parse("OTEL_EXPORTER_OTLP_HEADERS", bad).unwrap_err();
            let text = error.to_string();
            assert!(text.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
        }
    }

    #[test]
    fn timeouts_are_positive_milliseconds() {
        assert_eq!(
            parse_millis("T", " 2500 ").unwrap(),
            Duration::from_millis(2500)
        );
        for bad in ["0", "-1", "1.5", "soon"] {
            assert!(
                parse_millis("T", bad)
                    .unwrap_err()
                    .to_string()
                    .contains('T')
            );
        }
    }
}
