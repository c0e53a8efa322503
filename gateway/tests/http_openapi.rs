//! `/v1/openapi.json` over HTTP, and every route it lists answered by the router
//! (never the unknown-path or wrong-method fallback), and real answers of a walk
//! through the API checked against the schemas it documents for them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::server::{ServerConfig, served_routes};
use http_support::{EventReader, TestServer, json, run_ids, suspended_calls, user};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

#[tokio::test]
async fn the_served_document_lists_every_route_and_each_one_answers() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (status, document) = json(server.get("/v1/openapi.json").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().unwrap();

    for (method, template) in served_routes() {
        let operation = &paths[template][method.as_str().to_lowercase()];
        assert!(operation["summary"].is_string(), "{method} {template}");
        // Ids that exist nowhere: the route must answer with its own refusal.
        let path = template
            .replace("{namespace}", "models")
            .replace('{', "")
            .replace('}', "-unknown");
        let mut request = server.client.request(
            Method::from_bytes(method.as_str().as_bytes()).unwrap(),
            server.url(&path),
        );
        if method != Method::GET && method != Method::DELETE {
            request = request.json(&json!({}));
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let streams = response
            .headers()
            .get("content-type")
            .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
        if streams {
            // A stream that goes on (the approval feed's) answered; it is read
            // by the tests of its route.
            assert_eq!(status, StatusCode::OK, "{method} {path}");
            continue;
        }
        let body = response.text().await.unwrap();
        assert_ne!(
            status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}: {body}"
        );
        assert!(
            !body.contains("no route for"),
            "{method} {path} fell through: {body}"
        );
    }
}

/// The answer's body checked against the schema the document gives for its
/// operation and status (or `default`); the document's components travel with
/// the schema so its references resolve.
fn conforms(document: &Value, method: &str, template: &str, status: StatusCode, body: &Value) {
    let responses = &document["paths"][template][method]["responses"];
    let answer = responses
        .get(status.as_str())
        .or_else(|| responses.get("default"))
        .unwrap_or_else(|| panic!("{method} {template}: {status} is not documented"));
    let schema = &answer["content"]["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "{method} {template}: {status} documents no JSON body"
    );
    let schema = json!({"components": document["components"], "allOf": [schema]});
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|error| format!("{error} at {}", error.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {template} {status}: {errors:?}\n{body}"
    );
}

