//! Sending thread calls to whichever node owns the thread.

use std::time::Duration;

use async_nats::{Client, StatusCode};
use awaken_actors::thread::{ControlError, ThreadStatus};
use awaken_actors::{RunId, ThreadId};
use futures::StreamExt;
use tokio::time::Instant;

use super::host::{Answer, ThreadHost};
use super::wire::{CallFrame, CallOutcome, ThreadCall, call_subject};
use crate::codec;
use crate::shards::ShardCount;
use crate::trace_headers;

/// Tunables of call routing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// How often an owner reports a long call as still in progress; three silent
    /// intervals mean it is gone.
    pub heartbeat: Duration,
    /// How long [`ThreadRouter::call`] waits for a thread's shard to get an owner
    /// (failover takes up to a lease TTL).
    pub owner_wait: Duration,
    /// Pause between attempts while no node owns the thread.
    pub retry_delay: Duration,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(1),
            owner_wait: Duration::from_secs(12),
            retry_delay: Duration::from_millis(50),
        }
    }
}

/// Why a routed call has no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RouteError {
    /// No node took the thread's shard in time.
    #[error("no node owns thread `{thread_id}` (waited {waited:?})")]
    NoOwner {
        /// The thread.
        thread_id: ThreadId,
        /// How long the router waited.
        waited: Duration,
    },
    /// The owner stopped answering mid-call (it died or was cut off); the call may
    /// or may not have taken effect.
    #[error("the owner of thread `{thread_id}` stopped answering")]
    OwnerSilent {
        /// The thread.
        thread_id: ThreadId,
    },
    /// The thread refused the call.
    #[error(transparent)]
    Refused(#[from] ControlError),
    /// The owner could not read the call.
    #[error("the owner could not read the call: {0}")]
    Malformed(String),
    /// The answer did not fit the call.
    #[error("unexpected answer to {call}: {outcome:?}")]
    Unexpected {
        /// The call's operation.
        call: &'static str,
        /// What came back.
        outcome: Box<CallOutcome>,
    },
    /// NATS failed or a payload could not be encoded or decoded.
    #[error("transport: {0}")]
    Transport(String),
}

/// Sends thread calls to the thread's owner: answered in place when this node owns
/// the thread, over NATS (`awaken.shard.<n>.call`) otherwise.
#[derive(Debug, Clone)]
pub struct ThreadRouter {
    client: Client,
    count: ShardCount,
    host: Option<ThreadHost>,
    config: RouterConfig,
}

impl ThreadRouter {
    /// A router for a cluster of `count` shards; `host` answers calls for the
    /// threads this node owns (none for a client-only router).
    pub fn new(
        client: Client,
        count: ShardCount,
        host: Option<ThreadHost>,
        config: RouterConfig,
    ) -> Self {
        Self {
            client,
            count,
            host,
            config,
        }
    }

    /// Sends `call` to the thread's owner, waiting up to `owner_wait` while the
    /// thread has none. A call that only reads (status, replay) is also sent
    /// again, within the same wait, when its answer was lost on the way (a
    /// reconnect): asking twice changes nothing.
    pub async fn call(&self, call: ThreadCall) -> Result<Answer, RouteError> {
        self.call_within(call, self.config.owner_wait).await
    }

