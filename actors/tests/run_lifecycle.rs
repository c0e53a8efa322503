//! Termination reasons, permissions, panics, restarts and continuation runs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use awaken_actors::contract::{
    AgentEvent, ResumeDecisionAction, RunStatus, StopConditionSpec, StoppedReason,
    TerminationReason, ToolCallOutcome, ToolExecutionMode,
};
use awaken_actors::permission::{PermissionPlugin, PermissionRules};
use awaken_actors::phase::PhaseContext;
use awaken_actors::plugin::{PhaseHook, Plugin, PluginDescriptor, PluginRegistrar};
use awaken_actors::state::{KeyScope, StateCommand, StateKey, StateKeyOptions};
use awaken_actors::thread::{RunRequest, ThreadConfig};
use awaken_actors::{Phase, StateError};
use serde_json::json;
use support::*;

#[tokio::test]
async fn max_rounds_stops_a_looping_agent() {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({"n": 1}))]),
        Turn::Calls(vec![("echo", json!({"n": 2}))]),
        Turn::Calls(vec![("echo", json!({"n": 3}))]),
    ]);
    let spec = agent_spec(ToolExecutionMode::Sequential).with_max_rounds(2);
    let rt = runtime(
        llm,
        spec,
        vec![("echo", Arc::new(Echo::default()))],
        None,
        None,
        ThreadConfig::default(),
    );
    let (result, events) = run_once(&rt, "t-max", "loop").await;
    match result.termination {
        TerminationReason::Stopped(StoppedReason { code, .. }) => assert_eq!(code, "max_rounds"),
        other => panic!("expected max_rounds, got {other:?}"),
    }
    assert_well_formed(&events);
    assert_eq!(
        event_types(&events)
            .iter()
            .filter(|t| **t == "step_start")
            .count(),
        2
    );
}

#[tokio::test]
async fn stop_conditions_section_adds_policies() {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({}))]),
        Turn::Text("unreached"),
    ]);
    let spec = agent_spec(ToolExecutionMode::Sequential).with_section(
        "stop_conditions",
        serde_json::to_value(vec![StopConditionSpec::StopOnTool {
            tool_name: "echo".into(),
        }])
        .unwrap(),
    );
    let rt = runtime(
        llm,
        spec,
        vec![("echo", Arc::new(Echo::default()))],
        None,
        None,
        ThreadConfig::default(),
    );
    let result = rt
        .run(
            RunRequest::new(tid("t-stop-on-tool"), user("go")),
            Arc::new(Collector::default()),
        )
        .await
        .unwrap();
    assert!(
        matches!(result.termination, TerminationReason::Stopped(_)),
        "{:?}",
        result.termination
    );
}

#[tokio::test]
async fn model_failure_ends_the_run_with_error() {
    let llm = ScriptedLlm::new(vec![Turn::Fail]);
    let rt = plain_runtime(llm, ToolExecutionMode::Sequential, vec![]);
    let (result, events) = run_once(&rt, "t-error", "hi").await;
    assert!(matches!(&result.termination, TerminationReason::Error(m) if m.contains("model down")));
    assert_well_formed(&events);
    assert!(event_types(&events).contains(&"error"));
    let record = rt.store().load_run(&result.run_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Done);
}

fn permission(rules: &str) -> Arc<dyn Plugin> {
    Arc::new(PermissionPlugin::new(
        PermissionRules::from_yaml(rules).unwrap(),
    ))
}

#[tokio::test]
async fn permission_deny_blocks_the_run() {
    let llm = ScriptedLlm::new(vec![Turn::Calls(vec![(
        "echo",
        json!({"cmd": "rm -rf /"}),
    )])]);
    let echo = Arc::new(Echo::default());
    let rt = runtime_with(
        llm,
        agent_spec(ToolExecutionMode::Sequential),
        vec![("echo", echo.clone())],
        vec![(
            "permission",
            permission(
                "default_behavior: allow\nrules:\n  - tool: 'echo(cmd =~ \"rm\")'\n    behavior: deny\n",
            ),
        )],
        None,
        ThreadConfig::default(),
    );
    let sink = Arc::new(Collector::default());
    let result = rt
        .run(
            RunRequest::new(tid("t-deny"), user("clean up")),
            sink.clone(),
        )
        .await
        .unwrap();
    assert!(
        matches!(result.termination, TerminationReason::Blocked(_)),
        "{:?}",
        result.termination
    );
    assert_eq!(echo.calls.load(Ordering::SeqCst), 0);
    assert_well_formed(&sink.take());
}

