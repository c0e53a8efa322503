//! Push notifications: a task's configs, kept in the thread store as webhooks on
//! the task's run (every node sees them, they survive restarts), and their
//! delivery: every status change of the task POSTed to each config's URL, at least
//! once and in order, by one node at a time (`lease`), from the run's events
//! (`delivery`), with retries and a dead letter after the last (`post`).
//!
//! The node that stores a config claims it at once; every node also sweeps the
//! store for webhooks whose lease ran out (their node died), so another one goes
//! on where delivery stopped.

mod delivery;
mod lease;
mod post;
mod target;

use std::sync::{Arc, Weak};
use std::time::Duration;

use awaken_actors::clock::now_ms;
use awaken_actors::store::{ThreadRunStore, Webhook, WebhookClaim};
use awaken_actors::{RunId, ThreadId, WebhookId};
use awaken_cluster::RunControl;
use dashmap::DashMap;
use tokio::sync::watch;

use super::error::A2aError;
use crate::protocols::a2a::wire::{PushConfigInput, Task, TaskPushNotificationConfig};
use crate::server::config::A2aPushConfig;
use delivery::{Delivery, Progress};
use post::Sender;
use target::PushTargets;

/// The most configs one task may have.
const MAX_CONFIGS_PER_TASK: usize = 16;
/// The longest URL accepted.
const MAX_URL_LEN: usize = 2048;
/// Webhooks one sweep claims at a time (it claims again while it gets this many).
const CLAIM_BATCH: usize = 64;

/// Push notification configs and the deliveries this node runs.
pub(crate) struct PushNotifications {
    control: Arc<dyn RunControl>,
    settings: A2aPushConfig,
    sender: Sender,
    /// Where URLs may point.
    targets: PushTargets,
    /// This process's name on the leases it holds.
    holder: String,
    /// Turns true when the node starts stopping: deliveries hand their leases back.
    stopping: watch::Receiver<bool>,
    running: DashMap<(RunId, WebhookId), tokio::task::AbortHandle>,
    /// Told whenever a delivery of this node ends.
    ended: tokio::sync::Notify,
}

impl std::fmt::Debug for PushNotifications {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushNotifications")
            .field("holder", &self.holder)
            .field("delivering", &self.running.len())
            .finish_non_exhaustive()
    }
}

impl PushNotifications {
    /// Push notifications to public hosts and `allowed_hosts`, delivered as
    /// `settings` say until `stopping` turns true.
    pub(crate) fn new(
        control: Arc<dyn RunControl>,
        allowed_hosts: &[String],
        settings: A2aPushConfig,
        stopping: watch::Receiver<bool>,
    ) -> Arc<Self> {
        let targets = PushTargets::new(allowed_hosts);
        Arc::new(Self {
            control,
            sender: Sender::new(&targets, &settings),
            settings,
            targets,
            holder: uuid::Uuid::now_v7().to_string(),
            stopping,
            running: DashMap::new(),
            ended: tokio::sync::Notify::new(),
        })
    }

