//! Checkpoints and fences, each one statement in one round trip.
//!
//! Checkpoints are written in batches ([`group`](super::group) gathers them): one
//! data-modifying statement, run outside any explicit transaction, writes every
//! checkpoint of the batch, so PostgreSQL commits them together: one round trip
//! and one commit flush for the batch. Each checkpoint is still checked on its
//! own, in the statement's parts:
//!
//! 1. lock the batch's thread rows in id order (`FOR UPDATE`; a concurrent writer
//!    queues here and then reads the rows as that writer left them; the order
//!    keeps two batches from locking each other out);
//! 2. decide for each checkpoint whether it may be written: the presented fencing
//!    token is at least the stored one, the stored message count is the expected
//!    one, and the run does not belong to another thread; an absent thread is
//!    created (with its final counters) only when nothing is expected of it yet;
//! 3. only for those insert the messages, upsert the run and the state and store
//!    the new counters.
//!
//! A checkpoint that may not be written changes nothing and gets back what the
//! statement saw, from which [`refusal`] builds the same error the other stores
//! give; the batch's other checkpoints are written. A statement either runs whole
//! or not at all, so every checkpoint stays atomic. A batch holds at most one
//! checkpoint per thread. A checkpoint alone goes out as the same statement on
//! scalar parameters, which PostgreSQL runs faster than a batch of one.
//!
//! A fence is one upsert of the thread row that raises the stored token only if
//! the presented one is at least as high; a new owner's fence can carry the
//! snapshot read with it ([`fenced_snapshot_statement`], decision 0054).

use super::json_text::{EncodedJson, JsonText};
use super::{
    PostgresStore, SnapshotRow, bigint, db_error, ends_the_session, snapshot_of, sql, unsigned,
};
use crate::contract::Thread;
use crate::error::StorageError;
use crate::ids::ThreadId;
use crate::store::{
    Checkpoint, FencingToken, ThreadRunStore, ThreadSnapshot, check_checkpoint, check_fence,
    check_run_thread, checkpointed_thread, implicit_thread, now_millis,
};

/// The run upsert's guard against a run of another thread: `elsewhere` refuses
/// one the statement's snapshot shows, but another node may commit the same run
/// id for its thread while this statement waits for its row lock. The upsert
/// then meets that run, and setting its thread to null makes the statement
/// fail whole (`thread_id` is `NOT NULL`) instead of writing the checkpoint
/// without its run; tried again, the checkpoint is refused by `elsewhere`.
const KEEP_THE_RUNS_THREAD: &str =
    "thread_id = CASE WHEN r.thread_id = EXCLUDED.thread_id THEN r.thread_id END";

