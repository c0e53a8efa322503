//! `awaken bench http --store postgres`: a schema of the benchmark's own, the
//! store's traffic read from the server's `/metrics`, and the database's physical
//! reference measured in the same process run.
//!
//! The reference is what the database does on this machine without the runtime:
//! single-row upserts of a 1.5 KB row, each its own transaction, through a pool set
//! up as the server's store sets up its own ([`PostgresStore::connect`] with the
//! default [`PoolSettings`]), at the benchmark's concurrency. The ratio the report
//! gives (`ratio_to_reference`) is the runs' checkpoints per second over the
//! reference's transactions per second.

use awaken_actors::store::{PoolSettings, PostgresStore, StoreIoCounts};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use super::BenchOptions;
use super::driver::{Driven, RunSample, drive};
use super::report::BenchReport;
use crate::error::{GatewayError, Result};

/// The reference's name in progress lines.
const REFERENCE: &str = "postgres-reference";
/// Rows the reference spreads its upserts over.
const REFERENCE_ROWS: usize = 100_000;
/// The reference row's size: about a checkpoint's run record, state and messages.
const REFERENCE_ROW_BYTES: usize = 1_536;
/// Upserts before the measured ones, so connections and caches are warm.
const REFERENCE_WARM_UP: usize = 200;

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

/// A fresh schema in the user's database, dropped by [`Self::drop_now`].
pub(crate) struct BenchSchema {
    url: String,
    name: String,
}

impl BenchSchema {
    /// Creates `awaken_bench_<uuid>` in the database `url` names.
    pub(crate) async fn create(url: &str) -> Result<Self> {
        if url.contains("options=") {
            return Err(bench_error(
                "--postgres-url: leave `options` out: the benchmark sets the search_path \
                 to a schema of its own",
            ));
        }
        let name = format!("awaken_bench_{}", uuid::Uuid::now_v7().simple());
        let schema = Self {
            url: url.to_owned(),
            name,
        };
        schema
            .administer(format!("CREATE SCHEMA {}", schema.name))
            .await
            .map_err(|e| bench_error(format!("cannot create the benchmark's schema: {e}")))?;
        Ok(schema)
    }

    /// The user's URL with the search path set to this schema.
    pub(crate) fn url(&self) -> String {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        format!(
            "{}{separator}options=-c%20search_path%3D{}",
            self.url, self.name
        )
    }

    /// Drops the schema with everything in it.
    pub(crate) async fn drop_now(self) -> Result<()> {
        self.administer(format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
            .await
    }

    /// Runs `statement` (built from the schema's generated name) on a connection
    /// of its own to the user's database.
    async fn administer(&self, statement: String) -> Result<()> {
        let options: PgConnectOptions = self
            .url
            .parse()
            .map_err(|e| bench_error(format!("--postgres-url: {e}")))?;
        let mut admin = PgConnection::connect_with(&options)
            .await
            .map_err(|e| bench_error(format!("--postgres-url: cannot connect: {e}")))?;
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .map_err(bench_error)?;
        let _ = admin.close().await;
        Ok(())
    }
}

/// Upserts as [`REFERENCE`] describes, `transactions` of them at `concurrency`,
/// in `url`'s schema.
async fn reference(
    url: &str,
    transactions: usize,
    concurrency: usize,
    options: &BenchOptions,
) -> Result<Driven> {
    let store = PostgresStore::connect(url, PoolSettings::default())
        .await
        .map_err(bench_error)?;
    let pool = store.pool().clone();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS bench_reference (id INT PRIMARY KEY, data TEXT NOT NULL)",
    )
    .execute(&pool)
    .await
    .map_err(bench_error)?;
    let row: std::sync::Arc<str> = "x".repeat(REFERENCE_ROW_BYTES).into();
    let job = move |i: usize| {
        let pool = pool.clone();
        let row = std::sync::Arc::clone(&row);
        async move {
            let id = i32::try_from(i % REFERENCE_ROWS).unwrap_or_default();
            sqlx::query(
                "INSERT INTO bench_reference (id, data) VALUES ($1, $2)
                 ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data",
            )
            .bind(id)
            .bind(&*row)
            .execute(&pool)
            .await
            .map(|_| RunSample::default())
            .map_err(|e| e.to_string())
        }
    };
    let quiet = BenchOptions {
        progress: false,
        ..options.clone()
    };
    drive(
        REFERENCE,
        REFERENCE_WARM_UP,
        concurrency,
        &quiet,
        job.clone(),
    )
    .await?;
    let driven = drive(REFERENCE, transactions, concurrency, options, job).await?;
    store.pool().close().await;
    match &driven.first_error {
        Some(error) => Err(bench_error(format!("the reference failed: {error}"))),
        None => Ok(driven),
    }
}