    /// Claims, every `sweep_interval_ms` until the node starts stopping, the
    /// webhooks nobody delivers (their node died or stopped) and delivers them
    /// from here.
    pub(crate) fn start_sweeping(self: &Arc<Self>) {
        let mut stopping = self.stopping.clone();
        let push: Weak<Self> = Arc::downgrade(self);
        let every = Duration::from_millis(self.settings.sweep_interval_ms);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = stopping.wait_for(|stopping| *stopping) => return,
                }
                let Some(push) = push.upgrade() else { return };
                push.claim_and_deliver(None).await;
            }
        });
    }

    /// Waits (up to `within`) until every delivery of this node ended, once the
    /// node started stopping: each hands its lease back as it ends, and the node
    /// must not leave before those writes are in.
    pub(crate) async fn handed_back(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let ended = self.ended.notified();
            if self.running.is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                tracing::warn!(
                    deliveries = self.running.len(),
                    "push deliveries still running at shutdown: their leases run out instead"
                );
                return;
            }
        }
    }

    /// Stores a config for `task` and starts delivering its changes from here.
    pub(crate) async fn create(
        self: &Arc<Self>,
        task: &Task,
        input: PushConfigInput,
    ) -> Result<TaskPushNotificationConfig, A2aError> {
        self.check_url(&input.url).await?;
        if let Some(named) = &input.task_id
            && !named.is_empty()
            && *named != task.id
        {
            return Err(A2aError::InvalidParams(format!(
                "the config names task `{named}` but the request is for `{}`",
                task.id
            )));
        }
        let id = match input.id.filter(|id| !id.is_empty()) {
            Some(id) => WebhookId::new(id)
                .map_err(|e| A2aError::InvalidParams(format!("config id: {e}")))?,
            None => WebhookId::generate(),
        };
        let (run_id, thread_id) = task_ids(task)?;
        let config = TaskPushNotificationConfig {
            id: id.to_string(),
            task_id: task.id.clone(),
            tenant: input.tenant.filter(|tenant| !tenant.is_empty()),
            url: input.url,
            token: input.token.filter(|token| !token.is_empty()),
            authentication: input.authentication,
        };
        let webhook = Webhook {
            run_id: run_id.clone(),
            thread_id,
            id,
            config: serde_json::to_value(&config).map_err(|e| internal("encode", &e))?,
            progress: Progress::from_state(task.status.state).to_json(),
            // Changes of a task that already ended will not come.
            done: task.status.state.is_terminal(),
            dead_letters: Vec::new(),
            created_at: now_ms(),
        };
        let stored = self
            .store()
            .webhooks()
            .put_webhook(webhook, MAX_CONFIGS_PER_TASK)
            .await
            .map_err(|e| match e {
                awaken_actors::error::StorageError::InvalidInput(_) => {
                    A2aError::InvalidParams(format!(
                        "task `{}` has {MAX_CONFIGS_PER_TASK} push configs already",
                        task.id
                    ))
                }
                other => internal("store", &other),
            })?;
        if !stored.done {
            self.claim_and_deliver(Some(run_id)).await;
        }
        Ok(config)
    }

    /// Refuses a URL that is too long, not http(s), or points at an internal
    /// host (see `target`); checked before a task is started with it.
    pub(crate) async fn check_url(&self, url: &str) -> Result<(), A2aError> {
        if url.len() > MAX_URL_LEN {
            return Err(A2aError::InvalidParams(format!(
                "the url is longer than {MAX_URL_LEN} bytes"
            )));
        }
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| A2aError::InvalidParams(format!("url `{url}`: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(A2aError::InvalidParams(format!(
                "url `{url}` is not http(s)"
            )));
        }
        self.targets
            .check(&parsed)
            .await
            .map_err(A2aError::InvalidParams)
    }

    /// One config of `task_id`.
    pub(crate) async fn get(
        &self,
        task_id: &str,
        config_id: &str,
    ) -> Result<TaskPushNotificationConfig, A2aError> {
        self.list(task_id)
            .await?
            .into_iter()
            .find(|config| config.id == config_id)
            .ok_or_else(|| unknown_config(task_id, config_id))
    }

    /// Every config of `task_id`, oldest first.
    pub(crate) async fn list(
        &self,
        task_id: &str,
    ) -> Result<Vec<TaskPushNotificationConfig>, A2aError> {
        let Ok(run_id) = RunId::new(task_id) else {
            return Ok(Vec::new());
        };
        let webhooks = self
            .store()
            .webhooks()
            .load_webhooks(&run_id)
            .await
            .map_err(|e| internal("store", &e))?;
        Ok(webhooks
            .iter()
            .filter_map(|webhook| config_of(webhook).ok())
            .collect())
    }

    /// Removes one config; its delivery stops.
    pub(crate) async fn delete(&self, task_id: &str, config_id: &str) -> Result<(), A2aError> {
        let (Ok(run_id), Ok(id)) = (RunId::new(task_id), WebhookId::new(config_id)) else {
            return Err(unknown_config(task_id, config_id));
        };
        let removed = self
            .store()
            .webhooks()
            .delete_webhook(&run_id, &id)
            .await
            .map_err(|e| internal("store", &e))?;
        if !removed {
            return Err(unknown_config(task_id, config_id));
        }
        // A delivery on another node stops at its next renewal or notification.
        if let Some((_, delivery)) = self.running.remove(&(run_id, id)) {
            delivery.abort();
        }
        Ok(())
    }

    /// Claims the free webhooks (of `run_id` only, when given) and delivers them
    /// from here.
    async fn claim_and_deliver(self: &Arc<Self>, run_id: Option<RunId>) {
        loop {
            let now = now_ms();
            let claim = WebhookClaim {
                holder: self.holder.clone(),
                now_ms: now,
                until_ms: now.saturating_add(self.settings.lease_ms),
                limit: CLAIM_BATCH,
                run_id: run_id.clone(),
            };
            let claimed = match self.store().webhooks().claim_webhooks(&claim).await {
                Ok(claimed) => claimed,
                Err(error) => {
                    tracing::warn!(%error, "push notifications: claiming webhooks failed");
                    return;
                }
            };
            let more = claimed.len() == CLAIM_BATCH;
            for webhook in claimed {
                self.deliver(webhook);
            }
            if !more {
                return;
            }
        }
    }

    /// Starts delivering a webhook this node just claimed.
    fn deliver(self: &Arc<Self>, webhook: Webhook) {
        if *self.stopping.borrow() {
            return;
        }
        let key = (webhook.run_id.clone(), webhook.id.clone());
        let entry = self.running.entry(key);
        if let dashmap::Entry::Occupied(existing) = &entry
            && !existing.get().is_finished()
        {
            return;
        }
        let delivery = Delivery::new(Arc::clone(self), webhook);
        let handle = tokio::spawn(delivery.run());
        entry.insert(handle.abort_handle());
    }

    fn store(&self) -> Arc<dyn ThreadRunStore> {
        self.control.store()
    }
}

/// The config a webhook holds.
fn config_of(webhook: &Webhook) -> Result<TaskPushNotificationConfig, serde_json::Error> {
    serde_json::from_value(webhook.config.clone())
}

/// The run and thread a task is.
fn task_ids(task: &Task) -> Result<(RunId, ThreadId), A2aError> {
    match (
        RunId::new(task.id.as_str()),
        ThreadId::new(task.context_id.as_str()),
    ) {
        (Ok(run_id), Ok(thread_id)) => Ok((run_id, thread_id)),
        _ => Err(A2aError::TaskNotFound(task.id.clone())),
    }
}

/// A failure of this node, logged in full and told to the client in short.
fn internal(what: &str, error: &dyn std::fmt::Display) -> A2aError {
    tracing::warn!(%error, "push notifications: {what} failed");
    A2aError::Internal(format!(
        "push notification configs are unavailable ({what})"
    ))
}

fn unknown_config(task_id: &str, config_id: &str) -> A2aError {
    A2aError::InvalidParams(format!(
        "task `{task_id}` has no push notification config `{config_id}`"
    ))
}
