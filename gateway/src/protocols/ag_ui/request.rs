//! `RunAgentInput`: what an AG-UI client (`HttpAgent`) POSTs. A run either
//! answers the open interrupts of the thread's waiting run (`resume[]`) or starts
//! with the last message, which must be the user's.

use awaken_actors::contract::{ContentBlock, Message, ResumeDecisionAction, RunRecord};
use awaken_actors::{AgentId, JsonValue, RunId, ThreadId};
use awaken_cluster::decisions::DecisionPayload;
use serde::Deserialize;
use serde_json::json;

use crate::runs::input::{check_image, user_input};
use crate::server::error::ApiError;

/// The request body. Unknown fields are allowed, as the protocol's schema does;
/// `state`, `tools`, `context` and `forwardedProps` are accepted and not used.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunAgentInput {
    #[serde(default, alias = "thread_id")]
    thread_id: Option<String>,
    #[serde(default, alias = "run_id")]
    run_id: Option<String>,
    #[serde(default)]
    parent_run_id: Option<String>,
    /// The agent (the book's extension); the thread's previous one, then the
    /// default agent, when absent.
    #[serde(default, alias = "agent_id")]
    pub agent_id: Option<AgentId>,
    messages: Vec<AgUiMessage>,
    #[serde(default)]
    resume: Vec<ResumeEntry>,
}

#[derive(Debug, Deserialize)]
struct AgUiMessage {
    #[serde(default)]
    id: Option<String>,
    role: String,
    #[serde(default)]
    content: JsonValue,
}

/// An answer to one interrupt.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeEntry {
    interrupt_id: String,
    status: ResumeStatus,
    #[serde(default)]
    payload: Option<JsonValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// What a run request asks for.
#[derive(Debug)]
pub(crate) enum AgUiInput {
    /// A new user message: a new run.
    Message(Message),
    /// Answers to the waiting run's interrupts.
    Resume,
}

impl RunAgentInput {
    /// The thread named (`None`: a new one); 400 when it cannot be an id.
    pub(crate) fn thread_id(&self) -> Result<Option<ThreadId>, ApiError> {
        self.thread_id
            .clone()
            .map(ThreadId::new)
            .transpose()
            .map_err(|error| ApiError::BadRequest(format!("threadId: {error}")))
    }

    /// The client's run id, used for the new run when it gives one.
    pub(crate) fn run_id(&self) -> Result<Option<RunId>, ApiError> {
        self.run_id
            .clone()
            .map(RunId::new)
            .transpose()
            .map_err(|error| ApiError::BadRequest(format!("runId: {error}")))
    }

    /// The client's parent run id, echoed in `RUN_STARTED`.
    pub(crate) fn parent_run_id(&self) -> Option<&str> {
        self.parent_run_id.as_deref()
    }

    /// What the request asks for.
    pub(crate) fn input(&self) -> Result<AgUiInput, ApiError> {
        if !self.resume.is_empty() {
            return Ok(AgUiInput::Resume);
        }
        let Some(last) = self.messages.last() else {
            return Err(ApiError::BadRequest(
                "`messages` must hold at least one message (or `resume` answers)".into(),
            ));
        };
        if last.role != "user" {
            return Err(ApiError::BadRequest(format!(
                "the last message must be the user's (or send `resume`), not `{}`",
                last.role
            )));
        }
        user_message(last).map(AgUiInput::Message)
    }

    /// The decisions `resume[]` makes for the waiting `run`: each entry must
    /// answer one of its open interrupts (409 otherwise).
    pub(crate) fn decisions(&self, run: &RunRecord) -> Result<Vec<DecisionPayload>, ApiError> {
        let tickets: Vec<_> = run
            .waiting
            .iter()
            .flat_map(|waiting| waiting.tickets.iter())
            .collect();
        self.resume
            .iter()
            .map(|entry| {
                let ticket = tickets
                    .iter()
                    .find(|ticket| ticket.ticket_id == entry.interrupt_id)
                    .ok_or_else(|| {
                        ApiError::Conflict(format!(
                            "interrupt `{}` is not open on run `{}`",
                            entry.interrupt_id, run.run_id
                        ))
                    })?;
                let mut decision = DecisionPayload::resume(
                    ticket.tool_call_id.to_string(),
                    format!("ag-ui:{}", entry.interrupt_id),
                    entry.payload.clone().unwrap_or(json!({"approved": true})),
                );
                if entry.status == ResumeStatus::Cancelled {
                    decision.action = ResumeDecisionAction::Cancel;
                }
                Ok(decision)
            })
            .collect()
    }
}

