//! `AgentRuntime`: the facade applications use — resolve agents, run them, and
//! control their runs (decide, cancel, interrupt, inspect).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::{OnceCell, oneshot};

use super::live::{LiveRegistries, ValidatedRegistries};
use super::registry::RegistrySet;
use super::resolve::{AgentResolver, ResolvedAgent, resolve};
use super::run_watch::{RunWatch, WatchingHub};
use crate::approval_feed::{ApprovalFeed, FeedConfig, FeedSink, FeedingStore, LocalFeedLog};
use crate::contract::{AgentEvent, RunRecord, TerminationReason, Thread, ToolCallResume};
use crate::delegation::{ChildRuns, ChildRunsSlot};
use crate::error::{ResolveError, RuntimeError};
use crate::event_sink::EventSink;
use crate::ids::{AgentId, RunId, ThreadId, ToolCallId};
use crate::memory::NodeMemory;
use crate::phase::PhaseRuntime;
use crate::state::ProfileAccess;
use crate::store::{InMemoryStore, PatientStore, ThreadRunStore, TimedStore};
use crate::telemetry::RunMetrics;
use crate::thread::{
    Activation, ControlError, DecideRequest, DecisionAck, EventHub, FenceSource, FollowRun,
    NullEventHub, RunRequest, RunTicket, SingleNodeFence, ThreadConfig, ThreadDeps, ThreadMsg,
    ThreadRegion, ThreadStatus,
};

/// The services a runtime is built with; anything unset gets a single-node default.
#[derive(Default)]
pub(crate) struct RuntimeServices {
    pub(crate) store: Option<Arc<dyn ThreadRunStore>>,
    pub(crate) profile: Option<ProfileAccess>,
    pub(crate) hub: Option<Arc<dyn EventHub>>,
    pub(crate) fence: Option<Arc<dyn FenceSource>>,
    pub(crate) memory: Option<Arc<NodeMemory>>,
    pub(crate) approval_sink: Option<Arc<dyn FeedSink>>,
    pub(crate) config: ThreadConfig,
}

impl std::fmt::Debug for RuntimeServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeServices")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How one activation of a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRunResult {
    /// The thread.
    pub thread_id: ThreadId,
    /// The run.
    pub run_id: RunId,
    /// Why it stopped; `Suspended` means it waits for decisions.
    pub termination: TerminationReason,
    /// The last assistant text.
    pub response: String,
}

/// Resolves agents and runs them on supervised thread actors.
#[derive(Clone)]
pub struct AgentRuntime {
    registries: Arc<LiveRegistries>,
    pub(super) deps: Arc<ThreadDeps>,
    watches: Arc<WatchingHub>,
    pub(super) region: Arc<OnceCell<ThreadRegion>>,
    /// Runs ended by `end_unstarted` (a metric).
    pub(super) failed_starts: Arc<AtomicU64>,
    approvals: Arc<ApprovalFeed>,
}

impl std::fmt::Debug for AgentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRuntime")
            .field("registries", &self.registries)
            .finish_non_exhaustive()
    }
}

impl AgentRuntime {
    pub(crate) fn new(registries: Arc<RegistrySet>, services: RuntimeServices) -> Self {
        let mut config = services.config;
        if config.default_agent.is_none() {
            // With exactly one runnable agent, requests need not name it.
            let mut local = registries
                .agents
                .iter()
                .filter(|(_, spec)| !spec.is_remote());
            if let (Some((_, only)), None) = (local.next(), local.next()) {
                config.default_agent = Some(only.id.clone());
            }
        }
        let watches = Arc::new(WatchingHub::new(
            services.hub.unwrap_or_else(|| Arc::new(NullEventHub)),
        ));
        let live = Arc::new(LiveRegistries::new(registries));
        let metrics = Arc::new(RunMetrics::default());
        let store = services
            .store
            .unwrap_or_else(|| Arc::new(InMemoryStore::new()));
        // Each try is timed; the tries of one request share the wait.
        let store = PatientStore::wrap(
            TimedStore::wrap(store, metrics.store()),
            config.store_request_wait,
            metrics.store(),
        );
        let sink = services
            .approval_sink
            .unwrap_or_else(|| Arc::new(LocalFeedLog::default()));
        let approvals = Arc::new(ApprovalFeed::new(
            sink,
            Arc::clone(&store),
            FeedConfig::default(),
        ));
        let deps = ThreadDeps {
            resolver: Arc::clone(&live) as Arc<dyn AgentResolver>,
            store: Arc::new(FeedingStore::new(store, Arc::clone(&approvals))),
            profile: services.profile,
            hub: Arc::clone(&watches) as Arc<dyn EventHub>,
            fence: services.fence.unwrap_or_else(|| Arc::new(SingleNodeFence)),
            phases: PhaseRuntime::new(),
            config,
            children: Arc::new(ChildRunsSlot::default()),
            metrics,
            memory: services.memory.unwrap_or_default(),
        };
        Self {
            registries: live,
            deps: Arc::new(deps),
            watches,
            region: Arc::new(OnceCell::new()),
            failed_starts: Arc::new(AtomicU64::new(0)),
            approvals,
        }
    }

