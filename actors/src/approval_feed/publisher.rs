//! [`ApprovalFeed`]: takes the changes the store announces, has its sink keep
//! them, marks them published in the store, and catches up with what the store
//! says is still owed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{FeedError, FeedSink, FeedStream};
use crate::contract::{ApprovalChange, ApprovalEvent};
use crate::ids::ApprovalId;
use crate::store::ThreadRunStore;

/// Tunables of the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedConfig {
    /// A change still owed this long after it was stored is published by the
    /// catch-up sweep (the announcement was lost: a crash, an outage, a full
    /// queue). Longer than a publication takes; shorter than JetStream's
    /// duplicate window, so the sweep and a late publication are kept once.
    pub catch_up_after: Duration,
    /// How often the store is asked what is owed.
    pub sweep_every: Duration,
    /// Changes published (and marked) together, at most.
    pub batch: usize,
    /// Announced changes waiting for the sink, at most: beyond it they are
    /// left to the sweep.
    pub queue: usize,
}

impl Default for FeedConfig {
    fn default() -> Self {
        Self {
            catch_up_after: Duration::from_secs(5),
            sweep_every: Duration::from_secs(5),
            batch: 256,
            queue: 4096,
        }
    }
}

/// What the feed did since the node started, for its metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedCounts {
    /// Changes the sink kept.
    pub published: u64,
    /// Changes the sink refused or could not reach (published later).
    pub failed: u64,
    /// Announcements that found the queue full (published by the sweep).
    pub overflowed: u64,
    /// Changes published by the sweep rather than announced.
    pub caught_up: u64,
}

#[derive(Debug, Default)]
struct Counters {
    published: AtomicU64,
    failed: AtomicU64,
    overflowed: AtomicU64,
    caught_up: AtomicU64,
    /// Published records whose marks were not written (the store refused, the
    /// marks' queue was full): owed still, so a node alone sweeps again.
    unmarked: AtomicU64,
}

/// The node's approval feed: announced changes go to the sink, in order.
pub struct ApprovalFeed {
    sink: Arc<dyn FeedSink>,
    queue: mpsc::Sender<Vec<ApprovalChange>>,
    /// The receiving end and the store, until the publisher starts.
    unstarted: Mutex<Option<Unstarted>>,
    publisher: Mutex<Option<JoinHandle<()>>>,
    counters: Arc<Counters>,
    config: FeedConfig,
}

struct Unstarted {
    changes: mpsc::Receiver<Vec<ApprovalChange>>,
    store: Arc<dyn ThreadRunStore>,
}

impl std::fmt::Debug for ApprovalFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalFeed")
            .field("config", &self.config)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl Drop for ApprovalFeed {
    fn drop(&mut self) {
        if let Some(publisher) = self
            .publisher
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
        {
            publisher.abort();
        }
    }
}

impl ApprovalFeed {
    /// A feed publishing to `sink` and marking what it published in `store`
    /// (the store the changes are made in, not a [`super::FeedingStore`] on it).
    pub fn new(
        sink: Arc<dyn FeedSink>,
        store: Arc<dyn ThreadRunStore>,
        config: FeedConfig,
    ) -> Self {
        let (queue, changes) = mpsc::channel(config.queue.max(1));
        Self {
            sink,
            queue,
            unstarted: Mutex::new(Some(Unstarted { changes, store })),
            publisher: Mutex::new(None),
            counters: Arc::default(),
            config,
        }
    }

    /// Starts publishing (and catching up) if it has not started; a no-op
    /// outside a Tokio runtime, where it starts at its next use.
    pub fn start(&self) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let Some(unstarted) = self
            .unstarted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
        else {
            return;
        };
        let publisher = Publisher {
            sink: Arc::clone(&self.sink),
            store: unstarted.store,
            counters: Arc::clone(&self.counters),
            config: self.config.clone(),
        };
        let task = tokio::spawn(publisher.run(unstarted.changes));
        *self
            .publisher
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(task);
    }

    /// Announces changes the store just made. Never waits: a change that finds
    /// the queue full is published by the catch-up sweep instead.
    pub fn announce(&self, changes: Vec<ApprovalChange>) {
        if changes.is_empty() {
            return;
        }
        self.start();
        let count = changes.len() as u64;
        if self.queue.try_send(changes).is_err() {
            self.counters.overflowed.fetch_add(count, Ordering::Relaxed);
        }
    }

    /// The feed's records after `after` (a position it gave), then new ones.
    pub async fn follow(&self, after: Option<&str>) -> Result<FeedStream, FeedError> {
        self.start();
        self.sink.follow(after).await
    }

    /// What the feed did since it started.
    pub fn counts(&self) -> FeedCounts {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        FeedCounts {
            published: read(&self.counters.published),
            failed: read(&self.counters.failed),
            overflowed: read(&self.counters.overflowed),
            caught_up: read(&self.counters.caught_up),
        }
    }
}

