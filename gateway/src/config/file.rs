//! `ServeConfig`: everything `awaken serve` reads, layered: built-in defaults, then
//! `awaken.toml` (or `--config`), then `AWAKEN_<SECTION>__<KEY>` environment
//! variables (`AWAKEN_SERVER__ADDRESS=127.0.0.1:8080`) and `AWAKEN_<KEY>` for the
//! top-level keys ([`TOP_LEVEL_ENV_KEYS`]: `AWAKEN_DEMO_AGENTS=true`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use awaken_actors::permission::PermissionRulesConfig;
use serde::{Deserialize, Serialize};
use serde_json::Value as JsonValue;

use super::{ClusterConfig, NodeConfig, StoreConfig};
use crate::runtime_config::{ConfigDocument, Namespace};
use crate::secret::SecretError;
use crate::server::{MAX_BACKEND_WAIT_SECS, ServerConfig};
use crate::telemetry::{LogConfig, TelemetryConfig};

/// The config file read when `--config` is not given (if it exists).
pub const DEFAULT_CONFIG_FILE: &str = "awaken.toml";
/// Prefix of the environment variables that override the file.
pub const ENV_PREFIX: &str = "AWAKEN_";
/// Separator of sections and keys in those variables.
pub const ENV_SEPARATOR: &str = "__";
/// The top-level keys an `AWAKEN_<KEY>` variable sets. Only these: other
/// unsectioned `AWAKEN_*` variables (`AWAKEN_POSTGRES_URL`) belong to other
/// commands.
pub const TOP_LEVEL_ENV_KEYS: [&str; 1] = ["DEMO_AGENTS"];

/// The whole configuration of `awaken serve`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// The HTTP server.
    pub server: ServerConfig,
    /// Where threads, messages and runs are kept.
    pub store: StoreConfig,
    /// Join a cluster on NATS; a single node without it.
    pub cluster: Option<ClusterConfig>,
    /// What the node may take of its machine (its memory budget).
    pub node: NodeConfig,
    /// Registers the embedded demo and benchmark agents (`demo`, `bench`, ...)
    /// and their tools; when unset, only if the file configures no agent.
    pub demo_agents: Option<bool>,
    /// Permission rules for every agent without a `permission` section of its own;
    /// everything is allowed when absent.
    pub permissions: Option<PermissionRulesConfig>,
    /// `[agents.<id>]`: agent specs (the `agents` config namespace).
    pub agents: BTreeMap<String, JsonValue>,
    /// `[models.<id>]`: model entries.
    pub models: BTreeMap<String, JsonValue>,
    /// `[providers.<id>]`: provider entries.
    pub providers: BTreeMap<String, JsonValue>,
    /// `[mcp_servers.<id>]`: MCP server entries.
    pub mcp_servers: BTreeMap<String, JsonValue>,
    /// Trace export over OTLP (the `OTEL_*` variables win over it).
    pub telemetry: TelemetryConfig,
    /// How log lines are written.
    pub log: LogConfig,
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl ConfigError {
    /// An error saying `what`.
    pub(crate) fn new(what: impl Into<String>) -> Self {
        Self(what.into())
    }
}

impl From<SecretError> for ConfigError {
    fn from(error: SecretError) -> Self {
        Self(error.to_string())
    }
}

/// The paths of `files` as [`ServeConfig::load_files`] takes them.
pub fn paths(files: &[PathBuf]) -> Vec<&Path> {
    files.iter().map(PathBuf::as_path).collect()
}

