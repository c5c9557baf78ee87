//! Benchmarks of the in-process reference backend: the floor of the lock layer's own cost.
//! Run with `cargo bench --bench memory`.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use distlock::core::{DistributedLock, MemoryLock};

fn memory(c: &mut Criterion) {
    let rt = distlock_conformance::bench::runtime();
    let store = MemoryLock::new();
    distlock_conformance::bench::bench_backend(c, &rt, "memory", move || {
        let store = store.clone();
        async move { Arc::new(store) as Arc<dyn DistributedLock> }
    });
}

criterion_group! {
    name = benches;
    config = distlock_conformance::bench::quick_criterion();
    targets = memory
}
criterion_main!(benches);
