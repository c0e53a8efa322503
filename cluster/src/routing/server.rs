//! Serving thread calls on the subjects of the shards this node owns.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, HeaderMap, Message};
use awaken_actors::contract::StreamEvent;
use awaken_actors::telemetry::{Parent, Span, SpanKind};
use futures::StreamExt;
use tokio::sync::{Semaphore, watch};
use tokio_util::task::AbortOnDropHandle;

use super::host::ThreadHost;
use super::wire::{CallFrame, CallOutcome, ThreadCall, call_subject};
use crate::codec;
use crate::shards::{Ownership, ShardId};
use crate::trace_headers;

/// Encoded events per `Events` frame stay under this many bytes (NATS refuses
/// messages over its `max_payload`, 1 MiB by default).
const EVENTS_FRAME_BYTES: usize = 256 * 1024;

/// Calls one node answers at once (a `Decide` is held until its run stops).
const MAX_IN_FLIGHT: usize = 4096;

/// Subscribes to `awaken.shard.<n>.call` for every shard this node owns, and only
/// those: NATS itself routes a call to the thread's owner, and answers "no
/// responders" while a shard has none (mid-failover).
///
/// The subscription is in a queue group, so each call reaches one subscriber
/// even while a lease changes hands and the old and the new owner are both
/// subscribed: the old one declines (`NotOwner`) and the caller sends again,
/// instead of both receiving it, the new one applying it and the caller taking
/// the old one's refusal as the answer and applying it a second time.
#[derive(Debug)]
pub struct ShardServer {
    _task: AbortOnDropHandle<()>,
}

impl ShardServer {
    /// Follows `ownership`: serves a shard from when it is acquired until it is
    /// given up or lost. `heartbeat` paces the `Working` frames of long calls.
    pub fn start(
        client: Client,
        host: ThreadHost,
        mut ownership: watch::Receiver<Ownership>,
        heartbeat: Duration,
    ) -> Self {
        let task = tokio::spawn(async move {
            let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
            // A shard's server stops when its entry goes.
            let mut served: HashMap<ShardId, AbortOnDropHandle<()>> = HashMap::new();
            loop {
                let owned: Vec<ShardId> = ownership.borrow_and_update().keys().copied().collect();
                served.retain(|shard, _| owned.contains(shard));
                for shard in owned {
                    served.entry(shard).or_insert_with(|| {
                        AbortOnDropHandle::new(tokio::spawn(serve_shard(
                            client.clone(),
                            host.clone(),
                            shard,
                            Arc::clone(&permits),
                            heartbeat,
                        )))
                    });
                }
                if ownership.changed().await.is_err() {
                    return;
                }
            }
        });
        Self {
            _task: AbortOnDropHandle::new(task),
        }
    }
}

async fn serve_shard(
    client: Client,
    host: ThreadHost,
    shard: ShardId,
    permits: Arc<Semaphore>,
    heartbeat: Duration,
) {
    let subject = call_subject(shard);
    let mut calls = match client.queue_subscribe(subject.clone(), subject).await {
        Ok(calls) => calls,
        Err(error) => {
            tracing::warn!(%error, shard = shard.0, "cannot serve the shard's thread calls");
            return;
        }
    };
    while let Some(message) = calls.next().await {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let client = client.clone();
        let host = host.clone();
        tokio::spawn(async move {
            answer(&client, &host, message, heartbeat).await;
            drop(permit);
        });
    }
}

