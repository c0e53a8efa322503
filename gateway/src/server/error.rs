//! `ApiError`: every refusal of the HTTP API, as a status and `{"error": "..."}`.

use awaken_actors::error::StorageError;
use awaken_actors::mailbox::MailboxError;
use awaken_actors::thread::ControlError;
use awaken_cluster::control::InterruptError;
use awaken_cluster::routing::RouteError;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Why a request was refused; the variant picks the status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// Malformed or invalid input (400).
    #[error("{0}")]
    BadRequest(String),
    /// No or an unknown API key (401).
    #[error("{0}")]
    Unauthorized(String),
    /// A valid key that may not touch this resource (403).
    #[error("{0}")]
    Forbidden(String),
    /// Unknown id (404).
    #[error("{0}")]
    NotFound(String),
    /// The path exists, not with this method (405).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The body did not arrive within `server.body_read_timeout_secs` (408).
    #[error("{0}")]
    RequestTimeout(String),
    /// The resource is not in a state that allows the request (409).
    #[error("{0}")]
    Conflict(String),
    /// Body above the configured limit (413).
    #[error("{0}")]
    PayloadTooLarge(String),
    /// Body in a content type the route does not read (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The node cannot serve this now: overload, no owner, a dependency down (503).
    #[error("{0}")]
    Unavailable(String),
    /// A fault of the server or its dependencies (500).
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// What a 503 tells a client to wait before trying again: a backend that is
/// away was already waited for (`server.backend_wait_secs`), so it is not a
/// blip, and a few seconds spare it a retry storm.
pub(crate) const RETRY_AFTER_SECS: u64 = 5;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            Self::Internal(detail) => concealed(detail),
            other => {
                if status.is_server_error() {
                    tracing::warn!(%status, error = %other, "request failed");
                }
                other.to_string()
            }
        };
        let body = Json(serde_json::json!({ "error": message }));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            let retry_after = [(
                axum::http::header::RETRY_AFTER,
                RETRY_AFTER_SECS.to_string(),
            )];
            return (status, retry_after, body).into_response();
        }
        (status, body).into_response()
    }
}

/// What a client is told of an internal fault: an id to quote. The detail,
/// which may name hosts, SQL, paths or a dependency's answer, goes to the log
/// under that id.
pub(crate) fn concealed(detail: &str) -> String {
    let id = uuid::Uuid::now_v7();
    tracing::error!(error_id = %id, error = %detail, "internal error");
    format!("internal error {id}; the server logged its details under this id")
}

impl From<StorageError> for ApiError {
    fn from(error: StorageError) -> Self {
        match error {
            StorageError::NotFound(_) => Self::NotFound(error.to_string()),
            StorageError::AlreadyExists(_) => Self::Conflict(error.to_string()),
            StorageError::InvalidInput(_) => Self::BadRequest(error.to_string()),
            StorageError::VersionConflict { .. } | StorageError::Fenced { .. } => {
                Self::Conflict(error.to_string())
            }
            StorageError::Unavailable(_) | StorageError::MaybeWritten(_) => {
                Self::Unavailable(error.to_string())
            }
            other => Self::Internal(other.to_string()),
        }
    }
}

impl From<MailboxError> for ApiError {
    fn from(error: MailboxError) -> Self {
        match error {
            MailboxError::NotFound(_) => Self::NotFound(error.to_string()),
            MailboxError::Duplicate(_) => Self::Conflict(error.to_string()),
            MailboxError::WrongState { .. } | MailboxError::ClaimMismatch(_) => {
                Self::Conflict(error.to_string())
            }
            MailboxError::InvalidInput(_) => Self::BadRequest(error.to_string()),
            MailboxError::Unavailable(_) => Self::Unavailable(error.to_string()),
        }
    }
}

impl From<ControlError> for ApiError {
    fn from(error: ControlError) -> Self {
        match error {
            ControlError::EmptyInput | ControlError::NoAgent | ControlError::Resolve(_) => {
                Self::BadRequest(error.to_string())
            }
            ControlError::RunNotFound { .. } | ControlError::UnknownToolCall { .. } => {
                Self::NotFound(error.to_string())
            }
            ControlError::NoActiveRun { .. }
            | ControlError::RunNotActive { .. }
            | ControlError::CallFinished { .. }
            | ControlError::CallNotSuspended { .. } => Self::Conflict(error.to_string()),
            ControlError::Unavailable(_) => Self::Unavailable(error.to_string()),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl From<RouteError> for ApiError {
    fn from(error: RouteError) -> Self {
        match error {
            RouteError::Refused(refused) => refused.into(),
            RouteError::NoOwner { .. } | RouteError::OwnerSilent { .. } => {
                Self::Unavailable(error.to_string())
            }
            RouteError::Malformed(_) => Self::BadRequest(error.to_string()),
            RouteError::Unexpected { .. } | RouteError::Transport(_) => {
                Self::Internal(error.to_string())
            }
        }
    }
}

impl From<InterruptError> for ApiError {
    fn from(error: InterruptError) -> Self {
        match error {
            InterruptError::Mailbox(error) => error.into(),
            InterruptError::Route(error) => error.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_503_says_when_to_try_again_and_other_errors_do_not() {
        let unavailable = ApiError::Unavailable("mailbox unavailable: reconnecting".into());
        let response = unavailable.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response
                .headers()
                .get(axum::http::header::RETRY_AFTER)
                .unwrap(),
            &RETRY_AFTER_SECS.to_string()
        );
        assert_eq!(
            body(response).await["error"],
            "mailbox unavailable: reconnecting"
        );
        let missing = ApiError::NotFound("no such run".into()).into_response();
        assert!(
            missing
                .headers()
                .get(axum::http::header::RETRY_AFTER)
                .is_none()
        );
    }

    async fn body(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// Log lines written to memory.
    #[derive(Clone, Default)]
    struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Log {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn an_internal_error_answers_an_id_and_keeps_its_detail_in_the_log() {
        let detail = "connection to postgres://app:hunter2@db:5432 refused";
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let response = tracing::subscriber::with_default(subscriber, || {
            ApiError::Internal(detail.to_owned()).into_response()
        });
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let message = body(response).await["error"].as_str().unwrap().to_owned();
        assert!(message.starts_with("internal error "), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
        assert!(!message.contains("postgres"), "{message}");
        let id = message.split(' ').nth(2).unwrap().trim_end_matches(';');
        let logged = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(logged.contains(id) && logged.contains(detail), "{logged}");
        // Other refusals keep saying why: the client can act on them.
        let response = ApiError::NotFound("no run `r-1`".to_owned()).into_response();
        assert_eq!(body(response).await["error"], "no run `r-1`");
    }
}
