//! Agent resolution: `(RegistrySet, agent_id) → ResolvedAgent`, in three stages.
//!
//! 1. Lookup: spec, model, provider; wrap the executor in retries when the spec's
//!    `retry` section asks for it.
//! 2. Plugins: the spec's plugins plus the runtime's required ones (among them one
//!    `StopConditionPlugin` from `max_rounds` and the `stop_conditions` section),
//!    config sections validated against every plugin's JSON Schema and then by the
//!    plugin itself (`Plugin::validate_config`), then the `ExecutionEnv`.
//! 3. Tools: global tools, one `agent_run_<id>` tool per local delegate, plugin
//!    tools (a clash is an error), then the spec's allowed / excluded filters.
//!
//! Every failure aborts with a [`ResolveError`]; nothing partial is returned.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use super::registry::RegistrySet;
use crate::actions::LoopActionHandlersPlugin;
use crate::context::{
    CompactionConfig, CompactionConfigKey, CompactionPlugin, ContextTransformPlugin,
};
use crate::contract::{AgentSpec, ModelSpec, PluginConfigKey, ToolDescriptor};
use crate::delegation::{AgentTool, DelegationConfigKey, RemoteAgentTool};
use crate::error::ResolveError;
use crate::llm::{
    CircuitBreakerConfigKey, CircuitBreakerExecutor, LlmExecutor, RetryConfigKey, RetryingExecutor,
};
use crate::plugin::{ConfigSchema, ExecutionEnv, PluginEntry, schema_violations};
use crate::policies::{MaxRoundsPlugin, StopConditionPlugin, StopConditionsConfigKey};
use crate::tool::Tool;

/// The owner name used for config sections the runtime itself claims.
const RUNTIME_OWNER: &str = "runtime";

/// An agent with live references to everything a run needs.
#[derive(Clone)]
pub struct ResolvedAgent {
    /// The agent definition.
    pub spec: Arc<AgentSpec>,
    /// The resolved model entry (provider and upstream model name).
    pub model: ModelSpec,
    /// The executor, decorated with retries when configured.
    pub executor: Arc<dyn LlmExecutor>,
    /// Tools offered to the model, by id, after filtering.
    pub tools: BTreeMap<String, Arc<dyn Tool>>,
    /// The tools' descriptors, in id order, as offered to the model.
    pub tool_descriptors: Arc<[ToolDescriptor]>,
    /// Hooks, handlers, transforms and keys of the agent's plugins.
    pub env: Arc<ExecutionEnv>,
    /// Non-fatal findings, such as config sections no plugin claims.
    pub warnings: Vec<String>,
}

impl fmt::Debug for ResolvedAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedAgent")
            .field("agent", &self.spec.id)
            .field("model", &self.model)
            .field("executor", &self.executor.name())
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("env", &self.env)
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// Resolves agent ids into runnable agents.
pub trait AgentResolver: Send + Sync {
    /// Resolves one agent; nothing is cached between calls.
    fn resolve(&self, agent_id: &str) -> Result<ResolvedAgent, ResolveError>;

    /// Resolves a handoff variant of an agent: its spec with the variant's overlay
    /// laid over it.
    fn resolve_variant(&self, agent_id: &str, variant: &str)
    -> Result<ResolvedAgent, ResolveError>;
}

/// The resolver thread actors use: the pipeline over one immutable [`RegistrySet`],
/// memoized per agent id.
///
/// Resolution is a pure function of the registries, and a `ResolvedAgent` is
/// immutable and shared by `Arc`s, so each agent is resolved once per registry set
/// rather than once per run (see `docs/decisions/0013-resolved-agent-cache.md`). A
/// configuration change builds a new registry set, and with it a new resolver.
#[derive(Debug, Clone)]
pub struct RegistryResolver {
    registries: Arc<RegistrySet>,
    resolved: Arc<dashmap::DashMap<String, ResolvedAgent>>,
}

impl RegistryResolver {
    /// A resolver over these registries.
    pub fn new(registries: Arc<RegistrySet>) -> Self {
        Self {
            registries,
            resolved: Arc::new(dashmap::DashMap::new()),
        }
    }

