//! The decision bus on a real nats-server 2.9, fed by nats-py from a separate
//! process: a waiting run resumes once, however often its decision arrives; bad
//! decisions are rejected with an advisory and change nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream;
use async_trait::async_trait;
use awaken_actors::contract::{AgentEvent, Message, RunStatus, TerminationReason, ToolCallOutcome};
use awaken_actors::event_sink::EventSink;
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::thread::RunRequest;
use awaken_actors::{AgentId, ThreadId, ToolCallId};
use awaken_cluster::codec;
use awaken_cluster::decisions::{
    DecisionBus, DecisionBusConfig, DecisionWorker, REJECTED_SUBJECT, Rejection, RuntimeDecisions,
};
use awaken_cluster::testing::NatsServer;
use futures::StreamExt;
use serde_json::json;
use support::{CountingEcho, approver_builder};

fn runtime(echo: Arc<CountingEcho>) -> AgentRuntime {
    approver_builder(echo).build().unwrap()
}

/// Remembers the call a run suspended on.
#[derive(Default)]
struct Suspended(std::sync::Mutex<Option<ToolCallId>>);

#[async_trait]
impl EventSink for Suspended {
    async fn emit(&self, event: AgentEvent) {
        if let AgentEvent::ToolCallDone {
            id,
            outcome: ToolCallOutcome::Suspended,
            ..
        } = event
        {
            *self.0.lock().unwrap() = Some(id);
        }
    }
}

struct Fixture {
    server: NatsServer,
    runtime: AgentRuntime,
    echo: Arc<CountingEcho>,
    _worker: DecisionWorker,
}

async fn fixture() -> Fixture {
    let server = NatsServer::start().await.unwrap();
    let echo = Arc::new(CountingEcho::default());
    let runtime = runtime(echo.clone());
    let js = jetstream::new(server.connect().await.unwrap());
    let bus = DecisionBus::open(js, DecisionBusConfig::default())
        .await
        .unwrap();
    let worker = bus
        .serve(
            Arc::new(RuntimeDecisions::single_node(runtime.clone())),
            Arc::clone(runtime.metrics()),
        )
        .await
        .unwrap();
    Fixture {
        server,
        runtime,
        echo,
        _worker: worker,
    }
}

/// Starts a run that suspends on its echo call; returns the thread and the call.
async fn waiting_run(runtime: &AgentRuntime, thread: &str) -> ToolCallId {
    let sink = Arc::new(Suspended::default());
    let request = RunRequest::new(ThreadId::new(thread).unwrap(), vec![Message::user("go")])
        .with_agent_id(AgentId::new("approver").unwrap());
    let result = runtime.run(request, sink.clone()).await.unwrap();
    assert_eq!(result.termination, TerminationReason::Suspended);
    sink.0.lock().unwrap().clone().unwrap()
}

fn python() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/py-venv/bin/python");
    assert!(
        venv.exists(),
        "run scripts/setup.sh first: it installs nats-py into {venv:?}"
    );
    venv
}

