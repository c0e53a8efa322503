//! `/metrics`: the Prometheus text of a serving node.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::server::{ApiKeys, ServerConfig};
use http_support::{EventReader, TestServer, user};
use reqwest::StatusCode;
use serde_json::json;

async fn scrape(server: &TestServer, key: Option<&str>) -> (StatusCode, String, String) {
    let mut request = server.client.get(server.url("/metrics"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, response.text().await.unwrap())
}

/// The value of the sample `name{labels}` in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_counted_by_route_template_and_threads_are_gauged() {
    let server = TestServer::local(ServerConfig::default()).await;
    for id in ["a", "b"] {
        let response = server.get(&format!("/v1/threads/missing-{id}")).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
    assert_eq!(
        server.get("/no/such/route").await.status(),
        StatusCode::NOT_FOUND
    );
    let run = server
        .post(
            "/v1/runs",
            json!({"agentId": "bench", "messages": user("go")}),
        )
        .await;
    assert_eq!(run.status(), StatusCode::OK);
    EventReader::new(run).rest().await;

    let (status, content_type, text) = scrape(&server, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    assert_eq!(
        sample(
            &text,
            r#"awaken_http_requests_total{method="GET",route="/v1/threads/{thread_id}",status="404"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"awaken_http_requests_total{method="GET",route="unmatched",status="404"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"awaken_http_requests_total{method="POST",route="/v1/runs",status="200"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert!(!text.contains("missing-a"), "ids never become labels");
    assert_eq!(
        sample(
            &text,
            r#"awaken_http_request_duration_seconds_count{method="POST",route="/v1/runs"}"#
        ),
        Some(1.0)
    );
    // The scrape itself is in flight while it is rendered.
    assert_eq!(sample(&text, "awaken_http_requests_in_flight"), Some(1.0));
    assert!(sample(&text, "awaken_threads_live").is_some(), "{text}");
    assert!(sample(&text, "awaken_threads_warm").is_some(), "{text}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_an_api_key_when_keys_are_configured() {
    let server = TestServer::local(ServerConfig {
        api_keys: ApiKeys::from([("key-a".to_owned(), "tenant-a".to_owned())]),
        ..ServerConfig::default()
    })
    .await;
    let (status, _, _) = scrape(&server, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, text) = scrape(&server, Some("key-a")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.contains(r#"route="/metrics",status="401""#),
        "the refused scrape is counted: {text}"
    );
    server.shutdown().await;
}

/// One W run on a new thread: the thread's creation and three checkpoints (run
/// start, the tool step's end, run end), each one statement in one round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_reports_what_it_sends() {
    let (server, _schema) = TestServer::on_postgres().await;
    let one_run = || async {
        let run = server
            .post(
                "/v1/runs",
                json!({"agentId": "bench", "messages": user("go")}),
            )
            .await;
        assert_eq!(run.status(), StatusCode::OK);
        EventReader::new(run).rest().await;
    };
    let counts = |text: &str| {
        ["checkpoints", "statements", "round_trips"]
            .map(|name| sample(text, &format!("awaken_store_{name}_total ")).unwrap())
    };
    // The first run also creates the schema.
    one_run().await;
    let before = counts(&scrape(&server, None).await.2);
    one_run().await;
    let after = counts(&scrape(&server, None).await.2);
    let sent: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    // Three checkpoints and the thread's creation: the new thread's actor starts
    // from an empty core, not from a read (decision 0062).
    assert_eq!(
        sent,
        [3.0, 4.0, 4.0],
        "checkpoints, statements, round trips"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_memory_store_reports_no_database_traffic() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (_, _, text) = scrape(&server, None).await;
    assert_eq!(sample(&text, "awaken_store_statements_total "), Some(0.0));
}
