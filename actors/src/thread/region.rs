//! `ThreadRegion`: finds, starts, stops and restarts the thread actors of a node.
//!
//! Every message for a thread goes through [`ThreadRegion::send`]. A thread without a
//! live actor gets one, started from the thread's warm core when it has one, else
//! rehydrated from the store. An actor stops as soon as its thread is idle; stopping
//! is a handshake so no message is ever lost and no thread ever has two actors: the
//! actor first asks the region to *buffer* new messages, then sends itself
//! `Passivate`, which it handles only after every message already in its mailbox; if
//! nothing arrived meanwhile it stops (leaving its core warm), otherwise the buffered
//! messages are handed back and it stays. Warm cores are dropped after
//! `ThreadConfig::idle_passivation`: the thread is then passivated.

use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, MessagingErr, SupervisionEvent};

use crate::contract::Thread;
use crate::hashing::FastDashMap;
use crate::ids::ThreadId;
use crate::memory::NodeMemory;

use super::actor::{Kept, RegionView, ThreadActor, ThreadActorArgs, ThreadMsg};
use super::control::ControlError;
use super::core::WarmThread;
use super::deps::ThreadDeps;
use super::warm::WarmCores;

/// Messages waiting for a thread's actor.
///
/// Thread messages are `Send` but not `Sync` (they may carry tool outputs), while a
/// concurrent map needs `Sync` values; the mutex provides that and is only ever
/// taken under the map's own shard lock, so it is never contended.
#[derive(Default)]
struct Parked(std::sync::Mutex<Vec<ThreadMsg>>);

impl Parked {
    fn with(message: ThreadMsg) -> Self {
        Self(std::sync::Mutex::new(vec![message]))
    }

    fn push(&self, message: ThreadMsg) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(message);
    }

    fn take(&self) -> Vec<ThreadMsg> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }
}

enum Slot {
    /// An actor is starting; messages wait here.
    Starting(Parked),
    /// The actor is live.
    Live(ActorRef<ThreadMsg>),
    /// The actor asked to passivate; messages wait here.
    Passivating(ActorRef<ThreadMsg>, Parked),
}

struct Slots {
    /// Threads with an actor. Lock order: an entry of `map`, then one of `warm`.
    map: FastDashMap<ThreadId, Slot>,
    /// Idle threads without an actor; never holds a thread that is in `map`.
    warm: WarmCores,
    /// Woken whenever a thread's actor stops or its warm core is dropped.
    passivated: tokio::sync::Notify,
    /// The thread each supervised actor serves, and its restarts so far: an actor
    /// registers itself, so starting one sends the supervisor nothing.
    supervised: FastDashMap<ActorId, (ThreadId, u32)>,
}

impl Slots {
    fn new(memory: Arc<NodeMemory>) -> Self {
        Self {
            map: FastDashMap::default(),
            warm: WarmCores::new(memory),
            passivated: tokio::sync::Notify::new(),
            supervised: FastDashMap::default(),
        }
    }

    /// Drops warm cores idle for `keep` or longer, except those of threads not
    /// written yet, which only their first run (or [`ThreadRegion::take_unwritten`])
    /// takes away.
    fn sweep(&self, keep: Duration) {
        if self.warm.sweep(keep) > 0 {
            self.passivated.notify_waiters();
        }
    }

    /// Gives warm cores back past the node's warm-threads share.
    fn evict_warm(&self) {
        if self.warm.evict_over_share() > 0 {
            self.passivated.notify_waiters();
        }
    }
}

/// Sweeps warm cores every quarter of `keep` until the region is gone: one task per
/// node instead of a timer per thread.
fn spawn_sweeper(slots: Weak<Slots>, keep: Duration) {
    if keep.is_zero() {
        return;
    }
    let period = (keep / 4).clamp(Duration::from_millis(1), Duration::from_secs(30));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            let Some(slots) = slots.upgrade() else {
                return;
            };
            slots.sweep(keep);
        }
    });
}

impl RegionView for Slots {
    fn supervise(&self, thread_id: &ThreadId, actor: &ActorRef<ThreadMsg>, restarts: u32) {
        self.supervised
            .insert(actor.get_id(), (thread_id.clone(), restarts));
    }

