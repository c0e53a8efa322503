//! The composition root: what a node runs, built from its configuration, the
//! same way for `awaken serve` and `awaken node`.
//!
//! ```text
//! ServeConfig ─> runtime_base (permissions, A2A backend)
//!             ─> the demo tools and agents, only when wanted (`demo_agents`)
//!             ─> the file's agents, models, providers, MCP servers' tools
//!             ─> the thread store, the memory budget  = Assembly
//! Assembly ─> LocalNode (single node) | ClusterNode (`[cluster]`, join_cluster)
//! ```
//!
//! The config API's entries are added on top by the config manager, which every
//! node runs (`serve` through its HTTP state, `node` on its own).

mod cluster;
mod nats;
mod store;

use std::sync::Arc;

use awaken_actors::memory::NodeMemory;
use awaken_actors::permission::{PermissionBehavior, PermissionRules};
use awaken_actors::runtime::AgentRuntimeBuilder;
use awaken_actors::thread::ThreadConfig;

pub use cluster::join_cluster;
pub use store::{NodeStore, open_store};

use crate::base::runtime_base;
use crate::config::{BudgetOrigin, ServeConfig, StoreConfig};
use crate::demo::{self, FakeFiles, Journal};
use crate::error::{GatewayError, Result};
use crate::protocols::mcp::McpHub;
use crate::runtime_config::ConfigDocument;

/// What a node runs, before it starts.
pub struct Assembly {
    /// The runtime: store, tools, and every agent, model and provider of the file.
    pub builder: AgentRuntimeBuilder,
    /// The file's entries: the config API's base document.
    pub file_entries: ConfigDocument,
    /// Sessions with the MCP servers (the config manager opens more).
    pub mcp: Arc<McpHub>,
}

impl std::fmt::Debug for Assembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembly").finish_non_exhaustive()
    }
}

/// A configuration error naming the setting `what`.
pub(crate) fn invalid(what: &str, error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Config(format!("{what}: {error}"))
}

/// Builds the runtime `config` describes on its store; `journal` records the
/// demo tools' executions (tests count them across processes).
pub async fn assemble(config: &ServeConfig, journal: Journal) -> Result<Assembly> {
    let lease_ttl = config
        .cluster
        .as_ref()
        .map(|cluster| std::time::Duration::from_secs(cluster.lease_ttl_secs));
    let store = open_store(&config.store, lease_ttl, config.server.backend_wait()).await?;
    let file_entries = config
        .entries()
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    let mcp = Arc::new(McpHub::new());
    let mcp_tools = file_entries
        .mcp_tools(&mcp)
        .await
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    let rules = match &config.permissions {
        Some(rules) => rules.compile().map_err(|e| invalid("permissions", e))?,
        None => PermissionRules::new(PermissionBehavior::Allow),
    };
    let memory = node_memory(config)?;
    let mut builder = runtime_base(thread_config(config), rules).with_memory(memory);
    if config.wants_demo() {
        builder = demo::with_demo_tools(builder, Arc::new(FakeFiles::with_demo_files()), journal);
        builder = demo::with_demo_agents(builder)?;
    }
    let builder = file_entries
        .register(builder, mcp_tools)
        .map_err(|e| GatewayError::Config(e.to_string()))?
        .with_thread_run_store(store.threads)
        .with_profile_store(store.profiles)
        .discover_remote_agents()
        .await
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    Ok(Assembly {
        builder,
        file_entries,
        mcp,
    })
}

/// The node's memory budget: `node.memory_budget`, else three quarters of the
/// container's limit, else the default; logged, since it decides when caches
/// give memory back.
fn node_memory(config: &ServeConfig) -> Result<Arc<NodeMemory>> {
    let own_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let (budget, origin) = config
        .node
        .memory_budget(std::path::Path::new(CGROUP_ROOT), &own_cgroup)
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    let from = match origin {
        BudgetOrigin::Configured => "node.memory_budget".to_owned(),
        BudgetOrigin::ContainerLimit(limit) => format!("3/4 of the container limit {limit}"),
        BudgetOrigin::Default => "the default (no container limit found)".to_owned(),
    };
    tracing::info!(budget_bytes = budget.total(), from = %from, "memory budget");
    Ok(Arc::new(NodeMemory::new(budget)))
}

/// Where the cgroup file systems are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The thread actors' settings the file decides: how long a run, and a store
/// request, wait for a database that went away.
fn thread_config(file: &ServeConfig) -> ThreadConfig {
    let mut config = ThreadConfig {
        store_request_wait: file.server.backend_wait(),
        ..ThreadConfig::default()
    };
    if let StoreConfig::Postgres(postgres) = &file.store {
        config.store_outage_timeout = std::time::Duration::from_secs(postgres.outage_timeout_secs);
    }
    config
}
