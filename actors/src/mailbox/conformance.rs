//! The rules every [`MailboxStore`] must follow (seed 000), as async test functions,
//! and a macro that turns them into `#[tokio::test]`s for one implementation.
//!
//! Each rule gets a fresh, empty mailbox made with [`rules_config`] (the defaults,
//! made small where a rule counts attempts). To run the suite against your own
//! store, write a fixture (an async expression giving the store and a guard that
//! cleans up when dropped) and invoke the macro in a test module:
//!
//! ```ignore
//! mod my_mailbox {
//!     awaken_actors::mailbox_store_conformance!(my_fixture());
//! }
//! ```

// Test code: a failed expectation is a panic with a message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use super::{
    DispatchQuery, HeldClaim, InMemoryMailboxStore, MailboxConfig, MailboxError, MailboxStore,
    QueueWatch, QueuedThread, SETTLED_KEPT,
};
use crate::contract::TerminationReason;
use crate::contract::{RunDispatch, RunDispatchResult, RunDispatchStatus, RunStatus};
use crate::ids::{DispatchId, RunId, ThreadId};

/// Generates one `#[tokio::test]` per [`MailboxStore`] rule, each on a mailbox made
/// by `$fixture` (an async expression giving `(store, guard)`).
#[macro_export]
macro_rules! mailbox_store_conformance {
    ($fixture:expr) => {
        $crate::mailbox_store_conformance!(@each $fixture;
            enqueue_assigns_the_epoch_and_defaults,
            duplicates_are_refused,
            claim_takes_priority_then_order,
            claim_skips_dispatches_not_yet_available,
            claim_dispatch_by_id,
            ack_needs_the_current_claim,
            complete_records_the_result_and_acks,
            nack_backs_off_then_dead_letters,
            dead_letters_are_kept_and_listable,
            cancel_only_queued,
            extend_lease_moves_the_deadline,
            interrupt_supersedes_queued_and_returns_the_active,
            supersede_claimed_only_claimed,
            projection_is_a_separate_track,
            list_filters_and_pages,
            expired_leases_are_reclaimed,
            gc_purges_old_terminal_dispatches,
            settled_dispatches_beyond_the_kept_leave_and_their_marks_expire,
            gc_keeps_what_a_thread_must_remember,
            unknown_ids_are_not_found,
            queued_threads_lists_waiting_work,
            claims_lists_claimed_work,
            watch_reports_new_and_returned_work
        );

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn concurrent_claims_have_one_winner() {
            let (store, _guard) = $fixture.await;
            $crate::mailbox::conformance::concurrent_claims_have_one_winner(
                ::std::sync::Arc::new(store),
            )
            .await;
        }
    };
    (@each $fixture:expr; $($rule:ident),* $(,)?) => {
        $(
            #[::tokio::test]
            async fn $rule() {
                let (store, _guard) = $fixture.await;
                $crate::mailbox::conformance::$rule(&store).await;
            }
        )*
    };
}

/// The configuration the rules assume: the defaults with three attempts, a
/// one-hour `gc_ttl` and a ten-minute dedupe window.
pub fn rules_config() -> MailboxConfig {
    MailboxConfig {
        default_max_attempts: 3,
        gc_ttl: Duration::from_secs(3600),
        dedupe_window: Duration::from_secs(600),
        ..MailboxConfig::default()
    }
}

/// A fresh [`InMemoryMailboxStore`]; it needs no cleanup.
pub async fn memory_fixture() -> (InMemoryMailboxStore, ()) {
    (InMemoryMailboxStore::new(rules_config()), ())
}

const T0: u64 = 1_000_000;
const LEASE: u64 = 30_000;

fn thread(id: &str) -> ThreadId {
    ThreadId::new(id).unwrap()
}

fn dispatch(thread_id: &str, run: &str) -> RunDispatch {
    RunDispatch::new(thread(thread_id), RunId::new(run).unwrap(), 0, T0)
}

async fn enqueued(store: &dyn MailboxStore, thread_id: &str, run: &str) -> RunDispatch {
    store.enqueue(dispatch(thread_id, run), T0).await.unwrap()
}

async fn claimed(store: &dyn MailboxStore, thread_id: &str, run: &str) -> RunDispatch {
    let queued = enqueued(store, thread_id, run).await;
    store
        .claim_dispatch(&queued.dispatch_id, "node-a", LEASE, T0)
        .await
        .unwrap()
}

fn token(dispatch: &RunDispatch) -> &str {
    dispatch.claim_token.as_deref().unwrap()
}

