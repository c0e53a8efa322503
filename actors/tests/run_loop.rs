//! End-to-end loop tests on thread actors with a scripted model.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use awaken_actors::contract::{
    AgentEvent, Role, TerminationReason, ToolCallOutcome, ToolExecutionMode,
};
use awaken_actors::thread::{RunRequest, ThreadConfig};
use serde_json::json;
use support::*;

#[tokio::test]
async fn natural_end_with_text_only() {
    let llm = ScriptedLlm::new(vec![Turn::Text("hello there")]);
    let rt = runtime(
        llm.clone(),
        agent_spec(ToolExecutionMode::Sequential),
        vec![],
        None,
        None,
        ThreadConfig::default(),
    );
    let sink = Arc::new(Collector::default());
    let result = rt
        .run(RunRequest::new(tid("t-natural"), user("hi")), sink.clone())
        .await
        .unwrap();
    assert_eq!(result.termination, TerminationReason::NaturalEnd);
    assert_eq!(result.response, "hello there");
    let events = sink.take();
    assert_well_formed(&events);
    assert_eq!(
        event_types(&events),
        [
            "run_start",
            "step_start",
            "text_delta",
            "inference_complete",
            "step_end",
            "run_finish"
        ]
    );
    // The request carried the system prompt and the user message.
    let request = llm.requests.lock().unwrap()[0].clone();
    assert_eq!(request.messages[0].role, Role::System);
    assert_eq!(request.messages[1].text(), "hi");
    // Persisted: user + assistant messages, a finished run.
    let record = rt
        .store()
        .latest_run(&tid("t-natural"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.termination, Some(TerminationReason::NaturalEnd));
    assert_eq!(record.steps, 1);
}

#[tokio::test]
async fn tool_call_then_answer() {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({"x": 1}))]),
        Turn::Text("echoed"),
    ]);
    let echo = Arc::new(Echo::default());
    let rt = runtime(
        llm.clone(),
        agent_spec(ToolExecutionMode::Sequential),
        vec![("echo", echo.clone())],
        None,
        None,
        ThreadConfig::default(),
    );
    let sink = Arc::new(Collector::default());
    let result = rt
        .run(RunRequest::new(tid("t-tool"), user("go")), sink.clone())
        .await
        .unwrap();
    assert_eq!(result.termination, TerminationReason::NaturalEnd);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1);
    let events = sink.take();
    assert_well_formed(&events);
    let done = events.iter().find_map(|e| match e {
        AgentEvent::ToolCallDone {
            result, outcome, ..
        } => Some((result.clone(), *outcome)),
        _ => None,
    });
    let (tool_result, outcome) = done.unwrap();
    assert_eq!(outcome, ToolCallOutcome::Succeeded);
    assert_eq!(tool_result.data, json!({"x": 1}));
    // The second request sent the tool result back to the model.
    let second = llm.requests.lock().unwrap()[1].clone();
    assert!(second.messages.iter().any(|m| m.role == Role::Tool));
    assert_eq!(
        event_types(&events)
            .iter()
            .filter(|t| **t == "step_start")
            .count(),
        2
    );
}
