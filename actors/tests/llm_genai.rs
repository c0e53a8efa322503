//! `GenaiExecutor` over real HTTP against a local OpenAI-compatible server.
//!
//! Each test starts its own server on `127.0.0.1:0`, scripts its replies in order and
//! reads back the JSON requests it received. The server speaks
//! `POST /v1/chat/completions`, answering with an SSE stream when the request asks for
//! `"stream": true` and with a plain completion otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awaken_actors::contract::{Message, ProviderSpec, TokenUsage, ToolCall, ToolDescriptor};
use awaken_actors::llm::{
    GenaiExecutor, InferenceChunk, InferenceDelta, InferenceRequest, LlmExecutor, LlmRetryPolicy,
    RetryingExecutor, StopReason, StreamResult, collect_stream,
};
use awaken_actors::{InferenceExecutionError, ToolCallId};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------
// The test server

/// One scripted tool call: id, name and its argument text cut into pieces.
#[derive(Clone)]
struct ScriptedCall {
    id: &'static str,
    name: &'static str,
    arg_pieces: Vec<&'static str>,
}

/// A scripted answer, rendered as SSE chunks or as one completion.
#[derive(Clone, Default)]
struct Completion {
    reasoning_pieces: Vec<&'static str>,
    text_pieces: Vec<&'static str>,
    tool_calls: Vec<ScriptedCall>,
    finish_reason: &'static str,
    usage: Option<Value>,
}

impl Completion {
    fn text(pieces: Vec<&'static str>) -> Self {
        Self {
            text_pieces: pieces,
            finish_reason: "stop",
            ..Self::default()
        }
    }

    fn sse_chunks(&self, model: &str, include_usage: bool) -> Vec<Value> {
        let chunk = |delta: Value, finish: Value| {
            json!({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
            })
        };
        let mut chunks = vec![chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )];
        for piece in &self.reasoning_pieces {
            chunks.push(chunk(json!({"reasoning_content": piece}), Value::Null));
        }
        for piece in &self.text_pieces {
            chunks.push(chunk(json!({"content": piece}), Value::Null));
        }
        for (index, call) in self.tool_calls.iter().enumerate() {
            chunks.push(chunk(
                json!({"tool_calls": [{
                    "index": index, "id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": ""}
                }]}),
                Value::Null,
            ));
            for piece in &call.arg_pieces {
                chunks.push(chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    Value::Null,
                ));
            }
        }
        chunks.push(chunk(json!({}), json!(self.finish_reason)));
        if let (true, Some(usage)) = (include_usage, &self.usage) {
            chunks.push(json!({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                "model": model, "choices": [], "usage": usage
            }));
        }
        chunks
    }

    fn completion(&self, model: &str) -> Value {
        let tool_calls: Vec<Value> = self
            .tool_calls
            .iter()
            .map(|call| {
                json!({"id": call.id, "type": "function",
                       "function": {"name": call.name, "arguments": call.arg_pieces.concat()}})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": self.text_pieces.concat()});
        if !tool_calls.is_empty() {
            message["tool_calls"] = json!(tool_calls);
        }
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage.clone().unwrap_or(Value::Null)
        })
    }
}

/// What the server does with one request.
#[derive(Clone)]
enum Reply {
    /// Answer with this completion (streamed or not, as the request asks).
    Ok(Completion),
    /// Fail with this status, extra headers and body.
    Fail {
        status: u16,
        headers: Vec<(&'static str, &'static str)>,
        body: &'static str,
    },
    /// Never answer.
    Hang,
}

impl Reply {
    fn status(status: u16, body: &'static str) -> Self {
        Self::Fail {
            status,
            headers: Vec::new(),
            body,
        }
    }
}

/// A request as the server received it.
#[derive(Debug, Clone)]
struct Recorded {
    body: Value,
    authorization: Option<String>,
}

