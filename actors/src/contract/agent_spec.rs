//! Agent definitions: the serializable [`AgentSpec`] and its typed config sections.
//!
//! An agent spec names a model, a system prompt, the plugins and tools it uses, its
//! delegates, and per-plugin configuration in `sections` (read with
//! [`AgentSpec::config`] through a [`PluginConfigKey`]). An agent with an `endpoint`
//! runs elsewhere (today over A2A) and can only be used as a delegate.
//!
//! # Strict loading, lenient decoding
//!
//! [`AgentSpec::from_json`] and [`AgentSpec::from_yaml`] load specs written by people,
//! so a misspelled field (`max_round: 5`) is an error naming the field instead of a
//! silently ignored setting. Plain `Deserialize` stays lenient on purpose: specs also
//! travel between nodes and stores, and a node must be able to read a spec written by a
//! newer node that added a field. The strict check compares the top-level keys with
//! the properties of [`AgentSpec::json_schema`], so it can never drift from the struct.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::JsonValue;
use crate::contract::inference::ContextWindowPolicy;
use crate::error::StateError;
use crate::ids::AgentId;

/// Default for [`AgentSpec::max_rounds`].
pub const DEFAULT_MAX_ROUNDS: u32 = 16;
/// Default for [`AgentSpec::max_continuation_retries`].
pub const DEFAULT_MAX_CONTINUATION_RETRIES: u32 = 2;
/// Default for [`RemoteEndpoint::timeout_ms`]: five minutes.
pub const DEFAULT_REMOTE_TIMEOUT_MS: u64 = 300_000;

fn default_max_rounds() -> u32 {
    DEFAULT_MAX_ROUNDS
}

fn default_max_continuation_retries() -> u32 {
    DEFAULT_MAX_CONTINUATION_RETRIES
}

fn default_remote_timeout_ms() -> u64 {
    DEFAULT_REMOTE_TIMEOUT_MS
}

/// How the runtime executes the tool calls of one inference step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolExecutionMode {
    /// One call at a time, in order; stops at the first suspension.
    #[default]
    Sequential,
    /// All calls concurrently; decisions are replayed once every suspended call has one.
    ParallelBatchApproval,
    /// All calls concurrently; each decision is replayed as soon as it arrives.
    ParallelStreaming,
}

/// Credentials for a remote agent endpoint: a `type` plus backend-specific fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RemoteAuth {
    /// The auth scheme, e.g. `bearer`.
    #[serde(rename = "type")]
    pub r#type: String,
    /// Scheme-specific fields, e.g. `token` for bearer.
    #[serde(flatten)]
    pub params: BTreeMap<String, JsonValue>,
}

impl RemoteAuth {
    /// Bearer-token auth.
    pub fn bearer(token: impl Into<String>) -> Self {
        let mut params = BTreeMap::new();
        params.insert("token".to_owned(), JsonValue::String(token.into()));
        Self {
            r#type: "bearer".to_owned(),
            params,
        }
    }
}

/// Where and how to reach an agent that runs on another backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RemoteEndpoint {
    /// The backend protocol; today `a2a`.
    pub backend: String,
    /// The backend's base URL.
    pub base_url: String,
    /// Credentials, if the backend needs them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<RemoteAuth>,
    /// The agent to address on the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Overall timeout for one delegated run.
    #[serde(default = "default_remote_timeout_ms")]
    pub timeout_ms: u64,
    /// Backend-specific settings, e.g. `poll_interval_ms`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, JsonValue>,
}

impl RemoteEndpoint {
    /// An endpoint with no auth, no target and the default timeout.
    pub fn new(backend: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            backend: backend.into(),
            base_url: base_url.into(),
            auth: None,
            target: None,
            timeout_ms: DEFAULT_REMOTE_TIMEOUT_MS,
            options: BTreeMap::new(),
        }
    }
}

/// Binds a section key of [`AgentSpec::sections`] to a typed plugin configuration.
pub trait PluginConfigKey: 'static + Send + Sync {
    /// The section key.
    const KEY: &'static str;
    /// The configuration type stored under the key.
    type Config: Default
        + Clone
        + Serialize
        + DeserializeOwned
        + schemars::JsonSchema
        + Send
        + Sync
        + 'static;
}

