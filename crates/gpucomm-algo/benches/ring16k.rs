//! Generating a 16384-rank ring all_reduce description and rank 0's steps,
//! then checking those steps' structure; and the cost model's prediction
//! for every rank of 16384 (hierarchical and Bruck reduce_scatter). Run with
//! `cargo bench -p gpucomm-algo --bench ring16k`.

use criterion::{Criterion, criterion_group, criterion_main};
use gpucomm_algo::{Algorithm, Collective, CostModel, Problem, Schedule, check_rank, predict};
use std::hint::black_box;

fn ring16k(c: &mut Criterion) {
    let p = Problem::new(Collective::AllReduce, 256 << 20, 16384, 8);
    c.bench_function(
        "ring all_reduce 16384 ranks: describe + rank 0 steps",
        |b| {
            b.iter(|| {
                let s = Schedule::new(black_box(p), Algorithm::Ring).unwrap();
                black_box(s.rank_steps(0).len())
            })
        },
    );
    c.bench_function(
        "ring all_reduce 16384 ranks: describe + rank 0 steps + check_rank",
        |b| {
            b.iter(|| {
                let s = Schedule::new(black_box(p), Algorithm::Ring).unwrap();
                let steps = s.rank_steps(0);
                check_rank(&s, 0, &steps).unwrap();
                black_box(steps.len())
            })
        },
    );
    let rs = Problem::new(Collective::ReduceScatter, 256 << 20, 16384, 8);
    let model = CostModel::default();
    for algorithm in [Algorithm::Hierarchical, Algorithm::Bruck] {
        let s = Schedule::new(rs, algorithm).unwrap();
        c.bench_function(
            &format!("{algorithm:?} reduce_scatter 16384 ranks: predict"),
            |b| b.iter(|| black_box(predict(black_box(&s), &model).time_us)),
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = ring16k
}
criterion_main!(benches);
