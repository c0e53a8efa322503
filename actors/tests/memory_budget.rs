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

/// Each gated run's input: a few of them fill the minimum budget's admitted
/// share.
const INPUT_BYTES: usize = 3_000_000;

/// Polls `done` until it holds (fails the test after 10 s).
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn active_runs_past_the_admitted_share_leave_queued_work_queued_until_they_give_memory_back()
{
    use awaken_actors::contract::RunDispatchStatus;
    use awaken_actors::mailbox::{
        Claimant, InMemoryMailboxStore, InMemoryRunInbox, MailboxConfig, MailboxStore,
        MailboxWorker, SubmitOptions, submit,
    };
    use awaken_actors::thread::RunRequest;

    let memory = Arc::new(NodeMemory::new(
        MemoryBudget::new(MemoryBudget::MINIMUM).unwrap(),
    ));
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("gate", serde_json::json!({}))]),
        Turn::Text("done"),
    ]);
    let gate = Arc::new(Gate::default());
    let rt = scripted_builder(llm)
        .with_memory(Arc::clone(&memory))
        .with_tool("gate", gate.clone())
        .with_agent_spec(agent_spec(ToolExecutionMode::Sequential))
        .build()
        .unwrap();
    // Sweeps too rare to matter: claims resume because memory came back.
    let config = MailboxConfig {
        sweep_interval: std::time::Duration::from_secs(600),
        ..MailboxConfig::default()
    };
    let mailbox = Arc::new(InMemoryMailboxStore::new(config.clone()));
    let inbox = Arc::new(InMemoryRunInbox::with_memory(Arc::clone(&memory)));
    let _worker = MailboxWorker::start(
        rt.clone(),
        mailbox.clone(),
        inbox.clone(),
        config,
        Claimant::single_node("node-1"),
    )
    .await
    .unwrap();
    let admitted = memory.meter(Share::Admitted);
    let request = |n: usize| {
        let text = format!("{n} {}", "x".repeat(INPUT_BYTES));
        RunRequest::new(tid(&format!("big-{n}")), vec![Message::user(text)])
    };

    let mut dispatches = Vec::new();
    while memory.may_claim() {
        assert!(dispatches.len() < 10, "active runs never filled the share");
        let started = gate.started.notified();
        let queued = submit(
            &*mailbox,
            &*inbox,
            request(dispatches.len()),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
        started.await;
        dispatches.push(queued);
    }
    let active = dispatches.len();
    assert!(active >= 2, "{active} runs filled the share");
    assert!(memory.active_bytes() > admitted.limit() - 64 * 1024);
    assert!(memory.admit(1).is_err(), "the node takes no new work");

    let later = submit(
        &*mailbox,
        &*inbox,
        request(active),
        SubmitOptions::default(),
    )
    .await
    .unwrap();
    eventually("the claim is put off", || {
        rt.metrics().claims_deferred() > 0
    })
    .await;
    let waiting = mailbox.load_dispatch(&later.dispatch_id).await.unwrap();
    assert_eq!(waiting.unwrap().status, RunDispatchStatus::Queued);

    let started = gate.started.notified();
    tokio::pin!(started);
    started.as_mut().enable();
    gate.release.notify_waiters();
    tokio::time::timeout(std::time::Duration::from_secs(10), started)
        .await
        .expect("the queued run starts once the active ones ended");
    gate.release.notify_waiters();
    dispatches.push(later);
    for dispatch in &dispatches {
        let id = dispatch.dispatch_id.clone();
        let mailbox = mailbox.clone();
        eventually("every run ends", move || {
            futures::executor::block_on(mailbox.load_dispatch(&id))
                .unwrap()
                .is_some_and(|d| d.status == RunDispatchStatus::Acked)
        })
        .await;
    }
    for n in 0..=active {
        rt.thread_stopped(&tid(&format!("big-{n}"))).await;
    }
    eventually("the admitted share is empty again", || {
        admitted.bytes() == 0 && inbox.is_empty()
    })
    .await;
    assert_eq!(memory.active_bytes(), 0);
}

#[tokio::test]
async fn a_flood_of_threads_evicts_a_waiting_runs_warm_core_and_its_decision_still_finishes_it() {
    use awaken_actors::contract::ToolCallResumeMode;

    let memory = Arc::new(NodeMemory::new(
        MemoryBudget::new(MemoryBudget::MINIMUM).unwrap(),
    ));
    let llm = ScriptedLlm::new(vec![
        Turn::Calls(vec![("echo", serde_json::json!({"x": 1}))]),
        Turn::Text("approved"),
    ]);
    let echo = Arc::new(Echo::default());
    let approval = Approval {
        tools: std::collections::BTreeSet::from(["echo"]),
        mode: ToolCallResumeMode::ReplayToolCall,
    };
    // Waiting runs stay warm: the flood has cores to push out.
    let rt = scripted_builder(llm)
        .with_memory(Arc::clone(&memory))
        .with_thread_config(ThreadConfig {
            passivate_while_waiting: false,
            ..ThreadConfig::default()
        })
        .with_tool("echo", echo.clone())
        .with_plugin("approval", Arc::new(approval))
        .with_agent_spec(agent_spec(ToolExecutionMode::Sequential).with_plugin("approval"))
        .build()
        .unwrap();
    let tenant = tid("tenant-a");
    let (waiting, events) = run_once(&rt, "tenant-a", "mine").await;
    assert_eq!(waiting.termination, TerminationReason::Suspended);
    rt.thread_stopped(&tenant).await;
    assert!(rt.is_thread_warm(&tenant));

    for n in 0..120 {
        let name = format!("tenant-b-{n}");
        let text = format!("{n} {}", "x".repeat(MESSAGE_BYTES));
        run_once(&rt, &name, &text).await;
        rt.thread_stopped(&tid(&name)).await;
    }
    assert!(!rt.is_thread_warm(&tenant), "the oldest core went");
    assert!(memory.meter(Share::WarmThreads).evictions() > 0);

    let done = rt
        .decide_and_wait(
            &tenant,
            suspended_call(&events),
            resume("d-a", serde_json::json!(true)),
            None,
        )
        .await
        .unwrap();
    assert_eq!(done.run_id, waiting.run_id);
    assert_eq!(done.termination, TerminationReason::NaturalEnd);
    let snapshot = rt
        .store()
        .load_thread_snapshot(&tenant)
        .await
        .unwrap()
        .unwrap();
    let texts: Vec<String> = snapshot.messages.iter().map(Message::text).collect();
    assert_eq!(texts.first().map(String::as_str), Some("mine"));
    assert_eq!(texts.last().map(String::as_str), Some("approved"));
    assert_eq!(echo.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}
