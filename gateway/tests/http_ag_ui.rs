//! The AG-UI routes, driven by the real `@ag-ui/client` `HttpAgent` (every event
//! checked by `@ag-ui/core`'s schema) and, for bad input, by plain HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::server::ServerConfig;
use http_support::{TestServer, expect_error, json, node_client};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn types(seen: &Value) -> Vec<&str> {
    seen["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ag_ui_client_runs_through_an_interrupt_and_its_resume() {
    let server = TestServer::local(ServerConfig::default()).await;
    let seen = node_client("ag_ui.mjs", &server.base).await;

    let resolved = &seen["resolved"];
    let first = types(&resolved["first"]);
    assert_eq!(first.first(), Some(&"RUN_STARTED"));
    assert_eq!(first.last(), Some(&"RUN_FINISHED"));
    for expected in [
        "TOOL_CALL_START",
        "TOOL_CALL_END",
        "MESSAGES_SNAPSHOT",
        "STATE_SNAPSHOT",
    ] {
        assert!(
            first.contains(&expected),
            "{expected} missing from {first:?}"
        );
    }
    assert_eq!(resolved["first"]["outcome"]["type"], "interrupt");
    let interrupt = &resolved["pending"][0];
    let call = interrupt["toolCallId"].as_str().unwrap();

    // The resume is a new AG-UI run (the client's run id) continuing the same
    // engine run: the tool ran and the model answered.
    let second = types(&resolved["second"]);
    assert!(second.contains(&"TOOL_CALL_RESULT"), "{second:?}");
    assert!(second.contains(&"TEXT_MESSAGE_CONTENT"), "{second:?}");
    assert_eq!(resolved["second"]["outcome"]["type"], "success");
    assert!(
        resolved["second"]["runId"]
            .as_str()
            .unwrap()
            .starts_with("second-")
    );
    assert!(
        resolved["second"]["result"]["response"]
            .as_str()
            .unwrap()
            .contains("\"deleted\":\"notes.txt\"")
    );
    assert_eq!(resolved["pendingAfter"], 0);
    let engine_run = resolved["first"]["runId"].as_str().unwrap();
    let (_, record) = json(server.get(&format!("/v1/runs/{engine_run}")).await).await;
    assert_eq!(
        record["status"], "done",
        "the first run id is the engine's run"
    );
    let messages = resolved["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant"],
        "{messages:?}"
    );
    assert_eq!(messages[2]["toolCallId"], call);

    // Cancelled: the call does not run, the model hears so, the run completes.
    let cancelled = &seen["cancelled"];
    assert_eq!(cancelled["second"]["outcome"]["type"], "success");
    let tool = cancelled["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(
        tool["content"].as_str().unwrap().contains("cancelled"),
        "{tool}"
    );
    server.shutdown().await;
}

fn run_input(thread: &str, run: &str, text: &str) -> Value {
    json!({
        "threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [{"id": format!("u-{run}"), "role": "user", "content": text}],
    })
}

fn resume(thread: &str, run: &str, interrupt: &str) -> Value {
    json!({
        "threadId": thread, "runId": run, "messages": [],
        "resume": [{"interruptId": interrupt, "status": "resolved"}],
    })
}

