//! Delivering one webhook: its run's events, read from the last delivered one on
//! (the owner replays what it buffers, then they come live), become the task's
//! status changes, each sent and then recorded, until the task ends.
//!
//! Where the run's buffer no longer reaches back to the last delivered event (the
//! owner changed, or a long answer pushed the events out), the task's stored
//! status stands in for what was missed: the receiver gets the current state
//! rather than every state in between.

use std::sync::Arc;
use std::time::Duration;

use awaken_actors::clock::now_ms;
use awaken_actors::contract::AgentEvent;
use awaken_actors::store::Webhook;
use awaken_actors::{JsonValue, RunId, ThreadId};
use awaken_cluster::events::RunFollow;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

use super::PushNotifications;
use super::lease::Lease;
use super::post::Sent;
use crate::protocols::a2a::server::stream::TaskStream;
use crate::protocols::a2a::server::task::{rfc3339, task_of};
use crate::protocols::a2a::wire::{StreamResponse, TaskState, TaskStatusUpdateEvent};

/// The wait before following a run again after a follow that could not start
/// or closed without an event (the owner is changing, the node is stopping).
const REFOLLOW_WAIT: Duration = Duration::from_secs(1);

/// How far a webhook's delivery got: what its store record keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Progress {
    /// The last event of the run read and acted on.
    seq: Option<u64>,
    /// The state the receiver knows: the last one delivered (or the task's when
    /// the config was made).
    state: TaskState,
}

impl Progress {
    /// Nothing read yet; the receiver knows the task in `state`.
    pub(super) fn from_state(state: TaskState) -> Self {
        Self { seq: None, state }
    }

    /// As stored.
    pub(super) fn to_json(self) -> JsonValue {
        serde_json::to_value(self).unwrap_or(JsonValue::Null)
    }
}

/// Why a delivery stopped before the task ended.
#[derive(Debug)]
enum Stop {
    /// Another node delivers it now, or it was deleted.
    LeaseLost,
    /// The store failed; the lease runs out and a sweep tries again.
    Store(String),
}

/// One webhook's delivery, on the node holding its lease.
pub(super) struct Delivery {
    push: Arc<PushNotifications>,
    webhook: Webhook,
    progress: Progress,
    lease: Lease,
    lost: watch::Receiver<bool>,
}

impl Delivery {
    /// The delivery of a webhook this node just claimed.
    pub(super) fn new(push: Arc<PushNotifications>, webhook: Webhook) -> Self {
        let progress = serde_json::from_value(webhook.progress.clone())
            .unwrap_or(Progress::from_state(TaskState::Submitted));
        let lease = Lease::hold(
            push.store(),
            (webhook.run_id.clone(), webhook.id.clone()),
            push.holder.clone(),
            Duration::from_millis(push.settings.lease_ms),
            webhook.progress.clone(),
            push.stopping.clone(),
        );
        let lost = lease.lost();
        Self {
            push,
            webhook,
            progress,
            lease,
            lost,
        }
    }

    /// Delivers until the task ends, the lease is lost or the store fails.
    pub(super) async fn run(mut self) {
        let key = (self.webhook.run_id.clone(), self.webhook.id.clone());
        match self.deliver().await {
            Ok(()) => {}
            Err(Stop::LeaseLost) => {
                tracing::debug!(run_id = %key.0, webhook = %key.1, "push delivery handed to another node");
            }
            Err(Stop::Store(error)) => {
                tracing::warn!(run_id = %key.0, webhook = %key.1, %error, "push delivery stopped: the store failed");
            }
        }
        // The lease goes before the delivery says it ended: a stopping node
        // waits for that.
        drop(self.lease);
        self.push.running.remove(&key);
        self.push.ended.notify_waiters();
    }

    async fn deliver(&mut self) -> Result<(), Stop> {
        let (thread_id, run_id) = (self.webhook.thread_id.clone(), self.webhook.run_id.clone());
        while !self.progress.state.is_terminal() {
            let Some(mut follow) = self.follow(&thread_id, &run_id).await? else {
                self.pause(REFOLLOW_WAIT).await?;
                continue;
            };
            let mut stream = TaskStream::watching(
                run_id.to_string(),
                thread_id.to_string(),
                self.progress.state,
            );
            if !follow.complete() {
                follow = follow.skip_backlog();
                self.catch_up(&thread_id, &run_id, follow.last_seq())
                    .await?;
                if self.progress.state.is_terminal() {
                    break;
                }
                stream = TaskStream::watching(
                    run_id.to_string(),
                    thread_id.to_string(),
                    self.progress.state,
                );
            }
            let mut seen = false;
            while let Some(event) = self.next(&mut follow).await? {
                seen = true;
                let snapshot = match event.event {
                    AgentEvent::RunFinish { .. } => self
                        .push
                        .store()
                        .load_thread_snapshot(&thread_id)
                        .await
                        .map_err(|e| Stop::Store(e.to_string()))?,
                    _ => None,
                };
                for item in stream.items(&event, snapshot.as_ref()) {
                    if let StreamResponse::StatusUpdate(update) = item {
                        self.notify(update, Some(event.seq)).await?;
                    }
                }
            }
            if !seen && !self.progress.state.is_terminal() {
                self.pause(REFOLLOW_WAIT).await?;
            }
        }
        // The final state's notification recorded the delivery as done.
        Ok(())
    }

