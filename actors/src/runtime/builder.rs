//! `AgentRuntimeBuilder` and the `AgentRuntime` it produces.

use std::sync::Arc;

use super::agent_runtime::{AgentRuntime, RuntimeServices};
use super::registry::RegistrySet;
use crate::approval_feed::FeedSink;
use crate::contract::{AgentSpec, ModelSpec};
use crate::delegation::{DiscoveryError, RemoteBackend, RemoteError};
use crate::error::BuildError;
use crate::ids::AgentId;
use crate::llm::LlmExecutor;
use crate::memory::NodeMemory;
use crate::plugin::Plugin;
use crate::policies::StopPolicy;
use crate::state::{ProfileAccess, ProfileStore};
use crate::store::ThreadRunStore;
use crate::thread::{EventHub, FenceSource, ThreadConfig};
use crate::tool::Tool;

/// Collects agents, tools, models, providers and plugins, then builds and validates
/// an [`AgentRuntime`].
///
/// Registration never fails on the spot: a duplicate id is remembered and the first
/// such error is returned by [`build`](Self::build), so configuration reads as one
/// fluent chain.
#[derive(Debug, Default)]
pub struct AgentRuntimeBuilder {
    registries: RegistrySet,
    services: RuntimeServices,
    errors: Vec<BuildError>,
}

