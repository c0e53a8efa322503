//! Idle threads: actors stop at once, cores stay warm for `idle_passivation`, then the
//! thread passivates and the next message rehydrates it from the store.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use awaken_actors::contract::{
    AgentEvent, Message, TerminationReason, ToolCallResumeMode, ToolExecutionMode,
};
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::store::ThreadRunStore;
use awaken_actors::thread::ThreadConfig;
use serde_json::json;
use support::store::HookedStore;
use support::*;

/// A runtime on a counting store; `approve` puts the echo tool behind an approval.
fn counted_runtime(
    llm: Arc<ScriptedLlm>,
    echo: Arc<Echo>,
    approve: bool,
    config: ThreadConfig,
) -> (AgentRuntime, Arc<HookedStore>) {
    recorded_runtime(llm, echo, approve, config, Arc::default())
}

/// Like `counted_runtime`, with every stamped event going to `hub`.
fn recorded_runtime(
    llm: Arc<ScriptedLlm>,
    echo: Arc<Echo>,
    approve: bool,
    config: ThreadConfig,
    hub: Arc<HubRecorder>,
) -> (AgentRuntime, Arc<HookedStore>) {
    let store = Arc::new(HookedStore::default());
    let mut spec = agent_spec(ToolExecutionMode::Sequential);
    let mut builder = scripted_builder(llm)
        .with_event_hub(hub)
        .with_tool("echo", echo)
        .with_thread_run_store(store.clone())
        .with_thread_config(config);
    if approve {
        spec = spec.with_plugin("approval");
        builder = builder.with_plugin(
            "approval",
            Arc::new(Approval {
                tools: ["echo"].into_iter().collect(),
                mode: ToolCallResumeMode::ReplayToolCall,
            }),
        );
    }
    (builder.with_agent_spec(spec).build().unwrap(), store)
}

fn texts(messages: &[Message]) -> Vec<String> {
    messages.iter().map(Message::text).collect()
}

#[tokio::test]
async fn an_idle_thread_stops_its_actor_and_takes_the_next_message_from_memory() {
    // Turns count from the last user message: every run answers "one".
    let llm = ScriptedLlm::new(vec![Turn::Text("one")]);
    let (rt, store) = counted_runtime(llm.clone(), Arc::default(), false, ThreadConfig::default());
    let thread = tid("t-warm");
    let (first, _) = run_once(&rt, "t-warm", "first").await;
    assert_eq!(first.termination, TerminationReason::NaturalEnd);

    rt.thread_stopped(&thread).await;
    assert!(!rt.is_thread_live(&thread), "an idle thread holds no actor");
    assert!(rt.is_thread_warm(&thread));
    assert_eq!((rt.live_threads(), rt.warm_threads()), (0, 1));
    assert_eq!(store.loads(), 1, "only the first start reads the store");

    let (second, _) = run_once(&rt, "t-warm", "second").await;
    assert_eq!(second.termination, TerminationReason::NaturalEnd);
    assert_eq!(store.loads(), 1, "a warm thread starts without the store");
    let seen = texts(&llm.requests.lock().unwrap()[1].messages);
    assert!(
        seen.ends_with(&["first".into(), "one".into(), "second".into()]),
        "the second run sees the first: {seen:?}"
    );
    let record = store.inner.load_run(&second.run_id).await.unwrap().unwrap();
    assert_eq!(
        record.parent_run_id,
        Some(first.run_id),
        "a continuation names the previous run, also from memory"
    );
}

#[tokio::test]
async fn a_run_checkpoints_at_its_start_after_each_step_that_goes_on_and_at_its_end() {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({"value": 1}))]),
        Turn::Text("done"),
    ]);
    let (rt, store) = counted_runtime(llm, Arc::default(), false, ThreadConfig::default());
    let (result, _) = run_once(&rt, "t-writes", "go").await;
    assert_eq!(result.termination, TerminationReason::NaturalEnd);
    assert_eq!(
        store.checkpoints(),
        3,
        "run start, the tool step's end, and the run's end with its last step"
    );
    let snapshot = store
        .inner
        .load_thread_snapshot(&tid("t-writes"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        texts(&snapshot.messages).last().map(String::as_str),
        Some("done"),
        "the last step is persisted by the run's end"
    );
    let record = store.inner.load_run(&result.run_id).await.unwrap().unwrap();
    assert_eq!(record.termination, Some(TerminationReason::NaturalEnd));
}

