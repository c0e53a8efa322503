//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of every route the server
//! answers. A unit test keeps [`OPERATIONS`] equal to what the routers serve.

mod operations;

use std::sync::LazyLock;

use axum::Json;
use serde_json::{Map, Value as JsonValue, json};

use crate::runtime_config::Namespace;
use crate::server::table::Routes;
use operations::OPERATIONS;

/// The document's route.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Routes<S> {
    Routes::new().get("/v1/openapi.json", document)
}

async fn document() -> Json<JsonValue> {
    Json(DOCUMENT.clone())
}

/// A request body.
#[derive(Debug, Clone, Copy)]
enum Body {
    /// No body.
    None,
    /// JSON of this component schema.
    Json(&'static str),
}

/// The answer when all goes well.
#[derive(Debug, Clone, Copy)]
enum Success {
    /// JSON with this status.
    Json(u16),
    /// No content.
    Empty(u16),
    /// A `text/event-stream` (200).
    Events,
    /// `text/plain` (the metrics).
    Text,
}

/// One route as the document describes it.
#[derive(Debug, Clone, Copy)]
struct Operation {
    method: &'static str,
    path: &'static str,
    tag: &'static str,
    summary: &'static str,
    body: Body,
    success: Success,
    query: &'static [&'static str],
}

const fn op(
    method: &'static str,
    path: &'static str,
    tag: &'static str,
    summary: &'static str,
    body: Body,
    success: Success,
    query: &'static [&'static str],
) -> Operation {
    Operation {
        method,
        path,
        tag,
        summary,
        body,
        success,
        query,
    }
}

/// No query parameters.
const NONE: &[&str] = &[];

static DOCUMENT: LazyLock<JsonValue> = LazyLock::new(build);

fn build() -> JsonValue {
    let mut paths = Map::new();
    for operation in OPERATIONS {
        let item = paths
            .entry(operation.path)
            .or_insert_with(|| JsonValue::Object(Map::new()));
        if let JsonValue::Object(item) = item {
            item.insert(operation.method.into(), describe(operation));
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Awaken Cluster",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The Run API, the AI SDK v6, AG-UI and A2A adapters and the config API of `awaken serve`. Every refusal is `{\"error\": \"...\"}`; see docs/http.md.",
        },
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas(),
        },
    })
}

