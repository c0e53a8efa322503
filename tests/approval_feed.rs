//! The approval feed across processes: two `awaken serve` nodes on one NATS and
//! one PostgreSQL, and a NATS-only approver (nats-py, logged in as the
//! least-privilege approver user of `docs/security.md`) that learns of each
//! approval from `awaken.approvals.requested.>`, decides it on the decision
//! bus and sees it resolved on `awaken.approvals.resolved.>`; meanwhile the
//! inbox's SSE stream on either node carries the same records.
//!
//! Needs `nats-server` on the PATH, nats-py in `target/py-venv`
//! (`scripts/setup.sh`), PostgreSQL, and the `awaken` binary built beside.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[allow(dead_code)] // this suite uses few of the shared helpers
mod support;

use std::path::PathBuf;
use std::process::Stdio;

use awaken_cluster::testing::NatsServer;
use futures::StreamExt;
use serde_json::{Value, json};
use support::tls::NODE_PERMISSIONS;
use support::{Cluster, Node, SETTLE, database, done_run, new_thread, post};
use tokio::io::{AsyncBufReadExt, BufReader};

const NODE_PASSWORD: &str = "node-pw-51c2";
const APPROVER_PASSWORD: &str = "approver-pw-7e1a";
const API_KEY: &str = "feed-key-0b3c";

/// The approver of `docs/security.md`: a decision publisher that also reads
/// the approval feed.
const APPROVER_PERMISSIONS: &str = r#"{
  publish: { allow: ["awaken.decisions.>"] }
  subscribe: { allow: ["_INBOX.>", "awaken.advisories.decisions.>", "awaken.approvals.>"] }
}"#;

async fn nats_with_users() -> NatsServer {
    let config = format!(
        r#"
authorization {{
  users: [
    {{ user: "node", password: "{NODE_PASSWORD}", permissions: {NODE_PERMISSIONS} }}
    {{ user: "approver", password: "{APPROVER_PASSWORD}", permissions: {APPROVER_PERMISSIONS} }}
  ]
}}
"#
    );
    NatsServer::start_configured(&config).await.unwrap()
}

/// The approval stream of `base`, as `(id, data)` frames.
async fn approval_frames(
    client: &reqwest::Client,
    base: &str,
) -> impl futures::Stream<Item = (String, Value)> + Unpin {
    use eventsource_stream::Eventsource;
    let response = client
        .get(format!("{base}/v1/approvals/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    Box::pin(response.bytes_stream().eventsource().filter_map(|frame| {
        let frame = frame.unwrap();
        futures::future::ready(
            (!frame.data.is_empty())
                .then(|| (frame.id, serde_json::from_str(&frame.data).unwrap())),
        )
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_only_approver_follows_the_feed_and_decides_runs_on_two_nodes() {
    let nats = nats_with_users().await;
    let (postgres_url, _schema) = database().await;
    let journal = tempfile::NamedTempFile::new().unwrap();
    let cluster = Cluster {
        nats_url: format!("nats://node:{NODE_PASSWORD}@127.0.0.1:{}", nats.port()),
        postgres_url,
        replicas: 1,
        journal: journal.path().to_owned(),
        server_toml: format!("api_keys = {{ \"{API_KEY}\" = \"tenant-a\" }}"),
    };
    let nodes = Node::start_all(2, &cluster).await;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {API_KEY}").parse().unwrap(),
    );
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();

    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("../target/py-venv/bin/python");
    assert!(python.exists(), "run scripts/setup.sh first (nats-py)");
    let mut approver = tokio::process::Command::new(python)
        .arg(root.join("py/approve.py"))
        .arg(nats.url())
        .args(["approver", APPROVER_PASSWORD, "2"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut said = BufReader::new(approver.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(SETTLE, said.next_line()).await;
    assert_eq!(
        ready.unwrap().unwrap().as_deref(),
        Some("ready"),
        "nats-py subscribed"
    );
    let mut on_second = approval_frames(&client, &nodes[1].base).await;

    // One run through each node; each waits for approval of its echo call.
    let mut runs = Vec::new();
    for node in &nodes {
        let thread = new_thread(&client, &node.base).await;
        let body = json!({"agentId": "bench-hitl",
            "messages": [{"role": "user", "content": "echo, once approved"}]});
        let (status, queued) = post(
            &client,
            format!("{}/v1/threads/{thread}/messages", node.base),
            body,
        )
        .await;
        assert_eq!(status, 202, "{queued}");
        runs.push((thread, queued["run_id"].as_str().unwrap().to_owned()));
    }

    let printed = tokio::time::timeout(SETTLE, said.next_line())
        .await
        .expect("the approver saw both approvals resolved")
        .unwrap()
        .unwrap();
    let seen: Value = serde_json::from_str(&printed).unwrap();
    let requested = seen["requested"].as_array().unwrap();
    let resolved = seen["resolved"].as_array().unwrap();
    assert_eq!(requested.len(), 2, "{seen}");
    assert_eq!(resolved.len(), 2, "{seen}");
    assert_eq!(
        seen["acks"],
        json!(["AWAKEN_DECISIONS", "AWAKEN_DECISIONS"])
    );
    assert_eq!(seen["tenants"], json!(["tenant-a", "tenant-a"]));
    for record in requested {
        assert_eq!(record["event"], "requested");
        assert_eq!(record["approval"]["status"], "pending");
        assert_eq!(record["approval"]["agent_id"], "bench-hitl");
        assert_eq!(record["approval"]["tenant"], "tenant-a");
    }
    for (thread, run_id) in &runs {
        let record = resolved
            .iter()
            .find(|record| record["approval"]["thread_id"] == thread.as_str())
            .unwrap_or_else(|| panic!("no resolution for {thread}: {seen}"));
        assert_eq!(record["event"], "resolved");
        assert_eq!(record["approval"]["status"], "approved");
        assert_eq!(record["approval"]["run_id"], run_id.as_str());
        assert_eq!(
            record["approval"]["answer"]["reason"], "approved from NATS",
            "{record}"
        );
        let done = done_run(&client, &nodes[0].base, run_id).await;
        assert_eq!(done["termination_code"], "natural_end", "{done}");
        // The inbox agrees with the feed, from either node.
        let id = record["approval"]["approval_id"].as_str().unwrap();
        let one: Value = client
            .get(format!("{}/v1/approvals/{id}", nodes[1].base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(one, record["approval"]);
    }
    let status = tokio::time::timeout(SETTLE, approver.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());

    // The second node's SSE stream carried all four records, of both nodes'
    // runs, each once, with ids that resume the stream.
    let mut frames = Vec::new();
    while frames.len() < 4 {
        let frame = tokio::time::timeout(SETTLE, on_second.next())
            .await
            .expect("the stream carries every record")
            .unwrap();
        frames.push(frame);
    }
    let mut kinds: Vec<(String, String)> = frames
        .iter()
        .map(|(_, record)| {
            (
                record["approval"]["thread_id"].as_str().unwrap().to_owned(),
                record["event"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    kinds.sort();
    let mut expected: Vec<(String, String)> = runs
        .iter()
        .flat_map(|(thread, _)| {
            [
                (thread.clone(), "requested".to_owned()),
                (thread.clone(), "resolved".to_owned()),
            ]
        })
        .collect();
    expected.sort();
    assert_eq!(kinds, expected);
    let ids: Vec<u64> = frames.iter().map(|(id, _)| id.parse().unwrap()).collect();
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
}
