//! Remote agents' cards as this client knows them. A card is read at first use
//! (or taken from start-up discovery), read again once it is older than the
//! refresh period or after a call to its agent failed, and a failed read is tried
//! again only after a wait that doubles with each failure — so an agent that was
//! down when this node started is found once it is up, and one that stays down
//! costs a read now and then, not one per call.

use std::time::Duration;

use awaken_actors::AgentId;
use awaken_actors::delegation::RemoteAgentCard;
use dashmap::DashMap;
use tokio::time::Instant;

use super::card;
use super::endpoint::Settings;
use super::http::Http;

/// How the cache waits: between refreshes, and after failed reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct CardTiming {
    /// A card older than this is read again at its next use.
    pub refresh: Duration,
    /// The wait after a first failed read; it doubles with each next failure.
    pub first_retry: Duration,
    /// The longest wait between failed reads.
    pub max_retry: Duration,
    /// How long one read may take.
    pub read_timeout: Duration,
}

impl Default for CardTiming {
    fn default() -> Self {
        Self {
            refresh: Duration::from_secs(300),
            first_retry: Duration::from_secs(1),
            max_retry: Duration::from_secs(300),
            read_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    card: Option<RemoteAgentCard>,
    /// When the next read is due.
    due: Instant,
    /// Failed reads in a row.
    failures: u32,
}

/// The cards of the agents this node delegates to.
#[derive(Debug, Default)]
pub(super) struct CardCache {
    slots: DashMap<AgentId, Slot>,
    timing: CardTiming,
}

impl CardCache {
    pub(super) fn new(timing: CardTiming) -> Self {
        Self {
            slots: DashMap::new(),
            timing,
        }
    }

    /// Keeps a card just read (at start-up discovery).
    pub(super) fn keep(&self, agent: &AgentId, card: RemoteAgentCard) {
        self.slots.insert(
            agent.clone(),
            Slot {
                card: Some(card),
                due: Instant::now() + self.timing.refresh,
                failures: 0,
            },
        );
    }

    /// The agent's card for a call: the one known, read again first when due;
    /// `None` while it cannot be read (the call goes ahead without it).
    pub(super) async fn card(
        &self,
        http: &Http,
        settings: &Settings,
        agent: &AgentId,
    ) -> Option<RemoteAgentCard> {
        let known = self.slots.get(agent).map(|slot| slot.clone());
        if let Some(slot) = &known
            && Instant::now() < slot.due
        {
            return slot.card.clone();
        }
        let read = tokio::time::timeout(self.timing.read_timeout, card::discover(http, settings))
            .await
            .unwrap_or_else(|_| {
                Err(awaken_actors::delegation::RemoteError::Unreachable(
                    "the agent card was not read in time".to_owned(),
                ))
            });
        let mut slot = known.unwrap_or(Slot {
            card: None,
            due: Instant::now(),
            failures: 0,
        });
        match read {
            Ok(card) => {
                slot = Slot {
                    card: Some(card),
                    due: Instant::now() + self.timing.refresh,
                    failures: 0,
                };
            }
            Err(error) => {
                // A card read before stays in use until a read succeeds.
                tracing::debug!(%agent, %error, failures = slot.failures + 1, "remote agent card not read");
                slot.due = Instant::now() + self.retry_wait(slot.failures);
                slot.failures = slot.failures.saturating_add(1);
            }
        }
        let card = slot.card.clone();
        self.slots.insert(agent.clone(), slot);
        card
    }

    /// A call to the agent failed: its card is read again at the next use.
    pub(super) fn stale(&self, agent: &AgentId) {
        if let Some(mut slot) = self.slots.get_mut(agent)
            && slot.failures == 0
        {
            slot.due = Instant::now();
        }
    }

    /// The wait after `failures` earlier failed reads and one more.
    fn retry_wait(&self, failures: u32) -> Duration {
        let doubled = self
            .timing
            .first_retry
            .saturating_mul(2u32.saturating_pow(failures.min(30)));
        doubled.min(self.timing.max_retry)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use awaken_actors::contract::RemoteEndpoint;
    use serde_json::json;

    use super::*;
    use crate::protocols::a2a::client::A2A_BACKEND;

    fn timing() -> CardTiming {
        CardTiming {
            refresh: Duration::from_secs(3600),
            first_retry: Duration::from_millis(200),
            max_retry: Duration::from_secs(3600),
            read_timeout: Duration::from_secs(5),
        }
    }

    /// A server whose card route fails until `up` is set; counts the reads.
    async fn card_server(up: Arc<std::sync::atomic::AtomicBool>) -> (String, Arc<AtomicUsize>) {
        let reads = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&reads);
        let app = axum::Router::new().route(
            "/a2a/.well-known/agent-card.json",
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                let up = up.load(Ordering::SeqCst);
                async move {
                    if !up {
                        return Err(axum::http::StatusCode::SERVICE_UNAVAILABLE);
                    }
                    Ok(axum::Json(json!({
                        "name": "far",
                        "description": "an agent far away",
                        "supportedInterfaces": [{"url": "x", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}],
                        "capabilities": {"streaming": true},
                    })))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/a2a", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (base, reads)
    }

    fn settings(base: &str) -> Settings {
        Settings::of(&RemoteEndpoint::new(A2A_BACKEND, base)).unwrap()
    }

    #[tokio::test]
    async fn an_agent_down_at_first_use_is_found_once_it_is_up_without_a_read_per_call() {
        let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (base, reads) = card_server(Arc::clone(&up)).await;
        let (cache, http, agent) = (
            CardCache::new(timing()),
            Http::new(),
            AgentId::new("far").unwrap(),
        );
        let settings = settings(&base);

        assert_eq!(cache.card(&http, &settings, &agent).await, None);
        let after_first = reads.load(Ordering::SeqCst);
        assert!(after_first >= 1);
        // Before the retry wait is over, calls do not read again.
        assert_eq!(cache.card(&http, &settings, &agent).await, None);
        assert_eq!(reads.load(Ordering::SeqCst), after_first);

        up.store(true, Ordering::SeqCst);
        // The retry wait of the cache under test, then the next use reads.
        tokio::time::sleep(timing().first_retry).await;
        let card = cache.card(&http, &settings, &agent).await.unwrap();
        assert_eq!(card.name, "far");
        assert!(card.streaming);
        // Fresh now: taken from the cache.
        let reads_now = reads.load(Ordering::SeqCst);
        cache.card(&http, &settings, &agent).await;
        assert_eq!(reads.load(Ordering::SeqCst), reads_now);

        // A failed call makes the next use read it again.
        cache.stale(&agent);
        cache.card(&http, &settings, &agent).await;
        assert_eq!(reads.load(Ordering::SeqCst), reads_now + 1);
    }

    #[test]
    fn retry_waits_double_up_to_the_limit() {
        let cache = CardCache::new(CardTiming {
            max_retry: Duration::from_secs(1),
            ..timing()
        });
        let waits: Vec<u128> = (0..5).map(|n| cache.retry_wait(n).as_millis()).collect();
        assert_eq!(waits, [200, 400, 800, 1000, 1000]);
    }
}