    fn stopped(&self, thread_id: &ThreadId, actor: &ActorRef<ThreadMsg>) {
        let id = actor.get_id();
        self.supervised.remove(&id);
        let removed = self.map.remove_if(
            thread_id,
            |_, slot| matches!(slot, Slot::Live(a) | Slot::Passivating(a, _) if a.get_id() == id),
        );
        if removed.is_some() {
            self.passivated.notify_waiters();
        }
    }

    fn begin(&self, thread_id: &ThreadId, actor: &ActorRef<ThreadMsg>) -> bool {
        match self.map.get_mut(thread_id) {
            Some(mut slot) => match &*slot {
                Slot::Live(live) if live.get_id() == actor.get_id() => {
                    *slot = Slot::Passivating(actor.clone(), Parked::default());
                    true
                }
                _ => false,
            },
            None => false,
        }
    }

    fn cancel(&self, thread_id: &ThreadId, actor: &ActorRef<ThreadMsg>) -> Vec<ThreadMsg> {
        let Some(mut slot) = self.map.get_mut(thread_id) else {
            return Vec::new();
        };
        match std::mem::replace(&mut *slot, Slot::Live(actor.clone())) {
            Slot::Passivating(_, buffered) => buffered.take(),
            other => {
                *slot = other;
                Vec::new()
            }
        }
    }

    fn finish(
        &self,
        thread_id: &ThreadId,
        actor: &ActorRef<ThreadMsg>,
        warm: Option<WarmThread>,
    ) -> Result<(), Kept> {
        match self.map.entry(thread_id.clone()) {
            Entry::Occupied(mut occupied) => match occupied.get_mut() {
                Slot::Passivating(owner, buffered) if owner.get_id() == actor.get_id() => {
                    let buffered = buffered.take();
                    if buffered.is_empty() {
                        // Warm before the slot goes: a message that finds no slot
                        // must find the warm core.
                        if let Some(warm) = warm {
                            self.warm.insert(thread_id, warm);
                        }
                        occupied.remove();
                        // Forgotten before anyone learns it stopped.
                        self.supervised.remove(&actor.get_id());
                        self.passivated.notify_waiters();
                        self.evict_warm();
                        Ok(())
                    } else {
                        occupied.insert(Slot::Live(actor.clone()));
                        Err(Kept { buffered, warm })
                    }
                }
                _ => Ok(()),
            },
            Entry::Vacant(_) => Ok(()),
        }
    }
}

/// Routes messages to thread actors on this node, starting them on demand.
#[derive(Clone)]
pub struct ThreadRegion {
    deps: Arc<ThreadDeps>,
    slots: Arc<Slots>,
    supervisor: ActorRef<SupervisorMsg>,
}

impl std::fmt::Debug for ThreadRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadRegion")
            .field("live", &self.slots.map.len())
            .finish_non_exhaustive()
    }
}

impl ThreadRegion {
    /// A region with its supervisor actor.
    pub async fn start(deps: Arc<ThreadDeps>) -> Result<Self, ControlError> {
        let slots = Arc::new(Slots::new(Arc::clone(&deps.memory)));
        let (supervisor, _) = Actor::spawn(
            None,
            ThreadSupervisor,
            SupervisorArgs {
                deps: Arc::clone(&deps),
                slots: Arc::clone(&slots),
            },
        )
        .await
        .map_err(|e| ControlError::Unavailable(e.to_string()))?;
        spawn_sweeper(Arc::downgrade(&slots), deps.config.idle_passivation);
        Ok(Self {
            deps,
            slots,
            supervisor,
        })
    }

