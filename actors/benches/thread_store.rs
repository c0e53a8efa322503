//! Thread store hot path: the checkpoints a run writes, on the in-memory store.
//!
//! Checkpoints are built outside the timed section, so the figures are the store's own
//! cost (including dropping the records each write replaces).

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use awaken_actors::contract::{
    Message, RunIdentity, RunOrigin, RunRecord, TerminationReason, Thread,
};
use awaken_actors::state::PersistedState;
use awaken_actors::store::{Checkpoint, FencingToken, InMemoryStore, ThreadRunStore};
use awaken_actors::{AgentId, RunId, ThreadId};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use futures::executor::block_on;

/// A small persistent state, as a thread with a few plugins exports it.
fn state(revision: u64) -> PersistedState {
    let mut state = PersistedState {
        revision,
        ..PersistedState::default()
    };
    for key in ["permissions", "reminders", "usage", "pending_actions"] {
        state.extensions.insert(
            format!("bench.{key}"),
            serde_json::json!({"n": revision}).into(),
        );
    }
    state
}

/// One run as the run loop persists it: the user message with the new run record, the
/// assistant's answer after one step, then the finished record. Three checkpoints on a
/// thread whose log holds `base` messages.
fn one_run(thread_id: &ThreadId, base: u64, n: u64) -> [Checkpoint; 3] {
    let identity = RunIdentity::new(
        thread_id.clone(),
        RunId::new(format!("run-{n}")).unwrap(),
        AgentId::new("bench").unwrap(),
        RunOrigin::User,
    );
    let mut run = RunRecord::new(&identity, 1_700_000_000);
    let checkpoint = |expected, messages: Vec<Message>, run: &RunRecord, revision| Checkpoint {
        thread_id: thread_id.clone(),
        fencing: FencingToken(1),
        expected_message_count: expected,
        new_messages: messages,
        run: run.clone(),
        state: state(revision),
        new_thread: None,
        approvals: Vec::new(),
    };
    let first = checkpoint(base, vec![Message::user("question")], &run, 1);
    run.steps = 1;
    let second = checkpoint(base + 1, vec![Message::assistant("answer")], &run, 2);
    run.finish(TerminationReason::NaturalEnd, 1_700_000_001)
        .unwrap();
    [first, second, checkpoint(base + 2, Vec::new(), &run, 3)]
}

fn write(store: &InMemoryStore, run: [Checkpoint; 3]) {
    for checkpoint in run {
        block_on(store.checkpoint(checkpoint)).unwrap();
    }
}

fn bench(c: &mut Criterion) {
    // Each iteration is a new run on a new thread: its first checkpoint creates the thread.
    let store = InMemoryStore::new();
    let mut n = 0;
    c.bench_function("memory_run_3_checkpoints_new_thread", |b| {
        b.iter_batched(
            || {
                n += 1;
                one_run(&ThreadId::new(format!("thread-{n}")).unwrap(), 0, n)
            },
            |run| write(&store, run),
            BatchSize::SmallInput,
        )
    });

    // Appending to a thread whose log is long (10,000 messages and growing) costs the same.
    let store = InMemoryStore::new();
    let thread_id = ThreadId::new("long").unwrap();
    block_on(store.create_thread(&Thread::with_id(thread_id.clone()))).unwrap();
    let mut count = 0;
    let mut n = 0;
    let mut next_run = || {
        let run = one_run(&thread_id, count, n);
        count += 2;
        n += 1;
        run
    };
    for _ in 0..5_000 {
        write(&store, next_run());
    }
    c.bench_function("memory_run_3_checkpoints_long_log", |b| {
        b.iter_batched(
            &mut next_run,
            |run| write(&store, run),
            BatchSize::SmallInput,
        )
    });

    // Two OS threads writing runs on different threads at once, as on a 2-core node.
    // Each writer builds its runs in small chunks (untimed) and times only its writes;
    // the slower writer's total, per run, is reported: 1 / time is runs per second.
    c.bench_function("memory_run_2_writers", |b| {
        b.iter_custom(|iters| {
            let store = Arc::new(InMemoryStore::new());
            let per_writer = iters.div_ceil(2);
            let writers: Vec<_> = (0..2u64)
                .map(|w| {
                    let store = Arc::clone(&store);
                    std::thread::spawn(move || {
                        let mut timed = Duration::ZERO;
                        let mut done = 0;
                        while done < per_writer {
                            let chunk: Vec<[Checkpoint; 3]> = (done..per_writer.min(done + 64))
                                .map(|i| {
                                    let n = w * per_writer + i;
                                    one_run(&ThreadId::new(format!("thread-{n}")).unwrap(), 0, n)
                                })
                                .collect();
                            done += chunk.len() as u64;
                            let start = Instant::now();
                            for run in chunk {
                                write(&store, run);
                            }
                            timed += start.elapsed();
                        }
                        timed
                    })
                })
                .collect();
            let slowest = writers
                .into_iter()
                .map(|writer| writer.join().unwrap())
                .max()
                .unwrap_or_default();
            black_box(&store);
            // Both writers ran at once: `iters` runs took the slower writer's time.
            slowest
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
