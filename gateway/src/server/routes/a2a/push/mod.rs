//! Push notifications: per-task configs, and a watcher per task that POSTs every
//! state change to each config's URL, retrying failed deliveries.
//!
//! Configs live in this gateway's memory, and the watcher follows the task's run
//! from here wherever the run executes (a cluster's events reach every node).

use std::sync::Arc;
use std::time::Duration;

use awaken_actors::{RunId, ThreadId};
use dashmap::DashMap;
use reqwest::header::AUTHORIZATION;

use super::error::A2aError;
use super::push_target::PushTargets;
use super::stream::TaskStream;
use super::wire::{PushConfigInput, StreamResponse, Task, TaskPushNotificationConfig};
use crate::server::state::AppState;

/// The header carrying a config's token, so the receiver can tell real notifications.
pub(crate) const TOKEN_HEADER: &str = "X-A2A-Notification-Token";
/// The most configs one task may have.
const MAX_CONFIGS_PER_TASK: usize = 16;
/// The longest URL accepted.
const MAX_URL_LEN: usize = 2048;
/// Delivery attempts per notification and config.
const ATTEMPTS: u32 = 4;
/// The wait before the first retry; each retry waits four times longer.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// How long one delivery attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Push notification configs and their watchers.
pub(crate) struct PushNotifications {
    configs: DashMap<String, Vec<TaskPushNotificationConfig>>,
    watchers: DashMap<String, tokio::task::AbortHandle>,
    client: reqwest::Client,
    /// Where URLs may point.
    targets: PushTargets,
}

impl std::fmt::Debug for PushNotifications {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushNotifications")
            .field("tasks", &self.configs.len())
            .finish_non_exhaustive()
    }
}

impl PushNotifications {
    /// Push notifications to public hosts and `allowed_hosts`.
    pub(crate) fn new(allowed_hosts: &[String]) -> Self {
        let targets = PushTargets::new(allowed_hosts);
        Self {
            configs: DashMap::new(),
            watchers: DashMap::new(),
            // Every connection resolves through the policy, and a redirect could
            // point anywhere, so none is followed.
            client: reqwest::Client::builder()
                .timeout(ATTEMPT_TIMEOUT)
                .dns_resolver(targets.resolver())
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
            targets,
        }
    }

    /// Stores a config for `task` and makes sure a watcher delivers its changes.
    pub(crate) async fn create(
        self: &Arc<Self>,
        state: &AppState,
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
        let config = TaskPushNotificationConfig {
            id: input
                .id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
            task_id: task.id.clone(),
            tenant: input.tenant.filter(|tenant| !tenant.is_empty()),
            url: input.url,
            token: input.token.filter(|token| !token.is_empty()),
            authentication: input.authentication,
        };
        {
            let mut configs = self.configs.entry(task.id.clone()).or_default();
            let existing = configs.iter().position(|existing| existing.id == config.id);
            match existing {
                Some(index) => configs[index] = config.clone(),
                None if configs.len() >= MAX_CONFIGS_PER_TASK => {
                    return Err(A2aError::InvalidParams(format!(
                        "task `{}` has {MAX_CONFIGS_PER_TASK} push configs already",
                        task.id
                    )));
                }
                None => configs.push(config.clone()),
            }
        }
        if !task.status.state.is_terminal() {
            self.watch(state, task);
        }
        Ok(config)
    }

    /// Refuses a URL that is too long, not http(s), or points at an internal
    /// host (see `push_target`); checked before a task is started with it.
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
    pub(crate) fn get(
        &self,
        task_id: &str,
        config_id: &str,
    ) -> Result<TaskPushNotificationConfig, A2aError> {
        self.configs
            .get(task_id)
            .and_then(|configs| configs.iter().find(|c| c.id == config_id).cloned())
            .ok_or_else(|| unknown_config(task_id, config_id))
    }

    /// Every config of `task_id`.
    pub(crate) fn list(&self, task_id: &str) -> Vec<TaskPushNotificationConfig> {
        self.configs
            .get(task_id)
            .map(|configs| configs.clone())
            .unwrap_or_default()
    }

