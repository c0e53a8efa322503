//! What the client knows of one remote task, built from stream items or polled
//! reads, and the outcome it amounts to once the task ends or waits.

use awaken_actors::contract::DelegateRunStatus;
use awaken_actors::delegation::{RemoteOutcome, RemoteRequest, RemoteTask};
use serde_json::Value as JsonValue;

use crate::protocols::a2a::wire::{Message, Part, StreamResponse, Task, TaskState};

/// One remote task as seen so far.
#[derive(Debug, Default)]
pub(super) struct TaskView {
    task: Option<Task>,
    /// An answer given as a message instead of a task.
    reply: Option<Message>,
    /// Call ids answered by this execution: a read still showing them open is
    /// older than the answer.
    answered: Vec<String>,
}

impl TaskView {
    /// A view that ignores input requests for exactly `answered` (non-empty).
    pub(super) fn answering(answered: Vec<String>) -> Self {
        Self {
            answered,
            ..Self::default()
        }
    }

    /// The task's ids, once known.
    pub(super) fn task(&self) -> Option<RemoteTask> {
        self.task.as_ref().map(|task| RemoteTask {
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
        })
    }

    /// The task's state, once known.
    pub(super) fn state(&self) -> Option<TaskState> {
        self.task.as_ref().map(|task| task.status.state)
    }

    /// Takes in a stream item.
    pub(super) fn apply(&mut self, item: StreamResponse) {
        match item {
            StreamResponse::Task(task) => self.task = Some(task),
            StreamResponse::Message(message) => self.reply = Some(message),
            StreamResponse::StatusUpdate(update) => {
                if let Some(task) = &mut self.task {
                    task.status = update.status;
                }
            }
            StreamResponse::ArtifactUpdate(update) => {
                let Some(task) = &mut self.task else {
                    return;
                };
                let artifact = update.artifact;
                match task
                    .artifacts
                    .iter_mut()
                    .find(|known| known.artifact_id == artifact.artifact_id)
                {
                    Some(known) if update.append => known.parts.extend(artifact.parts),
                    Some(known) => *known = artifact,
                    None => task.artifacts.push(artifact),
                }
            }
        }
    }

