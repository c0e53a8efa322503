//! Clients that hold connections without finishing requests (slow headers,
//! trickled bodies, silence, many connections from one host) cannot starve the
//! server: each is cut off by a deadline or a per-address limit, and readiness
//! says when every request place is taken.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::net::SocketAddr;
use std::time::Duration;

use awaken_gateway::server::ServerConfig;
use http_support::{TestServer, json};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Longer than any deadline below: reaching it means a connection was never cut.
const NEVER: Duration = Duration::from_secs(20);

fn strict() -> ServerConfig {
    ServerConfig {
        header_read_timeout_secs: 1,
        body_read_timeout_secs: 1,
        idle_timeout_secs: 1,
        max_connections_per_address: 3,
        max_concurrent_requests: 2,
        ..ServerConfig::default()
    }
}

fn address(server: &TestServer) -> SocketAddr {
    server.base.trim_start_matches("http://").parse().unwrap()
}

/// A connection from another loopback address than the test's own client.
async fn attacker(server: &TestServer) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    socket.connect(address(server)).await.unwrap()
}

/// Everything the server sends until it closes the connection.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut seen = Vec::new();
    tokio::time::timeout(NEVER, stream.read_to_end(&mut seen))
        .await
        .expect("the server never closed the connection")
        .unwrap_or_default();
    String::from_utf8_lossy(&seen).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_gets_408_and_frees_its_place() {
    let server = TestServer::local(ServerConfig {
        idle_timeout_secs: 60,
        ..strict()
    })
    .await;
    let mut slow = attacker(&server).await;
    slow.write_all(
        b"POST /v1/threads HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 100\r\n\r\n{\"ti",
    )
    .await
    .unwrap();
    let answer = until_closed(&mut slow).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let (status, _) = json(server.get("/health").await).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_silent_connections_are_closed() {
    let server = TestServer::local(strict()).await;
    let mut silent = attacker(&server).await;
    let mut slow_head = attacker(&server).await;
    slow_head
        .write_all(b"GET /health HTTP/1.1\r\nhost:")
        .await
        .unwrap();
    let mut idle = attacker(&server).await;
    idle.write_all(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(
        !until_closed(&mut slow_head).await.starts_with("HTTP/1.1 2"),
        "slow head"
    );
    assert!(until_closed(&mut silent).await.is_empty(), "silent");
    // Kept alive after its answer, then silent: closed too.
    assert!(
        until_closed(&mut idle).await.starts_with("HTTP/1.1 200"),
        "idle"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_a_limited_number_of_connections() {
    let server = TestServer::local(ServerConfig {
        header_read_timeout_secs: 60,
        idle_timeout_secs: 60,
        ..strict()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = attacker(&server).await;
        // Each is served (a request answered) before the next one connects.
        stream
            .write_all(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        held.push(stream);
    }
    let mut fourth = attacker(&server).await;
    let _ = fourth
        .write_all(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    assert_eq!(until_closed(&mut fourth).await, "", "the fourth was served");
    // Another client is not affected.
    let (status, _) = json(server.get("/health/live").await).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_reports_a_node_whose_request_places_are_all_taken() {
    let server = TestServer::local(ServerConfig {
        body_read_timeout_secs: 60,
        idle_timeout_secs: 60,
        ..strict()
    })
    .await;
    let mut trickling = Vec::new();
    for _ in 0..2 {
        let mut stream = attacker(&server).await;
        stream
            .write_all(
                b"POST /v1/threads HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                  content-length: 100\r\n\r\n{",
            )
            .await
            .unwrap();
        trickling.push(stream);
    }
    let deadline = tokio::time::Instant::now() + NEVER;
    let saturated = loop {
        let (status, body) = json(server.get("/health").await).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never saturated: {body}"
        );
        tokio::task::yield_now().await;
    };
    assert_eq!(saturated["status"], "saturated");
    let (status, _) = json(server.get("/health/live").await).await;
    assert_eq!(status, StatusCode::OK, "the process is alive all the same");
    drop(trickling);
}