    /// Follows the run after the last event acted on; `None` when that cannot
    /// start now.
    async fn follow(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
    ) -> Result<Option<RunFollow>, Stop> {
        match self
            .push
            .control
            .follow(thread_id, run_id, self.progress.seq)
            .await
        {
            Ok(follow) => Ok(Some(follow)),
            Err(error) => {
                tracing::debug!(%run_id, %error, "push delivery cannot follow the run yet");
                Ok(None)
            }
        }
    }

    /// The follow's next event, unless the lease is lost first.
    async fn next(
        &mut self,
        follow: &mut RunFollow,
    ) -> Result<Option<Arc<awaken_actors::contract::StreamEvent>>, Stop> {
        tokio::select! {
            event = follow.next() => Ok(event),
            _ = self.lost.wait_for(|lost| *lost) => Err(Stop::LeaseLost),
        }
    }

    /// Waits `wait`, unless the lease is lost first.
    async fn pause(&mut self, wait: Duration) -> Result<(), Stop> {
        tokio::select! {
            () = tokio::time::sleep(wait) => Ok(()),
            _ = self.lost.wait_for(|lost| *lost) => Err(Stop::LeaseLost),
        }
    }

    /// Sends the task's stored status when it is not the one the receiver knows:
    /// what stands in for events the run's buffer no longer has.
    async fn catch_up(
        &mut self,
        thread_id: &ThreadId,
        run_id: &RunId,
        seq: Option<u64>,
    ) -> Result<(), Stop> {
        let store = self.push.store();
        let store_error = |e: awaken_actors::error::StorageError| Stop::Store(e.to_string());
        let Some(record) = store.load_run(run_id).await.map_err(store_error)? else {
            // Accepted but not started yet: its first events are still to come.
            return Ok(());
        };
        let messages = store
            .load_thread_snapshot(thread_id)
            .await
            .map_err(store_error)?
            .map(|snapshot| snapshot.messages)
            .unwrap_or_default();
        let status = task_of(&record, &messages, Some(0)).status;
        // A second wait for input may carry a new question: it is sent again.
        if status.state == self.progress.state && !status.state.is_interrupted() {
            return Ok(());
        }
        let update = TaskStatusUpdateEvent {
            task_id: run_id.to_string(),
            context_id: thread_id.to_string(),
            status: crate::protocols::a2a::wire::TaskStatus {
                timestamp: status.timestamp.or_else(|| Some(rfc3339(now_ms() / 1000))),
                ..status
            },
            metadata: None,
        };
        self.notify(update, seq).await
    }

    /// Sends one status change, then records it (or its dead letter).
    async fn notify(
        &mut self,
        update: TaskStatusUpdateEvent,
        seq: Option<u64>,
    ) -> Result<(), Stop> {
        let state = update.status.state;
        let item = StreamResponse::StatusUpdate(update);
        let config = self.config().await?;
        let sent = self.push.sender.send(&config, &item, &mut self.lost).await;
        let dead_letter = match sent {
            Sent::Delivered => None,
            Sent::LeaseLost => return Err(Stop::LeaseLost),
            Sent::GaveUp { attempts, error } => {
                tracing::warn!(task_id = %config.task_id, webhook = %config.id, attempts, %error, "push notification given up on: recorded as a dead letter");
                Some(json!({
                    "notification": item,
                    "attempts": attempts,
                    "error": error,
                    "at": now_ms(),
                }))
            }
        };
        self.progress = Progress {
            seq: seq.or(self.progress.seq),
            state,
        };
        self.record(state.is_terminal(), dead_letter).await
    }

    /// The webhook's config as stored now (it may have been replaced).
    async fn config(
        &self,
    ) -> Result<crate::protocols::a2a::wire::TaskPushNotificationConfig, Stop> {
        let webhooks = self
            .push
            .store()
            .webhooks()
            .load_webhooks(&self.webhook.run_id)
            .await
            .map_err(|e| Stop::Store(e.to_string()))?;
        let webhook = webhooks
            .iter()
            .find(|webhook| webhook.id == self.webhook.id)
            .ok_or(Stop::LeaseLost)?;
        super::config_of(webhook).map_err(|e| Stop::Store(format!("unreadable config: {e}")))
    }

    async fn record(&self, done: bool, dead_letter: Option<JsonValue>) -> Result<(), Stop> {
        match self
            .lease
            .record(self.progress.to_json(), done, dead_letter)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(Stop::LeaseLost),
            Err(error) => Err(Stop::Store(error)),
        }
    }
}
