//! The `Plugin` trait and its descriptor.

use crate::contract::{AgentSpec, PluginConfigKey};
use crate::error::StateError;

use super::registrar::PluginRegistrar;

/// Identifies a plugin in diagnostics and capability listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginDescriptor {
    /// Short name.
    pub name: String,
    /// What the plugin does, one line.
    pub description: String,
}

impl PluginDescriptor {
    /// A descriptor with a name and a description.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
        }
    }
}

/// A JSON Schema for one `AgentSpec.sections` entry, validated at resolve time.
#[derive(Debug, Clone)]
pub struct ConfigSchema {
    /// The section key.
    pub key: String,
    /// The schema the section must satisfy.
    pub json_schema: schemars::Schema,
}

impl ConfigSchema {
    /// The schema generated from `K::Config`.
    pub fn of<K: PluginConfigKey>() -> Self {
        Self {
            key: K::KEY.to_owned(),
            json_schema: schemars::schema_for!(K::Config),
        }
    }
}

/// Every way `value` breaks `validator`'s schema, each prefixed with the JSON
/// pointer of the offending part and joined by `; `; `None` when it conforms.
pub fn schema_violations(
    validator: &jsonschema::Validator,
    value: &serde_json::Value,
) -> Option<String> {
    let problems: Vec<String> = validator
        .iter_errors(value)
        .map(|error| {
            let path = error.instance_path().to_string();
            if path.is_empty() {
                error.to_string()
            } else {
                format!("{path}: {error}")
            }
        })
        .collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// A config section that satisfies its JSON Schema but is still unusable (a pattern
/// that does not compile, say); the resolver reports it as `InvalidPluginConfig`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config section `{key}`: {message}")]
pub struct PluginConfigError {
    /// The section key.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl PluginConfigError {
    /// An error about section `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// A system-level extension: invisible to the model, active at phase boundaries.
pub trait Plugin: Send + Sync + 'static {
    /// Name and description.
    fn descriptor(&self) -> PluginDescriptor;

    /// Declares the plugin's keys, hooks, tools, handlers and transforms.
    fn register(&self, registrar: &mut PluginRegistrar) -> Result<(), StateError>;

    /// Schemas for the config sections this plugin reads.
    fn config_schemas(&self) -> Vec<ConfigSchema> {
        Vec::new()
    }

    /// Checks this plugin's sections of `spec` beyond their JSON Schema, so that
    /// configuration errors surface when the agent is resolved, not at its first run.
    /// Called after schema validation.
    fn validate_config(&self, spec: &AgentSpec) -> Result<(), PluginConfigError> {
        let _ = spec;
        Ok(())
    }
}
