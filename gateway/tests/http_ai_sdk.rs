//! The AI SDK v6 routes, driven by the real `ai@6` client (`node`, installed by
//! `scripts/setup.sh`) and, for bad input, by plain HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use awaken_gateway::server::ServerConfig;
use http_support::{TestServer, expect_error, json};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::http_support::{node_client, node_client_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_client_accepts_every_chunk_and_completes_approvals() {
    let server = TestServer::local(ServerConfig::default()).await;
    let seen = node_client("ai_sdk.mjs", &server.base).await;

    // Every chunk passed `uiMessageChunkSchema`; the tool call's lifecycle is there.
    let types: Vec<&str> = seen["raw"]["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for expected in [
        "start",
        "start-step",
        "tool-input-start",
        "tool-input-available",
        "tool-output-available",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ] {
        assert!(
            types.contains(&expected),
            "{expected} missing from {types:?}"
        );
    }
    assert_eq!(types.first(), Some(&"start"));
    assert_eq!(types.last(), Some(&"finish"));
    let parts = &seen["raw"]["message"]["parts"];
    let state = parts
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "data-state-snapshot")
        .expect("a state snapshot");
    assert!(
        state["data"]
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("__") && !k.starts_with("runtime.")),
        "runtime bookkeeping is not shown: {state}"
    );

    // Approved: the continuation resumed the same run, in the same message.
    let approved = &seen["approved"];
    assert_eq!(approved["askedMetadata"]["termination"], "suspended");
    assert_eq!(approved["askedId"], approved["finalId"]);
    assert_eq!(approved["finalMetadata"]["termination"], "natural_end");
    assert_eq!(approved["toolState"], "output-available");
    assert_eq!(approved["toolOutput"]["deleted"], "notes.txt");
    assert!(approved["text"].as_str().unwrap().starts_with("Done."));
    assert_eq!(approved["resumedAfterFinish"], false);
    let run_id = approved["askedId"].as_str().unwrap();
    let (status, run) = json(server.get(&format!("/v1/runs/{run_id}")).await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["status"], "done");
    let thread = approved["askedMetadata"]["threadId"].as_str().unwrap();
    let (_, runs) = json(server.get(&format!("/v1/threads/{thread}/runs")).await).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");

    // Denied: the call is reported as denied, and the model heard why.
    let denied = &seen["denied"];
    assert_eq!(denied["toolState"], "output-denied");
    assert!(denied["text"].as_str().unwrap().contains("keep it"));
    server.shutdown().await;
}

fn chat(id: &str, agent: &str, text: &str) -> Value {
    json!({
        "id": id,
        "agentId": agent,
        "trigger": "submit-message",
        "messages": [{"id": format!("u-{id}"), "role": "user", "parts": [{"type": "text", "text": text}]}],
    })
}

