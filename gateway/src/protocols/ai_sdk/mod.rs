//! `/v1/ai-sdk`: the Vercel AI SDK v6 UI message stream for `useChat`.
//!
//! A chat id is a thread id. A POST whose last message is from the user starts a
//! run and streams it; one whose last message answers approval requests resumes the
//! thread's waiting run with those decisions and streams the continuation. GET
//! `…/stream` resumes the stream of what a thread (or run) is executing.

mod approvals;
mod encoder;
mod messages;
mod request;

use awaken_actors::{AgentId, RunId, ThreadId};
use axum::Json;
use axum::extract::{FromRef, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use self::approvals::Approvals;
use self::encoder::UiEncoder;
use self::request::{Approval, ChatInput, ChatRequest};
use crate::runs::RunEvents;
use crate::runs::RunService;
use crate::runs::handlers::{cancel_thread, interrupt_thread};
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::extract::{ApiJson, ApiPath};
use crate::server::table::Routes;

/// The header that tells the client this is a UI message stream.
const STREAM_HEADER: HeaderName = HeaderName::from_static("x-vercel-ai-ui-message-stream");

/// The AI SDK routes.
pub(crate) fn routes<S>() -> Routes<S>
where
    S: Clone + Send + Sync + 'static,
    RunService: FromRef<S>,
{
    Routes::new()
        .post("/v1/ai-sdk/chat", chat)
        .post("/v1/ai-sdk/threads/{thread_id}/runs", thread_chat)
        .post("/v1/ai-sdk/agents/{agent_id}/runs", agent_chat)
        .get("/v1/ai-sdk/chat/{thread_id}/stream", resume_thread)
        .get("/v1/ai-sdk/threads/{thread_id}/stream", resume_thread)
        .get("/v1/ai-sdk/streams/{run_id}", resume_run)
        .get("/v1/ai-sdk/runs/{run_id}/stream", resume_run)
        .get("/v1/ai-sdk/threads/{thread_id}/messages", thread_messages)
        .post("/v1/ai-sdk/threads/{thread_id}/cancel", cancel_thread)
        .post("/v1/ai-sdk/threads/{thread_id}/interrupt", interrupt_thread)
}

async fn chat(
    State(runs): State<RunService>,
    caller: Caller,
    ApiJson(body): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let thread_id = body.thread_id()?;
    let agent_id = body.agent_id.clone();
    respond(&runs, &caller, body, thread_id, agent_id).await
}

async fn thread_chat(
    State(runs): State<RunService>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
    ApiJson(body): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let agent_id = body.agent_id.clone();
    respond(&runs, &caller, body, Some(thread_id), agent_id).await
}

async fn agent_chat(
    State(runs): State<RunService>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<AgentId>,
    ApiJson(body): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let thread_id = body.thread_id()?;
    respond(&runs, &caller, body, thread_id, Some(agent_id)).await
}

/// Starts a run for a new user message, or resumes the waiting run with the
/// approvals the last message answers.
async fn respond(
    runs: &RunService,
    caller: &Caller,
    body: ChatRequest,
    thread_id: Option<ThreadId>,
    agent_id: Option<AgentId>,
) -> Result<Response, ApiError> {
    match body.input()? {
        ChatInput::Message(message) => {
            let thread_id = runs
                .open_thread(caller, thread_id, agent_id.as_ref())
                .await?;
            let events = runs
                .start_followed(thread_id, agent_id, vec![message], RunId::generate())
                .await?;
            Ok(ui_stream(runs, events, UiEncoder::new()).await)
        }
        ChatInput::Approvals(approvals) => {
            let thread_id = thread_id.ok_or_else(|| {
                ApiError::BadRequest("approvals answer a chat: send its `id`".into())
            })?;
            let run = runs.waiting_run(caller, &thread_id).await?;
            let denied = approvals
                .iter()
                .filter(|approval| !approval.approved)
                .map(|approval| approval.tool_call_id.clone());
            let encoder = UiEncoder::continuing(body.known_calls(), denied);
            let decisions = approvals.iter().map(Approval::decision).collect();
            let events = runs.resume_followed(&run, decisions).await?;
            Ok(ui_stream(runs, events, encoder).await)
        }
    }
}

/// The stream of the run the thread executes; 204 when it executes none.
async fn resume_thread(
    State(runs): State<RunService>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
) -> Result<Response, ApiError> {
    runs.check_thread(&caller, &thread_id).await?;
    match runs.running_run(&thread_id).await? {
        Some(run_id) => {
            let events = runs.replay_followed(&thread_id, &run_id).await?;
            Ok(ui_stream(&runs, events, UiEncoder::new()).await)
        }
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// The run's latest activation, followed to its end while it executes.
async fn resume_run(
    State(runs): State<RunService>,
    caller: Caller,
    ApiPath(run_id): ApiPath<RunId>,
) -> Result<Response, ApiError> {
    let thread_id = runs.thread_of_run(&caller, &run_id).await?;
    let events = runs.replay_followed(&thread_id, &run_id).await?;
    Ok(ui_stream(&runs, events, UiEncoder::new()).await)
}

/// The thread's visible log as UI messages, each call with its approval.
async fn thread_messages(
    State(runs): State<RunService>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
) -> Result<Response, ApiError> {
    let history = runs.thread_history(&caller, &thread_id).await?;
    let approvals = Approvals::of(&history.runs);
    let messages = messages::ui_messages(&history.messages, &approvals);
    Ok(Json(serde_json::json!({ "messages": messages })).into_response())
}

async fn ui_stream(runs: &RunService, events: RunEvents, encoder: UiEncoder) -> Response {
    let mut response = runs.encoded_events(events, encoder).await.into_response();
    let headers = response.headers_mut();
    headers.insert(STREAM_HEADER, HeaderValue::from_static("v1"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    response
}
