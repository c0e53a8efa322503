//! `NodeChildRuns`: a node's delegation transport, so delegate tools start child
//! runs through the shared mailbox and reach them wherever their threads are owned.
//!
//! A child run is an ordinary mailbox run (durable, claimed by its thread's owner);
//! its events are followed like any run's, and decisions and cancels are thread
//! calls to its owner. A [`LocalNode`](crate::LocalNode) reaches everything in
//! process, a [`ClusterNode`](crate::node::ClusterNode) over NATS.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use awaken_actors::ToolCallId;
use awaken_actors::clock::now_ms;
use awaken_actors::contract::{RunDispatchStatus, RunStatus, ToolCallResume};
use awaken_actors::delegation::{ChildEvents, ChildRef, ChildRuns, DelegationError};
use awaken_actors::mailbox::{
    DispatchQuery, MailboxError, MailboxStore, RunInbox, SubmitOptions, submit,
};
use awaken_actors::store::ThreadRunStore;
use awaken_actors::thread::{ControlError, RunRequest};
use futures::StreamExt;

use crate::decisions::{Decision, Delivery};
use crate::events::{LocalEventHub, RunFollow, follow_local, follow_run};
use crate::routing::{Answer, CallOutcome, RouteError, ThreadCall, ThreadHost, ThreadRouter};

/// Attempts at a decision or cancel whose target cannot be reached now.
const MAX_ATTEMPTS: u32 = 40;
/// First pause between two attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(25);
/// Longest pause between two attempts.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How the node reaches a thread's owner and a run's events.
pub(crate) enum Reach {
    /// Everything is in this process.
    Local {
        /// Answers thread calls.
        host: ThreadHost,
        /// Runs' events.
        hub: Arc<LocalEventHub>,
    },
    /// Owners and events are wherever NATS says.
    Cluster {
        /// The node's connection.
        client: async_nats::Client,
        /// Routes thread calls to owners.
        router: Box<ThreadRouter>,
    },
}

/// The delegation transport of one node.
pub(crate) struct NodeChildRuns {
    store: Arc<dyn ThreadRunStore>,
    mailbox: Arc<dyn MailboxStore>,
    inbox: Arc<dyn RunInbox>,
    reach: Reach,
}

impl NodeChildRuns {
    /// A transport over the node's shared store, mailbox and inbox.
    pub(crate) fn new(
        store: Arc<dyn ThreadRunStore>,
        mailbox: Arc<dyn MailboxStore>,
        inbox: Arc<dyn RunInbox>,
        reach: Reach,
    ) -> Self {
        Self {
            store,
            mailbox,
            inbox,
            reach,
        }
    }

    async fn call(&self, call: ThreadCall) -> Result<Answer, RouteError> {
        match &self.reach {
            Reach::Local { host, .. } => Ok(host.handle(call).await),
            Reach::Cluster { router, .. } => router.call(call).await,
        }
    }

