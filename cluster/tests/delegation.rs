//! Delegation on a single node: `agent_run_<id>` tool calls start child runs through
//! the mailbox, wait for them, surface their suspensions and hand decisions on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use awaken_actors::contract::{
    AgentEvent, AgentSpec, ApprovalStatus, Message, ModelSpec, ResumeDecisionAction, RunOrigin,
    RunStatus, TerminationReason, ToolCallOutcome, ToolCallResume, ToolDescriptor,
    ToolExecutionMode, ToolResult,
};
use awaken_actors::delegation::{
    ChildRef, DELEGATE_ACTIVITY_TYPE, DelegationConfig, DelegationConfigKey,
};
use awaken_actors::llm::{ScriptSpec, ScriptStep, ScriptedExecutor};
use awaken_actors::mailbox::{DispatchQuery, MailboxStore, SubmitOptions};
use awaken_actors::permission::{
    PermissionBehavior, PermissionConfigKey, PermissionPlugin, PermissionRuleEntry,
    PermissionRules, PermissionRulesConfig,
};
use awaken_actors::runtime::AgentRuntimeBuilder;
use awaken_actors::store::InMemoryStore;
use awaken_actors::thread::RunRequest;
use awaken_actors::tool::{Tool, ToolCallContext, ToolOutput};
use awaken_actors::{
    AgentId, DecisionId, InferenceExecutionError, JsonValue, RunId, ThreadId, ToolCallId, ToolError,
};
use awaken_cluster::RunControl;
use awaken_cluster::decisions::{Decision, Delivery};
use awaken_cluster::local::{LocalNode, LocalNodeConfig};
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use awaken_cluster::routing::{CallOutcome, ThreadCall};
use awaken_cluster::testing::NatsServer;
use serde_json::json;
use tokio::sync::{Barrier, Notify};

/// Bounds every scenario: a delegation that never comes back fails the test
/// instead of hanging it.
const LIMIT: Duration = Duration::from_secs(30);

/// `echo`: answers with its arguments and counts its executions.
#[derive(Default)]
struct Echo(AtomicUsize);

#[async_trait]
impl Tool for Echo {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new("echo", "echo", "Answers with its arguments")
    }

    async fn execute(&self, args: JsonValue, _: &ToolCallContext) -> Result<ToolOutput, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ToolResult::success("echo", args).into())
    }
}

/// `barrier`: returns once two calls of it are running at the same time.
struct Rendezvous(Barrier);

#[async_trait]
impl Tool for Rendezvous {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new("barrier", "barrier", "Waits for its sibling")
    }

    async fn execute(&self, _: JsonValue, _: &ToolCallContext) -> Result<ToolOutput, ToolError> {
        self.0.wait().await;
        Ok(ToolResult::success("barrier", json!("met")).into())
    }
}

/// `block`: signals that it started, then runs until it is cancelled.
#[derive(Default)]
struct Block(Notify);

#[async_trait]
impl Tool for Block {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new("block", "block", "Never finishes")
    }

    async fn execute(&self, _: JsonValue, ctx: &ToolCallContext) -> Result<ToolOutput, ToolError> {
        self.0.notify_one();
        ctx.cancellation.cancelled().await;
        Err(ToolError::ExecutionFailed("cancelled".into()))
    }
}

struct Fixture {
    node: LocalNode,
    echo: Arc<Echo>,
    block: Arc<Block>,
}

fn id(name: &str) -> AgentId {
    AgentId::new(name).unwrap()
}

/// An agent with its own scripted model.
fn scripted(
    builder: AgentRuntimeBuilder,
    spec: AgentSpec,
    steps: Vec<ScriptStep>,
) -> AgentRuntimeBuilder {
    let model = format!("model-{}", spec.id);
    builder
        .with_model(
            model.clone(),
            ModelSpec::new(model.clone(), model.clone(), "scripted"),
        )
        .with_provider(
            model.clone(),
            Arc::new(ScriptedExecutor::new(ScriptSpec::new(steps)).unwrap()),
        )
        .with_agent_spec(spec.with_model(model))
}

