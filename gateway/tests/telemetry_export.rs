//! `awaken serve` exports a run's spans over OTLP/HTTP: a collector in the test
//! (an HTTP server decoding exactly the protobuf the binary sends, with the
//! OpenTelemetry project's own message definitions) receives the request's
//! server span, the run's `invoke_agent`, its `chat` and `execute_tool` spans,
//! in the caller's trace, parented as the GenAI conventions draw them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;
mod otlp_support;

use awaken_actors::contract::{AgentEvent, StreamEvent};
use http_support::{EventReader, decide_at, finish_type, run_ids, suspended_calls};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use otlp_support::{Received, collector, one, spans_until};
use serde_json::json;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// Starts a run of `agent` on `base` (in the trace `traceparent`, when given)
/// and reads its events to the end of the activation.
async fn run_to_end(
    client: &reqwest::Client,
    base: &str,
    agent: &str,
    traceparent: Option<String>,
) -> Vec<StreamEvent> {
    let mut request = client.post(format!("{base}/v1/runs")).json(&json!({
        "agent_id": agent,
        "messages": [{"role": "user", "content": "hello"}],
    }));
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    EventReader::new(response).rest().await
}

/// The caller's `traceparent` of the tests: [`TRACE_ID`], [`CALLER_SPAN`], sampled.
fn callers() -> Option<String> {
    Some(format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
}

/// `awaken serve` with the demo agents, exporting to `endpoint`; its base URL.
async fn serve(endpoint: &str, dir: &tempfile::TempDir) -> (tokio::process::Child, String) {
    serve_with(endpoint, dir, &[]).await
}

/// [`serve`], with the variables `env` set too.
async fn serve_with(
    endpoint: &str,
    dir: &tempfile::TempDir,
    env: &[(&str, &str)],
) -> (tokio::process::Child, String) {
    serve_config(
        endpoint,
        dir,
        "demo_agents = true\n[server]\naddress = \"127.0.0.1:0\"\n",
        env,
    )
    .await
}

/// `awaken serve` on the config file `text`, exporting to `endpoint`, with the
/// variables `env` set too; its base URL.
async fn serve_config(
    endpoint: &str,
    dir: &tempfile::TempDir,
    text: &str,
    env: &[(&str, &str)],
) -> (tokio::process::Child, String) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let config = dir.path().join("awaken.toml");
    std::fs::write(&config, text).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_awaken"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_SERVICE_NAME", "awaken-under-test")
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line)
            && event["event"] == "listening"
        {
            let base = format!("http://{}", event["address"].as_str().unwrap());
            return (child, base);
        }
    }
    panic!("awaken serve exited before listening");
}

