//! Following a run's events from any node: what the owner still buffers, then live.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, Subscriber};
use awaken_actors::contract::{AgentEvent, StreamEvent};
use awaken_actors::store::ThreadRunStore;
use awaken_actors::{RunId, ThreadId};
use futures::{FutureExt, StreamExt};

use super::catch_up::{CatchUp, Missed, QUIET_PROBE, replayed};
use super::local::{Fed, LiveSubscription, LocalEventHub};
use super::{decode_events, event_subject};
use crate::routing::{RouteError, ThreadCall, ThreadRouter};

/// How long a follow of an ended run still takes live events once its buffered
/// ones are read and its `RunFinish` was not among them.
const FINISH_GRACE: Duration = Duration::from_secs(2);

/// Where live events come from.
#[derive(Debug)]
enum Live {
    /// `awaken.events.<run_id>` on NATS, with where to refill what it loses.
    Nats(Subscriber, Box<CatchUp>),
    /// This process's hub: the run's replay buffer, read in place.
    Local(LiveSubscription),
}

/// A run's event stream as one node sees it: replayed events first, then live ones,
/// each `seq` once and in order, until the activation ends (`RunFinish`: the run
/// finished or waits for a decision).
#[derive(Debug)]
pub struct RunFollow {
    run_id: RunId,
    backlog: VecDeque<Arc<StreamEvent>>,
    live: Live,
    last_seq: Option<u64>,
    ended: bool,
    complete: bool,
    /// Set for runs that are not executing: live events are not waited for.
    replay_only: bool,
    /// Whether a replay-only follow asked for the end it did not find.
    finish_asked: bool,
}

/// Starts following `run_id` of `thread_id` after `after_seq` (from the start when
/// `None`): subscribes to the run's subject, then asks the owner for its buffered
/// events, so nothing published in between is missed. What the subscription
/// loses later (a server restart, a reconnect) is asked for again: on a gap in
/// `seq`, and whenever the run is quiet for a while, from the owner or, when the
/// owner no longer knows the run, from its record in `store`.
pub async fn follow_run(
    client: &Client,
    router: &ThreadRouter,
    store: &Arc<dyn ThreadRunStore>,
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
    let complete = replayed(answer.outcome)?;
    Ok(RunFollow {
        run_id: run_id.clone(),
        backlog: answer.events.into(),
        live: Live::Nats(
            live,
            Box::new(CatchUp::new(
                router.clone(),
                Arc::clone(store),
                thread_id.clone(),
                run_id.clone(),
            )),
        ),
        last_seq: after_seq,
        ended: false,
        complete,
        replay_only: false,
        finish_asked: false,
    })
}

/// Follows `run_id` on a single node: subscribes to the hub, then replays its
/// buffer after `after_seq`.
pub fn follow_local(hub: &LocalEventHub, run_id: &RunId, after_seq: Option<u64>) -> RunFollow {
    let subscription = hub.subscribe(run_id);
    let replay = hub.buffers().replay(run_id, after_seq);
    RunFollow {
        run_id: run_id.clone(),
        backlog: replay.events.into(),
        live: Live::Local(subscription),
        last_seq: after_seq,
        ended: false,
        complete: replay.complete,
        replay_only: false,
        finish_asked: false,
    }
}

/// What `catch_up` finds after `last_seq`; a failed probe finds nothing (the
/// next gap or quiet spell asks again).
async fn catch_up_after(catch_up: &CatchUp, last_seq: Option<u64>) -> Missed {
    match catch_up.missed(last_seq).await {
        Ok(missed) => missed,
        Err(error) => {
            tracing::debug!(%error, "missed run events not asked for");
            Missed {
                events: Vec::new(),
                complete: true,
            }
        }
    }
}

impl RunFollow {
    /// Whether every event after the requested `seq` was still buffered when this
    /// follow came to it; when not, some are missing (read the thread's messages
    /// from the store).
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// Stops after the buffered events instead of waiting for live ones (but for
    /// a `RunFinish` in flight, `FINISH_GRACE` at most): for a run that is not
    /// executing, whose buffer may no longer hold its `RunFinish`.
    pub fn replay_only(mut self) -> Self {
        self.replay_only = true;
        self
    }

    /// Drops the buffered events and waits only for new ones: for following what a
    /// decision about to be sent resumes, after an activation that already ended.
    pub fn skip_backlog(mut self) -> Self {
        if let Some(last) = self.backlog.back() {
            self.last_seq = Some(last.seq);
        }
        self.backlog.clear();
        self
    }

    /// Starts at the latest activation in the buffer (a resumed run's first
    /// activations ended with their own `RunFinish`): what a client that missed the
    /// whole current activation replays.
    pub fn from_last_activation(mut self) -> Self {
        let ends: Vec<usize> = self
            .backlog
            .iter()
            .enumerate()
            .filter(|(_, event)| matches!(event.event, AgentEvent::RunFinish { .. }))
            .map(|(index, _)| index)
            .collect();
        let last = self.backlog.len().checked_sub(1);
        // A backlog that ends with a `RunFinish` replays that (latest) activation.
        let skip_through = match ends.as_slice() {
            [.., before, end] if Some(*end) == last => Some(*before),
            [.., end] if Some(*end) != last => Some(*end),
            _ => None,
        };
        if let Some(index) = skip_through {
            let skipped: Vec<Arc<StreamEvent>> = self.backlog.drain(..=index).collect();
            self.last_seq = skipped.last().map(|event| event.seq);
        }
        self
    }

