//! The reduction kernels against a scalar loop that cannot be vectorized
//! (every element goes through `black_box`): `cargo bench -p gpucomm --bench reduce`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpucomm::{ReduceOp, f16, reduce3};
use std::hint::black_box;

fn scalar_sum_f32(dst: &mut [f32], a: &[f32], b: &[f32]) {
    for i in 0..dst.len() {
        dst[i] = black_box(a[i]) + b[i];
    }
}

fn bench(c: &mut Criterion) {
    let n = 64 * 1024; // 256 KiB of f32 per operand: in cache, so compute-bound
    let a = vec![1.5f32; n];
    let b = vec![2.5f32; n];
    let mut d = vec![0f32; n];
    let mut g = c.benchmark_group("reduce_f32_256KiB");
    g.throughput(Throughput::Bytes((n * 4) as u64));
    g.bench_function("kernel_sum", |x| {
        x.iter(|| {
            reduce3(
                black_box(&mut d),
                black_box(&a),
                black_box(&b),
                ReduceOp::Sum,
            )
        })
    });
    g.bench_function("scalar_sum", |x| {
        x.iter(|| scalar_sum_f32(black_box(&mut d), black_box(&a), black_box(&b)))
    });
    g.bench_function("kernel_max", |x| {
        x.iter(|| {
            reduce3(
                black_box(&mut d),
                black_box(&a),
                black_box(&b),
                ReduceOp::Max,
            )
        })
    });
    g.finish();
    let ai: Vec<i32> = (0..n as i32).collect();
    let mut di = vec![0i32; n];
    let mut g = c.benchmark_group("reduce_i32_256KiB");
    g.throughput(Throughput::Bytes((n * 4) as u64));
    g.bench_function("kernel_sum", |x| {
        x.iter(|| {
            reduce3(
                black_box(&mut di),
                black_box(&ai),
                black_box(&ai),
                ReduceOp::Sum,
            )
        })
    });
    g.finish();
    let ah = vec![f16::from_f32(1.5); n];
    let mut dh = vec![f16::ZERO; n];
    let mut g = c.benchmark_group("reduce_f16_128KiB");
    g.throughput(Throughput::Bytes((n * 2) as u64));
    g.bench_function("kernel_sum", |x| {
        x.iter(|| {
            reduce3(
                black_box(&mut dh),
                black_box(&ah),
                black_box(&ah),
                ReduceOp::Sum,
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
