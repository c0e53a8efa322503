//! `ServerConfig`: the HTTP server's settings (the book's `ServerConfig`, plus the
//! body limit and API keys).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::secret::{Secret, SecretError, resolve};

use crate::runtime_config::EntryPolicy;

/// How the HTTP server listens and what it allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Socket address to bind.
    pub address: String,
    /// Events a slow SSE client of a single node may fall behind by before its
    /// stream refills from the run's replay buffer.
    pub sse_buffer_size: usize,
    /// Events kept per run for reconnects (`Last-Event-ID`).
    pub replay_buffer_capacity: usize,
    /// Requests being worked on at once (their body arrived, or they have
    /// none); more get 503. A request whose body is still arriving holds no place.
    pub max_concurrent_requests: usize,
    /// Largest request body, in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    /// Bytes of request bodies received while they are still arriving, summed
    /// over the whole server; a body that would pass it gets 503. At least
    /// `max_body_bytes`.
    pub max_arriving_body_bytes: usize,
    /// Seconds a client may take to send a request head, or stay silent between
    /// requests on a kept-alive connection; then the connection is closed.
    pub header_read_timeout_secs: u64,
    /// Seconds a client may take to send a request body; then 408.
    pub body_read_timeout_secs: u64,
    /// Seconds a connection may carry no byte either way before it is closed
    /// (above the 15 s keep-alive of event streams).
    pub idle_timeout_secs: u64,
    /// Connections one client address may hold at once; more are closed at once.
    pub max_connections_per_address: usize,
    /// Connections the server holds at once, from every address; more are closed
    /// at once.
    pub max_connections: usize,
    /// Graceful shutdown.
    pub shutdown: ShutdownConfig,
    /// API keys: key → tenant. Empty means no authentication (a warning is logged
    /// when the server binds to a non-loopback address).
    pub api_keys: ApiKeys,
    /// A TOML file of more `"<key>" = "<tenant>"` lines (a mounted Secret),
    /// added to `api_keys`.
    pub api_keys_file: Option<PathBuf>,
    /// Tenants whose keys may change the configuration through the config API.
    pub admin_tenants: Vec<String>,
    /// Who may write through the config API without keys, and what its entries
    /// may make a node start or read.
    pub config_api: ConfigApiConfig,
    /// Enables the A2A extended agent card (`GET /v1/a2a/extendedAgentCard`) for
    /// requests bearing this token; unset, the card is not configured.
    pub a2a_extended_card_bearer_token: Option<Secret>,
    /// File holding `a2a_extended_card_bearer_token`.
    pub a2a_extended_card_bearer_token_file: Option<PathBuf>,
    /// The MCP endpoint's DNS-rebinding checks.
    pub mcp: McpEndpointConfig,
    /// Hosts (names or literal addresses) A2A push notifications may go to even
    /// though they are loopback, private or link-local; others must be public.
    pub a2a_push_allowed_hosts: Vec<String>,
    /// How A2A push notifications are retried and handed between nodes.
    pub a2a_push: A2aPushConfig,
    /// Agents served over A2A to the listed tenants only (agent id → tenants of
    /// `api_keys`); an agent not listed is served to every tenant.
    pub a2a_tenants: BTreeMap<String, Vec<String>>,
    /// Seconds a request waits for the mailbox or the store while they are
    /// away (a NATS reconnect, a database failover) before it gets 503 with
    /// `Retry-After`.
    pub backend_wait_secs: u64,
    /// Milliseconds an approval stream (`GET /v1/approvals/stream`) stays open
    /// before the server ends it; the client resumes with `Last-Event-ID`, on
    /// whichever node its balancer picks (at least 1).
    pub approval_stream_max_ms: u64,
}

/// The longest `server.backend_wait_secs`: past five minutes a client is
/// better told to come back.
pub const MAX_BACKEND_WAIT_SECS: u64 = 300;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:3000".into(),
            sse_buffer_size: 64,
            replay_buffer_capacity: 1024,
            max_concurrent_requests: 100,
            max_body_bytes: 1024 * 1024,
            max_arriving_body_bytes: 64 * 1024 * 1024,
            header_read_timeout_secs: 10,
            body_read_timeout_secs: 30,
            idle_timeout_secs: 60,
            max_connections_per_address: 256,
            max_connections: 10_000,
            shutdown: ShutdownConfig::default(),
            api_keys: ApiKeys::default(),
            api_keys_file: None,
            admin_tenants: Vec::new(),
            config_api: ConfigApiConfig::default(),
            a2a_extended_card_bearer_token: None,
            a2a_extended_card_bearer_token_file: None,
            mcp: McpEndpointConfig::default(),
            a2a_push_allowed_hosts: Vec::new(),
            a2a_push: A2aPushConfig::default(),
            a2a_tenants: BTreeMap::new(),
            backend_wait_secs: 10,
            approval_stream_max_ms: 15 * 60 * 1000,
        }
    }
}

