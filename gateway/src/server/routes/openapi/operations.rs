//! The operation table of the OpenAPI document: one line per route.

use super::{Body, NONE, Operation, Success, op};

const PAGE: &[&str] = &["offset", "limit"];
const RUN_PAGE: &[&str] = &["status", "offset", "limit"];
const HISTORY: &[&str] = &["cursor", "limit", "visibility"];

use Body::{Json as In, None as NoBody};
use Success::{Empty, Events, Json as Out, Text};

/// Every operation, grouped as `docs/http.md` and `docs/protocols.md` are.
#[rustfmt::skip]
pub(super) const OPERATIONS: &[Operation] = &[
    op("get", "/health", "health", "Readiness: the store (and in a cluster NATS) answer", NoBody, Out(200), NONE),
    op("get", "/health/live", "health", "Liveness", NoBody, Out(200), NONE),
    op("get", "/metrics", "health", "Prometheus metrics (OpenMetrics text)", NoBody, Text, NONE),
    op("get", "/v1/openapi.json", "meta", "This document", NoBody, Out(200), NONE),
    op("get", "/v1/threads", "threads", "List thread ids", NoBody, Out(200), PAGE),
    op("post", "/v1/threads", "threads", "Create a thread", In("Thread"), Out(201), NONE),
    op("get", "/v1/threads/summaries", "threads", "List thread summaries", NoBody, Out(200), PAGE),
    op("get", "/v1/threads/{thread_id}", "threads", "Get a thread", NoBody, Out(200), NONE),
    op("patch", "/v1/threads/{thread_id}", "threads", "Update thread metadata", In("Thread"), Out(200), NONE),
    op("delete", "/v1/threads/{thread_id}", "threads", "Delete a thread with its messages, runs and state", NoBody, Empty(204), NONE),
    op("patch", "/v1/threads/{thread_id}/metadata", "threads", "Update thread metadata (alias)", In("Thread"), Out(200), NONE),
    op("post", "/v1/threads/{thread_id}/cancel", "threads", "Cancel the thread's active, waiting or queued run", NoBody, Out(202), NONE),
    op("post", "/v1/threads/{thread_id}/decision", "threads", "Decide a suspended tool call of the thread's waiting run", In("Decision"), Out(200), NONE),
    op("post", "/v1/threads/{thread_id}/interrupt", "threads", "Supersede queued runs and cancel the active one", NoBody, Out(202), NONE),
    op("get", "/v1/threads/{thread_id}/messages", "threads", "List messages, cursor-paged", NoBody, Out(200), HISTORY),
    op("post", "/v1/threads/{thread_id}/messages", "threads", "Submit messages as a background run", In("Input"), Out(202), NONE),
    op("get", "/v1/threads/{thread_id}/mailbox", "threads", "List the thread's dispatches", NoBody, Out(200), PAGE),
    op("post", "/v1/threads/{thread_id}/mailbox", "threads", "Push messages to the thread's mailbox", In("Input"), Out(202), NONE),
    op("get", "/v1/threads/{thread_id}/runs", "threads", "List the thread's runs", NoBody, Out(200), RUN_PAGE),
    op("get", "/v1/threads/{thread_id}/runs/latest", "threads", "The thread's latest run", NoBody, Out(200), NONE),
    op("get", "/v1/runs", "runs", "List runs", NoBody, Out(200), RUN_PAGE),
    op("post", "/v1/runs", "runs", "Start a run and stream its events", In("StartRun"), Events, NONE),
    op("get", "/v1/runs/{run_id}", "runs", "Get a run record (202 while queued)", NoBody, Out(200), NONE),
    op("get", "/v1/runs/{run_id}/events", "runs", "Stream a run's events; resume with Last-Event-ID", NoBody, Events, NONE),
    op("post", "/v1/runs/{run_id}/inputs", "runs", "Continue the run's thread with new input", In("Input"), Out(202), NONE),
    op("post", "/v1/runs/{run_id}/cancel", "runs", "Cancel a run", NoBody, Out(202), NONE),
    op("post", "/v1/runs/{run_id}/decision", "runs", "Decide a suspended tool call of a waiting run", In("Decision"), Out(200), NONE),
    op("post", "/v1/ai-sdk/chat", "ai-sdk", "AI SDK v6 chat: start a run or answer approvals", In("AiSdkChat"), Events, NONE),
    op("post", "/v1/ai-sdk/threads/{thread_id}/runs", "ai-sdk", "AI SDK v6 chat on a thread", In("AiSdkChat"), Events, NONE),
    op("post", "/v1/ai-sdk/agents/{agent_id}/runs", "ai-sdk", "AI SDK v6 chat with an agent", In("AiSdkChat"), Events, NONE),
    op("get", "/v1/ai-sdk/chat/{thread_id}/stream", "ai-sdk", "Resume the thread's running stream (204 when none)", NoBody, Events, NONE),
    op("get", "/v1/ai-sdk/threads/{thread_id}/stream", "ai-sdk", "Resume the thread's running stream (alias)", NoBody, Events, NONE),
    op("get", "/v1/ai-sdk/streams/{run_id}", "ai-sdk", "Replay a run as a UI message stream", NoBody, Events, NONE),
    op("get", "/v1/ai-sdk/runs/{run_id}/stream", "ai-sdk", "Replay a run as a UI message stream (alias)", NoBody, Events, NONE),
    op("get", "/v1/ai-sdk/threads/{thread_id}/messages", "ai-sdk", "The thread as UI messages", NoBody, Out(200), NONE),
    op("post", "/v1/ai-sdk/threads/{thread_id}/cancel", "ai-sdk", "Cancel the thread's run", NoBody, Out(202), NONE),
    op("post", "/v1/ai-sdk/threads/{thread_id}/interrupt", "ai-sdk", "Interrupt the thread", NoBody, Out(202), NONE),
    op("post", "/v1/ag-ui/run", "ag-ui", "AG-UI run (RunAgentInput)", In("RunAgentInput"), Events, NONE),
    op("post", "/v1/ag-ui/threads/{thread_id}/runs", "ag-ui", "AG-UI run on a thread", In("RunAgentInput"), Events, NONE),
    op("post", "/v1/ag-ui/agents/{agent_id}/runs", "ag-ui", "AG-UI run with an agent", In("RunAgentInput"), Events, NONE),
    op("post", "/v1/ag-ui/threads/{thread_id}/interrupt", "ag-ui", "Interrupt the thread", NoBody, Out(202), NONE),
    op("get", "/v1/ag-ui/threads/{thread_id}/messages", "ag-ui", "The thread as AG-UI messages", NoBody, Out(200), NONE),
    op("get", "/v1/capabilities", "config", "Agents, tools, plugins, models, providers, MCP servers, namespaces", NoBody, Out(200), NONE),
    op("get", "/v1/config/{namespace}", "config", "List a namespace's entries", NoBody, Out(200), PAGE),
    op("post", "/v1/config/{namespace}", "config", "Create an entry (the body holds its id)", In("ConfigEntry"), Out(201), NONE),
    op("get", "/v1/config/{namespace}/{id}", "config", "Get an entry; `$schema` as id gives the namespace's JSON Schema", NoBody, Out(200), NONE),
    op("put", "/v1/config/{namespace}/{id}", "config", "Replace an entry", In("ConfigEntry"), Out(200), NONE),
    op("delete", "/v1/config/{namespace}/{id}", "config", "Delete an entry", NoBody, Empty(204), NONE),
    op("get", "/v1/agents", "config", "List agents (alias of /v1/config/agents)", NoBody, Out(200), PAGE),
    op("get", "/v1/agents/{id}", "config", "Get an agent (alias of /v1/config/agents/{id})", NoBody, Out(200), NONE),
];
