//! `/v1/a2a`: the A2A protocol v1.0, over both its HTTP+JSON and JSON-RPC bindings.
//!
//! Every served agent is a tenant (`/v1/a2a/{agent}/…`; the bare routes serve the
//! default agent). A task is one run, its `contextId` the run's thread; a run that
//! waits for approval is `TASK_STATE_INPUT_REQUIRED`, and a follow-up message on
//! the task carries the decision that resumes the same run. See `docs/a2a.md`.

mod card;
mod decisions;
mod error;
mod jsonrpc;
mod ops;
mod push;
mod rest;
mod service;
mod stream;
mod task;
mod version;

use crate::protocols::a2a::wire;

use std::sync::Arc;

use axum::extract::FromRef;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use serde_json::Value as JsonValue;

pub(crate) use push::PushNotifications;

use self::error::A2aError;
use self::service::Scope;
use crate::runs::RunService;
use crate::server::config::ServerConfig;
use crate::server::table::Routes;

/// What the A2A routes serve with: the run service, the push notification
/// configs and their deliveries, and the server's settings (tenants, the
/// extended card's token, whether API keys guard the routes).
#[derive(Clone)]
pub(crate) struct A2aState {
    /// Runs and threads.
    pub(crate) runs: RunService,
    /// Push notification configs and their deliveries.
    pub(crate) push: Arc<PushNotifications>,
    /// The server's settings.
    pub(crate) config: Arc<ServerConfig>,
}

/// The routes behind the API keys.
pub(crate) fn routes<S>() -> Routes<S>
where
    S: Clone + Send + Sync + 'static,
    A2aState: FromRef<S>,
{
    Routes::new()
        .post("/v1/a2a", jsonrpc::handle)
        .post("/v1/a2a/{tenant}", jsonrpc::handle)
        .post("/v1/a2a/message:send", rest::send)
        .post("/v1/a2a/{tenant}/message:send", rest::send)
        .post("/v1/a2a/message:stream", rest::stream)
        .post("/v1/a2a/{tenant}/message:stream", rest::stream)
        .get("/v1/a2a/tasks", rest::list)
        .get("/v1/a2a/{tenant}/tasks", rest::list)
        .get("/v1/a2a/tasks/{task}", rest::get)
        .post("/v1/a2a/tasks/{task}", rest::task_action)
        .get("/v1/a2a/{tenant}/tasks/{task}", rest::get)
        .post("/v1/a2a/{tenant}/tasks/{task}", rest::task_action)
        .post(
            "/v1/a2a/tasks/{task}/pushNotificationConfigs",
            rest::create_push,
        )
        .get(
            "/v1/a2a/tasks/{task}/pushNotificationConfigs",
            rest::list_push,
        )
        .post(
            "/v1/a2a/{tenant}/tasks/{task}/pushNotificationConfigs",
            rest::create_push,
        )
        .get(
            "/v1/a2a/{tenant}/tasks/{task}/pushNotificationConfigs",
            rest::list_push,
        )
        .get(
            "/v1/a2a/tasks/{task}/pushNotificationConfigs/{config}",
            rest::get_push,
        )
        .delete(
            "/v1/a2a/tasks/{task}/pushNotificationConfigs/{config}",
            rest::delete_push,
        )
        .get(
            "/v1/a2a/{tenant}/tasks/{task}/pushNotificationConfigs/{config}",
            rest::get_push,
        )
        .delete(
            "/v1/a2a/{tenant}/tasks/{task}/pushNotificationConfigs/{config}",
            rest::delete_push,
        )
}

/// The cards: public, and the extended card checks its own token.
pub(crate) fn card_routes<S>() -> Routes<S>
where
    S: Clone + Send + Sync + 'static,
    A2aState: FromRef<S>,
{
    Routes::new()
        .get("/.well-known/agent-card.json", rest::card)
        .get("/v1/a2a/.well-known/agent-card.json", rest::card)
        .get("/v1/a2a/{tenant}/.well-known/agent-card.json", rest::card)
        .get("/v1/a2a/extendedAgentCard", rest::extended_card)
        .get("/v1/a2a/{tenant}/extendedAgentCard", rest::extended_card)
}

/// The extended card of `scope`'s agent, for a request bearing the configured
/// token.
fn extended_card(
    state: &A2aState,
    scope: &Scope,
    headers: &HeaderMap,
) -> Result<JsonValue, A2aError> {
    let Some(token) = &state.config.a2a_extended_card_bearer_token else {
        return Err(A2aError::ExtendedAgentCardNotConfigured);
    };
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    if presented != Some(token.expose()) {
        return Err(A2aError::Unauthenticated(
            "the extended agent card needs `Authorization: Bearer <token>`".to_owned(),
        ));
    }
    Ok(card::agent_card(state, scope, headers, true))
}