async fn answer(client: &Client, host: &ThreadHost, message: Message, heartbeat: Duration) {
    let Some(reply) = message.reply else {
        tracing::debug!(subject = %message.subject, "thread call without a reply subject ignored");
        return;
    };
    let call: ThreadCall = match codec::decode(&message.payload) {
        Ok(call) => call,
        Err(error) => {
            let done = CallFrame::Done {
                outcome: CallOutcome::Malformed(error.to_string()),
            };
            send(client, &reply, &done).await;
            return;
        }
    };
    let span = call_span(&message.subject, message.headers.as_ref(), &call);
    let handling = host.handle(call);
    let handling = span.traced(handling);
    tokio::pin!(handling);
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    let answer = loop {
        tokio::select! {
            answer = &mut handling => break answer,
            _ = beat.tick() => send(client, &reply, &CallFrame::Working).await,
        }
    };
    call_answered(&span, &answer.outcome);
    drop(span);
    for events in chunks(answer.events) {
        send(client, &reply, &CallFrame::Events { events }).await;
    }
    send(
        client,
        &reply,
        &CallFrame::Done {
            outcome: answer.outcome,
        },
    )
    .await;
}

/// The consumer span of a thread call that came with its caller's
/// `traceparent` (messaging conventions); disabled for a call without one, or
/// when spans are not exported.
fn call_span(subject: &str, headers: Option<&HeaderMap>, call: &ThreadCall) -> Span {
    let Some(parent) = trace_headers::traceparent(headers) else {
        return Span::none();
    };
    Span::start(
        &["process awaken.shard.call"],
        SpanKind::Consumer,
        Parent::Remote(&parent),
        |attributes| {
            attributes
                .set("messaging.system", "nats")
                .set("messaging.operation.type", "process")
                .set("messaging.destination.name", subject)
                .set(
                    "messaging.destination.template",
                    "awaken.shard.{shard}.call",
                )
                .set("awaken.call.operation", call.operation())
                .set("gen_ai.conversation.id", call.thread_id().as_str());
        },
    )
}

/// Records how the owner answered on the call's span.
fn call_answered(span: &Span, outcome: &CallOutcome) {
    if !span.is_recording() {
        return;
    }
    let answered = outcome.name();
    span.set("awaken.call.outcome", answered);
    if matches!(outcome, CallOutcome::Failed(_) | CallOutcome::Malformed(_)) {
        span.failed(answered);
    }
}

/// Splits events into frames of at most [`EVENTS_FRAME_BYTES`] (one event per frame
/// at least).
fn chunks(events: Vec<Arc<StreamEvent>>) -> Vec<Vec<Arc<StreamEvent>>> {
    let mut frames = Vec::new();
    let mut frame = Vec::new();
    let mut bytes = 0;
    for event in events {
        let size = codec::encode(&*event).map_or(0, |encoded| encoded.len());
        if !frame.is_empty() && bytes + size > EVENTS_FRAME_BYTES {
            frames.push(std::mem::take(&mut frame));
            bytes = 0;
        }
        bytes += size;
        frame.push(event);
    }
    if !frame.is_empty() {
        frames.push(frame);
    }
    frames
}

async fn send(client: &Client, reply: &async_nats::Subject, frame: &CallFrame) {
    let payload = match codec::encode(frame) {
        Ok(payload) => payload,
        Err(error) => {
            tracing::warn!(%error, "thread call frame not encodable");
            return;
        }
    };
    if let Err(error) = client.publish(reply.clone(), payload).await {
        tracing::debug!(%error, "thread call frame not sent");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::AgentEvent;

    use super::*;

    #[test]
    fn large_replays_are_split_below_the_frame_limit() {
        let big = "x".repeat(100 * 1024);
        let events: Vec<Arc<StreamEvent>> = (0..7)
            .map(|seq| {
                Arc::new(StreamEvent::new(
                    seq,
                    "t",
                    AgentEvent::TextDelta { delta: big.clone() },
                ))
            })
            .collect();
        let frames = chunks(events);
        assert_eq!(
            frames.iter().map(Vec::len).collect::<Vec<_>>(),
            [2, 2, 2, 1]
        );
        let seqs: Vec<u64> = frames.iter().flatten().map(|e| e.seq).collect();
        assert_eq!(seqs, (0..7).collect::<Vec<_>>());
    }
}
