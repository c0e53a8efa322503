//! Group commit: checkpoints of different threads that wait together are written
//! in one statement and one commit flush (decision 0052).
//!
//! A caller queues its checkpoint and waits for its own answer. A writer takes
//! everything queued (up to [`MAX_BATCH`], one checkpoint per thread, none of a
//! thread whose previous one is still being written) as its next batch. While a
//! batch is in flight, what arrives queues for that writer's next batch; another
//! writer (up to `writers` in all) starts beside it only when [`SPILL_AT`]
//! checkpoints wait or one has waited [`STUCK_AFTER`] (decision 0064). A lone
//! checkpoint on an idle store goes out at once, alone: batching costs nothing
//! when there is nothing to batch. Writers are spawned tasks, so a caller that
//! stops waiting neither loses nor abandons the others' checkpoints. Each caller
//! is answered only after its batch committed.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::PostgresStore;
use super::write::Outcome;
use crate::error::StorageError;
use crate::ids::ThreadId;
use crate::store::Checkpoint;

/// Checkpoints in one statement at most: keeps a statement's parameters small and
/// one slow batch from holding many callers.
pub(super) const MAX_BATCH: usize = 64;

/// Checkpoints waiting at least, while a batch is in flight, before another
/// writer starts a batch beside it: a full batch, more than the busy writer's
/// next one takes. Fewer wait for that next batch: a database short of CPU
/// writes one batch of 2n faster than two of n (decision 0064).
pub(super) const SPILL_AT: usize = MAX_BATCH;

/// How long a queued checkpoint waits for a busy writer's next batch before it
/// lets another writer take it: a batch in flight this long is stuck on a row
/// lock (another node writing the thread) or on a slow database, and the rest of
/// the node's checkpoints should not wait for it (decision 0064).
pub(super) const STUCK_AFTER: Duration = Duration::from_millis(20);

/// Tries per checkpoint whose thread appeared or vanished under the statement.
const TRIES: u8 = 2;

/// The queue of checkpoints waiting for a writer, and the writers' slots.
#[derive(Debug)]
pub(super) struct GroupCommit {
    queue: Mutex<Queue>,
    writers: Arc<Semaphore>,
    /// The writers' slots in all: fewer free means a batch is in flight.
    slots: usize,
    /// See [`STUCK_AFTER`]; tests set their own.
    stuck_after: Duration,
}

/// Checkpoints waiting, and the threads with a checkpoint in a batch being
/// written: a thread's next checkpoint waits until its previous one is answered,
/// so no two writers hold the same thread and a thread's order holds.
#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<Pending>,
    in_flight: HashSet<ThreadId>,
}

impl Queue {
    /// Whether a writer would find work: a checkpoint of a thread not in flight.
    fn has_work(&self) -> bool {
        self.waiting
            .iter()
            .any(|p| !self.in_flight.contains(&p.checkpoint.thread_id))
    }
}

/// A queued checkpoint and where its answer goes.
#[derive(Debug)]
struct Pending {
    checkpoint: Checkpoint,
    tries: u8,
    answer: oneshot::Sender<Result<(), StorageError>>,
}

impl GroupCommit {
    /// A queue written by at most `writers` statements at once.
    pub(super) fn new(writers: usize) -> Self {
        Self::with_stuck_after(writers, STUCK_AFTER)
    }

    /// [`GroupCommit::new`] with a batch taken for stuck after `stuck_after`.
    fn with_stuck_after(writers: usize, stuck_after: Duration) -> Self {
        let slots = writers.max(1);
        Self {
            queue: Mutex::new(Queue::default()),
            writers: Arc::new(Semaphore::new(slots)),
            slots,
            stuck_after,
        }
    }

