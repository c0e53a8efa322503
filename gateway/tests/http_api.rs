//! The Run API over real HTTP: a single node served on a loopback port, driven by
//! reqwest and read as SSE.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::server::ServerConfig;
use http_support::{
    EventReader, TestServer, assert_contiguous, expect_error, finish_type, json, run_ids,
    suspended_calls, user,
};
use reqwest::StatusCode;
use serde_json::json;

fn approve(call_id: &str, decision_id: &str) -> serde_json::Value {
    json!({"call_id": call_id, "decision_id": decision_id, "action": "resume",
           "result": {"approved": true}})
}

/// Starts a `demo` run (it asks before deleting) and reads it to its suspension.
async fn suspended_demo_run(server: &TestServer) -> (String, String, String, u64) {
    let response = server
        .post(
            "/v1/runs",
            json!({"agentId": "demo", "messages": user("delete notes.txt")}),
        )
        .await;
    let events = EventReader::new(response).rest().await;
    assert_contiguous(&events, 0);
    assert_eq!(finish_type(&events), "suspended");
    let (thread_id, run_id) = run_ids(&events);
    let calls = suspended_calls(&events);
    assert_eq!(calls.len(), 1, "one call waits for approval");
    let last_seq = events.last().unwrap().seq;
    (thread_id, run_id, calls[0].clone(), last_seq)
}