#[derive(Clone, Default)]
struct ServerState {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

struct TestServer {
    base_url: String,
    state: ServerState,
}

impl TestServer {
    /// Starts a server that gives `replies` in order (then 500s).
    async fn start(replies: Vec<Reply>) -> Self {
        let state = ServerState::default();
        state.replies.lock().unwrap().extend(replies);
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base_url: format!("http://{addr}"),
            state,
        }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    fn models(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| r.body["model"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// A provider spec pointing at this server (base URL without `/v1`).
    fn provider(&self) -> ProviderSpec {
        ProviderSpec::new("local", "openai").with_base_url(self.base_url.clone())
    }

    fn executor(&self) -> Arc<GenaiExecutor> {
        Arc::new(GenaiExecutor::from_spec(&self.provider()).unwrap())
    }
}

async fn chat_completions(
    State(state): State<ServerState>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    state.requests.lock().unwrap().push(Recorded {
        body: body.clone(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    });
    let reply = state
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::status(500, "no scripted reply left"));
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    match reply {
        Reply::Hang => futures::future::pending().await,
        Reply::Fail {
            status,
            headers,
            body,
        } => {
            let mut response = Response::builder().status(StatusCode::from_u16(status).unwrap());
            for (name, value) in headers {
                response = response.header(name, value);
            }
            response.body(Body::from(body)).unwrap()
        }
        Reply::Ok(completion) if body["stream"] == json!(true) => {
            let include_usage = body["stream_options"]["include_usage"] == json!(true);
            let frames: Vec<Result<String, std::io::Error>> = completion
                .sse_chunks(&model, include_usage)
                .into_iter()
                .map(|chunk| format!("data: {chunk}\n\n"))
                .chain(std::iter::once("data: [DONE]\n\n".to_owned()))
                .map(Ok)
                .collect();
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures::stream::iter(frames)))
                .unwrap()
        }
        Reply::Ok(completion) => Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(completion.completion(&model).to_string()))
            .unwrap(),
    }
}

// ---------------------------------------------------------------------------------
// Helpers

fn request(model: &str) -> InferenceRequest {
    InferenceRequest::new(model, vec![Message::user("hi")])
}

async fn stream_all(
    executor: Arc<dyn LlmExecutor>,
    request: InferenceRequest,
) -> Vec<Result<InferenceChunk, InferenceExecutionError>> {
    executor.execute_stream(request).collect().await
}

fn done(items: &[Result<InferenceChunk, InferenceExecutionError>]) -> &StreamResult {
    match items.last() {
        Some(Ok(InferenceChunk::Done(result))) => result,
        other => panic!("stream did not end with Done: {other:?}"),
    }
}

fn deltas(items: &[Result<InferenceChunk, InferenceExecutionError>]) -> Vec<InferenceDelta> {
    items
        .iter()
        .filter_map(|item| match item {
            Ok(InferenceChunk::Delta(delta)) => Some(delta.clone()),
            _ => None,
        })
        .collect()
}

fn no_retry_policy() -> LlmRetryPolicy {
    LlmRetryPolicy {
        max_retries: 0,
        fallback_models: Vec::new(),
        backoff_base_ms: 0,
    }
}

