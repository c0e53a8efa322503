//! A real HTTP server on a free loopback port, and a client that reads its SSE.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use std::sync::Arc;

use awaken_actors::contract::{AgentEvent, StreamEvent};
use awaken_actors::store::{PostgresStore, TestSchema};
use awaken_actors::thread::ThreadConfig;
use awaken_cluster::RunControl;
use awaken_cluster::local::{LocalNode, LocalNodeConfig};
use awaken_gateway::demo::{self, FakeFiles, Journal};
use awaken_gateway::protocols::mcp::McpHub;
use awaken_gateway::runtime_config::ConfigDocument;
use awaken_gateway::server::{AppState, Server, ServerConfig};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::{Response, StatusCode};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub mod delegating;
pub mod gated;

/// A served node: its base URL, and a handle that stops it.
pub struct TestServer {
    pub base: String,
    control: Arc<dyn RunControl>,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<bool>>>,
}

impl TestServer {
    /// A single node with the demo agents on an in-memory store.
    pub async fn local(config: ServerConfig) -> Self {
        Self::local_with(LocalNodeConfig::default(), config).await
    }

    /// A single node with the demo agents on an in-memory store, set up by `node`.
    pub async fn local_with(node: LocalNodeConfig, config: ServerConfig) -> Self {
        let builder = demo::builder(
            ThreadConfig::default(),
            Arc::new(FakeFiles::with_demo_files()),
            Journal::default(),
        )
        .unwrap();
        let node = LocalNode::start(builder, node).await.unwrap();
        Self::serve(Arc::new(node), config).await
    }

    /// A single node with the demo agents on a PostgreSQL store (a fresh schema,
    /// dropped with the returned guard).
    pub async fn on_postgres() -> (Self, TestSchema) {
        let (store, schema) = PostgresStore::for_tests().await;
        let builder = demo::builder(
            ThreadConfig::default(),
            Arc::new(FakeFiles::with_demo_files()),
            Journal::default(),
        )
        .unwrap()
        .with_thread_run_store(Arc::new(store));
        let node = LocalNode::start(builder, LocalNodeConfig::default())
            .await
            .unwrap();
        (
            Self::serve(Arc::new(node), ServerConfig::default()).await,
            schema,
        )
    }

