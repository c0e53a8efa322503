//! `AppState`: what the server holds for its routes. The native API's handlers
//! extract it whole; the protocols take only their parts of it (the run service,
//! `A2aState`, `McpEndpoint`) through the `FromRef` implementations here.

use std::sync::Arc;

use awaken_cluster::RunControl;
use axum::extract::FromRef;
use tokio::sync::{Semaphore, watch};

use super::arriving::Arriving;
use super::config::ServerConfig;
use super::metrics::Metrics;
use crate::protocols::a2a::server::{A2aState, PushNotifications};
use crate::protocols::mcp::McpHub;
use crate::protocols::mcp::server::McpEndpoint;
use crate::runs::RunService;
use crate::runtime_config::{ConfigApiError, ConfigDocument, ConfigManager};

/// The node the routes serve from and the server's settings. axum clones it for
/// every extractor and middleware of every request, so it is one reference count.
#[derive(Clone)]
pub struct AppState(Arc<SharedState>);

/// What [`AppState`] shares: fields are read through it.
pub struct SharedState {
    /// Runs, threads and decisions, on a single node or a cluster member.
    pub control: Arc<dyn RunControl>,
    /// What the handlers do with runs, over `control`.
    pub runs: RunService,
    /// The server's settings.
    pub config: Arc<ServerConfig>,
    /// The config namespaces and this node's registries.
    pub runtime_config: Arc<ConfigManager>,
    /// The server's Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// The A2A routes' state: push notification configs and their deliveries.
    a2a: A2aState,
    /// The MCP endpoint (`/v1/mcp`).
    mcp: McpEndpoint,
    /// Turns true when the server starts shutting down: open streams end then.
    stopping: watch::Sender<bool>,
    /// Permits for requests in flight behind the limit (`max_concurrent_requests`):
    /// taken once a request's body has arrived.
    pub(crate) in_flight: Semaphore,
    /// The bytes of request bodies still arriving (`max_arriving_body_bytes`).
    pub(crate) arriving: Arriving,
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl FromRef<AppState> for RunService {
    fn from_ref(state: &AppState) -> Self {
        state.runs.clone()
    }
}

impl FromRef<AppState> for A2aState {
    fn from_ref(state: &AppState) -> Self {
        state.a2a.clone()
    }
}

impl FromRef<AppState> for McpEndpoint {
    fn from_ref(state: &AppState) -> Self {
        state.mcp.clone()
    }
}

impl AppState {
    /// State for routes over `control`, whose registries `runtime_config` manages.
    pub fn new(
        control: Arc<dyn RunControl>,
        config: ServerConfig,
        runtime_config: Arc<ConfigManager>,
    ) -> Self {
        let mcp = McpEndpoint::new(&config);
        let in_flight = Semaphore::new(config.max_concurrent_requests.max(1));
        let stopping = watch::Sender::new(false);
        let a2a_push = PushNotifications::new(
            Arc::clone(&control),
            &config.a2a_push_allowed_hosts,
            config.a2a_push.clone(),
            stopping.subscribe(),
        );
        let metrics = Arc::new(Metrics::new(control.as_ref()));
        let gauges = metrics.edge();
        let arriving = Arriving::new(
            config.max_arriving_body_bytes.max(1),
            gauges.bodies_arriving.clone(),
            gauges.body_bytes_arriving.clone(),
        );
        let runs = RunService::new(
            Arc::clone(&control),
            stopping.subscribe(),
            config.backend_wait(),
        );
        let config = Arc::new(config);
        let a2a = A2aState {
            runs: runs.clone(),
            push: a2a_push,
            config: Arc::clone(&config),
        };
        Self(Arc::new(SharedState {
            in_flight,
            arriving,
            runs,
            control,
            mcp,
            config,
            runtime_config,
            metrics,
            a2a,
            stopping,
        }))
    }

    /// State for routes over `control`, with a config manager over its runtime and
    /// config store (`file`: the entries that came from `awaken.toml`; `mcp`: the
    /// node's MCP connections, with the file's servers).
    pub async fn start(
        control: Arc<dyn RunControl>,
        config: ServerConfig,
        file: ConfigDocument,
        mcp: Arc<McpHub>,
    ) -> Result<Self, ConfigApiError> {
        let runtime_config = ConfigManager::start(
            control.runtime().clone(),
            control.config_store(),
            file,
            mcp,
            config.config_api.entry_policy(),
        )
        .await?;
        let state = Self::new(control, config, runtime_config);
        state.a2a.push.start_sweeping();
        Ok(state)
    }

    /// Watches for the server's shutdown.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Waits (up to `within`) until this node's push deliveries handed their
    /// leases back: what a stopping node does, after its server stopped and
    /// before it leaves (another node then takes them over at once).
    pub async fn hand_back_push_deliveries(&self, within: std::time::Duration) {
        self.a2a.push.handed_back(within).await;
    }

    /// Ends every open event stream (their clients reconnect, on a cluster to
    /// another node, with `Last-Event-ID`).
    pub fn stop_streams(&self) {
        self.stopping.send_replace(true);
    }
}
