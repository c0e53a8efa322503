//! `/v1/openapi.json` over HTTP, and every route it lists answered by the router
//! (never the unknown-path or wrong-method fallback).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::server::{ServerConfig, served_routes};
use http_support::{TestServer, json};
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn the_served_document_lists_every_route_and_each_one_answers() {
    let server = TestServer::local(ServerConfig::default()).await;
    let (status, document) = json(server.get("/v1/openapi.json").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().unwrap();

    for (method, template) in served_routes() {
        let operation = &paths[template][method.as_str().to_lowercase()];
        assert!(operation["summary"].is_string(), "{method} {template}");
        // Ids that exist nowhere: the route must answer with its own refusal.
        let path = template
            .replace("{namespace}", "models")
            .replace('{', "")
            .replace('}', "-unknown");
        let mut request = server.client.request(
            Method::from_bytes(method.as_str().as_bytes()).unwrap(),
            server.url(&path),
        );
        if method != Method::GET && method != Method::DELETE {
            request = request.json(&json!({}));
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let body = response.text().await.unwrap();
        assert_ne!(
            status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}: {body}"
        );
        assert!(
            !body.contains("no route for"),
            "{method} {path} fell through: {body}"
        );
    }
}
