//! `awaken serve`: the HTTP gateway until SIGTERM or Ctrl-C.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use awaken_cluster::RunControl;
use awaken_cluster::events::EventsConfig;
use awaken_cluster::local::{LocalNode, LocalNodeConfig};
use clap::Args;
use tokio::signal::unix::{SignalKind, signal};

use crate::compose::{self, Assembly};
use crate::config::{ServeConfig, StoreConfig};
use crate::demo::Journal;
use crate::error::{GatewayError, Result};
use crate::open_files;
use crate::protocols::mcp::McpHub;
use crate::runtime_config::ConfigDocument;
use crate::server::metrics::PushedMetrics;
use crate::server::{AppState, Server};
use crate::telemetry::{MetricPush, MetricsExportSettings};

/// The config API's document in a `file` store's directory.
const CONFIG_FILE_NAME: &str = "config.msgpack";

/// Flags of `awaken serve` (everything else is in the config file or environment).
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The config file; repeat it for more files, each overriding the ones
    /// before (`./awaken.toml` when it exists, if none is given).
    #[arg(long, value_name = "PATH")]
    pub config: Vec<PathBuf>,
    /// Overrides `server.address`.
    #[arg(long, value_name = "HOST:PORT")]
    pub address: Option<String>,
    /// Registers the embedded demo agents and tools (as `demo_agents = true`).
    #[arg(long)]
    pub demo: bool,
    /// Append one line per execution of the demo tools `echo` and `sleep` to this
    /// file (`<tool> <idempotency key>`): how tests count executions across nodes.
    #[arg(long, value_name = "PATH")]
    pub tool_journal: Option<PathBuf>,
}

/// Serves until a signal, then stops taking requests, lets in-flight ones finish,
/// and leaves (a cluster node drains its shards).
pub(super) async fn execute(
    args: ServeArgs,
    mut config: ServeConfig,
    push: Option<&MetricsExportSettings>,
) -> Result<u8> {
    if let Some(address) = args.address {
        config.server.address = address;
    }
    if args.demo {
        config.demo_agents = Some(true);
    }
    let events = EventsConfig {
        replay_capacity: config.server.replay_buffer_capacity,
        follower_batch: config.server.sse_buffer_size,
        ..EventsConfig::default()
    };
    let journal = args.tool_journal.map(Journal::at).unwrap_or_default();
    let Assembly {
        builder,
        file_entries,
        mcp,
    } = compose::assemble(&config, journal).await?;
    match &config.cluster {
        None => {
            let config_file = match &config.store {
                StoreConfig::File { path } => Some(path.join(CONFIG_FILE_NAME)),
                _ => None,
            };
            let local_config = LocalNodeConfig {
                events,
                config_file,
                ..LocalNodeConfig::default()
            };
            let node = LocalNode::start(builder, local_config)
                .await
                .map_err(|e| GatewayError::Cluster(e.to_string()))?;
            node.resume_unfinished()
                .await
                .map_err(|e| GatewayError::Cluster(e.to_string()))?;
            let drain = Duration::from_secs(config.server.shutdown.timeout_secs);
            let served = Served {
                file_entries,
                mcp,
                node_id: "local",
                push,
                drain,
            };
            let node = serve(Arc::new(node), config.server, served).await?;
            // Runs in flight finish before the process exits (a durable store
            // takes up what the deadline cuts off at the next start).
            if !node.drain(drain).await {
                eprintln!("drain deadline passed with runs still executing");
            }
        }
        Some(cluster) => {
            let drain = Duration::from_secs(cluster.drain_timeout_secs);
            let node =
                compose::join_cluster(cluster, events, config.server.backend_wait(), builder)
                    .await?;
            let node_id = node.node_id().to_string();
            let served = Served {
                file_entries,
                mcp,
                node_id: &node_id,
                push,
                drain,
            };
            serve(Arc::new(node), config.server, served)
                .await?
                .drain(drain)
                .await
                .map_err(|e| GatewayError::Cluster(e.to_string()))?;
        }
    }
    // Whoever read the start may be gone by now: a closed stdout is no failure.
    let _ = writeln!(
        std::io::stdout(),
        "{}",
        serde_json::json!({"event": "stopped"})
    );
    Ok(0)
}

