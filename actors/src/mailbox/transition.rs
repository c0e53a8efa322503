//! The dispatch state transitions every [`MailboxStore`](super::MailboxStore) applies,
//! as pure functions on one [`RunDispatch`], so every implementation moves dispatches
//! through the same lifecycle and only differs in how it stores them atomically.

use super::{MailboxConfig, MailboxError};
use crate::contract::{
    MailboxInterrupt, RunDispatch, RunDispatchResult, RunDispatchStatus, RunStatus,
};

/// The refusal for an operation the dispatch's status does not allow.
pub fn wrong_state(dispatch: &RunDispatch, operation: &'static str) -> MailboxError {
    MailboxError::WrongState {
        dispatch_id: dispatch.dispatch_id.clone(),
        status: dispatch.status,
        operation,
    }
}

/// `Ok` when the dispatch is in `status`.
pub fn check_status(
    dispatch: &RunDispatch,
    status: RunDispatchStatus,
    operation: &'static str,
) -> Result<(), MailboxError> {
    if dispatch.status == status {
        Ok(())
    } else {
        Err(wrong_state(dispatch, operation))
    }
}

/// `Ok` when the dispatch is claimed under `token`.
pub fn check_claimed(
    dispatch: &RunDispatch,
    token: &str,
    operation: &'static str,
) -> Result<(), MailboxError> {
    check_status(dispatch, RunDispatchStatus::Claimed, operation)?;
    if dispatch.claim_token.as_deref() == Some(token) {
        Ok(())
    } else {
        Err(MailboxError::ClaimMismatch(dispatch.dispatch_id.clone()))
    }
}

/// Whether a claim may take the dispatch at `now_ms`.
pub fn claimable(dispatch: &RunDispatch, now_ms: u64) -> bool {
    dispatch.status == RunDispatchStatus::Queued && dispatch.available_at <= now_ms
}

/// Which of a thread's dispatches a claim takes: the claimable ones, highest
/// priority (0) first, then in enqueue order (`seq`), at most `limit`. Each is
/// given as `(seq, dispatch, handle)`; the handles of the chosen come back in order.
pub fn claim_order<'a, K>(
    dispatches: impl IntoIterator<Item = (u64, &'a RunDispatch, K)>,
    limit: usize,
    now_ms: u64,
) -> Vec<K> {
    let mut candidates: Vec<(u8, u64, K)> = dispatches
        .into_iter()
        .filter(|(_, dispatch, _)| claimable(dispatch, now_ms))
        .map(|(seq, dispatch, handle)| (dispatch.priority, seq, handle))
        .collect();
    candidates.sort_unstable_by_key(|(priority, seq, _)| (*priority, *seq));
    candidates
        .into_iter()
        .take(limit)
        .map(|(_, _, handle)| handle)
        .collect()
}

/// Resets what the caller may not choose on enqueue: the dispatch starts `Queued`
/// under `epoch` with no attempts and no claim.
pub fn prepare_enqueue(
    config: &MailboxConfig,
    dispatch: &mut RunDispatch,
    epoch: u64,
    now_ms: u64,
) {
    dispatch.dispatch_epoch = epoch;
    dispatch.status = RunDispatchStatus::Queued;
    dispatch.attempt_count = 0;
    if dispatch.max_attempts == 0 {
        dispatch.max_attempts = config.default_max_attempts;
    }
    dispatch.claim_token = None;
    dispatch.claimed_by = None;
    dispatch.lease_until = None;
    dispatch.created_at = now_ms;
    dispatch.updated_at = now_ms;
}

/// A fresh claim token: unique and not guessable from other claims.
pub fn new_claim_token() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Claims the dispatch for `consumer` under `token` (fresh per claim), with a lease
/// and one more attempt. The caller supplies the token so that every replica of a
/// mailbox applying the same claim takes the same one.
pub fn claim(
    dispatch: &mut RunDispatch,
    consumer: &str,
    lease_ms: u64,
    now_ms: u64,
    token: String,
) {
    dispatch.status = RunDispatchStatus::Claimed;
    dispatch.claim_token = Some(token);
    dispatch.claimed_by = Some(consumer.to_owned());
    dispatch.lease_until = Some(now_ms.saturating_add(lease_ms));
    dispatch.attempt_count = dispatch.attempt_count.saturating_add(1);
    dispatch.updated_at = now_ms;
}

