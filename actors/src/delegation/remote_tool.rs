//! `RemoteAgentTool`: a remote delegate offered to the model as `agent_run_<id>`.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;

use super::activity::DelegateActivity;
use super::config::DelegationConfigKey;
use super::remote::{
    RemoteAct, RemoteAgentCard, RemoteAnswer, RemoteBackend, RemoteCall, RemoteOutcome,
    RemoteProgress, RemoteRequest, RemoteTask,
};
use super::started::StartedTasks;
use super::tool::{delegate_descriptor, prompt_of};
use crate::JsonValue;
use crate::contract::{
    AgentSpec, DelegateRunResult, DelegateRunStatus, PendingToolCall, RemoteEndpoint,
    RemoteSuspension, ResumeDecisionAction, SuspendTicket, Suspension, ToolCallResumeMode,
    ToolDescriptor, ToolResult,
};
use crate::error::ToolError;
use crate::ids::{AgentId, RunId, ThreadId};
use crate::tool::{CancelledCall, Tool, ToolCallContext, ToolOutput};

/// Runs a remote delegate (an agent with an `endpoint`) through its backend and
/// returns its answer as the call's result, like [`super::AgentTool`] does for a
/// local one.
///
/// A remote task that asks for input suspends the call with a ticket naming the
/// task; the decision on the call is handed to that task when the call replays.
/// One execution is bounded by the endpoint's `timeout_ms` (time spent waiting for
/// a human does not count, as the call is suspended then); on expiry, and whenever
/// an execution is abandoned, the remote task is cancelled.
#[derive(Debug, Clone)]
pub struct RemoteAgentTool {
    agent_id: AgentId,
    endpoint: RemoteEndpoint,
    card: Option<RemoteAgentCard>,
    backend: Arc<dyn RemoteBackend>,
    descriptor: ToolDescriptor,
}

impl RemoteAgentTool {
    /// The tool that delegates to the remote agent `spec` defines over `endpoint`,
    /// described by its discovered `card` when there is one.
    pub fn new(
        spec: &AgentSpec,
        endpoint: RemoteEndpoint,
        backend: Arc<dyn RemoteBackend>,
        card: Option<RemoteAgentCard>,
    ) -> Self {
        let instructions = match &card {
            Some(card) if spec.system_prompt.trim().is_empty() => card.description.as_str(),
            _ => spec.system_prompt.as_str(),
        };
        Self {
            agent_id: spec.id.clone(),
            descriptor: delegate_descriptor(&spec.id, instructions),
            endpoint,
            card,
            backend,
        }
    }

    /// The remote delegate.
    pub fn agent_id(&self) -> &AgentId {
        &self.agent_id
    }

    /// What this execution asks of the remote agent: the answer to its waiting
    /// task when the call replays after a decision, a new task otherwise.
    fn act(args: &JsonValue, ctx: &ToolCallContext) -> Result<RemoteAct, ToolError> {
        if let Some(resumed) = &ctx.resumed
            && let Some(remote) = &resumed.ticket.remote
        {
            let decision = &resumed.decision;
            let approved = decision.action == ResumeDecisionAction::Resume
                && decision.result != JsonValue::Bool(false);
            return Ok(RemoteAct::Answer {
                task: RemoteTask {
                    task_id: remote.task_id.clone(),
                    context_id: remote.context_id.clone(),
                },
                answer: RemoteAnswer {
                    approved,
                    call_ids: remote.call_ids.clone(),
                    reason: decision.reason.clone(),
                    result: decision.result.clone(),
                },
            });
        }
        Ok(RemoteAct::Start {
            prompt: prompt_of(args)?.to_owned(),
        })
    }

