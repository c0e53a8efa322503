//! `ConfigDocument`: every entry of the config namespaces, as one value that is
//! checked whole, stored whole and applied to a node's registries whole.

use std::collections::BTreeMap;
use std::sync::Arc;

use awaken_actors::runtime::{AgentRuntimeBuilder, RegistrySet};
use awaken_actors::tool::Tool;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value as JsonValue;

use super::namespace::{Entry, EntryError, Namespace};
use crate::protocols::mcp::{McpHub, McpServerSpec, McpTool};

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
    /// An MCP server's tool has the id of a tool the node already has.
    #[error("mcp-servers `{server}`: tool `{tool}` is already registered on this node")]
    ToolTaken {
        /// The server's id.
        server: String,
        /// The tool's id.
        tool: String,
    },
    /// An agent of the resulting configuration does not resolve.
    #[error("{0}")]
    Unbuildable(String),
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
                entries.push(check_entry(namespace, id, value)?);
            }
        }
        Ok(entries)
    }

    /// The document's MCP servers, checked (only this namespace: `apply` checks
    /// the whole document).
    pub fn mcp_servers(&self) -> Result<Vec<McpServerSpec>, DocumentError> {
        let namespace = Namespace::McpServers;
        let mut servers = Vec::with_capacity(self.mcp_servers.len());
        for (id, value) in &self.mcp_servers {
            if let Entry::McpServer(spec) = check_entry(namespace, id, value)? {
                servers.push(spec);
            }
        }
        Ok(servers)
    }

    /// The tools of the document's MCP servers, through `hub` (which connects
    /// the servers it is not connected to yet).
    pub async fn mcp_tools(&self, hub: &McpHub) -> Result<Vec<Arc<McpTool>>, DocumentError> {
        let servers = self.mcp_servers()?;
        hub.tools(&servers)
            .await
            .map_err(|error| DocumentError::Unusable {
                namespace: Namespace::McpServers,
                id: error.server().to_owned(),
                error: error.to_string(),
            })
    }

    /// `base` with this document's agents, models and providers added, and
    /// `mcp_tools` (its MCP servers' tools, from [`Self::mcp_tools`]).
    pub fn apply(
        &self,
        base: &RegistrySet,
        mcp_tools: Vec<Arc<McpTool>>,
    ) -> Result<RegistrySet, DocumentError> {
        let mut registries = base.clone();
        for tool in mcp_tools {
            let id = tool.descriptor().id;
            let server = tool.server().to_owned();
            if registries
                .tools
                .insert(id.clone(), tool as Arc<dyn Tool>)
                .is_err()
            {
                return Err(DocumentError::ToolTaken { server, tool: id });
            }
        }
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

    /// Registers this document's agents, models and providers, and `mcp_tools`
    /// (from [`Self::mcp_tools`]), with `builder` (a duplicate id surfaces from
    /// `build`).
    pub fn register(
        &self,
        mut builder: AgentRuntimeBuilder,
        mcp_tools: Vec<Arc<McpTool>>,
    ) -> Result<AgentRuntimeBuilder, DocumentError> {
        for tool in mcp_tools {
            let id = tool.descriptor().id;
            builder = builder.with_tool(id, tool as Arc<dyn Tool>);
        }
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

/// One stored entry, checked again.
fn check_entry(namespace: Namespace, id: &str, value: &JsonValue) -> Result<Entry, DocumentError> {
    namespace
        .check(value, Some(id))
        .map_err(|error| DocumentError::Entry {
            namespace,
            id: id.to_owned(),
            error,
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use awaken_actors::llm::ScriptedExecutor;
    use awaken_actors::runtime::AgentRuntimeBuilder;
    use serde_json::json;

    use super::*;

    fn document(entries: &[(Namespace, JsonValue)]) -> ConfigDocument {
        let mut document = ConfigDocument::default();
        for (namespace, value) in entries {
            document.put(&namespace.check(value, None).unwrap());
        }
        document
    }

    fn scripted() -> (Namespace, JsonValue) {
        (
            Namespace::Providers,
            json!({"id": "p", "adapter": "scripted", "script": {"steps": [{"text": "hi"}]}}),
        )
    }

    #[test]
    fn the_wire_form_is_messagepack_with_field_names() {
        let document = document(&[
            scripted(),
            (
                Namespace::McpServers,
                json!({"id": "fs", "transport": {"kind": "http", "url": "http://x"}}),
            ),
        ]);
        let bytes = document.encode().unwrap();
        let value: JsonValue = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(value["providers"]["p"]["adapter"], json!("scripted"));
        assert_eq!(
            value["mcp_servers"]["fs"]["transport"]["kind"],
            json!("http")
        );
        assert_eq!(ConfigDocument::decode(&bytes).unwrap(), document);
        assert!(matches!(
            ConfigDocument::decode(b"\xc1"),
            Err(DocumentError::Codec(_))
        ));
    }

    #[test]
    fn apply_adds_entries_and_refuses_built_in_ids() {
        let base = AgentRuntimeBuilder::new()
            .with_provider("builtin", Arc::new(ScriptedExecutor::always("x")))
            .build()
            .unwrap();
        let document = document(&[
            scripted(),
            (
                Namespace::Models,
                json!({"id": "m", "provider": "p", "model": "x"}),
            ),
            (Namespace::Agents, json!({"id": "a", "model": "m"})),
        ]);
        let registries = document.apply(&base.registries(), Vec::new()).unwrap();
        assert!(registries.agents.contains("a"));
        assert!(registries.providers.contains("builtin"));
        assert!(awaken_actors::runtime::validate_agents(&registries).is_ok());

        let clash = self::document(&[(
            Namespace::Providers,
            json!({"id": "builtin", "adapter": "scripted", "script": {"steps": [{"text": "y"}]}}),
        )]);
        assert!(matches!(
            clash.apply(&base.registries(), Vec::new()),
            Err(DocumentError::BuiltIn { .. })
        ));
        let unusable = self::document(&[(
            Namespace::Providers,
            json!({"id": "q", "adapter": "scripted"}),
        )]);
        let error = unusable
            .apply(&base.registries(), Vec::new())
            .unwrap_err()
            .to_string();
        assert!(error.contains("needs a `script`"), "{error}");
    }
}
