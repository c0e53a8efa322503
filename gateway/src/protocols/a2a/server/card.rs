//! Agent cards, derived from agent specs: the public card of each served agent and
//! the extended card behind `a2a_extended_card_bearer_token`.

use awaken_actors::contract::AgentSpec;
use axum::http::HeaderMap;
use axum::http::header::HOST;
use serde_json::{Value as JsonValue, json};

use super::A2aState;
use super::service::Scope;
use super::wire::PROTOCOL_VERSION;

/// The binding names agent cards use.
pub(crate) const JSONRPC_BINDING: &str = "JSONRPC";
/// The HTTP+JSON binding's name.
pub(crate) const HTTP_JSON_BINDING: &str = "HTTP+JSON";

/// `scheme://host/v1/a2a` as the client reached this server.
pub(crate) fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|value| value.to_str().ok())
        .filter(|proto| matches!(*proto, "http" | "https"))
        .unwrap_or("http");
    format!("{scheme}://{host}/v1/a2a")
}

/// The card of `scope`'s agent; `extended` adds its tools as skills.
pub(crate) fn agent_card(
    state: &A2aState,
    scope: &Scope,
    headers: &HeaderMap,
    extended: bool,
) -> JsonValue {
    let registries = state.runs.registries();
    let spec = registries.agents.get(scope.agent.as_str()).cloned();
    let url = base_url(headers);
    let interface = |binding: &str| {
        let mut interface = json!({
            "url": url,
            "protocolBinding": binding,
            "protocolVersion": PROTOCOL_VERSION,
        });
        if let Some(tenant) = &scope.tenant {
            interface["tenant"] = json!(tenant);
        }
        interface
    };
    let description = spec
        .as_deref()
        .map(describe)
        .unwrap_or_else(|| format!("Awaken agent `{}`", scope.agent));
    let mut skills = vec![json!({
        "id": scope.agent,
        "name": scope.agent,
        "description": description,
        "tags": ["awaken"],
        "inputModes": ["text/plain", "application/json"],
        "outputModes": ["text/plain"],
    })];
    if extended && let Some(tools) = state.runs.agent_tools(&scope.agent) {
        skills.extend(tools.iter().map(|tool| {
            json!({
                "id": format!("tool:{}", tool.id),
                "name": tool.name,
                "description": tool.description,
                "tags": ["tool"],
            })
        }));
    }
    let mut card = json!({
        "name": scope.agent,
        "description": description,
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [interface(JSONRPC_BINDING), interface(HTTP_JSON_BINDING)],
        "capabilities": {
            "streaming": true,
            "pushNotifications": true,
            "extendedAgentCard": state.config.a2a_extended_card_bearer_token.is_some(),
        },
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
    });
    if !state.config.api_keys.is_empty() {
        card["securitySchemes"] = json!({
            "apiKey": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": "an API key of this server"}}
        });
        card["securityRequirements"] = json!([{"schemes": {"apiKey": {"list": []}}}]);
    }
    card
}

/// One line about the agent: the first line of its system prompt.
fn describe(spec: &AgentSpec) -> String {
    spec.system_prompt
        .lines()
        .find(|line| !line.trim().is_empty())
        .map(|line| line.trim().to_owned())
        .unwrap_or_else(|| format!("Awaken agent `{}`", spec.id))
}
