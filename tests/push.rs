//! A2A push notifications on a real cluster: two `awaken serve` processes on NATS
//! and one PostgreSQL schema. The node delivering a task's notifications goes away
//! while the task waits for approval — killed (SIGKILL: its lease runs out) or
//! stopped (SIGTERM: it hands the lease back at once) — and the other node takes
//! the delivery over from the thread store: the receiver is told the rest.
//!
//! Needs PostgreSQL, `nats-server` on the PATH and the `awaken` binary built
//! beside this test, like `chaos.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[allow(dead_code)] // each suite uses some of the shared helpers
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use awaken_cluster::testing::NatsServer;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};
use support::{Cluster, Node, SETTLE, database, post, waiting_call};
use tokio::sync::Notify;

/// The states a receiver was told of, in order, and a wake-up per arrival.
#[derive(Clone, Default)]
struct Receiver {
    states: Arc<Mutex<Vec<String>>>,
    arrived: Arc<Notify>,
}

impl Receiver {
    async fn serve(&self) -> String {
        async fn hook(
            State(receiver): State<Receiver>,
            axum::Json(body): axum::Json<Value>,
        ) -> StatusCode {
            let state = body["statusUpdate"]["status"]["state"]
                .as_str()
                .unwrap_or("not a status update")
                .to_owned();
            receiver.states.lock().unwrap().push(state);
            receiver.arrived.notify_waiters();
            StatusCode::OK
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(hook))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{address}/hook")
    }

    /// Waits (up to `within`) until state `last` arrives; the states so far.
    async fn until(&self, last: &str, within: Duration) -> Vec<String> {
        tokio::time::timeout(within, async {
            loop {
                let arrived = self.arrived.notified();
                let states = self.states.lock().unwrap().clone();
                if states.iter().any(|state| state == last) {
                    return states;
                }
                arrived.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {last}: {:?}", self.states.lock().unwrap()))
    }
}

/// How the delivering node goes away.
#[derive(Clone, Copy)]
enum Exit {
    /// SIGKILL: its leases run out (`lease_ms`).
    Killed,
    /// SIGTERM, waited for: it hands its leases back as it starts stopping.
    Stopped,
}

/// A task on `bench-hitl` whose push config is made on one of two nodes; once the
/// receiver was told it waits for approval, that node goes away as `exit` says,
/// the approval is given through the other node, and the receiver must be told
/// the rest within `within`.
async fn delivery_moves_on(exit: Exit, lease_ms: u64, within: Duration) {
    let nats = NatsServer::start().await.unwrap();
    let (postgres_url, _schema) = database().await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster {
        nats_url: nats.url(),
        postgres_url,
        replicas: 1,
        journal: dir.path().join("tools.journal"),
        server_toml: format!(
            "a2a_push_allowed_hosts = [\"127.0.0.1\"]\n\
             [server.a2a_push]\nlease_ms = {lease_ms}\nsweep_interval_ms = 300\n\
             first_backoff_ms = 100\nmax_backoff_ms = 500\n"
        ),
    };
    let mut delivering = Node::start("n1", &cluster).await;
    let other = Node::start("n2", &cluster).await;
    let client = reqwest::Client::new();
    let receiver = Receiver::default();
    let url = receiver.serve().await;

    // A task whose tool call waits for approval, its push config made on n1.
    let body = json!({
        "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "echo, once approved"}]},
        "configuration": {"returnImmediately": true, "taskPushNotificationConfig": {"url": url}},
    });
    let send = format!("{}/v1/a2a/bench-hitl/message:send", delivering.base);
    let response = client
        .post(send)
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let sent: Value = response.json().await.unwrap();
    let task = sent["task"]["id"].as_str().unwrap().to_owned();
    let told = receiver.until("TASK_STATE_INPUT_REQUIRED", SETTLE).await;
    assert_eq!(told, ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]);

    match exit {
        Exit::Killed => delivering.child.kill().await.unwrap(),
        Exit::Stopped => {
            delivering.signal("TERM");
            let status = tokio::time::timeout(SETTLE, delivering.child.wait())
                .await
                .expect("the node stops in time")
                .unwrap();
            assert!(status.success(), "{status}");
        }
    }

    // Approved through the other node (503 while the thread changes hands).
    let approved_at = tokio::time::Instant::now();
    let call = waiting_call(&client, &other.base, &task).await;
    let decision = json!({"call_id": call, "decision_id": "d-1", "action": "resume",
        "result": {"approved": true}});
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let url = format!("{}/v1/runs/{task}/decision", other.base);
        let (status, answer) = post(&client, url, decision.clone()).await;
        if status == 200 {
            break;
        }
        assert!(
            status == 503 && tokio::time::Instant::now() < deadline,
            "{status} {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let told = receiver
        .until(
            "TASK_STATE_COMPLETED",
            within.saturating_sub(approved_at.elapsed()),
        )
        .await;
    assert_eq!(
        &told[..2],
        ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"],
        "{told:?}"
    );
    assert_eq!(told.last().unwrap(), "TASK_STATE_COMPLETED", "{told:?}");
    assert!(
        told[2..].iter().all(|state| [
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_COMPLETED"
        ]
        .contains(&state.as_str())),
        "{told:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivering_node_killed_mid_task_another_node_delivers_the_rest() {
    delivery_moves_on(Exit::Killed, 2_000, SETTLE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivering_node_stopped_hands_delivery_over_without_waiting_for_its_lease() {
    // A lease of a minute that is never waited for: the stopping node hands it back.
    delivery_moves_on(Exit::Stopped, 60_000, Duration::from_secs(30)).await;
}
