//! The approvals inbox over real HTTP: a suspension found, read and decided by
//! its approval id, resolved once, cancelled with its run, scoped by tenant, and
//! bad requests refused without changing anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::collections::BTreeMap;

use awaken_gateway::server::ServerConfig;
use http_support::{EventReader, TestServer, expect_error, finish_type, json, run_ids, user};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Starts a `demo` run that asks before deleting `file`, read to its suspension:
/// its thread and run.
async fn waiting_run(server: &TestServer, key: Option<&str>, file: &str) -> (String, String) {
    let mut request = server.client.post(server.url("/v1/runs")).json(&json!({
        "agentId": "demo", "messages": user(&format!("delete {file}")),
    }));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let events = EventReader::new(request.send().await.unwrap()).rest().await;
    assert_eq!(finish_type(&events), "suspended");
    run_ids(&events)
}

fn items(page: &Value) -> &Vec<Value> {
    page["items"].as_array().unwrap()
}

fn approve() -> Value {
    json!({"action": "resume", "result": {"approved": true}})
}

#[tokio::test]
async fn a_suspension_is_an_approval_found_and_decided_by_its_id() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (thread_id, run_id) = waiting_run(&server, None, "notes.txt").await;

    let (status, page) = json(server.get("/v1/approvals?status=pending").await).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let [approval] = items(&page).as_slice() else {
        panic!("one approval waits: {page}");
    };
    assert_eq!(approval["thread_id"], thread_id.as_str());
    assert_eq!(approval["run_id"], run_id.as_str());
    assert_eq!(approval["agent_id"], "demo");
    assert_eq!(approval["status"], "pending");
    assert!(
        approval["arguments"].to_string().contains("notes.txt"),
        "{approval}"
    );
    assert!(approval["requested_at"].as_u64().unwrap() > 0);
    assert!(page.get("next_cursor").is_none(), "{page}");
    let (_, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    let ticket = &run["waiting"]["tickets"][0];
    assert_eq!(approval["call_id"], ticket["tool_call_id"]);
    assert_eq!(approval["ticket_id"], ticket["ticket_id"]);
    assert_eq!(approval["tool_name"], ticket["tool_name"]);

    let id = approval["approval_id"].as_str().unwrap().to_owned();
    let (status, one) = json(server.get(&format!("/v1/approvals/{id}")).await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&one, approval);

    let decide = format!("/v1/approvals/{id}/decision");
    let (status, answer) = json(server.post(&decide, approve()).await).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["status"], "decision_applied");
    assert_eq!(answer["duplicate"], false);
    assert_eq!(answer["approval"]["status"], "approved");
    assert_eq!(
        answer["approval"]["answer"]["result"],
        json!({"approved": true})
    );
    assert!(answer["approval"]["resolved_at"].as_u64().is_some());
    let (_, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(run["status"], "done", "{run}");
    assert_eq!(run["termination_code"], "natural_end");
    assert_eq!(
        run["decisions"][0]["decision_id"],
        answer["approval"]["decision_id"]
    );

    // The same answer again, whenever it comes, is the one decision.
    let (status, again) = json(server.post(&decide, approve()).await).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["approval"], answer["approval"]);
    // Another answer is refused, naming what the approval is.
    expect_error(
        server
            .post(
                &decide,
                json!({"action": "resume", "result": {"approved": false}}),
            )
            .await,
        StatusCode::CONFLICT,
        "is approved",
    )
    .await;
    let (_, after) = json(server.get(&format!("/v1/approvals/{id}")).await).await;
    assert_eq!(after, answer["approval"], "nothing changed");

    let (_, pending) = json(server.get("/v1/approvals?status=pending").await).await;
    assert!(items(&pending).is_empty(), "{pending}");
    let (_, approved) = json(server.get("/v1/approvals?status=approved").await).await;
    assert_eq!(items(&approved).len(), 1);
}

