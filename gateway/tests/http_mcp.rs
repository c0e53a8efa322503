//! `POST /v1/mcp`: the agents as MCP tools, driven by the reference Python client
//! (`mcp` on PyPI, `clients/mcp_client.py`) in both protocol eras — the 2026
//! `server/discover` one and the initialize handshake — through an approval round
//! trip; and raw JSON-RPC for every kind of bad input, each answered and changing
//! nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::server::{ApiKeys, McpEndpointConfig, ServerConfig};
use http_support::{TestServer, json, python_client};
use reqwest::StatusCode;
use serde_json::{Value, json};

const ACCEPT: &str = "application/json, text/event-stream";

async fn client(server: &TestServer, mode: &str, command: &[&str]) -> Value {
    let url = server.url("/v1/mcp");
    let mut args = vec![url.as_str(), mode];
    args.extend_from_slice(command);
    python_client("mcp_client.py", &args).await
}

/// A raw JSON-RPC request, as a client that skips the handshake sends it.
async fn rpc(server: &TestServer, key: Option<&str>, body: Value) -> (StatusCode, Value) {
    let mut request = server
        .client
        .post(server.url("/v1/mcp"))
        .header("accept", ACCEPT)
        .json(&body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    json(request.send().await.unwrap()).await
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap().to_owned()
}

async fn thread_count(server: &TestServer) -> usize {
    let (_, body) = json(server.get("/v1/threads").await).await;
    body["threads"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_client_lists_the_agents_in_both_protocol_eras() {
    let server = TestServer::local(ServerConfig::default()).await;
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let listed = client(&server, mode, &["list"]).await;
        assert_eq!(listed["protocol_version"], version, "{mode}");
        let names: Vec<&str> = listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"demo"), "{names:?}");
        let demo = listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|tool| tool["name"] == "demo")
            .unwrap();
        assert_eq!(demo["inputSchema"]["type"], "object");
        assert!(demo["inputSchema"]["properties"]["decisions"].is_object());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_asked_and_answered_through_two_tool_calls() {
    let server = TestServer::local(ServerConfig::default()).await;
    let asked = client(
        &server,
        "auto",
        &["call", "demo", r#"{"message": "delete notes.txt"}"#],
    )
    .await;
    assert_eq!(asked["isError"], false, "{asked}");
    let waiting = &asked["structuredContent"];
    assert_eq!(waiting["termination"], "suspended");
    let pending = waiting["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["tool"], "delete_file");
    assert_eq!(pending[0]["arguments"], json!({"path": "notes.txt"}));
    assert!(
        text_of(&asked).contains("Allow tool `delete_file`"),
        "{asked}"
    );
    let thread_id = waiting["thread_id"].as_str().unwrap();
    let call_id = pending[0]["call_id"].as_str().unwrap();

    let decisions = json!({"thread_id": thread_id, "decisions": [
        {"call_id": call_id, "decision_id": "d-1", "action": "resume", "result": {"approved": true}}
    ]});
    let done = client(&server, "legacy", &["call", "demo", &decisions.to_string()]).await;
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["structuredContent"]["termination"], "natural_end");
    assert_eq!(done["structuredContent"]["run_id"], waiting["run_id"]);
    assert!(
        text_of(&done).contains(r#""deleted":"notes.txt""#),
        "{done}"
    );

    // The same decisions again: the run no longer waits.
    let (status, again) = rpc(&server, None, call(9, "demo", decisions)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["result"]["isError"], true, "{again}");
    assert!(
        text_of(&again["result"]).contains("waits for a decision"),
        "{again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_ends_the_run_without_the_tool() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (_, asked) = rpc(
        &server,
        None,
        call(1, "demo", json!({"message": "delete notes.txt"})),
    )
    .await;
    let waiting = &asked["result"]["structuredContent"];
    let decisions = json!({"thread_id": waiting["thread_id"], "decisions": [
        {"call_id": waiting["pending"][0]["call_id"], "decision_id": "d-no", "action": "cancel",
         "reason": "keep it"}
    ]});
    let (_, denied) = rpc(&server, None, call(2, "demo", decisions)).await;
    let result = &denied["result"];
    assert_eq!(result["isError"], false, "{denied}");
    assert_eq!(result["structuredContent"]["termination"], "natural_end");
    assert!(!text_of(result).contains(r#""deleted""#), "{denied}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_are_answered_and_change_nothing() {
    let server = TestServer::local(ServerConfig {
        max_body_bytes: 2048,
        ..ServerConfig::default()
    })
    .await;
    let threads = thread_count(&server).await;

    let tool_errors = [
        (json!({}), "`message` is required"),
        (json!({"message": 5}), "invalid arguments"),
        (
            json!({"message": "hi", "colour": "red"}),
            "unknown field `colour`",
        ),
        (json!({"message": "hi", "thread_id": ""}), "thread_id"),
        (
            json!({"decisions": [{"call_id": "c", "decision_id": "d", "action": "resume"}]}),
            "need the `thread_id`",
        ),
        (
            json!({"message": "hi", "thread_id": "t-1",
                   "decisions": [{"call_id": "c", "decision_id": "d", "action": "resume"}]}),
            "not both",
        ),
        (
            json!({"thread_id": "t-unknown",
                   "decisions": [{"call_id": "c", "decision_id": "d", "action": "resume"}]}),
            "t-unknown",
        ),
        (
            json!({"thread_id": "t-1", "decisions": [{"call_id": "c", "action": "maybe"}]}),
            "invalid arguments",
        ),
        (json!({"message": "hi", "decisions": []}), "not both"),
        (
            json!({"thread_id": "t-1", "decisions": []}),
            "`decisions` is empty",
        ),
    ];
    for (arguments, needle) in tool_errors {
        let (status, answer) = rpc(&server, None, call(1, "demo", arguments.clone())).await;
        assert_eq!(status, StatusCode::OK, "{arguments}: {answer}");
        assert_eq!(answer["result"]["isError"], true, "{arguments}: {answer}");
        let text = text_of(&answer["result"]);
        assert!(
            text.contains(needle),
            "{arguments}: {text:?} should mention {needle:?}"
        );
    }

    let (_, unknown_tool) = rpc(&server, None, call(2, "nobody", json!({"message": "hi"}))).await;
    assert_eq!(unknown_tool["error"]["code"], -32602, "{unknown_tool}");
    let (_, unknown_method) = rpc(
        &server,
        None,
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}),
    )
    .await;
    assert_eq!(unknown_method["error"]["code"], -32601, "{unknown_method}");

    let raw = |body: &'static str| {
        server
            .client
            .post(server.url("/v1/mcp"))
            .header("accept", ACCEPT)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let (status, parse) = json(raw("{not json").await.unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    let big = Box::leak(format!(r#"{{"pad": "{}"}}"#, "x".repeat(4096)).into_boxed_str());
    let (status, oversized) = json(raw(big).await.unwrap()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{oversized}");
    let wrong_version = server
        .client
        .post(server.url("/v1/mcp"))
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "1999-01-01")
        .json(&json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_version.status(), StatusCode::BAD_REQUEST);
    let get = server.get("/v1/mcp").await;
    assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);

    assert_eq!(thread_count(&server).await, threads, "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_and_origins_are_checked_against_dns_rebinding() {
    let server = TestServer::local(ServerConfig {
        mcp: McpEndpointConfig {
            allowed_hosts: None,
            allowed_origins: vec!["https://app.example:443".into()],
        },
        ..ServerConfig::default()
    })
    .await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let send = |host: Option<&str>, origin: Option<&str>| {
        let mut request = server
            .client
            .post(server.url("/v1/mcp"))
            .header("accept", ACCEPT)
            .json(&ping);
        if let Some(host) = host {
            request = request.header("host", host);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    assert_eq!(send(None, None).await.unwrap().status(), StatusCode::OK);
    assert_eq!(
        send(None, Some("https://app.example"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        send(None, Some("https://evil.example"))
            .await
            .unwrap()
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        send(Some("evil.example"), None).await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_guard_the_endpoint_and_tenants_keep_their_threads() {
    let server = TestServer::local(ServerConfig {
        api_keys: ApiKeys::from([
            ("key-a".to_owned(), "tenant-a".to_owned()),
            ("key-b".to_owned(), "tenant-b".to_owned()),
        ]),
        ..ServerConfig::default()
    })
    .await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let (status, _) = rpc(&server, None, ping.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = rpc(&server, Some("key-z"), ping).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (_, asked) = rpc(
        &server,
        Some("key-a"),
        call(1, "demo", json!({"message": "delete notes.txt"})),
    )
    .await;
    let waiting = &asked["result"]["structuredContent"];
    let decisions = json!({"thread_id": waiting["thread_id"], "decisions": [
        {"call_id": waiting["pending"][0]["call_id"], "decision_id": "d-b", "action": "resume"}
    ]});
    let (_, stolen) = rpc(&server, Some("key-b"), call(2, "demo", decisions.clone())).await;
    assert_eq!(stolen["result"]["isError"], true, "{stolen}");
    // The other tenant's thread is an unknown thread to this caller.
    assert!(
        text_of(&stolen["result"]).contains("unknown thread"),
        "{stolen}"
    );
    let listed = client(&server, "legacy", &["--token", "key-a", "list"]).await;
    assert!(!listed["tools"].as_array().unwrap().is_empty());
    let (_, mine) = rpc(&server, Some("key-a"), call(3, "demo", decisions)).await;
    assert_eq!(
        mine["result"]["structuredContent"]["termination"], "natural_end",
        "{mine}"
    );
}
