//! The document's component schemas: ids, bodies, answers and refusals.
//!
//! A native body's schema is exactly what its handler accepts (its serde type
//! and the checks after it: a user message says something, an image is an
//! http(s) or base64 `data:` URL, ...), so that a request the schema allows is
//! never refused as invalid and one it forbids never accepted. A protocol's body
//! (AI SDK, AG-UI, A2A, MCP) is described by its shape only: what it asks for
//! depends on the conversation it continues (which message comes last, which
//! calls wait), which no schema can say.

use awaken_actors::{ID_PATTERN, MAX_ID_LEN};
use serde_json::{Map, Value as JsonValue, json};

use crate::runtime_config::Namespace;

/// Every component schema; `default_agent`: whether runs may leave their agent out.
pub(super) fn all(default_agent: bool) -> JsonValue {
    let mut schemas = Map::new();
    for (name, schema) in ids()
        .into_iter()
        .chain(answers())
        .chain(native_bodies(default_agent))
        .chain(protocol_bodies())
    {
        schemas.insert(name.into(), schema);
    }
    config_entries(&mut schemas);
    JsonValue::Object(schemas)
}

fn reference(name: &str) -> JsonValue {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// `schema`, or `null` (serde reads a `null` optional field as absent).
fn nullable(schema: JsonValue) -> JsonValue {
    json!({"anyOf": [schema, {"type": "null"}]})
}

fn object(required: &[&str], properties: JsonValue) -> JsonValue {
    json!({"type": "object", "required": required, "properties": properties})
}

fn ids() -> Vec<(&'static str, JsonValue)> {
    vec![
        (
            "Id",
            json!({
                "type": "string", "minLength": 1, "maxLength": MAX_ID_LEN, "pattern": ID_PATTERN,
                "description": "A thread, run, agent, call or decision id: 1 to 256 characters, no control character",
            }),
        ),
        (
            "EntryId",
            json!({"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"}),
        ),
        (
            "Namespace",
            json!({"type": "string", "enum": Namespace::ALL.map(Namespace::as_str)}),
        ),
        ("TaskState", json!({"type": "string", "enum": TASK_STATES})),
    ]
}

fn answers() -> Vec<(&'static str, JsonValue)> {
    let id = reference("Id");
    vec![
        (
            "Error",
            json!({"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}),
        ),
        (
            "A2aError",
            object(
                &["error"],
                json!({"error": object(&["code", "status", "message"], json!({
                    "code": {"type": "integer"},
                    "status": {"type": "string"},
                    "message": {"type": "string"},
                    "details": {"type": "array", "items": {"type": "object"}},
                }))}),
            ),
        ),
        (
            "Health",
            object(
                &["status"],
                json!({"status": {"type": "string"}, "error": {"type": "string"}}),
            ),
        ),
        ("Object", json!({"type": "object"})),
        (
            "ProtocolMessages",
            object(
                &["messages"],
                json!({"messages": {"type": "array", "items": {"type": "object"}}}),
            ),
        ),
        (
            "Thread",
            object(
                &["id", "metadata"],
                json!({"id": id, "metadata": {"type": "object"}}),
            ),
        ),
        (
            "ThreadIds",
            object(
                &["threads"],
                json!({"threads": {"type": "array", "items": id}}),
            ),
        ),
        (
            "ThreadSummaries",
            object(
                &["threads"],
                json!({"threads": {"type": "array", "items": object(&["thread"], json!({"thread": reference("Thread")}))}}),
            ),
        ),
        (
            "Run",
            object(
                &["run_id", "thread_id", "status"],
                json!({"run_id": id, "thread_id": id, "status": {"enum": ["running", "waiting", "done"]}}),
            ),
        ),
        (
            "RunPage",
            object(
                &["runs", "total"],
                json!({"runs": {"type": "array", "items": reference("Run")}, "total": {"type": "integer"}}),
            ),
        ),
        (
            "Queued",
            object(
                &["status", "thread_id", "run_id"],
                json!({"status": {"type": "string"}, "thread_id": id, "run_id": id, "dispatch_id": id}),
            ),
        ),
        (
            "MessagePage",
            object(
                &["messages"],
                json!({"messages": {"type": "array", "items": object(&["seq", "message"], json!({"seq": {"type": "integer"}, "message": {"type": "object"}}))}}),
            ),
        ),
        (
            "DispatchPage",
            object(
                &["dispatches", "total"],
                json!({"dispatches": {"type": "array", "items": {"type": "object"}}, "total": {"type": "integer"}}),
            ),
        ),
        (
            "Approval",
            object(
                &[
                    "approval_id",
                    "agent_id",
                    "thread_id",
                    "run_id",
                    "call_id",
                    "tool_name",
                    "ticket_id",
                    "action",
                    "message",
                    "requested_at",
                    "status",
                ],
                json!({
                    "approval_id": id, "agent_id": id, "thread_id": id, "run_id": id, "call_id": id,
                    "tenant": {"type": "string"},
                    "tool_name": {"type": "string"},
                    "arguments": {"description": "The call's arguments"},
                    "ticket_id": {"type": "string"},
                    "action": {"type": "string"},
                    "message": {"type": "string"},
                    "parameters": {},
                    "response_schema": {"description": "The JSON Schema an answer's `result` must match"},
                    "requested_at": {"type": "integer", "description": "Unix milliseconds"},
                    "expires_at": {"type": "integer"},
                    "status": {"enum": awaken_actors::contract::ApprovalStatus::ALL.map(|s| s.as_str())},
                    "resolved_at": {"type": "integer"},
                    "decision_id": id,
                    "answer": object(&["action"], json!({
                        "action": {"enum": ["resume", "cancel"]}, "result": {}, "reason": {"type": "string"},
                    })),
                    "cause": {"type": "string", "description": "Why it ended without a decision"},
                }),
            ),
        ),
        (
            "ApprovalPage",
            object(
                &["items"],
                json!({
                    "items": {"type": "array", "items": reference("Approval")},
                    "next_cursor": {"type": "string", "description": "Pass as `after` for the next page; absent on the last"},
                }),
            ),
        ),
        (
            "ApprovalRecord",
            object(
                &["event", "approval"],
                json!({
                    "event": {"enum": awaken_actors::contract::ApprovalEvent::ALL.map(|e| e.as_str())},
                    "approval": reference("Approval"),
                }),
            ),
        ),
        (
            "ApprovalDecisionAnswer",
            object(
                &["status", "duplicate", "approval"],
                json!({
                    "status": {"const": "decision_applied"},
                    "duplicate": {"type": "boolean"},
                    "approval": reference("Approval"),
                }),
            ),
        ),
        (
            "DecisionAnswer",
            json!({"type": "object", "description": "What became of the decision: applied, or a duplicate of one already applied"}),
        ),
        (
            "ConfigPage",
            object(
                &["namespace", "items", "total"],
                json!({"namespace": reference("Namespace"), "items": {"type": "array"}, "total": {"type": "integer"}}),
            ),
        ),
        (
            "AgentCard",
            object(
                &["name"],
                json!({"name": {"type": "string"}, "description": {"type": "string"}}),
            ),
        ),
        (
            "A2aTask",
            object(
                &["id", "contextId", "status"],
                json!({
                    "id": {"type": "string"}, "contextId": {"type": "string"},
                    "status": object(&["state"], json!({"state": reference("TaskState")})),
                    "artifacts": {"type": "array", "items": {"type": "object"}},
                    "history": {"type": "array", "items": {"type": "object"}},
                }),
            ),
        ),
        (
            "A2aSendAnswer",
            object(&["task"], json!({"task": reference("A2aTask")})),
        ),
        (
            "A2aTaskList",
            object(
                &["tasks", "nextPageToken", "pageSize", "totalSize"],
                json!({
                    "tasks": {"type": "array", "items": reference("A2aTask")},
                    "nextPageToken": {"type": "string"},
                    "pageSize": {"type": "integer"}, "totalSize": {"type": "integer"},
                }),
            ),
        ),
        (
            "A2aPushConfigAnswer",
            object(
                &["id", "taskId", "url"],
                json!({"id": {"type": "string"}, "taskId": {"type": "string"}, "url": {"type": "string"}}),
            ),
        ),
        (
            "A2aPushConfigList",
            object(
                &["configs"],
                json!({"configs": {"type": "array", "items": reference("A2aPushConfigAnswer")}, "nextPageToken": {"type": "string"}}),
            ),
        ),
        (
            "JsonRpcResponse",
            object(
                &["jsonrpc"],
                json!({
                    "jsonrpc": {"const": "2.0"},
                    "result": {},
                    "error": object(&["code", "message"], json!({"code": {"type": "integer"}, "message": {"type": "string"}})),
                }),
            ),
        ),
    ]
}

fn native_bodies(default_agent: bool) -> Vec<(&'static str, JsonValue)> {
    let id = reference("Id");
    let custom = json!({
        "type": ["object", "null"],
        "propertyNames": {"not": {"const": crate::server::auth::TENANT_KEY}},
        "description": "Free-form metadata; `awaken.tenant` is the server's",
    });
    let thread = |with_id: bool| {
        let mut properties = json!({"title": {"type": ["string", "null"]}, "custom": custom});
        if with_id {
            properties["id"] = nullable(id.clone());
        }
        json!({"type": "object", "additionalProperties": false, "properties": properties})
    };
    // Without a default agent a run must name its agent (a thread's earlier run
    // would do too, which a schema cannot know).
    let (agent, required) = if default_agent {
        (nullable(id.clone()), vec!["messages"])
    } else {
        (id.clone(), vec!["messages", "agentId"])
    };
    let input = |extra: JsonValue| {
        let mut properties = json!({
            "agentId": agent,
            "messages": {"type": "array", "minItems": 1, "maxItems": 256, "items": reference("InputMessage")},
        });
        if let (JsonValue::Object(properties), JsonValue::Object(extra)) = (&mut properties, extra)
        {
            properties.extend(extra);
        }
        json!({"type": "object", "additionalProperties": false, "required": required, "properties": properties})
    };
    vec![
        ("ThreadCreate", thread(true)),
        ("ThreadPatch", thread(false)),
        (
            "Decision",
            json!({
                "type": "object", "additionalProperties": false,
                "required": ["call_id", "decision_id", "action"],
                "description": "A decision on a suspended call, as on the NATS decision stream; the path names the thread or run (a publisher's `thread_id` and `run_id` fields, if sent, must name the same)",
                "properties": {
                    "call_id": id, "decision_id": id,
                    "action": {"enum": ["resume", "cancel"]},
                    "result": {"description": "The answer: `true`, edited arguments, a tool result"},
                    "reason": {"type": ["string", "null"]},
                    "updated_at": {"type": ["integer", "null"], "minimum": 0, "maximum": u64::MAX},
                },
            }),
        ),
        (
            "ApprovalDecision",
            json!({
                "type": "object", "additionalProperties": false,
                "required": ["action"],
                "description": "The answer to an approval; its call, run and thread are the approval's",
                "properties": {
                    "action": {"enum": ["resume", "cancel"]},
                    "result": {"description": "The answer: `{\"approved\": true}`, edited arguments, a tool result"},
                    "reason": {"type": ["string", "null"]},
                    "decision_id": nullable(id.clone()),
                },
            }),
        ),
        ("StartRun", input(json!({"threadId": nullable(id.clone())}))),
        (
            "Input",
            input(json!({
                "priority": {"type": ["integer", "null"], "minimum": 0, "maximum": 255},
                "dedupeKey": {"type": ["string", "null"]},
            })),
        ),
        (
            "InputMessage",
            json!({
                "type": "object", "additionalProperties": false, "required": ["role", "content"],
                "properties": {
                    "role": {"const": "user"},
                    "content": {"anyOf": [
                        {"type": "string", "pattern": "\\S"},
                        {"type": "array", "items": reference("ContentBlock"), "contains": reference("SaysSomething")},
                    ]},
                },
            }),
        ),
        (
            "ContentBlock",
            json!({"oneOf": [
                object(&["type", "text"], json!({"type": {"const": "text"}, "text": {"type": "string"}})),
                object(&["type", "text"], json!({"type": {"const": "reasoning"}, "text": {"type": "string"}, "signature": {"type": ["string", "null"]}})),
                reference("ImageBlock"),
            ]}),
        ),
        (
            "SaysSomething",
            json!({
                "description": "A block with more than blank text, or an image",
                "anyOf": [
                    {"required": ["text"], "properties": {"type": {"enum": ["text", "reasoning"]}, "text": {"type": "string", "pattern": "\\S"}}},
                    {"properties": {"type": {"const": "image"}}},
                ],
            }),
        ),
        ("ImageBlock", image_block()),
    ]
}

/// An image by URL (http, https or a base64 `data:image/…` URL) or by base64
/// `data` with its media type: exactly one of the two.
fn image_block() -> JsonValue {
    json!({
        "type": "object", "required": ["type"],
        "properties": {
            "type": {"const": "image"},
            "url": {"type": ["string", "null"], "pattern": IMAGE_URL},
            "data": {"type": ["string", "null"], "pattern": format!("^{BASE64}$")},
            "media_type": {"type": ["string", "null"], "pattern": MEDIA_TYPE},
        },
        "oneOf": [
            {"required": ["url"], "properties": {"url": {"type": "string"}, "data": {"type": "null"}}},
            {"required": ["data", "media_type"], "properties": {"data": {"type": "string"}, "media_type": {"type": "string"}, "url": {"type": "null"}}},
        ],
    })
}

/// A2A's task states, as the wire names them.
pub(super) const TASK_STATES: [&str; 9] = [
    "TASK_STATE_UNSPECIFIED",
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
];

/// Canonical, padded, non-empty base64 (what the server decodes).
const BASE64: &str = "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)";

/// An `image/…` media type: printable ASCII, at most 255 bytes.
pub(crate) const MEDIA_TYPE: &str = "^image/[!-~]{0,249}$";

/// An http(s) URL with a host name, or a base64 `data:image/…` URL.
const IMAGE_URL: &str = concat!(
    "^(?:https?://(?:[A-Za-z0-9]+\\.)*[A-Za-z][A-Za-z0-9]*(?::[0-9]{1,4})?(?:[/?#][!-~]*)?",
    "|data:image/[\\x21\\x22\\x24-\\x2b\\x2d-\\x3e\\x40-\\x7e]*;base64,",
    "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=))$",
);

fn protocol_bodies() -> Vec<(&'static str, JsonValue)> {
    let id = reference("Id");
    let text = json!({"type": ["string", "null"]});
    let push = json!({
        "type": "object", "required": ["url"],
        "properties": {
            "url": {"type": "string", "description": "A public https URL the notifications are POSTed to"},
            "id": text, "taskId": text, "tenant": text, "token": text,
            "authentication": {"anyOf": [{"type": "null"}, object(&["scheme"], json!({"scheme": {"type": "string"}, "credentials": text}))]},
        },
    });
    let jsonrpc = |description: &str| {
        json!({
            "type": "object", "required": ["jsonrpc", "method"], "description": description,
            "properties": {
                "jsonrpc": {"const": "2.0"},
                "id": {"type": ["string", "integer", "null"]},
                "method": {"type": "string"},
                "params": {"type": ["object", "array"]},
            },
        })
    };
    vec![
        (
            "AiSdkChat",
            json!({
                "type": "object", "required": ["messages"],
                "description": "The AI SDK v6 `DefaultChatTransport` body; the application's own `body` fields may come along. The last message is the input: a user message starts a run, an assistant message whose tool parts answer approvals resumes the waiting run.",
                "properties": {
                    "id": nullable(id.clone()), "threadId": nullable(id.clone()), "agentId": nullable(id.clone()),
                    "messages": {"type": "array", "minItems": 1, "maxItems": 10000, "items": object(&["role"], json!({
                        "id": text, "role": {"enum": ["system", "user", "assistant"]},
                        "parts": {"type": "array", "items": {"type": "object"}}, "content": text,
                    }))},
                    "trigger": {"enum": ["submit-message", "regenerate-message", null]},
                },
            }),
        ),
        (
            "RunAgentInput",
            json!({
                "type": "object", "required": ["messages"],
                "description": "AG-UI `RunAgentInput`; `state`, `tools`, `context` and `forwardedProps` are accepted and not used. The last message is the input, or `resume` answers the waiting run's interrupts.",
                "properties": {
                    "threadId": nullable(id.clone()), "runId": nullable(id.clone()), "parentRunId": text,
                    "agentId": nullable(id.clone()),
                    "messages": {"type": "array", "items": object(&["role"], json!({"id": text, "role": {"type": "string"}, "content": {}}))},
                    "resume": {"type": "array", "items": object(&["interruptId", "status"], json!({
                        "interruptId": {"type": "string"}, "status": {"enum": ["resolved", "cancelled"]}, "payload": {},
                    }))},
                },
            }),
        ),
        (
            "A2aSendMessage",
            json!({
                "type": "object", "required": ["message"],
                "description": "A2A v1.0 `SendMessageRequest`; see docs/a2a.md",
                "properties": {
                    "tenant": text,
                    "message": object(&["messageId", "role"], json!({
                        "messageId": {"type": "string"}, "contextId": text, "taskId": text,
                        "role": {"enum": ["ROLE_UNSPECIFIED", "ROLE_USER", "ROLE_AGENT"]},
                        "parts": {"type": "array", "items": {"type": "object", "properties": {
                            "text": text, "raw": text, "url": text, "data": {}, "metadata": {},
                            "filename": text, "mediaType": text,
                        }}},
                        "metadata": {},
                        "extensions": {"type": "array", "items": {"type": "string"}},
                        "referenceTaskIds": {"type": "array", "items": {"type": "string"}},
                    })),
                    "configuration": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
                        "acceptedOutputModes": {"type": "array", "items": {"type": "string"}},
                        "historyLength": {"type": ["integer", "null"], "minimum": i32::MIN, "maximum": i32::MAX},
                        "returnImmediately": {"type": "boolean"},
                        "taskPushNotificationConfig": {"anyOf": [{"type": "null"}, push]},
                    }}]},
                    "metadata": {},
                },
            }),
        ),
        ("A2aPushConfig", push),
        (
            "A2aJsonRpc",
            jsonrpc(
                "A JSON-RPC 2.0 request of A2A v1.0: `SendMessage`, `GetTask`, `ListTasks`, `CancelTask`, ...",
            ),
        ),
        (
            "McpJsonRpc",
            jsonrpc(
                "An MCP JSON-RPC 2.0 message (`initialize`, `tools/list`, `tools/call`, ...); see docs/mcp.md",
            ),
        ),
    ]
}

