//! The run service: what every protocol and the native Run API do with runs,
//! on a [`RunControl`] node — check what a request names, open threads, start
//! runs (in the background or followed), send decisions and cancellations to a
//! thread's owner, and stream a run's events through a protocol's encoder.
//!
//! Handlers take it as `State<RunService>` (see [`axum::extract::FromRef`]), so
//! a protocol needs nothing else of the server's state to serve runs.

mod checks;
mod decide;
pub(crate) mod handlers;
pub(crate) mod input;
mod stream;
mod submit;

use std::sync::Arc;

use awaken_cluster::RunControl;
use tokio::sync::watch;

pub(crate) use decide::unexpected;
pub(crate) use stream::{Encoder, RunEvents, visible_state};

/// Runs, threads and decisions on this node, for request handlers.
#[derive(Clone)]
pub struct RunService {
    /// The node: a single one or a cluster member.
    pub(crate) control: Arc<dyn RunControl>,
    /// Turns true when the server starts shutting down: open streams end then.
    stopping: watch::Receiver<bool>,
}

impl std::fmt::Debug for RunService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunService").finish_non_exhaustive()
    }
}

impl RunService {
    /// A service over `control` whose streams end when `stopping` turns true.
    pub fn new(control: Arc<dyn RunControl>, stopping: watch::Receiver<bool>) -> Self {
        Self { control, stopping }
    }

    /// Watches for the server's shutdown.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.clone()
    }
}
