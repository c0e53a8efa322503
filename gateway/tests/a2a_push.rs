//! A2A push notifications delivered from the thread store's webhooks: every
//! state change of every task, in order, also to a receiver that was down for a
//! while, dead letters after the last retry, configs that outlive the server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awaken_actors::RunId;
use awaken_gateway::server::{A2aPushConfig, ServerConfig};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use http_support::TestServer;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A push receiver: what it was sent, and what it answers.
#[derive(Clone)]
struct Receiver {
    seen: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
    arrived: Arc<Notify>,
    /// The status it answers a notification with.
    answer: Arc<dyn Fn(&Value) -> StatusCode + Send + Sync>,
}

impl Receiver {
    fn new(answer: impl Fn(&Value) -> StatusCode + Send + Sync + 'static) -> Self {
        Self {
            seen: Arc::default(),
            arrived: Arc::new(Notify::new()),
            answer: Arc::new(answer),
        }
    }

    /// Serves on `address` (`127.0.0.1:0`: a free port).
    async fn serve(&self, address: SocketAddr) -> SocketAddr {
        async fn hook(
            State(receiver): State<Receiver>,
            headers: HeaderMap,
            axum::Json(body): axum::Json<Value>,
        ) -> StatusCode {
            let status = (receiver.answer)(&body);
            receiver.seen.lock().unwrap().push((headers, body));
            receiver.arrived.notify_waiters();
            status
        }
        let listener = tokio::net::TcpListener::bind(address).await.unwrap();
        let bound = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(hook))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        bound
    }

    /// The states each task was told of, in the order they arrived (duplicates
    /// in a row folded: delivery is at least once).
    fn states(&self) -> BTreeMap<String, Vec<String>> {
        let mut states: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (_, body) in self.seen.lock().unwrap().iter() {
            let update = &body["statusUpdate"];
            let task = update["taskId"].as_str().unwrap_or_default().to_owned();
            let state = update["status"]["state"].as_str().unwrap_or_default();
            let told = states.entry(task).or_default();
            if told.last().map(String::as_str) != Some(state) {
                told.push(state.to_owned());
            }
        }
        states
    }

    /// Waits (up to `within`) until `done` holds for what arrived.
    async fn wait_until(
        &self,
        within: Duration,
        done: impl Fn(&BTreeMap<String, Vec<String>>) -> bool,
    ) -> BTreeMap<String, Vec<String>> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.arrived.notified();
            let states = self.states();
            if done(&states) {
                return states;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.states();
            }
        }
    }
}

fn quick_retries(attempts: u32) -> ServerConfig {
    ServerConfig {
        a2a_push_allowed_hosts: vec!["127.0.0.1".into()],
        a2a_push: A2aPushConfig {
            attempts,
            first_backoff_ms: 100,
            max_backoff_ms: 1_000,
            sweep_interval_ms: 200,
            ..A2aPushConfig::default()
        },
        ..ServerConfig::default()
    }
}

/// Sends a message to `bench-text` with a push config to `url`, returning at
/// once; the task's id.
async fn send_with_push(server: &TestServer, url: &str, token: &str) -> String {
    let body = json!({
        "message": {"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER", "parts": [{"text": "hello"}]},
        "configuration": {
            "returnImmediately": true,
            "taskPushNotificationConfig": {"url": url, "token": token},
        },
    });
    let response = server
        .client
        .post(server.url("/v1/a2a/bench-text/message:send"))
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let sent: Value = response.json().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{sent}");
    sent["task"]["id"].as_str().unwrap().to_owned()
}

const WORKING_THEN_COMPLETED: [&str; 2] = ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"];

