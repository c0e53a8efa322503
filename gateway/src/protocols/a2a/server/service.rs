//! The A2A operations, independent of the binding that carries them: tasks are
//! runs, contexts are threads, tenants are agents.

use awaken_actors::contract::RunDispatchStatus;
use awaken_actors::contract::{ContentBlock, Message as EngineMessage, RunOrigin, RunStatus};
use awaken_actors::store::RunQuery;
use awaken_actors::thread::RunRequest;
use awaken_actors::{AgentId, MessageId, RunId, ThreadId};

use super::A2aState;
use super::decisions::decisions_of;
use super::error::A2aError;
use super::task::{submitted_task, task_of};
use super::wire::{
    ListTasksResponse, Message, Part, Role, SendMessageRequest, Task, TaskState, TaskStatus,
};
use crate::runs::input::check_image;
use crate::runs::{RunEvents, RunLookup};
use crate::server::auth::Caller;
use crate::server::error::ApiError;

/// The most tasks one `ListTasks` page holds.
const MAX_PAGE_SIZE: usize = 100;
/// The page size when the client names none.
const DEFAULT_PAGE_SIZE: usize = 50;

/// Who a request is for: the tenant's agent, and the caller.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    /// The agent the tenant names (or the default agent).
    pub agent: AgentId,
    /// The tenant as the client named it.
    pub tenant: Option<String>,
    /// The API caller.
    pub caller: Caller,
}

impl Scope {
    /// The scope of `tenant` (an agent id; `None` is the default agent).
    pub(crate) fn of(
        state: &A2aState,
        caller: Caller,
        tenant: Option<&str>,
    ) -> Result<Self, A2aError> {
        let agent = match tenant {
            Some(tenant) => {
                let agent = AgentId::new(tenant)
                    .map_err(|e| A2aError::InvalidParams(format!("tenant: {e}")))?;
                let registries = state.runs.registries();
                match registries.agents.get(agent.as_str()) {
                    Some(spec) if !spec.is_remote() => agent,
                    _ => {
                        return Err(A2aError::AgentNotFound(format!(
                            "no agent is served as tenant `{tenant}`"
                        )));
                    }
                }
            }
            None => state.runs.default_agent().ok_or_else(|| {
                A2aError::AgentNotFound(
                    "this server has no default agent: address one as a tenant (/v1/a2a/{agent}/...)"
                        .to_owned(),
                )
            })?,
        };
        Ok(Self {
            agent,
            tenant: tenant.map(str::to_owned),
            caller,
        })
    }

    /// The scope, when its agent is served to its caller (`server.a2a_tenants`):
    /// what every operation but the public cards checks.
    pub(crate) fn served(self, state: &A2aState) -> Result<Self, A2aError> {
        if let Some(allowed) = state.config.a2a_tenants.get(self.agent.as_str())
            && !self
                .caller
                .tenant()
                .is_some_and(|tenant| allowed.iter().any(|name| name == tenant))
        {
            return Err(A2aError::PermissionDenied(format!(
                "agent `{}` is not served to this caller's tenant",
                self.agent
            )));
        }
        Ok(self)
    }
}

/// A message the server took: the task as it stands, and the events of what it
/// started or resumed.
pub(crate) struct Accepted {
    /// The task right after acceptance.
    pub task: Task,
    /// The run's events from the acceptance on.
    pub events: RunEvents,
}

/// Takes a message: a new task (run) in its context, or the answer to a task that
/// waits for input.
pub(crate) async fn accept(
    state: &A2aState,
    scope: &Scope,
    request: &SendMessageRequest,
) -> Result<Accepted, A2aError> {
    let message = &request.message;
    if message.role != Role::User {
        return Err(A2aError::InvalidParams(
            "a sent message must have role ROLE_USER".to_owned(),
        ));
    }
    if message.message_id.is_empty() {
        return Err(A2aError::InvalidParams(
            "the message needs a messageId".to_owned(),
        ));
    }
    let history = history_length(
        request
            .configuration
            .as_ref()
            .and_then(|c| c.history_length),
    )?;
    match &message.task_id {
        Some(task_id) => answer_task(state, scope, message, task_id, history).await,
        None => start_task(state, scope, message, history).await,
    }
}

