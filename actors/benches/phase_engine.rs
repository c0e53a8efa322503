//! One phase with eight non-conflicting hooks on a 64-key state: GATHER + commit.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::collections::BTreeSet;
use std::hint::black_box;

use awaken_actors::Phase;
use awaken_actors::phase::{PhaseContext, PhaseRuntime};
use awaken_actors::plugin::{ExecutionEnv, PluginEntry};
use awaken_actors::state::StateStore;
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let env = ExecutionEnv::from_plugins(
        [PluginEntry::new("bench", common::plugin())],
        &BTreeSet::new(),
    )
    .unwrap();
    let mut store = StateStore::new();
    env.install(&mut store).unwrap();
    let runtime = PhaseRuntime::new();
    let ctx = PhaseContext::test_default().with_phase(Phase::StepStart);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();

    c.bench_function("phase_8_hooks_64_keys", |b| {
        b.iter(|| {
            let report = rt
                .block_on(runtime.run_phase(&env, &mut store, ctx.clone()))
                .unwrap();
            black_box(report);
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
