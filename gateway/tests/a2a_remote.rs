//! Remote delegates over A2A between two services: service A's `boss` delegates to
//! `remote-demo`, which is service B's `demo` agent reached over A2A v1.0 (both are
//! real gateways on loopback ports). B's agent asks before deleting a file; the
//! question surfaces on A's delegate call, and the decision given to A reaches B.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use awaken_actors::contract::{AgentEvent, AgentSpec, RemoteAuth, RemoteEndpoint, StreamEvent};
use awaken_actors::delegation::DELEGATE_ACTIVITY_TYPE;
use awaken_actors::{AgentId, BuildError};
use awaken_gateway::protocols::a2a::A2A_BACKEND;
use awaken_gateway::server::ServerConfig;
use http_support::delegating::{
    BOSS, REMOTE, answer, boss_run, remote_task, remote_ticket, serve_a, service_a,
};
use http_support::{
    EventReader, TestServer, awaken_serve, closed_base, decide_at, finish_type, json, run_ids,
    suspended_calls, user,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// What `boss` asks of B's `demo` agent.
const TIDY_UP: &str = "Tidy up: delete notes.txt.";

/// `remote-demo`: B's tenant `target` at B's `/v1/a2a`.
fn remote_spec(b: &TestServer, target: &str, options: Value) -> AgentSpec {
    let mut endpoint = RemoteEndpoint::new(A2A_BACKEND, b.url("/v1/a2a"));
    endpoint.target = Some(target.to_owned());
    endpoint.options = serde_json::from_value(options).unwrap();
    AgentSpec::new(AgentId::new(REMOTE).unwrap()).with_endpoint(endpoint)
}

/// B's view of task `task_id` of its `demo` tenant.
async fn b_task(b: &TestServer, task_id: &str) -> Value {
    remote_task(&b.client, &b.url(&format!("/v1/a2a/demo/tasks/{task_id}"))).await
}

/// Decides A's waiting run and reads the activation the decision starts.
async fn decide(a: &TestServer, run_id: &str, last_seq: u64, decision: Value) -> Vec<StreamEvent> {
    decide_at(&a.client, &a.base, run_id, last_seq, decision).await
}

/// A's run suspends on B's question, an approval given to A reaches B, and A ends
/// with B's answer.
async fn approval_round_trip(options: Value) {
    let b = TestServer::local(ServerConfig::default()).await;
    let a = serve_a(service_a(remote_spec(&b, "demo", options), TIDY_UP)).await;

    let events = boss_run(&a).await;
    assert_eq!(finish_type(&events), "suspended");
    let (call_id, ticket) = remote_ticket(&events);
    assert_eq!(suspended_calls(&events), vec![call_id.clone()]);
    let question = ticket["suspension"]["message"].as_str().unwrap();
    assert!(question.starts_with("[remote-demo] "), "{question}");
    let task_id = ticket["remote"]["task_id"].as_str().unwrap().to_owned();
    assert_eq!(ticket["remote"]["call_ids"].as_array().unwrap().len(), 1);
    assert!(
        events.iter().any(|event| matches!(&event.event,
            AgentEvent::ActivityDelta { activity_type, .. } if activity_type == DELEGATE_ACTIVITY_TYPE)),
        "B's progress shows on A's call"
    );
    let waiting = b_task(&b, &task_id).await;
    assert_eq!(waiting["status"]["state"], "TASK_STATE_INPUT_REQUIRED");

    let (_, run_id) = run_ids(&events);
    let decision = json!({"call_id": call_id, "decision_id": "d-1", "action": "resume",
                          "result": {"approved": true}});
    let resumed = decide(&a, &run_id, events.last().unwrap().seq, decision).await;
    assert_eq!(finish_type(&resumed), "natural_end");
    let said = answer(&resumed);
    assert!(said.starts_with("B reports: "), "{said}");
    assert!(
        said.contains(r#"\"deleted\":\"notes.txt\""#),
        "B's answer reaches A: {said}"
    );
    let done = b_task(&b, &task_id).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_question_is_answered_through_the_parent_when_streaming() {
    approval_round_trip(json!({"stream": true})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_question_is_answered_through_the_parent_when_polling() {
    approval_round_trip(json!({"stream": false, "poll_interval_ms": 20})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_given_to_the_parent_reaches_the_remote_agent() {
    let b = TestServer::local(ServerConfig::default()).await;
    let a = serve_a(service_a(remote_spec(&b, "demo", json!({})), TIDY_UP)).await;
    let events = boss_run(&a).await;
    let (call_id, ticket) = remote_ticket(&events);
    let task_id = ticket["remote"]["task_id"].as_str().unwrap().to_owned();
    let (_, run_id) = run_ids(&events);
    let decision = json!({"call_id": call_id, "decision_id": "d-no", "action": "cancel",
                          "reason": "not today"});
    let resumed = decide(&a, &run_id, events.last().unwrap().seq, decision).await;
    assert_eq!(finish_type(&resumed), "natural_end");
    let said = answer(&resumed);
    assert!(
        said.contains("not today") && !said.contains(r#"\"deleted\""#),
        "B's tool was denied with A's reason: {said}"
    );
    let done = b_task(&b, &task_id).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_cancels_the_waiting_remote_task() {
    let b = TestServer::local(ServerConfig::default()).await;
    let a = serve_a(service_a(remote_spec(&b, "demo", json!({})), TIDY_UP)).await;
    let events = boss_run(&a).await;
    let (_, ticket) = remote_ticket(&events);
    let task_id = ticket["remote"]["task_id"].as_str().unwrap().to_owned();
    // B's run (the task) from its last event on: the activation the cancel ends.
    let replayed = EventReader::new(b.get(&format!("/v1/runs/{task_id}/events")).await)
        .rest()
        .await;
    let watching = b
        .client
        .get(b.url(&format!("/v1/runs/{task_id}/events")))
        .header("Last-Event-ID", replayed.last().unwrap().seq.to_string())
        .send()
        .await
        .unwrap();
    let b_events = tokio::spawn(EventReader::new(watching).rest());

    let (_, run_id) = run_ids(&events);
    let (status, body) = json(
        a.post(&format!("/v1/runs/{run_id}/cancel"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let b_events = b_events.await.unwrap();
    assert_eq!(finish_type(&b_events), "cancelled");
    let cancelled = b_task(&b, &task_id).await;
    assert_eq!(cancelled["status"]["state"], "TASK_STATE_CANCELED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_task_that_outlives_the_timeout_is_cancelled() {
    let b = TestServer::local(ServerConfig::default()).await;
    let mut remote = remote_spec(&b, "slow", json!({"stream": true}));
    if let Some(endpoint) = &mut remote.endpoint {
        endpoint.timeout_ms = 300;
    }
    let a = serve_a(service_a(remote, TIDY_UP)).await;
    let events = boss_run(&a).await;
    assert_eq!(finish_type(&events), "natural_end");
    let said = answer(&events);
    assert!(said.contains("did not finish in time"), "{said}");
    // The task the call gave up on was cancelled before the call's result.
    let activity_task = events
        .iter()
        .find_map(|event| match &event.event {
            AgentEvent::ActivityDelta { patch, .. } => {
                patch[0]["value"]["task"]["id"].as_str().map(str::to_owned)
            }
            _ => None,
        })
        .expect("the remote task's first stream item");
    let task = b
        .client
        .get(b.url(&format!("/v1/a2a/slow/tasks/{activity_task}")))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    let (_, task) = json(task).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_CANCELED", "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_fails_the_call_with_the_remote_refusal() {
    let keys = BTreeMap::from([("right-key".to_owned(), "tenant-b".to_owned())]);
    let b = TestServer::local(ServerConfig {
        api_keys: keys.into(),
        ..ServerConfig::default()
    })
    .await;
    let mut remote = remote_spec(&b, "demo", json!({}));
    if let Some(endpoint) = &mut remote.endpoint {
        endpoint.auth = Some(RemoteAuth::bearer("wrong-key"));
    }
    let a = serve_a(service_a(remote, TIDY_UP)).await;
    let events = boss_run(&a).await;
    assert_eq!(finish_type(&events), "natural_end");
    let said = answer(&events);
    assert!(said.contains("401"), "the refusal names its status: {said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_refuses_unusable_endpoints_and_leaves_unreadable_cards_for_later() {
    // A service that is down (or not up yet) is no reason to refuse to start.
    let mut endpoint = RemoteEndpoint::new(A2A_BACKEND, format!("{}/v1/a2a", closed_base()));
    endpoint.target = Some("demo".to_owned());
    let unreachable = AgentSpec::new(AgentId::new(REMOTE).unwrap()).with_endpoint(endpoint);
    let built = service_a(unreachable, TIDY_UP)
        .discover_remote_agents()
        .await
        .and_then(|builder| builder.build());
    assert!(built.is_ok(), "{built:?}");

    let b = TestServer::local(ServerConfig::default()).await;
    let built = service_a(remote_spec(&b, "no-such-agent", json!({})), TIDY_UP)
        .discover_remote_agents()
        .await;
    assert!(
        built.is_ok(),
        "a missing card is read again at the first call"
    );

    let unknown_option = service_a(remote_spec(&b, "demo", json!({"polling": true})), TIDY_UP)
        .discover_remote_agents()
        .await;
    match unknown_option.map(|builder| builder.build()) {
        Err(BuildError::DiscoveryFailed(error)) => {
            assert!(error.reason.contains("unknown option `polling`"), "{error}");
        }
        other => panic!("expected the option refused, got {other:?}"),
    }
}

/// Service A as `awaken serve` sees it: `boss` and `remote-demo` from its config
/// file, the remote one's card read at start-up.
fn service_a_toml(remote_base: &str) -> String {
    format!(
        r#"
demo_agents = false

[server]
address = "127.0.0.1:0"

[store]
kind = "memory"

[providers.boss]
adapter = "scripted"
script = {{ steps = [
  {{ tool_calls = [{{ name = "agent_run_remote-demo", arguments = {{ prompt = "Tidy up" }} }}] }},
  {{ text = "B reports: {{last_tool_result}}" }},
] }}

[models.boss]
provider = "boss"
model = "boss"

[agents.boss]
model = "boss"
delegates = ["remote-demo"]
allowed_tools = ["agent_run_remote-demo"]

[agents.remote-demo.endpoint]
backend = "a2a"
base_url = "{remote_base}/v1/a2a"
target = "demo"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awaken_serve_delegates_to_a_remote_agent_of_its_config_file() {
    let b = TestServer::local(ServerConfig::default()).await;
    let (_a, base, _dir) = awaken_serve(&service_a_toml(&b.base)).await.unwrap();
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({"agentId": BOSS, "messages": user("please tidy up")}))
        .send()
        .await
        .unwrap();
    let events = EventReader::new(response).rest().await;
    assert_eq!(finish_type(&events), "suspended");
    let (call_id, ticket) = remote_ticket(&events);
    let task_id = ticket["remote"]["task_id"].as_str().unwrap().to_owned();
    assert_eq!(
        b_task(&b, &task_id).await["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    let (_, run_id) = run_ids(&events);
    let decision = json!({"call_id": call_id, "decision_id": "d-1", "action": "resume",
                          "result": {"approved": true}});
    let resumed = decide_at(
        &client,
        &base,
        &run_id,
        events.last().unwrap().seq,
        decision,
    )
    .await;
    assert_eq!(finish_type(&resumed), "natural_end");
    assert!(answer(&resumed).contains(r#"\"deleted\":\"notes.txt\""#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awaken_serve_starts_without_its_remote_agent_and_only_the_delegate_call_fails() {
    let (_a, base, _dir) = awaken_serve(&service_a_toml(&closed_base()))
        .await
        .expect("serve starts while its remote agent is down");
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({"agentId": BOSS, "messages": user("please tidy up")}))
        .send()
        .await
        .unwrap();
    let events = EventReader::new(response).rest().await;
    // The model is told the delegate failed, and the run ends normally.
    assert_eq!(finish_type(&events), "natural_end");
    let said = answer(&events);
    assert!(said.contains("unreachable"), "{said}");
    let health = client.get(format!("{base}/health")).send().await.unwrap();
    assert!(health.status().is_success());
}

/// A remote agent that misbehaves as `mode` says when sent a message: a card it
/// serves well, then malformed JSON, a task in a state A2A does not have, an
/// artifact far above the client's limit, or no answer at all.
async fn misbehaving_remote(mode: &'static str) -> String {
    async fn card() -> axum::Json<Value> {
        axum::Json(json!({
            "name": "odd",
            "description": "an agent that answers oddly",
            "supportedInterfaces": [{"url": "x", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}],
            "capabilities": {"streaming": false},
        }))
    }
    let send = move || async move {
        let task = |state: &str, artifacts: Value| {
            json!({"task": {"id": "t-1", "contextId": "c-1", "status": {"state": state},
                            "artifacts": artifacts}})
            .to_string()
        };
        let body = match mode {
            "malformed" => "{\"task\": {\"id\": ".to_owned(),
            "unknown-state" => task("TASK_STATE_DREAMING", json!([])),
            "oversized" => task(
                "TASK_STATE_COMPLETED",
                json!([{"artifactId": "a", "parts": [{"text": "x".repeat(9 * 1024 * 1024)}]}]),
            ),
            _ => std::future::pending().await,
        };
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
    };
    let app = axum::Router::new()
        .route("/a2a/.well-known/agent-card.json", axum::routing::get(card))
        .route("/a2a/message:send", axum::routing::post(send));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/a2a", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_remote_agent_fails_only_the_delegate_call_with_a_clear_error() {
    for (mode, said) in [
        ("malformed", "unexpected answer"),
        ("unknown-state", "unknown variant `TASK_STATE_DREAMING`"),
        ("oversized", "answered more than 8 MiB"),
        ("silent", "timeout"),
    ] {
        let mut endpoint = RemoteEndpoint::new(A2A_BACKEND, misbehaving_remote(mode).await);
        endpoint.timeout_ms = 1_500;
        endpoint.options = serde_json::from_value(json!({"stream": false})).unwrap();
        let remote = AgentSpec::new(AgentId::new(REMOTE).unwrap()).with_endpoint(endpoint);
        let a = serve_a(service_a(remote, TIDY_UP)).await;
        let events = boss_run(&a).await;
        // The parent run goes on: its model hears of the failure and answers.
        assert_eq!(finish_type(&events), "natural_end", "{mode}");
        let answer = answer(&events);
        assert!(answer.contains(said), "{mode}: {answer}");
        // And the node serves the next run as before.
        let again = boss_run(&a).await;
        assert_eq!(finish_type(&again), "natural_end", "{mode}");
    }
}

/// An OAuth2 token endpoint for client `a` with secret `s3cret`: hands out
/// `tokens` in turn (the last one from then on); counts what it issued.
async fn token_endpoint(tokens: Vec<&'static str>) -> (String, Arc<AtomicUsize>) {
    let issued = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&issued);
    let issue = move |headers: axum::http::HeaderMap, body: String| {
        let count = Arc::clone(&count);
        let tokens = tokens.clone();
        async move {
            // HTTP Basic of `a:s3cret`, and the client credentials grant.
            let basic = headers
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok());
            if basic != Some("Basic YTpzM2NyZXQ=")
                || !body.contains("grant_type=client_credentials")
                || !body.contains("scope=agents")
            {
                return (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(json!({"error": "invalid_client"})),
                );
            }
            let n = count.fetch_add(1, Ordering::SeqCst);
            let token = tokens[n.min(tokens.len() - 1)];
            (
                StatusCode::OK,
                axum::Json(
                    json!({"access_token": token, "token_type": "Bearer", "expires_in": 3600}),
                ),
            )
        }
    };
    let app = axum::Router::new().route("/token", axum::routing::post(issue));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, issued)
}

/// B, whose only API key is `key`.
async fn b_with_key(key: &str) -> TestServer {
    let keys = BTreeMap::from([(key.to_owned(), "tenant-a".to_owned())]);
    TestServer::local(ServerConfig {
        api_keys: keys.into(),
        ..ServerConfig::default()
    })
    .await
}

fn with_auth(b: &TestServer, auth: Value) -> AgentSpec {
    let mut remote = remote_spec(b, "bench-text", json!({}));
    if let Some(endpoint) = &mut remote.endpoint {
        endpoint.auth = Some(serde_json::from_value(auth).unwrap());
    }
    remote
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth2_client_credentials_tokens_are_fetched_reused_and_renewed_when_refused() {
    let b = b_with_key("tok-good").await;
    // The first token B does not take: the call gets a new one and goes on.
    let (token_url, issued) = token_endpoint(vec!["tok-stale", "tok-good"]).await;
    let remote = with_auth(
        &b,
        json!({"type": "oauth2_client_credentials", "token_url": token_url,
               "client_id": "a", "client_secret": "s3cret", "scopes": ["agents"]}),
    );
    let a = serve_a(service_a(remote, TIDY_UP)).await;
    for _ in 0..3 {
        let events = boss_run(&a).await;
        assert_eq!(finish_type(&events), "natural_end");
        let said = answer(&events);
        assert!(said.contains(r#""status":"completed""#), "{said}");
        assert!(!said.contains("s3cret") && !said.contains("tok-"), "{said}");
    }
    assert_eq!(issued.load(Ordering::SeqCst), 2, "one refused, then reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_file_is_read_at_each_call_so_a_renewed_secret_applies_at_once() {
    let b = b_with_key("key-2").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "key-1\n").unwrap();
    let remote = with_auth(&b, json!({"type": "bearer", "token_file": file}));
    let a = serve_a(service_a(remote, TIDY_UP)).await;

    let refused = answer(&boss_run(&a).await);
    assert!(refused.contains("401"), "{refused}");
    assert!(!refused.contains("key-1"), "{refused}");

    std::fs::write(&file, "key-2\n").unwrap();
    let accepted = answer(&boss_run(&a).await);
    assert!(accepted.contains(r#""status":"completed""#), "{accepted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_goes_in_the_header_the_endpoint_names() {
    // An agent that wants `X-Partner-Key: pk-1` on every request.
    let send = |headers: axum::http::HeaderMap| async move {
        if headers.get("x-partner-key").and_then(|v| v.to_str().ok()) != Some("pk-1") {
            return (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": {"message": "no key"}})),
            );
        }
        let task = json!({"task": {"id": "t-1", "contextId": "c-1",
            "status": {"state": "TASK_STATE_COMPLETED",
                       "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "keyed answer"}]}}}});
        (StatusCode::OK, axum::Json(task))
    };
    let app = axum::Router::new().route("/a2a/message:send", axum::routing::post(send));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/a2a", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut endpoint = RemoteEndpoint::new(A2A_BACKEND, base);
    endpoint.options = serde_json::from_value(json!({"stream": false})).unwrap();
    endpoint.auth = Some(
        serde_json::from_value(
            json!({"type": "api_key", "header": "X-Partner-Key", "key": "pk-1"}),
        )
        .unwrap(),
    );
    let remote = AgentSpec::new(AgentId::new(REMOTE).unwrap()).with_endpoint(endpoint);
    let a = serve_a(service_a(remote, TIDY_UP)).await;
    let said = answer(&boss_run(&a).await);
    assert!(said.contains("keyed answer"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_and_the_remote_task_it_delegates_to_are_one_trace() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let b = TestServer::local(ServerConfig::default()).await;
    let a = serve_a(service_a(remote_spec(&b, "bench-text", json!({})), TIDY_UP)).await;
    let response = a
        .client
        .post(a.url("/v1/runs"))
        .header("traceparent", format!("00-{TRACE}-00f067aa0ba902b7-01"))
        .json(&json!({"agentId": BOSS, "messages": user("please tidy up")}))
        .send()
        .await
        .unwrap();
    let events = EventReader::new(response).rest().await;
    assert_eq!(finish_type(&events), "natural_end");
    let (_, run_id) = run_ids(&events);
    let said = answer(&events);
    let task_id = said
        .split("\"run_id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no task id in {said}"));

    // A's run and B's task run carry the caller's trace id, each with its own span.
    let (_, a_run) = json(a.get(&format!("/v1/runs/{run_id}")).await).await;
    let (_, b_run) = json(b.get(&format!("/v1/runs/{task_id}")).await).await;
    let trace_of = |run: &Value| run["trace"].as_str().unwrap_or_default().to_owned();
    let (a_trace, b_trace) = (trace_of(&a_run), trace_of(&b_run));
    assert!(a_trace.starts_with(&format!("00-{TRACE}-")), "{a_run}");
    assert!(b_trace.starts_with(&format!("00-{TRACE}-")), "{b_run}");
    assert_ne!(a_trace, b_trace, "B's run is a span of its own");

    // Without a traceparent a run starts a trace of its own.
    let events = boss_run(&a).await;
    let (_, run_id) = run_ids(&events);
    let (_, run) = json(a.get(&format!("/v1/runs/{run_id}")).await).await;
    let trace = trace_of(&run);
    assert_eq!(trace.len(), 55, "{run}");
    assert!(!trace.contains(TRACE), "{run}");
}