    /// The feed of the approval changes this runtime's store makes: what the
    /// inbox's stream follows.
    pub fn approval_feed(&self) -> &Arc<ApprovalFeed> {
        &self.approvals
    }

    /// The metrics of the runs on this runtime, for the node to expose.
    pub fn metrics(&self) -> &Arc<RunMetrics> {
        &self.deps.metrics
    }

    /// The node's memory budget and what its shares hold.
    pub fn memory(&self) -> &Arc<NodeMemory> {
        &self.deps.memory
    }

    /// The agent runs use when neither the request nor the thread names one.
    pub fn default_agent(&self) -> Option<&AgentId> {
        self.deps.config.default_agent.as_ref()
    }

    /// The registries this runtime resolves from now.
    pub fn registries(&self) -> Arc<RegistrySet> {
        self.registries.current()
    }

    /// Replaces the registries (a configuration change); runs pick the new set up
    /// at their next activation.
    pub fn replace_registries(&self, registries: ValidatedRegistries) {
        self.registries.replace(registries);
    }

    /// The thread and run store.
    pub fn store(&self) -> &Arc<dyn ThreadRunStore> {
        &self.deps.store
    }

    /// The resolver thread actors use.
    pub fn resolver(&self) -> Arc<dyn AgentResolver> {
        Arc::clone(&self.deps.resolver)
    }

    /// Resolves an agent id into a runnable agent.
    pub fn resolve(&self, agent_id: &str) -> Result<ResolvedAgent, ResolveError> {
        resolve(&self.registries.current(), agent_id)
    }

    async fn region(&self) -> Result<&ThreadRegion, ControlError> {
        self.region
            .get_or_try_init(|| ThreadRegion::start(Arc::clone(&self.deps)))
            .await
    }

    async fn ask<T>(
        &self,
        thread_id: &ThreadId,
        make: impl FnOnce(ractor::RpcReplyPort<T>) -> ThreadMsg,
    ) -> Result<T, ControlError> {
        let (tx, rx) = oneshot::channel();
        self.region()
            .await?
            .send(thread_id, make(tx.into()))
            .await?;
        rx.await.map_err(|_| {
            ControlError::Unavailable("the thread actor stopped before answering".into())
        })
    }

