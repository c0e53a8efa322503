//! API keys: `Authorization: Bearer <key>` on every route but health, and tenants
//! that own threads.

use std::collections::BTreeMap;

use awaken_actors::contract::Thread;
use axum::extract::{FromRequestParts, Request};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use serde_json::Value as JsonValue;

use super::config::ApiKeys;
use super::error::ApiError;

pub use awaken_actors::contract::TENANT_KEY;

/// Who is calling: the tenant of the caller's API key, or nobody in particular
/// when the server has no keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller(Option<String>);

impl Caller {
    /// A caller of the public routes (agent cards), which touch no thread.
    pub(crate) fn anonymous() -> Self {
        Self(None)
    }

    /// The tenant of the caller's key; `None` on a server without keys.
    pub(crate) fn tenant(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// Stamps a new thread with the caller's tenant.
    pub(crate) fn stamp(&self, thread: &mut Thread) {
        if let Some(tenant) = &self.0 {
            thread
                .metadata
                .custom
                .insert(TENANT_KEY.to_owned(), JsonValue::String(tenant.clone()));
        }
    }

    /// 404 unless the caller may touch `thread` (with API keys, only the tenant
    /// that created it may): the same answer as for a thread that does not exist,
    /// so a tenant cannot learn which ids other tenants use.
    pub(crate) fn authorize(&self, thread: &Thread) -> Result<(), ApiError> {
        if self.owns(thread) {
            return Ok(());
        }
        Err(ApiError::NotFound(format!(
            "unknown thread `{}`",
            thread.id
        )))
    }

    /// Whether the caller is a tenant (the server has API keys).
    pub(crate) fn is_tenant(&self) -> bool {
        self.0.is_some()
    }

    /// Whether the caller is a tenant in `admins`.
    pub(crate) fn is_admin(&self, admins: &[String]) -> bool {
        self.0
            .as_ref()
            .is_some_and(|tenant| admins.iter().any(|admin| admin == tenant))
    }

    /// Whether list results may show `thread`.
    pub(crate) fn owns(&self, thread: &Thread) -> bool {
        match &self.0 {
            None => true,
            Some(tenant) => {
                thread
                    .metadata
                    .custom
                    .get(TENANT_KEY)
                    .and_then(JsonValue::as_str)
                    == Some(tenant.as_str())
            }
        }
    }
}

/// 400 when a client tries to set the reserved tenant key.
pub(crate) fn refuse_reserved(custom: &BTreeMap<String, JsonValue>) -> Result<(), ApiError> {
    if custom.contains_key(TENANT_KEY) {
        return Err(ApiError::BadRequest(format!(
            "`custom.{TENANT_KEY}` is set by the server"
        )));
    }
    Ok(())
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Self>()
            .cloned()
            .ok_or_else(|| ApiError::Internal("route served without the key check".into()))
    }
}

/// 401 without a known key (when keys are configured); otherwise the caller's
/// tenant goes to the handlers as a [`Caller`] extension.
pub(crate) fn check_key(keys: &ApiKeys, request: &mut Request) -> Result<(), ApiError> {
    let caller = if keys.is_empty() {
        Caller(None)
    } else {
        let presented = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim);
        match presented {
            None => {
                return Err(ApiError::Unauthorized(
                    "missing API key: send `Authorization: Bearer <key>`".into(),
                ));
            }
            Some(key) => match keys.tenant(key) {
                Some(tenant) => Caller(Some(tenant.clone())),
                None => {
                    return Err(ApiError::Unauthorized("unknown API key".into()));
                }
            },
        }
    };
    request.extensions_mut().insert(caller);
    Ok(())
}
