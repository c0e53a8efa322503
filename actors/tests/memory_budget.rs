//! Warm thread cores keep within the node's memory budget: past the warm-threads
//! share the least recently used go, and a thread whose core went continues from
//! the store exactly as if it had stayed (decision 0089).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::sync::Arc;

use awaken_actors::contract::{Message, TerminationReason, ToolExecutionMode};
use awaken_actors::memory::{MemoryBudget, NodeMemory, Share};
use awaken_actors::thread::ThreadConfig;
use support::store::HookedStore;
use support::*;

/// Each thread's first message: cores this big fill the minimum budget's
/// warm share after about fifty threads.
const MESSAGE_BYTES: usize = 200_000;

#[tokio::test]
async fn warm_cores_past_their_share_go_oldest_first_and_their_threads_continue_from_the_store() {
    let llm = ScriptedLlm::new(vec![Turn::Text("one")]);
    let store = Arc::new(HookedStore::default());
    let memory = Arc::new(NodeMemory::new(
        MemoryBudget::new(MemoryBudget::MINIMUM).unwrap(),
    ));
    let rt = scripted_builder(llm.clone())
        .with_thread_run_store(store.clone())
        .with_thread_config(ThreadConfig::default())
        .with_memory(Arc::clone(&memory))
        .with_agent_spec(agent_spec(ToolExecutionMode::Sequential))
        .build()
        .unwrap();
    let threads = 120;
    for n in 0..threads {
        let name = format!("t-{n}");
        let text = format!("{n} {}", "x".repeat(MESSAGE_BYTES));
        let (result, _) = run_once(&rt, &name, &text).await;
        assert_eq!(result.termination, TerminationReason::NaturalEnd);
        rt.thread_stopped(&tid(&name)).await;
    }

    let meter = memory.meter(Share::WarmThreads);
    let warm = rt.warm_threads();
    assert!(
        meter.bytes() <= meter.limit(),
        "{} > {}",
        meter.bytes(),
        meter.limit()
    );
    assert!(warm > 0 && warm < threads, "{warm} warm of {threads}");
    assert_eq!(meter.evictions(), (threads - warm) as u64);
    assert!(!rt.is_thread_warm(&tid("t-0")), "the oldest went first");
    assert!(rt.is_thread_warm(&tid(&format!("t-{}", threads - 1))));

    // An evicted thread reads its history back; a warm one does not.
    let loads = store.loads();
    let (again, _) = run_once(&rt, "t-0", "again").await;
    assert_eq!(again.termination, TerminationReason::NaturalEnd);
    assert_eq!(store.loads(), loads + 1, "the evicted core is read back");
    let seen: Vec<String> = llm.requests.lock().unwrap()[threads]
        .messages
        .iter()
        .map(Message::text)
        .collect();
    assert!(seen.len() >= 3, "{} messages", seen.len());
    assert!(
        seen[seen.len() - 3].starts_with("0 xxx"),
        "the first run's input"
    );
    assert_eq!(&seen[seen.len() - 2..], ["one", "again"]);

    let newest = format!("t-{}", threads - 1);
    run_once(&rt, &newest, "again").await;
    assert_eq!(store.loads(), loads + 1, "a warm core needs no read");
}