    /// Delivers a message to the thread's actor, starting one if needed.
    pub async fn send(&self, thread_id: &ThreadId, message: ThreadMsg) -> Result<(), ControlError> {
        let mut message = message;
        loop {
            match self.slots.map.entry(thread_id.clone()) {
                Entry::Occupied(mut occupied) => match occupied.get_mut() {
                    Slot::Starting(parked) | Slot::Passivating(_, parked) => {
                        parked.push(message);
                        return Ok(());
                    }
                    // Sent under the slot's lock: the actor cannot begin to passivate
                    // between this lookup and the send, so the message is either in
                    // its mailbox before its `Passivate` (which then keeps it alive)
                    // or parked.
                    Slot::Live(actor) => match actor.send_message(message) {
                        Ok(()) => return Ok(()),
                        Err(MessagingErr::SendErr(returned)) => {
                            // The actor died without its slot being cleared: forget
                            // it and start another.
                            occupied.remove();
                            message = returned;
                        }
                        Err(error) => return Err(ControlError::Unavailable(error.to_string())),
                    },
                },
                Entry::Vacant(vacant) => {
                    vacant.insert(Slot::Starting(Parked::with(message)));
                    // Nothing adds a warm core while the slot is `Starting`.
                    let warm = self.slots.warm.remove(thread_id);
                    return start_actor(
                        Arc::clone(&self.deps),
                        Arc::clone(&self.slots),
                        self.supervisor.clone(),
                        thread_id.clone(),
                        Start { restarts: 0, warm },
                    )
                    .await;
                }
            }
        }
    }

    /// Keeps the thread `thread_id`, just created in the store and still empty, as a warm core,
    /// so the actor of its first run starts from it instead of reading it back:
    /// one statement less for every new conversation. Only for a thread with
    /// neither an actor nor a warm core here; the caller vouches that nothing
    /// else writes the thread (see [`AgentRuntime::seed_new_thread`]).
    ///
    /// [`AgentRuntime::seed_new_thread`]: crate::runtime::AgentRuntime::seed_new_thread
    pub fn seed(&self, thread_id: &ThreadId) {
        // Under the slot's lock, as `send` takes it: no actor can start between
        // the check and the insert, and `warm` never holds a thread in `map`.
        if let Entry::Vacant(_slot) = self.slots.map.entry(thread_id.clone()) {
            self.slots
                .warm
                .insert_if_absent(thread_id, || WarmThread::empty(thread_id));
        }
        self.slots.evict_warm();
    }

    /// Keeps `thread`, made for a run about to start and not in the store yet,
    /// as a warm core: the actor of its first run starts from it without reading
    /// the store, and that run's first checkpoint writes the thread (decision
    /// 0071). `false`, keeping nothing, when the thread has an actor or a warm
    /// core here already. The caller vouches that nothing else writes the thread
    /// (see [`AgentRuntime::adopt_new_thread`]).
    ///
    /// [`AgentRuntime::adopt_new_thread`]: crate::runtime::AgentRuntime::adopt_new_thread
    pub fn adopt_unwritten(&self, thread: &Thread) -> bool {
        // Under the slot's lock, as `send` takes it: no actor can start between
        // the check and the insert, and `warm` never holds a thread in `map`.
        let kept = match self.slots.map.entry(thread.id.clone()) {
            Entry::Vacant(_slot) => self
                .slots
                .warm
                .insert_if_absent(&thread.id, || WarmThread::unwritten(thread)),
            Entry::Occupied(_) => false,
        };
        self.slots.evict_warm();
        kept
    }

    /// Takes away the warm core of a thread [adopted](Self::adopt_unwritten) and
    /// still unwritten, giving back the thread: its run was refused, or ends
    /// without starting and is recorded with the thread.
    pub fn take_unwritten(&self, thread_id: &ThreadId) -> Option<Thread> {
        let warm = self.slots.warm.remove_unwritten(thread_id)?;
        self.slots.passivated.notify_waiters();
        let metadata = *warm.core.unwritten?;
        Some(Thread {
            id: thread_id.clone(),
            metadata,
        })
    }

    /// Whether the thread has an actor on this node (live, starting or stopping).
    pub fn is_live(&self, thread_id: &ThreadId) -> bool {
        self.slots.map.contains_key(thread_id)
    }

    /// The threads `select` picks that have an actor on this node.
    pub fn live_thread_ids(&self, select: impl Fn(&ThreadId) -> bool) -> Vec<ThreadId> {
        self.slots
            .map
            .iter()
            .filter(|slot| select(slot.key()))
            .map(|slot| slot.key().clone())
            .collect()
    }

    /// Whether the thread is idle without an actor, its core still in memory.
    pub fn is_warm(&self, thread_id: &ThreadId) -> bool {
        self.slots.warm.contains(thread_id)
    }

