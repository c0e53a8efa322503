//! `AgentTools`: the MCP server handler that offers each local agent as a tool.
//! A call runs the agent on a thread and answers with the run's outcome; a run
//! that waits for approval answers with what it waits for, and a second call with
//! the thread and `decisions` resumes it.

use std::sync::Arc;

use awaken_actors::contract::{AgentEvent, Message, TerminationReason, TraceContext};
use awaken_actors::telemetry::{Shown, Span, SpanKind};
use awaken_actors::{AgentId, JsonValue, RunId, ThreadId};
use awaken_cluster::decisions::DecisionPayload;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool as McpToolInfo,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Deserialize;
use serde_json::json;

use crate::runs::{RunEvents, RunService};
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::trace;

/// The arguments of an agent tool.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentCall {
    /// The user message of a new run.
    #[serde(default)]
    message: Option<String>,
    /// The thread to run on (created when new); a new thread when absent.
    #[serde(default)]
    thread_id: Option<String>,
    /// Answers for the calls the thread's waiting run asked about (one at least
    /// when given).
    #[serde(default)]
    decisions: Option<Vec<DecisionPayload>>,
}

/// The MCP handler; it finds the run service and the caller in the HTTP request
/// the MCP message came in.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AgentTools;

impl ServerHandler for AgentTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("awaken", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool runs one agent: pass `message` (and `thread_id` to go on with a \
                 conversation). A run that waits for approval answers with `pending` calls; \
                 call the same tool with `thread_id` and `decisions` to answer them.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let (runs, _) = request_scope(&context)?;
        let registries = runs.registries();
        let tools = registries
            .agents
            .iter()
            .filter(|(_, spec)| spec.endpoint.is_none())
            .map(|(id, _)| agent_tool(id))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (runs, caller) = request_scope(&context)?;
        let http = request_trace(&context);
        // The conventions parent the server span on the context the call
        // carries in `_meta` (SEP-414), linking the HTTP request's; without
        // one, the HTTP request's is the parent.
        let carried = request
            .meta
            .as_ref()
            .and_then(|meta| meta.get_traceparent())
            .or_else(|| context.meta.get_traceparent())
            .and_then(|value| TraceContext::parse(value).ok());
        let span = server_span(&request.name, &context, carried.or(http));
        if carried.is_some()
            && let Some(http) = http
        {
            span.link(&http);
        }
        let parent = span.context().or(carried).or(http);
        let answering = trace::within(parent, self.answer(runs, caller, request));
        let answer = span.traced(answering).await;
        if let Ok(CallToolResponse::Complete(result)) = &answer
            && result.is_error == Some(true)
        {
            span.failed("tool_error");
        }
        answer
    }
}

impl AgentTools {
    /// Runs the agent the call names; what `tools/call` answers.
    async fn answer(
        &self,
        runs: RunService,
        caller: Caller,
        request: CallToolRequestParams,
    ) -> Result<CallToolResponse, ErrorData> {
        let agent = AgentId::new(request.name.as_ref())
            .ok()
            .filter(|id| {
                runs.registries()
                    .agents
                    .get(id.as_str())
                    .is_some_and(|spec| spec.endpoint.is_none())
            })
            .ok_or_else(|| {
                ErrorData::invalid_params(format!("unknown tool `{}`", request.name), None)
            })?;
        let arguments = JsonValue::Object(request.arguments.unwrap_or_default());
        // Bad arguments are a tool error, not a protocol one: the model that made
        // the call reads it and can correct itself.
        let call: AgentCall = match serde_json::from_value(arguments) {
            Ok(call) => call,
            Err(error) => return Ok(failed(format!("invalid arguments: {error}")).into()),
        };
        Ok(match run_agent(&runs, &caller, agent, call).await {
            Ok(result) => result,
            Err(error) => failed(error.to_string()),
        }
        .into())
    }
}

/// The HTTP request's trace context, put in its extensions by the edge.
fn request_trace(context: &RequestContext<RoleServer>) -> Option<TraceContext> {
    context
        .extensions
        .get::<axum::http::request::Parts>()?
        .extensions
        .get::<trace::RequestTrace>()?
        .0
}

/// The MCP server span of a `tools/call` (the MCP conventions: `{method}
/// {tool}`, kind server), a child of `parent`; disabled when not exported.
fn server_span(
    tool: &str,
    context: &RequestContext<RoleServer>,
    parent: Option<TraceContext>,
) -> Span {
    Span::start(
        &["tools/call ", tool],
        SpanKind::Server,
        parent.as_ref().into(),
        |attributes| {
            attributes
                .set("mcp.method.name", "tools/call")
                .set("gen_ai.operation.name", "execute_tool")
                .set("gen_ai.tool.name", tool)
                .set("jsonrpc.request.id", Shown(&context.id))
                .set("network.transport", "tcp");
        },
    )
}