    /// Starts a run and returns at once; events go to `sink` (and the event hub).
    pub async fn start(
        &self,
        request: RunRequest,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<RunTicket, ControlError> {
        let thread_id = request.thread_id.clone();
        self.ask(&thread_id, |reply| ThreadMsg::Start {
            request,
            sink,
            reply,
        })
        .await?
    }

    /// Delivers a mailbox dispatch: starts run `run_id` from `request` unless the
    /// thread already knows the run (repeated deliveries after failover start
    /// nothing twice). Events of a newly started run go to `sink`.
    pub async fn activate(
        &self,
        thread_id: &ThreadId,
        run_id: RunId,
        request: Option<RunRequest>,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<Activation, ControlError> {
        self.ask(thread_id, |reply| ThreadMsg::Activate {
            run_id,
            request,
            sink,
            reply,
        })
        .await?
    }

    /// Watches for the end of `run_id`'s current or next activation on this node
    /// (it finishes or waits). Register before activating or deciding, so the end
    /// cannot slip by.
    pub fn watch_run(&self, run_id: &RunId) -> RunWatch {
        self.watches.watch(run_id)
    }

    /// Runs until the run finishes or waits for a decision.
    pub async fn run(
        &self,
        request: RunRequest,
        sink: Arc<dyn EventSink>,
    ) -> Result<AgentRunResult, RuntimeError> {
        let (completion, done) = CompletionSink::pair(Some(sink));
        let ticket = self.start(request, Some(completion)).await?;
        wait(ticket, done).await
    }

    /// Submits a decision for a suspended tool call; the resumed run's events go to
    /// `sink` when given.
    pub async fn decide(
        &self,
        thread_id: &ThreadId,
        call_id: ToolCallId,
        resume: ToolCallResume,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<DecisionAck, ControlError> {
        self.ask(thread_id, |reply| {
            ThreadMsg::Decide(DecideRequest {
                run_id: None,
                call_id,
                resume,
                sink,
                follow: None,
                reply,
            })
        })
        .await?
    }

    /// Submits a decision and waits until the run finishes or waits again.
    pub async fn decide_and_wait(
        &self,
        thread_id: &ThreadId,
        call_id: ToolCallId,
        resume: ToolCallResume,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<AgentRunResult, RuntimeError> {
        let (completion, done) = CompletionSink::pair(sink);
        let ack = self
            .decide(thread_id, call_id, resume, Some(completion))
            .await?;
        if ack.duplicate {
            return Err(RuntimeError::Control(ControlError::Unavailable(
                "duplicate decision: it was already applied".into(),
            )));
        }
        wait(
            RunTicket {
                thread_id: thread_id.clone(),
                run_id: ack.run_id,
            },
            done,
        )
        .await
    }

    /// Applies a decision meant for run `run_id` (whichever run waits when
    /// `None`) and follows the run when it executes on from it: one message to
    /// the thread, no store read. The ack says whether the run resumed (or, for
    /// a decision applied before, still executes); then the [`RunEnding`]
    /// resolves when it finishes or waits again.
    pub async fn decide_and_follow(
        &self,
        thread_id: &ThreadId,
        run_id: Option<RunId>,
        call_id: ToolCallId,
        resume: ToolCallResume,
    ) -> Result<(DecisionAck, Option<RunEnding>), ControlError> {
        // The watch is registered by the thread actor, on the run it knows,
        // before it answers and before the run can go on: no end slips by, and
        // nobody else's sink is replaced.
        let watch: Arc<Mutex<Option<RunWatch>>> = Arc::default();
        let follow = {
            let watch = Arc::clone(&watch);
            let watches = Arc::clone(&self.watches);
            FollowRun(Box::new(move |run_id: &RunId| {
                *watch.lock().unwrap_or_else(PoisonError::into_inner) = Some(watches.watch(run_id));
            }))
        };
        let ack = self
            .ask(thread_id, |reply| {
                ThreadMsg::Decide(DecideRequest {
                    run_id,
                    call_id,
                    resume,
                    sink: None,
                    follow: Some(follow),
                    reply,
                })
            })
            .await??;
        let watch = watch.lock().unwrap_or_else(PoisonError::into_inner).take();
        Ok((ack, watch.map(RunEnding)))
    }

    /// Cancels the active or waiting run of a thread.
    pub async fn cancel_thread(&self, thread_id: &ThreadId) -> Result<RunId, ControlError> {
        self.ask(thread_id, |reply| ThreadMsg::Cancel {
            run_id: None,
            reply,
        })
        .await?
    }

    /// Cancels `run_id` on `thread_id`; refused when it is not the thread's active
    /// or waiting run. For callers that already know the thread (a routed cancel),
    /// so no store lookup is needed.
    pub async fn cancel_thread_run(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
    ) -> Result<RunId, ControlError> {
        let requested = Some(run_id.clone());
        self.ask(thread_id, |reply| ThreadMsg::Cancel {
            run_id: requested,
            reply,
        })
        .await?
    }

    /// Cancels a run by id.
    pub async fn cancel_run(&self, run_id: &RunId) -> Result<RunId, ControlError> {
        let record = self
            .deps
            .store
            .load_run(run_id)
            .await
            .map_err(|e| ControlError::Unavailable(e.to_string()))?
            .ok_or_else(|| ControlError::RunNotFound {
                run_id: run_id.clone(),
            })?;
        self.cancel_thread_run(&record.thread_id, run_id).await
    }

    /// Interrupts a thread: cancels its active run if there is one.
    pub async fn interrupt_thread(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Option<RunId>, ControlError> {
        match self.cancel_thread(thread_id).await {
            Ok(run_id) => Ok(Some(run_id)),
            Err(ControlError::NoActiveRun { .. }) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// What the thread is doing now (starts its actor if needed).
    pub async fn thread_status(&self, thread_id: &ThreadId) -> Result<ThreadStatus, ControlError> {
        self.ask(thread_id, |reply| ThreadMsg::Status { reply })
            .await
    }

    /// The thread's latest run if it is not finished.
    pub async fn active_run(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Option<RunRecord>, RuntimeError> {
        let latest = self
            .deps
            .store
            .latest_run(thread_id)
            .await
            .map_err(|e| RuntimeError::Control(ControlError::Unavailable(e.to_string())))?;
        Ok(latest.filter(|r| !r.status.is_terminal()))
    }

    /// Notes that the thread `thread_id` was just created in the store, empty, for
    /// a run about to start: its actor starts from an empty core instead of
    /// reading the thread back (one statement less per new conversation).
    ///
    /// Only where no other node writes threads (the fence does not fence on
    /// load): in a cluster the thread's owner may be another node, and a core
    /// kept here across an ownership change would be stale. There it does
    /// nothing, as it does for a thread that has an actor or a core here already.
    pub async fn seed_new_thread(&self, thread_id: &ThreadId) -> Result<(), ControlError> {
        if !self.deps.fence.fences_on_load() {
            self.region().await?.seed(thread_id);
        }
        Ok(())
    }

    /// Takes `thread`, made for a run about to start and not yet in the store,
    /// so that the run's first checkpoint writes it (one statement and one commit
    /// less per new conversation, decision 0071). `false` when the caller must
    /// create the thread in the store itself: in a cluster (the thread's owner
    /// may be another node), or when the id is known here already. After `true`,
    /// a caller whose run is then refused calls [`forget_new_thread`](Self::forget_new_thread).
    pub async fn adopt_new_thread(&self, thread: &Thread) -> Result<bool, ControlError> {
        if self.deps.fence.fences_on_load() {
            return Ok(false);
        }
        Ok(self.region().await?.adopt_unwritten(thread))
    }

    /// Drops a thread [adopted](Self::adopt_new_thread) for a run that was refused.
    pub async fn forget_new_thread(&self, thread_id: &ThreadId) -> Result<(), ControlError> {
        self.region().await?.take_unwritten(thread_id);
        Ok(())
    }

    /// Number of thread actors alive on this node.
    pub fn live_threads(&self) -> usize {
        self.region.get().map_or(0, ThreadRegion::live_threads)
    }

    /// Number of idle threads without an actor whose core is still in memory.
    pub fn warm_threads(&self) -> usize {
        self.region.get().map_or(0, ThreadRegion::warm_threads)
    }

    /// Number of thread actors on this node the supervisor would restart on failure.
    pub fn supervised_threads(&self) -> usize {
        self.region
            .get()
            .map_or(0, ThreadRegion::supervised_threads)
    }

    /// Whether the thread currently has an actor on this node.
    pub fn is_thread_live(&self, thread_id: &ThreadId) -> bool {
        self.region.get().is_some_and(|r| r.is_live(thread_id))
    }

    /// Whether the thread is idle without an actor, its core still in memory.
    pub fn is_thread_warm(&self, thread_id: &ThreadId) -> bool {
        self.region.get().is_some_and(|r| r.is_warm(thread_id))
    }

    /// Resolves once the thread has no actor (immediately if it has none).
    pub async fn thread_stopped(&self, thread_id: &ThreadId) {
        if let Some(region) = self.region.get() {
            region.stopped(thread_id).await;
        }
    }

    /// Resolves once no run delivered through the mailbox or the decision bus
    /// executes on this node (each finished or waits): what a draining node waits
    /// for before it lets its threads go, so tool calls in flight complete here
    /// instead of running again on the next owner.
    pub async fn activations_settled(&self) {
        self.watches.settled().await;
    }

    /// Whether a thread `select` picks runs a run on this node now (or has input
    /// queued for one): what a shard's hand-off waits on before the next owner
    /// takes its threads.
    pub async fn any_executing(&self, select: impl Fn(&ThreadId) -> bool) -> bool {
        let Some(region) = self.region.get() else {
            return false;
        };
        for thread_id in region.live_thread_ids(select) {
            // Asked only while live: asking a stopped thread would start it again.
            if !region.is_live(&thread_id) {
                continue;
            }
            match self.thread_status(&thread_id).await {
                Ok(status) => {
                    let running = status
                        .run
                        .is_some_and(|run| run.status == crate::contract::RunStatus::Running);
                    if running || status.queued > 0 {
                        return true;
                    }
                }
                // Stopping, or fenced off: nothing more runs on it here.
                Err(_) => continue,
            }
        }
        false
    }

    /// Resolves once no thread has an actor on this node (every run finished or
    /// waits, and every idle actor stopped).
    pub async fn all_stopped(&self) {
        if let Some(region) = self.region.get() {
            region.all_stopped().await;
        }
    }

    /// Resolves once the thread holds no memory on this node: no actor and no warm
    /// core (immediately if it has neither).
    pub async fn thread_passivated(&self, thread_id: &ThreadId) {
        if let Some(region) = self.region.get() {
            region.passivated(thread_id).await;
        }
    }

    /// Drops every thread `select` picks from this node (its shard moved away):
    /// warm cores at once, live actors stopped at their last checkpoint. Resolves
    /// once none of them has an actor here.
    pub async fn evict_threads(&self, select: impl Fn(&ThreadId) -> bool) {
        if let Some(region) = self.region.get() {
            region.evict(select).await;
        }
    }

    /// Installs the transport delegate tools start and reach child runs through
    /// (a node installs its own once it is built around this runtime).
    pub fn set_child_runs(&self, children: Arc<dyn ChildRuns>) {
        self.deps.children.set(Some(children));
    }

    /// Stops every thread actor, and drops the delegation transport (which holds
    /// the node, and so this runtime).
    pub async fn shutdown(&self) {
        if let Some(region) = self.region.get() {
            region.shutdown().await;
        }
        self.deps.children.set(None);
    }
}

async fn wait(
    ticket: RunTicket,
    done: oneshot::Receiver<(TerminationReason, String)>,
) -> Result<AgentRunResult, RuntimeError> {
    let (termination, response) = done.await.map_err(|_| RuntimeError::RunDetached {
        run_id: ticket.run_id.to_string(),
    })?;
    Ok(AgentRunResult {
        thread_id: ticket.thread_id,
        run_id: ticket.run_id,
        termination,
        response,
    })
}

type Completion = oneshot::Sender<(TerminationReason, String)>;

/// The end of a run's activation that a caller follows (see
/// [`AgentRuntime::decide_and_follow`]).
#[derive(Debug)]
pub struct RunEnding(RunWatch);

impl RunEnding {
    /// How the activation ended (finished, or waiting again); `None` when the
    /// runtime went away first.
    pub async fn ended(mut self) -> Option<TerminationReason> {
        self.0.ended().await.map(|end| end.termination)
    }
}

/// Forwards events to an inner sink and reports the activation's `RunFinish`.
struct CompletionSink {
    inner: Option<Arc<dyn EventSink>>,
    done: Mutex<Option<Completion>>,
}

impl CompletionSink {
    fn pair(
        inner: Option<Arc<dyn EventSink>>,
    ) -> (
        Arc<dyn EventSink>,
        oneshot::Receiver<(TerminationReason, String)>,
    ) {
        let (tx, rx) = oneshot::channel();
        let sink = Arc::new(Self {
            inner,
            done: Mutex::new(Some(tx)),
        });
        (sink, rx)
    }
}

impl CompletionSink {
    /// The outcome `event` reports, if it ends the activation.
    fn outcome(event: &AgentEvent) -> Option<(TerminationReason, String)> {
        match event {
            AgentEvent::RunFinish {
                termination,
                result,
                ..
            } => Some((termination.clone(), AgentEvent::extract_response(result))),
            _ => None,
        }
    }

    /// Reports the activation's end, once the inner sink has its `RunFinish`.
    fn complete(&self, outcome: Option<(TerminationReason, String)>) {
        let Some(outcome) = outcome else {
            return;
        };
        let sender = self
            .done
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(sender) = sender {
            let _ = sender.send(outcome);
        }
    }
}

#[async_trait]
impl EventSink for CompletionSink {
    async fn emit(&self, event: AgentEvent) {
        let outcome = Self::outcome(&event);
        if let Some(inner) = &self.inner {
            inner.emit(event).await;
        }
        self.complete(outcome);
    }

    fn try_emit(&self, event: AgentEvent) -> Option<AgentEvent> {
        let outcome = Self::outcome(&event);
        if let Some(inner) = &self.inner
            && let Some(refused) = inner.try_emit(event)
        {
            // Handed back untouched: nothing was reported yet.
            return Some(refused);
        }
        self.complete(outcome);
        None
    }
}
