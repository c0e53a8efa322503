//! `AppState`: what every route handler shares.

use std::sync::Arc;

use awaken_cluster::RunControl;

use super::config::ServerConfig;

/// The node the routes serve from and the server's settings.
#[derive(Clone)]
pub struct AppState {
    /// Runs, threads and decisions, on a single node or a cluster member.
    pub control: Arc<dyn RunControl>,
    /// The server's settings.
    pub config: Arc<ServerConfig>,
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
        }
    }
}