    fn finished(
        &self,
        task: &RemoteTask,
        status: DelegateRunStatus,
        response: Option<String>,
    ) -> Result<ToolResult, ToolError> {
        let invalid = |what: &str, error: crate::ids::IdError| {
            ToolError::ExecutionFailed(format!("remote agent `{}` {what}: {error}", self.agent_id))
        };
        Ok(DelegateRunResult {
            agent_id: self.agent_id.clone(),
            status,
            response: response.filter(|text| !text.is_empty()),
            steps: 0,
            thread_id: ThreadId::new(task.context_id.as_str())
                .map_err(|e| invalid("gave an unusable context id", e))?,
            run_id: RunId::new(task.task_id.as_str())
                .map_err(|e| invalid("gave an unusable task id", e))?,
        }
        .to_tool_result(&self.descriptor.id))
    }

    /// The call suspended on the remote task's behalf.
    fn input_required(
        &self,
        ctx: &ToolCallContext,
        args: JsonValue,
        task: RemoteTask,
        message: String,
        requests: Vec<RemoteRequest>,
    ) -> ToolResult {
        let action = requests
            .iter()
            .find_map(|request| request.action.clone())
            .unwrap_or_else(|| "input_required".to_owned());
        let asked: Vec<&str> = requests
            .iter()
            .map(|request| request.message.as_str())
            .filter(|text| !text.is_empty())
            .collect();
        let text = if asked.is_empty() {
            message
        } else {
            asked.join("\n")
        };
        let listed: Vec<JsonValue> = requests
            .iter()
            .map(|request| {
                json!({
                    "call_id": request.call_id,
                    "tool_name": request.tool_name,
                    "action": request.action,
                    "message": request.message,
                    "arguments": request.arguments,
                })
            })
            .collect();
        let suspension = Suspension::new(
            format!("{}/{}", ctx.call_id, task.task_id),
            action,
            format!("[{}] {text}", self.agent_id),
        )
        .with_parameters(json!({
            "task_id": task.task_id,
            "context_id": task.context_id,
            "requests": listed,
        }));
        let ticket = SuspendTicket::new(
            suspension,
            PendingToolCall {
                id: ctx.call_id.clone(),
                name: self.descriptor.id.clone(),
                arguments: args,
            },
            ToolCallResumeMode::ReplayToolCall,
        )
        .with_remote(RemoteSuspension {
            agent_id: self.agent_id.clone(),
            task_id: task.task_id,
            context_id: task.context_id,
            call_ids: requests
                .into_iter()
                .filter_map(|request| request.call_id)
                .collect(),
        });
        let message = ticket.suspension.message.clone();
        ToolResult::suspended_with(self.descriptor.id.clone(), message, ticket)
    }
}

