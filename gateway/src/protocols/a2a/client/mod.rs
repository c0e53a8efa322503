//! The A2A client that runs remote delegates: [`A2aBackend`], the engine's
//! [`RemoteBackend`] for endpoints with `backend = "a2a"`.
//!
//! A call sends one message over the HTTP+JSON binding — a new task's prompt, or
//! the decision a waiting task asked for — then follows the task until it ends or
//! asks for input: on the `message:stream` event stream when the endpoint (or the
//! agent's card) says the agent streams, otherwise by reading `GET /tasks/{id}`
//! every `poll_interval_ms`. A stream that breaks off is continued by polling. See
//! `docs/a2a.md` ("Remote agents").

mod auth;
mod body;
mod card;
mod cards;
mod endpoint;
mod http;
mod view;

use async_trait::async_trait;
use awaken_actors::AgentId;
use awaken_actors::contract::RemoteEndpoint;
use awaken_actors::delegation::{
    RemoteAct, RemoteAgentCard, RemoteAnswer, RemoteBackend, RemoteCall, RemoteError,
    RemoteOutcome, RemoteProgress, RemoteTask,
};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::Url;
use serde_json::{Value as JsonValue, json};

use std::sync::Arc;

use self::cards::{CardCache, CardTiming};
use self::endpoint::Settings;
use self::http::Http;
use self::view::TaskView;
use crate::protocols::a2a::wire::{
    Message, Part, Role, SendMessageConfiguration, SendMessageRequest, StreamResponse, Task,
};

/// The `endpoint.backend` name of A2A agents.
pub const A2A_BACKEND: &str = "a2a";

/// Runs remote delegates over A2A v1.0 (HTTP+JSON binding).
#[derive(Debug, Clone)]
pub struct A2aBackend {
    http: Http,
    /// Cards read at start-up or first use, refreshed as they age or fail.
    cards: Arc<CardCache>,
}

impl Default for A2aBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl A2aBackend {
    /// A backend with its own connection pool.
    pub fn new() -> Self {
        Self {
            http: Http::new(),
            cards: Arc::new(CardCache::new(CardTiming::default())),
        }
    }