    /// Resolves once the thread has no actor on this node.
    pub async fn stopped(&self, thread_id: &ThreadId) {
        self.wait_until(|| !self.is_live(thread_id)).await;
    }

    /// Resolves once the thread holds no memory on this node: no actor, no warm core.
    pub async fn passivated(&self, thread_id: &ThreadId) {
        self.wait_until(|| !self.is_live(thread_id) && !self.is_warm(thread_id))
            .await;
    }

    /// Resolves once no thread has an actor on this node.
    pub async fn all_stopped(&self) {
        self.wait_until(|| self.slots.map.is_empty()).await;
    }

    async fn wait_until(&self, done: impl Fn() -> bool) {
        loop {
            let notified = self.slots.passivated.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done() {
                return;
            }
            notified.await;
        }
    }

    /// Number of threads with a live (or starting, or stopping) actor.
    pub fn live_threads(&self) -> usize {
        self.slots.map.len()
    }

    /// Number of idle threads whose core is still in memory.
    pub fn warm_threads(&self) -> usize {
        self.slots.warm.len()
    }

    /// Number of thread actors the supervisor would restart: live actors that took
    /// their first message. Falls to 0 with `live_threads`; anything else is a leak.
    pub fn supervised_threads(&self) -> usize {
        self.slots.supervised.len()
    }

    /// Drops every thread `select` picks from this node: warm cores at once, live
    /// actors stopped (their last checkpoint stands; whoever owns the thread next
    /// resumes from it). Resolves once none of them has an actor left.
    pub async fn evict(&self, select: impl Fn(&ThreadId) -> bool) {
        loop {
            let notified = self.slots.passivated.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // A stopping actor may still park its core in `warm`: clear every round.
            if self
                .slots
                .warm
                .drop_where(|thread_id, _, _| select(thread_id))
                > 0
            {
                self.slots.passivated.notify_waiters();
            }
            let mut remaining = false;
            for slot in self.slots.map.iter().filter(|slot| select(slot.key())) {
                remaining = true;
                if let Slot::Live(actor) | Slot::Passivating(actor, _) = slot.value() {
                    actor.stop(Some("evicted".to_owned()));
                }
            }
            if !remaining {
                return;
            }
            // An actor still starting is stopped on the next round; starting is not
            // announced, so re-check after a short while as well.
            let _ = tokio::time::timeout(Duration::from_millis(20), notified).await;
        }
    }

    /// Stops every thread actor and the supervisor, and drops warm cores.
    pub async fn shutdown(&self) {
        self.supervisor
            .get_cell()
            .stop_children_and_wait(None, None)
            .await;
        self.supervisor.stop(None);
        self.slots.warm.clear();
        self.slots.passivated.notify_waiters();
    }
}

/// How a thread's actor starts.
struct Start {
    /// Restarts after failures so far.
    restarts: u32,
    /// The thread's warm core; `None` rehydrates from the store.
    warm: Option<WarmThread>,
}

/// Starts (or restarts) the actor of a thread whose slot is `Starting`, then hands
/// it the buffered messages.
///
/// The actor is spawned unlinked and links to the supervisor itself when it takes
/// its first message: linked from the start, ractor would announce the start to
/// the supervisor, waking it (and with it the node's other worker) on every run.
/// Until that first message the actor has run only `pre_start`, whose failure
/// reaches this spawner, and stopping, which it reports itself (`post_stop`).
async fn start_actor(
    deps: Arc<ThreadDeps>,
    slots: Arc<Slots>,
    supervisor: ActorRef<SupervisorMsg>,
    thread_id: ThreadId,
    start: Start,
) -> Result<(), ControlError> {
    let Start { restarts, warm } = start;
    let args = ThreadActorArgs {
        thread_id: thread_id.clone(),
        deps,
        region: Arc::clone(&slots) as Arc<dyn RegionView>,
        supervisor: supervisor.get_cell(),
        restarts,
        warm,
    };
    match Actor::spawn(None, ThreadActor, args).await {
        Ok((actor, _)) => {
            hand_over(&slots, &thread_id, &actor);
            Ok(())
        }
        Err(error) => {
            // Dropping the buffered messages closes their reply ports: callers see
            // the failure.
            slots.map.remove(&thread_id);
            tracing::error!(thread_id = %thread_id, %error, "cannot start thread actor");
            Err(ControlError::Unavailable(error.to_string()))
        }
    }
}

