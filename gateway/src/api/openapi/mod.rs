//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of every route the server
//! answers, as the node is configured: with API keys every route but the probes
//! and the agent cards declares the bearer key; without keys none does.
//!
//! The document is what clients are generated from and what the suite's
//! schemathesis run holds the server to (`gateway/tests/http_openapi_fuzz.rs`):
//! every parameter, header and body the server reads, and every status it answers
//! with the body of its protocol (the native error, A2A's `google.rpc.Status`,
//! JSON-RPC's). A unit test keeps [`OPERATIONS`] equal to what the routers serve.

mod describe;
mod operations;
mod schemas;

use std::sync::LazyLock;

use axum::Json;
use axum::extract::{FromRef, State};
use serde_json::{Map, Value as JsonValue, json};

use crate::runs::RunService;
use crate::server::auth::Caller;
use crate::server::table::Routes;
use operations::OPERATIONS;

/// The document's route. It sits behind the keys like the API it describes,
/// so the caller's key tells which document applies.
pub(crate) fn routes<S>() -> Routes<S>
where
    S: Clone + Send + Sync + 'static,
    RunService: FromRef<S>,
{
    Routes::new().get("/v1/openapi.json", document)
}

async fn document(State(runs): State<RunService>, caller: Caller) -> Json<JsonValue> {
    let variant = Variant {
        security: if caller.is_tenant() {
            Security::Keys
        } else {
            Security::Open
        },
        default_agent: runs.default_agent().is_some(),
    };
    Json(variant.document().clone())
}

/// What of the node's configuration the document depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Variant {
    /// Whether requests present an API key.
    security: Security,
    /// Whether a run may leave out its agent (the node has a default agent, as
    /// the config API may change): without one, `agentId` is required.
    default_agent: bool,
}

impl Variant {
    fn document(self) -> &'static JsonValue {
        static DOCUMENTS: [LazyLock<JsonValue>; 4] = [
            LazyLock::new(|| build(Variant::ALL[0])),
            LazyLock::new(|| build(Variant::ALL[1])),
            LazyLock::new(|| build(Variant::ALL[2])),
            LazyLock::new(|| build(Variant::ALL[3])),
        ];
        &DOCUMENTS[self.index()]
    }

    /// Where the variant stands in [`Self::ALL`].
    const fn index(self) -> usize {
        let keys = match self.security {
            Security::Open => 0,
            Security::Keys => 2,
        };
        if self.default_agent { keys + 1 } else { keys }
    }

    const ALL: [Self; 4] = [
        Self::new(Security::Open, false),
        Self::new(Security::Open, true),
        Self::new(Security::Keys, false),
        Self::new(Security::Keys, true),
    ];

    const fn new(security: Security, default_agent: bool) -> Self {
        Self {
            security,
            default_agent,
        }
    }
}

/// Whether the node checks API keys: the document declares them only then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Security {
    /// No `server.api_keys`: nothing to present.
    Open,
    /// `Authorization: Bearer <key>` on every route but the probes and cards.
    Keys,
}

/// Which protocol a route speaks: it decides the error bodies, the headers it
/// reads and whether it needs a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// Health probes: open, `{"status"}` bodies.
    Health,
    /// `/metrics`: OpenMetrics text, behind the keys.
    Metrics,
    /// The native API, the AI SDK and AG-UI routes: `{"error": "..."}` refusals.
    Native,
    /// A2A agent cards: open, A2A refusals.
    Card,
    /// The A2A HTTP+JSON binding: `A2A-Version`, `google.rpc.Status` refusals.
    A2aRest,
    /// The A2A JSON-RPC binding: errors inside a JSON-RPC response.
    A2aRpc,
    /// MCP over streamable HTTP: JSON-RPC.
    Mcp,
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
    /// JSON of this component schema, with this status.
    Json(u16, &'static str),
    /// 200 with the first schema, or 202 with the second (a run still queued).
    Accepted(&'static str, &'static str),
    /// No content.
    Empty(u16),
    /// 200 with this schema, or 204 when there is nothing to show yet.
    Maybe(&'static str),
    /// A `text/event-stream` (200); 204 when there is nothing to follow.
    Events,
    /// OpenMetrics text.
    Text,
    /// An A2A task as JSON, or (for `{id}:subscribe`) its events as a stream.
    TaskOrEvents,
}

/// One route as the document describes it.
#[derive(Debug, Clone, Copy)]
struct Operation {
    method: &'static str,
    path: &'static str,
    family: Family,
    tag: &'static str,
    summary: &'static str,
    body: Body,
    success: Success,
    query: &'static [&'static str],
}

#[allow(clippy::too_many_arguments)]
const fn op(
    method: &'static str,
    path: &'static str,
    family: Family,
    tag: &'static str,
    summary: &'static str,
    body: Body,
    success: Success,
    query: &'static [&'static str],
) -> Operation {
    Operation {
        method,
        path,
        family,
        tag,
        summary,
        body,
        success,
        query,
    }
}

fn build(variant: Variant) -> JsonValue {
    let security = variant.security;
    let mut paths = Map::new();
    for operation in OPERATIONS {
        let item = paths
            .entry(operation.path)
            .or_insert_with(|| JsonValue::Object(Map::new()));
        if let JsonValue::Object(item) = item {
            item.insert(
                operation.method.into(),
                describe::operation(operation, security),
            );
        }
    }
    let mut components = json!({"schemas": schemas::all(variant.default_agent)});
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Awaken Cluster",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The Run API, the AI SDK v6, AG-UI, A2A and MCP adapters and the config API of `awaken serve`. Native refusals are `{\"error\": \"...\"}`, A2A's HTTP+JSON refusals `google.rpc.Status` bodies, JSON-RPC errors JSON-RPC responses; see docs/http.md.",
        },
        "paths": paths,
    });
    if security == Security::Keys {
        components["securitySchemes"] = json!({
            "bearer": {"type": "http", "scheme": "bearer", "description": "An API key of `server.api_keys`"},
        });
        document["security"] = json!([{"bearer": []}]);
    }
    document["components"] = components;
    document
}

#[cfg(test)]
mod tests;