fn describe(operation: &Operation) -> JsonValue {
    let mut parameters: Vec<JsonValue> = operation
        .path
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect();
    parameters.extend(operation.query.iter().map(|name| {
        let schema = match *name {
            "offset" | "cursor" => json!({"type": "integer", "minimum": 0}),
            "limit" => json!({"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
            "status" => json!({"type": "string", "enum": ["running", "waiting", "done"]}),
            "pageSize" | "historyLength" => json!({"type": "integer", "minimum": 0}),
            "contextId" | "pageToken" => json!({"type": "string"}),
            _ => json!({"type": "string", "enum": ["external", "all"]}),
        };
        json!({"name": name, "in": "query", "required": false, "schema": schema})
    }));
    if matches!(operation.success, Success::Events) && operation.method == "get" {
        parameters.push(json!({
            "name": "Last-Event-ID", "in": "header", "required": false,
            "schema": {"type": "string"},
            "description": "Resume after this event (its `seq`)",
        }));
    }
    let (status, success) = match operation.success {
        Success::Json(status) => (
            status,
            json!({"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}),
        ),
        Success::Empty(status) => (status, json!({"description": "Done"})),
        Success::Events => (
            200,
            json!({"description": "Server-sent events", "content": {"text/event-stream": {"schema": {"type": "string"}}}}),
        ),
        Success::Text => (
            200,
            json!({"description": "OpenMetrics text", "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}}),
        ),
    };
    let error = json!({
        "description": "Refused: {\"error\": \"...\"} with the status that says why",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    });
    let mut described = json!({
        "tags": [operation.tag],
        "summary": operation.summary,
        "operationId": format!("{}_{}", operation.method, operation.path.trim_start_matches('/').replace(['/', '{', '}', '.', '-'], "_")),
        "parameters": parameters,
        "responses": {status.to_string(): success, "default": error},
    });
    if operation.path.starts_with("/health")
        || operation.path.ends_with("agent-card.json")
        || operation.path.ends_with("extendedAgentCard")
    {
        described["security"] = json!([]);
    }
    if let Body::Json(schema) = operation.body {
        described["requestBody"] = json!({
            "required": true,
            "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}},
        });
    }
    described
}

fn schemas() -> JsonValue {
    let object = |description: &str| json!({"type": "object", "description": description});
    let mut schemas = Map::new();
    schemas.insert(
        "Error".into(),
        json!({"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}),
    );
    for (name, description) in [
        (
            "Thread",
            "`{\"id\"?, \"title\"?, \"custom\"?}`; see docs/http.md, Threads",
        ),
        (
            "Decision",
            "`DecisionPayload`: `{\"toolCallId\", \"action\": \"resume\" | \"cancel\", \"result\"?, \"reason\"?, \"decisionId\"?}`",
        ),
        (
            "Input",
            "`{\"messages\": [...], \"agentId\"?, \"dedupeKey\"?}`",
        ),
        (
            "StartRun",
            "`{\"messages\": [...], \"agentId\"?, \"threadId\"?}`",
        ),
        (
            "AiSdkChat",
            "The AI SDK v6 `DefaultChatTransport` body: `{\"id\", \"messages\": [UIMessage], \"trigger\"?}`",
        ),
        (
            "A2aSendMessage",
            "A2A v1.0 `SendMessageRequest`: `{\"message\": {\"messageId\", \"role\": \"ROLE_USER\", \"parts\", \"contextId\"?, \"taskId\"?}, \"configuration\"?}`; see docs/a2a.md",
        ),
        (
            "A2aJsonRpc",
            "A JSON-RPC 2.0 request: `{\"jsonrpc\": \"2.0\", \"id\", \"method\": \"SendMessage\" | \"GetTask\" | ..., \"params\"}`",
        ),
        (
            "McpJsonRpc",
            "An MCP JSON-RPC 2.0 message (`initialize`, `tools/list`, `tools/call`, ...) over streamable HTTP; see docs/mcp.md",
        ),
        (
            "A2aPushConfig",
            "`{\"url\", \"token\"?, \"id\"?, \"authentication\"?: {\"scheme\", \"credentials\"}}`",
        ),
        (
            "RunAgentInput",
            "AG-UI `RunAgentInput`: `{\"threadId\", \"runId\", \"messages\", \"resume\"?, ...}`",
        ),
    ] {
        schemas.insert(name.into(), object(description));
    }
    let mut entries = Vec::new();
    for namespace in Namespace::ALL {
        let mut schema = namespace.schema().clone();
        if let JsonValue::Object(fields) = &mut schema {
            // Its `$defs` references resolve against this id, not the document.
            fields.insert(
                "$id".into(),
                json!(format!("urn:awaken:config:{namespace}")),
            );
            fields.remove("$schema");
        }
        let name = format!("Config_{}", namespace.as_str().replace('-', "_"));
        entries.push(json!({"$ref": format!("#/components/schemas/{name}")}));
        schemas.insert(name, schema);
    }
    schemas.insert(
        "ConfigEntry".into(),
        json!({"description": "An entry of the path's namespace", "oneOf": entries}),
    );
    JsonValue::Object(schemas)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_document_describes_exactly_the_served_routes() {
        let served: BTreeSet<(String, String)> = crate::server::served_routes()
            .into_iter()
            .map(|(method, path)| (method.as_str().to_lowercase(), path.to_owned()))
            .collect();
        let documented: BTreeSet<(String, String)> = DOCUMENT["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                item.as_object()
                    .unwrap()
                    .keys()
                    .map(move |method| (method.clone(), path.clone()))
            })
            .collect();
        let undocumented: Vec<_> = served.difference(&documented).collect();
        let unserved: Vec<_> = documented.difference(&served).collect();
        assert!(
            undocumented.is_empty(),
            "served, not documented: {undocumented:?}"
        );
        assert!(unserved.is_empty(), "documented, not served: {unserved:?}");
        assert_eq!(
            served.len(),
            OPERATIONS.len(),
            "no operation is listed twice"
        );
    }

    #[test]
    fn every_reference_resolves_and_ids_are_unique() {
        let text = DOCUMENT.to_string();
        for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = reference.split('"').next().unwrap();
            assert!(
                DOCUMENT["components"]["schemas"].get(name).is_some(),
                "{name}"
            );
        }
        let ids: BTreeSet<String> = OPERATIONS
            .iter()
            .map(|op| describe(op)["operationId"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids.len(), OPERATIONS.len());
    }
}