/// The checkpoint statement for tables `{p}_…`, for a batch of checkpoints given
/// as parallel arrays, one element per checkpoint:
///
/// `$1` thread ids, `$2` each thread's data if it must be created, `$3` fencing
/// tokens, `$4` expected message counts, `$5` new message counts, `$6`–`$9` the
/// runs (id, status, created_at, data), `$10` the states. The new messages come
/// flattened: `$11` the checkpoint each belongs to (1-based), `$12` its position
/// among that checkpoint's (1-based), `$13` the message, `$14` whether it is
/// internal. Returns one row per checkpoint, in order: its number, whether it
/// was written, the locked row's fence and message count (null when the thread
/// was absent), and the other thread owning the run, if any.
///
/// Threads and runs are looked up one key at a time through lateral subqueries
/// the planner cannot flatten (one locks its row, the other has `OFFSET 0`), so
/// every plan reads them by primary key: as a join or `= ANY`, the generic plan
/// a pooled connection caches while the tables are small scans them whole, and
/// keeps doing so as they grow until they are analyzed again — never, where
/// autovacuum is off (decision 0090). The threads are locked in id order, so
/// two batches never wait on each other in a circle.
pub(super) fn checkpoint_statement(p: &str) -> String {
    format!(
        "WITH input AS (
             SELECT * FROM UNNEST($1::text[], $2::json[], $3::bigint[], $4::bigint[],
                                  $5::bigint[], $6::text[], $7::text[], $8::bigint[],
                                  $9::json[], $10::json[])
                 WITH ORDINALITY AS i(id, thread, fence, expected, added, run_id, status,
                                      created_at, run, state, n)
         ), locked AS (
             SELECT t.id, t.fence, t.message_count
             FROM (SELECT DISTINCT u.id COLLATE \"C\" AS id FROM UNNEST($1::text[]) AS u(id) ORDER BY 1) k
             CROSS JOIN LATERAL (
                 SELECT id, fence, message_count FROM {p}_threads WHERE id = k.id FOR UPDATE
             ) t
         ), elsewhere AS (
             SELECT i.n, r.thread_id FROM input i
             CROSS JOIN LATERAL (
                 SELECT thread_id FROM {p}_runs WHERE id = i.run_id OFFSET 0
             ) r
             WHERE r.thread_id <> i.id
         ), created AS (
             INSERT INTO {p}_threads (id, data, fence, message_count)
             SELECT i.id, i.thread, i.fence, i.expected + i.added FROM input i
             WHERE i.expected = 0
               AND NOT EXISTS (SELECT 1 FROM locked l WHERE l.id = i.id)
               AND NOT EXISTS (SELECT 1 FROM elsewhere e WHERE e.n = i.n)
             ORDER BY i.id
             ON CONFLICT (id) DO NOTHING
             RETURNING id
         ), counted AS (
             UPDATE {p}_threads t
             SET fence = i.fence, message_count = i.expected + i.added, updated_at = now()
             FROM input i, locked l
             WHERE t.id = i.id AND l.id = i.id
               AND l.fence <= i.fence AND l.message_count = i.expected
               AND NOT EXISTS (SELECT 1 FROM elsewhere e WHERE e.n = i.n)
             RETURNING t.id
         ), ok AS (
             SELECT i.* FROM input i
             WHERE i.id IN (SELECT id FROM created UNION ALL SELECT id FROM counted)
         ), messages AS (
             INSERT INTO {p}_messages (thread_id, seq, internal, data)
             SELECT ok.id, ok.expected + m.ord, m.internal, m.data
             FROM UNNEST($11::bigint[], $12::bigint[], $13::json[], $14::bool[])
                 AS m(n, ord, data, internal)
             JOIN ok ON ok.n = m.n
         ), run AS (
             INSERT INTO {p}_runs AS r (id, thread_id, status, created_at, data)
             SELECT ok.run_id, ok.id, ok.status, ok.created_at, ok.run FROM ok
             ON CONFLICT (id) DO UPDATE SET {KEEP_THE_RUNS_THREAD}, status = EXCLUDED.status,
                 created_at = EXCLUDED.created_at, data = EXCLUDED.data, updated_at = now()
         ), state AS (
             INSERT INTO {p}_state (thread_id, data) SELECT ok.id, ok.state FROM ok
             ON CONFLICT (thread_id) DO UPDATE SET data = EXCLUDED.data, updated_at = now()
         )
         SELECT i.n, EXISTS (SELECT 1 FROM ok WHERE ok.n = i.n), l.fence, l.message_count,
                (SELECT e.thread_id FROM elsewhere e WHERE e.n = i.n LIMIT 1)
         FROM input i LEFT JOIN locked l ON l.id = i.id
         ORDER BY i.n"
    )
}

