//! The single-node twin of [`ClusterEventHub`](super::ClusterEventHub): the same
//! replay buffers, with live followers fed from in-process channels instead of NATS.

use std::sync::Arc;

use awaken_actors::contract::StreamEvent;
use awaken_actors::hashing::FastDashMap;
use awaken_actors::thread::EventHub;
use awaken_actors::{RunId, ThreadId};
use tokio::sync::broadcast;

use super::{EventsConfig, ReplayBuffers};

/// Keeps every run's newest events and hands live ones to local followers.
///
/// A run has a live channel only while someone follows it, so runs nobody watches
/// cost their replay buffer and nothing more.
#[derive(Debug)]
pub struct LocalEventHub {
    buffers: Arc<ReplayBuffers>,
    /// Events a follower may fall behind by before it refills from the buffer.
    live_capacity: usize,
    live: Arc<FastDashMap<RunId, broadcast::Sender<Arc<StreamEvent>>>>,
}

impl LocalEventHub {
    /// A hub with the buffer sizes of `config` (`publish_queue` does not apply).
    pub fn new(config: &EventsConfig) -> Self {
        Self {
            buffers: Arc::new(ReplayBuffers::new(
                config.replay_capacity,
                config.retained_runs,
            )),
            live_capacity: config.live_capacity.max(1),
            live: Arc::new(FastDashMap::default()),
        }
    }

    /// The replay buffers this hub fills.
    pub fn buffers(&self) -> &Arc<ReplayBuffers> {
        &self.buffers
    }

    /// Live events of `run_id` from now on; dropping the subscription ends it.
    pub fn subscribe(&self, run_id: &RunId) -> LiveSubscription {
        let receiver = self
            .live
            .entry(run_id.clone())
            .or_insert_with(|| broadcast::channel(self.live_capacity).0)
            .subscribe();
        LiveSubscription {
            run_id: run_id.clone(),
            receiver: Some(receiver),
            live: Arc::clone(&self.live),
        }
    }

    /// Runs with at least one live follower.
    pub fn followed_runs(&self) -> usize {
        self.live.len()
    }
}

impl EventHub for LocalEventHub {
    fn publish(&self, _thread_id: &ThreadId, run_id: &RunId, event: &Arc<StreamEvent>) {
        // Buffer first: a follower that subscribed before this line and replays
        // after it sees the event twice (deduplicated by seq), never not at all.
        // The buffer, the live channel's slots and the followers share one copy.
        self.buffers.push(run_id, Arc::clone(event));
        if let Some(sender) = self.live.get(run_id) {
            // No receiver left is fine: the last follower is just unsubscribing.
            let _ = sender.send(Arc::clone(event));
        }
    }
}

/// One follower's live feed of a run.
#[derive(Debug)]
pub struct LiveSubscription {
    run_id: RunId,
    receiver: Option<broadcast::Receiver<Arc<StreamEvent>>>,
    live: Arc<FastDashMap<RunId, broadcast::Sender<Arc<StreamEvent>>>>,
}

/// The follower fell behind and missed live events: refill from the replay buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lagged;