    /// Serves `control` on a free loopback port.
    pub async fn serve(control: Arc<dyn RunControl>, mut config: ServerConfig) -> Self {
        config.address = "127.0.0.1:0".into();
        let state = AppState::start(
            Arc::clone(&control),
            config,
            ConfigDocument::default(),
            Arc::new(McpHub::new()),
        )
        .await
        .unwrap();
        let server = Server::bind(state).await.unwrap();
        let base = format!("http://{}", server.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async move {
            let _ = stopped.await;
        }));
        Self {
            base,
            control,
            client: reqwest::Client::new(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A single node whose look-ups of queued runs wait at the returned gate:
    /// `GET /v1/runs/{unknown id}` holds a request place until it opens.
    pub async fn gated(config: ServerConfig) -> (Self, gated::Gate) {
        let (node, gate) = gated::Gated::start().await;
        (Self::serve(Arc::new(node), config).await, gate)
    }

    /// The value of an unlabelled metric of `/metrics` (`awaken_…`), 0 if absent.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = self.get("/metrics").await.text().await.unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .map_or(0.0, |value| value.trim().parse().unwrap())
    }

    /// Waits until the metric `name` is at least `wanted` (panics after 20 s: a
    /// figure the server never reached).
    pub async fn until_metric(&self, name: &str, wanted: f64) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let value = self.metric(name).await;
            if value >= wanted {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} stayed at {value}, below {wanted}"
            );
            tokio::task::yield_now().await;
        }
    }

    /// The node behind the server.
    pub fn control(&self) -> Arc<dyn RunControl> {
        Arc::clone(&self.control)
    }

    /// The JSON Schemas of the inputs of `agents`' tools, by tool name: what the
    /// models are offered.
    pub fn tool_schemas(&self, agents: &[&str]) -> Value {
        let mut schemas = serde_json::Map::new();
        for agent in agents {
            let resolved = self.control.runtime().resolve(agent).unwrap();
            for tool in resolved.tool_descriptors.iter() {
                schemas.insert(tool.name.clone(), tool.parameters.clone());
            }
        }
        Value::Object(schemas)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> Response {
        self.client.get(self.url(path)).send().await.unwrap()
    }

    pub async fn post(&self, path: &str, body: Value) -> Response {
        self.client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn put(&self, path: &str, body: Value) -> Response {
        self.client
            .put(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn delete(&self, path: &str) -> Response {
        self.client.delete(self.url(path)).send().await.unwrap()
    }

    /// Stops accepting, waits for in-flight requests; `true` when they all finished.
    pub async fn shutdown(mut self) -> bool {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take().unwrap().await.unwrap().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The JSON body and status of a response.
pub async fn json(response: Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text:?}"));
    (status, body)
}

/// Asserts an error response: the status and `{"error": "..."}` mentioning `needle`.
pub async fn expect_error(response: Response, status: StatusCode, needle: &str) {
    let (got, body) = json(response).await;
    assert_eq!(got, status, "{body}");
    let error = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error field: {body}"));
    assert!(
        error.to_lowercase().contains(&needle.to_lowercase()),
        "{error:?} should mention {needle:?}"
    );
}

/// An SSE response's events, read as they arrive.
pub struct EventReader {
    events: std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<eventsource_stream::Event, String>> + Send>,
    >,
}

impl EventReader {
    pub fn new(response: Response) -> Self {
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        let events = response
            .bytes_stream()
            .eventsource()
            .map(|event| event.map_err(|e| e.to_string()));
        Self {
            events: Box::pin(events),
        }
    }

    /// The next run event (`id` checked against `seq`); `None` at the end.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        loop {
            let frame = self.events.next().await?.unwrap();
            if frame.data.is_empty() {
                continue;
            }
            let event: StreamEvent = serde_json::from_str(&frame.data).unwrap();
            assert_eq!(frame.id, event.seq.to_string(), "the SSE id is the seq");
            return Some(event);
        }
    }

    /// Every event until the stream ends.
    pub async fn rest(mut self) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}

/// The ids of the run's first `RunStart`.
pub fn run_ids(events: &[StreamEvent]) -> (String, String) {
    events
        .iter()
        .find_map(|event| match &event.event {
            AgentEvent::RunStart {
                thread_id, run_id, ..
            } => Some((thread_id.to_string(), run_id.to_string())),
            _ => None,
        })
        .expect("a run_start event")
}

/// The ids of the calls that suspended.
pub fn suspended_calls(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.event {
            AgentEvent::ToolCallDone { id, result, .. } if result.suspension.is_some() => {
                Some(id.to_string())
            }
            _ => None,
        })
        .collect()
}

/// How the activation ended, as the `termination.type` of its `RunFinish`.
pub fn finish_type(events: &[StreamEvent]) -> String {
    let last = events.last().expect("events");
    let value = serde_json::to_value(last).unwrap();
    assert_eq!(value["event_type"], "run_finish", "{value}");
    value["termination"]["type"].as_str().unwrap().to_owned()
}

/// Asserts `events` are numbered `from`, `from + 1`, ... without a gap.
pub fn assert_contiguous(events: &[StreamEvent], from: u64) {
    let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
    let expected: Vec<u64> = (from..from + events.len() as u64).collect();
    assert_eq!(seqs, expected);
}

/// A user message body.
pub fn user(text: &str) -> Value {
    serde_json::json!([{"role": "user", "content": text}])
}

/// Runs `tests/clients/<script> <base>` with node (a real protocol client from
/// npm, installed by `scripts/setup.sh`) and returns the JSON it prints.
pub async fn node_client(script: &str, base: &str) -> Value {
    node_client_with(script, &[base]).await
}

/// Runs `tests/clients/<script> <args>` with node and returns the JSON it prints.
pub async fn node_client_with(script: &str, args: &[&str]) -> Value {
    let clients = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
    assert!(
        std::path::Path::new(clients).join("node_modules").is_dir(),
        "the npm clients are not installed: run scripts/setup.sh"
    );
    let output = tokio::process::Command::new("node")
        .arg(script)
        .args(args)
        .current_dir(clients)
        .kill_on_drop(true)
        .output()
        .await
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} failed ({}):\n{}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{script} printed {stdout}: {e}"))
}

