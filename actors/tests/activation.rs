//! Activation: a mailbox dispatch starts its run once, however often it is
//! delivered (a node may die holding the claim, and the next node delivers again).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;

use awaken_actors::RunId;
use awaken_actors::contract::{AgentEvent, RunStatus, TerminationReason, ToolExecutionMode};
use awaken_actors::store::MessageQuery;
use awaken_actors::thread::{Activation, ControlError, RunRequest};
use support::*;

#[tokio::test]
async fn a_new_run_starts_once_and_a_repeated_delivery_finds_it_finished() {
    let llm = ScriptedLlm::new(vec![Turn::Text("hello")]);
    let rt = plain_runtime(llm, ToolExecutionMode::Sequential, vec![]);
    let thread = tid("activate-once");
    let run_id = RunId::generate();
    let sink = Arc::new(Collector::default());
    let request = RunRequest::new(thread.clone(), user("hi"));

    let first = rt
        .activate(
            &thread,
            run_id.clone(),
            Some(request.clone()),
            Some(sink.clone()),
        )
        .await
        .unwrap();
    assert_eq!(first, Activation::Started);
    sink.wait_for(|e| matches!(e, AgentEvent::RunFinish { .. }))
        .await;
    let started: Vec<_> = sink
        .snapshot()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::RunStart { run_id, .. } => Some(run_id),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        vec![run_id.clone()],
        "the run keeps the dispatch's id"
    );

    let again = rt
        .activate(&thread, run_id.clone(), Some(request), None)
        .await
        .unwrap();
    assert_eq!(again, Activation::Finished);
    let log = rt
        .store()
        .load_messages(&thread, &MessageQuery::default())
        .await
        .unwrap();
    assert_eq!(
        log.messages.len(),
        2,
        "user + answer, nothing appended twice"
    );
}

#[tokio::test]
async fn a_waiting_run_is_reported_waiting_and_not_restarted() {
    let (rt, echo) = approved_echo_runtime("done");
    let thread = tid("activate-waiting");
    let run_id = RunId::generate();
    let sink = Arc::new(Collector::default());
    let request = RunRequest::new(thread.clone(), user("go"));
    rt.activate(
        &thread,
        run_id.clone(),
        Some(request.clone()),
        Some(sink.clone()),
    )
    .await
    .unwrap();
    sink.wait_for(|e| matches!(e, AgentEvent::RunFinish { .. }))
        .await;

    let again = rt
        .activate(&thread, run_id.clone(), Some(request), None)
        .await
        .unwrap();
    assert_eq!(again, Activation::Waiting);
    assert_eq!(echo.calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    let active = rt.active_run(&thread).await.unwrap().unwrap();
    assert_eq!(active.run_id, run_id);
}

#[tokio::test]
async fn a_running_run_is_reported_running() {
    let (rt, gate) = gated_runtime();
    let thread = tid("activate-running");
    let run_id = RunId::generate();
    let request = RunRequest::new(thread.clone(), user("go"));
    rt.activate(&thread, run_id.clone(), Some(request.clone()), None)
        .await
        .unwrap();
    gate.started.notified().await;

    let again = rt
        .activate(&thread, run_id.clone(), Some(request), None)
        .await
        .unwrap();
    assert_eq!(again, Activation::Running);

    // A second deliverer attaches to the running run and hears its end.
    let mut watch = rt.watch_run(&run_id);
    gate.release.notify_one();
    let end = watch.ended().await.unwrap();
    assert_eq!(end.status(), RunStatus::Done);
    assert_eq!(end.termination, TerminationReason::NaturalEnd);
    assert_eq!(end.response, "done");
}

#[tokio::test]
async fn an_unknown_run_without_input_is_not_found_and_changes_nothing() {
    let llm = ScriptedLlm::new(vec![Turn::Text("unused")]);
    let rt = plain_runtime(llm, ToolExecutionMode::Sequential, vec![]);
    let thread = tid("activate-unknown");
    let run_id = RunId::generate();
    let refused = rt
        .activate(&thread, run_id.clone(), None, None)
        .await
        .unwrap_err();
    assert_eq!(refused, ControlError::RunNotFound { run_id });
    assert!(rt.active_run(&thread).await.unwrap().is_none());
    assert!(rt.store().load_thread(&thread).await.unwrap().is_none());
}

/// Starts a run of `approved_echo_runtime` on `thread` and waits for it to wait;
/// its id and its suspended call.
async fn waiting_run(
    rt: &awaken_actors::runtime::AgentRuntime,
    thread: &awaken_actors::ThreadId,
) -> (RunId, awaken_actors::ToolCallId) {
    let run_id = RunId::generate();
    let sink = Arc::new(Collector::default());
    let request = RunRequest::new(thread.clone(), user("go"));
    rt.activate(thread, run_id.clone(), Some(request), Some(sink.clone()))
        .await
        .unwrap();
    sink.wait_for(|e| matches!(e, AgentEvent::RunFinish { .. }))
        .await;
    (run_id, suspended_call(&sink.take()))
}

#[tokio::test]
async fn a_decision_resumes_its_run_in_one_message_and_is_followed_to_the_end() {
    let (rt, echo) = approved_echo_runtime("done");
    let thread = tid("decide-and-follow");
    let (run_id, call) = waiting_run(&rt, &thread).await;

    let (ack, ending) = rt
        .decide_and_follow(
            &thread,
            Some(run_id.clone()),
            call.clone(),
            resume("d-1", serde_json::json!(true)),
        )
        .await
        .unwrap();
    assert_eq!(ack.run_id, run_id);
    assert!(ack.resumed && !ack.duplicate, "{ack:?}");
    let ending = ending.expect("the resumed run is followed");
    assert_eq!(ending.ended().await, Some(TerminationReason::NaturalEnd));
    assert_eq!(echo.calls.load(std::sync::atomic::Ordering::SeqCst), 1);

    // The same decision again, once the run is over: the thread has no such
    // run any more (a bus delivery then finds the decision in the run's record,
    // a duplicate), and the tool does not run again.
    let refused = rt
        .decide_and_follow(
            &thread,
            Some(run_id.clone()),
            call,
            resume("d-1", serde_json::json!(true)),
        )
        .await
        .unwrap_err();
    assert_eq!(refused, ControlError::RunNotActive { run_id });
    assert_eq!(echo.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_decision_meant_for_another_run_is_refused_and_changes_nothing() {
    let (rt, echo) = approved_echo_runtime("done");
    let thread = tid("decide-other-run");
    let (run_id, call) = waiting_run(&rt, &thread).await;

    let other = RunId::generate();
    let refused = rt
        .decide_and_follow(
            &thread,
            Some(other.clone()),
            call.clone(),
            resume("d-1", serde_json::json!(true)),
        )
        .await
        .unwrap_err();
    assert_eq!(refused, ControlError::RunNotActive { run_id: other });
    let active = rt.active_run(&thread).await.unwrap().unwrap();
    assert_eq!(
        (active.run_id.clone(), active.status),
        (run_id.clone(), RunStatus::Waiting)
    );
    assert_eq!(echo.calls.load(std::sync::atomic::Ordering::SeqCst), 0);

    // The decision for the waiting run itself still applies.
    let (ack, ending) = rt
        .decide_and_follow(&thread, None, call, resume("d-1", serde_json::json!(true)))
        .await
        .unwrap();
    assert_eq!(ack.run_id, run_id);
    assert_eq!(
        ending.unwrap().ended().await,
        Some(TerminationReason::NaturalEnd)
    );
}
