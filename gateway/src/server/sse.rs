//! Run events as Server-Sent Events: `id` is the event's `seq` (what a client
//! sends back as `Last-Event-ID`), `data` the `StreamEvent` as JSON.

use awaken_cluster::events::RunFollow;
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::watch;

use super::error::ApiError;
use super::sse_frames;

/// The header a reconnecting `EventSource` sends.
pub(crate) const LAST_EVENT_ID: &str = "last-event-id";

/// The `seq` after which a reconnecting client wants events; `None` for a first
/// connection. 400 when the header is not a sequence number.
pub(crate) fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get(LAST_EVENT_ID) else {
        return Ok(None);
    };
    let text = value.to_str().map(str::trim);
    // An `EventSource` that has seen no id sends none; an empty one names no event.
    if matches!(text, Ok("")) {
        return Ok(None);
    }
    text.ok()
        .and_then(|text| text.parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::BadRequest("Last-Event-ID must be the seq of an event (an integer)".into())
        })
}

/// The run's events until its activation ends or the server shuts down; the
/// stream is read as the client reads, so a slow client holds at most one burst
/// here (the follow's source is bounded) and a client that goes away just drops
/// it: the run goes on.
pub(crate) async fn run_events(follow: RunFollow, mut stopping: watch::Receiver<bool>) -> Response {
    let events = futures::stream::unfold(follow, |mut follow| async move {
        next_burst(&mut follow).await.map(|chunk| (chunk, follow))
    });
    let stopped = async move {
        // An error means the server state is gone: stop as well.
        let _ = stopping.wait_for(|stopping| *stopping).await;
    };
    sse_frames::response(Box::pin(events.take_until(stopped))).await
}

/// The next event framed, with every event that is already waiting behind it
/// (up to [`sse_frames::BURST_BYTES`]) in the same chunk; `None` at the end.
async fn next_burst(follow: &mut RunFollow) -> Option<Bytes> {
    let mut chunk = Vec::with_capacity(sse_frames::FRAME_CAPACITY);
    loop {
        let event = if chunk.is_empty() {
            follow.next().await?
        } else if chunk.len() >= sse_frames::BURST_BYTES {
            break;
        } else {
            match follow.next_ready() {
                Some(Some(event)) => event,
                _ => break,
            }
        };
        if let Err(error) = sse_frames::push_event_frame(&mut chunk, &event) {
            tracing::warn!(%error, seq = event.seq, "run event not encodable");
        }
    }
    Some(Bytes::from(chunk))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use awaken_actors::contract::{AgentEvent, StreamEvent, TerminationReason};
    use awaken_actors::thread::EventHub;
    use awaken_actors::{RunId, ThreadId};
    use awaken_cluster::events::{EventsConfig, LocalEventHub, follow_local};

    use super::*;

    fn event(seq: u64, event: AgentEvent) -> Arc<StreamEvent> {
        Arc::new(StreamEvent::new(seq, "2026-11-23T00:00:00.000Z", event))
    }

    /// The `id`s of the frames in `chunk`, in order.
    fn ids(chunk: &[u8]) -> Vec<u64> {
        std::str::from_utf8(chunk)
            .unwrap()
            .lines()
            .filter_map(|line| line.strip_prefix("id: "))
            .map(|id| id.parse().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn events_already_waiting_share_a_chunk_and_later_ones_get_their_own() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = (ThreadId::generate(), RunId::generate());
        let mut follow = follow_local(&hub, &run, None);
        for seq in 0..3 {
            hub.publish(&thread, &run, &event(seq, AgentEvent::StepEnd), None);
        }
        let first = next_burst(&mut follow).await.unwrap();
        assert_eq!(ids(&first), [0, 1, 2]);

        let finish = AgentEvent::RunFinish {
            thread_id: thread.clone(),
            run_id: run.clone(),
            result: None,
            termination: TerminationReason::NaturalEnd,
        };
        hub.publish(&thread, &run, &event(3, finish), None);
        let last = next_burst(&mut follow).await.unwrap();
        assert_eq!(ids(&last), [3]);
        let text = std::str::from_utf8(&last).unwrap();
        let data = text.lines().nth(1).unwrap().strip_prefix("data: ").unwrap();
        let back: StreamEvent = serde_json::from_str(data).unwrap();
        assert!(matches!(back.event, AgentEvent::RunFinish { .. }));
        assert!(
            next_burst(&mut follow).await.is_none(),
            "the activation ended"
        );
    }
}