impl AgentRuntimeBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an agent definition.
    pub fn with_agent_spec(mut self, spec: AgentSpec) -> Self {
        let id = spec.id.to_string();
        if self
            .registries
            .agents
            .insert(id.clone(), Arc::new(spec))
            .is_err()
        {
            self.errors.push(BuildError::AgentRegistryConflict(id));
        }
        self
    }

    /// Adds several agent definitions.
    pub fn with_agent_specs(self, specs: impl IntoIterator<Item = AgentSpec>) -> Self {
        specs.into_iter().fold(self, Self::with_agent_spec)
    }

    /// Adds a global tool; `id` must match the tool's descriptor id.
    pub fn with_tool(mut self, id: impl Into<String>, tool: Arc<dyn Tool>) -> Self {
        let id = id.into();
        let descriptor_id = tool.descriptor().id;
        if descriptor_id != id {
            self.errors.push(BuildError::ValidationFailed(format!(
                "tool registered as `{id}` declares id `{descriptor_id}`"
            )));
        }
        if self.registries.tools.insert(id.clone(), tool).is_err() {
            self.errors.push(BuildError::ToolRegistryConflict(id));
        }
        self
    }

    /// Adds a model entry; `id` must match `model.id`.
    pub fn with_model(mut self, id: impl Into<String>, model: ModelSpec) -> Self {
        let id = id.into();
        if model.id != id {
            self.errors.push(BuildError::ValidationFailed(format!(
                "model registered as `{id}` declares id `{}`",
                model.id
            )));
        }
        if self.registries.models.insert(id.clone(), model).is_err() {
            self.errors.push(BuildError::ModelRegistryConflict(id));
        }
        self
    }

    /// Adds an LLM executor under a provider id.
    pub fn with_provider(mut self, id: impl Into<String>, executor: Arc<dyn LlmExecutor>) -> Self {
        let id = id.into();
        if self
            .registries
            .providers
            .insert(id.clone(), executor)
            .is_err()
        {
            self.errors.push(BuildError::ProviderRegistryConflict(id));
        }
        self
    }

    /// Adds a plugin under an id agents refer to.
    pub fn with_plugin(mut self, id: impl Into<String>, plugin: Arc<dyn Plugin>) -> Self {
        let id = id.into();
        if self.registries.plugins.insert(id.clone(), plugin).is_err() {
            self.errors.push(BuildError::PluginRegistryConflict(id));
        }
        self
    }

    /// Adds a custom stop policy every agent evaluates after its own `max_rounds` and
    /// `stop_conditions` (book: "The StopPolicy Trait").
    pub fn with_stop_policy(mut self, policy: Arc<dyn StopPolicy>) -> Self {
        self.registries.stop_policies.push(policy);
        self
    }

    /// Runs remote delegates whose `endpoint.backend` is `name` (the gateway
    /// registers `a2a`).
    pub fn with_remote_backend(
        mut self,
        name: impl Into<String>,
        backend: Arc<dyn RemoteBackend>,
    ) -> Self {
        let name = name.into();
        if self
            .registries
            .remote_backends
            .insert(name.clone(), backend)
            .is_err()
        {
            self.errors.push(BuildError::RemoteBackendConflict(name));
        }
        self
    }

    /// Adds remote agents: specs with an `endpoint`, usable as delegates. Their
    /// cards are read by [`discover_remote_agents`](Self::discover_remote_agents).
    pub fn with_remote_agents(mut self, specs: impl IntoIterator<Item = AgentSpec>) -> Self {
        for spec in specs {
            if spec.endpoint.is_none() {
                self.errors.push(BuildError::ValidationFailed(format!(
                    "remote agent `{}` has no endpoint",
                    spec.id
                )));
                continue;
            }
            self = self.with_agent_spec(spec);
        }
        self
    }

    /// Reads the card of every agent with an endpoint through its backend, all at
    /// once. An endpoint the backend cannot use (or no such backend) fails with
    /// [`BuildError::DiscoveryFailed`]: that is a configuration mistake. An agent
    /// whose card cannot be read now (its service is down or not started yet, as
    /// happens when services start in any order) is only logged: it is used without
    /// a card, and the backend reads the card at its first call.
    pub async fn discover_remote_agents(mut self) -> Result<Self, BuildError> {
        let registries = &self.registries;
        let lookups = registries.agents.iter().filter_map(|(id, spec)| {
            let endpoint = spec.endpoint.as_ref()?;
            let backend = registries.remote_backends.get(&endpoint.backend).cloned();
            Some(async move {
                let failed = |reason: String| DiscoveryError {
                    agent: id.to_owned(),
                    reason,
                };
                let backend = backend.ok_or_else(|| {
                    failed(format!(
                        "no remote backend `{}` is registered",
                        endpoint.backend
                    ))
                })?;
                backend
                    .check_endpoint(endpoint)
                    .map_err(|e| failed(e.to_string()))?;
                match backend.discover(&spec.id, endpoint).await {
                    Ok(card) => Ok(Some((id.to_owned(), card))),
                    Err(RemoteError::Config(reason)) => Err(failed(reason)),
                    Err(error) => {
                        tracing::warn!(agent = %id, %error, "remote agent not discovered at start-up: its card is read at its first call");
                        Ok::<_, DiscoveryError>(None)
                    }
                }
            })
        });
        let cards = futures::future::join_all(lookups).await;
        for found in cards {
            if let Some((id, card)) = found? {
                self.registries.remote_cards.upsert(id, card);
            }
        }
        Ok(self)
    }

    /// [`discover_remote_agents`](Self::discover_remote_agents), then
    /// [`build`](Self::build).
    pub async fn build_and_discover(self) -> Result<AgentRuntime, BuildError> {
        self.discover_remote_agents().await?.build()
    }

    /// Persists threads, messages and runs here (default: in memory).
    pub fn with_thread_run_store(mut self, store: Arc<dyn ThreadRunStore>) -> Self {
        self.services.store = Some(store);
        self
    }

    /// Gives hooks and tools profile and shared state backed by `store`.
    pub fn with_profile_store(mut self, store: Arc<dyn ProfileStore>) -> Self {
        self.services.profile = Some(ProfileAccess::new(store));
        self
    }

    /// Sends every run's events to `hub` as well (SSE replay, cluster fan-out).
    pub fn with_event_hub(mut self, hub: Arc<dyn EventHub>) -> Self {
        self.services.hub = Some(hub);
        self
    }

    /// Keeps the approval feed in `sink` (a cluster's JetStream stream) rather
    /// than in the node's memory.
    pub fn with_approval_sink(mut self, sink: Arc<dyn FeedSink>) -> Self {
        self.services.approval_sink = Some(sink);
        self
    }

    /// Uses another source of checkpoint fencing tokens (the cluster's leases).
    pub fn with_fence_source(mut self, fence: Arc<dyn FenceSource>) -> Self {
        self.services.fence = Some(fence);
        self
    }

    /// Tunes thread actors (passivation, restarts).
    pub fn with_thread_config(mut self, config: ThreadConfig) -> Self {
        self.services.config = config;
        self
    }

    /// The memory the runtime will keep within (the default budget unless one
    /// was given), for the parts of the node built beside it: its event hub,
    /// inbox and mailbox share it.
    pub fn memory(&mut self) -> Arc<NodeMemory> {
        Arc::clone(self.services.memory.get_or_insert_with(Arc::default))
    }

    /// Keeps the node's caches within `memory`'s shares (one budget shared with
    /// the node's other caches and its admission); a default budget otherwise.
    pub fn with_memory(mut self, memory: Arc<NodeMemory>) -> Self {
        self.services.memory = Some(memory);
        self
    }

    /// Runs this agent when a request names none and its thread has no previous agent.
    pub fn with_default_agent(mut self, agent: AgentId) -> Self {
        self.services.config.default_agent = Some(agent);
        self
    }

    /// Builds the runtime and dry-runs the resolution of every local agent, so a
    /// missing model, provider or plugin is reported at start-up.
    pub fn build(self) -> Result<AgentRuntime, BuildError> {
        let runtime = self.build_unchecked()?;
        super::live::validate_agents(&runtime.registries())?;
        Ok(runtime)
    }

    /// Builds the runtime without resolving agents (for lazily added agents).
    pub fn build_unchecked(mut self) -> Result<AgentRuntime, BuildError> {
        if !self.errors.is_empty() {
            return Err(self.errors.swap_remove(0));
        }
        Ok(AgentRuntime::new(Arc::new(self.registries), self.services))
    }
}