#[tokio::test]
async fn a_run_streams_to_its_suspension_and_a_decision_finishes_it() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (thread_id, run_id, call_id, last_seq) = suspended_demo_run(&server).await;

    let (status, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["status"], "waiting");

    // Watch the waiting run from where the first stream stopped, then approve:
    // the stream carries the resumed activation.
    let watching = server
        .client
        .get(server.url(&format!("/v1/runs/{run_id}/events")))
        .header("Last-Event-ID", last_seq.to_string())
        .send()
        .await
        .unwrap();
    let resumed = tokio::spawn(EventReader::new(watching).rest());
    let (status, body) = json(
        server
            .post(
                &format!("/v1/runs/{run_id}/decision"),
                approve(&call_id, "d-1"),
            )
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"status": "decision_applied", "duplicate": false})
    );
    let resumed = resumed.await.unwrap();
    assert_contiguous(&resumed, last_seq + 1);
    assert_eq!(finish_type(&resumed), "natural_end");

    let (_, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(run["status"], "done");
    let (_, latest) = json(
        server
            .get(&format!("/v1/threads/{thread_id}/runs/latest"))
            .await,
    )
    .await;
    assert_eq!(latest["run_id"], run_id.as_str());
    let (_, page) = json(
        server
            .get(&format!("/v1/threads/{thread_id}/messages?limit=200"))
            .await,
    )
    .await;
    let last = page["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["message"]["role"], "assistant");
    assert!(
        last["message"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("\"deleted\":\"notes.txt\""),
        "{last}"
    );
}

#[tokio::test]
async fn a_client_reconnecting_mid_run_gets_every_event_once() {
    let server = TestServer::local(ServerConfig::default()).await;
    // `slow` sleeps 1.5 s in a tool, so the run is still going on after two events.
    let response = server
        .post(
            "/v1/runs",
            json!({"agentId": "slow", "messages": user("take your time")}),
        )
        .await;
    let mut first = EventReader::new(response);
    let head = vec![first.next().await.unwrap(), first.next().await.unwrap()];
    drop(first);
    let (_, run_id) = run_ids(&head);
    let response = server
        .client
        .get(server.url(&format!("/v1/runs/{run_id}/events")))
        .header("Last-Event-ID", head[1].seq.to_string())
        .send()
        .await
        .unwrap();
    let tail = EventReader::new(response).rest().await;
    let all: Vec<_> = head.into_iter().chain(tail).collect();
    assert_contiguous(&all, 0);
    assert_eq!(finish_type(&all), "natural_end");

    // Replaying from the start after the end still works (the buffer is retained).
    let replay = EventReader::new(server.get(&format!("/v1/runs/{run_id}/events")).await)
        .rest()
        .await;
    assert_eq!(replay.len(), all.len());
}

#[tokio::test]
async fn closing_the_stream_does_not_cancel_the_run() {
    let server = TestServer::local(ServerConfig::default()).await;
    let response = server
        .post(
            "/v1/runs",
            json!({"agentId": "slow", "messages": user("take your time")}),
        )
        .await;
    let mut reader = EventReader::new(response);
    let start = reader.next().await.unwrap();
    drop(reader);
    let (_, run_id) = run_ids(&[start]);
    let rest = EventReader::new(server.get(&format!("/v1/runs/{run_id}/events")).await)
        .rest()
        .await;
    assert_eq!(finish_type(&rest), "natural_end");
}

#[tokio::test]
async fn background_input_is_queued_then_runs() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (status, thread) = json(server.post("/v1/threads", json!({"title": "bg"})).await).await;
    assert_eq!(status, StatusCode::CREATED);
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    let (status, accepted) = json(
        server
            .post(
                &format!("/v1/threads/{thread_id}/messages"),
                json!({"agentId": "bench-text", "messages": user("hi")}),
            )
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(accepted["status"], "queued");
    assert_eq!(accepted["thread_id"], thread_id.as_str());
    let run_id = accepted["run_id"].as_str().unwrap().to_owned();
    let events = EventReader::new(server.get(&format!("/v1/runs/{run_id}/events")).await)
        .rest()
        .await;
    assert_eq!(finish_type(&events), "natural_end");

    let (_, mailbox) = json(
        server
            .get(&format!("/v1/threads/{thread_id}/mailbox"))
            .await,
    )
    .await;
    let dispatches = mailbox["dispatches"].as_array().unwrap();
    assert_eq!(dispatches.len(), 1, "{mailbox}");
    assert_eq!(dispatches[0]["run_id"], run_id.as_str());
    assert!(
        dispatches[0].get("claim_token").is_none(),
        "claim tokens are never shown"
    );
    let (_, runs) = json(
        server
            .get(&format!("/v1/threads/{thread_id}/runs?status=done"))
            .await,
    )
    .await;
    assert_eq!(runs["total"], 1, "{runs}");

    // A follow-up input continues the thread in a new run with lineage.
    let (status, next) = json(
        server
            .post(
                &format!("/v1/runs/{run_id}/inputs"),
                json!({"messages": user("more")}),
            )
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let next_run = next["run_id"].as_str().unwrap().to_owned();
    assert_ne!(next_run, run_id);
    EventReader::new(server.get(&format!("/v1/runs/{next_run}/events")).await)
        .rest()
        .await;
    let (_, record) = json(server.get(&format!("/v1/runs/{next_run}")).await).await;
    assert_eq!(record["parent_run_id"], run_id.as_str());
    assert_eq!(
        record["agent_id"], "bench-text",
        "the thread's agent carries over"
    );
}

/// On the PostgreSQL store a new thread is written by its run's first
/// checkpoint (decision 0071): still, the thread and the run are there the
/// moment the stream's first event names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_threads_first_event_names_a_thread_and_run_the_store_has() {
    let (server, _schema) = TestServer::on_postgres().await;
    for _ in 0..5 {
        let started = server
            .post(
                "/v1/runs",
                json!({"agentId": "demo", "messages": user("delete notes.txt")}),
            )
            .await;
        assert_eq!(started.status(), StatusCode::OK);
        let mut events = EventReader::new(started);
        let first = events.next().await.expect("a first event");
        let (thread_id, run_id) = run_ids(std::slice::from_ref(&first));
        let (status, thread) = json(server.get(&format!("/v1/threads/{thread_id}")).await).await;
        assert_eq!(status, StatusCode::OK, "{thread}");
        let (status, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
        assert_eq!(status, StatusCode::OK, "{run}");
        events.rest().await;
    }
    server.shutdown().await;
}

#[tokio::test]
async fn threads_are_created_listed_updated_and_deleted() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (status, created) = json(
        server
            .post(
                "/v1/threads",
                json!({"id": "t-crud", "title": "first", "custom": {"k": 1}}),
            )
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["metadata"]["title"], "first");

    expect_error(
        server.post("/v1/threads", json!({"id": "t-crud"})).await,
        StatusCode::CONFLICT,
        "already exists",
    )
    .await;

    let patched = server
        .client
        .patch(server.url("/v1/threads/t-crud"))
        .json(&json!({"title": "second"}))
        .send()
        .await
        .unwrap();
    let (status, patched) = json(patched).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(patched["metadata"]["title"], "second");
    assert_eq!(
        patched["metadata"]["custom"],
        json!({"k": 1}),
        "untouched fields stay"
    );

    let latest = server.get("/v1/threads/t-crud/runs/latest").await;
    assert_eq!(
        latest.status(),
        StatusCode::NO_CONTENT,
        "a thread that has run nothing has no latest run, and is not unknown"
    );

    let (_, list) = json(server.get("/v1/threads").await).await;
    assert_eq!(list["threads"], json!(["t-crud"]));
    let (_, summaries) = json(server.get("/v1/threads/summaries").await).await;
    assert_eq!(summaries["threads"][0]["thread"]["id"], "t-crud");

    let deleted = server
        .client
        .delete(server.url("/v1/threads/t-crud"))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    expect_error(
        server.get("/v1/threads/t-crud").await,
        StatusCode::NOT_FOUND,
        "unknown thread",
    )
    .await;
}

#[tokio::test]
async fn a_waiting_thread_can_be_interrupted_but_not_deleted() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (thread_id, run_id, _, _) = suspended_demo_run(&server).await;

    let delete = server
        .client
        .delete(server.url(&format!("/v1/threads/{thread_id}")))
        .send()
        .await
        .unwrap();
    expect_error(delete, StatusCode::CONFLICT, "cancel it first").await;

    let (status, body) = json(
        server
            .post(&format!("/v1/threads/{thread_id}/interrupt"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "interrupt_requested");
    assert_eq!(body["cancelled_run_id"], run_id.as_str());
    assert_eq!(body["superseded_jobs"], 0);

    let (_, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(run["status"], "done");
    assert_eq!(run["termination"]["type"], "cancelled", "{run}");
    expect_error(
        server
            .post(&format!("/v1/runs/{run_id}/cancel"), json!({}))
            .await,
        StatusCode::CONFLICT,
        "neither active nor queued",
    )
    .await;
}

#[tokio::test]
async fn a_waiting_run_is_cancelled_by_run_id() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (thread_id, run_id, _, _) = suspended_demo_run(&server).await;
    let (status, body) = json(
        server
            .post(&format!("/v1/runs/{run_id}/cancel"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["run_id"], run_id.as_str());
    expect_error(
        server
            .post(&format!("/v1/threads/{thread_id}/cancel"), json!({}))
            .await,
        StatusCode::CONFLICT,
        "no active or queued run",
    )
    .await;
}

#[tokio::test]
async fn bad_decisions_are_refused_and_change_nothing() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (thread_id, run_id, call_id, _) = suspended_demo_run(&server).await;
    let decision_path = format!("/v1/threads/{thread_id}/decision");

    expect_error(
        server
            .post(&decision_path, approve("no-such-call", "d-x"))
            .await,
        StatusCode::CONFLICT,
        "no-such-call",
    )
    .await;
    expect_error(
        server
            .post(
                &decision_path,
                json!({"call_id": call_id, "action": "resume"}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "decision_id",
    )
    .await;
    expect_error(
        server
            .post(
                &decision_path,
                json!({"call_id": call_id, "decision_id": "d", "action": "maybe"}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "maybe",
    )
    .await;
    expect_error(
        server
            .post(
                &format!("/v1/runs/{run_id}/decision"),
                json!({"call_id": call_id, "decision_id": "d", "action": "resume",
                       "run_id": "another-run"}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "another-run",
    )
    .await;
    expect_error(
        server
            .post(
                "/v1/threads/no-such-thread/decision",
                approve(&call_id, "d-y"),
            )
            .await,
        StatusCode::NOT_FOUND,
        "unknown thread",
    )
    .await;
    expect_error(
        server
            .post("/v1/runs/no-such-run/decision", approve(&call_id, "d-y"))
            .await,
        StatusCode::NOT_FOUND,
        "unknown run",
    )
    .await;

    let (_, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(run["status"], "waiting", "nothing changed");

    let (status, _) = json(server.post(&decision_path, approve(&call_id, "d-ok")).await).await;
    assert_eq!(status, StatusCode::OK);
    expect_error(
        server
            .post(
                &format!("/v1/runs/{run_id}/decision"),
                approve(&call_id, "d-late"),
            )
            .await,
        StatusCode::CONFLICT,
        "not active",
    )
    .await;
}

#[tokio::test]
async fn malformed_requests_get_a_clear_4xx() {
    let config = ServerConfig {
        max_body_bytes: 4096,
        ..ServerConfig::default()
    };
    let server = TestServer::local(config).await;
    let raw = |path: &str, content_type: &str, body: Vec<u8>| {
        server
            .client
            .post(server.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    expect_error(
        raw("/v1/runs", "application/json", b"{not json".to_vec())
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "",
    )
    .await;
    expect_error(
        raw("/v1/runs", "text/plain", b"{}".to_vec()).await.unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "application/json",
    )
    .await;
    let huge = serde_json::to_vec(&json!({"messages": user(&"x".repeat(10_000))})).unwrap();
    expect_error(
        raw("/v1/runs", "application/json", huge).await.unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "",
    )
    .await;
    for (body, needle) in [
        (json!({"messages": []}), "at least one message"),
        (json!({"messages": user("")}), "no content"),
        (
            json!({"messages": [{"role": "assistant", "content": "x"}]}),
            "assistant",
        ),
        (
            json!({"messages": user("x"), "agentId": "ghost"}),
            "unknown agent",
        ),
        (json!({"messages": user("x"), "colour": "red"}), "colour"),
        (json!({"messages": user("x"), "threadId": ""}), "empty"),
    ] {
        let response = server.post("/v1/runs", body.clone()).await;
        let status = response.status();
        assert!(status.is_client_error(), "{body}: {status}");
        expect_error(response, status, needle).await;
    }
    for path in [
        "/v1/threads/ghost",
        "/v1/threads/ghost/messages",
        "/v1/threads/ghost/runs",
        "/v1/threads/ghost/runs/latest",
        "/v1/threads/ghost/mailbox",
        "/v1/runs/ghost",
        "/v1/runs/ghost/events",
    ] {
        let response = server.get(path).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        expect_error(response, StatusCode::NOT_FOUND, "ghost").await;
    }
    for (path, query_error) in [
        ("/v1/runs?limit=lots", "limit"),
        ("/v1/runs?status=sleeping", "sleeping"),
        ("/v1/threads?page=2", "page"),
        ("/v1/threads/t/messages?visibility=secret", "secret"),
    ] {
        expect_error(server.get(path).await, StatusCode::BAD_REQUEST, query_error).await;
    }
    let bad_id = format!("/v1/runs/{}", "r".repeat(300));
    expect_error(server.get(&bad_id).await, StatusCode::BAD_REQUEST, "limit").await;
    let reconnect = server
        .client
        .get(server.url("/v1/runs/ghost/events"))
        .header("Last-Event-ID", "yesterday")
        .send()
        .await
        .unwrap();
    expect_error(reconnect, StatusCode::BAD_REQUEST, "Last-Event-ID").await;
    expect_error(
        server.get("/v1/nowhere").await,
        StatusCode::NOT_FOUND,
        "no route",
    )
    .await;

    let (_, threads) = json(server.get("/v1/threads").await).await;
    assert_eq!(
        threads["threads"],
        json!([]),
        "no refused request created a thread"
    );
}

#[tokio::test]
async fn page_limits_are_clamped() {
    let server = TestServer::local(ServerConfig::default()).await;
    for index in 0..3 {
        server
            .post("/v1/threads", json!({"id": format!("t-{index}")}))
            .await;
    }
    let (_, page) = json(server.get("/v1/threads?limit=0").await).await;
    assert_eq!(
        page["threads"].as_array().unwrap().len(),
        1,
        "limit 0 means 1"
    );
    let (_, page) = json(server.get("/v1/threads?limit=100000&offset=1").await).await;
    assert_eq!(page["threads"], json!(["t-1", "t-2"]));
}

#[tokio::test]
async fn requests_beyond_the_concurrency_limit_get_503() {
    let config = ServerConfig {
        max_concurrent_requests: 1,
        ..ServerConfig::default()
    };
    let (server, mut gate) = TestServer::gated(config).await;
    // A request being worked on holds the one place until the gate opens.
    let unknown = format!("/v1/runs/{}", awaken_actors::RunId::generate());
    let held = tokio::spawn(server.client.get(server.url(&unknown)).send());
    gate.until_waiting(1).await;
    let refused = server.get("/v1/threads").await;
    assert_ne!(
        refused
            .headers()
            .get("connection")
            .map(|value| value.as_bytes()),
        Some(&b"close"[..]),
        "a refused request whose body was read leaves its connection usable"
    );
    expect_error(refused, StatusCode::SERVICE_UNAVAILABLE, "busy").await;
    let (status, _) = json(server.get("/health/live").await).await;
    assert_eq!(status, StatusCode::OK, "probes are never refused");
    gate.open();
    assert_eq!(held.await.unwrap().unwrap().status(), StatusCode::NOT_FOUND);
    let (status, _) = json(server.get("/v1/threads").await).await;
    assert_eq!(status, StatusCode::OK, "capacity is back");
}

#[tokio::test]
async fn a_request_whose_body_is_still_arriving_holds_no_place() {
    let config = ServerConfig {
        max_concurrent_requests: 1,
        ..ServerConfig::default()
    };
    let server = TestServer::local(config).await;
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
    let body = reqwest::Body::wrap_stream(tokio_stream_of(receiver));
    let pending = tokio::spawn(
        server
            .client
            .post(server.url("/v1/threads"))
            .header("content-type", "application/json")
            .body(body)
            .send(),
    );
    sender.send(Ok(b"{\"title\":".to_vec())).await.unwrap();
    server
        .until_metric("awaken_http_request_bodies_arriving", 1.0)
        .await;
    let (status, _) = json(server.get("/v1/threads").await).await;
    assert_eq!(status, StatusCode::OK, "the one place is free");
    sender.send(Ok(b"\"slow\"}".to_vec())).await.unwrap();
    drop(sender);
    let created = pending.await.unwrap().unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
}

fn tokio_stream_of(
    mut receiver: tokio::sync::mpsc::Receiver<Result<Vec<u8>, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

#[tokio::test]
async fn health_reports_ready_and_live() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (status, body) = json(server.get("/health").await).await;
    assert_eq!(
        (status, body["status"].clone()),
        (StatusCode::OK, json!("ok"))
    );
    let (status, _) = json(server.get("/health/live").await).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = json(server.get("/health/ready").await).await;
    assert_eq!(
        (status, body["status"].clone()),
        (StatusCode::OK, json!("ok"))
    );
}

#[tokio::test]
async fn readiness_is_withdrawn_while_the_node_drains_and_liveness_is_not() {
    use awaken_cluster::local::{LocalNode, LocalNodeConfig};
    use awaken_gateway::protocols::mcp::McpHub;
    use awaken_gateway::runtime_config::ConfigDocument;
    use awaken_gateway::server::{AppState, router};
    use tower::ServiceExt;

    let builder = awaken_gateway::demo::builder(
        Default::default(),
        std::sync::Arc::new(awaken_gateway::demo::FakeFiles::with_demo_files()),
        Default::default(),
    )
    .unwrap();
    let node = LocalNode::start(builder, LocalNodeConfig::default())
        .await
        .unwrap();
    let state = AppState::start(
        std::sync::Arc::new(node),
        ServerConfig::default(),
        ConfigDocument::default(),
        std::sync::Arc::new(McpHub::new()),
    )
    .await
    .unwrap();
    let probe = |path: &'static str| {
        let app = router(state.clone());
        async move {
            let request = axum::http::Request::get(path)
                .body(axum::body::Body::empty())
                .unwrap();
            app.oneshot(request).await.unwrap().status()
        }
    };
    assert_eq!(probe("/health/ready").await, StatusCode::OK);
    state.stop_streams();
    assert_eq!(
        probe("/health/ready").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(probe("/health").await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(probe("/health/live").await, StatusCode::OK);
}

#[tokio::test]
async fn shutdown_ends_open_streams_and_leaves_the_run_alone() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (_, run_id, _, last_seq) = suspended_demo_run(&server).await;
    // Nothing new after `last_seq`: this stream waits for the run to resume.
    let watching = server
        .client
        .get(server.url(&format!("/v1/runs/{run_id}/events")))
        .header("Last-Event-ID", last_seq.to_string())
        .send()
        .await
        .unwrap();
    let reader = EventReader::new(watching);
    let control = server.control();
    assert!(server.shutdown().await, "the open stream ended at shutdown");
    assert!(reader.rest().await.is_empty());
    let run = control
        .store()
        .load_run(&awaken_actors::RunId::new(run_id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, awaken_actors::contract::RunStatus::Waiting);
}

#[tokio::test]
async fn runs_need_an_agent_and_an_existing_thread() {
    let server = TestServer::local(ServerConfig::default()).await;
    expect_error(
        server
            .post("/v1/runs", json!({"messages": user("hi")}))
            .await,
        StatusCode::BAD_REQUEST,
        "no agent",
    )
    .await;
    expect_error(
        server
            .post(
                "/v1/runs",
                json!({"agentId": "demo", "threadId": "ghost", "messages": user("hi")}),
            )
            .await,
        StatusCode::NOT_FOUND,
        "unknown thread",
    )
    .await;
    let (_, threads) = json(server.get("/v1/threads").await).await;
    assert_eq!(
        threads["threads"],
        json!([]),
        "refused runs create no thread"
    );

    // On a thread that ran before, its agent is the default.
    let events = EventReader::new(
        server
            .post(
                "/v1/runs",
                json!({"agentId": "bench-text", "messages": user("a")}),
            )
            .await,
    )
    .rest()
    .await;
    let (thread_id, _) = run_ids(&events);
    let again = EventReader::new(
        server
            .post(
                "/v1/runs",
                json!({"threadId": thread_id, "messages": user("b")}),
            )
            .await,
    )
    .rest()
    .await;
    assert_eq!(finish_type(&again), "natural_end");
}

#[tokio::test]
async fn a_wrong_method_is_405_in_the_error_format() {
    let server = TestServer::local(ServerConfig::default()).await;
    let response = server
        .client
        .put(server.url("/v1/runs"))
        .send()
        .await
        .unwrap();
    expect_error(response, StatusCode::METHOD_NOT_ALLOWED, "PUT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_decision_is_a_duplicate_whenever_it_comes() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (thread_id, run_id, call_id, _) = suspended_demo_run(&server).await;
    let path = format!("/v1/runs/{run_id}/decision");

    // Fifty clients post the same decision at once: it is applied once, and every
    // other post is told it was a duplicate.
    let posts = (0..50).map(|_| {
        let (client, url, body) = (
            server.client.clone(),
            server.url(&path),
            approve(&call_id, "d-once"),
        );
        tokio::spawn(async move { json(client.post(url).json(&body).send().await.unwrap()).await })
    });
    let mut fresh = 0;
    for post in posts {
        let (status, body) = post.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["status"], "decision_applied");
        if body["duplicate"] == false {
            fresh += 1;
        }
    }
    assert_eq!(fresh, 1, "the decision was applied exactly once");

    // Long after the run ended, on either route, a retry is still a duplicate.
    let (_, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(run["status"], "done", "{run}");
    for path in [path.clone(), format!("/v1/threads/{thread_id}/decision")] {
        let (status, body) = json(server.post(&path, approve(&call_id, "d-once")).await).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        assert_eq!(
            body,
            json!({"status": "decision_applied", "duplicate": true})
        );
    }
    // Another decision for the finished call is still refused.
    expect_error(
        server.post(&path, approve(&call_id, "d-other")).await,
        StatusCode::CONFLICT,
        "not active",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stream_of_a_burst_starts_with_its_run_start_however_many_runs_end_first() {
    // One ended run retained: every other run of the burst ends before most
    // streams read their first event.
    let node = awaken_cluster::local::LocalNodeConfig {
        events: awaken_cluster::events::EventsConfig {
            retained_runs: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let server = TestServer::local_with(
        node,
        ServerConfig {
            max_concurrent_requests: 1000,
            ..ServerConfig::default()
        },
    )
    .await;
    let streams = (0..200).map(|i| {
        let (client, url) = (server.client.clone(), server.url("/v1/runs"));
        let body = json!({"agentId": "bench", "messages": user(&format!("burst {i}"))});
        tokio::spawn(async move {
            let response = client.post(url).json(&body).send().await.unwrap();
            EventReader::new(response).rest().await
        })
    });
    for stream in streams {
        let events = stream.await.unwrap();
        let first = serde_json::to_value(events.first().expect("the stream had events")).unwrap();
        assert_eq!(first["event_type"], "run_start", "{first}");
        assert_contiguous(&events, 0);
        assert_eq!(finish_type(&events), "natural_end");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_characters_and_oversized_decisions_are_refused_before_they_reach_the_store() {
    let (server, _schema) = TestServer::on_postgres().await;
    let (thread_id, run_id, call_id, _) = suspended_demo_run(&server).await;
    let path = format!("/v1/runs/{run_id}/decision");
    let nul = "bad\u{0}byte";
    for body in [
        json!({"call_id": call_id, "decision_id": "d-nul", "action": "resume",
               "result": {"note": nul}}),
        json!({"call_id": call_id, "decision_id": "d-nul", "action": "cancel", "reason": nul}),
    ] {
        expect_error(
            server.post(&path, body).await,
            StatusCode::BAD_REQUEST,
            "NUL",
        )
        .await;
    }
    expect_error(
        server
            .post(
                &path,
                json!({"call_id": call_id, "decision_id": "d-big", "action": "resume",
                       "result": {"text": "x".repeat(200 * 1024)}}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "limit",
    )
    .await;
    for (route, body) in [
        (
            "/v1/runs".to_owned(),
            json!({"agentId": "demo", "threadId": thread_id, "messages": user(nul)}),
        ),
        (
            format!("/v1/threads/{thread_id}/messages"),
            json!({"messages": user(nul)}),
        ),
        ("/v1/threads".to_owned(), json!({"title": nul})),
        ("/v1/threads".to_owned(), json!({"custom": {"note": nul}})),
    ] {
        expect_error(
            server.post(&route, body).await,
            StatusCode::BAD_REQUEST,
            "NUL",
        )
        .await;
    }

    // Nothing was applied: the run still waits and takes a good decision.
    let (_, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(run["status"], "waiting", "{run}");
    let (status, body) = json(server.post(&path, approve(&call_id, "d-ok")).await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["duplicate"], false);
    let (_, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(run["status"], "done", "{run}");
    // The thread takes new input as before.
    let response = server
        .post(
            "/v1/runs",
            json!({"agentId": "demo", "threadId": thread_id, "messages": user("hello")}),
        )
        .await;
    let events = EventReader::new(response).rest().await;
    assert_contiguous(&events, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_inputs_posted_together_each_cancel_the_run_before_and_every_run_ends() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (status, thread) = json(server.post("/v1/threads", json!({})).await).await;
    assert_eq!(status, StatusCode::CREATED, "{thread}");
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    let mut runs = Vec::new();
    for i in 0..20 {
        let (status, queued) = json(
            server
                .post(
                    &format!("/v1/threads/{thread_id}/messages"),
                    json!({"agentId": "slow", "messages": user(&format!("input {i}"))}),
                )
                .await,
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
        runs.push(queued["run_id"].as_str().unwrap().to_owned());
    }
    let mut terminations = Vec::new();
    for run_id in &runs {
        let events = EventReader::new(server.get(&format!("/v1/runs/{run_id}/events")).await)
            .rest()
            .await;
        terminations.push(finish_type(&events));
        let (_, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
        assert_eq!(run["status"], "done", "{run}");
    }
    let (last, earlier) = terminations.split_last().unwrap();
    assert_eq!(last, "natural_end");
    assert!(earlier.iter().all(|t| t == "cancelled"), "{terminations:?}");
}
