//! `awaken serve`: the HTTP gateway until SIGTERM or Ctrl-C.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use awaken_actors::store::{FileStore, InMemoryStore, PostgresStore, ThreadRunStore};
use awaken_actors::thread::ThreadConfig;
use awaken_cluster::RunControl;
use awaken_cluster::events::EventsConfig;
use awaken_cluster::local::{LocalNode, LocalNodeConfig};
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use awaken_cluster::shards::ShardCount;
use clap::Args;
use tokio::signal::unix::{SignalKind, signal};

use awaken_actors::permission::{PermissionBehavior, PermissionRules};

use crate::demo::{self, FakeFiles, Journal};
use crate::error::{GatewayError, Result};
use crate::mcp::{McpHub, McpTool};
use crate::runtime_config::ConfigDocument;
use crate::serve::{ClusterConfig, ServeConfig, StoreConfig};
use crate::server::{AppState, Server};

/// The config API's document in a `file` store's directory.
const CONFIG_FILE_NAME: &str = "config.msgpack";

/// Flags of `awaken serve` (everything else is in the config file or environment).
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The config file; `./awaken.toml` when it exists otherwise.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Overrides `server.address`.
    #[arg(long, value_name = "HOST:PORT")]
    pub address: Option<String>,
    /// Append one line per execution of the demo tools `echo` and `sleep` to this
    /// file (`<tool> <idempotency key>`): how tests count executions across nodes.
    #[arg(long, value_name = "PATH")]
    pub tool_journal: Option<PathBuf>,
}

fn invalid(what: &str, error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Config(format!("{what}: {error}"))
}

/// Serves until a signal, then stops taking requests, lets in-flight ones finish,
/// and leaves (a cluster node drains its shards).
pub(super) async fn execute(args: ServeArgs) -> Result<u8> {
    let mut config = ServeConfig::load(args.config.as_deref(), std::env::vars())
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    if let Some(address) = args.address {
        config.server.address = address;
    }
    let lease_ttl = config
        .cluster
        .as_ref()
        .map(|cluster| Duration::from_secs(cluster.lease_ttl_secs));
    let store = open_store(&config.store, lease_ttl).await?;
    let events = EventsConfig {
        replay_capacity: config.server.replay_buffer_capacity,
        follower_batch: config.server.sse_buffer_size,
        ..EventsConfig::default()
    };
    let file_entries = config
        .entries()
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    let mcp = Arc::new(McpHub::new());
    let mcp_tools = file_entries
        .mcp_tools(&mcp)
        .await
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    let journal = args.tool_journal.map(Journal::at).unwrap_or_default();
    let builder = runtime_builder(&config, &file_entries, mcp_tools, journal)?
        .with_thread_run_store(store)
        .discover_remote_agents()
        .await
        .map_err(|e| GatewayError::Config(e.to_string()))?;
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
            let node = serve(Arc::new(node), config.server, file_entries, mcp, "local").await?;
            // Runs in flight finish before the process exits (a durable store
            // takes up what the deadline cuts off at the next start).
            if let Some(node) = node
                && !node.drain(drain).await
            {
                eprintln!("drain deadline passed with runs still executing");
            }
        }
        Some(cluster) => {
            let drain = Duration::from_secs(cluster.drain_timeout_secs);
            let node = join_cluster(cluster, events, builder).await?;
            let node_id = node.node_id().to_string();
            if let Some(node) =
                serve(Arc::new(node), config.server, file_entries, mcp, &node_id).await?
            {
                node.drain(drain)
                    .await
                    .map_err(|e| GatewayError::Cluster(e.to_string()))?;
            }
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

/// Serves `node` until SIGTERM or Ctrl-C; gives the node back once no request
/// holds it any more (`None` when one outlived the shutdown deadline).
async fn serve<N: RunControl>(
    node: Arc<N>,
    config: crate::server::ServerConfig,
    file_entries: ConfigDocument,
    mcp: Arc<McpHub>,
    node_id: &str,
) -> Result<Option<N>> {
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
    let server = Server::bind(state)
        .await
        .map_err(|e| invalid("server.address", e))?;
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
    Ok(Arc::into_inner(node))
}

/// The embedded tools with the configured permission rules, the demo agents
/// unless `demo_agents = false`, and the file's agents, models, providers and
/// MCP servers' tools.
fn runtime_builder(
    config: &ServeConfig,
    file_entries: &ConfigDocument,
    mcp_tools: Vec<Arc<McpTool>>,
    journal: Journal,
) -> Result<awaken_actors::runtime::AgentRuntimeBuilder> {
    let rules = match &config.permissions {
        Some(rules) => rules.compile().map_err(|e| invalid("permissions", e))?,
        None => PermissionRules::new(PermissionBehavior::Allow),
    };
    let mut builder = demo::tools_builder(
        ThreadConfig::default(),
        Arc::new(FakeFiles::with_demo_files()),
        journal,
        rules,
    );
    if config.demo_agents {
        builder = demo::with_demo_agents(builder)?;
    }
    file_entries
        .register(builder, mcp_tools)
        .map_err(|e| GatewayError::Config(e.to_string()))
}

fn is_loopback(address: &str) -> bool {
    address
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|socket| socket.ip().is_loopback())
        || address.starts_with("localhost:")
}

