//! One operation of the table as an OpenAPI operation object: its parameters,
//! body, answers and links.

use serde_json::{Map, Value as JsonValue, json};

use super::{Body, Family, Operation, Security, Success};

/// The operation object of `operation` on a node with `security`.
pub(super) fn operation(operation: &Operation, security: Security) -> JsonValue {
    let mut described = json!({
        "tags": [operation.tag],
        "summary": operation.summary,
        "operationId": operation_id(operation.method, operation.path),
        "parameters": parameters(operation),
        "responses": responses(operation, security),
    });
    if security == Security::Keys && !needs_key(operation.family) {
        described["security"] = json!([]);
    }
    if let Body::Json(schema) = operation.body {
        described["requestBody"] = json!({
            "required": true,
            "content": {"application/json": {"schema": reference(schema)}},
        });
    }
    described
}

/// The id every generated client names the operation by; links refer to it.
pub(super) fn operation_id(method: &str, path: &str) -> String {
    format!(
        "{method}_{}",
        path.trim_start_matches('/')
            .replace(['/', '{', '}', '.', '-', ':'], "_")
    )
}

fn needs_key(family: Family) -> bool {
    !matches!(family, Family::Health | Family::Card)
}

fn reference(schema: &str) -> JsonValue {
    json!({"$ref": format!("#/components/schemas/{schema}")})
}

fn parameters(operation: &Operation) -> Vec<JsonValue> {
    let mut parameters: Vec<JsonValue> = operation
        .path
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            json!({
                "name": name, "in": "path", "required": true,
                "schema": path_schema(name, operation.method),
            })
        })
        .collect();
    parameters.extend(operation.query.iter().map(|name| {
        let schema = if operation.path.starts_with("/v1/approvals") {
            approval_query_schema(name)
        } else {
            query_schema(name, operation.family)
        };
        json!({"name": name, "in": "query", "required": false, "schema": schema})
    }));
    if operation.family == Family::A2aRest || operation.path.ends_with("extendedAgentCard") {
        parameters.push(json!({
            "name": "A2A-Version", "in": "header", "required": true,
            "schema": {"type": "string", "pattern": "^1(\\.[0-9]+)*$"},
            "description": "The A2A protocol version the request is written in: this server speaks 1.x, and reads a request without the header as 0.3, which it refuses",
        }));
    }
    if operation.path == "/v1/approvals/stream" {
        parameters.push(json!({
            "name": "Last-Event-ID", "in": "header", "required": false,
            "schema": {"type": "string", "pattern": "^[!-~]{0,128}$"},
            "description": "Resume after this frame (its `id`); empty: only new records",
        }));
    }
    if operation.path == "/v1/runs/{run_id}/events" {
        parameters.push(json!({
            "name": "Last-Event-ID", "in": "header", "required": false,
            "schema": {"type": "string", "pattern": "^[0-9]{0,19}$"},
            "description": "Resume after this event (its `seq`); empty: from the start",
        }));
    }
    parameters
}

fn path_schema(name: &str, method: &str) -> JsonValue {
    match name {
        "namespace" => reference("Namespace"),
        // `$schema` reads the namespace's JSON Schema; it names no entry.
        "id" if method == "get" => json!({"anyOf": [reference("EntryId"), {"const": "$schema"}]}),
        "id" => reference("EntryId"),
        _ => reference("Id"),
    }
}

/// The inbox's query parameters.
fn approval_query_schema(name: &str) -> JsonValue {
    match name {
        "status" => {
            json!({"type": "string", "enum": awaken_actors::contract::ApprovalStatus::ALL.map(|s| s.as_str())})
        }
        "older_than" | "newer_than" => json!({
            "type": "integer", "minimum": 0, "maximum": u64::MAX,
            "description": "Age of the request, in seconds",
        }),
        "after" => json!({
            "type": "string", "pattern": "^[0-9]{1,20}\\.[^\\u0000-\\u001f\\u007f-\\u009f]{1,256}$",
            "description": "The `next_cursor` of the previous page",
        }),
        "tool" => {
            json!({"type": "string", "pattern": awaken_actors::ID_PATTERN, "description": "A tool name"})
        }
        "agent_id" | "thread_id" => reference("Id"),
        "event" => {
            json!({"type": "string", "enum": awaken_actors::contract::ApprovalEvent::ALL.map(|e| e.as_str())})
        }
        other => query_schema(other, Family::Native),
    }
}

fn query_schema(name: &str, family: Family) -> JsonValue {
    match name {
        "offset" | "cursor" => json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}),
        "limit" => json!({
            "type": "integer", "minimum": 0, "maximum": u64::MAX, "default": 50,
            "description": "Page size, clamped to 1..=200",
        }),
        "status" if family == Family::A2aRest => reference("TaskState"),
        "status" => json!({"type": "string", "enum": ["running", "waiting", "done"]}),
        "visibility" => json!({"type": "string", "enum": ["external", "all"]}),
        "pageSize" | "historyLength" => {
            json!({"type": "integer", "minimum": 0, "maximum": i32::MAX})
        }
        "pageToken" => json!({
            "type": "string", "pattern": "^[0-9]{0,18}$",
            "description": "The `nextPageToken` of the previous page",
        }),
        _ => json!({"type": "string", "maxLength": 256, "pattern": awaken_actors::ID_PATTERN}),
    }
}