async fn status(store: &dyn MailboxStore, id: &DispatchId) -> RunDispatchStatus {
    store.load_dispatch(id).await.unwrap().unwrap().status
}

/// Enqueue stores a `Queued` dispatch under the current epoch with the default
/// attempt budget, ignoring lifecycle fields the caller set.
pub async fn enqueue_assigns_the_epoch_and_defaults(store: &dyn MailboxStore) {
    let mut input = dispatch("t1", "r1");
    input.status = RunDispatchStatus::Acked;
    input.attempt_count = 7;
    input.dispatch_epoch = 42;
    let stored = store.enqueue(input, T0 + 5).await.unwrap();
    assert_eq!(stored.status, RunDispatchStatus::Queued);
    assert_eq!(stored.attempt_count, 0);
    assert_eq!(stored.dispatch_epoch, 0);
    assert_eq!(stored.max_attempts, rules_config().default_max_attempts);
    assert_eq!((stored.created_at, stored.updated_at), (T0 + 5, T0 + 5));
    assert_eq!(
        store.load_dispatch(&stored.dispatch_id).await.unwrap(),
        Some(stored.clone())
    );

    store.interrupt(&thread("t1"), T0).await.unwrap();
    let later = enqueued(store, "t1", "r2").await;
    assert_eq!(later.dispatch_epoch, 1, "an interrupt bumps the epoch");
    let other = enqueued(store, "t2", "r3").await;
    assert_eq!(other.dispatch_epoch, 0, "epochs are per thread");
}

/// A second dispatch with a retained id or dedupe key is refused and changes nothing.
pub async fn duplicates_are_refused(store: &dyn MailboxStore) {
    let first = store
        .enqueue(dispatch("t1", "r1").with_dedupe_key("k1"), T0)
        .await
        .unwrap();
    let same_key = store
        .enqueue(dispatch("t1", "r2").with_dedupe_key("k1"), T0)
        .await;
    assert!(
        matches!(same_key, Err(MailboxError::Duplicate(_))),
        "{same_key:?}"
    );
    let mut same_id = dispatch("t1", "r3");
    same_id.dispatch_id = first.dispatch_id.clone();
    assert!(matches!(
        store.enqueue(same_id, T0).await,
        Err(MailboxError::Duplicate(_))
    ));
    let page = store
        .list_dispatches(&DispatchQuery::thread(thread("t1")))
        .await
        .unwrap();
    assert_eq!(page.total, 1);
    assert_eq!(page.dispatches[0], first);
}

