//! Approvals in `{prefix}_approvals`: one row per approval, keyed by its id, with
//! the columns the inbox filters and orders by beside the record (`data`, the
//! approval as it was requested) and its resolution (`resolution`, once resolved).
//!
//! * **Written with their checkpoint.** A checkpoint that carries approval writes
//!   is not batched: it is the scalar checkpoint statement and the approvals'
//!   statements in one transaction, so an approval exists exactly when the
//!   checkpoint that asked for it does. Such checkpoints are a suspension's or a
//!   decision's, a small share of all.
//! * **Requested**: inserted unless its id is there, the tenant read from the
//!   thread's row (the thread exists: the checkpoint before it wrote or created it).
//! * **Resolved**: updated only while `pending` or `escalated`: the first
//!   resolution stays.
//! * **Thread deleted**: its open approvals are cancelled by the deletion's
//!   statement and kept (the table references no thread).
//! * **Inbox**: two statements, one for a status and one for any, each walking an
//!   index in `(requested_at, id)` order from the cursor (of all approvals, or of
//!   a tenant's), so a page reads about as
//!   many rows as it returns whatever the table holds. They are sent unprepared:
//!   planned with the page's own filters and size each time, never with a
//!   generic plan made for unknown ones (decision 0090).

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::PgConnection;
use sqlx::types::Json;

use super::write::Outcome;
use super::{JsonText, PostgresStore, bigint, count, db_error, sql};
use crate::contract::{
    Approval, ApprovalChange, ApprovalEvent, ApprovalResolution, ApprovalWrite, TENANT_KEY,
};
use crate::error::StorageError;
use crate::ids::{ApprovalId, ThreadId};
use crate::store::approvals::{Owed, owed_changes};
use crate::store::{
    ApprovalCursor, ApprovalPage, ApprovalQuery, Checkpoint, duration_ms, now_millis,
};

/// The columns an approval is read back from: its record, tenant, resolution.
pub(super) const COLUMNS: &str = "data, tenant, resolution";

/// An approval as the columns of [`COLUMNS`].
pub(super) type ApprovalRow = (
    Json<Approval>,
    Option<String>,
    Option<Json<ApprovalResolution>>,
);

/// An approval as [`COLUMNS`] and the feed's bits.
type OwedRow = (
    Json<Approval>,
    Option<String>,
    Option<Json<ApprovalResolution>>,
    i16,
);

/// The approval statements for tables `{p}_…`.
#[derive(Debug)]
pub(super) struct ApprovalStatements {
    /// The table and its indexes, for `ensure_schema`.
    pub(super) schema: Vec<String>,
    request: String,
    resolve: String,
    load: String,
    page_by_status: String,
    page_any: String,
    unpublished: String,
    published: String,
}

