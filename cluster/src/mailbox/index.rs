//! `PendingIndex`: the threads whose mailbox holds queued or claimed dispatches,
//! kept current from the bucket's change feed.
//!
//! Sweeps (wake threads with queued work, reclaim expired leases, give back claims a
//! node lost) used to scan every thread record in the bucket every second, so a
//! node slowed down with every thread the cluster had ever run. The index holds
//! only threads with work in flight; a thread whose dispatches are all finished
//! leaves it. One feed per mailbox delivers every thread record's latest value at
//! start and then each change; the node's own writes are applied as soon as they
//! are committed, so its sweeps never lag behind what it did itself. Entries carry
//! the record's revision and an older value never replaces a newer one, whichever
//! path brings it first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_nats::jetstream::kv;
use awaken_actors::ids::ThreadId;
use awaken_actors::mailbox::{HeldClaim, QueuedThread};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::RecordCache;
use super::records::{THREAD_PREFIX, ThreadMailbox};
use crate::codec;
use crate::error::ClusterError;
use crate::kv_scan::{Change, Feed, SCAN_IDLE_TIMEOUT, follow_under};

/// What the sweeps need of one thread's record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    thread_id: ThreadId,
    /// The earliest time a `Queued` dispatch becomes claimable.
    queued_at: Option<u64>,
    /// The `Claimed` dispatches.
    claims: Vec<HeldClaim>,
}

impl Pending {
    /// `None` when the record has nothing queued or claimed.
    fn of(record: &ThreadMailbox) -> Option<Self> {
        let queued = record.queued();
        let claims: Vec<HeldClaim> = record
            .dispatches
            .iter()
            .filter_map(|entry| HeldClaim::of(&entry.dispatch))
            .collect();
        let thread_id = match (&queued, claims.first()) {
            (Some(queued), _) => queued.thread_id.clone(),
            (None, Some(claim)) => claim.thread_id.clone(),
            (None, None) => return None,
        };
        Some(Self {
            thread_id,
            queued_at: queued.map(|queued| queued.available_at),
            claims,
        })
    }
}

/// Threads with queued or claimed dispatches, by record key.
#[derive(Debug, Default)]
pub(crate) struct PendingIndex {
    /// Per record key: the latest revision seen and what it holds pending (`None`:
    /// nothing). Keys whose latest revision holds nothing are dropped once the feed
    /// has caught up with them (see [`Self::apply`]).
    threads: Mutex<HashMap<String, (u64, Option<Pending>)>>,
    /// `watch_queued` subscribers.
    subscribers: Mutex<Vec<mpsc::Sender<ThreadId>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PendingIndex {
    /// Records the thread record under `key` at `revision` (`None`: removed), unless
    /// a newer revision is known. `settled` says that no older value can follow
    /// (the feed delivers in revision order), so a key with nothing pending can be
    /// forgotten. A node's own writes are not settled — the feed may still bring
    /// older values — so their empty entries stay until the feed passes them.
    pub(crate) fn apply(
        &self,
        key: &str,
        revision: u64,
        record: Option<&ThreadMailbox>,
        settled: bool,
    ) {
        let mut threads = lock(&self.threads);
        match threads.get(key) {
            Some((known, _)) if *known > revision => {}
            Some((known, pending)) if *known == revision => {
                if settled && pending.is_none() {
                    threads.remove(key);
                }
            }
            _ => match record.and_then(Pending::of) {
                None if settled => {
                    threads.remove(key);
                }
                pending => {
                    threads.insert(key.to_owned(), (revision, pending));
                }
            },
        }
    }

    /// Takes over the entries of `fresh` (built by a new feed after a gap).
    pub(crate) fn adopt(&self, fresh: PendingIndex) {
        let fresh = fresh
            .threads
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        *lock(&self.threads) = fresh;
    }

    /// Every thread with a `Queued` dispatch and the earliest time one is claimable.
    pub(crate) fn queued(&self) -> Vec<QueuedThread> {
        lock(&self.threads)
            .values()
            .filter_map(|(_, pending)| pending.as_ref())
            .filter_map(|pending| {
                Some(QueuedThread {
                    thread_id: pending.thread_id.clone(),
                    available_at: pending.queued_at?,
                })
            })
            .collect()
    }

    /// Every claim.
    pub(crate) fn claims(&self) -> Vec<HeldClaim> {
        lock(&self.threads)
            .values()
            .filter_map(|(_, pending)| pending.as_ref())
            .flat_map(|pending| pending.claims.iter().cloned())
            .collect()
    }

    /// Threads holding a claim whose lease ended by `now_ms`.
    pub(crate) fn expired(&self, now_ms: u64) -> Vec<ThreadId> {
        lock(&self.threads)
            .values()
            .filter_map(|(_, pending)| pending.as_ref())
            .filter(|pending| pending.claims.iter().any(|c| c.lease_until <= now_ms))
            .map(|pending| pending.thread_id.clone())
            .collect()
    }

    /// Adds a `watch_queued` subscriber.
    pub(crate) fn subscribe(&self, subscriber: mpsc::Sender<ThreadId>) {
        lock(&self.subscribers).push(subscriber);
    }

    /// Tells the subscribers that the thread has queued work; a full subscriber
    /// misses it (sweeps are the backstop), a closed one is dropped.
    pub(crate) fn notify(&self, record: &ThreadMailbox) {
        let Some(queued) = record.queued() else {
            return;
        };
        lock(&self.subscribers).retain(|subscriber| {
            !matches!(
                subscriber.try_send(queued.thread_id.clone()),
                Err(mpsc::error::TrySendError::Closed(_))
            )
        });
    }

    /// How many record keys the index holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.threads).len()
    }
}

