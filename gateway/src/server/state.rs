//! `AppState`: what every route handler shares.

use std::sync::Arc;

use awaken_cluster::RunControl;
use tokio::sync::watch;

use super::config::ServerConfig;
use super::metrics::Metrics;

/// The node the routes serve from and the server's settings.
#[derive(Clone)]
pub struct AppState {
    /// Runs, threads and decisions, on a single node or a cluster member.
    pub control: Arc<dyn RunControl>,
    /// The server's settings.
    pub config: Arc<ServerConfig>,
    /// The server's Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Turns true when the server starts shutting down: open streams end then.
    stopping: Arc<watch::Sender<bool>>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// State for routes over `control`.
    pub fn new(control: Arc<dyn RunControl>, config: ServerConfig) -> Self {
        Self {
            control,
            config: Arc::new(config),
            metrics: Arc::new(Metrics::new()),
            stopping: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Watches for the server's shutdown.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Ends every open event stream (their clients reconnect, on a cluster to
    /// another node, with `Last-Event-ID`).
    pub fn stop_streams(&self) {
        self.stopping.send_replace(true);
    }
}
