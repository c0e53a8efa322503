//! Model and provider registry entries.
//!
//! An agent names a model by registry id (`AgentSpec::model`, e.g. `"claude-sonnet"`).
//! The [`ModelSpec`] registered under that id says which provider serves it and the
//! provider's own model name; the [`ProviderSpec`] says how to reach the provider.
//! API keys never live in specs: a provider names the environment variable that holds
//! its key.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Maps a model registry id to a provider and an upstream model name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct ModelSpec {
    /// The registry id agents refer to.
    pub id: String,
    /// The provider registry id that serves the model.
    pub provider: String,
    /// The model name the provider expects, e.g. `claude-sonnet-4-20250514`.
    pub model: String,
}

impl ModelSpec {
    /// A model entry.
    pub fn new(
        id: impl Into<String>,
        provider: impl Into<String>,
        model: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            provider: provider.into(),
            model: model.into(),
        }
    }
}

/// How to reach one model provider.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct ProviderSpec {
    /// The provider registry id models refer to.
    pub id: String,
    /// The client adapter: `openai`, `anthropic`, `ollama`, `scripted`, ...
    pub adapter: String,
    /// Endpoint override (for OpenAI-compatible servers, proxies, tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Name of the environment variable that holds the API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// File that holds the API key (a mounted Secret); read when the provider
    /// is built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_file: Option<std::path::PathBuf>,
    /// Request timeout, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl ProviderSpec {
    /// A provider entry using the adapter's defaults.
    pub fn new(id: impl Into<String>, adapter: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            adapter: adapter.into(),
            base_url: None,
            api_key_env: None,
            api_key_file: None,
            timeout_ms: None,
        }
    }

    /// Sets the endpoint.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = Some(base_url.into());
        self
    }

    /// Sets the environment variable holding the API key.
    pub fn with_api_key_env(mut self, var: impl Into<String>) -> Self {
        self.api_key_env = Some(var.into());
        self
    }

    /// Sets the request timeout.
    pub fn with_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn model_spec_shape() {
        let spec = ModelSpec::new("claude-sonnet", "anthropic", "claude-sonnet-4-20250514");
        let value = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            value,
            json!({"id": "claude-sonnet", "provider": "anthropic", "model": "claude-sonnet-4-20250514"})
        );
        assert_eq!(serde_json::from_value::<ModelSpec>(value).unwrap(), spec);
    }

    #[test]
    fn provider_spec_shape() {
        let minimal = ProviderSpec::new("local", "scripted");
        assert_eq!(
            serde_json::to_value(&minimal).unwrap(),
            json!({"id": "local", "adapter": "scripted"})
        );
        let full = ProviderSpec::new("openai", "openai")
            .with_base_url("http://127.0.0.1:8080/v1/")
            .with_api_key_env("OPENAI_API_KEY")
            .with_timeout_ms(30_000);
        let value = serde_json::to_value(&full).unwrap();
        assert_eq!(
            value,
            json!({
                "id": "openai", "adapter": "openai",
                "base_url": "http://127.0.0.1:8080/v1/",
                "api_key_env": "OPENAI_API_KEY",
                "timeout_ms": 30_000
            })
        );
        assert_eq!(serde_json::from_value::<ProviderSpec>(value).unwrap(), full);
    }

    #[test]
    fn schemas_name_required_fields() {
        let schema = serde_json::to_value(schemars::schema_for!(ModelSpec)).unwrap();
        assert_eq!(schema["required"], json!(["id", "provider", "model"]));
        let schema = serde_json::to_value(schemars::schema_for!(ProviderSpec)).unwrap();
        assert_eq!(schema["required"], json!(["id", "adapter"]));
    }
}
