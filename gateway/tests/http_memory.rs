//! A node whose admitted memory is full refuses new work at the door — 503 with
//! `Retry-After`, nothing written — and says so on `/health/ready`; work it
//! already holds goes on, and new work is taken again once memory comes back
//! (decision 0089).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_actors::memory::{Held, Share};
use awaken_gateway::server::ServerConfig;
use http_support::{TestServer, json, user};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The threads the node has.
async fn threads(server: &TestServer) -> Vec<Value> {
    let (status, body) = json(server.get("/v1/threads").await).await;
    assert_eq!(status, StatusCode::OK);
    body["threads"].as_array().unwrap().clone()
}

/// Starts a run on a new thread and reads it to its end.
async fn run(server: &TestServer, text: &str) {
    let response = server
        .post(
            "/v1/runs",
            json!({"agentId": "demo", "messages": user(text)}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let stream = response.text().await.unwrap();
    assert!(stream.contains("run_finish"), "{stream}");
}

/// Asserts `response` is the full-memory refusal.
async fn refused_for_memory(response: reqwest::Response) {
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok()),
        Some("5")
    );
    let body: Value = response.json().await.unwrap();
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("memory budget is full"), "{error}");
}

fn chat(id: &str) -> Value {
    json!({
        "id": id,
        "agentId": "demo",
        "trigger": "submit-message",
        "messages": [{"id": format!("u-{id}"), "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
    })
}

#[tokio::test]
async fn new_work_is_refused_with_retry_after_while_admitted_memory_is_full_and_taken_again_after()
{
    let server = TestServer::local(ServerConfig::default()).await;
    let control = server.control();
    let memory = control.runtime().memory();
    run(&server, "before").await;
    let thread_id = threads(&server).await[0].as_str().unwrap().to_owned();
    let before = threads(&server).await.len();

    // What active runs would hold when they fill the share.
    let limit = memory.meter(Share::Admitted).limit();
    let full = memory.charge(Held::Active, limit);

    refused_for_memory(
        server
            .post(
                "/v1/runs",
                json!({"agentId": "demo", "messages": user("new thread")}),
            )
            .await,
    )
    .await;
    refused_for_memory(
        server
            .post(
                &format!("/v1/threads/{thread_id}/mailbox"),
                json!({"messages": user("queued")}),
            )
            .await,
    )
    .await;
    refused_for_memory(server.post("/v1/ai-sdk/chat", chat("c-full")).await).await;
    assert_eq!(threads(&server).await.len(), before, "nothing was written");
    let (_, mailbox) = json(
        server
            .get(&format!("/v1/threads/{thread_id}/mailbox"))
            .await,
    )
    .await;
    assert_eq!(
        mailbox["dispatches"].as_array().unwrap().len(),
        1,
        "{mailbox}"
    );

    let (status, ready) = json(server.get("/health/ready").await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready["status"], "memory_full");
    let (status, _) = json(server.get("/health/live").await).await;
    assert_eq!(status, StatusCode::OK, "a full node is alive");
    let (status, _) = json(server.get(&format!("/v1/threads/{thread_id}")).await).await;
    assert_eq!(status, StatusCode::OK, "reads are served");

    drop(full);
    let (status, ready) = json(server.get("/health/ready").await).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    run(&server, "after").await;
    assert_eq!(threads(&server).await.len(), before + 1);
    server.shutdown().await;
}
