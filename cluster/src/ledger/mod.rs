//! `LedgerMailbox`: the [`MailboxStore`] of a cluster as a replicated state
//! machine over one JetStream stream (decision 0034).
//!
//! Every changing operation becomes a `Command` that carries
//! everything its outcome depends on (time, rules, claim token). A node's writer
//! publishes its commands in batches to the ledger stream; every node applies
//! every batch in stream order to its own [`MailboxState`], so all nodes hold the
//! same state, and a caller's answer is what applying its command decided on its
//! own node. The stream's order makes every command atomic with respect to all
//! others — claims have one winner, interrupts supersede queued work at once,
//! dedupe keys are unique across threads — with no compare-and-set and no
//! conflicts between nodes; batching makes one stream write carry many commands.
//! Snapshots in a KV bucket let the stream be trimmed and nodes start quickly.

pub(crate) mod command;
mod feed;
mod inputs;
mod replica;
mod snapshot;
pub(crate) mod wire;
mod writer;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_trait::async_trait;
use awaken_actors::backoff::Backoff;
use awaken_actors::contract::{MailboxInterrupt, RunDispatch, RunDispatchResult};
use awaken_actors::ids::{DispatchId, RunId, ThreadId};
use awaken_actors::mailbox::{
    DispatchPage, DispatchQuery, HeldClaim, MailboxConfig, MailboxError, MailboxState,
    MailboxStore, QueueWatch, QueuedThread, transition,
};
use awaken_actors::memory::NodeMemory;
use awaken_actors::thread::RunRequest;
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use self::command::{Answer, Command, Rules};
use self::feed::Feed;
use self::replica::Replica;
use self::snapshot::Snapshots;
use self::wire::{MAX_COMMAND, OpRef};
use self::writer::Submission;
use crate::codec;
use crate::error::ClusterError;
use crate::streams::ensure_stream;

/// The name the ledger's stream and snapshot bucket derive from, unless configured.
pub const DEFAULT_LEDGER_NAME: &str = "awaken_mailbox";

/// How long a caller waits for its command to come back applied, by default:
/// long enough to ride out a NATS reconnect or a stream leader election.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// How long [`LedgerMailbox::open`] keeps retrying a JetStream that does not answer.
pub const OPEN_DEADLINE: Duration = Duration::from_secs(20);

/// How long one look at the stream's state may take before it is asked again
/// (a request lost in a reconnect would wait the client's 10 s); a healthy
/// stream answers within milliseconds.
const SYNC_ATTEMPT: Duration = Duration::from_secs(2);

/// The first pause between open attempts (doubling, up to 16 times this).
const OPEN_RETRY_DELAY: Duration = Duration::from_millis(100);

/// How a ledger is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerOptions {
    /// Copies of the stream and the snapshot bucket on a clustered server.
    pub replicas: usize,
    /// Batches between snapshots at the least (more when the state is large).
    pub snapshot_interval: u64,
    /// How long a caller waits for its command to come back applied (the
    /// node's `server.backend_wait`); a batch is published again meanwhile.
    pub answer_deadline: Duration,
}

impl Default for LedgerOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            snapshot_interval: 10_000,
            answer_deadline: ANSWER_DEADLINE,
        }
    }
}

/// The ledger stream's name for a ledger `name`.
pub fn stream_name(name: &str) -> String {
    format!("LEDGER_{name}")
}

/// The subject the ledger's batches are published on.
pub fn subject(name: &str) -> String {
    format!("awaken.ledger.{name}")
}

/// The snapshot bucket's name for a ledger `name`.
pub fn snapshot_bucket(name: &str) -> String {
    format!("{name}_snapshots")
}

/// The mailbox on NATS: durable, shared by every node of the cluster.
#[derive(Debug, Clone)]
pub struct LedgerMailbox {
    config: MailboxConfig,
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    replica: Arc<Replica>,
    writer: mpsc::UnboundedSender<Submission>,
    stream: stream::Stream,
    /// Keeps the replica current while any clone of the mailbox lives.
    _feed: Feed,
    /// Refuses ops left unanswered past the deadline, while the mailbox lives.
    _deadlines: AbortOnDropHandle<()>,
    /// How long a caller waits for the ledger.
    answer_deadline: Duration,
}

/// How often the deadline sweeper looks for ops left unanswered.
const DEADLINE_TICK: Duration = Duration::from_secs(1);