    /// The registries this resolver reads.
    pub fn registries(&self) -> &Arc<RegistrySet> {
        &self.registries
    }
}

impl AgentResolver for RegistryResolver {
    fn resolve(&self, agent_id: &str) -> Result<ResolvedAgent, ResolveError> {
        if let Some(agent) = self.resolved.get(agent_id) {
            return Ok(agent.clone());
        }
        // Failures are not cached: they are cheap to repeat and must not outlive a
        // transient cause.
        let agent = resolve(&self.registries, agent_id)?;
        self.resolved.insert(agent_id.to_owned(), agent.clone());
        Ok(agent)
    }

    fn resolve_variant(
        &self,
        agent_id: &str,
        variant: &str,
    ) -> Result<ResolvedAgent, ResolveError> {
        // Agent ids cannot hold a NUL, so the key cannot collide with a plain id.
        let key = format!("{agent_id}\u{0}{variant}");
        if let Some(agent) = self.resolved.get(&key) {
            return Ok(agent.clone());
        }
        let base = self.resolve(agent_id)?;
        let agent = resolve_variant_of(&self.registries, &base, variant)?;
        self.resolved.insert(key, agent.clone());
        Ok(agent)
    }
}

/// Resolves `variant` of the already resolved `base`.
pub(super) fn resolve_variant_of(
    registries: &RegistrySet,
    base: &ResolvedAgent,
    variant: &str,
) -> Result<ResolvedAgent, ResolveError> {
    let overlay =
        base.env
            .agent_variants()
            .get(variant)
            .ok_or_else(|| ResolveError::UnknownVariant {
                agent: base.spec.id.to_string(),
                variant: variant.to_owned(),
            })?;
    resolve_spec(registries, Arc::new(overlay.apply_to(&base.spec)))
}

/// Runs the three-stage pipeline for `agent_id`.
pub fn resolve(registries: &RegistrySet, agent_id: &str) -> Result<ResolvedAgent, ResolveError> {
    // Stage 1: lookup.
    let spec = registries
        .agents
        .get(agent_id)
        .cloned()
        .ok_or_else(|| ResolveError::AgentNotFound(agent_id.to_owned()))?;
    if spec.endpoint.is_some() {
        return Err(ResolveError::RemoteAgentNotDirectlyRunnable(
            agent_id.to_owned(),
        ));
    }
    resolve_spec(registries, spec)
}

