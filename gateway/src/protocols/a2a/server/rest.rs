//! The HTTP+JSON binding: `/v1/a2a[/{tenant}]/message:send`, `/tasks/{id}`, ...

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRef, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::A2aState;
use super::card::agent_card;
use super::error::{A2aBody, A2aError};
use super::ops;
use super::service::{Scope, TaskFilter, cancel_task, get_task, list_tasks};
use super::stream::Framing;
use super::version::check_version;
use super::wire::{PushConfigInput, SendMessageRequest};
use crate::server::auth::Caller;

type Params = Path<BTreeMap<String, String>>;

/// What every operation route starts from: a supported `A2A-Version`, the caller's
/// scope (the path's tenant) and the path's other parameters.
pub(crate) struct Scoped {
    scope: Scope,
    params: BTreeMap<String, String>,
}

impl<S> FromRequestParts<S> for Scoped
where
    S: Send + Sync,
    A2aState: FromRef<S>,
{
    type Rejection = A2aError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, A2aError> {
        check_version(&parts.headers)?;
        let caller = Caller::from_request_parts(parts, state).await?;
        let Path(params) = Params::from_request_parts(parts, state)
            .await
            .map_err(|e| A2aError::InvalidParams(e.body_text()))?;
        let state = A2aState::from_ref(state);
        let scope =
            Scope::of(&state, caller, params.get("tenant").map(String::as_str))?.served(&state)?;
        Ok(Self { scope, params })
    }
}

fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, A2aError> {
    serde_json::from_slice(bytes).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            A2aError::Parse(format!("the body is not JSON: {e}"))
        } else {
            A2aError::InvalidParams(e.to_string())
        }
    })
}

fn param<'a>(params: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str, A2aError> {
    params
        .get(name)
        .map(String::as_str)
        .ok_or_else(|| A2aError::Internal(format!("route without `{name}`")))
}

/// `POST …/message:send`.
pub(crate) async fn send(
    State(state): State<A2aState>,
    Scoped { scope, .. }: Scoped,
    A2aBody(bytes): A2aBody,
) -> Result<Response, A2aError> {
    let request: SendMessageRequest = body(&bytes)?;
    ops::send(&state, &scope, request, false, Framing::Plain).await
}

/// `POST …/message:stream`.
pub(crate) async fn stream(
    State(state): State<A2aState>,
    Scoped { scope, .. }: Scoped,
    A2aBody(bytes): A2aBody,
) -> Result<Response, A2aError> {
    let request: SendMessageRequest = body(&bytes)?;
    ops::send(&state, &scope, request, true, Framing::Plain).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskQuery {
    #[serde(default)]
    history_length: Option<i32>,
}

/// `GET …/tasks/{id}`, and `GET …/tasks/{id}:subscribe`.
pub(crate) async fn get(
    State(state): State<A2aState>,
    Scoped { scope, params }: Scoped,
    query: Result<Query<TaskQuery>, QueryRejection>,
) -> Result<Response, A2aError> {
    let target = param(&params, "task")?;
    if let Some(task_id) = target.strip_suffix(":subscribe") {
        return ops::subscribe(&state, &scope, task_id, Framing::Plain).await;
    }
    let Query(query) = query.map_err(|e| A2aError::InvalidParams(e.body_text()))?;
    let task = get_task(&state, &scope, target, query.history_length).await?;
    Ok(Json(task).into_response())
}

/// `POST …/tasks/{id}:cancel` and `POST …/tasks/{id}:subscribe`.
pub(crate) async fn task_action(
    State(state): State<A2aState>,
    Scoped { scope, params }: Scoped,
) -> Result<Response, A2aError> {
    let target = param(&params, "task")?;
    if let Some(task_id) = target.strip_suffix(":cancel") {
        let task = cancel_task(&state, &scope, task_id).await?;
        return Ok(Json(task).into_response());
    }
    if let Some(task_id) = target.strip_suffix(":subscribe") {
        return ops::subscribe(&state, &scope, task_id, Framing::Plain).await;
    }
    Err(A2aError::MethodNotFound(format!("POST on task `{target}`")))
}

/// `GET …/tasks`.
pub(crate) async fn list(
    State(state): State<A2aState>,
    Scoped { scope, .. }: Scoped,
    query: Result<Query<TaskFilter>, QueryRejection>,
) -> Result<Response, A2aError> {
    let Query(filter) = query.map_err(|e| A2aError::InvalidParams(e.body_text()))?;
    Ok(Json(list_tasks(&state, &scope, filter).await?).into_response())
}

/// `POST …/tasks/{id}/pushNotificationConfigs`.
pub(crate) async fn create_push(
    State(state): State<A2aState>,
    Scoped { scope, params }: Scoped,
    A2aBody(bytes): A2aBody,
) -> Result<Response, A2aError> {
    let task = get_task(&state, &scope, param(&params, "task")?, Some(0)).await?;
    let input: PushConfigInput = body(&bytes)?;
    let config = state.push.create(&task, input).await?;
    Ok((StatusCode::OK, Json(config)).into_response())
}

/// `GET …/tasks/{id}/pushNotificationConfigs`.
pub(crate) async fn list_push(
    State(state): State<A2aState>,
    Scoped { scope, params }: Scoped,
) -> Result<Response, A2aError> {
    let task = get_task(&state, &scope, param(&params, "task")?, Some(0)).await?;
    let configs = state.push.list(&task.id).await?;
    Ok(Json(serde_json::json!({"configs": configs, "nextPageToken": ""})).into_response())
}

/// `GET …/tasks/{id}/pushNotificationConfigs/{configId}`.
pub(crate) async fn get_push(
    State(state): State<A2aState>,
    Scoped { scope, params }: Scoped,
) -> Result<Response, A2aError> {
    let task = get_task(&state, &scope, param(&params, "task")?, Some(0)).await?;
    let config = state.push.get(&task.id, param(&params, "config")?).await?;
    Ok(Json(config).into_response())
}

/// `DELETE …/tasks/{id}/pushNotificationConfigs/{configId}`.
pub(crate) async fn delete_push(
    State(state): State<A2aState>,
    Scoped { scope, params }: Scoped,
) -> Result<Response, A2aError> {
    let task = get_task(&state, &scope, param(&params, "task")?, Some(0)).await?;
    state
        .push
        .delete(&task.id, param(&params, "config")?)
        .await?;
    Ok(Json(serde_json::json!({})).into_response())
}

/// `GET /.well-known/agent-card.json` and `…/{tenant}/.well-known/agent-card.json`.
pub(crate) async fn card(
    State(state): State<A2aState>,
    headers: HeaderMap,
    params: Option<Params>,
) -> Result<Response, A2aError> {
    let params = params.map(|Path(params)| params).unwrap_or_default();
    let scope = Scope::of(
        &state,
        Caller::anonymous(),
        params.get("tenant").map(String::as_str),
    )?;
    Ok(Json(agent_card(&state, &scope, &headers, false)).into_response())
}

/// `GET …/extendedAgentCard`.
pub(crate) async fn extended_card(
    State(state): State<A2aState>,
    headers: HeaderMap,
    params: Option<Params>,
) -> Result<Response, A2aError> {
    check_version(&headers)?;
    let params = params.map(|Path(params)| params).unwrap_or_default();
    let scope = Scope::of(
        &state,
        Caller::anonymous(),
        params.get("tenant").map(String::as_str),
    )?;
    super::extended_card(&state, &scope, &headers).map(|card| Json(card).into_response())
}
