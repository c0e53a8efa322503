//! `McpSession`: this node's connection to one MCP server. A server that went
//! away (a child process that exited, an HTTP session that ended) is connected
//! again by the next request.

use std::future::Future;
use std::process::Stdio;

use awaken_actors::contract::TraceContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, Implementation, JsonObject, MetaObject,
    RequestMetaObject, Tool as McpToolInfo,
};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value as JsonValue;

use super::spec::{McpServerSpec, McpTransport};

/// The `_meta` key under which a call carries its idempotency key (call id and
/// attempt), so a server can recognise a call the runtime re-runs.
pub const IDEMPOTENCY_META_KEY: &str = "io.awaken/idempotency-key";

/// Why an MCP server could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The server could not be started or connected to, or refused to initialize.
    #[error("mcp server `{server}` is unreachable: {message}")]
    Unreachable {
        /// The server's id.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// A request got no answer within the server's `timeout_ms`.
    #[error("mcp server `{server}` did not answer within {timeout_ms} ms")]
    Timeout {
        /// The server's id.
        server: String,
        /// The bound that passed.
        timeout_ms: u128,
    },
    /// The server answered a request with an error.
    #[error("mcp server `{server}`: {message}")]
    Failed {
        /// The server's id.
        server: String,
        /// The server's error.
        message: String,
    },
    /// Two of the server's tools map to the same tool id.
    #[error("mcp server `{server}`: tools `{first}` and `{second}` both become `{id}`")]
    NameClash {
        /// The server's id.
        server: String,
        /// The tool id both map to.
        id: String,
        /// One tool's MCP name.
        first: String,
        /// The other's.
        second: String,
    },
}

impl McpError {
    /// The id of the server the error is about.
    pub fn server(&self) -> &str {
        match self {
            Self::Unreachable { server, .. }
            | Self::Timeout { server, .. }
            | Self::Failed { server, .. }
            | Self::NameClash { server, .. } => server,
        }
    }
}

type Service = RunningService<RoleClient, ClientConfig>;

/// One server's connection; see the module docs.
pub(crate) struct McpSession {
    spec: McpServerSpec,
    connection: tokio::sync::Mutex<Connection>,
}

/// The current connection, numbered so a failed call drops only the connection
/// it used (not a newer one another call opened meanwhile).
struct Connection {
    generation: u64,
    /// `None` once a call found the connection broken.
    service: Option<Service>,
}

impl std::fmt::Debug for McpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSession")
            .field("server", &self.spec.id)
            .finish_non_exhaustive()
    }
}

impl McpSession {
    /// Connects to the server and lists its tools.
    pub(crate) async fn open(spec: McpServerSpec) -> Result<(Self, Vec<McpToolInfo>), McpError> {
        let service = connect(&spec).await?;
        let tools = bounded(&spec, service.peer().list_all_tools()).await?;
        let session = Self {
            spec,
            connection: tokio::sync::Mutex::new(Connection {
                generation: 0,
                service: Some(service),
            }),
        };
        Ok((session, tools))
    }

    /// The server's id.
    pub(crate) fn server(&self) -> &str {
        &self.spec.id
    }

