//! `[store]`: where a node keeps threads, messages and runs.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::file::ConfigError;
use crate::secret::{Secret, check_all_readable, resolve};

/// The thread store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum StoreConfig {
    /// In process memory: gone when the process stops (single node only).
    #[default]
    Memory,
    /// Files under `path` (single node only).
    File {
        /// The store's directory (created if missing).
        path: PathBuf,
    },
    /// PostgreSQL: the one store every node of a cluster shares.
    Postgres(PostgresConfig),
}

/// `store.kind = "postgres"`: where the database is, how a node talks to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// Connection URL (it may hold the password); `?options=-c%20search_path%3DSCHEMA`
    /// picks a schema, `?sslmode=verify-full&sslrootcert=/ca.pem` asks for TLS.
    pub url: Secret,
    /// File holding `url` (a Kubernetes Secret mounted as a file).
    pub url_file: Option<PathBuf>,
    /// TLS towards the server; overrides the URL's `sslmode`.
    pub ssl_mode: Option<PgSslMode>,
    /// CA certificate (PEM) the server's certificate must chain to
    /// (`verify-ca`, `verify-full`); overrides the URL's `sslrootcert`.
    pub ssl_root_cert_file: Option<PathBuf>,
    /// Client certificate (PEM), for servers that authenticate clients by it.
    pub ssl_client_cert_file: Option<PathBuf>,
    /// Private key (PEM) of `ssl_client_cert_file`.
    pub ssl_client_key_file: Option<PathBuf>,
    /// Connections at most: checkpoints of different threads run in parallel
    /// over them.
    #[serde(deserialize_with = "number")]
    pub pool_size: u32,
    /// Checkpoint batches in flight at once; checkpoints arriving meanwhile go
    /// together in the next batch (decision 0052).
    #[serde(deserialize_with = "number")]
    pub checkpoint_writers: usize,
    /// Seconds a run waits for a database that went away (a restart, a
    /// failover) before its checkpoint fails and the run ends in error.
    #[serde(deserialize_with = "outage_timeout_secs")]
    pub outage_timeout_secs: u64,
}

/// A number written in TOML, or given as text by an `AWAKEN_STORE__*` variable
/// (environment values stay text so a secret like `0123` keeps its zero; serde
/// reads a tagged enum such as `[store]` without the config crate's coercion).
fn number<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + std::str::FromStr,
    T::Err: std::fmt::Display,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrText<T> {
        Number(T),
        Text(String),
    }
    match NumberOrText::<T>::deserialize(deserializer)? {
        NumberOrText::Number(number) => Ok(number),
        NumberOrText::Text(text) => text.trim().parse().map_err(|e| {
            serde::de::Error::custom(format!("expected a number, found `{text}` ({e})"))
        }),
    }
}

/// `store.outage_timeout_secs`: a number, and one that is not negative (said
/// with the key: serde's own message for a tagged table names only `store`).
fn outage_timeout_secs<'de, D>(deserializer: D) -> Result<u64, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let secs: i64 = number(deserializer)?;
    u64::try_from(secs).map_err(|_| {
        serde::de::Error::custom(format!(
            "store.outage_timeout_secs must be between 1 and {MAX_OUTAGE_TIMEOUT_SECS}, found {secs}"
        ))
    })
}

impl Default for PostgresConfig {
    fn default() -> Self {
        let pool = awaken_actors::store::PoolSettings::default();
        Self {
            url: Secret::default(),
            url_file: None,
            ssl_mode: None,
            ssl_root_cert_file: None,
            ssl_client_cert_file: None,
            ssl_client_key_file: None,
            pool_size: pool.max_connections,
            checkpoint_writers: pool.checkpoint_writers,
            outage_timeout_secs: awaken_actors::thread::DEFAULT_STORE_OUTAGE_TIMEOUT.as_secs(),
        }
    }
}

/// PostgreSQL's `sslmode`: whether a connection uses TLS and what it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PgSslMode {
    /// Never TLS.
    Disable,
    /// TLS only if the server insists.
    Allow,
    /// TLS when the server offers it (PostgreSQL's default).
    Prefer,
    /// TLS always, the certificate unchecked.
    Require,
    /// TLS, the certificate chained to the root certificate.
    VerifyCa,
    /// TLS, the certificate chained and naming the host.
    VerifyFull,
}

