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
    let rt = plain_runtime(llm.clone(), ToolExecutionMode::Sequential, vec![]);
    let (result, events) = run_once(&rt, "t-natural", "hi").await;
    assert_eq!(result.termination, TerminationReason::NaturalEnd);
    assert_eq!(result.response, "hello there");
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
    let rt = plain_runtime(
        llm.clone(),
        ToolExecutionMode::Sequential,
        vec![("echo", echo.clone())],
    );
    let (result, events) = run_once(&rt, "t-tool", "go").await;
    assert_eq!(result.termination, TerminationReason::NaturalEnd);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1);
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

fn approval(
    tools: &[&'static str],
    mode: awaken_actors::contract::ToolCallResumeMode,
) -> Option<Approval> {
    Some(Approval {
        tools: tools.iter().copied().collect(),
        mode,
    })
}

fn first_step_message(events: &[AgentEvent]) -> awaken_actors::MessageId {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::StepStart { message_id } => Some(message_id.clone()),
            _ => None,
        })
        .expect("a step")
}

fn cancel_decision(id: &str) -> awaken_actors::contract::ToolCallResume {
    awaken_actors::contract::ToolCallResume {
        action: awaken_actors::contract::ResumeDecisionAction::Cancel,
        reason: Some("no thanks".into()),
        ..resume(id, serde_json::Value::Null)
    }
}

#[tokio::test]
async fn suspension_then_replay_after_approval() {
    use awaken_actors::contract::ToolCallResumeMode;
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({"path": "a.txt"}))]),
        Turn::Text("deleted"),
    ]);
    let echo = Arc::new(Echo::default());
    let rt = runtime(
        llm,
        agent_spec(ToolExecutionMode::Sequential),
        vec![("echo", echo.clone())],
        approval(&["echo"], ToolCallResumeMode::ReplayToolCall),
        None,
        ThreadConfig::default(),
    );
    let thread = tid("t-hitl");
    let sink = Arc::new(Collector::default());
    let first = rt
        .run(
            RunRequest::new(thread.clone(), user("delete")),
            sink.clone(),
        )
        .await
        .unwrap();
    assert_eq!(first.termination, TerminationReason::Suspended);
    assert_eq!(
        echo.calls.load(Ordering::SeqCst),
        0,
        "not executed before approval"
    );
    let events = sink.take();
    assert_well_formed(&events);
    let call = suspended_call(&events);
    let step_message = first_step_message(&events);
    let record = rt.active_run(&thread).await.unwrap().expect("waiting run");
    assert_eq!(record.status, awaken_actors::contract::RunStatus::Waiting);
    assert_eq!(record.waiting.unwrap().tickets[0].tool_call_id, call);

    // Waiting never holds an actor.
    rt.thread_passivated(&thread).await;
    assert!(!rt.is_thread_live(&thread));

    let second_sink = Arc::new(Collector::default());
    let done = rt
        .decide_and_wait(
            &thread,
            call.clone(),
            resume("d1", json!({"approved": true})),
            Some(second_sink.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        done.run_id, first.run_id,
        "decision forwarding keeps the run id"
    );
    assert_eq!(done.termination, TerminationReason::NaturalEnd);
    assert_eq!(done.response, "deleted");
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1);
    let (_, key) = echo.seen.lock().unwrap()[0].clone();
    assert!(
        key.ends_with(&format!("{call}:1")),
        "idempotency key names call and attempt: {key}"
    );
    let events = second_sink.take();
    assert_well_formed(&events);
    assert!(event_types(&events).contains(&"tool_call_resumed"));
    assert_eq!(
        first_step_message(&events),
        step_message,
        "the reopened step announces the same message, even after rehydration"
    );
}