/// The config API's entries: each namespace's JSON Schema, its `$defs` lifted
/// into the components (as `Config_<namespace>_<def>`) so every reference
/// resolves against the document.
fn config_entries(schemas: &mut Map<String, JsonValue>) {
    let mut entries = Vec::new();
    for namespace in Namespace::ALL {
        let prefix = format!("Config_{}", namespace.as_str().replace('-', "_"));
        let mut schema = namespace.schema().clone();
        if let JsonValue::Object(fields) = &mut schema {
            fields.remove("$schema");
            if let Some(JsonValue::Object(definitions)) = fields.remove("$defs") {
                for (name, mut definition) in definitions {
                    rewrite_references(&mut definition, &prefix);
                    schemas.insert(format!("{prefix}_{name}"), definition);
                }
            }
        }
        rewrite_references(&mut schema, &prefix);
        entries.push(reference(&prefix));
        schemas.insert(prefix, schema);
    }
    schemas.insert(
        "ConfigEntry".into(),
        json!({"description": "An entry of the path's namespace", "anyOf": entries}),
    );
}

fn rewrite_references(schema: &mut JsonValue, prefix: &str) {
    match schema {
        JsonValue::Object(fields) => {
            for (key, value) in fields.iter_mut() {
                match value {
                    JsonValue::String(target) if key == "$ref" => {
                        if let Some(name) = target.strip_prefix("#/$defs/") {
                            *target = format!("#/components/schemas/{prefix}_{name}");
                        }
                    }
                    other => rewrite_references(other, prefix),
                }
            }
        }
        JsonValue::Array(items) => {
            for item in items {
                rewrite_references(item, prefix);
            }
        }
        _ => {}
    }
}