/// The checkpoint statement for one checkpoint alone, the common case on a
/// store that is not busy: the same rules as [`checkpoint_statement`] on scalar
/// parameters, which PostgreSQL runs faster than a batch of one.
///
/// `$1` thread id, `$2` the thread's data if it must be created, `$3` fencing
/// token, `$4` expected message count, `$5`/`$6` the new messages and whether each
/// is internal, `$7`–`$10` the run (id, status, created_at, data), `$11` the state.
/// Returns the row [`checkpoint_statement`] returns for it, numbered 1.
pub(super) fn one_checkpoint_statement(p: &str) -> String {
    format!(
        "WITH locked AS (
             SELECT fence, message_count FROM {p}_threads WHERE id = $1 FOR UPDATE
         ), elsewhere AS (
             SELECT thread_id FROM {p}_runs WHERE id = $7 AND thread_id <> $1
         ), created AS (
             INSERT INTO {p}_threads (id, data, fence, message_count)
             SELECT $1, $2, $3, $4 + cardinality($5::json[])
             WHERE $4 = 0 AND NOT EXISTS (SELECT 1 FROM locked)
               AND NOT EXISTS (SELECT 1 FROM elsewhere)
             ON CONFLICT (id) DO NOTHING
             RETURNING id
         ), counted AS (
             UPDATE {p}_threads
             SET fence = $3, message_count = $4 + cardinality($5::json[]), updated_at = now()
             WHERE id = $1
               AND EXISTS (SELECT 1 FROM locked WHERE fence <= $3 AND message_count = $4)
               AND NOT EXISTS (SELECT 1 FROM elsewhere)
             RETURNING id
         ), ok AS (
             SELECT id FROM created UNION ALL SELECT id FROM counted
         ), messages AS (
             INSERT INTO {p}_messages (thread_id, seq, internal, data)
             SELECT ok.id, $4 + m.ord, m.internal, m.data
             FROM ok, UNNEST($5::json[], $6::bool[]) WITH ORDINALITY AS m(data, internal, ord)
         ), run AS (
             INSERT INTO {p}_runs AS r (id, thread_id, status, created_at, data)
             SELECT $7, ok.id, $8, $9, $10 FROM ok
             ON CONFLICT (id) DO UPDATE SET {KEEP_THE_RUNS_THREAD}, status = EXCLUDED.status,
                 created_at = EXCLUDED.created_at, data = EXCLUDED.data, updated_at = now()
         ), state AS (
             INSERT INTO {p}_state (thread_id, data) SELECT ok.id, $11 FROM ok
             ON CONFLICT (thread_id) DO UPDATE SET data = EXCLUDED.data, updated_at = now()
         )
         SELECT 1::bigint, EXISTS (SELECT 1 FROM ok),
                (SELECT fence FROM locked), (SELECT message_count FROM locked),
                (SELECT thread_id FROM elsewhere LIMIT 1)"
    )
}

/// The fence statement for tables `{p}_…`: `$1` thread id, `$2` the thread's data
/// if it must be created, `$3` the token. Returns a row only when it wrote.
pub(super) fn fence_statement(p: &str) -> String {
    format!(
        "INSERT INTO {p}_threads AS t (id, data, fence) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET fence = EXCLUDED.fence, updated_at = now()
         WHERE t.fence <= EXCLUDED.fence
         RETURNING true"
    )
}

/// The fence statement that also reads the snapshot, for tables `{p}_…`: `$1`
/// thread id, `$2` the thread's data if it must be created, `$3` the token.
///
/// It answers only if the thread row is the version this statement's snapshot
/// saw: the upsert waits for a concurrent writer's row lock and then sees its
/// commit, but the snapshot the messages, state and latest run are read from was
/// taken before, and would miss that write. So it raises the fence only over the
/// row version it saw (`xmin`; every write of a thread's rows gives its thread
/// row a new version), and answers for a row it created only if it saw none (a
/// thread deleted under it is created anew, with a new `seq`, and its old rows
/// must not be read as the new thread's). Otherwise, or when the token is too
/// low, it returns no row; the caller fences and reads in two statements
/// instead. `snapshot_columns` is the thread-snapshot statement's column list
/// over the fenced row `t`.
pub(super) fn fenced_snapshot_statement(p: &str, snapshot_columns: &str) -> String {
    format!(
        "WITH seen AS (
             SELECT xmin AS version, seq FROM {p}_threads WHERE id = $1
         ), t AS (
             INSERT INTO {p}_threads AS t (id, data, fence) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET fence = EXCLUDED.fence, updated_at = now()
             WHERE t.fence <= EXCLUDED.fence AND t.xmin = (SELECT version FROM seen)
             RETURNING t.id, t.data, t.fence, t.seq
         )
         SELECT {snapshot_columns} FROM t
         WHERE NOT EXISTS (SELECT 1 FROM seen) OR t.seq = (SELECT seq FROM seen)"
    )
}

/// What the checkpoint statement saw of one checkpoint:
/// `(number, written, fence, message_count, run owner)`.
type Seen = (i64, bool, Option<i64>, Option<i64>, Option<String>);

