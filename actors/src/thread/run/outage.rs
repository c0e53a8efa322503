//! A run waiting out a store outage (decision 0086): a checkpoint the store could
//! not take because it was away (a restart, a failover) is tried again with
//! back-off until `store_outage_timeout`, and the run's events say that it waits
//! (an activity of type [`STORE_UNAVAILABLE`]) and when it goes on.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::contract::AgentEvent;
use crate::error::StorageError;
use crate::ids::MessageId;

use super::{Driver, Failure, Step};

/// The activity type of the events that say a run waits for its store.
pub(crate) const STORE_UNAVAILABLE: &str = "store-unavailable";

/// The pauses between tries: 100 ms, doubling to 2 s.
const PAUSES: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));

/// One outage as one run lives through it.
pub(super) struct StoreOutage {
    began: Instant,
    timeout: Duration,
    pauses: Backoff,
    /// Whether a failed try may have landed (then a version conflict that
    /// counts exactly its messages means it did).
    maybe_written: bool,
    /// The activity the run's events about this outage update.
    activity: MessageId,
}

impl StoreOutage {
    /// The outage `error` began, as the run's events and the metrics tell.
    pub(super) fn began(driver: &Driver<'_>, error: &StorageError) -> Self {
        let timeout = driver.deps.config.store_outage_timeout;
        tracing::warn!(
            thread_id = %driver.thread.thread_id,
            run_id = %driver.run.identity.run_id,
            %error,
            ?timeout,
            "the thread store is unavailable: the run waits for it"
        );
        driver.deps.metrics.store().outage_began();
        let outage = Self {
            began: Instant::now(),
            timeout,
            pauses: PAUSES,
            maybe_written: false,
            activity: MessageId::generate(),
        };
        outage.tell(
            driver,
            json!({"status": "waiting", "error": error.to_string(),
                "timeout_ms": millis(timeout)}),
        );
        outage
    }

    /// Whether a failed try may have landed.
    pub(super) fn maybe_written(&self) -> bool {
        self.maybe_written
    }

    /// Waits before the next try after `error`; past the timeout, the run's
    /// checkpoint fails with the store's last error.
    pub(super) async fn wait(&mut self, driver: &Driver<'_>, error: StorageError) -> Step<()> {
        self.maybe_written |= matches!(error, StorageError::MaybeWritten(_));
        let waited = self.began.elapsed();
        let Some(left) = self
            .timeout
            .checked_sub(waited)
            .filter(|left| !left.is_zero())
        else {
            driver.deps.metrics.store().outage_ended(waited, false);
            tracing::warn!(
                thread_id = %driver.thread.thread_id,
                run_id = %driver.run.identity.run_id,
                %error,
                "the thread store stayed unavailable past store.outage_timeout: the run ends"
            );
            return Err(Failure::State(format!(
                "the thread store stayed unavailable for {}s (store.outage_timeout): {error}",
                waited.as_secs()
            )));
        };
        tokio::time::sleep(self.pauses.next_pause().min(left)).await;
        Ok(())
    }

    /// The store took the checkpoint: the run goes on.
    pub(super) fn recovered(self, driver: &Driver<'_>) {
        let waited = self.began.elapsed();
        driver.deps.metrics.store().outage_ended(waited, true);
        tracing::info!(
            thread_id = %driver.thread.thread_id,
            run_id = %driver.run.identity.run_id,
            ?waited,
            "the thread store is back: the run goes on"
        );
        self.tell(
            driver,
            json!({"status": "recovered", "waited_ms": millis(waited)}),
        );
    }

    /// The store answered with an error that ends the run.
    pub(super) fn ended(self, driver: &Driver<'_>) {
        driver
            .deps
            .metrics
            .store()
            .outage_ended(self.began.elapsed(), false);
    }

    fn tell(&self, driver: &Driver<'_>, content: serde_json::Value) {
        driver.emit(AgentEvent::ActivitySnapshot {
            message_id: self.activity.clone(),
            activity_type: STORE_UNAVAILABLE.to_owned(),
            content,
            replace: Some(true),
        });
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