/// Why an agent spec could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The JSON was malformed or did not match the spec's shape.
    #[error("invalid agent spec JSON: {0}")]
    Json(String),
    /// The YAML was malformed or did not match the spec's shape.
    #[error("invalid agent spec YAML: {0}")]
    Yaml(String),
    /// A top-level field the spec does not have (often a typo).
    #[error("unknown agent spec field `{field}`")]
    UnknownField {
        /// The offending field name.
        field: String,
    },
    /// The spec parsed but is not valid (e.g. a bad id).
    #[error("invalid agent spec: {0}")]
    Invalid(String),
}

/// A serializable agent definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentSpec {
    /// The agent's registry id.
    pub id: AgentId,
    /// Model registry id (resolved through the model registry).
    #[serde(default)]
    pub model: String,
    /// System prompt.
    #[serde(default)]
    pub system_prompt: String,
    /// Inference rounds allowed per run.
    #[serde(default = "default_max_rounds")]
    pub max_rounds: u32,
    /// Retries after output truncated mid tool call.
    #[serde(default = "default_max_continuation_retries")]
    pub max_continuation_retries: u32,
    /// Context-window management; `None` uses the runtime default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_policy: Option<ContextWindowPolicy>,
    /// Plugins this agent uses, by id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugin_ids: Vec<String>,
    /// When non-empty, only these plugins' hooks run.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub active_hook_filter: BTreeSet<String>,
    /// When set, only these tools are offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Tools never offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_tools: Option<Vec<String>>,
    /// Set for agents that run on a remote backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<RemoteEndpoint>,
    /// Agents this one may delegate to (each becomes an `agent_run_<id>` tool).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegates: Vec<String>,
    /// Per-plugin configuration sections, by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sections: BTreeMap<String, JsonValue>,
    /// The registry this spec came from, for multi-registry setups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// How tool calls of one step execute.
    #[serde(default)]
    pub tool_execution_mode: ToolExecutionMode,
}

impl AgentSpec {
    /// A spec with defaults for everything but the id.
    pub fn new(id: AgentId) -> Self {
        Self {
            id,
            model: String::new(),
            system_prompt: String::new(),
            max_rounds: DEFAULT_MAX_ROUNDS,
            max_continuation_retries: DEFAULT_MAX_CONTINUATION_RETRIES,
            context_policy: None,
            plugin_ids: Vec::new(),
            active_hook_filter: BTreeSet::new(),
            allowed_tools: None,
            excluded_tools: None,
            endpoint: None,
            delegates: Vec::new(),
            sections: BTreeMap::new(),
            registry: None,
            tool_execution_mode: ToolExecutionMode::Sequential,
        }
    }

