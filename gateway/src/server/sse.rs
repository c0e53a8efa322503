//! Run events as Server-Sent Events: `id` is the event's `seq` (what a client
//! sends back as `Last-Event-ID`), `data` the `StreamEvent` as JSON.

use awaken_cluster::events::RunFollow;
use axum::http::HeaderMap;
use axum::response::Response;
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
    value
        .to_str()
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::BadRequest("Last-Event-ID must be the seq of an event (an integer)".into())
        })
}

/// The run's events until its activation ends or the server shuts down; the
/// stream is read as the client reads, so a slow client holds at most one event
/// here (the follow's source is bounded) and a client that goes away just drops
/// it: the run goes on.
pub(crate) fn run_events(follow: RunFollow, mut stopping: watch::Receiver<bool>) -> Response {
    let events = futures::stream::unfold(follow, |mut follow| async move {
        loop {
            let event = follow.next().await?;
            match sse_frames::json_frame(Some(event.seq), &*event) {
                Ok(frame) => return Some((frame, follow)),
                Err(error) => tracing::warn!(%error, seq = event.seq, "run event not encodable"),
            }
        }
    });
    let stopped = async move {
        // An error means the server state is gone: stop as well.
        let _ = stopping.wait_for(|stopping| *stopping).await;
    };
    sse_frames::response(Box::pin(events.take_until(stopped)))
}