impl ApprovalStatements {
    /// The statements that find their rows by key, for the plan check.
    #[cfg(test)]
    pub(super) fn keyed(&self) -> [(&'static str, &String); 3] {
        [
            ("approvals.request", &self.request),
            ("approvals.resolve", &self.resolve),
            ("approvals.load", &self.load),
        ]
    }

    /// The two page statements, for the plan check.
    #[cfg(test)]
    pub(super) fn pages(&self) -> [&str; 2] {
        [&self.page_by_status, &self.page_any]
    }

    /// The statements with the table prefix `p` filled in.
    pub(super) fn new(p: &str) -> Self {
        // The filters every page applies, from `$3`: tenant, agent, tool,
        // thread, requested from, requested before; `$9`/`$10` the cursor,
        // its time also as a plain bound, which an index seeks to (a row
        // comparison after the status column is only a filter).
        let filters = "($3::text IS NULL OR tenant = $3)
                   AND ($4::text IS NULL OR agent_id = $4)
                   AND ($5::text IS NULL OR tool_name = $5)
                   AND ($6::text IS NULL OR thread_id = $6)
                   AND ($7::bigint IS NULL OR requested_at >= $7)
                   AND ($8::bigint IS NULL OR requested_at < $8)
                   AND ($9::bigint IS NULL OR (requested_at >= $9 AND (requested_at, id) > ($9, $10::text)))";
        let requested = Owed::bit(ApprovalEvent::Requested);
        let resolved = Owed::bit(ApprovalEvent::Resolved);
        Self {
            schema: vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {p}_approvals (
                        id TEXT COLLATE \"C\" PRIMARY KEY,
                        thread_id TEXT COLLATE \"C\" NOT NULL,
                        tenant TEXT COLLATE \"C\",
                        agent_id TEXT COLLATE \"C\" NOT NULL,
                        tool_name TEXT COLLATE \"C\" NOT NULL,
                        status TEXT NOT NULL,
                        requested_at BIGINT NOT NULL,
                        expires_at BIGINT,
                        resolved_at BIGINT,
                        data JSON NOT NULL,
                        resolution JSON,
                        feed SMALLINT NOT NULL DEFAULT 0,
                        updated_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                ),
                // Tables of the build before the feed have no `feed` column;
                // this runs with the index below, which they lack too.
                format!(
                    "ALTER TABLE {p}_approvals
                     ADD COLUMN IF NOT EXISTS feed SMALLINT NOT NULL DEFAULT 0"
                ),
                // What the feed is owed: few rows, found without reading the rest.
                format!(
                    "CREATE INDEX IF NOT EXISTS {p}_approvals_unpublished
                     ON {p}_approvals (requested_at, id) WHERE feed <> 0"
                ),
                format!(
                    "CREATE INDEX IF NOT EXISTS {p}_approvals_by_status
                     ON {p}_approvals (status, requested_at, id)"
                ),
                format!(
                    "CREATE INDEX IF NOT EXISTS {p}_approvals_by_request
                     ON {p}_approvals (requested_at, id)"
                ),
                format!(
                    "CREATE INDEX IF NOT EXISTS {p}_approvals_by_thread
                     ON {p}_approvals (thread_id)"
                ),
                // A tenant's inbox (every caller's, with API keys) walks its own rows.
                format!(
                    "CREATE INDEX IF NOT EXISTS {p}_approvals_by_tenant_status
                     ON {p}_approvals (tenant, status, requested_at, id)"
                ),
                format!(
                    "CREATE INDEX IF NOT EXISTS {p}_approvals_by_tenant
                     ON {p}_approvals (tenant, requested_at, id)"
                ),
            ],
            request: format!(
                "INSERT INTO {p}_approvals
                     (id, thread_id, tenant, agent_id, tool_name, status, requested_at, expires_at, data, feed)
                 SELECT $1::text, $2::text,
                        (SELECT t.data->'metadata'->'custom'->>$3::text FROM {p}_threads t WHERE t.id = $2),
                        $4::text, $5::text, 'pending', $6::bigint, $7::bigint, $8::json, {requested}
                 ON CONFLICT (id) DO NOTHING
                 RETURNING tenant"
            ),
            resolve: format!(
                "UPDATE {p}_approvals
                 SET status = $2, resolved_at = $3, resolution = $4, updated_at = now(),
                     feed = feed | {resolved}
                 WHERE id = $1 AND status IN ('pending', 'escalated')
                 RETURNING {COLUMNS}"
            ),
            load: format!("SELECT {COLUMNS} FROM {p}_approvals WHERE id = $1"),
            page_by_status: format!(
                "SELECT {COLUMNS} FROM {p}_approvals
                 WHERE status = $2 AND {filters}
                 ORDER BY status, requested_at, id LIMIT $1"
            ),
            page_any: format!(
                "SELECT {COLUMNS} FROM {p}_approvals
                 WHERE $2::text IS NULL AND {filters}
                 ORDER BY requested_at, id LIMIT $1"
            ),
            unpublished: format!(
                "SELECT {COLUMNS}, feed FROM {p}_approvals
                 WHERE feed <> 0 AND coalesce(resolved_at, requested_at) <= $1
                 ORDER BY requested_at, id LIMIT $2"
            ),
            // Bits of one id merged by the caller: an update joins each row once.
            published: format!(
                "UPDATE {p}_approvals a SET feed = a.feed & ~m.bits
                 FROM (SELECT unnest($1::text[]) AS id, unnest($2::smallint[]) AS bits) m
                 WHERE a.id = m.id"
            ),
        }
    }
}

