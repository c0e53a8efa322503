//! `Replica`: a node's copy of the mailbox state, built by applying the ledger
//! stream in order, and the callers waiting for their commands' answers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use awaken_actors::hashing::FastHashMap;
use awaken_actors::ids::{RunId, ThreadId};
use awaken_actors::mailbox::{MailboxError, MailboxState, QueueWatch, QueueWatchers};
use awaken_actors::memory::{Charge, Held, NodeMemory};
use awaken_actors::thread::RunRequest;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::command::{Answer, Command, Outcome};
use super::inputs::RunInputs;

/// The state as of a stream sequence.
#[derive(Debug, Default)]
pub(crate) struct Folded {
    /// The mailbox after every batch up to `applied`.
    pub(crate) state: MailboxState,
    /// The run inputs that came with enqueues, while their runs may start.
    pub(crate) inputs: RunInputs,
    /// The last stream sequence applied (0: none).
    pub(crate) applied: u64,
    /// What `inputs` hold, charged to the node's admitted memory once the node
    /// asks for it ([`Replica::charge_inputs`]).
    pub(crate) charge: Option<Charge>,
}

impl Folded {
    /// Charges what the inputs hold now.
    fn recharge(&mut self) {
        if let Some(charge) = &mut self.charge {
            charge.set(self.inputs.bytes());
        }
    }
}

/// An op as the replica applies it.
#[derive(Debug)]
pub(crate) struct LedgerOp {
    /// The op's id (its caller waits on it when the batch is this node's).
    pub(crate) id: u64,
    /// What it does.
    pub(crate) command: Command,
    /// This node's queue watchers were told of its thread when the op was
    /// submitted (an enqueue of this node): applying it does not tell them again.
    pub(crate) watchers_told: bool,
}

impl LedgerOp {
    /// An op of a batch as read from the stream.
    pub(crate) fn read(id: u64, command: Command) -> Self {
        Self {
            id,
            command,
            watchers_told: false,
        }
    }
}

/// A node's replica of the mailbox.
#[derive(Debug)]
pub(crate) struct Replica {
    /// This mailbox instance's writer id: batches carrying it hold our callers' ops.
    writer: String,
    folded: Mutex<Folded>,
    /// `applied`, for callers waiting until the replica reaches a sequence.
    progress: watch::Sender<u64>,
    /// The highest stream sequence known to exist (from publish acks and stream
    /// info): while `applied` is below it and does not move, the feed is stalled.
    known: AtomicU64,
    /// The next op id.
    next_op: AtomicU64,
    /// Callers waiting for their op's answer, by op id.
    waiters: Mutex<FastHashMap<u64, oneshot::Sender<Outcome>>>,
    /// This instance's batches in flight, by batch number, with their ops.
    own: Mutex<FastHashMap<u64, Vec<LedgerOp>>>,
    /// Inputs handed over for their run's enqueue, not yet taken by it, with
    /// when they were handed over.
    staged: Mutex<FastHashMap<RunId, (Instant, Box<RunRequest>)>>,
    /// `watch_queued` subscribers.
    watchers: QueueWatchers,
    /// Whether `broken` holds a reason (read on every op without the lock).
    is_broken: AtomicBool,
    /// Why the replica stopped following the stream, once it has.
    broken: Mutex<Option<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Replica {
    /// A replica of `writer`'s mailbox, starting from `folded`.
    pub(crate) fn new(writer: String, folded: Folded) -> Self {
        let (progress, _) = watch::channel(folded.applied);
        Self {
            writer,
            folded: Mutex::new(folded),
            progress,
            known: AtomicU64::new(0),
            next_op: AtomicU64::new(1),
            waiters: Mutex::default(),
            own: Mutex::default(),
            staged: Mutex::default(),
            is_broken: AtomicBool::new(false),
            watchers: QueueWatchers::default(),
            broken: Mutex::default(),
        }
    }

    /// This instance's writer id.
    pub(crate) fn writer(&self) -> &str {
        &self.writer
    }

    /// Reads the state.
    pub(crate) fn read<R>(&self, read: impl FnOnce(&MailboxState) -> R) -> R {
        read(&lock(&self.folded).state)
    }

    /// The last stream sequence applied.
    pub(crate) fn applied(&self) -> u64 {
        lock(&self.folded).applied
    }

    /// Records that the stream holds sequence `seq`.
    pub(crate) fn note_known(&self, seq: u64) {
        self.known.fetch_max(seq, Ordering::Relaxed);
    }

    /// The highest stream sequence known to exist.
    pub(crate) fn known(&self) -> u64 {
        self.known.load(Ordering::Relaxed)
    }

    /// A copy of the state, the inputs it still needs and the sequence it is at
    /// (for a snapshot).
    pub(crate) fn copy(&self) -> Folded {
        let folded = lock(&self.folded);
        Folded {
            state: folded.state.clone(),
            inputs: folded.inputs.in_flight(&folded.state),
            applied: folded.applied,
            charge: None,
        }
    }

    /// The input of `run_id`: kept since it came with its dispatch, or handed
    /// over on this node for an enqueue not yet issued.
    pub(crate) fn input(&self, run_id: &RunId) -> Option<RunRequest> {
        if let Some(input) = lock(&self.folded).inputs.get(run_id) {
            return Some(input.clone());
        }
        lock(&self.staged)
            .get(run_id)
            .map(|(_, input)| (**input).clone())
    }

    /// Whether the input of `run_id` came with its dispatch and is still kept.
    pub(crate) fn holds_input(&self, run_id: &RunId) -> bool {
        lock(&self.folded).inputs.get(run_id).is_some()
    }

    /// Hands `input` over for the enqueue of its run `run_id`.
    pub(crate) fn stage(&self, run_id: RunId, input: RunRequest) {
        lock(&self.staged).insert(run_id, (Instant::now(), Box::new(input)));
    }

    /// Takes the input handed over for `run_id`'s enqueue, if any.
    pub(crate) fn take_staged(&self, run_id: &RunId) -> Option<Box<RunRequest>> {
        lock(&self.staged).remove(run_id).map(|(_, input)| input)
    }

    /// Forgets inputs handed over before `before` whose enqueue never came (its
    /// submitter gave up between the two).
    pub(crate) fn drop_staged_before(&self, before: Instant) {
        lock(&self.staged).retain(|_, (at, _)| *at >= before);
    }

    /// A fresh op id and a receiver for its answer.
    pub(crate) fn expect(&self) -> (u64, oneshot::Receiver<Outcome>) {
        let id = self.next_op.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.waiters).insert(id, tx);
        (id, rx)
    }