/// How long an input handed over for its run's enqueue waits for it: far longer
/// than a submission takes, so only a submitter that gave up leaves one behind.
const STAGED_INPUT_TTL: Duration = Duration::from_secs(600);

/// Refuses, every [`DEADLINE_TICK`], the ops issued more than `deadline` ago
/// that are still waiting (op ids grow with time, so a bound per tick will do).
async fn sweep_deadlines(replica: std::sync::Weak<Replica>, deadline: Duration) {
    let mut marks: VecDeque<(tokio::time::Instant, u64)> = VecDeque::new();
    let mut tick = tokio::time::interval(DEADLINE_TICK);
    loop {
        tick.tick().await;
        let Some(replica) = replica.upgrade() else {
            return;
        };
        let now = tokio::time::Instant::now();
        if let Some(before) = now.checked_sub(STAGED_INPUT_TTL) {
            replica.drop_staged_before(before);
        }
        marks.push_back((now, replica.next_op()));
        let mut bound = None;
        while let Some((at, next)) = marks.front().copied() {
            if now.duration_since(at) < deadline {
                break;
            }
            bound = Some(next);
            marks.pop_front();
        }
        if let Some(bound) = bound {
            replica.fail_before(
                bound,
                &MailboxError::Unavailable(format!(
                    "no answer from the mailbox ledger within {deadline:?}"
                )),
            );
        }
    }
}

fn unavailable(error: impl std::fmt::Display) -> MailboxError {
    MailboxError::Unavailable(error.to_string())
}

/// The answer a command of this kind always gives; anything else is a bug that
/// must not take the node down.
fn unexpected(answer: &Answer) -> MailboxError {
    MailboxError::Unavailable(format!("the ledger answered unexpectedly: {answer:?}"))
}

impl LedgerMailbox {
    /// Opens the ledger `name` (its stream and snapshot bucket are created when
    /// missing, with `replicas` copies); returns once the node's replica has
    /// applied everything the stream held when it opened.
    ///
    /// JetStream answers API requests only while its cluster has a leader: a node
    /// started during an election retries for up to [`OPEN_DEADLINE`].
    pub async fn open(
        js: &jetstream::Context,
        name: &str,
        replicas: usize,
        config: MailboxConfig,
    ) -> Result<Self, ClusterError> {
        let options = LedgerOptions {
            replicas,
            ..LedgerOptions::default()
        };
        Self::open_with(js, name, options, config).await
    }

    /// [`Self::open`] with every option.
    pub async fn open_with(
        js: &jetstream::Context,
        name: &str,
        options: LedgerOptions,
        config: MailboxConfig,
    ) -> Result<Self, ClusterError> {
        let deadline = tokio::time::Instant::now() + OPEN_DEADLINE;
        let mut backoff = Backoff::new(OPEN_RETRY_DELAY, OPEN_RETRY_DELAY * 16);
        loop {
            match Box::pin(Self::open_once(js, name, options, config.clone())).await {
                Err(error) if error.is_transient() => {
                    let pause = backoff.next_pause();
                    if tokio::time::Instant::now() + pause >= deadline {
                        return Err(error);
                    }
                    tracing::warn!(%error, name, "the mailbox ledger could not open yet; retrying");
                    tokio::time::sleep(pause).await;
                }
                opened => return opened,
            }
        }
    }

    async fn open_once(
        js: &jetstream::Context,
        name: &str,
        options: LedgerOptions,
        config: MailboxConfig,
    ) -> Result<Self, ClusterError> {
        let stream = ensure_stream(
            js,
            stream::Config {
                name: stream_name(name),
                subjects: vec![subject(name)],
                storage: stream::StorageType::File,
                num_replicas: options.replicas.max(1),
                ..Default::default()
            },
        )
        .await?;
        let snapshots = Snapshots::open(js, &snapshot_bucket(name), options.replicas).await?;
        let folded = snapshots.load().await?;
        let first = stream.get_info().await.map_err(ClusterError::nats)?.state;
        if first.messages > 0 && first.first_sequence > folded.applied + 1 {
            return Err(ClusterError::Unexpected(format!(
                "mailbox ledger {name}: the stream starts at {} but the newest snapshot covers only {}",
                first.first_sequence, folded.applied
            )));
        }
        let writer_id = format!("{name}.{}", uuid::Uuid::now_v7().simple());
        let replica = Arc::new(Replica::new(writer_id, folded));
        let feed = feed::follow(
            &js.client(),
            stream.clone(),
            Arc::clone(&replica),
            snapshots,
            options.snapshot_interval.max(1),
        )
        .await?;
        let writer = writer::spawn(
            js.clone(),
            subject(name),
            Arc::clone(&replica),
            options.answer_deadline,
        );
        let deadlines = AbortOnDropHandle::new(tokio::spawn(sweep_deadlines(
            Arc::downgrade(&replica),
            options.answer_deadline,
        )));
        let mailbox = Self {
            config,
            inner: Arc::new(Inner {
                replica,
                writer,
                stream,
                _feed: feed,
                _deadlines: deadlines,
                answer_deadline: options.answer_deadline,
            }),
        };
        mailbox.sync().await?;
        Ok(mailbox)
    }

