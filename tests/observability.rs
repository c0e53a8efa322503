//! A cluster's `/metrics` as an operator's Prometheus sees it: two `awaken serve`
//! nodes on a real nats-server and PostgreSQL report their members, the shards
//! each owns, their NATS connection through a NATS outage, and the runs waiting
//! for a human whichever node parked them; a member killed with SIGKILL shows
//! up on the survivor. And a thread call crossing nodes carries its caller's
//! trace: the owner's handling is exported in the approver's trace.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[path = "../gateway/tests/otlp_support/mod.rs"]
mod otlp_support;
#[allow(dead_code)] // each suite uses some of the shared helpers
mod support;

use std::time::Duration;

use awaken_cluster::testing::NatsServer;
use serde_json::json;
use support::{
    Cluster, Node, SETTLE, SHARDS, database, new_thread, post, thread_owned_by, waiting_call,
};

/// The text of `base`'s `/metrics`.
async fn scrape(client: &reqwest::Client, base: &str) -> String {
    let response = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// The value of the unlabelled series `name` in `text`.
fn value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} is not in the scrape"))
}

/// The cluster description of the tests: one NATS server, replicas 1.
fn cluster(nats: &NatsServer, postgres_url: String, dir: &tempfile::TempDir) -> Cluster {
    Cluster {
        nats_url: nats.url(),
        postgres_url,
        replicas: 1,
        journal: dir.path().join("tools.journal"),
        server_toml: String::new(),
    }
}

/// Starts a run on `thread_id` through `base` whose `echo` call waits for
/// approval; the run's id and the waiting call's, once it waits.
async fn park(client: &reqwest::Client, base: &str, thread_id: &str) -> (String, String) {
    let body = json!({"agentId": "bench-hitl",
        "messages": [{"role": "user", "content": "echo, once approved"}]});
    let url = format!("{base}/v1/threads/{thread_id}/messages");
    let (status, queued) = post(client, url, body).await;
    assert_eq!(status, 202, "{queued}");
    let run_id = queued["run_id"].as_str().unwrap().to_owned();
    let call = waiting_call(client, base, &run_id).await;
    (run_id, call)
}