fn all_completed(tasks: &[String]) -> impl Fn(&BTreeMap<String, Vec<String>>) -> bool + '_ {
    move |states| {
        tasks.iter().all(|task| {
            states
                .get(task)
                .and_then(|told| told.last())
                .is_some_and(|last| last == "TASK_STATE_COMPLETED")
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_fast_tasks_each_deliver_every_state_change_in_order() {
    let receiver = Receiver::new(|_| StatusCode::OK);
    let address = receiver.serve("127.0.0.1:0".parse().unwrap()).await;
    let url = format!("http://{address}/hook");
    let server = TestServer::local(quick_retries(4)).await;

    let mut tasks = Vec::new();
    for _ in 0..100 {
        tasks.push(send_with_push(&server, &url, "tok-1").await);
    }
    let states = receiver
        .wait_until(Duration::from_secs(60), all_completed(&tasks))
        .await;
    for task in &tasks {
        assert_eq!(
            states.get(task).map(Vec::as_slice),
            Some(&WORKING_THEN_COMPLETED.map(String::from)[..]),
            "task {task}"
        );
    }
    assert_eq!(states.len(), 100, "only these tasks were told of");
    for (headers, _) in receiver.seen.lock().unwrap().iter() {
        assert_eq!(headers["x-a2a-notification-token"], "tok-1");
    }
    // The final notification carries the answer.
    let seen = receiver.seen.lock().unwrap();
    let completed = seen
        .iter()
        .find(|(_, body)| body["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED")
        .unwrap();
    assert!(
        completed.1["statusUpdate"]["status"]["message"]["parts"][0]["text"].is_string(),
        "{}",
        completed.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_down_for_ten_seconds_gets_every_notification_once_it_is_up() {
    // A free port, closed until the receiver starts on it.
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{address}/hook");
    let server = TestServer::local(quick_retries(30)).await;

    let mut tasks = Vec::new();
    for _ in 0..5 {
        tasks.push(send_with_push(&server, &url, "tok-2").await);
    }
    // The outage being simulated, not a wait for anything.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let receiver = Receiver::new(|_| StatusCode::OK);
    receiver.serve(address).await;

    let states = receiver
        .wait_until(Duration::from_secs(30), all_completed(&tasks))
        .await;
    for task in &tasks {
        assert_eq!(
            states.get(task).map(Vec::as_slice),
            Some(&WORKING_THEN_COMPLETED.map(String::from)[..]),
            "task {task}: {states:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_refused_on_every_try_becomes_a_dead_letter_and_the_next_goes_out() {
    // The receiver refuses every WORKING notification.
    let receiver = Receiver::new(|body| {
        if body["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING" {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        }
    });
    let address = receiver.serve("127.0.0.1:0".parse().unwrap()).await;
    let server = TestServer::local(quick_retries(3)).await;
    let task = send_with_push(&server, &format!("http://{address}/hook"), "tok-3").await;

    let tasks = [task.clone()];
    let states = receiver
        .wait_until(Duration::from_secs(30), all_completed(&tasks))
        .await;
    assert_eq!(states[&task], WORKING_THEN_COMPLETED.map(String::from));
    let working_tries = receiver
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, body)| body["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING")
        .count();
    assert_eq!(working_tries, 3, "tried as often as configured");

    // The delivery is recorded once the receiver's answer is in.
    let store = server.control().store();
    let run_id = RunId::new(task.as_str()).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let webhooks = loop {
        let webhooks = store.webhooks().load_webhooks(&run_id).await.unwrap();
        if webhooks.iter().all(|webhook| webhook.done) || tokio::time::Instant::now() > deadline {
            break webhooks;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(webhooks.len(), 1);
    assert!(webhooks[0].done, "{:?}", webhooks[0]);
    let dead = &webhooks[0].dead_letters;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(
        dead[0]["notification"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    assert_eq!(dead[0]["attempts"], 3);
    assert!(
        dead[0]["error"].as_str().unwrap().contains("503"),
        "{}",
        dead[0]
    );
    assert!(
        !dead[0].to_string().contains("tok-3"),
        "the receiver's token stays out of dead letters"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_live_in_the_thread_store_and_a_second_server_on_it_lists_them() {
    let receiver = Receiver::new(|_| StatusCode::OK);
    let address = receiver.serve("127.0.0.1:0".parse().unwrap()).await;
    let url = format!("http://{address}/hook");
    let first = TestServer::local(quick_retries(3)).await;
    let task = send_with_push(&first, &url, "tok-4").await;
    receiver
        .wait_until(
            Duration::from_secs(30),
            all_completed(std::slice::from_ref(&task)),
        )
        .await;

    // Another gateway over the same node (and so the same store) sees the config.
    let second = TestServer::serve(first.control(), quick_retries(3)).await;
    let path = format!("/v1/a2a/bench-text/tasks/{task}/pushNotificationConfigs");
    let listed: Value = second
        .client
        .get(second.url(&path))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let configs = listed["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 1, "{listed}");
    assert_eq!(configs[0]["url"], url.as_str());
    assert_eq!(configs[0]["taskId"], task.as_str());

    // Deleted through one, gone for both.
    let id = configs[0]["id"].as_str().unwrap();
    let deleted = first
        .client
        .delete(first.url(&format!("{path}/{id}")))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::OK);
    let got = second
        .client
        .get(second.url(&format!("{path}/{id}")))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), StatusCode::BAD_REQUEST);
}
