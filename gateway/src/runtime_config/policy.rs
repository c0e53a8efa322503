//! `EntryPolicy`: what entries written through the config API (and so stored for
//! every node) may make a node do beyond configuration: start programs, and read
//! environment variables to send to other hosts.
//!
//! Entries of `awaken.toml` are the operator's and are not checked. Entries of the
//! config document come from API callers; without this policy, anyone allowed to
//! write could run any command as the node's user (a stdio MCP server) or send any
//! of its environment variables or files (secrets) to a URL of their choice
//! (`token_env`, a provider's `api_key_env` or `api_key_file`).
//! The checks read the document only: nothing is started or contacted before they
//! pass.

use serde::{Deserialize, Serialize};
use serde_json::Value as JsonValue;

use super::document::{ConfigDocument, DocumentError};
use super::entries::{McpServerSpec, McpTransport};
use super::namespace::Namespace;

/// Environment variables a stdio MCP server of the config API may not set: they
/// would change which program runs or what it loads.
const RESERVED_ENV: [&str; 3] = ["PATH", "LD_", "DYLD_"];

/// The allow-lists for config API entries. Empty lists (the default) allow no
/// stdio MCP server and no `token_env` through the API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EntryPolicy {
    /// Programs a stdio MCP server may run, compared with `transport.command`
    /// exactly (use absolute paths). Allow only programs that are safe with any
    /// arguments.
    pub mcp_stdio_commands: Vec<String>,
    /// Environment variables an MCP server (`transport.token_env`), a remote
    /// agent (`endpoint.auth.token_env`) or a provider (`api_key_env`) may name.
    pub token_envs: Vec<String>,
    /// Files a provider (`api_key_file`) may name, compared exactly.
    pub token_files: Vec<std::path::PathBuf>,
}

impl EntryPolicy {
    /// Refuses the first entry of `document` the policy does not allow.
    pub fn check(&self, document: &ConfigDocument) -> Result<(), DocumentError> {
        for spec in document.mcp_servers()? {
            self.check_mcp_server(&spec)
                .map_err(|error| refused(Namespace::McpServers, &spec.id, error))?;
        }
        for (id, agent) in document.entries(Namespace::Agents) {
            // A remote agent's secrets: `token`, `key` or `client_secret` by
            // variable or file (see `a2a::client::auth`).
            for secret in ["token", "key", "client_secret"] {
                let auth = |suffix: &str| {
                    agent
                        .pointer(&format!("/endpoint/auth/{secret}_{suffix}"))
                        .and_then(JsonValue::as_str)
                };
                if let Some(variable) = auth("env") {
                    self.check_token_env(variable)
                        .map_err(|error| refused(Namespace::Agents, id, error))?;
                }
                if let Some(file) = auth("file") {
                    self.check_token_file(file)
                        .map_err(|error| refused(Namespace::Agents, id, error))?;
                }
            }
        }
        for (id, provider) in document.entries(Namespace::Providers) {
            if let Some(variable) = provider.get("api_key_env").and_then(JsonValue::as_str) {
                self.check_token_env(variable)
                    .map_err(|error| refused(Namespace::Providers, id, error))?;
            }
            if let Some(file) = provider.get("api_key_file").and_then(JsonValue::as_str) {
                self.check_token_file(file)
                    .map_err(|error| refused(Namespace::Providers, id, error))?;
            }
        }
        Ok(())
    }

    fn check_token_file(&self, file: &str) -> Result<(), String> {
        if self
            .token_files
            .iter()
            .any(|allowed| allowed.as_os_str() == file)
        {
            return Ok(());
        }
        Err(format!(
            "the file `{file}` is not in `server.config_api.token_files`"
        ))
    }

    fn check_mcp_server(&self, spec: &McpServerSpec) -> Result<(), String> {
        match &spec.transport {
            McpTransport::Stdio { command, env, .. } => {
                if !self
                    .mcp_stdio_commands
                    .iter()
                    .any(|allowed| allowed == command)
                {
                    return Err(format!(
                        "stdio command `{command}` is not in \
                         `server.config_api.mcp_stdio_commands` (stdio servers come from \
                         awaken.toml or that list)"
                    ));
                }
                if let Some(name) = env.keys().find(|name| {
                    RESERVED_ENV
                        .iter()
                        .any(|reserved| name.starts_with(reserved))
                }) {
                    return Err(format!(
                        "a stdio server of the config API may not set `{name}`"
                    ));
                }
                Ok(())
            }
            McpTransport::Http { token_env, .. } => token_env
                .as_deref()
                .map_or(Ok(()), |variable| self.check_token_env(variable)),
        }
    }

    fn check_token_env(&self, variable: &str) -> Result<(), String> {
        if self.token_envs.iter().any(|allowed| allowed == variable) {
            return Ok(());
        }
        Err(format!(
            "the variable `{variable}` is not in `server.config_api.token_envs`"
        ))
    }
}

