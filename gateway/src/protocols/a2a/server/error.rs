//! `A2aError`: the spec's errors, as JSON-RPC error objects or as `google.rpc.Status`
//! bodies of the HTTP+JSON binding.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value as JsonValue, json};

use crate::server::error::{ApiError, concealed};

/// Why an A2A request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum A2aError {
    /// The body is not JSON.
    #[error("{0}")]
    Parse(String),
    /// A body above the server's limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// Not a valid JSON-RPC request.
    #[error("{0}")]
    InvalidRequest(String),
    /// No such JSON-RPC method.
    #[error("method `{0}` is not supported")]
    MethodNotFound(String),
    /// Parameters the operation cannot use.
    #[error("{0}")]
    InvalidParams(String),
    /// A fault of this server.
    #[error("{0}")]
    Internal(String),
    /// No task has this id (for this caller).
    #[error("task `{0}` not found")]
    TaskNotFound(String),
    /// No agent is served at this address: an unknown tenant, or no default
    /// agent on the bare routes.
    #[error("{0}")]
    AgentNotFound(String),
    /// The task already ended.
    #[error("{0}")]
    TaskNotCancelable(String),
    /// A valid request this server or task cannot carry out.
    #[error("{0}")]
    UnsupportedOperation(String),
    /// Content the agent does not accept.
    #[error("{0}")]
    ContentTypeNotSupported(String),
    /// No extended card is configured.
    #[error("the extended agent card is not configured")]
    ExtendedAgentCardNotConfigured,
    /// The client asked for a protocol version this server does not speak.
    #[error("A2A version `{0}` is not supported; this server speaks 1.0")]
    VersionNotSupported(String),
    /// Missing or wrong credentials.
    #[error("{0}")]
    Unauthenticated(String),
    /// Credentials of a tenant the agent is not served to.
    #[error("{0}")]
    PermissionDenied(String),
    /// The node cannot serve this now.
    #[error("{0}")]
    Unavailable(String),
}

impl A2aError {
    /// The JSON-RPC error code.
    pub(crate) fn code(&self) -> i32 {
        match self {
            Self::Parse(_) => -32700,
            Self::InvalidRequest(_) | Self::PayloadTooLarge(_) => -32600,
            Self::MethodNotFound(_) => -32601,
            Self::InvalidParams(_) | Self::AgentNotFound(_) => -32602,
            Self::Internal(_)
            | Self::Unavailable(_)
            | Self::Unauthenticated(_)
            | Self::PermissionDenied(_) => -32603,
            Self::TaskNotFound(_) => -32001,
            Self::TaskNotCancelable(_) => -32002,
            Self::UnsupportedOperation(_) => -32004,
            Self::ContentTypeNotSupported(_) => -32005,
            Self::ExtendedAgentCardNotConfigured => -32007,
            Self::VersionNotSupported(_) => -32009,
        }
    }

    /// The `ErrorInfo.reason` of the A2A errors (none for generic ones).
    fn reason(&self) -> Option<&'static str> {
        Some(match self {
            Self::TaskNotFound(_) => "TASK_NOT_FOUND",
            Self::TaskNotCancelable(_) => "TASK_NOT_CANCELABLE",
            Self::UnsupportedOperation(_) => "UNSUPPORTED_OPERATION",
            Self::ContentTypeNotSupported(_) => "CONTENT_TYPE_NOT_SUPPORTED",
            Self::ExtendedAgentCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            Self::VersionNotSupported(_) => "VERSION_NOT_SUPPORTED",
            _ => return None,
        })
    }

    /// The HTTP status of the HTTP+JSON binding.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::Parse(_)
            | Self::InvalidRequest(_)
            | Self::InvalidParams(_)
            | Self::UnsupportedOperation(_)
            | Self::ExtendedAgentCardNotConfigured
            | Self::VersionNotSupported(_) => StatusCode::BAD_REQUEST,
            // A precondition failure, which AIP-193 maps to 400 as well.
            Self::TaskNotCancelable(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::MethodNotFound(_) | Self::TaskNotFound(_) | Self::AgentNotFound(_) => {
                StatusCode::NOT_FOUND
            }
            Self::ContentTypeNotSupported(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Self::PermissionDenied(_) => StatusCode::FORBIDDEN,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// What the client is told: the reason, or for an internal fault an id
    /// whose details are in the log.
    fn public_message(&self) -> String {
        match self {
            Self::Internal(detail) => concealed(detail),
            other => other.to_string(),
        }
    }

    /// The JSON-RPC `error` member.
    pub(crate) fn to_jsonrpc(&self) -> JsonValue {
        let mut error = json!({"code": self.code(), "message": self.public_message()});
        if let Some(reason) = self.reason() {
            error["data"] = json!([error_info(reason)]);
        }
        error
    }

    /// The `google.rpc.Status` body of the HTTP+JSON binding.
    pub(crate) fn to_status_body(&self) -> JsonValue {
        let status = self.status();
        let grpc = match self {
            Self::TaskNotCancelable(_) => "FAILED_PRECONDITION",
            _ => grpc_status(status),
        };
        let mut error = json!({
            "code": status.as_u16(),
            "status": grpc,
            "message": self.public_message(),
        });
        if let Some(reason) = self.reason() {
            error["details"] = json!([error_info(reason)]);
        }
        json!({ "error": error })
    }
}

fn error_info(reason: &str) -> JsonValue {
    json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": {},
    })
}