/// Why nothing was written, as the error the other stores give; `None` when no
/// rule refused it (the thread appeared or vanished meanwhile: try again).
fn refusal(checkpoint: &Checkpoint, seen: &Seen) -> Option<StorageError> {
    let (_, _, fence, count, owner) = seen;
    let locked = fence.zip(*count);
    let (fence, count) = locked.map_or((0, 0), |(f, c)| (unsigned(f), unsigned(c)));
    if let Err(refused) = check_checkpoint(checkpoint, FencingToken(fence), count) {
        return Some(refused);
    }
    if let Some(owner) = owner {
        return Some(StorageError::AlreadyExists(format!(
            "run `{}` belongs to thread `{owner}`",
            checkpoint.run.run_id
        )));
    }
    None
}

/// What became of `checkpoint`, from what the statement saw of it.
fn outcome(checkpoint: &Checkpoint, seen: &Seen) -> Outcome {
    if seen.1 {
        Outcome::Written
    } else if let Some(refused) = refusal(checkpoint, seen) {
        Outcome::Refused(refused)
    } else {
        Outcome::Changed
    }
}

/// What became of one checkpoint of a batch.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Written and committed.
    Written,
    /// Refused by a rule; nothing of it was written.
    Refused(StorageError),
    /// Neither: its thread appeared or vanished between the statement's snapshot
    /// and its lock. Written by nobody; worth another try.
    Changed,
}

/// A batch's checkpoints as the statement's parameter arrays.
#[derive(Default)]
struct Columns<'a> {
    ids: Vec<&'a str>,
    threads: Vec<EncodedJson>,
    fences: Vec<i64>,
    expected: Vec<i64>,
    added: Vec<i64>,
    run_ids: Vec<&'a str>,
    statuses: Vec<&'static str>,
    created_at: Vec<i64>,
    runs: Vec<EncodedJson>,
    states: Vec<EncodedJson>,
    message_of: Vec<i64>,
    message_ord: Vec<i64>,
    messages: Vec<EncodedJson>,
    internal: Vec<bool>,
}

impl<'a> Columns<'a> {
    /// Adds `checkpoint` as checkpoint number `n` (1-based), or nothing if it
    /// cannot be written (a value out of range, a record that does not serialize).
    fn push(&mut self, n: i64, checkpoint: &'a Checkpoint, now: u64) -> Result<(), StorageError> {
        let run = &checkpoint.run;
        check_run_thread(run, &checkpoint.thread_id)?;
        let fence = bigint("fencing token", checkpoint.fencing.0)?;
        let expected = bigint("message count", checkpoint.expected_message_count)?;
        let created_at = bigint("run created_at", run.created_at)?;
        let added = i64::try_from(checkpoint.new_messages.len())
            .map_err(|_| StorageError::InvalidInput("too many messages".to_owned()))?;
        let thread = EncodedJson::of(&checkpointed_thread(checkpoint, now))?;
        let run_record = EncodedJson::of(run)?;
        let state = EncodedJson::of(&checkpoint.state)?;
        let messages = checkpoint
            .new_messages
            .iter()
            .map(EncodedJson::of)
            .collect::<Result<Vec<_>, _>>()?;
        self.ids.push(checkpoint.thread_id.as_str());
        self.threads.push(thread);
        self.fences.push(fence);
        self.expected.push(expected);
        self.added.push(added);
        self.run_ids.push(run.run_id.as_str());
        self.statuses.push(run.status.as_str());
        self.created_at.push(created_at);
        self.runs.push(run_record);
        self.states.push(state);
        for ((ord, message), encoded) in (1..).zip(&checkpoint.new_messages).zip(messages) {
            self.message_of.push(n);
            self.message_ord.push(ord);
            self.messages.push(encoded);
            self.internal.push(message.is_internal());
        }
        Ok(())
    }
}

/// Why a batch's statement wrote nothing.
#[derive(Debug)]
pub(super) struct BatchFailed {
    /// What to tell the batch's callers.
    pub(super) error: StorageError,
    /// The database refused the statement (a value it cannot store, a deadlock):
    /// written one by one, only the culprit would fail. Otherwise the database
    /// was not reached, and no checkpoint would fare better alone.
    pub(super) by_the_database: bool,
}

impl From<StorageError> for BatchFailed {
    fn from(error: StorageError) -> Self {
        Self {
            error,
            by_the_database: false,
        }
    }
}