/// The task that publishes announced changes and sweeps for owed ones.
struct Publisher {
    sink: Arc<dyn FeedSink>,
    store: Arc<dyn ThreadRunStore>,
    counters: Arc<Counters>,
    config: FeedConfig,
}

impl Publisher {
    async fn run(self, mut changes: mpsc::Receiver<Vec<ApprovalChange>>) {
        // Marks are written beside publication, never before the next record
        // goes out: a mark is a database write, a record a NATS publish.
        let (marks, to_mark) = mpsc::channel(self.config.queue.max(1));
        let marker = tokio::spawn(Self::marker(
            Arc::clone(&self.store),
            Arc::clone(&self.counters),
            to_mark,
        ));
        let _marker = tokio_util::task::AbortOnDropHandle::new(marker);
        let mut sweep = tokio::time::interval(self.config.sweep_every);
        // What had been refused or dropped when the store was last asked.
        let mut missed_at_sweep = None;
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                // Announced changes first: they are the fast path, the sweep
                // only catches up.
                biased;
                announced = changes.recv() => {
                    let Some(mut batch) = announced else {
                        return;
                    };
                    while batch.len() < self.config.batch {
                        match changes.try_recv() {
                            Ok(more) => batch.extend(more),
                            Err(_) => break,
                        }
                    }
                    let kept = self.publish(&batch).await;
                    // A full queue of marks leaves these owed: the sweep
                    // publishes them again, kept once by the sink.
                    if let Err(full) = marks.try_send(kept) {
                        let count = full.into_inner().len() as u64;
                        self.counters.unmarked.fetch_add(count, Ordering::Relaxed);
                    }
                }
                _ = sweep.tick() => {
                    // The store is asked at start (what an earlier process
                    // left owed), after anything was missed, and always when
                    // other nodes share the sink (what one that died left);
                    // a node alone sends its store nothing otherwise.
                    let missed = self.counters.failed.load(Ordering::Relaxed)
                        + self.counters.overflowed.load(Ordering::Relaxed)
                        + self.counters.unmarked.load(Ordering::Relaxed);
                    if self.sink.shared() || missed_at_sweep != Some(missed) {
                        missed_at_sweep = Some(missed);
                        self.catch_up().await;
                    }
                }
            }
        }
    }

    /// Has the sink keep `changes`: the kept ones, to be marked as published in
    /// the store (the others stay owed, for the sweep).
    async fn publish(&self, changes: &[ApprovalChange]) -> Vec<(ApprovalId, ApprovalEvent)> {
        let outcomes = self.sink.publish(changes).await;
        let mut kept: Vec<(ApprovalId, ApprovalEvent)> = Vec::with_capacity(changes.len());
        for (change, outcome) in changes.iter().zip(outcomes) {
            match outcome {
                Ok(()) => kept.push((change.approval.approval_id.clone(), change.event)),
                Err(error) => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        approval_id = %change.approval.approval_id,
                        event = change.event.as_str(),
                        %error,
                        "approval feed: not published yet; the catch-up sweep tries again"
                    );
                }
            }
        }
        self.counters
            .published
            .fetch_add(kept.len() as u64, Ordering::Relaxed);
        kept
    }

    /// Marks `kept` as published in the store.
    async fn mark(
        store: &dyn ThreadRunStore,
        counters: &Counters,
        kept: &[(ApprovalId, ApprovalEvent)],
    ) {
        if kept.is_empty() {
            return;
        }
        if let Err(error) = store.approvals_published(kept).await {
            counters
                .unmarked
                .fetch_add(kept.len() as u64, Ordering::Relaxed);
            // Published and still marked as owed: the sweep publishes them
            // again, which the sink keeps once (or followers tell apart).
            tracing::warn!(%error, "approval feed: published records not marked in the store");
        }
    }

    /// Writes the marks sent to it, those waiting together in one write.
    async fn marker(
        store: Arc<dyn ThreadRunStore>,
        counters: Arc<Counters>,
        mut marks: mpsc::Receiver<Vec<(ApprovalId, ApprovalEvent)>>,
    ) {
        while let Some(mut kept) = marks.recv().await {
            while let Ok(more) = marks.try_recv() {
                kept.extend(more);
            }
            Self::mark(store.as_ref(), &counters, &kept).await;
        }
    }

    /// Publishes what the store says is owed and older than `catch_up_after`.
    async fn catch_up(&self) {
        loop {
            let owed = match self
                .store
                .unpublished_approvals(self.config.catch_up_after, self.config.batch)
                .await
            {
                Ok(owed) => owed,
                Err(error) => {
                    tracing::debug!(%error, "approval feed: the store cannot say what is owed now");
                    return;
                }
            };
            if owed.is_empty() {
                return;
            }
            // Marked before the store is asked again, which would give them
            // back otherwise.
            let kept = self.publish(&owed).await;
            Self::mark(self.store.as_ref(), &self.counters, &kept).await;
            let kept = kept.len();
            self.counters
                .caught_up
                .fetch_add(kept as u64, Ordering::Relaxed);
            // A full page all kept: more may be owed. Otherwise the next sweep.
            if owed.len() < self.config.batch || kept < owed.len() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use async_trait::async_trait;
    use futures::StreamExt;

    use super::*;
    use crate::approval_feed::{FeedItem, LocalFeedLog};
    use crate::contract::ApprovalWrite;
    use crate::ids::ThreadId;
    use crate::store::InMemoryStore;
    use crate::store::conformance::{approval, checkpoint, run, user_messages};

    /// The local log, refusing everything while `down` is set.
    #[derive(Default)]
    struct Flaky {
        log: LocalFeedLog,
        down: AtomicBool,
    }

    #[async_trait]
    impl FeedSink for Flaky {
        async fn publish(&self, changes: &[ApprovalChange]) -> Vec<Result<(), FeedError>> {
            if self.down.load(Ordering::SeqCst) {
                return changes
                    .iter()
                    .map(|_| Err(FeedError::Unavailable("down".into())))
                    .collect();
            }
            self.log.publish(changes).await
        }

        async fn follow(&self, after: Option<&str>) -> Result<FeedStream, FeedError> {
            self.log.follow(after).await
        }
    }

    #[tokio::test]
    async fn a_change_the_sink_refused_is_published_by_the_catch_up_and_marked() {
        let store = Arc::new(InMemoryStore::new());
        let sink = Arc::new(Flaky::default());
        sink.down.store(true, Ordering::SeqCst);
        let feed = ApprovalFeed::new(
            Arc::clone(&sink) as Arc<dyn FeedSink>,
            Arc::clone(&store) as Arc<dyn ThreadRunStore>,
            FeedConfig {
                catch_up_after: Duration::ZERO,
                sweep_every: Duration::from_millis(20),
                ..FeedConfig::default()
            },
        );
        let mut followed = feed.follow(None).await.unwrap();
        let thread = ThreadId::new("t-flaky").unwrap();
        let mut first = checkpoint(&thread, 1, 0, user_messages("q", 1), run(&thread, "r1", 1));
        first.approvals = vec![ApprovalWrite::Requested(Box::new(approval(
            "a-1", &thread, "r1", "tool", 1,
        )))];
        let changes = store.checkpoint(first).await.unwrap();
        feed.announce(changes);
        // The announcement (taken before any sweep) failed; the sink comes
        // back; the sweep publishes it.
        while feed.counts().failed == 0 {
            tokio::task::yield_now().await;
        }
        sink.down.store(false, Ordering::SeqCst);
        let Some(FeedItem::Entry(entry)) = followed.next().await else {
            panic!("the record arrives");
        };
        assert_eq!(entry.change.approval.approval_id.as_str(), "a-1");
        while !store
            .unpublished_approvals(Duration::ZERO, 10)
            .await
            .unwrap()
            .is_empty()
        {
            tokio::task::yield_now().await;
        }
        let counts = feed.counts();
        assert_eq!(counts.published, 1, "{counts:?}");
        assert_eq!(counts.caught_up, 1, "{counts:?}");
    }
}