#[tokio::test]
async fn a_run_is_one_trace_of_genai_spans_under_the_callers_traceparent() {
    let (endpoint, mut rx) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve(&endpoint, &dir).await;
    // Probes and scrapes, before the run: they make no spans (spans leave in
    // the order they end, so theirs would arrive before the run's).
    for probe in ["/health/ready", "/health/live", "/metrics"] {
        let answer = reqwest::get(format!("{base}{probe}")).await.unwrap();
        assert_eq!(answer.status(), 200, "{probe}");
    }

    let events = run_to_end(&reqwest::Client::new(), &base, "bench", callers()).await;
    let (thread_id, run_id) = run_ids(&events);
    let call_id = events
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::ToolCallStart { id, .. } => Some(id.to_string()),
            _ => None,
        })
        .expect("the run called echo");

    let spans = spans_until(&mut rx, |spans| {
        spans.iter().any(|s| s.name == "invoke_agent bench")
            && spans.iter().filter(|s| s.name == "chat scripted").count() == 2
            && spans.iter().any(|s| s.name == "POST /v1/runs")
            && spans.iter().any(|s| s.name == "process awaken.mailbox")
    })
    .await;

    for span in &spans {
        assert_eq!(span.trace_id, TRACE_ID, "one trace: {span:#?}");
        assert_eq!(span.service, "awaken-under-test");
        assert!(!span.name.starts_with("GET "), "{span:#?}");
    }
    let request = one(&spans, "POST /v1/runs");
    assert_eq!(request.kind, SpanKind::Server as i32);
    assert_eq!(request.parent_span_id, CALLER_SPAN);
    assert_eq!(request.attributes["http.request.method"], "POST");
    assert_eq!(request.attributes["http.response.status_code"], "200");

    let run = one(&spans, "invoke_agent bench");
    assert_eq!(run.parent_span_id, request.span_id);
    assert_eq!(run.kind, SpanKind::Internal as i32);
    assert_eq!(run.attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(run.attributes["gen_ai.agent.name"], "bench");
    assert_eq!(run.attributes["gen_ai.conversation.id"], thread_id);
    assert_eq!(run.attributes["awaken.run.id"], run_id);
    assert_eq!(run.attributes["awaken.run.outcome"], "natural_end");

    let chats: Vec<&Received> = spans.iter().filter(|s| s.name == "chat scripted").collect();
    for chat in &chats {
        assert_eq!(chat.parent_span_id, run.span_id);
        assert_eq!(chat.kind, SpanKind::Client as i32);
        assert_eq!(chat.attributes["gen_ai.operation.name"], "chat");
        assert_eq!(chat.attributes["gen_ai.request.model"], "scripted");
        assert_eq!(chat.attributes["gen_ai.response.model"], "scripted");
        assert_eq!(chat.attributes["gen_ai.provider.name"], "bench");
        // Content is opt-in.
        assert!(!chat.attributes.contains_key("gen_ai.input.messages"));
        assert!(!chat.attributes.contains_key("gen_ai.output.messages"));
    }
    let mut reasons: Vec<&str> = chats
        .iter()
        .map(|c| c.attributes["gen_ai.response.finish_reasons"].as_str())
        .collect();
    reasons.sort_unstable();
    assert_eq!(reasons, ["[stop]", "[tool_calls]"]);

    let tool = one(&spans, "execute_tool echo");
    assert_eq!(tool.parent_span_id, run.span_id);
    assert_eq!(tool.attributes["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool.attributes["gen_ai.tool.name"], "echo");
    assert_eq!(tool.attributes["gen_ai.tool.call.id"], call_id);
    assert!(!tool.attributes.contains_key("error.type"));
    assert!(run.events.is_empty() && tool.events.is_empty());

    // The mailbox hop: the dispatch enqueued and taken, both in the run's trace.
    let send = one(&spans, "send awaken.mailbox");
    let process = one(&spans, "process awaken.mailbox");
    assert_eq!(send.kind, SpanKind::Producer as i32);
    assert_eq!(process.kind, SpanKind::Consumer as i32);
    for hop in [send, process] {
        assert_eq!(hop.parent_span_id, request.span_id);
        assert_eq!(
            hop.attributes["messaging.destination.name"],
            "awaken.mailbox"
        );
    }
    assert_eq!(send.attributes["messaging.operation.type"], "send");
    assert_eq!(process.attributes["messaging.operation.type"], "process");
    assert_eq!(
        send.attributes["messaging.message.id"],
        process.attributes["messaging.message.id"]
    );
    assert_eq!(process.attributes["awaken.run.id"], run_id);
    assert_eq!(process.attributes["awaken.dispatch.attempt"], "1");
    assert_eq!(process.attributes["awaken.dispatch.outcome"], "activated");
}

/// A run that waits for a human is two activations in one trace: the first ends
/// `waiting`, the decision's arrival is an event on the second, which ends it.
#[tokio::test]
async fn a_decided_run_is_two_activations_of_one_trace() {
    let (endpoint, mut rx) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve(&endpoint, &dir).await;
    let client = reqwest::Client::new();

    let events = run_to_end(&client, &base, "bench-hitl", callers()).await;
    assert_eq!(finish_type(&events), "suspended");
    let (_, run_id) = run_ids(&events);
    let call_id = suspended_calls(&events).remove(0);
    let decision = json!({"call_id": call_id, "decision_id": "d-otel", "action": "resume",
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

    let spans = spans_until(&mut rx, |spans| {
        spans
            .iter()
            .filter(|s| s.name == "invoke_agent bench-hitl")
            .count()
            == 2
    })
    .await;
    let activations: Vec<&Received> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent bench-hitl")
        .collect();
    let first = activations
        .iter()
        .find(|s| s.attributes["awaken.run.outcome"] == "waiting")
        .expect("an activation that waited");
    let second = activations
        .iter()
        .find(|s| s.attributes["awaken.run.outcome"] == "natural_end")
        .expect("an activation that ended the run");
    for activation in [first, second] {
        assert_eq!(activation.trace_id, TRACE_ID);
        assert_eq!(activation.attributes["awaken.run.id"], run_id);
    }
    // Both hang off the request that started the run, not the decision's.
    assert_eq!(first.parent_span_id, second.parent_span_id);
    assert!(first.events.is_empty());
    assert_eq!(second.events, ["awaken.decision"]);
}

/// A delegated run joins its parent's trace under the tool call that started it.
#[tokio::test]
async fn a_delegated_run_hangs_off_the_call_that_started_it() {
    let (endpoint, mut rx) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve(&endpoint, &dir).await;

    let events = run_to_end(&reqwest::Client::new(), &base, "bench-delegate", callers()).await;
    assert_eq!(finish_type(&events), "natural_end");

    let spans = spans_until(&mut rx, |spans| {
        [
            "invoke_agent bench-delegate",
            "invoke_agent bench-text",
            "execute_tool agent_run_bench-text",
        ]
        .iter()
        .all(|name| spans.iter().any(|s| s.name == *name))
    })
    .await;
    let parent = one(&spans, "invoke_agent bench-delegate");
    let call = one(&spans, "execute_tool agent_run_bench-text");
    let child = one(&spans, "invoke_agent bench-text");
    assert_eq!(call.parent_span_id, parent.span_id);
    assert_eq!(child.parent_span_id, call.span_id);
    assert_eq!(child.trace_id, TRACE_ID);
    assert_eq!(
        child.attributes["awaken.run.parent_id"],
        parent.attributes["awaken.run.id"]
    );
}

/// A collector nobody answers at never holds a run up: spans queue and are
/// dropped, metric pushes fail and are logged, runs go on.
#[tokio::test]
async fn runs_go_on_while_the_collector_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve_with(
        &http_support::closed_base(),
        &dir,
        &[("OTEL_METRIC_EXPORT_INTERVAL", "20")],
    )
    .await;
    let client = reqwest::Client::new();
    for _ in 0..20 {
        let events = run_to_end(&client, &base, "bench", None).await;
        assert_eq!(finish_type(&events), "natural_end");
    }
}

/// An MCP `tools/call` carrying its caller's context in `_meta` (SEP-414) is a
/// server span of that trace, linked to the HTTP request it came in; the agent's
/// run hangs off it.
#[tokio::test]
async fn an_mcp_tool_call_continues_the_trace_its_meta_carries() {
    let (endpoint, mut rx) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve(&endpoint, &dir).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "bench", "arguments": {"message": "hello"},
                   "_meta": {"traceparent": callers().unwrap()}}});
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: serde_json::Value = response.json().await.unwrap();
    assert_eq!(answer["result"]["isError"], false, "{answer}");

    let spans = spans_until(&mut rx, |spans| {
        spans.iter().any(|s| s.name == "tools/call bench")
            && spans.iter().any(|s| s.name == "invoke_agent bench")
            && spans.iter().any(|s| s.name == "POST /v1/mcp")
    })
    .await;
    let http = one(&spans, "POST /v1/mcp");
    let tool = one(&spans, "tools/call bench");
    assert_eq!(tool.kind, SpanKind::Server as i32);
    assert_eq!(tool.trace_id, TRACE_ID);
    assert_eq!(tool.parent_span_id, CALLER_SPAN);
    assert_eq!(tool.attributes["mcp.method.name"], "tools/call");
    assert_eq!(tool.attributes["gen_ai.tool.name"], "bench");
    assert_eq!(tool.attributes["jsonrpc.request.id"], "7");
    assert_eq!(tool.links, [(http.trace_id.clone(), http.span_id.clone())]);
    let run = one(&spans, "invoke_agent bench");
    assert_eq!(run.trace_id, TRACE_ID);
    assert_eq!(run.parent_span_id, tool.span_id);
}