/// A walk through the API's answers, each checked against its documented
/// schema: what schemathesis reaches only when it happens to hit an id that
/// exists.
#[tokio::test]
async fn real_answers_match_their_documented_schemas() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (_, document) = json(server.get("/v1/openapi.json").await).await;
    let check = |method: &'static str, template: &'static str| {
        let document = document.clone();
        move |(status, body): (StatusCode, Value)| {
            conforms(&document, method, template, status, &body);
            body
        }
    };

    check("get", "/health")(json(server.get("/health").await).await);
    let thread = check("post", "/v1/threads")(
        json(
            server
                .post("/v1/threads", json!({"title": "t", "custom": {"k": 1}}))
                .await,
        )
        .await,
    );
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    check("get", "/v1/threads")(json(server.get("/v1/threads").await).await);
    check("get", "/v1/threads/summaries")(json(server.get("/v1/threads/summaries").await).await);
    check("get", "/v1/threads/{thread_id}")(
        json(server.get(&format!("/v1/threads/{thread_id}")).await).await,
    );
    check("get", "/v1/threads/{thread_id}")(json(server.get("/v1/threads/ghost").await).await);

    // A demo run waits for approval; its records, its thread's pages, the decision.
    let started = server
        .post(
            "/v1/runs",
            json!({"agentId": "demo", "messages": user("delete notes.txt")}),
        )
        .await;
    let events = EventReader::new(started).rest().await;
    let (run_thread, run_id) = run_ids(&events);
    check("get", "/v1/runs/{run_id}")(json(server.get(&format!("/v1/runs/{run_id}")).await).await);
    check("get", "/v1/runs")(json(server.get("/v1/runs").await).await);
    check("get", "/v1/threads/{thread_id}/runs")(
        json(server.get(&format!("/v1/threads/{run_thread}/runs")).await).await,
    );
    check("get", "/v1/threads/{thread_id}/runs/latest")(
        json(
            server
                .get(&format!("/v1/threads/{run_thread}/runs/latest"))
                .await,
        )
        .await,
    );
    check("get", "/v1/threads/{thread_id}/messages")(
        json(
            server
                .get(&format!("/v1/threads/{run_thread}/messages"))
                .await,
        )
        .await,
    );
    check("get", "/v1/threads/{thread_id}/mailbox")(
        json(
            server
                .get(&format!("/v1/threads/{run_thread}/mailbox"))
                .await,
        )
        .await,
    );
    check("get", "/v1/ai-sdk/threads/{thread_id}/messages")(
        json(
            server
                .get(&format!("/v1/ai-sdk/threads/{run_thread}/messages"))
                .await,
        )
        .await,
    );
    check("get", "/v1/ag-ui/threads/{thread_id}/messages")(
        json(
            server
                .get(&format!("/v1/ag-ui/threads/{run_thread}/messages"))
                .await,
        )
        .await,
    );
    let call = suspended_calls(&events)[0].clone();
    let decision =
        json!({"call_id": call, "decision_id": "d-1", "action": "resume", "result": true});
    check("post", "/v1/runs/{run_id}/decision")(
        json(
            server
                .post(&format!("/v1/runs/{run_id}/decision"), decision.clone())
                .await,
        )
        .await,
    );
    check("post", "/v1/runs/{run_id}/decision")(
        json(
            server
                .post(
                    &format!("/v1/runs/{run_id}/decision"),
                    json!({"call_id": call}),
                )
                .await,
        )
        .await,
    );
    check("post", "/v1/threads/{thread_id}/messages")(
        json(
            server
                .post(
                    &format!("/v1/threads/{thread_id}/messages"),
                    json!({"agentId": "bench-text", "messages": user("hi")}),
                )
                .await,
        )
        .await,
    );

    check("get", "/v1/capabilities")(json(server.get("/v1/capabilities").await).await);
    check("get", "/v1/config/{namespace}")(json(server.get("/v1/config/models").await).await);
    check("get", "/v1/agents")(json(server.get("/v1/agents").await).await);
    check("get", "/v1/a2a/{tenant}/.well-known/agent-card.json")(
        json(
            server
                .get("/v1/a2a/bench-text/.well-known/agent-card.json")
                .await,
        )
        .await,
    );
    check("get", "/.well-known/agent-card.json")(
        json(server.get("/.well-known/agent-card.json").await).await,
    );

    // A2A: a task sent, read, listed, cancelled once it ended; an unknown one.
    let message =
        json!({"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
    let sent = check("post", "/v1/a2a/{tenant}/message:send")(
        a2a(
            &server,
            Method::POST,
            "/v1/a2a/bench-text/message:send",
            Some(&message),
        )
        .await,
    );
    let task = sent["task"]["id"].as_str().unwrap().to_owned();
    for (method, template, path) in [
        (
            "get",
            "/v1/a2a/{tenant}/tasks/{task}",
            format!("/v1/a2a/bench-text/tasks/{task}"),
        ),
        (
            "get",
            "/v1/a2a/{tenant}/tasks",
            "/v1/a2a/bench-text/tasks".to_owned(),
        ),
        (
            "post",
            "/v1/a2a/{tenant}/tasks/{task}",
            format!("/v1/a2a/bench-text/tasks/{task}:cancel"),
        ),
        (
            "get",
            "/v1/a2a/{tenant}/tasks/{task}/pushNotificationConfigs",
            format!("/v1/a2a/bench-text/tasks/{task}/pushNotificationConfigs"),
        ),
        (
            "get",
            "/v1/a2a/{tenant}/tasks/{task}",
            "/v1/a2a/bench-text/tasks/ghost".to_owned(),
        ),
        (
            "get",
            "/v1/a2a/{tenant}/tasks",
            "/v1/a2a/nobody/tasks".to_owned(),
        ),
    ] {
        let method_of = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        check(method, template)(a2a(&server, method_of, &path, None).await);
    }
}

/// An A2A HTTP+JSON request (with its version header) and its JSON answer.
async fn a2a(
    server: &TestServer,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    let mut request = server
        .client
        .request(method, server.url(path))
        .header("A2A-Version", "1.0");
    if let Some(body) = body {
        request = request.json(body);
    }
    json(request.send().await.unwrap()).await
}
