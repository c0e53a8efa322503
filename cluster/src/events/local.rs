//! The single-node twin of [`ClusterEventHub`](super::ClusterEventHub): the same
//! replay buffers, which local followers read directly; a publish wakes the
//! followers that found nothing left to read.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use awaken_actors::contract::{StreamEvent, TraceContext};
use awaken_actors::hashing::FastDashMap;
use awaken_actors::memory::NodeMemory;
use awaken_actors::thread::EventHub;
use awaken_actors::{RunId, ThreadId};

use super::replay::Read;
use super::{EventsConfig, ReplayBuffers};

/// Keeps every run's newest events and wakes the local followers waiting for them.
///
/// Followers read the run's replay buffer itself, so an event exists once however
/// many follow it, and a run nobody watches costs its buffer and nothing more.
#[derive(Debug)]
pub struct LocalEventHub {
    buffers: Arc<ReplayBuffers>,
    /// Events a follower takes from a run's buffer per read.
    read_batch: usize,
    followers: Arc<FastDashMap<RunId, Followers>>,
}

/// The followers of one run on this node.
#[derive(Debug, Default)]
struct Followers {
    count: usize,
    /// Followers that read everything there was, until the next publish.
    waiting: Vec<Waker>,
}

impl LocalEventHub {
    /// A hub with the buffer sizes of `config` (`publish_queue` does not apply).
    pub fn new(config: &EventsConfig) -> Self {
        Self::within(config, Arc::default())
    }

    /// [`Self::new`], its ended runs' buffers within `memory`'s share.
    pub fn within(config: &EventsConfig, memory: Arc<NodeMemory>) -> Self {
        Self {
            buffers: Arc::new(
                ReplayBuffers::new(config.replay_capacity, config.retained_runs).within(memory),
            ),
            read_batch: config.follower_batch.max(1),
            followers: Arc::new(FastDashMap::default()),
        }
    }

    /// The replay buffers this hub fills.
    pub fn buffers(&self) -> &Arc<ReplayBuffers> {
        &self.buffers
    }

    /// Live events of `run_id` from now on; dropping the subscription ends it.
    /// The run's buffer is kept for as long as the subscription lives, so a
    /// follower that subscribed before the run started never misses its start.
    pub fn subscribe(&self, run_id: &RunId) -> LiveSubscription {
        self.followers.entry(run_id.clone()).or_default().count += 1;
        self.buffers.pin(run_id);
        LiveSubscription {
            run_id: run_id.clone(),
            buffers: Arc::clone(&self.buffers),
            followers: Arc::clone(&self.followers),
            read_batch: self.read_batch,
        }
    }

    /// Runs with at least one live follower.
    pub fn followed_runs(&self) -> usize {
        self.followers.len()
    }
}

impl EventHub for LocalEventHub {
    fn publish(
        &self,
        _thread_id: &ThreadId,
        run_id: &RunId,
        event: &Arc<StreamEvent>,
        _trace: Option<&TraceContext>,
    ) {
        // Buffer first: a follower woken below reads the event there.
        self.buffers.push(run_id, Arc::clone(event));
        if let Some(mut followers) = self.followers.get_mut(run_id) {
            for waker in followers.waiting.drain(..) {
                waker.wake();
            }
        }
    }
}

/// One follower's live feed of a run: reads from the run's replay buffer.
#[derive(Debug)]
pub struct LiveSubscription {
    run_id: RunId,
    buffers: Arc<ReplayBuffers>,
    followers: Arc<FastDashMap<RunId, Followers>>,
    read_batch: usize,
}

/// What a live read gave: events were appended; `missed` when some right after
/// the requested `seq` had already left the buffer (it holds only the newest
/// events of a run; a subscription keeps the buffer itself from being dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fed {
    /// Whether events were lost before the first one appended.
    pub missed: bool,
}

impl LiveSubscription {
    /// Appends up to a read's worth of the run's events after `after_seq` to
    /// `into`, waiting for the next publish when there are none yet.
    pub async fn read(
        &mut self,
        after_seq: Option<u64>,
        into: &mut VecDeque<Arc<StreamEvent>>,
    ) -> Fed {
        poll_fn(|cx| self.poll_read(cx, after_seq, into)).await
    }

