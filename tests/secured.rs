//! A node on a secured NATS and a TLS-only PostgreSQL, as production runs them:
//! TLS with certificates the test makes (the NATS server verifies the clients'
//! certificates too) and NATS users whose subject permissions are the ones
//! `docs/security.md` lists.
//!
//! - a node logged in with a password read from a file runs a run that waits
//!   for approval, and a decision publisher with the minimal permissions
//!   (nats-py, over TLS) resumes it, and is refused everything else;
//! - a wrong password, an untrusted server certificate, an unreadable key file
//!   and a user without a node's permissions each stop `awaken serve` at start-up
//!   with one error line naming the cause, never a hang;
//! - no secret (NATS passwords, the API key, the database password) appears in
//!   the node's output, even at debug level, nor in what its HTTP routes answer;
//! - a node logs in with an NKey seed from a file, and picks up renewed
//!   certificate files when it reconnects, without a restart;
//! - a node reaches a PostgreSQL that accepts TLS only with `verify-full`, and
//!   refuses to start without TLS or with a root certificate that does not match.
//!
//! Needs `nats-server` on the PATH, nats-py in `target/py-venv`
//! (`scripts/setup.sh`), PostgreSQL, and the `awaken` binary built beside.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[allow(dead_code)] // no crash here
#[path = "support/postgres_server.rs"]
mod postgres_server;
#[allow(dead_code)] // this suite uses few of the shared helpers
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncReadExt;

use awaken_cluster::testing::NatsServer;
use postgres_server::PostgresServer;
use serde_json::{Value, json};
use support::tls::{DECIDER_PASSWORD, NODE_PASSWORD, Pki, secured_nats};
use support::{Node, SETTLE, awaken_binary, database, done_run, new_thread, post, waiting_call};

const API_KEY: &str = "api-key-93e0d1";
const DATABASE_PASSWORD: &str = "db-pw-c4d2aa";

/// Longest a refused start-up may take: a denied JetStream request times out
/// (async-nats waits 10 s for an answer) before the node gives up.
const REFUSAL: Duration = Duration::from_secs(60);

/// Writes `text` to `name` in `dir`; its path.
fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A node's configuration: secrets in files beside it, NATS over TLS as
/// `user`, its password in `password_file`, trusting `ca`.
fn node_config(
    dir: &Path,
    pki: &Pki,
    nats: &NatsServer,
    postgres_url: &str,
    user: &str,
    ca: &str,
) -> PathBuf {
    let keys = file(dir, "api-keys.toml", &format!("\"{API_KEY}\" = \"ops\"\n"));
    let store_url = file(dir, "store-url", &format!("{postgres_url}\n"));
    let password = file(dir, "nats-password", &format!("{NODE_PASSWORD}\n"));
    file(
        dir,
        "awaken.toml",
        &format!(
            "[server]\naddress = \"127.0.0.1:0\"\napi_keys_file = \"{keys}\"\n\n\
             [store]\nkind = \"postgres\"\nurl_file = \"{store_url}\"\n\n\
             [cluster]\nnats_url = \"tls://127.0.0.1:{port}\"\nnode_id = \"secured-1\"\n\
             shards = 4\nlease_ttl_secs = 2\n\
             nats_user = \"{user}\"\nnats_password_file = \"{password}\"\n\
             nats_tls_ca_file = \"{ca}\"\nnats_tls_cert_file = \"{cert}\"\n\
             nats_tls_key_file = \"{key}\"\n",
            keys = keys.display(),
            store_url = store_url.display(),
            port = nats.port(),
            password = password.display(),
            ca = pki.path(ca).display(),
            cert = pki.path("client.pem").display(),
            key = pki.path("client-key.pem").display(),
        ),
    )
}

/// The database URL with a password (trust authentication ignores it): it must
/// not show anywhere.
async fn database_with_password() -> (String, awaken_actors::store::TestSchema) {
    let (url, schema) = database().await;
    let url = url.replacen(
        "://postgres@",
        &format!("://postgres:{DATABASE_PASSWORD}@"),
        1,
    );
    assert!(
        url.contains(DATABASE_PASSWORD),
        "the test URL names user postgres"
    );
    (url, schema)
}

