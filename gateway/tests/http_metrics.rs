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

/// One W run on a new thread: three checkpoints (run start, which writes the
/// thread too, the tool step's end, run end), each one statement in one round trip.
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
        let [checkpoints, statements, round_trips] = ["checkpoints", "statements", "round_trips"]
            .map(|name| sample(text, &format!("awaken_store_{name}_total ")).unwrap());
        let timed = sample(
            text,
            r#"awaken_store_operation_duration_seconds_count{operation="checkpoint"} "#,
        )
        .unwrap();
        [checkpoints, statements, round_trips, timed]
    };
    // The first run also creates the schema.
    one_run().await;
    let before = counts(&scrape(&server, None).await.2);
    one_run().await;
    let after = counts(&scrape(&server, None).await.2);
    let sent: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    // Three checkpoints, nothing else: the new thread's actor starts from the
    // core the request made, not from a read (decision 0062), and the run's
    // first checkpoint writes the thread (decision 0071). The scrapes' own
    // reads (the waiting runs) go over a connection of their own, uncounted.
    assert_eq!(
        sent,
        [3.0, 3.0, 3.0, 3.0],
        "checkpoints, statements, round trips, timed checkpoints"
    );
}

/// Runs waiting for a human are counted in the store, whichever node parked
/// them: the gauge follows a suspension and its decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_counts_the_runs_waiting_for_a_decision() {
    let (server, _schema) = TestServer::on_postgres().await;
    let waiting = |text: &str| {
        (
            sample(text, "awaken_runs_waiting ").unwrap(),
            sample(text, "awaken_runs_waiting_oldest_seconds ").unwrap(),
        )
    };
    assert_eq!(waiting(&scrape(&server, None).await.2), (0.0, 0.0));
    let run = server
        .post(
            "/v1/runs",
            json!({"agentId": "bench-hitl", "messages": user("go")}),
        )
        .await;
    let events = EventReader::new(run).rest().await;
    let (_, run_id) = http_support::run_ids(&events);
    let call_id = http_support::suspended_calls(&events).remove(0);
    let (count, oldest) = waiting(&scrape(&server, None).await.2);
    assert_eq!(count, 1.0);
    assert!((0.0..60.0).contains(&oldest), "waited {oldest} s");
    http_support::decide_at(
        &server.client,
        &server.url(""),
        &run_id,
        events.last().unwrap().seq,
        json!({"call_id": call_id, "decision_id": "d-w", "action": "resume",
               "result": {"approved": true}}),
    )
    .await;
    assert_eq!(waiting(&scrape(&server, None).await.2), (0.0, 0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_memory_store_reports_no_database_traffic() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (_, _, text) = scrape(&server, None).await;
    assert_eq!(sample(&text, "awaken_store_statements_total "), Some(0.0));
}

/// The node's `awaken serve` config for the engine metrics test: an agent whose
/// scripted model reports token usage, beside the demo agents.
const COUNTED: &str = r#"
demo_agents = true

[server]
address = "127.0.0.1:0"

[providers.counting]
adapter = "scripted"
script = { steps = [
  { text = "hi", usage = { prompt_tokens = 12, completion_tokens = 5 } },
] }

[models.counted]
provider = "counting"
model = "scripted-counted"

[agents.counter]
model = "counted"
"#;

/// The samples of a scrape of `base`, parsed by the reference OpenMetrics parser.
async fn parsed_samples(base: &str) -> Vec<serde_json::Value> {
    let parsed = http_support::python_client("metrics_parse.py", &[base]).await;
    parsed["samples"].as_array().unwrap().clone()
}

/// The value of the sample `name` whose labels include `labels`.
fn value_of(samples: &[serde_json::Value], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s["name"] == name
                && labels
                    .iter()
                    .all(|(key, value)| s["labels"][*key].as_str() == Some(*value))
        })
        .and_then(|s| s["value"].as_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_model_calls_tools_and_decisions_are_measured_with_bounded_labels() {
    let (_server, base, _dir) = http_support::awaken_serve(COUNTED).await.unwrap();
    let client = reqwest::Client::new();
    let run = |agent: &'static str| {
        let client = client.clone();
        let base = base.clone();
        async move {
            let response = client
                .post(format!("{base}/v1/runs"))
                .json(&json!({"agent_id": agent, "messages": user("hello")}))
                .send()
                .await
                .unwrap();
            EventReader::new(response).rest().await
        }
    };
    run("counter").await;
    run("bench").await;
    let waiting = run("bench-hitl").await;
    let (_, run_id) = http_support::run_ids(&waiting);
    let call_id = http_support::suspended_calls(&waiting).remove(0);
    let parked = parsed_samples(&base).await;
    assert_eq!(value_of(&parked, "awaken_runs_waiting", &[]), Some(1.0));
    let oldest = value_of(&parked, "awaken_runs_waiting_oldest_seconds", &[]).unwrap();
    assert!((0.0..60.0).contains(&oldest), "waited {oldest} s");
    let decision = json!({"call_id": call_id, "decision_id": "d-m", "action": "resume",
                          "result": {"approved": true}});
    http_support::decide_at(
        &client,
        &base,
        &run_id,
        waiting.last().unwrap().seq,
        decision.clone(),
    )
    .await;
    // The same decision again is a duplicate; one naming no suspended call is refused.
    let again = client
        .post(format!("{base}/v1/runs/{run_id}/decision"))
        .json(&decision)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    let unknown = client
        .post(format!("{base}/v1/runs/{run_id}/decision"))
        .json(&json!({"call_id": "nope", "decision_id": "d-x", "action": "resume"}))
        .send()
        .await
        .unwrap();
    assert!(unknown.status().is_client_error());

    let samples = parsed_samples(&base).await;
    let chat = |provider: &'static str, model: &'static str| {
        [
            ("gen_ai_operation_name", "chat"),
            ("gen_ai_provider_name", provider),
            ("gen_ai_request_model", model),
        ]
    };
    let tokens = |token_type| {
        let [a, b, c] = chat("counting", "scripted-counted");
        [a, b, c, ("gen_ai_token_type", token_type)]
    };
    assert_eq!(
        value_of(&samples, "gen_ai_client_token_usage_sum", &tokens("input")),
        Some(12.0)
    );
    assert_eq!(
        value_of(&samples, "gen_ai_client_token_usage_sum", &tokens("output")),
        Some(5.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "gen_ai_client_operation_duration_seconds_count",
            &chat("counting", "scripted-counted")
        ),
        Some(1.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "gen_ai_client_operation_duration_seconds_count",
            &chat("bench", "scripted")
        ),
        Some(2.0),
        "workload W calls its model twice"
    );
    for agent in ["counter", "bench", "bench-hitl"] {
        assert_eq!(
            value_of(&samples, "awaken_runs_started_total", &[("agent", agent)]),
            Some(1.0),
            "{agent}"
        );
        assert_eq!(
            value_of(
                &samples,
                "awaken_runs_finished_total",
                &[("agent", agent), ("termination", "natural_end")]
            ),
            Some(1.0),
            "{agent}"
        );
        assert_eq!(
            value_of(
                &samples,
                "awaken_run_duration_seconds_count",
                &[("agent", agent)]
            ),
            Some(1.0)
        );
    }
    assert_eq!(
        value_of(
            &samples,
            "awaken_tool_call_duration_seconds_count",
            &[("tool", "echo"), ("outcome", "ok")]
        ),
        Some(2.0),
        "echo ran once for bench and once, after approval, for bench-hitl"
    );
    for (outcome, count) in [("applied", 1.0), ("duplicate", 1.0), ("rejected", 1.0)] {
        assert_eq!(
            value_of(
                &samples,
                "awaken_decisions_total",
                &[("source", "http"), ("outcome", outcome)]
            ),
            Some(count),
            "{outcome}"
        );
    }
    assert_eq!(
        value_of(&samples, "awaken_time_to_decision_seconds_count", &[]),
        Some(1.0)
    );
    assert_eq!(value_of(&samples, "awaken_runs_waiting", &[]), Some(0.0));
    // Every dispatch was claimed once, none again.
    let claims = value_of(&samples, "awaken_mailbox_claim_lag_seconds_count", &[]).unwrap();
    assert!(claims >= 3.0, "{claims} claims for three runs");
    assert_eq!(
        value_of(&samples, "awaken_mailbox_redeliveries_total", &[]),
        Some(0.0)
    );
    // The in-memory store is not timed: its latency would say nothing.
    assert_eq!(
        value_of(
            &samples,
            "awaken_store_operation_duration_seconds_count",
            &[("operation", "checkpoint")]
        ),
        Some(0.0)
    );
    // Every run ended: nothing queued, running or dead in the mailbox.
    for status in ["queued", "claimed", "dead_letter"] {
        assert_eq!(
            value_of(&samples, "awaken_mailbox_dispatches", &[("status", status)]),
            Some(0.0),
            "{status}"
        );
    }
    // No series is labelled by a thread, run or call.
    for sample in &samples {
        for label in sample["labels"].as_object().unwrap().keys() {
            assert!(
                !["thread_id", "run_id", "call_id", "thread", "run"].contains(&label.as_str()),
                "{sample}"
            );
        }
    }
}