#[async_trait]
impl Tool for RemoteAgentTool {
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
        let config = ctx
            .agent_spec
            .config::<DelegationConfigKey>()
            .map_err(|e| ToolError::Internal(e.to_string()))?;
        let started = StartedTasks::of(ctx);
        // A task an earlier execution started and did not settle (its node
        // stopped) is followed, not started again.
        let act = match &started {
            Some(started) => match started.started().await {
                Some(task) => RemoteAct::Follow { task },
                None => Self::act(&args, ctx)?,
            },
            None => Self::act(&args, ctx)?,
        };
        let watch = TaskWatch {
            backend: Arc::clone(&self.backend),
            endpoint: self.endpoint.clone(),
            task: Mutex::new(None),
            started,
            activity: DelegateActivity::new(
                &ctx.call_id,
                ctx.activity_sink.clone().filter(|_| config.stream_events),
            ),
        };
        let task = match &act {
            RemoteAct::Answer { task, .. } | RemoteAct::Follow { task } => {
                watch.task_known(task).await;
                Some(task)
            }
            RemoteAct::Start { .. } => None,
        };
        watch
            .activity
            .open(json!({
                "agent_id": self.agent_id,
                "remote": self.endpoint.backend,
                "task_id": task.map(|t| t.task_id.as_str()),
                "context_id": task.map(|t| t.context_id.as_str()),
            }))
            .await;
        let call = RemoteCall {
            agent_id: &self.agent_id,
            endpoint: &self.endpoint,
            card: self.card.as_ref(),
            act,
            idempotency_key: format!(
                "{}:{}:{}",
                ctx.run_identity.run_id, ctx.call_id, ctx.attempt
            ),
            trace: ctx.trace,
            progress: &watch,
        };
        let limit = std::time::Duration::from_millis(self.endpoint.timeout_ms.max(1));
        let outcome = match tokio::time::timeout(limit, self.backend.execute(call)).await {
            Ok(Ok(outcome)) => {
                watch.settled().await;
                outcome
            }
            Ok(Err(error)) => {
                return Err(ToolError::ExecutionFailed(format!(
                    "remote agent `{}`: {error}",
                    self.agent_id
                )));
            }
            Err(_elapsed) => {
                let task = watch.abandon().await;
                let task = task.unwrap_or(RemoteTask {
                    task_id: format!("{}-unstarted", ctx.call_id),
                    context_id: format!("{}-unstarted", ctx.call_id),
                });
                return self
                    .finished(&task, DelegateRunStatus::Timeout, None)
                    .map(Into::into);
            }
        };
        let result = match outcome {
            RemoteOutcome::Finished {
                task,
                status,
                response,
            } => self.finished(&task, status, response)?,
            RemoteOutcome::InputRequired {
                task,
                message,
                requests,
            } => self.input_required(ctx, args, task, message, requests),
        };
        Ok(result.into())
    }

    async fn cancelled(&self, call: CancelledCall) {
        // A running execution cancels its task as it is dropped; a suspended call
        // names its waiting task in the ticket.
        let Some(remote) = call.ticket.and_then(|ticket| ticket.remote) else {
            return;
        };
        let task = RemoteTask {
            task_id: remote.task_id,
            context_id: remote.context_id,
        };
        if let Err(error) = self.backend.cancel(&self.endpoint, &task).await {
            tracing::warn!(agent = %self.agent_id, task = %task.task_id, %error, "cannot cancel the remote task of a cancelled call");
        }
    }
}

/// Follows one execution's remote task: reports its progress as the call's
/// activity and cancels the task if the execution ends without settling it (a
/// timeout, a cancelled call, a node giving the call up).
struct TaskWatch {
    backend: Arc<dyn RemoteBackend>,
    endpoint: RemoteEndpoint,
    /// The task while it may need cancelling.
    task: Mutex<Option<RemoteTask>>,
    /// Where the task is on record for a node taking the call over.
    started: Option<StartedTasks>,
    activity: DelegateActivity,
}

impl TaskWatch {
    fn take(&self) -> Option<RemoteTask> {
        self.task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }

    /// The task ended or waits (a waiting task is named by the call's ticket):
    /// nothing to cancel or follow.
    async fn settled(&self) {
        if self.take().is_some()
            && let Some(started) = &self.started
        {
            started.forget().await;
        }
    }

    /// Cancels the task now (a timeout) and hands it back.
    async fn abandon(&self) -> Option<RemoteTask> {
        let task = self.take()?;
        if let Err(error) = self.backend.cancel(&self.endpoint, &task).await {
            tracing::warn!(task = %task.task_id, %error, "cannot cancel a remote task that timed out");
        }
        if let Some(started) = &self.started {
            started.forget().await;
        }
        Some(task)
    }
}

#[async_trait]
impl RemoteProgress for TaskWatch {
    async fn task_known(&self, task: &RemoteTask) {
        *self
            .task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(task.clone());
        if let Some(started) = &self.started {
            started.record(task).await;
        }
    }

    async fn event(&self, event: JsonValue) {
        self.activity.append(event).await;
    }
}

impl Drop for TaskWatch {
    fn drop(&mut self) {
        let Some(task) = self.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (backend, endpoint) = (Arc::clone(&self.backend), self.endpoint.clone());
        let started = self.started.take();
        runtime.spawn(async move {
            if let Err(error) = backend.cancel(&endpoint, &task).await {
                tracing::warn!(task = %task.task_id, %error, "cannot cancel an abandoned remote task");
            }
            if let Some(started) = started {
                started.forget().await;
            }
        });
    }
}
