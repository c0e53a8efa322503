//! Webhooks in `{prefix}_webhooks`: one row per webhook, keyed by `(run_id, id)`,
//! with the delivery lease in `lease_holder` and `lease_until` (milliseconds; `0`
//! before the first claim). The table references neither runs nor threads: a
//! webhook may be stored before its run is.
//!
//! * **Put**: a transaction that takes a transaction-scoped advisory lock on the
//!   run, then inserts the webhook if the run has fewer than `max_per_run` or
//!   replaces the config of the one with its id (one statement). The lock makes
//!   concurrent puts on one run take turns, so they cannot together exceed the
//!   most; each sees what the one before committed, as every statement of a READ
//!   COMMITTED transaction reads what was committed when it began.
//! * **Claim**: one `UPDATE` over the oldest claimable rows, picked by a
//!   sub-select `FOR UPDATE SKIP LOCKED`: nodes claiming at the same moment skip
//!   each other's rows instead of waiting, and a row leased by a claim that
//!   committed meanwhile is checked again against its new lease and left out.
//! * **Advance**: one `UPDATE` conditional on the lease holder.
//! * Deleting a thread deletes its webhooks in the same statement
//!   ([`delete_thread_statement`]).

use async_trait::async_trait;
use sqlx::types::Json;

use super::{PostgresStore, bigint, count, db_error, in_transaction, sql, unsigned};
use crate::JsonValue;
use crate::error::StorageError;
use crate::ids::{RunId, ThreadId, WebhookId};
use crate::store::{
    Webhook, WebhookAdvance, WebhookClaim, WebhookStore, too_many_webhooks, webhook_order_key,
};

/// The columns a webhook is read back from, in [`WebhookRow`] order.
const COLUMNS: &str = "run_id, thread_id, id, config, progress, done, dead_letters, created_at";

/// A webhook as the columns of [`COLUMNS`].
type WebhookRow = (
    String,
    String,
    String,
    Json<JsonValue>,
    Json<JsonValue>,
    bool,
    Json<Vec<JsonValue>>,
    i64,
);

/// The webhook statements for tables `{p}_…`.
#[derive(Debug)]
pub(super) struct WebhookStatements {
    /// The table and its indexes, for `ensure_schema`.
    pub(super) schema: Vec<String>,
    lock_run: String,
    put: String,
    load: String,
    delete: String,
    claim: String,
    advance: String,
}

impl WebhookStatements {
    /// The statements that find their rows by key, for the plan check (the
    /// claim is sent unprepared and checked on its own).
    #[cfg(test)]
    pub(super) fn keyed(&self) -> [(&'static str, &String); 4] {
        [
            ("webhooks.put", &self.put),
            ("webhooks.load", &self.load),
            ("webhooks.delete", &self.delete),
            ("webhooks.advance", &self.advance),
        ]
    }

    /// The claim, for the plan check.
    #[cfg(test)]
    pub(super) fn claim(&self) -> &str {
        &self.claim
    }

    /// The statements with the table prefix `p` filled in.
    pub(super) fn new(p: &str) -> Self {
        Self {
            schema: schema(p),
            lock_run: "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))".to_owned(),
            // $1 run, $2 thread, $3 id, $4 config, $5 progress, $6 done,
            // $7 dead letters, $8 created_at, $9 the most webhooks a run may have.
            put: format!(
                "INSERT INTO {p}_webhooks
                     (run_id, thread_id, id, config, progress, done, dead_letters, created_at)
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8
                 WHERE EXISTS (SELECT 1 FROM {p}_webhooks WHERE run_id = $1 AND id = $3)
                    OR (SELECT count(*) FROM {p}_webhooks WHERE run_id = $1) < $9
                 ON CONFLICT (run_id, id) DO UPDATE
                 SET config = EXCLUDED.config, done = false, updated_at = now()
                 RETURNING {COLUMNS}"
            ),
            load: format!(
                "SELECT {COLUMNS} FROM {p}_webhooks WHERE run_id = $1 ORDER BY created_at, id"
            ),
            delete: format!("DELETE FROM {p}_webhooks WHERE run_id = $1 AND id = $2"),
            // $1 holder, $2 now, $3 until, $4 limit, $5 the run or null.
            claim: format!(
                "UPDATE {p}_webhooks w SET lease_holder = $1, lease_until = $3, updated_at = now()
                 FROM (SELECT run_id, id FROM {p}_webhooks
                       WHERE NOT done AND lease_until <= $2
                         AND ($5::text IS NULL OR run_id = $5)
                       ORDER BY created_at, id, run_id LIMIT $4
                       FOR UPDATE SKIP LOCKED) claimable
                 WHERE w.run_id = claimable.run_id AND w.id = claimable.id
                 RETURNING w.run_id, w.thread_id, w.id, w.config, w.progress, w.done,
                           w.dead_letters, w.created_at"
            ),
            // $1 run, $2 id, $3 holder, $4 progress, $5 done, $6 dead letter or
            // null, $7 the lease's new end.
            advance: format!(
                "UPDATE {p}_webhooks
                 SET progress = $4, done = $5,
                     dead_letters = CASE WHEN $6::jsonb IS NULL THEN dead_letters
                                         ELSE dead_letters || jsonb_build_array($6::jsonb) END,
                     lease_until = $7, updated_at = now()
                 WHERE run_id = $1 AND id = $2 AND lease_holder = $3"
            ),
        }
    }
}

/// The webhook table and its indexes.
fn schema(p: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {p}_webhooks (
                run_id TEXT COLLATE \"C\" NOT NULL,
                id TEXT COLLATE \"C\" NOT NULL,
                thread_id TEXT COLLATE \"C\" NOT NULL,
                config JSONB NOT NULL,
                progress JSONB NOT NULL,
                done BOOLEAN NOT NULL DEFAULT false,
                dead_letters JSONB NOT NULL DEFAULT '[]',
                lease_holder TEXT,
                lease_until BIGINT NOT NULL DEFAULT 0,
                created_at BIGINT NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                PRIMARY KEY (run_id, id))"
        ),
        format!("CREATE INDEX IF NOT EXISTS {p}_webhooks_by_thread ON {p}_webhooks (thread_id)"),
        // The claim's way in: webhooks not done whose lease ended.
        format!(
            "CREATE INDEX IF NOT EXISTS {p}_webhooks_claimable
             ON {p}_webhooks (lease_until) WHERE NOT done"
        ),
    ]
}

