//! The mailbox worker on one node: submitted runs execute through the mailbox,
//! waiting runs release their claim, claims left behind are taken up again (at once
//! when their claimer is gone, else when the lease expires), and bad dispatches are
//! dead-lettered.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use awaken_actors::clock::now_ms;
use awaken_actors::contract::{
    AgentEvent, RunDispatch, RunDispatchStatus, RunStatus, StreamEvent, TerminationReason,
    ToolExecutionMode,
};
use awaken_actors::ids::DispatchId;
use awaken_actors::mailbox::{
    Claimant, InMemoryMailboxStore, InMemoryRunInbox, MailboxConfig, MailboxStore, MailboxWorker,
    RunInbox, SubmitOptions, submit,
};
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::store::FencingToken;
use awaken_actors::thread::{FenceSource, RunRequest, ThreadConfig};
use awaken_actors::{AgentId, RunId, ThreadId};
use support::*;

struct Node {
    runtime: AgentRuntime,
    mailbox: Arc<InMemoryMailboxStore>,
    inbox: Arc<InMemoryRunInbox>,
    _worker: MailboxWorker,
}

fn config() -> MailboxConfig {
    MailboxConfig {
        lease_ms: 300,
        lease_renewal_interval: Duration::from_millis(50),
        sweep_interval: Duration::from_millis(50),
        default_retry_delay_ms: 10,
        ..MailboxConfig::default()
    }
}

async fn node(runtime: AgentRuntime) -> Node {
    let mailbox = Arc::new(InMemoryMailboxStore::new(config()));
    let inbox = Arc::new(InMemoryRunInbox::default());
    let worker = MailboxWorker::start(
        runtime.clone(),
        mailbox.clone(),
        inbox.clone(),
        config(),
        Claimant::single_node("node-1"),
    )
    .await
    .unwrap();
    Node {
        runtime,
        mailbox,
        inbox,
        _worker: worker,
    }
}

