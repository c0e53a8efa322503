//! Runs as A2A tasks: a task is one run (`id` = run id) on a thread (`contextId`
//! = thread id); its state, status message, artifact and history come from the run
//! record and the thread's log.

use std::time::{Duration, UNIX_EPOCH};

use awaken_actors::RunId;
use awaken_actors::contract::{
    ContentBlock, Message as EngineMessage, Role as EngineRole, RunRecord, RunStatus,
    TerminationReason, Visibility,
};
use awaken_actors::thread::RunRequest;
use serde_json::json;

use super::wire::{Artifact, Message, Part, Role, Task, TaskState, TaskStatus};

/// The id of the artifact holding a task's answer.
pub(crate) const RESPONSE_ARTIFACT: &str = "response";

/// The A2A state of a run.
pub(crate) fn task_state(record: &RunRecord) -> TaskState {
    match record.status {
        RunStatus::Running => TaskState::Working,
        RunStatus::Waiting => TaskState::InputRequired,
        RunStatus::Done => match &record.termination {
            Some(TerminationReason::Cancelled) => TaskState::Canceled,
            Some(TerminationReason::Error(_)) => TaskState::Failed,
            Some(TerminationReason::Blocked(_)) => TaskState::Rejected,
            _ => TaskState::Completed,
        },
    }
}

/// A run's messages in the thread's log, as users see them.
fn run_messages<'a>(
    record: &'a RunRecord,
    log: &'a [EngineMessage],
) -> impl Iterator<Item = &'a EngineMessage> + 'a {
    log.iter().filter(move |message| {
        message.visibility == Visibility::All
            && message.run_id.as_ref() == Some(&record.run_id)
            && matches!(message.role, EngineRole::User | EngineRole::Assistant)
    })
}

/// The task of a run that has a record; `history_length` caps the history (`None`:
/// all of it).
pub(crate) fn task_of(
    record: &RunRecord,
    log: &[EngineMessage],
    history_length: Option<usize>,
) -> Task {
    let state = task_state(record);
    let (task_id, context_id) = (record.run_id.to_string(), record.thread_id.to_string());
    let answer = run_messages(record, log)
        .filter(|message| message.role == EngineRole::Assistant)
        .map(EngineMessage::text)
        .filter(|text| !text.is_empty())
        .last();
    let status_parts = match state {
        TaskState::Completed => answer.clone().map(|text| vec![Part::text(text)]),
        TaskState::InputRequired => Some(input_required_parts(record, log)),
        TaskState::Failed | TaskState::Rejected => match &record.termination {
            Some(TerminationReason::Error(reason) | TerminationReason::Blocked(reason)) => {
                Some(vec![Part::text(reason.clone())])
            }
            _ => None,
        },
        _ => None,
    };
    let status = TaskStatus {
        state,
        message: status_parts.map(|parts| Message {
            message_id: format!("{task_id}-status"),
            context_id: Some(context_id.clone()),
            task_id: Some(task_id.clone()),
            role: Role::Agent,
            parts,
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        }),
        timestamp: Some(rfc3339(record.updated_at)),
    };
    let artifacts = match (state, answer) {
        (TaskState::Completed, Some(text)) => vec![Artifact {
            artifact_id: RESPONSE_ARTIFACT.to_owned(),
            name: Some(RESPONSE_ARTIFACT.to_owned()),
            description: None,
            parts: vec![Part::text(text)],
            metadata: None,
        }],
        _ => Vec::new(),
    };
    let history = history_of(
        run_messages(record, log),
        &task_id,
        &context_id,
        history_length,
    );
    Task {
        id: task_id,
        context_id,
        status,
        artifacts,
        history,
        metadata: Some(json!({"agentId": record.agent_id})),
    }
}

/// The task of a run that was accepted and has not started.
pub(crate) fn submitted_task(
    run_id: &RunId,
    request: &RunRequest,
    history_length: Option<usize>,
) -> Task {
    let (task_id, context_id) = (run_id.to_string(), request.thread_id.to_string());
    let history = history_of(
        request.messages.iter(),
        &task_id,
        &context_id,
        history_length,
    );
    Task {
        id: task_id,
        context_id,
        status: TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: None,
        },
        artifacts: Vec::new(),
        history,
        metadata: request
            .agent_id
            .as_ref()
            .map(|agent| json!({"agentId": agent})),
    }
}

