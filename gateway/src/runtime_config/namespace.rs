//! The config namespaces (`agents`, `models`, `providers`, `mcp-servers`): their
//! JSON Schemas and the checks every entry passes before it is stored.

use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

use awaken_actors::contract::{AgentSpec, ModelSpec};
use awaken_actors::plugin::schema_violations;
use serde::de::DeserializeOwned;
use serde_json::Value as JsonValue;

use super::entries::{McpServerSpec, ProviderConfig};

/// Longest entry id accepted.
pub const MAX_ID_LEN: usize = 128;

/// One kind of config entry, named as in the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Namespace {
    /// Agent definitions (`AgentSpec`).
    Agents,
    /// Model ids mapped to a provider and an upstream model (`ModelSpec`).
    Models,
    /// Provider endpoints and scripts (`ProviderConfig`).
    Providers,
    /// MCP servers (`McpServerSpec`).
    McpServers,
}

impl Namespace {
    /// Every namespace, in the order listings use.
    pub const ALL: [Self; 4] = [
        Self::Agents,
        Self::Models,
        Self::Providers,
        Self::McpServers,
    ];

    /// The name used in URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agents => "agents",
            Self::Models => "models",
            Self::Providers => "providers",
            Self::McpServers => "mcp-servers",
        }
    }

    /// The JSON Schema every entry of this namespace is checked against.
    pub fn schema(self) -> &'static JsonValue {
        &SCHEMAS[self as usize].0
    }

    /// Checks `value` (schema, id, the entry's own rules) and returns the entry in
    /// its normal form, defaults filled in. `path_id`, when given, must match the
    /// body's `id`.
    pub fn check(self, value: &JsonValue, path_id: Option<&str>) -> Result<Entry, EntryError> {
        if let Some(problems) = schema_violations(&SCHEMAS[self as usize].1, value) {
            return Err(EntryError::Invalid(problems));
        }
        let entry = match self {
            Self::Agents => Entry::Agent(Box::new(parse(value)?)),
            Self::Models => Entry::Model(parse(value)?),
            Self::Providers => Entry::Provider(parse(value)?),
            Self::McpServers => {
                let spec: McpServerSpec = parse(value)?;
                spec.check().map_err(EntryError::Invalid)?;
                Entry::McpServer(spec)
            }
        };
        let id = entry.id();
        check_id(id)?;
        if let Some(path_id) = path_id
            && path_id != id
        {
            return Err(EntryError::IdMismatch {
                path: path_id.to_owned(),
                body: id.to_owned(),
            });
        }
        Ok(entry)
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Namespace {
    type Err = EntryError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|ns| ns.as_str() == name)
            .ok_or_else(|| EntryError::UnknownNamespace(name.to_owned()))
    }
}

/// A checked entry of one namespace.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// An agent.
    Agent(Box<AgentSpec>),
    /// A model.
    Model(ModelSpec),
    /// A provider.
    Provider(ProviderConfig),
    /// An MCP server.
    McpServer(McpServerSpec),
}

impl Entry {
    /// The entry's id.
    pub fn id(&self) -> &str {
        match self {
            Self::Agent(spec) => spec.id.as_str(),
            Self::Model(spec) => &spec.id,
            Self::Provider(config) => &config.id,
            Self::McpServer(spec) => &spec.id,
        }
    }

    /// The entry's namespace.
    pub fn namespace(&self) -> Namespace {
        match self {
            Self::Agent(_) => Namespace::Agents,
            Self::Model(_) => Namespace::Models,
            Self::Provider(_) => Namespace::Providers,
            Self::McpServer(_) => Namespace::McpServers,
        }
    }

    /// The entry as stored and served: its normal JSON form.
    pub fn to_json(&self) -> JsonValue {
        let value = match self {
            Self::Agent(spec) => serde_json::to_value(spec),
            Self::Model(spec) => serde_json::to_value(spec),
            Self::Provider(config) => serde_json::to_value(config),
            Self::McpServer(spec) => serde_json::to_value(spec),
        };
        // These types serialize to JSON by construction (string keys, no NaN).
        value.unwrap_or(JsonValue::Null)
    }
}

/// Why an entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The URL names no namespace.
    #[error("unknown config namespace `{0}` (known: agents, models, providers, mcp-servers)")]
    UnknownNamespace(String),
    /// The entry does not match its schema or its own rules.
    #[error("{0}")]
    Invalid(String),
    /// The body's id is not the one in the path.
    #[error("the body's id `{body}` is not the path's `{path}`")]
    IdMismatch {
        /// The id in the URL.
        path: String,
        /// The id in the body.
        body: String,
    },
}

fn parse<T: DeserializeOwned>(value: &JsonValue) -> Result<T, EntryError> {
    T::deserialize(value).map_err(|e| EntryError::Invalid(e.to_string()))
}