    /// Waits until this node has applied everything the stream holds now, so a
    /// read sees every change any node made before it. A stream that does not
    /// answer (a reconnect, an election) is asked again until the deadline.
    async fn sync(&self) -> Result<(), MailboxError> {
        let deadline = self.inner.answer_deadline;
        let give_up = tokio::time::Instant::now() + deadline;
        let mut backoff = Backoff::new(OPEN_RETRY_DELAY, OPEN_RETRY_DELAY * 10);
        let info = loop {
            // Each try bounded: a request lost in a reconnect would wait the
            // client's whole request timeout.
            let try_until = give_up.min(tokio::time::Instant::now() + SYNC_ATTEMPT);
            let asked = tokio::time::timeout_at(try_until, self.inner.stream.get_info()).await;
            let error = match asked {
                Ok(Ok(info)) => break info,
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no answer within {SYNC_ATTEMPT:?}"),
            };
            let pause = backoff.next_pause();
            if tokio::time::Instant::now() + pause >= give_up {
                return Err(unavailable(error));
            }
            tokio::time::sleep(pause).await;
        };
        let last = info.state.last_sequence;
        self.inner.replica.note_known(last);
        tokio::time::timeout_at(give_up, self.inner.replica.reach(last))
            .await
            .map_err(|_| {
                unavailable(format!(
                    "the node's mailbox replica did not reach stream sequence {last} within {deadline:?}"
                ))
            })?
    }

    /// Publishes `command` and waits for what applying it decided. Callers are
    /// not timed one by one: the deadline sweeper refuses the ops left waiting
    /// past the answer deadline.
    async fn submit(&self, command: Command) -> Result<Answer, MailboxError> {
        self.submit_telling(command, None).await
    }

    /// [`Self::submit`]; once the command is on its way to the writer, this
    /// node's queue watchers hear of `queued` (see [`Replica::tell_watchers`]).
    async fn submit_telling(
        &self,
        command: Command,
        queued: Option<&ThreadId>,
    ) -> Result<Answer, MailboxError> {
        let replica = &self.inner.replica;
        if let Some(reason) = replica.broken() {
            return Err(MailboxError::Unavailable(reason));
        }
        let (id, answer) = replica.expect();
        let op = match codec::encode(&OpRef {
            id,
            command: &command,
        }) {
            Ok(op) if op.len() <= MAX_COMMAND => op,
            Ok(op) => {
                replica.forget(id);
                return Err(MailboxError::InvalidInput(format!(
                    "a mailbox command of {} bytes exceeds the limit of {MAX_COMMAND} bytes",
                    op.len()
                )));
            }
            Err(error) => {
                replica.forget(id);
                return Err(MailboxError::InvalidInput(error.to_string()));
            }
        };
        let submission = Submission {
            id,
            op,
            command,
            watchers_told: queued.is_some(),
        };
        if self.inner.writer.send(submission).is_err() {
            replica.forget(id);
            return Err(unavailable("the mailbox ledger's writer stopped"));
        }
        if let Some(thread_id) = queued {
            replica.tell_watchers(thread_id);
        }
        answer
            .await
            .unwrap_or_else(|_| Err(unavailable("the mailbox ledger dropped the command")))
    }

    async fn one(&self, command: Command) -> Result<RunDispatch, MailboxError> {
        match self.submit(command).await? {
            Answer::Dispatch(dispatch) => Ok(dispatch),
            other => Err(unexpected(&other)),
        }
    }

    async fn many(&self, command: Command) -> Result<Vec<RunDispatch>, MailboxError> {
        match self.submit(command).await? {
            Answer::Dispatches(dispatches) => Ok(dispatches),
            other => Err(unexpected(&other)),
        }
    }

