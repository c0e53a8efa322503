//! The HTTP API on a two-node cluster over a real nats-server: a run started
//! through one node is streamed, resumed and decided through the other.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use awaken_actors::ThreadId;
use awaken_actors::store::InMemoryStore;
use awaken_actors::thread::ThreadConfig;
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use awaken_cluster::shards::{ShardOwnerConfig, quota};
use awaken_cluster::testing::NatsServer;
use awaken_gateway::demo::{self, FakeFiles, Journal};
use awaken_gateway::server::ServerConfig;
use http_support::{
    EventReader, TestServer, assert_contiguous, finish_type, json, run_ids, suspended_calls, user,
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
    let nats = NatsServer::start().await.unwrap();
    let store = Arc::new(InMemoryStore::new());
    let mut nodes = Vec::new();
    for name in ["node-a", "node-b"] {
        let builder = demo::builder(
            ThreadConfig::default(),
            Arc::new(FakeFiles::with_demo_files()),
            Journal::default(),
        )
        .unwrap()
        .with_thread_run_store(Arc::clone(&store) as _);
        let client = nats.connect().await.unwrap();
        let node = ClusterNode::start(client, builder, NodeConfig::new(NodeId::new(name).unwrap()))
            .await
            .unwrap();
        nodes.push(Arc::new(node));
    }
    let count = ShardOwnerConfig::default().count;
    let members: BTreeSet<NodeId> = nodes.iter().map(|node| node.node_id().clone()).collect();
    for node in &nodes {
        let share = quota(count, &members, node.node_id()) as usize;
        tokio::time::timeout(
            Duration::from_secs(60),
            node.ownership().wait_for(|owned| owned.len() == share),
        )
        .await
        .expect("shards settle")
        .unwrap();
    }
    let mut servers = Vec::new();
    for node in &nodes {
        servers.push(TestServer::serve(Arc::clone(node) as _, ServerConfig::default()).await);
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