/// Publishes `body` from a separate process with nats-py; returns its JetStream ack.
async fn publish_with_nats_py(
    server: &NatsServer,
    subject: &str,
    content_type: &str,
    body: &[u8],
    msg_id: Option<&str>,
) -> serde_json::Value {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), body).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/publish.py");
    let mut command = tokio::process::Command::new(python());
    command
        .arg(script)
        .arg(server.url())
        .arg(subject)
        .arg(content_type)
        .arg(file.path());
    if let Some(id) = msg_id {
        command.arg(id);
    }
    let output = command.output().await.unwrap();
    assert!(
        output.status.success(),
        "nats-py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Waits until the thread's latest run is done; fails after ten seconds.
async fn finished(runtime: &AgentRuntime, thread: &str) {
    let thread = ThreadId::new(thread).unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let latest = runtime.store().latest_run(&thread).await.unwrap().unwrap();
            if latest.status == RunStatus::Done {
                return;
            }
            runtime.thread_stopped(&thread).await;
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the run did not finish");
}

fn decision(call: &ToolCallId, decision_id: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "call_id": call.as_str(),
        "decision_id": decision_id,
        "action": "resume",
        "result": true,
        "reason": "approved from a script"
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_published_by_nats_py_resumes_the_waiting_run_once() {
    let f = fixture().await;
    let call = waiting_run(&f.runtime, "t-py").await;
    let ack = publish_with_nats_py(
        &f.server,
        "awaken.decisions.t-py",
        "application/json",
        &decision(&call, "d-1"),
        None,
    )
    .await;
    assert_eq!(ack["stream"], "AWAKEN_DECISIONS");
    finished(&f.runtime, "t-py").await;
    assert_eq!(f.echo.0.load(Ordering::SeqCst), 1);

    // The same decision again, as a new message: acknowledged, not applied twice.
    publish_with_nats_py(
        &f.server,
        "awaken.decisions.t-py",
        "application/json",
        &decision(&call, "d-1"),
        None,
    )
    .await;
    let js = jetstream::new(f.server.connect().await.unwrap());
    let mut stream = js.get_stream("AWAKEN_DECISIONS").await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        while stream.info().await.unwrap().state.messages > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the duplicate was taken off the stream");
    assert_eq!(f.echo.0.load(Ordering::SeqCst), 1, "the tool ran once");
}

/// The worker pulls again once its connection is back: a decision published
/// after a restart of the server is applied within seconds, not once the pull
/// that was in flight expires (`ack_wait` and more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_published_after_the_server_restarted_resumes_the_run() {
    let mut f = fixture().await;
    let call = waiting_run(&f.runtime, "t-restart").await;
    f.server.restart().await.unwrap();
    publish_with_nats_py(
        &f.server,
        "awaken.decisions.t-restart",
        "application/json",
        &decision(&call, "d-after-restart"),
        None,
    )
    .await;
    finished(&f.runtime, "t-restart").await;
    assert_eq!(f.echo.0.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_msgpack_decision_resumes_too() {
    let f = fixture().await;
    let call = waiting_run(&f.runtime, "t-mp").await;
    let body = codec::encode(&json!({
        "call_id": call.as_str(),
        "decision_id": "d-mp",
        "action": "resume",
        "result": true
    }))
    .unwrap();
    publish_with_nats_py(
        &f.server,
        "awaken.decisions.t-mp",
        "application/msgpack",
        &body,
        Some("d-mp"),
    )
    .await;
    finished(&f.runtime, "t-mp").await;
    assert_eq!(f.echo.0.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_decisions_are_rejected_with_an_advisory_and_change_nothing() {
    let f = fixture().await;
    let call = waiting_run(&f.runtime, "t-bad").await;
    let client = f.server.connect().await.unwrap();
    let mut advisories = client.subscribe(REJECTED_SUBJECT).await.unwrap();
    client.flush().await.unwrap();

    let cases: Vec<(&str, &str, Vec<u8>, &str)> = vec![
        (
            "awaken.decisions.t-bad",
            "application/json",
            b"{oops".to_vec(),
            "invalid JSON",
        ),
        (
            "awaken.decisions.t-bad",
            "text/plain",
            decision(&call, "d-x"),
            "content-type",
        ),
        (
            "awaken.decisions.t-bad",
            "application/json",
            serde_json::to_vec(
                &json!({"call_id": "nope", "decision_id": "d-y", "action": "resume"}),
            )
            .unwrap(),
            "not found",
        ),
        (
            "awaken.decisions.t-nobody",
            "application/json",
            decision(&call, "d-z"),
            "no active run",
        ),
    ];
    for (subject, content_type, body, expected) in cases {
        publish_with_nats_py(&f.server, subject, content_type, &body, None).await;
        let message = tokio::time::timeout(Duration::from_secs(10), advisories.next())
            .await
            .expect("an advisory")
            .unwrap();
        let rejection: Rejection = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(rejection.subject, subject);
        assert!(
            rejection.error.contains(expected),
            "{subject} {content_type}: {:?} lacks {expected:?}",
            rejection.error
        );
    }
    assert_eq!(f.echo.0.load(Ordering::SeqCst), 0, "nothing ran");
    let latest = f
        .runtime
        .store()
        .latest_run(&ThreadId::new("t-bad").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.status, RunStatus::Waiting, "the run still waits");
}
