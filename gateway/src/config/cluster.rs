//! `[cluster]`: joining a cluster on NATS, and how a node logs in to it.

use std::path::PathBuf;

use awaken_cluster::RunInputPlacement;
use awaken_cluster::approvals::FeedEncoding;
use serde::{Deserialize, Serialize};

use super::file::ConfigError;
use crate::secret::{Secret, check_all_readable, resolve};

/// Cluster membership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// NATS server URL(s), comma-separated.
    pub nats_url: String,
    /// This node's id; a new one when absent.
    pub node_id: Option<String>,
    /// Shards of the cluster (the same on every node).
    pub shards: u32,
    /// Shard lease and membership TTL: a dead node's threads move after this long.
    pub lease_ttl_secs: u64,
    /// Lease of a dispatch claim while its run executes.
    pub claim_lease_ms: u64,
    /// Copies of every bucket and stream (a clustered NATS).
    pub replicas: usize,
    /// How long leaving the cluster on SIGTERM may take.
    pub drain_timeout_secs: u64,
    /// Where accepted runs' input is kept: `auto` (with the dispatch in the
    /// ledger while every member reads it there), `inbox` (the KV inbox) or
    /// `ledger` (always with the dispatch).
    pub run_input: RunInputPlacement,
    /// How the approval feed's records are encoded on NATS: `json` or `msgpack`.
    pub approval_feed_encoding: FeedEncoding,
    /// NATS user (with `nats_password`); or put both in the URL
    /// (`nats://user:password@host:4222`).
    pub nats_user: Option<String>,
    /// NATS password of `nats_user`.
    pub nats_password: Option<Secret>,
    /// File holding `nats_password`.
    pub nats_password_file: Option<PathBuf>,
    /// NATS token (or `nats://token@host:4222`).
    pub nats_token: Option<Secret>,
    /// File holding `nats_token`.
    pub nats_token_file: Option<PathBuf>,
    /// NKey seed (`SU...`) of the node's NATS user.
    pub nats_nkey_seed: Option<Secret>,
    /// File holding `nats_nkey_seed`.
    pub nats_nkey_seed_file: Option<PathBuf>,
    /// Credentials file (JWT and seed, as `nsc` writes it) of the node's user.
    pub nats_creds_file: Option<PathBuf>,
    /// CA certificate(s) (PEM) the NATS servers' certificates must chain to;
    /// the system's roots when unset. Setting it requires TLS.
    pub nats_tls_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for servers that verify clients (with
    /// `nats_tls_key_file`).
    pub nats_tls_cert_file: Option<PathBuf>,
    /// Private key (PEM) of `nats_tls_cert_file`.
    pub nats_tls_key_file: Option<PathBuf>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            nats_url: "nats://127.0.0.1:4222".into(),
            node_id: None,
            shards: 256,
            lease_ttl_secs: 5,
            claim_lease_ms: 10_000,
            replicas: 1,
            drain_timeout_secs: 10,
            run_input: RunInputPlacement::Auto,
            approval_feed_encoding: FeedEncoding::Json,
            nats_user: None,
            nats_password: None,
            nats_password_file: None,
            nats_token: None,
            nats_token_file: None,
            nats_nkey_seed: None,
            nats_nkey_seed_file: None,
            nats_creds_file: None,
            nats_tls_ca_file: None,
            nats_tls_cert_file: None,
            nats_tls_key_file: None,
        }
    }
}

