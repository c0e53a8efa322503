//! The HTTP API on a two-node cluster over a real nats-server: a run started
//! through one node is streamed, resumed and decided through the other.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use awaken_actors::ThreadId;
use awaken_actors::contract::StreamEvent;
use awaken_actors::permission::{PermissionBehavior, PermissionRules};
use awaken_actors::store::InMemoryStore;
use awaken_actors::thread::ThreadConfig;
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use awaken_cluster::testing::NatsServer;
use awaken_gateway::base::runtime_base;
use awaken_gateway::demo::{self, FakeFiles, Journal};
use http_support::{
    EventReader, TestServer, assert_contiguous, finish_type, json, mcp_stdio_entry, run_ids,
    suspended_calls, user,
};
use reqwest::StatusCode;
use serde_json::json;

struct Cluster {
    _nats: NatsServer,
    nodes: Vec<Arc<ClusterNode>>,
    servers: Vec<TestServer>,
}

/// Two nodes sharing one store, each with its own HTTP server, shards settled.
async fn two_nodes() -> Cluster {
    two_nodes_with(&[true, true]).await
}

/// Two nodes as [`two_nodes`]; node `i` has the demo agents when `agents[i]`
/// (else no agent at all).
async fn two_nodes_with(agents: &[bool; 2]) -> Cluster {
    let nats = NatsServer::start().await.unwrap();
    let store = Arc::new(InMemoryStore::new());
    let mut nodes = Vec::new();
    for (name, with_agents) in ["node-a", "node-b"].into_iter().zip(agents) {
        let files = Arc::new(FakeFiles::with_demo_files());
        let builder = if *with_agents {
            demo::builder(ThreadConfig::default(), files, Journal::default()).unwrap()
        } else {
            demo::with_demo_tools(
                runtime_base(
                    ThreadConfig::default(),
                    PermissionRules::new(PermissionBehavior::Allow),
                ),
                files,
                Journal::default(),
            )
        }
        .with_thread_run_store(Arc::clone(&store) as _);
        let client = nats.connect().await.unwrap();
        let node = ClusterNode::start(client, builder, NodeConfig::new(NodeId::new(name).unwrap()))
            .await
            .unwrap();
        nodes.push(Arc::new(node));
    }
    let members: BTreeSet<NodeId> = nodes.iter().map(|node| node.node_id().clone()).collect();
    for node in &nodes {
        let held = tokio::time::timeout(Duration::from_secs(60), node.fair_share_held(&members));
        assert!(
            held.await.expect("shards settle"),
            "the shard owner stopped"
        );
    }
    let mut servers = Vec::new();
    for node in &nodes {
        servers
            .push(TestServer::serve(Arc::clone(node) as _, http_support::writable_config()).await);
    }
    Cluster {
        _nats: nats,
        nodes,
        servers,
    }
}

