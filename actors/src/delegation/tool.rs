//! `AgentTool`: a delegate agent offered to the model as the tool `agent_run_<id>`.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::json;

use super::activity::DelegateActivity;
use super::child::{ChildEvents, ChildRef, ChildRuns, DelegationError};
use super::config::{DelegationConfig, DelegationConfigKey};
use crate::JsonValue;
use crate::contract::{
    AgentEvent, AgentSpec, ChildSuspension, DelegateRunResult, DelegateRunStatus, Message,
    PendingToolCall, Role, RunOrigin, RunStatus, SuspendTicket, Suspension, TerminationReason,
    Thread, ToolDescriptor, ToolResult,
};
use crate::error::{StorageError, ToolError};
use crate::ids::AgentId;
use crate::state::StateKey;
use crate::thread::{RunRequest, ToolCallStates, ToolCalls};
use crate::tool::{CancelledCall, Tool, ToolCallContext, ToolOutput};

/// Delegate tools are named this prefix plus the delegate's agent id.
pub const DELEGATE_TOOL_PREFIX: &str = "agent_run_";

/// Longest part of a delegate's system prompt quoted in the tool's description.
const DESCRIPTION_PROMPT_CHARS: usize = 300;

/// The tool name of delegate `agent_id`.
pub fn delegate_tool_name(agent_id: &str) -> String {
    format!("{DELEGATE_TOOL_PREFIX}{agent_id}")
}

/// Runs a delegate agent as a child run on a thread of its own and returns its
/// answer as the call's result (book: Multi-Agent Patterns, `AgentTool`).
///
/// The child is started through the runtime's [`ChildRuns`] transport, so it runs
/// wherever its thread is owned. Its suspensions surface on this call, and a
/// decision for this call is handed to the child's call. See
/// `docs/decisions/0025-delegation-as-child-runs.md`.
#[derive(Debug, Clone)]
pub struct AgentTool {
    agent_id: AgentId,
    descriptor: ToolDescriptor,
}

impl AgentTool {
    /// The tool that delegates to the agent `spec` defines.
    pub fn new(spec: &AgentSpec) -> Self {
        Self {
            agent_id: spec.id.clone(),
            descriptor: delegate_descriptor(&spec.id, &spec.system_prompt),
        }
    }

    /// The delegate agent.
    pub fn agent_id(&self) -> &AgentId {
        &self.agent_id
    }
}

/// The descriptor of the tool delegating to `agent_id`, whose `instructions` (a
/// system prompt, or a remote agent's own description) are quoted in part.
pub(super) fn delegate_descriptor(agent_id: &AgentId, instructions: &str) -> ToolDescriptor {
    let mut description = format!(
        "Delegate a task to the `{agent_id}` agent and get its answer. Give it everything it needs in `prompt`: it does not see this conversation."
    );
    let quoted: String = instructions
        .chars()
        .take(DESCRIPTION_PROMPT_CHARS)
        .collect();
    if !quoted.trim().is_empty() {
        description.push_str(" Its instructions: ");
        description.push_str(quoted.trim());
    }
    let name = delegate_tool_name(agent_id.as_str());
    ToolDescriptor::new(name.clone(), name, description).with_parameters(json!({
        "type": "object",
        "properties": {
            "prompt": {
                "type": "string",
                "description": "The task for the agent, with all the context it needs."
            }
        },
        "required": ["prompt"]
    }))
}

/// The `prompt` argument of a delegate call.
pub(super) fn prompt_of(args: &JsonValue) -> Result<&str, ToolError> {
    match args.get("prompt").and_then(JsonValue::as_str) {
        Some(prompt) if !prompt.trim().is_empty() => Ok(prompt),
        Some(_) => Err(ToolError::InvalidArguments(
            "`prompt` must not be empty".to_owned(),
        )),
        None => Err(ToolError::InvalidArguments(
            "`prompt` (a string) is required".to_owned(),
        )),
    }
}

fn unavailable(error: DelegationError) -> ToolError {
    ToolError::ExecutionFailed(error.to_string())
}

#[async_trait]
impl Tool for AgentTool {
    fn descriptor(&self) -> ToolDescriptor {
        self.descriptor.clone()
    }

    fn validate_args(&self, args: &JsonValue) -> Result<(), ToolError> {
        prompt_of(args).map(|_| ())
    }