/// Reads an AG-UI stream to its end.
async fn events(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    text.split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ag_ui_requests_are_refused_and_change_nothing() {
    let server = TestServer::local(ServerConfig::default()).await;
    expect_error(
        server
            .post(
                "/v1/ag-ui/agents/nobody/runs",
                run_input("t-x", "r-x", "hi"),
            )
            .await,
        StatusCode::NOT_FOUND,
        "unknown agent",
    )
    .await;
    assert_eq!(
        server.get("/v1/threads/t-x").await.status(),
        StatusCode::NOT_FOUND
    );
    expect_error(
        server
            .post("/v1/ag-ui/threads/t-a/runs", run_input("t-b", "r", "hi"))
            .await,
        StatusCode::BAD_REQUEST,
        "path names",
    )
    .await;
    expect_error(
        server
            .post("/v1/ag-ui/run", json!({"threadId": "t", "runId": "r"}))
            .await,
        StatusCode::BAD_REQUEST,
        "messages",
    )
    .await;
    expect_error(
        server
            .post("/v1/ag-ui/run", json!({"runId": "r", "messages": [], "resume": [{"interruptId": "i", "status": "resolved"}]}))
            .await,
        StatusCode::BAD_REQUEST,
        "threadId",
    )
    .await;

    // A waiting run: a wrong interrupt is refused and the run still waits.
    let asked = events(
        server
            .post(
                "/v1/ag-ui/agents/demo/runs",
                run_input("t-w", "r-1", "tidy"),
            )
            .await,
    )
    .await;
    let finished = asked.last().unwrap();
    assert_eq!(finished["type"], "RUN_FINISHED");
    let interrupt = finished["outcome"]["interrupts"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    expect_error(
        server
            .post("/v1/ag-ui/run", resume("t-w", "r-2", "nope"))
            .await,
        StatusCode::CONFLICT,
        "not open",
    )
    .await;
    let (_, run) = json(server.get("/v1/threads/t-w/runs/latest").await).await;
    assert_eq!(run["status"], "waiting");
    // A run id already used is refused.
    expect_error(
        server
            .post(
                "/v1/ag-ui/agents/demo/runs",
                run_input("t-w", "r-1", "again"),
            )
            .await,
        StatusCode::CONFLICT,
        "already exists",
    )
    .await;
    let resumed = events(
        server
            .post("/v1/ag-ui/run", resume("t-w", "r-2", &interrupt))
            .await,
    )
    .await;
    assert_eq!(resumed[0]["type"], "RUN_STARTED");
    assert_eq!(resumed[0]["runId"], "r-2");
    assert_eq!(resumed.last().unwrap()["outcome"]["type"], "success");
    // Answered: nothing waits any more.
    expect_error(
        server
            .post("/v1/ag-ui/run", resume("t-w", "r-3", &interrupt))
            .await,
        StatusCode::CONFLICT,
        "waits for a decision",
    )
    .await;

    let (status, history) = json(server.get("/v1/ag-ui/threads/t-w/messages").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(history["messages"][0]["id"], "u-r-1");
    assert_eq!(history["messages"][0]["content"], "tidy");
    expect_error(
        server.get("/v1/ag-ui/threads/unknown/messages").await,
        StatusCode::NOT_FOUND,
        "unknown thread",
    )
    .await;
    let (status, _) = json(
        server
            .post("/v1/ag-ui/threads/t-w/interrupt", json!({}))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_and_histories_pass_the_clients_schemas_and_agents_go_on_from_them() {
    let server = TestServer::local(ServerConfig::default()).await;
    let seen = node_client("ag_ui_histories.mjs", &server.base).await;

    // Every snapshot and history passed `@ag-ui/core`'s schemas; each thread's log
    // is as its run left it.
    let roles = |name: &str| -> Vec<&str> {
        seen[name]["roles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect()
    };
    let full = ["user", "assistant", "tool", "assistant"];
    for name in ["approved", "denied", "failed", "delegated"] {
        assert_eq!(roles(name), full, "{name}: {}", seen[name]);
        assert_eq!(seen[name]["outcome"], "success", "{name}");
    }
    assert_eq!(roles("waiting"), ["user", "assistant"]);
    assert_eq!(seen["waiting"]["outcome"], "interrupt");
    assert_eq!(roles("cancelled"), ["user", "assistant", "tool"]);
    let tool = |name: &str| -> Value {
        serde_json::from_str(seen[name]["tool"].as_str().unwrap()).unwrap()
    };
    assert_eq!(tool("approved")["deleted"], "notes.txt");
    assert_eq!(tool("denied")["code"], "cancelled");
    assert_eq!(tool("failed")["code"], "not_found");
    assert_eq!(tool("cancelled")["error"], "the run was cancelled");
    assert_eq!(tool("delegated")["status"], "completed");
    assert_eq!(seen["delegated"]["child"], json!(full));

    // A new agent went on from each history: the waiting run was resumed, the
    // others took a new message.
    for name in [
        "approved",
        "denied",
        "failed",
        "waiting",
        "cancelled",
        "delegated",
    ] {
        let resumed = &seen[name]["resumed"];
        assert_eq!(resumed["outcome"], "success", "{name}: {resumed}");
        assert_eq!(resumed["grew"], true, "{name}");
    }
    server.shutdown().await;
}
