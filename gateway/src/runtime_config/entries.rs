//! The entry types of the `providers` and `mcp-servers` namespaces (agents and
//! models are the engine's own `AgentSpec` and `ModelSpec`; MCP servers are
//! [`crate::protocols::mcp::McpServerSpec`]).

use std::sync::Arc;

use awaken_actors::contract::ProviderSpec;
use awaken_actors::llm::{GenaiExecutor, LlmExecutor, ScriptSpec, ScriptedExecutor};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The adapter answered by [`ScriptedExecutor`] instead of a remote model.
pub const SCRIPTED_ADAPTER: &str = "scripted";

/// How to reach one model provider: a genai adapter, or a script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The provider id models refer to.
    pub id: String,
    /// `scripted`, or a genai adapter: `openai`, `anthropic`, `ollama`, `gemini`, ...
    pub adapter: String,
    /// Endpoint override (OpenAI-compatible servers, proxies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Name of the environment variable holding the API key (read by each node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// File holding the API key (a mounted Secret; read by each node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_file: Option<std::path::PathBuf>,
    /// Request timeout, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The answers of a `scripted` provider: `{"steps": [{"text": ...} | {"tool_calls":
    /// [{"name": ..., "arguments": {...}}]}], "after_last": "repeat_last"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub script: Option<ScriptSpec>,
}

/// Why a provider entry cannot serve inference on this node.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProviderError(String);

impl ProviderConfig {
    /// The executor this entry describes; environment variables are read now.
    pub fn executor(&self) -> Result<Arc<dyn LlmExecutor>, ProviderError> {
        if self.adapter == SCRIPTED_ADAPTER {
            let script = self.script.clone().ok_or_else(|| {
                ProviderError(format!(
                    "provider `{}`: a `scripted` provider needs a `script`",
                    self.id
                ))
            })?;
            let executor = ScriptedExecutor::new(script)
                .map_err(|e| ProviderError(format!("provider `{}`: {e}", self.id)))?;
            return Ok(Arc::new(executor));
        }
        if self.script.is_some() {
            return Err(ProviderError(format!(
                "provider `{}`: `script` is only for the `scripted` adapter",
                self.id
            )));
        }
        let spec = ProviderSpec {
            id: self.id.clone(),
            adapter: self.adapter.clone(),
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
            api_key_file: self.api_key_file.clone(),
            timeout_ms: self.timeout_ms,
        };
        let executor = GenaiExecutor::from_spec(&spec).map_err(|e| ProviderError(e.to_string()))?;
        Ok(Arc::new(executor))
    }
}

pub use crate::protocols::mcp::{McpServerSpec, McpTransport};