impl From<sqlx::Error> for BatchFailed {
    fn from(error: sqlx::Error) -> Self {
        let by_the_database =
            matches!(error, sqlx::Error::Database(_)) && !ends_the_session(&error);
        // A connection lost or ended by the server after the statement went out
        // leaves its commit unknown; one never had did not send it.
        let maybe_written = !by_the_database && !matches!(error, sqlx::Error::PoolTimedOut);
        let error = match db_error(error) {
            StorageError::Unavailable(message) if maybe_written => {
                StorageError::MaybeWritten(message)
            }
            other => other,
        };
        Self {
            by_the_database,
            error,
        }
    }
}

impl PostgresStore {
    /// Writes `batch` (at most one checkpoint per thread) in one statement (see
    /// the module docs) and says what became of each, in order. An error means
    /// the statement failed and none of them was written.
    pub(super) async fn write_checkpoints(
        &self,
        batch: &[&Checkpoint],
    ) -> Result<Vec<Outcome>, BatchFailed> {
        self.ready().await?;
        let now = now_millis();
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(batch.len());
        let mut columns = Columns::default();
        let mut sent = Vec::with_capacity(batch.len());
        for checkpoint in batch {
            let n = count_of(sent.len() + 1);
            match columns.push(n, checkpoint, now) {
                Ok(()) => {
                    outcomes.push(None);
                    sent.push(outcomes.len() - 1);
                }
                Err(invalid) => outcomes.push(Some(Outcome::Refused(invalid))),
            }
        }
        if let [one] = sent.as_slice() {
            let seen = self.write_one(batch[*one], &columns).await?;
            outcomes[*one] = Some(outcome(batch[*one], &seen));
        } else if !sent.is_empty() {
            let seen: Vec<Seen> = statement!(
                self,
                sqlx::query_as(sql(&self.sql.checkpoint))
                    .bind(&columns.ids)
                    .bind(&columns.threads)
                    .bind(&columns.fences)
                    .bind(&columns.expected)
                    .bind(&columns.added)
                    .bind(&columns.run_ids)
                    .bind(&columns.statuses)
                    .bind(&columns.created_at)
                    .bind(&columns.runs)
                    .bind(&columns.states)
                    .bind(&columns.message_of)
                    .bind(&columns.message_ord)
                    .bind(&columns.messages)
                    .bind(&columns.internal),
                fetch_all
            )?;
            for (index, row) in sent.into_iter().zip(&seen) {
                outcomes[index] = Some(outcome(batch[index], row));
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.unwrap_or(Outcome::Changed))
            .collect())
    }

    /// Writes `checkpoint` alone with the scalar statement on `connection` (a
    /// transaction's, which the caller commits): what became of it. A
    /// checkpoint that carries approval writes goes this way, so they commit
    /// with it (module `approvals`).
    pub(super) async fn write_one_on(
        &self,
        connection: &mut sqlx::PgConnection,
        checkpoint: &Checkpoint,
    ) -> Result<Outcome, BatchFailed> {
        let mut columns = Columns::default();
        columns.push(1, checkpoint, now_millis())?;
        self.stats.statement();
        let seen = self
            .one_checkpoint(checkpoint, &columns)
            .fetch_one(connection)
            .await?;
        Ok(outcome(checkpoint, &seen))
    }

    /// The scalar checkpoint statement for the one checkpoint in `columns`.
    fn one_checkpoint<'q>(
        &'q self,
        checkpoint: &'q Checkpoint,
        columns: &'q Columns<'_>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, Seen, sqlx::postgres::PgArguments> {
        sqlx::query_as(sql(&self.sql.one_checkpoint))
            .bind(checkpoint.thread_id.as_str())
            .bind(&columns.threads[0])
            .bind(columns.fences[0])
            .bind(columns.expected[0])
            .bind(&columns.messages)
            .bind(&columns.internal)
            .bind(columns.run_ids[0])
            .bind(columns.statuses[0])
            .bind(columns.created_at[0])
            .bind(&columns.runs[0])
            .bind(&columns.states[0])
    }

    /// Writes the one checkpoint in `columns` with the scalar statement.
    async fn write_one(
        &self,
        checkpoint: &Checkpoint,
        columns: &Columns<'_>,
    ) -> Result<Seen, sqlx::Error> {
        statement!(self, self.one_checkpoint(checkpoint, columns), fetch_one)
    }