    /// Where the task stands: `None` while it works.
    pub(super) fn outcome(&self) -> Option<RemoteOutcome> {
        if let Some(reply) = &self.reply {
            let id = reply
                .task_id
                .clone()
                .unwrap_or_else(|| reply.message_id.clone());
            return Some(RemoteOutcome::Finished {
                task: RemoteTask {
                    context_id: reply.context_id.clone().unwrap_or_else(|| id.clone()),
                    task_id: id,
                },
                status: DelegateRunStatus::Completed,
                response: Some(joined(&reply.parts, "")),
            });
        }
        let task = self.task.as_ref()?;
        let ids = RemoteTask {
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
        };
        let said = task
            .status
            .message
            .as_ref()
            .map(|message| joined(&message.parts, "\n"))
            .filter(|text| !text.is_empty());
        let failed = |fallback: &str| {
            DelegateRunStatus::Failed(said.clone().unwrap_or_else(|| fallback.to_owned()))
        };
        let status = match task.status.state {
            TaskState::Completed => DelegateRunStatus::Completed,
            TaskState::Failed => failed("the remote task failed"),
            TaskState::Rejected => failed("the remote agent rejected the task"),
            TaskState::Canceled => DelegateRunStatus::Cancelled,
            TaskState::AuthRequired => {
                failed("the remote agent asks for authentication this client cannot give")
            }
            TaskState::InputRequired => {
                let requests = requests_of(task);
                let stale = !self.answered.is_empty()
                    && requests.len() == self.answered.len()
                    && requests.iter().all(|request| {
                        request
                            .call_id
                            .as_ref()
                            .is_some_and(|id| self.answered.contains(id))
                    });
                if stale {
                    return None;
                }
                return Some(RemoteOutcome::InputRequired {
                    task: ids,
                    message: said.unwrap_or_else(|| "the remote agent needs input".to_owned()),
                    requests,
                });
            }
            TaskState::Submitted | TaskState::Working | TaskState::Unspecified => return None,
        };
        let response = task
            .artifacts
            .iter()
            .map(|artifact| joined(&artifact.parts, ""))
            .filter(|text| !text.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        let response = if response.is_empty() {
            said
        } else {
            Some(response)
        };
        Some(RemoteOutcome::Finished {
            task: ids,
            status,
            response: response.filter(|_| task.status.state == TaskState::Completed),
        })
    }
}

/// The text parts of `parts`, joined by `separator`.
fn joined(parts: &[Part], separator: &str) -> String {
    parts
        .iter()
        .filter_map(|part| part.text.as_deref())
        .collect::<Vec<_>>()
        .join(separator)
}

/// The open requests a waiting task lists as data: `{"pending": [{"toolCallId",
/// "toolName", "arguments", "action", "message"}]}` (what an Awaken server sends).
fn requests_of(task: &Task) -> Vec<RemoteRequest> {
    let Some(message) = &task.status.message else {
        return Vec::new();
    };
    let text = |value: &JsonValue, key: &str| value[key].as_str().map(str::to_owned);
    message
        .parts
        .iter()
        .filter_map(|part| part.data.as_ref()?.get("pending")?.as_array())
        .flatten()
        .map(|pending| RemoteRequest {
            call_id: text(pending, "toolCallId"),
            tool_name: text(pending, "toolName"),
            action: text(pending, "action"),
            message: text(pending, "message").unwrap_or_default(),
            arguments: pending["arguments"].clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn item(value: JsonValue) -> StreamResponse {
        match serde_json::from_value(value) {
            Ok(item) => item,
            Err(error) => panic!("not a stream item: {error}"),
        }
    }

    fn working() -> StreamResponse {
        item(json!({"task": {"id": "t1", "contextId": "c1",
            "status": {"state": "TASK_STATE_WORKING"}}}))
    }

    fn status(state: &str, parts: JsonValue) -> StreamResponse {
        item(json!({"statusUpdate": {"taskId": "t1", "contextId": "c1",
            "status": {"state": state, "message": {"messageId": "m", "role": "ROLE_AGENT",
            "parts": parts}}}}))
    }

    #[test]
    fn a_completed_task_answers_with_its_streamed_artifact() {
        let mut view = TaskView::default();
        view.apply(working());
        assert_eq!(view.outcome(), None);
        for (text, append) in [("Hel", false), ("lo", true)] {
            view.apply(item(
                json!({"artifactUpdate": {"taskId": "t1", "contextId": "c1",
                "append": append, "artifact": {"artifactId": "response",
                "parts": [{"text": text}]}}}),
            ));
        }
        view.apply(status("TASK_STATE_COMPLETED", json!([{"text": "done"}])));
        let Some(RemoteOutcome::Finished {
            task,
            status,
            response,
        }) = view.outcome()
        else {
            panic!("a completed task is finished");
        };
        assert_eq!(task.task_id, "t1");
        assert_eq!(status, DelegateRunStatus::Completed);
        assert_eq!(response.as_deref(), Some("Hello"));
    }

    #[test]
    fn a_failed_task_says_why_and_a_cancelled_one_is_cancelled() {
        let mut view = TaskView::default();
        view.apply(working());
        view.apply(status("TASK_STATE_FAILED", json!([{"text": "model down"}])));
        assert!(matches!(view.outcome(), Some(RemoteOutcome::Finished {
            status: DelegateRunStatus::Failed(reason), response: None, ..
        }) if reason == "model down"));
        view.apply(status("TASK_STATE_CANCELED", json!([])));
        assert!(matches!(
            view.outcome(),
            Some(RemoteOutcome::Finished {
                status: DelegateRunStatus::Cancelled,
                ..
            })
        ));
    }

    #[test]
    fn an_input_request_lists_the_pending_calls_and_a_stale_one_is_ignored() {
        let asking = status(
            "TASK_STATE_INPUT_REQUIRED",
            json!([{"text": "Delete notes.txt?"}, {"data": {"pending": [{
                "toolCallId": "call_1", "toolName": "delete_file",
                "arguments": {"path": "notes.txt"}, "action": "tool:delete_file",
                "message": "Delete notes.txt?"}]}}]),
        );
        let mut view = TaskView::default();
        view.apply(working());
        view.apply(asking.clone());
        let Some(RemoteOutcome::InputRequired { requests, .. }) = view.outcome() else {
            panic!("an input request is an outcome");
        };
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].call_id.as_deref(), Some("call_1"));
        assert_eq!(requests[0].arguments, json!({"path": "notes.txt"}));

        let mut answered = TaskView::answering(vec!["call_1".to_owned()]);
        answered.apply(working());
        answered.apply(asking);
        assert_eq!(answered.outcome(), None, "the request just answered");
    }

    #[test]
    fn a_message_reply_is_a_completed_answer() {
        let mut view = TaskView::default();
        view.apply(item(
            json!({"message": {"messageId": "m1", "role": "ROLE_AGENT",
            "parts": [{"text": "42"}]}}),
        ));
        assert!(matches!(view.outcome(), Some(RemoteOutcome::Finished {
            status: DelegateRunStatus::Completed, response: Some(text), ..
        }) if text == "42"));
    }
}
