//! The OTLP/HTTP span exporter: each batch written as protobuf by [`otlp`]
//! and posted to the collector with the configured headers and time limit.
//! It runs on the SDK's batch thread, which waits for each export, so the
//! request is a blocking one.
//!
//! [`otlp`]: super::otlp

use std::future::Future;
use std::time::Duration;

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use reqwest::blocking::Client;
use reqwest::header::{CONTENT_TYPE, HeaderValue};

use super::otlp::{self, EncodedResource};
use super::{ExportSettings, TelemetryError};

/// Spans to one collector over OTLP/HTTP (protobuf).
#[derive(Debug)]
pub(super) struct HttpExporter {
    client: Client,
    url: String,
    resource: EncodedResource,
    /// The time limit of one export, for the error that says it passed.
    timeout: Duration,
    /// The size of the last batch's body: the next one is about as big.
    last_len: std::sync::atomic::AtomicUsize,
}

impl HttpExporter {
    pub(super) fn new(export: &ExportSettings) -> Result<Self, TelemetryError> {
        let mut headers = export.headers.map().clone();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        let client = Client::builder()
            .default_headers(headers)
            .timeout(export.timeout)
            .build()
            .map_err(|_| TelemetryError::internal("the OTLP/HTTP client"))?;
        Ok(Self {
            client,
            url: export.traces_url.clone(),
            resource: EncodedResource::default(),
            timeout: export.timeout,
            last_len: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn send(&self, batch: &[SpanData]) -> OTelSdkResult {
        use std::sync::atomic::Ordering::Relaxed;
        // Room for the length prefixes inserted in front of the whole batch.
        let mut body = Vec::with_capacity(self.last_len.load(Relaxed) + 64);
        otlp::export_request(batch, &self.resource, &mut body);
        self.last_len.store(body.len(), Relaxed);
        // The errors name neither the URL nor the headers: both may hold
        // credentials.
        let response = self
            .client
            .post(&self.url)
            .body(body)
            .send()
            .map_err(|error| self.failure(&error.without_url()))?;
        let status = response.status();
        // Read to the end so the connection is kept for the next batch.
        let _ = response.bytes();
        if status.is_success() {
            Ok(())
        } else {
            Err(OTelSdkError::InternalFailure(format!(
                "the collector answered {status}"
            )))
        }
    }

    fn failure(&self, error: &reqwest::Error) -> OTelSdkError {
        if error.is_timeout() {
            OTelSdkError::Timeout(self.timeout)
        } else {
            OTelSdkError::InternalFailure(format!("the collector could not be reached: {error}"))
        }
    }
}

impl SpanExporter for HttpExporter {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        std::future::ready(self.send(&batch))
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = EncodedResource::new(resource);
    }
}
