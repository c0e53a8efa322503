//! What a checkpoint's acknowledgement promises: once the PostgreSQL store has
//! answered `Ok`, the checkpoint survives a crash of the database
//! (`pg_ctl stop -m immediate`: no shutdown checkpoint, the restart replays the
//! WAL). Checkpoints arrive together from many threads, so they are written in
//! batches (decision 0052): a batch answered before its commit, or a batch
//! partly written, shows here as an acknowledged message missing, or a thread's
//! log with a gap, after the restart.
//!
//! Runs its own PostgreSQL server (`initdb` and `pg_ctl` on the PATH; under root
//! as the `postgres` user).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

#[allow(dead_code)] // the TLS server is for the secured suite
#[path = "support/postgres_server.rs"]
mod postgres_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use awaken_actors::contract::Message;
use awaken_actors::store::conformance::{checkpoint, run, tid};
use awaken_actors::store::{PoolSettings, PostgresStore, ThreadRunStore};
use postgres_server::PostgresServer;
use tokio::sync::Semaphore;

/// Threads writing at once, and acknowledged checkpoints to wait for before the crash.
const THREADS: usize = 32;
const ACKNOWLEDGED_BEFORE_THE_CRASH: u32 = 600;

/// Writes checkpoints of one message each to `thread` until one fails, counting
/// the acknowledged ones in `acked`; each acknowledgement adds a permit to `progress`.
async fn write_until_refused(
    store: PostgresStore,
    thread: usize,
    acked: Arc<AtomicU64>,
    progress: Arc<Semaphore>,
) {
    let id = tid(&format!("t-{thread}"));
    for n in 0u64.. {
        let message = Message::user(format!("{thread}:{}", n + 1));
        let written = store
            .checkpoint(checkpoint(
                &id,
                1,
                n,
                vec![message],
                run(&id, &format!("r-{thread}"), 1),
            ))
            .await;
        if written.is_err() {
            return;
        }
        acked.store(n + 1, Ordering::SeqCst);
        progress.add_permits(1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_checkpoints_survive_an_immediate_stop_of_the_database() {
    let server = PostgresServer::start().await;
    let store = PostgresStore::connect(&server.url(), PoolSettings::default())
        .await
        .unwrap();
    store.ensure_schema().await.unwrap();
    let acked: Vec<Arc<AtomicU64>> = (0..THREADS).map(|_| Arc::default()).collect();
    let progress = Arc::new(Semaphore::new(0));
    let writers: Vec<_> = acked
        .iter()
        .enumerate()
        .map(|(thread, acked)| {
            tokio::spawn(write_until_refused(
                store.clone(),
                thread,
                Arc::clone(acked),
                Arc::clone(&progress),
            ))
        })
        .collect();

    // Crash while every thread is still writing.
    let _ = progress
        .acquire_many(ACKNOWLEDGED_BEFORE_THE_CRASH)
        .await
        .unwrap();
    server.crash().await;
    for writer in writers {
        writer.await.unwrap();
    }
    let counts = store.io_counts().unwrap();
    assert!(
        counts.statements < counts.checkpoints,
        "the checkpoints were not batched: {counts:?}"
    );
    store.pool().close().await;

    server.start_again().await;
    let store = PostgresStore::connect(&server.url(), PoolSettings::default())
        .await
        .unwrap();
    for (thread, acked) in acked.iter().enumerate() {
        let acked = acked.load(Ordering::SeqCst);
        let snapshot = store
            .load_thread_snapshot(&tid(&format!("t-{thread}")))
            .await
            .unwrap();
        let texts: Vec<String> = snapshot
            .map(|s| s.messages.iter().map(Message::text).collect())
            .unwrap_or_default();
        let expected: Vec<String> = (1..=texts.len()).map(|n| format!("{thread}:{n}")).collect();
        assert_eq!(
            texts, expected,
            "thread {thread}: a gap or a stranger in its log"
        );
        // One more than acknowledged is allowed: committed, its answer lost in the crash.
        let kept = texts.len() as u64;
        assert!(
            kept == acked || kept == acked + 1,
            "thread {thread}: {acked} acknowledged, {kept} kept"
        );
    }
}