#[tokio::test]
async fn permission_ask_with_always_allow_is_remembered_on_the_thread() {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({"n": 1}))]),
        Turn::Text("ok"),
    ]);
    let echo = Arc::new(Echo::default());
    let rt = runtime_with(
        llm,
        agent_spec(ToolExecutionMode::Sequential),
        vec![("echo", echo.clone())],
        vec![(
            "permission",
            permission("default_behavior: ask\nrules: []\n"),
        )],
        None,
        ThreadConfig::default(),
    );
    let thread = tid("t-always");
    let sink = Arc::new(Collector::default());
    let first = rt
        .run(RunRequest::new(thread.clone(), user("one")), sink.clone())
        .await
        .unwrap();
    assert_eq!(first.termination, TerminationReason::Suspended);
    let call = sink
        .take()
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::ToolCallDone {
                id,
                outcome: ToolCallOutcome::Suspended,
                ..
            } => Some(id),
            _ => None,
        })
        .unwrap();
    let done = rt
        .decide_and_wait(
            &thread,
            call,
            decision(
                "d1",
                ResumeDecisionAction::Resume,
                json!({"approved": true, "always_allow": true}),
            ),
            None,
        )
        .await
        .unwrap();
    assert_eq!(done.termination, TerminationReason::NaturalEnd);
    // A new run on the same thread: the grant (thread-scoped state) survives.
    let second = rt
        .run(
            RunRequest::new(thread.clone(), user("two")),
            Arc::new(Collector::default()),
        )
        .await
        .unwrap();
    assert_eq!(
        second.termination,
        TerminationReason::NaturalEnd,
        "no second approval"
    );
    assert_ne!(second.run_id, first.run_id);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 2);
    let record = rt.store().load_run(&second.run_id).await.unwrap().unwrap();
    assert_eq!(
        record.parent_run_id,
        Some(first.run_id),
        "continuation lineage"
    );
}

#[tokio::test]
async fn a_panicking_tool_fails_only_its_call() {
    // At once (caught where the thread polls the call) and after a wait (caught in
    // the call's own actor).
    for late in [false, true] {
        let llm = ScriptedLlm::new(vec![
            Turn::Calls(vec![("boom", json!({}))]),
            Turn::Text("recovered"),
        ]);
        let rt = plain_runtime(
            llm.clone(),
            ToolExecutionMode::Sequential,
            vec![("boom", Arc::new(Boom { late }))],
        );
        let (result, events) = run_once(&rt, "t-boom", "go").await;
        assert_eq!(
            result.termination,
            TerminationReason::NaturalEnd,
            "late {late}"
        );
        assert_eq!(result.response, "recovered", "late {late}");
        let done = events.iter().find_map(|e| match e {
            AgentEvent::ToolCallDone {
                outcome, result, ..
            } => Some((*outcome, result.error_code.clone(), result.message.clone())),
            _ => None,
        });
        let (outcome, code, message) = done.expect("the call finished");
        assert_eq!(outcome, ToolCallOutcome::Failed, "late {late}");
        assert_eq!(code.as_deref(), Some("tool_panicked"), "late {late}");
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("tool exploded")),
            "late {late}: the panic message is reported: {message:?}"
        );
    }
}

/// A thread-scoped counter of runs, bumped at every RunStart.
struct RunsSeen;
impl StateKey for RunsSeen {
    const KEY: &'static str = "test.runs_seen";
    const SCOPE: KeyScope = KeyScope::Thread;
    type Value = u32;
    type Update = u32;
    fn apply(value: &mut u32, update: u32) {
        *value += update;
    }
}

