//! The A2A v1.0 server: the reference client (`a2a-sdk` from PyPI) on both
//! bindings, and the refusals a client gets for bad input.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::server::ServerConfig;
use http_support::{TestServer, python_client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_client_passes_every_operation_over_http_json() {
    let server = TestServer::local(ServerConfig::default()).await;
    let seen = python_client("a2a_client.py", &[&server.base, "http-json"]).await;
    assert_eq!(seen["ok"], true, "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_client_passes_every_operation_over_jsonrpc() {
    let server = TestServer::local(ServerConfig::default()).await;
    let seen = python_client("a2a_client.py", &[&server.base, "jsonrpc"]).await;
    assert_eq!(seen["ok"], true, "{seen}");
}
