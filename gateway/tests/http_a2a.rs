//! The A2A v1.0 server: the reference client (`a2a-sdk` from PyPI) on both
//! bindings, and the refusals a client gets for bad input.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::secret::Secret;
use awaken_gateway::server::ServerConfig;
use http_support::{TestServer, json, python_client};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// The client's push receiver listens on loopback, which push URLs may name only
/// when allowed.
fn push_to_loopback() -> ServerConfig {
    ServerConfig {
        a2a_push_allowed_hosts: vec!["127.0.0.1".into()],
        ..ServerConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_client_passes_every_operation_over_http_json() {
    let server = TestServer::local(push_to_loopback()).await;
    let seen = python_client("a2a_client.py", &[&server.base, "http-json"]).await;
    assert_eq!(seen["ok"], true, "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_client_passes_every_operation_over_jsonrpc() {
    let server = TestServer::local(push_to_loopback()).await;
    let seen = python_client("a2a_client.py", &[&server.base, "jsonrpc"]).await;
    assert_eq!(seen["ok"], true, "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_and_their_histories_parse_as_the_reference_types() {
    let server = TestServer::local(ServerConfig::default()).await;
    let seen = python_client("a2a_histories.py", &[&server.base]).await;

    // Every answer parsed strictly into a2a-sdk's types with its required fields;
    // each task is as its run left it, its history without empty messages.
    let expected = [
        ("approved", "TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED"),
        ("denied", "TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED"),
        ("failed", "TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED"),
        (
            "waiting",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_INPUT_REQUIRED",
        ),
        ("cancelled", "TASK_STATE_CANCELED", "TASK_STATE_CANCELED"),
        ("delegated", "TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED"),
    ];
    for (name, answered, read) in expected {
        assert_eq!(seen[name]["answered"], answered, "{name}: {}", seen[name]);
        assert_eq!(seen[name]["state"], read, "{name}");
        let history = seen[name]["history"].as_array().unwrap();
        assert!(!history.is_empty(), "{name}");
        assert!(
            history
                .iter()
                .all(|m| !m["texts"].as_array().unwrap().is_empty()),
            "{name}: {history:?}"
        );
        // Each context went on: the waiting task was approved, the others took a
        // new task whose question was denied.
        assert_eq!(
            seen[name]["resumed"]["state"], "TASK_STATE_COMPLETED",
            "{name}: {}",
            seen[name]["resumed"]
        );
    }
    let roles: Vec<&Value> = seen["approved"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["role"])
        .collect();
    assert_eq!(roles, [&json!("ROLE_USER"), &json!("ROLE_AGENT")]);
    assert_eq!(seen["approved"]["artifacts"], 1);
    assert_eq!(seen["cancelled"]["artifacts"], 0);
    server.shutdown().await;
}

const V1: (&str, &str) = ("A2A-Version", "1.0");

async fn rest(
    server: &TestServer,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = server
        .client
        .request(method, server.url(path))
        .header(V1.0, V1.1);
    if let Some(body) = body {
        request = request.json(&body);
    }
    json(request.send().await.unwrap()).await
}

async fn rpc(server: &TestServer, body: Value) -> Value {
    let response = server
        .client
        .post(server.url("/v1/a2a"))
        .header(V1.0, V1.1)
        .json(&body)
        .send()
        .await
        .unwrap();
    let (status, body) = json(response).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "JSON-RPC errors travel in 200s: {body}"
    );
    body
}

/// `POST /v1/a2a/{tenant}/message:send` with `body`.
async fn send_to(server: &TestServer, tenant: &str, body: Value) -> (StatusCode, Value) {
    let path = format!("/v1/a2a/{tenant}/message:send");
    rest(server, Method::POST, &path, Some(body)).await
}

/// A follow-up message with one `part` on task `task_id`.
fn answer(message_id: &str, task_id: &str, context_id: Option<&str>, part: Value) -> Value {
    let mut message =
        json!({"messageId": message_id, "role": "ROLE_USER", "taskId": task_id, "parts": [part]});
    if let Some(context) = context_id {
        message["contextId"] = json!(context);
    }
    json!({ "message": message })
}

/// The `google.rpc.Status` body's A2A reason.
fn reason(body: &Value) -> &str {
    body["error"]["details"][0]["reason"]
        .as_str()
        .unwrap_or_default()
}

fn send(tenant_text: &str) -> Value {
    json!({"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": tenant_text}]}})
}

