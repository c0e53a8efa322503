//! `POST /v1/mcp`: the node's agents as MCP tools over streamable HTTP, served by
//! rmcp's server without sessions and with JSON answers. `GET` is not served (405),
//! as the book says. See `docs/mcp.md` ("The MCP server").

pub(crate) mod agents;
mod envelope;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRef, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value as JsonValue;
use tower::ServiceExt;

use self::agents::AgentTools;
use crate::runs::RunService;
use crate::server::config::ServerConfig;
use crate::server::table::Routes;

/// The MCP endpoint's path.
pub(crate) const MCP_PATH: &str = "/v1/mcp";

/// The rmcp service behind the route, configured from the server's settings.
type McpService = StreamableHttpService<AgentTools, LocalSessionManager>;

/// What the MCP route serves with besides the run service: rmcp's service and
/// the body limit it reads requests under.
#[derive(Clone)]
pub(crate) struct McpEndpoint {
    service: McpService,
    max_body_bytes: usize,
}

impl McpEndpoint {
    /// The endpoint for `config`: `Host` and `Origin` checked as `server.mcp`
    /// says, bodies bounded by `max_body_bytes`.
    pub(crate) fn new(config: &ServerConfig) -> Self {
        Self {
            service: service(config),
            max_body_bytes: config.max_body_bytes,
        }
    }
}

fn service(config: &ServerConfig) -> McpService {
    let mut settings = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(config.max_body_bytes);
    settings = match &config.mcp.allowed_hosts {
        Some(hosts) if hosts.is_empty() => settings.disable_allowed_hosts(),
        Some(hosts) => settings.with_allowed_hosts(hosts.clone()),
        None => settings,
    };
    if !config.mcp.allowed_origins.is_empty() {
        settings = settings.with_allowed_origins(config.mcp.allowed_origins.clone());
    }
    StreamableHttpService::new(
        || Ok(AgentTools),
        Arc::new(LocalSessionManager::default()),
        settings,
    )
}

pub(crate) fn routes<S>() -> Routes<S>
where
    S: Clone + Send + Sync + 'static,
    RunService: FromRef<S>,
    McpEndpoint: FromRef<S>,
{
    Routes::new().post(MCP_PATH, serve)
}

/// Hands the request to the MCP service, with the run service in its extensions
/// (the caller is there already, from the API-key check). The body is read and
/// checked here first, so an oversized one is a 413, one that is not JSON a
/// JSON-RPC parse error and one that is no JSON-RPC message an invalid request,
/// as the spec has it; rmcp's own refusals are worded as JSON-RPC errors too.
async fn serve(
    State(runs): State<RunService>,
    State(endpoint): State<McpEndpoint>,
    request: Request,
) -> Response {
    let limit = endpoint.max_body_bytes;
    let (mut parts, body) = request.into_parts();
    if !envelope::is_json(&parts.headers) {
        return envelope::rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            envelope::INVALID_REQUEST,
            "expected content-type application/json",
        );
    }
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return envelope::rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            envelope::INVALID_REQUEST,
            &format!("the request body is larger than {limit} bytes"),
        );
    };
    match serde_json::from_slice::<JsonValue>(&bytes) {
        Err(error) => {
            return envelope::rpc_error(
                StatusCode::BAD_REQUEST,
                envelope::PARSE_ERROR,
                &format!("the body is not JSON: {error}"),
            );
        }
        Ok(value) if !envelope::is_message(&value) => {
            return envelope::rpc_error(
                StatusCode::BAD_REQUEST,
                envelope::INVALID_REQUEST,
                "the body is not a JSON-RPC 2.0 request, notification or response",
            );
        }
        Ok(_) => {}
    }
    parts.extensions.insert(runs);
    let request = Request::from_parts(parts, Body::from(bytes));
    match endpoint.service.oneshot(request).await {
        Ok(response) => envelope::worded(response.map(Body::new)).await,
        Err(never) => match never {},
    }
}