/// Polls the dispatch until it is terminal (bounded; fails the test after 10 s).
async fn settled(mailbox: &dyn MailboxStore, id: &DispatchId) -> RunDispatch {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let dispatch = mailbox.load_dispatch(id).await.unwrap().unwrap();
        if dispatch.status.is_terminal() {
            return dispatch;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "dispatch never settled: {dispatch:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Submits a run on `thread` and waits until its `gate` call has started.
async fn submit_until_the_gate(n: &Node, gate: &Gate, thread: &str) -> RunDispatch {
    let started = gate.started.notified();
    let request = RunRequest::new(tid(thread), user("hi"));
    let queued = submit(&*n.mailbox, &*n.inbox, request, SubmitOptions::default())
        .await
        .unwrap();
    started.await;
    queued
}

#[tokio::test]
async fn a_submitted_run_executes_and_its_dispatch_is_acked_with_the_result() {
    let llm = ScriptedLlm::new(vec![Turn::Text("hello from the mailbox")]);
    let n = node(plain_runtime(llm, ToolExecutionMode::Sequential, vec![])).await;
    let request = RunRequest::new(tid("w-1"), user("hi"));
    let queued = submit(&*n.mailbox, &*n.inbox, request, SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(queued.status, RunDispatchStatus::Queued);

    let done = settled(&*n.mailbox, &queued.dispatch_id).await;
    assert_eq!(done.status, RunDispatchStatus::Acked);
    assert_eq!(done.run_status, Some(RunStatus::Done));
    assert_eq!(done.termination, Some(TerminationReason::NaturalEnd));
    assert_eq!(done.run_response.as_deref(), Some("hello from the mailbox"));
    assert_eq!(done.claimed_by, None);
    assert!(n.inbox.is_empty(), "the input is dropped once acked");
    let record = n.runtime.store().load_run(&queued.run_id).await.unwrap();
    assert_eq!(record.unwrap().status, RunStatus::Done);
}

#[tokio::test]
async fn a_run_still_executing_after_its_activation_holds_its_claim_until_it_finishes() {
    let (runtime, gate) = gated_runtime();
    let n = node(runtime).await;
    let queued = submit_until_the_gate(&n, &gate, "w-held").await;

    let running = n
        .mailbox
        .load_dispatch(&queued.dispatch_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(running.status, RunDispatchStatus::Claimed);
    assert_eq!(running.claimed_by.as_deref(), Some("node-1"));
    assert!(
        !n.inbox.is_empty(),
        "the input stays until the run is acked"
    );

    gate.release.notify_one();
    let done = settled(&*n.mailbox, &queued.dispatch_id).await;
    assert_eq!(done.status, RunDispatchStatus::Acked);
    assert_eq!(done.run_status, Some(RunStatus::Done));
    assert_eq!(done.run_response.as_deref(), Some("done"));
    assert!(n.inbox.is_empty());
}

#[tokio::test]
async fn a_waiting_run_acks_its_dispatch_and_keeps_the_run_open() {
    let (rt, echo) = approved_echo_runtime("approved");
    let n = node(rt).await;
    let thread = tid("w-wait");
    let queued = submit(
        &*n.mailbox,
        &*n.inbox,
        RunRequest::new(thread.clone(), user("go")),
        SubmitOptions::default(),
    )
    .await
    .unwrap();
    let acked = settled(&*n.mailbox, &queued.dispatch_id).await;
    assert_eq!(acked.status, RunDispatchStatus::Acked);
    assert_eq!(acked.run_status, Some(RunStatus::Waiting));
    assert_eq!(acked.termination, Some(TerminationReason::Suspended));
    let open = n.runtime.active_run(&thread).await.unwrap().unwrap();
    assert_eq!(open.run_id, queued.run_id, "the thread keeps the open run");
    assert_eq!(echo.calls.load(Ordering::SeqCst), 0);

    let waiting = n.runtime.store().load_run(&queued.run_id).await.unwrap();
    let call = waiting.unwrap().waiting.unwrap().tickets[0]
        .tool_call_id
        .clone();
    let result = n
        .runtime
        .decide_and_wait(&thread, call, resume("d-1", serde_json::json!(true)), None)
        .await
        .unwrap();
    assert_eq!(result.run_id, queued.run_id);
    assert_eq!(result.response, "approved");
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1);
}

/// A run `claimer` claimed for `lease_ms` and never finished, taken up by a
/// worker "node-1" that holds `live` for the claimers still there.
async fn left_behind_by(
    claimer: &str,
    lease_ms: u64,
    live: awaken_actors::mailbox::Liveness,
) -> RunDispatch {
    let llm = ScriptedLlm::new(vec![Turn::Text("recovered")]);
    let runtime = plain_runtime(llm, ToolExecutionMode::Sequential, vec![]);
    let mailbox = Arc::new(InMemoryMailboxStore::new(config()));
    let inbox = Arc::new(InMemoryRunInbox::default());
    let queued = submit(
        &*mailbox,
        &*inbox,
        RunRequest::new(tid("w-orphan"), user("hi")),
        SubmitOptions::default(),
    )
    .await
    .unwrap();
    mailbox
        .claim_dispatch(&queued.dispatch_id, claimer, lease_ms, now_ms())
        .await
        .unwrap();
    let _worker = MailboxWorker::start(
        runtime,
        mailbox.clone(),
        inbox.clone(),
        config(),
        Claimant {
            consumer: "node-1".into(),
            placement: Arc::new(|_: &ThreadId| true),
            live,
        },
    )
    .await
    .unwrap();

    let done = settled(&*mailbox, &queued.dispatch_id).await;
    assert_eq!(done.status, RunDispatchStatus::Acked);
    assert_eq!(
        done.attempt_count, 2,
        "the dead claim counted as an attempt"
    );
    assert_eq!(done.run_response.as_deref(), Some("recovered"));
    assert_eq!(done.dispatch_instance_id.as_deref(), Some("node-1"));
    done
}

/// An hour: longer than any test waits, so only giving the claim back can finish.
const HOUR_MS: u64 = 3_600_000;

#[tokio::test]
async fn a_claim_whose_claimer_seems_alive_is_reclaimed_when_its_lease_expires() {
    let done = left_behind_by("silent-node", 100, Arc::new(|_| true)).await;
    assert_eq!(done.last_error.as_deref(), Some("lease expired"));
}

#[tokio::test]
async fn a_claim_of_a_consumer_that_left_is_given_back_without_waiting_for_its_lease() {
    let done = left_behind_by(
        "dead-node",
        HOUR_MS,
        Arc::new(|consumer: &str| consumer != "dead-node"),
    )
    .await;
    assert_eq!(
        done.last_error.as_deref(),
        Some("its claimer dead-node is gone")
    );
}

#[tokio::test]
async fn a_claim_of_an_earlier_process_of_this_node_is_given_back_at_once() {
    let done = left_behind_by("node-1", HOUR_MS, Arc::new(|_| true)).await;
    assert_eq!(
        done.last_error.as_deref(),
        Some("its claimer node-1 is gone")
    );
}

/// A runtime of the scripted model whose events `hub` records.
fn recorded_runtime(llm: Arc<ScriptedLlm>, hub: &Arc<HubRecorder>) -> AgentRuntime {
    support::runtime(
        llm,
        agent_spec(ToolExecutionMode::Sequential),
        vec![],
        None,
        Some(hub.clone()),
        ThreadConfig::default(),
    )
}

#[tokio::test]
async fn a_run_whose_last_attempt_died_with_its_claimer_before_it_started_ends_failed() {
    let llm = ScriptedLlm::new(vec![Turn::Text("never")]);
    let hub = Arc::new(HubRecorder::default());
    let runtime = recorded_runtime(llm, &hub);
    let mailbox = Arc::new(InMemoryMailboxStore::new(config()));
    let inbox = Arc::new(InMemoryRunInbox::default());
    let options = SubmitOptions {
        max_attempts: 1,
        ..SubmitOptions::default()
    };
    let request = RunRequest::new(tid("w-last-try"), user("hi"));
    let queued = submit(&*mailbox, &*inbox, request, options).await.unwrap();
    mailbox
        .claim_dispatch(&queued.dispatch_id, "dead-node", HOUR_MS, now_ms())
        .await
        .unwrap();
    let worker = MailboxWorker::start(
        runtime.clone(),
        mailbox.clone(),
        inbox.clone(),
        config(),
        Claimant {
            consumer: "node-1".into(),
            placement: Arc::new(|_: &ThreadId| true),
            live: Arc::new(|consumer: &str| consumer != "dead-node"),
        },
    )
    .await
    .unwrap();
    let n = Node {
        runtime,
        mailbox,
        inbox,
        _worker: worker,
    };

    let dead = settled(&*n.mailbox, &queued.dispatch_id).await;
    assert_eq!(dead.status, RunDispatchStatus::DeadLetter);
    let error = failed_run_error(&n, &queued.run_id, &hub).await;
    assert!(error.contains("its claimer dead-node is gone"), "{error}");
}

#[tokio::test]
async fn a_dispatch_whose_input_is_gone_or_refused_is_dead_lettered_and_its_run_ends_failed() {
    let llm = ScriptedLlm::new(vec![Turn::Text("unused")]);
    let hub = Arc::new(HubRecorder::default());
    let runtime = recorded_runtime(llm, &hub);
    let n = node(runtime).await;

    let orphan = RunDispatch::new(tid("w-no-input"), RunId::generate(), 0, now_ms());
    let orphan = n.mailbox.enqueue(orphan, now_ms()).await.unwrap();
    let dead = settled(&*n.mailbox, &orphan.dispatch_id).await;
    assert_eq!(dead.status, RunDispatchStatus::DeadLetter);
    assert_eq!(dead.last_error.as_deref(), Some("the run's input is gone"));
    let error = failed_run_error(&n, &orphan.run_id, &hub).await;
    assert!(error.contains("node `node-1`"), "{error}");
    assert!(error.contains("input is gone"), "{error}");

    let unknown_agent = RunRequest::new(tid("w-bad-agent"), user("hi"))
        .with_agent_id(AgentId::new("nobody").unwrap());
    let queued = submit(
        &*n.mailbox,
        &*n.inbox,
        unknown_agent,
        SubmitOptions::default(),
    )
    .await
    .unwrap();
    let dead = settled(&*n.mailbox, &queued.dispatch_id).await;
    assert_eq!(dead.status, RunDispatchStatus::DeadLetter);
    assert!(
        dead.last_error.as_deref().unwrap().contains("nobody"),
        "{dead:?}"
    );
    let error = failed_run_error(&n, &queued.run_id, &hub).await;
    assert!(error.contains("nobody"), "{error}");
    let record = n
        .runtime
        .store()
        .load_run(&queued.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.agent_id.as_str(),
        "nobody",
        "the record names the agent asked for"
    );
    let messages = n
        .runtime
        .store()
        .load_messages(&tid("w-bad-agent"), &Default::default())
        .await
        .unwrap();
    assert!(
        messages.messages.is_empty(),
        "the refused input was not taken in"
    );
    assert_eq!(n.runtime.failed_starts(), 2);
}

/// Waits for `run_id`'s `run_finish` on the hub and checks the run's record
/// agrees: done, with the error the stream ended with.
async fn failed_run_error(n: &Node, run_id: &RunId, hub: &HubRecorder) -> String {
    let finished = |event: &AgentEvent| matches!(event, AgentEvent::RunFinish { run_id: id, .. } if id == run_id);
    tokio::time::timeout(Duration::from_secs(10), hub.wait_for(finished))
        .await
        .expect("the failed run's stream ends");
    let events: Vec<StreamEvent> = hub
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, _)| id == run_id)
        .map(|(_, event)| event.clone())
        .collect();
    assert_eq!(
        events
            .iter()
            .map(|e| (e.seq, e.event.event_type()))
            .collect::<Vec<_>>(),
        vec![(0, "run_start"), (1, "run_finish")]
    );
    let AgentEvent::RunFinish {
        termination: TerminationReason::Error(streamed),
        ..
    } = &events[1].event
    else {
        panic!("the run ends with an error: {events:?}");
    };
    let record = n.runtime.store().load_run(run_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Done);
    assert_eq!(
        record.termination,
        Some(TerminationReason::Error(streamed.clone()))
    );
    streamed.clone()
}

#[tokio::test]
async fn a_duplicate_dedupe_key_is_refused_and_keeps_the_first_input() {
    let llm = ScriptedLlm::new(vec![Turn::Text("once")]);
    let n = node(plain_runtime(llm, ToolExecutionMode::Sequential, vec![])).await;
    let options = SubmitOptions {
        dedupe_key: Some("client-request-7".into()),
        ..SubmitOptions::default()
    };
    let run_id = RunId::generate();
    let request = RunRequest::new(tid("w-dedupe"), user("hi")).with_run_id(run_id.clone());
    let first = submit(&*n.mailbox, &*n.inbox, request.clone(), options.clone())
        .await
        .unwrap();
    let again = submit(&*n.mailbox, &*n.inbox, request, options).await;
    assert!(
        matches!(
            again,
            Err(awaken_actors::mailbox::MailboxError::Duplicate(_))
        ),
        "{again:?}"
    );
    let done = settled(&*n.mailbox, &first.dispatch_id).await;
    assert_eq!(done.status, RunDispatchStatus::Acked);
    assert_eq!(done.run_response.as_deref(), Some("once"));
    assert!(n.inbox.get(&run_id).await.unwrap().is_none());
}

#[tokio::test]
async fn a_redelivered_dispatch_of_a_run_that_already_ended_leaves_the_thread_alone() {
    let (runtime, echo) = approved_echo_runtime("approved");
    let mailbox = Arc::new(InMemoryMailboxStore::new(config()));
    let inbox = Arc::new(InMemoryRunInbox::default());
    let thread = tid("w-ended");
    // A node claimed run A's dispatch, ran it until a later input cancelled it, and
    // died before acking.
    let first = RunRequest::new(thread.clone(), user("first")).with_run_id(RunId::generate());
    let queued = submit(&*mailbox, &*inbox, first.clone(), SubmitOptions::default())
        .await
        .unwrap();
    mailbox
        .claim_dispatch(&queued.dispatch_id, "dead-node", HOUR_MS, now_ms())
        .await
        .unwrap();
    let waiting = runtime
        .run(first, Arc::new(Collector::default()))
        .await
        .unwrap();
    assert_eq!(waiting.termination, TerminationReason::Suspended);
    let second = runtime
        .run(
            RunRequest::new(thread.clone(), user("second")),
            Arc::new(Collector::default()),
        )
        .await
        .unwrap();
    assert_eq!(second.termination, TerminationReason::Suspended);

    let _worker = MailboxWorker::start(
        runtime.clone(),
        mailbox.clone(),
        inbox.clone(),
        config(),
        Claimant {
            consumer: "node-1".into(),
            placement: Arc::new(|_: &ThreadId| true),
            live: Arc::new(|consumer: &str| consumer != "dead-node"),
        },
    )
    .await
    .unwrap();
    let done = settled(&*mailbox, &queued.dispatch_id).await;
    assert_eq!(done.status, RunDispatchStatus::Acked);
    assert_eq!(done.attempt_count, 2);
    assert_eq!(done.run_status, Some(RunStatus::Done));
    assert_eq!(done.termination, Some(TerminationReason::Cancelled));
    assert!(inbox.is_empty(), "the ended run's input is dropped");

    let open = runtime.active_run(&thread).await.unwrap().unwrap();
    assert_eq!(open.run_id, second.run_id, "the later run still waits");
    let old = runtime
        .store()
        .load_run(&queued.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(old.termination, Some(TerminationReason::Cancelled));
    assert_eq!(echo.calls.load(Ordering::SeqCst), 0);
}

/// A node's hold on its threads, switched by the test (a lapsed tenure).
#[derive(Default)]
struct Tenure(AtomicBool);

impl FenceSource for Tenure {
    fn token(&self, _thread_id: &ThreadId) -> FencingToken {
        FencingToken(1)
    }

    fn holds(&self, _thread_id: &ThreadId) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn a_run_whose_thread_actor_was_fenced_off_mid_run_is_given_back_and_finishes() {
    let gate = Arc::new(Gate::default());
    let tenure = Arc::new(Tenure(AtomicBool::new(true)));
    let runtime = scripted_builder(ScriptedLlm::new(vec![
        Turn::Calls(vec![("gate", serde_json::json!({}))]),
        Turn::Text("done"),
    ]))
    .with_tool("gate", gate.clone())
    .with_fence_source(tenure.clone())
    .with_agent_spec(agent_spec(ToolExecutionMode::Sequential))
    .build()
    .unwrap();
    // The node keeps the thread's shard throughout: only its tenure lapses for a
    // moment (a pause, a NATS outage), and its thread actor stops mid-run.
    let n = node(runtime).await;
    let queued = submit_until_the_gate(&n, &gate, "w-fenced").await;
    tenure.0.store(false, Ordering::SeqCst);
    gate.release.notify_one();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while n.runtime.supervised_threads() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the actor never stopped"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // The tenure is back: the run no one drives any more is activated again from
    // its checkpoint and ends, rather than its claim being renewed forever.
    tenure.0.store(true, Ordering::SeqCst);
    gate.release.notify_one();
    let done = settled(&*n.mailbox, &queued.dispatch_id).await;
    assert_eq!(done.status, RunDispatchStatus::Acked);
    assert_eq!(done.attempt_count, 2, "{done:?}");
    assert_eq!(done.run_status, Some(RunStatus::Done));
    let record = n.runtime.store().load_run(&queued.run_id).await.unwrap();
    assert_eq!(
        done.termination,
        Some(TerminationReason::NaturalEnd),
        "{record:?}"
    );
    assert_eq!(record.unwrap().status, RunStatus::Done);
}
