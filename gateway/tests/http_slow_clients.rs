//! Clients that hold connections without finishing requests (slow headers,
//! trickled bodies, silence, many connections from one host) cannot starve the
//! server: a request whose head or body is still arriving holds no request
//! place, each is cut off by a deadline or a connection limit, and readiness
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
    attacker_from(server, 2).await
}

/// A connection from `127.0.0.<last>` (all of 127.0.0.0/8 is loopback on Linux).
async fn attacker_from(server: &TestServer, last: u8) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from(([127, 0, 0, last], 0)))
        .unwrap();
    socket.connect(address(server)).await.unwrap()
}

/// The head of a `POST /v1/threads` promising a 100-byte body, and its first byte.
const SLOW_BODY: &[u8] =
    b"POST /v1/threads HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                           content-length: 100\r\n\r\n{";

/// The metric of requests whose body is being read.
const BODIES_ARRIVING: &str = "awaken_http_request_bodies_arriving";

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
    let (server, mut gate) = TestServer::gated(strict()).await;
    // Requests being worked on take the two places (bodies arriving take none).
    let held: Vec<_> = (0..2)
        .map(|_| {
            let unknown = server.url(&format!("/v1/runs/{}", awaken_actors::RunId::generate()));
            tokio::spawn(server.client.get(unknown).send())
        })
        .collect();
    gate.until_waiting(2).await;
    let (status, saturated) = json(server.get("/health").await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{saturated}");
    assert_eq!(saturated["status"], "saturated");
    let (status, _) = json(server.get("/health/live").await).await;
    assert_eq!(status, StatusCode::OK, "the process is alive all the same");
    gate.open();
    for request in held {
        assert_eq!(
            request.await.unwrap().unwrap().status(),
            StatusCode::NOT_FOUND
        );
    }
    let (status, _) = json(server.get("/health").await).await;
    assert_eq!(status, StatusCode::OK);
}

/// More slow bodies and slow heads than there are request places, from other
/// addresses: another client's requests are answered all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_and_heads_hold_no_request_place() {
    let server = TestServer::local(ServerConfig {
        header_read_timeout_secs: 60,
        body_read_timeout_secs: 60,
        idle_timeout_secs: 60,
        max_connections_per_address: 16,
        ..strict()
    })
    .await;
    let places = strict().max_concurrent_requests;
    let mut slow = Vec::new();
    for at in 0..places + 3 {
        let mut stream = attacker_from(&server, 2 + u8::try_from(at % 2).unwrap()).await;
        stream.write_all(SLOW_BODY).await.unwrap();
        slow.push(stream);
    }
    for _ in 0..places + 3 {
        let mut stream = attacker_from(&server, 4).await;
        stream
            .write_all(b"POST /v1/threads HTTP/1.1\r\nhost:")
            .await
            .unwrap();
        slow.push(stream);
    }
    let bodies = (places + 3) as f64;
    server.until_metric(BODIES_ARRIVING, bodies).await;
    server
        .until_metric("awaken_http_connections_open", 2.0 * bodies)
        .await;

    let (status, body) = json(server.get("/v1/threads").await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let created = server.post("/v1/threads", serde_json::json!({})).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let (status, body) = json(server.get("/health").await).await;
    assert_eq!(status, StatusCode::OK, "not saturated: {body}");
    assert_eq!(
        server.metric(BODIES_ARRIVING).await,
        bodies,
        "the slow bodies were arriving all along"
    );
    drop(slow);
}

/// Slow bodies beyond the request places all get 408 at their deadline, which
/// frees what they held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slow_body_gets_408_at_its_deadline() {
    let server = TestServer::local(ServerConfig {
        idle_timeout_secs: 60,
        max_connections_per_address: 16,
        ..strict()
    })
    .await;
    let mut slow = Vec::new();
    for _ in 0..strict().max_concurrent_requests + 3 {
        let mut stream = attacker(&server).await;
        stream.write_all(SLOW_BODY).await.unwrap();
        slow.push(stream);
    }
    for mut stream in slow {
        let answer = until_closed(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("connection: close"), "{answer}");
    }
    assert_eq!(server.metric(BODIES_ARRIVING).await, 0.0);
    let (status, _) = json(server.get("/v1/threads").await).await;
    assert_eq!(status, StatusCode::OK);
}

/// A connection that carries no byte for `idle_timeout_secs` is closed, even
/// when the head deadline is longer: silent from the start, or kept alive after
/// its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_at_the_idle_timeout() {
    let server = TestServer::local(ServerConfig {
        header_read_timeout_secs: 60,
        body_read_timeout_secs: 60,
        idle_timeout_secs: 1,
        ..strict()
    })
    .await;
    let mut silent = attacker(&server).await;
    let mut kept_alive = attacker(&server).await;
    kept_alive
        .write_all(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut stalled = attacker(&server).await;
    stalled.write_all(SLOW_BODY).await.unwrap();
    assert!(until_closed(&mut silent).await.is_empty(), "silent");
    assert!(
        until_closed(&mut kept_alive)
            .await
            .starts_with("HTTP/1.1 200"),
        "kept alive"
    );
    assert_eq!(
        until_closed(&mut stalled).await,
        "",
        "a body that stopped is idle too"
    );
}

/// The server holds at most `max_connections`, from all addresses together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_holds_a_limited_number_of_connections_in_all() {
    let server = TestServer::local(ServerConfig {
        header_read_timeout_secs: 60,
        idle_timeout_secs: 60,
        max_connections: 2,
        ..strict()
    })
    .await;
    let mut held = Vec::new();
    for last in [2, 3] {
        let mut stream = attacker_from(&server, last).await;
        stream
            .write_all(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        held.push(stream);
    }
    let mut third = attacker_from(&server, 4).await;
    let _ = third
        .write_all(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    assert_eq!(until_closed(&mut third).await, "", "the third was served");
    drop(held);
    // The server notices the closes on its own time: ask until it did.
    let deadline = tokio::time::Instant::now() + NEVER;
    loop {
        let mut next = attacker_from(&server, 4).await;
        let _ = next
            .write_all(b"GET /health/live HTTP/1.1\r\nconnection: close\r\nhost: x\r\n\r\n")
            .await;
        if until_closed(&mut next).await.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "closed connections never freed their places"
        );
        tokio::task::yield_now().await;
    }
}

/// Bodies arriving share `max_arriving_body_bytes`: one that would take the
/// server past it gets 503 and its connection closes; the others go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_arriving_share_a_bounded_number_of_bytes() {
    let server = TestServer::local(ServerConfig {
        body_read_timeout_secs: 60,
        idle_timeout_secs: 60,
        max_body_bytes: 64,
        max_arriving_body_bytes: 64,
        ..strict()
    })
    .await;
    let head = b"POST /v1/threads HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                 content-length: 50\r\n\r\n";
    let first_part = br#"{"title":"0123456789012345678901234567890123"#;
    assert_eq!(first_part.len(), 44);
    let mut first = attacker(&server).await;
    first.write_all(head).await.unwrap();
    first.write_all(first_part).await.unwrap();
    server
        .until_metric("awaken_http_request_body_arriving_bytes", 44.0)
        .await;
    let mut second = attacker(&server).await;
    second.write_all(head).await.unwrap();
    second.write_all(first_part).await.unwrap();
    let refused = until_closed(&mut second).await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("connection: close"), "{refused}");
    assert!(refused.contains("bodies arriving"), "{refused}");
    first.write_all(b"4567\"}").await.unwrap();
    let mut head = [0u8; 12];
    first.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 201", "the first body went on");
}