/// A thread id whose shard node `owner` holds.
fn thread_owned_by(cluster: &Cluster, owner: usize, tag: &str) -> ThreadId {
    (0..)
        .map(|i| ThreadId::new(format!("{tag}-{i}")).unwrap())
        .find(|thread| cluster.nodes[owner].owns(thread))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_on_one_node_streams_and_reconnects_through_the_other() {
    let cluster = two_nodes().await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    // Owned by B, so A's stream comes over NATS.
    let thread = thread_owned_by(&cluster, 1, "stream");
    let (status, _) = json(a.post("/v1/threads", json!({"id": thread.as_str()})).await).await;
    assert_eq!(status, StatusCode::CREATED);

    // `slow` sleeps 1.5 s in a tool: the run is mid-way after two events.
    let response = a
        .post(
            "/v1/runs",
            json!({"agentId": "slow", "threadId": thread.as_str(), "messages": user("go")}),
        )
        .await;
    let mut first = EventReader::new(response);
    let head = vec![first.next().await.unwrap(), first.next().await.unwrap()];
    drop(first);
    let (_, run_id) = run_ids(&head);

    let response = b
        .client
        .get(b.url(&format!("/v1/runs/{run_id}/events")))
        .header("Last-Event-ID", head[1].seq.to_string())
        .send()
        .await
        .unwrap();
    let tail = EventReader::new(response).rest().await;
    let all: Vec<_> = head.into_iter().chain(tail).collect();
    assert_contiguous(&all, 0);
    assert_eq!(finish_type(&all), "natural_end");

    // The whole run again, replayed through the node that does not own it.
    let replay = EventReader::new(a.get(&format!("/v1/runs/{run_id}/events")).await)
        .rest()
        .await;
    assert_eq!(
        replay.iter().map(|e| e.seq).collect::<Vec<_>>(),
        all.iter().map(|e| e.seq).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_given_to_a_node_that_does_not_own_the_thread_resumes_it() {
    let cluster = two_nodes().await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    let thread = thread_owned_by(&cluster, 0, "hitl");
    json(b.post("/v1/threads", json!({"id": thread.as_str()})).await).await;

    let events = EventReader::new(
        b.post(
            "/v1/runs",
            json!({"agentId": "demo", "threadId": thread.as_str(),
                   "messages": user("delete notes.txt")}),
        )
        .await,
    )
    .rest()
    .await;
    assert_eq!(finish_type(&events), "suspended");
    let (_, run_id) = run_ids(&events);
    let call_id = suspended_calls(&events).remove(0);
    let last_seq = events.last().unwrap().seq;

    let watching = b
        .client
        .get(b.url(&format!("/v1/runs/{run_id}/events")))
        .header("Last-Event-ID", last_seq.to_string())
        .send()
        .await
        .unwrap();
    let resumed = tokio::spawn(EventReader::new(watching).rest());
    let (status, body) = json(
        b.post(
            &format!("/v1/threads/{thread}/decision"),
            json!({"call_id": call_id, "decision_id": "d-1", "action": "resume",
                   "result": {"approved": true}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let resumed = resumed.await.unwrap();
    assert_contiguous(&resumed, last_seq + 1);
    assert_eq!(finish_type(&resumed), "natural_end");

    let (_, run) = json(a.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(run["status"], "done");
    let (status, body) = json(a.get("/health").await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// The error a failed run's `run_finish` carries.
fn finish_error(events: &[StreamEvent]) -> String {
    let value = serde_json::to_value(events.last().unwrap()).unwrap();
    assert_eq!(value["termination"]["type"], "error", "{value}");
    value["termination"]["value"].as_str().unwrap().to_owned()
}

/// Polls `GET /v1/runs/{run_id}` on `server` until the run is done.
async fn done_run(server: &TestServer, run_id: &str) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
        if status == StatusCode::OK && body["status"] == "done" {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never ended: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_its_owner_cannot_start_ends_with_the_cause_on_every_way_in() {
    // Node B knows no agent: a run accepted by A on a thread B owns cannot start.
    let cluster = two_nodes_with(&[true, false]).await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    let thread = thread_owned_by(&cluster, 1, "refused");
    let (status, _) = json(a.post("/v1/threads", json!({"id": thread.as_str()})).await).await;
    assert_eq!(status, StatusCode::CREATED);

    // Streamed: the stream ends with the cause.
    let response = a
        .post(
            "/v1/runs",
            json!({"agentId": "bench-text", "threadId": thread.as_str(), "messages": user("go")}),
        )
        .await;
    let events = tokio::time::timeout(Duration::from_secs(20), EventReader::new(response).rest())
        .await
        .expect("the stream of a run that cannot start ends");
    assert_contiguous(&events, 0);
    let error = finish_error(&events);
    assert!(error.contains("bench-text"), "{error}");
    assert!(error.contains("node `node-b`"), "{error}");
    let (_, run_id) = run_ids(&events);
    for server in [a, b] {
        let record = done_run(server, &run_id).await;
        assert_eq!(record["termination"]["value"], error.as_str(), "{record}");
    }

    // In the background: the input is accepted, then the run shows the cause.
    let (status, accepted) = json(
        a.post(
            &format!("/v1/threads/{thread}/messages"),
            json!({"agentId": "bench-text", "messages": user("again")}),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let background = accepted["run_id"].as_str().unwrap();
    let record = done_run(a, background).await;
    assert_eq!(record["termination"]["type"], "error", "{record}");
    // A late follower gets the whole failed run.
    let replay = EventReader::new(a.get(&format!("/v1/runs/{background}/events")).await)
        .rest()
        .await;
    assert!(finish_error(&replay).contains("bench-text"));
    // Cancelling it says it is over, not that it is unknown.
    let response = a
        .post(&format!("/v1/runs/{background}/cancel"), json!({}))
        .await;
    assert_eq!(response.status(), StatusCode::CONFLICT);

    // Through the AI SDK and AG-UI adapters: their streams end with the error.
    let chat_thread = thread_owned_by(&cluster, 1, "refused-chat");
    let response = a
        .post(
            "/v1/ai-sdk/chat",
            json!({"id": chat_thread.as_str(), "agentId": "bench-text", "trigger": "submit-message",
                "messages": [{"id": "u-1", "role": "user", "parts": [{"type": "text", "text": "go"}]}]}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .expect("the AI SDK stream ends")
        .unwrap();
    let error = text
        .split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<serde_json::Value>(data).ok())
        .find(|chunk| chunk["type"] == "error")
        .unwrap_or_else(|| panic!("no error chunk: {text}"));
    assert!(
        error["errorText"].as_str().unwrap().contains("bench-text"),
        "{error}"
    );
    let ag_ui_thread = thread_owned_by(&cluster, 1, "refused-ag-ui");
    let response = a
        .post(
            "/v1/ag-ui/agents/bench-text/runs",
            json!({"threadId": ag_ui_thread.as_str(), "runId": "r-refused", "state": {},
                "tools": [], "context": [], "forwardedProps": {},
                "messages": [{"id": "u-1", "role": "user", "content": "go"}]}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .expect("the AG-UI stream ends")
        .unwrap();
    let last: serde_json::Value = text
        .split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str(data).ok())
        .last()
        .unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{text}");
    assert!(
        last["message"].as_str().unwrap().contains("bench-text"),
        "{last}"
    );

    let metrics = b.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("awaken_runs_failed_to_start_total 4"),
        "{metrics}"
    );
}

/// `server`'s capabilities once it runs config `revision` or a later one: a node
/// installs a revision from its watch of the store (waited for, bounded).
async fn installed(server: &TestServer, revision: u64) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, capabilities) = json(server.get("/v1/capabilities").await).await;
        if capabilities["config_revision"].as_u64() >= Some(revision) {
            return capabilities;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node never installed revision {revision}: {capabilities}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_write_on_one_node_reaches_every_node() {
    let cluster = two_nodes().await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    for (namespace, body) in [
        (
            "providers",
            json!({"id": "p", "adapter": "scripted", "script": {"steps": [{"text": "from the config API"}]}}),
        ),
        (
            "models",
            json!({"id": "m", "provider": "p", "model": "script"}),
        ),
        ("agents", json!({"id": "greeter", "model": "m"})),
    ] {
        let (status, body) = json(a.post(&format!("/v1/config/{namespace}"), body).await).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (_, listing) = json(b.get("/v1/config/agents/greeter").await).await;
    assert_eq!(listing["model"], "m", "B reads the shared document");
    let (_, listing) = json(a.get("/v1/config/agents").await).await;
    let revision = listing["revision"].as_u64().unwrap();

    let capabilities = installed(b, revision).await;
    assert!(
        capabilities["agents"]
            .as_array()
            .unwrap()
            .contains(&json!("greeter"))
    );
    // A run of the new agent, accepted by B, on a thread A owns.
    let thread = thread_owned_by(&cluster, 0, "config");
    let (status, _) = json(b.post("/v1/threads", json!({"id": thread.as_str()})).await).await;
    assert_eq!(status, StatusCode::CREATED);
    let response = b
        .post(
            "/v1/runs",
            json!({"agentId": "greeter", "threadId": thread.as_str(), "messages": user("hi")}),
        )
        .await;
    let events = EventReader::new(response).rest().await;
    assert_eq!(finish_type(&events), "natural_end");
    let finish = serde_json::to_value(events.last().unwrap()).unwrap();
    assert_eq!(finish["result"]["response"], "from the config API");

    // A node that joins later starts from the stored document.
    let late = ClusterNode::start(
        cluster._nats.connect().await.unwrap(),
        demo::builder(
            ThreadConfig::default(),
            Arc::new(FakeFiles::with_demo_files()),
            Journal::default(),
        )
        .unwrap(),
        NodeConfig::new(NodeId::new("node-late").unwrap()),
    )
    .await
    .unwrap();
    let manager = awaken_gateway::runtime_config::ConfigManager::start(
        late.runtime().clone(),
        awaken_cluster::RunControl::config_store(&late),
        awaken_gateway::runtime_config::ConfigDocument::default(),
        Arc::new(awaken_gateway::protocols::mcp::McpHub::new()),
        awaken_gateway::runtime_config::EntryPolicy::default(),
    )
    .await
    .unwrap();
    assert_eq!(manager.revision(), revision);
    assert!(late.runtime().registries().agents.contains("greeter"));
    drop(manager);
    late.drain(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_written_on_one_node_serves_tools_on_every_node() {
    let cluster = two_nodes().await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    let script = json!({"steps": [
        {"tool_calls": [{"name": "mcp__calc__add", "arguments": {"a": 40, "b": 2}}]},
        {"text": "sum: {last_tool_result}"},
    ]});
    for (namespace, body) in [
        ("mcp-servers", mcp_stdio_entry("calc")),
        (
            "providers",
            json!({"id": "p", "adapter": "scripted", "script": script}),
        ),
        (
            "models",
            json!({"id": "m", "provider": "p", "model": "script"}),
        ),
        (
            "agents",
            json!({"id": "adder", "model": "m", "allowed_tools": ["mcp__calc__add"]}),
        ),
    ] {
        let (status, body) = json(a.post(&format!("/v1/config/{namespace}"), body).await).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (_, listing) = json(a.get("/v1/config/mcp-servers").await).await;
    let capabilities = installed(b, listing["revision"].as_u64().unwrap()).await;
    let tools: Vec<&str> = capabilities["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["id"].as_str())
        .collect();
    assert!(tools.contains(&"mcp__calc__add"), "{tools:?}");

    // A run on a thread B owns: B's own connection to the server answers the call.
    let thread = thread_owned_by(&cluster, 1, "mcp");
    let (status, _) = json(a.post("/v1/threads", json!({"id": thread.as_str()})).await).await;
    assert_eq!(status, StatusCode::CREATED);
    let response = a
        .post(
            "/v1/runs",
            json!({"agentId": "adder", "threadId": thread.as_str(), "messages": user("add")}),
        )
        .await;
    let events = EventReader::new(response).rest().await;
    assert_eq!(finish_type(&events), "natural_end");
    let finish = serde_json::to_value(events.last().unwrap()).unwrap();
    let answer = finish["result"]["response"].as_str().unwrap();
    assert!(
        answer.contains(r#""structuredContent":{"result":42}"#),
        "{answer}"
    );
}