fn refused(namespace: Namespace, id: &str, error: String) -> DocumentError {
    DocumentError::Unusable {
        namespace,
        id: id.to_owned(),
        error,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn document(namespace: Namespace, value: JsonValue) -> ConfigDocument {
        let entry = namespace.check(&value, None).unwrap();
        let mut document = ConfigDocument::default();
        document.put(&entry);
        document
    }

    fn stdio(command: &str, env: JsonValue) -> ConfigDocument {
        document(
            Namespace::McpServers,
            json!({"id": "s", "transport": {"kind": "stdio", "command": command, "env": env}}),
        )
    }

    #[test]
    fn stdio_servers_need_an_allowed_command_and_keep_the_loader_environment() {
        let policy = EntryPolicy {
            mcp_stdio_commands: vec!["/usr/bin/mcp-calc".into()],
            ..EntryPolicy::default()
        };
        assert!(
            EntryPolicy::default()
                .check(&stdio("/usr/bin/mcp-calc", json!({})))
                .is_err()
        );
        assert!(
            policy
                .check(&stdio("/usr/bin/mcp-calc", json!({"MODE": "x"})))
                .is_ok()
        );
        for refused in [
            stdio("sh", json!({})),
            stdio("/usr/bin/mcp-calc ", json!({})),
            stdio("/usr/bin/mcp-calc", json!({"PATH": "/tmp"})),
            stdio("/usr/bin/mcp-calc", json!({"LD_PRELOAD": "/tmp/x.so"})),
        ] {
            assert!(policy.check(&refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn token_envs_need_to_be_allowed_for_mcp_servers_and_remote_agents() {
        let policy = EntryPolicy {
            token_envs: vec!["CALC_TOKEN".into()],
            ..EntryPolicy::default()
        };
        let http = |variable: &str| {
            document(
                Namespace::McpServers,
                json!({"id": "h", "transport": {"kind": "http", "url": "http://x/mcp",
                                                "token_env": variable}}),
            )
        };
        assert!(policy.check(&http("CALC_TOKEN")).is_ok());
        assert!(policy.check(&http("AWS_SECRET_ACCESS_KEY")).is_err());
        let agent = |variable: &str| {
            document(
                Namespace::Agents,
                json!({"id": "far", "endpoint": {"backend": "a2a", "base_url": "http://x",
                       "auth": {"type": "bearer", "token_env": variable}}}),
            )
        };
        assert!(policy.check(&agent("CALC_TOKEN")).is_ok());
        let error = policy
            .check(&agent("DATABASE_URL"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("DATABASE_URL"), "{error}");
    }

    #[test]
    fn a_remote_agent_of_the_api_names_only_allowed_secret_variables_and_files() {
        let policy = EntryPolicy {
            token_envs: vec!["B_KEY".into()],
            token_files: vec!["/var/run/secrets/b".into()],
            ..EntryPolicy::default()
        };
        let agent = |auth: JsonValue| {
            document(
                Namespace::Agents,
                json!({"id": "far", "endpoint": {"backend": "a2a", "base_url": "http://x",
                       "auth": auth}}),
            )
        };
        for allowed in [
            json!({"type": "api_key", "key_env": "B_KEY"}),
            json!({"type": "bearer", "token_file": "/var/run/secrets/b"}),
            json!({"type": "oauth2_client_credentials", "token_url": "https://idp/token",
                   "client_id": "a", "client_secret_file": "/var/run/secrets/b"}),
        ] {
            assert!(policy.check(&agent(allowed.clone())).is_ok(), "{allowed}");
        }
        for refused in [
            json!({"type": "api_key", "key_env": "AWAKEN_STORE__URL"}),
            json!({"type": "bearer", "token_file": "/etc/awaken/secrets/store-url"}),
            json!({"type": "oauth2_client_credentials", "token_url": "https://idp/token",
                   "client_id": "a", "client_secret_env": "AWAKEN_CLUSTER__NATS_PASSWORD"}),
        ] {
            assert!(policy.check(&agent(refused.clone())).is_err(), "{refused}");
        }
    }

    #[test]
    fn a_provider_of_the_api_names_only_allowed_key_variables_and_files() {
        let policy = EntryPolicy {
            token_envs: vec!["OPENAI_API_KEY".into()],
            token_files: vec!["/var/run/secrets/openai".into()],
            ..EntryPolicy::default()
        };
        let provider = |key: JsonValue| {
            let mut entry = json!({"id": "p", "adapter": "openai"});
            entry
                .as_object_mut()
                .unwrap()
                .extend(key.as_object().unwrap().clone());
            document(Namespace::Providers, entry)
        };
        assert!(
            policy
                .check(&provider(json!({"api_key_env": "OPENAI_API_KEY"})))
                .is_ok()
        );
        assert!(
            policy
                .check(&provider(
                    json!({"api_key_file": "/var/run/secrets/openai"})
                ))
                .is_ok()
        );
        let error = policy
            .check(&provider(json!({"api_key_env": "AWAKEN_STORE__URL"})))
            .unwrap_err()
            .to_string();
        assert!(error.contains("AWAKEN_STORE__URL"), "{error}");
        let error = policy
            .check(&provider(
                json!({"api_key_file": "/etc/awaken/secrets/store-url"}),
            ))
            .unwrap_err()
            .to_string();
        assert!(error.contains("server.config_api.token_files"), "{error}");
    }
}