/// The part of the thread deletion's statement that cancels the thread's open
/// approvals: `$1` the thread, `$2` when, `$3` the resolution.
pub(super) fn cancel_thread_statement(p: &str) -> String {
    format!(
        "UPDATE {p}_approvals
         SET status = 'cancelled', resolved_at = $2::bigint, resolution = $3::json, updated_at = now(),
             feed = feed | {resolved}
         WHERE thread_id = $1 AND status IN ('pending', 'escalated')
         RETURNING {COLUMNS}",
        resolved = Owed::bit(ApprovalEvent::Resolved),
    )
}

/// The resolutions rows returned by a resolving statement describe.
pub(super) fn resolved_changes(rows: Vec<ApprovalRow>) -> Vec<ApprovalChange> {
    rows.into_iter()
        .map(|row| ApprovalChange::resolved(approval_of(row)))
        .collect()
}

/// The approval a row holds: its record with its tenant and resolution.
fn approval_of((Json(mut approval), tenant, resolution): ApprovalRow) -> Approval {
    approval.tenant = tenant;
    if let Some(Json(resolution)) = resolution {
        approval.resolve(&resolution);
    }
    approval
}

impl PostgresStore {
    /// Writes `checkpoint` and its approval writes in one transaction.
    pub(super) async fn checkpoint_with_approvals(
        &self,
        checkpoint: Checkpoint,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        self.ready().await?;
        // Its thread appearing or vanishing under the statement: once more.
        for _ in 0..3 {
            let mut tx = self.begin_with("BEGIN").await?;
            let outcome = self.write_one_on(&mut tx, &checkpoint).await;
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(failed) => {
                    let _ = tx.rollback().await;
                    return Err(failed.error);
                }
            };
            match outcome {
                Outcome::Written => {}
                Outcome::Refused(refused) => {
                    let _ = tx.rollback().await;
                    return Err(refused);
                }
                Outcome::Changed => {
                    let _ = tx.rollback().await;
                    continue;
                }
            }
            let changes = match self
                .write_approvals(&mut tx, &checkpoint.thread_id, &checkpoint.approvals)
                .await
            {
                Ok(changes) => changes,
                Err(error) => {
                    let _ = tx.rollback().await;
                    return Err(error);
                }
            };
            self.stats.statement();
            tx.commit()
                .await
                .map_err(|error| super::write::BatchFailed::from(error).error)?;
            return Ok(changes);
        }
        Err(StorageError::Unavailable(format!(
            "postgres: thread `{}` kept changing under its checkpoint",
            checkpoint.thread_id
        )))
    }

    /// Applies `writes` of a checkpoint of `thread_id` on `connection`; the
    /// changes they made.
    async fn write_approvals(
        &self,
        connection: &mut PgConnection,
        thread_id: &ThreadId,
        writes: &[ApprovalWrite],
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        let statements = &self.sql.approvals;
        let mut changes = Vec::new();
        for write in writes {
            self.stats.statement();
            match write {
                ApprovalWrite::Requested(approval) => {
                    let mut record = (**approval).clone();
                    record.tenant = None;
                    let inserted: Option<(Option<String>,)> =
                        sqlx::query_as(sql(&statements.request))
                            .bind(approval.approval_id.as_str())
                            .bind(thread_id.as_str())
                            .bind(TENANT_KEY)
                            .bind(approval.agent_id.as_str())
                            .bind(&approval.tool_name)
                            .bind(bigint("requested_at", approval.requested_at)?)
                            .bind(
                                approval
                                    .expires_at
                                    .map(|at| bigint("expires_at", at))
                                    .transpose()?,
                            )
                            .bind(JsonText(&record))
                            .fetch_optional(&mut *connection)
                            .await
                            .map_err(db_error)?;
                    if let Some((tenant,)) = inserted {
                        record.tenant = tenant;
                        changes.push(ApprovalChange::requested(record));
                    }
                }
                ApprovalWrite::Resolved {
                    approval_id,
                    resolution,
                } => {
                    let resolved: Option<ApprovalRow> = sqlx::query_as(sql(&statements.resolve))
                        .bind(approval_id.as_str())
                        .bind(resolution.status.as_str())
                        .bind(bigint("resolved_at", resolution.resolved_at)?)
                        .bind(JsonText(resolution))
                        .fetch_optional(&mut *connection)
                        .await
                        .map_err(db_error)?;
                    changes.extend(resolved_changes(resolved.into_iter().collect()));
                }
            }
        }
        Ok(changes)
    }

    /// Up to `limit` changes the feed is owed, made more than `older_than` ago.
    pub(super) async fn read_unpublished(
        &self,
        older_than: Duration,
        limit: usize,
    ) -> Result<Vec<ApprovalChange>, StorageError> {
        self.ready().await?;
        let before = now_millis().saturating_sub(duration_ms(older_than));
        let rows: Vec<OwedRow> = statement!(
            self,
            sqlx::query_as(sql(&self.sql.approvals.unpublished))
                .bind(bigint("changed_by", before)?)
                .bind(count(limit)),
            fetch_all
        )
        .map_err(db_error)?;
        let mut changes = Vec::new();
        for (data, tenant, resolution, feed) in rows {
            let approval = approval_of((data, tenant, resolution));
            let owed = u8::try_from(feed).unwrap_or_default();
            changes.extend(owed_changes(&approval, owed));
        }
        changes.truncate(limit);
        Ok(changes)
    }

    /// Clears the feed's bits of `published`.
    pub(super) async fn mark_published(
        &self,
        published: &[(ApprovalId, ApprovalEvent)],
    ) -> Result<(), StorageError> {
        if published.is_empty() {
            return Ok(());
        }
        self.ready().await?;
        let mut bits: BTreeMap<&str, i16> = BTreeMap::new();
        for (id, event) in published {
            *bits.entry(id.as_str()).or_default() |= i16::from(Owed::bit(*event));
        }
        let (ids, bits): (Vec<&str>, Vec<i16>) = bits.into_iter().unzip();
        statement!(
            self,
            sqlx::query(sql(&self.sql.approvals.published))
                .bind(&ids)
                .bind(&bits),
            execute
        )
        .map_err(db_error)?;
        Ok(())
    }

    /// The approval `id`.
    pub(super) async fn read_approval(
        &self,
        id: &ApprovalId,
    ) -> Result<Option<Approval>, StorageError> {
        self.ready().await?;
        let row: Option<ApprovalRow> = statement!(
            self,
            sqlx::query_as(sql(&self.sql.approvals.load)).bind(id.as_str()),
            fetch_optional
        )
        .map_err(db_error)?;
        Ok(row.map(approval_of))
    }

    /// One page of approvals as `query` asks for it.
    pub(super) async fn page_approvals(
        &self,
        query: &ApprovalQuery,
    ) -> Result<ApprovalPage, StorageError> {
        self.ready().await?;
        let limit = query.effective_limit();
        let statement = if query.status.is_some() {
            &self.sql.approvals.page_by_status
        } else {
            &self.sql.approvals.page_any
        };
        let from = query
            .requested_from
            .map(|at| bigint("requested_from", at))
            .transpose()?;
        let before = query
            .requested_before
            .map(|at| bigint("requested_before", at))
            .transpose()?;
        let after_at = query
            .after
            .as_ref()
            .map(|cursor| bigint("cursor", cursor.requested_at))
            .transpose()?;
        let rows: Vec<ApprovalRow> = statement!(
            self,
            sqlx::query_as(sql(statement))
                .persistent(false)
                .bind(count(limit + 1))
                .bind(query.status.map(|status| status.as_str()))
                .bind(query.tenant.as_deref())
                .bind(query.agent_id.as_ref().map(|id| id.as_str()))
                .bind(query.tool_name.as_deref())
                .bind(query.thread_id.as_ref().map(|id| id.as_str()))
                .bind(from)
                .bind(before)
                .bind(after_at)
                .bind(
                    query
                        .after
                        .as_ref()
                        .map(|cursor| cursor.approval_id.as_str())
                ),
            fetch_all
        )
        .map_err(db_error)?;
        let mut items: Vec<Approval> = rows.into_iter().map(approval_of).collect();
        let next_cursor = if items.len() > limit {
            items.truncate(limit);
            items.last().map(ApprovalCursor::after)
        } else {
            None
        };
        Ok(ApprovalPage { items, next_cursor })
    }
}