impl ServeConfig {
    /// Reads `file` (required) or else `awaken.toml` in the working directory (if
    /// present), then the `AWAKEN_*` variables of `env`.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let files: Vec<&Path> = file.into_iter().collect();
        Self::load_files(&files, env)
    }

    /// Reads `files` in order, each overriding the ones before (all required; a
    /// Kubernetes Secret can hold `server.api_keys` beside a ConfigMap's file), or
    /// `awaken.toml` in the working directory (if present) when there are none,
    /// then the `AWAKEN_*` variables of `env`.
    pub fn load_files(
        files: &[&Path],
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder();
        if files.is_empty() {
            builder = builder.add_source(
                config::File::with_name(DEFAULT_CONFIG_FILE)
                    .required(false)
                    .format(config::FileFormat::Toml),
            );
        }
        for path in files {
            builder = builder.add_source(
                config::File::from(*path)
                    .required(true)
                    .format(config::FileFormat::Toml),
            );
        }
        let overrides: config::Map<String, String> = env
            .into_iter()
            .filter_map(|(name, value)| {
                let key = name.strip_prefix(ENV_PREFIX)?;
                (key.contains(ENV_SEPARATOR) || TOP_LEVEL_ENV_KEYS.contains(&key))
                    .then(|| (key.to_owned(), value))
            })
            .collect();
        // Values stay text: parsed, `0123` would lose its zero (a password, a
        // node id); the settings that are numbers or booleans read text too.
        let environment = config::Environment::default()
            .separator(ENV_SEPARATOR)
            .try_parsing(false)
            .source(Some(overrides));
        let config = builder
            .add_source(environment)
            .build()
            .map_err(|e| ConfigError(e.to_string()))?;
        let mut loaded: Self = config
            .try_deserialize()
            .map_err(|e| ConfigError(e.to_string()))?;
        loaded.resolve_secrets()?;
        loaded.validate()?;
        Ok(loaded)
    }

    /// Reads every `*_file` secret into its setting (each file once, now).
    fn resolve_secrets(&mut self) -> Result<(), ConfigError> {
        self.server.resolve_secrets()?;
        if let StoreConfig::Postgres(postgres) = &mut self.store {
            postgres.resolve_and_check()?;
        }
        if let Some(cluster) = &mut self.cluster {
            cluster.resolve_secrets()?;
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let refuse = |what: &str| Err(ConfigError(what.to_owned()));
        if self.server.max_concurrent_requests == 0 {
            return refuse("server.max_concurrent_requests must be at least 1");
        }
        if self.server.max_body_bytes == 0 {
            return refuse("server.max_body_bytes must be at least 1");
        }
        if self.server.header_read_timeout_secs == 0 {
            return refuse("server.header_read_timeout_secs must be at least 1");
        }
        if self.server.body_read_timeout_secs == 0 {
            return refuse("server.body_read_timeout_secs must be at least 1");
        }
        if self.server.idle_timeout_secs <= 15 {
            return refuse(
                "server.idle_timeout_secs must be above 15 (the keep-alive of event streams)",
            );
        }
        if self.server.max_connections_per_address == 0 {
            return refuse("server.max_connections_per_address must be at least 1");
        }
        if self.server.max_connections == 0 {
            return refuse("server.max_connections must be at least 1");
        }
        if self.server.max_arriving_body_bytes < self.server.max_body_bytes {
            return refuse(
                "server.max_arriving_body_bytes must be at least server.max_body_bytes \
                 (one whole body must fit)",
            );
        }
        if !(1..=MAX_BACKEND_WAIT_SECS).contains(&self.server.backend_wait_secs) {
            return Err(ConfigError(format!(
                "server.backend_wait_secs must be between 1 and {MAX_BACKEND_WAIT_SECS}"
            )));
        }
        if self.node.memory_budget.is_some() {
            // A setting is checked alone: no container limit is read for it.
            self.node.memory_budget(Path::new(""), "")?;
        }
        if self.server.replay_buffer_capacity == 0 {
            return refuse("server.replay_buffer_capacity must be at least 1");
        }
        self.server.a2a_push.check().map_err(ConfigError)?;
        if !self.server.a2a_tenants.is_empty() && self.server.api_keys.is_empty() {
            return refuse(
                "server.a2a_tenants names the tenants of API keys: set server.api_keys (or api_keys_file)",
            );
        }
        if self.cluster.is_some() && !matches!(self.store, StoreConfig::Postgres(_)) {
            return refuse(
                "a cluster needs a store every node shares: set store.kind = \"postgres\"",
            );
        }
        if let Some(permissions) = &self.permissions {
            permissions
                .compile()
                .map_err(|e| ConfigError(format!("permissions: {e}")))?;
        }
        self.entries().map(drop)
    }

    /// Whether the node registers the embedded demo agents and tools: as
    /// `demo_agents` says, else when the file configures no agent (so a bare
    /// `awaken serve` is the demo, and a configured node runs only its own).
    pub fn wants_demo(&self) -> bool {
        self.demo_agents.unwrap_or(self.agents.is_empty())
    }

    /// The `[agents.*]`, `[models.*]`, `[providers.*]` and `[mcp_servers.*]`
    /// tables as config entries: the table key is the entry's id (an `id` field,
    /// when present, must repeat it), checked as the config API checks entries.
    pub fn entries(&self) -> Result<ConfigDocument, ConfigError> {
        let mut document = ConfigDocument::default();
        for (namespace, section, tables) in [
            (Namespace::Agents, "agents", &self.agents),
            (Namespace::Models, "models", &self.models),
            (Namespace::Providers, "providers", &self.providers),
            (Namespace::McpServers, "mcp_servers", &self.mcp_servers),
        ] {
            for (id, table) in tables {
                let mut value = table.clone();
                if let JsonValue::Object(fields) = &mut value {
                    fields
                        .entry("id")
                        .or_insert_with(|| JsonValue::String(id.clone()));
                }
                let entry = namespace
                    .check(&value, Some(id))
                    .map_err(|e| ConfigError(format!("{section}.{id}: {e}")))?;
                document.put(&entry);
            }
        }
        Ok(document)
    }
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;

    use super::*;
    use crate::config::PostgresConfig;

    /// A `.toml` file holding `text` (the config tests of `serve` share it).
    pub(in crate::config) fn file(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_are_a_single_node_in_memory() {
        let empty = file("");
        let config = ServeConfig::load(Some(empty.path()), env(&[])).unwrap();
        assert_eq!(config, ServeConfig::default());
        assert_eq!(config.server.address, "127.0.0.1:3000");
        assert!(!config.server.config_api.writes_without_keys);
        assert_eq!(config.cluster, None);
    }

    #[test]
    fn the_environment_overrides_the_file() {
        let toml = file(
            "[server]\naddress = \"127.0.0.1:9\"\nmax_concurrent_requests = 7\n\n\
             [store]\nkind = \"file\"\npath = \"/tmp/x\"\n",
        );
        let config = ServeConfig::load(
            Some(toml.path()),
            env(&[
                ("AWAKEN_SERVER__MAX_CONCURRENT_REQUESTS", "9"),
                ("AWAKEN_SERVER__CONFIG_API__WRITES_WITHOUT_KEYS", "true"),
                ("AWAKEN_POSTGRES_URL", "ignored: not sectioned"),
                ("OTHER__SERVER__ADDRESS", "ignored: other prefix"),
            ]),
        )
        .unwrap();
        assert_eq!(config.server.address, "127.0.0.1:9");
        assert_eq!(config.server.max_concurrent_requests, 9);
        assert!(config.server.config_api.writes_without_keys);
        assert_eq!(
            config.store,
            StoreConfig::File {
                path: "/tmp/x".into()
            }
        );
    }

    #[test]
    fn a_memory_budget_is_read_in_units_from_the_file_and_the_environment() {
        let toml = file("[node]\nmemory_budget = \"512MiB\"\n");
        let config = ServeConfig::load(Some(toml.path()), env(&[])).unwrap();
        assert_eq!(
            config.node.memory_budget,
            Some(bytesize::ByteSize::mib(512))
        );
        for (value, bytes) in [
            ("1Gi", 1 << 30),
            ("1 GiB", 1 << 30),
            ("800MB", 800_000_000),
            ("67108864", 1 << 26),
        ] {
            let config = ServeConfig::load(
                Some(toml.path()),
                env(&[("AWAKEN_NODE__MEMORY_BUDGET", value)]),
            )
            .unwrap();
            assert_eq!(
                config.node.memory_budget.map(|size| size.as_u64()),
                Some(bytes),
                "{value}"
            );
        }
    }

    #[test]
    fn a2a_push_and_tenant_settings_are_read_and_checked() {
        let toml = file(
            "[server]\napi_keys = { \"k-1\" = \"partner\" }\n\
             a2a_tenants = { \"analyst\" = [\"partner\"] }\n\n\
             [server.a2a_push]\nattempts = 3\nlease_ms = 1000\n",
        );
        let config = ServeConfig::load(
            Some(toml.path()),
            env(&[("AWAKEN_SERVER__A2A_PUSH__SWEEP_INTERVAL_MS", "250")]),
        )
        .unwrap();
        let push = &config.server.a2a_push;
        assert_eq!(
            (push.attempts, push.lease_ms, push.sweep_interval_ms),
            (3, 1000, 250)
        );
        assert_eq!(config.server.a2a_tenants["analyst"], ["partner"]);

        for (text, says) in [
            (
                "[server.a2a_push]\nattempts = 0\n",
                "server.a2a_push.attempts",
            ),
            (
                "[server.a2a_push]\nlease_ms = 10\n",
                "server.a2a_push.lease_ms",
            ),
            (
                "[server.a2a_push]\nfirst_backoff_ms = 9000\nmax_backoff_ms = 10\n",
                "server.a2a_push.first_backoff_ms",
            ),
            ("[server.a2a_push]\nretries = 3\n", "retries"),
            (
                "[server]\na2a_tenants = { \"analyst\" = [\"partner\"] }\n",
                "set server.api_keys",
            ),
        ] {
            let toml = file(text);
            let error = ServeConfig::load(Some(toml.path()), env(&[]))
                .unwrap_err()
                .to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn the_postgres_pool_size_defaults_and_can_be_set() {
        let toml = file("[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\n");
        let config = ServeConfig::load(Some(toml.path()), env(&[])).unwrap();
        assert_eq!(config.store, StoreConfig::postgres("postgres://x".into()));
        let StoreConfig::Postgres(postgres) = config.store else {
            panic!("postgres")
        };
        assert_eq!((postgres.pool_size, postgres.checkpoint_writers), (16, 2));
        let config =
            ServeConfig::load(Some(toml.path()), env(&[("AWAKEN_STORE__POOL_SIZE", "40")]))
                .unwrap();
        assert!(matches!(
            config.store,
            StoreConfig::Postgres(PostgresConfig { pool_size: 40, .. })
        ));
        let config = ServeConfig::load(
            Some(toml.path()),
            env(&[("AWAKEN_STORE__CHECKPOINT_WRITERS", "1")]),
        )
        .unwrap();
        assert!(matches!(
            config.store,
            StoreConfig::Postgres(PostgresConfig {
                checkpoint_writers: 1,
                ..
            })
        ));
    }

    #[test]
    fn mistakes_are_refused_with_what_is_wrong() {
        for (text, expected) in [
            ("[server]\nadress = \"x\"\n", "adress"),
            (
                "[server]\nmax_concurrent_requests = \"many\"\n",
                "max_concurrent_requests",
            ),
            ("[store]\nkind = \"redis\"\n", "redis"),
            ("[server]\nmax_body_bytes = 0\n", "max_body_bytes"),
            (
                "[server]\nmax_connections_per_address = 0\n",
                "max_connections_per_address",
            ),
            (
                "[server]\nbody_read_timeout_secs = 0\n",
                "body_read_timeout_secs",
            ),
            (
                "[server]\nmax_connections = 0\n",
                "server.max_connections must",
            ),
            (
                "[server]\nmax_body_bytes = 2048\nmax_arriving_body_bytes = 1024\n",
                "max_arriving_body_bytes",
            ),
            ("[cluster]\nnats_url = \"nats://x\"\n", "postgres"),
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\npool_size = 0\n",
                "store.pool_size",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\npool_size = 5000\n",
                "store.pool_size",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\ncheckpoint_writers = 0\n",
                "store.checkpoint_writers",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\npool_size = 4\ncheckpoint_writers = 5\n",
                "store.checkpoint_writers",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\ncheckpoint_writers = \"two\"\n",
                "expected a number, found `two`",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\noutage_timeout_secs = 0\n",
                "store.outage_timeout_secs",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\noutage_timeout_secs = 86400\n",
                "store.outage_timeout_secs",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\noutage_timeout_secs = -5\n",
                "store.outage_timeout_secs must be between 1 and 3600, found -5",
            ),
            (
                "[server]\nbackend_wait_secs = 0\n",
                "server.backend_wait_secs",
            ),
            (
                "[server]\nbackend_wait_secs = 100000\n",
                "server.backend_wait_secs",
            ),
            (
                "[server]\nbackend_wait_secs = -1\n",
                "server.backend_wait_secs",
            ),
            (
                "[server]\nbackend_wait_secs = \"soon\"\n",
                "server.backend_wait_secs",
            ),
            (
                "[node]\nmemory_budget = \"1MiB\"\n",
                "node.memory_budget must be at least 32.0 MiB",
            ),
            ("[node]\nmemory_budget = \"lots\"\n", "node.memory_budget"),
            ("[node]\nmemory_budget = -5\n", "node.memory_budget"),
            ("[node]\nmemory_budget = \"-5MiB\"\n", "node.memory_budget"),
            ("[node]\nmemroy_budget = \"1GiB\"\n", "memroy_budget"),
            ("[server\n", "TOML"),
        ] {
            let error = ServeConfig::load(Some(file(text).path()), env(&[]))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(expected) || error.to_lowercase().contains(&expected.to_lowercase()),
                "{text:?}: {error}"
            );
        }
    }

    #[test]
    fn entries_and_permissions_come_from_tables_keyed_by_id() {
        let toml = file(
            "demo_agents = false\n\n\
             [permissions]\ndefault_behavior = \"ask\"\n\
             rules = [{ tool = \"echo\", behavior = \"allow\" }]\n\n\
             [providers.local]\nadapter = \"scripted\"\n\
             script = { steps = [{ text = \"hi\" }] }\n\n\
             [models.fast]\nprovider = \"local\"\nmodel = \"x\"\n\n\
             [agents.helper]\nmodel = \"fast\"\nmax_rounds = 3\n\n\
             [mcp_servers.fs]\ntransport = { kind = \"stdio\", command = \"mcp-fs\" }\n",
        );
        let config = ServeConfig::load(
            Some(toml.path()),
            env(&[("AWAKEN_AGENTS__HELPER__SYSTEM_PROMPT", "Be brief.")]),
        )
        .unwrap();
        assert_eq!(config.demo_agents, Some(false));
        assert!(!config.wants_demo());
        assert!(config.permissions.is_some());
        let entries = config.entries().unwrap();
        assert_eq!(entries.len(), 4);
        let helper = &entries.entries(Namespace::Agents)["helper"];
        assert_eq!(helper["id"], "helper");
        assert_eq!(helper["max_rounds"], 3);
        assert_eq!(helper["system_prompt"], "Be brief.");
        assert_eq!(
            entries.entries(Namespace::Models)["fast"]["provider"],
            "local"
        );
    }

    #[test]
    fn later_files_override_earlier_ones_and_every_file_must_exist() {
        let base = file("[server]\naddress = \"0.0.0.0:3000\"\nmax_body_bytes = 10\n");
        let secret =
            file("[server.api_keys]\nsecret-key = \"tenant-a\"\n\n[server]\nmax_body_bytes = 20\n");
        let config = ServeConfig::load_files(&[base.path(), secret.path()], env(&[])).unwrap();
        assert_eq!(config.server.address, "0.0.0.0:3000");
        assert_eq!(config.server.max_body_bytes, 20);
        assert_eq!(config.server.api_keys.len(), 1);
        let missing = Path::new("/nonexistent/secrets.toml");
        let error = ServeConfig::load_files(&[base.path(), missing], env(&[]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("secrets.toml"), "{error}");
    }

    #[test]
    fn api_keys_and_the_card_token_come_from_files_and_stay_out_of_debug() {
        let keys = file("\"key-from-secret\" = \"tenant-b\"\n");
        let token = file("card-token\n");
        let toml = file(&format!(
            "[server]\napi_keys_file = \"{}\"\na2a_extended_card_bearer_token_file = \"{}\"\n\n\
             [server.api_keys]\n\"key-inline\" = \"tenant-a\"\n",
            keys.path().display(),
            token.path().display()
        ));
        let config = ServeConfig::load(Some(toml.path()), env(&[])).unwrap();
        assert_eq!(config.server.api_keys.len(), 2);
        assert_eq!(
            config.server.api_keys.tenant("key-from-secret").unwrap(),
            "tenant-b"
        );
        let token = config.server.a2a_extended_card_bearer_token.as_ref();
        assert_eq!(token.unwrap().expose(), "card-token");
        let shown = format!("{config:?}");
        for secret in ["key-from-secret", "key-inline", "card-token"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("tenant-b"), "{shown}");

        let bad = file("\"key-in-a-bad-line\" = \n");
        let toml = file(&format!(
            "[server]\napi_keys_file = \"{}\"\n",
            bad.path().display()
        ));
        let error = ServeConfig::load(Some(toml.path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("server.api_keys_file"), "{error}");
        assert!(error.contains("is malformed"), "{error}");
        assert!(!error.contains("key-in-a-bad-line"), "{error}");
    }

    #[test]
    fn the_demo_runs_only_without_agents_of_the_file_unless_asked() {
        let bare = ServeConfig::load(Some(file("").path()), env(&[])).unwrap();
        assert!(bare.wants_demo(), "a bare node is the demo");
        let agent = "[agents.helper]\nmodel = \"fast\"\n";
        let configured = ServeConfig::load(Some(file(agent).path()), env(&[])).unwrap();
        assert!(
            !configured.wants_demo(),
            "a configured node runs its own agents"
        );
        let asked = ServeConfig::load(
            Some(file(agent).path()),
            env(&[("AWAKEN_DEMO_AGENTS", "true")]),
        )
        .unwrap();
        assert!(asked.wants_demo(), "a top-level key from the environment");
        let refused = ServeConfig::load(
            Some(file("").path()),
            env(&[("AWAKEN_DEMO_AGENTS", "false")]),
        )
        .unwrap();
        assert!(!refused.wants_demo());
        let error = ServeConfig::load(
            Some(file("").path()),
            env(&[("AWAKEN_DEMO_AGENTS", "sometimes")]),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("demo_agents"), "{error}");
    }

    #[test]
    fn bad_entries_refuse_to_start_naming_the_table() {
        for (text, expected) in [
            ("[agents.a]\nmodle = \"m\"\n", "agents.a"),
            (
                "[models.m]\nid = \"other\"\nprovider = \"p\"\nmodel = \"x\"\n",
                "other",
            ),
            ("[providers.p]\nadapter = 3\n", "providers.p"),
            (
                "[mcp_servers.x]\ntransport = { kind = \"http\", url = \"x\" }\n",
                "mcp_servers.x",
            ),
            (
                "[permissions]\nrules = [{ tool = \"[\", behavior = \"deny\" }]\n",
                "permissions",
            ),
        ] {
            let error = ServeConfig::load(Some(file(text).path()), env(&[]))
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }

    #[test]
    fn a_missing_named_file_is_an_error() {
        let error =
            ServeConfig::load(Some(Path::new("/nonexistent/awaken.toml")), env(&[])).unwrap_err();
        assert!(error.to_string().contains("nonexistent"), "{error}");
    }
}
