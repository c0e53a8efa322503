//! MCP on both sides: the node's agents served as MCP tools on `/v1/mcp`
//! (`server`), and the MCP servers whose tools the node's agents call
//! (`client`). See `docs/mcp.md`.

mod client;
pub(crate) mod server;

pub use client::{
    DEFAULT_MCP_TIMEOUT, IDEMPOTENCY_META_KEY, MCP_TOOL_CATEGORY, MCP_TOOL_PREFIX, McpError,
    McpHub, McpServerSpec, McpTool, McpTransport, tool_id,
};
