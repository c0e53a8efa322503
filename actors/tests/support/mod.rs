//! Fixtures for end-to-end loop tests: a scripted model, test tools, an approval
//! plugin, event collection and event-order checks.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use awaken_actors::actions::{ToolInterceptAction, ToolInterceptPayload};
use awaken_actors::contract::{
    AgentEvent, AgentSpec, ContentBlock, Message, ModelSpec, PendingToolCall, Role, StreamEvent,
    SuspendTicket, Suspension, ToolCall, ToolCallResumeMode, ToolDescriptor, ToolExecutionMode,
    ToolResult, TraceContext,
};
use awaken_actors::event_sink::EventSink;
use awaken_actors::llm::{InferenceRequest, LlmExecutor, StopReason, StreamResult};
use awaken_actors::phase::PhaseContext;
use awaken_actors::plugin::{PhaseHook, Plugin, PluginDescriptor, PluginRegistrar};
use awaken_actors::runtime::{AgentRuntime, AgentRuntimeBuilder};
use awaken_actors::state::StateCommand;
use awaken_actors::thread::{EventHub, ThreadConfig};
use awaken_actors::tool::{Tool, ToolCallContext, ToolOutput};
use awaken_actors::{
    AgentId, JsonValue, Phase, RunId, StateError, ThreadId, ToolCallId, ToolError,
};
use tokio::sync::Notify;

pub mod store;

/// One scripted model turn.
#[derive(Clone, Debug)]
pub enum Turn {
    Text(&'static str),
    Calls(Vec<(&'static str, JsonValue)>),
    Fail,
}

/// Answers with the turn indexed by the number of assistant messages since the last
/// user message (so it is stateless and safe across restarts).
pub struct ScriptedLlm {
    turns: Vec<Turn>,
    pub requests: Mutex<Vec<InferenceRequest>>,
}

impl ScriptedLlm {
    pub fn new(turns: Vec<Turn>) -> Arc<Self> {
        Arc::new(Self {
            turns,
            requests: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl LlmExecutor for ScriptedLlm {
    async fn execute(
        &self,
        request: InferenceRequest,
    ) -> Result<StreamResult, awaken_actors::InferenceExecutionError> {
        let last_user = request
            .messages
            .iter()
            .rposition(|m| m.role == Role::User && !m.is_internal())
            .unwrap_or(0);
        let index = request.messages[last_user..]
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let len = request.messages.len();
        self.requests.lock().unwrap().push(request);
        let turn = self.turns.get(index).cloned().unwrap_or(Turn::Text("done"));
        match turn {
            Turn::Text(text) => Ok(StreamResult {
                content: vec![ContentBlock::text(text)],
                stop_reason: Some(StopReason::EndTurn),
                ..StreamResult::default()
            }),
            Turn::Calls(calls) => Ok(StreamResult {
                tool_calls: calls
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, args))| {
                        ToolCall::new(
                            ToolCallId::new(format!("call_{len}_{i}")).unwrap(),
                            name,
                            args,
                        )
                    })
                    .collect(),
                stop_reason: Some(StopReason::ToolUse),
                ..StreamResult::default()
            }),
            Turn::Fail => Err(awaken_actors::InferenceExecutionError::provider(
                "model down",
            )),
        }
    }

    fn name(&self) -> &str {
        "scripted"
    }
}

/// Echoes its arguments and counts executions.
#[derive(Default)]
pub struct Echo {
    pub calls: AtomicUsize,
    pub seen: Mutex<Vec<(JsonValue, String)>>,
}

#[async_trait]
impl Tool for Echo {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new("echo", "echo", "echoes its arguments")
    }
    async fn execute(
        &self,
        args: JsonValue,
        ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.seen
            .lock()
            .unwrap()
            .push((args.clone(), ctx.idempotency_key()));
        Ok(ToolResult::success("echo", args).into())
    }
}

/// Blocks until released (or cancelled); reports when it started.
#[derive(Default)]
pub struct Gate {
    pub started: Notify,
    pub release: Notify,
    pub cancelled: AtomicUsize,
    pub finished: AtomicUsize,
}

#[async_trait]
impl Tool for Gate {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new("gate", "gate", "waits until released")
    }
    async fn execute(
        &self,
        _args: JsonValue,
        ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        self.started.notify_one();
        tokio::select! {
            () = self.release.notified() => {
                self.finished.fetch_add(1, Ordering::SeqCst);
                Ok(ToolResult::success("gate", JsonValue::from("released")).into())
            }
            () = ctx.cancellation.cancelled() => {
                self.cancelled.fetch_add(1, Ordering::SeqCst);
                Err(ToolError::ExecutionFailed("cancelled".into()))
            }
        }
    }
}

/// Panics: at once, or (`late`) after its first wait, so in the call's own actor.
pub struct Boom {
    pub late: bool,
}

#[async_trait]
impl Tool for Boom {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new("boom", "boom", "panics")
    }
    async fn execute(
        &self,
        _args: JsonValue,
        _ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        if self.late {
            tokio::task::yield_now().await;
        }
        panic!("tool exploded");
    }
}

/// Suspends calls to the named tools before execution (a minimal permission plugin).
pub struct Approval {
    pub tools: BTreeSet<&'static str>,
    pub mode: ToolCallResumeMode,
}

struct ApprovalHook {
    tools: BTreeSet<&'static str>,
    mode: ToolCallResumeMode,
}

#[async_trait]
impl PhaseHook for ApprovalHook {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut cmd = StateCommand::new();
        let Some(call) = &ctx.tool_call else {
            return Ok(cmd);
        };
        if self.tools.contains(call.tool_name.as_str()) && call.decision.is_none() {
            cmd.schedule_action::<ToolInterceptAction>(ToolInterceptPayload::Suspend(
                SuspendTicket {
                    suspension: Suspension {
                        id: format!("approve-{}", call.call_id),
                        action: "approve".into(),
                        message: format!("run {}?", call.tool_name),
                        parameters: call.arguments.clone(),
                        response_schema: None,
                    },
                    pending: PendingToolCall {
                        id: call.call_id.clone(),
                        name: call.tool_name.clone(),
                        arguments: call.arguments.clone(),
                    },
                    resume_mode: self.mode,
                    child: None,
                    remote: None,
                },
            ))?;
        }
        Ok(cmd)
    }
}