    /// Writes `checkpoint` through `store`, batched with whatever else waits, and
    /// answers once its batch committed (or refused it).
    pub(super) async fn submit(
        self: &Arc<Self>,
        store: &PostgresStore,
        checkpoint: Checkpoint,
    ) -> Result<(), StorageError> {
        let (answer, mut answered) = oneshot::channel();
        let waiting = {
            let mut queue = self.lock();
            queue.waiting.push_back(Pending {
                checkpoint,
                tries: 0,
                answer,
            });
            queue.waiting.len()
        };
        let answer = if self.start_writer(store, waiting) {
            answered.await
        } else {
            match tokio::time::timeout(self.stuck_after, &mut answered).await {
                Ok(answer) => answer,
                Err(_) => {
                    // The batch ahead is slow: another writer may take what waits.
                    if self.lock().has_work() {
                        self.start_writer(store, SPILL_AT);
                    }
                    answered.await
                }
            }
        };
        answer.unwrap_or_else(|_| {
            Err(StorageError::MaybeWritten(
                "postgres: the checkpoint writer stopped before answering".to_owned(),
            ))
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // The queue is only pushed to and drained: a panic elsewhere leaves it whole.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Spawns a writer if none is busy, or if `waiting` checkpoints are enough
    /// for a batch beside the busy ones ([`SPILL_AT`]) and a slot is free;
    /// otherwise a busy writer takes the queue when its batch is done. Whether
    /// it spawned one.
    fn start_writer(self: &Arc<Self>, store: &PostgresStore, waiting: usize) -> bool {
        let busy = self.writers.available_permits() < self.slots;
        if busy && waiting < SPILL_AT {
            return false;
        }
        match Arc::clone(&self.writers).try_acquire_owned() {
            Ok(slot) => {
                tokio::spawn(Arc::clone(self).drain(store.clone(), slot));
                true
            }
            Err(_) => false,
        }
    }

    /// Writes batches until the queue is empty, then gives its slot back.
    async fn drain(self: Arc<Self>, store: PostgresStore, slot: OwnedSemaphorePermit) {
        let mut slot = Some(slot);
        loop {
            let batch = self.take();
            if batch.is_empty() {
                drop(slot.take());
                // A checkpoint queued while this writer held the last slot found
                // no free one; look again now that this one is free. Checkpoints
                // of threads in flight are taken by the writer of their thread,
                // which always looks again before it stops.
                if !self.lock().has_work() {
                    return;
                }
                match Arc::clone(&self.writers).try_acquire_owned() {
                    Ok(again) => slot = Some(again),
                    Err(_) => return,
                }
                continue;
            }
            self.write(&store, batch).await;
        }
    }

    /// The next batch: queued checkpoints in order, at most one per thread and
    /// none of a thread in flight (those wait for a later batch); their threads
    /// are marked in flight.
    fn take(&self) -> Vec<Pending> {
        let mut queue = self.lock();
        let Queue { waiting, in_flight } = &mut *queue;
        let mut batch = Vec::new();
        let mut index = 0;
        while index < waiting.len() && batch.len() < MAX_BATCH {
            if in_flight.insert(waiting[index].checkpoint.thread_id.clone()) {
                if let Some(pending) = waiting.remove(index) {
                    batch.push(pending);
                }
            } else {
                index += 1;
            }
        }
        batch
    }

    /// Writes `batch` and answers each caller. A statement the database refused
    /// wrote nothing, so its checkpoints are tried again one by one (a lone one
    /// once more): one bad checkpoint (or a deadlock with another node's batch,
    /// or a run another node took meanwhile) fails only itself, with the error
    /// its own statement gets.
    /// When the database cannot be reached, or ended the session under the
    /// statement (which may have committed or not), every caller gets that error
    /// at once.
    async fn write(&self, store: &PostgresStore, batch: Vec<Pending>) {
        let _in_flight = InFlight {
            commits: self,
            threads: batch
                .iter()
                .map(|p| p.checkpoint.thread_id.clone())
                .collect(),
        };
        let checkpoints: Vec<&Checkpoint> = batch.iter().map(|p| &p.checkpoint).collect();
        let outcomes = match store.write_checkpoints(&checkpoints).await {
            Ok(outcomes) => outcomes,
            Err(failed) if failed.by_the_database => {
                let mut outcomes = Vec::with_capacity(batch.len());
                for checkpoint in &checkpoints {
                    outcomes.push(match store.write_checkpoints(&[checkpoint]).await {
                        Ok(mut one) => one.pop().unwrap_or(Outcome::Changed),
                        Err(failed) => Outcome::Refused(failed.error),
                    });
                }
                outcomes
            }
            Err(failed) => checkpoints
                .iter()
                .map(|_| Outcome::Refused(failed.error.clone()))
                .collect(),
        };
        let mut again = Vec::new();
        for (mut pending, outcome) in batch.into_iter().zip(outcomes) {
            let answer = match outcome {
                Outcome::Written => Ok(()),
                Outcome::Refused(error) => Err(error),
                Outcome::Changed if pending.tries + 1 < TRIES => {
                    pending.tries += 1;
                    again.push(pending);
                    continue;
                }
                Outcome::Changed => Err(StorageError::Io(format!(
                    "postgres: thread `{}` changed under the checkpoint twice",
                    pending.checkpoint.thread_id
                ))),
            };
            // The caller may have stopped waiting; its checkpoint is written anyway.
            let _ = pending.answer.send(answer);
        }
        let mut queue = self.lock();
        for pending in again.into_iter().rev() {
            queue.waiting.push_front(pending);
        }
    }
}

/// A batch's threads, marked in flight until this drops: after the batch is
/// answered, and also if writing it panicked, so their next checkpoints are
/// never stranded.
struct InFlight<'a> {
    commits: &'a GroupCommit,
    threads: Vec<ThreadId>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut queue = self.commits.lock();
        for id in &self.threads {
            queue.in_flight.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use futures::future::join_all;

    use crate::contract::Message;
    use crate::error::StorageError;
    use crate::state::EncodedValue;
    use crate::store::conformance::{checkpoint, run, tid, user_messages};
    use crate::store::postgres::PostgresStore;
    use crate::store::{Checkpoint, ThreadRunStore};

    use super::{GroupCommit, SPILL_AT, STUCK_AFTER};

    /// Waits until `done`, failing the test after ten seconds.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// A new thread's first checkpoint.
    fn first(name: &str) -> Checkpoint {
        let id = tid(name);
        checkpoint(
            &id,
            1,
            0,
            user_messages("m", 1),
            run(&id, &format!("r-{name}"), 1),
        )
    }

    /// A store whose batches count as stuck after `stuck_after`, whose thread
    /// `t-held` has a checkpoint in flight that waits for the row lock of the
    /// returned transaction, the task waiting for it, and the store's statements
    /// before it. `setup` runs on the store's tables before that checkpoint
    /// (which holds them against changes of their definition).
    async fn held_batch(
        stuck_after: Duration,
        setup: &[&'static str],
    ) -> (
        PostgresStore,
        crate::store::postgres::TestSchema,
        sqlx::Transaction<'static, sqlx::Postgres>,
        tokio::task::JoinHandle<Result<(), StorageError>>,
        u64,
    ) {
        let (mut store, schema) = PostgresStore::for_tests().await;
        store.commits = Arc::new(GroupCommit::with_stuck_after(2, stuck_after));
        store.checkpoint(first("t-held")).await.unwrap();
        for statement in setup {
            sqlx::query(*statement).execute(store.pool()).await.unwrap();
        }
        let mut locker = store.pool().begin().await.unwrap();
        sqlx::query("SELECT 1 FROM awaken_threads WHERE id = 't-held' FOR UPDATE")
            .execute(&mut *locker)
            .await
            .unwrap();
        let statements = store.io_counts().unwrap().statements;
        let held = tid("t-held");
        let blocked = tokio::spawn({
            let store = store.clone();
            let next = checkpoint(
                &held,
                1,
                1,
                user_messages("n", 1),
                run(&held, "r-t-held", 1),
            );
            async move { store.checkpoint(next).await.map(drop) }
        });
        until("the held thread's batch", || {
            store.commits.lock().in_flight.contains(&held)
        })
        .await;
        (store, schema, locker, blocked, statements)
    }

    #[tokio::test]
    async fn a_checkpoint_arriving_while_a_batch_is_written_waits_for_that_writers_next_batch() {
        let (store, _schema, locker, blocked, before) = held_batch(Duration::MAX, &[]).await;

        let later: Vec<_> = (0..3)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.checkpoint(first(&format!("t-later-{i}"))).await })
            })
            .collect();
        until("three checkpoints queued", || {
            store.commits.lock().waiting.len() == 3
        })
        .await;
        assert_eq!(
            store.commits.writers.available_permits(),
            store.commits.slots - 1,
            "no second writer for three checkpoints"
        );
        locker.commit().await.unwrap();
        blocked.await.unwrap().unwrap();
        for answer in later {
            answer.await.unwrap().unwrap();
        }

        assert_eq!(
            store.io_counts().unwrap().statements - before,
            2,
            "the held batch, then the three together"
        );
    }