    /// [`Self::call`], waiting at most `owner_wait` for an owner (and for a
    /// lost answer to a call that only reads): for a caller with somewhere
    /// else to look.
    pub async fn call_within(
        &self,
        call: ThreadCall,
        owner_wait: Duration,
    ) -> Result<Answer, RouteError> {
        let started = Instant::now();
        // A call that only reads is answered at once, with no `Working` frames:
        // silence past the caller's own wait is an answer lost on the way.
        let silence = if call.only_reads() {
            (self.config.heartbeat * 3).min(owner_wait)
        } else {
            self.config.heartbeat * 3
        };
        loop {
            let answer = match self.attempt(&call, silence).await {
                Ok(answer) => answer,
                Err(error @ (RouteError::OwnerSilent { .. } | RouteError::Transport(_)))
                    if call.only_reads() && started.elapsed() < owner_wait =>
                {
                    tracing::debug!(%error, call = call.operation(), "thread call asked again");
                    tokio::time::sleep(self.config.retry_delay).await;
                    continue;
                }
                Err(error) => return Err(error),
            };
            if answer.outcome != CallOutcome::NotOwner {
                return Ok(answer);
            }
            if started.elapsed() >= owner_wait {
                return Err(RouteError::NoOwner {
                    thread_id: call.thread_id().clone(),
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(self.config.retry_delay).await;
        }
    }

    /// One attempt: `NotOwner` when no node (or a node that just lost it) answered
    /// for the thread.
    pub async fn call_once(&self, call: &ThreadCall) -> Result<Answer, RouteError> {
        self.attempt(call, self.config.heartbeat * 3).await
    }

    /// One attempt, the owner counted gone after `silence` without a frame.
    async fn attempt(&self, call: &ThreadCall, silence: Duration) -> Result<Answer, RouteError> {
        if let Some(host) = &self.host
            && host.owns(call.thread_id())
        {
            return Ok(host.handle(call.clone()).await);
        }
        self.remote(call, silence).await
    }

    async fn remote(&self, call: &ThreadCall, silence: Duration) -> Result<Answer, RouteError> {
        let transport = |e: &dyn std::fmt::Display| RouteError::Transport(e.to_string());
        let payload = codec::encode(call).map_err(|e| transport(&e))?;
        let inbox = self.client.new_inbox();
        let mut frames = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| transport(&e))?;
        let subject = call_subject(self.count.shard_of(call.thread_id()));
        // The caller's span (a request, a decision taken off the bus) goes along,
        // so the owner's handling of the call joins its trace.
        match trace_headers::current() {
            Some(headers) => {
                self.client
                    .publish_with_reply_and_headers(subject, inbox, headers, payload)
                    .await
            }
            None => {
                self.client
                    .publish_with_reply(subject, inbox, payload)
                    .await
            }
        }
        .map_err(|e| transport(&e))?;
        let mut events = Vec::new();
        loop {
            let message = match tokio::time::timeout(silence, frames.next()).await {
                Ok(Some(message)) => message,
                Ok(None) => return Err(transport(&"the connection closed")),
                Err(_) => {
                    return Err(RouteError::OwnerSilent {
                        thread_id: call.thread_id().clone(),
                    });
                }
            };
            if message.status == Some(StatusCode::NO_RESPONDERS) {
                return Ok(Answer {
                    events: Vec::new(),
                    outcome: CallOutcome::NotOwner,
                });
            }
            match codec::decode::<CallFrame>(&message.payload).map_err(|e| transport(&e))? {
                CallFrame::Working => {}
                CallFrame::Events { events: chunk } => events.extend(chunk),
                CallFrame::Done { outcome } => return Ok(Answer { events, outcome }),
            }
        }
    }

    /// What the thread is doing now.
    pub async fn thread_status(&self, thread_id: &ThreadId) -> Result<ThreadStatus, RouteError> {
        match self
            .outcome(ThreadCall::Status {
                thread_id: thread_id.clone(),
            })
            .await?
        {
            CallOutcome::Status(status) => Ok(status),
            other => Err(unexpected("status", other)),
        }
    }

    /// Cancels the thread's active or waiting run (only `run_id`, when given).
    pub async fn cancel(
        &self,
        thread_id: &ThreadId,
        run_id: Option<RunId>,
    ) -> Result<RunId, RouteError> {
        match self
            .outcome(ThreadCall::Cancel {
                thread_id: thread_id.clone(),
                run_id,
            })
            .await?
        {
            CallOutcome::Cancelled(run_id) => Ok(run_id),
            other => Err(unexpected("cancel", other)),
        }
    }

    /// Cancels the thread's active run if it has one.
    pub async fn interrupt(&self, thread_id: &ThreadId) -> Result<Option<RunId>, RouteError> {
        match self
            .outcome(ThreadCall::Interrupt {
                thread_id: thread_id.clone(),
            })
            .await?
        {
            CallOutcome::Interrupted(run_id) => Ok(run_id),
            other => Err(unexpected("interrupt", other)),
        }
    }

    async fn outcome(&self, call: ThreadCall) -> Result<CallOutcome, RouteError> {
        match self.call(call).await?.outcome {
            CallOutcome::Failed(error) => Err(RouteError::Refused(error)),
            CallOutcome::Malformed(error) => Err(RouteError::Malformed(error)),
            outcome => Ok(outcome),
        }
    }
}

fn unexpected(call: &'static str, outcome: CallOutcome) -> RouteError {
    RouteError::Unexpected {
        call,
        outcome: Box::new(outcome),
    }
}