    /// The `seq` of the last event returned (or skipped); `None` before any.
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    /// The run being followed.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The next event (the copy the node's buffer shares); `None` after the
    /// activation's `RunFinish` or when the connection closed.
    pub async fn next(&mut self) -> Option<Arc<StreamEvent>> {
        while !self.ended {
            let event = match self.backlog.pop_front() {
                Some(event) => event,
                // A run whose record says it ended publishes its `RunFinish` just
                // after that record is written: a snapshot of the buffer taken in
                // between lacks it, so live events are still taken for a moment.
                None if self.replay_only => {
                    match tokio::time::timeout(FINISH_GRACE, self.next_live()).await {
                        Ok(Some(())) => continue,
                        Ok(None) => return None,
                        // Once: the run's end as its owner or record has it.
                        Err(_) if !self.finish_asked && self.ask_for_finish().await => continue,
                        Err(_) => return None,
                    }
                }
                None => {
                    self.next_live().await?;
                    continue;
                }
            };
            if let Some(event) = self.take(event) {
                return Some(event);
            }
        }
        None
    }

    /// What `next` gives when that is at hand without waiting: `None` while the
    /// next event has not arrived, `Some(None)` after the end. A stream writer
    /// gathers the events already there into one chunk with it; on this node's
    /// hub it is a plain `try_recv`, with no future built and no waker taken.
    pub fn next_ready(&mut self) -> Option<Option<Arc<StreamEvent>>> {
        while !self.ended {
            let event = match self.backlog.pop_front() {
                Some(event) => event,
                None if self.replay_only => return self.next().now_or_never(),
                None => match &mut self.live {
                    Live::Local(subscription) => {
                        match subscription.try_read(self.last_seq, &mut self.backlog) {
                            Some(fed) => {
                                self.fed(fed);
                                continue;
                            }
                            None => return None,
                        }
                    }
                    // A NATS subscription has no `try_recv`: poll `next` once.
                    Live::Nats(..) => return self.next().now_or_never(),
                },
            };
            if let Some(event) = self.take(event) {
                return Some(Some(event));
            }
        }
        Some(None)
    }

    /// `event` unless it was already returned (its `seq` is not past the last);
    /// notes the end of the activation.
    fn take(&mut self, event: Arc<StreamEvent>) -> Option<Arc<StreamEvent>> {
        if self.last_seq.is_some_and(|last| event.seq <= last) {
            return None;
        }
        self.last_seq = Some(event.seq);
        self.ended = matches!(event.event, AgentEvent::RunFinish { .. });
        Some(event)
    }

    /// For a run that is not executing and whose buffered events did not end
    /// with its `RunFinish` (its owner changed, or its buffer was evicted): asks
    /// the owner again, or reads the end from the run's record. Whether that
    /// found anything; a follow on this node's hub has nowhere else to ask.
    async fn ask_for_finish(&mut self) -> bool {
        self.finish_asked = true;
        let Live::Nats(_, catch_up) = &self.live else {
            return false;
        };
        let missed = catch_up_after(catch_up, self.last_seq).await;
        self.complete &= missed.complete;
        let found = !missed.events.is_empty();
        self.backlog.extend(missed.events);
        found
    }

    /// Notes what a read of this node's buffer lost: events that left the buffer
    /// before they were read.
    fn fed(&mut self, fed: Fed) {
        self.complete &= !fed.missed;
    }

    /// Reads what arrived live into the backlog (a message's events, or a read
    /// of this node's buffer; an unreadable message adds nothing); `None` when
    /// the source closed. On NATS, what a gap in `seq` or a quiet spell of
    /// [`QUIET_PROBE`] may have lost is asked for first.
    async fn next_live(&mut self) -> Option<()> {
        match &mut self.live {
            Live::Nats(subscriber, catch_up) => {
                let arrived = tokio::select! {
                    message = subscriber.next() => message?,
                    () = tokio::time::sleep(QUIET_PROBE) => {
                        let missed = catch_up_after(catch_up, self.last_seq).await;
                        self.complete &= missed.complete;
                        self.backlog.extend(missed.events);
                        return Some(());
                    }
                };
                let events = match decode_events(&arrived.payload) {
                    Ok(events) => events,
                    Err(error) => {
                        tracing::debug!(%error, "unreadable run events skipped");
                        return Some(());
                    }
                };
                let first = events.first().map(|event| event.seq);
                if let (Some(first), Some(last)) = (first, self.last_seq)
                    && first > last.saturating_add(1)
                {
                    let missed = catch_up_after(catch_up, self.last_seq).await;
                    self.complete &= missed.complete;
                    self.backlog.extend(missed.events);
                }
                self.backlog.extend(events.into_iter().map(Arc::new));
                Some(())
            }
            Live::Local(subscription) => {
                let fed = subscription.read(self.last_seq, &mut self.backlog).await;
                self.fed(fed);
                Some(())
            }
        }
    }
}
