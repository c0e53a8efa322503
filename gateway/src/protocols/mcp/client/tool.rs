//! `McpTool`: one tool of an MCP server as an engine `Tool`, registered as
//! `mcp__{server}__{tool}`.

use std::sync::Arc;

use async_trait::async_trait;
use awaken_actors::JsonValue;
use awaken_actors::contract::{ToolDescriptor, ToolResult};
use awaken_actors::error::ToolError;
use awaken_actors::telemetry::Span;
use awaken_actors::tool::{Tool, ToolCallContext, ToolOutput};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool as McpToolInfo};
use serde_json::json;

use super::session::{McpError, McpSession};

/// The prefix of every MCP tool id (permission rules match `mcp__*`).
pub const MCP_TOOL_PREFIX: &str = "mcp__";

/// The category of MCP tools' descriptors.
pub const MCP_TOOL_CATEGORY: &str = "mcp";

/// The registry id (and function name) of `tool` on `server`: characters model
/// APIs refuse in function names become `_`.
pub fn tool_id(server: &str, tool: &str) -> String {
    format!(
        "{MCP_TOOL_PREFIX}{}__{}",
        function_safe(server),
        function_safe(tool)
    )
}

fn function_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A tool of an MCP server; calls go to the server over this node's session.
#[derive(Debug)]
pub struct McpTool {
    tool: String,
    descriptor: ToolDescriptor,
    session: Arc<McpSession>,
}

impl McpTool {
    pub(crate) fn new(info: McpToolInfo, session: Arc<McpSession>) -> Self {
        let id = tool_id(session.server(), &info.name);
        let description = info
            .description
            .as_deref()
            .or(info.title.as_deref())
            .map_or_else(
                || format!("Tool `{}` of MCP server `{}`.", info.name, session.server()),
                str::to_owned,
            );
        let mut descriptor = ToolDescriptor::new(id.clone(), id, description);
        descriptor.parameters = JsonValue::Object(info.input_schema.as_ref().clone());
        descriptor.category = Some(MCP_TOOL_CATEGORY.to_owned());
        Self {
            tool: info.name.into_owned(),
            descriptor,
            session,
        }
    }

    /// The id of the server the tool belongs to.
    pub fn server(&self) -> &str {
        self.session.server()
    }

    /// The tool's name on its server.
    pub fn mcp_name(&self) -> &str {
        &self.tool
    }
}

#[async_trait]
impl Tool for McpTool {
    fn descriptor(&self) -> ToolDescriptor {
        self.descriptor.clone()
    }

    fn validate_args(&self, args: &JsonValue) -> Result<(), ToolError> {
        match args {
            JsonValue::Object(_) | JsonValue::Null => Ok(()),
            other => Err(ToolError::InvalidArguments(format!(
                "MCP tools take an object of arguments, not {other}"
            ))),
        }
    }

    async fn execute(
        &self,
        args: JsonValue,
        ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        let arguments = match args {
            JsonValue::Object(arguments) => arguments,
            JsonValue::Null => JsonObject::new(),
            other => {
                return Err(ToolError::InvalidArguments(format!(
                    "MCP tools take an object of arguments, not {other}"
                )));
            }
        };
        let id = &self.descriptor.id;
        let span = Span::current();
        call_began(&span, self.session.network_transport());
        let result = match self
            .session
            .call(
                &self.tool,
                arguments,
                ctx.idempotency_key(),
                ctx.trace.as_ref(),
            )
            .await
        {
            Ok(answer) => {
                if answer.is_error == Some(true) {
                    call_failed(&span, "tool_error");
                }
                tool_result(id, self.session.server(), &self.tool, answer)
            }
            Err(error) => {
                call_failed(&span, error_code(&error));
                ToolResult::error_with_code(id, error_code(&error), error.to_string())
            }
        };
        Ok(result.into())
    }
}

/// The MCP attributes of a call, on its `execute_tool` span: the conventions add
/// them to the GenAI tool span rather than open a second one.
fn call_began(span: &Span, transport: &'static str) {
    span.set("mcp.method.name", "tools/call");
    span.set("network.transport", transport);
}

/// Marks the `execute_tool` span of a call that failed as `error_type`.
fn call_failed(span: &Span, error_type: &'static str) {
    span.failed(error_type);
}

/// The error code of a call the server did not answer with a result.
fn error_code(error: &McpError) -> &'static str {
    match error {
        McpError::Timeout { .. } => "mcp_timeout",
        McpError::Failed { .. } => "mcp_error",
        McpError::Unreachable { .. } | McpError::NameClash { .. } => "mcp_unreachable",
    }
}

/// The engine's result of an answered call: the text blocks as the message; the
/// content blocks, structured content and `mcp.server`/`mcp.tool` as data. A
/// result the server flags `isError` is an error result for the model.
fn tool_result(id: &str, server: &str, tool: &str, answer: CallToolResult) -> ToolResult {
    let text = answer
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    if answer.is_error == Some(true) {
        let message = if text.is_empty() {
            format!("tool `{tool}` of MCP server `{server}` failed")
        } else {
            text
        };
        return ToolResult::error_with_code(id, "mcp_tool_error", message);
    }
    let mut data = json!({
        "mcp": {"server": server, "tool": tool},
        "content": serde_json::to_value(&answer.content).unwrap_or_default(),
    });
    if let Some(structured) = answer.structured_content {
        data["structuredContent"] = structured;
    }
    if text.is_empty() {
        ToolResult::success(id, data)
    } else {
        ToolResult::success_with_message(id, data, text)
    }
}

#[cfg(test)]
mod tests {
    use awaken_actors::contract::ToolStatus;
    use rmcp::model::ContentBlock as Content;

    use super::*;

    #[test]
    fn ids_are_prefixed_and_function_safe() {
        assert_eq!(
            tool_id("github", "create_issue"),
            "mcp__github__create_issue"
        );
        assert_eq!(
            tool_id("fs.local:1", "read/file v2"),
            "mcp__fs_local_1__read_file_v2"
        );
        assert_eq!(tool_id("a-b", "c-d"), "mcp__a-b__c-d");
    }

    #[test]
    fn an_answer_keeps_its_content_and_names_its_source() {
        let mut answer = CallToolResult::success(vec![Content::text("5")]);
        answer.structured_content = Some(json!({"result": 5}));
        let result = tool_result("mcp__calc__add", "calc", "add", answer);
        assert_eq!(result.status, ToolStatus::Success);
        assert_eq!(result.message.as_deref(), Some("5"));
        assert_eq!(result.data["mcp"], json!({"server": "calc", "tool": "add"}));
        assert_eq!(result.data["structuredContent"], json!({"result": 5}));
        assert_eq!(result.data["content"][0]["text"], json!("5"));
    }

    #[test]
    fn an_error_answer_is_an_error_result_with_the_servers_text() {
        let answer = CallToolResult::error(vec![Content::text("disk full")]);
        let result = tool_result("mcp__fs__write", "fs", "write", answer);
        assert_eq!(result.status, ToolStatus::Error);
        assert_eq!(result.error_code.as_deref(), Some("mcp_tool_error"));
        assert_eq!(result.message.as_deref(), Some("disk full"));

        let silent = tool_result(
            "mcp__fs__write",
            "fs",
            "write",
            CallToolResult::error(vec![]),
        );
        assert_eq!(
            silent.message.as_deref(),
            Some("tool `write` of MCP server `fs` failed")
        );
    }
}