impl Plugin for Approval {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new("approval", "suspends listed tools")
    }
    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        r.register_phase_hook(
            "approve",
            Phase::BeforeToolExecute,
            ApprovalHook {
                tools: self.tools.clone(),
                mode: self.mode,
            },
        )
    }
}

/// Collects events and wakes waiters on each one.
#[derive(Default)]
pub struct Collector {
    pub events: Mutex<Vec<AgentEvent>>,
    pub changed: Notify,
}

impl Collector {
    pub fn take(&self) -> Vec<AgentEvent> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }

    pub fn snapshot(&self) -> Vec<AgentEvent> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until an event matching `pred` was collected.
    pub async fn wait_for(&self, pred: impl Fn(&AgentEvent) -> bool) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.events.lock().unwrap().iter().any(&pred) {
                return;
            }
            notified.await;
        }
    }
}

#[async_trait]
impl EventSink for Collector {
    async fn emit(&self, event: AgentEvent) {
        self.events.lock().unwrap().push(event);
        self.changed.notify_waiters();
    }
}

/// An event hub that records every stamped event of every run.
#[derive(Default)]
pub struct HubRecorder {
    pub events: Mutex<Vec<(RunId, StreamEvent)>>,
    pub changed: Notify,
}

impl EventHub for HubRecorder {
    fn publish(
        &self,
        _thread_id: &ThreadId,
        run_id: &RunId,
        event: &Arc<StreamEvent>,
        _trace: Option<&TraceContext>,
    ) {
        self.events
            .lock()
            .unwrap()
            .push((run_id.clone(), StreamEvent::clone(event)));
        self.changed.notify_waiters();
    }
}

impl HubRecorder {
    pub async fn wait_for(&self, pred: impl Fn(&AgentEvent) -> bool) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self
                .events
                .lock()
                .unwrap()
                .iter()
                .any(|(_, e)| pred(&e.event))
            {
                return;
            }
            notified.await;
        }
    }
}

pub fn tid(s: &str) -> ThreadId {
    ThreadId::new(s).unwrap()
}