/// Scrapes `base` until `check` holds; the scrape that satisfied it. Fails the
/// test after [`SETTLE`], showing the last scrape's `awaken_` lines.
async fn until(
    client: &reqwest::Client,
    base: &str,
    what: &str,
    check: impl Fn(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let text = scrape(client, base).await;
        if check(&text) {
            return text;
        }
        if tokio::time::Instant::now() >= deadline {
            let ours: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("awaken_") && !l.contains("bucket"))
                .collect();
            panic!(
                "timed out waiting for {what} at {base}:\n{}",
                ours.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_reports_its_members_shards_nats_and_waiting_runs() {
    let mut nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(&nats, postgres_url, &dir);
    let mut nodes = Node::start_all(2, &cluster).await;
    let client = reqwest::Client::new();
    let shards = f64::from(u32::try_from(SHARDS).unwrap());

    // Both see both, are connected, and share the shards between them.
    let mut owned = Vec::new();
    for node in &nodes {
        let text = until(&client, &node.base, "two members and a share", |t| {
            value(t, "awaken_cluster_members") == 2.0
                && value(t, "awaken_nats_connected") == 1.0
                && value(t, "awaken_shards_owned") >= 1.0
        })
        .await;
        assert_eq!(value(&text, "awaken_shard_count"), shards);
        assert!(value(&text, "awaken_nats_connects_total") >= 1.0);
        assert_eq!(value(&text, "awaken_run_events_unpublished_total"), 0.0);
        owned.push(value(&text, "awaken_shards_owned"));
        assert!(
            value(&text, "awaken_shard_leases_acquired_total")
                >= value(&text, "awaken_shards_owned")
        );
    }
    // Every shard owned once, the two shares read while no lease moves.
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let a = value(
            &scrape(&client, &nodes[0].base).await,
            "awaken_shards_owned",
        );
        let b = value(
            &scrape(&client, &nodes[1].base).await,
            "awaken_shards_owned",
        );
        if a + b == shards {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "shares {a} + {b} never made {shards} (first read {owned:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A run parked on one node is counted by the other: the gauge is the store's.
    let base = &nodes[0].base;
    let thread_id = new_thread(&client, base).await;
    let (parked, call) = park(&client, base, &thread_id).await;
    until(&client, &nodes[1].base, "the waiting run counted", |t| {
        value(t, "awaken_runs_waiting") == 1.0
    })
    .await;

    // NATS goes down: the nodes say so and count the renewals that failed; it
    // comes back: they reconnect.
    nats.kill().await;
    until(&client, &nodes[0].base, "NATS down", |t| {
        value(t, "awaken_nats_connected") == 0.0
            && value(t, "awaken_shard_lease_renewal_failures_total") >= 1.0
    })
    .await;
    nats.restart().await.unwrap();
    until(&client, &nodes[0].base, "NATS back", |t| {
        value(t, "awaken_nats_connected") == 1.0 && value(t, "awaken_nats_connects_total") >= 2.0
    })
    .await;

    // A member killed: the survivor sees it gone and takes every shard.
    nodes[1].child.kill().await.unwrap();
    until(
        &client,
        &nodes[0].base,
        "one member owning every shard",
        |t| value(t, "awaken_cluster_members") == 1.0 && value(t, "awaken_shards_owned") == shards,
    )
    .await;
    nodes.truncate(1);

    // The dashboard and the alerts in `deploy/observability` ask only for
    // series this node serves, once it ran a run, a model, a tool and a decision.
    let base = &nodes[0].base;
    let decision = json!({"call_id": call, "decision_id": "d-obs", "action": "resume",
        "result": {"approved": true}});
    let (status, applied) = post(
        &client,
        format!("{base}/v1/runs/{parked}/decision"),
        decision,
    )
    .await;
    assert_eq!(status, 200, "{applied}");
    let text = until(&client, base, "the decided run finished", |t| {
        value(t, "awaken_runs_waiting") == 0.0
    })
    .await;
    let scraped = dir.path().join("scrape.txt");
    std::fs::write(&scraped, text).unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(root.join("target/py-venv/bin/python"))
        .arg(root.join("tests/deploy/check_observability.py"))
        .arg(&scraped)
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A decision posted to the node that does not own the thread is routed to the
/// owner as a thread call; the call carries the request's `traceparent` in its
/// NATS headers, so the owner's handling is a span of the approver's trace,
/// a child of the request's server span on the other node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_call_to_another_node_continues_the_callers_trace() {
    const APPROVER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const APPROVER_SPAN: &str = "b7ad6b7169203331";
    let nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(&nats, postgres_url, &dir);
    let (endpoint, mut received) = otlp_support::collector().await;
    let mut nodes = Vec::new();
    for id in ["n1", "n2"] {
        let instance = format!("service.instance.id={id}");
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ("OTEL_RESOURCE_ATTRIBUTES", instance.as_str()),
        ];
        nodes.push(Node::start_with_env(id, &cluster, &env).await);
    }
    let client = reqwest::Client::new();
    // Balanced, so no shard moves while the test routes to its owner.
    let half = f64::from(u32::try_from(SHARDS / 2).unwrap());
    for node in &nodes {
        until(&client, &node.base, "half of the shards", |t| {
            value(t, "awaken_cluster_members") == 2.0 && value(t, "awaken_shards_owned") == half
        })
        .await;
    }

    // A run parked on n1's thread; its decision posted to n2.
    let (owner, other) = (&nodes[0].base, &nodes[1].base);
    let thread_id = thread_owned_by(&client, owner, nats.connect().await.unwrap(), "n1").await;
    let (run_id, call) = park(&client, owner, &thread_id).await;
    let decision = json!({"call_id": call, "decision_id": "d-routed", "action": "resume",
        "result": {"approved": true}});
    let response = client
        .post(format!("{other}/v1/runs/{run_id}/decision"))
        .header(
            "traceparent",
            format!("00-{APPROVER_TRACE}-{APPROVER_SPAN}-01"),
        )
        .json(&decision)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());

    let spans = otlp_support::spans_until(&mut received, |spans| {
        spans.iter().any(|s| s.name == "process awaken.shard.call")
            && spans
                .iter()
                .any(|s| s.name == "POST /v1/runs/{run_id}/decision")
    })
    .await;
    let request = otlp_support::one(&spans, "POST /v1/runs/{run_id}/decision");
    assert_eq!(request.trace_id, APPROVER_TRACE);
    assert_eq!(request.parent_span_id, APPROVER_SPAN);
    assert_eq!(request.resource["service.instance.id"], "n2");
    let handled = otlp_support::one(&spans, "process awaken.shard.call");
    assert_eq!(handled.trace_id, APPROVER_TRACE);
    assert_eq!(handled.parent_span_id, request.span_id);
    assert_eq!(handled.resource["service.instance.id"], "n1");
    assert_eq!(handled.attributes["awaken.call.operation"], "decide");
    assert_eq!(handled.attributes["awaken.call.outcome"], "delivered");
    assert_eq!(handled.attributes["gen_ai.conversation.id"], thread_id);
}