#[tokio::test]
async fn decisions_are_idempotent_and_validated() {
    use awaken_actors::contract::ToolCallResumeMode;
    use awaken_actors::thread::ControlError;
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({}))]),
        Turn::Text("ok"),
    ]);
    let echo = Arc::new(Echo::default());
    let config = ThreadConfig {
        passivate_while_waiting: false,
        ..ThreadConfig::default()
    };
    let rt = runtime(
        llm,
        agent_spec(ToolExecutionMode::Sequential),
        vec![("echo", echo.clone())],
        approval(&["echo"], ToolCallResumeMode::ReplayToolCall),
        None,
        config,
    );
    let thread = tid("t-idem");
    let sink = Arc::new(Collector::default());
    rt.run(RunRequest::new(thread.clone(), user("go")), sink.clone())
        .await
        .unwrap();
    let call = suspended_call(&sink.take());

    // Unknown call: refused, nothing changes.
    let unknown = awaken_actors::ToolCallId::new("nope").unwrap();
    assert_eq!(
        rt.decide(&thread, unknown.clone(), resume("dx", json!(null)), None)
            .await
            .unwrap_err(),
        ControlError::UnknownToolCall { call_id: unknown }
    );
    assert_eq!(echo.calls.load(Ordering::SeqCst), 0);

    let done = rt
        .decide_and_wait(&thread, call.clone(), resume("d1", json!(true)), None)
        .await
        .unwrap();
    assert_eq!(done.termination, TerminationReason::NaturalEnd);
    // The same decision again is acknowledged as a duplicate... but the run is over,
    // so a decision with a new id for the finished call is refused.
    let err = rt
        .decide(&thread, call.clone(), resume("d2", json!(true)), None)
        .await
        .unwrap_err();
    assert!(matches!(err, ControlError::NoActiveRun { .. }), "{err:?}");
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1, "applied exactly once");
}

#[tokio::test]
async fn duplicate_decision_while_waiting_is_acknowledged_not_reapplied() {
    // Two calls: deciding the first leaves the run waiting on the second, so the
    // duplicate arrives while the run is still open.
    let thread = tid("t-dup");
    let (rt, echo, calls) =
        two_suspended_echo_calls(ToolExecutionMode::ParallelStreaming, &thread).await;
    let waiting = rt
        .decide_and_wait(&thread, calls[0].clone(), resume("d-1", json!(true)), None)
        .await
        .unwrap();
    assert_eq!(waiting.termination, TerminationReason::Suspended);
    let ack = rt
        .decide(&thread, calls[0].clone(), resume("d-1", json!(true)), None)
        .await
        .unwrap();
    assert!(ack.duplicate);
    let err = rt
        .decide(
            &thread,
            calls[0].clone(),
            resume("d-other", json!(true)),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            awaken_actors::thread::ControlError::CallFinished { .. }
        ),
        "{err:?}"
    );
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1);
    let done = rt
        .decide_and_wait(&thread, calls[1].clone(), resume("d-2", json!(true)), None)
        .await
        .unwrap();
    assert_eq!(done.termination, TerminationReason::NaturalEnd);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn cancel_decision_cancels_the_call_and_the_run_continues() {
    use awaken_actors::contract::ToolCallResumeMode;
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({}))]),
        Turn::Text("skipped"),
    ]);
    let echo = Arc::new(Echo::default());
    let rt = runtime(
        llm.clone(),
        agent_spec(ToolExecutionMode::Sequential),
        vec![("echo", echo.clone())],
        approval(&["echo"], ToolCallResumeMode::ReplayToolCall),
        None,
        ThreadConfig::default(),
    );
    let thread = tid("t-deny");
    let sink = Arc::new(Collector::default());
    rt.run(RunRequest::new(thread.clone(), user("go")), sink.clone())
        .await
        .unwrap();
    let call = suspended_call(&sink.take());
    let sink = Arc::new(Collector::default());
    let done = rt
        .decide_and_wait(&thread, call, cancel_decision("d1"), Some(sink.clone()))
        .await
        .unwrap();
    assert_eq!(done.termination, TerminationReason::NaturalEnd);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 0);
    let events = sink.take();
    assert!(events.iter().any(|e| matches!(e, AgentEvent::ToolCallDone { outcome: ToolCallOutcome::Failed, result, .. } if result.error_code.as_deref() == Some("cancelled"))));
    let last = llm.requests.lock().unwrap().last().cloned().unwrap();
    assert!(
        last.messages
            .iter()
            .any(|m| m.role == Role::Tool && m.text().contains("no thanks"))
    );
}

