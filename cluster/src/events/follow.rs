//! Following a run's events from any node: what the owner still buffers, then live.

use std::collections::VecDeque;

use async_nats::{Client, Subscriber};
use awaken_actors::contract::{AgentEvent, StreamEvent};
use awaken_actors::{RunId, ThreadId};
use futures::StreamExt;

use super::event_subject;
use crate::codec;
use crate::routing::{CallOutcome, RouteError, ThreadCall, ThreadRouter};

/// A run's event stream as one node sees it: replayed events first, then live ones,
/// each `seq` once and in order, until the activation ends (`RunFinish`: the run
/// finished or waits for a decision).
#[derive(Debug)]
pub struct RunFollow {
    backlog: VecDeque<StreamEvent>,
    live: Subscriber,
    last_seq: Option<u64>,
    ended: bool,
    complete: bool,
}

/// Starts following `run_id` of `thread_id` after `after_seq` (from the start when
/// `None`): subscribes to the run's subject, then asks the owner for its buffered
/// events, so nothing published in between is missed.
pub async fn follow_run(
    client: &Client,
    router: &ThreadRouter,
    thread_id: &ThreadId,
    run_id: &RunId,
    after_seq: Option<u64>,
) -> Result<RunFollow, RouteError> {
    let transport = |e: &dyn std::fmt::Display| RouteError::Transport(e.to_string());
    let live = client
        .subscribe(event_subject(run_id))
        .await
        .map_err(|e| transport(&e))?;
    // The server must know the subscription before the owner snapshots its buffer
    // (the owner may be this node, answering without a round trip).
    client.flush().await.map_err(|e| transport(&e))?;
    let answer = router
        .call(ThreadCall::Replay {
            thread_id: thread_id.clone(),
            run_id: run_id.clone(),
            after_seq,
        })
        .await?;
    let complete = match answer.outcome {
        CallOutcome::Replayed { complete } => complete,
        CallOutcome::Malformed(error) => return Err(RouteError::Malformed(error)),
        other => {
            return Err(RouteError::Unexpected {
                call: "replay",
                outcome: Box::new(other),
            });
        }
    };
    Ok(RunFollow {
        backlog: answer.events.into(),
        live,
        last_seq: after_seq,
        ended: false,
        complete,
    })
}

impl RunFollow {
    /// Whether the owner still had every event after the requested `seq`; when not,
    /// the oldest ones are missing (read the thread's messages from the store).
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// The next event; `None` after the activation's `RunFinish` or when the
    /// connection closed.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        while !self.ended {
            let event = match self.backlog.pop_front() {
                Some(event) => event,
                None => {
                    let message = self.live.next().await?;
                    match codec::decode::<StreamEvent>(&message.payload) {
                        Ok(event) => event,
                        Err(error) => {
                            tracing::debug!(%error, "unreadable run event skipped");
                            continue;
                        }
                    }
                }
            };
            if self.last_seq.is_some_and(|last| event.seq <= last) {
                continue;
            }
            self.last_seq = Some(event.seq);
            self.ended = matches!(event.event, AgentEvent::RunFinish { .. });
            return Some(event);
        }
        None
    }
}