fn responses(operation: &Operation, security: Security) -> JsonValue {
    let mut responses = Map::new();
    match operation.success {
        Success::Json(status, schema) => {
            let mut answer = json_answer("OK", reference(schema));
            if let Some(links) = links(operation) {
                answer["links"] = links;
            }
            responses.insert(status.to_string(), answer);
        }
        Success::Accepted(done, queued) => {
            responses.insert("200".into(), json_answer("OK", reference(done)));
            responses.insert(
                "202".into(),
                json_answer("Queued: not started yet", reference(queued)),
            );
        }
        Success::Maybe(schema) => {
            responses.insert("200".into(), json_answer("OK", reference(schema)));
            responses.insert("204".into(), json!({"description": "Nothing yet"}));
        }
        Success::Empty(status) => {
            responses.insert(status.to_string(), json!({"description": "Done"}));
        }
        Success::Events if operation.path == "/v1/approvals/stream" => {
            // One event per record: `data` an `ApprovalRecord` (or the gap
            // marker) as JSON, `id` its position (none on a gap).
            responses.insert(
                "200".into(),
                json!({"description": "Server-sent events, one per approval record", "content": {"text/event-stream": {"schema": {
                    "type": "object",
                    "properties": {
                        "data": {
                            "type": "string", "contentMediaType": "application/json",
                            "contentSchema": {"anyOf": [reference("ApprovalRecord"), {"type": "object", "properties": {"event": {"const": "gap"}}, "required": ["event"]}]},
                        },
                        "event": {"const": "message"},
                        "id": {"type": "string", "pattern": "^[!-~]{1,128}$"},
                    },
                    "required": ["data"],
                }}}}),
            );
        }
        Success::Events => {
            responses.insert(
                "200".into(),
                json!({"description": "Server-sent events", "content": {"text/event-stream": {"schema": {"type": "string"}}}}),
            );
            if operation.method == "get"
                && operation.path.ends_with("/stream")
                && !operation.path.starts_with("/v1/approvals")
            {
                responses.insert(
                    "204".into(),
                    json!({"description": "No run of the thread is running"}),
                );
            }
        }
        Success::TaskOrEvents => {
            responses.insert(
                "200".into(),
                json!({"description": "The task; for `{id}:subscribe`, its events", "content": {
                    "application/json": {"schema": reference("A2aTask")},
                    "text/event-stream": {"schema": {"type": "string"}},
                }}),
            );
        }
        Success::Text => {
            responses.insert(
                "200".into(),
                json!({"description": "OpenMetrics text", "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}}),
            );
        }
    }
    if operation.family == Family::Mcp {
        responses.insert(
            "202".into(),
            json!({"description": "A notification or response taken (no body)"}),
        );
    }
    for (status, description, schema) in refusals(operation, security) {
        responses.insert(status.into(), json_answer(description, schema));
    }
    JsonValue::Object(responses)
}

fn json_answer(description: &str, schema: JsonValue) -> JsonValue {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

/// What the route refuses with, by status: the refusals of the server's edge
/// (a missing key, a body too slow or too large, a full node) are native
/// errors whatever the protocol; the routes' own are the protocol's.
fn refusals(
    operation: &Operation,
    security: Security,
) -> Vec<(&'static str, &'static str, JsonValue)> {
    let native = reference("Error");
    let mut refusals = Vec::new();
    if security == Security::Keys && needs_key(operation.family) {
        refusals.push(("401", "No or an unknown API key", native.clone()));
    }
    let own = match operation.family {
        Family::Health => {
            refusals.push((
                "503",
                "Not ready: draining, saturated or a dependency down",
                reference("Health"),
            ));
            return refusals;
        }
        Family::Metrics => {
            refusals.push(("500", "The metrics could not be encoded", native));
            return refusals;
        }
        Family::Native => native.clone(),
        // The edge refuses some requests (a NUL in the body, one too slow)
        // before the protocol's own code reads them.
        Family::Card | Family::A2aRest => json!({"anyOf": [native, reference("A2aError")]}),
        Family::A2aRpc | Family::Mcp => {
            let rpc = json!({"anyOf": [native, reference("JsonRpcResponse")]});
            if operation.family == Family::Mcp {
                for (status, description) in [
                    ("400", "Not JSON, or not a JSON-RPC message"),
                    (
                        "406",
                        "The `Accept` header does not name both `application/json` and `text/event-stream`, as streamable HTTP requires",
                    ),
                    ("415", "Not `application/json`"),
                ] {
                    refusals.push((status, description, rpc.clone()));
                }
            }
            refusals.push(("default", "Refused: the status says why", rpc));
            return refusals;
        }
    };
    refusals.push(("400", "Invalid input", own.clone()));
    if operation.path.contains('{') || operation.family != Family::Native {
        refusals.push(("404", "Unknown id", own.clone()));
    }
    refusals.push(("default", "Refused: the status says why", own));
    refusals
}

/// Links from an answer that names ids to the operations taking them, so
/// generated clients (and stateful testing) can follow a created thread.
fn links(operation: &Operation) -> Option<JsonValue> {
    let from = match (operation.method, operation.path) {
        ("post", "/v1/threads") => "$response.body#/id",
        ("get", "/v1/threads") => "$response.body#/threads/0",
        _ => return None,
    };
    let mut links = Map::new();
    // The thread's own routes; its latest run is a run (none yet on a new one).
    for target in super::OPERATIONS.iter().filter(|target| {
        target.path.starts_with("/v1/threads/{thread_id}")
            && target.path.matches('{').count() == 1
            && !target.path.ends_with("/runs/latest")
    }) {
        let id = operation_id(target.method, target.path);
        links.insert(
            id.clone(),
            json!({"operationId": id, "parameters": {"thread_id": from}}),
        );
    }
    Some(JsonValue::Object(links))
}