fn delegate_call(agent: &str, prompt: &str) -> ScriptStep {
    ScriptStep::tool_call(format!("agent_run_{agent}"), json!({"prompt": prompt}))
}

async fn fixture() -> Fixture {
    let echo = Arc::new(Echo::default());
    let block = Arc::new(Block::default());
    let builder = agents(Arc::clone(&echo), Arc::clone(&block));
    let node = LocalNode::start(builder, LocalNodeConfig::default())
        .await
        .unwrap();
    Fixture { node, echo, block }
}

/// The test agents: delegators and their delegates.
fn agents(echo: Arc<Echo>, block: Arc<Block>) -> AgentRuntimeBuilder {
    let ask_echo = PermissionRulesConfig {
        default_behavior: None,
        rules: vec![PermissionRuleEntry::new("echo", PermissionBehavior::Ask)],
    };
    let mut builder = AgentRuntimeBuilder::new()
        .with_plugin(
            PermissionPlugin::ID,
            Arc::new(PermissionPlugin::new(PermissionRules::new(
                PermissionBehavior::Allow,
            ))),
        )
        .with_tool("echo", echo)
        .with_tool("barrier", Arc::new(Rendezvous(Barrier::new(2))))
        .with_tool("block", block);
    builder = scripted(
        builder,
        AgentSpec::new(id("worker")).with_system_prompt("You compute answers."),
        vec![ScriptStep::text("the answer to '{last_user_text}' is 42")],
    );
    builder = scripted(
        builder,
        AgentSpec::new(id("orchestrator")).with_delegate("worker"),
        vec![
            delegate_call("worker", "what is six times seven"),
            ScriptStep::text("worker said: {last_tool_result}"),
        ],
    );
    builder = scripted(
        builder,
        AgentSpec::new(id("lead")).with_delegate("worker"),
        vec![
            delegate_call("worker", "the detail"),
            ScriptStep::text("lead heard: {last_tool_result}"),
        ],
    );
    builder = scripted(
        builder,
        AgentSpec::new(id("director")).with_delegate("lead"),
        vec![
            delegate_call("lead", "the plan"),
            ScriptStep::text("director heard: {last_tool_result}"),
        ],
    );
    for name in ["left", "right"] {
        builder = scripted(
            builder,
            AgentSpec::new(id(name)),
            vec![
                ScriptStep::tool_call("barrier", json!({})),
                ScriptStep::text(format!("{name} met its sibling")),
            ],
        );
    }
    builder = scripted(
        builder,
        AgentSpec::new(id("fan_out"))
            .with_delegate("left")
            .with_delegate("right")
            .with_tool_execution_mode(ToolExecutionMode::ParallelStreaming),
        vec![
            delegate_call("left", "go").with_tool_call("agent_run_right", json!({"prompt": "go"})),
            ScriptStep::text("both answered"),
        ],
    );
    builder = scripted(
        builder,
        AgentSpec::new(id("careful"))
            .with_plugin(PermissionPlugin::ID)
            .with_config::<PermissionConfigKey>(ask_echo)
            .unwrap(),
        vec![
            ScriptStep::tool_call("echo", json!({"value": 7})),
            ScriptStep::text("careful saw: {last_tool_result}"),
        ],
    );
    builder = scripted(
        builder,
        AgentSpec::new(id("asks_careful")).with_delegate("careful"),
        vec![
            delegate_call("careful", "echo seven"),
            ScriptStep::text("parent saw: {last_tool_result}"),
        ],
    );
    builder = scripted(
        builder,
        AgentSpec::new(id("stuck")),
        vec![
            ScriptStep::tool_call("block", json!({})),
            ScriptStep::text("unblocked"),
        ],
    );
    builder = scripted(
        builder,
        AgentSpec::new(id("asks_stuck")).with_delegate("stuck"),
        vec![
            delegate_call("stuck", "wait"),
            ScriptStep::text("parent done: {last_tool_result}"),
        ],
    );
    builder = scripted(
        builder,
        AgentSpec::new(id("impatient"))
            .with_delegate("stuck")
            .with_config::<DelegationConfigKey>(DelegationConfig {
                timeout_ms: 200,
                ..DelegationConfig::default()
            })
            .unwrap(),
        vec![
            delegate_call("stuck", "wait"),
            ScriptStep::text("gave up: {last_tool_result}"),
        ],
    );
    builder = scripted(
        builder,
        AgentSpec::new(id("broken")),
        vec![ScriptStep::error(InferenceExecutionError::Provider {
            message: "model offline".into(),
        })],
    );
    scripted(
        builder,
        AgentSpec::new(id("asks_broken")).with_delegate("broken"),
        vec![
            delegate_call("broken", "try"),
            ScriptStep::text("parent: {last_tool_result}"),
        ],
    )
}