/// Counts runs in thread state, and counts steps in run state.
struct Counting;
struct StepsThisRun;
impl StateKey for StepsThisRun {
    const KEY: &'static str = "test.steps_this_run";
    type Value = u32;
    type Update = u32;
    fn apply(value: &mut u32, update: u32) {
        *value += update;
    }
}
struct CountRun;
#[async_trait]
impl PhaseHook for CountRun {
    async fn run(&self, _ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut cmd = StateCommand::new();
        cmd.update::<RunsSeen>(1).update::<StepsThisRun>(1);
        Ok(cmd)
    }
}
impl Plugin for Counting {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new("counting", "counts runs")
    }
    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        r.register_key::<RunsSeen>(StateKeyOptions::default())?;
        r.register_key::<StepsThisRun>(StateKeyOptions::default())?;
        r.register_phase_hook("count", Phase::RunStart, CountRun)
    }
}

#[tokio::test]
async fn thread_state_survives_runs_and_passivation_run_state_resets() {
    let llm = ScriptedLlm::new(vec![Turn::Text("ok")]);
    let rt = runtime_with(
        llm,
        agent_spec(ToolExecutionMode::Sequential),
        vec![],
        vec![("counting", Arc::new(Counting))],
        None,
        ThreadConfig {
            idle_passivation: std::time::Duration::ZERO,
            ..ThreadConfig::default()
        },
    );
    let thread = tid("t-scopes");
    for _ in 0..3 {
        rt.run(
            RunRequest::new(thread.clone(), user("again")),
            Arc::new(Collector::default()),
        )
        .await
        .unwrap();
        // Each run's checkpoint is the only memory across passivation.
        rt.thread_passivated(&thread).await;
    }
    let snapshot = rt
        .store()
        .load_thread_snapshot(&thread)
        .await
        .unwrap()
        .unwrap();
    let state = snapshot.state.unwrap();
    assert_eq!(state.extensions["test.runs_seen"], json!(3));
    assert_eq!(
        state.extensions["test.steps_this_run"],
        json!(1),
        "run-scoped keys reset at run start"
    );
}

#[tokio::test]
async fn new_input_cancels_a_waiting_run_and_continues() {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({}))]),
        Turn::Text("fresh answer"),
    ]);
    let echo = Arc::new(Echo::default());
    let rt = runtime(
        llm.clone(),
        agent_spec(ToolExecutionMode::Sequential),
        vec![("echo", echo.clone())],
        Some(Approval {
            tools: ["echo"].into_iter().collect(),
            mode: awaken_actors::contract::ToolCallResumeMode::ReplayToolCall,
        }),
        None,
        ThreadConfig::default(),
    );
    let thread = tid("t-continue");
    let waiting = rt
        .run(
            RunRequest::new(thread.clone(), user("first")),
            Arc::new(Collector::default()),
        )
        .await
        .unwrap();
    assert_eq!(waiting.termination, TerminationReason::Suspended);
    // The user changes their mind: the script answers text on the new turn.
    let llm_turns_before = llm.requests.lock().unwrap().len();
    let sink = Arc::new(Collector::default());
    let next = rt
        .run(
            RunRequest::new(thread.clone(), user("never mind")),
            sink.clone(),
        )
        .await;
    let next = next.unwrap();
    assert_ne!(next.run_id, waiting.run_id);
    let old = rt.store().load_run(&waiting.run_id).await.unwrap().unwrap();
    assert_eq!(old.termination, Some(TerminationReason::Cancelled));
    let new = rt.store().load_run(&next.run_id).await.unwrap().unwrap();
    assert_eq!(new.parent_run_id, Some(waiting.run_id));
    assert_eq!(echo.calls.load(Ordering::SeqCst), 0);
    // The model saw no unanswered tool call.
    let request = llm.requests.lock().unwrap()[llm_turns_before].clone();
    for (i, m) in request.messages.iter().enumerate() {
        for call in &m.tool_calls {
            assert!(
                request.messages[i..]
                    .iter()
                    .any(|r| r.tool_call_id.as_ref() == Some(&call.id)),
                "unpaired call sent to the model"
            );
        }
    }
}

/// Panics in the StepStart phase of step 2, once.
struct PanicOnce(Arc<AtomicBool>);
struct PanicHook(Arc<AtomicBool>);
#[async_trait]
impl PhaseHook for PanicHook {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        if ctx.step == 2 && !self.0.swap(true, Ordering::SeqCst) {
            panic!("injected fault");
        }
        Ok(StateCommand::new())
    }
}
impl Plugin for PanicOnce {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new("panic-once", "fault injection")
    }
    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        r.register_phase_hook("panic", Phase::StepStart, PanicHook(Arc::clone(&self.0)))
    }
}

