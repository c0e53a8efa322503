//! Checkpoints and fences, each one statement in one round trip.
//!
//! A checkpoint is a single data-modifying statement run outside any explicit
//! transaction, so PostgreSQL commits it on its own: one round trip, one commit
//! flush. Its parts:
//!
//! 1. lock the thread row (`FOR UPDATE`; a concurrent writer queues here and then
//!    reads the row as that writer left it);
//! 2. decide whether the write may happen: the presented fencing token is at least
//!    the stored one, the stored message count is the expected one, and the run
//!    does not belong to another thread; an absent thread is created (with its
//!    final counters) only when nothing is expected of it yet;
//! 3. only then insert the messages, upsert the run and the state and store the
//!    new counters.
//!
//! When the write may not happen the statement changes nothing and returns what
//! it saw, from which [`refusal`] builds the same error the other stores give. A
//! statement either runs whole or not at all, so a checkpoint stays atomic.
//!
//! A fence is one upsert of the thread row that raises the stored token only if
//! the presented one is at least as high.

use sqlx::types::Json;

use super::{PostgresStore, bigint, db_error, sql, unsigned};
use crate::contract::Message;
use crate::error::StorageError;
use crate::ids::ThreadId;
use crate::store::{
    Checkpoint, FencingToken, check_checkpoint, check_fence, check_run_thread, implicit_thread,
    now_millis,
};

/// The checkpoint statement for tables `{p}_…`.
///
/// `$1` thread id, `$2` the thread's data if it must be created, `$3` fencing
/// token, `$4` expected message count, `$5`/`$6` the new messages and whether each
/// is internal, `$7`–`$10` the run (id, status, created_at, data), `$11` the state.
/// Returns one row: whether it wrote, the locked row's fence and message count
/// (null when the thread was absent), and the other thread owning the run, if any.
pub(super) fn checkpoint_statement(p: &str) -> String {
    format!(
        "WITH locked AS (
             SELECT fence, message_count FROM {p}_threads WHERE id = $1 FOR UPDATE
         ), elsewhere AS (
             SELECT thread_id FROM {p}_runs WHERE id = $7 AND thread_id <> $1
         ), created AS (
             INSERT INTO {p}_threads (id, data, fence, message_count)
             SELECT $1, $2, $3, $4 + cardinality($5::jsonb[])
             WHERE $4 = 0 AND NOT EXISTS (SELECT 1 FROM locked)
               AND NOT EXISTS (SELECT 1 FROM elsewhere)
             ON CONFLICT (id) DO NOTHING
             RETURNING id
         ), counted AS (
             UPDATE {p}_threads
             SET fence = $3, message_count = $4 + cardinality($5::jsonb[]), updated_at = now()
             WHERE id = $1
               AND EXISTS (SELECT 1 FROM locked WHERE fence <= $3 AND message_count = $4)
               AND NOT EXISTS (SELECT 1 FROM elsewhere)
             RETURNING id
         ), ok AS (
             SELECT id FROM created UNION ALL SELECT id FROM counted
         ), messages AS (
             INSERT INTO {p}_messages (thread_id, seq, internal, data)
             SELECT ok.id, $4 + m.ord, m.internal, m.data
             FROM ok, UNNEST($5::jsonb[], $6::bool[]) WITH ORDINALITY AS m(data, internal, ord)
         ), run AS (
             INSERT INTO {p}_runs AS r (id, thread_id, status, created_at, data)
             SELECT $7, ok.id, $8, $9, $10 FROM ok
             ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status,
                 created_at = EXCLUDED.created_at, data = EXCLUDED.data, updated_at = now()
             WHERE r.thread_id = EXCLUDED.thread_id
         ), state AS (
             INSERT INTO {p}_state (thread_id, data) SELECT ok.id, $11 FROM ok
             ON CONFLICT (thread_id) DO UPDATE SET data = EXCLUDED.data, updated_at = now()
         )
         SELECT EXISTS (SELECT 1 FROM ok),
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

/// What a checkpoint statement saw: `(written, fence, message_count, run owner)`.
type Seen = (bool, Option<i64>, Option<i64>, Option<String>);

/// Why nothing was written, as the error the other stores give; `None` when no
/// rule refused it (the thread appeared or vanished meanwhile: try again).
fn refusal(checkpoint: &Checkpoint, seen: &Seen) -> Option<StorageError> {
    let (_, fence, count, owner) = seen;
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

impl PostgresStore {
    /// Writes `checkpoint` in one statement (see the module docs).
    pub(super) async fn write_checkpoint(
        &self,
        checkpoint: &Checkpoint,
    ) -> Result<(), StorageError> {
        self.ready().await?;
        self.stats.checkpoint();
        let id = &checkpoint.thread_id;
        let run = &checkpoint.run;
        check_run_thread(run, id)?;
        let fencing = bigint("fencing token", checkpoint.fencing.0)?;
        let expected = bigint("message count", checkpoint.expected_message_count)?;
        let created_at = bigint("run created_at", run.created_at)?;
        let data: Vec<Json<&Message>> = checkpoint.new_messages.iter().map(Json).collect();
        let internal: Vec<bool> = checkpoint
            .new_messages
            .iter()
            .map(Message::is_internal)
            .collect();
        let thread = Json(implicit_thread(id, now_millis()));
        // A second try covers a thread created or deleted by another writer
        // between this statement's snapshot and its lock.
        for _ in 0..2 {
            let seen: Seen = sqlx::query_as(sql(&self.sql.checkpoint))
                .bind(id.as_str())
                .bind(&thread)
                .bind(fencing)
                .bind(expected)
                .bind(&data)
                .bind(&internal)
                .bind(run.run_id.as_str())
                .bind(run.status.as_str())
                .bind(created_at)
                .bind(Json(run))
                .bind(Json(&checkpoint.state))
                .fetch_one(self.send())
                .await
                .map_err(db_error)?;
            if seen.0 {
                return Ok(());
            }
            if let Some(refused) = refusal(checkpoint, &seen) {
                return Err(refused);
            }
        }
        Err(StorageError::Io(format!(
            "postgres: thread `{id}` changed under the checkpoint twice"
        )))
    }

    /// Raises the thread's fence to `token` in one statement, creating the thread
    /// if absent.
    pub(super) async fn write_fence(
        &self,
        id: &ThreadId,
        token: FencingToken,
    ) -> Result<(), StorageError> {
        self.ready().await?;
        let value = bigint("fencing token", token.0)?;
        let thread = Json(implicit_thread(id, now_millis()));
        // A second try covers a thread deleted between the two statements.
        for _ in 0..2 {
            let written: Option<bool> = sqlx::query_scalar(sql(&self.sql.fence))
                .bind(id.as_str())
                .bind(&thread)
                .bind(value)
                .fetch_optional(self.send())
                .await
                .map_err(db_error)?;
            if written.is_some() {
                return Ok(());
            }
            let current: Option<i64> = sqlx::query_scalar(sql(&self.sql.current_fence))
                .bind(id.as_str())
                .fetch_optional(self.send())
                .await
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