    /// Reads the task now and then every poll interval until it ends or asks
    /// for input. Unreachable reads are retried (the caller's timeout bounds the
    /// wait).
    async fn poll(
        &self,
        settings: &Settings,
        view: &mut TaskView,
        progress: &dyn RemoteProgress,
    ) -> Result<RemoteOutcome, RemoteError> {
        let task = view.task().ok_or_else(|| {
            RemoteError::Protocol("the remote agent answered without a task".to_owned())
        })?;
        let url = task_url(settings, &task.task_id, "")?;
        let mut first = true;
        loop {
            if !first {
                tokio::time::sleep(settings.poll_interval).await;
            }
            first = false;
            match self.http.get_json::<Task>(settings, &url).await {
                Ok(task) => {
                    let changed = view.state() != Some(task.status.state);
                    let item = StreamResponse::Task(task);
                    if let Some(outcome) = take_in(view, item, progress, changed).await {
                        return Ok(outcome);
                    }
                }
                Err(RemoteError::Unreachable(error)) => {
                    tracing::debug!(task = %task.task_id, %error, "remote task unreachable; polling on");
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Sends the call's message, then follows the task (streamed when the
    /// endpoint or the agent's card says so) until it ends or waits.
    async fn send_and_follow(
        &self,
        settings: &Settings,
        call: RemoteCall<'_>,
    ) -> Result<RemoteOutcome, RemoteError> {
        let stream = match settings.stream {
            Some(stream) => stream,
            None => self
                .cards
                .card(&self.http, settings, call.agent_id)
                .await
                .is_some_and(|card| card.streaming),
        };
        let Some((message, answered)) = message_of(&call.act, &call.idempotency_key) else {
            // A task started before a failover: read on where it is, sending
            // nothing (a new message would start the work again).
            let RemoteAct::Follow { task } = &call.act else {
                return Err(RemoteError::Protocol("nothing to send".to_owned()));
            };
            let mut view = TaskView::answering(Vec::new());
            view.apply(StreamResponse::Task(working(task)));
            return self.poll(settings, &mut view, call.progress).await;
        };
        let mut view = TaskView::answering(answered);
        if let RemoteAct::Answer { task, .. } = &call.act {
            // A stream of the answered task opens with the task itself; a polled
            // one needs its id from the start.
            view.apply(StreamResponse::Task(working(task)));
        }
        let request = SendMessageRequest {
            tenant: settings.tenant.clone(),
            message,
            configuration: Some(SendMessageConfiguration {
                history_length: Some(0),
                return_immediately: !stream,
                ..SendMessageConfiguration::default()
            }),
            metadata: None,
        };
        let operations = settings.operations();
        if stream {
            let url = format!("{operations}/message:stream");
            let response = self.http.post_stream(settings, &url, &request).await?;
            let mut events = http::bounded_events(response, url.clone()).eventsource();
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(eventsource_stream::EventStreamError::Transport(
                        error @ RemoteError::Protocol(_),
                    )) => return Err(error),
                    Err(error) => {
                        tracing::debug!(%url, %error, "remote task stream broke off; polling on");
                        break;
                    }
                };
                if event.data.trim().is_empty() {
                    continue;
                }
                let item: StreamResponse = serde_json::from_str(&event.data).map_err(|e| {
                    RemoteError::Protocol(format!("{url} sent an unreadable stream item: {e}"))
                })?;
                if let Some(outcome) = take_in(&mut view, item, call.progress, true).await {
                    return Ok(outcome);
                }
            }
        } else {
            let url = format!("{operations}/message:send");
            let item: StreamResponse = self.http.post_json(settings, &url, &request).await?;
            if let Some(outcome) = take_in(&mut view, item, call.progress, true).await {
                return Ok(outcome);
            }
        }
        self.poll(settings, &mut view, call.progress).await
    }
}

#[async_trait]
impl RemoteBackend for A2aBackend {
    fn check_endpoint(&self, endpoint: &RemoteEndpoint) -> Result<(), RemoteError> {
        Settings::of(endpoint).map(drop)
    }

    async fn discover(
        &self,
        agent: &AgentId,
        endpoint: &RemoteEndpoint,
    ) -> Result<RemoteAgentCard, RemoteError> {
        let card = card::discover(&self.http, &Settings::of(endpoint)?).await?;
        self.cards.keep(agent, card.clone());
        Ok(card)
    }

    async fn execute(&self, call: RemoteCall<'_>) -> Result<RemoteOutcome, RemoteError> {
        let mut settings = Settings::of(call.endpoint)?;
        settings.trace = call.trace;
        let agent = call.agent_id.clone();
        let executed = self.send_and_follow(&settings, call).await;
        if let Err(error) = &executed {
            tracing::debug!(%agent, %error, "remote call failed: its card is read again at the next call");
            self.cards.stale(&agent);
        }
        executed
    }

    async fn cancel(
        &self,
        endpoint: &RemoteEndpoint,
        task: &RemoteTask,
    ) -> Result<(), RemoteError> {
        let settings = Settings::of(endpoint)?;
        let url = task_url(&settings, &task.task_id, ":cancel")?;
        self.http
            .post_json::<JsonValue>(&settings, &url, &json!({}))
            .await
            .map(drop)
    }
}

/// Takes one item into `view`, tells `progress` (the item when `report`, the task
/// once its ids are known), and says whether the task now ends or waits.
async fn take_in(
    view: &mut TaskView,
    item: StreamResponse,
    progress: &dyn RemoteProgress,
    report: bool,
) -> Option<RemoteOutcome> {
    let known = view.task().is_some();
    if report && let Ok(value) = serde_json::to_value(&item) {
        progress.event(value).await;
    }
    view.apply(item);
    if !known && let Some(task) = view.task() {
        progress.task_known(&task).await;
    }
    view.outcome()
}

/// `{operations}/tasks/{task_id}{suffix}`, the id escaped as a path segment.
fn task_url(settings: &Settings, task_id: &str, suffix: &str) -> Result<String, RemoteError> {
    let mut url = Url::parse(&settings.operations())
        .map_err(|e| RemoteError::Config(format!("base_url: {e}")))?;
    url.path_segments_mut()
        .map_err(|()| RemoteError::Config("base_url cannot have paths".to_owned()))?
        .pop_if_empty()
        .push("tasks")
        .push(&format!("{task_id}{suffix}"));
    Ok(url.to_string())
}

/// `task` as known before its first read: working.
fn working(task: &RemoteTask) -> Task {
    Task {
        id: task.task_id.clone(),
        context_id: task.context_id.clone(),
        status: crate::protocols::a2a::wire::TaskStatus {
            state: crate::protocols::a2a::wire::TaskState::Working,
            message: None,
            timestamp: None,
        },
        artifacts: Vec::new(),
        history: Vec::new(),
        metadata: None,
    }
}

/// The message `act` sends, and the remote calls it answers; `None` when it
/// sends nothing.
fn message_of(act: &RemoteAct, message_id: &str) -> Option<(Message, Vec<String>)> {
    let (task, parts, answered) = match act {
        RemoteAct::Start { prompt } => (None, vec![Part::text(prompt.clone())], Vec::new()),
        RemoteAct::Answer { task, answer } => (
            Some(task),
            vec![answer_part(answer)],
            answer.call_ids.clone(),
        ),
        RemoteAct::Follow { .. } => return None,
    };
    let message = Message {
        message_id: message_id.to_owned(),
        context_id: task.map(|task| task.context_id.clone()),
        task_id: task.map(|task| task.task_id.clone()),
        role: Role::User,
        parts,
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    };
    Some((message, answered))
}

/// A decision as the waiting task reads it: `{"decisions": [...]}` for the calls it
/// named (or the payload itself when it already is one), else words.
fn answer_part(answer: &RemoteAnswer) -> Part {
    if answer.result.get("decisions").is_some() {
        return Part::data(answer.result.clone());
    }
    if !answer.call_ids.is_empty() {
        let decisions: Vec<JsonValue> = answer
            .call_ids
            .iter()
            .map(|call_id| {
                let mut decision = json!({"toolCallId": call_id, "approved": answer.approved});
                if let Some(reason) = &answer.reason {
                    decision["reason"] = json!(reason);
                }
                if answer.approved && !(answer.result.is_boolean() || answer.result.is_null()) {
                    decision["result"] = answer.result.clone();
                }
                decision
            })
            .collect();
        return Part::data(json!({ "decisions": decisions }));
    }
    match answer.result.as_str() {
        Some(text) if !text.trim().is_empty() => Part::text(text),
        _ => Part::text(if answer.approved { "approve" } else { "deny" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(approved: bool, call_ids: &[&str], result: JsonValue) -> RemoteAnswer {
        RemoteAnswer {
            approved,
            call_ids: call_ids.iter().map(|id| (*id).to_owned()).collect(),
            reason: (!approved).then(|| "too risky".to_owned()),
            result,
        }
    }

    #[test]
    fn decisions_for_named_calls_travel_as_data() {
        let part = answer_part(&answer(false, &["c1", "c2"], json!(false)));
        assert_eq!(
            part.data,
            Some(json!({"decisions": [
                {"toolCallId": "c1", "approved": false, "reason": "too risky"},
                {"toolCallId": "c2", "approved": false, "reason": "too risky"},
            ]}))
        );
        let part = answer_part(&answer(true, &["c1"], json!({"choice": "b"})));
        assert_eq!(
            part.data,
            Some(
                json!({"decisions": [{"toolCallId": "c1", "approved": true, "result": {"choice": "b"}}]})
            )
        );
    }

    #[test]
    fn without_named_calls_a_decision_is_words() {
        assert_eq!(
            answer_part(&answer(true, &[], json!(true))).text.as_deref(),
            Some("approve")
        );
        assert_eq!(
            answer_part(&answer(false, &[], json!(false)))
                .text
                .as_deref(),
            Some("deny")
        );
        assert_eq!(
            answer_part(&answer(true, &[], json!("use the blue one")))
                .text
                .as_deref(),
            Some("use the blue one")
        );
    }

    #[test]
    fn task_urls_escape_the_id() {
        let mut endpoint = RemoteEndpoint::new(A2A_BACKEND, "http://b.example/v1/a2a");
        endpoint.target = Some("analyst".to_owned());
        let Ok(settings) = Settings::of(&endpoint) else {
            panic!("valid endpoint refused");
        };
        assert_eq!(
            task_url(&settings, "t 1", ":cancel").ok().as_deref(),
            Some("http://b.example/v1/a2a/analyst/tasks/t%201:cancel")
        );
    }
}