/// Service A's `boss` delegates to B's `bench` over A2A; both export to one
/// collector. The call's `traceparent` carries the trace across: B's request
/// span hangs off A's `execute_tool` span, B's run off that request, all in the
/// caller's trace.
#[tokio::test]
async fn an_a2a_call_between_two_services_is_one_trace() {
    let (endpoint, mut rx) = collector().await;
    let b_dir = tempfile::tempdir().unwrap();
    let (_b, b_base) = serve_with(&endpoint, &b_dir, &[("OTEL_SERVICE_NAME", "service-b")]).await;
    let a_config = format!(
        r#"
[server]
address = "127.0.0.1:0"

[providers.boss]
adapter = "scripted"
script = {{ steps = [
  {{ tool_calls = [{{ name = "agent_run_remote-bench", arguments = {{ prompt = "go" }} }}] }},
  {{ text = "B says: {{last_tool_result}}" }},
] }}

[models.boss]
provider = "boss"
model = "boss"

[agents.boss]
model = "boss"
delegates = ["remote-bench"]
allowed_tools = ["agent_run_remote-bench"]

[agents.remote-bench.endpoint]
backend = "a2a"
base_url = "{b_base}/v1/a2a"
target = "bench"
"#
    );
    let a_dir = tempfile::tempdir().unwrap();
    let (_a, a_base) = serve_config(
        &endpoint,
        &a_dir,
        &a_config,
        &[("OTEL_SERVICE_NAME", "service-a")],
    )
    .await;
    let events = run_to_end(&reqwest::Client::new(), &a_base, "boss", callers()).await;
    assert_eq!(finish_type(&events), "natural_end");

    // Until A's run and B's run have arrived, and the request B's run hangs off.
    let spans = spans_until(&mut rx, |spans| {
        let remote_run = spans.iter().find(|s| s.name == "invoke_agent bench");
        spans.iter().any(|s| s.name == "invoke_agent boss")
            && remote_run.is_some_and(|run| spans.iter().any(|s| s.span_id == run.parent_span_id))
    })
    .await;
    // Outside the run's trace only A's discovery of B's card, a trace of its own.
    let (spans, others): (Vec<Received>, Vec<Received>) =
        spans.into_iter().partition(|s| s.trace_id == TRACE_ID);
    assert!(
        others.iter().all(|s| s.name.ends_with("agent-card.json")),
        "{others:#?}"
    );
    let call = one(&spans, "execute_tool agent_run_remote-bench");
    assert_eq!(call.service, "service-a");
    let served: Vec<&Received> = spans
        .iter()
        .filter(|s| s.service == "service-b" && s.kind == SpanKind::Server as i32)
        .collect();
    assert!(
        served.iter().all(|s| s.parent_span_id == call.span_id),
        "B's requests hang off A's call: {served:#?}"
    );
    let remote_run = one(&spans, "invoke_agent bench");
    assert_eq!(remote_run.service, "service-b");
    assert!(
        served
            .iter()
            .any(|s| s.span_id == remote_run.parent_span_id),
        "B's run hangs off the request that started it: {remote_run:#?}"
    );
}