fn check_id(id: &str) -> Result<(), EntryError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':');
    if id.is_empty() || id.len() > MAX_ID_LEN || !id.chars().all(allowed) {
        return Err(EntryError::Invalid(format!(
            "id `{id}`: 1 to {MAX_ID_LEN} characters of A-Z a-z 0-9 - _ . :"
        )));
    }
    Ok(())
}

/// Each namespace's schema and its compiled validator, in `Namespace` order.
static SCHEMAS: LazyLock<Vec<(JsonValue, jsonschema::Validator)>> = LazyLock::new(|| {
    Namespace::ALL
        .into_iter()
        .map(|ns| {
            let mut schema = match ns {
                Namespace::Agents => schema_of::<AgentSpec>(),
                Namespace::Models => schema_of::<ModelSpec>(),
                Namespace::Providers => schema_of::<ProviderConfig>(),
                Namespace::McpServers => schema_of::<McpServerSpec>(),
            };
            // Unknown fields are refused in every namespace: a typo must not be
            // stored and silently ignored.
            if let Some(root) = schema.as_object_mut() {
                root.insert("additionalProperties".into(), JsonValue::Bool(false));
                root.insert(
                    "title".into(),
                    JsonValue::String(format!("awaken config: {ns}")),
                );
            }
            let validator = jsonschema::validator_for(&schema)
                .unwrap_or_else(|e| unreachable!("generated schema for {ns} compiles: {e}"));
            (schema, validator)
        })
        .collect()
});

fn schema_of<T: schemars::JsonSchema>() -> JsonValue {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(JsonValue::Null)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_schema_compiles_and_refuses_unknown_fields() {
        for namespace in Namespace::ALL {
            let schema = namespace.schema();
            assert_eq!(schema["additionalProperties"], json!(false), "{namespace}");
            assert!(
                schema["required"]
                    .as_array()
                    .is_some_and(|r| r.contains(&json!("id"))),
                "{namespace}: {schema}"
            );
            assert_eq!(namespace.as_str().parse::<Namespace>(), Ok(namespace));
        }
        assert!(matches!(
            "tools".parse::<Namespace>(),
            Err(EntryError::UnknownNamespace(_))
        ));
    }

    #[test]
    fn entries_come_back_in_normal_form() {
        let agent = Namespace::Agents
            .check(&json!({"id": "a", "model": "m"}), Some("a"))
            .unwrap();
        assert_eq!(agent.to_json()["max_rounds"], json!(16));
        assert_eq!(agent.namespace(), Namespace::Agents);
        let provider = Namespace::Providers
            .check(
                &json!({"id": "p", "adapter": "scripted", "script": {"steps": [{"text": "hi"}]}}),
                None,
            )
            .unwrap();
        assert_eq!(
            provider.to_json()["script"]["after_last"],
            json!("repeat_last")
        );
        let mcp = Namespace::McpServers
            .check(
                &json!({"id": "fs", "transport": {"kind": "stdio", "command": "mcp-fs"}}),
                None,
            )
            .unwrap();
        assert_eq!(mcp.id(), "fs");
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for (namespace, value, needle) in [
            (
                Namespace::Agents,
                json!({"model": "m"}),
                "\"id\" is a required",
            ),
            (Namespace::Agents, json!({"id": "a", "modle": "m"}), "modle"),
            (
                Namespace::Agents,
                json!({"id": "a", "max_rounds": "x"}),
                "/max_rounds",
            ),
            (Namespace::Agents, json!({"id": "a b"}), "a b"),
            (
                Namespace::Models,
                json!({"id": "m", "provider": "p"}),
                "model",
            ),
            (
                Namespace::Models,
                json!({"id": "m/1", "provider": "p", "model": "x"}),
                "m/1",
            ),
            (Namespace::Providers, json!({"id": "p"}), "adapter"),
            (
                Namespace::Providers,
                json!({"id": "p", "adapter": "scripted", "script": {"steps": [{"txt": "x"}]}}),
                "txt",
            ),
            (
                Namespace::McpServers,
                json!({"id": "x", "transport": {"kind": "http", "url": "ftp://x"}}),
                "ftp://x",
            ),
            (
                Namespace::McpServers,
                json!({"id": "x", "transport": {"kind": "pipe"}}),
                "transport",
            ),
            (Namespace::Models, json!([1, 2]), "object"),
        ] {
            let error = namespace.check(&value, None).unwrap_err().to_string();
            assert!(error.contains(needle), "{namespace} {value}: {error}");
        }
        let too_long = "a".repeat(MAX_ID_LEN + 1);
        assert!(
            Namespace::Models
                .check(
                    &json!({"id": too_long, "provider": "p", "model": "x"}),
                    None
                )
                .is_err()
        );
        let mismatch = Namespace::Models
            .check(
                &json!({"id": "m", "provider": "p", "model": "x"}),
                Some("n"),
            )
            .unwrap_err();
        assert_eq!(
            mismatch,
            EntryError::IdMismatch {
                path: "n".into(),
                body: "m".into()
            }
        );
    }
}