#[tokio::test]
async fn warm_threads_passivate_after_idle_passivation() {
    // Turns count from the last user message: every run answers "one".
    let llm = ScriptedLlm::new(vec![Turn::Text("one")]);
    let config = ThreadConfig {
        idle_passivation: Duration::from_millis(20),
        ..ThreadConfig::default()
    };
    let (rt, store) = counted_runtime(llm.clone(), Arc::default(), false, config);
    let thread = tid("t-cold");
    run_once(&rt, "t-cold", "first").await;

    rt.thread_passivated(&thread).await;
    assert!(!rt.is_thread_live(&thread) && !rt.is_thread_warm(&thread));
    assert_eq!((rt.live_threads(), rt.warm_threads()), (0, 0));

    let (second, _) = run_once(&rt, "t-cold", "second").await;
    assert_eq!(second.termination, TerminationReason::NaturalEnd);
    assert_eq!(
        store.loads(),
        2,
        "a passivated thread rehydrates from the store"
    );
    let seen = texts(&llm.requests.lock().unwrap()[1].messages);
    assert!(
        seen.ends_with(&["first".into(), "one".into(), "second".into()]),
        "history kept: {seen:?}"
    );
}

#[tokio::test]
async fn zero_idle_passivation_keeps_nothing_warm() {
    let llm = ScriptedLlm::new(vec![Turn::Text("one")]);
    let config = ThreadConfig {
        idle_passivation: Duration::ZERO,
        ..ThreadConfig::default()
    };
    let (rt, _) = counted_runtime(llm, Arc::default(), false, config);
    let thread = tid("t-zero");
    run_once(&rt, "t-zero", "first").await;
    rt.thread_stopped(&thread).await;
    assert!(!rt.is_thread_warm(&thread));
    assert_eq!(rt.warm_threads(), 0);
}

/// A waiting run resumes from memory when kept warm, from the store by default.
async fn approve_after_suspension(passivate_while_waiting: bool) -> usize {
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({"n": 1}))]),
        Turn::Text("done"),
    ]);
    let echo = Arc::new(Echo::default());
    let config = ThreadConfig {
        passivate_while_waiting,
        ..ThreadConfig::default()
    };
    let hub = Arc::new(HubRecorder::default());
    let (rt, store) = recorded_runtime(llm, echo.clone(), true, config, hub.clone());
    let thread = tid("t-wait");
    let (first, events) = run_once(&rt, "t-wait", "go").await;
    assert_eq!(first.termination, TerminationReason::Suspended);
    rt.thread_stopped(&thread).await;
    assert!(!rt.is_thread_live(&thread), "waiting never holds an actor");
    assert_eq!(rt.is_thread_warm(&thread), !passivate_while_waiting);

    let call = suspended_call(&events);
    let done = rt
        .decide_and_wait(&thread, call, resume("d1", json!(true)), None)
        .await
        .unwrap();
    assert_eq!(done.run_id, first.run_id);
    assert_eq!(done.termination, TerminationReason::NaturalEnd);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1);
    // One seq numbering across both activations, rehydrated or not, so a stream
    // reconnecting with Last-Event-ID neither skips nor repeats an event.
    let seqs: Vec<u64> = hub
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|(run, _)| *run == first.run_id)
        .map(|(_, event)| event.seq)
        .collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    store.loads()
}

#[tokio::test]
async fn a_waiting_run_passivates_at_once_by_default() {
    assert_eq!(approve_after_suspension(true).await, 2);
}

#[tokio::test]
async fn a_waiting_run_kept_warm_resumes_without_the_store() {
    assert_eq!(approve_after_suspension(false).await, 1);
}

