//! Attacks on a node with its default settings (issue #35, `docs/security.md`):
//! each test is one way in that used to work.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::server::{ApiKeys, ServerConfig};
use futures::FutureExt;
use http_support::{TestServer, expect_error, json, writable_config};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A stdio MCP server entry whose "server" is a shell that leaves `marker` behind.
fn shell_entry(marker: &std::path::Path) -> Value {
    json!({"id": "pwn", "transport": {"kind": "stdio", "command": "sh",
           "args": ["-c", format!("touch {}", marker.display())]}})
}

#[tokio::test]
async fn without_api_keys_the_config_api_is_read_only_and_starts_nothing() {
    let server = TestServer::local(ServerConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let entry = shell_entry(&marker);
    expect_error(
        server.post("/v1/config/mcp-servers", entry.clone()).await,
        StatusCode::FORBIDDEN,
        "read-only",
    )
    .await;
    expect_error(
        server.put("/v1/config/mcp-servers/pwn", entry).await,
        StatusCode::FORBIDDEN,
        "read-only",
    )
    .await;
    expect_error(
        server.delete("/v1/config/agents/demo").await,
        StatusCode::FORBIDDEN,
        "read-only",
    )
    .await;
    let (status, listing) = json(server.get("/v1/config/mcp-servers").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listing["total"], 0);
    assert!(!marker.exists(), "the refused entry ran its command");
}

#[tokio::test]
async fn a_stdio_command_outside_the_allow_list_is_refused_before_it_runs() {
    let server = TestServer::local(writable_config()).await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    expect_error(
        server
            .post("/v1/config/mcp-servers", shell_entry(&marker))
            .await,
        StatusCode::BAD_REQUEST,
        "mcp_stdio_commands",
    )
    .await;
    // An allowed program cannot be redirected through its environment either.
    let mut entry = http_support::mcp_stdio_entry("calc");
    entry["transport"]["env"] = json!({"PATH": dir.path()});
    expect_error(
        server.post("/v1/config/mcp-servers", entry).await,
        StatusCode::BAD_REQUEST,
        "PATH",
    )
    .await;
    let (_, listing) = json(server.get("/v1/config/mcp-servers").await).await;
    assert_eq!(listing["total"], 0);
    assert!(!marker.exists(), "the refused entry ran its command");
}

#[tokio::test]
async fn a_token_env_outside_the_allow_list_is_refused_without_contacting_the_url() {
    let server = TestServer::local(writable_config()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    for (namespace, entry) in [
        (
            "mcp-servers",
            json!({"id": "leak", "transport": {"kind": "http", "url": url,
                                                "token_env": "HOME"}}),
        ),
        (
            "agents",
            json!({"id": "leak", "endpoint": {"backend": "a2a", "base_url": url,
                   "auth": {"type": "bearer", "token_env": "HOME"}}}),
        ),
    ] {
        expect_error(
            server.post(&format!("/v1/config/{namespace}"), entry).await,
            StatusCode::BAD_REQUEST,
            "token_envs",
        )
        .await;
    }
    assert!(
        listener.accept().now_or_never().is_none(),
        "a refused entry's URL was contacted"
    );
}

#[tokio::test]
async fn with_api_keys_a_tenant_outside_admin_tenants_cannot_write() {
    let server = TestServer::local(ServerConfig {
        api_keys: ApiKeys::from([("key-a".to_owned(), "tenant-a".to_owned())]),
        config_api: writable_config().config_api,
        ..ServerConfig::default()
    })
    .await;
    let response = server
        .client
        .post(server.url("/v1/config/agents"))
        .bearer_auth("key-a")
        .json(&json!({"id": "x", "model": "scripted"}))
        .send()
        .await
        .unwrap();
    expect_error(response, StatusCode::FORBIDDEN, "admin_tenants").await;
}

#[test]
fn the_default_address_is_loopback() {
    let address: std::net::SocketAddr = ServerConfig::default().address.parse().unwrap();
    assert!(address.ip().is_loopback(), "{address}");
}

#[tokio::test]
async fn image_blocks_must_be_web_urls_or_base64_images() {
    let server = TestServer::local(ServerConfig::default()).await;
    for image in [
        json!({"type": "image", "url": "javascript:alert(1)"}),
        json!({"type": "image", "url": "file:///etc/passwd"}),
        json!({"type": "image", "data": "not base64!", "media_type": "image/png"}),
        json!({"type": "image", "data": "aGk=", "media_type": "text/html"}),
    ] {
        let body = json!({"agentId": "demo", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "look"}, image.clone()]}]});
        expect_error(
            server.post("/v1/runs", body).await,
            StatusCode::BAD_REQUEST,
            "image",
        )
        .await;
    }
    let (_, threads) = json(server.get("/v1/threads").await).await;
    assert_eq!(
        threads["threads"],
        json!([]),
        "a refused run created no thread"
    );
}