/// Opens the configured thread store. In a cluster (`lease_ttl` set) a PostgreSQL
/// store's writes may hold a thread's row lock for half the shard lease TTL at
/// most, so a paused owner's transaction ends before its lease can pass on.
async fn open_store(
    config: &StoreConfig,
    lease_ttl: Option<Duration>,
) -> Result<Arc<dyn ThreadRunStore>> {
    Ok(match config {
        StoreConfig::Memory => Arc::new(InMemoryStore::new()),
        StoreConfig::File { path } => Arc::new(
            FileStore::open(path.clone())
                .await
                .map_err(|e| invalid("store.path", e))?,
        ),
        StoreConfig::Postgres {
            url,
            pool_size,
            checkpoint_writers,
        } => {
            let mut settings = super::pool_settings(lease_ttl);
            settings.max_connections = *pool_size;
            settings.checkpoint_writers = *checkpoint_writers;
            let store = PostgresStore::connect(url, settings)
                .await
                .map_err(|e| invalid("store.url", e))?;
            store
                .ensure_schema()
                .await
                .map_err(|e| invalid("postgres", e))?;
            Arc::new(store)
        }
    })
}

async fn join_cluster(
    cluster: &ClusterConfig,
    events: EventsConfig,
    builder: awaken_actors::runtime::AgentRuntimeBuilder,
) -> Result<ClusterNode> {
    let node_id = cluster
        .node_id
        .clone()
        .unwrap_or_else(|| format!("node-{}", uuid::Uuid::now_v7().simple()));
    let node_id = NodeId::new(node_id).map_err(|e| invalid("cluster.node_id", e))?;
    let mut config = NodeConfig::new(node_id);
    config.shards.count =
        ShardCount::new(cluster.shards).map_err(|e| invalid("cluster.shards", e))?;
    config.shards.lease_ttl = Duration::from_secs(cluster.lease_ttl_secs);
    config.membership.ttl = config.shards.lease_ttl;
    config.decisions.ack_wait = config.shards.lease_ttl;
    config.replicas = cluster.replicas;
    config.mailbox.lease_ms = cluster.claim_lease_ms;
    config.mailbox.lease_renewal_interval = Duration::from_millis(cluster.claim_lease_ms / 5);
    config.events = events;
    let client = super::nats::connect(&cluster.nats_url, "cluster.nats_url").await?;
    ClusterNode::start(client, builder, config)
        .await
        .map_err(|e| GatewayError::Cluster(e.to_string()))
}