/// With content capture asked for, each `chat` span carries what was sent and
/// what came back, as the conventions' JSON messages.
#[tokio::test]
async fn content_is_recorded_only_when_asked_for() {
    let (endpoint, mut rx) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve_with(
        &endpoint,
        &dir,
        &[("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")],
    )
    .await;
    let events = run_to_end(&reqwest::Client::new(), &base, "bench", callers()).await;
    assert_eq!(finish_type(&events), "natural_end");
    let spans = spans_until(&mut rx, |spans| {
        spans.iter().filter(|s| s.name == "chat scripted").count() == 2
    })
    .await;
    let parsed = |span: &Received, key: &str| -> serde_json::Value {
        serde_json::from_str(&span.attributes[key]).unwrap()
    };
    let mut chats: Vec<&Received> = spans.iter().filter(|s| s.name == "chat scripted").collect();
    chats.sort_by_key(|s| s.start_ns);
    // The first call: the user's message in, a call of `echo` out.
    let input = parsed(chats[0], "gen_ai.input.messages");
    assert_eq!(input[0]["role"], "user", "{input}");
    assert_eq!(
        input[0]["parts"][0],
        json!({"type": "text", "content": "hello"})
    );
    let output = parsed(chats[0], "gen_ai.output.messages");
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(output[0]["finish_reason"], "tool_call");
    assert_eq!(output[0]["parts"][0]["type"], "tool_call");
    assert_eq!(output[0]["parts"][0]["name"], "echo");
    // The second: the tool's answer in, the final text out.
    let input = parsed(chats[1], "gen_ai.input.messages");
    let roles: Vec<&str> = input
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{input}");
    assert_eq!(input[2]["parts"][0]["type"], "tool_call_response");
    assert_eq!(input[2]["parts"][0]["id"], output[0]["parts"][0]["id"]);
    let output = parsed(chats[1], "gen_ai.output.messages");
    assert_eq!(output[0]["finish_reason"], "stop");
    assert_eq!(output[0]["parts"][0]["type"], "text");
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`: the same spans reach a collector speaking
/// OTLP/gRPC.
#[tokio::test]
async fn spans_go_over_grpc_when_asked() {
    let (endpoint, mut rx) = otlp_support::grpc_collector().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) =
        serve_with(&endpoint, &dir, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).await;
    let events = run_to_end(&reqwest::Client::new(), &base, "bench", callers()).await;
    assert_eq!(finish_type(&events), "natural_end");
    let spans = spans_until(&mut rx, |spans| {
        spans.iter().any(|s| s.name == "invoke_agent bench")
            && spans.iter().any(|s| s.name == "POST /v1/runs")
    })
    .await;
    let request = one(&spans, "POST /v1/runs");
    let run = one(&spans, "invoke_agent bench");
    assert_eq!(request.trace_id, TRACE_ID);
    assert_eq!(run.parent_span_id, request.span_id);
    assert_eq!(run.service, "awaken-under-test");
}

/// `OTEL_EXPORTER_OTLP_HEADERS` (a backend's API key, percent-encoded) goes
/// with every export, over both transports.
#[tokio::test]
async fn exports_carry_the_configured_headers() {
    let headers = (
        "OTEL_EXPORTER_OTLP_HEADERS",
        "authorization=Bearer%20k3y-123",
    );
    for grpc in [false, true] {
        let (endpoint, mut rx) = if grpc {
            otlp_support::grpc_collector().await
        } else {
            otlp_support::collector().await
        };
        let dir = tempfile::tempdir().unwrap();
        let protocol = (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            if grpc { "grpc" } else { "http/protobuf" },
        );
        let (_server, base) = serve_with(&endpoint, &dir, &[headers, protocol]).await;
        run_to_end(&reqwest::Client::new(), &base, "bench", callers()).await;
        let spans = spans_until(&mut rx, |spans| {
            spans.iter().any(|s| s.name == "invoke_agent bench")
        })
        .await;
        let run = one(&spans, "invoke_agent bench");
        assert_eq!(
            run.authorization.as_deref(),
            Some("Bearer k3y-123"),
            "grpc: {grpc}"
        );
    }
}

/// A collector that takes the connection and never answers holds the export
/// thread: spans beyond the queue are dropped, counted at `/metrics`, and the
/// runs go on.
#[tokio::test]
async fn spans_beyond_a_full_queue_are_dropped_and_counted() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut connections = Vec::new();
        while let Ok((connection, _)) = silent.accept().await {
            connections.push(connection);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve_with(
        &endpoint,
        &dir,
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
            ("OTEL_BSP_EXPORT_TIMEOUT", "600000"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "600000"),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let dropped = || async {
        let text = client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix("awaken_telemetry_spans_dropped_total "))
            .map(|value| value.parse::<f64>().unwrap())
            .expect("the dropped-spans counter is exported")
    };
    assert_eq!(dropped().await, 0.0);
    // 30 runs make some 120 spans: the first batch hangs in the export, the
    // queue holds 8, the rest must be dropped.
    for _ in 0..30 {
        let events = run_to_end(&client, &base, "bench", None).await;
        assert_eq!(finish_type(&events), "natural_end");
    }
    let count = dropped().await;
    assert!(count >= 60.0, "dropped {count}");
    held.abort();
}

/// A caller that did not sample its trace gets no spans of the run: the run's
/// spans are not even built. (Spans leave in the order they end, so once the
/// sampled run's arrived, the unsampled one's would have.)
#[tokio::test]
async fn a_run_in_an_unsampled_trace_exports_nothing() {
    const UNSAMPLED: &str = "a3ce929d0e0e47364bf92f3577b34da6";
    let (endpoint, mut rx) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve(&endpoint, &dir).await;
    let client = reqwest::Client::new();
    for flags in ["00", "01"] {
        let trace = if flags == "00" { UNSAMPLED } else { TRACE_ID };
        let traceparent = Some(format!("00-{trace}-{CALLER_SPAN}-{flags}"));
        let events = run_to_end(&client, &base, "bench", traceparent).await;
        assert_eq!(finish_type(&events), "natural_end");
    }
    let spans = spans_until(&mut rx, |spans| {
        spans
            .iter()
            .any(|s| s.name == "invoke_agent bench" && s.trace_id == TRACE_ID)
    })
    .await;
    assert!(spans.iter().all(|s| s.trace_id != UNSAMPLED), "{spans:#?}");
}