    /// Raises the thread's fence to `token` and reads its snapshot, in one
    /// statement when the thread did not change under it (see
    /// [`fenced_snapshot_statement`]), else as a fence and a read.
    pub(super) async fn fence_and_read(
        &self,
        id: &ThreadId,
        token: FencingToken,
    ) -> Result<Option<ThreadSnapshot>, StorageError> {
        self.ready().await?;
        let (value, thread) = fence_parameters(id, token)?;
        let row: Option<SnapshotRow> = statement!(
            self,
            sqlx::query_as(sql(&self.sql.fenced_snapshot))
                .bind(id.as_str())
                .bind(&thread)
                .bind(value),
            fetch_optional
        )
        .map_err(db_error)?;
        match row {
            Some(row) => Ok(Some(snapshot_of(row))),
            None => {
                self.write_fence(id, token).await?;
                self.load_thread_snapshot(id).await
            }
        }
    }

    /// Raises the thread's fence to `token` in one statement, creating the thread
    /// if absent.
    pub(super) async fn write_fence(
        &self,
        id: &ThreadId,
        token: FencingToken,
    ) -> Result<(), StorageError> {
        self.ready().await?;
        let (value, thread) = fence_parameters(id, token)?;
        // A second try covers a thread deleted between the two statements.
        for _ in 0..2 {
            let written: Option<bool> = statement!(
                self,
                sqlx::query_scalar(sql(&self.sql.fence))
                    .bind(id.as_str())
                    .bind(&thread)
                    .bind(value),
                fetch_optional
            )
            .map_err(db_error)?;
            if written.is_some() {
                return Ok(());
            }
            let current: Option<i64> = statement!(
                self,
                sqlx::query_scalar(sql(&self.sql.current_fence)).bind(id.as_str()),
                fetch_optional
            )
            .map_err(db_error)?;
            if let Some(current) = current {
                check_fence(token, FencingToken(unsigned(current)))?;
            }
        }
        Err(StorageError::Io(format!(
            "postgres: thread `{id}` changed under the fence twice"
        )))
    }
}

/// A fence statement's token and the data of the thread it creates if absent.
fn fence_parameters(
    id: &ThreadId,
    token: FencingToken,
) -> Result<(i64, JsonText<Thread>), StorageError> {
    Ok((
        bigint("fencing token", token.0)?,
        JsonText(implicit_thread(id, now_millis())),
    ))
}

