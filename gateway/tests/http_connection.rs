//! Kept-alive connections over raw TCP: a request whose body arrives in a second
//! segment is answered after its body, and the connection serves the next request,
//! whichever route answers (one that ignores bodies, an unknown route, a refusal).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::time::Duration;

use awaken_gateway::server::{ApiKeys, ServerConfig};
use http_support::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One answer read off the connection: its status line and headers, lower-cased.
struct Answer {
    status: u16,
    headers: String,
}

async fn read_answer(stream: &mut TcpStream, buffered: &mut Vec<u8>) -> Answer {
    let head_end = loop {
        if let Some(at) = buffered.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(
            read > 0,
            "the server closed the connection before answering"
        );
        buffered.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffered[..head_end]).to_lowercase();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map(|value| value.trim().parse().unwrap())
        .expect("answers here have a content-length");
    while buffered.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "the server closed the connection mid-answer");
        buffered.extend_from_slice(&chunk[..read]);
    }
    buffered.drain(..head_end + length);
    Answer {
        status,
        headers: head,
    }
}

/// Sends `path`'s request head, then (once it is clear no answer came without it)
/// its body, then a second request on the same connection.
async fn body_in_a_second_segment(server: &TestServer, path: &str, extra_headers: &str) {
    let address = server.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let body = br#"{"metadata":{}}"#;
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         a2a-version: 1.0\r\n{extra_headers}content-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Bounded wait for something that must not happen: an answer before the body.
    // Without the fix it comes within milliseconds; with it, never.
    let mut probe = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), stream.peek(&mut probe)).await;
    assert!(
        early.is_err(),
        "{path}: answered before its body arrived; the connection would then be closed"
    );
    stream.write_all(body).await.unwrap();
    let mut buffered = Vec::new();
    let first = read_answer(&mut stream, &mut buffered).await;
    assert!(
        first.status >= 400,
        "{path}: every probe here is refused, got {}",
        first.status
    );
    assert!(
        !first.headers.contains("connection: close"),
        "{path}: the answer closes the connection: {}",
        first.headers
    );
    let next = format!("GET /health/live HTTP/1.1\r\nhost: {address}\r\n\r\n");
    stream.write_all(next.as_bytes()).await.unwrap();
    let second = read_answer(&mut stream, &mut buffered).await;
    assert_eq!(
        second.status, 200,
        "{path}: the kept-alive connection serves on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_wait_for_the_body_and_keep_the_connection() {
    let server = TestServer::local(ServerConfig::default()).await;
    for path in [
        "/v1/threads/no-such-thread/cancel",
        "/v1/a2a/tasks/no-such-task:cancel",
        "/v1/runs/no-such-run/cancel",
        "/v1/no-such-route",
    ] {
        body_in_a_second_segment(&server, path, "").await;
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_waits_for_the_body_and_keeps_the_connection() {
    let server = TestServer::local(ServerConfig {
        api_keys: ApiKeys::from([("secret".to_owned(), "tenant".to_owned())]),
        ..ServerConfig::default()
    })
    .await;
    body_in_a_second_segment(&server, "/v1/threads", "authorization: Bearer wrong\r\n").await;
    server.shutdown().await;
}
