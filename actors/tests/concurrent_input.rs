//! Inputs that reach one thread close together: each new input cancels the run
//! before it, and every run ends — none is left `running` without an actor
//! driving it, whatever the thread was doing when the inputs arrived.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;
use std::time::Duration;

use awaken_actors::RunId;
use awaken_actors::contract::{RunStatus, TerminationReason, ToolExecutionMode};
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::thread::{RunRequest, ThreadConfig};
use support::store::HookedStore;
use support::*;

fn gated_runtime(store: Arc<HookedStore>) -> AgentRuntime {
    scripted_builder(ScriptedLlm::new(vec![Turn::Text("answer")]))
        .with_thread_run_store(store)
        .with_thread_config(ThreadConfig::default())
        .with_agent_spec(agent_spec(ToolExecutionMode::Sequential))
        .build()
        .unwrap()
}

/// Starts one run per text on `thread` while the store holds every checkpoint
/// (so the thread's first segment is still in flight when the others arrive),
/// then lets the store go and returns how each run ended.
async fn burst(
    rt: &AgentRuntime,
    store: &HookedStore,
    thread: &str,
    texts: &[&str],
) -> Vec<(RunId, TerminationReason)> {
    store.close();
    let mut watches = Vec::new();
    for text in texts {
        let run_id = RunId::generate();
        let watch = rt.watch_run(&run_id);
        rt.start(
            RunRequest::new(tid(thread), user(text)).with_run_id(run_id.clone()),
            None,
        )
        .await
        .unwrap();
        watches.push((run_id, watch));
    }
    store.open();
    let mut ended = Vec::new();
    for (run_id, mut watch) in watches {
        let end = tokio::time::timeout(Duration::from_secs(10), watch.ended())
            .await
            .unwrap_or_else(|_| panic!("run {run_id} never ended"))
            .expect("the runtime is alive");
        ended.push((run_id, end.termination));
    }
    ended
}

#[tokio::test]
async fn inputs_arriving_during_a_segment_cancel_in_turn_and_every_run_ends() {
    let store = Arc::new(HookedStore::default());
    let rt = gated_runtime(store.clone());
    let ended = burst(
        &rt,
        &store,
        "t-burst",
        &["one", "two", "three", "four", "five"],
    )
    .await;
    let (last, earlier) = ended.split_last().unwrap();
    assert_eq!(last.1, TerminationReason::NaturalEnd);
    for (run_id, termination) in earlier {
        assert_eq!(*termination, TerminationReason::Cancelled, "run {run_id}");
    }
    let mut parent = None;
    for (run_id, termination) in &ended {
        let record = rt.store().load_run(run_id).await.unwrap().unwrap();
        assert_eq!(
            record.status,
            RunStatus::Done,
            "run {run_id} is stored as ended"
        );
        assert_eq!(record.termination.as_ref(), Some(termination));
        if let Some(parent) = parent {
            assert_eq!(
                record.parent_run_id,
                Some(parent),
                "each run continues the one it cancelled"
            );
        }
        parent = Some(run_id.clone());
    }
    let status = rt.thread_status(&tid("t-burst")).await.unwrap();
    assert!(status.run.is_none(), "no run is left active: {status:?}");
}

#[tokio::test]
async fn a_repeated_activation_of_a_run_still_queued_does_not_start_it_twice() {
    let store = Arc::new(HookedStore::default());
    let rt = gated_runtime(store.clone());
    let thread = tid("t-repeat");
    store.close();
    let first = RunId::generate();
    rt.start(
        RunRequest::new(thread.clone(), user("one")).with_run_id(first.clone()),
        None,
    )
    .await
    .unwrap();
    let second = RunId::generate();
    let mut watch = rt.watch_run(&second);
    let request = RunRequest::new(thread.clone(), user("two"));
    let activations = [
        rt.activate(&thread, second.clone(), Some(request.clone()), None)
            .await
            .unwrap(),
        rt.activate(&thread, second.clone(), Some(request), None)
            .await
            .unwrap(),
    ];
    assert_eq!(activations[0], awaken_actors::thread::Activation::Started);
    assert_eq!(activations[1], awaken_actors::thread::Activation::Running);
    store.open();
    let end = tokio::time::timeout(Duration::from_secs(10), watch.ended())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(end.termination, TerminationReason::NaturalEnd);
    let runs = rt
        .store()
        .list_runs(&awaken_actors::store::RunQuery {
            thread_id: Some(thread),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(runs.runs.len(), 2, "one run per distinct run id: {runs:?}");
}
