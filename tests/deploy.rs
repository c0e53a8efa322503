//! The deployment in `deploy/`, checked offline: the Helm chart and the kustomize
//! overlays are rendered (helm and kubectl from `scripts/setup.sh`), every object
//! is validated against the Kubernetes OpenAPI schemas of the oldest and newest
//! supported versions, the pod spec is checked for what schemas cannot say
//! (`tests/deploy/check_manifests.py`), and then the binary is started exactly as
//! the pod would start it — the rendered args, environment and config files, with
//! the Secret and the pod name filled in and the service URLs pointed at a local
//! nats-server and PostgreSQL — and must become ready. A variable the manifests
//! set that the binary does not read, or a config key it refuses, fails here.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[allow(dead_code)] // no crash here
#[path = "support/postgres_server.rs"]
mod postgres_server;
#[allow(dead_code)] // the deploy checks use few of the shared helpers
mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use std::collections::BTreeMap;

use awaken_cluster::testing::NatsServer;
use postgres_server::PostgresServer;
use serde_json::Value;
use support::tls::{NODE_PASSWORD, Pki, secured_nats};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// The Kubernetes versions the objects must be valid for: the chart's
/// `kubeVersion` floor and the newest the validator knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.27.0", "1.37.0"];
const DEADLINE: Duration = Duration::from_secs(60);
/// The API key the test's Secret file holds.
const API_KEY: &str = "k-deploy-test";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tool(name: &str) -> PathBuf {
    let path = root().join("target/tools").join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup.sh",
        path.display()
    );
    path
}

/// Runs `program args` and returns its stdout; fails the test with its stderr.
fn output(program: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Validates and checks `rendered`; what the pod would run.
fn checked(name: &str, rendered: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.yaml"));
    std::fs::write(&path, rendered).unwrap();
    let python = root().join("target/py-venv/bin/python");
    let script = root().join("tests/deploy/check_manifests.py");
    let mut pod = Value::Null;
    for version in KUBERNETES_VERSIONS {
        let out = output(
            &python,
            &[script.to_str().unwrap(), path.to_str().unwrap(), version],
        );
        pod = serde_json::from_str(&out).unwrap();
    }
    pod
}

fn helm(args: &[&str]) -> String {
    let mut all = vec!["template", "awaken", "deploy/helm/awaken"];
    all.extend_from_slice(args);
    output(&tool("helm"), &all)
}

fn kustomize(overlay: &str) -> String {
    output(
        &tool("kubectl"),
        &["kustomize", &format!("deploy/k8s/overlays/{overlay}")],
    )
}

/// What a rendered pod finds around it: the files of its Secrets, the database
/// its Secret's URL names, and NATS.
struct Surroundings {
    /// Secret name → (file name, content).
    secrets: BTreeMap<&'static str, Vec<(&'static str, String)>>,
    postgres_url: String,
    nats_url: String,
    /// What keeps the services and certificates alive.
    _held: Vec<Box<dyn std::any::Any + Send>>,
}

impl Surroundings {
    /// A local NATS and PostgreSQL schema; the API keys' Secret.
    async fn plain() -> Self {
        let (postgres_url, schema) = support::database().await;
        let nats = NatsServer::start().await.unwrap();
        let keys = format!("[server.api_keys]\n\"{API_KEY}\" = \"tenant-deploy\"\n");
        Self {
            secrets: BTreeMap::from([("awaken-api-keys", vec![("secrets.toml", keys)])]),
            postgres_url,
            nats_url: nats.url(),
            _held: vec![Box::new(nats), Box::new(schema)],
        }
    }

    /// A NATS that requires TLS, client certificates and a password, and a
    /// PostgreSQL that accepts TLS only; their Secrets as cert-manager and an
    /// operator would write them.
    async fn secured() -> Self {
        let pki = Pki::new();
        let nats = secured_nats(&pki).await;
        let read = |name: &str| std::fs::read_to_string(pki.path(name)).unwrap();
        let postgres =
            PostgresServer::start_tls_only(&read("server.pem"), &read("server-key.pem")).await;
        let client_tls = vec![
            ("ca.crt", read("ca.pem")),
            ("tls.crt", read("client.pem")),
            ("tls.key", read("client-key.pem")),
        ];
        Self {
            secrets: BTreeMap::from([
                (
                    "awaken-nats",
                    vec![("password", format!("{NODE_PASSWORD}\n"))],
                ),
                ("awaken-nats-tls", client_tls),
                ("awaken-postgres-tls", vec![("ca.crt", read("ca.pem"))]),
            ]),
            postgres_url: format!("postgres://postgres@127.0.0.1:{}/postgres", postgres.port()),
            nats_url: format!("tls://127.0.0.1:{}", nats.port()),
            _held: vec![Box::new(nats), Box::new(postgres), Box::new(pki)],
        }
    }
}