/// Stages 1 (model and provider) to 3 for a local agent's spec.
fn resolve_spec(
    registries: &RegistrySet,
    spec: Arc<AgentSpec>,
) -> Result<ResolvedAgent, ResolveError> {
    let mut warnings = Vec::new();
    let model = registries
        .models
        .get(&spec.model)
        .cloned()
        .ok_or_else(|| ResolveError::ModelNotFound(spec.model.clone()))?;
    let mut executor = registries
        .providers
        .get(&model.provider)
        .cloned()
        .ok_or_else(|| ResolveError::ProviderNotFound(model.provider.clone()))?;
    let mut schemas = vec![
        (
            RUNTIME_OWNER.to_owned(),
            ConfigSchema::of::<RetryConfigKey>(),
        ),
        (
            RUNTIME_OWNER.to_owned(),
            ConfigSchema::of::<CircuitBreakerConfigKey>(),
        ),
        (
            RUNTIME_OWNER.to_owned(),
            ConfigSchema::of::<DelegationConfigKey>(),
        ),
        (
            StopConditionPlugin::ID.to_owned(),
            ConfigSchema::of::<StopConditionsConfigKey>(),
        ),
    ];
    let runtime_sections = schemas.len();
    validate_sections(&spec, &schemas)?;
    // The breaker sits inside the retries, so an open circuit moves on to fallbacks.
    if spec.sections.contains_key(CircuitBreakerConfigKey::KEY) {
        let config = spec.config::<CircuitBreakerConfigKey>().map_err(|e| {
            invalid_config(RUNTIME_OWNER, CircuitBreakerConfigKey::KEY, e.to_string())
        })?;
        let breaker = registries.breakers.get(&model.provider, &config);
        executor = Arc::new(CircuitBreakerExecutor::with_breaker(executor, breaker));
    }
    if spec.sections.contains_key(RetryConfigKey::KEY) {
        let policy = spec
            .config::<RetryConfigKey>()
            .map_err(|e| invalid_config(RUNTIME_OWNER, RetryConfigKey::KEY, e.to_string()))?;
        if policy.is_active() {
            executor = Arc::new(RetryingExecutor::new(executor, policy));
        }
    }

    // Stage 2: plugins. One stop plugin: the agent's own when it lists a registered
    // `stop-condition` or `stop-condition:max-rounds` plugin (book: "register a
    // StopConditionPlugin with the runtime builder"); otherwise `max_rounds`, then the
    // `stop_conditions`, then the builder's custom policies.
    let listed = |id: &str| {
        registries.plugins.get(id).is_some()
            && spec
                .plugin_ids
                .iter()
                .chain(spec.active_hook_filter.iter())
                .any(|p| p == id)
    };
    let own_stop_plugin = listed(StopConditionPlugin::ID) || listed(MaxRoundsPlugin::ID);
    let stop_conditions = spec.config::<StopConditionsConfigKey>().map_err(|e| {
        invalid_config(
            StopConditionPlugin::ID,
            StopConditionsConfigKey::KEY,
            e.to_string(),
        )
    })?;
    let mut entries = vec![PluginEntry::required(
        LoopActionHandlersPlugin::ID,
        Arc::new(LoopActionHandlersPlugin),
    )];
    if !own_stop_plugin {
        let stop_plugin = StopConditionPlugin::for_agent(spec.max_rounds, &stop_conditions)
            .map_err(|e| {
                invalid_config(
                    StopConditionPlugin::ID,
                    StopConditionsConfigKey::KEY,
                    e.to_string(),
                )
            })?
            .and_policies(&registries.stop_policies);
        entries.push(PluginEntry::required(
            StopConditionPlugin::ID,
            Arc::new(stop_plugin),
        ));
    }
    if let Some(policy) = &spec.context_policy {
        // The section is validated below with the other plugins' schemas; a section
        // that does not decode falls back to defaults only when absent.
        let compaction = if spec.sections.contains_key(CompactionConfigKey::KEY) {
            spec.config::<CompactionConfigKey>().map_err(|e| {
                invalid_config(
                    CompactionPlugin::ID,
                    CompactionConfigKey::KEY,
                    e.to_string(),
                )
            })?
        } else {
            CompactionConfig::default()
        };
        entries.push(PluginEntry::required(
            CompactionPlugin::ID,
            Arc::new(CompactionPlugin::new(compaction)),
        ));
        entries.push(PluginEntry::required(
            ContextTransformPlugin::ID,
            Arc::new(ContextTransformPlugin::new(policy.clone())),
        ));
    }
    // Plugins come from `plugin_ids`; a plugin named only in `active_hook_filter` is
    // installed too, since naming it there is how the book activates a plugin
    // (see docs/decisions/0003-hook-filter-installs-plugins.md).
    let mut wanted: Vec<&str> = Vec::new();
    for id in spec.plugin_ids.iter().chain(spec.active_hook_filter.iter()) {
        if !wanted.contains(&id.as_str()) {
            wanted.push(id);
        }
    }
    for id in wanted {
        let plugin = registries
            .plugins
            .get(id)
            .cloned()
            .ok_or_else(|| ResolveError::PluginNotFound(id.to_owned()))?;
        entries.push(PluginEntry::new(id, plugin));
    }
    for entry in &entries {
        schemas.extend(
            entry
                .plugin
                .config_schemas()
                .into_iter()
                .map(|schema| (entry.id.clone(), schema)),
        );
    }
    // The runtime's own sections were validated above.
    validate_sections(&spec, &schemas[runtime_sections..])?;
    for entry in &entries {
        entry
            .plugin
            .validate_config(&spec)
            .map_err(|e| invalid_config(&entry.id, &e.key, e.message))?;
    }
    let claimed: BTreeSet<&str> = schemas.iter().map(|(_, s)| s.key.as_str()).collect();
    for key in spec.sections.keys() {
        if !claimed.contains(key.as_str()) {
            tracing::warn!(agent = %spec.id, section = %key, "config section is not claimed by any plugin");
            warnings.push(format!(
                "config section `{key}` is not claimed by any plugin"
            ));
        }
    }
    let env = ExecutionEnv::from_plugins(entries, &spec.active_hook_filter)
        .map_err(ResolveError::EnvBuild)?;

    // Stage 3: tools.
    let mut tools: BTreeMap<String, Arc<dyn Tool>> = registries
        .tools
        .iter()
        .map(|(id, tool)| (id.to_owned(), Arc::clone(tool)))
        .collect();
    for delegate in &spec.delegates {
        let Some(delegate_spec) = registries.agents.get(delegate) else {
            return Err(ResolveError::AgentNotFound(delegate.clone()));
        };
        let tool: Arc<dyn Tool> = match &delegate_spec.endpoint {
            Some(_) => Arc::new(remote_tool(registries, delegate_spec)?),
            None => Arc::new(AgentTool::new(delegate_spec)),
        };
        let id = tool.descriptor().id;
        if tools.contains_key(&id) {
            return Err(ResolveError::ToolIdConflict {
                tool_id: id,
                source_a: "global tools".to_owned(),
                source_b: format!("delegate `{delegate}`"),
            });
        }
        tools.insert(id, tool);
    }
    for (id, plugin_tool) in env.tools() {
        if tools.contains_key(id) {
            return Err(ResolveError::ToolIdConflict {
                tool_id: id.clone(),
                source_a: "global tools".to_owned(),
                source_b: format!("plugin `{}`", plugin_tool.plugin_id),
            });
        }
        tools.insert(id.clone(), Arc::clone(&plugin_tool.tool));
    }
    if let Some(allowed) = &spec.allowed_tools {
        tools.retain(|id, _| allowed.contains(id));
    }
    if let Some(excluded) = &spec.excluded_tools {
        tools.retain(|id, _| !excluded.contains(id));
    }

    let tool_descriptors = tools.values().map(|tool| tool.descriptor()).collect();
    Ok(ResolvedAgent {
        spec,
        model,
        executor,
        tools,
        tool_descriptors,
        env: Arc::new(env),
        warnings,
    })
}

