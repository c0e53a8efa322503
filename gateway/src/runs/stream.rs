//! A run's events as one protocol's SSE stream: the events (possibly one
//! already taken), the protocol's [`Encoder`], and the stream that ends with the
//! run or when the server shuts down.

use std::sync::Arc;

use awaken_actors::JsonValue;
use awaken_actors::ThreadId;
use awaken_actors::contract::{AgentEvent, StreamEvent};
use awaken_actors::state::PersistedState;
use awaken_actors::store::ThreadSnapshot;
use awaken_cluster::events::RunFollow;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;

use super::RunService;
use crate::server::sse_frames;

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
    /// `follow`, after its first event `first` was taken already.
    pub(super) fn taken(first: Arc<StreamEvent>, follow: RunFollow) -> Self {
        Self {
            first: Some(first),
            follow,
        }
    }

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
    runs: RunService,
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
                    AgentEvent::RunFinish { thread_id, .. } => self.runs.snapshot(thread_id).await,
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

impl RunService {
    async fn snapshot(&self, thread_id: &ThreadId) -> Option<ThreadSnapshot> {
        match self.control.store().load_thread_snapshot(thread_id).await {
            Ok(snapshot) => snapshot,
            Err(error) => {
                tracing::warn!(%thread_id, %error, "thread snapshot for a protocol stream");
                None
            }
        }
    }

    /// The run's events through `encoder` as SSE, until they end or the server shuts
    /// down. The client going away only drops the stream: the run goes on.
    pub(crate) async fn encoded_events<E: Encoder>(
        &self,
        events: RunEvents,
        encoder: E,
    ) -> Response {
        let encoding = Encoding {
            events,
            encoder,
            runs: self.clone(),
            opened: false,
            done: false,
        };
        let frames = futures::stream::unfold(encoding, |mut encoding| async move {
            let chunk = encoding.next_burst().await?;
            Some((chunk, encoding))
        });
        let mut stopping = self.stopping();
        let stopped = async move {
            // An error means the server state is gone: stop as well.
            let _ = stopping.wait_for(|stopping| *stopping).await;
        };
        sse_frames::response(Box::pin(frames.take_until(stopped))).await
    }
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