/// A claim takes the highest priority (0) first, then enqueue order, and stamps
/// token, consumer, lease and attempt.
pub async fn claim_takes_priority_then_order(store: &dyn MailboxStore) {
    let low = store
        .enqueue(dispatch("t1", "r-low").with_priority(200), T0)
        .await
        .unwrap();
    let first = enqueued(store, "t1", "r-first").await;
    let second = enqueued(store, "t1", "r-second").await;
    let urgent = store
        .enqueue(dispatch("t1", "r-urgent").with_priority(0), T0)
        .await
        .unwrap();
    enqueued(store, "t2", "r-other").await;

    let got = store
        .claim(&thread("t1"), "node-a", 3, LEASE, T0 + 10)
        .await
        .unwrap();
    let ids: Vec<&DispatchId> = got.iter().map(|d| &d.dispatch_id).collect();
    assert_eq!(
        ids,
        [&urgent.dispatch_id, &first.dispatch_id, &second.dispatch_id]
    );
    for d in &got {
        assert_eq!(d.status, RunDispatchStatus::Claimed);
        assert_eq!(d.claimed_by.as_deref(), Some("node-a"));
        assert_eq!(d.lease_until, Some(T0 + 10 + LEASE));
        assert_eq!(d.attempt_count, 1);
        assert!(d.claim_token.as_deref().is_some_and(|t| !t.is_empty()));
    }
    assert_ne!(got[0].claim_token, got[1].claim_token);
    let rest = store
        .claim(&thread("t1"), "node-b", 10, LEASE, T0 + 10)
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].dispatch_id, low.dispatch_id);
    assert!(
        store
            .claim(&thread("t1"), "node-b", 10, LEASE, T0 + 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A dispatch whose `available_at` is later than now is not claimable yet.
pub async fn claim_skips_dispatches_not_yet_available(store: &dyn MailboxStore) {
    let mut later = dispatch("t1", "r1");
    later.available_at = T0 + 5_000;
    let later = store.enqueue(later, T0).await.unwrap();
    assert!(
        store
            .claim(&thread("t1"), "n", 1, LEASE, T0)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store
            .claim_dispatch(&later.dispatch_id, "n", LEASE, T0)
            .await,
        Err(MailboxError::WrongState { .. })
    ));
    let got = store
        .claim(&thread("t1"), "n", 1, LEASE, T0 + 5_000)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
}

/// `claim_dispatch` claims exactly that dispatch, once.
pub async fn claim_dispatch_by_id(store: &dyn MailboxStore) {
    let a = enqueued(store, "t1", "r1").await;
    let b = enqueued(store, "t1", "r2").await;
    let got = store
        .claim_dispatch(&b.dispatch_id, "node-a", LEASE, T0)
        .await
        .unwrap();
    assert_eq!(got.dispatch_id, b.dispatch_id);
    assert_eq!(got.status, RunDispatchStatus::Claimed);
    assert_eq!(
        status(store, &a.dispatch_id).await,
        RunDispatchStatus::Queued
    );
    let again = store
        .claim_dispatch(&b.dispatch_id, "node-b", LEASE, T0)
        .await;
    assert!(
        matches!(
            again,
            Err(MailboxError::WrongState {
                status: RunDispatchStatus::Claimed,
                ..
            })
        ),
        "{again:?}"
    );
}

/// Ack closes a claim only with its current token; a wrong token or state changes
/// nothing.
pub async fn ack_needs_the_current_claim(store: &dyn MailboxStore) {
    let d = claimed(store, "t1", "r1").await;
    assert_eq!(
        store.ack(&d.dispatch_id, "stale-token", T0 + 1).await,
        Err(MailboxError::ClaimMismatch(d.dispatch_id.clone()))
    );
    assert_eq!(
        status(store, &d.dispatch_id).await,
        RunDispatchStatus::Claimed
    );
    let acked = store.ack(&d.dispatch_id, token(&d), T0 + 2).await.unwrap();
    assert_eq!(acked.status, RunDispatchStatus::Acked);
    assert_eq!(acked.claim_token, None);
    assert_eq!(acked.updated_at, T0 + 2);
    assert!(matches!(
        store.ack(&d.dispatch_id, token(&d), T0 + 3).await,
        Err(MailboxError::WrongState {
            status: RunDispatchStatus::Acked,
            ..
        })
    ));
    let queued = enqueued(store, "t1", "r2").await;
    assert!(matches!(
        store.ack(&queued.dispatch_id, "x", T0).await,
        Err(MailboxError::WrongState {
            status: RunDispatchStatus::Queued,
            ..
        })
    ));
}

/// Complete records the run's result and acks; with a stale claim it is refused
/// and the dispatch stays claimed.
pub async fn complete_records_the_result_and_acks(store: &dyn MailboxStore) {
    let d = claimed(store, "t1", "r1").await;
    let result = RunDispatchResult {
        run_id: d.run_id.clone(),
        dispatch_instance_id: "node-1".into(),
        status: RunStatus::Done,
        termination: Some(TerminationReason::NaturalEnd),
        response: Some("done".into()),
        error: None,
    };
    assert_eq!(
        store
            .complete(&d.dispatch_id, "stale-token", result.clone(), T0 + 1)
            .await,
        Err(MailboxError::ClaimMismatch(d.dispatch_id.clone()))
    );
    assert_eq!(
        status(store, &d.dispatch_id).await,
        RunDispatchStatus::Claimed
    );
    let completed = store
        .complete(&d.dispatch_id, token(&d), result, T0 + 2)
        .await
        .unwrap();
    assert_eq!(completed.status, RunDispatchStatus::Acked);
    assert_eq!(completed.claim_token, None);
    assert_eq!(completed.run_status, Some(RunStatus::Done));
    assert_eq!(completed.termination, Some(TerminationReason::NaturalEnd));
    assert_eq!(completed.run_response.as_deref(), Some("done"));
    assert_eq!(completed.dispatch_instance_id.as_deref(), Some("node-1"));
    let loaded = store.load_dispatch(&d.dispatch_id).await.unwrap().unwrap();
    assert_eq!(loaded, completed);
}

/// Nack puts a claim back with exponential back-off; the last attempt dead-letters.
pub async fn nack_backs_off_then_dead_letters(store: &dyn MailboxStore) {
    let config = rules_config();
    let id = enqueued(store, "t1", "r1").await.dispatch_id;
    let mut now = T0;
    for attempt in 1..config.default_max_attempts {
        let d = store.claim_dispatch(&id, "n", LEASE, now).await.unwrap();
        assert_eq!(d.attempt_count, attempt);
        let back = store.nack(&id, token(&d), "boom", now).await.unwrap();
        assert_eq!(back.status, RunDispatchStatus::Queued);
        assert_eq!(back.last_error.as_deref(), Some("boom"));
        assert_eq!(back.available_at, now + config.retry_delay_ms(attempt));
        assert!(
            store
                .claim(&thread("t1"), "n", 1, LEASE, back.available_at - 1)
                .await
                .unwrap()
                .is_empty(),
            "not claimable during the back-off"
        );
        now = back.available_at;
    }
    let last = store.claim_dispatch(&id, "n", LEASE, now).await.unwrap();
    let dead = store
        .nack(&id, token(&last), "still boom", now)
        .await
        .unwrap();
    assert_eq!(dead.status, RunDispatchStatus::DeadLetter);
    assert_eq!(dead.attempt_count, config.default_max_attempts);
}

/// Dead-lettered dispatches stay retained and can be listed by status.
pub async fn dead_letters_are_kept_and_listable(store: &dyn MailboxStore) {
    let d = claimed(store, "t1", "r1").await;
    enqueued(store, "t1", "r2").await;
    let dead = store
        .dead_letter(&d.dispatch_id, token(&d), "poison", T0 + 1)
        .await
        .unwrap();
    assert_eq!(dead.status, RunDispatchStatus::DeadLetter);
    assert_eq!(dead.last_error.as_deref(), Some("poison"));
    let page = store
        .list_dispatches(&DispatchQuery::default().with_statuses([RunDispatchStatus::DeadLetter]))
        .await
        .unwrap();
    assert_eq!(page.total, 1);
    assert_eq!(page.dispatches[0].dispatch_id, d.dispatch_id);
    assert_eq!(
        store
            .dead_letter(&d.dispatch_id, "wrong", "x", T0)
            .await
            .unwrap_err(),
        MailboxError::WrongState {
            dispatch_id: d.dispatch_id.clone(),
            status: RunDispatchStatus::DeadLetter,
            operation: "dead-letter",
        }
    );
}

/// Only a queued dispatch can be cancelled.
pub async fn cancel_only_queued(store: &dyn MailboxStore) {
    let queued = enqueued(store, "t1", "r1").await;
    let cancelled = store.cancel(&queued.dispatch_id, T0 + 1).await.unwrap();
    assert_eq!(cancelled.status, RunDispatchStatus::Cancelled);
    let active = claimed(store, "t1", "r2").await;
    assert!(matches!(
        store.cancel(&active.dispatch_id, T0).await,
        Err(MailboxError::WrongState {
            status: RunDispatchStatus::Claimed,
            ..
        })
    ));
    assert_eq!(
        status(store, &active.dispatch_id).await,
        RunDispatchStatus::Claimed
    );
}

/// Extending a lease needs the claim token and moves `lease_until`.
pub async fn extend_lease_moves_the_deadline(store: &dyn MailboxStore) {
    let d = claimed(store, "t1", "r1").await;
    let extended = store
        .extend_lease(&d.dispatch_id, token(&d), 60_000, T0 + 20_000)
        .await
        .unwrap();
    assert_eq!(extended.lease_until, Some(T0 + 80_000));
    assert_eq!(
        store.extend_lease(&d.dispatch_id, "other", 1, T0).await,
        Err(MailboxError::ClaimMismatch(d.dispatch_id.clone()))
    );
    assert!(
        store
            .reclaim_expired_leases(T0 + LEASE + 1)
            .await
            .unwrap()
            .is_empty(),
        "the extended lease still holds"
    );
}

/// Interrupt bumps the epoch, supersedes the thread's queued dispatches and returns
/// its claimed one, leaving other threads alone.
pub async fn interrupt_supersedes_queued_and_returns_the_active(store: &dyn MailboxStore) {
    let active = claimed(store, "t1", "r1").await;
    let q1 = enqueued(store, "t1", "r2").await;
    let q2 = enqueued(store, "t1", "r3").await;
    let other = enqueued(store, "t2", "r4").await;
    let interrupt = store.interrupt(&thread("t1"), T0 + 1).await.unwrap();
    assert_eq!(interrupt.new_dispatch_epoch, 1);
    assert_eq!(interrupt.superseded_count, 2);
    assert_eq!(
        interrupt.active_dispatch.map(|d| d.dispatch_id),
        Some(active.dispatch_id.clone())
    );
    for id in [&q1.dispatch_id, &q2.dispatch_id] {
        assert_eq!(status(store, id).await, RunDispatchStatus::Superseded);
    }
    assert_eq!(
        status(store, &other.dispatch_id).await,
        RunDispatchStatus::Queued
    );
    assert_eq!(
        status(store, &active.dispatch_id).await,
        RunDispatchStatus::Claimed
    );

    let quiet = store.interrupt(&thread("t-empty"), T0).await.unwrap();
    assert_eq!(quiet.new_dispatch_epoch, 1);
    assert_eq!((quiet.superseded_count, quiet.active_dispatch), (0, None));
}

/// `supersede_claimed` ends a claim; it refuses any other status.
pub async fn supersede_claimed_only_claimed(store: &dyn MailboxStore) {
    let d = claimed(store, "t1", "r1").await;
    let gone = store
        .supersede_claimed(&d.dispatch_id, T0 + 1)
        .await
        .unwrap();
    assert_eq!(gone.status, RunDispatchStatus::Superseded);
    assert_eq!(gone.claim_token, None);
    assert!(matches!(
        store.ack(&d.dispatch_id, token(&d), T0 + 2).await,
        Err(MailboxError::WrongState { .. })
    ));
    let queued = enqueued(store, "t1", "r2").await;
    assert!(matches!(
        store.supersede_claimed(&queued.dispatch_id, T0).await,
        Err(MailboxError::WrongState {
            status: RunDispatchStatus::Queued,
            ..
        })
    ));
}

/// Recording the run's start and result never changes the queue status, and the
/// queue lifecycle never changes the projection.
pub async fn projection_is_a_separate_track(store: &dyn MailboxStore) {
    let d = claimed(store, "t1", "r1").await;
    let started = store
        .record_dispatch_start(&d.dispatch_id, "exec-1", T0 + 1)
        .await
        .unwrap();
    assert_eq!(started.status, RunDispatchStatus::Claimed);
    assert_eq!(started.run_status, Some(RunStatus::Running));
    assert_eq!(started.dispatch_instance_id.as_deref(), Some("exec-1"));
    let result = RunDispatchResult {
        run_id: d.run_id.clone(),
        dispatch_instance_id: "exec-1".into(),
        status: RunStatus::Waiting,
        termination: Some(TerminationReason::Suspended),
        response: None,
        error: None,
    };
    let recorded = store
        .record_run_result(&d.dispatch_id, result.clone(), T0 + 2)
        .await
        .unwrap();
    assert_eq!(recorded.status, RunDispatchStatus::Claimed);
    assert_eq!(recorded.run_status, Some(RunStatus::Waiting));
    assert_eq!(recorded.termination, Some(TerminationReason::Suspended));
    assert_eq!(recorded.completed_at, Some(T0 + 2));
    let acked = store.ack(&d.dispatch_id, token(&d), T0 + 3).await.unwrap();
    assert_eq!(
        acked.run_status,
        Some(RunStatus::Waiting),
        "ack keeps the projection"
    );

    let wrong_run = RunDispatchResult {
        run_id: RunId::new("another-run").unwrap(),
        ..result
    };
    assert!(matches!(
        store
            .record_run_result(&d.dispatch_id, wrong_run, T0 + 4)
            .await,
        Err(MailboxError::InvalidInput(_))
    ));
    assert_eq!(
        store.load_dispatch(&d.dispatch_id).await.unwrap(),
        Some(acked.clone())
    );

    // The worker does not wait for the start's record; one that lands once the
    // dispatch settled does not turn its result back into `Running`.
    let late = store
        .record_dispatch_start(&d.dispatch_id, "exec-1", T0 + 5)
        .await
        .unwrap();
    assert_eq!(late, acked, "a late start record changes nothing");
}

/// Listing filters by thread and status, pages in enqueue order and clamps `limit`.
pub async fn list_filters_and_pages(store: &dyn MailboxStore) {
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(enqueued(store, "t1", &format!("r{n}")).await.dispatch_id);
    }
    enqueued(store, "t2", "x").await;
    store.cancel(&ids[1], T0).await.unwrap();

    let all = store
        .list_dispatches(&DispatchQuery::default())
        .await
        .unwrap();
    assert_eq!(all.total, 6);
    let page = store
        .list_dispatches(&DispatchQuery {
            offset: 1,
            limit: 2,
            ..DispatchQuery::thread(thread("t1"))
        })
        .await
        .unwrap();
    assert_eq!(page.total, 5);
    let got: Vec<&DispatchId> = page.dispatches.iter().map(|d| &d.dispatch_id).collect();
    assert_eq!(got, [&ids[1], &ids[2]]);
    let queued = store
        .list_dispatches(
            &DispatchQuery::thread(thread("t1")).with_statuses([RunDispatchStatus::Queued]),
        )
        .await
        .unwrap();
    assert_eq!(queued.total, 4);
    let clamped = store
        .list_dispatches(&DispatchQuery {
            limit: 0,
            ..DispatchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(clamped.dispatches.len(), 1, "limit 0 is clamped to 1");
}

/// A claim whose lease ended goes back to the queue as a failed attempt.
pub async fn expired_leases_are_reclaimed(store: &dyn MailboxStore) {
    let d = claimed(store, "t1", "r1").await;
    assert!(
        store
            .reclaim_expired_leases(T0 + LEASE - 1)
            .await
            .unwrap()
            .is_empty()
    );
    let reclaimed = store.reclaim_expired_leases(T0 + LEASE).await.unwrap();
    assert_eq!(reclaimed.len(), 1);
    let back = &reclaimed[0];
    assert_eq!(back.status, RunDispatchStatus::Queued);
    assert_eq!(back.claim_token, None);
    assert_eq!(back.last_error.as_deref(), Some("lease expired"));
    assert_eq!(
        store
            .ack(&d.dispatch_id, token(&d), T0 + LEASE)
            .await
            .unwrap_err(),
        MailboxError::WrongState {
            dispatch_id: d.dispatch_id.clone(),
            status: RunDispatchStatus::Queued,
            operation: "ack",
        },
        "the stale claimer cannot ack any more"
    );
    let again = store
        .claim(&thread("t1"), "node-b", 1, LEASE, back.available_at)
        .await
        .unwrap();
    assert_eq!(again[0].attempt_count, 2);
}

/// Terminal dispatches older than `gc_ttl` are purged (their dedupe keys freed);
/// live ones stay.
pub async fn gc_purges_old_terminal_dispatches(store: &dyn MailboxStore) {
    let ttl = rules_config().gc_ttl_ms();
    let done = store
        .enqueue(dispatch("t1", "r1").with_dedupe_key("k"), T0)
        .await
        .unwrap();
    store.cancel(&done.dispatch_id, T0).await.unwrap();
    let live = enqueued(store, "t1", "r2").await;
    assert_eq!(store.gc(T0 + ttl - 1).await.unwrap(), 0);
    assert_eq!(store.gc(T0 + ttl).await.unwrap(), 1);
    assert_eq!(store.load_dispatch(&done.dispatch_id).await.unwrap(), None);
    assert!(
        store
            .load_dispatch(&live.dispatch_id)
            .await
            .unwrap()
            .is_some()
    );
    store
        .enqueue(dispatch("t1", "r3").with_dedupe_key("k"), T0 + ttl)
        .await
        .expect("a purged dispatch's dedupe key is free again");
}

/// Past the [`SETTLED_KEPT`] latest settled dispatches, the earliest enqueued
/// leave; their id and dedupe key still refuse duplicates, and an operation on
/// one is told its status, until `gc` forgets them after the dedupe window.
pub async fn settled_dispatches_beyond_the_kept_leave_and_their_marks_expire(
    store: &dyn MailboxStore,
) {
    let window = rules_config().gc_rules().dedupe_window_ms;
    let first = store
        .enqueue(dispatch("t1", "r-first").with_dedupe_key("k"), T0)
        .await
        .unwrap();
    store.cancel(&first.dispatch_id, T0).await.unwrap();
    let live = enqueued(store, "t1", "r-live").await;
    // Settled in rounds of concurrent calls: a replicated mailbox batches them.
    let mut settled = 0;
    while settled < SETTLED_KEPT {
        let round = (SETTLED_KEPT - settled).min(64);
        futures::future::join_all((settled..settled + round).map(|n| async move {
            let d = enqueued(store, &format!("t-{n}"), "r").await;
            store.cancel(&d.dispatch_id, T0).await.unwrap();
        }))
        .await;
        settled += round;
    }

    assert_eq!(store.load_dispatch(&first.dispatch_id).await.unwrap(), None);
    assert!(
        store
            .load_dispatch(&live.dispatch_id)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store.cancel(&first.dispatch_id, T0).await.unwrap_err(),
        MailboxError::WrongState {
            dispatch_id: first.dispatch_id.clone(),
            status: RunDispatchStatus::Cancelled,
            operation: "cancel",
        }
    );
    let mut same_id = dispatch("t1", "r-again");
    same_id.dispatch_id = first.dispatch_id.clone();
    assert!(matches!(
        store.enqueue(same_id.clone(), T0 + 1).await,
        Err(MailboxError::Duplicate(_))
    ));
    assert!(matches!(
        store
            .enqueue(dispatch("t1", "r-key").with_dedupe_key("k"), T0 + 1)
            .await,
        Err(MailboxError::Duplicate(_))
    ));

    assert_eq!(store.gc(T0 + window - 1).await.unwrap(), 0);
    assert_eq!(
        store.gc(T0 + window).await.unwrap(),
        2,
        "the id's mark and the key's"
    );
    assert_eq!(
        store
            .cancel(&first.dispatch_id, T0 + window)
            .await
            .unwrap_err(),
        MailboxError::NotFound(first.dispatch_id.clone())
    );
    store
        .enqueue(dispatch("t1", "r-key").with_dedupe_key("k"), T0 + window)
        .await
        .expect("a forgotten dispatch's dedupe key is free again");
    store
        .enqueue(same_id, T0 + window)
        .await
        .expect("and so is its id");
}

/// Garbage collection may forget a thread that holds nothing, but never a raised
/// epoch: after an interrupt, work enqueued a `gc_ttl` later still carries it; a
/// thread never interrupted starts again at epoch 0.
pub async fn gc_keeps_what_a_thread_must_remember(store: &dyn MailboxStore) {
    let ttl = rules_config().gc_ttl_ms();
    for thread_id in ["t-gc-plain", "t-gc-interrupted"] {
        let done = claimed(store, thread_id, "r1").await;
        store
            .ack(&done.dispatch_id, token(&done), T0)
            .await
            .unwrap();
    }
    let interrupted = store
        .interrupt(&thread("t-gc-interrupted"), T0)
        .await
        .unwrap();
    assert_eq!(interrupted.new_dispatch_epoch, 1);
    assert_eq!(store.gc(T0 + ttl).await.unwrap(), 2);

    let later = T0 + ttl + 1;
    let plain = store
        .enqueue(dispatch("t-gc-plain", "r2"), later)
        .await
        .unwrap();
    assert_eq!(plain.dispatch_epoch, 0);
    let kept = store
        .enqueue(dispatch("t-gc-interrupted", "r2"), later)
        .await
        .unwrap();
    assert_eq!(kept.dispatch_epoch, 1, "the interrupt is remembered");
    let next = store
        .interrupt(&thread("t-gc-interrupted"), later)
        .await
        .unwrap();
    assert_eq!(next.new_dispatch_epoch, 2);
    assert_eq!(next.superseded_count, 1);
}

/// Every operation on an unknown dispatch is `NotFound`.
pub async fn unknown_ids_are_not_found(store: &dyn MailboxStore) {
    let id = DispatchId::new("no-such-dispatch").unwrap();
    let not_found = MailboxError::NotFound(id.clone());
    assert_eq!(store.load_dispatch(&id).await.unwrap(), None);
    assert_eq!(
        store.claim_dispatch(&id, "n", 1, T0).await.unwrap_err(),
        not_found
    );
    assert_eq!(store.ack(&id, "t", T0).await.unwrap_err(), not_found);
    assert_eq!(store.nack(&id, "t", "e", T0).await.unwrap_err(), not_found);
    assert_eq!(
        store.dead_letter(&id, "t", "e", T0).await.unwrap_err(),
        not_found
    );
    assert_eq!(store.cancel(&id, T0).await.unwrap_err(), not_found);
    assert_eq!(
        store.extend_lease(&id, "t", 1, T0).await.unwrap_err(),
        not_found
    );
    assert_eq!(
        store.supersede_claimed(&id, T0).await.unwrap_err(),
        not_found
    );
    assert_eq!(
        store.record_dispatch_start(&id, "x", T0).await.unwrap_err(),
        not_found
    );
}

/// Many consumers claiming one thread's dispatches at once: each dispatch is won by
/// exactly one of them.
pub async fn concurrent_claims_have_one_winner(store: Arc<dyn MailboxStore>) {
    const DISPATCHES: usize = 20;
    for n in 0..DISPATCHES {
        enqueued(store.as_ref(), "t1", &format!("r{n}")).await;
    }
    let consumers: Vec<_> = (0..8)
        .map(|c| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut won = Vec::new();
                loop {
                    let got = store
                        .claim(&thread("t1"), &format!("node-{c}"), 1, LEASE, T0)
                        .await
                        .unwrap();
                    if got.is_empty() {
                        return won;
                    }
                    won.extend(got.into_iter().map(|d| d.dispatch_id));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for consumer in consumers {
        all.extend(consumer.await.unwrap());
    }
    let unique: std::collections::BTreeSet<_> = all.iter().cloned().collect();
    assert_eq!(all.len(), DISPATCHES, "every dispatch claimed");
    assert_eq!(unique.len(), DISPATCHES, "no dispatch claimed twice");
}

/// A sweep finds every thread with a `Queued` dispatch and when its earliest one
/// becomes claimable; claimed and finished work is not listed.
pub async fn queued_threads_lists_waiting_work(store: &dyn MailboxStore) {
    enqueued(store, "t-queued", "r1").await;
    let mut later = dispatch("t-queued", "r2");
    later.available_at = T0 + 50;
    store.enqueue(later, T0).await.unwrap();
    claimed(store, "t-claimed", "r3").await;
    let acked = claimed(store, "t-acked", "r4").await;
    store
        .ack(&acked.dispatch_id, token(&acked), T0)
        .await
        .unwrap();
    let retried = claimed(store, "t-retry", "r5").await;
    let back = store
        .nack(&retried.dispatch_id, token(&retried), "later", T0)
        .await
        .unwrap();

    let mut listed = store.queued_threads().await.unwrap();
    listed.sort_by(|a, b| a.thread_id.as_str().cmp(b.thread_id.as_str()));
    assert_eq!(
        listed,
        [
            QueuedThread {
                thread_id: thread("t-queued"),
                available_at: T0,
            },
            QueuedThread {
                thread_id: thread("t-retry"),
                available_at: back.available_at,
            },
        ]
    );
}

/// Every claimed dispatch is listed with its holder, token and lease; giving a
/// listed claim back with its token returns the work to the queue (an attempt
/// counted), and a claim taken anew since is left alone.
pub async fn claims_lists_claimed_work(store: &dyn MailboxStore) {
    enqueued(store, "t-queued", "r1").await;
    let first = claimed(store, "t-claims", "r2").await;
    let second = claimed(store, "t-claims", "r3").await;
    let acked = claimed(store, "t-acked", "r4").await;
    store
        .ack(&acked.dispatch_id, token(&acked), T0)
        .await
        .unwrap();

    let mut listed = store.claims().await.unwrap();
    listed.sort_by(|a, b| a.dispatch_id.as_str().cmp(b.dispatch_id.as_str()));
    let mut expected: Vec<HeldClaim> = [&first, &second]
        .into_iter()
        .map(|d| HeldClaim {
            thread_id: thread("t-claims"),
            dispatch_id: d.dispatch_id.clone(),
            claim_token: token(d).to_owned(),
            claimed_by: "node-a".to_owned(),
            lease_until: T0 + LEASE,
        })
        .collect();
    expected.sort_by(|a, b| a.dispatch_id.as_str().cmp(b.dispatch_id.as_str()));
    assert_eq!(listed, expected);

    let back = store
        .nack(&first.dispatch_id, token(&first), "its claimer left", T0)
        .await
        .unwrap();
    assert_eq!(back.status, RunDispatchStatus::Queued);
    assert_eq!(back.attempt_count, 1);
    let again = store
        .claim_dispatch(&first.dispatch_id, "node-b", LEASE, back.available_at)
        .await
        .unwrap();
    assert!(matches!(
        store
            .nack(&first.dispatch_id, token(&first), "stale listing", T0)
            .await,
        Err(MailboxError::ClaimMismatch(_))
    ));
    let holders: Vec<(DispatchId, String)> = store
        .claims()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.dispatch_id, c.claimed_by))
        .filter(|(id, _)| id == &first.dispatch_id)
        .collect();
    assert_eq!(holders, [(again.dispatch_id.clone(), "node-b".to_owned())]);
}

/// A watch hears of enqueued work and of work a nack gives back, from any writer.
pub async fn watch_reports_new_and_returned_work(store: &dyn MailboxStore) {
    let (heard_tx, mut watch) = tokio::sync::mpsc::unbounded_channel();
    store
        .watch_queued(QueueWatch::new(move |thread_id: &ThreadId| {
            heard_tx.send(thread_id.clone()).is_ok()
        }))
        .await
        .unwrap();
    let queued = enqueued(store, "t-watch", "r1").await;
    let heard = tokio::time::timeout(Duration::from_secs(10), watch.recv())
        .await
        .expect("notified of the enqueue");
    assert_eq!(heard, Some(thread("t-watch")));

    let claimed = store
        .claim_dispatch(&queued.dispatch_id, "n", LEASE, T0)
        .await
        .unwrap();
    store
        .nack(&claimed.dispatch_id, token(&claimed), "retry", T0)
        .await
        .unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), watch.recv())
        .await
        .expect("notified of the retry");
    assert_eq!(heard, Some(thread("t-watch")));
}
