//! MCP servers as tool sources. The server is built with the reference Python SDK
//! (`mcp` on PyPI, `clients/mcp_server.py`), reached over stdio (a process the
//! node starts) and streamable HTTP (a process the test starts); its tools are
//! added through the config API and through `awaken serve`'s config file, used by
//! runs, refused when they cannot work, and asked about by permission rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_actors::contract::{AgentEvent, StreamEvent};
use http_support::{
    EventReader, MCP_SERVER_SCRIPT, PYTHON, TestServer, awaken_serve, closed_base, decide_at,
    expect_error, finish_type, json, mcp_stdio_entry, run_ids, suspended_calls, user,
    writable_config,
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The Python MCP server on streamable HTTP, stopped when dropped.
struct HttpMcpServer {
    _process: tokio::process::Child,
    url: String,
}

impl HttpMcpServer {
    async fn start() -> Self {
        let mut process = tokio::process::Command::new(PYTHON)
            .args([MCP_SERVER_SCRIPT, "http"])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{PYTHON}: {e} (run scripts/setup.sh)"));
        let stdout = process.stdout.take().unwrap();
        let line = BufReader::new(stdout)
            .lines()
            .next_line()
            .await
            .unwrap()
            .expect("the MCP server exited before listening");
        let port = line.strip_prefix("listening ").unwrap();
        Self {
            _process: process,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

fn http_entry(id: &str, url: &str) -> Value {
    json!({"id": id, "transport": {"kind": "http", "url": url}})
}

async fn create(server: &TestServer, namespace: &str, body: Value) {
    let (status, body) = json(server.post(&format!("/v1/config/{namespace}"), body).await).await;
    assert_eq!(status, StatusCode::CREATED, "{namespace}: {body}");
}

/// Agent `agent` whose model calls `tool` with `arguments` once, then answers.
async fn tool_agent(server: &TestServer, agent: &str, tool: &str, arguments: Value) {
    script_agent(server, agent, &[(tool, arguments)]).await;
}

/// Agent `agent` whose model makes `calls` one per step, then answers.
async fn script_agent(server: &TestServer, agent: &str, calls: &[(&str, Value)]) {
    let mut steps: Vec<Value> = calls
        .iter()
        .map(|(tool, arguments)| json!({"tool_calls": [{"name": tool, "arguments": arguments}]}))
        .collect();
    steps.push(json!({"text": "done"}));
    create(
        server,
        "providers",
        json!({"id": agent, "adapter": "scripted", "script": {"steps": steps}}),
    )
    .await;
    create(
        server,
        "models",
        json!({"id": agent, "provider": agent, "model": "script"}),
    )
    .await;
    create(server, "agents", json!({"id": agent, "model": agent})).await;
}

async fn run(base: &str, agent: &str) -> Vec<StreamEvent> {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/runs"))
        .json(&json!({"agentId": agent, "messages": user("go")}))
        .send()
        .await
        .unwrap();
    EventReader::new(response).rest().await
}

/// The results of the run's finished tool calls of `tool`, in order.
fn results_of(events: &[StreamEvent], tool: &str) -> Vec<Value> {
    events
        .iter()
        .filter_map(|event| match &event.event {
            AgentEvent::ToolCallDone { result, .. } if result.tool_name == tool => {
                Some(serde_json::to_value(result).unwrap())
            }
            _ => None,
        })
        .collect()
}

fn only_result(events: &[StreamEvent], tool: &str) -> Value {
    let results = results_of(events, tool);
    assert_eq!(results.len(), 1, "{tool}: {results:?}");
    results.into_iter().next().unwrap()
}

async fn capabilities_of(server: &TestServer) -> Value {
    let (status, body) = json(server.get("/v1/capabilities").await).await;
    assert_eq!(status, StatusCode::OK);
    body
}

fn mcp_tool_ids(capabilities: &Value) -> Vec<String> {
    capabilities["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["id"].as_str())
        .filter(|id| id.starts_with("mcp__"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_added_through_the_config_api_serves_its_tools_until_deleted() {
    let server = TestServer::local(writable_config()).await;
    create(&server, "mcp-servers", mcp_stdio_entry("calc")).await;

    let capabilities = capabilities_of(&server).await;
    let mut ids = mcp_tool_ids(&capabilities);
    ids.sort();
    assert_eq!(
        ids,
        [
            "mcp__calc__add",
            "mcp__calc__calls",
            "mcp__calc__echo",
            "mcp__calc__exit",
            "mcp__calc__fail",
            "mcp__calc__idempotency_key",
            "mcp__calc__sleep",
            "mcp__calc__traceparent"
        ]
    );
    assert_eq!(capabilities["mcp_servers"], json!(["calc"]));
    let add = capabilities["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["id"] == "mcp__calc__add")
        .unwrap();
    assert_eq!(add["description"], "Adds two integers.");

    tool_agent(&server, "adder", "mcp__calc__add", json!({"a": 2, "b": 3})).await;
    let events = run(&server.base, "adder").await;
    assert_eq!(finish_type(&events), "natural_end");
    let result = only_result(&events, "mcp__calc__add");
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(result["data"]["structuredContent"]["result"], 5);
    assert_eq!(
        result["data"]["mcp"],
        json!({"server": "calc", "tool": "add"})
    );
    assert_eq!(result["message"], "5");

    let deleted = server.delete("/v1/config/mcp-servers/calc").await;
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let capabilities = capabilities_of(&server).await;
    assert!(mcp_tool_ids(&capabilities).is_empty(), "{capabilities}");
    assert_eq!(capabilities["mcp_servers"], json!([]));
    let events = run(&server.base, "adder").await;
    let result = only_result(&events, "mcp__calc__add");
    assert_eq!(result["status"], "error", "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_that_exits_is_started_again_by_the_next_call() {
    let server = TestServer::local(writable_config()).await;
    create(&server, "mcp-servers", mcp_stdio_entry("calc")).await;
    script_agent(
        &server,
        "phoenix",
        &[
            ("mcp__calc__exit", json!({})),
            ("mcp__calc__echo", json!({"text": "back"})),
        ],
    )
    .await;
    let events = run(&server.base, "phoenix").await;
    let exited = only_result(&events, "mcp__calc__exit");
    assert_eq!(exited["status"], "error", "{exited}");
    assert_eq!(exited["error_code"], "mcp_unreachable", "{exited}");
    let echoed = only_result(&events, "mcp__calc__echo");
    assert_eq!(echoed["status"], "success", "{echoed}");
    assert_eq!(echoed["message"], "back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_carries_its_idempotency_key_to_the_server() {
    let server = TestServer::local(writable_config()).await;
    create(&server, "mcp-servers", mcp_stdio_entry("calc")).await;
    tool_agent(&server, "keyed", "mcp__calc__idempotency_key", json!({})).await;
    let events = run(&server.base, "keyed").await;
    let (_, run_id) = run_ids(&events);
    let call_id = events
        .iter()
        .find_map(|event| match &event.event {
            AgentEvent::ToolCallDone { id, .. } => Some(id.to_string()),
            _ => None,
        })
        .unwrap();
    let result = only_result(&events, "mcp__calc__idempotency_key");
    // Attempts count from 1.
    assert_eq!(
        result["message"],
        format!("{run_id}:{call_id}:1"),
        "{result}"
    );
}

/// The call carries the run's trace context in `_meta` (SEP-414): the server
/// sees the caller's trace id, under a span of the call's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_carries_the_runs_trace_context_to_the_server() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const CALLER: &str = "00f067aa0ba902b7";
    let server = TestServer::local(writable_config()).await;
    create(&server, "mcp-servers", mcp_stdio_entry("calc")).await;
    tool_agent(&server, "traced", "mcp__calc__traceparent", json!({})).await;
    let response = reqwest::Client::new()
        .post(format!("{}/v1/runs", server.base))
        .header("traceparent", format!("00-{TRACE}-{CALLER}-01"))
        .json(&json!({"agentId": "traced", "messages": user("go")}))
        .send()
        .await
        .unwrap();
    let events = EventReader::new(response).rest().await;
    let result = only_result(&events, "mcp__calc__traceparent");
    let carried = result["message"].as_str().unwrap();
    let parts: Vec<&str> = carried.split('-').collect();
    assert_eq!(parts.len(), 4, "{result}");
    assert_eq!(parts[0], "00");
    assert_eq!(parts[1], TRACE, "the caller's trace");
    assert_ne!(parts[2], CALLER, "a span of the call, not the caller's");
    assert_eq!(parts[3], "01");

    // A run no caller traced starts a trace of its own, and the call carries it.
    let events = run(&server.base, "traced").await;
    let result = only_result(&events, "mcp__calc__traceparent");
    let own = awaken_actors::contract::TraceContext::parse(result["message"].as_str().unwrap())
        .unwrap_or_else(|_| panic!("a valid traceparent: {result}"));
    assert!(!own.to_string().contains(TRACE), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_reports_tool_errors_and_timeouts_as_error_results() {
    let mcp = HttpMcpServer::start().await;
    let server = TestServer::local(writable_config()).await;
    let mut entry = http_entry("web", &mcp.url);
    entry["timeout_ms"] = json!(1000);
    create(&server, "mcp-servers", entry).await;

    tool_agent(
        &server,
        "failing",
        "mcp__web__fail",
        json!({"reason": "disk full"}),
    )
    .await;
    let result = only_result(&run(&server.base, "failing").await, "mcp__web__fail");
    assert_eq!(result["status"], "error", "{result}");
    assert_eq!(result["error_code"], "mcp_tool_error");
    assert!(
        result["message"].as_str().unwrap().contains("disk full"),
        "{result}"
    );

    tool_agent(&server, "sleeper", "mcp__web__sleep", json!({"ms": 5000})).await;
    let result = only_result(&run(&server.base, "sleeper").await, "mcp__web__sleep");
    assert_eq!(result["status"], "error", "{result}");
    assert_eq!(result["error_code"], "mcp_timeout");
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .contains("within 1000 ms"),
        "{result}"
    );

    // The session outlives a timed-out call.
    tool_agent(
        &server,
        "echo",
        "mcp__web__echo",
        json!({"text": "still here"}),
    )
    .await;
    let result = only_result(&run(&server.base, "echo").await, "mcp__web__echo");
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(result["message"], "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_cannot_be_used_are_refused_and_change_nothing() {
    // The allow-lists let these entries through, so the node meets each failure.
    let mut config = writable_config();
    config
        .config_api
        .mcp_stdio_commands
        .extend(["/nonexistent/mcp", "true", "sleep"].map(str::to_owned));
    config.config_api.token_envs = vec!["AWAKEN_TEST_UNSET_MCP_TOKEN".into()];
    let server = TestServer::local(config).await;
    let before = capabilities_of(&server).await;
    let closed_url = format!("{}/mcp", closed_base());
    let mut silent = json!({"id": "silent", "timeout_ms": 500,
                            "transport": {"kind": "stdio", "command": "sleep", "args": ["30"]}});
    let cases = [
        (http_entry("down", &closed_url), "unreachable"),
        (
            json!({"id": "missing", "transport": {"kind": "stdio", "command": "/nonexistent/mcp"}}),
            "cannot start `/nonexistent/mcp`",
        ),
        (
            json!({"id": "exits", "transport": {"kind": "stdio", "command": "true"}}),
            "unreachable",
        ),
        (silent.take(), "did not answer within 500 ms"),
        (
            json!({"id": "secret", "transport": {"kind": "http", "url": closed_url,
                                                 "token_env": "AWAKEN_TEST_UNSET_MCP_TOKEN"}}),
            "token_env `AWAKEN_TEST_UNSET_MCP_TOKEN` is not set",
        ),
        (
            json!({"id": "zero", "timeout_ms": 0,
                   "transport": {"kind": "stdio", "command": PYTHON}}),
            "timeout_ms must be at least 1",
        ),
        (
            json!({"id": "ftp", "transport": {"kind": "http", "url": "ftp://x/mcp"}}),
            "not an http(s) URL",
        ),
        (
            json!({"id": "odd", "transport": {"kind": "pipe", "command": PYTHON}}),
            "kind",
        ),
    ];
    for (entry, needle) in cases {
        let response = server.post("/v1/config/mcp-servers", entry.clone()).await;
        expect_error(response, StatusCode::BAD_REQUEST, needle).await;
    }
    let (status, listing) = json(server.get("/v1/config/mcp-servers").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listing["items"], json!([]), "{listing}");
    assert_eq!(capabilities_of(&server).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_ids_that_clash_with_registered_tools_are_refused() {
    let server = TestServer::local(writable_config()).await;
    create(&server, "mcp-servers", mcp_stdio_entry("calc")).await;
    // Same server under a second id is fine: its tools get other ids.
    create(&server, "mcp-servers", mcp_stdio_entry("calc2")).await;
    let ids = mcp_tool_ids(&capabilities_of(&server).await);
    assert_eq!(ids.iter().filter(|id| id.ends_with("__add")).count(), 2);
    // `calc.` sanitizes to the same tool ids as a server `calc_`.
    create(&server, "mcp-servers", mcp_stdio_entry("calc_")).await;
    let response = server
        .post("/v1/config/mcp-servers", mcp_stdio_entry("calc."))
        .await;
    expect_error(response, StatusCode::BAD_REQUEST, "already registered").await;
}

/// `awaken serve` with an MCP server in its config file and an `ask` rule on one
/// of its tools.
fn serve_toml(mcp_url: &str) -> String {
    format!(
        r#"
demo_agents = false

[server]
address = "127.0.0.1:0"

[store]
kind = "memory"

[permissions]
default_behavior = "allow"
rules = [{{ tool = "mcp__calc__add", behavior = "ask" }}]

[mcp_servers.calc]
transport = {{ kind = "http", url = "{mcp_url}" }}

[providers.counter]
adapter = "scripted"
script = {{ steps = [
  {{ tool_calls = [{{ name = "mcp__calc__add", arguments = {{ a = 20, b = 22 }} }}] }},
  {{ tool_calls = [{{ name = "mcp__calc__calls", arguments = {{}} }}] }},
  {{ text = "done" }},
] }}

[models.counter]
provider = "counter"
model = "counter"

[agents.counter]
model = "counter"
plugin_ids = ["permission"]
"#
    )
}

async fn decide(base: &str, events: &[StreamEvent], action: &str) -> Vec<StreamEvent> {
    let (_, run_id) = run_ids(events);
    let calls = suspended_calls(events);
    assert_eq!(calls.len(), 1, "{events:?}");
    let decision = json!({"call_id": calls[0], "decision_id": format!("d-{action}"),
                          "action": action, "result": {"approved": action == "resume"}});
    let client = reqwest::Client::new();
    let last_seq = events.last().unwrap().seq;
    decide_at(&client, base, &run_id, last_seq, decision).await
}

fn calls_answered(events: &[StreamEvent]) -> Value {
    only_result(events, "mcp__calc__calls")["data"]["structuredContent"]["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awaken_serve_asks_before_an_mcp_tool_of_its_config_file_runs() {
    let mcp = HttpMcpServer::start().await;
    let (_serve, base, _dir) = awaken_serve(&serve_toml(&mcp.url)).await.unwrap();

    let asked = run(&base, "counter").await;
    assert_eq!(finish_type(&asked), "suspended");
    assert_eq!(only_result(&asked, "mcp__calc__add")["status"], "pending");
    let denied = decide(&base, &asked, "cancel").await;
    assert_eq!(finish_type(&denied), "natural_end");
    assert_eq!(only_result(&denied, "mcp__calc__add")["status"], "error");
    assert_eq!(
        calls_answered(&denied),
        0,
        "a denied call never reaches the server"
    );

    let asked = run(&base, "counter").await;
    let approved = decide(&base, &asked, "resume").await;
    assert_eq!(finish_type(&approved), "natural_end");
    let added = only_result(&approved, "mcp__calc__add");
    assert_eq!(added["data"]["structuredContent"]["result"], 42, "{added}");
    assert_eq!(calls_answered(&approved), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awaken_serve_refuses_to_start_when_an_mcp_server_of_its_config_file_is_unreachable() {
    let url = format!("{}/mcp", closed_base());
    let Err(stderr) = awaken_serve(&serve_toml(&url)).await else {
        panic!("serve started without its MCP server");
    };
    assert!(
        stderr.contains("mcp server `calc` is unreachable"),
        "{stderr}"
    );
}
