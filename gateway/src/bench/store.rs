//! The thread store `awaken bench local` runs the engine on: in memory (the
//! default), files in a temporary directory, or PostgreSQL in a schema of the
//! benchmark's own. On PostgreSQL the report adds what the store sent per run and
//! the database's reference measured in the same process run, as `bench http
//! --store postgres` does.

use std::sync::Arc;

use awaken_actors::runtime::AgentRuntime;
use awaken_actors::store::{FileStore, PoolSettings, PostgresStore, StoreIoCounts, ThreadRunStore};
use awaken_actors::thread::ThreadConfig;

use super::postgres::{BenchSchema, since, with_reference};
use super::report::BenchReport;
use super::{BenchOptions, BenchStore};
use crate::demo::{self, FakeFiles, Journal};
use crate::error::{GatewayError, Result};

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

/// A store opened for one scenario, and what removes it afterwards.
pub(crate) enum OpenStore {
    /// The embedded runtime's own in-memory store.
    Memory,
    /// A file store in a directory removed with this value.
    File(Arc<FileStore>, tempfile::TempDir),
    /// PostgreSQL in a schema dropped by [`Self::close`].
    Postgres(Arc<PostgresStore>, BenchSchema),
}

impl OpenStore {
    /// Opens the store `options` name.
    pub(crate) async fn open(options: &BenchOptions) -> Result<Self> {
        Ok(match &options.store {
            BenchStore::Memory => Self::Memory,
            BenchStore::File => {
                let dir = tempfile::tempdir().map_err(bench_error)?;
                let store = FileStore::open(dir.path().to_owned())
                    .await
                    .map_err(bench_error)?;
                Self::File(Arc::new(store), dir)
            }
            BenchStore::Postgres(url) => {
                let schema = BenchSchema::create(url).await?;
                let store = PostgresStore::connect(&schema.url(), PoolSettings::default())
                    .await
                    .map_err(bench_error)?;
                store.ensure_schema().await.map_err(bench_error)?;
                Self::Postgres(Arc::new(store), schema)
            }
        })
    }

    /// The embedded runtime (demo agents, scripted models) on this store.
    pub(crate) fn runtime(&self, config: ThreadConfig) -> Result<AgentRuntime> {
        let builder = demo::builder(
            config,
            Arc::new(FakeFiles::with_demo_files()),
            Journal::default(),
        )?;
        let store: Option<Arc<dyn ThreadRunStore>> = match self {
            Self::Memory => None,
            Self::File(store, _) => Some(Arc::clone(store) as _),
            Self::Postgres(store, _) => Some(Arc::clone(store) as _),
        };
        let builder = match store {
            Some(store) => builder.with_thread_run_store(store),
            None => builder,
        };
        Ok(builder.build()?)
    }

    /// What the store has sent so far (PostgreSQL only).
    pub(crate) fn sent(&self) -> Option<StoreIoCounts> {
        match self {
            Self::Postgres(store, _) => store.io_counts(),
            Self::Memory | Self::File(..) => None,
        }
    }

    /// Adds the store's name to `report` and, on PostgreSQL, its traffic per run
    /// since `before` and the database's reference; then removes the store.
    pub(crate) async fn close(
        self,
        report: BenchReport,
        before: Option<StoreIoCounts>,
        options: &BenchOptions,
    ) -> Result<BenchReport> {
        match self {
            Self::Memory => Ok(report.with("store", "memory")),
            Self::File(store, dir) => {
                drop(store);
                dir.close().map_err(bench_error)?;
                Ok(report.with("store", "file"))
            }
            Self::Postgres(store, schema) => {
                let sent = store
                    .io_counts()
                    .zip(before)
                    .map(|(now, before)| since(now, before));
                store.pool().close().await;
                let report = match sent {
                    Some(sent) => with_reference(report, &schema.url(), sent, options).await,
                    None => Ok(report),
                };
                let dropped = schema.drop_now().await;
                let report = report?;
                dropped?;
                Ok(report)
            }
        }
    }
}
