//! Delegation over A2A between services, with the calling node killed mid-task:
//! service A is two `awaken serve` cluster nodes (NATS, one PostgreSQL schema)
//! whose `boss` delegates to `long` in service B (another `awaken serve`). The node
//! running the delegate call is killed (SIGKILL) while B works on the task; the
//! node that takes the thread over follows the same remote task, so B runs the
//! work exactly once.
//!
//! Needs PostgreSQL, `nats-server` on the PATH and the `awaken` binary built
//! beside this test, like `chaos.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[allow(dead_code)] // each suite uses some of the shared helpers
mod support;

use std::collections::BTreeMap;

use awaken_cluster::testing::NatsServer;
use serde_json::{Value, json};
use support::{Cluster, Node, SETTLE, all_end, database, holds_a_shard, post, thread_owned_by};

/// Service B: the demo tools, and `long`, which sleeps a while, then answers.
const SERVICE_B: &str = r#"
demo_agents = true

[server]
address = "127.0.0.1:0"

[store]
kind = "memory"

[providers.long]
adapter = "scripted"
script = { steps = [
  { tool_calls = [{ name = "sleep", arguments = { ms = 6000 } }] },
  { text = "done sleeping" },
] }

[models.long]
provider = "long"
model = "long"

[agents.long]
model = "long"
allowed_tools = ["sleep"]
"#;

/// Service A's agents (in each node's `local.toml`): `boss` delegates once to
/// `remote-long`, B's `long`.
fn service_a_agents(b_base: &str) -> String {
    format!(
        r#"
[providers.boss]
adapter = "scripted"
script = {{ steps = [
  {{ tool_calls = [{{ name = "agent_run_remote-long", arguments = {{ prompt = "take your time" }} }}] }},
  {{ text = "B said: {{last_tool_result}}" }},
] }}

[models.boss]
provider = "boss"
model = "boss"

[agents.boss]
model = "boss"
delegates = ["remote-long"]
allowed_tools = ["agent_run_remote-long"]

[agents.remote-long.endpoint]
backend = "a2a"
base_url = "{b_base}/v1/a2a"
target = "long"
options = {{ poll_interval_ms = 200 }}
"#
    )
}

/// B's tasks of `long`.
async fn b_tasks(client: &reqwest::Client, b_base: &str) -> Vec<Value> {
    let listed: Value = client
        .get(format!("{b_base}/v1/a2a/long/tasks"))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    listed["tasks"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calling_node_killed_mid_task_the_remote_work_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let b_config = dir.path().join("b.toml");
    std::fs::write(&b_config, SERVICE_B).unwrap();
    let b = Node::serve("b", &[&b_config], &[], &[]).await;

    let nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let cluster = Cluster {
        nats_url: nats.url(),
        postgres_url,
        replicas: 1,
        journal: dir.path().join("tools.journal"),
        server_toml: service_a_agents(&b.base),
    };
    let mut calling = Node::start("n1", &cluster).await;
    let other = Node::start("n2", &cluster).await;
    let client = reqwest::Client::new();
    let nats_client = async_nats::connect(nats.url()).await.unwrap();
    holds_a_shard(nats_client.clone(), "n1").await;

    // A run of `boss` on a thread n1 owns, sent through n2.
    let thread_id = thread_owned_by(&client, &other.base, nats_client, "n1").await;
    let body = json!({"agentId": "boss", "messages": [{"role": "user", "content": "ask B"}]});
    let url = format!("{}/v1/threads/{thread_id}/messages", other.base);
    let (status, queued) = post(&client, url, body).await;
    assert_eq!(status, 202, "{queued}");
    let run_id = queued["run_id"].as_str().unwrap().to_owned();

    // Once B works on the task, the node that asked for it dies.
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let tasks = b_tasks(&client, &b.base).await;
        if tasks
            .iter()
            .any(|task| task["status"]["state"] == "TASK_STATE_WORKING")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "B never got the task: {tasks:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    calling.child.kill().await.unwrap();

    let runs = BTreeMap::from([(thread_id, vec![run_id.clone()])]);
    let ended = all_end(&client, &other.base, &runs).await;
    let run = &ended[&run_id];
    assert_eq!(run["termination"]["type"], "natural_end", "{run}");

    let tasks = b_tasks(&client, &b.base).await;
    assert_eq!(tasks.len(), 1, "B ran the work once: {tasks:#?}");
    assert_eq!(tasks[0]["status"]["state"], "TASK_STATE_COMPLETED");
    let messages: Value = client
        .get(format!(
            "{}/v1/threads/{}/messages",
            other.base,
            runs.keys().next().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        messages.to_string().contains("done sleeping"),
        "the boss heard B's answer: {messages}"
    );
}
