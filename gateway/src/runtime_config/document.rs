//! `ConfigDocument`: every entry of the config namespaces, as one value that is
//! checked whole, stored whole and applied to a node's registries whole.

use std::collections::BTreeMap;
use std::sync::Arc;

use awaken_actors::runtime::{AgentRuntimeBuilder, RegistrySet};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value as JsonValue;

use super::namespace::{Entry, EntryError, Namespace};

/// Entries by namespace and id, each in its checked normal JSON form.
///
/// Stored in the cluster's config store with the wire codec (MessagePack, named
/// fields); see `docs/cluster.md`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigDocument {
    /// `agents` entries.
    pub agents: BTreeMap<String, JsonValue>,
    /// `models` entries.
    pub models: BTreeMap<String, JsonValue>,
    /// `providers` entries.
    pub providers: BTreeMap<String, JsonValue>,
    /// `mcp-servers` entries.
    pub mcp_servers: BTreeMap<String, JsonValue>,
}

/// Why a document cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// An entry fails its checks (a document from another build, or edited by hand).
    #[error("{namespace} `{id}`: {error}")]
    Entry {
        /// The entry's namespace.
        namespace: Namespace,
        /// The entry's id.
        id: String,
        /// What is wrong.
        error: EntryError,
    },
    /// An entry cannot be served on this node (e.g. a provider's key is unset).
    #[error("{namespace} `{id}`: {error}")]
    Unusable {
        /// The entry's namespace.
        namespace: Namespace,
        /// The entry's id.
        id: String,
        /// What is wrong.
        error: String,
    },
    /// An entry has the id of one the node already has.
    #[error("{namespace} `{id}` is built in to this node")]
    BuiltIn {
        /// The entry's namespace.
        namespace: Namespace,
        /// The entry's id.
        id: String,
    },
    /// The stored bytes are not a document.
    #[error("config document: {0}")]
    Codec(String),
}

impl ConfigDocument {
    /// Decodes a stored document.
    pub fn decode(bytes: &[u8]) -> Result<Self, DocumentError> {
        awaken_cluster::codec::decode(bytes).map_err(|e| DocumentError::Codec(e.to_string()))
    }

    /// Encodes the document for the store.
    pub fn encode(&self) -> Result<Bytes, DocumentError> {
        awaken_cluster::codec::encode(self).map_err(|e| DocumentError::Codec(e.to_string()))
    }

    /// The entries of `namespace`, by id.
    pub fn entries(&self, namespace: Namespace) -> &BTreeMap<String, JsonValue> {
        match namespace {
            Namespace::Agents => &self.agents,
            Namespace::Models => &self.models,
            Namespace::Providers => &self.providers,
            Namespace::McpServers => &self.mcp_servers,
        }
    }

    fn entries_mut(&mut self, namespace: Namespace) -> &mut BTreeMap<String, JsonValue> {
        match namespace {
            Namespace::Agents => &mut self.agents,
            Namespace::Models => &mut self.models,
            Namespace::Providers => &mut self.providers,
            Namespace::McpServers => &mut self.mcp_servers,
        }
    }

    /// Adds or replaces `entry`.
    pub fn put(&mut self, entry: &Entry) {
        self.entries_mut(entry.namespace())
            .insert(entry.id().to_owned(), entry.to_json());
    }

    /// Removes an entry; whether it was there.
    pub fn remove(&mut self, namespace: Namespace, id: &str) -> bool {
        self.entries_mut(namespace).remove(id).is_some()
    }

    /// Number of entries in all namespaces.
    pub fn len(&self) -> usize {
        Namespace::ALL
            .iter()
            .map(|ns| self.entries(*ns).len())
            .sum()
    }

    /// Whether the document has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry, checked again (a stored document may come from another build).
    pub fn checked(&self) -> Result<Vec<Entry>, DocumentError> {
        let mut entries = Vec::with_capacity(self.len());
        for namespace in Namespace::ALL {
            for (id, value) in self.entries(namespace) {
                let entry =
                    namespace
                        .check(value, Some(id))
                        .map_err(|error| DocumentError::Entry {
                            namespace,
                            id: id.clone(),
                            error,
                        })?;
                entries.push(entry);
            }
        }
        Ok(entries)
    }

    /// `base` with this document's agents, models and providers added. MCP servers
    /// are recorded only: nothing in the registries uses them yet.
    pub fn apply(&self, base: &RegistrySet) -> Result<RegistrySet, DocumentError> {
        let mut registries = base.clone();
        for entry in self.checked()? {
            let namespace = entry.namespace();
            let id = entry.id().to_owned();
            let added = match entry {
                Entry::Agent(spec) => registries
                    .agents
                    .insert(id.clone(), Arc::new(*spec))
                    .is_ok(),
                Entry::Model(spec) => registries.models.insert(id.clone(), spec).is_ok(),
                Entry::Provider(config) => {
                    let executor = config.executor().map_err(|error| DocumentError::Unusable {
                        namespace,
                        id: id.clone(),
                        error: error.to_string(),
                    })?;
                    registries.providers.insert(id.clone(), executor).is_ok()
                }
                Entry::McpServer(_) => true,
            };
            if !added {
                return Err(DocumentError::BuiltIn { namespace, id });
            }
        }
        Ok(registries)
    }

    /// Registers this document's agents, models and providers with `builder`
    /// (a duplicate id surfaces from `build`).
    pub fn register(
        &self,
        mut builder: AgentRuntimeBuilder,
    ) -> Result<AgentRuntimeBuilder, DocumentError> {
        for entry in self.checked()? {
            builder = match entry {
                Entry::Agent(spec) => builder.with_agent_spec(*spec),
                Entry::Model(spec) => builder.with_model(spec.id.clone(), spec),
                Entry::Provider(config) => {
                    let executor = config.executor().map_err(|error| DocumentError::Unusable {
                        namespace: Namespace::Providers,
                        id: config.id.clone(),
                        error: error.to_string(),
                    })?;
                    builder.with_provider(config.id.clone(), executor)
                }
                Entry::McpServer(_) => builder,
            };
        }
        Ok(builder)
    }
}
