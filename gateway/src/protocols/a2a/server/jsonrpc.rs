//! The JSON-RPC 2.0 binding: `POST /v1/a2a` (or `/v1/a2a/{tenant}`), one method
//! call per request; streaming methods answer with SSE, each event a JSON-RPC
//! response.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value as JsonValue, json};

use super::A2aState;
use super::error::{A2aBody, A2aError};
use super::ops;
use super::service::{Scope, TaskFilter, cancel_task, get_task, list_tasks};
use super::stream::Framing;
use super::version::check_version;
use super::wire::{PushConfigInput, SendMessageRequest};
use crate::server::auth::Caller;

#[derive(Debug, Deserialize)]
struct Envelope {
    jsonrpc: Option<String>,
    #[serde(default)]
    id: JsonValue,
    method: Option<String>,
    #[serde(default)]
    params: JsonValue,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskParams {
    id: String,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    history_length: Option<i32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListParams {
    #[serde(default)]
    tenant: Option<String>,
    #[serde(flatten)]
    filter: TaskFilter,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PushParams {
    task_id: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    config: Option<PushConfigInput>,
}

/// `POST /v1/a2a` and `POST /v1/a2a/{tenant}`.
pub(crate) async fn handle(
    State(state): State<A2aState>,
    caller: Caller,
    headers: HeaderMap,
    path: Option<Path<BTreeMap<String, String>>>,
    body: Result<A2aBody, A2aError>,
) -> Response {
    let bytes = match body {
        Ok(A2aBody(bytes)) => bytes,
        Err(refused) => return error(JsonValue::Null, &refused),
    };
    let envelope: Envelope = match serde_json::from_slice::<JsonValue>(&bytes) {
        Err(e) => return error(JsonValue::Null, &A2aError::Parse(format!("not JSON: {e}"))),
        Ok(value) => match serde_json::from_value(value) {
            Ok(envelope) => envelope,
            Err(e) => {
                return error(
                    JsonValue::Null,
                    &A2aError::InvalidRequest(format!("not a JSON-RPC request: {e}")),
                );
            }
        },
    };
    let id = envelope.id.clone();
    if envelope.jsonrpc.as_deref() != Some("2.0")
        || !(id.is_string() || id.is_number() || id.is_null())
    {
        return error(
            id,
            &A2aError::InvalidRequest(
                "`jsonrpc` must be \"2.0\" and `id` a string or number".into(),
            ),
        );
    }
    let Some(method) = envelope.method.clone() else {
        return error(id, &A2aError::InvalidRequest("`method` is missing".into()));
    };
    if let Err(refused) = check_version(&headers) {
        return error(id, &refused);
    }
    let path_tenant = path.and_then(|Path(params)| params.get("tenant").cloned());
    match call(&state, caller, &headers, path_tenant, &method, envelope).await {
        Ok(response) => response,
        Err(refused) => error(id, &refused),
    }
}

async fn call(
    state: &A2aState,
    caller: Caller,
    headers: &HeaderMap,
    path_tenant: Option<String>,
    method: &str,
    envelope: Envelope,
) -> Result<Response, A2aError> {
    let framing = Framing::JsonRpc(envelope.id.clone());
    let params = envelope.params;
    // The agent the call names; every operation but the extended card (behind
    // its own token) is for the tenants it is served to.
    let card_scope_of = |tenant: Option<String>| {
        let tenant = path_tenant.clone().or(tenant.filter(|t| !t.is_empty()));
        Scope::of(state, caller.clone(), tenant.as_deref())
    };
    let scope_of = |tenant: Option<String>| card_scope_of(tenant)?.served(state);
    let unary = |result: JsonValue| Ok(Json(framing.result(result)).into_response());
    match method {
        "SendMessage" | "SendStreamingMessage" => {
            let request: SendMessageRequest = decode(params)?;
            let scope = scope_of(request.tenant.clone())?;
            ops::send(
                state,
                &scope,
                request,
                method == "SendStreamingMessage",
                framing.clone(),
            )
            .await
        }
        "GetTask" => {
            let p: TaskParams = decode(params)?;
            let scope = scope_of(p.tenant)?;
            unary(json!(
                get_task(state, &scope, &p.id, p.history_length).await?
            ))
        }
        "ListTasks" => {
            let p: ListParams = decode_or_default(params)?;
            let scope = scope_of(p.tenant)?;
            unary(json!(list_tasks(state, &scope, p.filter).await?))
        }
        "CancelTask" => {
            let p: TaskParams = decode(params)?;
            let scope = scope_of(p.tenant)?;
            unary(json!(cancel_task(state, &scope, &p.id).await?))
        }
        "SubscribeToTask" => {
            let p: TaskParams = decode(params)?;
            let scope = scope_of(p.tenant)?;
            ops::subscribe(state, &scope, &p.id, framing.clone()).await
        }
        "CreateTaskPushNotificationConfig" => {
            let mut raw = params;
            let p: PushParams = decode(raw.clone())?;
            let scope = scope_of(p.tenant.clone())?;
            let task = get_task(state, &scope, &p.task_id, Some(0)).await?;
            let input = match p.config {
                Some(mut config) => {
                    config.id = config.id.or(p.id);
                    config
                }
                // The config's fields directly in the params.
                None => {
                    if let Some(object) = raw.as_object_mut() {
                        object.remove("config");
                    }
                    decode(raw)?
                }
            };
            unary(json!(state.push.create(&task, input).await?))
        }
        "GetTaskPushNotificationConfig" => {
            let p: PushParams = decode(params)?;
            let scope = scope_of(p.tenant)?;
            let task = get_task(state, &scope, &p.task_id, Some(0)).await?;
            let config_id =
                p.id.ok_or_else(|| A2aError::InvalidParams("`id` is missing".into()))?;
            unary(json!(state.push.get(&task.id, &config_id).await?))
        }
        "ListTaskPushNotificationConfigs" | "ListTaskPushNotificationConfig" => {
            let p: PushParams = decode(params)?;
            let scope = scope_of(p.tenant)?;
            let task = get_task(state, &scope, &p.task_id, Some(0)).await?;
            unary(json!({"configs": state.push.list(&task.id).await?, "nextPageToken": ""}))
        }
        "DeleteTaskPushNotificationConfig" => {
            let p: PushParams = decode(params)?;
            let scope = scope_of(p.tenant)?;
            let task = get_task(state, &scope, &p.task_id, Some(0)).await?;
            let config_id =
                p.id.ok_or_else(|| A2aError::InvalidParams("`id` is missing".into()))?;
            state.push.delete(&task.id, &config_id).await?;
            unary(json!({}))
        }
        "GetExtendedAgentCard" => {
            let tenant = params
                .get("tenant")
                .and_then(JsonValue::as_str)
                .map(str::to_owned);
            let scope = card_scope_of(tenant)?;
            unary(super::extended_card(state, &scope, headers)?)
        }
        other => Err(A2aError::MethodNotFound(other.to_owned())),
    }
}

fn decode<T: DeserializeOwned>(params: JsonValue) -> Result<T, A2aError> {
    serde_json::from_value(params).map_err(|e| A2aError::InvalidParams(e.to_string()))
}

fn decode_or_default<T: DeserializeOwned + Default>(params: JsonValue) -> Result<T, A2aError> {
    if params.is_null() {
        return Ok(T::default());
    }
    decode(params)
}

/// A JSON-RPC error response (HTTP 200, as the binding has it).
fn error(id: JsonValue, error: &A2aError) -> Response {
    if error.status().is_server_error() {
        tracing::warn!(error = %error, "A2A JSON-RPC call failed");
    }
    Json(json!({"jsonrpc": "2.0", "id": id, "error": error.to_jsonrpc()})).into_response()
}