    async fn execute(
        &self,
        args: JsonValue,
        ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        let children = ctx.children.clone().ok_or_else(|| {
            ToolError::ExecutionFailed("this runtime has no delegation transport".to_owned())
        })?;
        let config = ctx
            .agent_spec
            .config::<DelegationConfigKey>()
            .map_err(|e| ToolError::Internal(e.to_string()))?;
        let wait = ChildWait {
            child: ChildRef::of_call(&self.agent_id, &ctx.run_identity.run_id, &ctx.call_id),
            tool_name: self.descriptor.id.clone(),
            arguments: args.clone(),
            children: Arc::clone(&children),
            activity: DelegateActivity::new(
                &ctx.call_id,
                ctx.activity_sink.clone().filter(|_| config.stream_events),
            ),
            ctx,
            config,
        };
        // A replay after a child's suspension hands the decision on; anything else
        // starts the child, or finds the one an earlier execution started.
        let forwarded = ctx.resumed.as_ref().and_then(|resumed| {
            let target = resumed.ticket.child.as_ref()?;
            (target.run_id == wait.child.run_id)
                .then(|| (target.call_id.clone(), resumed.decision.clone()))
        });
        let act: BoxFuture<'_, Result<(), DelegationError>> = match forwarded {
            Some((call_id, decision)) => Box::pin(children.decide(&wait.child, call_id, decision)),
            None => Box::pin(wait.start(prompt_of(&args)?.to_owned())),
        };
        let waited = tokio::time::timeout(wait.config.timeout(), wait.run(act)).await;
        let result = match waited {
            Ok(outcome) => outcome.map_err(unavailable)?,
            Err(_elapsed) => {
                if let Err(error) = children.cancel(&wait.child).await {
                    tracing::warn!(child_run = %wait.child.run_id, %error, "cannot cancel a delegate that timed out");
                }
                wait.result(DelegateRunStatus::Timeout, None, 0)
            }
        };
        Ok(result.into())
    }

    async fn cancelled(&self, call: CancelledCall) {
        let Some(children) = call.children else {
            return;
        };
        let child = ChildRef::of_call(&self.agent_id, &call.run_identity.run_id, &call.call_id);
        if let Err(error) = children.cancel(&child).await {
            tracing::warn!(child_run = %child.run_id, %error, "cannot cancel the delegate of a cancelled call");
        }
    }
}

/// One execution of a delegate call, waiting for its child run to stop.
struct ChildWait<'a> {
    child: ChildRef,
    tool_name: String,
    arguments: JsonValue,
    children: Arc<dyn ChildRuns>,
    activity: DelegateActivity,
    ctx: &'a ToolCallContext,
    config: DelegationConfig,
}

