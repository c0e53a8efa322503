//! A task's stream: its run's events as A2A `StreamResponse`s — the task first,
//! status changes, the answer's text as chunks of the `response` artifact, and a
//! last status update when the run ends or waits for input.

use awaken_actors::contract::{AgentEvent, StreamEvent, TerminationReason};
use awaken_actors::store::ThreadSnapshot;
use serde_json::{Value as JsonValue, json};

use super::task::{RESPONSE_ARTIFACT, rfc3339, task_of};
use super::wire::{
    Artifact, Part, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};
use crate::runs::Encoder;

/// How each item is framed on the wire.
#[derive(Debug, Clone)]
pub(crate) enum Framing {
    /// The `StreamResponse` itself (HTTP+JSON).
    Plain,
    /// A JSON-RPC response to the request with this id.
    JsonRpc(JsonValue),
}

impl Framing {
    /// A stream item in this binding's envelope.
    pub(crate) fn frame(&self, item: &StreamResponse) -> JsonValue {
        self.result(serde_json::to_value(item).unwrap_or(JsonValue::Null))
    }

    /// A unary result in this binding's envelope.
    pub(crate) fn result(&self, result: JsonValue) -> JsonValue {
        match self {
            Self::Plain => result,
            Self::JsonRpc(id) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        }
    }
}

/// The translation of one task's run events.
pub(crate) struct TaskStream {
    framing: Framing,
    task_id: String,
    context_id: String,
    /// The task, sent before anything else.
    first: Option<Task>,
    state: TaskState,
    text_started: bool,
}

impl TaskStream {
    /// A stream that opens with `task`.
    pub(crate) fn new(task: Task, framing: Framing) -> Self {
        Self {
            framing,
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
            state: task.status.state,
            first: Some(task),
            text_started: false,
        }
    }

    /// A stream for push notifications: no opening task, only what changes from
    /// `state` on.
    pub(crate) fn watching(task_id: String, context_id: String, state: TaskState) -> Self {
        Self {
            framing: Framing::Plain,
            task_id,
            context_id,
            first: None,
            state,
            text_started: false,
        }
    }

    /// The items `event` becomes (without framing): what push notifications send
    /// too.
    pub(crate) fn items(
        &mut self,
        event: &StreamEvent,
        snapshot: Option<&ThreadSnapshot>,
    ) -> Vec<StreamResponse> {
        let mut items = Vec::new();
        if let Some(task) = self.first.take() {
            items.push(StreamResponse::Task(task));
        }
        match &event.event {
            AgentEvent::RunStart { .. } => self.status(TaskState::Working, None, &mut items),
            AgentEvent::TextDelta { delta } if !delta.is_empty() => {
                items.push(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                    task_id: self.task_id.clone(),
                    context_id: self.context_id.clone(),
                    artifact: Artifact {
                        artifact_id: RESPONSE_ARTIFACT.to_owned(),
                        name: Some(RESPONSE_ARTIFACT.to_owned()),
                        description: None,
                        parts: vec![Part::text(delta.clone())],
                        metadata: None,
                    },
                    append: self.text_started,
                    last_chunk: false,
                    metadata: None,
                }));
                self.text_started = true;
            }
            AgentEvent::RunFinish { termination, .. } => {
                let status = snapshot
                    .and_then(|snapshot| {
                        let record = snapshot.latest_run.as_ref()?;
                        (record.run_id.as_str() == self.task_id)
                            .then(|| task_of(record, &snapshot.messages, Some(0)).status)
                    })
                    .unwrap_or_else(|| TaskStatus {
                        state: match termination {
                            TerminationReason::Suspended => TaskState::InputRequired,
                            TerminationReason::Cancelled => TaskState::Canceled,
                            TerminationReason::Error(_) => TaskState::Failed,
                            TerminationReason::Blocked(_) => TaskState::Rejected,
                            _ => TaskState::Completed,
                        },
                        message: None,
                        timestamp: None,
                    });
                let (state, message) = (status.state, status.message);
                self.status(state, message, &mut items);
            }
            _ => {}
        }
        items
    }

    /// The opening task if it was not sent yet: what opens a stream, and what
    /// closes one whose events ended before it was sent.
    pub(crate) fn closing(&mut self) -> Vec<StreamResponse> {
        self.first
            .take()
            .map(StreamResponse::Task)
            .into_iter()
            .collect()
    }

    fn status(
        &mut self,
        state: TaskState,
        message: Option<super::wire::Message>,
        items: &mut Vec<StreamResponse>,
    ) {
        // A final status is always sent (it carries the answer); others only on
        // a change.
        if state == self.state && message.is_none() {
            return;
        }
        self.state = state;
        items.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: TaskStatus {
                state,
                message,
                timestamp: Some(rfc3339(now_secs())),
            },
            metadata: None,
        }));
    }
}

fn now_secs() -> u64 {
    awaken_actors::clock::now_ms() / 1000
}

impl Encoder for TaskStream {
    type Frame = JsonValue;

    fn encode(
        &mut self,
        event: &StreamEvent,
        snapshot: Option<&ThreadSnapshot>,
        out: &mut Vec<JsonValue>,
    ) {
        for item in self.items(event, snapshot) {
            out.push(self.framing.frame(&item));
        }
    }

    fn close(&mut self, out: &mut Vec<JsonValue>) {
        for item in self.closing() {
            out.push(self.framing.frame(&item));
        }
    }

    fn open(&mut self, out: &mut Vec<JsonValue>) {
        // The task in its current state comes first, before the run's next event.
        for item in self.closing() {
            out.push(self.framing.frame(&item));
        }
    }
}