    fn rules(&self) -> Rules {
        Rules::of(&self.config)
    }

    /// Counts the run inputs this node's replica carries against `memory`'s
    /// admitted share, from now on: they are queued input the node cannot give
    /// back (decision 0089).
    pub fn charge_inputs_to(&self, memory: &Arc<NodeMemory>) {
        self.inner.replica.charge_inputs(memory);
    }

    /// Carries `input` in the ledger with its run's dispatch: the next enqueue of
    /// a dispatch for `run_id` on this node takes it (decision 0078).
    pub fn carry_input(&self, run_id: RunId, input: RunRequest) {
        self.inner.replica.stage(run_id, input);
    }

    /// Forgets an input handed to [`Self::carry_input`] whose enqueue will not
    /// come (the submission failed before it); whether there was one.
    pub fn drop_carried_input(&self, run_id: &RunId) -> bool {
        self.inner.replica.take_staged(run_id).is_some()
    }

    /// The input of `run_id` if it travels in the ledger: as this node's replica
    /// has it, or as handed over here for an enqueue still to come.
    pub fn carried_input(&self, run_id: &RunId) -> Option<RunRequest> {
        self.inner.replica.input(run_id)
    }

    /// [`Self::carried_input`], once this node's replica has applied everything
    /// the stream holds when it is not there yet: a run accepted through
    /// another node a moment ago is found here too.
    pub async fn carried_input_synced(
        &self,
        run_id: &RunId,
    ) -> Result<Option<RunRequest>, MailboxError> {
        if let Some(input) = self.carried_input(run_id) {
            return Ok(Some(input));
        }
        self.sync().await?;
        Ok(self.carried_input(run_id))
    }

    /// Whether the input of `run_id` came in the ledger with its dispatch (and
    /// so goes with it, leaving nothing to remove anywhere else).
    pub fn holds_carried_input(&self, run_id: &RunId) -> bool {
        self.inner.replica.holds_input(run_id)
    }

    /// Reads this node's replica as it is (no wait for other nodes' changes).
    fn read<R>(&self, read: impl FnOnce(&MailboxState) -> R) -> R {
        self.inner.replica.read(read)
    }
}

#[async_trait]
impl MailboxStore for LedgerMailbox {
    async fn enqueue(
        &self,
        dispatch: RunDispatch,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        let input = self.inner.replica.take_staged(&dispatch.run_id);
        let thread_id = dispatch.thread_id.clone();
        let command = Command::Enqueue {
            dispatch: Box::new(dispatch),
            rules: self.rules(),
            now_ms,
            input,
        };
        match self.submit_telling(command, Some(&thread_id)).await? {
            Answer::Dispatch(dispatch) => Ok(dispatch),
            other => Err(unexpected(&other)),
        }
    }

