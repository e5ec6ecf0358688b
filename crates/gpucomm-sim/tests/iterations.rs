//! Back-to-back iterations (`CollOptions::iterations`, nccl-tests' `-n`):
//! every rank starts its next operation when it has finished its own
//! previous one (docs/sim.md, "Back-to-back iterations").

mod common;

use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
use gpucomm_sim::collective::{CollOptions, CollResult, SIMULATED_ITERATIONS, simulate};
use gpucomm_sim::exec::{ExecConfig, Prepared};
use gpucomm_sim::fabric::Fabric;
use gpucomm_sim::model::{Protocol, nccl_overheads};

fn run(coll: Collective, bytes: u64, iterations: u32) -> CollResult {
    let f = common::fabric("dgx-h100", 4);
    let opts = CollOptions {
        iterations,
        ..Default::default()
    };
    simulate(&f, coll, bytes, &opts).unwrap()
}

#[test]
fn a_chain_overlaps_its_iterations_down_to_about_one_launch_per_iteration() {
    // 32 ranks on a chain, 8 bytes: one operation runs the whole chain
    // (31 hops after the launch); in a loop each rank starts the next
    // iteration as soon as its own part is done, so an iteration costs a
    // rank its launch and its own hop, not the chain.
    let launch = nccl_overheads("ring", Protocol::Ll).launch;
    let coll = Collective::Broadcast { root: 0 };
    let one = run(coll, 8, 1);
    let looped = run(coll, 8, 20);
    assert_eq!(one.protocol, Protocol::Ll);
    assert!(
        looped.time.as_us() < 0.6 * one.time.as_us(),
        "loop {} single {}",
        looped.time,
        one.time
    );
    assert!(looped.time > launch, "an iteration still costs its launch");
    // The tuner's pick and the completion of one operation are unchanged.
    assert_eq!(looped.completion, one.completion);
    assert_eq!(looped.algorithm, one.algorithm);
}

#[test]
fn symmetric_collectives_hardly_move_in_a_loop() {
    // A ring's ranks finish together: the next iteration starts together.
    for (coll, bytes) in [
        (Collective::AllGather, 2 << 20),
        (Collective::ReduceScatter, 32 << 10),
        (Collective::AllReduce, 8),
    ] {
        let one = run(coll, bytes, 1).time.as_us();
        let looped = run(coll, bytes, 20).time.as_us();
        assert!(
            (looped / one - 1.0).abs() < 0.02,
            "{}: loop {looped} single {one}",
            coll.name()
        );
    }
}

#[test]
fn one_iteration_is_the_single_operation_timed_per_rank() {
    // The default: one operation, each rank timed to its own end (a reduce
    // reports the ranks' mean, nccl-tests' default).
    let coll = Collective::Reduce { root: 0 };
    let r = run(coll, 1 << 20, 1);
    let e = r.exec.as_ref().unwrap();
    let mean = e.rank_finish.iter().map(|t| t.as_ps()).sum::<u64>() / e.rank_finish.len() as u64;
    assert!(
        r.time.as_ps().abs_diff(mean) <= 1,
        "{} {mean}",
        r.time.as_ps()
    );
    assert_eq!(CollOptions::default().iterations, 1);
}

#[test]
fn loops_longer_than_the_simulated_ones_follow_the_last_period() {
    // Per rank, the loop's time per iteration falls towards its steady
    // period as the loop grows, and loops up to the simulated length are
    // simulated, not extrapolated.
    let coll = Collective::Broadcast { root: 0 };
    let mut last = f64::INFINITY;
    for n in [1, 2, SIMULATED_ITERATIONS as u32, 20, 1000] {
        let t = run(coll, 64 << 10, n).time.as_us();
        assert!(t <= last * (1.0 + 1e-9), "{n} iterations: {t} after {last}");
        last = t;
    }
}

#[test]
fn a_repeated_schedule_runs_each_iteration_after_the_last_on_every_rank() {
    let fabric = common::fabric("dgx-a100", 2);
    let p = Problem::new(Collective::Broadcast { root: 0 }, 1 << 20, 16, 8);
    let s = Schedule::new(p, Algorithm::Ring).unwrap();
    let cfg = ExecConfig {
        overheads: nccl_overheads("ring", Protocol::Simple),
        ..ExecConfig::default()
    };
    let once = Prepared::new(&s, &fabric, &cfg).unwrap();
    let one = once.run(&fabric, &cfg).unwrap();
    let k = 4;
    let rep = once.repeated(k);
    assert_eq!(rep.iterations(), k);
    let run = rep.run(&fabric, &cfg).unwrap();
    assert_eq!(
        run.steps,
        k as u64 * one.steps + (k as u64 - 1) * one.simulated_ranks as u64
    );
    assert_eq!(
        run.iteration_finish.len(),
        fabric.ranks().min(run.simulated_ranks)
    );
    for (r, f) in run.iteration_finish.iter().enumerate() {
        assert_eq!(f.len(), k);
        assert_eq!(
            f[0], one.rank_finish[r],
            "rank {r}: the first iteration is a single run"
        );
        assert_eq!(*f.last().unwrap(), run.rank_finish[r]);
        for w in f.windows(2) {
            // The next iteration cannot end before its launch is over.
            assert!(w[1] >= w[0] + cfg.overheads.launch, "rank {r}: {f:?}");
        }
    }
    // Every byte moved k times.
    for (a, b) in run.links.iter().zip(&one.links) {
        assert_eq!(a.name, b.name);
        assert!((a.bytes - k as f64 * b.bytes).abs() <= 1e-6 * a.bytes);
    }
    // Repeating twice is repeating the product.
    let twice = once.repeated(2).repeated(2).run(&fabric, &cfg).unwrap();
    assert_eq!(twice.time, run.time);
    assert_eq!(twice.iteration_finish, run.iteration_finish);
}
