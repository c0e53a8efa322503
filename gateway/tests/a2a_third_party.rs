//! A third-party A2A agent as a remote delegate: `tests/clients/a2a_agent.py`, an
//! agent built on the reference server of a2a-sdk 1.3.0 (Python), is service A's
//! `remote-demo`, reached over A2A v1.0's HTTP+JSON binding. Its answer streams onto
//! the delegate call (or is polled), its question is answered through the parent
//! run's approval, and cancelling the parent cancels its task.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::process::Stdio;
use std::time::Duration;

use awaken_actors::AgentId;
use awaken_actors::contract::{AgentEvent, AgentSpec, RemoteEndpoint, StreamEvent};
use awaken_actors::delegation::DELEGATE_ACTIVITY_TYPE;
use awaken_gateway::protocols::a2a::A2A_BACKEND;
use http_support::delegating::{
    REMOTE, answer, boss_run, remote_task, remote_ticket, serve_a, service_a, start_boss_run,
};
use http_support::{PYTHON, decide_at, finish_type, json, run_ids, suspended_calls};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// The longest wait for anything the agent or service A is to do.
const DEADLINE: Duration = Duration::from_secs(30);

/// The Python agent as a child process (killed when dropped), and the JSON lines
/// it prints.
struct SdkAgent {
    /// Its HTTP+JSON interface: the endpoint's `base_url`.
    base: String,
    lines: mpsc::UnboundedReceiver<Value>,
    client: reqwest::Client,
    _child: tokio::process::Child,
}