/// Moves the dispatch to `status`, dropping its claim.
pub fn release(dispatch: &mut RunDispatch, status: RunDispatchStatus, now_ms: u64) {
    dispatch.status = status;
    dispatch.claim_token = None;
    dispatch.claimed_by = None;
    dispatch.lease_until = None;
    dispatch.updated_at = now_ms;
}

/// A failed attempt: back to the queue after the back-off, or dead-lettered when
/// the attempts are used up.
pub fn fail_attempt(config: &MailboxConfig, dispatch: &mut RunDispatch, error: &str, now_ms: u64) {
    dispatch.last_error = Some(error.to_owned());
    if dispatch.attempt_count >= dispatch.max_attempts {
        release(dispatch, RunDispatchStatus::DeadLetter, now_ms);
    } else {
        release(dispatch, RunDispatchStatus::Queued, now_ms);
        dispatch.available_at =
            now_ms.saturating_add(config.retry_delay_ms(dispatch.attempt_count));
    }
}

/// Whether a claim's lease ended by `now_ms`.
pub fn lease_expired(dispatch: &RunDispatch, now_ms: u64) -> bool {
    dispatch.status == RunDispatchStatus::Claimed
        && dispatch.lease_until.is_some_and(|until| until <= now_ms)
}

/// Whether garbage collection may purge the dispatch at `now_ms`.
pub fn collectable(dispatch: &RunDispatch, gc_ttl_ms: u64, now_ms: u64) -> bool {
    dispatch.status.is_terminal() && dispatch.updated_at.saturating_add(gc_ttl_ms) <= now_ms
}

/// Projection: the run behind the dispatch started. A settled dispatch keeps
/// its projection: the worker does not wait for the start's record before the
/// run goes on, so on a store that does not keep its callers' order the record
/// could come after the result.
pub fn record_start(dispatch: &mut RunDispatch, dispatch_instance_id: &str, now_ms: u64) {
    if dispatch.status.is_terminal() {
        return;
    }
    dispatch.dispatch_instance_id = Some(dispatch_instance_id.to_owned());
    dispatch.run_status = Some(RunStatus::Running);
    dispatch.updated_at = now_ms;
}

/// Projection: the compact run result; refused when it is for another run.
pub fn record_result(
    dispatch: &mut RunDispatch,
    result: RunDispatchResult,
    now_ms: u64,
) -> Result<(), MailboxError> {
    if result.run_id != dispatch.run_id {
        return Err(MailboxError::InvalidInput(format!(
            "result for run {} recorded on dispatch {} of run {}",
            result.run_id, dispatch.dispatch_id, dispatch.run_id
        )));
    }
    dispatch.dispatch_instance_id = Some(result.dispatch_instance_id);
    dispatch.run_status = Some(result.status);
    dispatch.termination = result.termination;
    dispatch.run_response = result.response;
    dispatch.run_error = result.error;
    dispatch.completed_at = Some(now_ms);
    dispatch.updated_at = now_ms;
    Ok(())
}

/// An interrupt's effect on one thread's dispatches, visited in enqueue order: every
/// queued one is superseded, and the first claimed one is the run the caller must
/// cancel.
#[derive(Debug, Default)]
pub struct Interrupting {
    superseded: usize,
    active: Option<RunDispatch>,
}

impl Interrupting {
    /// Applies the interrupt to the next dispatch of the thread.
    pub fn visit(&mut self, dispatch: &mut RunDispatch, now_ms: u64) {
        match dispatch.status {
            RunDispatchStatus::Queued => {
                release(dispatch, RunDispatchStatus::Superseded, now_ms);
                self.superseded += 1;
            }
            RunDispatchStatus::Claimed if self.active.is_none() => {
                self.active = Some(dispatch.clone());
            }
            _ => {}
        }
    }

    /// The outcome, under the thread's new epoch.
    pub fn finish(self, new_dispatch_epoch: u64) -> MailboxInterrupt {
        MailboxInterrupt {
            new_dispatch_epoch,
            active_dispatch: self.active,
            superseded_count: self.superseded,
        }
    }
}
