//! What the frontend protocol adapters (AI SDK v6, AG-UI) share: opening a thread
//! by a client-chosen id, starting a followed run, resuming a waiting run with
//! decisions, and re-encoding a run's events as the protocol's SSE frames.

use std::sync::Arc;

use awaken_actors::contract::{
    AgentEvent, ContentBlock, Message, RunRecord, RunStatus, StreamEvent, Thread, Visibility,
};
use awaken_actors::mailbox::SubmitOptions;
use awaken_actors::state::PersistedState;
use awaken_actors::store::ThreadSnapshot;
use awaken_actors::thread::RunRequest;
use awaken_actors::{AgentId, JsonValue, MessageId, RunId, ThreadId};
use awaken_cluster::decisions::DecisionPayload;
use awaken_cluster::events::RunFollow;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;

use super::input::has_content;
use super::shared::{check_agent, check_thread, decide, queued_dispatches};
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::sse_frames;
use crate::server::state::AppState;

/// The thread a protocol request names, ready for a run of `agent_id`: created
/// (for the caller) when it does not exist yet, since protocol clients choose their
/// chat ids, or a new thread when the request names none. The agent is checked
/// first, so a refused request creates nothing.
pub(crate) async fn open_thread(
    state: &AppState,
    caller: &Caller,
    thread_id: Option<ThreadId>,
    agent_id: Option<&AgentId>,
) -> Result<ThreadId, ApiError> {
    let store = state.control.store();
    let existing = match &thread_id {
        Some(thread_id) => store.load_thread(thread_id).await?,
        None => None,
    };
    if let Some(thread) = existing {
        caller.authorize(&thread)?;
        check_agent(state, agent_id, Some(&thread.id)).await?;
        return Ok(thread.id);
    }
    check_agent(state, agent_id, None).await?;
    let generated = thread_id.is_none();
    let mut thread = thread_id.map_or_else(Thread::new, Thread::with_id);
    caller.stamp(&mut thread);
    store.create_thread(&thread).await?;
    // Only an id made here is certainly new: a client's id may be in use by a
    // request racing this one.
    if generated {
        state.control.runtime().seed_new_thread(&thread.id).await?;
    }
    Ok(thread.id)
}

/// Accepts a run of `messages` on `thread_id` (see [`open_thread`]) and follows it
/// from its first event.
pub(crate) async fn start_followed(
    state: &AppState,
    thread_id: ThreadId,
    agent_id: Option<AgentId>,
    messages: Vec<Message>,
    run_id: RunId,
) -> Result<RunEvents, ApiError> {
    let mut request = RunRequest::new(thread_id, messages).with_run_id(run_id.clone());
    request.agent_id = agent_id;
    submit_followed(state, request, &run_id).await
}

/// Accepts `request` (whose run id is `run_id`) and follows the run from its first
/// event.
pub(crate) async fn submit_followed(
    state: &AppState,
    mut request: RunRequest,
    run_id: &RunId,
) -> Result<RunEvents, ApiError> {
    request.trace = request.trace.or_else(crate::server::trace::incoming);
    // Follow first, so not one event is published before the stream listens.
    let follow = state
        .control
        .follow(&request.thread_id, run_id, None)
        .await?;
    state
        .control
        .submit(request, SubmitOptions::default())
        .await?;
    Ok(RunEvents::from(follow))
}

/// The thread's run that waits for decisions: 409 when none does.
pub(crate) async fn waiting_run(
    state: &AppState,
    caller: &Caller,
    thread_id: &ThreadId,
) -> Result<RunRecord, ApiError> {
    check_thread(state, caller, thread_id).await?;
    match state.control.store().latest_run(thread_id).await? {
        Some(run) if run.status == RunStatus::Waiting => Ok(run),
        _ => Err(ApiError::Conflict(format!(
            "no run of thread `{thread_id}` waits for a decision"
        ))),
    }
}