/// A user message: string content, or text (and image URL) content parts.
fn user_message(message: &AgUiMessage) -> Result<Message, ApiError> {
    let mut blocks = Vec::new();
    match &message.content {
        JsonValue::String(text) => blocks.push(ContentBlock::text(text.clone())),
        JsonValue::Array(parts) => {
            for part in parts {
                match part.get("type").and_then(JsonValue::as_str) {
                    Some("text") => {
                        let text =
                            part.get("text")
                                .and_then(JsonValue::as_str)
                                .ok_or_else(|| {
                                    ApiError::BadRequest("a text part has no `text` string".into())
                                })?;
                        blocks.push(ContentBlock::text(text));
                    }
                    Some("image") => {
                        let url = part
                            .get("source")
                            .and_then(|source| source.get("value"))
                            .or_else(|| part.get("url"))
                            .and_then(JsonValue::as_str)
                            .ok_or_else(|| {
                                ApiError::BadRequest("an image part has no URL".into())
                            })?;
                        check_image(Some(url), None, None).map_err(ApiError::BadRequest)?;
                        blocks.push(ContentBlock::Image {
                            url: Some(url.to_owned()),
                            data: None,
                            media_type: None,
                        });
                    }
                    _ => {
                        return Err(ApiError::BadRequest(
                            "user content parts must be text or images".into(),
                        ));
                    }
                }
            }
        }
        _ => {
            return Err(ApiError::BadRequest(
                "user content must be a string or content parts".into(),
            ));
        }
    }
    user_input(blocks, message.id.as_deref())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::{
        RunIdentity, RunOrigin, RunWaitingState, RunWaitingTicket, WaitingReason,
    };
    use awaken_actors::{ThreadId, ToolCallId};

    use super::*;

    fn input(body: JsonValue) -> RunAgentInput {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn the_last_user_message_starts_a_run() {
        let body = input(json!({
            "threadId": "t", "runId": "r", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [{"id": "m1", "role": "user", "content": "hi"}]
        }));
        assert_eq!(body.thread_id().unwrap().unwrap().as_str(), "t");
        assert_eq!(body.run_id().unwrap().unwrap().as_str(), "r");
        let AgUiInput::Message(message) = body.input().unwrap() else {
            panic!("a message")
        };
        assert_eq!(message.id.as_str(), "m1");
        assert_eq!(message.text(), "hi");
    }

    #[test]
    fn resume_entries_answer_open_interrupts_only() {
        let identity = RunIdentity::new(
            ThreadId::new("t").unwrap(),
            RunId::new("r").unwrap(),
            AgentId::new("a").unwrap(),
            RunOrigin::default(),
        );
        let mut run = RunRecord::new(&identity, 0);
        run.waiting = Some(RunWaitingState {
            reason: WaitingReason::ToolDecision,
            ticket_ids: vec!["i1".into()],
            tickets: vec![RunWaitingTicket {
                ticket_id: "i1".into(),
                tool_call_id: ToolCallId::new("c1").unwrap(),
                tool_name: "rm".into(),
                action: "confirm".into(),
                message: "ok?".into(),
            }],
            since_dispatch_id: None,
            message: None,
        });
        let body = input(json!({"messages": [], "resume": [
            {"interruptId": "i1", "status": "cancelled"}
        ]}));
        assert!(matches!(body.input().unwrap(), AgUiInput::Resume));
        let decisions = body.decisions(&run).unwrap();
        assert_eq!(decisions[0].call_id, "c1");
        assert_eq!(decisions[0].decision_id, "ag-ui:i1");
        assert_eq!(decisions[0].action, ResumeDecisionAction::Cancel);
        let unknown = input(json!({"messages": [], "resume": [
            {"interruptId": "nope", "status": "resolved"}
        ]}));
        assert!(matches!(
            unknown.decisions(&run),
            Err(ApiError::Conflict(_))
        ));
    }

    #[test]
    fn bad_inputs_are_refused() {
        for body in [
            json!({"messages": []}),
            json!({"messages": [{"role": "assistant", "content": "x"}]}),
            json!({"messages": [{"role": "user", "content": "  "}]}),
            json!({"messages": [{"role": "user", "content": 5}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}),
        ] {
            assert!(
                matches!(input(body.clone()).input(), Err(ApiError::BadRequest(_))),
                "{body}"
            );
        }
        assert!(
            input(json!({"threadId": "", "messages": []}))
                .thread_id()
                .is_err()
        );
    }
}
