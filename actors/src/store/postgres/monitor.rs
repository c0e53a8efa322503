//! Reads for the node's metrics, over a connection of their own: a scrape never
//! waits for a pool busy with checkpoints, and never shows in the store's counted
//! traffic (what `/metrics` and the benchmarks report per run).

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::Mutex;

use super::{db_error, sql};
use crate::store::{StorageError, WaitingRuns};

/// What the metrics' connection sets for its session: its only statement counts
/// the waiting runs, which the partial index of unfinished runs holds; without
/// statistics (a new database, autovacuum off) the planner takes that index for
/// as large as the table and would scan every run ever kept on each scrape
/// (decision 0090).
pub(super) const MONITOR_SESSION: &str = "SET enable_seqscan = off";

/// The metrics' connection, opened on first use and again after a failure.
#[derive(Debug, Default)]
pub(super) struct Monitor {
    connection: Mutex<Option<PgConnection>>,
}

impl Monitor {
    /// Runs `statement` (count and oldest `updated_at` of the waiting runs).
    pub(super) async fn waiting_runs(
        &self,
        options: &PgConnectOptions,
        statement: &str,
    ) -> Result<WaitingRuns, StorageError> {
        let mut slot = self.connection.lock().await;
        let connection = match slot.as_mut() {
            Some(connection) => connection,
            None => {
                let mut connection = PgConnection::connect_with(options)
                    .await
                    .map_err(db_error)?;
                sqlx::query(MONITOR_SESSION)
                    .execute(&mut connection)
                    .await
                    .map_err(db_error)?;
                slot.insert(connection)
            }
        };
        let row: Result<(i64, Option<i64>), _> = sqlx::query_as(sql(statement))
            .fetch_one(&mut *connection)
            .await;
        match row {
            Ok((count, since)) => Ok(WaitingRuns {
                count: u64::try_from(count).unwrap_or(0),
                since_secs: since.and_then(|secs| u64::try_from(secs).ok()),
            }),
            Err(error) => {
                // The connection may be gone (a server restart): a new one next time.
                *slot = None;
                Err(db_error(error))
            }
        }
    }
}
