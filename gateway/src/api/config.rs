//! The config API: `/v1/config/{namespace}[/{id}]` with `$schema`,
//! `/v1/capabilities`, and the `/v1/agents` aliases.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value as JsonValue, json};

use super::threads::Paging;
use crate::runtime_config::{ConfigApiError, Namespace};
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::extract::{ApiJson, ApiPath, ApiQuery};
use crate::server::state::AppState;
use crate::server::table::Routes;

/// The path segment that asks for a namespace's JSON Schema instead of an entry.
const SCHEMA_SEGMENT: &str = "$schema";

/// The config and capabilities routes.
pub(crate) fn routes() -> Routes<AppState> {
    Routes::new()
        .get("/v1/capabilities", capabilities)
        .get("/v1/config/{namespace}", list)
        .post("/v1/config/{namespace}", create)
        .get("/v1/config/{namespace}/{id}", get_entry)
        .put("/v1/config/{namespace}/{id}", replace)
        .delete("/v1/config/{namespace}/{id}", delete)
        .get("/v1/agents", list_agents)
        .get("/v1/agents/{id}", get_agent)
}

impl From<ConfigApiError> for ApiError {
    fn from(error: ConfigApiError) -> Self {
        match error {
            ConfigApiError::Invalid(message) => Self::BadRequest(message),
            ConfigApiError::NotFound(message) => Self::NotFound(message),
            ConfigApiError::Conflict(message) => Self::Conflict(message),
            ConfigApiError::Unavailable(message) => Self::Unavailable(message),
        }
    }
}

fn namespace(name: &str) -> Result<Namespace, ApiError> {
    name.parse::<Namespace>()
        .map_err(|e| ApiError::from(ConfigApiError::from(e)))
}

/// 403 unless the caller may change the configuration: with API keys, only the
/// tenants in `server.admin_tenants` may; without, nobody unless
/// `server.config_api.writes_without_keys` is on.
fn require_admin(state: &AppState, caller: &Caller) -> Result<(), ApiError> {
    if !caller.is_tenant() {
        if state.config.config_api.writes_without_keys {
            return Ok(());
        }
        return Err(ApiError::Forbidden(
            "the config API is read-only on a server without API keys: configure              `server.api_keys` and `server.admin_tenants` (or, on a trusted network only,              `server.config_api.writes_without_keys = true`)"
                .into(),
        ));
    }
    if caller.is_admin(&state.config.admin_tenants) {
        return Ok(());
    }
    Err(ApiError::Forbidden(
        "changing the configuration needs a key of a tenant in `server.admin_tenants`".into(),
    ))
}

async fn capabilities(State(state): State<AppState>) -> Json<JsonValue> {
    Json(state.runtime_config.capabilities())
}

async fn list_namespace(
    state: &AppState,
    namespace: Namespace,
    paging: &Paging,
) -> Result<Response, ApiError> {
    let listing = state.runtime_config.list(namespace).await?;
    let total = listing.items.len();
    let items: Vec<JsonValue> = listing
        .items
        .into_iter()
        .skip(paging.offset)
        .take(paging.limit())
        .collect();
    Ok(Json(json!({
        "namespace": namespace.as_str(),
        "items": items,
        "total": total,
        "built_in": listing.built_in,
        "revision": listing.revision,
    }))
    .into_response())
}

async fn list(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(paging): ApiQuery<Paging>,
) -> Result<Response, ApiError> {
    list_namespace(&state, namespace(&name)?, &paging).await
}

async fn list_agents(
    State(state): State<AppState>,
    ApiQuery(paging): ApiQuery<Paging>,
) -> Result<Response, ApiError> {
    list_namespace(&state, Namespace::Agents, &paging).await
}

async fn get_entry(
    State(state): State<AppState>,
    ApiPath((name, id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let namespace = namespace(&name)?;
    if id == SCHEMA_SEGMENT {
        return Ok(Json(namespace.schema().clone()).into_response());
    }
    Ok(Json(state.runtime_config.get(namespace, &id).await?).into_response())
}

async fn get_agent(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.runtime_config.get(Namespace::Agents, &id).await?).into_response())
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<JsonValue>,
) -> Result<Response, ApiError> {
    let namespace = namespace(&name)?;
    require_admin(&state, &caller)?;
    let entry = state.runtime_config.create(namespace, &body).await?;
    Ok((StatusCode::CREATED, Json(entry)).into_response())
}

async fn replace(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((name, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<JsonValue>,
) -> Result<Response, ApiError> {
    let namespace = namespace(&name)?;
    require_admin(&state, &caller)?;
    let entry = state.runtime_config.replace(namespace, &id, &body).await?;
    Ok(Json(entry).into_response())
}

async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((name, id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let namespace = namespace(&name)?;
    require_admin(&state, &caller)?;
    state.runtime_config.delete(namespace, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
