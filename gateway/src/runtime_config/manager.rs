//! `ConfigManager`: the config API's reads and validated writes, and the task that
//! keeps this node's registries on the store's latest document.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use awaken_actors::runtime::{AgentRuntime, RegistrySet, ValidatedRegistries};
use awaken_cluster::ClusterError;
use awaken_cluster::config_store::{ConfigStore, ConfigVersion};
use futures::StreamExt;
use serde_json::{Value as JsonValue, json};
use tokio_util::task::AbortOnDropHandle;

use super::document::{ConfigDocument, DocumentError};
use super::namespace::{EntryError, Namespace};
use super::policy::EntryPolicy;
use crate::protocols::mcp::McpHub;

/// Compare-and-set attempts of one write before it gives up (each lost attempt
/// means another write landed: the next one is checked against it).
const WRITE_ATTEMPTS: usize = 8;
/// Pause before the store's watch is opened again after it failed.
const REWATCH_DELAY: Duration = Duration::from_secs(1);

/// Why a config request was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigApiError {
    /// The entry is malformed or cannot work (400).
    #[error("{0}")]
    Invalid(String),
    /// No such entry (404).
    #[error("{0}")]
    NotFound(String),
    /// The entry exists, is built in, or is in use (409).
    #[error("{0}")]
    Conflict(String),
    /// The config store did not answer (503).
    #[error("config store: {0}")]
    Unavailable(String),
}

impl From<EntryError> for ConfigApiError {
    fn from(error: EntryError) -> Self {
        match error {
            EntryError::UnknownNamespace(_) => Self::NotFound(error.to_string()),
            other => Self::Invalid(other.to_string()),
        }
    }
}

impl From<ClusterError> for ConfigApiError {
    fn from(error: ClusterError) -> Self {
        Self::Unavailable(error.to_string())
    }
}

/// The revision and document this node's registries were built from.
#[derive(Debug, Default)]
struct Applied {
    revision: u64,
    document: ConfigDocument,
}

/// One namespace's entries as the API lists them.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// Every entry, built-in and stored, in id order.
    pub items: Vec<JsonValue>,
    /// Ids of the entries that are built in (read-only through the API).
    pub built_in: Vec<String>,
    /// The stored document's revision (0 before the first write).
    pub revision: u64,
}

/// Reads and writes the config namespaces for one node; see the module docs.
pub struct ConfigManager {
    runtime: AgentRuntime,
    store: Arc<dyn ConfigStore>,
    /// The registries before any stored entry: code and `awaken.toml`.
    base: Arc<RegistrySet>,
    /// The `awaken.toml` entries, served as they were written.
    file: ConfigDocument,
    /// This node's MCP connections (the file's servers and the stored ones).
    mcp: Arc<McpHub>,
    /// What the document's entries may make this node start or read.
    policy: EntryPolicy,
    applied: Mutex<Applied>,
    /// Ends with the manager.
    follower: OnceLock<AbortOnDropHandle<()>>,
}

impl std::fmt::Debug for ConfigManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigManager")
            .field("revision", &self.revision())
            .finish_non_exhaustive()
    }
}

impl ConfigManager {
    /// Takes `runtime`'s current registries as the built-in base (`file` lists the
    /// entries that came from `awaken.toml`, whose MCP servers `mcp` is connected
    /// to), applies the store's latest document and follows the store from then on.
    pub async fn start(
        runtime: AgentRuntime,
        store: Arc<dyn ConfigStore>,
        file: ConfigDocument,
        mcp: Arc<McpHub>,
        policy: EntryPolicy,
    ) -> Result<Arc<Self>, ConfigApiError> {
        let manager = Arc::new(Self {
            base: runtime.registries(),
            runtime,
            store,
            file,
            mcp,
            policy,
            applied: Mutex::new(Applied::default()),
            follower: OnceLock::new(),
        });
        if let Some(version) = manager.store.load().await? {
            manager.adopt(version).await;
        }
        let follower = tokio::spawn(follow(Arc::downgrade(&manager)));
        // Set once, here: nothing else has the manager yet.
        let _ = manager.follower.set(AbortOnDropHandle::new(follower));
        Ok(manager)
    }

    fn lock_applied(&self) -> std::sync::MutexGuard<'_, Applied> {
        self.applied
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The revision this node's registries were built from.
    pub fn revision(&self) -> u64 {
        self.lock_applied().revision
    }

    /// What this node can run: registered agents, tools, plugins, models,
    /// providers and MCP servers, the config namespaces, and the applied revision.
    pub fn capabilities(&self) -> JsonValue {
        let registries = self.runtime.registries();
        let applied = self.lock_applied();
        let ids = |ids: &mut dyn Iterator<Item = &str>| ids.map(str::to_owned).collect::<Vec<_>>();
        let tools: Vec<JsonValue> = registries
            .tools
            .iter()
            .map(|(_, tool)| {
                let descriptor = tool.descriptor();
                json!({
                    "id": descriptor.id,
                    "name": descriptor.name,
                    "description": descriptor.description,
                })
            })
            .collect();
        let mut mcp_servers: Vec<&str> = self
            .file
            .mcp_servers
            .keys()
            .chain(applied.document.mcp_servers.keys())
            .map(String::as_str)
            .collect();
        mcp_servers.sort_unstable();
        json!({
            "agents": ids(&mut registries.agents.ids()),
            "tools": tools,
            "plugins": ids(&mut registries.plugins.ids()),
            "models": ids(&mut registries.models.ids()),
            "providers": ids(&mut registries.providers.ids()),
            "mcp_servers": mcp_servers,
            "namespaces": Namespace::ALL.map(Namespace::as_str),
            "config_revision": applied.revision,
        })
    }