    /// [`read`](Self::read) without waiting: `None` when nothing new is there.
    pub fn try_read(
        &mut self,
        after_seq: Option<u64>,
        into: &mut VecDeque<Arc<StreamEvent>>,
    ) -> Option<Fed> {
        match self
            .buffers
            .read_after(&self.run_id, after_seq, self.read_batch, into)
        {
            Read::Buffered { taken: 0, .. } | Read::NoBuffer => None,
            Read::Buffered { missed, .. } => Some(Fed { missed }),
        }
    }

    fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        after_seq: Option<u64>,
        into: &mut VecDeque<Arc<StreamEvent>>,
    ) -> Poll<Fed> {
        if let Some(fed) = self.try_read(after_seq, into) {
            return Poll::Ready(fed);
        }
        if let Some(mut followers) = self.followers.get_mut(&self.run_id)
            && !followers
                .waiting
                .iter()
                .any(|waiting| waiting.will_wake(cx.waker()))
        {
            followers.waiting.push(cx.waker().clone());
        }
        // Read again after registering: an event published in between is seen
        // here or wakes this follower, never neither.
        match self.try_read(after_seq, into) {
            Some(fed) => Poll::Ready(fed),
            None => Poll::Pending,
        }
    }
}

impl Drop for LiveSubscription {
    fn drop(&mut self) {
        self.buffers.unpin(&self.run_id);
        self.followers.remove_if_mut(&self.run_id, |_, followers| {
            followers.count = followers.count.saturating_sub(1);
            followers.count == 0
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::AgentEvent;

    use super::*;

    fn event(seq: u64) -> Arc<StreamEvent> {
        Arc::new(StreamEvent::new(
            seq,
            "2026-01-01T00:00:00Z",
            AgentEvent::TextDelta {
                delta: format!("{seq}"),
            },
        ))
    }

    fn ids() -> (ThreadId, RunId) {
        (ThreadId::new("t").unwrap(), RunId::new("r").unwrap())
    }

    fn seqs(events: &VecDeque<Arc<StreamEvent>>) -> Vec<u64> {
        events.iter().map(|event| event.seq).collect()
    }

    #[tokio::test]
    async fn followers_read_events_after_a_seq_and_leave_nothing_behind() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0), None);
        let mut first = hub.subscribe(&run);
        let mut second = hub.subscribe(&run);
        hub.publish(&thread, &run, &event(1), None);
        for follower in [&mut first, &mut second] {
            let mut read = VecDeque::new();
            let fed = follower.read(Some(0), &mut read).await;
            assert_eq!(fed, Fed { missed: false });
            assert_eq!(seqs(&read), [1]);
        }
        drop(first);
        assert_eq!(hub.followed_runs(), 1, "one follower remains");
        drop(second);
        assert_eq!(hub.followed_runs(), 0);
    }

