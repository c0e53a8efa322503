//! The cluster's example programs run as their READMEs say: `two_nodes` against
//! a NATS server, and `publish_decision` deciding a run that waits on an
//! `awaken serve` cluster node (NATS, PostgreSQL) from outside.
//!
//! Needs PostgreSQL, `nats-server` on the PATH, and the `awaken` binary and the
//! `awaken-cluster` examples built beside this test (`cargo nextest run
//! --workspace` builds both).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[allow(dead_code)] // each suite uses some of the shared helpers
mod support;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use awaken_cluster::testing::NatsServer;
use serde_json::json;
use support::{Cluster, Node, database, done_run, new_thread, post, record, waiting_call};

/// An example program of this build (in `examples/` beside the test's own directory).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let binary = dir.join("examples").join(name);
    assert!(
        binary.exists(),
        "{} is missing: build the examples first (cargo build -p awaken-cluster --examples)",
        binary.display()
    );
    binary
}

/// Runs an example to its end (within a minute); its exit status and output.
async fn run_example(name: &str, args: &[&str]) -> Output {
    let run = tokio::process::Command::new(example(name))
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| panic!("{name} {args:?} did not finish within a minute"))
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_runs_each_thread_on_its_owner_whichever_node_was_asked() {
    let nats = NatsServer::start().await.unwrap();
    let output = run_example("two_nodes", &["--nats", &nats.url()]).await;
    let printed = stdout(&output);
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        printed.contains("(owned by a), submitted to a: executed on node \"a\""),
        "{printed}"
    );
    assert!(
        printed.contains("(owned by b), submitted to a: executed on node \"b\""),
        "{printed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_decision_resumes_a_waiting_run_and_reports_a_rejected_decision() {
    let nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster {
        nats_url: nats.url(),
        postgres_url,
        replicas: 1,
        journal: dir.path().join("tools.journal"),
        server_toml: String::new(),
    };
    let node = Node::start("n1", &cluster).await;
    let client = reqwest::Client::new();
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
    let run_id = queued["run_id"].as_str().unwrap().to_owned();
    let call = waiting_call(&client, &node.base, &run_id).await;

    // Bad input changes nothing: a wrong verdict is refused before publishing.
    let output = run_example(
        "publish_decision",
        &["--nats", &nats.url(), &thread, &call, "maybe"],
    )
    .await;
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert_eq!(
        record(&client, &node.base, &run_id).await.unwrap()["status"],
        "waiting"
    );
    // So is a thread id that would be a wildcard in the subject.
    let output = run_example(
        "publish_decision",
        &["--nats", &nats.url(), "thread.>", &call, "approve"],
    )
    .await;
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("cannot be a NATS subject"),
        "{output:?}"
    );
    assert_eq!(
        record(&client, &node.base, &run_id).await.unwrap()["status"],
        "waiting"
    );

    let output = run_example(
        "publish_decision",
        &["--nats", &nats.url(), &thread, &call, "approve"],
    )
    .await;
    let printed = stdout(&output);
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains("stored in AWAKEN_DECISIONS"), "{printed}");
    let run = done_run(&client, &node.base, &run_id).await;
    assert_eq!(run["termination"]["type"], "natural_end", "{run}");

    // The run no longer waits: the node rejects a second decision, and the
    // program says so.
    let output = run_example(
        "publish_decision",
        &[
            "--nats",
            &nats.url(),
            "--wait",
            "30",
            &thread,
            &call,
            "deny",
        ],
    )
    .await;
    let printed = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains("rejected: "), "{printed}");
    assert_eq!(
        record(&client, &node.base, &run_id).await.unwrap()["status"],
        "done"
    );
}