async fn start_task(
    state: &A2aState,
    scope: &Scope,
    message: &Message,
    history: Option<usize>,
) -> Result<Accepted, A2aError> {
    let input = engine_message(message)?;
    let thread_id = match &message.context_id {
        Some(context) => Some(
            ThreadId::new(context.as_str())
                .map_err(|e| A2aError::InvalidParams(format!("contextId: {e}")))?,
        ),
        None => None,
    };
    // Another tenant's context is an unknown thread to this caller.
    let thread_id = state
        .runs
        .open_thread(&scope.caller, thread_id, Some(&scope.agent))
        .await?;
    let run_id = RunId::generate();
    let request = RunRequest::new(thread_id.clone(), vec![input])
        .with_agent_id(scope.agent.clone())
        .with_run_id(run_id.clone())
        .with_origin(RunOrigin::A2a);
    let task = submitted_task(&run_id, &request, history);
    let events = state.runs.submit_followed(request, &run_id).await?;
    Ok(Accepted { task, events })
}

async fn answer_task(
    state: &A2aState,
    scope: &Scope,
    message: &Message,
    task_id: &str,
    history: Option<usize>,
) -> Result<Accepted, A2aError> {
    let (record, log) = match load_task(state, scope, task_id).await? {
        Loaded::Started { record, log } => (record, log),
        Loaded::Queued(..) => {
            return Err(A2aError::UnsupportedOperation(format!(
                "task `{task_id}` has not started (or was cancelled before it could); it takes no input"
            )));
        }
    };
    if let Some(context) = &message.context_id
        && context != record.thread_id.as_str()
    {
        return Err(A2aError::InvalidParams(format!(
            "task `{task_id}` belongs to context `{}`, not `{context}`",
            record.thread_id
        )));
    }
    let mut task = task_of(&record, &log, history);
    match task.status.state {
        TaskState::InputRequired => {}
        state if state.is_terminal() => {
            return Err(A2aError::UnsupportedOperation(format!(
                "task `{task_id}` is in terminal state {state:?}; send a new message without taskId (same contextId) to continue the conversation"
            )));
        }
        _ => {
            return Err(A2aError::UnsupportedOperation(format!(
                "task `{task_id}` is working and does not wait for input"
            )));
        }
    }
    let decisions = decisions_of(message, &record)?;
    let events = state.runs.resume_followed(&record, decisions).await?;
    // The input is taken: the task works again, whatever its record said a
    // moment ago.
    task.status = TaskStatus {
        state: TaskState::Working,
        message: None,
        timestamp: task.status.timestamp,
    };
    Ok(Accepted { task, events })
}

/// What a task id names.
enum Loaded {
    /// A run with a record, and its thread's log.
    Started {
        record: Box<awaken_actors::contract::RunRecord>,
        log: Vec<EngineMessage>,
    },
    /// A run accepted and not started: submitted, or taken out of the mailbox
    /// (cancelled, superseded, dead-lettered) before it could start.
    Queued(Box<RunRequest>, TaskState),
}

/// The task `task_id` of `scope`: `TaskNotFound` for unknown ids, other tenants'
/// agents and other callers' threads alike.
async fn load_task(state: &A2aState, scope: &Scope, task_id: &str) -> Result<Loaded, A2aError> {
    let not_found = || A2aError::TaskNotFound(task_id.to_owned());
    let run_id = RunId::new(task_id).map_err(|_| not_found())?;
    match state.runs.lookup_run(&run_id).await? {
        Some(RunLookup::Recorded(record)) => {
            if record.agent_id != scope.agent {
                return Err(not_found());
            }
            state
                .runs
                .check_thread(&scope.caller, &record.thread_id)
                .await
                .map_err(|_| not_found())?;
            let log = state
                .runs
                .thread_snapshot(&record.thread_id)
                .await?
                .map(|snapshot| snapshot.messages)
                .unwrap_or_default();
            Ok(Loaded::Started { record, log })
        }
        Some(RunLookup::Queued(request)) if request.agent_id.as_ref() == Some(&scope.agent) => {
            state
                .runs
                .check_thread(&scope.caller, &request.thread_id)
                .await
                .map_err(|_| not_found())?;
            let state = queued_state(state, &request.thread_id, &run_id).await?;
            Ok(Loaded::Queued(request, state))
        }
        _ => Err(not_found()),
    }
}

/// The state of a run that has no record, from its dispatch.
async fn queued_state(
    state: &A2aState,
    thread_id: &ThreadId,
    run_id: &RunId,
) -> Result<TaskState, A2aError> {
    let page = state.runs.thread_dispatches(thread_id).await?;
    let status = page
        .dispatches
        .iter()
        .rev()
        .find(|dispatch| dispatch.run_id == *run_id)
        .map(|dispatch| dispatch.status);
    Ok(match status {
        Some(RunDispatchStatus::Cancelled | RunDispatchStatus::Superseded) => TaskState::Canceled,
        Some(RunDispatchStatus::DeadLetter) => TaskState::Failed,
        _ => TaskState::Submitted,
    })
}