/// Makes a started actor its thread's live actor and hands it the parked messages,
/// under the slot's lock as `send` does: an actor that found itself idle at start
/// must not begin to passivate before they are in its mailbox.
fn hand_over(slots: &Slots, thread_id: &ThreadId, actor: &ActorRef<ThreadMsg>) {
    match slots.map.entry(thread_id.clone()) {
        Entry::Occupied(mut occupied) => {
            let slot = occupied.get_mut();
            if let Slot::Starting(parked) = slot {
                let buffered = parked.take();
                *slot = Slot::Live(actor.clone());
                for message in buffered {
                    let _ = actor.send_message(message);
                }
            }
        }
        Entry::Vacant(vacant) => {
            vacant.insert(Slot::Live(actor.clone()));
        }
    }
}

/// Messages of the supervisor: none, it only hears supervision events (thread
/// actors register in [`Slots::supervised`]).
pub(crate) enum SupervisorMsg {}

/// Restarts thread actors that fail, one for one, from their last checkpoint.
struct ThreadSupervisor;

struct SupervisorArgs {
    deps: Arc<ThreadDeps>,
    slots: Arc<Slots>,
}

struct SupervisorState {
    deps: Arc<ThreadDeps>,
    slots: Arc<Slots>,
}

impl SupervisorState {
    /// Restarts a failed thread actor from the thread's last checkpoint.
    fn failed(
        &self,
        myself: ActorRef<SupervisorMsg>,
        actor: ActorId,
        thread_id: ThreadId,
        restarts: u32,
        error: &str,
    ) {
        tracing::error!(thread_id = %thread_id, %error, restarts, "thread actor failed; restarting from its last checkpoint");
        // Keep new messages for the thread while its replacement starts.
        let owned = match self.slots.map.get_mut(&thread_id) {
            Some(mut slot) => match &mut *slot {
                Slot::Live(live) | Slot::Passivating(live, _) if live.get_id() == actor => {
                    let parked =
                        match std::mem::replace(&mut *slot, Slot::Starting(Parked::default())) {
                            Slot::Passivating(_, parked) => parked,
                            _ => Parked::default(),
                        };
                    *slot = Slot::Starting(parked);
                    true
                }
                _ => false,
            },
            None => {
                self.slots
                    .map
                    .insert(thread_id.clone(), Slot::Starting(Parked::default()));
                self.slots.warm.remove(&thread_id);
                true
            }
        };
        if owned {
            let deps = Arc::clone(&self.deps);
            let slots = Arc::clone(&self.slots);
            tokio::spawn(async move {
                // A restart never trusts memory: the last checkpoint is the truth.
                let start = Start {
                    restarts: restarts + 1,
                    warm: None,
                };
                let _ = start_actor(deps, slots, myself, thread_id, start).await;
            });
        }
    }

    /// A thread actor ended without running `post_stop` (killed): it leaves no
    /// stale route behind; messages it had parked are dropped, so their senders see
    /// the thread as unavailable.
    fn killed(&self, actor: ActorId, thread_id: &ThreadId) {
        self.slots.map.remove_if(thread_id, |_, slot| {
            matches!(slot, Slot::Live(a) | Slot::Passivating(a, _) if a.get_id() == actor)
        });
        self.slots.passivated.notify_waiters();
    }
}

impl Actor for ThreadSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SupervisorState {
            deps: args.deps,
            slots: args.slots,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {}
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A stopped actor forgot itself in `post_stop`; only failed and killed ones
        // are still registered.
        match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                let actor = cell.get_id();
                if let Some((_, (thread_id, restarts))) = state.slots.supervised.remove(&actor) {
                    state.failed(myself, actor, thread_id, restarts, &error.to_string());
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                let actor = cell.get_id();
                if let Some((_, (thread_id, _))) = state.slots.supervised.remove(&actor) {
                    state.killed(actor, &thread_id);
                }
            }
            _ => {}
        }
        Ok(())
    }
}
