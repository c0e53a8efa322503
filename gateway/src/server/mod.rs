//! The HTTP server (`awaken serve`): the Run API over HTTP/SSE on a [`RunControl`]
//! node, single or clustered.
//!
//! [`RunControl`]: awaken_cluster::RunControl

mod arriving;
pub mod auth;
mod body;
pub mod config;
mod connections;
mod edge;
pub mod error;
pub(crate) mod extract;
mod memory_metrics;
pub mod metrics;
mod router;
pub(crate) mod sse;
pub(crate) mod sse_frames;
pub mod state;
pub(crate) mod table;
pub(crate) mod trace;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

pub use config::{A2aPushConfig, ApiKeys, MAX_BACKEND_WAIT_SECS, McpEndpointConfig, ServerConfig};
use connections::ConnectionLimits;
pub use error::ApiError;
pub use router::{router, served_routes};
pub use state::{AppState, SharedState};
use tokio::net::TcpListener;

/// A bound, not yet serving, HTTP server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    state: AppState,
}

impl Server {
    /// Binds `state.config.address`.
    pub async fn bind(state: AppState) -> std::io::Result<Self> {
        let listener = TcpListener::bind(&state.config.address).await?;
        Ok(Self { listener, state })
    }

    /// The address actually bound (port 0 picks a free one).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, then ends open event streams and lets
    /// other in-flight requests finish for at most `shutdown.timeout_secs`.
    /// `Ok(false)` when that deadline cut them off.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<bool> {
        let deadline = Duration::from_secs(self.state.config.shutdown.timeout_secs);
        let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = self.state.clone();
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_secs(self.state.config.header_read_timeout_secs),
            idle_timeout: Duration::from_secs(self.state.config.idle_timeout_secs),
            per_address: self.state.config.max_connections_per_address,
            total: self.state.config.max_connections,
        };
        let open = self.state.metrics.edge().connections.clone();
        let app = router(self.state);
        let server = connections::serve(self.listener, app, limits, open, async move {
            shutdown.await;
            state.stop_streams();
            let _ = stopping.send(());
        });
        let server = tokio::spawn(server);
        tokio::pin!(server);
        tokio::select! {
            finished = &mut server => return finished.map_err(std::io::Error::other).map(|()| true),
            _ = stopped => {}
        }
        match tokio::time::timeout(deadline, &mut server).await {
            Ok(finished) => finished.map_err(std::io::Error::other).map(|()| true),
            Err(_) => {
                server.abort();
                Ok(false)
            }
        }
    }
}
