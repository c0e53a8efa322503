//! A node's hold on one webhook's delivery: renewed every third of its length,
//! and the only way its progress is written, so a renewal never writes over newer
//! progress or reopens a finished webhook. When the node starts stopping, the lease
//! is handed back at once (another node's sweep takes the webhook up), and nothing
//! is written under it after that.

use std::sync::Arc;
use std::time::Duration;

use awaken_actors::clock::now_ms;
use awaken_actors::store::{ThreadRunStore, WebhookAdvance};
use awaken_actors::{JsonValue, RunId, WebhookId};
use tokio::sync::{Mutex, watch};
use tokio_util::task::AbortOnDropHandle;

/// What the lease last recorded.
struct Recorded {
    progress: JsonValue,
    done: bool,
    /// Handed back: nothing more is written under this lease.
    released: bool,
}

/// The parts the renewer shares with the deliverer.
struct Shared {
    store: Arc<dyn ThreadRunStore>,
    run_id: RunId,
    id: WebhookId,
    holder: String,
    length: Duration,
    /// Held across every write: renewals and records never interleave.
    recorded: Mutex<Recorded>,
    /// Turns true when another node holds the webhook (or it was deleted).
    lost: watch::Sender<bool>,
}

impl Shared {
    /// Writes `advance` under the lease; false (and `lost` set) when another
    /// node holds it.
    async fn write(&self, advance: &WebhookAdvance) -> Result<bool, String> {
        let held = self
            .store
            .webhooks()
            .advance_webhook(&self.run_id, &self.id, &self.holder, advance)
            .await
            .map_err(|e| e.to_string())?;
        if !held {
            self.lost.send_replace(true);
        }
        Ok(held)
    }

    fn until(&self, done: bool) -> u64 {
        if done {
            // Nothing is left to deliver: nobody needs to wait for this lease.
            0
        } else {
            now_ms().saturating_add(self.length.as_millis() as u64)
        }
    }
}

/// A webhook's delivery lease, renewed in the background while it lives.
pub(super) struct Lease {
    shared: Arc<Shared>,
    _renewer: AbortOnDropHandle<()>,
}

impl Lease {
    /// Holds the lease `holder` just claimed, with the webhook's stored progress.
    pub(super) fn hold(
        store: Arc<dyn ThreadRunStore>,
        (run_id, id): (RunId, WebhookId),
        holder: String,
        length: Duration,
        progress: JsonValue,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        let shared = Arc::new(Shared {
            store,
            run_id,
            id,
            holder,
            length,
            recorded: Mutex::new(Recorded {
                progress,
                done: false,
                released: false,
            }),
            lost: watch::Sender::new(false),
        });
        let renewer = tokio::spawn(renew(Arc::clone(&shared), stopping));
        Self {
            shared,
            _renewer: AbortOnDropHandle::new(renewer),
        }
    }

    /// Turns true when the lease is lost.
    pub(super) fn lost(&self) -> watch::Receiver<bool> {
        self.shared.lost.subscribe()
    }

    /// Records `progress` (with a dead letter, when a notification was given up
    /// on); `done` ends the delivery. Errors are the store's.
    pub(super) async fn record(
        &self,
        progress: JsonValue,
        done: bool,
        dead_letter: Option<JsonValue>,
    ) -> Result<bool, String> {
        let mut recorded = self.shared.recorded.lock().await;
        if recorded.released {
            return Ok(false);
        }
        let advance = WebhookAdvance {
            progress: progress.clone(),
            done,
            dead_letter,
            lease_until_ms: self.shared.until(done),
        };
        let held = self.shared.write(&advance).await?;
        if held {
            recorded.progress = progress;
            recorded.done = done;
        }
        Ok(held)
    }
}

/// Renews the lease every third of its length until it is lost or done, and
/// hands it back when the node starts stopping; a failed renewal is tried again
/// at the next tick (the lease may still run out, and then the next write tells).
async fn renew(shared: Arc<Shared>, mut stopping: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(shared.length / 3);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        let stop = tokio::select! {
            _ = ticks.tick() => false,
            stopped = stopping.wait_for(|stopping| *stopping) => stopped.is_ok(),
        };
        let mut recorded = shared.recorded.lock().await;
        if recorded.done {
            return;
        }
        if stop {
            release(&shared, &mut recorded).await;
            return;
        }
        let advance = WebhookAdvance {
            progress: recorded.progress.clone(),
            done: false,
            dead_letter: None,
            lease_until_ms: shared.until(false),
        };
        match shared.write(&advance).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(error) => {
                tracing::warn!(%error, run_id = %shared.run_id, "push notifications: renewing a delivery lease failed");
            }
        }
    }
}

/// Hands the lease back with the progress recorded (a lease that ends now), and
/// stops the delivery: the webhook is free for the next sweep of any node.
async fn release(shared: &Shared, recorded: &mut Recorded) {
    recorded.released = true;
    let advance = WebhookAdvance {
        progress: recorded.progress.clone(),
        done: false,
        dead_letter: None,
        lease_until_ms: 0,
    };
    if let Err(error) = shared.write(&advance).await {
        tracing::warn!(%error, run_id = %shared.run_id, "push notifications: handing a delivery lease back failed; it runs out instead");
    }
    shared.lost.send_replace(true);
}
