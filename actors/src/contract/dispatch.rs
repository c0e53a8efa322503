//! Mailbox dispatches: the durable queue records that activate runs.
//!
//! Every durable run activation (streaming, background, A2A, internal) enters the
//! system as a [`RunDispatch`]. A dispatch owns delivery: queueing, leases, retries
//! and audit. The run's business truth stays on the
//! [`RunRecord`](crate::contract::run::RunRecord); a dispatch only keeps a compact
//! projection of the runtime result ([`RunDispatchResult`]) for operators.
//!
//! ```text
//! Queued --claim--> Claimed --ack--> Acked (terminal)
//!   |                 |--nack(retry)--> Queued (attempt_count + 1, available_at = retry_at)
//!   |                 |--nack(permanent)--> DeadLetter (terminal)
//!   |--cancel--> Cancelled (terminal)
//!   +--interrupt (dispatch epoch bump)--> Superseded (terminal)
//! ```
//!
//! `Acked` means "consumed, do not retry", not "succeeded": read the run record for
//! the outcome.

use serde::{Deserialize, Serialize};

use crate::contract::run::{RunStatus, TerminationReason};
use crate::ids::{DispatchId, RunId, ThreadId};

/// Priority of a dispatch when none is given (0 is highest, 255 lowest).
pub const DEFAULT_DISPATCH_PRIORITY: u8 = 128;

fn default_priority() -> u8 {
    DEFAULT_DISPATCH_PRIORITY
}

/// Where a dispatch is in the queue lifecycle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunDispatchStatus {
    /// Waiting to be claimed.
    #[default]
    Queued,
    /// Claimed by a consumer under a lease; executing.
    Claimed,
    /// Consumed; do not retry (terminal).
    Acked,
    /// Cancelled by the caller (terminal).
    Cancelled,
    /// Replaced by a newer dispatch epoch (terminal).
    Superseded,
    /// Failed permanently (terminal).
    DeadLetter,
}

impl RunDispatchStatus {
    /// Whether the dispatch will never be delivered again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Acked | Self::Cancelled | Self::Superseded | Self::DeadLetter
        )
    }
}

/// One durable activation of a run.
///
/// Dispatches hold no request messages, agent identity or transport payload: an
/// activation is rebuilt from the run record and the thread's message log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunDispatch {
    /// The dispatch (UUID v7 when generated).
    pub dispatch_id: DispatchId,
    /// The thread: the routing anchor.
    pub thread_id: ThreadId,
    /// The run this dispatch activates.
    pub run_id: RunId,

    /// 0 is highest, 255 lowest.
    #[serde(default = "default_priority")]
    pub priority: u8,
    /// Enqueueing a second dispatch with the same key is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_key: Option<String>,
    /// The thread's dispatch epoch at enqueue time; an interrupt bumps the epoch.
    #[serde(default)]
    pub dispatch_epoch: u64,

    /// Queue lifecycle state.
    #[serde(default)]
    pub status: RunDispatchStatus,
    /// Not claimable before this time, unix millis (retry back-off).
    #[serde(default)]
    pub available_at: u64,
    /// Delivery attempts so far.
    #[serde(default)]
    pub attempt_count: u32,
    /// Attempts allowed before dead-lettering.
    #[serde(default)]
    pub max_attempts: u32,
    /// The last delivery error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,

    /// Token the claimer must present to ack, nack or dead-letter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_token: Option<String>,
    /// The consumer (node) holding the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
    /// When the claim expires, unix millis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<u64>,

    /// The runtime execution that served this dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_instance_id: Option<String>,
    /// Projected run status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_status: Option<RunStatus>,
    /// Projected termination reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<TerminationReason>,
    /// Projected response text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_response: Option<String>,
    /// Projected error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_error: Option<String>,
    /// When the run result was recorded, unix millis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<u64>,

    /// Creation time, unix millis.
    pub created_at: u64,
    /// Last update time, unix millis.
    pub updated_at: u64,
}

impl RunDispatch {
    /// A `Queued` dispatch with a generated id, available immediately.
    pub fn new(thread_id: ThreadId, run_id: RunId, max_attempts: u32, now_ms: u64) -> Self {
        Self {
            dispatch_id: DispatchId::generate(),
            thread_id,
            run_id,
            priority: DEFAULT_DISPATCH_PRIORITY,
            dedupe_key: None,
            dispatch_epoch: 0,
            status: RunDispatchStatus::Queued,
            available_at: now_ms,
            attempt_count: 0,
            max_attempts,
            last_error: None,
            claim_token: None,
            claimed_by: None,
            lease_until: None,
            dispatch_instance_id: None,
            run_status: None,
            termination: None,
            run_response: None,
            run_error: None,
            completed_at: None,
            created_at: now_ms,
            updated_at: now_ms,
        }
    }

    /// Sets the priority (0 highest).
    pub fn with_priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// Sets the dedupe key.
    pub fn with_dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }
}

