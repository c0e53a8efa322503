//! The ownership loop behind [`ShardOwner`](super::ShardOwner).
//!
//! Three kinds of round move the node towards its quota:
//!
//! - every `lease_ttl / 3` it renews its leases, reads who holds what and balances;
//! - on every membership change it reads who holds what and balances;
//! - short of its quota while a departed node's leases still run, it tries to
//!   create those leases the moment they expire, without reading the table again
//!   (a scan racing the expiry could wait for an entry the server just dropped).
//!
//! Balancing gives up shards beyond the quota (draining them first) and takes free
//! shards up to it, in the node's rendezvous order. A lease it could not renew
//! within a TTL is lost: its threads are dropped at once, and their stale writes
//! are refused by the fence anyway.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use awaken_actors::backoff::Backoff;
use awaken_actors::clock::now_ms;

use tokio::sync::watch;

use super::contract::{Ownership, ShardEvent, ShardOwnerConfig};
use super::lease::{HeldLease, Holder, LeaseTable};
use super::meters::LeaseMeters;
use super::tenure::Tenure;
use super::{ShardId, preference, quota};
use crate::error::ClusterError;
use crate::expiry::{EXPIRY_RECHECK, rechecks, time_left};
use crate::membership::NodeId;

/// Lease creates in flight at once while taking shards.
const ACQUIRE_BATCH: usize = 64;

/// Why a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// The renewal tick.
    Tick,
    /// The member set changed.
    Members,
    /// A departed node's lease is due to expire.
    Expiry,
}

/// The state of the ownership loop.
pub(super) struct Keeper {
    pub(super) node_id: NodeId,
    pub(super) config: ShardOwnerConfig,
    pub(super) table: LeaseTable,
    pub(super) members: watch::Receiver<BTreeSet<NodeId>>,
    pub(super) events: Arc<dyn ShardEvent>,
    /// Held leases, with the instant before each was last written.
    pub(super) held: BTreeMap<ShardId, (HeldLease, Instant)>,
    pub(super) ownership: watch::Sender<Ownership>,
    /// Until when the held leases may be acted on (moved by every write).
    pub(super) tenure: Arc<Tenure>,
    /// Shards held by nodes that left, as last read, with their leases' expiry.
    pub(super) departed: Departed,
    pub(super) meters: LeaseMeters,
}