// ---------------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn streams_text_deltas_in_order_with_usage() {
    let server = TestServer::start(vec![Reply::Ok(Completion {
        reasoning_pieces: vec!["Let me ", "think."],
        usage: Some(json!({
            "prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 8}
        })),
        ..Completion::text(vec!["Hel", "lo, ", "world"])
    })])
    .await;
    // The key variable must exist and unsafe `set_var` is forbidden here: use PATH.
    let key = std::env::var("PATH").unwrap();
    let spec = server.provider().with_api_key_env("PATH");
    let executor = Arc::new(GenaiExecutor::from_spec(&spec).unwrap());

    let items = stream_all(executor, request("gpt-test")).await;
    let deltas = deltas(&items);
    let texts: Vec<&str> = deltas
        .iter()
        .filter_map(|d| match d {
            InferenceDelta::Text { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, vec!["Hel", "lo, ", "world"]);
    let reasoning: Vec<&str> = deltas
        .iter()
        .filter_map(|d| match d {
            InferenceDelta::Reasoning { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, vec!["Let me ", "think."]);
    let expected_usage = TokenUsage {
        prompt_tokens: Some(12),
        completion_tokens: Some(3),
        total_tokens: Some(15),
        cache_read_tokens: Some(8),
        ..TokenUsage::default()
    };
    assert_eq!(
        deltas.last(),
        Some(&InferenceDelta::Usage {
            usage: expected_usage
        }),
        "usage is the last delta"
    );

    let result = done(&items);
    assert_eq!(result.text(), "Hello, world");
    assert_eq!(result.usage, Some(expected_usage));
    assert_eq!(result.stop_reason, Some(StopReason::EndTurn));
    assert!(result.tool_calls.is_empty());

    let recorded = server.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].body["stream"], json!(true));
    assert_eq!(recorded[0].body["model"], json!("gpt-test"));
    assert_eq!(
        recorded[0].authorization.as_deref(),
        Some(format!("Bearer {key}").as_str())
    );
}

#[tokio::test]
async fn streams_a_tool_call_whose_arguments_arrive_in_pieces() {
    let server = TestServer::start(vec![Reply::Ok(Completion {
        tool_calls: vec![ScriptedCall {
            id: "call_abc",
            name: "get_weather",
            arg_pieces: vec!["{\"ci", "ty\": \"Os", "lo\"}"],
        }],
        finish_reason: "tool_calls",
        ..Completion::default()
    })])
    .await;
    let items = stream_all(server.executor(), request("gpt-test")).await;
    let deltas = deltas(&items);
    let id = ToolCallId::new("call_abc").unwrap();
    assert_eq!(
        deltas[0],
        InferenceDelta::ToolCallStart {
            id: id.clone(),
            name: "get_weather".into()
        }
    );
    let pieces: Vec<&str> = deltas
        .iter()
        .filter_map(|d| match d {
            InferenceDelta::ToolCallDelta {
                id: call,
                args_delta,
            } if *call == id => Some(args_delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(pieces, vec!["{\"ci", "ty\": \"Os", "lo\"}"]);

    let result = done(&items);
    assert_eq!(result.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(
        result.tool_calls,
        vec![ToolCall::new(id, "get_weather", json!({"city": "Oslo"}))]
    );
    assert!(!result.has_incomplete_tool_calls);
    // No `api_key_env`: genai's OpenAI adapter still sends the header, with no key.
    assert_eq!(
        server.requests()[0].authorization.as_deref().map(str::trim),
        Some("Bearer")
    );
}

#[tokio::test]
async fn the_api_key_can_come_from_a_file_and_a_bad_file_names_no_key() {
    let server = TestServer::start(vec![Reply::Ok(Completion::text(vec!["ok"]))]).await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("api-key");
    std::fs::write(&key_file, "sk-from-a-secret\n").unwrap();
    let mut spec = server.provider();
    spec.api_key_file = Some(key_file.clone());
    let executor = Arc::new(GenaiExecutor::from_spec(&spec).unwrap());
    let items = stream_all(executor, request("gpt-test")).await;
    assert_eq!(done(&items).text(), "ok");
    assert_eq!(
        server.requests()[0].authorization.as_deref(),
        Some("Bearer sk-from-a-secret")
    );

    let both = spec.clone().with_api_key_env("PATH");
    let error = GenaiExecutor::from_spec(&both).err().unwrap().to_string();
    assert!(error.contains("not both"), "{error}");
    std::fs::write(&key_file, "\n").unwrap();
    let error = GenaiExecutor::from_spec(&spec).err().unwrap().to_string();
    assert!(error.ends_with("the file is empty"), "{error}");
    spec.api_key_file = Some(dir.path().join("missing"));
    let error = GenaiExecutor::from_spec(&spec).err().unwrap().to_string();
    assert!(error.contains("No such file"), "{error}");
}

#[tokio::test]
async fn rate_limit_maps_retry_after_and_is_retried() {
    let server = TestServer::start(vec![
        Reply::Fail {
            status: 429,
            headers: vec![("retry-after", "1")],
            body: r#"{"error": {"message": "slow down"}}"#,
        },
        Reply::Fail {
            status: 429,
            headers: vec![("retry-after", "0")],
            body: "busy",
        },
        Reply::Ok(Completion::text(vec!["ok"])),
    ])
    .await;
    let executor = server.executor();

    let error = executor.execute(request("gpt-test")).await.unwrap_err();
    let InferenceExecutionError::RateLimited {
        message,
        retry_after_ms,
    } = &error
    else {
        panic!("expected RateLimited, got {error:?}");
    };
    assert_eq!(*retry_after_ms, Some(1000));
    assert!(
        message.contains("429") && message.contains("slow down"),
        "{message}"
    );
    // The retry policy would wait what the provider asked for.
    let policy = LlmRetryPolicy {
        backoff_base_ms: 0,
        ..LlmRetryPolicy::default()
    };
    assert_eq!(policy.backoff(0, &error), Duration::from_millis(1000));

    // Through the retrying executor: `retry-after: 0` and no base backoff, so no wait.
    let retrying = Arc::new(RetryingExecutor::new(executor, policy));
    let result = collect_stream(retrying.execute_stream(request("gpt-test")))
        .await
        .unwrap();
    assert_eq!(result.text(), "ok");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn server_errors_are_retried_then_fall_back() {
    let server = TestServer::start(vec![
        Reply::status(500, "upstream exploded"),
        Reply::status(500, "upstream exploded"),
        Reply::Ok(Completion::text(vec!["from ", "backup"])),
    ])
    .await;
    let policy = LlmRetryPolicy {
        max_retries: 1,
        fallback_models: vec!["backup-model".into()],
        backoff_base_ms: 0,
    };
    let retrying = Arc::new(RetryingExecutor::new(server.executor(), policy));
    let items = stream_all(retrying, request("main-model")).await;
    assert_eq!(done(&items).text(), "from backup");
    assert_eq!(
        server.models(),
        vec!["main-model", "main-model", "backup-model"]
    );
}

#[tokio::test]
async fn server_error_message_has_status_and_body() {
    let server = TestServer::start(vec![Reply::status(500, "upstream exploded")]).await;
    let error = server
        .executor()
        .execute(request("gpt-test"))
        .await
        .unwrap_err();
    let InferenceExecutionError::Provider { message } = error else {
        panic!("expected Provider, got {error:?}");
    };
    assert!(message.contains("HTTP 500"), "{message}");
    assert!(message.contains("upstream exploded"), "{message}");
}

#[tokio::test]
async fn gateway_timeouts_and_hangs_are_timeouts() {
    let server = TestServer::start(vec![
        Reply::status(504, "gateway timeout"),
        Reply::status(408, "request timeout"),
        Reply::Hang,
    ])
    .await;
    let executor = server.executor();
    for _ in 0..2 {
        let error = executor.execute(request("gpt-test")).await.unwrap_err();
        assert!(
            matches!(error, InferenceExecutionError::Timeout { .. }),
            "{error:?}"
        );
    }
    let spec = server.provider().with_timeout_ms(200);
    let executor = Arc::new(GenaiExecutor::from_spec(&spec).unwrap());
    let error = executor.execute(request("gpt-test")).await.unwrap_err();
    assert!(
        matches!(error, InferenceExecutionError::Timeout { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn request_mapping_matches_the_openai_api() {
    let server = TestServer::start(vec![Reply::Ok(Completion::text(vec!["fine"]))]).await;
    let call_id = ToolCallId::new("call_1").unwrap();
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"]
    });
    let mut request = InferenceRequest::new(
        "gpt-test",
        vec![
            Message::system("You are terse."),
            Message::user("Weather in Oslo?"),
            Message::assistant_with_tool_calls(
                "Checking.",
                vec![ToolCall::new(
                    call_id.clone(),
                    "get_weather",
                    json!({"city": "Oslo"}),
                )],
            ),
            Message::tool_result(call_id, "sunny"),
            Message::user("Thanks"),
        ],
    )
    .with_tools(vec![
        ToolDescriptor::new("weather", "get_weather", "Current weather for a city")
            .with_parameters(schema.clone()),
    ]);
    request.temperature = Some(0.25);
    request.max_tokens = Some(256);
    request.top_p = Some(0.5);

    let result = server.executor().execute(request).await.unwrap();
    assert_eq!(result.text(), "fine");

    let body = &server.requests()[0].body;
    assert_eq!(body["model"], json!("gpt-test"));
    assert_eq!(body["temperature"], json!(0.25));
    assert_eq!(body["max_tokens"], json!(256));
    assert_eq!(body["top_p"], json!(0.5));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5);
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "You are terse."})
    );
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "Weather in Oslo?"})
    );
    assert_eq!(messages[2]["role"], json!("assistant"));
    assert_eq!(messages[2]["content"], json!("Checking."));
    let calls = messages[2]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["id"], json!("call_1"));
    assert_eq!(calls[0]["type"], json!("function"));
    assert_eq!(calls[0]["function"]["name"], json!("get_weather"));
    let arguments: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Oslo"}));
    assert_eq!(
        messages[3],
        json!({"role": "tool", "content": "sunny", "tool_call_id": "call_1"})
    );
    assert_eq!(messages[4], json!({"role": "user", "content": "Thanks"}));

    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["type"], json!("function"));
    assert_eq!(tools[0]["function"]["name"], json!("get_weather"));
    assert_eq!(
        tools[0]["function"]["description"],
        json!("Current weather for a city")
    );
    assert_eq!(
        tools[0]["function"]["parameters"]["properties"],
        schema["properties"]
    );
    assert_eq!(
        tools[0]["function"]["parameters"]["required"],
        json!(["city"])
    );
}