    /// Cancels the child's dispatch if it still waits in the mailbox.
    async fn cancel_queued(&self, child: &ChildRef) -> Result<bool, DelegationError> {
        let page = self
            .mailbox
            .list_dispatches(&DispatchQuery {
                thread_id: Some(child.thread_id.clone()),
                statuses: vec![RunDispatchStatus::Queued],
                offset: 0,
                limit: 200,
            })
            .await
            .map_err(unavailable)?;
        for dispatch in page.dispatches {
            if dispatch.run_id == child.run_id
                && self
                    .mailbox
                    .cancel(&dispatch.dispatch_id, now_ms())
                    .await
                    .is_ok()
            {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

fn unavailable(error: impl std::fmt::Display) -> DelegationError {
    DelegationError::Unavailable(error.to_string())
}

/// Whether a failed call may work when tried again (the owner is failing over).
fn transient(error: &RouteError) -> bool {
    matches!(
        error,
        RouteError::NoOwner { .. } | RouteError::OwnerSilent { .. } | RouteError::Transport(_)
    )
}

fn pause(attempt: u32) -> Duration {
    FIRST_PAUSE
        .saturating_mul(1u32.checked_shl(attempt).unwrap_or(u32::MAX))
        .min(MAX_PAUSE)
}

#[async_trait]
impl ChildRuns for NodeChildRuns {
    fn store(&self) -> Arc<dyn ThreadRunStore> {
        Arc::clone(&self.store)
    }

    async fn submit(&self, request: RunRequest) -> Result<(), DelegationError> {
        let dedupe_key = request
            .run_id
            .as_ref()
            .map(|run_id| format!("delegate:{run_id}"));
        let options = SubmitOptions {
            dedupe_key,
            ..SubmitOptions::default()
        };
        match submit(&*self.mailbox, &*self.inbox, request, options).await {
            Ok(_) | Err(MailboxError::Duplicate(_)) => Ok(()),
            Err(error) => Err(unavailable(error)),
        }
    }

    async fn follow(&self, child: &ChildRef) -> Result<ChildEvents, DelegationError> {
        let follow = match &self.reach {
            Reach::Local { hub, .. } => follow_local(hub, &child.run_id, None),
            Reach::Cluster { client, router } => follow_run(
                client,
                router,
                &self.store,
                &child.thread_id,
                &child.run_id,
                None,
            )
            .await
            .map_err(unavailable)?,
        };
        // Earlier activations' events were shown when they happened.
        let follow = follow.skip_backlog();
        let events = futures::stream::unfold(follow, |mut follow: RunFollow| async move {
            let event = follow.next().await?;
            Some((event.event.clone(), follow))
        });
        Ok(events.boxed())
    }

    async fn decide(
        &self,
        child: &ChildRef,
        call_id: ToolCallId,
        resume: ToolCallResume,
    ) -> Result<(), DelegationError> {
        let decision = Decision {
            thread_id: child.thread_id.clone(),
            call_id,
            run_id: Some(child.run_id.clone()),
            resume,
        };
        let mut last = String::new();
        for attempt in 0..MAX_ATTEMPTS {
            // A repeat after a lost answer is safe: the child applies a decision id
            // once.
            match self
                .call(ThreadCall::Decide {
                    decision: decision.clone(),
                })
                .await
            {
                Ok(answer) => match answer.outcome {
                    CallOutcome::Delivered(Delivery::Applied { .. }) => return Ok(()),
                    CallOutcome::Delivered(Delivery::Refused(reason)) => {
                        return Err(DelegationError::Refused(reason));
                    }
                    CallOutcome::Delivered(Delivery::Retry(reason)) => last = reason,
                    CallOutcome::Failed(refused) => {
                        return Err(DelegationError::Refused(refused.to_string()));
                    }
                    other => {
                        return Err(DelegationError::Refused(format!(
                            "unexpected answer to a decision: {other:?}"
                        )));
                    }
                },
                Err(error) if transient(&error) => last = error.to_string(),
                Err(error) => return Err(DelegationError::Refused(error.to_string())),
            }
            tokio::time::sleep(pause(attempt)).await;
        }
        Err(DelegationError::Unavailable(last))
    }

    async fn cancel(&self, child: &ChildRef) -> Result<(), DelegationError> {
        let mut last = String::new();
        for attempt in 0..MAX_ATTEMPTS {
            let answer = self
                .call(ThreadCall::Cancel {
                    thread_id: child.thread_id.clone(),
                    run_id: Some(child.run_id.clone()),
                })
                .await;
            match answer {
                Ok(answer) => match answer.outcome {
                    CallOutcome::Cancelled(_) => return Ok(()),
                    CallOutcome::Failed(
                        ControlError::NoActiveRun { .. } | ControlError::RunNotActive { .. },
                    ) => {
                        if self.cancel_queued(child).await? {
                            return Ok(());
                        }
                        // Neither queued nor active: finished or never accepted
                        // (nothing to do), or claimed and about to start (again).
                        match self.store.load_run(&child.run_id).await? {
                            Some(record) if record.status == RunStatus::Done => return Ok(()),
                            None if self
                                .inbox
                                .get(&child.run_id)
                                .await
                                .map_err(unavailable)?
                                .is_none() =>
                            {
                                return Ok(());
                            }
                            _ => last = format!("run `{}` is starting", child.run_id),
                        }
                    }
                    CallOutcome::Failed(refused) => {
                        return Err(DelegationError::Refused(refused.to_string()));
                    }
                    other => {
                        return Err(DelegationError::Refused(format!(
                            "unexpected answer to a cancel: {other:?}"
                        )));
                    }
                },
                Err(error) if transient(&error) => last = error.to_string(),
                Err(error) => return Err(DelegationError::Refused(error.to_string())),
            }
            tokio::time::sleep(pause(attempt)).await;
        }
        Err(DelegationError::Unavailable(last))
    }
}
