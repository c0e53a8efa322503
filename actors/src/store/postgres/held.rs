//! Connections kept between statements, so that each statement is one round trip.
//!
//! sqlx's pool tests every connection on its way back: dropping a
//! `PoolConnection` spawns a task that sends `Sync` and waits for the server's
//! `ReadyForQuery` before the connection is idle again. That is a second round
//! trip for every statement sent on the pool, and the CPU of a wake-up on both
//! sides. (sqlx 0.9.0 has no option to turn it off.) The store's statements
//! therefore borrow their connection from a short list of connections it keeps
//! checked out, and put it back there after a completed statement
//! (decision 0063).
//!
//! What the pool's test guarded against stays guarded:
//!
//! - a statement that did not complete (its future dropped mid-flight, or an
//!   error on the socket) leaves its connection in an unknown state: it goes back
//!   to the pool, which tests it as before;
//! - a connection not used for [`FRESH_FOR`] may have outlived a server restart:
//!   it goes back to the pool too, whose acquire test pings connections idle that
//!   long;
//! - a connection kept for [`HELD_AT_MOST`] goes back to the pool, so the pool's
//!   own lifetime and idle rules still apply to every connection now and then;
//! - all but two of the pool's connections at most are kept, so transactions,
//!   which take theirs from the pool, always find one;
//! - `PgPool::close` waits for every connection to come back: the kept ones go
//!   back as soon as it is called.

use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, Postgres};
use tokio::time::Instant;

use super::ends_the_session;
use super::stats::StoreStats;

/// How long an unused connection is trusted without a test: a kept one idle
/// longer goes back to the pool, a pooled one idle longer is pinged before use
/// (decision 0051).
pub(super) const FRESH_FOR: Duration = Duration::from_secs(1);

/// How long a connection is kept before it goes back through the pool.
const HELD_AT_MOST: Duration = Duration::from_secs(60);

/// Connections never kept, so the pool always has some for transactions.
const LEFT_TO_THE_POOL: usize = 2;

/// The store's kept connections.
#[derive(Debug)]
pub(super) struct HeldConnections {
    pool: PgPool,
    kept: Arc<Mutex<Vec<Held>>>,
    capacity: usize,
    watching_close: Once,
}

/// A connection out of the pool, and since when.
#[derive(Debug)]
struct Held {
    connection: PoolConnection<Postgres>,
    taken_at: Instant,
    used_at: Instant,
}

/// One connection lent for one statement: [`Lease::settle`] puts it back among
/// the kept ones; dropped unsettled, it goes back to the pool (and is tested).
#[derive(Debug)]
pub(super) struct Lease<'a> {
    home: &'a HeldConnections,
    held: Option<Held>,
    stats: &'a StoreStats,
}

impl HeldConnections {
    /// Keeps all but [`LEFT_TO_THE_POOL`] of `pool`'s connections, so that
    /// transactions always find one (none of a pool that small: its transactions
    /// would wait for a connection nobody gives back).
    pub(super) fn new(pool: PgPool) -> Self {
        let max = usize::try_from(pool.options().get_max_connections()).unwrap_or(usize::MAX);
        Self {
            pool,
            kept: Arc::default(),
            capacity: max.saturating_sub(LEFT_TO_THE_POOL),
            watching_close: Once::new(),
        }
    }

