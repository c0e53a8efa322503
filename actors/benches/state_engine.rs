//! State engine hot paths: snapshot, commit, export.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::hint::black_box;

use awaken_actors::state::{StateCommand, StateStore};
use common::{K0, K1, K2, K3};
use criterion::{Criterion, criterion_group, criterion_main};

fn store() -> StateStore {
    let mut store = StateStore::new();
    common::register_store(&mut store);
    store
}

fn bench(c: &mut Criterion) {
    let store = store();
    c.bench_function("snapshot_64_keys", |b| {
        b.iter(|| black_box(store.snapshot()))
    });

    let mut store = self::store();
    c.bench_function("commit_4_updates_64_keys", |b| {
        b.iter(|| {
            let mut cmd = StateCommand::new();
            cmd.update::<K0>(1)
                .update::<K1>(1)
                .update::<K2>(1)
                .update::<K3>(1);
            black_box(store.commit(cmd).unwrap());
        })
    });

    let mut store = self::store();
    // A snapshot of the current revision is always alive, as when hooks or tools hold
    // one: every commit takes the copy-on-write path.
    let mut live = store.snapshot();
    c.bench_function("commit_with_live_snapshot_64_keys", |b| {
        b.iter(|| {
            let mut cmd = StateCommand::new();
            cmd.update::<K0>(1);
            black_box(store.commit(cmd).unwrap());
            live = store.snapshot();
        })
    });
    black_box(live);

    let store = self::store();
    c.bench_function("export_64_keys", |b| {
        b.iter(|| black_box(store.export().unwrap()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
