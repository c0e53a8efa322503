//! How a written batch of spans reaches the collector: an OTLP/HTTP POST, or
//! the OTLP/gRPC `TraceService/Export` call with the same bytes as its message
//! (the request is already protobuf, so gRPC needs no message types here).
//! Called from the export thread, which waits for each send.
//!
//! OTLP/HTTP runs its connection on the export thread itself (a current-thread
//! runtime it blocks on for each send): a blocking client would hand every
//! batch to a thread of its own and back, two more wake-ups per batch on the
//! node's cores.

use std::time::Duration;

use bytes::{Buf, BufMut};
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataMap;
use tonic::transport::{Channel, Endpoint};

use super::{ExportHeaders, TelemetryError};

/// The gRPC method of OTLP trace export.
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// The connection to the collector.
#[derive(Debug)]
pub(super) enum SpanTransport {
    Http {
        client: reqwest::Client,
        url: String,
        /// Drives the client's connection while a send waits; idle between.
        runtime: tokio::runtime::Runtime,
    },
    Grpc {
        /// The runtime the channel's connections live on.
        runtime: tokio::runtime::Handle,
        channel: Channel,
        metadata: MetadataMap,
    },
}

impl SpanTransport {
    /// OTLP/HTTP to `url`, with `headers` on every request.
    pub(super) fn http(url: &str, headers: &ExportHeaders) -> Result<Self, TelemetryError> {
        let mut headers = headers.map().clone();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        // The builder's errors can quote the endpoint, which may hold credentials.
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .map_err(|_| TelemetryError::internal("the OTLP/HTTP client"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|_| TelemetryError::internal("the OTLP/HTTP runtime"))?;
        Ok(Self::Http {
            client,
            url: url.to_owned(),
            runtime,
        })
    }

    /// OTLP/gRPC to `url`, with `headers` as metadata, its connections on
    /// `runtime`.
    pub(super) fn grpc(
        url: &str,
        headers: &ExportHeaders,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, TelemetryError> {
        let endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(|_| TelemetryError::internal("the OTLP/gRPC channel"))?;
        let channel = {
            let _inside = runtime.enter();
            endpoint.connect_lazy()
        };
        Ok(Self::Grpc {
            runtime,
            channel,
            metadata: headers.grpc_metadata("OTEL_EXPORTER_OTLP_TRACES_HEADERS")?,
        })
    }

    /// Sends one request's bytes, waiting at most `timeout`. The errors name
    /// neither the URL nor the headers: both may hold credentials.
    pub(super) fn send(&self, body: Vec<u8>, timeout: Duration) -> Result<(), String> {
        match self {
            Self::Http {
                client,
                url,
                runtime,
            } => runtime.block_on(async {
                let response = client
                    .post(url)
                    .timeout(timeout)
                    .body(body)
                    .send()
                    .await
                    .map_err(|error| {
                        if error.is_timeout() {
                            format!("no answer within {timeout:?}")
                        } else {
                            format!(
                                "the collector could not be reached: {}",
                                error.without_url()
                            )
                        }
                    })?;
                let status = response.status();
                // Read to the end so the connection is kept for the next batch.
                let _ = response.bytes().await;
                if status.is_success() {
                    Ok(())
                } else {
                    Err(format!("the collector answered {status}"))
                }
            }),
            Self::Grpc {
                runtime,
                channel,
                metadata,
            } => {
                let mut request = tonic::Request::from_parts(
                    metadata.clone(),
                    tonic::Extensions::default(),
                    body,
                );
                request.set_timeout(timeout);
                let mut client = tonic::client::Grpc::new(channel.clone());
                let call = async move {
                    client
                        .ready()
                        .await
                        .map_err(|error| format!("the collector could not be reached: {error}"))?;
                    client
                        .unary(request, PathAndQuery::from_static(EXPORT_PATH), RawCodec)
                        .await
                        .map(drop)
                        .map_err(|status| format!("the collector answered {:?}", status.code()))
                };
                // The timer is made inside the runtime: it needs its clock.
                match runtime.block_on(async move { tokio::time::timeout(timeout, call).await }) {
                    Ok(sent) => sent,
                    Err(_) => Err(format!("no answer within {timeout:?}")),
                }
            }
        }
    }
}

/// A gRPC codec for messages that are protobuf already: sends the bytes as
/// they are, and reads nothing from the answer (an export's response carries
/// only optional partial-success counts).
#[derive(Debug, Clone, Copy)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = ();
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<()>, tonic::Status> {
        src.advance(src.remaining());
        Ok(Some(()))
    }
}