#[tokio::test]
async fn a_crashed_thread_actor_restarts_from_its_checkpoint() {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({}))]),
        Turn::Text("survived"),
    ]);
    let hub = Arc::new(HubRecorder::default());
    let fired = Arc::new(AtomicBool::new(false));
    let echo = Arc::new(Echo::default());
    let rt = runtime_with(
        llm,
        agent_spec(ToolExecutionMode::Sequential),
        vec![("echo", echo.clone())],
        vec![("panic-once", Arc::new(PanicOnce(Arc::clone(&fired))))],
        Some(hub.clone()),
        ThreadConfig::default(),
    );
    let thread = tid("t-crash");
    let ticket = rt
        .start(RunRequest::new(thread.clone(), user("go")), None)
        .await
        .unwrap();
    hub.wait_for(|e| matches!(e, AgentEvent::RunFinish { .. }))
        .await;
    assert!(fired.load(Ordering::SeqCst), "the fault was injected");
    let record = rt.store().load_run(&ticket.run_id).await.unwrap().unwrap();
    assert_eq!(
        record.termination,
        Some(TerminationReason::NaturalEnd),
        "the run resumed and finished"
    );
    assert_eq!(
        echo.calls.load(Ordering::SeqCst),
        1,
        "the step before the crash was not redone"
    );
    let snapshot = rt
        .store()
        .load_thread_snapshot(&thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(snapshot.messages.last().unwrap().text(), "survived");
    rt.thread_stopped(&thread).await;
    assert_eq!(
        rt.supervised_threads(),
        0,
        "neither the failed actor nor its replacement is left registered"
    );
}

/// Skips inference on the first step.
struct Skipper;
struct SkipHook;
#[async_trait]
impl PhaseHook for SkipHook {
    async fn run(&self, _ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut cmd = StateCommand::new();
        cmd.schedule_action::<awaken_actors::actions::SkipInference>("nothing to do".into())?;
        Ok(cmd)
    }
}
impl Plugin for Skipper {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new("skipper", "skips inference")
    }
    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        r.register_phase_hook("skip", Phase::StepStart, SkipHook)
    }
}

#[tokio::test]
async fn a_plugin_can_end_the_run_before_inference() {
    let llm = ScriptedLlm::new(vec![Turn::Text("unreached")]);
    let rt = runtime_with(
        llm.clone(),
        agent_spec(ToolExecutionMode::Sequential),
        vec![],
        vec![("skipper", Arc::new(Skipper))],
        None,
        ThreadConfig::default(),
    );
    let sink = Arc::new(Collector::default());
    let result = rt
        .run(RunRequest::new(tid("t-skip"), user("hi")), sink.clone())
        .await
        .unwrap();
    assert_eq!(result.termination, TerminationReason::BehaviorRequested);
    assert!(
        llm.requests.lock().unwrap().is_empty(),
        "the model was never called"
    );
    assert_well_formed(&sink.take());
}

/// Reports progress twice, then succeeds.
/// Reports progress; with `wait`, waits once after its first report, so that report
/// is made during the thread's in-place poll and the others from the call's actor.
struct Progressing {
    wait: bool,
}
#[async_trait]
impl awaken_actors::tool::Tool for Progressing {
    fn descriptor(&self) -> awaken_actors::contract::ToolDescriptor {
        awaken_actors::contract::ToolDescriptor::new("index", "index", "reports progress")
    }
    async fn execute(
        &self,
        _args: serde_json::Value,
        ctx: &awaken_actors::tool::ToolCallContext,
    ) -> Result<awaken_actors::tool::ToolOutput, awaken_actors::ToolError> {
        use awaken_actors::contract::ProgressStatus;
        ctx.report_progress(ProgressStatus::Running, Some("half"), Some(0.5))
            .await;
        if self.wait {
            tokio::task::yield_now().await;
        }
        ctx.report_activity("log", "indexed 10 files").await;
        ctx.report_progress(ProgressStatus::Done, Some("all"), Some(1.0))
            .await;
        Ok(awaken_actors::contract::ToolResult::success("index", json!(10)).into())
    }
}

