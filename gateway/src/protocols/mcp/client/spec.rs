//! `McpServerSpec`: an entry of the `mcp-servers` namespace, and how a node
//! reaches the server it names.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How long one MCP request may take when the entry does not say.
pub const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_secs(30);

/// An MCP server whose tools agents may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerSpec {
    /// The server's id.
    pub id: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Bound of one request (connecting, listing tools, one call), in milliseconds;
    /// 30,000 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The MCP transports: a child process on stdio, or streamable HTTP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum McpTransport {
    /// A command started by the node, speaking JSON-RPC on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
        /// Extra environment variables.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint URL (`http` or `https`).
        url: String,
        /// Name of the environment variable holding a bearer token for the server
        /// (read by each node when it connects).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_env: Option<String>,
    },
}

impl McpServerSpec {
    /// Checks what the schema cannot: a non-empty command, an http(s) URL.
    pub fn check(&self) -> Result<(), String> {
        match &self.transport {
            McpTransport::Stdio { command, .. } if command.trim().is_empty() => {
                Err("transport.command is empty".into())
            }
            McpTransport::Http { url, .. }
                if !(url.starts_with("http://") || url.starts_with("https://")) =>
            {
                Err(format!("transport.url `{url}` is not an http(s) URL"))
            }
            _ if self.timeout_ms == Some(0) => Err("timeout_ms must be at least 1".into()),
            _ => Ok(()),
        }
    }

    /// The bound of one request to the server (connecting, listing, one call).
    pub fn timeout(&self) -> Duration {
        self.timeout_ms
            .map_or(DEFAULT_MCP_TIMEOUT, Duration::from_millis)
    }
}
