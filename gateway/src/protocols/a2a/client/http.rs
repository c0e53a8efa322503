//! HTTP for the A2A client: the version and auth headers on every request, and
//! refusals read from the spec's `google.rpc.Status` error bodies.

use std::time::Duration;

use awaken_actors::delegation::RemoteError;
use std::sync::Arc;

use reqwest::header::ACCEPT;
use reqwest::{RequestBuilder, Response, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as JsonValue;

use super::auth::TokenCache;
use super::body::{MAX_ANSWER_BYTES, read_body, too_large};
use super::endpoint::Settings;
use crate::protocols::a2a::wire::PROTOCOL_VERSION;

/// Longest wait for a connection to a remote agent.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection pool for every remote agent, and the OAuth2 tokens in use.
#[derive(Debug, Clone)]
pub(super) struct Http {
    client: reqwest::Client,
    tokens: Arc<TokenCache>,
}

impl Http {
    pub(super) fn new() -> Self {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .unwrap_or_default();
        Self {
            client,
            tokens: Arc::new(TokenCache::default()),
        }
    }

    /// Sends the request `build` makes, authorized as the endpoint says; once
    /// more with a new OAuth2 token when the agent refuses the first (401).
    async fn send(
        &self,
        settings: &Settings,
        url: &str,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Response, RemoteError> {
        let response = self.send_once(settings, url, &build).await?;
        if response.status() == StatusCode::UNAUTHORIZED
            && let Some(credentials) = &settings.credentials
            && self.tokens.refused(credentials)
        {
            return self.send_once(settings, url, &build).await;
        }
        Ok(response)
    }

    async fn send_once(
        &self,
        settings: &Settings,
        url: &str,
        build: &impl Fn() -> RequestBuilder,
    ) -> Result<Response, RemoteError> {
        let mut request = build().header("A2A-Version", PROTOCOL_VERSION);
        if let Some(trace) = &settings.trace {
            request = request.header("traceparent", trace.to_string());
        }
        if let Some(credentials) = &settings.credentials {
            let (name, value) = self.tokens.header(&self.client, credentials).await?;
            request = request.header(name, value);
        }
        request
            .send()
            .await
            .map_err(|e| RemoteError::Unreachable(format!("{url}: {}", e.without_url())))
    }

    /// `GET url`, whatever its status.
    pub(super) async fn get(
        &self,
        settings: &Settings,
        url: &str,
    ) -> Result<Response, RemoteError> {
        self.send(settings, url, || self.client.get(url)).await
    }

    /// `GET url`, read as `T`.
    pub(super) async fn get_json<T: DeserializeOwned>(
        &self,
        settings: &Settings,
        url: &str,
    ) -> Result<T, RemoteError> {
        read_json(accepted(self.get(settings, url).await?, url).await?, url).await
    }

    /// `POST url` with a JSON `body`, read as `T`.
    pub(super) async fn post_json<T: DeserializeOwned>(
        &self,
        settings: &Settings,
        url: &str,
        body: &impl Serialize,
    ) -> Result<T, RemoteError> {
        let response = self
            .send(settings, url, || self.client.post(url).json(body))
            .await?;
        read_json(accepted(response, url).await?, url).await
    }

    /// `POST url` with a JSON `body`, answered by an event stream.
    pub(super) async fn post_stream(
        &self,
        settings: &Settings,
        url: &str,
        body: &impl Serialize,
    ) -> Result<Response, RemoteError> {
        let response = self
            .send(settings, url, || {
                self.client
                    .post(url)
                    .json(body)
                    .header(ACCEPT, "text/event-stream")
            })
            .await?;
        accepted(response, url).await
    }
}

async fn read_json<T: DeserializeOwned>(response: Response, url: &str) -> Result<T, RemoteError> {
    let body = read_body(response, url).await?;
    serde_json::from_slice(&body).map_err(|e| RemoteError::Protocol(format!("{url}: {e}")))
}

/// The response's event stream, cut off with an error when one event grows
/// past [`MAX_ANSWER_BYTES`] (events end at a blank line).
pub(super) fn bounded_events(
    response: Response,
    url: String,
) -> impl futures::Stream<Item = Result<bytes::Bytes, RemoteError>> {
    use futures::StreamExt;
    let mut since_boundary = 0usize;
    let mut last = 0u8;
    response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| RemoteError::Unreachable(format!("{url}: {e}")))?;
        for &byte in chunk.iter() {
            if byte == b'\n' && last == b'\n' {
                since_boundary = 0;
            } else if byte != b'\r' {
                since_boundary += 1;
            }
            if byte != b'\r' {
                last = byte;
            }
        }
        if since_boundary > MAX_ANSWER_BYTES {
            return Err(too_large(&url));
        }
        Ok(chunk)
    })
}

/// The response when it is a success; its error body as a refusal otherwise.
async fn accepted(response: Response, url: &str) -> Result<Response, RemoteError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body: JsonValue = read_body(response, url)
        .await
        .ok()
        .and_then(|body| serde_json::from_slice(&body).ok())
        .unwrap_or_default();
    let error = &body["error"];
    let said = match (error["status"].as_str(), error["message"].as_str()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (None, Some(message)) => message.to_owned(),
        _ => "no error body".to_owned(),
    };
    Err(RemoteError::Refused(format!(
        "{url} answered {status} ({said})"
    )))
}
