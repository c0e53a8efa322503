//! The config API over HTTP on a single node: entries created, used by runs,
//! replaced and deleted; schemas and capabilities; every bad write refused with
//! nothing changed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::server::{ApiKeys, ServerConfig};
use http_support::{
    EventReader, TestServer, expect_error, json, mcp_stdio_entry, user, writable_config,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn provider(id: &str, text: &str) -> Value {
    json!({"id": id, "adapter": "scripted", "script": {"steps": [{"text": text}]}})
}

/// Creates provider `p`, model `m` on it and agent `greeter` on that.
async fn greeter(server: &TestServer) {
    for (namespace, body) in [
        ("providers", provider("p", "hello {last_user_text}")),
        (
            "models",
            json!({"id": "m", "provider": "p", "model": "script"}),
        ),
        ("agents", json!({"id": "greeter", "model": "m"})),
    ] {
        let (status, body) =
            json(server.post(&format!("/v1/config/{namespace}"), body).await).await;
        assert_eq!(status, StatusCode::CREATED, "{namespace}: {body}");
    }
}

/// The final text of a run of `agent`, streamed from `POST /v1/runs`.
async fn answer(server: &TestServer, agent: &str, text: &str) -> String {
    let response = server
        .post(
            "/v1/runs",
            json!({"agentId": agent, "messages": user(text)}),
        )
        .await;
    let events = EventReader::new(response).rest().await;
    let finish = serde_json::to_value(events.last().unwrap()).unwrap();
    assert_eq!(finish["event_type"], "run_finish", "{finish}");
    finish["result"]["response"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no response in {finish}"))
}

/// Everything a refused write must leave as it was.
async fn snapshot(server: &TestServer) -> Value {
    let mut all = serde_json::Map::new();
    for namespace in ["agents", "models", "providers", "mcp-servers"] {
        let (_, listing) = json(server.get(&format!("/v1/config/{namespace}")).await).await;
        all.insert(namespace.into(), listing);
    }
    let (_, capabilities) = json(server.get("/v1/capabilities").await).await;
    all.insert("capabilities".into(), capabilities);
    Value::Object(all)
}

#[tokio::test]
async fn capabilities_list_what_the_node_can_run() {
    let server = TestServer::local(writable_config()).await;
    let (status, body) = json(server.get("/v1/capabilities").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["agents"],
        json!([
            "bench",
            "bench-delegate",
            "bench-hitl",
            "bench-text",
            "demo",
            "orchestrator",
            "slow"
        ])
    );
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["delete_file", "echo", "sleep"]);
    assert_eq!(body["plugins"], json!(["permission"]));
    assert_eq!(
        body["namespaces"],
        json!(["agents", "models", "providers", "mcp-servers"])
    );
    assert_eq!(body["config_revision"], 0);

    // The built-in agents are listed, read-only, in the agents namespace too.
    let (_, agents) = json(server.get("/v1/agents").await).await;
    assert_eq!(agents["total"], 7);
    assert_eq!(agents["built_in"], body["agents"]);
    let (status, demo) = json(server.get("/v1/agents/demo").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(demo["allowed_tools"], json!(["delete_file"]));
}

#[tokio::test]
async fn entries_written_through_the_api_run_at_once_and_change_with_it() {
    let server = TestServer::local(writable_config()).await;
    greeter(&server).await;
    assert_eq!(answer(&server, "greeter", "bob").await, "hello bob");

    let (status, entry) = json(server.get("/v1/config/agents/greeter").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(entry["max_rounds"], 16, "stored in normal form: {entry}");
    let (_, listing) = json(server.get("/v1/config/agents?limit=1&offset=5").await).await;
    assert_eq!(listing["total"], 8, "listed in id order, built-in ones too");
    assert_eq!(listing["items"], json!([entry]));
    let (_, alias) = json(server.get("/v1/agents/greeter").await).await;
    assert_eq!(alias, entry);

    // A replaced provider answers the next run differently.
    let (status, _) = json(
        server
            .put(
                "/v1/config/providers/p",
                provider("p", "bye {last_user_text}"),
            )
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer(&server, "greeter", "bob").await, "bye bob");

    // Deleted in dependency order; the agent is gone for new runs.
    for path in ["agents/greeter", "models/m", "providers/p"] {
        let response = server.delete(&format!("/v1/config/{path}")).await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT, "{path}");
    }
    expect_error(
        server
            .post(
                "/v1/runs",
                json!({"agentId": "greeter", "messages": user("x")}),
            )
            .await,
        StatusCode::NOT_FOUND,
        "greeter",
    )
    .await;
    let (_, capabilities) = json(server.get("/v1/capabilities").await).await;
    assert_eq!(capabilities["config_revision"], 7);
    assert!(
        !capabilities["providers"]
            .as_array()
            .unwrap()
            .contains(&json!("p"))
    );
}

#[tokio::test]
async fn schemas_are_served_per_namespace() {
    let server = TestServer::local(writable_config()).await;
    for namespace in ["agents", "models", "providers", "mcp-servers"] {
        let (status, schema) =
            json(server.get(&format!("/v1/config/{namespace}/$schema")).await).await;
        assert_eq!(status, StatusCode::OK, "{namespace}");
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert!(
            schema["required"]
                .as_array()
                .unwrap()
                .contains(&json!("id"))
        );
    }
    let (_, models) = json(server.get("/v1/config/models/$schema").await).await;
    assert_eq!(models["required"], json!(["id", "provider", "model"]));
    expect_error(
        server.get("/v1/config/tools/$schema").await,
        StatusCode::NOT_FOUND,
        "unknown config namespace",
    )
    .await;
}

#[tokio::test]
async fn bad_writes_are_refused_and_change_nothing() {
    let server = TestServer::local(ServerConfig {
        max_body_bytes: 4096,
        ..writable_config()
    })
    .await;
    greeter(&server).await;
    let mcp = mcp_stdio_entry("fs");
    let (status, _) = json(server.post("/v1/config/mcp-servers", mcp.clone()).await).await;
    assert_eq!(status, StatusCode::CREATED);
    let before = snapshot(&server).await;

    let cases: Vec<(reqwest::Response, StatusCode, &str)> = vec![
        (
            server.post("/v1/config/widgets", json!({"id": "w"})).await,
            StatusCode::NOT_FOUND,
            "unknown config namespace `widgets`",
        ),
        (
            server
                .client
                .post(server.url("/v1/config/models"))
                .header("content-type", "application/json")
                .body("{\"id\": ")
                .send()
                .await
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "json",
        ),
        (
            server
                .client
                .post(server.url("/v1/config/models"))
                .body("{}")
                .send()
                .await
                .unwrap(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "application/json",
        ),
        (
            server
                .post(
                    "/v1/config/agents",
                    json!({"id": "big", "system_prompt": "x".repeat(8192)}),
                )
                .await,
            StatusCode::PAYLOAD_TOO_LARGE,
            "",
        ),
        (
            server
                .post("/v1/config/agents", json!({"id": "a", "modle": "m"}))
                .await,
            StatusCode::BAD_REQUEST,
            "modle",
        ),
        (
            server.post("/v1/config/models", json!({"provider": "p"})).await,
            StatusCode::BAD_REQUEST,
            "required",
        ),
        (
            server
                .post("/v1/config/agents", json!({"id": "x", "model": "nope"}))
                .await,
            StatusCode::BAD_REQUEST,
            "model `nope` not found",
        ),
        (
            server
                .post("/v1/config/providers", json!({"id": "q", "adapter": "scripted"}))
                .await,
            StatusCode::BAD_REQUEST,
            "needs a `script`",
        ),
        (
            server
                .post(
                    "/v1/config/providers",
                    json!({"id": "q", "adapter": "openai", "api_key_env": "AWAKEN_TEST_UNSET_KEY_9C1"}),
                )
                .await,
            StatusCode::BAD_REQUEST,
            "AWAKEN_TEST_UNSET_KEY_9C1",
        ),
        (
            server
                .post(
                    "/v1/config/agents",
                    json!({"id": "far", "endpoint": {"backend": "a2a",
                           "base_url": "http://far.example/v1/a2a", "options": {"polling": true}}}),
                )
                .await,
            StatusCode::BAD_REQUEST,
            "unknown option `polling`",
        ),
        (
            server
                .post(
                    "/v1/config/agents",
                    json!({"id": "far", "endpoint": {"backend": "carrier-pigeon",
                           "base_url": "http://far.example"}}),
                )
                .await,
            StatusCode::BAD_REQUEST,
            "needs backend `carrier-pigeon`",
        ),
        (
            server.post("/v1/config/agents", json!({"id": "greeter", "model": "m"})).await,
            StatusCode::CONFLICT,
            "already exists",
        ),
        (
            server.post("/v1/config/agents", json!({"id": "demo", "model": "m"})).await,
            StatusCode::CONFLICT,
            "built in",
        ),
        (
            server.delete("/v1/config/models/demo").await,
            StatusCode::CONFLICT,
            "built in",
        ),
        (
            server.delete("/v1/config/models/m").await,
            StatusCode::CONFLICT,
            "in use",
        ),
        (
            server.delete("/v1/config/providers/p").await,
            StatusCode::CONFLICT,
            "in use",
        ),
        (
            server
                .put("/v1/config/models/m", json!({"id": "n", "provider": "p", "model": "x"}))
                .await,
            StatusCode::BAD_REQUEST,
            "not the path's `m`",
        ),
        (
            server
                .put("/v1/config/models/m", json!({"id": "m", "provider": "gone", "model": "x"}))
                .await,
            StatusCode::BAD_REQUEST,
            "provider `gone` not found",
        ),
        (
            server
                .put("/v1/config/models/zz", json!({"id": "zz", "provider": "p", "model": "x"}))
                .await,
            StatusCode::NOT_FOUND,
            "unknown models entry `zz`",
        ),
        (
            server.delete("/v1/config/mcp-servers/zz").await,
            StatusCode::NOT_FOUND,
            "`zz`",
        ),
        (
            server.get("/v1/config/agents/zz").await,
            StatusCode::NOT_FOUND,
            "`zz`",
        ),
        (
            server.get("/v1/config/agents?limit=x").await,
            StatusCode::BAD_REQUEST,
            "limit",
        ),
        (
            server
                .put(
                    "/v1/config/mcp-servers/fs",
                    json!({"id": "fs", "transport": {"kind": "http", "url": "file:///x"}}),
                )
                .await,
            StatusCode::BAD_REQUEST,
            "not an http(s) URL",
        ),
    ];
    for (response, status, needle) in cases {
        let url = response.url().clone();
        let (got, body) = json(response).await;
        assert_eq!(got, status, "{url}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(
            error.to_lowercase().contains(&needle.to_lowercase()),
            "{url}: {error:?} should mention {needle:?}"
        );
    }
    assert_eq!(snapshot(&server).await, before);
    assert_eq!(answer(&server, "greeter", "still").await, "hello still");
}

#[tokio::test]
async fn with_api_keys_only_admin_tenants_change_the_configuration() {
    let server = TestServer::local(ServerConfig {
        api_keys: ApiKeys::from([
            ("ops-key".into(), "ops".into()),
            ("user-key".into(), "acme".into()),
        ]),
        admin_tenants: vec!["ops".into()],
        ..writable_config()
    })
    .await;
    let post = |key: &'static str| {
        server
            .client
            .post(server.url("/v1/config/providers"))
            .bearer_auth(key)
            .json(&provider("p", "x"))
            .send()
    };
    expect_error(
        server
            .post("/v1/config/providers", provider("p", "x"))
            .await,
        StatusCode::UNAUTHORIZED,
        "API key",
    )
    .await;
    expect_error(
        post("user-key").await.unwrap(),
        StatusCode::FORBIDDEN,
        "admin_tenants",
    )
    .await;
    // Reading is for every tenant.
    let listing = server
        .client
        .get(server.url("/v1/config/providers"))
        .bearer_auth("user-key")
        .send()
        .await
        .unwrap();
    let (status, listing) = json(listing).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listing["revision"], 0, "the refused write stored nothing");
    assert_eq!(post("ops-key").await.unwrap().status(), StatusCode::CREATED);
}