    /// Removes one config; the task's watcher stops with its last config.
    pub(crate) fn delete(&self, task_id: &str, config_id: &str) -> Result<(), A2aError> {
        let removed = match self.configs.get_mut(task_id) {
            Some(mut configs) => {
                let before = configs.len();
                configs.retain(|config| config.id != config_id);
                before != configs.len()
            }
            None => false,
        };
        if !removed {
            return Err(unknown_config(task_id, config_id));
        }
        if self
            .configs
            .remove_if(task_id, |_, configs| configs.is_empty())
            .is_some()
            && let Some((_, watcher)) = self.watchers.remove(task_id)
        {
            watcher.abort();
        }
        Ok(())
    }

    /// Starts the task's watcher unless one runs.
    fn watch(self: &Arc<Self>, state: &AppState, task: &Task) {
        let (Ok(run_id), Ok(thread_id)) = (
            RunId::new(task.id.as_str()),
            ThreadId::new(task.context_id.as_str()),
        ) else {
            return;
        };
        let entry = self.watchers.entry(task.id.clone());
        if let dashmap::Entry::Occupied(existing) = &entry
            && !existing.get().is_finished()
        {
            return;
        }
        let push = Arc::clone(self);
        let stream = TaskStream::watching(task);
        let handle = tokio::spawn(push.run_watcher(state.clone(), thread_id, run_id, stream));
        entry.insert(handle.abort_handle());
    }

    /// Follows the run activation by activation until it ends, delivering every
    /// status change.
    async fn run_watcher(
        self: Arc<Self>,
        state: AppState,
        thread_id: ThreadId,
        run_id: RunId,
        mut stream: TaskStream,
    ) {
        let mut after = None;
        loop {
            let follow = match state.control.follow(&thread_id, &run_id, after).await {
                Ok(follow) if after.is_none() => follow.skip_backlog(),
                Ok(follow) => follow,
                Err(error) => {
                    tracing::warn!(%run_id, %error, "push notifications: cannot follow the task");
                    return;
                }
            };
            let mut follow = follow;
            while let Some(event) = follow.next().await {
                let snapshot = match &event.event {
                    awaken_actors::contract::AgentEvent::RunFinish { .. } => state
                        .control
                        .store()
                        .load_thread_snapshot(&thread_id)
                        .await
                        .ok()
                        .flatten(),
                    _ => None,
                };
                for item in stream.items(&event, snapshot.as_ref()) {
                    if matches!(item, StreamResponse::StatusUpdate(_)) {
                        self.deliver(run_id.as_str(), &item).await;
                    }
                }
            }
            after = follow.last_seq().or(after);
            if stream.state().is_terminal() {
                self.watchers.remove(run_id.as_str());
                return;
            }
            if after.is_none() {
                // Nothing was ever seen: the follow closed without events (the
                // node is shutting down).
                return;
            }
        }
    }

    /// Sends `item` to every config of the task, all at once, each with retries.
    async fn deliver(&self, task_id: &str, item: &StreamResponse) {
        let configs = self.list(task_id);
        let deliveries = configs
            .iter()
            .map(|config| deliver_one(&self.client, config, item));
        futures::future::join_all(deliveries).await;
    }
}

async fn deliver_one(
    client: &reqwest::Client,
    config: &TaskPushNotificationConfig,
    item: &StreamResponse,
) {
    let mut backoff = FIRST_BACKOFF;
    for attempt in 1..=ATTEMPTS {
        let mut request = client.post(&config.url).json(item);
        if let Some(token) = &config.token {
            request = request.header(TOKEN_HEADER, token);
        }
        if let Some(auth) = &config.authentication
            && let Some(credentials) = &auth.credentials
        {
            request = request.header(AUTHORIZATION, format!("{} {credentials}", auth.scheme));
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => return,
            Ok(response) => {
                tracing::debug!(url = %config.url, status = %response.status(), attempt, "push notification refused");
            }
            Err(error) => {
                tracing::debug!(url = %config.url, %error, attempt, "push notification not delivered");
            }
        }
        if attempt < ATTEMPTS {
            tokio::time::sleep(backoff).await;
            backoff *= 4;
        }
    }
    tracing::warn!(url = %config.url, task_id = %config.task_id, "push notification dropped after {ATTEMPTS} attempts");
}

fn unknown_config(task_id: &str, config_id: &str) -> A2aError {
    A2aError::InvalidParams(format!(
        "task `{task_id}` has no push notification config `{config_id}`"
    ))
}