#[tokio::test]
async fn use_decision_as_result_and_pass_decision_to_tool() {
    use awaken_actors::contract::ToolCallResumeMode;
    for (mode, expect_exec) in [
        (ToolCallResumeMode::UseDecisionAsToolResult, 0),
        (ToolCallResumeMode::PassDecisionToTool, 1),
    ] {
        let llm = ScriptedLlm::new(vec![
            Turn::Calls(vec![("echo", json!({"orig": true}))]),
            Turn::Text("ok"),
        ]);
        let echo = Arc::new(Echo::default());
        let rt = runtime(
            llm.clone(),
            agent_spec(ToolExecutionMode::Sequential),
            vec![("echo", echo.clone())],
            approval(&["echo"], mode),
            None,
            ThreadConfig::default(),
        );
        let thread = tid("t-modes");
        let sink = Arc::new(Collector::default());
        rt.run(RunRequest::new(thread.clone(), user("go")), sink.clone())
            .await
            .unwrap();
        let call = suspended_call(&sink.take());
        let sink = Arc::new(Collector::default());
        rt.decide_and_wait(
            &thread,
            call,
            resume("d", json!({"human": "answer"})),
            Some(sink.clone()),
        )
        .await
        .unwrap();
        assert_eq!(echo.calls.load(Ordering::SeqCst), expect_exec, "{mode:?}");
        let result = sink
            .take()
            .into_iter()
            .find_map(|e| match e {
                AgentEvent::ToolCallDone {
                    result,
                    outcome: ToolCallOutcome::Succeeded,
                    ..
                } => Some(result),
                _ => None,
            })
            .unwrap();
        assert_eq!(result.data, json!({"human": "answer"}), "{mode:?}");
    }
}

#[tokio::test]
async fn cancelling_while_a_tool_runs() {
    let (rt, gate) = gated_runtime();
    let thread = tid("t-cancel");
    let sink = Arc::new(Collector::default());
    let started = gate.started.notified();
    let handle = {
        let rt = rt.clone();
        let sink = sink.clone();
        let thread = thread.clone();
        tokio::spawn(async move { rt.run(RunRequest::new(thread, user("wait")), sink).await })
    };
    started.await;
    // The thread answers queries while its tool runs.
    let status = rt.thread_status(&thread).await.unwrap();
    assert_eq!(status.run.as_ref().unwrap().running_tools, 1);
    let cancelled = rt.cancel_thread(&thread).await.unwrap();
    let result = handle.await.unwrap().unwrap();
    assert_eq!(result.run_id, cancelled);
    assert_eq!(result.termination, TerminationReason::Cancelled);
    assert_eq!(gate.finished.load(Ordering::SeqCst), 0);
    let events = sink.take();
    assert_well_formed(&events);
    // Nothing left to cancel.
    assert!(matches!(
        rt.cancel_thread(&thread).await.unwrap_err(),
        awaken_actors::thread::ControlError::NoActiveRun { .. }
    ));
}

