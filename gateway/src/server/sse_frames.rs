//! Server-Sent Events written as whole frames, for every stream the gateway serves.
//!
//! axum's `Event` builds a frame field by field and scans its data for line breaks
//! to split it into `data:` lines; for the ~15 events of a run that was a fifth of
//! the gateway's cost of streaming them. Here a frame is one buffer: the `id`
//! line, then the value encoded by `serde_json` straight after `data: `. Compact
//! JSON never holds a raw line break (inside strings they are escaped), so one
//! `data:` line carries it whole and nothing needs scanning.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use awaken_actors::contract::StreamEvent;
use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::Serialize;
use tokio::time::{Instant, Sleep};

/// How often a stream checks whether it sent anything; one that was quiet for a
/// whole period gets a keep-alive comment, so proxies see a frame at least every
/// two periods.
pub(crate) const KEEP_ALIVE_PERIOD: Duration = Duration::from_secs(15);

/// The keep-alive frame: an empty comment, which clients ignore.
const KEEP_ALIVE: &[u8] = b":\n\n";

/// Room reserved for a chunk before encoding; most run events fit.
pub(crate) const FRAME_CAPACITY: usize = 256;

/// Events already waiting when a chunk is sent go into the same chunk, up to
/// about this many bytes: one HTTP chunk per burst instead of one per event.
pub(crate) const BURST_BYTES: usize = 32 * 1024;

/// Appends one frame to `chunk`: `id: <id>` when given, then `value` as compact
/// JSON on one `data:` line. A value that cannot be encoded leaves `chunk` as it
/// was.
///
/// Encoded with `sonic-rs`, which scans strings for characters to escape many
/// bytes at a time; `serde_json` goes byte by byte, and escaping was most of the
/// cost of encoding a run's events (decision 0045). Both write the same compact
/// JSON for the same value.
pub(crate) fn push_json_frame(
    chunk: &mut Vec<u8>,
    id: Option<u64>,
    value: &impl Serialize,
) -> sonic_rs::Result<()> {
    let start = chunk.len();
    if let Some(id) = id {
        chunk.extend_from_slice(b"id: ");
        chunk.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
        chunk.push(b'\n');
    }
    chunk.extend_from_slice(b"data: ");
    if let Err(error) = sonic_rs::to_writer(&mut *chunk, value) {
        chunk.truncate(start);
        return Err(error);
    }
    chunk.extend_from_slice(b"\n\n");
    Ok(())
}

/// Appends one frame whose `id`, when given, is a text position (the approval
/// feed's), then `value` as compact JSON on one `data:` line. The id holds no
/// line break (callers pass visible ASCII); a value that cannot be encoded
/// leaves `chunk` as it was.
pub(crate) fn push_named_json_frame(
    chunk: &mut Vec<u8>,
    id: Option<&str>,
    value: &impl Serialize,
) -> sonic_rs::Result<()> {
    debug_assert!(
        id.is_none_or(|id| !id.contains(['\n', '\r'])),
        "one id line"
    );
    let start = chunk.len();
    if let Some(id) = id {
        chunk.extend_from_slice(b"id: ");
        chunk.extend_from_slice(id.as_bytes());
        chunk.push(b'\n');
    }
    chunk.extend_from_slice(b"data: ");
    if let Err(error) = sonic_rs::to_writer(&mut *chunk, value) {
        chunk.truncate(start);
        return Err(error);
    }
    chunk.extend_from_slice(b"\n\n");
    Ok(())
}