pub fn agent_spec(mode: ToolExecutionMode) -> AgentSpec {
    AgentSpec::new(AgentId::new("agent").unwrap())
        .with_model("m")
        .with_system_prompt("You are a test agent.")
        .with_tool_execution_mode(mode)
}

/// A runtime with the scripted model, the test tools and the approval plugin.
pub fn runtime(
    llm: Arc<ScriptedLlm>,
    spec: AgentSpec,
    tools: Vec<(&'static str, Arc<dyn Tool>)>,
    approval: Option<Approval>,
    hub: Option<Arc<dyn EventHub>>,
    config: ThreadConfig,
) -> AgentRuntime {
    let plugins: Vec<(&'static str, Arc<dyn Plugin>)> = approval
        .into_iter()
        .map(|a| ("approval", Arc::new(a) as Arc<dyn Plugin>))
        .collect();
    runtime_with(llm, spec, tools, plugins, hub, config)
}

/// A builder with model `m` served by `llm` (provider `scripted`), nothing else.
pub fn scripted_builder(llm: Arc<dyn LlmExecutor>) -> AgentRuntimeBuilder {
    AgentRuntimeBuilder::new()
        .with_model(
            "m",
            ModelSpec {
                id: "m".into(),
                provider: "scripted".into(),
                model: "scripted-model".into(),
            },
        )
        .with_provider("scripted", llm)
}

/// A runtime with the scripted model, the given tools and plugins (all installed on
/// the agent).
pub fn runtime_with(
    llm: Arc<dyn LlmExecutor>,
    spec: AgentSpec,
    tools: Vec<(&'static str, Arc<dyn Tool>)>,
    plugins: Vec<(&'static str, Arc<dyn Plugin>)>,
    hub: Option<Arc<dyn EventHub>>,
    config: ThreadConfig,
) -> AgentRuntime {
    let mut spec = spec;
    let mut builder = scripted_builder(llm).with_thread_config(config);
    for (id, plugin) in plugins {
        spec = spec.with_plugin(id);
        builder = builder.with_plugin(id, plugin);
    }
    for (id, tool) in tools {
        builder = builder.with_tool(id, tool);
    }
    if let Some(hub) = hub {
        builder = builder.with_event_hub(hub);
    }
    builder.with_agent_spec(spec).build().unwrap()
}

pub fn user(text: &str) -> Vec<Message> {
    vec![Message::user(text)]
}

/// The book's ordering rules for one activation: RunStart first, RunFinish last,
/// StepStart/StepEnd paired, ToolCallStart before ToolCallDone for each call.
pub fn assert_well_formed(events: &[AgentEvent]) {
    assert!(
        matches!(events.first(), Some(AgentEvent::RunStart { .. })),
        "first is RunStart: {events:#?}"
    );
    assert!(
        matches!(events.last(), Some(AgentEvent::RunFinish { .. })),
        "last is RunFinish: {events:#?}"
    );
    let mut open_step = false;
    for event in events {
        match event {
            AgentEvent::StepStart { .. } => {
                assert!(!open_step, "StepStart inside a step");
                open_step = true;
            }
            AgentEvent::StepEnd => {
                assert!(open_step, "StepEnd without StepStart");
                open_step = false;
            }
            _ => {}
        }
    }
    for (i, event) in events.iter().enumerate() {
        if let AgentEvent::ToolCallDone { id, .. } = event {
            let started = events[..i].iter().any(|e| matches!(e, AgentEvent::ToolCallStart { id: s, .. } if s == id))
                || events[..i].iter().any(|e| matches!(e, AgentEvent::ToolCallResumed { target_id, .. } if target_id == id));
            assert!(started, "ToolCallDone for {id} before its ToolCallStart");
        }
    }
}

pub fn event_types(events: &[AgentEvent]) -> Vec<&'static str> {
    events.iter().map(AgentEvent::event_type).collect()
}

/// A decision on a suspended call.
pub fn decision(
    id: &str,
    action: awaken_actors::contract::ResumeDecisionAction,
    result: JsonValue,
) -> awaken_actors::contract::ToolCallResume {
    awaken_actors::contract::ToolCallResume {
        decision_id: awaken_actors::DecisionId::new(id).unwrap(),
        action,
        result,
        reason: None,
        updated_at: 0,
        trace: None,
    }
}

/// An approval carrying `result`.
pub fn resume(id: &str, result: JsonValue) -> awaken_actors::contract::ToolCallResume {
    decision(
        id,
        awaken_actors::contract::ResumeDecisionAction::Resume,
        result,
    )
}

/// The calls reported suspended, in order.
pub fn suspended_calls(events: &[AgentEvent]) -> Vec<ToolCallId> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallDone {
                id,
                outcome: awaken_actors::contract::ToolCallOutcome::Suspended,
                ..
            } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

/// The first call reported suspended.
pub fn suspended_call(events: &[AgentEvent]) -> ToolCallId {
    suspended_calls(events)
        .into_iter()
        .next()
        .expect("a suspended call")
}

/// A thread whose run suspended two echo calls for approval, in `mode`.
pub async fn two_suspended_echo_calls(
    mode: ToolExecutionMode,
    thread: &ThreadId,
) -> (AgentRuntime, Arc<Echo>, Vec<ToolCallId>) {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![
            ("echo", serde_json::json!({"n": 1})),
            ("echo", serde_json::json!({"n": 2})),
        ]),
        Turn::Text("done"),
    ]);
    let echo = Arc::new(Echo::default());
    let rt = runtime(
        llm,
        agent_spec(mode),
        vec![("echo", echo.clone())],
        Some(Approval {
            tools: ["echo"].into_iter().collect(),
            mode: ToolCallResumeMode::ReplayToolCall,
        }),
        None,
        ThreadConfig::default(),
    );
    let sink = Arc::new(Collector::default());
    rt.run(
        awaken_actors::thread::RunRequest::new(thread.clone(), user("go")),
        sink.clone(),
    )
    .await
    .unwrap();
    let calls = suspended_calls(&sink.take());
    assert_eq!(calls.len(), 2);
    (rt, echo, calls)
}

