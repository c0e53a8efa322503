//! `awaken node`: one node of a cluster on NATS without the HTTP API, until
//! SIGTERM or Ctrl-C. It runs what `awaken serve` would with the same
//! configuration (the composition root builds both): the file's agents, models,
//! providers and MCP servers, and those written through any node's config API.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use awaken_cluster::events::EventsConfig;
use awaken_cluster::{RunControl, RunInputPlacement};
use clap::Args;
use tokio::signal::unix::{SignalKind, signal};

use crate::compose::{self, Assembly};
use crate::config::file::paths;
use crate::config::{ClusterConfig, ServeConfig, StoreConfig};
use crate::demo::Journal;
use crate::error::{GatewayError, Result};
use crate::runtime_config::ConfigManager;
use crate::secret::Secret;
use crate::server::metrics::{Metrics, PushedMetrics};
use crate::telemetry::{MetricPush, MetricsExportSettings};

/// Flags of `awaken node`; each overrides its key of the config file (or
/// environment), which is read as `awaken serve` reads it.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// The config file; repeat it for more files, each overriding the ones
    /// before (`./awaken.toml` when it exists, if none is given).
    #[arg(long, value_name = "PATH")]
    pub config: Vec<PathBuf>,
    /// NATS server URL(s), comma-separated (`cluster.nats_url`).
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
    /// The shared PostgreSQL thread store (`store.url`; every node of a cluster
    /// uses the same one). `?options=-c%20search_path%3DSCHEMA` picks a schema.
    #[arg(long, value_name = "URL", env = "AWAKEN_POSTGRES_URL")]
    pub postgres_url: Option<String>,
    /// This node's id (`cluster.node_id`); a new one by default.
    #[arg(long, value_name = "ID")]
    pub node_id: Option<String>,
    /// Shards of the cluster, the same on every node (`cluster.shards`).
    #[arg(long, value_name = "N")]
    pub shards: Option<u32>,
    /// Shard lease and membership TTL (`cluster.lease_ttl_secs`).
    #[arg(long, value_name = "SECONDS")]
    pub lease_ttl_s: Option<u64>,
    /// Lease of a dispatch claim while its run executes (`cluster.claim_lease_ms`).
    #[arg(long, value_name = "MS")]
    pub claim_lease_ms: Option<u64>,
    /// Copies of every bucket and stream (`cluster.replicas`).
    #[arg(long, value_name = "N")]
    pub replicas: Option<usize>,
    /// How long a graceful shutdown may take (`cluster.drain_timeout_secs`).
    #[arg(long, value_name = "SECONDS")]
    pub drain_timeout_s: Option<u64>,
    /// Where accepted runs' input is kept: `auto`, `inbox` or `ledger` (`cluster.run_input`).
    #[arg(long, value_name = "WHERE")]
    pub run_input: Option<RunInputPlacement>,
    /// Registers the embedded demo agents and tools (as `demo_agents = true`).
    #[arg(long)]
    pub demo: bool,
    /// Append one line per `echo`/`sleep` execution to this file (tests count them).
    #[arg(long, value_name = "PATH")]
    pub tool_journal: Option<PathBuf>,
}

/// Sets `slot` to the flag's value when the flag was given.
fn set<T: Clone>(slot: &mut T, flag: &Option<T>) {
    if let Some(value) = flag {
        slot.clone_from(value);
    }
}

impl NodeArgs {
    /// The configuration with the flags applied; a node is always a cluster
    /// member on PostgreSQL.
    fn config(&self) -> Result<ServeConfig> {
        let mut config = ServeConfig::load_files(&paths(&self.config), std::env::vars())
            .map_err(|e| GatewayError::Config(e.to_string()))?;
        let cluster = config.cluster.get_or_insert_with(ClusterConfig::default);
        set(&mut cluster.nats_url, &self.nats_url);
        if self.node_id.is_some() {
            cluster.node_id.clone_from(&self.node_id);
        }
        set(&mut cluster.shards, &self.shards);
        set(&mut cluster.lease_ttl_secs, &self.lease_ttl_s);
        set(&mut cluster.claim_lease_ms, &self.claim_lease_ms);
        set(&mut cluster.replicas, &self.replicas);
        set(&mut cluster.drain_timeout_secs, &self.drain_timeout_s);
        set(&mut cluster.run_input, &self.run_input);
        if let Some(url) = &self.postgres_url {
            match &mut config.store {
                StoreConfig::Postgres(postgres) => postgres.url = Secret::new(url.clone()),
                store => *store = StoreConfig::postgres(url.clone()),
            }
        }
        if !matches!(config.store, StoreConfig::Postgres(_)) {
            return Err(GatewayError::Config(
                "a node needs the store every node shares: --postgres-url, AWAKEN_POSTGRES_URL \
                 or store.kind = \"postgres\""
                    .into(),
            ));
        }
        if self.demo {
            config.demo_agents = Some(true);
        }
        Ok(config)
    }
}

/// Joins the cluster, prints `{"event":"ready",...}` on stdout, serves until a
/// signal, then drains.
pub(super) async fn execute(args: NodeArgs, push: Option<&MetricsExportSettings>) -> Result<u8> {
    let config = args.config()?;
    let journal = args.tool_journal.map(Journal::at).unwrap_or_default();
    let Some(cluster) = &config.cluster else {
        return Err(GatewayError::Config("a node needs [cluster]".into()));
    };
    let Assembly {
        builder,
        file_entries,
        mcp,
    } = compose::assemble(&config, journal).await?;
    let node = compose::join_cluster(
        cluster,
        EventsConfig::default(),
        config.server.backend_wait(),
        builder,
    )
    .await?;
    // Agents written through any node's config API run here too.
    let _config_api = ConfigManager::start(
        node.runtime().clone(),
        node.config_store(),
        file_entries,
        mcp,
        config.server.config_api.entry_policy(),
    )
    .await
    .map_err(|e| GatewayError::Config(e.to_string()))?;
    let node_id = node.node_id().to_string();
    let node = Arc::new(node);
    let push = push
        .map(|settings| {
            let control = Arc::clone(&node) as Arc<dyn RunControl>;
            let metrics = Arc::new(Metrics::new(control.as_ref()));
            MetricPush::start(settings, PushedMetrics::new(metrics, control))
        })
        .transpose()
        .map_err(|e| GatewayError::Config(e.to_string()))?;

    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    println!(
        "{}",
        serde_json::json!({"event": "ready", "node_id": node_id})
    );
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    eprintln!("draining {node_id} ...");
    if let Some(push) = push {
        push.finish().await;
    }
    let Some(node) = Arc::into_inner(node) else {
        return Err(GatewayError::Cluster(
            "the node is still held after its metrics stopped".into(),
        ));
    };
    node.drain(Duration::from_secs(cluster.drain_timeout_secs))
        .await
        .map_err(|e| GatewayError::Cluster(e.to_string()))?;
    // Whoever read `ready` may be gone by now: a closed stdout is no failure.
    let _ = writeln!(
        std::io::stdout(),
        "{}",
        serde_json::json!({"event": "stopped", "node_id": node_id})
    );
    Ok(0)
}
