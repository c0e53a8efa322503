//! Accepting a run: its input goes to the inbox, a dispatch to the mailbox.

use super::{MailboxError, MailboxStore, RunInbox};
use crate::clock::now_ms;
use crate::contract::RunDispatch;
use crate::ids::RunId;
use crate::telemetry::messaging;
use crate::thread::RunRequest;

/// How a submitted run is queued.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitOptions {
    /// 0 is highest; the default priority when `None`.
    pub priority: Option<u8>,
    /// A second submission with the same key is refused (`Duplicate`).
    pub dedupe_key: Option<String>,
    /// Delivery attempts before dead-lettering; 0 takes the mailbox default.
    pub max_attempts: u32,
}

/// Accepts `request` durably: once this returns, some node will run it (invariant:
/// no lost dispatch). The run id is the request's, or a new one.
pub async fn submit(
    mailbox: &dyn MailboxStore,
    inbox: &dyn RunInbox,
    request: RunRequest,
    options: SubmitOptions,
) -> Result<RunDispatch, MailboxError> {
    let chosen = request.run_id.is_some();
    let run_id = request.run_id.clone().unwrap_or_else(RunId::generate);
    let request = request.with_run_id(run_id.clone());
    inbox.put(&run_id, &request).await?;
    let now = now_ms();
    let mut dispatch = RunDispatch::new(
        request.thread_id.clone(),
        run_id.clone(),
        options.max_attempts,
        now,
    );
    if let Some(priority) = options.priority {
        dispatch = dispatch.with_priority(priority);
    }
    if let Some(key) = options.dedupe_key {
        dispatch = dispatch.with_dedupe_key(key);
    }
    let span = messaging::send(request.trace.as_ref());
    match mailbox.enqueue(dispatch, now).await {
        Ok(queued) => {
            messaging::sent(&span, Ok(&queued.dispatch_id));
            Ok(queued)
        }
        Err(refused) => {
            messaging::sent(&span, Err(error_type(&refused)));
            // A caller-chosen run id may belong to an earlier, accepted submission
            // whose input must stay.
            if !chosen {
                let _ = inbox.remove(&run_id).await;
            }
            Err(refused)
        }
    }
}

/// The `error.type` of a refused enqueue, for its span.
fn error_type(error: &MailboxError) -> &'static str {
    match error {
        MailboxError::Duplicate(_) => "duplicate",
        MailboxError::Unavailable(_) => "unavailable",
        MailboxError::InvalidInput(_) => "invalid_input",
        MailboxError::NotFound(_)
        | MailboxError::WrongState { .. }
        | MailboxError::ClaimMismatch(_) => "refused",
    }
}