/// The run service and the caller, put in the HTTP request by the route and by
/// the API-key check.
fn request_scope(context: &RequestContext<RoleServer>) -> Result<(RunService, Caller), ErrorData> {
    let parts = context
        .extensions
        .get::<axum::http::request::Parts>()
        .ok_or_else(|| ErrorData::internal_error("no HTTP request in scope", None))?;
    let runs = parts
        .extensions
        .get::<RunService>()
        .cloned()
        .ok_or_else(|| ErrorData::internal_error("no run service in scope", None))?;
    let caller = parts
        .extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(Caller::anonymous);
    Ok((runs, caller))
}

fn agent_tool(id: &str) -> McpToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "message": {"type": "string", "description": "The user message of a new run."},
            "thread_id": {
                "type": "string",
                "description": "The thread to run on (created when new); a new thread when absent."
            },
            "decisions": {
                "type": "array",
                "minItems": 1,
                "description": "Answers for a waiting run of `thread_id`: one per pending call.",
                "items": {
                    "type": "object",
                    "properties": {
                        "call_id": {"type": "string"},
                        "decision_id": {"type": "string"},
                        "action": {"type": "string", "enum": ["resume", "cancel"]},
                        "result": {},
                        "reason": {"type": "string"}
                    },
                    "required": ["call_id", "decision_id", "action"]
                }
            }
        },
        "additionalProperties": false
    });
    let schema: JsonObject = match schema {
        JsonValue::Object(object) => object,
        _ => JsonObject::new(),
    };
    McpToolInfo::new(
        id.to_owned(),
        format!("Runs the agent `{id}` and answers with its reply."),
        Arc::new(schema),
    )
}

/// Starts a run of `agent` (or resumes the thread's waiting run with the call's
/// decisions) and waits for its outcome.
async fn run_agent(
    runs: &RunService,
    caller: &Caller,
    agent: AgentId,
    call: AgentCall,
) -> Result<CallToolResult, ApiError> {
    let thread_id = call
        .thread_id
        .map(|id| ThreadId::new(id).map_err(|e| ApiError::BadRequest(format!("thread_id: {e}"))))
        .transpose()?;
    let events = if let Some(decisions) = call.decisions {
        if call.message.is_some() {
            return Err(ApiError::BadRequest(
                "give `message` or `decisions`, not both".into(),
            ));
        }
        if decisions.is_empty() {
            return Err(ApiError::BadRequest(
                "`decisions` is empty: give one per call the run waits on".into(),
            ));
        }
        let thread_id = thread_id
            .ok_or_else(|| ApiError::BadRequest("`decisions` need the `thread_id`".into()))?;
        let run = runs.waiting_run(caller, &thread_id).await?;
        runs.resume_followed(&run, decisions).await?
    } else {
        let message = call
            .message
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| {
                ApiError::BadRequest("`message` is required unless `decisions` are given".into())
            })?;
        let thread_id = runs.open_thread(caller, thread_id, Some(&agent)).await?;
        let run_id = RunId::generate();
        runs.start_followed(thread_id, Some(agent), vec![Message::user(message)], run_id)
            .await?
    };
    outcome(events).await
}

/// Reads the run's events to its `RunFinish` and turns them into the tool's result.
async fn outcome(mut events: RunEvents) -> Result<CallToolResult, ApiError> {
    let mut pending = Vec::new();
    while let Some(event) = events.next().await {
        match Arc::unwrap_or_clone(event).event {
            AgentEvent::ToolCallDone { id, result, .. } => {
                if let Some(ticket) = result.suspension {
                    pending.push(json!({
                        "call_id": id,
                        "tool": result.tool_name,
                        "message": ticket.suspension.message,
                        "arguments": ticket.suspension.parameters,
                    }));
                }
            }
            AgentEvent::RunFinish {
                thread_id,
                run_id,
                result,
                termination,
            } => {
                let response = AgentEvent::extract_response(&result);
                let mut structured = json!({
                    "thread_id": thread_id,
                    "run_id": run_id,
                    "termination": termination.code(),
                    "response": response,
                });
                let (text, is_error) = match &termination {
                    TerminationReason::Suspended => {
                        let questions: Vec<String> = pending
                            .iter()
                            .map(|call| {
                                let text = |key: &str| call[key].as_str().unwrap_or_default();
                                format!("- `{}`: {}", text("call_id"), text("message"))
                            })
                            .collect();
                        structured["pending"] = JsonValue::Array(std::mem::take(&mut pending));
                        (
                            format!(
                                "{response}\nThe run waits for decisions on thread `{thread_id}`:\n\
                                 {}\nCall again with `thread_id` and `decisions`.",
                                questions.join("\n")
                            ),
                            false,
                        )
                    }
                    TerminationReason::Error(message) | TerminationReason::Blocked(message) => {
                        (message.clone(), true)
                    }
                    TerminationReason::Cancelled => ("The run was cancelled.".to_owned(), true),
                    _ => (response, false),
                };
                let content = vec![ContentBlock::text(text.trim().to_owned())];
                let mut answer = if is_error {
                    CallToolResult::error(content)
                } else {
                    CallToolResult::success(content)
                };
                answer.structured_content = Some(structured);
                return Ok(answer);
            }
            _ => {}
        }
    }
    Err(ApiError::Internal(
        "the run's event stream ended before the run finished".into(),
    ))
}

fn failed(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}