impl LiveSubscription {
    /// The next live event; pending forever once the hub is gone (a follower also
    /// ends at the run's `RunFinish`, which always comes).
    pub async fn recv(&mut self) -> Result<Arc<StreamEvent>, Lagged> {
        let Some(receiver) = self.receiver.as_mut() else {
            return std::future::pending().await;
        };
        match receiver.recv().await {
            Ok(event) => Ok(event),
            Err(broadcast::error::RecvError::Lagged(_)) => Err(Lagged),
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }

    /// The next live event if one is already waiting (`Ok(None)` when none is, or
    /// the hub is gone), without registering to be woken.
    pub fn try_recv(&mut self) -> Result<Option<Arc<StreamEvent>>, Lagged> {
        let Some(receiver) = self.receiver.as_mut() else {
            return Ok(None);
        };
        match receiver.try_recv() {
            Ok(event) => Ok(Some(event)),
            Err(broadcast::error::TryRecvError::Lagged(_)) => Err(Lagged),
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => {
                Ok(None)
            }
        }
    }
}

impl Drop for LiveSubscription {
    fn drop(&mut self) {
        drop(self.receiver.take());
        self.live
            .remove_if(&self.run_id, |_, sender| sender.receiver_count() == 0);
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

    #[tokio::test]
    async fn followers_get_live_events_and_leave_no_channel_behind() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0));
        let mut first = hub.subscribe(&run);
        let mut second = hub.subscribe(&run);
        hub.publish(&thread, &run, &event(1));
        for follower in [&mut first, &mut second] {
            assert_eq!(follower.recv().await.unwrap().seq, 1);
        }
        assert_eq!(hub.buffers().replay(&run, None).events.len(), 2);
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
        hub.publish(&thread, &run, &published);
        assert!(Arc::ptr_eq(&follower.recv().await.unwrap(), &published));
        let replayed = hub.buffers().replay(&run, None).events;
        assert!(Arc::ptr_eq(&replayed[0], &published));
    }

    #[tokio::test]
    async fn a_slow_follower_is_told_it_lagged() {
        let config = EventsConfig::default();
        let hub = LocalEventHub::new(&config);
        let (thread, run) = ids();
        let mut follower = hub.subscribe(&run);
        for seq in 0..(config.live_capacity as u64 + 10) {
            hub.publish(&thread, &run, &event(seq));
        }
        assert_eq!(follower.recv().await.unwrap_err(), Lagged);
    }

    #[tokio::test]
    async fn a_follow_that_skips_its_backlog_sees_only_new_events() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        for seq in 0..3 {
            hub.publish(&thread, &run, &event(seq));
        }
        let mut follow = crate::events::follow_local(&hub, &run, None).skip_backlog();
        assert_eq!(follow.last_seq(), Some(2));
        hub.publish(&thread, &run, &event(3));
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
            hub.publish(&thread, &run, event);
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
        hub.publish(&thread, &run, &event(0));
        let mut follow = crate::events::follow_local(&hub, &run, None);
        // 0 was published before the follow subscribed, so it comes from the
        // buffer; later events come live, each seq once.
        assert_eq!(follow.next_ready().unwrap().unwrap().seq, 0);
        assert!(follow.next_ready().is_none(), "nothing arrived yet");
        hub.publish(&thread, &run, &event(1));
        hub.publish(&thread, &run, &event(1));
        hub.publish(&thread, &run, &finish(2));
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
    fn a_ready_follower_that_lagged_refills_from_the_buffer() {
        let config = EventsConfig::default();
        let hub = LocalEventHub::new(&config);
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0));
        let mut follow = crate::events::follow_local(&hub, &run, None);
        let published = config.live_capacity as u64 + 10;
        for seq in 1..published {
            hub.publish(&thread, &run, &event(seq));
        }
        let mut seqs = Vec::new();
        while let Some(Some(event)) = follow.next_ready() {
            seqs.push(event.seq);
        }
        assert_eq!(seqs, (0..published).collect::<Vec<_>>());
        assert!(follow.complete());
    }

    #[test]
    fn a_replay_only_follow_is_ready_to_end_after_its_backlog() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0));
        let mut follow = crate::events::follow_local(&hub, &run, None).replay_only();
        assert_eq!(follow.next_ready().unwrap().unwrap().seq, 0);
        assert!(follow.next_ready().unwrap().is_none());
    }

    #[test]
    fn unfollowed_runs_are_only_buffered() {
        let hub = LocalEventHub::new(&EventsConfig::default());
        let (thread, run) = ids();
        hub.publish(&thread, &run, &event(0));
        assert_eq!(hub.followed_runs(), 0);
        assert_eq!(hub.buffers().len(), 1);
    }
}
