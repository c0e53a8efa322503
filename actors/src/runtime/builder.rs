//! `AgentRuntimeBuilder` and the `AgentRuntime` it produces.

use std::sync::Arc;

use super::registry::RegistrySet;
use super::resolve::{ResolvedAgent, resolve};
use crate::contract::{AgentSpec, ModelSpec};
use crate::error::{BuildError, ResolveError};
use crate::llm::LlmExecutor;
use crate::plugin::Plugin;
use crate::tool::Tool;

/// The assembled runtime: registries plus the operations over them.
#[derive(Debug, Clone)]
pub struct AgentRuntime {
    registries: Arc<RegistrySet>,
}

impl AgentRuntime {
    /// The registries this runtime resolves from.
    pub fn registries(&self) -> &Arc<RegistrySet> {
        &self.registries
    }

    /// Resolves an agent id into a runnable agent.
    pub fn resolve(&self, agent_id: &str) -> Result<ResolvedAgent, ResolveError> {
        resolve(&self.registries, agent_id)
    }
}

/// Collects agents, tools, models, providers and plugins, then builds and validates
/// an [`AgentRuntime`].
///
/// Registration never fails on the spot: a duplicate id is remembered and the first
/// such error is returned by [`build`](Self::build), so configuration reads as one
/// fluent chain.
#[derive(Debug, Default)]
pub struct AgentRuntimeBuilder {
    registries: RegistrySet,
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

    /// Builds the runtime and dry-runs the resolution of every local agent, so a
    /// missing model, provider or plugin is reported at start-up.
    pub fn build(self) -> Result<AgentRuntime, BuildError> {
        let runtime = self.build_unchecked()?;
        for (id, spec) in runtime.registries.agents.iter() {
            if spec.endpoint.is_some() {
                continue;
            }
            match runtime.resolve(id) {
                Ok(_) => {}
                Err(ResolveError::EnvBuild(state)) => return Err(BuildError::State(state)),
                Err(err) => {
                    return Err(BuildError::ValidationFailed(format!("agent `{id}`: {err}")));
                }
            }
        }
        Ok(runtime)
    }

    /// Builds the runtime without resolving agents (for lazily added agents).
    pub fn build_unchecked(mut self) -> Result<AgentRuntime, BuildError> {
        if !self.errors.is_empty() {
            return Err(self.errors.swap_remove(0));
        }
        Ok(AgentRuntime {
            registries: Arc::new(self.registries),
        })
    }
}
