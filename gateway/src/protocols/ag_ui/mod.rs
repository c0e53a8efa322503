//! `/v1/ag-ui`: the AG-UI protocol for CopilotKit and `@ag-ui/client`.
//!
//! Each POST is one AG-UI run streamed as SSE. A run whose input carries
//! `resume[]` answers the interrupts of the thread's waiting run: the engine
//! resumes that same run, reported under the client's new `runId`.

mod encoder;
mod messages;
mod request;

use awaken_actors::{AgentId, RunId, ThreadId};
use axum::Json;
use axum::extract::{FromRef, State};
use axum::response::{IntoResponse, Response};

use self::encoder::AgUiEncoder;
use self::request::{AgUiInput, RunAgentInput};
use crate::runs::RunService;
use crate::runs::handlers::interrupt_thread;
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::extract::{ApiJson, ApiPath};
use crate::server::table::Routes;

/// The AG-UI routes.
pub(crate) fn routes<S>() -> Routes<S>
where
    S: Clone + Send + Sync + 'static,
    RunService: FromRef<S>,
{
    Routes::new()
        .post("/v1/ag-ui/run", run)
        .post("/v1/ag-ui/threads/{thread_id}/runs", thread_run)
        .post("/v1/ag-ui/agents/{agent_id}/runs", agent_run)
        .post("/v1/ag-ui/threads/{thread_id}/interrupt", interrupt_thread)
        .get("/v1/ag-ui/threads/{thread_id}/messages", thread_messages)
}

async fn run(
    State(runs): State<RunService>,
    caller: Caller,
    ApiJson(input): ApiJson<RunAgentInput>,
) -> Result<Response, ApiError> {
    let thread_id = input.thread_id()?;
    let agent_id = input.agent_id.clone();
    respond(&runs, &caller, input, thread_id, agent_id).await
}

async fn thread_run(
    State(runs): State<RunService>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
    ApiJson(input): ApiJson<RunAgentInput>,
) -> Result<Response, ApiError> {
    if let Some(named) = input.thread_id()?
        && named != thread_id
    {
        return Err(ApiError::BadRequest(format!(
            "the body names thread `{named}` but the path names `{thread_id}`"
        )));
    }
    let agent_id = input.agent_id.clone();
    respond(&runs, &caller, input, Some(thread_id), agent_id).await
}

async fn agent_run(
    State(runs): State<RunService>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<AgentId>,
    ApiJson(input): ApiJson<RunAgentInput>,
) -> Result<Response, ApiError> {
    let thread_id = input.thread_id()?;
    respond(&runs, &caller, input, thread_id, Some(agent_id)).await
}

/// Starts a run with the user's message, or resumes the waiting run with the
/// `resume[]` answers.
async fn respond(
    runs: &RunService,
    caller: &Caller,
    input: RunAgentInput,
    thread_id: Option<ThreadId>,
    agent_id: Option<AgentId>,
) -> Result<Response, ApiError> {
    let client_run = input.run_id()?;
    let parent = input.parent_run_id().map(str::to_owned);
    let (encoder, events) = match input.input()? {
        AgUiInput::Message(message) => {
            let run_id = match client_run {
                Some(run_id) => fresh_run_id(runs, run_id).await?,
                None => RunId::generate(),
            };
            let thread_id = runs
                .open_thread(caller, thread_id, agent_id.as_ref())
                .await?;
            let encoder = AgUiEncoder::new(thread_id.to_string(), run_id.to_string(), parent);
            let events = runs
                .start_followed(thread_id, agent_id, vec![message], run_id)
                .await?;
            (encoder, events)
        }
        AgUiInput::Resume => {
            let thread_id = thread_id.ok_or_else(|| {
                ApiError::BadRequest("`resume` answers a thread's run: send its `threadId`".into())
            })?;
            let run = runs.waiting_run(caller, &thread_id).await?;
            let decisions = input.decisions(&run)?;
            let reported = client_run.unwrap_or_else(|| run.run_id.clone());
            let encoder = AgUiEncoder::new(thread_id.to_string(), reported.to_string(), parent);
            let events = runs.resume_followed(&run, decisions).await?;
            (encoder, events)
        }
    };
    Ok(runs.encoded_events(events, encoder).await.into_response())
}

/// The client's run id for a new run: 409 when a run already has it.
async fn fresh_run_id(runs: &RunService, run_id: RunId) -> Result<RunId, ApiError> {
    if runs.lookup_run(&run_id).await?.is_some() {
        return Err(ApiError::Conflict(format!(
            "run `{run_id}` already exists: a new run needs a new `runId`"
        )));
    }
    Ok(run_id)
}

/// The thread's visible log as AG-UI messages.
async fn thread_messages(
    State(runs): State<RunService>,
    caller: Caller,
    ApiPath(thread_id): ApiPath<ThreadId>,
) -> Result<Response, ApiError> {
    let visible = runs.visible_messages(&caller, &thread_id).await?;
    Ok(Json(serde_json::json!({ "messages": messages::ag_ui_messages(&visible) })).into_response())
}