#[tokio::test]
async fn an_approval_ends_cancelled_with_its_run() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (_, run_id) = waiting_run(&server, None, "a.txt").await;
    let (_, page) = json(server.get("/v1/approvals").await).await;
    let id = items(&page)[0]["approval_id"].as_str().unwrap().to_owned();

    let (status, body) = json(
        server
            .post(&format!("/v1/runs/{run_id}/cancel"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (_, approval) = json(server.get(&format!("/v1/approvals/{id}")).await).await;
    assert_eq!(approval["status"], "cancelled", "{approval}");
    assert_eq!(approval["cause"], "run_cancelled");
    expect_error(
        server
            .post(&format!("/v1/approvals/{id}/decision"), approve())
            .await,
        StatusCode::CONFLICT,
        "is cancelled (run_cancelled)",
    )
    .await;
}

#[tokio::test]
async fn the_inbox_pages_by_cursor_and_filters() {
    let server = TestServer::local(ServerConfig::default()).await;
    let mut runs = Vec::new();
    for n in 0..3 {
        runs.push(waiting_run(&server, None, &format!("f{n}.txt")).await);
    }
    let (_, first) = json(server.get("/v1/approvals?limit=2").await).await;
    assert_eq!(items(&first).len(), 2, "{first}");
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let (status, second) = json(
        server
            .get(&format!("/v1/approvals?limit=2&after={cursor}"))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(items(&second).len(), 1);
    assert!(second.get("next_cursor").is_none());
    let listed: Vec<&Value> = items(&first).iter().chain(items(&second)).collect();
    let run_order: Vec<&str> = listed
        .iter()
        .map(|a| a["run_id"].as_str().unwrap())
        .collect();
    let started: Vec<&str> = runs.iter().map(|(_, run)| run.as_str()).collect();
    assert_eq!(run_order, started, "oldest request first");

    let (thread, _) = &runs[1];
    let (_, by_thread) = json(
        server
            .get(&format!("/v1/approvals?thread_id={thread}"))
            .await,
    )
    .await;
    assert_eq!(items(&by_thread).len(), 1);
    assert_eq!(items(&by_thread)[0]["thread_id"], thread.as_str());
    let (_, by_agent) = json(server.get("/v1/approvals?agent_id=someone-else").await).await;
    assert!(items(&by_agent).is_empty());
    let tool = listed[0]["tool_name"].as_str().unwrap().to_owned();
    let (_, by_tool) = json(server.get(&format!("/v1/approvals?tool={tool}")).await).await;
    assert_eq!(items(&by_tool).len(), 3);
    let (_, old) = json(server.get("/v1/approvals?older_than=3600").await).await;
    assert!(items(&old).is_empty(), "none is an hour old: {old}");
    let (_, recent) = json(server.get("/v1/approvals?newer_than=3600").await).await;
    assert_eq!(items(&recent).len(), 3);
}

#[tokio::test]
async fn bad_approval_requests_are_refused_and_change_nothing() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (_, run_id) = waiting_run(&server, None, "b.txt").await;
    let (_, page) = json(server.get("/v1/approvals").await).await;
    let approval = items(&page)[0].clone();
    let id = approval["approval_id"].as_str().unwrap().to_owned();
    let decide = format!("/v1/approvals/{id}/decision");

    expect_error(
        server.get("/v1/approvals/no-such-approval").await,
        StatusCode::NOT_FOUND,
        "unknown approval",
    )
    .await;
    expect_error(
        server
            .post("/v1/approvals/no-such-approval/decision", approve())
            .await,
        StatusCode::NOT_FOUND,
        "unknown approval",
    )
    .await;
    for (body, needle) in [
        (json!({"action": "maybe"}), "action"),
        (json!({"result": true}), "action"),
        (json!({"action": "resume", "call_id": "x"}), "call_id"),
        (json!({"action": "resume", "decision_id": ""}), "decision"),
        (
            json!({"action": "resume", "reason": "x".repeat(70 * 1024)}),
            "exceed the limit",
        ),
    ] {
        expect_error(
            server.post(&decide, body).await,
            StatusCode::BAD_REQUEST,
            needle,
        )
        .await;
    }
    for query in [
        "status=bogus",
        "limit=-1",
        "after=garbage",
        "after=12.",
        "unknown=1",
        "older_than=soon",
        "tool=a%00b",
    ] {
        let (status, body) = json(server.get(&format!("/v1/approvals?{query}")).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }
    let (_, still) = json(server.get(&format!("/v1/approvals/{id}")).await).await;
    assert_eq!(still, approval, "nothing changed");
    let (_, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(run["status"], "waiting");
}

#[tokio::test]
async fn a_tenant_sees_and_decides_only_its_own_approvals() {
    let api_keys = BTreeMap::from([
        ("key-a".to_owned(), "tenant-a".to_owned()),
        ("key-b".to_owned(), "tenant-b".to_owned()),
    ]);
    let server = TestServer::local(ServerConfig {
        api_keys: api_keys.into(),
        ..ServerConfig::default()
    })
    .await;
    waiting_run(&server, Some("key-a"), "a.txt").await;
    waiting_run(&server, Some("key-b"), "b.txt").await;
    let list = |key: &'static str| {
        let request = server
            .client
            .get(server.url("/v1/approvals"))
            .bearer_auth(key);
        async move { json(request.send().await.unwrap()).await.1 }
    };
    let of_a = list("key-a").await;
    let of_b = list("key-b").await;
    assert_eq!(items(&of_a).len(), 1, "{of_a}");
    assert_eq!(items(&of_a)[0]["tenant"], "tenant-a");
    assert_eq!(items(&of_b).len(), 1, "{of_b}");
    let b_id = items(&of_b)[0]["approval_id"].as_str().unwrap().to_owned();

    let as_a = |request: reqwest::RequestBuilder| request.bearer_auth("key-a").send();
    expect_error(
        as_a(
            server
                .client
                .get(server.url(&format!("/v1/approvals/{b_id}"))),
        )
        .await
        .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown approval",
    )
    .await;
    expect_error(
        as_a(
            server
                .client
                .post(server.url(&format!("/v1/approvals/{b_id}/decision")))
                .json(&approve()),
        )
        .await
        .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown approval",
    )
    .await;
    let still = list("key-b").await;
    assert_eq!(
        items(&still)[0]["status"],
        "pending",
        "another tenant changed nothing"
    );
}

/// The frames of an approval stream, as `(id, data)`.
struct Frames {
    frames: std::pin::Pin<Box<dyn futures::Stream<Item = (String, Value)> + Send>>,
}

impl Frames {
    async fn open(server: &TestServer, key: Option<&str>, last_event_id: Option<&str>) -> Self {
        use eventsource_stream::Eventsource;
        use futures::StreamExt;
        let mut request = server.client.get(server.url("/v1/approvals/stream"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let frames = response.bytes_stream().eventsource().filter_map(|frame| {
            let frame = frame.unwrap();
            futures::future::ready(
                (!frame.data.is_empty())
                    .then(|| (frame.id, serde_json::from_str(&frame.data).unwrap())),
            )
        });
        Self {
            frames: Box::pin(frames),
        }
    }

    async fn next(&mut self) -> (String, Value) {
        use futures::StreamExt;
        self.frames.next().await.expect("the stream goes on")
    }
}

#[tokio::test]
async fn the_stream_carries_requests_and_resolutions_and_resumes_after_its_last_id() {
    let server = TestServer::local(ServerConfig::default()).await;
    let mut stream = Frames::open(&server, None, None).await;
    let (thread_id, run_id) = waiting_run(&server, None, "notes.txt").await;

    let (requested_id, requested) = stream.next().await;
    assert_eq!(requested["event"], "requested", "{requested}");
    let approval = &requested["approval"];
    assert_eq!(approval["thread_id"], thread_id.as_str());
    assert_eq!(approval["run_id"], run_id.as_str());
    assert_eq!(approval["status"], "pending");
    assert!(
        !requested_id.is_empty(),
        "a frame has an id to resume after"
    );
    let (_, listed) = json(server.get("/v1/approvals").await).await;
    assert_eq!(&items(&listed)[0], approval, "the record is the approval");

    let id = approval["approval_id"].as_str().unwrap();
    let (status, answer) = json(
        server
            .post(&format!("/v1/approvals/{id}/decision"), approve())
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (resolved_id, resolved) = stream.next().await;
    assert_eq!(resolved["event"], "resolved");
    assert_eq!(resolved["approval"], answer["approval"]);

    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("awaken_approval_feed_records_total{outcome=\"published\"} 2"),
        "both records published: {metrics}"
    );

    // A client that saw the request resumes with the resolution.
    let mut resumed = Frames::open(&server, None, Some(&requested_id)).await;
    assert_eq!(resumed.next().await, (resolved_id, resolved));
    // A position this node never gave: a gap, then new records.
    let mut lost = Frames::open(&server, None, Some("0-1")).await;
    assert_eq!(lost.next().await, (String::new(), json!({"event": "gap"})));
}

#[tokio::test]
async fn a_tenant_streams_only_its_own_approvals_and_bad_requests_are_refused() {
    let api_keys = BTreeMap::from([
        ("key-a".to_owned(), "tenant-a".to_owned()),
        ("key-b".to_owned(), "tenant-b".to_owned()),
    ]);
    let server = TestServer::local(ServerConfig {
        api_keys: api_keys.into(),
        ..ServerConfig::default()
    })
    .await;
    let mut of_a = Frames::open(&server, Some("key-a"), None).await;
    waiting_run(&server, Some("key-b"), "b.txt").await;
    waiting_run(&server, Some("key-a"), "a.txt").await;
    // The feed is in order: tenant-b's record, stored first, would come first.
    let (_, first) = of_a.next().await;
    assert_eq!(
        first["approval"]["tenant"], "tenant-a",
        "tenant-b's record never reaches tenant-a: {first}"
    );

    let refused = |request: reqwest::RequestBuilder| request.bearer_auth("key-a").send();
    let stream_at = |query: &str| {
        server
            .client
            .get(server.url(&format!("/v1/approvals/stream{query}")))
    };
    let stream = || stream_at("");
    for (request, status, says) in [
        (
            stream().header("Last-Event-ID", "x".repeat(129)),
            StatusCode::BAD_REQUEST,
            "Last-Event-ID",
        ),
        (
            stream().header("Last-Event-ID", "a b"),
            StatusCode::BAD_REQUEST,
            "Last-Event-ID",
        ),
        (
            stream_at("?status=pending"),
            StatusCode::BAD_REQUEST,
            "status",
        ),
        (
            stream_at("?event=expired_soon"),
            StatusCode::BAD_REQUEST,
            "event",
        ),
        (
            stream_at("?tool=a%00b"),
            StatusCode::BAD_REQUEST,
            "control characters",
        ),
    ] {
        expect_error(refused(request).await.unwrap(), status, says).await;
    }
    expect_error(stream().send().await.unwrap(), StatusCode::UNAUTHORIZED, "").await;
}
