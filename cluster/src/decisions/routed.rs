//! Decisions taken from the bus by any node, applied by the thread's owner.

use async_trait::async_trait;

use super::{Decision, DecisionTarget, Delivery};
use crate::routing::{CallOutcome, RouteError, ThreadCall, ThreadRouter};

/// Forwards each decision to the owner of its thread (applied in place when that is
/// this node) and holds it until the owner answers: the owner answers once the
/// resumed run stops, and the bus keeps the decision until then, so a decision
/// whose owner dies mid-resume is given back and applied by the next owner.
#[derive(Debug, Clone)]
pub struct RoutedDecisions {
    router: ThreadRouter,
}

impl RoutedDecisions {
    /// Decisions forwarded with `router`.
    pub fn new(router: ThreadRouter) -> Self {
        Self { router }
    }
}

#[async_trait]
impl DecisionTarget for RoutedDecisions {
    async fn deliver(&self, decision: Decision) -> Delivery {
        let thread_id = decision.thread_id.clone();
        match self
            .router
            .call_once(&ThreadCall::Decide { decision })
            .await
        {
            Ok(answer) => match answer.outcome {
                CallOutcome::Delivered(delivery) => delivery,
                CallOutcome::NotOwner => {
                    Delivery::Retry(format!("no node owns thread {thread_id} now"))
                }
                CallOutcome::Malformed(error) => Delivery::Refused(error),
                other => Delivery::Retry(format!("unexpected answer {other:?}")),
            },
            Err(RouteError::Refused(error)) => Delivery::Refused(error.to_string()),
            Err(error) => Delivery::Retry(error.to_string()),
        }
    }
}