/// What a waiting run asks for: a sentence per open ticket, and the tickets as data
/// a client (or a delegating agent) can answer with `decisions`.
fn input_required_parts(record: &RunRecord, log: &[EngineMessage]) -> Vec<Part> {
    let tickets = record
        .waiting
        .iter()
        .flat_map(|waiting| waiting.tickets.iter());
    let mut lines = Vec::new();
    let mut pending = Vec::new();
    for ticket in tickets {
        let arguments = log
            .iter()
            .flat_map(|message| message.tool_calls.iter())
            .find(|call| call.id == ticket.tool_call_id)
            .map(|call| call.arguments.clone())
            .unwrap_or_default();
        lines.push(if ticket.message.is_empty() {
            format!("`{}` needs approval", ticket.tool_name)
        } else {
            ticket.message.clone()
        });
        pending.push(json!({
            "toolCallId": ticket.tool_call_id,
            "toolName": ticket.tool_name,
            "arguments": arguments,
            "action": ticket.action,
            "message": ticket.message,
        }));
    }
    lines.push(
        "Reply \"approve\" or \"deny\", or send {\"decisions\": [{\"toolCallId\", \"approved\"}]} as data."
            .to_owned(),
    );
    vec![
        Part::text(lines.join("\n")),
        Part::data(json!({ "pending": pending })),
    ]
}

/// The last `limit` (`None`: all) of `messages` as the history of `task_id`. A
/// message with nothing to show (a step that only called tools) is left out: an
/// A2A message has at least one part.
fn history_of<'a>(
    messages: impl Iterator<Item = &'a EngineMessage>,
    task_id: &str,
    context_id: &str,
    limit: Option<usize>,
) -> Vec<Message> {
    let mut history: Vec<Message> = messages
        .map(|message| a2a_message(message, task_id, context_id))
        .filter(|message| !message.parts.is_empty())
        .collect();
    if let Some(limit) = limit {
        history.drain(..history.len().saturating_sub(limit));
    }
    history
}

/// An engine message as an A2A message of `task_id`.
fn a2a_message(message: &EngineMessage, task_id: &str, context_id: &str) -> Message {
    let parts = message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } if !text.is_empty() => Some(Part::text(text.clone())),
            ContentBlock::Image {
                url,
                data,
                media_type,
                ..
            } if url.is_some() || data.is_some() => Some(Part {
                url: url.clone(),
                raw: data.clone(),
                media_type: media_type.clone(),
                ..Part::default()
            }),
            _ => None,
        })
        .collect();
    Message {
        message_id: message.id.to_string(),
        context_id: Some(context_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        role: match message.role {
            EngineRole::User => Role::User,
            _ => Role::Agent,
        },
        parts,
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    }
}

/// Unix seconds as RFC 3339.
pub(crate) fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::{RunIdentity, RunOrigin, ToolCall};
    use awaken_actors::{AgentId, ThreadId, ToolCallId};

    use super::*;

    #[test]
    fn history_leaves_out_messages_with_nothing_to_show() {
        let run = RunId::new("r1").unwrap();
        let mut record = RunRecord::new(
            &RunIdentity::new(
                ThreadId::new("t1").unwrap(),
                run.clone(),
                AgentId::new("a1").unwrap(),
                RunOrigin::A2a,
            ),
            1,
        );
        record.finish(TerminationReason::NaturalEnd, 2).unwrap();
        let call = ToolCallId::new("c1").unwrap();
        let log = [
            EngineMessage::user("tidy").with_run_id(run.clone()),
            EngineMessage::assistant_with_tool_calls(
                "",
                vec![ToolCall::new(call.clone(), "rm", json!({}))],
            )
            .with_run_id(run.clone()),
            EngineMessage::tool_result(call, "{}").with_run_id(run.clone()),
            EngineMessage::assistant("done").with_run_id(run),
        ];
        let task = task_of(&record, &log, None);
        let texts: Vec<_> = task
            .history
            .iter()
            .map(|message| message.parts[0].text.clone().unwrap())
            .collect();
        assert_eq!(texts, ["tidy", "done"]);
        assert_eq!(task_of(&record, &log, Some(1)).history.len(), 1);
    }
}