/// Runs `tests/clients/<script> <args>` with the test venv's Python (the A2A
/// reference client, installed by `scripts/setup.sh`) and returns the JSON it
/// prints last.
pub async fn python_client(script: &str, args: &[&str]) -> Value {
    let clients = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
    assert!(
        std::path::Path::new(PYTHON).exists(),
        "the Python clients are not installed: run scripts/setup.sh"
    );
    let output = tokio::process::Command::new(PYTHON)
        .arg(script)
        .args(args)
        .current_dir(clients)
        .kill_on_drop(true)
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} {args:?} failed ({}):\n{}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{script} printed {stdout}: {e}"))
}

/// `awaken serve` with `config` (TOML) as a process and its base URL; what it wrote
/// to stderr when it exits before listening.
pub async fn awaken_serve(
    config: &str,
) -> Result<(tokio::process::Child, String, tempfile::TempDir), String> {
    awaken_serve_with(config, &[]).await
}

/// [`awaken_serve`] with the variables `env` set.
pub async fn awaken_serve_with(
    config: &str,
    env: &[(&str, &str)],
) -> Result<(tokio::process::Child, String, tempfile::TempDir), String> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("awaken.toml");
    std::fs::write(&path, config).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_awaken"))
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if event["event"] == "listening" {
            let base = format!("http://{}", event["address"].as_str().unwrap());
            return Ok((child, base, dir));
        }
    }
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    Err(stderr)
}

/// The test venv's Python (made by `scripts/setup.sh`).
pub const PYTHON: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/py-venv/bin/python");
/// The MCP server built with the reference Python SDK.
pub const MCP_SERVER_SCRIPT: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/mcp_server.py");

/// Server settings under which a test may write through the config API without
/// keys, with the test venv's Python allowed as a stdio MCP server.
pub fn writable_config() -> ServerConfig {
    let mut config = ServerConfig::default();
    config.config_api.writes_without_keys = true;
    config.config_api.mcp_stdio_commands = vec![PYTHON.to_owned()];
    config
}

/// An `mcp-servers` entry that starts [`MCP_SERVER_SCRIPT`] on stdio.
pub fn mcp_stdio_entry(id: &str) -> Value {
    serde_json::json!({"id": id, "transport": {"kind": "stdio", "command": PYTHON,
                                               "args": [MCP_SERVER_SCRIPT, "stdio"]}})
}

/// Decides the waiting `run_id` on the service at `base` and reads the activation
/// the decision starts (events after `last_seq`).
pub async fn decide_at(
    client: &reqwest::Client,
    base: &str,
    run_id: &str,
    last_seq: u64,
    decision: Value,
) -> Vec<StreamEvent> {
    let watching = client
        .get(format!("{base}/v1/runs/{run_id}/events"))
        .header("Last-Event-ID", last_seq.to_string())
        .send()
        .await
        .unwrap();
    let resumed = tokio::spawn(EventReader::new(watching).rest());
    let decided = client
        .post(format!("{base}/v1/runs/{run_id}/decision"))
        .json(&decision)
        .send()
        .await
        .unwrap();
    let (status, body) = json(decided).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    resumed.await.unwrap()
}

/// The base URL of a loopback port nothing listens on.
pub fn closed_base() -> String {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    base
}