impl ClusterConfig {
    /// Reads the `*_file` secrets into their settings and checks that the
    /// authentication settings name one way to log in, complete.
    pub(super) fn resolve_secrets(&mut self) -> Result<(), ConfigError> {
        self.nats_password = resolve(
            "cluster.nats_password",
            self.nats_password.take(),
            self.nats_password_file.take().as_deref(),
        )?;
        self.nats_token = resolve(
            "cluster.nats_token",
            self.nats_token.take(),
            self.nats_token_file.take().as_deref(),
        )?;
        self.nats_nkey_seed = resolve(
            "cluster.nats_nkey_seed",
            self.nats_nkey_seed.take(),
            self.nats_nkey_seed_file.take().as_deref(),
        )?;
        if self.nats_user.is_some() != self.nats_password.is_some() {
            return Err(ConfigError::new(
                "cluster.nats_user and cluster.nats_password go together",
            ));
        }
        let ways = [
            self.nats_user.is_some(),
            self.nats_token.is_some(),
            self.nats_nkey_seed.is_some(),
            self.nats_creds_file.is_some(),
        ];
        if ways.into_iter().filter(|set| *set).count() > 1 {
            return Err(ConfigError::new(
                "cluster: set one NATS login: nats_user/nats_password, nats_token, \
                 nats_nkey_seed or nats_creds_file",
            ));
        }
        if self.nats_tls_cert_file.is_some() != self.nats_tls_key_file.is_some() {
            return Err(ConfigError::new(
                "cluster.nats_tls_cert_file and cluster.nats_tls_key_file go together",
            ));
        }
        Ok(check_all_readable(&[
            ("cluster.nats_creds_file", &self.nats_creds_file),
            ("cluster.nats_tls_ca_file", &self.nats_tls_ca_file),
            ("cluster.nats_tls_cert_file", &self.nats_tls_cert_file),
            ("cluster.nats_tls_key_file", &self.nats_tls_key_file),
        ])?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_cluster::RunInputPlacement;

    use crate::config::ServeConfig;
    use crate::config::file::tests::file;

    fn load(cluster: &str) -> Result<ServeConfig, String> {
        let toml = file(&format!(
            "[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\n\n[cluster]\n{cluster}\n"
        ));
        ServeConfig::load(Some(toml.path()), Vec::new()).map_err(|e| e.to_string())
    }

    #[test]
    fn run_input_takes_its_three_names_and_refuses_others() {
        assert_eq!(
            load("").unwrap().cluster.unwrap().run_input,
            RunInputPlacement::Auto
        );
        for placement in [RunInputPlacement::Ledger, RunInputPlacement::Inbox] {
            let config = load(&format!("run_input = \"{}\"", placement.as_str())).unwrap();
            assert_eq!(config.cluster.unwrap().run_input, placement);
        }
        let refused = load("run_input = \"kv\"").unwrap_err();
        assert!(
            refused.contains("run_input") && refused.contains("kv"),
            "{refused}"
        );
        let refused = load("run_input = 1").unwrap_err();
        assert!(refused.contains("run_input"), "{refused}");
    }

    #[test]
    fn secrets_come_from_their_files_and_never_show_in_debug() {
        let password = file("node-pw\n");
        let config = load(&format!(
            "nats_user = \"node\"\nnats_password_file = \"{}\"",
            password.path().display()
        ))
        .unwrap();
        let cluster = config.cluster.unwrap();
        assert_eq!(cluster.nats_password.as_ref().unwrap().expose(), "node-pw");
        assert_eq!(cluster.nats_password_file, None);
        assert!(!format!("{cluster:?}").contains("node-pw"));

        let token = file("t0ken");
        let toml = file("[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\n");
        let env = vec![
            (
                "AWAKEN_CLUSTER__NATS_URL".to_owned(),
                "nats://h:1".to_owned(),
            ),
            (
                "AWAKEN_CLUSTER__NATS_TOKEN_FILE".to_owned(),
                token.path().display().to_string(),
            ),
        ];
        let config = ServeConfig::load(Some(toml.path()), env).unwrap();
        let cluster = config.cluster.unwrap();
        assert_eq!(cluster.nats_token.unwrap().expose(), "t0ken");
    }

    #[test]
    fn values_from_the_environment_stay_as_written() {
        let toml = file("[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\n");
        let env = [
            ("AWAKEN_CLUSTER__NATS_USER", "0042"),
            ("AWAKEN_CLUSTER__NATS_PASSWORD", "0123"),
            ("AWAKEN_CLUSTER__NODE_ID", "007"),
            ("AWAKEN_CLUSTER__SHARDS", "64"),
            ("AWAKEN_STORE__POOL_SIZE", "8"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let config = ServeConfig::load(Some(toml.path()), env).unwrap();
        let cluster = config.cluster.unwrap();
        assert_eq!(cluster.nats_user.as_deref(), Some("0042"));
        assert_eq!(cluster.nats_password.unwrap().expose(), "0123");
        assert_eq!(cluster.node_id.as_deref(), Some("007"));
        assert_eq!(cluster.shards, 64);
        let crate::config::StoreConfig::Postgres(postgres) = config.store else {
            panic!("postgres")
        };
        assert_eq!(postgres.pool_size, 8);
    }

    #[test]
    fn incomplete_or_double_logins_and_unreadable_files_are_refused() {
        let password = file("pw");
        for (cluster, expected) in [
            (
                "nats_user = \"node\"".to_owned(),
                "cluster.nats_user and cluster.nats_password go together".to_owned(),
            ),
            (
                "nats_user = \"n\"\nnats_password = \"p\"\nnats_token = \"t\"".to_owned(),
                "set one NATS login".to_owned(),
            ),
            (
                format!(
                    "nats_password = \"p\"\nnats_password_file = \"{}\"",
                    password.path().display()
                ),
                "set `cluster.nats_password` or `cluster.nats_password_file`, not both".to_owned(),
            ),
            (
                "nats_token_file = \"/nonexistent/token\"".to_owned(),
                "cluster.nats_token_file: cannot read `/nonexistent/token`".to_owned(),
            ),
            (
                "nats_tls_ca_file = \"/nonexistent/ca.pem\"".to_owned(),
                "cluster.nats_tls_ca_file: cannot read `/nonexistent/ca.pem`".to_owned(),
            ),
            (
                "nats_tls_cert_file = \"/etc/hostname\"".to_owned(),
                "cluster.nats_tls_cert_file and cluster.nats_tls_key_file go together".to_owned(),
            ),
        ] {
            let error = load(&cluster).unwrap_err();
            assert!(error.contains(&expected), "{cluster}: {error}");
        }
    }
}