    /// Queues `arrivals` behind the held batch, lets it go, and gives their
    /// answers in order: they go out together, as that writer's next batch.
    async fn written_after_the_held_batch(
        store: &PostgresStore,
        arrivals: Vec<Checkpoint>,
        locker: sqlx::Transaction<'static, sqlx::Postgres>,
        blocked: tokio::task::JoinHandle<Result<(), StorageError>>,
    ) -> Vec<Result<(), StorageError>> {
        let count = arrivals.len();
        let answers: Vec<_> = arrivals
            .into_iter()
            .map(|next| {
                let store = store.clone();
                tokio::spawn(async move { store.checkpoint(next).await })
            })
            .collect();
        until("the checkpoints queued", || {
            store.commits.lock().waiting.len() == count
        })
        .await;
        locker.commit().await.unwrap();
        blocked.await.unwrap().unwrap();
        let mut answered = Vec::new();
        for answer in answers {
            answered.push(answer.await.unwrap().map(drop));
        }
        answered
    }

    #[tokio::test]
    async fn a_checkpoint_that_cannot_be_serialized_fails_alone_in_its_batch() {
        let (store, _schema, locker, blocked, before) = held_batch(Duration::MAX, &[]).await;
        let mut arrivals: Vec<Checkpoint> = (0..4).map(|i| first(&format!("t-next-{i}"))).collect();
        // A plugin's value whose encoding fails only when the checkpoint is written.
        arrivals[2].state.extensions.insert(
            "plugin.unencodable".to_owned(),
            EncodedValue::deferred(Arc::new(()), |_| Err("a map keyed by a tuple".to_owned())),
        );
        let answered = written_after_the_held_batch(&store, arrivals, locker, blocked).await;

        assert!(
            matches!(&answered[2], Err(StorageError::Serialization(_))),
            "{:?}",
            answered[2]
        );
        for (i, answer) in answered.iter().enumerate().filter(|(i, _)| *i != 2) {
            assert!(answer.is_ok(), "{i}: {answer:?}");
        }
        assert_eq!(
            store.io_counts().unwrap().statements - before,
            2,
            "the held batch, then the other three together"
        );
        assert!(store.load_thread(&tid("t-next-2")).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_batch_whose_session_the_server_ended_is_answered_at_once_not_retried() {
        // The server ends the session in the middle of the next batch's statement.
        let ender = [
            "CREATE FUNCTION end_the_session() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.data::text LIKE '%end the session%' THEN
                     PERFORM pg_terminate_backend(pg_backend_pid());
                     PERFORM pg_sleep(1);
                 END IF;
                 RETURN NEW;
             END $$",
            "CREATE TRIGGER end_the_session BEFORE INSERT ON awaken_messages
             FOR EACH ROW EXECUTE FUNCTION end_the_session()",
        ];
        let (store, _schema, locker, blocked, before) = held_batch(Duration::MAX, &ender).await;
        let mut arrivals: Vec<Checkpoint> = (0..4).map(|i| first(&format!("t-next-{i}"))).collect();
        let ender = tid("t-next-1");
        arrivals[1] = checkpoint(
            &ender,
            1,
            0,
            vec![Message::user("end the session")],
            run(&ender, "r-ender", 1),
        );
        let answered = written_after_the_held_batch(&store, arrivals, locker, blocked).await;

        // Whether such a statement committed cannot be known: every caller hears
        // so, and none is tried again one by one, which could only wait on a
        // database that is going away or refuse what had committed.
        for (i, answer) in answered.iter().enumerate() {
            assert!(
                matches!(answer, Err(StorageError::MaybeWritten(_))),
                "{i}: {answer:?}"
            );
        }
        assert_eq!(
            store.io_counts().unwrap().statements - before,
            2,
            "the held batch, then the four together"
        );
        for i in 0..4 {
            let id = tid(&format!("t-next-{i}"));
            assert!(store.load_thread(&id).await.unwrap().is_none(), "{i}");
        }
    }

    /// `count` new threads' checkpoints are written while `t-held`'s batch,
    /// stuck after `stuck_after`, still waits for its lock.
    async fn written_beside_the_held_batch(stuck_after: Duration, count: usize) {
        let (store, _schema, locker, blocked, _) = held_batch(stuck_after, &[]).await;

        let arrivals = join_all((0..count).map(|i| store.checkpoint(first(&format!("t-b-{i}")))));
        let answers = tokio::time::timeout(Duration::from_secs(20), arrivals)
            .await
            .expect("written while the held batch still waits for its lock");

        assert!(answers.iter().all(Result::is_ok), "{answers:?}");
        assert!(!blocked.is_finished());
        locker.commit().await.unwrap();
        blocked.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn enough_waiting_checkpoints_are_written_beside_a_batch_in_flight() {
        written_beside_the_held_batch(Duration::MAX, SPILL_AT).await;
    }

    #[tokio::test]
    async fn checkpoints_waiting_behind_a_stuck_batch_get_a_writer_of_their_own() {
        written_beside_the_held_batch(STUCK_AFTER, 3).await;
    }

    fn texts(messages: &[Message]) -> Vec<String> {
        messages.iter().map(Message::text).collect()
    }

    /// Checkpoints of ten new threads, one stale and one out-of-date writer of an
    /// existing thread, and two chained checkpoints of one more thread.
    fn arrivals() -> Vec<Checkpoint> {
        let mut arrivals: Vec<Checkpoint> = (0..10)
            .map(|i| {
                let id = tid(&format!("t-new-{i}"));
                checkpoint(
                    &id,
                    1,
                    0,
                    user_messages("m", 2),
                    run(&id, &format!("r-{i}"), 1),
                )
            })
            .collect();
        let old = tid("t-old");
        arrivals.push(checkpoint(
            &old,
            4,
            1,
            user_messages("s", 1),
            run(&old, "r-stale", 2),
        ));
        let late = tid("t-late");
        arrivals.push(checkpoint(
            &late,
            5,
            0,
            user_messages("l", 1),
            run(&late, "r-late", 2),
        ));
        let chain = tid("t-chain");
        arrivals.push(checkpoint(
            &chain,
            1,
            0,
            user_messages("a", 2),
            run(&chain, "r-a", 1),
        ));
        arrivals.push(checkpoint(
            &chain,
            1,
            2,
            user_messages("b", 1),
            run(&chain, "r-a", 1),
        ));
        arrivals
    }

    #[tokio::test]
    async fn checkpoints_that_wait_together_share_one_statement_and_are_each_checked() {
        let (store, _guard) = PostgresStore::for_tests().await;
        let old = tid("t-old");
        store
            .checkpoint(checkpoint(
                &old,
                5,
                0,
                user_messages("o", 1),
                run(&old, "r-old", 1),
            ))
            .await
            .unwrap();
        let late = tid("t-late");
        store
            .checkpoint(checkpoint(
                &late,
                5,
                0,
                user_messages("o", 1),
                run(&late, "r-l0", 1),
            ))
            .await
            .unwrap();
        let before = store.io_counts().unwrap();

        let answers = join_all(arrivals().into_iter().map(|c| store.checkpoint(c))).await;

        let after = store.io_counts().unwrap();
        assert_eq!(after.checkpoints - before.checkpoints, 14);
        // Every thread in the first batch; the chained thread's second checkpoint
        // waits for its first (another writer may not take it meanwhile) and goes
        // in the next.
        assert_eq!(after.statements - before.statements, 2);
        for answer in &answers[..10] {
            assert!(answer.is_ok(), "{answer:?}");
        }
        assert!(
            matches!(answers[10], Err(StorageError::Fenced { .. })),
            "{:?}",
            answers[10]
        );
        assert!(
            matches!(answers[11], Err(StorageError::VersionConflict { .. })),
            "{:?}",
            answers[11]
        );
        assert!(answers[12].is_ok() && answers[13].is_ok(), "{answers:?}");

        let chain = store
            .load_thread_snapshot(&tid("t-chain"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            chain.messages.len(),
            3,
            "both chained checkpoints, in order"
        );
        let written = store
            .load_thread_snapshot(&tid("t-new-7"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(texts(&written.messages), ["m1", "m2"]);
        assert_eq!(written.latest_run.unwrap().run_id.as_str(), "r-7");
        let stale = store.load_thread_snapshot(&old).await.unwrap().unwrap();
        assert_eq!(
            texts(&stale.messages),
            ["o1"],
            "the refused one wrote nothing"
        );
        assert!(
            store
                .load_run(&crate::store::conformance::rid("r-stale"))
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_checkpoint_the_database_refuses_fails_alone() {
        let (store, _guard) = PostgresStore::for_tests().await;
        store.ready().await.unwrap();
        // A rule of the database's own (a DBA's constraint, say) the store knows nothing of.
        sqlx::query(
            "ALTER TABLE awaken_messages ADD CONSTRAINT no_poison
             CHECK (data::text NOT LIKE '%poison%')",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let bad = tid("t-bad");
        let mut arrivals: Vec<Checkpoint> = (0..5)
            .map(|i| {
                let id = tid(&format!("t-good-{i}"));
                checkpoint(
                    &id,
                    1,
                    0,
                    user_messages("m", 1),
                    run(&id, &format!("r-{i}"), 1),
                )
            })
            .collect();
        arrivals.insert(
            2,
            checkpoint(
                &bad,
                1,
                0,
                vec![Message::user("poison")],
                run(&bad, "r-bad", 1),
            ),
        );

        let answers = join_all(arrivals.into_iter().map(|c| store.checkpoint(c))).await;

        assert!(
            matches!(answers[2], Err(StorageError::Io(_))),
            "{:?}",
            answers[2]
        );
        assert!(store.load_thread(&bad).await.unwrap().is_none());
        for (i, answer) in answers.iter().enumerate().filter(|(i, _)| *i != 2) {
            assert!(answer.is_ok(), "{i}: {answer:?}");
        }
        for i in 0..5 {
            let snapshot = store
                .load_thread_snapshot(&tid(&format!("t-good-{i}")))
                .await;
            assert_eq!(texts(&snapshot.unwrap().unwrap().messages), ["m1"]);
        }
    }
}
