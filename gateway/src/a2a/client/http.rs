//! HTTP for the A2A client: the version and auth headers on every request, and
//! refusals read from the spec's `google.rpc.Status` error bodies.

use std::time::Duration;

use awaken_actors::delegation::RemoteError;
use reqwest::header::{ACCEPT, AUTHORIZATION};
use reqwest::{RequestBuilder, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as JsonValue;

use super::endpoint::Settings;
use crate::a2a::wire::PROTOCOL_VERSION;

/// Longest wait for a connection to a remote agent.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection pool for every remote agent.
#[derive(Debug, Clone)]
pub(super) struct Http {
    client: reqwest::Client,
}

impl Http {
    pub(super) fn new() -> Self {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .unwrap_or_default();
        Self { client }
    }

    fn with_headers(request: RequestBuilder, settings: &Settings) -> RequestBuilder {
        let request = request.header("A2A-Version", PROTOCOL_VERSION);
        match &settings.authorization {
            Some(value) => request.header(AUTHORIZATION, value),
            None => request,
        }
    }

    async fn send(request: RequestBuilder, url: &str) -> Result<Response, RemoteError> {
        request
            .send()
            .await
            .map_err(|e| RemoteError::Unreachable(format!("{url}: {e}")))
    }

    /// `GET url`, whatever its status.
    pub(super) async fn get(
        &self,
        settings: &Settings,
        url: &str,
    ) -> Result<Response, RemoteError> {
        Self::send(Self::with_headers(self.client.get(url), settings), url).await
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
        let request = Self::with_headers(self.client.post(url).json(body), settings);
        read_json(accepted(Self::send(request, url).await?, url).await?, url).await
    }

    /// `POST url` with a JSON `body`, answered by an event stream.
    pub(super) async fn post_stream(
        &self,
        settings: &Settings,
        url: &str,
        body: &impl Serialize,
    ) -> Result<Response, RemoteError> {
        let request = Self::with_headers(self.client.post(url).json(body), settings)
            .header(ACCEPT, "text/event-stream");
        accepted(Self::send(request, url).await?, url).await
    }
}

async fn read_json<T: DeserializeOwned>(response: Response, url: &str) -> Result<T, RemoteError> {
    response
        .json()
        .await
        .map_err(|e| RemoteError::Protocol(format!("{url}: {e}")))
}

/// The response when it is a success; its error body as a refusal otherwise.
async fn accepted(response: Response, url: &str) -> Result<Response, RemoteError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body: JsonValue = response.json().await.unwrap_or_default();
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
