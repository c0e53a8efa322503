//! `awaken node` runs what `awaken serve` runs with the same configuration: the
//! file's agents (and no demo agents beside them), and agents written through
//! any node's config API. Processes: a nats-server, a PostgreSQL schema, an
//! `awaken node` that owns the cluster's only shard, and an `awaken serve` that
//! accepts the runs, so every run executes on the `awaken node` — which pushes
//! its metrics to an OTLP collector in the test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;
mod otlp_support;

use std::process::Stdio;
use std::time::Duration;

use awaken_actors::store::PostgresStore;
use awaken_cluster::testing::NatsServer;
use http_support::{EventReader, awaken_serve, finish_type, json, user};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const DEADLINE: Duration = Duration::from_secs(60);

/// The agents both processes have from their file: a scripted provider, a model
/// and `greeter`; no `demo_agents`, so no demo.
const ENTRIES: &str = r#"
[providers.local]
adapter = "scripted"
script = { steps = [{ text = "hello from the file" }] }

[models.fast]
provider = "local"
model = "script"

[agents.greeter]
model = "fast"
"#;

/// `awaken node` with `config` and the flags, once it printed `ready`; its
/// stderr lines go to the returned channel.
async fn awaken_node(
    config: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_awaken"))
        .arg("node")
        .arg("--config")
        .arg(config)
        .args(args)
        .env("RUST_LOG", "warn,awaken_gateway=info")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the awaken binary runs");
    let (tx, log) = tokio::sync::mpsc::unbounded_channel();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            eprintln!("[awaken node] {line}");
            let _ = tx.send(line);
        }
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(DEADLINE, stdout.next_line())
        .await
        .expect("the node reports ready in time")
        .unwrap()
        .expect("the node printed a line");
    assert!(ready.contains(r#""event":"ready""#), "{ready}");
    (child, log)
}

/// Waits for a log line containing `needle`.
async fn logged(log: &mut tokio::sync::mpsc::UnboundedReceiver<String>, needle: &str) {
    let wait = async {
        while let Some(line) = log.recv().await {
            if line.contains(needle) {
                return;
            }
        }
        panic!("the node exited before logging {needle:?}");
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {needle:?}"));
}

/// Starts a run of `agent` through `base` and returns its last event.
async fn run(client: &reqwest::Client, base: &str, agent: &str) -> Value {
    let response = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({"agentId": agent, "messages": user("hi")}))
        .send()
        .await
        .unwrap();
    let events = tokio::time::timeout(DEADLINE, EventReader::new(response).rest())
        .await
        .expect("the run's stream ends");
    assert_eq!(finish_type(&events), "natural_end", "{events:?}");
    serde_json::to_value(events.last().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_runs_the_agents_of_its_file_and_of_the_config_api() {
    let nats = NatsServer::start().await.unwrap();
    let (_store, schema) = PostgresStore::for_tests().await;
    let base = std::env::var("AWAKEN_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let postgres_url = format!("{base}?options=-c%20search_path%3D{}", schema.name());
    let dir = tempfile::tempdir().unwrap();
    let node_config = dir.path().join("node.toml");
    std::fs::write(&node_config, ENTRIES).unwrap();

    // One shard: the node that sorts first (`a-node`) holds it, so it runs
    // every thread; the server only accepts.
    let mut collector = otlp_support::full_collector().await;
    let (_node, mut node_log) = awaken_node(
        &node_config,
        &[
            "--nats-url",
            &nats.url(),
            "--postgres-url",
            &postgres_url,
            "--node-id",
            "a-node",
            "--shards",
            "1",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint),
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "100"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=a-node"),
        ],
    )
    .await;
    let serve_config = format!(
        "{ENTRIES}\n[server]\naddress = \"127.0.0.1:0\"\n\
         [server.config_api]\nwrites_without_keys = true\n\
         [store]\nkind = \"postgres\"\nurl = \"{postgres_url}\"\n\
         [cluster]\nnats_url = \"{}\"\nnode_id = \"b-serve\"\nshards = 1\n",
        nats.url()
    );
    let (_serve, base, _serve_dir) = awaken_serve(&serve_config).await.unwrap();
    let client = reqwest::Client::new();

    // The file's agent runs on the node, and the demo is not there beside it.
    let finish = run(&client, &base, "greeter").await;
    assert_eq!(finish["result"]["response"], "hello from the file");
    // The node ran it, and its metrics say so, with the cluster it sees.
    let export = otlp_support::export_where(&mut collector.metrics, |export| {
        let value = |name, labels: &[(&str, &str)]| {
            export
                .has(name)
                .then(|| export.metric(name).value(labels))
                .flatten()
        };
        value("awaken.runs_finished", &[("agent", "greeter")]) == Some(1.0)
            && value("awaken.cluster_members", &[]) == Some(2.0)
    })
    .await;
    assert_eq!(export.resource["service.instance.id"], "a-node");
    assert_eq!(export.metric("awaken.shards_owned").value(&[]), Some(1.0));
    let response = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({"agentId": "demo", "messages": user("hi")}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);

    // An agent written through the server's config API runs on the node.
    for (namespace, body) in [
        (
            "providers",
            json!({"id": "p", "adapter": "scripted", "script": {"steps": [{"text": "from the config API"}]}}),
        ),
        (
            "models",
            json!({"id": "m", "provider": "p", "model": "script"}),
        ),
        ("agents", json!({"id": "late", "model": "m"})),
    ] {
        let response = client
            .post(format!("{base}/v1/config/{namespace}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, body) = json(response).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let listing = client
        .get(format!("{base}/v1/config/agents"))
        .send()
        .await
        .unwrap();
    let (_, listing) = json(listing).await;
    let revision = listing["revision"].as_u64().unwrap();
    logged(
        &mut node_log,
        &format!("config revision applied revision={revision}"),
    )
    .await;
    let finish = run(&client, &base, "late").await;
    assert_eq!(finish["result"]["response"], "from the config API");
}