    /// Sets the model registry id.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Sets the system prompt.
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = prompt.into();
        self
    }

    /// Sets the round limit.
    pub fn with_max_rounds(mut self, max_rounds: u32) -> Self {
        self.max_rounds = max_rounds;
        self
    }

    /// Adds a plugin to the hook filter (only filtered plugins' hooks run).
    pub fn with_hook_filter(mut self, plugin_id: impl Into<String>) -> Self {
        self.active_hook_filter.insert(plugin_id.into());
        self
    }

    /// Adds a plugin the agent uses (once).
    pub fn with_plugin(mut self, plugin_id: impl Into<String>) -> Self {
        let plugin_id = plugin_id.into();
        if !self.plugin_ids.contains(&plugin_id) {
            self.plugin_ids.push(plugin_id);
        }
        self
    }

    /// Stores a typed plugin configuration section.
    pub fn with_config<K: PluginConfigKey>(
        mut self,
        config: K::Config,
    ) -> Result<Self, StateError> {
        self.set_config::<K>(config)?;
        Ok(self)
    }

    /// Adds a delegate agent (once).
    pub fn with_delegate(mut self, agent_id: impl Into<String>) -> Self {
        let agent_id = agent_id.into();
        if !self.delegates.contains(&agent_id) {
            self.delegates.push(agent_id);
        }
        self
    }

    /// Makes the agent remote.
    pub fn with_endpoint(mut self, endpoint: RemoteEndpoint) -> Self {
        self.endpoint = Some(endpoint);
        self
    }

    /// Sets a raw configuration section.
    pub fn with_section(mut self, key: impl Into<String>, value: JsonValue) -> Self {
        self.sections.insert(key.into(), value);
        self
    }

    /// Sets how tool calls execute.
    pub fn with_tool_execution_mode(mut self, mode: ToolExecutionMode) -> Self {
        self.tool_execution_mode = mode;
        self
    }

    /// Reads a typed configuration section; the default when absent.
    pub fn config<K: PluginConfigKey>(&self) -> Result<K::Config, StateError> {
        match self.sections.get(K::KEY) {
            None => Ok(K::Config::default()),
            Some(value) => K::Config::deserialize(value).map_err(|err| StateError::KeyDecode {
                key: K::KEY.to_owned(),
                message: err.to_string(),
            }),
        }
    }

    /// Writes a typed configuration section.
    pub fn set_config<K: PluginConfigKey>(&mut self, config: K::Config) -> Result<(), StateError> {
        let value = serde_json::to_value(config).map_err(|err| StateError::KeyEncode {
            key: K::KEY.to_owned(),
            message: err.to_string(),
        })?;
        self.sections.insert(K::KEY.to_owned(), value);
        Ok(())
    }

    /// Whether the agent runs on a remote backend.
    pub fn is_remote(&self) -> bool {
        self.endpoint.is_some()
    }

    /// The JSON Schema of agent specs (served by the config API).
    pub fn json_schema() -> schemars::Schema {
        schemars::schema_for!(AgentSpec)
    }

    /// Loads a spec from JSON, strictly (see the module docs).
    pub fn from_json(json: &str) -> Result<Self, SpecError> {
        let value: JsonValue =
            serde_json::from_str(json).map_err(|err| SpecError::Json(err.to_string()))?;
        Self::from_value_strict(value, SpecError::Json)
    }

    /// Loads a spec from YAML, strictly (see the module docs).
    pub fn from_yaml(yaml: &str) -> Result<Self, SpecError> {
        let value: JsonValue =
            serde_yaml_ng::from_str(yaml).map_err(|err| SpecError::Yaml(err.to_string()))?;
        Self::from_value_strict(value, SpecError::Yaml)
    }

    /// The spec as indented JSON.
    pub fn to_json_string_pretty(&self) -> Result<String, SpecError> {
        serde_json::to_string_pretty(self).map_err(|err| SpecError::Json(err.to_string()))
    }

    fn from_value_strict(
        value: JsonValue,
        format_error: fn(String) -> SpecError,
    ) -> Result<Self, SpecError> {
        let JsonValue::Object(object) = &value else {
            return Err(SpecError::Invalid("an agent spec must be a mapping".into()));
        };
        let known = known_fields();
        if let Some(field) = object.keys().find(|key| !known.contains(key.as_str())) {
            return Err(SpecError::UnknownField {
                field: field.clone(),
            });
        }
        match object.get("id") {
            Some(JsonValue::String(id)) => {
                AgentId::new(id.as_str())
                    .map_err(|err| SpecError::Invalid(format!("bad `id`: {err}")))?;
            }
            Some(_) => return Err(SpecError::Invalid("`id` must be a string".into())),
            None => {}
        }
        serde_json::from_value(value).map_err(|err| format_error(err.to_string()))
    }
}

/// Top-level field names of [`AgentSpec`], from its JSON Schema.
fn known_fields() -> &'static BTreeSet<String> {
    static FIELDS: OnceLock<BTreeSet<String>> = OnceLock::new();
    FIELDS.get_or_init(|| {
        AgentSpec::json_schema()
            .get("properties")
            .and_then(JsonValue::as_object)
            .map(|properties| properties.keys().cloned().collect())
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ORCHESTRATOR_JSON: &str = r#"{
        "id": "orchestrator",
        "model": "gpt-4o",
        "system_prompt": "You coordinate tasks across specialized agents.",
        "delegates": ["researcher", "writer", "reviewer"]
    }"#;

    const ORCHESTRATOR_YAML: &str = "
id: orchestrator
model: gpt-4o
system_prompt: You coordinate tasks across specialized agents.
delegates: [researcher, writer, reviewer]
";

    const REMOTE_JSON: &str = r#"{
        "id": "remote-analyst",
        "model": "unused-for-remote",
        "system_prompt": "",
        "endpoint": {
            "backend": "a2a",
            "base_url": "https://analyst.example.com/v1/a2a",
            "auth": { "type": "bearer", "token": "token-abc" },
            "target": "analyst",
            "timeout_ms": 300000,
            "options": {
                "poll_interval_ms": 1000
            }
        }
    }"#;

    const REMOTE_YAML: &str = "