/// `text` holds none of the test's secrets.
fn assert_no_secret(what: &str, text: &str) {
    for secret in [NODE_PASSWORD, DECIDER_PASSWORD, API_KEY, DATABASE_PASSWORD] {
        // The message names the place, not the secret.
        assert!(!text.contains(secret), "a secret appears in {what}");
    }
}

/// The decision publisher (nats-py, user `decider`) sends `decision` for
/// `thread`; what it printed.
async fn decide_from_nats_py(
    pki: &Pki,
    nats: &NatsServer,
    thread: &str,
    decision: &Value,
) -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("../target/py-venv/bin/python");
    assert!(python.exists(), "run scripts/setup.sh first (nats-py)");
    let dir = tempfile::tempdir().unwrap();
    let body = file(dir.path(), "decision.json", &decision.to_string());
    let password = file(dir.path(), "password", DECIDER_PASSWORD);
    let output = tokio::time::timeout(
        SETTLE,
        tokio::process::Command::new(python)
            .arg(root.join("py/decide.py"))
            .arg(format!("tls://127.0.0.1:{}", nats.port()))
            .args([
                pki.path("ca.pem"),
                pki.path("client.pem"),
                pki.path("client-key.pem"),
            ])
            .arg("decider")
            .arg(&password)
            .arg(format!("awaken.decisions.{thread}"))
            .arg(&body)
            .output(),
    )
    .await
    .expect("nats-py finishes")
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "nats-py failed: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_on_tls_with_a_password_runs_and_a_restricted_publisher_decides() {
    let pki = Pki::new();
    let nats = secured_nats(&pki).await;
    let (postgres_url, _schema) = database_with_password().await;
    let dir = tempfile::tempdir().unwrap();
    let config = node_config(dir.path(), &pki, &nats, &postgres_url, "node", "ca.pem");
    // Debug level: whatever the libraries log, no secret may be in it.
    let mut node = Node::serve("secured-1", &[&config], &[], &[("RUST_LOG", "debug")]).await;

    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {API_KEY}").parse().unwrap(),
    );
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    let base = node.base.clone();
    let thread = new_thread(&client, &base).await;
    let body = json!({"agentId": "bench-hitl",
        "messages": [{"role": "user", "content": "echo, once approved"}]});
    let (status, queued) = post(
        &client,
        format!("{base}/v1/threads/{thread}/messages"),
        body,
    )
    .await;
    assert_eq!(status, 202, "{queued}");
    let run_id = queued["run_id"].as_str().unwrap().to_owned();
    let call = waiting_call(&client, &base, &run_id).await;

    let decision = json!({"call_id": call, "decision_id": "d-1", "action": "resume",
        "result": {"approved": true}});
    let published = decide_from_nats_py(&pki, &nats, &thread, &decision).await;
    assert_eq!(published["stream"], "AWAKEN_DECISIONS", "{published}");
    let refused = published["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 2, "{published}");
    assert!(
        refused[0]
            .as_str()
            .unwrap()
            .contains("permissions violation for publish"),
        "{published}"
    );
    assert!(
        refused[1]
            .as_str()
            .unwrap()
            .contains("permissions violation for subscription"),
        "{published}"
    );

    let run = done_run(&client, &base, &run_id).await;
    assert_eq!(run["termination"]["type"], "natural_end", "{run}");

    // What the node answers about itself holds no secret either.
    for route in [
        "/v1/capabilities",
        "/v1/config/providers",
        "/v1/config/agents",
        "/metrics",
    ] {
        let response = client.get(format!("{base}{route}")).send().await.unwrap();
        assert!(
            response.status().is_success(),
            "{route}: {}",
            response.status()
        );
        assert_no_secret(route, &response.text().await.unwrap());
    }

    node.signal("TERM");
    let status = tokio::time::timeout(SETTLE, node.child.wait())
        .await
        .expect("the node stops")
        .unwrap();
    assert!(status.success(), "{status}");
    let output = node.output();
    assert!(
        output.contains("connected to NATS"),
        "the log was read at debug level"
    );
    assert_no_secret("the node's output", &output);
}