/// A checkpoint's number in its batch as a `BIGINT` (batches are small).
fn count_of(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::types::Json;

    use crate::contract::Message;
    use crate::ids::ThreadId;
    use crate::store::conformance::{checkpoint, run, tid, user_messages};
    use crate::store::postgres::PostgresStore;
    use crate::store::{FencingToken, ThreadRunStore, ThreadSnapshot};

    /// Waits until a session of this test's pool waits for a lock.
    async fn until_blocked(store: &PostgresStore, application: &str) {
        until_waiting(store, application, 1).await;
    }

    /// Waits until `count` sessions of this test's pool wait for a lock.
    async fn until_waiting(store: &PostgresStore, application: &str, count: i64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
            )
            .bind(application)
            .fetch_one(store.pool())
            .await
            .unwrap();
            if waiting >= count {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "fewer than {count} sessions waited for a lock"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// `id`'s snapshot, fenced at 2 by a read that waits for `writer`'s row
    /// lock while `writer` waits for `blocker`; both are let go once waiting.
    async fn fenced_read_behind(
        store: &PostgresStore,
        application: &str,
        id: &ThreadId,
        blocker: sqlx::Transaction<'static, sqlx::Postgres>,
        writer: tokio::task::JoinHandle<Result<(), crate::error::StorageError>>,
    ) -> ThreadSnapshot {
        until_waiting(store, application, 1).await;
        let taken = tokio::spawn({
            let (store, id) = (store.clone(), id.clone());
            async move { store.fence_and_load(&id, FencingToken(2)).await }
        });
        until_waiting(store, application, 2).await;
        blocker.rollback().await.unwrap();
        writer.await.unwrap().unwrap();
        taken.await.unwrap().unwrap().unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_another_thread_took_under_the_checkpoint_refuses_it_whole() {
        let (store, schema) = PostgresStore::for_tests().await;
        let other_node = PostgresStore::new(store.pool().clone());
        let (t, u) = (tid("t-one"), tid("t-other"));
        store
            .checkpoint(checkpoint(
                &t,
                1,
                0,
                user_messages("m", 1),
                run(&t, "r-t", 1),
            ))
            .await
            .unwrap();
        // Holds the next checkpoint of `t` at its row lock, its snapshot taken.
        let mut locker = store.pool().begin().await.unwrap();
        sqlx::query("SELECT 1 FROM awaken_threads WHERE id = $1 FOR UPDATE")
            .bind(t.as_str())
            .execute(&mut *locker)
            .await
            .unwrap();
        let pending = tokio::spawn({
            let (store, t) = (store.clone(), t.clone());
            async move {
                let next = checkpoint(&t, 1, 1, user_messages("x", 1), run(&t, "r-shared", 2));
                store.checkpoint(next).await
            }
        });
        until_blocked(&store, schema.name()).await;
        // Meanwhile another node starts a run of the same id on its thread.
        other_node
            .checkpoint(checkpoint(
                &u,
                1,
                0,
                user_messages("y", 1),
                run(&u, "r-shared", 2),
            ))
            .await
            .unwrap();
        locker.commit().await.unwrap();

        let answer = pending.await.unwrap();
        assert!(
            matches!(answer, Err(crate::error::StorageError::AlreadyExists(_))),
            "{answer:?}"
        );
        let snapshot = store.load_thread_snapshot(&t).await.unwrap().unwrap();
        let texts: Vec<String> = snapshot.messages.iter().map(Message::text).collect();
        assert_eq!(
            texts,
            ["m1"],
            "nothing of the refused checkpoint was written"
        );
        assert_eq!(snapshot.latest_run.unwrap().run_id.as_str(), "r-t");
        let shared = crate::store::conformance::rid("r-shared");
        let owner = store.load_run(&shared).await.unwrap().unwrap().thread_id;
        assert_eq!(owner, u);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fenced_read_that_waited_for_a_delete_reads_the_thread_anew() {
        let (store, schema) = PostgresStore::for_tests().await;
        let id = tid("t-deleted-under-the-read");
        store
            .checkpoint(checkpoint(
                &id,
                1,
                0,
                user_messages("m", 3),
                run(&id, "r1", 1),
            ))
            .await
            .unwrap();
        // Holds `delete_thread` after it locked the thread row, before it commits.
        let mut blocker = store.pool().begin().await.unwrap();
        sqlx::query("SELECT 1 FROM awaken_state WHERE thread_id = $1 FOR UPDATE")
            .bind(id.as_str())
            .execute(&mut *blocker)
            .await
            .unwrap();
        let deleting = tokio::spawn({
            let (store, id) = (store.clone(), id.clone());
            async move { store.delete_thread(&id).await.map(drop) }
        });
        let snapshot = fenced_read_behind(&store, schema.name(), &id, blocker, deleting).await;
        assert!(
            snapshot.messages.is_empty(),
            "the deleted thread's messages are not the new one's: {:?}",
            snapshot.messages
        );
        assert_eq!(snapshot.latest_run, None);
        assert_eq!(snapshot.state, None);
        assert_eq!(snapshot.fence, FencingToken(2));
        store
            .checkpoint(checkpoint(
                &id,
                2,
                0,
                user_messages("n", 1),
                run(&id, "r2", 2),
            ))
            .await
            .expect("the next checkpoint follows the snapshot");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fenced_read_that_waited_for_a_new_run_sees_it() {
        let (store, schema) = PostgresStore::for_tests().await;
        let id = tid("t-run-created-under-the-read");
        store
            .checkpoint(checkpoint(
                &id,
                1,
                0,
                user_messages("m", 1),
                run(&id, "r1", 1),
            ))
            .await
            .unwrap();
        // Holds `create_run` after it locked the thread row, before it commits:
        // its run id is being inserted, uncommitted, by another transaction.
        let mut blocker = store.pool().begin().await.unwrap();
        sqlx::query(
            "INSERT INTO awaken_runs (id, thread_id, status, created_at, data)
             VALUES ('r2', 'elsewhere', 'running', 0, '{}')",
        )
        .execute(&mut *blocker)
        .await
        .unwrap();
        let creating = tokio::spawn({
            let store = store.clone();
            let record = run(&id, "r2", 2);
            async move { store.create_run(&record).await }
        });
        let snapshot = fenced_read_behind(&store, schema.name(), &id, blocker, creating).await;
        let latest = snapshot.latest_run.map(|run| run.run_id);
        assert_eq!(
            latest,
            store.latest_run(&id).await.unwrap().map(|r| r.run_id)
        );
        assert_eq!(latest.as_ref().map(|r| r.as_str()), Some("r2"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fenced_read_that_waited_for_a_checkpoint_sees_it() {
        let (store, schema) = PostgresStore::for_tests().await;
        let id = tid("t-taken-over");
        store
            .checkpoint(checkpoint(
                &id,
                1,
                0,
                user_messages("m", 2),
                run(&id, "r1", 1),
            ))
            .await
            .unwrap();
        // The old owner's checkpoint, caught between its lock and its commit.
        let mut old_owner = store.pool().begin().await.unwrap();
        sqlx::query(
            "UPDATE awaken_threads SET message_count = 3, updated_at = now() WHERE id = $1",
        )
        .bind(id.as_str())
        .execute(&mut *old_owner)
        .await
        .unwrap();
        sqlx::query("INSERT INTO awaken_messages (thread_id, seq, internal, data) VALUES ($1, 3, false, $2)")
            .bind(id.as_str())
            .bind(Json(Message::user("m3")))
            .execute(&mut *old_owner)
            .await
            .unwrap();

        let reader = store.clone();
        let taken = {
            let id = id.clone();
            tokio::spawn(async move { reader.fence_and_load(&id, FencingToken(2)).await })
        };
        until_blocked(&store, schema.name()).await;
        old_owner.commit().await.unwrap();

        let snapshot = taken.await.unwrap().unwrap().unwrap();
        let texts: Vec<String> = snapshot.messages.iter().map(Message::text).collect();
        assert_eq!(
            texts,
            ["m1", "m2", "m3"],
            "the committed checkpoint is read"
        );
        assert_eq!(snapshot.fence, FencingToken(2));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thread_deleted_under_a_checkpoint_leaves_no_row_behind() {
        let (store, schema) = PostgresStore::for_tests().await;
        let id = tid("t-deleted");
        store
            .checkpoint(checkpoint(
                &id,
                1,
                0,
                user_messages("m", 1),
                run(&id, "r1", 1),
            ))
            .await
            .unwrap();
        // A checkpoint caught between its lock and its commit, adding a message.
        let mut writer = store.pool().begin().await.unwrap();
        sqlx::query("SELECT 1 FROM awaken_threads WHERE id = $1 FOR UPDATE")
            .bind(id.as_str())
            .execute(&mut *writer)
            .await
            .unwrap();
        sqlx::query("INSERT INTO awaken_messages (thread_id, seq, internal, data) VALUES ($1, 2, false, $2)")
            .bind(id.as_str())
            .bind(Json(Message::user("m2")))
            .execute(&mut *writer)
            .await
            .unwrap();

        let deleting = {
            let store = store.clone();
            let id = id.clone();
            tokio::spawn(async move { store.delete_thread(&id).await })
        };
        until_blocked(&store, schema.name()).await;
        writer.commit().await.unwrap();
        deleting.await.unwrap().unwrap();

        for table in ["awaken_messages", "awaken_runs", "awaken_state"] {
            let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM {table} WHERE thread_id = $1"
            )))
            .bind(id.as_str())
            .fetch_one(store.pool())
            .await
            .unwrap();
            assert_eq!(left, 0, "{table} keeps rows of the deleted thread");
        }
    }

    #[tokio::test]
    async fn a_message_holding_a_nul_is_kept_as_written() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let id = tid("t-nul");
        store
            .checkpoint(checkpoint(
                &id,
                1,
                0,
                vec![Message::user("a\u{0}b")],
                run(&id, "r1", 1),
            ))
            .await
            .unwrap();
        let snapshot = store.load_thread_snapshot(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.messages[0].text(), "a\u{0}b");
    }
}
