//! Nodes that start at the same moment on a fresh NATS server each create the
//! cluster's streams and buckets, and each writes into them right away; every
//! one of them must come up.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;

use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use awaken_cluster::testing::NatsServer;
use support::{CountingEcho, approver_builder};
use tokio::sync::Barrier;

/// Nodes started at once per fresh server.
const NODES: usize = 3;
/// Fresh servers tried.
const SERVERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_starting_at_once_on_a_fresh_server_comes_up() {
    for round in 0..SERVERS {
        let nats = NatsServer::start().await.unwrap();
        let mut clients = Vec::new();
        for _ in 0..NODES {
            clients.push(nats.connect().await.unwrap());
        }
        // Every node sends its first request at the same moment.
        let together = Arc::new(Barrier::new(NODES));
        let starts: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, client)| {
                let together = Arc::clone(&together);
                tokio::spawn(async move {
                    together.wait().await;
                    let id = NodeId::new(format!("node-{i}")).unwrap();
                    ClusterNode::start(
                        client,
                        approver_builder(Arc::new(CountingEcho::default())),
                        NodeConfig::new(id),
                    )
                    .await
                })
            })
            .collect();
        let mut nodes = Vec::new();
        for start in starts {
            match start.await.unwrap() {
                Ok(node) => nodes.push(node),
                Err(error) => panic!("round {round}: a node did not start: {error}"),
            }
        }
        for node in nodes {
            node.drain(std::time::Duration::from_secs(5)).await.unwrap();
        }
    }
}