/// How long a feed that ended waits before subscribing again.
const RESUBSCRIBE_DELAY: Duration = Duration::from_secs(1);

/// The task that keeps a [`PendingIndex`] current; stops when dropped.
#[derive(Debug)]
pub(crate) struct Follower(JoinHandle<()>);

impl Drop for Follower {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts keeping `index` current with the bucket's thread records. Returns once
/// the index holds every record that existed when it was called.
pub(crate) async fn follow(
    client: async_nats::Client,
    bucket: kv::Store,
    index: Arc<PendingIndex>,
    records: Arc<RecordCache>,
) -> Result<Follower, ClusterError> {
    let mut feed = follow_under(&client, &bucket, THREAD_PREFIX).await?;
    catch_up(&mut feed, &index, &records).await?;
    Ok(Follower(tokio::spawn(async move {
        loop {
            live(&mut feed, &index, &records).await;
            feed = resubscribe(&client, &bucket, &index, &records).await;
        }
    })))
}

/// Applies the changes of a caught-up feed and notifies the subscribers, until
/// the feed ends.
async fn live(feed: &mut Feed, index: &PendingIndex, records: &RecordCache) {
    while let Some(change) = feed.next().await {
        match change {
            Ok(change) => {
                if let Some(record) = apply(index, records, change) {
                    index.notify(&record);
                }
            }
            // The ordered consumer re-creates itself after a gap and goes on.
            Err(error) => tracing::debug!(%error, "mailbox feed hiccup"),
        }
    }
    tracing::warn!("the mailbox feed ended; subscribing again");
}

/// A new feed whose initial state has replaced the index's.
async fn resubscribe(
    client: &async_nats::Client,
    bucket: &kv::Store,
    index: &PendingIndex,
    records: &RecordCache,
) -> Feed {
    loop {
        tokio::time::sleep(RESUBSCRIBE_DELAY).await;
        let fresh = PendingIndex::default();
        let caught_up = match follow_under(client, bucket, THREAD_PREFIX).await {
            Ok(mut feed) => catch_up(&mut feed, &fresh, records).await.map(|()| feed),
            Err(error) => Err(error),
        };
        match caught_up {
            Ok(feed) => {
                index.adopt(fresh);
                return feed;
            }
            Err(error) => tracing::warn!(%error, "subscribing to the mailbox feed failed"),
        }
    }
}

/// Applies the feed's initial state to `index`. Entries counted at the start may
/// be purged before they are delivered; a feed idle for [`SCAN_IDLE_TIMEOUT`]
/// counts as caught up (later changes still arrive, and sweeps are periodic).
async fn catch_up(
    feed: &mut Feed,
    index: &PendingIndex,
    records: &RecordCache,
) -> Result<(), ClusterError> {
    while !feed.caught_up() {
        match tokio::time::timeout(SCAN_IDLE_TIMEOUT, feed.next()).await {
            Err(_) => return Ok(()),
            Ok(None) => return Err(ClusterError::Nats("the mailbox feed ended".to_owned())),
            Ok(Some(Err(error))) => tracing::debug!(%error, "mailbox feed hiccup"),
            Ok(Some(Ok(change))) => {
                apply(index, records, change);
            }
        }
    }
    Ok(())
}

/// Applies one change from the feed to the index and the record cache (records
/// with queued work are added: a claim on them follows); the record when it was
/// written.
fn apply(index: &PendingIndex, records: &RecordCache, change: Change) -> Option<ThreadMailbox> {
    match change {
        Change::Put(latest) => {
            let record = codec::decode::<ThreadMailbox>(&latest.value)
                .inspect_err(|error| {
                    tracing::warn!(key = %latest.key, %error, "undecodable thread record");
                })
                .ok();
            index.apply(&latest.key, latest.revision, record.as_ref(), true);
            if let Some(record) = &record {
                let revision = latest.revision;
                records.offer(
                    latest.key,
                    record.queued().is_some(),
                    |(known, _)| *known >= revision,
                    || (revision, record.clone()),
                );
            }
            record
        }
        Change::Removed { key, revision } => {
            index.apply(&key, revision, None, true);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::{RunDispatch, RunDispatchStatus};
    use awaken_actors::ids::RunId;

    use super::*;

    const KEY: &str = "thread.dDE";

    fn record(statuses: &[RunDispatchStatus]) -> ThreadMailbox {
        let mut record = ThreadMailbox::default();
        for (seq, status) in statuses.iter().enumerate() {
            let run = RunId::new(format!("r{seq}")).unwrap();
            let mut dispatch = RunDispatch::new(ThreadId::new("t1").unwrap(), run, 0, 100);
            dispatch.status = *status;
            dispatch.available_at = 100 + seq as u64;
            if *status == RunDispatchStatus::Claimed {
                dispatch.claim_token = Some(format!("token-{seq}"));
                dispatch.claimed_by = Some("node-a".to_owned());
                dispatch.lease_until = Some(1_000);
            }
            record.insert(seq as u64, dispatch);
        }
        record
    }

    #[test]
    fn holds_only_threads_with_work_in_flight() {
        use RunDispatchStatus::*;
        let index = PendingIndex::default();
        index.apply(KEY, 1, Some(&record(&[Acked, Queued, Queued])), true);
        let queued = index.queued();
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].available_at, 101);
        assert!(index.claims().is_empty());

        index.apply(KEY, 2, Some(&record(&[Acked, Claimed, Queued])), true);
        assert_eq!(index.queued()[0].available_at, 102);
        let claims = index.claims();
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].claim_token, "token-1");
        assert!(index.expired(999).is_empty());
        assert_eq!(index.expired(1_000), [ThreadId::new("t1").unwrap()]);

