//! API keys and tenants over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::collections::BTreeMap;

use awaken_actors::RunId;
use awaken_gateway::server::ServerConfig;
use http_support::{EventReader, TestServer, expect_error, json, run_ids, user};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn server() -> TestServer {
    let api_keys = BTreeMap::from([
        ("key-a".to_owned(), "tenant-a".to_owned()),
        ("key-b".to_owned(), "tenant-b".to_owned()),
    ]);
    TestServer::local(ServerConfig {
        api_keys: api_keys.into(),
        ..ServerConfig::default()
    })
    .await
}

async fn call(
    server: &TestServer,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut request = server
        .client
        .request(method, server.url(path))
        .bearer_auth(key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn every_route_but_health_needs_a_known_key() {
    let server = server().await;
    expect_error(
        server.get("/v1/threads").await,
        StatusCode::UNAUTHORIZED,
        "missing",
    )
    .await;
    expect_error(
        call(&server, "key-z", Method::GET, "/v1/threads", None).await,
        StatusCode::UNAUTHORIZED,
        "unknown API key",
    )
    .await;
    expect_error(
        server
            .post(
                "/v1/runs",
                json!({"agentId": "demo", "messages": user("x")}),
            )
            .await,
        StatusCode::UNAUTHORIZED,
        "missing",
    )
    .await;
    for path in ["/health", "/health/ready", "/health/live"] {
        assert_eq!(server.get(path).await.status(), StatusCode::OK, "{path}");
    }
    let (status, _) = json(call(&server, "key-a", Method::GET, "/v1/threads", None).await).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_tenant_cannot_see_or_touch_another_tenants_threads_and_runs() {
    let server = server().await;
    let started = call(
        &server,
        "key-a",
        Method::POST,
        "/v1/runs",
        Some(json!({"agentId": "demo", "messages": user("delete notes.txt")})),
    )
    .await;
    let events = EventReader::new(started).rest().await;
    let (thread_id, run_id) = run_ids(&events);

    let (status, thread) = json(
        call(
            &server,
            "key-a",
            Method::GET,
            &format!("/v1/threads/{thread_id}"),
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(thread["metadata"]["custom"]["awaken.tenant"], "tenant-a");

    let decision = json!({"call_id": "call_2_0", "decision_id": "d", "action": "resume"});
    for (method, path, body) in [
        (Method::GET, format!("/v1/threads/{thread_id}"), None),
        (
            Method::GET,
            format!("/v1/threads/{thread_id}/messages"),
            None,
        ),
        (Method::GET, format!("/v1/threads/{thread_id}/runs"), None),
        (
            Method::GET,
            format!("/v1/threads/{thread_id}/mailbox"),
            None,
        ),
        (
            Method::PATCH,
            format!("/v1/threads/{thread_id}"),
            Some(json!({"title": "mine"})),
        ),
        (Method::DELETE, format!("/v1/threads/{thread_id}"), None),
        (
            Method::POST,
            format!("/v1/threads/{thread_id}/interrupt"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/threads/{thread_id}/cancel"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/threads/{thread_id}/decision"),
            Some(decision.clone()),
        ),
        (
            Method::POST,
            format!("/v1/threads/{thread_id}/messages"),
            Some(json!({"messages": user("hi")})),
        ),
        (Method::GET, format!("/v1/runs/{run_id}"), None),
        (Method::GET, format!("/v1/runs/{run_id}/events"), None),
        (Method::POST, format!("/v1/runs/{run_id}/cancel"), None),
        (
            Method::POST,
            format!("/v1/runs/{run_id}/decision"),
            Some(decision.clone()),
        ),
        (
            Method::POST,
            format!("/v1/runs/{run_id}/inputs"),
            Some(json!({"messages": user("hi")})),
        ),
        (
            Method::POST,
            "/v1/runs".to_owned(),
            Some(json!({"threadId": thread_id, "messages": user("hi")})),
        ),
    ] {
        // Tenant B gets what it would get for ids nobody uses: 404, same words.
        let fresh_thread = "t-nobody-has-this";
        let fresh_run = RunId::generate().to_string();
        let (status, seen) =
            json(call(&server, "key-b", method.clone(), &path, body.clone()).await).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {seen}");
        if path != "/v1/runs" {
            let unknown_path = path
                .replace(&thread_id, fresh_thread)
                .replace(&run_id, &fresh_run);
            let (unknown_status, unknown) =
                json(call(&server, "key-b", method.clone(), &unknown_path, body).await).await;
            let unknown = unknown
                .to_string()
                .replace(fresh_thread, &thread_id)
                .replace(&fresh_run, &run_id);
            assert_eq!(
                (status, seen.to_string()),
                (unknown_status, unknown),
                "{method} {path}"
            );
        }
    }
    for path in ["/v1/threads", "/v1/threads/summaries", "/v1/runs"] {
        let (_, b_view) = json(call(&server, "key-b", Method::GET, path, None).await).await;
        let (_, a_view) = json(call(&server, "key-a", Method::GET, path, None).await).await;
        let list = |view: &Value| {
            view.get("threads")
                .or_else(|| view.get("runs"))
                .unwrap()
                .as_array()
                .unwrap()
                .len()
        };
        assert_eq!((list(&a_view), list(&b_view)), (1, 0), "{path}");
    }

    let (_, run) = json(
        call(
            &server,
            "key-a",
            Method::GET,
            &format!("/v1/runs/{run_id}"),
            None,
        )
        .await,
    )
    .await;
    assert_eq!(run["status"], "waiting", "nothing B did changed the run");
}

#[tokio::test]
async fn the_tenant_mark_cannot_be_set_or_removed_by_clients() {
    let server = server().await;
    expect_error(
        call(
            &server,
            "key-b",
            Method::POST,
            "/v1/threads",
            Some(json!({"custom": {"awaken.tenant": "tenant-a"}})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "set by the server",
    )
    .await;
    let (status, thread) = json(
        call(
            &server,
            "key-a",
            Method::POST,
            "/v1/threads",
            Some(json!({"id": "t-a"})),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{thread}");
    let (status, patched) = json(
        call(
            &server,
            "key-a",
            Method::PATCH,
            "/v1/threads/t-a",
            Some(json!({"custom": {"colour": "blue"}})),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        patched["metadata"]["custom"],
        json!({"awaken.tenant": "tenant-a", "colour": "blue"})
    );
}
