//! Criterion benchmark of one client's local epoch (MLP 784-200-10, 6,000 samples, batch 32),
//! reported as samples per second on one intra-op thread (the engine's setting per worker).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fl_bench::MlpWorkload;

fn local_epoch(c: &mut Criterion) {
    fl_core::tch::set_num_threads(1);
    let w = MlpWorkload::new(6000);
    let mut group = c.benchmark_group("local_training");
    group.throughput(Throughput::Elements(w.samples as u64));
    group.sample_size(10);
    group.bench_function("mlp_784_200_10_epoch_6000", |b| {
        let mut seed = 0;
        b.iter(|| {
            seed += 1;
            w.epoch(seed)
        })
    });
    group.finish();
}

criterion_group!(benches, local_epoch);
criterion_main!(benches);