    /// A connection for one statement: the most recently used kept one that is
    /// still fresh, else one from the pool.
    pub(super) async fn lease<'a>(
        &'a self,
        stats: &'a StoreStats,
    ) -> Result<Lease<'a>, sqlx::Error> {
        self.watching_close.call_once(|| self.give_back_on_close());
        let now = Instant::now();
        let (fresh, stale) = self.take_fresh(now);
        // Dropped outside the lock: each goes back to the pool, which tests it.
        stats.released(stale.len());
        drop(stale);
        let held = match fresh {
            Some(held) => held,
            None => Held {
                connection: self.pool.acquire().await?,
                taken_at: now,
                used_at: now,
            },
        };
        Ok(Lease {
            home: self,
            held: Some(held),
            stats,
        })
    }

    /// The freshest kept connection if it is fresh enough, and every stale one.
    fn take_fresh(&self, now: Instant) -> (Option<Held>, Vec<Held>) {
        let is_stale = |held: &Held| now.duration_since(held.used_at) >= FRESH_FOR;
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        // Kept in the order they came back: the stale ones first, the freshest last.
        let stale_up_to = kept.partition_point(is_stale);
        let stale: Vec<Held> = kept.drain(..stale_up_to).collect();
        (kept.pop(), stale)
    }

    /// Keeps `held` for the next statement, unless it has been out long enough
    /// or enough are kept; then it goes back to the pool.
    fn put_back(&self, mut held: Held, stats: &StoreStats) {
        let now = Instant::now();
        if now.duration_since(held.taken_at) >= HELD_AT_MOST {
            stats.released(1);
            return;
        }
        held.used_at = now;
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        // Checked under the lock that `give_back_on_close` drains with: a
        // connection kept after the pool closed would never go back to it.
        if kept.len() < self.capacity && !self.pool.is_closed() {
            kept.push(held);
        } else {
            drop(kept);
            stats.released(1);
        }
    }

    /// Gives the kept connections back when the pool is closed, which waits for
    /// them (started with the first lease: a runtime is running then).
    fn give_back_on_close(&self) {
        let kept = Arc::downgrade(&self.kept);
        let closed = self.pool.close_event();
        tokio::spawn(async move {
            closed.await;
            if let Some(kept) = kept.upgrade() {
                let given_back: Vec<Held> = kept
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .drain(..)
                    .collect();
                drop(given_back);
            }
        });
    }

    /// How many connections are kept now.
    #[cfg(test)]
    pub(super) fn kept(&self) -> usize {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Lease<'_> {
    /// The connection to send the statement on.
    pub(super) fn connection(&mut self) -> &mut PgConnection {
        match &mut self.held {
            Some(held) => &mut held.connection,
            // `settle` consumes the lease, so it always holds its connection.
            None => unreachable!("a lease holds its connection until settled"),
        }
    }

    /// Puts the connection back among the kept ones if `result` shows the
    /// statement completed: answered, or refused by the server with the session
    /// still open. An error on the socket or in the protocol, or one that ended
    /// the session, sends it back to the pool instead.
    pub(super) fn settle<T>(mut self, result: &Result<T, sqlx::Error>) {
        let completed = match result {
            Ok(_) => true,
            Err(error) => {
                matches!(error, sqlx::Error::Database(_) | sqlx::Error::RowNotFound)
                    && !ends_the_session(error)
            }
        };
        if let Some(held) = self.held.take() {
            if completed {
                self.home.put_back(held, self.stats);
            } else {
                self.stats.released(1);
            }
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if self.held.is_some() {
            // Unsettled: the statement did not complete; the pool tests it.
            self.stats.released(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::PostgresStore;

    /// The backend process serving `lease`'s connection.
    async fn backend(lease: &mut Lease<'_>) -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(lease.connection())
            .await
            .unwrap()
    }

    /// Makes every kept connection look unused for `age`.
    fn age_kept(held: &HeldConnections, age: Duration) {
        let past = Instant::now().checked_sub(age).unwrap();
        for kept in held.kept.lock().unwrap().iter_mut() {
            kept.used_at = past;
        }
    }

    #[tokio::test]
    async fn a_settled_connection_serves_the_next_statement_without_the_pools_test() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let (held, stats) = (&store.held, &store.stats);
        let mut first = held.lease(stats).await.unwrap();
        let pid = backend(&mut first).await;
        first.settle(&Ok::<(), sqlx::Error>(()));
        assert_eq!(held.kept(), 1);
        let before = stats.counts().round_trips;

        let mut second = held.lease(stats).await.unwrap();
        assert_eq!(held.kept(), 0, "lent out");
        assert_eq!(backend(&mut second).await, pid, "the same connection");
        second.settle(&Ok::<(), sqlx::Error>(()));
        assert_eq!(held.kept(), 1);
        assert_eq!(
            stats.counts().round_trips,
            before,
            "nothing went back to the pool"
        );
    }

    #[tokio::test]
    async fn a_statement_the_server_refused_keeps_its_connection_usable() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let (held, stats) = (&store.held, &store.stats);
        let mut lease = held.lease(stats).await.unwrap();
        let refused = sqlx::query("SELECT 1 / 0")
            .execute(lease.connection())
            .await;
        assert!(matches!(refused, Err(sqlx::Error::Database(_))));
        lease.settle(&refused);
        assert_eq!(held.kept(), 1);

        let mut again = held.lease(stats).await.unwrap();
        let answered: i32 = sqlx::query_scalar("SELECT 41 + 1")
            .fetch_one(again.connection())
            .await
            .unwrap();
        assert_eq!(answered, 42);
    }

    #[tokio::test]
    async fn a_connection_whose_session_the_server_ended_is_not_kept() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let (held, stats) = (&store.held, &store.stats);
        let mut lease = held.lease(stats).await.unwrap();
        // The server ends the session while it runs the statement (a restart,
        // `pg_terminate_backend`): a `FATAL` answer, then the socket closes.
        let ended = sqlx::query("SELECT pg_terminate_backend(pg_backend_pid()), pg_sleep(1)")
            .execute(lease.connection())
            .await;
        assert!(matches!(ended, Err(sqlx::Error::Database(_))), "{ended:?}");
        assert!(super::ends_the_session(ended.as_ref().unwrap_err()));
        lease.settle(&ended);
        assert_eq!(held.kept(), 0, "the dead connection went back to the pool");

        let mut next = held.lease(stats).await.unwrap();
        let answered: i32 = sqlx::query_scalar("SELECT 41 + 1")
            .fetch_one(next.connection())
            .await
            .unwrap();
        assert_eq!(answered, 42);
    }

    #[tokio::test]
    async fn a_statement_that_did_not_complete_gives_its_connection_back_to_the_pool() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let (held, stats) = (&store.held, &store.stats);
        let before = stats.counts().round_trips;
        let mut lease = held.lease(stats).await.unwrap();
        backend(&mut lease).await;
        drop(lease);
        assert_eq!(held.kept(), 0);
        assert_eq!(stats.counts().round_trips, before + 1, "the pool's test");

        let lease = held.lease(stats).await.unwrap();
        let broken = Err::<(), _>(sqlx::Error::Io(std::io::ErrorKind::BrokenPipe.into()));
        lease.settle(&broken);
        assert_eq!(held.kept(), 0, "an error on the socket is not kept");
    }

    #[tokio::test]
    async fn a_connection_unused_for_a_while_goes_back_to_the_pool_to_be_tested() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let (held, stats) = (&store.held, &store.stats);
        let lease = held.lease(stats).await.unwrap();
        lease.settle(&Ok::<(), sqlx::Error>(()));
        age_kept(held, FRESH_FOR);
        let before = stats.counts().round_trips;

        let mut lease = held.lease(stats).await.unwrap();
        assert_eq!(held.kept(), 0);
        assert_eq!(stats.counts().round_trips, before + 1, "the stale one left");
        backend(&mut lease).await;
    }

    #[tokio::test]
    async fn two_connections_stay_with_the_pool_so_transactions_find_one() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let (held, stats) = (&store.held, &store.stats);
        // The test pool has four connections.
        let mut leases = Vec::new();
        for _ in 0..4 {
            leases.push(held.lease(stats).await.unwrap());
        }
        for lease in leases {
            lease.settle(&Ok::<(), sqlx::Error>(()));
        }
        assert_eq!(held.kept(), 2);
        let (mut one, mut other) = (
            store.pool.begin().await.unwrap(),
            store.pool.begin().await.unwrap(),
        );
        sqlx::query("SELECT 1").execute(&mut *one).await.unwrap();
        sqlx::query("SELECT 1").execute(&mut *other).await.unwrap();
        one.commit().await.unwrap();
        other.commit().await.unwrap();
    }

    #[tokio::test]
    async fn closing_the_pool_does_not_wait_for_the_kept_connections() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let (held, stats) = (&store.held, &store.stats);
        let lease = held.lease(stats).await.unwrap();
        lease.settle(&Ok::<(), sqlx::Error>(()));
        assert_eq!(held.kept(), 1);
        tokio::time::timeout(Duration::from_secs(10), store.pool.close())
            .await
            .expect("the pool closed");
        assert_eq!(held.kept(), 0);
    }

    #[tokio::test]
    async fn a_connection_held_for_long_goes_back_to_the_pool() {
        let (store, _schema) = PostgresStore::for_tests().await;
        let (held, stats) = (&store.held, &store.stats);
        let mut lease = held.lease(stats).await.unwrap();
        if let Some(taken) = lease.held.as_mut() {
            taken.taken_at = Instant::now().checked_sub(HELD_AT_MOST).unwrap();
        }
        let before = stats.counts().round_trips;
        lease.settle(&Ok::<(), sqlx::Error>(()));
        assert_eq!(held.kept(), 0);
        assert_eq!(stats.counts().round_trips, before + 1);
    }
}