/// Starts `awaken` as `pod` describes in `around` and waits for
/// `/health/ready`; with API keys from the Secret file, checks they are the ones
/// in force.
async fn starts_and_becomes_ready(pod: &Value, around: &Surroundings) {
    let dir = tempfile::tempdir().unwrap();
    let local = |path: &str| dir.path().join(path.trim_start_matches('/'));
    // Paths in the files (the Secrets' mounts) point into the local pod root.
    let root = format!("{}/etc/awaken/", dir.path().display());
    for (path, text) in pod["files"].as_object().unwrap() {
        let file = local(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let text = text.as_str().unwrap().replace("/etc/awaken/", &root);
        std::fs::write(file, text).unwrap();
    }
    for (secret, mount) in pod["secrets"].as_object().unwrap() {
        let files = around
            .secrets
            .get(secret.as_str())
            .unwrap_or_else(|| panic!("the test has no Secret {secret}"));
        let mount = local(mount.as_str().unwrap());
        std::fs::create_dir_all(&mount).unwrap();
        for (name, content) in files {
            std::fs::write(mount.join(name), content).unwrap();
        }
    }
    let with_keys = pod["secrets"].get("awaken-api-keys").is_some();
    let postgres_url = around.postgres_url.clone();

    let mut command = Command::new(support::awaken_binary());
    for arg in pod["args"].as_array().unwrap() {
        let arg = arg.as_str().unwrap();
        if arg.starts_with("/etc/awaken/") {
            command.arg(local(arg));
        } else {
            command.arg(arg);
        }
    }
    // The pod listens on 0.0.0.0:3000; here any free loopback port.
    command.args(["--address", "127.0.0.1:0"]);
    command.env_clear();
    command.env("PATH", std::env::var("PATH").unwrap_or_default());
    for variable in pod["env"].as_array().unwrap() {
        let name = variable["name"].as_str().unwrap();
        let value = if let Some(value) = variable["value"].as_str() {
            value.to_owned()
        } else if variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" {
            "awaken-7d9f8-x2k4p".to_owned()
        } else if variable["valueFrom"]["secretKeyRef"]["name"] == "awaken-postgres" {
            postgres_url.clone()
        } else {
            panic!("the test cannot fill in {variable}");
        };
        command.env(name, value);
    }
    if pod["cluster"].as_bool().unwrap() {
        // The Service names of NATS point here: one local server, one copy.
        command.env("AWAKEN_CLUSTER__NATS_URL", &around.nats_url);
        command.env("AWAKEN_CLUSTER__REPLICAS", "1");
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            eprintln!("[awaken] {line}");
        }
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = tokio::time::timeout(DEADLINE, stdout.next_line())
        .await
        .expect("the node listens in time")
        .unwrap()
        .expect("the node started (its error is above)");
    let event: Value = serde_json::from_str(&listening).unwrap();
    assert_eq!(event["event"], "listening", "{listening}");
    let base = format!("http://{}", event["address"].as_str().unwrap());

    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let response = client.get(format!("{base}/health/ready")).send().await;
        if response.as_ref().is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never ready: {response:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if with_keys {
        let threads = format!("{base}/v1/threads");
        let refused = client.get(&threads).send().await.unwrap();
        assert_eq!(refused.status(), 401, "the Secret's keys are in force");
        let allowed = client
            .get(&threads)
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(allowed.status(), 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_in_cluster_mode_with_every_option_renders_valid_objects_that_start() {
    let rendered = helm(&[
        "--set",
        "server.apiKeysSecret=awaken-api-keys",
        "--set",
        "autoscaling.enabled=true",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.grafanaDashboard.enabled=true",
        "--set",
        "cluster.runInput=inbox",
        "--set-string",
        "configToml=[permissions]\ndefault_behavior = \"ask\"\n",
    ]);
    let pod = checked("chart-cluster", &rendered);
    let kinds: Vec<&str> = pod["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kind| kind.as_str().unwrap())
        .collect();
    for kind in [
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    starts_and_becomes_ready(&pod, &Surroundings::plain().await).await;
}

/// The chart with every Secret of a secured deployment: the node's NATS login
/// (user and password file) and TLS with a client certificate, PostgreSQL with
/// `verify-full` against a CA from a Secret. The rendered files and settings
/// must get the binary onto a NATS and a PostgreSQL that accept nothing less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_with_nats_credentials_and_tls_everywhere_starts_on_secured_services() {
    let rendered = helm(&[
        "--set",
        "nats.url=tls://nats:4222",
        "--set",
        "nats.auth.existingSecret=awaken-nats",
        "--set",
        "nats.auth.user=node",
        "--set",
        "nats.auth.passwordKey=password",
        "--set",
        "nats.tls.existingSecret=awaken-nats-tls",
        "--set",
        "nats.tls.clientCertificate=true",
        "--set",
        "postgres.sslMode=verify-full",
        "--set",
        "postgres.tls.existingSecret=awaken-postgres-tls",
    ]);
    let pod = checked("chart-secured", &rendered);
    assert!(pod["cluster"].as_bool().unwrap());
    starts_and_becomes_ready(&pod, &Surroundings::secured().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_in_single_mode_renders_valid_objects_that_start() {
    let pod = checked("chart-single", &helm(&["--set", "mode=single"]));
    assert!(!pod["cluster"].as_bool().unwrap());
    starts_and_becomes_ready(&pod, &Surroundings::plain().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_single_node_overlay_renders_valid_objects_that_start() {
    let pod = checked("kustomize-single", &kustomize("single-node"));
    assert!(!pod["cluster"].as_bool().unwrap());
    starts_and_becomes_ready(&pod, &Surroundings::plain().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_node_overlay_renders_valid_objects_that_start() {
    let pod = checked("kustomize-three-node", &kustomize("three-node"));
    assert!(pod["cluster"].as_bool().unwrap());
    starts_and_becomes_ready(&pod, &Surroundings::plain().await).await;
}

#[test]
fn the_chart_refuses_values_its_schema_forbids() {
    for (set, needle) in [
        ("mode=both", "mode"),
        ("replicaCount=0", "replicaCount"),
        ("nats.url=http://nats:4222", "url"),
        ("postgres.poolSize=0", "poolSize"),
        ("postgres.sslMode=maybe", "sslMode"),
        ("cluster.runInput=kv", "runInput"),
        (
            "nats.auth.user=node",
            "nats.auth.user needs nats.auth.passwordKey",
        ),
        (
            "nats.auth.tokenKey=token",
            "nats.auth.existingSecret, which is not set",
        ),
        (
            "nats.auth.existingSecret=s,nats.auth.tokenKey=t,nats.auth.credsKey=c",
            "set one login",
        ),
    ] {
        let out = std::process::Command::new(tool("helm"))
            .args(["template", "awaken", "deploy/helm/awaken", "--set", set])
            .current_dir(root())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{set} was accepted");
        let error = String::from_utf8_lossy(&out.stderr);
        assert!(error.contains(needle), "{set}: {error}");
    }
}

/// The alerts and the Grafana dashboard in `deploy/observability`
/// (`tests/deploy/check_observability.py`): promtool checks the rule groups and
/// runs their unit tests (`alerts.test.yaml`), every dashboard query parses and
/// filters by the dashboard's variables, and `kubectl kustomize` and the chart
/// (`metrics.prometheusRule.enabled`, `metrics.grafanaDashboard.enabled`) render
/// both unchanged.
#[test]
fn the_alerts_and_the_dashboard_pass_promtool_and_render_unchanged() {
    // The script needs promtool beside helm and kubectl: the hint to run setup.
    tool("promtool");
    let python = root().join("target/py-venv/bin/python");
    let script = root().join("tests/deploy/check_observability.py");
    let out = output(&python, &[script.to_str().unwrap()]);
    assert!(out.contains("all checks passed"), "{out}");
}
