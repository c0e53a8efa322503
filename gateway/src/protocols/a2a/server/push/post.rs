//! Sending one notification to one config's URL: tries with doubling waits in
//! between, until it is taken, the tries run out, or the lease is lost.

use std::time::Duration;

use awaken_actors::backoff::Backoff;
use reqwest::header::AUTHORIZATION;
use tokio::sync::watch;

use super::target::PushTargets;
use crate::protocols::a2a::wire::{StreamResponse, TaskPushNotificationConfig};
use crate::server::config::A2aPushConfig;

/// The header carrying a config's token, so the receiver can tell real notifications.
const TOKEN_HEADER: &str = "X-A2A-Notification-Token";

/// How a notification's sending ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sent {
    /// The receiver answered 2xx.
    Delivered,
    /// Every try failed; the last failure.
    GaveUp { attempts: u32, error: String },
    /// This node lost the webhook's lease: another node sends it now.
    LeaseLost,
}

/// The HTTP client of push notifications and its retry policy.
pub(super) struct Sender {
    client: reqwest::Client,
    attempts: u32,
    first_backoff: Duration,
    max_backoff: Duration,
}

impl Sender {
    /// A client that resolves every host through `targets` and follows no
    /// redirect (one could point anywhere).
    pub(super) fn new(targets: &PushTargets, settings: &A2aPushConfig) -> Self {
        Self {
            client: reqwest::Client::builder()
                .timeout(Duration::from_millis(settings.attempt_timeout_ms))
                .dns_resolver(targets.resolver())
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
            attempts: settings.attempts,
            first_backoff: Duration::from_millis(settings.first_backoff_ms),
            max_backoff: Duration::from_millis(settings.max_backoff_ms),
        }
    }

    /// Sends `item` to `config`'s URL, retrying while `lost` stays false.
    pub(super) async fn send(
        &self,
        config: &TaskPushNotificationConfig,
        item: &StreamResponse,
        lost: &mut watch::Receiver<bool>,
    ) -> Sent {
        let mut backoff = Backoff::new(self.first_backoff, self.max_backoff);
        let mut error = String::new();
        for attempt in 1..=self.attempts {
            if *lost.borrow() {
                return Sent::LeaseLost;
            }
            let tried = tokio::select! {
                tried = self.try_once(config, item) => tried,
                _ = lost.wait_for(|lost| *lost) => return Sent::LeaseLost,
            };
            error = match tried {
                Ok(()) => return Sent::Delivered,
                Err(error) => error,
            };
            // Not the URL: a webhook URL is often its own secret (a token in the path).
            tracing::debug!(task_id = %config.task_id, webhook = %config.id, attempt, %error, "push notification not delivered");
            if attempt < self.attempts {
                tokio::select! {
                    () = backoff.wait() => {}
                    _ = lost.wait_for(|lost| *lost) => return Sent::LeaseLost,
                }
            }
        }
        Sent::GaveUp {
            attempts: self.attempts,
            error,
        }
    }

    async fn try_once(
        &self,
        config: &TaskPushNotificationConfig,
        item: &StreamResponse,
    ) -> Result<(), String> {
        let mut request = self.client.post(&config.url).json(item);
        if let Some(token) = &config.token {
            request = request.header(TOKEN_HEADER, token);
        }
        if let Some(auth) = &config.authentication
            && let Some(credentials) = &auth.credentials
        {
            request = request.header(AUTHORIZATION, format!("{} {credentials}", auth.scheme));
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(format!("the receiver answered {}", response.status())),
            // Without the URL: it is in the config, and may carry a query secret.
            Err(error) => Err(error.without_url().to_string()),
        }
    }
}