impl ServerConfig {
    /// How long a request waits for a backend that is away.
    pub fn backend_wait(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.backend_wait_secs)
    }

    /// How long an approval stream stays open.
    pub fn approval_stream_max(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.approval_stream_max_ms.max(1))
    }

    /// Reads `api_keys_file` into `api_keys` and the card token's file.
    pub(crate) fn resolve_secrets(&mut self) -> Result<(), SecretError> {
        self.a2a_extended_card_bearer_token = resolve(
            "server.a2a_extended_card_bearer_token",
            self.a2a_extended_card_bearer_token.take(),
            self.a2a_extended_card_bearer_token_file.take().as_deref(),
        )?;
        if let Some(path) = self.api_keys_file.take() {
            let text = crate::secret::read_secret_file("server.api_keys", &path)?;
            let keys: BTreeMap<String, String> =
                toml::from_str(text.expose()).map_err(|e| SecretError::Malformed {
                    key: "server.api_keys".to_owned(),
                    path: path.display().to_string(),
                    // TOML's message quotes the offending line: keep only where.
                    what: e
                        .span()
                        .map_or_else(String::new, |span| format!(" (at byte {})", span.start)),
                })?;
            self.api_keys.0.extend(keys);
        }
        Ok(())
    }
}

/// Retries and leases of A2A push notification delivery (`[server.a2a_push]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct A2aPushConfig {
    /// Tries per notification before it is recorded as a dead letter.
    pub attempts: u32,
    /// The wait before the first retry; each next one doubles, up to `max_backoff_ms`.
    pub first_backoff_ms: u64,
    /// The longest wait between two tries.
    pub max_backoff_ms: u64,
    /// How long one try may take.
    pub attempt_timeout_ms: u64,
    /// How long a node holds a webhook's delivery between renewals: when the node
    /// dies, another takes delivery over this long after its last renewal.
    pub lease_ms: u64,
    /// How often a node looks for webhooks that nobody delivers.
    pub sweep_interval_ms: u64,
}

impl Default for A2aPushConfig {
    fn default() -> Self {
        Self {
            attempts: 10,
            first_backoff_ms: 500,
            max_backoff_ms: 60_000,
            attempt_timeout_ms: 10_000,
            lease_ms: 30_000,
            sweep_interval_ms: 5_000,
        }
    }
}

impl A2aPushConfig {
    /// What is wrong with these settings, if anything.
    pub(crate) fn check(&self) -> Result<(), String> {
        let key = |name: &str| format!("server.a2a_push.{name}");
        if self.attempts == 0 {
            return Err(format!("{} must be at least 1", key("attempts")));
        }
        if self.first_backoff_ms == 0 || self.max_backoff_ms < self.first_backoff_ms {
            return Err(format!(
                "{} must be at least 1 and at most {}",
                key("first_backoff_ms"),
                key("max_backoff_ms")
            ));
        }
        if self.attempt_timeout_ms == 0 {
            return Err(format!("{} must be at least 1", key("attempt_timeout_ms")));
        }
        // A lease renewed every third of its length survives one slow renewal.
        if self.lease_ms < 300 {
            return Err(format!("{} must be at least 300", key("lease_ms")));
        }
        if self.sweep_interval_ms == 0 {
            return Err(format!("{} must be at least 1", key("sweep_interval_ms")));
        }
        Ok(())
    }
}

/// API keys: key → tenant. Its `Debug` and `Serialize` show the tenants only.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct ApiKeys(BTreeMap<String, String>);

impl ApiKeys {
    /// The tenant `key` belongs to.
    pub fn tenant(&self, key: &str) -> Option<&String> {
        self.0.get(key)
    }

    /// No key: the server does not authenticate.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    fn tenants(&self) -> Vec<&String> {
        self.0.values().collect()
    }
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("tenants", &self.tenants())
            .finish()
    }
}

impl Serialize for ApiKeys {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.tenants().serialize(serializer)
    }
}

impl From<BTreeMap<String, String>> for ApiKeys {
    fn from(keys: BTreeMap<String, String>) -> Self {
        Self(keys)
    }
}

impl<const N: usize> From<[(String, String); N]> for ApiKeys {
    fn from(keys: [(String, String); N]) -> Self {
        Self(keys.into())
    }
}

/// The config API's write access and entry allow-lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigApiConfig {
    /// Lets any caller change the configuration when the server has no API keys.
    /// Off (the default), a server without keys serves the config API read-only;
    /// with keys, only `admin_tenants` write.
    pub writes_without_keys: bool,
    /// Programs a stdio MCP server written through the API may run (exact
    /// `transport.command`); none by default.
    pub mcp_stdio_commands: Vec<String>,
    /// Environment variables an API-written MCP server or remote agent may name as
    /// `token_env`, or a provider as `api_key_env`; none by default.
    pub token_envs: Vec<String>,
    /// Files an API-written provider may name as `api_key_file`; none by default.
    pub token_files: Vec<PathBuf>,
}

impl ConfigApiConfig {
    /// The allow-lists as the config manager applies them.
    pub fn entry_policy(&self) -> EntryPolicy {
        EntryPolicy {
            mcp_stdio_commands: self.mcp_stdio_commands.clone(),
            token_envs: self.token_envs.clone(),
            token_files: self.token_files.clone(),
        }
    }
}

/// How long a graceful shutdown may take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownConfig {
    /// Seconds in-flight requests get to finish before the server stops anyway.
    pub timeout_secs: u64,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self { timeout_secs: 30 }
    }
}

/// Which `Host` and `Origin` headers `/v1/mcp` accepts (the MCP spec asks servers
/// to refuse others, against DNS rebinding).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpEndpointConfig {
    /// Accepted `Host` names or `host:port` authorities. Unset: loopback names
    /// only (`localhost`, `127.0.0.1`, `::1`); empty: any host.
    pub allowed_hosts: Option<Vec<String>>,
    /// Accepted browser origins (`scheme://host:port`, `:*` for any port); empty:
    /// a request's `Origin` is not checked.
    pub allowed_origins: Vec<String>,
}