/// Runs `awaken serve --config <config>`; its exit code and stderr, once it
/// exited.
async fn refused_start(config: &Path) -> (Option<i32>, String) {
    let mut child = tokio::process::Command::new(awaken_binary())
        .arg("serve")
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let read = tokio::spawn(async move {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let _ = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
        (out, err)
    });
    let status = tokio::time::timeout(REFUSAL, child.wait()).await;
    if status.is_err() {
        child.kill().await.unwrap();
    }
    let (stdout, stderr) = read.await.unwrap();
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    let stderr = String::from_utf8_lossy(&stderr).into_owned();
    assert_no_secret("a refused start's output", &format!("{stdout}{stderr}"));
    let Ok(status) = status else {
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        panic!("no refusal within {REFUSAL:?}, a hang; last lines: {tail:#?}");
    };
    assert!(!stdout.contains("listening"), "it never listened: {stdout}");
    (status.unwrap().code(), stderr)
}

/// The last line of `stderr`, which must be the one error line.
fn error_line(stderr: &str) -> &str {
    let line = stderr.lines().last().unwrap_or_default();
    assert!(line.starts_with("error: "), "{line}");
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_refuses_a_bad_login_an_untrusted_server_a_missing_key_or_denied_subjects() {
    let pki = Pki::new();
    let nats = secured_nats(&pki).await;
    let (postgres_url, _schema) = database_with_password().await;
    let dir = tempfile::tempdir().unwrap();

    // A wrong password.
    let config = node_config(dir.path(), &pki, &nats, &postgres_url, "node", "ca.pem");
    std::fs::write(dir.path().join("nats-password"), "not-the-password").unwrap();
    let (code, stderr) = refused_start(&config).await;
    assert_eq!(code, Some(2), "{stderr}");
    let line = error_line(&stderr);
    assert!(line.contains("NATS refused the node's login"), "{line}");
    assert!(
        line.contains("cluster.nats_url (tls://127.0.0.1:"),
        "{line}"
    );

    // A server certificate from a CA the node does not trust.
    let config = node_config(
        dir.path(),
        &pki,
        &nats,
        &postgres_url,
        "node",
        "rogue-ca.pem",
    );
    let (code, stderr) = refused_start(&config).await;
    assert_eq!(code, Some(2), "{stderr}");
    let line = error_line(&stderr);
    assert!(line.contains("TLS with NATS failed"), "{line}");

    // The client key file is not there (a Secret not mounted).
    let config = node_config(dir.path(), &pki, &nats, &postgres_url, "node", "ca.pem");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &pki.path("client-key.pem").display().to_string(),
        "/nonexistent/client-key.pem",
    );
    std::fs::write(&config, text).unwrap();
    let (code, stderr) = refused_start(&config).await;
    assert_eq!(code, Some(2), "{stderr}");
    let line = error_line(&stderr);
    assert!(
        line.starts_with(
            "error: invalid configuration: cluster.nats_tls_key_file: cannot read \
             `/nonexistent/client-key.pem`"
        ),
        "{line}"
    );

    // The decision publisher's login: NATS refuses the node's subjects.
    let config = node_config(dir.path(), &pki, &nats, &postgres_url, "decider", "ca.pem");
    std::fs::write(dir.path().join("nats-password"), DECIDER_PASSWORD).unwrap();
    let (code, stderr) = refused_start(&config).await;
    assert_eq!(code, Some(1), "{stderr}");
    let line = error_line(&stderr);
    assert!(line.contains("Permissions Violation"), "{line}");
    assert!(line.contains("docs/security.md"), "{line}");
}