/// Sends `decisions` for the waiting `run` and follows what they resume. The
/// decisions must answer every open ticket of the run (400 otherwise), so the run
/// does resume. A refused decision is an error response as long as no event was
/// streamed; once the run resumed, the stream carries what happens.
pub(crate) async fn resume_followed(
    state: &AppState,
    run: &RunRecord,
    decisions: Vec<DecisionPayload>,
) -> Result<RunEvents, ApiError> {
    let open: Vec<&str> = run
        .waiting
        .iter()
        .flat_map(|waiting| waiting.tickets.iter())
        .map(|ticket| ticket.tool_call_id.as_str())
        .collect();
    if let Some(unknown) = decisions
        .iter()
        .find(|decision| !open.contains(&decision.call_id.as_str()))
    {
        return Err(ApiError::Conflict(format!(
            "tool call `{}` of run `{}` does not wait for a decision",
            unknown.call_id, run.run_id
        )));
    }
    let missing: Vec<&str> = open
        .iter()
        .copied()
        .filter(|call| !decisions.iter().any(|decision| decision.call_id == *call))
        .collect();
    if !missing.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "answer every open request of run `{}`; unanswered tool calls: {}",
            run.run_id,
            missing.join(", ")
        )));
    }
    let (thread_id, run_id) = (run.thread_id.clone(), run.run_id.clone());
    let mut follow = state
        .control
        .follow(&thread_id, &run_id, None)
        .await?
        .skip_backlog();
    let after = follow.last_seq();
    let deciding = {
        let state = state.clone();
        let (thread_id, run_id) = (thread_id.clone(), run_id.clone());
        tokio::spawn(async move {
            for decision in decisions {
                if let Err(error) = decide(&state, &thread_id, Some(&run_id), decision).await {
                    tracing::warn!(%thread_id, %run_id, %error, "protocol decision not applied");
                    return Err(error);
                }
            }
            Ok(())
        })
    };
    tokio::pin!(deciding);
    tokio::select! {
        first = follow.next() => match first {
            Some(event) => Ok(RunEvents { first: Some(event), follow }),
            None => Err(ApiError::Unavailable("the run's event stream closed".into())),
        },
        decided = &mut deciding => {
            decided.map_err(|error| ApiError::Internal(error.to_string()))??;
            // Applied, and what they resumed has stopped again: its events are in
            // the owner's buffer.
            let follow = state.control.follow(&thread_id, &run_id, after).await?.replay_only();
            Ok(RunEvents::from(follow))
        }
    }
}

/// The run a thread is executing (or has accepted and not started), for stream
/// resumption; `None` when it runs nothing.
pub(crate) async fn running_run(
    state: &AppState,
    thread_id: &ThreadId,
) -> Result<Option<RunId>, ApiError> {
    if let Some(run) = state.control.store().latest_run(thread_id).await?
        && run.status == RunStatus::Running
    {
        return Ok(Some(run.run_id));
    }
    Ok(queued_dispatches(state, thread_id)
        .await?
        .into_iter()
        .next()
        .map(|dispatch| dispatch.run_id))
}

/// Replays the latest activation of `run_id` and, when the run is executing,
/// follows it to its end.
pub(crate) async fn replay_followed(
    state: &AppState,
    thread_id: &ThreadId,
    run_id: &RunId,
) -> Result<RunEvents, ApiError> {
    let follow = state
        .control
        .follow(thread_id, run_id, None)
        .await?
        .from_last_activation();
    let executing = match state.control.store().load_run(run_id).await? {
        Some(record) => record.status == RunStatus::Running,
        None => state.control.accepted_run(run_id).await?.is_some(),
    };
    Ok(RunEvents::from(if executing {
        follow
    } else {
        follow.replay_only()
    }))
}

/// A run's events for one protocol stream: possibly one already taken, then the
/// follow.
#[derive(Debug)]
pub(crate) struct RunEvents {
    first: Option<Arc<StreamEvent>>,
    follow: RunFollow,
}