    /// The id the next op will get: every op issued so far has a smaller one.
    pub(crate) fn next_op(&self) -> u64 {
        self.next_op.load(Ordering::Relaxed)
    }

    /// Refuses every caller still waiting on an op issued before `bound`.
    pub(crate) fn fail_before(&self, bound: u64, error: &MailboxError) {
        let mut waiters = lock(&self.waiters);
        let late: Vec<u64> = waiters.keys().filter(|id| **id < bound).copied().collect();
        for id in late {
            if let Some(waiter) = waiters.remove(&id) {
                let _gone = waiter.send(Err(error.clone()));
            }
        }
    }

    /// Keeps the ops of this instance's batch `number` until it comes back.
    pub(crate) fn hold_own(&self, number: u64, ops: Vec<LedgerOp>) {
        lock(&self.own).insert(number, ops);
    }

    /// The ops of this instance's batch `number`, if still held.
    pub(crate) fn take_own(&self, number: u64) -> Option<Vec<LedgerOp>> {
        lock(&self.own).remove(&number)
    }

    /// Answers the callers of `ids` with a refusal (their batch did not reach
    /// the stream, or may not have).
    pub(crate) fn fail(&self, ids: &[u64], error: &MailboxError) {
        let mut waiters = lock(&self.waiters);
        for id in ids {
            if let Some(waiter) = waiters.remove(id) {
                // The caller may have given up waiting; nothing to tell then.
                let _gone = waiter.send(Err(error.clone()));
            }
        }
    }

    /// Forgets op `id`'s caller (it stopped waiting).
    pub(crate) fn forget(&self, id: u64) {
        lock(&self.waiters).remove(&id);
    }