id: remote-analyst
model: unused-for-remote
system_prompt: ''
endpoint:
  backend: a2a
  base_url: https://analyst.example.com/v1/a2a
  auth:
    type: bearer
    token: token-abc
  target: analyst
  timeout_ms: 300000
  options:
    poll_interval_ms: 1000
";

    fn orchestrator() -> AgentSpec {
        AgentSpec::new(AgentId::new("orchestrator").unwrap())
            .with_model("gpt-4o")
            .with_system_prompt("You coordinate tasks across specialized agents.")
            .with_delegate("researcher")
            .with_delegate("writer")
            .with_delegate("reviewer")
    }

    fn remote_analyst() -> AgentSpec {
        let mut endpoint = RemoteEndpoint::new("a2a", "https://analyst.example.com/v1/a2a");
        endpoint.auth = Some(RemoteAuth::bearer("token-abc"));
        endpoint.target = Some("analyst".into());
        endpoint
            .options
            .insert("poll_interval_ms".into(), json!(1000));
        AgentSpec::new(AgentId::new("remote-analyst").unwrap())
            .with_model("unused-for-remote")
            .with_endpoint(endpoint)
    }

    #[test]
    fn loads_the_book_orchestrator_example() {
        let from_json = AgentSpec::from_json(ORCHESTRATOR_JSON).unwrap();
        assert_eq!(from_json, orchestrator());
        assert_eq!(from_json.max_rounds, 16);
        assert_eq!(from_json.max_continuation_retries, 2);
        assert!(!from_json.is_remote());
        assert_eq!(AgentSpec::from_yaml(ORCHESTRATOR_YAML).unwrap(), from_json);
    }

    #[test]
    fn loads_the_book_remote_example() {
        let from_json = AgentSpec::from_json(REMOTE_JSON).unwrap();
        assert_eq!(from_json, remote_analyst());
        assert!(from_json.is_remote());
        assert_eq!(AgentSpec::from_yaml(REMOTE_YAML).unwrap(), from_json);

        let endpoint = serde_json::to_value(&from_json.endpoint).unwrap();
        assert_eq!(
            endpoint["auth"],
            json!({"type": "bearer", "token": "token-abc"})
        );
    }

    #[test]
    fn minimal_spec_serializes_defaults_only() {
        let spec = AgentSpec::new(AgentId::new("a").unwrap());
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            json!({
                "id": "a",
                "model": "",
                "system_prompt": "",
                "max_rounds": 16,
                "max_continuation_retries": 2,
                "tool_execution_mode": "sequential"
            })
        );
    }

    #[test]
    fn full_spec_round_trips_through_strict_loading() {
        let spec = remote_analyst()
            .with_max_rounds(5)
            .with_plugin("permission")
            .with_plugin("permission")
            .with_hook_filter("permission")
            .with_section("reminder", json!({"text": "be brief"}))
            .with_tool_execution_mode(ToolExecutionMode::ParallelStreaming);
        let spec = AgentSpec {
            context_policy: Some(ContextWindowPolicy::default()),
            allowed_tools: Some(vec!["search".into()]),
            excluded_tools: Some(vec!["rm".into()]),
            registry: Some("main".into()),
            delegates: vec!["helper".into()],
            ..spec
        };
        assert_eq!(spec.plugin_ids, vec!["permission".to_owned()]);
        let text = spec.to_json_string_pretty().unwrap();
        assert_eq!(AgentSpec::from_json(&text).unwrap(), spec);
        let yaml = serde_yaml_ng::to_string(&spec).unwrap();
        assert_eq!(AgentSpec::from_yaml(&yaml).unwrap(), spec);
    }

    #[test]
    fn strict_loading_names_unknown_fields() {
        let err = AgentSpec::from_json(r#"{"id": "a", "max_round": 5}"#).unwrap_err();
        assert_eq!(
            err,
            SpecError::UnknownField {
                field: "max_round".into()
            }
        );
        assert_eq!(err.to_string(), "unknown agent spec field `max_round`");
        let err = AgentSpec::from_yaml("id: a\nsystem_promt: hi\n").unwrap_err();
        assert_eq!(
            err,
            SpecError::UnknownField {
                field: "system_promt".into()
            }
        );
    }

    #[test]
    fn lenient_deserialize_ignores_unknown_fields() {
        let spec: AgentSpec =
            serde_json::from_value(json!({"id": "a", "added_in_v2": true})).unwrap();
        assert_eq!(spec, AgentSpec::new(AgentId::new("a").unwrap()));
    }

    #[test]
    fn strict_loading_rejects_bad_ids_and_shapes() {
        assert!(matches!(
            AgentSpec::from_json(r#"{"id": ""}"#),
            Err(SpecError::Invalid(message)) if message.contains("must not be empty")
        ));
        assert!(matches!(
            AgentSpec::from_json(r#"{"id": 7}"#),
            Err(SpecError::Invalid(_))
        ));
        assert!(matches!(
            AgentSpec::from_json(r#"["id"]"#),
            Err(SpecError::Invalid(_))
        ));
        assert!(matches!(
            AgentSpec::from_json(r#"{"model": "m"}"#),
            Err(SpecError::Json(message)) if message.contains("missing field `id`")
        ));
        assert!(matches!(AgentSpec::from_json("{"), Err(SpecError::Json(_))));
        assert!(matches!(
            AgentSpec::from_yaml("id: [unclosed"),
            Err(SpecError::Yaml(_))
        ));
        assert!(matches!(
            AgentSpec::from_yaml("id: a\nmax_rounds: many\n"),
            Err(SpecError::Yaml(_))
        ));
    }

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    struct ReminderConfig {
        text: String,
        every_rounds: u32,
    }

    struct ReminderKey;

    impl PluginConfigKey for ReminderKey {
        const KEY: &'static str = "reminder";
        type Config = ReminderConfig;
    }

    #[test]
    fn typed_config_sections() {
        let spec = AgentSpec::new(AgentId::new("a").unwrap());
        assert_eq!(
            spec.config::<ReminderKey>().unwrap(),
            ReminderConfig::default()
        );

        let config = ReminderConfig {
            text: "stay on topic".into(),
            every_rounds: 3,
        };
        let spec = spec.with_config::<ReminderKey>(config.clone()).unwrap();
        assert_eq!(
            spec.sections["reminder"],
            json!({"text": "stay on topic", "every_rounds": 3})
        );
        assert_eq!(spec.config::<ReminderKey>().unwrap(), config);

        let broken = spec.with_section("reminder", json!({"text": 5}));
        assert!(matches!(
            broken.config::<ReminderKey>(),
            Err(StateError::KeyDecode { key, .. }) if key == "reminder"
        ));
    }

    #[test]
    fn schema_covers_every_field() {
        let schema = serde_json::to_value(AgentSpec::json_schema()).unwrap();
        let properties: BTreeSet<_> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let expected: BTreeSet<String> = [
            "id",
            "model",
            "system_prompt",
            "max_rounds",
            "max_continuation_retries",
            "context_policy",
            "plugin_ids",
            "active_hook_filter",
            "allowed_tools",
            "excluded_tools",
            "endpoint",
            "delegates",
            "sections",
            "registry",
            "tool_execution_mode",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(properties, expected);
        assert_eq!(schema["required"], json!(["id"]));
    }

    #[test]
    fn tool_execution_mode_names() {
        assert_eq!(
            serde_json::to_value(ToolExecutionMode::ParallelBatchApproval).unwrap(),
            json!("parallel_batch_approval")
        );
        assert_eq!(ToolExecutionMode::default(), ToolExecutionMode::Sequential);
    }
}