#[tokio::test]
async fn length_cut_tool_call_is_flagged_incomplete() {
    let server = TestServer::start(vec![Reply::Ok(Completion {
        text_pieces: vec!["Writing the file."],
        tool_calls: vec![ScriptedCall {
            id: "call_w",
            name: "write_file",
            arg_pieces: vec!["{\"path\": \"a.txt\", ", "\"content\": \"lorem ip"],
        }],
        finish_reason: "length",
        ..Completion::default()
    })])
    .await;
    let result = server
        .executor()
        .execute(request("gpt-test"))
        .await
        .unwrap();
    assert_eq!(result.stop_reason, Some(StopReason::MaxTokens));
    assert!(result.has_incomplete_tool_calls);
    assert_eq!(result.tool_calls.len(), 1);
    assert_eq!(
        result.tool_calls[0].arguments,
        json!("{\"path\": \"a.txt\", \"content\": \"lorem ip")
    );
    assert_eq!(result.text(), "Writing the file.");
    assert!(awaken_actors::llm::truncation::is_truncated_tool_call(
        &result
    ));
}

#[tokio::test]
async fn without_a_retry_policy_a_failure_is_returned_once() {
    let server = TestServer::start(vec![Reply::status(503, "unavailable")]).await;
    let retrying = Arc::new(RetryingExecutor::new(server.executor(), no_retry_policy()));
    let error = collect_stream(retrying.execute_stream(request("gpt-test")))
        .await
        .unwrap_err();
    assert!(matches!(error, InferenceExecutionError::Provider { .. }));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn the_server_also_answers_plain_completions() {
    // The fixture serves non-streaming requests too; genai's plain call reads them.
    let server = TestServer::start(vec![Reply::Ok(Completion::text(vec!["plain"]))]).await;
    let endpoint = format!("{}/v1/", server.base_url);
    let client = genai::Client::builder()
        .with_service_target_resolver_fn(move |mut target: genai::ServiceTarget| {
            target.endpoint = genai::resolver::Endpoint::from_owned(endpoint.clone());
            target.auth = genai::resolver::AuthData::from_single("k");
            Ok(target)
        })
        .build()
        .unwrap();
    let response = client
        .exec_chat(
            genai::ModelIden::new(genai::adapter::AdapterKind::OpenAI, "gpt-test"),
            genai::chat::ChatRequest::from_user("hi"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(response.first_text(), Some("plain"));
    assert_eq!(server.requests()[0].body["stream"], json!(false));
}