impl Keeper {
    pub(super) async fn run(mut self, mut stop: watch::Receiver<bool>) -> Self {
        let mut tick = tokio::time::interval(self.config.lease_ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // When membership ends, the last view stays and only the timer drives rounds.
        let mut members_open = true;
        let mut look_again: Option<tokio::time::Instant> = None;
        let mut recheck = rechecks(self.config.lease_ttl / 3);
        loop {
            let members_changed = async {
                if members_open {
                    self.members.changed().await.is_ok()
                } else {
                    std::future::pending().await
                }
            };
            let expiry = async {
                match look_again {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let round = tokio::select! {
                _ = stop.changed() => return self,
                _ = tick.tick() => Round::Tick,
                open = members_changed => {
                    members_open = open;
                    Round::Members
                }
                () = expiry => Round::Expiry,
            };
            if let Err(error) = self.round(round, &stop).await {
                tracing::warn!(%error, "shard ownership round failed; retrying");
            }
            look_again = self.next_look(&mut recheck);
        }
    }

    /// When to try a departed node's shards next, while this node is short of its
    /// quota and one is held.
    fn next_look(&self, recheck: &mut Backoff) -> Option<tokio::time::Instant> {
        let quota = quota(self.config.count, &self.members.borrow(), &self.node_id) as usize;
        if self.held.len() >= quota {
            return None;
        }
        // A lease still held past its expiry waits for the pause, doubling up to
        // the renewal tick; one still running is tried when it expires.
        let wait = match time_left(self.departed.next()?, SystemTime::now()) {
            Some(left) => {
                recheck.reset();
                left.max(EXPIRY_RECHECK)
            }
            None => recheck.next_pause(),
        };
        Some(tokio::time::Instant::now() + wait)
    }

    async fn round(
        &mut self,
        round: Round,
        stop: &watch::Receiver<bool>,
    ) -> Result<(), ClusterError> {
        let members = self.members.borrow().clone();
        let quota = quota(self.config.count, &members, &self.node_id) as usize;
        if round == Round::Expiry {
            let due = self.departed.due(SystemTime::now());
            let wanted = preference(&self.node_id, due);
            let taken = self.acquire_up_to(quota, wanted).await;
            self.departed.remove(self.held.keys());
            return taken;
        }
        if round == Round::Tick {
            self.renew().await;
        }
        let holders = self.table.holders().await?;
        self.departed = Departed::among(&holders, &members, &self.node_id);
        if self.held.len() > quota {
            let held: Vec<ShardId> = self.held.keys().copied().collect();
            let mut least_wanted = preference(&self.node_id, held);
            least_wanted.reverse();
            let surplus: Vec<ShardId> = least_wanted
                .into_iter()
                .take(self.held.len() - quota)
                .collect();
            self.hand_off(&surplus, stop.clone()).await;
            self.release(&surplus).await?;
        }
        if self.held.len() < quota {
            let free = self
                .config
                .count
                .all()
                .filter(|shard| !holders.contains_key(shard) && !self.held.contains_key(shard));
            self.acquire_up_to(quota, preference(&self.node_id, free))
                .await?;
        }
        Ok(())
    }

    /// Takes shards from `wanted`, in order, until this node holds `quota`. The
    /// creates of a batch go out together: a node taking over a departed node's
    /// share would otherwise free its threads one round trip at a time.
    async fn acquire_up_to(
        &mut self,
        quota: usize,
        wanted: Vec<ShardId>,
    ) -> Result<(), ClusterError> {
        let mut wanted = wanted.into_iter();
        while self.held.len() < quota {
            let batch: Vec<ShardId> = wanted
                .by_ref()
                .take((quota - self.held.len()).min(ACQUIRE_BATCH))
                .collect();
            if batch.is_empty() {
                return Ok(());
            }
            let at_ms = now_ms();
            let sent_at = Instant::now();
            let outcomes = futures::future::join_all(
                batch
                    .iter()
                    .map(|shard| self.table.acquire(*shard, &self.node_id, at_ms)),
            )
            .await;
            let mut acquired = Vec::new();
            let mut failed = None;
            for outcome in outcomes {
                match outcome {
                    Ok(Some(lease)) => {
                        self.meters.acquired.inc();
                        acquired.push((lease.shard, lease.token));
                        self.held.insert(lease.shard, (lease, sent_at));
                    }
                    Ok(None) => {}
                    // The leases taken beside a failed create are kept.
                    Err(error) => failed = Some(error),
                }
            }
            if !acquired.is_empty() {
                self.publish();
            }
            for (shard, token) in acquired {
                self.events.acquired(shard, token).await;
            }
            if let Some(error) = failed {
                return Err(error);
            }
        }
        Ok(())
    }

    /// Renews every held lease, all at once and each within
    /// [`renewal_wait`](Self::renewal_wait): one renewal stuck behind a
    /// reconnect must not hold the others (nor the tenure) past their TTL. Drops
    /// the leases lost or not renewed within a TTL.
    async fn renew(&mut self) {
        let wait = self.renewal_wait();
        let (table, node_id) = (&self.table, &self.node_id);
        let sent_at = Instant::now();
        let outcomes = futures::future::join_all(self.held.iter_mut().map(
            |(shard, (lease, renewed_at))| async move {
                let outcome = match tokio::time::timeout(wait, table.renew(lease, node_id)).await {
                    Ok(outcome) => outcome,
                    Err(_) => Err(ClusterError::TimedOut {
                        doing: "a lease renewal",
                        after: wait,
                    }),
                };
                (*shard, renewed_at, outcome)
            },
        ))
        .await;
        let mut lost = Vec::new();
        for (shard, renewed_at, outcome) in outcomes {
            match outcome {
                Ok(true) => *renewed_at = sent_at,
                Ok(false) => lost.push(shard),
                Err(error) => {
                    self.meters.renewal_failures.inc();
                    tracing::warn!(%error, %shard, "lease renewal failed");
                    if renewed_at.elapsed() >= self.config.lease_ttl {
                        lost.push(shard);
                    }
                }
            }
        }
        self.update_tenure();
        for shard in lost {
            self.meters.lost.inc();
            tracing::warn!(%shard, "shard lease lost");
            self.held.remove(&shard);
            self.publish();
            self.events.lost(shard).await;
        }
    }

    /// Lets the runs executing on `shards` finish here before the shards are
    /// released (decision 0057), renewing every lease meanwhile; gives up after
    /// two lease TTLs (a longer run continues on the next owner from its
    /// checkpoint), or at once when the node stops (its drain has its own wait).
    async fn hand_off(&mut self, shards: &[ShardId], mut stop: watch::Receiver<bool>) {
        let events = Arc::clone(&self.events);
        let settled = events.handing_off(shards);
        tokio::pin!(settled);
        let limit = tokio::time::sleep(self.config.lease_ttl * 2);
        tokio::pin!(limit);
        let stopping = async move {
            // The guard `wait_for` returns is dropped here, not held by the loop.
            let _ = stop.wait_for(|stopping| *stopping).await;
        };
        tokio::pin!(stopping);
        let period = self.config.lease_ttl / 3;
        let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            tokio::select! {
                () = &mut settled => return,
                // A node stopping drains every shard anyway: no reason to wait.
                () = &mut stopping => return,
                () = &mut limit => {
                    tracing::warn!(shards = shards.len(), "runs still executing on shards being handed off: the next owner continues them from their checkpoints");
                    return;
                }
                _ = renew.tick() => self.renew().await,
            }
        }
    }

    /// Stops the threads of `shards`, then releases their leases.
    async fn release(&mut self, shards: &[ShardId]) -> Result<(), ClusterError> {
        self.events.draining(shards).await;
        for shard in shards {
            if let Some((lease, _)) = self.held.remove(shard) {
                self.publish();
                self.table.release(lease).await?;
            }
        }
        Ok(())
    }

    pub(super) async fn release_all(&mut self) -> Result<(), ClusterError> {
        let shards: Vec<ShardId> = self.held.keys().copied().collect();
        self.release(&shards).await
    }

    /// Moves the tenure to the deadline of the earliest written lease.
    fn update_tenure(&self) {
        let earliest = self.held.values().map(|(_, sent_at)| *sent_at).min();
        self.tenure
            .set(earliest.map(|sent_at| self.tenure.deadline(sent_at)));
    }

    /// How long one renewal may take: a tick (a third of the TTL), so a round
    /// ends by the next one and a slow but healthy server still renews; the
    /// leases it renews still run for two thirds of a TTL.
    fn renewal_wait(&self) -> std::time::Duration {
        self.config.lease_ttl / 3
    }

    /// Publishes the held shards (and their tenure).
    fn publish(&self) {
        self.update_tenure();
        let ownership = self
            .held
            .iter()
            .map(|(shard, (lease, _))| (*shard, lease.token))
            .collect();
        self.ownership.send_replace(ownership);
    }
}

/// The shards held by nodes that left the cluster, with when their leases expire:
/// free from then on, and waiting for the next renewal tick would add up to a
/// third of a TTL to every failover.
#[derive(Debug, Default)]
pub(super) struct Departed(BTreeMap<ShardId, SystemTime>);

impl Departed {
    /// The shards in `holders` held by neither a member nor `node_id`.
    fn among(
        holders: &BTreeMap<ShardId, Holder>,
        members: &BTreeSet<NodeId>,
        node_id: &NodeId,
    ) -> Self {
        Self(
            holders
                .iter()
                .filter(|(_, holder)| {
                    holder.node_id != *node_id && !members.contains(&holder.node_id)
                })
                .map(|(shard, holder)| (*shard, holder.expires_at))
                .collect(),
        )
    }

    /// When the first of them expires.
    fn next(&self) -> Option<SystemTime> {
        self.0.values().min().copied()
    }

    /// Those expired by `now`.
    fn due(&self, now: SystemTime) -> Vec<ShardId> {
        self.0
            .iter()
            .filter(|(_, expires_at)| **expires_at <= now)
            .map(|(shard, _)| *shard)
            .collect()
    }

    /// Forgets `shards` (taken).
    fn remove<'a>(&mut self, shards: impl Iterator<Item = &'a ShardId>) {
        for shard in shards {
            self.0.remove(shard);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::{Duration, UNIX_EPOCH};

    use awaken_actors::store::FencingToken;

    use super::*;

    fn node(id: &str) -> NodeId {
        NodeId::new(id).unwrap()
    }

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn held_by(id: &str, expires_at_ms: u64) -> Holder {
        Holder {
            node_id: node(id),
            token: FencingToken(1),
            expires_at: at(expires_at_ms),
        }
    }

    #[test]
    fn only_leases_of_departed_nodes_are_waited_for() {
        let holders = BTreeMap::from([
            (ShardId(0), held_by("gone", 900)),
            (ShardId(1), held_by("gone", 700)),
            (ShardId(2), held_by("also-gone", 800)),
            (ShardId(3), held_by("alive", 100)),
            (ShardId(4), held_by("me", 50)),
        ]);
        // This node counts as its own even when the view misses it.
        let members = BTreeSet::from([node("alive")]);
        let departed = Departed::among(&holders, &members, &node("me"));
        assert_eq!(departed.next(), Some(at(700)));
        assert_eq!(departed.due(at(799)), [ShardId(1)]);
        assert_eq!(departed.due(at(900)), [ShardId(0), ShardId(1), ShardId(2)]);
    }

    #[test]
    fn taken_shards_are_no_longer_waited_for() {
        let holders = BTreeMap::from([
            (ShardId(0), held_by("gone", 900)),
            (ShardId(1), held_by("gone", 700)),
        ]);
        let mut departed = Departed::among(&holders, &BTreeSet::new(), &node("me"));
        departed.remove([ShardId(1)].iter());
        assert_eq!(departed.next(), Some(at(900)));
        departed.remove([ShardId(0)].iter());
        assert_eq!(departed.next(), None);
    }
}
