//! Connecting a node to NATS as `[cluster]` says: the servers, the login (user
//! and password, token, NKey or credentials file, from the settings or the URL)
//! and TLS. No secret reaches a log line or an error: URLs are shown without
//! their credentials.

use std::sync::Arc;

use async_nats::{ConnectErrorKind, ConnectOptions, Event, ServerAddr, ServerError};
use tokio::sync::watch;

use crate::config::ClusterConfig;
use crate::error::{GatewayError, Result};
use crate::secret::Secret;

/// `urls` (comma-separated) with any `user:password@` or `token@` replaced by
/// `***@`.
pub(crate) fn redact(urls: &str) -> String {
    urls.split(',')
        .map(|url| match (url.find("://"), url.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}***{}", &url[..scheme + 3], &url[at..])
            }
            _ => url.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A login found in a server URL (`nats://user:password@host`, `nats://token@host`).
#[derive(Debug, PartialEq, Eq)]
enum UrlLogin {
    UserPassword(String, Secret),
    Token(Secret),
}

/// The servers of `urls`, a comma-separated list (`nats://a:4222,nats://b:4222`),
/// without credentials, and the login the URLs held (the same in each that
/// holds one): a node given every server of a NATS cluster fails over between
/// them.
fn servers(urls: &str) -> std::result::Result<(Vec<ServerAddr>, Option<UrlLogin>), String> {
    let mut servers = Vec::new();
    let mut login: Option<UrlLogin> = None;
    for url in urls.split(',').map(str::trim).filter(|url| !url.is_empty()) {
        let server = url
            .parse::<ServerAddr>()
            .map_err(|e| format!("`{}`: {e}", redact(url)))?;
        let mut bare = server.clone().into_inner();
        let found = match (server.username(), server.password()) {
            (Some(user), Some(password)) => Some(UrlLogin::UserPassword(
                user.to_owned(),
                Secret::new(password),
            )),
            (Some(token), None) => Some(UrlLogin::Token(Secret::new(token))),
            _ => None,
        };
        if let Some(found) = found {
            if login.as_ref().is_some_and(|known| *known != found) {
                return Err("the URLs hold different credentials".into());
            }
            login = Some(found);
            // Only errors can fail here (no host), and the URL parsed with one.
            let _ = bare.set_username("");
            let _ = bare.set_password(None);
        }
        servers.push(ServerAddr::from_url(bare).map_err(|e| format!("`{}`: {e}", redact(url)))?);
    }
    if servers.is_empty() {
        return Err("no server URL".into());
    }
    Ok((servers, login))
}

/// The permission the NATS server denied this connection first, if any: a
/// denied JetStream request otherwise only times out (and start-up retries
/// it), so start-up watches for one and stops with it.
#[derive(Debug, Clone)]
pub(crate) struct ServerErrors(Arc<watch::Sender<Option<String>>>);

impl Default for ServerErrors {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(None)))
    }
}

impl ServerErrors {
    fn record(&self, error: &ServerError) {
        let text = error.to_string();
        if text.to_ascii_lowercase().contains("permissions violation") {
            self.0
                .send_if_modified(|first| first.is_none().then(|| *first = Some(text)).is_some());
        }
    }

    /// Resolves with the first permission denied (never, if none is).
    pub(crate) async fn denied(&self) -> String {
        let mut first = self.0.subscribe();
        match first.wait_for(Option::is_some).await {
            Ok(denied) => denied.clone().unwrap_or_default(),
            // The sender lives in `self`: it cannot close while this waits.
            Err(_) => std::future::pending().await,
        }
    }
}

/// The connect options `cluster` describes, and the URLs' servers.
async fn options(
    cluster: &ClusterConfig,
    name: &str,
    errors: ServerErrors,
) -> Result<(ConnectOptions, Vec<ServerAddr>)> {
    let invalid = |what: &str, e: &dyn std::fmt::Display| {
        GatewayError::Config(format!("cluster.{what}: {e}"))
    };
    let (servers, url_login) = servers(&cluster.nats_url).map_err(|e| invalid("nats_url", &e))?;
    let mut options = ConnectOptions::new()
        .name(name)
        .event_callback(move |event| {
            let errors = errors.clone();
            async move {
                match event {
                    Event::ServerError(error) => {
                        tracing::error!(%error, "NATS refused an operation of this node");
                        errors.record(&error);
                    }
                    Event::Disconnected => tracing::warn!("disconnected from NATS"),
                    Event::Connected => tracing::info!("connected to NATS"),
                    other => tracing::warn!(event = %other, "NATS connection"),
                }
            }
        });
    let configured = cluster.nats_password.is_some()
        || cluster.nats_token.is_some()
        || cluster.nats_nkey_seed.is_some()
        || cluster.nats_creds_file.is_some();
    match url_login {
        Some(_) if configured => {
            return Err(invalid(
                "nats_url",
                &"holds credentials while other cluster.nats_* settings set a login: use one",
            ));
        }
        Some(UrlLogin::UserPassword(user, password)) => {
            options = options.user_and_password(user, password.expose().to_owned());
        }
        Some(UrlLogin::Token(token)) => options = options.token(token.expose().to_owned()),
        None => {}
    }
    if let (Some(user), Some(password)) = (&cluster.nats_user, &cluster.nats_password) {
        options = options.user_and_password(user.clone(), password.expose().to_owned());
    }
    if let Some(token) = &cluster.nats_token {
        options = options.token(token.expose().to_owned());
    }
    if let Some(seed) = &cluster.nats_nkey_seed {
        // Checked here so a bad seed is a start-up error, not a failed login.
        nkeys::KeyPair::from_seed(seed.expose())
            .map_err(|_| invalid("nats_nkey_seed", &"is not an NKey seed"))?;
        options = options.nkey(seed.expose().to_owned());
    }
    if let Some(path) = &cluster.nats_creds_file {
        options = options
            .credentials_file(path)
            .await
            .map_err(|e| invalid("nats_creds_file", &e))?;
    }
    let wants_tls = servers.iter().any(ServerAddr::tls_required)
        || cluster.nats_tls_ca_file.is_some()
        || cluster.nats_tls_cert_file.is_some();
    if wants_tls {
        options = options.require_tls(true);
    }
    // The certificate files are read at every (re)connection, so renewed files
    // are used from the next one on.
    if let Some(ca) = &cluster.nats_tls_ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&cluster.nats_tls_cert_file, &cluster.nats_tls_key_file) {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    Ok((options, servers))
}

