//! `ToolCallActor`: one execution attempt of one tool call.
//!
//! The thread actor decides *whether* a call runs (intercepts, decisions, execution
//! mode) and polls its [`execution`] once; an execution that has to wait moves to a
//! tool call actor (one finished at once needs none, decision 0037). The tool then
//! executes on a task of its own, so the actor stays responsive to cancellation, and
//! a panicking tool fails only its call: the panic is caught and reported as the
//! call's outcome.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::{Launch, ThreadMsg, ToolOutcome};
use crate::cancellation::CancellationToken;
use crate::ids::{RunId, ToolCallId};
use crate::telemetry;

/// Messages of a [`ToolCallActor`].
#[derive(Debug)]
pub enum ToolCallMsg {
    /// The execution task ended.
    Finished(ToolOutcomeBox),
    /// Stop the execution: the call or its run was cancelled.
    Cancel,
}

/// An outcome in transit (boxed: outcomes carry whole tool outputs).
#[derive(Debug)]
pub struct ToolOutcomeBox(pub(crate) Box<ToolOutcome>);

/// Runs one tool call attempt and reports its outcome to the thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct ToolCallActor;

/// A tool call execution under way: the tool's future, its panics caught and the
/// call's cancellation observed, so it always ends in a [`ToolOutcome`].
pub(crate) type Execution = Pin<Box<dyn Future<Output = ToolOutcome> + Send>>;

/// Starts one attempt of a call: the execution and the token that cancels it.
pub(crate) fn execution(launch: Launch) -> (Execution, CancellationToken) {
    let Launch {
        tool,
        args: arguments,
        ctx,
        span,
        metrics,
        ..
    } = launch;
    let cancellation = ctx.cancellation.clone();
    let traced = span.clone();
    let execution = async move {
        let started = std::time::Instant::now();
        let execution = AssertUnwindSafe(tool.execute(arguments, &ctx)).catch_unwind();
        let outcome = tokio::select! {
            outcome = execution => match outcome {
                Ok(Ok(output)) => ToolOutcome::Output(Box::new(output)),
                Ok(Err(error)) => ToolOutcome::Error(error),
                Err(panic) => ToolOutcome::Panicked(panic_message(panic.as_ref())),
            },
            () = ctx.cancellation.cancelled() => ToolOutcome::Cancelled,
        };
        let failure = match &outcome {
            ToolOutcome::Output(_) => None,
            ToolOutcome::Error(error) => Some(telemetry::tool_error_type(error)),
            ToolOutcome::Panicked(_) => Some("panicked"),
            ToolOutcome::Cancelled => Some("cancelled"),
        };
        if let Some(error_type) = failure {
            span.failed(error_type);
        }
        metrics.tool_finished(
            &ctx.tool_name,
            failure.unwrap_or(telemetry::TOOL_OK),
            started.elapsed(),
        );
        outcome
    };
    let execution: Execution = Box::pin(traced.traced(execution));
    (execution, cancellation)
}

/// What a [`ToolCallActor`] starts with: an execution its thread found unfinished.
pub struct ToolCallArgs {
    pub(crate) thread: ActorRef<ThreadMsg>,
    pub(crate) run_id: RunId,
    pub(crate) call_id: ToolCallId,
    pub(crate) attempt: u32,
    pub(crate) cancellation: CancellationToken,
    pub(crate) execution: Execution,
}

impl std::fmt::Debug for ToolCallArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCallArgs")
            .field("run_id", &self.run_id)
            .field("call_id", &self.call_id)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// The actor's state: who to report to, and the running execution.
pub struct ToolCallState {
    thread: ActorRef<ThreadMsg>,
    run_id: RunId,
    call_id: ToolCallId,
    attempt: u32,
    cancellation: CancellationToken,
    reported: bool,
}

impl std::fmt::Debug for ToolCallState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCallState")
            .field("run_id", &self.run_id)
            .field("call_id", &self.call_id)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl ToolCallState {
    fn report(&mut self, outcome: ToolOutcome) {
        if self.reported {
            return;
        }
        self.reported = true;
        // The thread may have passivated or stopped; a lost report is then moot
        // because the thread already settled the call as cancelled.
        let _ = self.thread.send_message(ThreadMsg::ToolFinished {
            run_id: self.run_id.clone(),
            call_id: self.call_id.clone(),
            attempt: self.attempt,
            outcome: ToolOutcomeBox(Box::new(outcome)),
        });
    }
}

impl Actor for ToolCallActor {
    type Msg = ToolCallMsg;
    type State = ToolCallState;
    type Arguments = ToolCallArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        // The execution runs on a task of its own, so this actor stays responsive
        // to `Cancel` while the tool works.
        let reporter = myself.clone();
        let execution = args.execution;
        tokio::spawn(async move {
            let outcome = execution.await;
            let _ = reporter.send_message(ToolCallMsg::Finished(ToolOutcomeBox(Box::new(outcome))));
        });
        Ok(ToolCallState {
            thread: args.thread,
            run_id: args.run_id,
            call_id: args.call_id,
            attempt: args.attempt,
            cancellation: args.cancellation,
            reported: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ToolCallMsg::Finished(outcome) => state.report(*outcome.0),
            ToolCallMsg::Cancel => {
                // The execution observes the token and ends; its late report is
                // ignored by the thread, which settles the call as cancelled now.
                state.cancellation.cancel();
                state.report(ToolOutcome::Cancelled);
            }
        }
        myself.stop(None);
        Ok(())
    }
}

impl Drop for ToolCallState {
    /// Never leaves an execution running for a call nobody waits for. In `Drop`
    /// rather than `post_stop`: a thread actor that stops kills its call actors,
    /// and a killed actor skips `post_stop` and any `Cancel` still queued — but
    /// its state is always dropped.
    fn drop(&mut self) {
        self.cancellation.cancel();
    }
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "unknown panic".to_owned()
    }
}
