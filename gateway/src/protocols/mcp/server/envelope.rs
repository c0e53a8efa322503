//! What the MCP route checks before rmcp reads a request, and how it words
//! rmcp's own refusals: always as a JSON-RPC error response.
//!
//! rmcp answers a body that is JSON but no JSON-RPC message, a content type it
//! does not read or an `Accept` header it does not like with a plain-text body
//! (and 415 for the first); a client of a JSON-RPC endpoint expects a JSON-RPC
//! error with the status that says why (400 for an invalid request).

use axum::Json;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as JsonValue, json};

/// JSON-RPC's "invalid JSON" code.
pub(super) const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "not a valid request" code.
pub(super) const INVALID_REQUEST: i64 = -32600;

/// Longest text of an rmcp refusal that is carried into the JSON-RPC error.
const MAX_REFUSAL_TEXT: usize = 4096;

/// A JSON-RPC error answer to a message whose id could not be read.
pub(super) fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (status, Json(body)).into_response()
}

/// Whether `value` is one JSON-RPC 2.0 message MCP exchanges: a request or
/// notification (`method`, object `params` if any) or a response (`result` or
/// `error` with the id it answers).
pub(super) fn is_message(value: &JsonValue) -> bool {
    let Some(fields) = value.as_object() else {
        return false;
    };
    if fields.get("jsonrpc").and_then(JsonValue::as_str) != Some("2.0") {
        return false;
    }
    let id_ok = |id: Option<&JsonValue>| {
        matches!(id, Some(JsonValue::String(_))) || id.is_some_and(JsonValue::is_i64)
    };
    if let Some(method) = fields.get("method") {
        let params_ok = fields.get("params").is_none_or(JsonValue::is_object);
        let id = fields.get("id");
        return method.is_string() && params_ok && (id.is_none() || id_ok(id));
    }
    if fields.contains_key("result") {
        return id_ok(fields.get("id"));
    }
    fields.get("error").is_some_and(JsonValue::is_object)
}

/// Whether the request's content type is `application/json` (parameters aside).
pub(super) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// rmcp's answer, with a refusal that is not JSON turned into a JSON-RPC error
/// of the same status.
pub(super) async fn worded(response: Response) -> Response {
    let status = response.status();
    let is_json_answer = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !status.is_client_error() || is_json_answer {
        return response;
    }
    let text = match axum::body::to_bytes(Body::new(response.into_body()), MAX_REFUSAL_TEXT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("refused").to_owned()
    } else {
        text
    };
    rpc_error(status, INVALID_REQUEST, &message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_notifications_and_responses_are_messages() {
        for message in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "x"}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "no"}}),
        ] {
            assert!(is_message(&message), "{message}");
        }
    }

    #[test]
    fn anything_else_is_not() {
        for value in [
            json!([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]),
            json!({"id": 1, "method": "tools/list"}),
            json!({"jsonrpc": "1.0", "id": 1, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": "AAA"}),
            json!({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": null, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": 7}),
            json!({"jsonrpc": "2.0", "result": {}}),
            json!({"jsonrpc": "2.0"}),
            json!("hello"),
        ] {
            assert!(!is_message(&value), "{value}");
        }
    }
}
