//! MCP tool sources: the servers of the `mcp-servers` namespace (and
//! `awaken.toml`'s `[mcp_servers.<id>]`), which each node connects to over stdio
//! or streamable HTTP, their tools registered as `mcp__{server}__{tool}` like any
//! other tool. See `docs/mcp.md`.

mod hub;
mod session;
mod spec;
mod tool;

pub use hub::McpHub;
pub use session::{IDEMPOTENCY_META_KEY, McpError};
pub use spec::{DEFAULT_MCP_TIMEOUT, McpServerSpec, McpTransport};
pub use tool::{MCP_TOOL_CATEGORY, MCP_TOOL_PREFIX, McpTool, tool_id};
