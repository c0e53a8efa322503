//! Owners change in a cluster: a new owner raises a thread's fence before it reads,
//! and from then on the old owner can neither write nor reload the thread.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use awaken_actors::ThreadId;
use awaken_actors::contract::{TerminationReason, ToolExecutionMode};
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::store::{FencingToken, InMemoryStore, MessageQuery, ThreadRunStore};
use awaken_actors::thread::{FenceSource, RunRequest};
use support::*;

/// A node's lease token, set by the test.
struct LeaseFence(AtomicU64);

impl FenceSource for LeaseFence {
    fn token(&self, _thread_id: &ThreadId) -> FencingToken {
        FencingToken(self.0.load(Ordering::SeqCst))
    }

    fn fences_on_load(&self) -> bool {
        true
    }
}

fn node(store: &Arc<InMemoryStore>, token: u64) -> AgentRuntime {
    scripted_builder(ScriptedLlm::new(vec![Turn::Text("one")]))
        .with_thread_run_store(store.clone())
        .with_fence_source(Arc::new(LeaseFence(AtomicU64::new(token))))
        .with_agent_spec(agent_spec(ToolExecutionMode::Sequential))
        .build()
        .unwrap()
}

async fn message_count(store: &InMemoryStore, thread: &ThreadId) -> usize {
    store
        .load_messages(thread, &MessageQuery::default())
        .await
        .unwrap()
        .messages
        .len()
}

/// A run on a node that no longer owns the thread: refused, whether it fails to
/// start or ends with an error.
async fn refused(rt: &AgentRuntime, thread: &str) -> bool {
    let sink = Arc::new(Collector::default());
    match rt
        .run(RunRequest::new(tid(thread), user("stale")), sink)
        .await
    {
        Err(_) => true,
        Ok(result) => matches!(result.termination, TerminationReason::Error(_)),
    }
}

#[tokio::test]
async fn a_new_owner_fences_out_the_old_one() {
    let store = Arc::new(InMemoryStore::default());
    let thread = tid("t-moved");
    let old = node(&store, 5);
    let (first, _) = run_once(&old, "t-moved", "first").await;
    assert_eq!(first.termination, TerminationReason::NaturalEnd);
    let fence = |s: Arc<InMemoryStore>, t: ThreadId| async move {
        s.load_thread_snapshot(&t).await.unwrap().unwrap().fence
    };
    assert_eq!(fence(store.clone(), thread.clone()).await, FencingToken(5));
    old.thread_stopped(&thread).await;
    assert!(
        old.is_thread_warm(&thread),
        "the old owner still holds the core"
    );

    let new = node(&store, 7);
    let (second, _) = run_once(&new, "t-moved", "second").await;
    assert_eq!(second.termination, TerminationReason::NaturalEnd);
    assert_eq!(fence(store.clone(), thread.clone()).await, FencingToken(7));
    assert_eq!(message_count(&store, &thread).await, 4);

    assert!(refused(&old, "t-moved").await, "a stale core cannot write");
    assert_eq!(message_count(&store, &thread).await, 4, "nothing changed");
    old.thread_stopped(&thread).await;
    assert_eq!(old.supervised_threads(), 0, "a fenced actor forgets itself");

    old.evict_threads(|t| t == &thread).await;
    assert!(!old.is_thread_warm(&thread) && !old.is_thread_live(&thread));
    assert!(refused(&old, "t-moved").await, "nor reload the thread");
    assert_eq!(message_count(&store, &thread).await, 4, "nothing changed");
}

#[tokio::test]
async fn eviction_drops_only_the_selected_threads() {
    let store = Arc::new(InMemoryStore::default());
    let rt = node(&store, 1);
    for thread in ["t-a", "t-b"] {
        run_once(&rt, thread, "hi").await;
        rt.thread_stopped(&tid(thread)).await;
    }
    assert_eq!(rt.warm_threads(), 2);
    rt.evict_threads(|t| t.as_str() == "t-a").await;
    assert!(!rt.is_thread_warm(&tid("t-a")));
    assert!(rt.is_thread_warm(&tid("t-b")));
    let (again, _) = run_once(&rt, "t-a", "back").await;
    assert_eq!(again.termination, TerminationReason::NaturalEnd);
    assert_eq!(
        message_count(&store, &tid("t-a")).await,
        4,
        "rehydrated from the store"
    );
}