/// Adds to `report` (of runs that sent `sent`) the store's traffic per run and
/// the database's reference in `url`'s schema: as many single-row transactions as
/// the runs wrote checkpoints, at the same concurrency, and the ratio of the
/// runs' checkpoints per second to the reference's transactions per second.
pub(crate) async fn with_reference(
    report: BenchReport,
    url: &str,
    sent: StoreIoCounts,
    options: &BenchOptions,
) -> Result<BenchReport> {
    let runs = report.runs.max(1);
    let checkpoints_per_run = per_run(sent.checkpoints, runs);
    let transactions = (options.runs as f64 * checkpoints_per_run.max(1.0)).ceil() as usize;
    let reference = reference(url, transactions, report.concurrency, options).await?;
    let reference_tx_per_s = reference.report(REFERENCE, report.concurrency).runs_per_s;
    let ratio = if reference_tx_per_s > 0.0 {
        report.runs_per_s * checkpoints_per_run / reference_tx_per_s
    } else {
        0.0
    };
    Ok(report
        .with("store", "postgres")
        .with("checkpoints_per_run", checkpoints_per_run)
        .with("statements_per_run", per_run(sent.statements, runs))
        .with("round_trips_per_run", per_run(sent.round_trips, runs))
        .with("reference_tx_per_s", reference_tx_per_s)
        .with("ratio_to_reference", (ratio * 1000.0).round() / 1000.0))
}

/// `count` per run, to two decimals.
fn per_run(count: u64, runs: u64) -> f64 {
    (count as f64 / runs.max(1) as f64 * 100.0).round() / 100.0
}

/// The counts sent after `before`.
pub(crate) fn since(now: StoreIoCounts, before: StoreIoCounts) -> StoreIoCounts {
    StoreIoCounts {
        checkpoints: now.checkpoints.saturating_sub(before.checkpoints),
        statements: now.statements.saturating_sub(before.statements),
        round_trips: now.round_trips.saturating_sub(before.round_trips),
    }
}

/// The store counters of a `/metrics` text.
pub(crate) fn store_counts(metrics: &str) -> Option<StoreIoCounts> {
    let value = |name: &str| -> Option<u64> {
        let series = format!("awaken_store_{name}_total ");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&series)?.trim().parse().ok())
    };
    Some(StoreIoCounts {
        checkpoints: value("checkpoints")?,
        statements: value("statements")?,
        round_trips: value("round_trips")?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn store_counts_are_read_from_the_metrics_text() {
        let text = "# HELP awaken_store_checkpoints Checkpoints\n\
                    # TYPE awaken_store_checkpoints counter\n\
                    awaken_store_checkpoints_total 30\n\
                    awaken_store_statements_total 50\n\
                    awaken_store_round_trips_total 52\n# EOF\n";
        assert_eq!(
            store_counts(text),
            Some(StoreIoCounts {
                checkpoints: 30,
                statements: 50,
                round_trips: 52
            })
        );
        assert_eq!(store_counts("awaken_store_checkpoints_total 3\n"), None);
    }

    #[tokio::test]
    async fn a_url_with_its_own_options_is_refused() {
        let refused = BenchSchema::create("postgres://h/db?options=-c%20x%3Dy").await;
        let Err(error) = refused else {
            panic!("a URL with options must be refused")
        };
        assert!(error.to_string().contains("leave `options` out"), "{error}");
    }
}