    async fn claim(
        &self,
        thread_id: &ThreadId,
        consumer: &str,
        limit: usize,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<RunDispatch>, MailboxError> {
        self.many(Command::Claim {
            thread_id: thread_id.clone(),
            consumer: consumer.to_owned(),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            lease_ms,
            now_ms,
            token: transition::new_claim_token(),
        })
        .await
    }

    async fn claim_dispatch(
        &self,
        dispatch_id: &DispatchId,
        consumer: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.one(Command::ClaimDispatch {
            dispatch_id: dispatch_id.clone(),
            consumer: consumer.to_owned(),
            lease_ms,
            now_ms,
            token: transition::new_claim_token(),
        })
        .await
    }

    async fn ack(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.one(Command::Ack {
            dispatch_id: dispatch_id.clone(),
            claim_token: claim_token.to_owned(),
            now_ms,
        })
        .await
    }

    async fn nack(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.one(Command::Nack {
            dispatch_id: dispatch_id.clone(),
            claim_token: claim_token.to_owned(),
            error: error.to_owned(),
            rules: self.rules(),
            now_ms,
        })
        .await
    }

    async fn dead_letter(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        error: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.one(Command::DeadLetter {
            dispatch_id: dispatch_id.clone(),
            claim_token: claim_token.to_owned(),
            error: error.to_owned(),
            now_ms,
        })
        .await
    }

    async fn cancel(
        &self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.one(Command::Cancel {
            dispatch_id: dispatch_id.clone(),
            now_ms,
        })
        .await
    }

    async fn extend_lease(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.one(Command::ExtendLease {
            dispatch_id: dispatch_id.clone(),
            claim_token: claim_token.to_owned(),
            lease_ms,
            now_ms,
        })
        .await
    }

    async fn interrupt(
        &self,
        thread_id: &ThreadId,
        now_ms: u64,
    ) -> Result<MailboxInterrupt, MailboxError> {
        match self
            .submit(Command::Interrupt {
                thread_id: thread_id.clone(),
                now_ms,
            })
            .await?
        {
            Answer::Interrupt(interrupt) => Ok(interrupt),
            other => Err(unexpected(&other)),
        }
    }

    async fn supersede_claimed(
        &self,
        dispatch_id: &DispatchId,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.one(Command::SupersedeClaimed {
            dispatch_id: dispatch_id.clone(),
            now_ms,
        })
        .await
    }

    async fn record_dispatch_start(
        &self,
        dispatch_id: &DispatchId,
        dispatch_instance_id: &str,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.one(Command::RecordStart {
            dispatch_id: dispatch_id.clone(),
            dispatch_instance_id: dispatch_instance_id.to_owned(),
            now_ms,
        })
        .await
    }

    async fn record_run_result(
        &self,
        dispatch_id: &DispatchId,
        result: RunDispatchResult,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        self.one(Command::RecordResult {
            dispatch_id: dispatch_id.clone(),
            result,
            now_ms,
        })
        .await
    }

    async fn complete(
        &self,
        dispatch_id: &DispatchId,
        claim_token: &str,
        result: RunDispatchResult,
        now_ms: u64,
    ) -> Result<RunDispatch, MailboxError> {
        // Both commands reach the writer before either answer is awaited, so they
        // usually share one batch: one publish and one round trip, in this order.
        let record = self.one(Command::RecordResult {
            dispatch_id: dispatch_id.clone(),
            result,
            now_ms,
        });
        let ack = self.one(Command::Ack {
            dispatch_id: dispatch_id.clone(),
            claim_token: claim_token.to_owned(),
            now_ms,
        });
        let (recorded, acked) = futures::join!(record, ack);
        if let Err(error) = recorded {
            tracing::warn!(%dispatch_id, %error, "recording the run result failed");
        }
        acked
    }

    async fn load_dispatch(
        &self,
        dispatch_id: &DispatchId,
    ) -> Result<Option<RunDispatch>, MailboxError> {
        self.sync().await?;
        Ok(self.read(|state| state.get(dispatch_id).cloned()))
    }

    async fn list_dispatches(&self, query: &DispatchQuery) -> Result<DispatchPage, MailboxError> {
        self.sync().await?;
        Ok(self.read(|state| state.list(query)))
    }

    async fn reclaim_expired_leases(&self, now_ms: u64) -> Result<Vec<RunDispatch>, MailboxError> {
        // Most sweeps find nothing: ask the replica before writing a command.
        self.sync().await?;
        let any_expired = self.read(|state| {
            state
                .claims()
                .iter()
                .any(|claim| claim.lease_until <= now_ms)
        });
        if !any_expired {
            return Ok(Vec::new());
        }
        self.many(Command::ReclaimExpired {
            rules: self.rules(),
            now_ms,
        })
        .await
    }

    async fn claims(&self) -> Result<Vec<HeldClaim>, MailboxError> {
        Ok(self.read(MailboxState::claims))
    }

    async fn queued_threads(&self) -> Result<Vec<QueuedThread>, MailboxError> {
        Ok(self.read(MailboxState::queued_threads))
    }

    async fn watch_queued(&self, watch: QueueWatch) -> Result<(), MailboxError> {
        self.inner.replica.subscribe(watch);
        Ok(())
    }

    async fn gc(&self, now_ms: u64) -> Result<usize, MailboxError> {
        let rules = self.config.gc_rules();
        self.sync().await?;
        if !self.read(|state| state.gc_due(&rules, now_ms)) {
            return Ok(0);
        }
        let command = Command::Gc {
            ttl_ms: rules.ttl_ms,
            now_ms,
            dedupe_window_ms: Some(rules.dedupe_window_ms),
            max_settled: Some(u64::try_from(rules.max_settled).unwrap_or(u64::MAX)),
        };
        match self.submit(command).await? {
            Answer::Collected(count) => Ok(count),
            other => Err(unexpected(&other)),
        }
    }

    fn settled_bytes(&self) -> u64 {
        self.read(MailboxState::settled_bytes)
    }
}