impl From<RunFollow> for RunEvents {
    fn from(follow: RunFollow) -> Self {
        Self {
            first: None,
            follow,
        }
    }
}

impl RunEvents {
    pub(crate) async fn next(&mut self) -> Option<Arc<StreamEvent>> {
        match self.first.take() {
            Some(event) => Some(event),
            None => self.follow.next().await,
        }
    }

    /// What `next` gives when that is at hand without waiting (see
    /// [`RunFollow::next_ready`]).
    fn next_ready(&mut self) -> Option<Option<Arc<StreamEvent>>> {
        match self.first.take() {
            Some(event) => Some(Some(event)),
            None => self.follow.next_ready(),
        }
    }
}

/// A stateful translation of run events into one protocol's frames.
pub(crate) trait Encoder: Send + 'static {
    /// One protocol frame, sent as the `data` of an SSE event.
    type Frame: Serialize + Send;

    /// Appends the frames `event` becomes; a `RunFinish` comes with the thread's
    /// snapshot (its messages and state), read from the store after the run's
    /// checkpoint.
    fn encode(
        &mut self,
        event: &StreamEvent,
        snapshot: Option<&ThreadSnapshot>,
        out: &mut Vec<Self::Frame>,
    );

    /// Appends what closes a stream whose events ended (whether or not with a
    /// `RunFinish`).
    fn close(&mut self, out: &mut Vec<Self::Frame>);

    /// Appends what opens the stream, sent at once rather than with the first
    /// event (which may be a long tool call away), e.g. A2A's opening `Task`.
    fn open(&mut self, _out: &mut Vec<Self::Frame>) {}

    /// A last raw `data` line after the frames, e.g. AI SDK's `[DONE]`.
    fn terminator(&self) -> Option<&'static str> {
        None
    }
}

struct Encoding<E> {
    events: RunEvents,
    encoder: E,
    state: AppState,
    /// The encoder's opening frames were sent.
    opened: bool,
    done: bool,
}

impl<E: Encoder> Encoding<E> {
    /// Appends the frames of the next event, or of the stream's close, to `chunk`.
    async fn fill(&mut self, chunk: &mut Vec<u8>) {
        let event = self.events.next().await;
        self.encode(event, chunk).await;
    }

    /// Appends the frames `event` becomes (`None`: the events ended) to `chunk`.
    async fn encode(&mut self, event: Option<Arc<StreamEvent>>, chunk: &mut Vec<u8>) {
        let mut frames = Vec::new();
        match event {
            Some(event) => {
                let snapshot = match &event.event {
                    AgentEvent::RunFinish { thread_id, .. } => {
                        snapshot(&self.state, thread_id).await
                    }
                    _ => None,
                };
                self.encoder.encode(&event, snapshot.as_ref(), &mut frames);
            }
            None => {
                self.encoder.close(&mut frames);
                self.done = true;
            }
        }
        self.push_frames(frames, chunk);
        if self.done
            && let Some(terminator) = self.encoder.terminator()
        {
            sse_frames::push_text_frame(chunk, terminator);
        }
    }

    fn push_frames(&self, frames: Vec<E::Frame>, chunk: &mut Vec<u8>) {
        for frame in frames {
            if let Err(error) = sse_frames::push_json_frame(chunk, None, &frame) {
                tracing::warn!(%error, "protocol frame not encodable");
            }
        }
    }

    /// The frames of the next event, with those of every event already waiting
    /// behind it (up to [`sse_frames::BURST_BYTES`]) in the same chunk.
    async fn next_burst(&mut self) -> Option<Bytes> {
        let mut chunk = Vec::with_capacity(sse_frames::FRAME_CAPACITY);
        if !self.opened {
            self.opened = true;
            let mut frames = Vec::new();
            self.encoder.open(&mut frames);
            self.push_frames(frames, &mut chunk);
        }
        while chunk.is_empty() {
            if self.done {
                return None;
            }
            self.fill(&mut chunk).await;
        }
        while !self.done && chunk.len() < sse_frames::BURST_BYTES {
            match self.events.next_ready() {
                Some(event) => self.encode(event, &mut chunk).await,
                None => break,
            }
        }
        Some(Bytes::from(chunk))
    }
}

