//! A run whose store goes away (a database restart, a failover) waits for it
//! instead of ending in error: its checkpoint is tried again with back-off until
//! `store_outage_timeout`, a write the lost connection may have landed is not
//! written twice, and the run's events say it waits and when it goes on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use awaken_actors::contract::{AgentEvent, Role, TerminationReason, ToolExecutionMode};
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::store::{MessageQuery, ThreadRunStore};
use awaken_actors::thread::{STORE_UNAVAILABLE_ACTIVITY, ThreadConfig};
use serde_json::json;
use support::store::{HookedStore, Outage};
use support::*;

/// A runtime on a store a test can take away; the agent calls `echo`, then answers.
fn outage_runtime(config: ThreadConfig) -> (AgentRuntime, Arc<HookedStore>, Arc<Echo>) {
    let store = Arc::new(HookedStore::default());
    let echo = Arc::new(Echo::default());
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", json!({"say": "hi"}))]),
        Turn::Text("done"),
    ]);
    let runtime = scripted_builder(llm)
        .with_tool("echo", echo.clone())
        .with_thread_run_store(store.clone())
        .with_thread_config(config)
        .with_agent_spec(agent_spec(ToolExecutionMode::Sequential))
        .build()
        .unwrap();
    (runtime, store, echo)
}

/// The `status` of each store-unavailable activity among `events`, in order.
fn outage_statuses(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ActivitySnapshot {
                activity_type,
                content,
                ..
            } if activity_type == STORE_UNAVAILABLE_ACTIVITY => {
                Some(content["status"].as_str().unwrap().to_owned())
            }
            _ => None,
        })
        .collect()
}

async fn waits_out(outage: Outage) {
    let (runtime, store, echo) = outage_runtime(ThreadConfig::default());
    store.outage(Some(outage));
    let run = tokio::spawn(async move {
        let ran = run_once(&runtime, "t-outage", "hi").await;
        (ran, runtime)
    });
    // The first checkpoint and two more tries met the outage; then it ends.
    store.asked_for(3).await;
    store.outage(None);
    let ((result, events), _runtime) = run.await.unwrap();

    assert_eq!(
        result.termination,
        TerminationReason::NaturalEnd,
        "{events:?}"
    );
    assert_eq!(result.response, "done");
    assert_eq!(outage_statuses(&events), ["waiting", "recovered"]);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1, "the tool ran once");
    let page = store
        .inner
        .load_messages(&tid("t-outage"), &MessageQuery::default())
        .await
        .unwrap();
    let roles: Vec<Role> = page.messages.iter().map(|m| m.message.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant],
        "each message written once: {page:?}"
    );
    let run = store.inner.load_run(&result.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, awaken_actors::contract::RunStatus::Done);
}

#[tokio::test]
async fn a_run_waits_for_an_unreachable_store_and_goes_on() {
    waits_out(Outage::Unreachable).await;
}

#[tokio::test]
async fn a_checkpoint_the_lost_connection_landed_is_not_written_twice() {
    waits_out(Outage::LostAfterCommit).await;
}

#[tokio::test]
async fn a_store_away_past_the_outage_timeout_ends_the_run_with_that_cause() {
    let config = ThreadConfig {
        store_outage_timeout: Duration::from_millis(300),
        ..ThreadConfig::default()
    };
    let (runtime, store, _echo) = outage_runtime(config);
    store.outage(Some(Outage::Unreachable));
    let (result, _events) = run_once(&runtime, "t-gone", "hi").await;
    let TerminationReason::Error(message) = &result.termination else {
        panic!("{:?}", result.termination);
    };
    assert!(message.contains("store.outage_timeout"), "{message}");
    assert!(message.contains("connection refused"), "{message}");
    store.outage(None);
    assert_eq!(store.inner.load_thread(&tid("t-gone")).await.unwrap(), None);
}
