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