#[tokio::test]
async fn tool_progress_streams_in_order_whether_or_not_the_tool_waits() {
    for wait in [false, true] {
        let llm = ScriptedLlm::new(vec![
            Turn::Calls(vec![("index", json!({}))]),
            Turn::Text("indexed"),
        ]);
        let rt = plain_runtime(
            llm,
            ToolExecutionMode::Sequential,
            vec![("index", Arc::new(Progressing { wait }))],
        );
        let sink = Arc::new(Collector::default());
        rt.run(
            RunRequest::new(tid("t-progress"), user("index")),
            sink.clone(),
        )
        .await
        .unwrap();
        let events = sink.take();
        assert_well_formed(&events);
        let start = events
            .iter()
            .position(|e| matches!(e, AgentEvent::ToolCallStart { .. }))
            .unwrap();
        let done = events
            .iter()
            .position(|e| matches!(e, AgentEvent::ToolCallDone { .. }))
            .unwrap();
        let activity: Vec<(usize, String)> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                AgentEvent::ActivitySnapshot {
                    activity_type,
                    content,
                    ..
                } => Some((
                    i,
                    format!(
                        "{activity_type}:{}",
                        content
                            .get("status")
                            .and_then(|s| s.as_str())
                            .unwrap_or("text")
                    ),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            activity.iter().map(|(_, a)| a.as_str()).collect::<Vec<_>>(),
            [
                "tool-call-progress:running",
                "log:text",
                "tool-call-progress:done"
            ],
            "wait: {wait}"
        );
        assert!(
            activity.iter().all(|(i, _)| *i > start && *i < done),
            "progress between start and done (wait: {wait})"
        );
    }
}

#[tokio::test]
async fn a_decision_for_a_running_call_is_refused() {
    let (rt, gate) = gated_runtime();
    let thread = tid("t-running");
    let sink = Arc::new(Collector::default());
    let started = gate.started.notified();
    rt.start(
        RunRequest::new(thread.clone(), user("go")),
        Some(sink.clone()),
    )
    .await
    .unwrap();
    started.await;
    let call = sink
        .snapshot()
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::ToolCallStart { id, .. } => Some(id),
            _ => None,
        })
        .unwrap();
    let err = rt
        .decide(
            &thread,
            call.clone(),
            decision("d", ResumeDecisionAction::Resume, json!(true)),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        awaken_actors::thread::ControlError::CallNotSuspended {
            call_id: call,
            status: awaken_actors::contract::ToolCallStatus::Running
        }
    );
    gate.release.notify_one();
    sink.wait_for(|e| matches!(e, AgentEvent::RunFinish { .. }))
        .await;
    assert_eq!(
        gate.finished.load(Ordering::SeqCst),
        1,
        "the refused decision changed nothing"
    );
}

/// Answers summarization requests with a fixed summary and everything else from the
/// script; records what the model was sent.
struct SummarizingLlm {
    inner: Arc<ScriptedLlm>,
    summaries: std::sync::Mutex<Vec<String>>,
}

#[async_trait]
impl awaken_actors::llm::LlmExecutor for SummarizingLlm {
    async fn execute(
        &self,
        request: awaken_actors::llm::InferenceRequest,
    ) -> Result<awaken_actors::llm::StreamResult, awaken_actors::InferenceExecutionError> {
        if request.messages[0].text().contains("summarizer") {
            self.summaries
                .lock()
                .unwrap()
                .push(request.messages[1].text());
            return Ok(awaken_actors::llm::StreamResult {
                content: vec![awaken_actors::contract::ContentBlock::text("THE GIST")],
                ..Default::default()
            });
        }
        self.inner.execute(request).await
    }
    fn name(&self) -> &str {
        "summarizing"
    }
}