#[tokio::test]
async fn parallel_streaming_replays_a_decision_while_a_sibling_runs() {
    use awaken_actors::contract::ToolCallResumeMode;
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![
            ("echo", json!({"approved": "call"})),
            ("gate", json!({})),
        ]),
        Turn::Text("both done"),
    ]);
    let echo = Arc::new(Echo::default());
    let gate = Arc::new(Gate::default());
    let hub = Arc::new(HubRecorder::default());
    let rt = runtime(
        llm,
        agent_spec(ToolExecutionMode::ParallelStreaming),
        vec![("echo", echo.clone()), ("gate", gate.clone())],
        approval(&["echo"], ToolCallResumeMode::ReplayToolCall),
        Some(hub.clone()),
        ThreadConfig::default(),
    );
    let thread = tid("t-stream");
    let sink = Arc::new(Collector::default());
    let started = gate.started.notified();
    let ticket = rt
        .start(
            RunRequest::new(thread.clone(), user("go")),
            Some(sink.clone()),
        )
        .await
        .unwrap();
    started.await;
    sink.wait_for(|e| {
        matches!(
            e,
            AgentEvent::ToolCallDone {
                outcome: ToolCallOutcome::Suspended,
                ..
            }
        )
    })
    .await;
    let call = suspended_call(&sink.snapshot());
    // The gate is still running; the decision replays the echo call at once.
    let ack = rt
        .decide(&thread, call.clone(), resume("d", json!(true)), None)
        .await
        .unwrap();
    assert!(!ack.duplicate);
    sink.wait_for(|e| matches!(e, AgentEvent::ToolCallDone { id, outcome: ToolCallOutcome::Succeeded, .. } if *id == call)).await;
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        gate.finished.load(Ordering::SeqCst),
        0,
        "replayed before the sibling finished"
    );
    gate.release.notify_one();
    hub.wait_for(|e| {
        matches!(
            e,
            AgentEvent::RunFinish {
                termination: TerminationReason::NaturalEnd,
                ..
            }
        )
    })
    .await;
    let record = rt.store().load_run(&ticket.run_id).await.unwrap().unwrap();
    assert_eq!(record.termination, Some(TerminationReason::NaturalEnd));
    // The run never waited: the gate kept it running throughout.
    assert!(
        !event_types(&sink.snapshot()).contains(&"run_finish")
            || sink
                .snapshot()
                .iter()
                .filter(|e| matches!(e, AgentEvent::RunFinish { .. }))
                .count()
                == 1
    );
}

#[tokio::test]
async fn batch_approval_waits_for_every_decision() {
    let thread = tid("t-batch");
    let (rt, echo, calls) =
        two_suspended_echo_calls(ToolExecutionMode::ParallelBatchApproval, &thread).await;
    let first = rt
        .decide_and_wait(&thread, calls[0].clone(), resume("a", json!(true)), None)
        .await
        .unwrap();
    assert_eq!(first.termination, TerminationReason::Suspended);
    assert_eq!(
        echo.calls.load(Ordering::SeqCst),
        0,
        "no replay until all are decided"
    );
    let done = rt
        .decide_and_wait(&thread, calls[1].clone(), resume("b", json!(true)), None)
        .await
        .unwrap();
    assert_eq!(done.termination, TerminationReason::NaturalEnd);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn sequential_stops_at_the_first_suspension() {
    use awaken_actors::contract::ToolCallResumeMode;
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![
            ("gate_ok", json!({})),
            ("echo", json!({"n": 2})),
            ("gate_ok", json!({})),
        ]),
        Turn::Text("done"),
    ]);
    let echo = Arc::new(Echo::default());
    let plain = Arc::new(Echo::default());
    struct Named(Arc<Echo>, &'static str);
    #[async_trait::async_trait]
    impl awaken_actors::tool::Tool for Named {
        fn descriptor(&self) -> awaken_actors::contract::ToolDescriptor {
            awaken_actors::contract::ToolDescriptor::new(self.1, self.1, "counts")
        }
        async fn execute(
            &self,
            args: serde_json::Value,
            ctx: &awaken_actors::tool::ToolCallContext,
        ) -> Result<awaken_actors::tool::ToolOutput, awaken_actors::ToolError> {
            self.0.execute(args, ctx).await
        }
    }
    let rt = runtime(
        llm,
        agent_spec(ToolExecutionMode::Sequential),
        vec![
            ("echo", echo.clone()),
            ("gate_ok", Arc::new(Named(plain.clone(), "gate_ok"))),
        ],
        approval(&["echo"], ToolCallResumeMode::ReplayToolCall),
        None,
        ThreadConfig::default(),
    );
    let thread = tid("t-seq");
    let sink = Arc::new(Collector::default());
    let waiting = rt
        .run(RunRequest::new(thread.clone(), user("go")), sink.clone())
        .await
        .unwrap();
    assert_eq!(waiting.termination, TerminationReason::Suspended);
    assert_eq!(
        plain.calls.load(Ordering::SeqCst),
        1,
        "the call after the suspension did not run"
    );
    let call = suspended_call(&sink.take());
    let done = rt
        .decide_and_wait(&thread, call, resume("d", json!(true)), None)
        .await
        .unwrap();
    assert_eq!(done.termination, TerminationReason::NaturalEnd);
    assert_eq!(plain.calls.load(Ordering::SeqCst), 2);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1);
}