    /// Applies the batch at stream sequence `seq`: every node applies the same
    /// batches in the same order, and when the batch is `mine` its callers get
    /// their answers. A batch at or below the applied sequence was applied already.
    pub(crate) fn apply(&self, seq: u64, mine: bool, ops: impl IntoIterator<Item = LedgerOp>) {
        let mut answers = Vec::new();
        let mut woken = Vec::new();
        {
            let mut folded = lock(&self.folded);
            if seq <= folded.applied {
                return;
            }
            let Folded { state, inputs, .. } = &mut *folded;
            for LedgerOp {
                id,
                mut command,
                watchers_told,
            } in ops
            {
                let enqueue = matches!(command, Command::Enqueue { .. });
                let input = command.take_input();
                let (outcome, mut threads) = command.apply(state);
                if let (true, Ok(Answer::Dispatch(accepted))) = (enqueue, &outcome) {
                    inputs.accepted(accepted, input);
                }
                if !watchers_told {
                    woken.append(&mut threads);
                }
                if mine {
                    answers.push((id, outcome));
                }
            }
            inputs.batch_applied(state);
            folded.applied = seq;
            folded.recharge();
        }
        self.progress.send_replace(seq);
        if !answers.is_empty() {
            let mut waiters = lock(&self.waiters);
            for (id, outcome) in answers {
                if let Some(waiter) = waiters.remove(&id) {
                    let _gone = waiter.send(outcome);
                }
            }
        }
        self.notify(&woken);
    }

    /// Charges the inputs this replica holds, now and as they change, to
    /// `memory`'s admitted share: every node holds the queued input of the
    /// whole cluster's runs it carries.
    pub(crate) fn charge_inputs(&self, memory: &Arc<NodeMemory>) {
        let mut folded = lock(&self.folded);
        let bytes = folded.inputs.bytes();
        folded.charge = Some(memory.charge(Held::Queued, bytes));
    }

    /// Skips stream sequence `seq` (a message that is not a batch).
    pub(crate) fn skip(&self, seq: u64) {
        let mut folded = lock(&self.folded);
        if seq > folded.applied {
            folded.applied = seq;
            drop(folded);
            self.progress.send_replace(seq);
        }
    }

    /// Replaces the state with a snapshot's, when it is ahead of the replica.
    pub(crate) fn restore(&self, snapshot: Folded) {
        let applied = snapshot.applied;
        {
            let mut folded = lock(&self.folded);
            if snapshot.applied <= folded.applied {
                return;
            }
            let charge = folded.charge.take();
            *folded = snapshot;
            folded.charge = charge;
            folded.recharge();
        }
        self.progress.send_replace(applied);
        // Whatever queued work the snapshot holds may be news to this node.
        let queued: Vec<ThreadId> = self.read(|state| {
            state
                .queued_threads()
                .into_iter()
                .map(|queued| queued.thread_id)
                .collect()
        });
        self.notify(&queued);
    }

    /// Waits until the replica has applied stream sequence `seq`.
    pub(crate) async fn reach(&self, seq: u64) -> Result<(), MailboxError> {
        let mut progress = self.progress.subscribe();
        loop {
            if let Some(reason) = self.broken() {
                return Err(MailboxError::Unavailable(reason));
            }
            if *progress.borrow_and_update() >= seq {
                return Ok(());
            }
            if progress.changed().await.is_err() {
                return Err(MailboxError::Unavailable("the ledger feed stopped".into()));
            }
        }
    }

    /// Marks the replica as no longer following the stream: every caller waiting
    /// and every later one is refused with `reason`.
    pub(crate) fn break_off(&self, reason: String) {
        tracing::error!(%reason, "the mailbox ledger stopped following its stream");
        *lock(&self.broken) = Some(reason.clone());
        self.is_broken.store(true, Ordering::Release);
        let error = MailboxError::Unavailable(reason);
        let waiters = std::mem::take(&mut *lock(&self.waiters));
        for (_, waiter) in waiters {
            let _gone = waiter.send(Err(error.clone()));
        }
        // Wake `reach` callers so they see the reason.
        self.progress.send_modify(|_| {});
    }

    /// Why the replica stopped following the stream, if it has.
    pub(crate) fn broken(&self) -> Option<String> {
        if !self.is_broken.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.broken).clone()
    }

    /// Subscribes a queue watch.
    pub(crate) fn subscribe(&self, watcher: QueueWatch) {
        self.watchers.subscribe(watcher);
    }

    /// Tells the watchers of `thread_id` ahead of its enqueue's return (the op
    /// is on its way to the writer): this node's claim of it then follows the
    /// enqueue in the writer's order, often in the same batch, instead of a
    /// round trip later. A claim finds the dispatch only once the enqueue applied.
    pub(crate) fn tell_watchers(&self, thread_id: &ThreadId) {
        self.notify(std::slice::from_ref(thread_id));
    }

    /// Tells every watcher that `threads` got queued work; forgets closed watches.
    fn notify(&self, threads: &[ThreadId]) {
        if !threads.is_empty() {
            self.watchers.notify(threads);
        }
    }
}
