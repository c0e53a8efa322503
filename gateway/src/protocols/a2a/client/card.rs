//! Agent card discovery: the first card found at the endpoint's card URLs, checked
//! for an HTTP+JSON interface of protocol version 1.

use awaken_actors::delegation::{RemoteAgentCard, RemoteError};
use reqwest::StatusCode;
use serde::Deserialize;

use super::endpoint::Settings;
use super::http::Http;

/// The binding this client speaks.
const HTTP_JSON_BINDING: &str = "HTTP+JSON";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Card {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    supported_interfaces: Vec<Interface>,
    #[serde(default)]
    capabilities: Capabilities,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Interface {
    protocol_binding: String,
    #[serde(default)]
    protocol_version: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Capabilities {
    #[serde(default)]
    streaming: bool,
}

/// Reads the agent's card. A refusal (401/403) or an unreachable server ends the
/// search at once; a missing card (any other status) moves on to the next URL.
pub(super) async fn discover(
    http: &Http,
    settings: &Settings,
) -> Result<RemoteAgentCard, RemoteError> {
    let mut misses = Vec::new();
    for (index, url) in settings.card_urls().into_iter().enumerate() {
        // The first URL is the agent's own card (or the one configured).
        let tenant = settings.tenant.as_deref().filter(|_| index > 0);
        let response = http.get(settings, &url).await?;
        let status = response.status();
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            return Err(RemoteError::Refused(format!(
                "{url} answered {status}: check the endpoint's auth"
            )));
        }
        if !status.is_success() {
            misses.push(format!("{url} ({status})"));
            continue;
        }
        let body = super::body::read_body(response, &url).await?;
        let card: Card = serde_json::from_slice(&body)
            .map_err(|e| RemoteError::Protocol(format!("{url} is not an agent card: {e}")))?;
        match checked(card, &url, tenant) {
            Ok(card) => return Ok(card),
            Err(CardMiss::OtherAgent) => misses.push(format!("{url} (another agent's card)")),
            Err(CardMiss::Unusable(error)) => return Err(error),
        }
    }
    Err(RemoteError::Refused(format!(
        "no agent card at {}",
        misses.join(", ")
    )))
}

/// Why a card found was not taken.
enum CardMiss {
    /// It describes another agent of the server: look on.
    OtherAgent,
    /// The agent cannot be used by this client.
    Unusable(RemoteError),
}

/// The card's facts, if it offers HTTP+JSON of version 1 — for `tenant`, when
/// given, on an interface of that tenant.
fn checked(card: Card, url: &str, tenant: Option<&str>) -> Result<RemoteAgentCard, CardMiss> {
    let usable: Vec<&Interface> = card
        .supported_interfaces
        .iter()
        .filter(|interface| {
            interface.protocol_binding == HTTP_JSON_BINDING
                && interface
                    .protocol_version
                    .as_deref()
                    .is_none_or(|version| version == "1" || version.starts_with("1."))
        })
        .collect();
    if let Some(tenant) = tenant
        && !usable
            .iter()
            .any(|interface| interface.tenant.as_deref() == Some(tenant))
    {
        return Err(CardMiss::OtherAgent);
    }
    if usable.is_empty() {
        return Err(CardMiss::Unusable(RemoteError::Protocol(format!(
            "the card at {url} offers no {HTTP_JSON_BINDING} interface of A2A 1.x"
        ))));
    }
    Ok(RemoteAgentCard {
        name: card.name,
        description: card.description,
        streaming: card.capabilities.streaming,
    })
}