#[tokio::test]
async fn rest_refusals_use_google_rpc_status_bodies() {
    let server = TestServer::local(ServerConfig::default()).await;

    let (status, body) = rest(
        &server,
        Method::GET,
        "/v1/a2a/bench-text/tasks/no-such-task",
        None,
    )
    .await;
    assert_eq!(
        (status, reason(&body)),
        (StatusCode::NOT_FOUND, "TASK_NOT_FOUND"),
        "{body}"
    );
    assert_eq!(body["error"]["status"], "NOT_FOUND");

    // Malformed JSON, a message without parts' content, a part with two contents.
    let response = server
        .client
        .post(server.url("/v1/a2a/bench-text/message:send"))
        .header(V1.0, V1.1)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    let (status, body) = json(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );
    let (status, body) = send_to(
        &server,
        "bench-text",
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let two = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a", "url": "http://x"}]}});
    let (status, body) = send_to(&server, "bench-text", two).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exactly one"),
        "{body}"
    );
    let agent_role =
        json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}});
    let (status, _) = send_to(&server, "bench-text", agent_role).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // An unknown tenant (no agent at that address), and a file type no agent reads.
    let (status, body) = send_to(&server, "nobody", send("hi")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["status"], "NOT_FOUND", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nobody"),
        "{body}"
    );
    let pdf = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "http://x/a.pdf", "mediaType": "application/pdf"}]}});
    let (status, body) = send_to(&server, "bench-text", pdf).await;
    assert_eq!(
        (status, reason(&body)),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "CONTENT_TYPE_NOT_SUPPORTED"
        ),
        "{body}"
    );

    // No version header means 0.3; 2.0 is refused as well.
    for version in [None, Some("2.0")] {
        let mut request = server.client.get(server.url("/v1/a2a/bench-text/tasks"));
        if let Some(version) = version {
            request = request.header("A2A-Version", version);
        }
        let (status, body) = json(request.send().await.unwrap()).await;
        assert_eq!(
            (status, reason(&body)),
            (StatusCode::BAD_REQUEST, "VERSION_NOT_SUPPORTED"),
            "{body}"
        );
    }
    // The body limit holds.
    let big = "x".repeat(ServerConfig::default().max_body_bytes + 1);
    let (status, _) = send_to(&server, "bench-text", send(&big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn tasks_in_the_wrong_state_refuse_input_and_cancellation() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (status, body) = send_to(&server, "bench-text", send("hi")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let task = &body["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    let (id, context) = (
        task["id"].as_str().unwrap(),
        task["contextId"].as_str().unwrap(),
    );

    // A finished task takes no more input and cannot be cancelled.
    let follow_up = answer("m-2", id, Some(context), json!({"text": "approve"}));
    let (status, body) = send_to(&server, "bench-text", follow_up).await;
    assert_eq!(
        (status, reason(&body)),
        (StatusCode::BAD_REQUEST, "UNSUPPORTED_OPERATION"),
        "{body}"
    );
    let (status, body) = rest(
        &server,
        Method::POST,
        &format!("/v1/a2a/bench-text/tasks/{id}:cancel"),
        None,
    )
    .await;
    assert_eq!(
        (status, reason(&body)),
        (StatusCode::BAD_REQUEST, "TASK_NOT_CANCELABLE"),
        "{body}"
    );
    assert_eq!(body["error"]["status"], "FAILED_PRECONDITION");
    // Another tenant does not see it.
    let (status, _) = rest(
        &server,
        Method::GET,
        &format!("/v1/a2a/slow/tasks/{id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A waiting task: an answer that is neither approve nor deny changes nothing.
    let (_, body) = send_to(&server, "demo", send("tidy")).await;
    let task = &body["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{body}"
    );
    let pending = &task["status"]["message"]["parts"][1]["data"]["pending"][0];
    assert_eq!(pending["toolName"], "delete_file");
    assert_eq!(pending["arguments"]["path"], "notes.txt");
    let (id, context) = (
        task["id"].as_str().unwrap(),
        task["contextId"].as_str().unwrap(),
    );
    let maybe = answer("m-3", id, Some(context), json!({"text": "maybe"}));
    let (status, body) = send_to(&server, "demo", maybe).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, body) = rest(
        &server,
        Method::GET,
        &format!("/v1/a2a/demo/tasks/{id}"),
        None,
    )
    .await;
    assert_eq!(body["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    // A decision for a call that does not wait is refused; deny by data resumes it.
    let wrong = answer(
        "m-4",
        id,
        None,
        json!({"data": {"decisions": [{"toolCallId": "nope", "approved": true}]}}),
    );
    let (status, body) = send_to(&server, "demo", wrong).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let call = pending["toolCallId"].as_str().unwrap();
    let deny = answer(
        "m-5",
        id,
        None,
        json!({"data": {"decisions": [{"toolCallId": call, "approved": false}]}}),
    );
    let (status, body) = send_to(&server, "demo", deny).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
}

#[tokio::test]
async fn jsonrpc_refusals_are_error_objects() {
    let server = TestServer::local(ServerConfig::default()).await;
    let body = rpc(&server, json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"tenant": "bench-text", "id": "missing"}})).await;
    assert_eq!(body["error"]["code"], -32001, "{body}");
    assert_eq!(body["error"]["data"][0]["reason"], "TASK_NOT_FOUND");
    assert_eq!(body["id"], 1);
    let body = rpc(
        &server,
        json!({"jsonrpc": "2.0", "id": 2, "method": "Teleport", "params": {}}),
    )
    .await;
    assert_eq!(body["error"]["code"], -32601, "{body}");
    let body = rpc(
        &server,
        json!({"jsonrpc": "1.0", "id": 3, "method": "GetTask"}),
    )
    .await;
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let body = rpc(
        &server,
        json!({"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {"nope": true}}),
    )
    .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let response = server
        .client
        .post(server.url("/v1/a2a"))
        .header(V1.0, V1.1)
        .header("content-type", "application/json")
        .body("[")
        .send()
        .await
        .unwrap();
    let (_, body) = json(response).await;
    assert_eq!(body["error"]["code"], -32700, "{body}");
    let body = rpc(&server, json!({"jsonrpc": "2.0", "id": 5, "method": "GetExtendedAgentCard", "params": {"tenant": "demo"}})).await;
    assert_eq!(body["error"]["code"], -32007, "{body}");
}

#[tokio::test]
async fn cards_are_public_and_the_extended_card_needs_its_token() {
    let config = ServerConfig {
        api_keys: [("key-1".to_owned(), "acme".to_owned())].into(),
        a2a_extended_card_bearer_token: Some(Secret::new("card-secret")),
        ..ServerConfig::default()
    };
    let server = TestServer::local(config).await;
    let (status, card) = json(server.get("/v1/a2a/demo/.well-known/agent-card.json").await).await;
    assert_eq!(status, StatusCode::OK, "{card}");
    assert_eq!(card["name"], "demo");
    assert_eq!(card["capabilities"]["extendedAgentCard"], true);
    let bindings: Vec<&str> = card["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["protocolBinding"].as_str().unwrap())
        .collect();
    assert_eq!(bindings, ["JSONRPC", "HTTP+JSON"]);
    assert_eq!(card["supportedInterfaces"][0]["tenant"], "demo");
    assert!(
        card["securitySchemes"].is_object(),
        "API keys are announced"
    );

    // The API routes want the API key; the extended card its own token.
    let (status, _) = rest(&server, Method::GET, "/v1/a2a/demo/tasks", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let extended = |token: &'static str| {
        server
            .client
            .get(server.url("/v1/a2a/demo/extendedAgentCard"))
            .header(V1.0, V1.1)
            .bearer_auth(token)
    };
    let (status, _) = json(extended("key-1").send().await.unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, card) = json(extended("card-secret").send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{card}");
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(skills.contains(&"tool:delete_file"), "{skills:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_urls_to_internal_hosts_are_refused_and_never_called() {
    let server = TestServer::local(ServerConfig::default()).await;
    // An internal service the node can reach and the caller cannot.
    let internal = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = internal.local_addr().unwrap().port();
    let (status, sent) = send_to(&server, "bench-text", send("hello")).await;
    assert_eq!(status, StatusCode::OK, "{sent}");
    let task_id = sent["task"]["id"].as_str().unwrap().to_owned();
    let (_, before) = rest(&server, Method::GET, "/v1/a2a/bench-text/tasks", None).await;

    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://localhost:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1/hook".to_owned(),
    ] {
        let path = format!("/v1/a2a/bench-text/tasks/{task_id}/pushNotificationConfigs");
        let (status, body) = rest(&server, Method::POST, &path, Some(json!({"url": url}))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {body}");
        assert!(
            body.to_string().contains("a2a_push_allowed_hosts"),
            "{body}"
        );
        // Sending a message with such a config is refused before a task starts.
        let mut message = send("with a push url");
        message["configuration"] = json!({"taskPushNotificationConfig": {"url": url}});
        let (status, body) = send_to(&server, "bench-text", message).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {body}");
    }
    let (_, after) = rest(&server, Method::GET, "/v1/a2a/bench-text/tasks", None).await;
    assert_eq!(before["tasks"], after["tasks"], "no task was started");
    assert!(
        futures::FutureExt::now_or_never(internal.accept()).is_none(),
        "the internal service was contacted"
    );
}

/// The first SSE frame of `response`, as JSON, within `within`.
async fn first_frame(response: reqwest::Response, within: std::time::Duration) -> Value {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    assert_eq!(response.status(), StatusCode::OK);
    let mut frames = response.bytes_stream().eventsource();
    let frame = tokio::time::timeout(within, async {
        loop {
            let frame = frames.next().await.expect("the stream ended").unwrap();
            if !frame.data.is_empty() {
                return frame;
            }
        }
    })
    .await
    .expect("the stream opened at once");
    serde_json::from_str(&frame.data).unwrap()
}

/// `SubscribeToTask` on a task inside a minute-long tool call opens with the
/// task at once, on both bindings, rather than with the call's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_opens_with_the_task_in_its_current_state_at_once() {
    let server = TestServer::local(http_support::writable_config()).await;
    let script = json!({"steps": [
        {"tool_calls": [{"name": "sleep", "arguments": {"ms": 60000}}]},
        {"text": "rested"}]});
    for (namespace, body) in [
        (
            "providers",
            json!({"id": "p", "adapter": "scripted", "script": script}),
        ),
        (
            "models",
            json!({"id": "m", "provider": "p", "model": "script"}),
        ),
        ("agents", json!({"id": "sleepy", "model": "m"})),
    ] {
        let (status, body) =
            json(server.post(&format!("/v1/config/{namespace}"), body).await).await;
        assert_eq!(status, StatusCode::CREATED, "{namespace}: {body}");
    }
    let mut request = send("rest a minute");
    request["configuration"] = json!({"returnImmediately": true});
    let (status, body) = send_to(&server, "sleepy", request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let task_id = body["task"]["id"].as_str().unwrap().to_owned();
    // The run is inside its call once the task says so.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let path = format!("/v1/a2a/sleepy/tasks/{task_id}");
        let (_, task) = rest(&server, Method::GET, &path, None).await;
        if task["status"]["state"] == "TASK_STATE_WORKING" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{task}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Well under the call's minute: the opening frame does not wait for it.
    let within = std::time::Duration::from_secs(10);
    let response = server
        .client
        .post(server.url(&format!("/v1/a2a/sleepy/tasks/{task_id}:subscribe")))
        .header(V1.0, V1.1)
        .send()
        .await
        .unwrap();
    let opening = first_frame(response, within).await;
    assert_eq!(opening["task"]["id"], task_id.as_str(), "{opening}");
    assert_eq!(
        opening["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{opening}"
    );

    let response = server
        .client
        .post(server.url("/v1/a2a"))
        .header(V1.0, V1.1)
        .json(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask",
            "params": {"tenant": "sleepy", "id": task_id}}),
        )
        .send()
        .await
        .unwrap();
    let opening = first_frame(response, within).await;
    assert_eq!(opening["id"], 7, "{opening}");
    assert_eq!(
        opening["result"]["task"]["id"],
        task_id.as_str(),
        "{opening}"
    );

    let path = format!("/v1/a2a/sleepy/tasks/{task_id}:cancel");
    let (status, _) = rest(&server, Method::POST, &path, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_listed_in_a2a_tenants_is_served_to_those_tenants_only() {
    let keys = std::collections::BTreeMap::from([
        ("k-partner".to_owned(), "partner".to_owned()),
        ("k-other".to_owned(), "other".to_owned()),
    ]);
    let server = TestServer::local(ServerConfig {
        api_keys: keys.into(),
        a2a_tenants: std::collections::BTreeMap::from([(
            "bench-text".to_owned(),
            vec!["partner".to_owned()],
        )]),
        ..ServerConfig::default()
    })
    .await;
    let call = |key: &str, method: Method, path: &str, body: Option<Value>| {
        let mut request = server
            .client
            .request(method, server.url(path))
            .header(V1.0, V1.1)
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move { json(request.send().await.unwrap()).await }
    };

    let (status, sent) = call(
        "k-partner",
        Method::POST,
        "/v1/a2a/bench-text/message:send",
        Some(send("hi")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{sent}");
    let task_id = sent["task"]["id"].as_str().unwrap().to_owned();

    // Another tenant is refused every operation on that agent, over both bindings.
    for (method, path, body) in [
        (
            Method::POST,
            "/v1/a2a/bench-text/message:send".to_owned(),
            Some(send("hi")),
        ),
        (Method::GET, "/v1/a2a/bench-text/tasks".to_owned(), None),
        (
            Method::GET,
            format!("/v1/a2a/bench-text/tasks/{task_id}"),
            None,
        ),
    ] {
        let (status, body) = call("k-other", method, &path, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert_eq!(body["error"]["status"], "PERMISSION_DENIED", "{body}");
    }
    let (status, body) = call(
        "k-other",
        Method::POST,
        "/v1/a2a/bench-text",
        Some(json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not served"),
        "{body}"
    );
    // The partner still reads its task; the card stays public; other agents
    // serve every tenant.
    let (status, _) = call(
        "k-partner",
        Method::GET,
        &format!("/v1/a2a/bench-text/tasks/{task_id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let card = server
        .client
        .get(server.url("/v1/a2a/bench-text/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(card.status(), StatusCode::OK);
    let (status, body) = call(
        "k-other",
        Method::POST,
        "/v1/a2a/slow/message:send",
        Some(send("hi")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