/// Reads a chat stream to its end and returns its chunks.
async fn chunks(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    text.split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

fn approval_of(chunks: &[Value]) -> (String, String) {
    let request = chunks
        .iter()
        .find(|c| c["type"] == "tool-approval-request")
        .expect("an approval request");
    (
        request["toolCallId"].as_str().unwrap().to_owned(),
        request["approvalId"].as_str().unwrap().to_owned(),
    )
}

fn answer(id: &str, call: &str, approval: &str) -> Value {
    json!({
        "id": id,
        "messages": [{"id": "a", "role": "assistant", "parts": [{
            "type": "tool-delete_file", "toolCallId": call, "state": "approval-responded",
            "input": {"path": "notes.txt"}, "approval": {"id": approval, "approved": true}
        }]}],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_chat_requests_are_refused_and_change_nothing() {
    let server = TestServer::local(ServerConfig::default()).await;

    // An unknown agent: 404, and the chat's thread is not created.
    expect_error(
        server
            .post("/v1/ai-sdk/chat", chat("c-unknown", "nobody", "hi"))
            .await,
        StatusCode::NOT_FOUND,
        "unknown agent",
    )
    .await;
    assert_eq!(
        server.get("/v1/threads/c-unknown").await.status(),
        StatusCode::NOT_FOUND
    );
    // Malformed JSON, wrong content type, an empty chat.
    let raw = server
        .client
        .post(server.url("/v1/ai-sdk/chat"))
        .header("content-type", "application/json")
        .body("{\"messages\": [")
        .send()
        .await
        .unwrap();
    expect_error(raw, StatusCode::BAD_REQUEST, "").await;
    let plain = server
        .client
        .post(server.url("/v1/ai-sdk/chat"))
        .header("content-type", "text/plain")
        .body("hi")
        .send()
        .await
        .unwrap();
    expect_error(plain, StatusCode::UNSUPPORTED_MEDIA_TYPE, "").await;
    expect_error(
        server
            .post("/v1/ai-sdk/chat", json!({"id": "c", "messages": []}))
            .await,
        StatusCode::BAD_REQUEST,
        "at least one message",
    )
    .await;

    // Approvals without a waiting run, and for a call that does not wait.
    expect_error(
        server
            .post("/v1/ai-sdk/chat", answer("c-none", "call", "t"))
            .await,
        StatusCode::NOT_FOUND,
        "unknown thread",
    )
    .await;
    let asked = chunks(
        server
            .post("/v1/ai-sdk/chat", chat("c-wait", "demo", "tidy"))
            .await,
    )
    .await;
    let (call, approval) = approval_of(&asked);
    expect_error(
        server
            .post("/v1/ai-sdk/chat", answer("c-wait", "other-call", &approval))
            .await,
        StatusCode::CONFLICT,
        "does not wait",
    )
    .await;
    let (_, run) = json(server.get("/v1/threads/c-wait/runs/latest").await).await;
    assert_eq!(
        run["status"], "waiting",
        "a refused approval changes nothing"
    );

    // The right answer resumes the run; the same answer again finds nothing waiting.
    let resumed = chunks(
        server
            .post("/v1/ai-sdk/chat", answer("c-wait", &call, &approval))
            .await,
    )
    .await;
    assert!(
        resumed
            .iter()
            .any(|c| c["type"] == "tool-output-available" && c["toolCallId"] == call.as_str())
    );
    expect_error(
        server
            .post("/v1/ai-sdk/chat", answer("c-wait", &call, &approval))
            .await,
        StatusCode::CONFLICT,
        "waits for a decision",
    )
    .await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_resume_by_thread_and_by_run_and_history_is_ui_messages() {
    let server = TestServer::local(ServerConfig::default()).await;
    let asked = chunks(
        server
            .post("/v1/ai-sdk/chat", chat("c-hist", "demo", "tidy"))
            .await,
    )
    .await;
    let run_id = asked[0]["messageId"].as_str().unwrap().to_owned();

    // Nothing executes on the thread: no stream to resume.
    let idle = server.get("/v1/ai-sdk/chat/c-hist/stream").await;
    assert_eq!(idle.status(), StatusCode::NO_CONTENT);
    expect_error(
        server.get("/v1/ai-sdk/threads/unknown/stream").await,
        StatusCode::NOT_FOUND,
        "unknown thread",
    )
    .await;

    // By run: the latest activation again, chunk for chunk.
    for path in [
        format!("/v1/ai-sdk/runs/{run_id}/stream"),
        format!("/v1/ai-sdk/streams/{run_id}"),
    ] {
        assert_eq!(chunks(server.get(&path).await).await, asked, "{path}");
    }
    expect_error(
        server.get("/v1/ai-sdk/streams/no-such-run").await,
        StatusCode::NOT_FOUND,
        "unknown run",
    )
    .await;

    let (status, history) = json(server.get("/v1/ai-sdk/threads/c-hist/messages").await).await;
    assert_eq!(status, StatusCode::OK);
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(
        messages[0]["id"], "u-c-hist",
        "the client's message id is kept"
    );
    assert_eq!(messages[0]["parts"][0]["text"], "tidy");
    assert_eq!(messages[1]["id"], run_id.as_str());
    assert!(
        messages[1]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["type"] == "tool-delete_file")
    );

    // Cancel and interrupt are the thread routes, here too.
    let (status, _) = json(
        server
            .post("/v1/ai-sdk/threads/c-hist/cancel", json!({}))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "the waiting run is cancelled");
    let (status, _) = json(
        server
            .post("/v1/ai-sdk/threads/c-hist/interrupt", json!({}))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_pass_the_clients_validation_and_use_chat_goes_on_from_them() {
    let server = TestServer::local(ServerConfig::default()).await;
    let tools = server.tool_schemas(&["demo", "orchestrator"]);
    let seen = node_client_with("ai_sdk_histories.mjs", &[&server.base, &tools.to_string()]).await;

    // Every history passed `validateUIMessages`; each call is shown as it ended,
    // with the approval the stream asked for (`approved` absent while asked; no
    // approval on a call the run's cancellation ended).
    let expected = [
        ("approved", "output-available", Some(json!(true))),
        ("denied", "output-denied", Some(json!(false))),
        ("failed", "output-error", Some(json!(true))),
        ("waiting", "approval-requested", Some(Value::Null)),
        ("cancelled", "output-error", None),
        ("delegated", "output-available", Some(json!(true))),
    ];
    for (name, state, approved) in expected {
        let history = &seen[name]["history"];
        assert_eq!(history["state"], state, "{name}: {}", seen[name]);
        match approved {
            Some(approved) => {
                assert_eq!(
                    history["approval"]["id"], seen[name]["streamApprovalId"],
                    "{name}: the history's approval is the stream's"
                );
                assert_eq!(history["approval"]["approved"], approved, "{name}");
            }
            None => assert_eq!(history["approval"], Value::Null, "{name}"),
        }
    }
    assert_eq!(seen["denied"]["reason"], "keep it");
    assert_eq!(seen["failed"]["errorText"], "no such file: notes.txt");
    assert_eq!(seen["cancelled"]["errorText"], "the run was cancelled");
    let child = seen["delegated"]["child"].as_array().unwrap();
    assert_eq!(child.len(), 1, "{child:?}");
    // The child's call was approved through the parent's; notes.txt is gone by then.
    assert_eq!(child[0]["state"], "output-error");
    assert_eq!(child[0]["approval"]["approved"], true);

    // `useChat` went on from each: the waiting run was approved in its own message,
    // the others took a new message whose approval was denied.
    let waiting = &seen["waiting"]["resumed"];
    assert_eq!(waiting["sameMessage"], true);
    assert_eq!(
        waiting["tool"]["state"], "output-error",
        "notes.txt is gone"
    );
    assert_eq!(waiting["tool"]["approval"]["approved"], true);
    assert_eq!(waiting["termination"], "natural_end");
    for name in ["approved", "denied", "failed", "cancelled", "delegated"] {
        let resumed = &seen[name]["resumed"];
        assert_eq!(resumed["sameMessage"], false, "{name}");
        assert_eq!(
            resumed["tool"]["state"], "output-denied",
            "{name}: {resumed}"
        );
        assert_eq!(resumed["termination"], "natural_end", "{name}");
    }
    server.shutdown().await;
}
