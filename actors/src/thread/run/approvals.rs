//! The run's approvals: asked for when a call suspends, resolved when a decision
//! applies or the run ends without one, each written by the next checkpoint
//! (`RunCore::approvals`).

use crate::clock::now_ms;
use crate::contract::{
    Approval, ApprovalResolution, ApprovalStatus, ApprovalWrite, SuspendTicket, TerminationReason,
    ToolCallState,
};
use crate::ids::ApprovalId;

use super::Driver;

impl Driver<'_> {
    /// Asks for the approval `ticket` needs as `call` suspends, unless the ticket
    /// only mirrors a suspension that waits elsewhere (a child run's or a remote
    /// task's, which is approved there): the new approval's id.
    pub(super) fn request_approval(
        &mut self,
        call: &ToolCallState,
        ticket: &SuspendTicket,
    ) -> Option<ApprovalId> {
        if ticket.is_forwarded() {
            return None;
        }
        let identity = &self.run.identity;
        let approval = Approval {
            approval_id: ApprovalId::generate(),
            tenant: None,
            agent_id: identity.agent_id.clone(),
            thread_id: identity.thread_id.clone(),
            run_id: identity.run_id.clone(),
            call_id: call.call_id.clone(),
            tool_name: call.tool_name.clone(),
            arguments: ticket.pending.arguments.clone(),
            ticket_id: ticket.suspension.id.clone(),
            action: ticket.suspension.action.clone(),
            message: ticket.suspension.message.clone(),
            parameters: ticket.suspension.parameters.clone(),
            response_schema: ticket.suspension.response_schema.clone(),
            requested_at: now_ms(),
            expires_at: None,
            status: ApprovalStatus::Pending,
            resolved_at: None,
            decision_id: None,
            answer: None,
            cause: None,
        };
        let id = approval.approval_id.clone();
        self.run
            .approvals
            .push(ApprovalWrite::Requested(Box::new(approval)));
        Some(id)
    }

    /// Cancels, as the run ends for `reason`, every approval of its calls that no
    /// decision resolved (`run_cancelled`, `run_error`, ...): an approval never
    /// stays pending after its run. Written for each approval of the calls: the
    /// stores keep an approval's first resolution, so one a decision resolved
    /// (in this checkpoint or before) stays as it was.
    pub(super) fn cancel_open_approvals(&mut self, reason: &TerminationReason) {
        let now = now_ms();
        let cause = format!("run_{}", reason.code());
        let open: Vec<ApprovalId> = self
            .calls()
            .calls
            .iter()
            .filter_map(|call| call.approval_id.clone())
            .collect();
        for approval_id in open {
            self.run.approvals.push(ApprovalWrite::Resolved {
                approval_id,
                resolution: ApprovalResolution::cancelled(cause.clone(), now),
            });
        }
    }
}