impl ChildWait<'_> {
    /// Creates the child's thread (lineage, and the parent's custom metadata such
    /// as its tenant) and submits the child run, unless an earlier execution did.
    async fn start(&self, prompt: String) -> Result<(), DelegationError> {
        let store = self.children.store();
        if store.load_run(&self.child.run_id).await?.is_some() {
            return Ok(());
        }
        let parent_thread = &self.ctx.run_identity.thread_id;
        let mut thread = Thread::with_id(self.child.thread_id.clone());
        thread.metadata.parent_thread_id = Some(parent_thread.clone());
        thread.metadata.title = Some(format!("{} (delegated)", self.child.agent_id));
        if let Some(parent) = store.load_thread(parent_thread).await? {
            thread.metadata.custom = parent.metadata.custom;
        }
        match store.create_thread(&thread).await {
            Ok(()) | Err(StorageError::AlreadyExists(_)) => {}
            Err(error) => return Err(error.into()),
        }
        let request = RunRequest::new(self.child.thread_id.clone(), vec![Message::user(prompt)])
            .with_agent_id(self.child.agent_id.clone())
            .with_run_id(self.child.run_id.clone())
            .with_delegation_lineage(
                parent_thread.clone(),
                self.ctx.run_identity.run_id.clone(),
                self.ctx.call_id.clone(),
            )
            .with_origin(RunOrigin::Internal)
            .with_trace(self.ctx.trace);
        self.children.submit(request).await
    }

    /// Performs `act` (start or decide) while following the child, until the child
    /// run stops: finished, or waiting for a decision.
    async fn run(
        &self,
        act: impl Future<Output = Result<(), DelegationError>>,
    ) -> Result<ToolResult, DelegationError> {
        // Follow first, so no event of what `act` sets off is missed. Events only
        // speed the wait up: without them (an owner failing over) the record is
        // read every poll interval.
        let mut events = match self.children.follow(&self.child).await {
            Ok(events) => Some(events),
            Err(error) => {
                tracing::debug!(child_run = %self.child.run_id, %error, "cannot follow the child yet");
                None
            }
        };
        self.announce().await;
        let mut act = std::pin::pin!(act);
        let mut acted = false;
        let mut answer: Option<String> = None;
        // First tick one period from now: an immediate first tick would still wait
        // for the timer wheel's next millisecond.
        let period = self.config.poll_interval();
        let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let check = tokio::select! {
                done = &mut act, if !acted => {
                    done?;
                    acted = true;
                    true
                }
                event = next_event(&mut events) => match event {
                    Some(event) => {
                        let stopped = match &event {
                            AgentEvent::RunFinish { result, .. } => {
                                answer = Some(AgentEvent::extract_response(result));
                                true
                            }
                            _ => false,
                        };
                        self.forward(event).await;
                        stopped
                    }
                    None => {
                        events = None;
                        false
                    }
                },
                _ = poll.tick() => {
                    // The follow ended or its source went away (an owner failing
                    // over): follow afresh, and read the record meanwhile.
                    if events.is_none() {
                        events = self.children.follow(&self.child).await.ok();
                    }
                    true
                }
            };
            // Before `act` is done the record may still show the state it changes
            // (a decided call still waiting).
            if check
                && acted
                && let Some(result) = self.outcome(answer.take()).await?
            {
                return Ok(result);
            }
        }
    }

    /// What the child's record says now: `None` while it runs (or has not started).
    async fn outcome(&self, answer: Option<String>) -> Result<Option<ToolResult>, DelegationError> {
        let store = self.children.store();
        let Some(record) = store.load_run(&self.child.run_id).await? else {
            return Ok(None);
        };
        match record.status {
            RunStatus::Running => Ok(None),
            RunStatus::Waiting => self.suspension().await,
            RunStatus::Done => {
                let status = match record.termination {
                    Some(TerminationReason::Cancelled) => DelegateRunStatus::Cancelled,
                    Some(TerminationReason::Error(message)) => DelegateRunStatus::Failed(message),
                    Some(TerminationReason::Blocked(reason)) => {
                        DelegateRunStatus::Failed(format!("blocked: {reason}"))
                    }
                    _ => DelegateRunStatus::Completed,
                };
                let answer = match answer {
                    Some(answer) => Some(answer),
                    None => self.stored_answer().await?,
                };
                let answer = answer.filter(|text| !text.is_empty());
                Ok(Some(self.result(status, answer, record.steps)))
            }
        }
    }

    /// The child's last answer, read from its thread (when its `RunFinish` was not
    /// seen).
    async fn stored_answer(&self) -> Result<Option<String>, DelegationError> {
        let store = self.children.store();
        let Some(snapshot) = store.load_thread_snapshot(&self.child.thread_id).await? else {
            return Ok(None);
        };
        Ok(snapshot
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant && m.run_id.as_ref() == Some(&self.child.run_id))
            .map(Message::text))
    }

    /// The child's first suspended call, shown as a suspension of this call; `None`
    /// when its state names none (the wait goes on).
    async fn suspension(&self) -> Result<Option<ToolResult>, DelegationError> {
        let store = self.children.store();
        let Some(snapshot) = store.load_thread_snapshot(&self.child.thread_id).await? else {
            return Ok(None);
        };
        let calls: ToolCalls = snapshot
            .state
            .as_ref()
            .and_then(|state| state.extensions.get(ToolCallStates::KEY))
            .and_then(|value| value.decode().ok())
            .unwrap_or_default();
        let Some((call_id, child_ticket)) = calls
            .with_status(crate::contract::ToolCallStatus::Suspended)
            .find_map(|call| Some((call.call_id.clone(), call.ticket.clone()?)))
        else {
            return Ok(None);
        };
        let asked = &child_ticket.suspension;
        let mut suspension = Suspension::new(
            format!("{}/{}", self.ctx.call_id, asked.id),
            asked.action.clone(),
            format!("[{}] {}", self.child.agent_id, asked.message),
        )
        .with_parameters(asked.parameters.clone());
        suspension.response_schema = asked.response_schema.clone();
        let ticket = SuspendTicket::new(
            suspension,
            PendingToolCall {
                id: self.ctx.call_id.clone(),
                name: self.tool_name.clone(),
                arguments: self.arguments.clone(),
            },
            crate::contract::ToolCallResumeMode::ReplayToolCall,
        )
        .with_child(ChildSuspension {
            agent_id: self.child.agent_id.clone(),
            thread_id: self.child.thread_id.clone(),
            run_id: self.child.run_id.clone(),
            call_id,
        });
        let message = ticket.suspension.message.clone();
        Ok(Some(ToolResult::suspended_with(
            self.tool_name.clone(),
            message,
            ticket,
        )))
    }

    fn result(
        &self,
        status: DelegateRunStatus,
        response: Option<String>,
        steps: u32,
    ) -> ToolResult {
        DelegateRunResult {
            agent_id: self.child.agent_id.clone(),
            status,
            response,
            steps,
            thread_id: self.child.thread_id.clone(),
            run_id: self.child.run_id.clone(),
        }
        .to_tool_result(&self.tool_name)
    }

    /// Opens the call's `delegate-run` activity: which child, and its events so far.
    async fn announce(&self) {
        self.activity
            .open(json!({
                "agent_id": self.child.agent_id,
                "thread_id": self.child.thread_id,
                "run_id": self.child.run_id,
            }))
            .await;
    }

    /// Appends one child event to the activity. The child's state is its own
    /// (book: delegation isolates state), so state events stay with the child.
    async fn forward(&self, event: AgentEvent) {
        if matches!(
            event,
            AgentEvent::StateSnapshot { .. }
                | AgentEvent::StateDelta { .. }
                | AgentEvent::MessagesSnapshot { .. }
        ) {
            return;
        }
        if let Ok(value) = serde_json::to_value(&event) {
            self.activity.append(value).await;
        }
    }
}

/// The next event of the follow, or never when there is none.
async fn next_event(events: &mut Option<ChildEvents>) -> Option<AgentEvent> {
    match events {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}
