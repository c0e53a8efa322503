//! `awaken node`: one node of a cluster on NATS, until SIGTERM or Ctrl-C.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use awaken_actors::store::PostgresStore;
use awaken_actors::thread::ThreadConfig;
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use awaken_cluster::shards::ShardCount;
use clap::Args;
use tokio::signal::unix::{SignalKind, signal};

use crate::demo::{self, FakeFiles, Journal};
use crate::error::{GatewayError, Result};

/// Flags of `awaken node`.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// NATS server URL(s), comma-separated.
    #[arg(long, value_name = "URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    /// The shared thread store (every node of a cluster must use the same one).
    /// `?options=-c%20search_path%3DSCHEMA` picks a schema.
    #[arg(long, value_name = "URL", env = "AWAKEN_POSTGRES_URL")]
    pub postgres_url: String,
    /// This node's id; a new one by default.
    #[arg(long, value_name = "ID")]
    pub node_id: Option<String>,
    /// Shards of the cluster (the same on every node).
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub shards: u32,
    /// Shard lease and membership TTL: a dead node's threads move after this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub lease_ttl_s: u64,
    /// Lease of a dispatch claim while its run executes (renewed every fifth).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub claim_lease_ms: u64,
    /// Copies of every bucket and stream (a clustered NATS).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub replicas: usize,
    /// How long a graceful shutdown may take.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub drain_timeout_s: u64,
    /// Append one line per `echo`/`sleep` execution to this file (tests count them).
    #[arg(long, value_name = "PATH")]
    pub tool_journal: Option<PathBuf>,
}

fn invalid(what: &str, error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Config(format!("{what}: {error}"))
}

/// Joins the cluster, prints `{"event":"ready",...}` on stdout, serves until a
/// signal, then drains.
pub(super) async fn execute(args: NodeArgs) -> Result<u8> {
    let node_id = args
        .node_id
        .unwrap_or_else(|| format!("node-{}", uuid::Uuid::now_v7().simple()));
    let node_id = NodeId::new(node_id).map_err(|e| invalid("--node-id", e))?;
    let mut config = NodeConfig::new(node_id.clone());
    config.shards.count = ShardCount::new(args.shards).map_err(|e| invalid("--shards", e))?;
    config.shards.lease_ttl = Duration::from_secs(args.lease_ttl_s);
    config.membership.ttl = config.shards.lease_ttl;
    config.decisions.ack_wait = config.shards.lease_ttl;
    config.replicas = args.replicas;
    config.mailbox.lease_ms = args.claim_lease_ms;
    config.mailbox.lease_renewal_interval = Duration::from_millis(args.claim_lease_ms / 5);

    let store = PostgresStore::connect(
        &args.postgres_url,
        super::pool_settings(Some(config.shards.lease_ttl)),
    )
    .await
    .map_err(|e| invalid("--postgres-url", e))?;
    store
        .ensure_schema()
        .await
        .map_err(|e| invalid("postgres", e))?;
    let journal = args.tool_journal.map(Journal::at).unwrap_or_default();
    let builder = demo::builder(
        ThreadConfig::default(),
        Arc::new(FakeFiles::with_demo_files()),
        journal,
    )?
    .with_thread_run_store(Arc::new(store));
    let client = super::nats::connect(&args.nats_url, "--nats-url").await?;
    let node = ClusterNode::start(client, builder, config)
        .await
        .map_err(|e| GatewayError::Cluster(e.to_string()))?;

    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    println!(
        "{}",
        serde_json::json!({"event": "ready", "node_id": node_id.as_str()})
    );
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    eprintln!("draining {node_id} ...");
    node.drain(Duration::from_secs(args.drain_timeout_s))
        .await
        .map_err(|e| GatewayError::Cluster(e.to_string()))?;
    println!(
        "{}",
        serde_json::json!({"event": "stopped", "node_id": node_id.as_str()})
    );
    Ok(0)
}