    #[tokio::test]
    async fn the_buffer_and_every_follower_share_the_published_copy() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        let mut follower = hub.subscribe(&run);
        let published = event(0);
        hub.publish(&thread, &run, &published, None);
        let mut read = VecDeque::new();
        follower.read(None, &mut read).await;
        assert!(Arc::ptr_eq(&read[0], &published));
        let replayed = hub.buffers().replay(&run, None).events;
        assert!(Arc::ptr_eq(&replayed[0], &published));
    }

    #[tokio::test]
    async fn a_follower_takes_at_most_a_batch_per_read() {
        let config = EventsConfig {
            follower_batch: 2,
            ..EventsConfig::default()
        };
        let hub = LocalEventHub::new(&config);
        let (thread, run) = ids();
        let mut follower = hub.subscribe(&run);
        for seq in 0..3 {
            hub.publish(&thread, &run, &event(seq), None);
        }
        let mut read = VecDeque::new();
        follower.read(None, &mut read).await;
        assert_eq!(seqs(&read), [0, 1]);
        follower.read(Some(1), &mut read).await;
        assert_eq!(seqs(&read), [0, 1, 2]);
    }

    #[tokio::test]
    async fn a_follower_behind_the_buffer_is_told_it_missed_events() {
        let config = EventsConfig {
            replay_capacity: 4,
            ..EventsConfig::default()
        };
        let hub = LocalEventHub::new(&config);
        let (thread, run) = ids();
        let mut follower = hub.subscribe(&run);
        for seq in 0..10 {
            hub.publish(&thread, &run, &event(seq), None);
        }
        let mut read = VecDeque::new();
        assert_eq!(
            follower.read(Some(2), &mut read).await,
            Fed { missed: true }
        );
        assert_eq!(seqs(&read), [6, 7, 8, 9]);
        let mut read = VecDeque::new();
        assert_eq!(
            follower.read(Some(6), &mut read).await,
            Fed { missed: false }
        );
        assert_eq!(seqs(&read), [7, 8, 9]);
    }

    #[tokio::test]
    async fn a_waiting_follower_is_woken_by_the_next_publish() {
        let hub = Arc::new(LocalEventHub::new(&EventsConfig::default()));
        let (thread, run) = ids();
        let mut follow = crate::events::follow_local(&hub, &run, None);
        let mut next = Box::pin(follow.next());
        assert!(
            futures::poll!(next.as_mut()).is_pending(),
            "nothing was published"
        );
        hub.publish(&thread, &run, &event(0), None);
        let woken = tokio::time::timeout(std::time::Duration::from_secs(5), next).await;
        assert_eq!(woken.unwrap().unwrap().seq, 0);
    }

    #[tokio::test]
    async fn a_followed_run_outlives_its_retention_until_its_follower_read_the_end() {
        let config = EventsConfig {
            retained_runs: 1,
            ..EventsConfig::default()
        };
        let hub = LocalEventHub::new(&config);
        let (thread, run) = ids();
        // Followed before the run started, as the request that starts it does.
        let mut follow = crate::events::follow_local(&hub, &run, None);
        hub.publish(&thread, &run, &event(0), None);
        hub.publish(&thread, &run, &finish(1), None);
        // Other runs end before the follower reads anything.
        for other in ["other-1", "other-2", "other-3"] {
            let other = RunId::new(other).unwrap();
            hub.publish(&thread, &other, &finish(0), None);
        }
        assert_eq!(follow.next().await.unwrap().seq, 0);
        assert_eq!(follow.next().await.unwrap().seq, 1);
        assert!(follow.next().await.is_none());
        assert!(follow.complete());
        drop(follow);
        let other = RunId::new("other-4").unwrap();
        hub.publish(&thread, &other, &finish(0), None);
        assert!(
            hub.buffers().replay(&run, None).events.is_empty(),
            "unfollowed, it is retained like any ended run"
        );
    }

    #[tokio::test]
    async fn a_follower_waiting_past_an_end_sees_the_resume_however_many_runs_end() {
        let config = EventsConfig {
            retained_runs: 1,
            ..EventsConfig::default()
        };
        let hub = LocalEventHub::new(&config);
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0), None);
        hub.publish(&thread, &run, &finish(1), None);
        let mut follow = crate::events::follow_local(&hub, &run, None).skip_backlog();
        {
            let mut next = Box::pin(follow.next());
            assert!(futures::poll!(next.as_mut()).is_pending(), "the run waits");
            let other = RunId::new("other").unwrap();
            hub.publish(&thread, &other, &finish(0), None);
            assert!(
                futures::poll!(next.as_mut()).is_pending(),
                "other runs ending end nothing the follower waits after"
            );
            hub.publish(&thread, &run, &event(2), None);
            let resumed = tokio::time::timeout(std::time::Duration::from_secs(5), next).await;
            assert_eq!(resumed.unwrap().unwrap().seq, 2);
        }
        assert!(follow.complete());
    }

    #[tokio::test]
    async fn a_follow_that_skips_its_backlog_sees_only_new_events() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        for seq in 0..3 {
            hub.publish(&thread, &run, &event(seq), None);
        }
        let mut follow = crate::events::follow_local(&hub, &run, None).skip_backlog();
        assert_eq!(follow.last_seq(), Some(2));
        hub.publish(&thread, &run, &event(3), None);
        assert_eq!(follow.next().await.unwrap().seq, 3);
        assert_eq!(follow.last_seq(), Some(3));
    }

    fn finish(seq: u64) -> Arc<StreamEvent> {
        let (thread_id, run_id) = ids();
        Arc::new(StreamEvent::new(
            seq,
            "2026-01-01T00:00:00Z",
            AgentEvent::RunFinish {
                thread_id,
                run_id,
                result: None,
                termination: awaken_actors::contract::TerminationReason::Suspended,
            },
        ))
    }

    async fn replayed_from_last_activation(events: &[Arc<StreamEvent>]) -> Vec<u64> {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        for event in events {
            hub.publish(&thread, &run, event, None);
        }
        let mut follow = crate::events::follow_local(&hub, &run, None)
            .from_last_activation()
            .replay_only();
        let mut seqs = Vec::new();
        while let Some(event) = follow.next().await {
            seqs.push(event.seq);
        }
        seqs
    }

    #[tokio::test]
    async fn replays_start_at_the_latest_activation() {
        // One activation that waits: all of it.
        assert_eq!(
            replayed_from_last_activation(&[event(0), finish(1)]).await,
            [0, 1]
        );
        // Waited, resumed, waits again: the second activation.
        assert_eq!(
            replayed_from_last_activation(&[event(0), finish(1), event(2), finish(3)]).await,
            [2, 3]
        );
        // Waited, resumed, still running: what ran since the resume.
        assert_eq!(
            replayed_from_last_activation(&[event(0), finish(1), event(2), event(3)]).await,
            [2, 3]
        );
        // Still in its first activation.
        assert_eq!(
            replayed_from_last_activation(&[event(0), event(1)]).await,
            [0, 1]
        );
    }

    #[test]
    fn a_ready_event_is_taken_without_waiting_once_and_in_order() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0), None);
        let mut follow = crate::events::follow_local(&hub, &run, None);
        // 0 was published before the follow subscribed, so it comes from the
        // buffer; later events come live, each seq once.
        assert_eq!(follow.next_ready().unwrap().unwrap().seq, 0);
        assert!(follow.next_ready().is_none(), "nothing arrived yet");
        hub.publish(&thread, &run, &event(1), None);
        hub.publish(&thread, &run, &event(1), None);
        hub.publish(&thread, &run, &finish(2), None);
        assert_eq!(follow.next_ready().unwrap().unwrap().seq, 1);
        assert_eq!(
            follow.next_ready().unwrap().unwrap().seq,
            2,
            "the repeat is skipped"
        );
        assert!(
            follow.next_ready().unwrap().is_none(),
            "the activation ended"
        );
    }

    #[test]
    fn a_ready_follower_takes_every_waiting_event_in_batches() {
        let config = EventsConfig {
            follower_batch: 3,
            ..EventsConfig::default()
        };
        let hub = LocalEventHub::new(&config);
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0), None);
        let mut follow = crate::events::follow_local(&hub, &run, None);
        for seq in 1..10 {
            hub.publish(&thread, &run, &event(seq), None);
        }
        let mut seqs = Vec::new();
        while let Some(Some(event)) = follow.next_ready() {
            seqs.push(event.seq);
        }
        assert_eq!(seqs, (0..10).collect::<Vec<_>>());
        assert!(follow.complete());
    }

    #[tokio::test]
    async fn a_replay_only_follow_ends_at_once_after_a_backlog_with_the_run_finish() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0), None);
        hub.publish(&thread, &run, &finish(1), None);
        let mut follow = crate::events::follow_local(&hub, &run, None).replay_only();
        assert_eq!(follow.next_ready().unwrap().unwrap().seq, 0);
        assert_eq!(follow.next_ready().unwrap().unwrap().seq, 1);
        assert!(follow.next_ready().unwrap().is_none());
    }

    /// The run's record said it ended, but its `RunFinish` was still on its way
    /// when the buffer was read: it is taken when it comes.
    #[tokio::test]
    async fn a_replay_only_follow_takes_a_run_finish_still_in_flight() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0), None);
        let mut follow = crate::events::follow_local(&hub, &run, None).replay_only();
        assert_eq!(follow.next().await.unwrap().seq, 0);
        assert!(
            follow.next_ready().is_none(),
            "not over without its RunFinish"
        );
        hub.publish(&thread, &run, &finish(1), None);
        assert_eq!(follow.next().await.unwrap().seq, 1);
        assert!(follow.next().await.is_none());
    }

    /// A run whose `RunFinish` left the buffer long ago: the follow ends after
    /// the grace.
    #[tokio::test(start_paused = true)]
    async fn a_replay_only_follow_without_its_run_finish_ends_after_the_grace() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0), None);
        let mut follow = crate::events::follow_local(&hub, &run, None).replay_only();
        assert_eq!(follow.next().await.unwrap().seq, 0);
        let started = tokio::time::Instant::now();
        assert!(follow.next().await.is_none());
        assert!(started.elapsed() >= std::time::Duration::from_secs(2));
    }

    #[test]
    fn unfollowed_runs_are_only_buffered() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0), None);
        assert_eq!(hub.followed_runs(), 0);
        assert_eq!(hub.buffers().len(), 1);
    }
}