/// Connects to NATS as `cluster` says, naming the connection `name`; the
/// server's errors are kept in `errors`.
pub(super) async fn connect(
    cluster: &ClusterConfig,
    name: &str,
    errors: ServerErrors,
) -> Result<async_nats::Client> {
    let (options, servers) = options(cluster, name, errors).await?;
    let shown = redact(&cluster.nats_url);
    options.connect(servers).await.map_err(|e| {
        let why = match e.kind() {
            ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                "NATS refused the node's login (authorization violation): check \
                 cluster.nats_user/nats_password, nats_token, nats_nkey_seed or nats_creds_file"
                    .to_owned()
            }
            ConnectErrorKind::Tls => format!("TLS with NATS failed: {e}"),
            // A failed handshake surfaces as an I/O error holding rustls' own.
            _ if is_tls_failure(&e) => format!("TLS with NATS failed: {e}"),
            _ => format!("cannot connect to NATS: {e}"),
        };
        GatewayError::Config(format!("cluster.nats_url ({shown}): {why}"))
    })
}

/// Whether `error` comes from the TLS layer.
fn is_tls_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        let tls = error.is::<async_nats::rustls::Error>()
            || error
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| inner.is::<async_nats::rustls::Error>());
        if tls {
            return true;
        }
        cause = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_comma_separated_list_names_every_server() {
        let (addresses, login) = servers("nats://127.0.0.1:4222, nats://127.0.0.1:4223,").unwrap();
        assert_eq!(addresses.len(), 2);
        assert_eq!(addresses[1].port(), 4223);
        assert_eq!(login, None);
    }

    #[test]
    fn a_bad_or_empty_list_says_which_url_without_its_secret() {
        assert!(servers("nats://a:x").unwrap_err().contains("`nats://a:x`"));
        let error = servers("nats://user:hunter2@a:x").unwrap_err();
        assert!(error.contains("`nats://***@a:x`"), "{error}");
        assert!(!error.contains("hunter2"));
        assert_eq!(servers(" , ").unwrap_err(), "no server URL");
    }

    #[test]
    fn credentials_in_the_urls_become_the_login_and_leave_the_addresses() {
        let (addresses, login) =
            servers("nats://node:pw@127.0.0.1:4222,tls://node:pw@127.0.0.1:4223").unwrap();
        assert_eq!(
            login,
            Some(UrlLogin::UserPassword("node".into(), Secret::new("pw")))
        );
        assert_eq!(addresses[0].as_url_str(), "nats://127.0.0.1:4222");
        assert!(addresses[1].tls_required());
        assert!(!addresses[1].has_user_pass());
        let (_, login) = servers("nats://t0ken@127.0.0.1:4222").unwrap();
        assert_eq!(login, Some(UrlLogin::Token(Secret::new("t0ken"))));
        let mixed = servers("nats://a:b@127.0.0.1:1,nats://c:d@127.0.0.1:2").unwrap_err();
        assert_eq!(mixed, "the URLs hold different credentials");
    }

    #[test]
    fn redacting_hides_only_the_credentials() {
        assert_eq!(redact("nats://u:p@h:4222"), "nats://***@h:4222");
        assert_eq!(redact("nats://h:4222"), "nats://h:4222");
        assert_eq!(redact("tls://t@a:1,nats://b:2"), "tls://***@a:1,nats://b:2");
    }

    #[tokio::test]
    async fn a_url_login_beside_a_configured_one_or_a_bad_seed_is_refused() {
        let cluster = ClusterConfig {
            nats_url: "nats://u:p@127.0.0.1:4222".into(),
            nats_token: Some(Secret::new("t")),
            ..ClusterConfig::default()
        };
        let error = options(&cluster, "n", ServerErrors::default())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("use one"), "{error}");
        let cluster = ClusterConfig {
            nats_nkey_seed: Some(Secret::new("SUnotaseed")),
            ..ClusterConfig::default()
        };
        let error = options(&cluster, "n", ServerErrors::default())
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid configuration: cluster.nats_nkey_seed: is not an NKey seed"
        );
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("node.creds");
        std::fs::write(&creds, "not a credentials file").unwrap();
        let cluster = ClusterConfig {
            nats_creds_file: Some(creds),
            ..ClusterConfig::default()
        };
        let error = options(&cluster, "n", ServerErrors::default())
            .await
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("invalid configuration: cluster.nats_creds_file: "),
            "{error}"
        );
    }
}
