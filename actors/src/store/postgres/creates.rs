//! Thread creation in batches: threads created at the same moment (every new
//! conversation creates one) are inserted by one statement and one commit.
//!
//! The same shape as the checkpoints' group commit (module `group`, decision 0052):
//! a caller queues its thread and waits for its own answer; up to `writers`
//! statements are in flight; a free writer takes everything queued as its next
//! batch, and a lone thread on an idle store goes out at once. A thread
//! whose id is already in the batch waits for the next one, where it finds the
//! id taken. Writers are spawned tasks, so a caller that stops waiting abandons
//! nobody else's thread.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use sqlx::types::Json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::{PostgresStore, db_error, sql};
use crate::contract::Thread;
use crate::error::StorageError;
use crate::store::{now_millis, stamped_new_thread};

/// Threads in one statement at most.
const MAX_BATCH: usize = 256;

/// The statement for tables `{p}_…`: `$1` ids, `$2` threads; returns the ids it
/// inserted (an id already stored is left as it is).
pub(super) fn create_threads_statement(p: &str) -> String {
    format!(
        "INSERT INTO {p}_threads (id, data)
         SELECT * FROM UNNEST($1::text[], $2::jsonb[])
         ON CONFLICT (id) DO NOTHING
         RETURNING id"
    )
}

/// Threads waiting to be created, and the writers' slots.
#[derive(Debug)]
pub(super) struct ThreadCreates {
    waiting: Mutex<Vec<Pending>>,
    writers: Arc<Semaphore>,
}

/// A queued thread and where its answer goes.
#[derive(Debug)]
struct Pending {
    thread: Thread,
    answer: oneshot::Sender<Result<(), StorageError>>,
}

impl ThreadCreates {
    /// A queue written by at most `writers` statements at once.
    pub(super) fn new(writers: usize) -> Self {
        Self {
            waiting: Mutex::new(Vec::new()),
            writers: Arc::new(Semaphore::new(writers.max(1))),
        }
    }

    /// Creates `thread` through `store`, batched with whatever else waits;
    /// `AlreadyExists` when its id is taken.
    pub(super) async fn submit(
        self: &Arc<Self>,
        store: &PostgresStore,
        thread: Thread,
    ) -> Result<(), StorageError> {
        let (answer, answered) = oneshot::channel();
        self.lock().push(Pending { thread, answer });
        if let Ok(slot) = Arc::clone(&self.writers).try_acquire_owned() {
            tokio::spawn(Arc::clone(self).drain(store.clone(), slot));
        }
        answered.await.unwrap_or_else(|_| {
            Err(StorageError::Io(
                "postgres: the thread writer stopped before answering".to_owned(),
            ))
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        // Only pushed to and drained: a panic elsewhere leaves it whole.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes batches until nothing waits, then gives its slot back.
    async fn drain(self: Arc<Self>, store: PostgresStore, slot: OwnedSemaphorePermit) {
        let mut slot = Some(slot);
        loop {
            let batch = self.take();
            if batch.is_empty() {
                drop(slot.take());
                // A thread queued while this writer held the last slot found none
                // free: look again now that this one is.
                if self.lock().is_empty() {
                    return;
                }
                match Arc::clone(&self.writers).try_acquire_owned() {
                    Ok(again) => slot = Some(again),
                    Err(_) => return,
                }
                continue;
            }
            write(&store, batch).await;
        }
    }

    /// The next batch: queued threads in order, each id once (a repeated id waits
    /// for the next batch).
    fn take(&self) -> Vec<Pending> {
        let mut waiting = self.lock();
        let mut ids = HashSet::new();
        let mut batch = Vec::new();
        let mut later = Vec::new();
        for pending in waiting.drain(..) {
            if batch.len() < MAX_BATCH && ids.insert(pending.thread.id.clone()) {
                batch.push(pending);
            } else {
                later.push(pending);
            }
        }
        *waiting = later;
        batch
    }
}

/// Inserts `batch` in one statement and answers each caller.
async fn write(store: &PostgresStore, batch: Vec<Pending>) {
    let now = now_millis();
    let ids: Vec<&str> = batch.iter().map(|p| p.thread.id.as_str()).collect();
    let threads: Vec<Json<Thread>> = batch
        .iter()
        .map(|p| Json(stamped_new_thread(&p.thread, now)))
        .collect();
    let inserted: Result<HashSet<String>, StorageError> = async {
        store.ready().await?;
        let rows: Vec<String> = sqlx::query_scalar(sql(&store.sql.create_threads))
            .bind(&ids)
            .bind(&threads)
            .fetch_all(store.send())
            .await
            .map_err(db_error)?;
        Ok(rows.into_iter().collect())
    }
    .await;
    for pending in batch {
        let answer = match &inserted {
            Ok(inserted) if inserted.contains(pending.thread.id.as_str()) => Ok(()),
            Ok(_) => Err(StorageError::AlreadyExists(format!(
                "thread `{}`",
                pending.thread.id
            ))),
            Err(error) => Err(error.clone()),
        };
        // The caller may have stopped waiting; its thread is created anyway.
        let _ = pending.answer.send(answer);
    }
}

#[cfg(test)]
mod tests {
    use futures::future::join_all;

    use crate::contract::Thread;
    use crate::error::StorageError;
    use crate::store::ThreadRunStore;
    use crate::store::conformance::tid;
    use crate::store::postgres::PostgresStore;

    #[tokio::test]
    async fn threads_created_together_are_each_created_once_in_order() {
        let (store, _schema) = PostgresStore::for_tests().await;
        store
            .create_thread(&Thread::with_id(tid("t-old")))
            .await
            .unwrap();
        let before = store.stats.counts().statements;
        let mut names: Vec<String> = (0..40).map(|i| format!("t-{i:02}")).collect();
        names.push("t-old".to_owned());
        names.push("t-07".to_owned());
        let threads: Vec<Thread> = names
            .iter()
            .map(|name| Thread::with_id(tid(name)))
            .collect();
        let results = join_all(threads.iter().map(|thread| store.create_thread(thread))).await;

        for (name, result) in names.iter().zip(&results).take(40) {
            assert!(result.is_ok(), "{name}: {result:?}");
        }
        for result in &results[40..] {
            assert!(
                matches!(result, Err(StorageError::AlreadyExists(_))),
                "a taken id is refused: {result:?}"
            );
        }
        let listed = store.list_threads(0, 100).await.unwrap();
        let expected: Vec<String> = std::iter::once("t-old".to_owned())
            .chain(names.iter().take(40).cloned())
            .collect();
        let listed: Vec<String> = listed.iter().map(ToString::to_string).collect();
        assert_eq!(listed, expected, "each created once, in the order asked");
        let statements = store.stats.counts().statements - before;
        assert!(
            statements < 40,
            "created together, in fewer statements than threads: {statements}"
        );
    }
}