/// The tool that reaches remote agent `spec` through its endpoint's backend, once
/// the backend accepts the endpoint.
pub(super) fn remote_tool(
    registries: &RegistrySet,
    spec: &AgentSpec,
) -> Result<RemoteAgentTool, ResolveError> {
    let agent = spec.id.to_string();
    let endpoint = spec
        .endpoint
        .as_ref()
        .ok_or_else(|| ResolveError::AgentNotFound(agent.clone()))?;
    let backend = registries
        .remote_backends
        .get(&endpoint.backend)
        .cloned()
        .ok_or_else(|| ResolveError::RemoteBackendNotFound {
            agent: agent.clone(),
            backend: endpoint.backend.clone(),
        })?;
    backend
        .check_endpoint(endpoint)
        .map_err(|error| ResolveError::InvalidRemoteEndpoint {
            agent: agent.clone(),
            message: error.to_string(),
        })?;
    let card = registries.remote_cards.get(&agent).cloned();
    Ok(RemoteAgentTool::new(spec, endpoint.clone(), backend, card))
}

fn invalid_config(plugin: &str, key: &str, message: String) -> ResolveError {
    ResolveError::InvalidPluginConfig {
        plugin: plugin.to_owned(),
        key: key.to_owned(),
        message,
    }
}

/// Validates every present section that one of `schemas` claims.
fn validate_sections(
    spec: &AgentSpec,
    schemas: &[(String, ConfigSchema)],
) -> Result<(), ResolveError> {
    for (owner, schema) in schemas {
        let Some(section) = spec.sections.get(&schema.key) else {
            continue;
        };
        let schema_json = serde_json::to_value(&schema.json_schema)
            .map_err(|e| invalid_config(owner, &schema.key, format!("unusable schema: {e}")))?;
        let validator = jsonschema::validator_for(&schema_json)
            .map_err(|e| invalid_config(owner, &schema.key, format!("unusable schema: {e}")))?;
        if let Some(problems) = schema_violations(&validator, section) {
            return Err(invalid_config(owner, &schema.key, problems));
        }
    }
    Ok(())
}
