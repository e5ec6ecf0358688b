//! Simulator speed: the flow engine on a coupled network (incremental
//! max-min against refilling whole components) and a full-rank ring
//! all_reduce on DGX H100 nodes. Run with
//! `cargo bench -p gpucomm-sim --bench engine`; the figures for the
//! `gpucomm sim` command itself are in BENCHMARKS.md.

use criterion::{Criterion, criterion_group, criterion_main};
use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
use gpucomm_sim::SimTime;
use gpucomm_sim::engine::{FlowNet, Output};
use gpucomm_sim::exec::{ExecConfig, run_schedule};
use gpucomm_sim::fabric::Fabric;
use gpucomm_sim::machine::{Engine, Machine};
use std::hint::black_box;

/// `n` nodes with an up and a down link each, `ch` channels; channel `c` of
/// node `g` sends to `(g + c + 1) % n`, crossing a per-channel rail link
/// when it wraps. Each flow, when delivered, is followed by the next one of
/// its (node, channel) until `steps` have run: a ring-like, fully coupled
/// workload whose completions spread in time.
fn coupled(n: u32, ch: u32, steps: u32, full: bool) -> u64 {
    let mut caps = vec![8.0; 2 * n as usize];
    caps.extend(std::iter::repeat_n(1.5, ch as usize));
    let mut net = FlowNet::new(&caps);
    net.set_full_recompute(full);
    let route = |g: u32, c: u32| {
        let dst = (g + c + 1) % n;
        let mut links = vec![2 * g];
        if dst < g {
            links.push(2 * n + c);
        }
        links.push(2 * dst + 1);
        links
    };
    let size = |g: u32, c: u32, s: u32| 1e5 * f64::from(1 + (g * 13 + c * 5 + s) % 9);
    let mut step = vec![0u32; (n * ch) as usize];
    for g in 0..n {
        for c in 0..ch {
            net.start_flow(
                &route(g, c),
                size(g, c, 0),
                SimTime::from_ns(500.0),
                u64::from(g * ch + c),
            );
        }
    }
    let mut out = Vec::new();
    while net.next_batch(&mut out).is_some() {
        for &o in &out {
            if let Output::Delivered(tag) = o {
                let (g, c) = (tag as u32 / ch, tag as u32 % ch);
                step[tag as usize] += 1;
                let s = step[tag as usize];
                if s < steps {
                    net.start_flow(&route(g, c), size(g, c, s), SimTime::from_ns(500.0), tag);
                }
            }
        }
    }
    net.stats().paths_recomputed
}

fn engine(c: &mut Criterion) {
    for full in [false, true] {
        let name = if full {
            "whole components"
        } else {
            "incremental"
        };
        c.bench_function(
            &format!("coupled 64 nodes x 8 channels, 16 steps: {name}"),
            |b| b.iter(|| black_box(coupled(black_box(64), 8, 16, full))),
        );
    }
    let m = Machine::preset("dgx-h100").unwrap();
    let f = m.fabric(Engine::Nccl, 4).unwrap();
    let p = Problem::new(
        Collective::AllReduce,
        16 << 20,
        f.ranks(),
        f.ranks_per_node(),
    );
    let s = Schedule::new(p, Algorithm::Ring).unwrap().with_channels(8);
    let cfg = ExecConfig {
        symmetry: false,
        ..ExecConfig::default()
    };
    c.bench_function("ring all_reduce 64 MiB, 4 x dgx-h100, every rank", |b| {
        b.iter(|| black_box(run_schedule(&s, &f, &cfg).unwrap().time))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = engine
}
criterion_main!(benches);