#[tokio::test]
async fn long_histories_are_compacted_before_inference() {
    let script = ScriptedLlm::new(vec![Turn::Text("noted")]);
    let llm = Arc::new(SummarizingLlm {
        inner: script.clone(),
        summaries: std::sync::Mutex::new(Vec::new()),
    });
    let mut spec = agent_spec(ToolExecutionMode::Sequential);
    spec.context_policy = Some(awaken_actors::contract::ContextWindowPolicy {
        autocompact_threshold: Some(3000),
        compaction_raw_suffix_messages: 2,
        ..Default::default()
    });
    let rt = runtime_with(
        llm.clone(),
        spec,
        vec![],
        vec![],
        None,
        ThreadConfig::default(),
    );
    let thread = tid("t-compact");
    let first = format!("first {}", "x".repeat(16_000));
    rt.run(
        RunRequest::new(thread.clone(), user(&first)),
        Arc::new(Collector::default()),
    )
    .await
    .unwrap();
    assert!(
        llm.summaries.lock().unwrap().is_empty(),
        "under the threshold"
    );
    rt.run(
        RunRequest::new(thread.clone(), user("second question")),
        Arc::new(Collector::default()),
    )
    .await
    .unwrap();
    let summaries = llm.summaries.lock().unwrap().clone();
    assert_eq!(summaries.len(), 1);
    assert!(
        summaries[0].contains("first xxx"),
        "the old turn was summarized"
    );
    let sent = script.requests.lock().unwrap().last().cloned().unwrap();
    let texts: Vec<String> = sent.messages.iter().map(|m| m.text()).collect();
    assert!(texts.iter().any(|t| t.contains("THE GIST")), "{texts:?}");
    assert!(
        !texts.iter().any(|t| t.starts_with("first xxx")),
        "covered history is not resent"
    );
    assert!(texts.iter().any(|t| t == "second question"));
    // The log itself is append-only: nothing was removed.
    let snapshot = rt
        .store()
        .load_thread_snapshot(&thread)
        .await
        .unwrap()
        .unwrap();
    assert!(snapshot.messages[0].text().starts_with("first xxx"));
    assert!(
        snapshot
            .state
            .unwrap()
            .extensions
            .contains_key("runtime.compaction")
    );
}

/// Stops a run once `step` steps ran.
struct StopAfterSteps(u32);

impl awaken_actors::policies::StopPolicy for StopAfterSteps {
    fn id(&self) -> &str {
        "after_steps"
    }

    fn evaluate(
        &self,
        stats: &awaken_actors::policies::StopPolicyStats,
    ) -> awaken_actors::policies::StopDecision {
        if stats.step_count >= self.0 {
            awaken_actors::policies::StopDecision::Stop {
                code: "custom_limit".into(),
                detail: format!("{} steps", stats.step_count),
            }
        } else {
            awaken_actors::policies::StopDecision::Continue
        }
    }
}

/// A runtime with the scripted model and echo, built by `customize`.
fn custom_runtime(
    spec: awaken_actors::contract::AgentSpec,
    customize: impl FnOnce(
        awaken_actors::runtime::AgentRuntimeBuilder,
    ) -> awaken_actors::runtime::AgentRuntimeBuilder,
) -> awaken_actors::runtime::AgentRuntime {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({"n": 1}))]),
        Turn::Calls(vec![("echo", json!({"n": 2}))]),
        Turn::Calls(vec![("echo", json!({"n": 3}))]),
        Turn::Calls(vec![("echo", json!({"n": 4}))]),
    ]);
    let builder = scripted_builder(llm).with_tool("echo", Arc::new(Echo::default()));
    customize(builder).with_agent_spec(spec).build().unwrap()
}

fn stop_code(termination: &TerminationReason) -> &str {
    match termination {
        TerminationReason::Stopped(StoppedReason { code, .. }) => code,
        other => panic!("expected a stop, got {other:?}"),
    }
}

#[tokio::test]
async fn builder_stop_policies_apply_after_the_agents_own() {
    let spec = agent_spec(ToolExecutionMode::Sequential);
    let rt = custom_runtime(spec.clone(), |b| {
        b.with_stop_policy(Arc::new(StopAfterSteps(2)))
    });
    let (result, events) = run_once(&rt, "t-custom", "loop").await;
    assert_eq!(stop_code(&result.termination), "custom_limit");
    assert_well_formed(&events);

    // The agent's own max_rounds comes first.
    let rt = custom_runtime(spec.with_max_rounds(1), |b| {
        b.with_stop_policy(Arc::new(StopAfterSteps(2)))
    });
    let (result, _) = run_once(&rt, "t-custom", "loop").await;
    assert_eq!(stop_code(&result.termination), "max_rounds");
}