impl StoreConfig {
    /// The PostgreSQL store at `url` with the default pool.
    pub fn postgres(url: String) -> Self {
        Self::Postgres(PostgresConfig {
            url: Secret::new(url),
            ..PostgresConfig::default()
        })
    }
}

/// The largest pool a node may ask for (PostgreSQL's own default
/// `max_connections` is 100, shared by every node).
const MAX_POOL_SIZE: u32 = 1000;

/// The longest a run may wait for its database: an hour; runs waiting longer
/// hold their claims and memory for nothing an operator would want.
const MAX_OUTAGE_TIMEOUT_SECS: u64 = 3600;

impl PostgresConfig {
    /// Reads `url_file` into `url` and checks the rest.
    pub(super) fn resolve_and_check(&mut self) -> Result<(), ConfigError> {
        let given = (!self.url.expose().is_empty()).then(|| self.url.clone());
        self.url = resolve("store.url", given, self.url_file.take().as_deref())?
            .ok_or_else(|| ConfigError::new("store.url (or store.url_file) is required"))?;
        if !(1..=MAX_POOL_SIZE).contains(&self.pool_size) {
            return Err(ConfigError::new(format!(
                "store.pool_size must be between 1 and {MAX_POOL_SIZE}"
            )));
        }
        if !(1..=self.pool_size as usize).contains(&self.checkpoint_writers) {
            return Err(ConfigError::new(format!(
                "store.checkpoint_writers must be between 1 and store.pool_size ({})",
                self.pool_size
            )));
        }
        if !(1..=MAX_OUTAGE_TIMEOUT_SECS).contains(&self.outage_timeout_secs) {
            return Err(ConfigError::new(format!(
                "store.outage_timeout_secs must be between 1 and {MAX_OUTAGE_TIMEOUT_SECS}"
            )));
        }
        if self.ssl_client_cert_file.is_some() != self.ssl_client_key_file.is_some() {
            return Err(ConfigError::new(
                "store.ssl_client_cert_file and store.ssl_client_key_file go together",
            ));
        }
        Ok(check_all_readable(&[
            ("store.ssl_root_cert_file", &self.ssl_root_cert_file),
            ("store.ssl_client_cert_file", &self.ssl_client_cert_file),
            ("store.ssl_client_key_file", &self.ssl_client_key_file),
        ])?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::ServeConfig;
    use crate::config::file::tests::file;

    fn load(store: &str) -> Result<PostgresConfig, String> {
        let toml = file(&format!("[store]\nkind = \"postgres\"\n{store}\n"));
        match ServeConfig::load(Some(toml.path()), Vec::new()).map_err(|e| e.to_string())? {
            ServeConfig {
                store: StoreConfig::Postgres(postgres),
                ..
            } => Ok(postgres),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_url_comes_from_the_file_or_its_file_and_tls_settings_are_read() {
        let url = file("postgres://app:pw@db/app\n");
        let ca = file("not read until connecting");
        let postgres = load(&format!(
            "url_file = \"{}\"\nssl_mode = \"verify-full\"\nssl_root_cert_file = \"{}\"",
            url.path().display(),
            ca.path().display()
        ))
        .unwrap();
        assert_eq!(postgres.url.expose(), "postgres://app:pw@db/app");
        assert_eq!(postgres.ssl_mode, Some(PgSslMode::VerifyFull));
        assert!(!format!("{postgres:?}").contains("pw@"));
    }

    #[test]
    fn a_missing_url_a_bad_mode_or_an_unreadable_certificate_is_refused() {
        for (store, expected) in [
            ("", "store.url (or store.url_file) is required"),
            ("url = \"postgres://x\"\nssl_mode = \"maybe\"", "maybe"),
            (
                "url = \"postgres://x\"\nssl_root_cert_file = \"/nonexistent/ca.pem\"",
                "store.ssl_root_cert_file: cannot read `/nonexistent/ca.pem`",
            ),
            (
                "url = \"postgres://x\"\nssl_client_key_file = \"/etc/hostname\"",
                "go together",
            ),
            (
                "url_file = \"/nonexistent/url\"",
                "store.url_file: cannot read",
            ),
        ] {
            let error = load(store).unwrap_err();
            assert!(error.contains(expected), "{store}: {error}");
        }
    }
}