impl SdkAgent {
    async fn start() -> Self {
        let clients = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
        assert!(
            std::path::Path::new(PYTHON).exists(),
            "the Python test venv is missing: run scripts/setup.sh"
        );
        let mut child = tokio::process::Command::new(PYTHON)
            .arg("a2a_agent.py")
            .current_dir(clients)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("python runs");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut stdout = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = stdout.next_line().await {
                match serde_json::from_str::<Value>(&line) {
                    Ok(value) => {
                        if sender.send(value).is_err() {
                            break;
                        }
                    }
                    Err(_) => eprintln!("a2a_agent.py: {line}"),
                }
            }
        });
        let mut agent = Self {
            base: String::new(),
            lines,
            client: reqwest::Client::new(),
            _child: child,
        };
        let listening = agent.next_line("listening").await;
        agent.base = listening["listening"].as_str().unwrap().to_owned();
        agent
    }

    /// The next line the agent prints with `key` (others are skipped); fails past
    /// the deadline or when the agent exits.
    async fn next_line(&mut self, key: &str) -> Value {
        self.try_next_line(key)
            .await
            .unwrap_or_else(|| panic!("a2a_agent.py printed no `{key}` line in time"))
    }

    /// The next line the agent prints with `key`; `None` past the deadline.
    async fn try_next_line(&mut self, key: &str) -> Option<Value> {
        let wait = async {
            loop {
                let line = self
                    .lines
                    .recv()
                    .await
                    .unwrap_or_else(|| panic!("a2a_agent.py exited before printing `{key}`"));
                if line.get(key).is_some() {
                    return line;
                }
            }
        };
        tokio::time::timeout(DEADLINE, wait).await.ok()
    }

    /// The agent's task `id`, read over its own API (`GET {base}/tasks/{id}`).
    async fn task(&self, id: &str) -> Value {
        remote_task(&self.client, &format!("{}/tasks/{id}", self.base)).await
    }

    /// Reads task `id` until it is in `state`; fails past the deadline.
    async fn task_reaches(&self, id: &str, state: &str) -> Value {
        let reached = async {
            loop {
                let task = self.task(id).await;
                if task["status"]["state"] == state {
                    return task;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(DEADLINE, reached)
            .await
            .unwrap_or_else(|_| panic!("task {id} did not reach {state}"))
    }
}

/// `remote-demo`: the agent at `base_url`, its endpoint `options` as given.
fn remote_at(base_url: &str, options: Value) -> AgentSpec {
    let mut endpoint = RemoteEndpoint::new(A2A_BACKEND, base_url);
    endpoint.options = serde_json::from_value(options).unwrap();
    AgentSpec::new(AgentId::new(REMOTE).unwrap()).with_endpoint(endpoint)
}

/// The remote task's items the delegate call showed as its activity.
fn remote_items(events: &[StreamEvent]) -> Vec<Value> {
    events.iter().flat_map(activity_items).collect()
}

fn activity_items(event: &StreamEvent) -> Vec<Value> {
    match &event.event {
        AgentEvent::ActivityDelta {
            activity_type,
            patch,
            ..
        } if activity_type == DELEGATE_ACTIVITY_TYPE => {
            patch.iter().map(|op| op["value"].clone()).collect()
        }
        _ => Vec::new(),
    }
}

/// The kind of each item (`task`, `statusUpdate`, `artifactUpdate`, `message`).
fn kinds(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| item.as_object()?.keys().next().cloned())
        .collect()
}

/// A's `boss` asks the SDK agent for an answer it follows as `options` say.
async fn plain_answer(options: Value) -> Vec<Value> {
    let agent = SdkAgent::start().await;
    let a = serve_a(service_a(remote_at(&agent.base, options), "Say hello.")).await;
    let events = boss_run(&a).await;
    assert_eq!(finish_type(&events), "natural_end");
    let said = answer(&events);
    assert!(said.starts_with("B reports: "), "{said}");
    assert!(said.contains("hello from a2a-sdk"), "{said}");
    assert!(said.contains(r#""status":"completed""#), "{said}");
    let items = remote_items(&events);
    let task_id = items
        .iter()
        .find_map(|item| item["task"]["id"].as_str())
        .expect("the task among the call's activity")
        .to_owned();
    let done = agent.task(&task_id).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_agents_streamed_answer_reaches_the_parent() {
    // No `stream` option: the card's `capabilities.streaming` decides.
    let items = plain_answer(json!({})).await;
    let kinds = kinds(&items);
    assert_eq!(
        kinds,
        [
            "task",
            "statusUpdate",
            "artifactUpdate",
            "artifactUpdate",
            "statusUpdate"
        ],
        "every stream item shows on the call: {items:?}"
    );
    assert_eq!(
        items[2]["artifactUpdate"]["artifact"]["parts"][0]["text"],
        "hello from "
    );
    assert_eq!(items[3]["artifactUpdate"]["append"], true);
    assert_eq!(
        items[4]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_agents_polled_answer_reaches_the_parent() {
    let items = plain_answer(json!({"stream": false, "poll_interval_ms": 20})).await;
    // A `returnImmediately` send, then reads of the task: whole tasks only.
    assert!(
        items.iter().all(|item| item.get("task").is_some()),
        "{items:?}"
    );
    let last = items.last().unwrap();
    assert_eq!(last["task"]["status"]["state"], "TASK_STATE_COMPLETED");
}

/// The SDK agent's question suspends A's run; A's approval reaches it and the run
/// ends with its answer; a second run denied ends with `denied`.
async fn approval_through_the_parent(options: Value) {
    let mut agent = SdkAgent::start().await;
    let a = serve_a(service_a(
        remote_at(&agent.base, options),
        "Ship the release; approve it with me first.",
    ))
    .await;

    for (approved, said) in [(true, "approved: done"), (false, "denied")] {
        let events = boss_run(&a).await;
        assert_eq!(finish_type(&events), "suspended");
        let (call_id, ticket) = remote_ticket(&events);
        assert_eq!(suspended_calls(&events), vec![call_id.clone()]);
        let question = ticket["suspension"]["message"].as_str().unwrap();
        assert_eq!(question, "[remote-demo] May I proceed?");
        let task_id = ticket["remote"]["task_id"].as_str().unwrap().to_owned();
        let named = ticket["remote"].get("call_ids").and_then(Value::as_array);
        assert!(
            named.is_none_or(Vec::is_empty),
            "it named no calls: {ticket}"
        );
        let waiting = agent.task(&task_id).await;
        assert_eq!(waiting["status"]["state"], "TASK_STATE_INPUT_REQUIRED");

        let (_, run_id) = run_ids(&events);
        let decision = if approved {
            json!({"call_id": call_id, "decision_id": "d-yes", "action": "resume",
                   "result": {"approved": true}})
        } else {
            json!({"call_id": call_id, "decision_id": "d-no", "action": "cancel",
                   "reason": "not today"})
        };
        let resumed = tokio::time::timeout(
            DEADLINE,
            decide_at(
                &a.client,
                &a.base,
                &run_id,
                events.last().unwrap().seq,
                decision,
            ),
        )
        .await
        .expect("the resumed run ends in time");
        assert_eq!(finish_type(&resumed), "natural_end");
        let answer = answer(&resumed);
        assert!(answer.contains(said), "{answer}");

        // The follow-up the agent got: words, on the waiting task.
        let follow_up = agent.next_line("answered").await;
        assert_eq!(follow_up["answered"], task_id.as_str());
        let message = &follow_up["message"];
        assert_eq!(message["taskId"], task_id.as_str());
        assert_eq!(message["contextId"], waiting["contextId"]);
        assert_eq!(message["role"], "ROLE_USER");
        let word = if approved { "approve" } else { "deny" };
        assert_eq!(message["parts"], json!([{"text": word}]), "{follow_up}");
        let done = agent.task(&task_id).await;
        assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
        assert_eq!(done["artifacts"][0]["parts"][0]["text"], said);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_agents_question_is_answered_through_the_parent_when_streaming() {
    approval_through_the_parent(json!({})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_agents_question_is_answered_through_the_parent_when_polling() {
    approval_through_the_parent(json!({"stream": false, "poll_interval_ms": 20})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_cancels_the_sdk_agents_task() {
    let mut agent = SdkAgent::start().await;
    let a = serve_a(service_a(
        remote_at(&agent.base, json!({})),
        "Run the batch and wait for it.",
    ))
    .await;
    let mut run = start_boss_run(&a).await;

    // Read A's run until its call shows the task working (A knows the task then).
    let mut seen = Vec::new();
    let working = async {
        while let Some(event) = run.next().await {
            let working = activity_items(&event)
                .iter()
                .any(|item| item["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING");
            seen.push(event);
            if working {
                return;
            }
        }
        panic!("the run ended before its delegate worked: {seen:?}");
    };
    tokio::time::timeout(DEADLINE, working)
        .await
        .expect("the remote task works in time");
    let working = agent.next_line("working").await;
    let task_id = working["working"].as_str().unwrap().to_owned();
    let shown = remote_items(&seen)
        .iter()
        .find_map(|item| item["task"]["id"].as_str().map(str::to_owned));
    assert_eq!(shown.as_deref(), Some(task_id.as_str()));

    let (_, run_id) = run_ids(&seen);
    let (status, body) = json(
        a.post(&format!("/v1/runs/{run_id}/cancel"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    let rest = tokio::time::timeout(DEADLINE, run.rest())
        .await
        .expect("the cancelled run ends in time");
    assert_eq!(finish_type(&rest), "cancelled");

    // The call's execution is dropped: its stream closes and the task is cancelled.
    let Some(cancelled) = agent.try_next_line("cancelled").await else {
        panic!(
            "A's run ended cancelled, but no `POST {}/tasks/{task_id}:cancel` reached the \
             agent within {DEADLINE:?}: the delegate call's execution went on (its stream \
             stayed open)",
            agent.base
        );
    };
    assert_eq!(
        cancelled["cancelled"],
        task_id.as_str(),
        "A cancelled the task it started"
    );
    let task = agent.task_reaches(&task_id, "TASK_STATE_CANCELED").await;
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_cancels_the_sdk_agents_waiting_task() {
    let mut agent = SdkAgent::start().await;
    let a = serve_a(service_a(
        remote_at(&agent.base, json!({})),
        "Ship the release; approve it with me first.",
    ))
    .await;
    let events = boss_run(&a).await;
    assert_eq!(finish_type(&events), "suspended");
    let (_, ticket) = remote_ticket(&events);
    let task_id = ticket["remote"]["task_id"].as_str().unwrap().to_owned();
    let waiting = agent.task(&task_id).await;
    assert_eq!(waiting["status"]["state"], "TASK_STATE_INPUT_REQUIRED");

    let (_, run_id) = run_ids(&events);
    let (status, body) = json(
        a.post(&format!("/v1/runs/{run_id}/cancel"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let cancelled = agent.next_line("cancelled").await;
    assert_eq!(cancelled["cancelled"], task_id.as_str());
    agent.task_reaches(&task_id, "TASK_STATE_CANCELED").await;
}