/// What a served node comes with besides its server config.
struct Served<'a> {
    /// The config entries that came from `awaken.toml`.
    file_entries: ConfigDocument,
    /// The node's MCP connections.
    mcp: Arc<McpHub>,
    /// How the node is named in the `listening` line.
    node_id: &'a str,
    /// Where its metrics are pushed, if anywhere.
    push: Option<&'a MetricsExportSettings>,
    /// How long the last holders of the node may keep it once the server
    /// stopped (the node's drain deadline).
    drain: Duration,
}

/// Serves `node` until SIGTERM or Ctrl-C; gives the node back once nothing
/// else holds it, for its drain. A node something still holds past the drain
/// deadline cannot drain: that is an error, never a silent exit, since its runs
/// would be cut and run again elsewhere.
async fn serve<N: RunControl>(
    node: Arc<N>,
    config: crate::server::ServerConfig,
    served: Served<'_>,
) -> Result<N> {
    let Served {
        file_entries,
        mcp,
        node_id,
        push,
        drain,
    } = served;
    if config.api_keys.is_empty() && !is_loopback(&config.address) {
        tracing::warn!(address = %config.address, "serving without API keys on a non-loopback address");
    }
    let state = AppState::start(
        Arc::clone(&node) as Arc<dyn RunControl>,
        config,
        file_entries,
        mcp,
    )
    .await
    .map_err(|e| GatewayError::Config(e.to_string()))?;
    let push = push
        .map(|settings| {
            let source = PushedMetrics::new(
                Arc::clone(&state.metrics),
                Arc::clone(&node) as Arc<dyn RunControl>,
            );
            MetricPush::start(settings, source)
        })
        .transpose()
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    if let Some((limit, needed)) = open_files::shortfall(state.config.max_connections) {
        tracing::warn!(
            limit,
            needed,
            "the open-file limit cannot hold server.max_connections and the node's own files: \
             connections past it fail to be accepted"
        );
    }
    let stopped = state.clone();
    let server = Server::bind(state)
        .await
        .map_err(|e| compose::invalid("server.address", e))?;
    let address = server.local_addr()?;
    println!(
        "{}",
        serde_json::json!({"event": "listening", "address": address.to_string(), "node_id": node_id})
    );
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    };
    let finished = server.serve(shutdown).await?;
    if !finished {
        eprintln!("shutdown deadline passed with requests still in flight");
    }
    stopped
        .hand_back_push_deliveries(Duration::from_secs(5))
        .await;
    // The counts of the last requests reach the collector too; the push held
    // the node as well.
    if let Some(push) = push {
        push.finish().await;
    }
    // The deliveries held the node too: it is free once they ended.
    drop(stopped);
    sole_owner(node, drain).await.ok_or_else(|| {
        GatewayError::Cluster(
            "the node was still held when the drain deadline passed, so it left without \
             draining: its runs continue from their checkpoints on the next start or node"
                .to_owned(),
        )
    })
}

/// How often a stopping node looks whether its last holders let go.
const SOLE_OWNER_POLL: Duration = Duration::from_millis(5);

/// `node` itself once every other holder dropped it, within `within`: tasks a
/// request started (a push delivery, a follower) may end just after the server
/// stopped, and an `Arc` says nothing when its count drops, so this looks again.
async fn sole_owner<N>(mut node: Arc<N>, within: Duration) -> Option<N> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match Arc::try_unwrap(node) {
            Ok(node) => return Some(node),
            Err(shared) if tokio::time::Instant::now() < deadline => {
                node = shared;
                tokio::time::sleep(SOLE_OWNER_POLL).await;
            }
            Err(_) => return None,
        }
    }
}

fn is_loopback(address: &str) -> bool {
    address
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|socket| socket.ip().is_loopback())
        || address.starts_with("localhost:")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_node_comes_back_once_its_last_holder_lets_go() {
        let node = Arc::new("node");
        let holder = Arc::clone(&node);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = released.await;
            drop(holder);
        });
        let taken = tokio::spawn(sole_owner(node, Duration::from_secs(5)));
        release.send(()).unwrap();
        assert_eq!(taken.await.unwrap(), Some("node"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_held_past_the_deadline_is_not_given_back() {
        let node = Arc::new("node");
        let _holder = Arc::clone(&node);
        let started = tokio::time::Instant::now();
        assert_eq!(sole_owner(node, Duration::from_secs(5)).await, None);
        assert!(started.elapsed() >= Duration::from_secs(5));
    }
}