#[tokio::test]
async fn a_query_wakes_a_thread_only_for_as_long_as_it_takes() {
    let llm = ScriptedLlm::new(vec![Turn::Text("one")]);
    let (rt, _) = counted_runtime(llm, Arc::default(), false, ThreadConfig::default());
    let thread = tid("t-query");
    run_once(&rt, "t-query", "first").await;
    rt.thread_stopped(&thread).await;

    let status = rt.thread_status(&thread).await.unwrap();
    assert!(status.run.is_none() && !status.busy);
    rt.thread_stopped(&thread).await;
    assert!(rt.is_thread_warm(&thread), "back to warm, not left live");

    let never_ran = tid("t-never-ran");
    rt.thread_status(&never_ran).await.unwrap();
    rt.thread_stopped(&never_ran).await;
    assert_eq!((rt.live_threads(), rt.supervised_threads()), (0, 0));
}

#[tokio::test]
async fn a_thread_seeded_as_new_starts_its_first_run_without_reading_the_store() {
    let llm = ScriptedLlm::new(vec![Turn::Text("hello")]);
    let (rt, store) = counted_runtime(llm, Arc::default(), false, ThreadConfig::default());
    let thread = tid("t-seeded");
    store
        .create_thread(&awaken_actors::contract::Thread::with_id(thread.clone()))
        .await
        .unwrap();
    rt.seed_new_thread(&thread).await.unwrap();
    assert!(rt.is_thread_warm(&thread));

    let (run, _) = run_once(&rt, "t-seeded", "hi").await;
    assert_eq!(run.termination, TerminationReason::NaturalEnd);
    assert_eq!(store.loads(), 0, "the seeded core stood in for the read");
    let snapshot = store
        .inner
        .load_thread_snapshot(&thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        texts(&snapshot.messages),
        ["hi", "hello"],
        "checkpointed as usual"
    );
}

#[tokio::test]
async fn seeding_a_thread_that_has_a_core_here_changes_nothing() {
    let llm = ScriptedLlm::new(vec![Turn::Text("one")]);
    let (rt, store) = counted_runtime(llm.clone(), Arc::default(), false, ThreadConfig::default());
    let thread = tid("t-kept");
    run_once(&rt, "t-kept", "first").await;
    rt.thread_stopped(&thread).await;
    assert!(rt.is_thread_warm(&thread));

    rt.seed_new_thread(&thread).await.unwrap();
    run_once(&rt, "t-kept", "second").await;
    let seen = texts(&llm.requests.lock().unwrap()[1].messages);
    assert!(
        seen.ends_with(&["first".into(), "one".into(), "second".into()]),
        "the warm core with its history was kept: {seen:?}"
    );
    assert_eq!(store.loads(), 1);
}

/// A thread made for a run, with a title and a tenant, as the HTTP API makes one.
fn made_for_a_run(id: &str) -> awaken_actors::contract::Thread {
    let mut thread = awaken_actors::contract::Thread::with_id(tid(id));
    thread.metadata.title = Some("made for its run".to_owned());
    thread
        .metadata
        .custom
        .insert("tenant".to_owned(), json!("acme"));
    thread
}

#[tokio::test]
async fn an_adopted_thread_is_written_by_its_runs_first_checkpoint_and_seen_only_then() {
    let hub = Arc::new(HubRecorder::default());
    let llm = ScriptedLlm::new(vec![Turn::Text("hello")]);
    let (rt, store) = recorded_runtime(
        llm,
        Arc::default(),
        false,
        ThreadConfig::default(),
        hub.clone(),
    );
    let thread = made_for_a_run("t-adopted");
    assert!(rt.adopt_new_thread(&thread).await.unwrap());
    assert!(rt.is_thread_warm(&thread.id));
    assert_eq!(store.inner.load_thread(&thread.id).await.unwrap(), None);

    store.close();
    let run = {
        let rt = rt.clone();
        tokio::spawn(async move { run_once(&rt, "t-adopted", "hi").await })
    };
    store.asked_for(1).await;
    assert!(
        hub.events.lock().unwrap().is_empty(),
        "no event before the run and its thread are recorded"
    );
    assert_eq!(store.inner.load_thread(&thread.id).await.unwrap(), None);
    store.open();
    let (result, _) = run.await.unwrap();
    assert_eq!(result.termination, TerminationReason::NaturalEnd);

    let written = store.inner.load_thread(&thread.id).await.unwrap().unwrap();
    assert_eq!(written.metadata.title, thread.metadata.title);
    assert_eq!(written.metadata.custom, thread.metadata.custom);
    assert_eq!(store.loads(), 0, "the adopted core stood in for the read");
    let events = hub.events.lock().unwrap();
    let seqs: Vec<u64> = events.iter().map(|(_, event)| event.seq).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "in order");
    assert!(matches!(events[0].1.event, AgentEvent::RunStart { .. }));
}