/// `GetTask`.
pub(crate) async fn get_task(
    state: &A2aState,
    scope: &Scope,
    task_id: &str,
    history_length: Option<i32>,
) -> Result<Task, A2aError> {
    let history = self::history_length(history_length)?;
    Ok(match load_task(state, scope, task_id).await? {
        Loaded::Started { record, log } => task_of(&record, &log, history),
        Loaded::Queued(request, queued) => {
            let run_id = RunId::new(task_id).map_err(|e| A2aError::Internal(e.to_string()))?;
            let mut task = submitted_task(&run_id, &request, history);
            task.status.state = queued;
            task
        }
    })
}

/// `ListTasks` filters and paging (query parameters, or JSON-RPC params).
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskFilter {
    pub context_id: Option<String>,
    pub status: Option<TaskState>,
    pub page_size: Option<i32>,
    pub page_token: Option<String>,
    pub history_length: Option<i32>,
}

/// `ListTasks`: the tenant agent's runs the caller may see, in creation order,
/// paged with an opaque offset token.
pub(crate) async fn list_tasks(
    state: &A2aState,
    scope: &Scope,
    filter: TaskFilter,
) -> Result<ListTasksResponse, A2aError> {
    let page_size = match filter.page_size {
        None | Some(0) => DEFAULT_PAGE_SIZE,
        Some(size) if size < 0 => {
            return Err(A2aError::InvalidParams(
                "pageSize must not be negative".into(),
            ));
        }
        Some(size) => usize::try_from(size)
            .unwrap_or(MAX_PAGE_SIZE)
            .min(MAX_PAGE_SIZE),
    };
    let offset = match filter.page_token.as_deref() {
        None | Some("") => 0,
        Some(token) => token.parse::<usize>().map_err(|_| {
            A2aError::InvalidParams(format!("pageToken `{token}` is not one this server issued"))
        })?,
    };
    let history = history_length(filter.history_length)?.or(Some(0));
    let thread_id = match &filter.context_id {
        Some(context) if !context.is_empty() => Some(
            ThreadId::new(context.as_str())
                .map_err(|e| A2aError::InvalidParams(format!("contextId: {e}")))?,
        ),
        _ => None,
    };
    if let Some(thread_id) = &thread_id
        && state
            .runs
            .check_thread(&scope.caller, thread_id)
            .await
            .is_err()
    {
        return Ok(ListTasksResponse {
            tasks: Vec::new(),
            next_page_token: String::new(),
            page_size: 0,
            total_size: 0,
        });
    }
    let status = match filter.status {
        None | Some(TaskState::Unspecified) => None,
        Some(TaskState::Working) => Some(RunStatus::Running),
        Some(TaskState::InputRequired) => Some(RunStatus::Waiting),
        Some(state) if state.is_terminal() => Some(RunStatus::Done),
        Some(_) => {
            return Ok(ListTasksResponse {
                tasks: Vec::new(),
                next_page_token: String::new(),
                page_size: 0,
                total_size: 0,
            });
        }
    };
    let query = RunQuery {
        thread_id,
        status,
        agent_id: Some(scope.agent.clone()),
        offset,
        limit: page_size,
    };
    let page = state.runs.list_runs(&query).await?;
    let mut tasks = Vec::with_capacity(page.runs.len());
    for record in &page.runs {
        let Some(snapshot) = state.runs.thread_snapshot(&record.thread_id).await? else {
            continue;
        };
        if scope.caller.authorize(&snapshot.thread).is_err() {
            continue;
        }
        let task = task_of(record, &snapshot.messages, history);
        if filter
            .status
            .is_none_or(|wanted| wanted == TaskState::Unspecified || wanted == task.status.state)
        {
            tasks.push(task);
        }
    }
    let next = offset + page.runs.len();
    Ok(ListTasksResponse {
        page_size: i32::try_from(tasks.len()).unwrap_or(i32::MAX),
        tasks,
        next_page_token: if next < page.total {
            next.to_string()
        } else {
            String::new()
        },
        total_size: i32::try_from(page.total).unwrap_or(i32::MAX),
    })
}