/// What one activation of a run showed.
struct Seen {
    thread_id: ThreadId,
    run_id: RunId,
    events: Vec<AgentEvent>,
}

impl Seen {
    fn termination(&self) -> &TerminationReason {
        self.events
            .iter()
            .find_map(|event| match event {
                AgentEvent::RunFinish { termination, .. } => Some(termination),
                _ => None,
            })
            .expect("the activation ended")
    }

    fn response(&self) -> String {
        self.events
            .iter()
            .find_map(|event| match event {
                AgentEvent::RunFinish { result, .. } => Some(AgentEvent::extract_response(result)),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Results of the delegate calls, by outcome.
    fn delegate_results(&self) -> Vec<(ToolCallId, ToolCallOutcome, ToolResult)> {
        self.events
            .iter()
            .filter_map(|event| match event {
                AgentEvent::ToolCallDone {
                    id,
                    result,
                    outcome,
                    ..
                } if result.tool_name.starts_with("agent_run_") => {
                    Some((id.clone(), *outcome, result.clone()))
                }
                _ => None,
            })
            .collect()
    }
}

impl Fixture {
    /// Submits `agent` on a new thread and follows the run until it stops.
    async fn run(&self, agent: &str, text: &str) -> Seen {
        let thread_id = ThreadId::generate();
        let run_id = RunId::generate();
        let request = RunRequest::new(thread_id.clone(), vec![Message::user(text)])
            .with_agent_id(id(agent))
            .with_run_id(run_id.clone());
        let mut follow = self.node.follow(&thread_id, &run_id, None).await.unwrap();
        self.node
            .submit(request, SubmitOptions::default())
            .await
            .unwrap();
        let mut events = Vec::new();
        while let Some(event) = follow.next().await {
            events.push(event.event.clone());
        }
        Seen {
            thread_id,
            run_id,
            events,
        }
    }

    /// Sends a decision for `call_id` of the waiting run, and follows what it
    /// resumed until the run stops again.
    async fn decide(
        &self,
        waiting: &Seen,
        call_id: &ToolCallId,
        action: ResumeDecisionAction,
    ) -> Seen {
        let follow = self
            .node
            .follow(&waiting.thread_id, &waiting.run_id, None)
            .await
            .unwrap();
        let mut follow = follow.skip_backlog();
        let decision = Decision {
            thread_id: waiting.thread_id.clone(),
            call_id: call_id.clone(),
            run_id: Some(waiting.run_id.clone()),
            resume: ToolCallResume {
                decision_id: DecisionId::generate(),
                action,
                result: json!({"approved": action == ResumeDecisionAction::Resume}),
                reason: None,
                updated_at: 1,
                trace: None,
            },
        };
        let answer = self
            .node
            .call(ThreadCall::Decide { decision })
            .await
            .unwrap();
        assert!(
            matches!(
                answer.outcome,
                CallOutcome::Delivered(Delivery::Applied { duplicate: false })
            ),
            "{:?}",
            answer.outcome
        );
        let mut events = Vec::new();
        while let Some(event) = follow.next().await {
            events.push(event.event.clone());
        }
        Seen {
            thread_id: waiting.thread_id.clone(),
            run_id: waiting.run_id.clone(),
            events,
        }
    }

    /// Every approval the store has, oldest request first.
    async fn approvals(&self) -> Vec<awaken_actors::contract::Approval> {
        self.node
            .store()
            .list_approvals(&awaken_actors::store::ApprovalQuery::default())
            .await
            .unwrap()
            .items
    }

    async fn record(&self, run_id: &RunId) -> awaken_actors::contract::RunRecord {
        self.node
            .store()
            .load_run(run_id)
            .await
            .unwrap()
            .expect("run recorded")
    }

    /// Follows `run_id` from now until its current activation ends.
    async fn next_stop(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
    ) -> awaken_cluster::events::RunFollow {
        self.node
            .follow(thread_id, run_id, None)
            .await
            .unwrap()
            .skip_backlog()
    }
}

/// Reads `follow` to its end, which must be the run's cancellation.
async fn assert_ends_cancelled(mut follow: awaken_cluster::events::RunFollow) {
    let finish = tokio::time::timeout(LIMIT, async {
        let mut last = None;
        while let Some(event) = follow.next().await {
            last = Some(event.event.clone());
        }
        last
    })
    .await
    .unwrap();
    assert!(
        matches!(
            finish,
            Some(AgentEvent::RunFinish {
                termination: TerminationReason::Cancelled,
                ..
            })
        ),
        "{finish:?}"
    );
}

fn child_run(result: &ToolResult) -> (ThreadId, RunId) {
    (
        ThreadId::new(result.data["thread_id"].as_str().unwrap()).unwrap(),
        RunId::new(result.data["run_id"].as_str().unwrap()).unwrap(),
    )
}

#[tokio::test]
async fn a_delegate_call_runs_the_agent_as_a_child_run_and_returns_its_answer() {
    let fx = fixture().await;
    let seen = tokio::time::timeout(LIMIT, fx.run("orchestrator", "hi"))
        .await
        .unwrap();

    assert_eq!(seen.termination(), &TerminationReason::NaturalEnd);
    let results = seen.delegate_results();
    assert_eq!(results.len(), 1);
    let (call_id, outcome, result) = &results[0];
    assert_eq!(*outcome, ToolCallOutcome::Succeeded);
    assert_eq!(result.data["agent_id"], json!("worker"));
    assert_eq!(result.data["status"], json!("completed"));
    assert_eq!(
        result.data["response"],
        json!("the answer to 'what is six times seven' is 42")
    );
    assert!(seen.response().contains("is 42"), "{}", seen.response());

    // Lineage on the child's run and thread.
    let (child_thread, child_run) = child_run(result);
    let record = fx.record(&child_run).await;
    assert_eq!(record.thread_id, child_thread);
    assert_eq!(record.agent_id, id("worker"));
    assert_eq!(record.parent_run_id.as_ref(), Some(&seen.run_id));
    assert_eq!(record.parent_thread_id.as_ref(), Some(&seen.thread_id));
    assert_eq!(record.parent_tool_call_id.as_ref(), Some(call_id));
    assert_eq!(record.origin, RunOrigin::Internal);
    assert_eq!(record.status, RunStatus::Done);
    let thread = fx
        .node
        .store()
        .load_thread(&child_thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        thread.metadata.parent_thread_id.as_ref(),
        Some(&seen.thread_id)
    );

    // The child's events were streamed as the call's activity.
    let activity: Vec<&AgentEvent> = seen
        .events
        .iter()
        .filter(|event| {
            matches!(event,
                AgentEvent::ActivitySnapshot { activity_type, .. }
                | AgentEvent::ActivityDelta { activity_type, .. }
                if activity_type == DELEGATE_ACTIVITY_TYPE)
        })
        .collect();
    assert!(
        matches!(activity[0], AgentEvent::ActivitySnapshot { content, .. }
        if content["run_id"] == json!(child_run.as_str()))
    );
    let forwarded: Vec<&str> = activity[1..]
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ActivityDelta { patch, .. } => patch[0]["value"]["event_type"].as_str(),
            _ => None,
        })
        .collect();
    assert_eq!(forwarded.first(), Some(&"run_start"), "{forwarded:?}");
    assert!(forwarded.contains(&"text_delta"), "{forwarded:?}");
    assert_eq!(forwarded.last(), Some(&"run_finish"), "{forwarded:?}");
    fx.node.shutdown().await;
}

#[tokio::test]
async fn delegates_called_in_one_step_run_at_the_same_time() {
    // Each child's `barrier` call returns only once the other child's runs too: run
    // one after the other, they would never finish.
    let fx = fixture().await;
    let seen = tokio::time::timeout(LIMIT, fx.run("fan_out", "go"))
        .await
        .unwrap();
    assert_eq!(seen.termination(), &TerminationReason::NaturalEnd);
    let mut answers: Vec<String> = seen
        .delegate_results()
        .iter()
        .map(|(_, _, result)| result.data["response"].as_str().unwrap().to_owned())
        .collect();
    answers.sort();
    assert_eq!(answers, ["left met its sibling", "right met its sibling"]);
    fx.node.shutdown().await;
}

#[tokio::test]
async fn a_delegate_can_delegate_in_turn() {
    let fx = fixture().await;
    let seen = tokio::time::timeout(LIMIT, fx.run("director", "go"))
        .await
        .unwrap();
    assert_eq!(seen.termination(), &TerminationReason::NaturalEnd);
    let (_, _, result) = &seen.delegate_results()[0];
    let (_, lead_run) = child_run(result);
    let response = result.data["response"].as_str().unwrap();
    assert!(response.starts_with("lead heard: "), "{response}");
    assert!(
        response.contains("the answer to 'the detail' is 42"),
        "{response}"
    );
    // The grandchild's lineage points at the lead's run.
    let lead_events = fx.node.store().load_run(&lead_run).await.unwrap().unwrap();
    assert_eq!(lead_events.agent_id, id("lead"));
    let page = fx
        .node
        .store()
        .list_runs(&awaken_actors::store::RunQuery::default())
        .await
        .unwrap();
    let worker = page
        .runs
        .iter()
        .find(|run| run.agent_id == id("worker"))
        .expect("the worker ran");
    assert_eq!(worker.parent_run_id.as_ref(), Some(&lead_run));
    fx.node.shutdown().await;
}

#[tokio::test]
async fn a_child_suspension_shows_on_the_parent_and_its_decision_reaches_the_child() {
    let fx = fixture().await;
    let waiting = tokio::time::timeout(LIMIT, fx.run("asks_careful", "go"))
        .await
        .unwrap();
    assert_eq!(waiting.termination(), &TerminationReason::Suspended);
    let (call_id, outcome, result) = &waiting.delegate_results()[0];
    assert_eq!(*outcome, ToolCallOutcome::Suspended);
    let ticket = result.suspension.as_deref().expect("a mirrored ticket");
    let child = ticket.child.as_ref().expect("the ticket names the child");
    assert_eq!(child.agent_id, id("careful"));
    assert_eq!(ticket.pending.id, *call_id);
    assert!(
        ticket.suspension.message.starts_with("[careful] "),
        "{}",
        ticket.suspension.message
    );
    assert_eq!(fx.record(&waiting.run_id).await.status, RunStatus::Waiting);
    assert_eq!(fx.record(&child.run_id).await.status, RunStatus::Waiting);
    assert_eq!(fx.echo.0.load(Ordering::SeqCst), 0);
    // One approval, the child's: the parent's call only mirrors it.
    let [approval] = fx.approvals().await.try_into().expect("one approval");
    assert_eq!(
        (&approval.run_id, &approval.thread_id, &approval.agent_id),
        (&child.run_id, &child.thread_id, &id("careful"))
    );
    assert_eq!(approval.call_id, child.call_id);
    assert_eq!(approval.status, ApprovalStatus::Pending);

    let resumed = tokio::time::timeout(
        LIMIT,
        fx.decide(&waiting, call_id, ResumeDecisionAction::Resume),
    )
    .await
    .unwrap();
    assert_eq!(resumed.termination(), &TerminationReason::NaturalEnd);
    assert_eq!(
        fx.echo.0.load(Ordering::SeqCst),
        1,
        "the child's call ran once"
    );
    assert!(
        resumed.response().contains("careful saw: "),
        "{}",
        resumed.response()
    );
    assert!(resumed.response().contains("\\\"value\\\":7") || resumed.response().contains("7"));
    assert_eq!(fx.record(&child.run_id).await.status, RunStatus::Done);
    let [approval] = fx.approvals().await.try_into().expect("still one approval");
    assert_eq!(approval.status, ApprovalStatus::Approved, "{approval:?}");
    fx.node.shutdown().await;
}

#[tokio::test]
async fn a_denial_on_the_parent_cancels_the_childs_call_not_the_delegation() {
    let fx = fixture().await;
    let waiting = tokio::time::timeout(LIMIT, fx.run("asks_careful", "go"))
        .await
        .unwrap();
    let (call_id, _, _) = &waiting.delegate_results()[0];
    let resumed = tokio::time::timeout(
        LIMIT,
        fx.decide(&waiting, call_id, ResumeDecisionAction::Cancel),
    )
    .await
    .unwrap();
    assert_eq!(resumed.termination(), &TerminationReason::NaturalEnd);
    assert_eq!(
        fx.echo.0.load(Ordering::SeqCst),
        0,
        "the denied call never ran"
    );
    let (_, outcome, result) = resumed.delegate_results().pop().unwrap();
    assert_eq!(outcome, ToolCallOutcome::Succeeded, "{result:?}");
    let response = result.data["response"].as_str().unwrap();
    assert!(response.starts_with("careful saw: "), "{response}");
    assert!(response.contains("cancel"), "{response}");
    fx.node.shutdown().await;
}

#[tokio::test]
async fn cancelling_the_parent_cancels_a_child_that_waits_for_a_decision() {
    let fx = fixture().await;
    let waiting = tokio::time::timeout(LIMIT, fx.run("asks_careful", "go"))
        .await
        .unwrap();
    let (_, _, result) = &waiting.delegate_results()[0];
    let child = *result.suspension.as_deref().unwrap().child.clone().unwrap();
    let child_events = fx.next_stop(&child.thread_id, &child.run_id).await;

    let answer = fx
        .node
        .call(ThreadCall::Cancel {
            thread_id: waiting.thread_id.clone(),
            run_id: None,
        })
        .await
        .unwrap();
    assert!(
        matches!(answer.outcome, CallOutcome::Cancelled(_)),
        "{:?}",
        answer.outcome
    );
    assert_ends_cancelled(child_events).await;
    assert_eq!(fx.record(&child.run_id).await.status, RunStatus::Done);
    let [approval] = fx.approvals().await.try_into().expect("one approval");
    assert_eq!(approval.run_id, child.run_id);
    assert_eq!(approval.status, ApprovalStatus::Cancelled, "{approval:?}");
    assert_eq!(approval.cause.as_deref(), Some("run_cancelled"));
    fx.node.shutdown().await;
}

#[tokio::test]
async fn cancelling_the_parent_cancels_a_running_child() {
    let fx = fixture().await;
    let thread_id = ThreadId::generate();
    let run_id = RunId::generate();
    let mut parent = fx.node.follow(&thread_id, &run_id, None).await.unwrap();
    let started = fx.block.0.notified();
    fx.node
        .submit(
            RunRequest::new(thread_id.clone(), vec![Message::user("go")])
                .with_agent_id(id("asks_stuck"))
                .with_run_id(run_id.clone()),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, started).await.unwrap();
    // The child runs `block` now; its run id is in the parent's activity.
    let child_run = loop {
        let event = parent.next().await.unwrap().event.clone();
        if let AgentEvent::ActivitySnapshot { content, .. } = event {
            break RunId::new(content["run_id"].as_str().unwrap()).unwrap();
        }
    };
    let child = fx.record(&child_run).await;
    let child_events = fx.next_stop(&child.thread_id, &child_run).await;

    let answer = fx
        .node
        .call(ThreadCall::Cancel {
            thread_id: thread_id.clone(),
            run_id: Some(run_id.clone()),
        })
        .await
        .unwrap();
    assert!(
        matches!(answer.outcome, CallOutcome::Cancelled(_)),
        "{:?}",
        answer.outcome
    );
    assert_ends_cancelled(child_events).await;
    fx.node.shutdown().await;
}

#[tokio::test]
async fn a_delegate_past_its_timeout_is_cancelled_and_reported() {
    let fx = fixture().await;
    let seen = tokio::time::timeout(LIMIT, fx.run("impatient", "go"))
        .await
        .unwrap();
    assert_eq!(seen.termination(), &TerminationReason::NaturalEnd);
    let (_, outcome, result) = seen.delegate_results().pop().unwrap();
    assert_eq!(outcome, ToolCallOutcome::Failed);
    assert_eq!(result.error_code.as_deref(), Some("delegate_timeout"));
    // The child was cancelled, not left running.
    let runs = fx
        .node
        .store()
        .list_runs(&awaken_actors::store::RunQuery::default())
        .await
        .unwrap();
    let child = runs
        .runs
        .iter()
        .find(|run| run.agent_id == id("stuck"))
        .unwrap();
    let record = fx.record(&child.run_id).await;
    assert_eq!(record.status, RunStatus::Done);
    assert_eq!(record.termination, Some(TerminationReason::Cancelled));
    fx.node.shutdown().await;
}

#[tokio::test]
async fn a_failing_delegate_is_an_error_result_for_the_parent() {
    let fx = fixture().await;
    let seen = tokio::time::timeout(LIMIT, fx.run("asks_broken", "go"))
        .await
        .unwrap();
    assert_eq!(seen.termination(), &TerminationReason::NaturalEnd);
    let (_, outcome, result) = seen.delegate_results().pop().unwrap();
    assert_eq!(outcome, ToolCallOutcome::Failed);
    assert_eq!(result.error_code.as_deref(), Some("delegate_failed"));
    assert!(
        result.message.as_deref().unwrap().contains("model offline"),
        "{result:?}"
    );
    assert!(
        seen.response().starts_with("parent: "),
        "{}",
        seen.response()
    );
    fx.node.shutdown().await;
}

/// Two cluster nodes on a real nats-server sharing one thread store, shards settled.
async fn two_nodes(echo: &Arc<Echo>) -> (NatsServer, Vec<ClusterNode>) {
    let nats = NatsServer::start().await.unwrap();
    let store = Arc::new(InMemoryStore::new());
    let mut nodes = Vec::new();
    for name in ["node-a", "node-b"] {
        let builder = agents(Arc::clone(echo), Arc::new(Block::default()))
            .with_thread_run_store(Arc::clone(&store) as _);
        let node = ClusterNode::start(
            nats.connect().await.unwrap(),
            builder,
            NodeConfig::new(NodeId::new(name).unwrap()),
        )
        .await
        .unwrap();
        nodes.push(node);
    }
    let members: BTreeSet<NodeId> = nodes.iter().map(|node| node.node_id().clone()).collect();
    for node in &nodes {
        let held = tokio::time::timeout(Duration::from_secs(60), node.fair_share_held(&members));
        assert!(
            held.await.expect("shards settle"),
            "the shard owner stopped"
        );
    }
    (nats, nodes)
}

/// Submits `agent` as run `run_id` on `thread_id` through `node` and follows it
/// there until it stops.
async fn run_on(
    node: &ClusterNode,
    agent: &str,
    thread_id: &ThreadId,
    run_id: &RunId,
) -> Vec<AgentEvent> {
    let mut follow = node.follow_run(thread_id, run_id, None).await.unwrap();
    let request = RunRequest::new(thread_id.clone(), vec![Message::user("go")])
        .with_agent_id(id(agent))
        .with_run_id(run_id.clone());
    node.submit(request, SubmitOptions::default())
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(event) = follow.next().await {
        events.push(event.event.clone());
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_runs_on_the_node_owning_its_thread_and_decisions_reach_it_there() {
    let echo = Arc::new(Echo::default());
    let (_nats, nodes) = two_nodes(&echo).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let owned_by = |node: &ClusterNode, tag: &str| {
        (0..)
            .map(|i| ThreadId::new(format!("{tag}-{i}")).unwrap())
            .find(|thread| node.owns(thread))
            .unwrap()
    };

    // The scripted model names its calls after the history, so a first run tells
    // the delegate call's id; then pick a parent run whose child lands on node B.
    let probe = tokio::time::timeout(
        LIMIT,
        run_on(a, "asks_careful", &owned_by(a, "probe"), &RunId::generate()),
    )
    .await
    .unwrap();
    let call_id = probe
        .iter()
        .find_map(|event| match event {
            AgentEvent::ToolCallDone { id, .. } => Some(id.clone()),
            _ => None,
        })
        .unwrap();
    let parent_thread = owned_by(a, "parent");
    let (parent_run, child) = std::iter::repeat_with(RunId::generate)
        .map(|run| {
            let child = ChildRef::of_call(&id("careful"), &run, &call_id);
            (run, child)
        })
        .find(|(_, child)| b.owns(&child.thread_id))
        .unwrap();

    let waiting = tokio::time::timeout(
        LIMIT,
        run_on(a, "asks_careful", &parent_thread, &parent_run),
    )
    .await
    .unwrap();
    assert!(
        matches!(
            waiting.last(),
            Some(AgentEvent::RunFinish {
                termination: TerminationReason::Suspended,
                ..
            })
        ),
        "{:?}",
        waiting.last()
    );
    let mirrored = waiting
        .iter()
        .find_map(|event| match event {
            AgentEvent::ToolCallDone { result, .. } => result.suspension.clone(),
            _ => None,
        })
        .expect("the child's suspension shows on the parent");
    assert_eq!(
        mirrored.child.as_deref().map(|c| &c.run_id),
        Some(&child.run_id)
    );
    // The child was claimed and run by node B.
    let dispatches = b
        .mailbox()
        .list_dispatches(&DispatchQuery::thread(child.thread_id.clone()))
        .await
        .unwrap();
    assert_eq!(
        dispatches.dispatches[0].dispatch_instance_id.as_deref(),
        Some("node-b")
    );

    // A decision for the parent's call, sent through node B: it reaches the parent on
    // A, which hands it to the child on B.
    let decision = Decision {
        thread_id: parent_thread.clone(),
        call_id: call_id.clone(),
        run_id: Some(parent_run.clone()),
        resume: ToolCallResume {
            decision_id: DecisionId::generate(),
            action: ResumeDecisionAction::Resume,
            result: json!(true),
            reason: None,
            updated_at: 1,
            trace: None,
        },
    };
    let answer = tokio::time::timeout(LIMIT, b.call(ThreadCall::Decide { decision }))
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            answer.outcome,
            CallOutcome::Delivered(Delivery::Applied { duplicate: false })
        ),
        "{:?}",
        answer.outcome
    );
    let store = a.store();
    let parent = store.load_run(&parent_run).await.unwrap().unwrap();
    assert_eq!(parent.status, RunStatus::Done);
    assert_eq!(parent.termination, Some(TerminationReason::NaturalEnd));
    let child_record = store.load_run(&child.run_id).await.unwrap().unwrap();
    assert_eq!(child_record.status, RunStatus::Done);
    assert_eq!(
        echo.0.load(Ordering::SeqCst),
        1,
        "the child's call ran once"
    );
    for node in nodes {
        node.drain(Duration::from_secs(5)).await.unwrap();
    }
}