/// The compact runtime result recorded on a consumed dispatch, for debugging.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunDispatchResult {
    /// The run.
    pub run_id: RunId,
    /// The runtime execution that produced it.
    pub dispatch_instance_id: String,
    /// The run's status afterwards.
    pub status: RunStatus,
    /// Why the run ended or paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<TerminationReason>,
    /// The response text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// The error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What an interrupt did to a thread's mailbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxInterrupt {
    /// The thread's dispatch epoch after the bump.
    pub new_dispatch_epoch: u64,
    /// The claimed dispatch whose run the caller must cancel, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_dispatch: Option<RunDispatch>,
    /// How many queued dispatches were superseded.
    #[serde(default)]
    pub superseded_count: usize,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn dispatch() -> RunDispatch {
        let mut d = RunDispatch::new(
            ThreadId::new("t1").unwrap(),
            RunId::new("r1").unwrap(),
            3,
            1_000,
        );
        d.dispatch_id = DispatchId::new("d1").unwrap();
        d
    }

    #[test]
    fn terminal_statuses() {
        use RunDispatchStatus::*;
        for (status, terminal, name) in [
            (Queued, false, "queued"),
            (Claimed, false, "claimed"),
            (Acked, true, "acked"),
            (Cancelled, true, "cancelled"),
            (Superseded, true, "superseded"),
            (DeadLetter, true, "dead_letter"),
        ] {
            assert_eq!(status.is_terminal(), terminal, "{status:?}");
            assert_eq!(serde_json::to_value(status).unwrap(), json!(name));
        }
    }

    #[test]
    fn new_dispatch_json_shape() {
        let value = serde_json::to_value(dispatch()).unwrap();
        assert_eq!(
            value,
            json!({
                "dispatch_id": "d1",
                "thread_id": "t1",
                "run_id": "r1",
                "priority": 128,
                "dispatch_epoch": 0,
                "status": "queued",
                "available_at": 1_000,
                "attempt_count": 0,
                "max_attempts": 3,
                "created_at": 1_000,
                "updated_at": 1_000
            })
        );
        assert_eq!(
            serde_json::from_value::<RunDispatch>(value).unwrap(),
            dispatch()
        );
    }

    #[test]
    fn missing_priority_defaults_to_128() {
        let d: RunDispatch = serde_json::from_value(json!({
            "dispatch_id": "d1", "thread_id": "t1", "run_id": "r1",
            "created_at": 1, "updated_at": 1
        }))
        .unwrap();
        assert_eq!(d.priority, DEFAULT_DISPATCH_PRIORITY);
        assert_eq!(d.status, RunDispatchStatus::Queued);
    }

    #[test]
    fn claimed_dispatch_with_projection_round_trips() {
        let mut d = dispatch().with_priority(0).with_dedupe_key("msg-1");
        d.status = RunDispatchStatus::Acked;
        d.claim_token = Some("tok".into());
        d.claimed_by = Some("node-a".into());
        d.lease_until = Some(31_000);
        d.dispatch_instance_id = Some("inst-1".into());
        d.run_status = Some(RunStatus::Waiting);
        d.termination = Some(TerminationReason::Suspended);
        d.completed_at = Some(2_000);
        let value = serde_json::to_value(&d).unwrap();
        assert_eq!(value["termination"], json!({"type": "suspended"}));
        assert_eq!(value["run_status"], json!("waiting"));
        assert_eq!(serde_json::from_value::<RunDispatch>(value).unwrap(), d);
    }

    #[test]
    fn result_and_interrupt_shapes() {
        let result = RunDispatchResult {
            run_id: RunId::new("r1").unwrap(),
            dispatch_instance_id: "inst-1".into(),
            status: RunStatus::Done,
            termination: Some(TerminationReason::NaturalEnd),
            response: Some("hi".into()),
            error: None,
        };
        let value = serde_json::to_value(&result).unwrap();
        assert_eq!(
            value,
            json!({
                "run_id": "r1", "dispatch_instance_id": "inst-1", "status": "done",
                "termination": {"type": "natural_end"}, "response": "hi"
            })
        );
        assert_eq!(
            serde_json::from_value::<RunDispatchResult>(value).unwrap(),
            result
        );

        let interrupt = MailboxInterrupt {
            new_dispatch_epoch: 4,
            active_dispatch: Some(dispatch()),
            superseded_count: 2,
        };
        let value = serde_json::to_value(&interrupt).unwrap();
        assert_eq!(value["active_dispatch"]["dispatch_id"], json!("d1"));
        assert_eq!(
            serde_json::from_value::<MailboxInterrupt>(value).unwrap(),
            interrupt
        );
        let idle = MailboxInterrupt {
            new_dispatch_epoch: 5,
            active_dispatch: None,
            superseded_count: 0,
        };
        assert_eq!(
            serde_json::to_value(&idle).unwrap(),
            json!({"new_dispatch_epoch": 5, "superseded_count": 0})
        );
    }
}