async fn snapshot(state: &AppState, thread_id: &ThreadId) -> Option<ThreadSnapshot> {
    match state.control.store().load_thread_snapshot(thread_id).await {
        Ok(snapshot) => snapshot,
        Err(error) => {
            tracing::warn!(%thread_id, %error, "thread snapshot for a protocol stream");
            None
        }
    }
}

/// The thread's log as users see it (internal messages left out): 404 for an
/// unknown thread or another tenant's.
pub(crate) async fn visible_messages(
    state: &AppState,
    caller: &Caller,
    thread_id: &ThreadId,
) -> Result<Vec<Message>, ApiError> {
    check_thread(state, caller, thread_id).await?;
    let snapshot = state
        .control
        .store()
        .load_thread_snapshot(thread_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("unknown thread `{thread_id}`")))?;
    Ok(snapshot
        .messages
        .into_iter()
        .filter(|message| message.visibility == Visibility::All)
        .collect())
}

/// A protocol client's user message as the engine's: 400 when it says nothing;
/// the client's id is kept when it is a valid message id, so the thread's log and
/// the client's view share ids.
pub(crate) fn user_input(
    blocks: Vec<ContentBlock>,
    client_id: Option<&str>,
) -> Result<Message, ApiError> {
    let mut message = Message::user(String::new());
    message.content = blocks;
    if !has_content(&message) {
        return Err(ApiError::BadRequest(
            "the user message has no content".into(),
        ));
    }
    if let Some(id) = client_id.and_then(|id| MessageId::new(id).ok()) {
        message.id = id;
    }
    Ok(message)
}

/// Prefixes of the state keys that are the runtime's own bookkeeping (its
/// `__runtime.*` keys and the `runtime.*` action keys, e.g. the tool intercepts):
/// never shown to a frontend.
const RUNTIME_KEY_PREFIXES: [&str; 2] = ["__", "runtime."];

/// The state a frontend may see: the persisted keys without the runtime's own
/// bookkeeping.
pub(crate) fn visible_state(state: &PersistedState) -> JsonValue {
    let visible: serde_json::Map<String, JsonValue> = state
        .extensions
        .iter()
        .filter(|(key, _)| {
            !RUNTIME_KEY_PREFIXES
                .iter()
                .any(|prefix| key.starts_with(prefix))
        })
        .map(|(key, value)| (key.clone(), value.to_json()))
        .collect();
    JsonValue::Object(visible)
}

/// The run's events through `encoder` as SSE, until they end or the server shuts
/// down. The client going away only drops the stream: the run goes on.
pub(crate) async fn encoded_events<E: Encoder>(
    state: &AppState,
    events: RunEvents,
    encoder: E,
) -> Response {
    let encoding = Encoding {
        events,
        encoder,
        state: state.clone(),
        opened: false,
        done: false,
    };
    let frames = futures::stream::unfold(encoding, |mut encoding| async move {
        let chunk = encoding.next_burst().await?;
        Some((chunk, encoding))
    });
    let mut stopping = state.stopping();
    let stopped = async move {
        // An error means the server state is gone: stop as well.
        let _ = stopping.wait_for(|stopping| *stopping).await;
    };
    sse_frames::response(Box::pin(frames.take_until(stopped))).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::state::EncodedValue;

    use super::*;

    #[test]
    fn the_visible_state_leaves_the_runtime_keys_out() {
        let mut state = PersistedState::default();
        for key in [
            "__runtime.tool_call_states",
            "runtime.tool_intercepts",
            "todo",
        ] {
            let value = EncodedValue::encode(&serde_json::json!({"k": key})).unwrap();
            state.extensions.insert(key.to_owned(), value);
        }
        assert_eq!(
            visible_state(&state),
            serde_json::json!({"todo": {"k": "todo"}})
        );
    }
}