#[tokio::test]
async fn an_adopted_thread_stays_until_its_run_takes_it_or_it_is_forgotten() {
    let config = ThreadConfig {
        idle_passivation: Duration::from_millis(1),
        ..ThreadConfig::default()
    };
    let (rt, store) = counted_runtime(
        ScriptedLlm::new(vec![Turn::Text("hello")]),
        Arc::default(),
        false,
        config,
    );
    let kept = made_for_a_run("t-kept-unwritten");
    let other = tid("t-swept");
    assert!(rt.adopt_new_thread(&kept).await.unwrap());
    rt.seed_new_thread(&other).await.unwrap();
    rt.thread_passivated(&other).await;
    assert!(
        rt.is_thread_warm(&kept.id),
        "only this core knows the thread: the sweep keeps it"
    );
    assert!(
        !rt.adopt_new_thread(&kept).await.unwrap(),
        "an id known here is not adopted twice"
    );

    rt.forget_new_thread(&kept.id).await.unwrap();
    assert!(!rt.is_thread_warm(&kept.id));
    assert_eq!(store.inner.load_thread(&kept.id).await.unwrap(), None);
}

#[tokio::test]
async fn an_adopted_threads_run_that_cannot_write_it_ends_and_leaves_it_to_the_sweep() {
    let hub = Arc::new(HubRecorder::default());
    let config = ThreadConfig {
        idle_passivation: Duration::from_millis(1),
        ..ThreadConfig::default()
    };
    let (rt, store) = recorded_runtime(
        ScriptedLlm::new(vec![Turn::Text("hello")]),
        Arc::default(),
        false,
        config,
        hub.clone(),
    );
    let thread = made_for_a_run("t-never-written");
    assert!(rt.adopt_new_thread(&thread).await.unwrap());
    store.fail_checkpoints(true);
    let (result, _) = run_once(&rt, "t-never-written", "hi").await;
    assert!(
        matches!(result.termination, TerminationReason::Error(_)),
        "{:?}",
        result.termination
    );
    let ends = hub
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, event)| matches!(event.event, AgentEvent::RunFinish { .. }))
        .count();
    assert_eq!(ends, 1, "the listeners still learn how the run ended");
    tokio::time::timeout(Duration::from_secs(10), rt.thread_passivated(&thread.id))
        .await
        .expect("the core of a thread nobody can reach is swept");
    assert_eq!(store.inner.load_thread(&thread.id).await.unwrap(), None);
}

/// The single-node fence, but one that fences on load, as a cluster's does.
struct FencesOnLoad;

impl awaken_actors::thread::FenceSource for FencesOnLoad {
    fn token(&self, _thread_id: &awaken_actors::ThreadId) -> awaken_actors::store::FencingToken {
        awaken_actors::store::FencingToken(1)
    }

    fn fences_on_load(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn where_owners_change_a_new_thread_is_not_seeded() {
    let store = Arc::new(HookedStore::default());
    let rt = scripted_builder(ScriptedLlm::new(vec![Turn::Text("hello")]))
        .with_thread_run_store(store.clone())
        .with_fence_source(Arc::new(FencesOnLoad))
        .with_agent_spec(agent_spec(ToolExecutionMode::Sequential))
        .build()
        .unwrap();
    let thread = tid("t-owned-elsewhere");
    rt.seed_new_thread(&thread).await.unwrap();
    assert!(
        !rt.is_thread_warm(&thread),
        "a core kept here could go stale"
    );
    let made = made_for_a_run("t-made-elsewhere");
    assert!(
        !rt.adopt_new_thread(&made).await.unwrap(),
        "the caller writes the thread: its first run may start on another node"
    );
    assert!(!rt.is_thread_warm(&made.id));
}