/// A client whose requests carry the test's API key.
fn authorized_client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {API_KEY}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// Runs agent `bench-text`'s one-step run on a new thread through `base` (the
/// dispatch goes through NATS) and waits for its natural end.
async fn a_run_finishes(client: &reqwest::Client, base: &str) {
    let thread = new_thread(client, base).await;
    let body = json!({"agentId": "bench-text", "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{base}/v1/threads/{thread}/messages");
    let (status, queued) = post(client, url, body).await;
    assert_eq!(status, 202, "{queued}");
    let run = done_run(client, base, queued["run_id"].as_str().unwrap()).await;
    assert_eq!(run["termination"]["type"], "natural_end", "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nkey_login_works_and_renewed_certificates_are_used_on_reconnection() {
    let pki = Pki::new();
    let mut nats = secured_nats(&pki).await;
    let (postgres_url, _schema) = database_with_password().await;
    let dir = tempfile::tempdir().unwrap();
    let config = node_config(dir.path(), &pki, &nats, &postgres_url, "node", "ca.pem");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "nats_user = \"node\"\n",
        &format!(
            "nats_nkey_seed_file = \"{}\"\n",
            pki.path("nkey.seed").display()
        ),
    );
    let text = text
        .lines()
        .filter(|line| !line.starts_with("nats_password_file"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&config, text).unwrap();
    let node = Node::serve("secured-1", &[&config], &[], &[("RUST_LOG", "info")]).await;
    let client = authorized_client();
    a_run_finishes(&client, &node.base).await;

    // Every certificate renewed under a new CA, in place; the server restarts
    // on them. The node reconnects with the files as they are now.
    pki.issue("awaken test CA, renewed");
    nats.restart().await.unwrap();
    a_run_finishes(&client, &node.base).await;
    let output = node.output();
    assert!(
        output.matches("connected to NATS").count() >= 2,
        "the node reconnected: {output}"
    );
    assert_no_secret("the node's output", &output);
    assert!(
        !output.contains(&pki.nkey.seed().unwrap()),
        "the NKey seed appears in the node's output"
    );
}

/// A single node's configuration on the PostgreSQL at `port`, TLS as `tls`
/// says (lines of `[store]`).
fn postgres_node_config(dir: &Path, port: u16, tls: &str) -> PathBuf {
    let keys = file(dir, "api-keys.toml", &format!("\"{API_KEY}\" = \"ops\"\n"));
    file(
        dir,
        "awaken.toml",
        &format!(
            "[server]\naddress = \"127.0.0.1:0\"\napi_keys_file = \"{keys}\"\n\n\
             [store]\nkind = \"postgres\"\n\
             url = \"postgres://postgres:{DATABASE_PASSWORD}@127.0.0.1:{port}/postgres\"\n{tls}\n",
            keys = keys.display(),
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reaches_a_tls_only_postgres_with_verify_full_and_nothing_less() {
    let pki = Pki::new();
    let certificate = std::fs::read_to_string(pki.path("server.pem")).unwrap();
    let key = std::fs::read_to_string(pki.path("server-key.pem")).unwrap();
    let postgres = PostgresServer::start_tls_only(&certificate, &key).await;
    let dir = tempfile::tempdir().unwrap();

    let verified = format!(
        "ssl_mode = \"verify-full\"\nssl_root_cert_file = \"{}\"",
        pki.path("ca.pem").display()
    );
    let config = postgres_node_config(dir.path(), postgres.port(), &verified);
    let mut node = Node::serve("pg-tls", &[&config], &[], &[("RUST_LOG", "debug")]).await;
    let client = authorized_client();
    let thread = new_thread(&client, &node.base).await;
    let response = client
        .get(format!("{}/v1/threads/{thread}", node.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    node.signal("TERM");
    assert!(node.child.wait().await.unwrap().success());
    assert_no_secret("the node's output", &node.output());

    // Without TLS the server lets nobody in; with another CA's root the node
    // does not trust the server. Both stop start-up naming the store.
    let plain = postgres_node_config(dir.path(), postgres.port(), "ssl_mode = \"disable\"");
    let (code, stderr) = refused_start(&plain).await;
    assert_eq!(code, Some(2), "{stderr}");
    let line = error_line(&stderr);
    assert!(line.contains("store.url"), "{line}");
    assert!(line.contains("no encryption"), "{line}");
    let rogue = format!(
        "ssl_mode = \"verify-full\"\nssl_root_cert_file = \"{}\"",
        pki.path("rogue-ca.pem").display()
    );
    let untrusted = postgres_node_config(dir.path(), postgres.port(), &rogue);
    let (code, stderr) = refused_start(&untrusted).await;
    assert_eq!(code, Some(2), "{stderr}");
    let line = error_line(&stderr);
    assert!(line.contains("store.url"), "{line}");
    assert!(line.to_lowercase().contains("certificate"), "{line}");
}