/// Appends the frame of a run event: what [`push_json_frame`] writes for it, with
/// `seq` as the frame's id, but without serde's `flatten`, which feeds the
/// event's fields one by one through a map serializer (about a fifth of the
/// instructions of encoding a run's events). The envelope's two fields are written
/// first and the event, an internally tagged object that always holds its tag,
/// follows with its opening brace turned into a comma (decision 0046).
pub(crate) fn push_event_frame(chunk: &mut Vec<u8>, event: &StreamEvent) -> sonic_rs::Result<()> {
    let start = chunk.len();
    chunk.extend_from_slice(b"id: ");
    let mut seq = itoa::Buffer::new();
    let seq = seq.format(event.seq).as_bytes();
    chunk.extend_from_slice(seq);
    chunk.extend_from_slice(b"\ndata: {\"seq\":");
    chunk.extend_from_slice(seq);
    chunk.extend_from_slice(b",\"timestamp\":");
    let written = sonic_rs::to_writer(&mut *chunk, &*event.timestamp).and_then(|()| {
        let object = chunk.len();
        sonic_rs::to_writer(&mut *chunk, &event.event)?;
        Ok(object)
    });
    // serde writes an internally tagged enum as an object or not at all.
    match written {
        Ok(object) if chunk.get(object) == Some(&b'{') => {
            chunk[object] = b',';
            chunk.extend_from_slice(b"\n\n");
            Ok(())
        }
        Ok(_) => {
            chunk.truncate(start);
            Err(serde::ser::Error::custom(
                "a run event is not a JSON object",
            ))
        }
        Err(error) => {
            chunk.truncate(start);
            Err(error)
        }
    }
}

/// Appends one frame whose data is `text`, a single line (e.g. a protocol's `[DONE]`).
pub(crate) fn push_text_frame(chunk: &mut Vec<u8>, text: &'static str) {
    debug_assert!(!text.contains(['\n', '\r']), "one data line");
    chunk.extend_from_slice(b"data: ");
    chunk.extend_from_slice(text.as_bytes());
    chunk.extend_from_slice(b"\n\n");
}

/// How long a stream's response head waits for its first chunk. hyper writes the
/// head as soon as the body has nothing to give; waiting lets head and first burst
/// (for a run that completes at once, the whole stream) leave in one write, a
/// system call and a TCP segment fewer per stream. The wait is short so that a
/// run queued behind another still gets its head promptly.
pub(crate) const HEAD_WAITS_FOR_FIRST_CHUNK: Duration = Duration::from_millis(50);

/// A `text/event-stream` response sending `frames` as they come, with keep-alive
/// comments while they pause; returned once the first chunk is there (or the
/// stream ended), or after [`HEAD_WAITS_FOR_FIRST_CHUNK`].
pub(crate) async fn response<S>(mut frames: S) -> Response
where
    S: Stream<Item = Bytes> + Send + Unpin + 'static,
{
    // A stream keeps its pending work in itself, so abandoning `next` loses nothing.
    let first = match tokio::time::timeout(HEAD_WAITS_FOR_FIRST_CHUNK, frames.next()).await {
        Ok(Some(chunk)) => Some(chunk),
        Ok(None) => return stream_response(futures::stream::empty()),
        Err(_elapsed) => None,
    };
    stream_response(futures::stream::iter(first).chain(frames))
}