    /// Builds and installs a stored revision newer than the applied one; a
    /// revision this node cannot use (an MCP server it cannot reach, say) is
    /// logged and skipped: the previous one stays.
    async fn adopt(&self, version: ConfigVersion) {
        if version.revision <= self.revision() {
            return;
        }
        let built = match ConfigDocument::decode(&version.document) {
            Ok(document) => self.build(&document).await.map(|r| (r, document)),
            Err(error) => Err(error),
        };
        match built {
            Ok((registries, document)) => self.install(version.revision, registries, document),
            Err(error) => {
                tracing::error!(revision = version.revision, %error, "config revision unusable on this node");
            }
        }
        self.forget_unused_mcp_servers();
    }

    /// The registries of `document` on this node: the base, its entries, its MCP
    /// servers' tools; every agent resolves.
    async fn build(&self, document: &ConfigDocument) -> Result<ValidatedRegistries, DocumentError> {
        // Every check that reads only the document comes first: an entry that is
        // refused starts no program and contacts no server.
        document.checked()?;
        self.policy.check(document)?;
        let tools = document.mcp_tools(&self.mcp).await?;
        ValidatedRegistries::new(document.apply(&self.base, tools)?)
            .map_err(|e| DocumentError::Unbuildable(e.to_string()))
    }

    /// Forgets the MCP sessions of servers neither `awaken.toml` nor the applied
    /// document names (removed, replaced, or connected for a refused write); each
    /// ends once no registry holds its tools.
    fn forget_unused_mcp_servers(&self) {
        let applied = self.lock_applied();
        self.mcp.retain(|id| {
            self.file.mcp_servers.contains_key(id) || applied.document.mcp_servers.contains_key(id)
        });
    }

    fn install(&self, revision: u64, registries: ValidatedRegistries, document: ConfigDocument) {
        let mut applied = self.lock_applied();
        if revision > applied.revision {
            self.runtime.replace_registries(registries);
            *applied = Applied { revision, document };
            tracing::info!(revision, "config revision applied");
        }
    }

    async fn latest(&self) -> Result<(Option<u64>, ConfigDocument), ConfigApiError> {
        match self.store.load().await? {
            None => Ok((None, ConfigDocument::default())),
            Some(version) => {
                let document = ConfigDocument::decode(&version.document)
                    .map_err(|e| ConfigApiError::Unavailable(e.to_string()))?;
                Ok((Some(version.revision), document))
            }
        }
    }

    /// Whether `id` is built in to `namespace` on this node.
    fn is_built_in(&self, namespace: Namespace, id: &str) -> bool {
        self.file.entries(namespace).contains_key(id)
            || match namespace {
                Namespace::Agents => self.base.agents.contains(id),
                Namespace::Models => self.base.models.contains(id),
                Namespace::Providers => self.base.providers.contains(id),
                Namespace::McpServers => false,
            }
    }

    /// The built-in entries of `namespace`, by id.
    fn built_in(&self, namespace: Namespace) -> std::collections::BTreeMap<String, JsonValue> {
        let mut entries = self.file.entries(namespace).clone();
        let code: Vec<(String, JsonValue)> = match namespace {
            Namespace::Agents => self
                .base
                .agents
                .iter()
                .map(|(id, spec)| (id.to_owned(), json!(spec)))
                .collect(),
            Namespace::Models => self
                .base
                .models
                .iter()
                .map(|(id, spec)| (id.to_owned(), json!(spec)))
                .collect(),
            // Providers registered by code are executors: only their kind is known.
            Namespace::Providers => self
                .base
                .providers
                .iter()
                .map(|(id, executor)| {
                    (id.to_owned(), json!({"id": id, "adapter": executor.name()}))
                })
                .collect(),
            Namespace::McpServers => Vec::new(),
        };
        for (id, value) in code {
            entries.entry(id).or_insert(value);
        }
        entries
    }

    /// Every entry of `namespace`: built-in ones, then the stored ones.
    pub async fn list(&self, namespace: Namespace) -> Result<Listing, ConfigApiError> {
        let (revision, document) = self.latest().await?;
        let mut entries = self.built_in(namespace);
        let built_in: Vec<String> = entries.keys().cloned().collect();
        for (id, value) in document.entries(namespace) {
            entries.entry(id.clone()).or_insert_with(|| value.clone());
        }
        Ok(Listing {
            items: entries.into_values().collect(),
            built_in,
            revision: revision.unwrap_or(0),
        })
    }