    /// The transport under the session, as `network.transport` names it.
    pub(crate) fn network_transport(&self) -> &'static str {
        match self.spec.transport {
            McpTransport::Stdio { .. } => "pipe",
            McpTransport::Http { .. } => "tcp",
        }
    }

    /// Calls `tool`, connecting again first when the last connection has ended.
    /// A call that finds the connection broken fails, and the next one reconnects.
    /// The call's trace context goes along in `_meta` as `traceparent` (the
    /// unprefixed key MCP reserves for it, SEP-414), so the server's spans join
    /// the run's trace.
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: JsonObject,
        idempotency_key: String,
        trace: Option<&TraceContext>,
    ) -> Result<CallToolResult, McpError> {
        let (generation, peer) = self.peer().await?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        let mut meta = JsonObject::new();
        meta.insert(
            IDEMPOTENCY_META_KEY.to_owned(),
            JsonValue::String(idempotency_key),
        );
        let mut meta = MetaObject(meta);
        if let Some(trace) = trace {
            meta.set_traceparent(trace.to_string());
        }
        params.meta = Some(RequestMetaObject(meta));
        let answer = bounded(&self.spec, peer.call_tool(params)).await;
        if let Err(McpError::Unreachable { .. }) = &answer {
            let mut connection = self.connection.lock().await;
            if connection.generation == generation {
                connection.service = None;
            }
        }
        answer
    }

    /// The live connection's peer, with the connection's generation.
    async fn peer(&self) -> Result<(u64, Peer<RoleClient>), McpError> {
        // Held across a reconnection on purpose: concurrent calls wait for one
        // new connection instead of each starting their own.
        let mut connection = self.connection.lock().await;
        if let Some(service) = &connection.service
            && !service.is_closed()
        {
            return Ok((connection.generation, service.peer().clone()));
        }
        tracing::info!(server = %self.spec.id, "mcp server connection ended; connecting again");
        let service = connect(&self.spec).await?;
        let peer = service.peer().clone();
        connection.generation += 1;
        connection.service = Some(service);
        Ok((connection.generation, peer))
    }
}

/// Starts or reaches the server and runs the initialization handshake.
async fn connect(spec: &McpServerSpec) -> Result<Service, McpError> {
    let unreachable = |message: String| McpError::Unreachable {
        server: spec.id.clone(),
        message,
    };
    let client = ClientConfig::new(
        Default::default(),
        Implementation::new("awaken", env!("CARGO_PKG_VERSION")),
    );
    match &spec.transport {
        McpTransport::Stdio { command, args, env } => {
            let mut process = tokio::process::Command::new(command);
            // rmcp kills the child from a task it spawns when the session drops;
            // a runtime that is shutting down never runs it. Dropping that task
            // (or the child) then kills the server instead of leaving it behind.
            process.args(args).envs(env).kill_on_drop(true);
            let (transport, _) = TokioChildProcess::builder(process)
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| unreachable(format!("cannot start `{command}`: {e}")))?;
            handshake(spec, client, transport).await
        }
        McpTransport::Http { url, token_env } => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(name) = token_env {
                let token = std::env::var(name)
                    .map_err(|_| unreachable(format!("token_env `{name}` is not set")))?;
                config = config.auth_header(token);
            }
            let transport = StreamableHttpClientTransport::from_config(config);
            handshake(spec, client, transport).await
        }
    }
}

/// Runs the initialization handshake over `transport` within the server's timeout.
async fn handshake<T, E, A>(
    spec: &McpServerSpec,
    client: ClientConfig,
    transport: T,
) -> Result<Service, McpError>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(spec.timeout(), client.serve(transport)).await {
        Ok(Ok(service)) => Ok(service),
        Ok(Err(error)) => Err(McpError::Unreachable {
            server: spec.id.clone(),
            message: error.to_string(),
        }),
        Err(_) => Err(timeout(spec)),
    }
}

/// Awaits one request within the server's timeout.
async fn bounded<T>(
    spec: &McpServerSpec,
    request: impl Future<Output = Result<T, rmcp::ServiceError>>,
) -> Result<T, McpError> {
    match tokio::time::timeout(spec.timeout(), request).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(rmcp::ServiceError::McpError(error))) => Err(McpError::Failed {
            server: spec.id.clone(),
            message: error.message.into_owned(),
        }),
        Ok(Err(error)) => Err(McpError::Unreachable {
            server: spec.id.clone(),
            message: error.to_string(),
        }),
        Err(_) => Err(timeout(spec)),
    }
}

fn timeout(spec: &McpServerSpec) -> McpError {
    McpError::Timeout {
        server: spec.id.clone(),
        timeout_ms: spec.timeout().as_millis(),
    }
}