        index.apply(KEY, 3, Some(&record(&[Acked, DeadLetter, Cancelled])), true);
        assert_eq!(index.len(), 0, "finished threads leave the index");
        index.apply(KEY, 4, Some(&record(&[Queued])), true);
        index.apply(KEY, 5, None, true);
        assert_eq!(index.len(), 0, "removed records leave the index");
    }

    #[test]
    fn an_older_value_never_replaces_a_newer_one() {
        use RunDispatchStatus::*;
        let index = PendingIndex::default();
        // The node's own write lands first; the feed then brings the older value.
        index.apply(KEY, 7, Some(&record(&[Acked])), false);
        index.apply(KEY, 6, Some(&record(&[Queued])), true);
        assert!(index.queued().is_empty(), "revision 6 is older than 7");
        assert_eq!(index.len(), 1, "the emptied entry waits for the feed");
        index.apply(KEY, 7, Some(&record(&[Acked])), true);
        assert_eq!(index.len(), 0, "the feed passed it");

        index.apply(KEY, 9, Some(&record(&[Claimed])), false);
        index.apply(KEY, 8, Some(&record(&[Queued])), true);
        assert!(index.queued().is_empty());
        assert_eq!(index.claims().len(), 1);
    }

    #[test]
    fn a_fresh_feed_replaces_what_was_known() {
        use RunDispatchStatus::*;
        let index = PendingIndex::default();
        index.apply(KEY, 1, Some(&record(&[Queued])), true);
        let fresh = PendingIndex::default();
        fresh.apply("thread.dDI", 3, Some(&record(&[Claimed])), true);
        index.adopt(fresh);
        assert!(index.queued().is_empty());
        assert_eq!(index.claims().len(), 1);
    }

    #[tokio::test]
    async fn subscribers_hear_of_queued_work_and_closed_ones_are_dropped() {
        use RunDispatchStatus::*;
        let index = PendingIndex::default();
        let (tx, mut rx) = mpsc::channel(4);
        let (closed, gone) = mpsc::channel(4);
        drop(gone);
        index.subscribe(tx);
        index.subscribe(closed);
        index.notify(&record(&[Acked]));
        index.notify(&record(&[Acked, Queued]));
        assert_eq!(rx.recv().await, Some(ThreadId::new("t1").unwrap()));
        assert!(rx.try_recv().is_err(), "finished work is not reported");
        assert_eq!(lock(&index.subscribers).len(), 1);
    }
}