/// The canonical gRPC status name of an HTTP status (AIP-193).
fn grpc_status(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "INVALID_ARGUMENT",
        StatusCode::UNAUTHORIZED => "UNAUTHENTICATED",
        StatusCode::FORBIDDEN => "PERMISSION_DENIED",
        StatusCode::NOT_FOUND => "NOT_FOUND",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "INVALID_ARGUMENT",
        StatusCode::PAYLOAD_TOO_LARGE => "RESOURCE_EXHAUSTED",
        StatusCode::SERVICE_UNAVAILABLE => "UNAVAILABLE",
        StatusCode::NOT_IMPLEMENTED => "UNIMPLEMENTED",
        _ => "INTERNAL",
    }
}

/// A request body, refused in A2A's format when it cannot be read (above the body
/// limit, say).
pub(crate) struct A2aBody(pub(crate) axum::body::Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for A2aBody {
    type Rejection = A2aError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, A2aError> {
        axum::body::Bytes::from_request(request, state)
            .await
            .map(Self)
            .map_err(|rejection| match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => A2aError::PayloadTooLarge(rejection.body_text()),
                _ => A2aError::InvalidRequest(rejection.body_text()),
            })
    }
}

impl IntoResponse for A2aError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(%status, error = %self, "A2A request failed");
        }
        (status, Json(self.to_status_body())).into_response()
    }
}

impl From<ApiError> for A2aError {
    fn from(error: ApiError) -> Self {
        match error {
            ApiError::BadRequest(message) => Self::InvalidParams(message),
            ApiError::PayloadTooLarge(message) => Self::PayloadTooLarge(message),
            // A thread of another tenant is not there for this caller.
            ApiError::NotFound(message) | ApiError::Forbidden(message) => {
                Self::InvalidParams(message)
            }
            ApiError::Unauthorized(message) => Self::Unauthenticated(message),
            ApiError::MethodNotAllowed(message) | ApiError::Conflict(message) => {
                Self::UnsupportedOperation(message)
            }
            ApiError::UnsupportedMediaType(message) => Self::ContentTypeNotSupported(message),
            ApiError::Unavailable(message) | ApiError::RequestTimeout(message) => {
                Self::Unavailable(message)
            }
            ApiError::Internal(message) => Self::Internal(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_internal_fault_is_an_id_in_both_bindings() {
        let error = A2aError::Internal("SELECT * FROM secret_table failed".to_owned());
        for message in [
            error.to_jsonrpc()["message"].clone(),
            error.to_status_body()["error"]["message"].clone(),
        ] {
            let message = message.as_str().unwrap();
            assert!(message.starts_with("internal error "), "{message}");
            assert!(!message.contains("secret_table"), "{message}");
        }
        let refusal = A2aError::InvalidParams("`message` is required".to_owned());
        assert_eq!(refusal.to_jsonrpc()["message"], "`message` is required");
    }
}