/// A sequential runtime whose model calls the `gate` tool once, then answers.
pub fn gated_runtime() -> (AgentRuntime, Arc<Gate>) {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("gate", serde_json::json!({}))]),
        Turn::Text("done"),
    ]);
    let gate = Arc::new(Gate::default());
    let rt = runtime(
        llm,
        agent_spec(ToolExecutionMode::Sequential),
        vec![("gate", gate.clone())],
        None,
        None,
        ThreadConfig::default(),
    );
    (rt, gate)
}

/// A sequential runtime whose model calls `echo {"x": 1}` (which asks for approval
/// and replays on it), then answers `final_text`.
pub fn approved_echo_runtime(final_text: &'static str) -> (AgentRuntime, Arc<Echo>) {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", serde_json::json!({"x": 1}))]),
        Turn::Text(final_text),
    ]);
    let echo = Arc::new(Echo::default());
    let rt = runtime(
        llm,
        agent_spec(ToolExecutionMode::Sequential),
        vec![("echo", echo.clone())],
        Some(Approval {
            tools: BTreeSet::from(["echo"]),
            mode: ToolCallResumeMode::ReplayToolCall,
        }),
        None,
        ThreadConfig::default(),
    );
    (rt, echo)
}

/// A runtime with the scripted model and `tools`, no plugins, default settings.
pub fn plain_runtime(
    llm: Arc<ScriptedLlm>,
    mode: ToolExecutionMode,
    tools: Vec<(&'static str, Arc<dyn Tool>)>,
) -> AgentRuntime {
    runtime(
        llm,
        agent_spec(mode),
        tools,
        None,
        None,
        ThreadConfig::default(),
    )
}

/// Runs one user message on `thread` to its end (or suspension), collecting events.
pub async fn run_once(
    rt: &AgentRuntime,
    thread: &str,
    text: &str,
) -> (awaken_actors::runtime::AgentRunResult, Vec<AgentEvent>) {
    let sink = Arc::new(Collector::default());
    let result = rt
        .run(
            awaken_actors::thread::RunRequest::new(tid(thread), user(text)),
            sink.clone(),
        )
        .await
        .unwrap();
    (result, sink.take())
}
