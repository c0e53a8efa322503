//! A single `awaken serve` on the file store, stopped mid-run: SIGTERM lets the
//! run finish before the process exits, and after a kill -9 the next start takes
//! the run up from its checkpoint. No run is left `running` with nobody on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::time::Duration;

use http_support::{awaken_serve, user};
use serde_json::{Value, json};

fn config(store: &std::path::Path) -> String {
    format!(
        "[server]\naddress = \"127.0.0.1:0\"\n\n[store]\nkind = \"file\"\npath = \"{}\"\n",
        store.display()
    )
}

/// POSTs `body` as JSON and reads the JSON answer.
async fn post(url: String, body: Value) -> Value {
    reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Starts a `slow` run (its tool sleeps 1.5 s) in the background; its id.
async fn slow_run(base: &str) -> String {
    let thread = post(format!("{base}/v1/threads"), json!({})).await;
    let thread_id = thread["id"].as_str().unwrap();
    let queued = post(
        format!("{base}/v1/threads/{thread_id}/messages"),
        json!({"agentId": "slow", "messages": user("take your time")}),
    )
    .await;
    queued["run_id"].as_str().unwrap().to_owned()
}

async fn run_record(base: &str, run_id: &str) -> Value {
    reqwest::get(format!("{base}/v1/runs/{run_id}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Waits (bounded) until the run's record says `status`.
async fn run_reaches(base: &str, run_id: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let record = run_record(base, run_id).await;
        if record["status"] == status {
            return record;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never reached {status}: {record}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn signal(child: &tokio::process::Child, name: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), child.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_running_run_finish_before_the_process_exits() {
    let store = tempfile::tempdir().unwrap();
    let (mut serve, base, _dir) = awaken_serve(&config(store.path())).await.unwrap();
    let run_id = slow_run(&base).await;
    run_reaches(&base, &run_id, "running").await;
    signal(&serve, "TERM");
    let exit = tokio::time::timeout(Duration::from_secs(30), serve.wait())
        .await
        .unwrap()
        .unwrap();
    let mut stderr = String::new();
    if let Some(mut err) = serve.stderr.take() {
        use tokio::io::AsyncReadExt;
        err.read_to_string(&mut stderr).await.unwrap();
    }
    assert!(exit.success(), "{exit}: {stderr}");

    let (_serve, base, _dir) = awaken_serve(&config(store.path())).await.unwrap();
    let record = run_record(&base, &run_id).await;
    assert_eq!(record["status"], "done", "{record}");
    assert_eq!(record["termination"]["type"], "natural_end", "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_by_a_kill_is_taken_up_at_the_next_start() {
    let store = tempfile::tempdir().unwrap();
    let (mut serve, base, _dir) = awaken_serve(&config(store.path())).await.unwrap();
    let run_id = slow_run(&base).await;
    run_reaches(&base, &run_id, "running").await;
    serve.kill().await.unwrap();

    let (_serve, base, _dir) = awaken_serve(&config(store.path())).await.unwrap();
    let record = run_reaches(&base, &run_id, "done").await;
    assert_eq!(record["termination"]["type"], "natural_end", "{record}");
}