/// A row read back as a webhook.
fn webhook_of(
    (run_id, thread_id, id, Json(config), Json(progress), done, Json(dead_letters), created_at): WebhookRow,
) -> Result<Webhook, StorageError> {
    let invalid = |err: crate::ids::IdError| StorageError::Serialization(err.to_string());
    Ok(Webhook {
        run_id: RunId::new(run_id).map_err(invalid)?,
        thread_id: ThreadId::new(thread_id).map_err(invalid)?,
        id: WebhookId::new(id).map_err(invalid)?,
        config,
        progress,
        done,
        dead_letters,
        created_at: unsigned(created_at),
    })
}

impl PostgresStore {
    /// The advisory lock key of a run's webhooks (prefixes do not share locks).
    fn webhook_lock_key(&self, run_id: &RunId) -> String {
        format!("awaken-webhooks:{}:{run_id}", self.sql.prefix)
    }
}

#[async_trait]
impl WebhookStore for PostgresStore {
    async fn put_webhook(
        &self,
        webhook: Webhook,
        max_per_run: usize,
    ) -> Result<Webhook, StorageError> {
        let created_at = bigint("webhook created_at", webhook.created_at)?;
        let statements = &self.sql.webhooks;
        let mut tx = self.begin().await?;
        in_transaction!(self, tx, {
            async {
                sqlx::query(sql(&statements.lock_run))
                    .bind(self.webhook_lock_key(&webhook.run_id))
                    .execute(self.send_in(&mut tx))
                    .await
                    .map_err(db_error)?;
                let row: Option<WebhookRow> = sqlx::query_as(sql(&statements.put))
                    .bind(webhook.run_id.as_str())
                    .bind(webhook.thread_id.as_str())
                    .bind(webhook.id.as_str())
                    .bind(Json(&webhook.config))
                    .bind(Json(&webhook.progress))
                    .bind(webhook.done)
                    .bind(Json(&webhook.dead_letters))
                    .bind(created_at)
                    .bind(count(max_per_run))
                    .fetch_optional(self.send_in(&mut tx))
                    .await
                    .map_err(db_error)?;
                match row {
                    Some(row) => webhook_of(row),
                    None => Err(too_many_webhooks(&webhook.run_id, max_per_run)),
                }
            }
            .await
        })
    }

    async fn load_webhooks(&self, run_id: &RunId) -> Result<Vec<Webhook>, StorageError> {
        self.ready().await?;
        let rows: Vec<WebhookRow> = statement!(
            self,
            sqlx::query_as(sql(&self.sql.webhooks.load)).bind(run_id.as_str()),
            fetch_all
        )
        .map_err(db_error)?;
        rows.into_iter().map(webhook_of).collect()
    }

    async fn delete_webhook(&self, run_id: &RunId, id: &WebhookId) -> Result<bool, StorageError> {
        self.ready().await?;
        let deleted = statement!(
            self,
            sqlx::query(sql(&self.sql.webhooks.delete))
                .bind(run_id.as_str())
                .bind(id.as_str()),
            execute
        )
        .map_err(db_error)?;
        Ok(deleted.rows_affected() > 0)
    }

    async fn claim_webhooks(&self, claim: &WebhookClaim) -> Result<Vec<Webhook>, StorageError> {
        let now = bigint("claim now_ms", claim.now_ms)?;
        let until = bigint("claim until_ms", claim.until_ms)?;
        if claim.limit == 0 {
            return Ok(Vec::new());
        }
        self.ready().await?;
        let rows: Vec<WebhookRow> = statement!(
            self,
            // Unprepared, so it is planned on the table as it is: a sweep runs
            // it now and then, and a cached plan from when the table was small
            // would scan every webhook ever kept (decision 0090).
            sqlx::query_as(sql(&self.sql.webhooks.claim))
                .persistent(false)
                .bind(&claim.holder)
                .bind(now)
                .bind(until)
                .bind(count(claim.limit))
                .bind(claim.run_id.as_ref().map(RunId::as_str)),
            fetch_all
        )
        .map_err(db_error)?;
        let mut claimed = rows
            .into_iter()
            .map(webhook_of)
            .collect::<Result<Vec<_>, _>>()?;
        // `RETURNING` keeps no order.
        claimed.sort_by(|a, b| webhook_order_key(a).cmp(&webhook_order_key(b)));
        Ok(claimed)
    }

    async fn advance_webhook(
        &self,
        run_id: &RunId,
        id: &WebhookId,
        holder: &str,
        advance: &WebhookAdvance,
    ) -> Result<bool, StorageError> {
        let until = bigint("lease_until_ms", advance.lease_until_ms)?;
        self.ready().await?;
        let advanced = statement!(
            self,
            sqlx::query(sql(&self.sql.webhooks.advance))
                .bind(run_id.as_str())
                .bind(id.as_str())
                .bind(holder)
                .bind(Json(&advance.progress))
                .bind(advance.done)
                .bind(advance.dead_letter.as_ref().map(Json))
                .bind(until),
            execute
        )
        .map_err(db_error)?;
        Ok(advanced.rows_affected() > 0)
    }
}
