//! The responses both bindings give: sends (blocking, immediate, streamed) and
//! subscriptions, framed per binding.

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::A2aState;
use super::error::A2aError;
use super::service::{Scope, accept, get_task};
use super::stream::{Framing, TaskStream};
use super::wire::SendMessageRequest;
use crate::runs::RunEvents;

/// `SendMessage` (`stream`: `SendStreamingMessage`).
pub(crate) async fn send(
    state: &A2aState,
    scope: &Scope,
    request: SendMessageRequest,
    stream: bool,
    framing: Framing,
) -> Result<Response, A2aError> {
    let configuration = request.configuration.clone().unwrap_or_default();
    // A push URL that will be refused is refused before the task starts.
    if let Some(push) = &configuration.task_push_notification_config {
        state.push.check_url(&push.url).await?;
    }
    let mut accepted = accept(state, scope, &request).await?;
    if let Some(push) = configuration.task_push_notification_config {
        state.push.create(&accepted.task, push).await?;
    }
    if stream {
        let encoder = TaskStream::new(accepted.task, framing);
        return Ok(state
            .runs
            .encoded_events(accepted.events, encoder)
            .await
            .into_response());
    }
    let task = if configuration.return_immediately {
        accepted.task
    } else {
        // Until the run ends or waits: the end of its activation.
        while accepted.events.next().await.is_some() {}
        get_task(
            state,
            scope,
            &accepted.task.id,
            configuration.history_length,
        )
        .await?
    };
    Ok(Json(framing.result(json!({ "task": task }))).into_response())
}

/// `SubscribeToTask`: the task, then its changes until it ends or waits.
pub(crate) async fn subscribe(
    state: &A2aState,
    scope: &Scope,
    task_id: &str,
    framing: Framing,
) -> Result<Response, A2aError> {
    let current = get_task(state, scope, task_id, Some(0)).await?;
    if current.status.state.is_terminal() {
        return Err(A2aError::UnsupportedOperation(format!(
            "task `{task_id}` already ended ({:?}); read it with GetTask",
            current.status.state
        )));
    }
    let (Ok(run_id), Ok(thread_id)) = (
        awaken_actors::RunId::new(task_id),
        awaken_actors::ThreadId::new(current.context_id.as_str()),
    ) else {
        return Err(A2aError::TaskNotFound(task_id.to_owned()));
    };
    let follow = state
        .runs
        .follow(&thread_id, &run_id, None)
        .await?
        .skip_backlog();
    // Read after listening, so no change falls between the two.
    let task = get_task(state, scope, task_id, None).await?;
    let follow = if task.status.state.is_terminal() || task.status.state.is_interrupted() {
        // Nothing more will happen until the client acts: the task alone.
        follow.replay_only()
    } else {
        follow
    };
    let encoder = TaskStream::new(task, framing);
    Ok(state
        .runs
        .encoded_events(RunEvents::from(follow), encoder)
        .await
        .into_response())
}