fn stream_response<S>(frames: S) -> Response
where
    S: Stream<Item = Bytes> + Send + Unpin + 'static,
{
    let body = Body::from_stream(KeepAlive::new(frames).map(Ok::<_, Infallible>));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// Adds a keep-alive comment to a stream that was quiet for a whole
/// [`KEEP_ALIVE_PERIOD`]. The timer is not touched per frame (resetting it for
/// every event was a timer-wheel update each); a flag records that one was sent.
struct KeepAlive<S> {
    frames: S,
    tick: Pin<Box<Sleep>>,
    sent_since_tick: bool,
}

impl<S> KeepAlive<S> {
    fn new(frames: S) -> Self {
        Self {
            frames,
            tick: Box::pin(tokio::time::sleep(KEEP_ALIVE_PERIOD)),
            sent_since_tick: false,
        }
    }
}

impl<S: Stream<Item = Bytes> + Unpin> Stream for KeepAlive<S> {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = &mut *self;
        match this.frames.poll_next_unpin(cx) {
            Poll::Ready(Some(frame)) => {
                this.sent_since_tick = true;
                Poll::Ready(Some(frame))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                // Each elapsed tick starts the next period; polling the new one
                // registers the waker for it.
                while this.tick.as_mut().poll(cx).is_ready() {
                    this.tick.as_mut().reset(Instant::now() + KEEP_ALIVE_PERIOD);
                    if !std::mem::take(&mut this.sent_since_tick) {
                        return Poll::Ready(Some(Bytes::from_static(KEEP_ALIVE)));
                    }
                }
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use futures::stream;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_frame_is_the_id_then_the_value_on_one_data_line() {
        let value = json!({"text": "two\nlines\r\nand a \r return", "n": 1});
        let mut frame = Vec::new();
        push_json_frame(&mut frame, Some(42), &value).unwrap();
        let text = std::str::from_utf8(&frame).unwrap();
        assert!(text.starts_with("id: 42\ndata: {"), "{text}");
        assert!(text.ends_with("}\n\n"), "{text}");
        assert_eq!(
            text.matches('\n').count(),
            3,
            "no line break inside the data"
        );
        let data = text.trim_end().lines().nth(1).unwrap();
        let back: serde_json::Value =
            serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(back, value);

        let mut chunk = Vec::new();
        push_json_frame(&mut chunk, None, &json!([1])).unwrap();
        push_text_frame(&mut chunk, "[DONE]");
        assert_eq!(&chunk[..], b"data: [1]\n\ndata: [DONE]\n\n");
    }

    /// The frame `push_json_frame` makes of `value`, and the one `serde_json` would.
    fn both_frames(value: &impl Serialize) -> (String, String) {
        let mut chunk = Vec::new();
        push_json_frame(&mut chunk, None, value).unwrap();
        let expected = format!("data: {}\n\n", serde_json::to_string(value).unwrap());
        (String::from_utf8(chunk).unwrap(), expected)
    }

    #[test]
    fn frames_hold_the_json_serde_json_would_write() {
        use awaken_actors::contract::{AgentEvent, StreamEvent};
        use awaken_actors::ids::ToolCallId;
        let tricky = "quote \" backslash \\ slash / tab \t nul \u{0} bell \u{7} del \u{7f} é 日本 🦀 \u{2028}";
        let values = [
            json!({"text": tricky, "n": [0, -1, u64::MAX, i64::MIN], "f": [0.1, -2.5e-8, 1e300, 123456789.0]}),
            json!([null, true, false, {}, [], "", {"nested": {"deep": [tricky]}}]),
        ];
        for value in &values {
            let (frame, expected) = both_frames(value);
            assert_eq!(frame, expected);
        }
        let event = StreamEvent::new(
            3,
            "2026-11-24T06:18:51.983Z",
            AgentEvent::ToolCallReady {
                id: ToolCallId::new("call_1").unwrap(),
                name: "echo".into(),
                arguments: values[0].clone(),
            },
        );
        let (frame, expected) = both_frames(&event);
        assert_eq!(frame, expected);
    }

    #[test]
    fn an_event_frame_is_the_json_frame_of_the_event() {
        use awaken_actors::contract::{AgentEvent, StreamEvent, TerminationReason};
        use awaken_actors::ids::{RunId, ThreadId, ToolCallId};
        let call = ToolCallId::new("call_1").unwrap();
        let events = [
            AgentEvent::StepEnd,
            AgentEvent::TextDelta {
                delta: "quote \" nul \u{0} 日本 \u{2028}".into(),
            },
            AgentEvent::ToolCallReady {
                id: call.clone(),
                name: "echo".into(),
                arguments: json!({"value": [1, 2.5, null], "s": "\\"}),
            },
            AgentEvent::ToolCallDelta {
                id: call,
                args_delta: "{\"value\":".into(),
            },
            AgentEvent::RunFinish {
                thread_id: ThreadId::new("t1").unwrap(),
                run_id: RunId::new("r1").unwrap(),
                result: Some(json!({"response": "done"})),
                termination: TerminationReason::NaturalEnd,
            },
        ];
        for (seq, event) in events.into_iter().enumerate() {
            for timestamp in ["2026-11-24T06:18:51.983Z", "odd \"stamp\" \u{1}"] {
                let event = StreamEvent::new(seq as u64 * 1000, timestamp, event.clone());
                let mut frame = b"data: before\n\n".to_vec();
                push_event_frame(&mut frame, &event).unwrap();
                let mut expected = b"data: before\n\n".to_vec();
                push_json_frame(&mut expected, Some(event.seq), &event).unwrap();
                assert_eq!(
                    String::from_utf8(frame).unwrap(),
                    String::from_utf8(expected).unwrap()
                );
            }
        }
    }

    #[test]
    fn a_value_that_cannot_be_encoded_leaves_the_chunk_as_it_was() {
        let mut chunk = b"data: 1\n\n".to_vec();
        let unencodable: std::collections::BTreeMap<Vec<u8>, u8> = [(vec![1], 2)].into();
        assert!(push_json_frame(&mut chunk, Some(7), &unencodable).is_err());
        assert_eq!(&chunk[..], b"data: 1\n\n");
    }

    async fn body_of(response: Response) -> Bytes {
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
    }

    fn chunk_after(delay: Duration, chunk: &'static [u8]) -> impl Stream<Item = Bytes> {
        stream::once(async move {
            tokio::time::sleep(delay).await;
            Bytes::from_static(chunk)
        })
    }

    #[tokio::test(start_paused = true)]
    async fn the_head_waits_for_a_first_chunk_that_comes_soon() {
        let started = Instant::now();
        let soon = chunk_after(HEAD_WAITS_FOR_FIRST_CHUNK / 5, b"data: 1\n\n");
        let response = response(Box::pin(soon)).await;
        assert_eq!(started.elapsed(), HEAD_WAITS_FOR_FIRST_CHUNK / 5);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        assert_eq!(&body_of(response).await[..], b"data: 1\n\n");
    }

    #[tokio::test(start_paused = true)]
    async fn the_head_goes_alone_when_the_first_chunk_is_late_and_the_chunk_follows() {
        let started = Instant::now();
        let late = chunk_after(HEAD_WAITS_FOR_FIRST_CHUNK * 3, b"data: 2\n\n");
        let response = response(Box::pin(late)).await;
        assert_eq!(started.elapsed(), HEAD_WAITS_FOR_FIRST_CHUNK);
        assert_eq!(&body_of(response).await[..], b"data: 2\n\n");
        assert_eq!(started.elapsed(), HEAD_WAITS_FOR_FIRST_CHUNK * 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_ends_at_once_gets_an_empty_body_without_waiting() {
        let started = Instant::now();
        let response = response(stream::empty::<Bytes>()).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert!(body_of(response).await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_gets_keep_alives_and_a_busy_one_none() {
        // Quiet: nothing arrives for two and a half periods.
        let quiet = stream::pending::<Bytes>();
        let mut alive = KeepAlive::new(quiet);
        let started = Instant::now();
        assert_eq!(alive.next().await.unwrap(), Bytes::from_static(KEEP_ALIVE));
        assert_eq!(started.elapsed(), KEEP_ALIVE_PERIOD);
        assert_eq!(alive.next().await.unwrap(), Bytes::from_static(KEEP_ALIVE));
        assert_eq!(started.elapsed(), KEEP_ALIVE_PERIOD * 2);

        // Busy: a frame every two sevenths of a period (never at a tick), for
        // almost three periods, then the end.
        let busy = stream::iter(0..10u8).then(|n| async move {
            tokio::time::sleep(KEEP_ALIVE_PERIOD * 2 / 7).await;
            Bytes::from(vec![n])
        });
        let frames: Vec<Bytes> = KeepAlive::new(Box::pin(busy)).collect().await;
        assert_eq!(frames.len(), 10, "{frames:?}");
        assert!(frames.iter().all(|f| f.as_ref() != KEEP_ALIVE));
    }
}