#[tokio::test]
async fn an_agent_listing_a_registered_stop_plugin_uses_it_instead() {
    use awaken_actors::policies::{MaxRoundsPlugin, StopConditionPlugin};

    let spec = agent_spec(ToolExecutionMode::Sequential)
        .with_max_rounds(1)
        .with_plugin(StopConditionPlugin::ID);
    let rt = custom_runtime(spec, |b| {
        b.with_plugin(
            StopConditionPlugin::ID,
            Arc::new(StopConditionPlugin::new(vec![Arc::new(StopAfterSteps(3))])),
        )
    });
    let (result, events) = run_once(&rt, "t-own", "loop").await;
    assert_eq!(
        stop_code(&result.termination),
        "custom_limit",
        "the registered plugin replaces max_rounds"
    );
    let steps = event_types(&events)
        .iter()
        .filter(|t| **t == "step_start")
        .count();
    assert_eq!(steps, 3);

    let spec = agent_spec(ToolExecutionMode::Sequential).with_plugin(MaxRoundsPlugin::ID);
    let rt = custom_runtime(spec, |b| {
        b.with_plugin(MaxRoundsPlugin::ID, Arc::new(MaxRoundsPlugin::new(2)))
    });
    let (result, _) = run_once(&rt, "t-max-plugin", "loop").await;
    assert_eq!(stop_code(&result.termination), "max_rounds");
}

/// Streams "a", "b", "c" and the text "abc"; with `pause`, waits once after "b", so
/// the rest arrives while the inference runs on a task of its own.
struct Streaming {
    pause: bool,
}

#[async_trait]
impl awaken_actors::llm::LlmExecutor for Streaming {
    async fn execute(
        &self,
        _request: awaken_actors::llm::InferenceRequest,
    ) -> Result<awaken_actors::llm::StreamResult, awaken_actors::InferenceExecutionError> {
        Err(awaken_actors::InferenceExecutionError::provider(
            "only streams",
        ))
    }

    fn execute_stream(
        self: Arc<Self>,
        _request: awaken_actors::llm::InferenceRequest,
    ) -> awaken_actors::llm::InferenceStream {
        use awaken_actors::contract::ContentBlock;
        use awaken_actors::llm::{InferenceChunk, InferenceDelta, StopReason, StreamResult};
        use futures::StreamExt;
        let delta = |text: &str| {
            Ok(InferenceChunk::Delta(InferenceDelta::Text {
                delta: text.to_owned(),
            }))
        };
        let done = Ok(InferenceChunk::Done(StreamResult {
            content: vec![ContentBlock::text("abc")],
            stop_reason: Some(StopReason::EndTurn),
            ..StreamResult::default()
        }));
        let head = futures::stream::iter([delta("a"), delta("b")]);
        let pause = self.pause;
        let wait = futures::stream::once(async move {
            if pause {
                tokio::task::yield_now().await;
            }
            delta("c")
        });
        head.chain(wait)
            .chain(futures::stream::iter([done]))
            .boxed()
    }

    fn name(&self) -> &str {
        "streaming"
    }
}

#[tokio::test]
async fn streamed_deltas_keep_their_order_whether_or_not_the_model_waits() {
    for pause in [false, true] {
        let rt = runtime_with(
            Arc::new(Streaming { pause }),
            agent_spec(ToolExecutionMode::Sequential),
            vec![],
            vec![],
            None,
            ThreadConfig::default(),
        );
        let thread = if pause { "t-stream-wait" } else { "t-stream" };
        let (result, events) = run_once(&rt, thread, "spell").await;
        assert_eq!(result.response, "abc", "pause {pause}");
        assert_well_formed(&events);
        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::TextDelta { delta } => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, ["a", "b", "c"], "pause {pause}");
        let last_delta = events
            .iter()
            .rposition(|e| matches!(e, AgentEvent::TextDelta { .. }))
            .unwrap();
        let complete = events
            .iter()
            .position(|e| matches!(e, AgentEvent::InferenceComplete { .. }))
            .unwrap();
        assert!(
            last_delta < complete,
            "pause {pause}: deltas before InferenceComplete"
        );
    }
}