    /// One entry.
    pub async fn get(&self, namespace: Namespace, id: &str) -> Result<JsonValue, ConfigApiError> {
        if let Some(entry) = self.built_in(namespace).remove(id) {
            return Ok(entry);
        }
        let (_, document) = self.latest().await?;
        document
            .entries(namespace)
            .get(id)
            .cloned()
            .ok_or_else(|| not_found(namespace, id))
    }

    /// Adds an entry; 409 when the id is taken.
    pub async fn create(
        &self,
        namespace: Namespace,
        body: &JsonValue,
    ) -> Result<JsonValue, ConfigApiError> {
        let entry = namespace.check(body, None)?;
        let id = entry.id().to_owned();
        self.write(namespace, &id, |document| {
            if document.entries(namespace).contains_key(&id) {
                return Err(ConfigApiError::Conflict(format!(
                    "{namespace} `{id}` already exists"
                )));
            }
            document.put(&entry);
            Ok(())
        })
        .await?;
        Ok(entry.to_json())
    }

    /// Replaces an entry; 404 when it does not exist.
    pub async fn replace(
        &self,
        namespace: Namespace,
        id: &str,
        body: &JsonValue,
    ) -> Result<JsonValue, ConfigApiError> {
        let entry = namespace.check(body, Some(id))?;
        self.write(namespace, id, |document| {
            if !document.entries(namespace).contains_key(id) {
                return Err(not_found(namespace, id));
            }
            document.put(&entry);
            Ok(())
        })
        .await?;
        Ok(entry.to_json())
    }

    /// Removes an entry; 409 when something still uses it.
    pub async fn delete(&self, namespace: Namespace, id: &str) -> Result<(), ConfigApiError> {
        self.write(namespace, id, |document| {
            if document.remove(namespace, id) {
                Ok(())
            } else {
                Err(not_found(namespace, id))
            }
        })
        .await
    }

    /// Applies `change` to the latest document, checks the result whole and
    /// stores it with compare-and-set (again, against the newer document, when
    /// another write came first); this node uses it before the call returns.
    async fn write(
        &self,
        namespace: Namespace,
        id: &str,
        change: impl Fn(&mut ConfigDocument) -> Result<(), ConfigApiError>,
    ) -> Result<(), ConfigApiError> {
        if self.is_built_in(namespace, id) {
            return Err(ConfigApiError::Conflict(format!(
                "{namespace} `{id}` is built in to this node (code or awaken.toml); \
                 change it there"
            )));
        }
        let written = self.write_checked(namespace, id, change).await;
        self.forget_unused_mcp_servers();
        written
    }

    async fn write_checked(
        &self,
        namespace: Namespace,
        id: &str,
        change: impl Fn(&mut ConfigDocument) -> Result<(), ConfigApiError>,
    ) -> Result<(), ConfigApiError> {
        for _ in 0..WRITE_ATTEMPTS {
            let (revision, mut document) = self.latest().await?;
            let before = document.clone();
            change(&mut document)?;
            let registries = self
                .build(&document)
                .await
                .map_err(|e| refusal(namespace, id, &before, &document, &e))?;
            let bytes = document
                .encode()
                .map_err(|e| ConfigApiError::Invalid(e.to_string()))?;
            match self.store.save(bytes, revision).await {
                Ok(new_revision) => {
                    self.install(new_revision, registries, document);
                    return Ok(());
                }
                Err(ClusterError::Conflict { .. }) => continue,
                Err(other) => return Err(other.into()),
            }
        }
        Err(ConfigApiError::Unavailable(format!(
            "{WRITE_ATTEMPTS} concurrent writes won over this one; try again"
        )))
    }
}

/// 400 when the written entry itself cannot work, 409 when the change breaks
/// another entry (a model or provider still in use).
fn refusal(
    namespace: Namespace,
    id: &str,
    before: &ConfigDocument,
    after: &ConfigDocument,
    error: &dyn std::fmt::Display,
) -> ConfigApiError {
    let removed =
        before.entries(namespace).contains_key(id) && !after.entries(namespace).contains_key(id);
    if removed {
        ConfigApiError::Conflict(format!("{namespace} `{id}` is in use: {error}"))
    } else {
        ConfigApiError::Invalid(format!("{namespace} `{id}` cannot be used: {error}"))
    }
}

fn not_found(namespace: Namespace, id: &str) -> ConfigApiError {
    ConfigApiError::NotFound(format!("unknown {namespace} entry `{id}`"))
}

/// Follows the store for as long as the manager lives, reopening the watch after
/// a failure.
async fn follow(manager: std::sync::Weak<ConfigManager>) {
    loop {
        let Some(strong) = manager.upgrade() else {
            return;
        };
        let watch = strong.store.watch().await;
        drop(strong);
        match watch {
            Ok(mut versions) => {
                while let Some(version) = versions.next().await {
                    let Some(strong) = manager.upgrade() else {
                        return;
                    };
                    match version {
                        Ok(version) => strong.adopt(version).await,
                        Err(error) => {
                            tracing::warn!(%error, "config watch failed");
                            break;
                        }
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "config watch could not open"),
        }
        tokio::time::sleep(REWATCH_DELAY).await;
    }
}
