//! The operation table of the OpenAPI document: one line per route.

use super::{Body, Family, Operation, Success, op};

const PAGE: &[&str] = &["offset", "limit"];
const RUN_PAGE: &[&str] = &["status", "offset", "limit"];
const HISTORY: &[&str] = &["cursor", "limit", "visibility"];
const APPROVAL_PAGE: &[&str] = &[
    "status",
    "agent_id",
    "tool",
    "thread_id",
    "older_than",
    "newer_than",
    "after",
    "limit",
];
const APPROVAL_STREAM: &[&str] = &["event", "agent_id", "tool", "thread_id"];
const A2A_LIST: &[&str] = &[
    "contextId",
    "status",
    "pageSize",
    "pageToken",
    "historyLength",
];
const A2A_GET: &[&str] = &["historyLength"];
/// No query parameters.
const NONE: &[&str] = &[];

use Body::{Json as In, None as NoBody};
use Family::{A2aRest, A2aRpc, Card, Health, Mcp, Metrics, Native};
use Success::{Accepted, Empty, Events, Json as Out, Text};

/// Every operation, grouped as `docs/http.md` and `docs/protocols.md` are.
#[rustfmt::skip]
pub(super) const OPERATIONS: &[Operation] = &[
    op("get", "/health", Health, "health", "Readiness: the store (and in a cluster NATS) answer", NoBody, Out(200, "Health"), NONE),
    op("get", "/health/ready", Health, "health", "Readiness, as `/health`: 503 while the node drains", NoBody, Out(200, "Health"), NONE),
    op("get", "/health/live", Health, "health", "Liveness", NoBody, Out(200, "Health"), NONE),
    op("get", "/metrics", Metrics, "health", "Prometheus metrics (OpenMetrics text)", NoBody, Text, NONE),
    op("get", "/v1/openapi.json", Native, "meta", "This document", NoBody, Out(200, "Object"), NONE),
    op("get", "/v1/threads", Native, "threads", "List thread ids, newest first", NoBody, Out(200, "ThreadIds"), PAGE),
    op("post", "/v1/threads", Native, "threads", "Create a thread", In("ThreadCreate"), Out(201, "Thread"), NONE),
    op("get", "/v1/threads/summaries", Native, "threads", "List thread summaries", NoBody, Out(200, "ThreadSummaries"), PAGE),
    op("get", "/v1/threads/{thread_id}", Native, "threads", "Get a thread", NoBody, Out(200, "Thread"), NONE),
    op("patch", "/v1/threads/{thread_id}", Native, "threads", "Update thread metadata", In("ThreadPatch"), Out(200, "Thread"), NONE),
    op("delete", "/v1/threads/{thread_id}", Native, "threads", "Delete a thread with its messages, runs and state (409 while a run is active, waiting or queued)", NoBody, Empty(204), NONE),
    op("patch", "/v1/threads/{thread_id}/metadata", Native, "threads", "Update thread metadata (alias)", In("ThreadPatch"), Out(200, "Thread"), NONE),
    op("post", "/v1/threads/{thread_id}/cancel", Native, "threads", "Cancel the thread's active, waiting or queued run", NoBody, Out(202, "Object"), NONE),
    op("post", "/v1/threads/{thread_id}/decision", Native, "threads", "Decide a suspended tool call of the thread's waiting run", In("Decision"), Out(200, "DecisionAnswer"), NONE),
    op("post", "/v1/threads/{thread_id}/interrupt", Native, "threads", "Supersede queued runs and cancel the active one", NoBody, Out(202, "Object"), NONE),
    op("get", "/v1/threads/{thread_id}/messages", Native, "threads", "List messages, cursor-paged", NoBody, Out(200, "MessagePage"), HISTORY),
    op("post", "/v1/threads/{thread_id}/messages", Native, "threads", "Submit messages as a background run", In("Input"), Out(202, "Queued"), NONE),
    op("get", "/v1/threads/{thread_id}/mailbox", Native, "threads", "List the thread's dispatches", NoBody, Out(200, "DispatchPage"), PAGE),
    op("post", "/v1/threads/{thread_id}/mailbox", Native, "threads", "Push messages to the thread's mailbox", In("Input"), Out(202, "Queued"), NONE),
    op("get", "/v1/threads/{thread_id}/runs", Native, "threads", "List the thread's runs", NoBody, Out(200, "RunPage"), RUN_PAGE),
    op("get", "/v1/threads/{thread_id}/runs/latest", Native, "threads", "The thread's latest run (204 when it has run nothing yet)", NoBody, Success::Maybe("Run"), NONE),
    op("get", "/v1/runs", Native, "runs", "List runs", NoBody, Out(200, "RunPage"), RUN_PAGE),
    op("post", "/v1/runs", Native, "runs", "Start a run and stream its events", In("StartRun"), Events, NONE),
    op("get", "/v1/runs/{run_id}", Native, "runs", "Get a run record (202 while queued)", NoBody, Accepted("Run", "Queued"), NONE),
    op("get", "/v1/runs/{run_id}/events", Native, "runs", "Stream a run's events; resume with Last-Event-ID", NoBody, Events, NONE),
    op("post", "/v1/runs/{run_id}/inputs", Native, "runs", "Continue the run's thread with new input", In("Input"), Out(202, "Queued"), NONE),
    op("post", "/v1/runs/{run_id}/cancel", Native, "runs", "Cancel a run", NoBody, Out(202, "Object"), NONE),
    op("post", "/v1/runs/{run_id}/decision", Native, "runs", "Decide a suspended tool call of a waiting run", In("Decision"), Out(200, "DecisionAnswer"), NONE),
    op("get", "/v1/approvals", Native, "approvals", "List approvals, oldest request first, cursor-paged (the caller's tenant's with API keys)", NoBody, Out(200, "ApprovalPage"), APPROVAL_PAGE),
    op("get", "/v1/approvals/stream", Native, "approvals", "Stream approval records as they are stored (`data`: `{event, approval}`; `{\"event\":\"gap\"}` when records were missed); resume with Last-Event-ID", NoBody, Events, APPROVAL_STREAM),
    op("get", "/v1/approvals/{approval_id}", Native, "approvals", "Get an approval", NoBody, Out(200, "Approval"), NONE),
    op("post", "/v1/approvals/{approval_id}/decision", Native, "approvals", "Decide an approval (the same answer again is a duplicate; another answer to a resolved approval is 409)", In("ApprovalDecision"), Out(200, "ApprovalDecisionAnswer"), NONE),
    op("post", "/v1/ai-sdk/chat", Native, "ai-sdk", "AI SDK v6 chat: start a run or answer approvals", In("AiSdkChat"), Events, NONE),
    op("post", "/v1/ai-sdk/threads/{thread_id}/runs", Native, "ai-sdk", "AI SDK v6 chat on a thread", In("AiSdkChat"), Events, NONE),
    op("post", "/v1/ai-sdk/agents/{agent_id}/runs", Native, "ai-sdk", "AI SDK v6 chat with an agent", In("AiSdkChat"), Events, NONE),
    op("get", "/v1/ai-sdk/chat/{thread_id}/stream", Native, "ai-sdk", "Resume the thread's running stream (204 when none)", NoBody, Events, NONE),
    op("get", "/v1/ai-sdk/threads/{thread_id}/stream", Native, "ai-sdk", "Resume the thread's running stream (alias)", NoBody, Events, NONE),
    op("get", "/v1/ai-sdk/streams/{run_id}", Native, "ai-sdk", "Replay a run as a UI message stream", NoBody, Events, NONE),
    op("get", "/v1/ai-sdk/runs/{run_id}/stream", Native, "ai-sdk", "Replay a run as a UI message stream (alias)", NoBody, Events, NONE),
    op("get", "/v1/ai-sdk/threads/{thread_id}/messages", Native, "ai-sdk", "The thread as UI messages", NoBody, Out(200, "ProtocolMessages"), NONE),
    op("post", "/v1/ai-sdk/threads/{thread_id}/cancel", Native, "ai-sdk", "Cancel the thread's run", NoBody, Out(202, "Object"), NONE),
    op("post", "/v1/ai-sdk/threads/{thread_id}/interrupt", Native, "ai-sdk", "Interrupt the thread", NoBody, Out(202, "Object"), NONE),
    op("post", "/v1/ag-ui/run", Native, "ag-ui", "AG-UI run (RunAgentInput)", In("RunAgentInput"), Events, NONE),
    op("post", "/v1/ag-ui/threads/{thread_id}/runs", Native, "ag-ui", "AG-UI run on a thread", In("RunAgentInput"), Events, NONE),
    op("post", "/v1/ag-ui/agents/{agent_id}/runs", Native, "ag-ui", "AG-UI run with an agent", In("RunAgentInput"), Events, NONE),
    op("post", "/v1/ag-ui/threads/{thread_id}/interrupt", Native, "ag-ui", "Interrupt the thread", NoBody, Out(202, "Object"), NONE),
    op("get", "/v1/ag-ui/threads/{thread_id}/messages", Native, "ag-ui", "The thread as AG-UI messages", NoBody, Out(200, "ProtocolMessages"), NONE),
    op("get", "/v1/capabilities", Native, "config", "Agents, tools, plugins, models, providers, MCP servers, namespaces", NoBody, Out(200, "Object"), NONE),
    op("get", "/v1/config/{namespace}", Native, "config", "List a namespace's entries", NoBody, Out(200, "ConfigPage"), PAGE),
    op("post", "/v1/config/{namespace}", Native, "config", "Create an entry (the body holds its id; an admin key)", In("ConfigEntry"), Out(201, "Object"), NONE),
    op("get", "/v1/config/{namespace}/{id}", Native, "config", "Get an entry; `$schema` as id gives the namespace's JSON Schema", NoBody, Out(200, "Object"), NONE),
    op("put", "/v1/config/{namespace}/{id}", Native, "config", "Replace an entry (an admin key)", In("ConfigEntry"), Out(200, "Object"), NONE),
    op("delete", "/v1/config/{namespace}/{id}", Native, "config", "Delete an entry (an admin key)", NoBody, Empty(204), NONE),
    op("get", "/v1/agents", Native, "config", "List agents (alias of /v1/config/agents)", NoBody, Out(200, "ConfigPage"), PAGE),
    op("get", "/v1/agents/{id}", Native, "config", "Get an agent (alias of /v1/config/agents/{id})", NoBody, Out(200, "Object"), NONE),
    op("get", "/.well-known/agent-card.json", Card, "a2a", "A2A agent card of the default agent (public)", NoBody, Out(200, "AgentCard"), NONE),
    op("get", "/v1/a2a/.well-known/agent-card.json", Card, "a2a", "A2A agent card of the default agent (public)", NoBody, Out(200, "AgentCard"), NONE),
    op("get", "/v1/a2a/{tenant}/.well-known/agent-card.json", Card, "a2a", "A2A agent card of an agent (public)", NoBody, Out(200, "AgentCard"), NONE),
    op("get", "/v1/a2a/extendedAgentCard", Card, "a2a", "A2A extended card (bearer `a2a_extended_card_bearer_token`)", NoBody, Out(200, "AgentCard"), NONE),
    op("get", "/v1/a2a/{tenant}/extendedAgentCard", Card, "a2a", "A2A extended card of an agent", NoBody, Out(200, "AgentCard"), NONE),
    op("post", "/v1/a2a", A2aRpc, "a2a", "A2A JSON-RPC binding (default agent, or `params.tenant`)", In("A2aJsonRpc"), Out(200, "JsonRpcResponse"), NONE),
    op("post", "/v1/a2a/{tenant}", A2aRpc, "a2a", "A2A JSON-RPC binding for an agent", In("A2aJsonRpc"), Out(200, "JsonRpcResponse"), NONE),
    op("post", "/v1/a2a/message:send", A2aRest, "a2a", "A2A SendMessage (blocking unless `returnImmediately`)", In("A2aSendMessage"), Out(200, "A2aSendAnswer"), NONE),
    op("post", "/v1/a2a/{tenant}/message:send", A2aRest, "a2a", "A2A SendMessage to an agent", In("A2aSendMessage"), Out(200, "A2aSendAnswer"), NONE),
    op("post", "/v1/a2a/message:stream", A2aRest, "a2a", "A2A SendStreamingMessage", In("A2aSendMessage"), Events, NONE),
    op("post", "/v1/a2a/{tenant}/message:stream", A2aRest, "a2a", "A2A SendStreamingMessage to an agent", In("A2aSendMessage"), Events, NONE),
    op("get", "/v1/a2a/tasks", A2aRest, "a2a", "A2A ListTasks", NoBody, Out(200, "A2aTaskList"), A2A_LIST),
    op("get", "/v1/a2a/{tenant}/tasks", A2aRest, "a2a", "A2A ListTasks of an agent", NoBody, Out(200, "A2aTaskList"), A2A_LIST),
    op("get", "/v1/a2a/tasks/{task}", A2aRest, "a2a", "A2A GetTask (`{id}:subscribe`: SubscribeToTask)", NoBody, Success::TaskOrEvents, A2A_GET),
    op("post", "/v1/a2a/tasks/{task}", A2aRest, "a2a", "A2A CancelTask (`{id}:cancel`) or SubscribeToTask (`{id}:subscribe`)", NoBody, Success::TaskOrEvents, NONE),
    op("get", "/v1/a2a/{tenant}/tasks/{task}", A2aRest, "a2a", "A2A GetTask of an agent", NoBody, Success::TaskOrEvents, A2A_GET),
    op("post", "/v1/a2a/{tenant}/tasks/{task}", A2aRest, "a2a", "A2A CancelTask or SubscribeToTask of an agent", NoBody, Success::TaskOrEvents, NONE),
    op("post", "/v1/a2a/tasks/{task}/pushNotificationConfigs", A2aRest, "a2a", "A2A CreateTaskPushNotificationConfig", In("A2aPushConfig"), Out(200, "A2aPushConfigAnswer"), NONE),
    op("get", "/v1/a2a/tasks/{task}/pushNotificationConfigs", A2aRest, "a2a", "A2A ListTaskPushNotificationConfigs", NoBody, Out(200, "A2aPushConfigList"), NONE),
    op("post", "/v1/a2a/{tenant}/tasks/{task}/pushNotificationConfigs", A2aRest, "a2a", "A2A CreateTaskPushNotificationConfig (agent)", In("A2aPushConfig"), Out(200, "A2aPushConfigAnswer"), NONE),
    op("get", "/v1/a2a/{tenant}/tasks/{task}/pushNotificationConfigs", A2aRest, "a2a", "A2A ListTaskPushNotificationConfigs (agent)", NoBody, Out(200, "A2aPushConfigList"), NONE),
    op("get", "/v1/a2a/tasks/{task}/pushNotificationConfigs/{config}", A2aRest, "a2a", "A2A GetTaskPushNotificationConfig", NoBody, Out(200, "A2aPushConfigAnswer"), NONE),
    op("delete", "/v1/a2a/tasks/{task}/pushNotificationConfigs/{config}", A2aRest, "a2a", "A2A DeleteTaskPushNotificationConfig", NoBody, Out(200, "Object"), NONE),
    op("get", "/v1/a2a/{tenant}/tasks/{task}/pushNotificationConfigs/{config}", A2aRest, "a2a", "A2A GetTaskPushNotificationConfig (agent)", NoBody, Out(200, "A2aPushConfigAnswer"), NONE),
    op("delete", "/v1/a2a/{tenant}/tasks/{task}/pushNotificationConfigs/{config}", A2aRest, "a2a", "A2A DeleteTaskPushNotificationConfig (agent)", NoBody, Out(200, "Object"), NONE),
    op("post", "/v1/mcp", Mcp, "mcp", "MCP over streamable HTTP: the agents as tools (JSON answers, no sessions)", In("McpJsonRpc"), Out(200, "JsonRpcResponse"), NONE),
];