/// `CancelTask`: the task as it stands after the cancellation took effect.
pub(crate) async fn cancel_task(
    state: &A2aState,
    scope: &Scope,
    task_id: &str,
) -> Result<Task, A2aError> {
    let run_id = RunId::new(task_id).map_err(|e| A2aError::Internal(e.to_string()))?;
    let thread_id = match load_task(state, scope, task_id).await? {
        Loaded::Started { record, log } => {
            let task = task_of(&record, &log, Some(0));
            if task.status.state.is_terminal() {
                return Err(A2aError::TaskNotCancelable(format!(
                    "task `{task_id}` already ended ({:?})",
                    task.status.state
                )));
            }
            record.thread_id
        }
        Loaded::Queued(_, queued) if queued.is_terminal() => {
            return Err(A2aError::TaskNotCancelable(format!(
                "task `{task_id}` already ended ({queued:?})"
            )));
        }
        Loaded::Queued(request, _) => {
            // Not started: taking it out of the mailbox is the whole cancellation,
            // and the run never gets a record.
            let thread_id = request.thread_id.clone();
            cancel_run(state, &thread_id, &run_id).await?;
            let mut task = submitted_task(&run_id, &request, Some(0));
            task.status.state = TaskState::Canceled;
            return Ok(task);
        }
    };
    let mut follow = state
        .runs
        .follow(&thread_id, &run_id, None)
        .await?
        .skip_backlog();
    cancel_run(state, &thread_id, &run_id).await?;
    // The cancellation ends the run's activation (a waiting run is taken up to
    // end it), unless it ended before the follow began: the record says which.
    let task = get_task(state, scope, task_id, Some(0)).await?;
    if task.status.state.is_terminal() {
        return Ok(task);
    }
    while follow.next().await.is_some() {}
    get_task(state, scope, task_id, Some(0)).await
}

async fn cancel_run(
    state: &A2aState,
    thread_id: &ThreadId,
    run_id: &RunId,
) -> Result<(), A2aError> {
    state
        .runs
        .cancel(thread_id, Some(run_id))
        .await
        .map(drop)
        .map_err(|error| match error {
            ApiError::Conflict(message) => A2aError::TaskNotCancelable(message),
            other => other.into(),
        })
}

/// The engine's user message for an A2A message.
fn engine_message(message: &Message) -> Result<EngineMessage, A2aError> {
    let mut blocks = Vec::with_capacity(message.parts.len());
    for part in &message.parts {
        blocks.push(content_block(part)?);
    }
    let mut input = EngineMessage::user(String::new());
    input.content = blocks;
    if input.content.iter().all(|block| match block {
        ContentBlock::Text { text } => text.trim().is_empty(),
        _ => false,
    }) {
        return Err(A2aError::InvalidParams(
            "the message has no content".to_owned(),
        ));
    }
    if let Ok(id) = MessageId::new(message.message_id.as_str()) {
        input.id = id;
    }
    Ok(input)
}

fn content_block(part: &Part) -> Result<ContentBlock, A2aError> {
    let set = [
        part.text.is_some(),
        part.raw.is_some(),
        part.url.is_some(),
        part.data.is_some(),
    ]
    .into_iter()
    .filter(|set| *set)
    .count();
    if set != 1 {
        return Err(A2aError::InvalidParams(
            "each part holds exactly one of text, raw, url, data".to_owned(),
        ));
    }
    let image = part
        .media_type
        .as_deref()
        .is_some_and(|media| media.starts_with("image/"));
    if image {
        let (url, raw) = match part {
            Part { url: Some(url), .. } => (Some(url.as_str()), None),
            Part { raw: Some(raw), .. } => (None, Some(raw.as_str())),
            _ => (None, None),
        };
        if url.is_some() || raw.is_some() {
            check_image(url, raw, part.media_type.as_deref()).map_err(A2aError::InvalidParams)?;
        }
    }
    Ok(match part {
        Part {
            text: Some(text), ..
        } => ContentBlock::text(text.clone()),
        Part {
            data: Some(data), ..
        } => ContentBlock::text(data.to_string()),
        Part { url: Some(url), .. } if image => ContentBlock::Image {
            url: Some(url.clone()),
            data: None,
            media_type: part.media_type.clone(),
        },
        Part { raw: Some(raw), .. } if image => ContentBlock::Image {
            url: None,
            data: Some(raw.clone()),
            media_type: part.media_type.clone(),
        },
        _ => {
            return Err(A2aError::ContentTypeNotSupported(format!(
                "files of type `{}` are not accepted; send text, data or images",
                part.media_type.as_deref().unwrap_or("unknown")
            )));
        }
    })
}

fn history_length(length: Option<i32>) -> Result<Option<usize>, A2aError> {
    match length {
        None => Ok(None),
        Some(length) => usize::try_from(length)
            .map(Some)
            .map_err(|_| A2aError::InvalidParams("historyLength must not be negative".into())),
    }
}
