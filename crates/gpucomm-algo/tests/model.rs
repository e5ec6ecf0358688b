//! The cost model's closed forms agree with the checker, and with the
//! textbook results.

mod common;

use common::{collectives, schedules};
use gpucomm_algo::{
    Algorithm, Collective, CostModel, Problem, Schedule, StepKind, check, critical_path, predict,
    tune,
};

fn agree(s: &Schedule) -> Result<(), String> {
    let rep = check(s).map_err(|e| e.to_string())?;
    let pred = predict(s, &CostModel::default());
    let e = s.problem.elem_size as u64;
    let got = (pred.steps, pred.max_bytes_sent, pred.max_bytes_recv);
    let want = (
        rep.critical_path,
        rep.max_bytes_sent(),
        rep.max_bytes_recv(),
    );
    if got != want {
        return Err(format!(
            "model (steps, sent, recv) = {got:?}, checker {want:?} (elem {e})"
        ));
    }
    if critical_path(s) != rep.critical_path {
        return Err("critical_path() differs from predict().steps".into());
    }
    Ok(())
}

#[test]
fn model_matches_checker_exhaustively_small() {
    for n in 1..=12 {
        for rpn in (1..=n).filter(|d| n % d == 0) {
            for coll in collectives(n) {
                for count in [0, 1, 3, 13, 40] {
                    let p = Problem::new(coll, count, n, rpn);
                    for s in schedules(p) {
                        agree(&s).unwrap_or_else(|e| {
                            panic!(
                                "{} {} n={n} rpn={rpn} count={count} ch={} chunk={}: {e}",
                                coll.name(),
                                s.algorithm.name(),
                                s.channels,
                                s.chunk_elems
                            )
                        });
                    }
                }
            }
        }
    }
}

#[test]
fn textbook_ring_all_reduce() {
    for n in [2usize, 3, 4, 8, 16, 17] {
        let count = n * 1000;
        let s = Schedule::new(
            Problem::new(Collective::AllReduce, count, n, n),
            Algorithm::Ring,
        )
        .unwrap();
        let rep = check(&s).unwrap();
        // 2 (n-1) steps, 2 (n-1)/n of the buffer through each rank.
        assert_eq!(rep.critical_path as usize, 2 * (n - 1));
        let bytes = 4 * count as u64;
        for r in &rep.ranks {
            assert_eq!(r.bytes_sent, 2 * (n as u64 - 1) * bytes / n as u64);
            assert_eq!(r.bytes_recv, r.bytes_sent);
        }
        assert_eq!(
            predict(&s, &CostModel::default()).steps as usize,
            2 * (n - 1)
        );
    }
}

#[test]
fn textbook_recursive_doubling() {
    for k in 0..=6 {
        let n = 1usize << k;
        let s = Schedule::new(
            Problem::new(Collective::AllReduce, 33, n, n),
            Algorithm::RecursiveDoubling,
        )
        .unwrap();
        assert_eq!(check(&s).unwrap().critical_path, k, "n={n}");
        assert_eq!(critical_path(&s), k);
        let b = Schedule::new(
            Problem::new(Collective::Barrier, 0, n, n),
            Algorithm::RecursiveDoubling,
        )
        .unwrap();
        assert_eq!(check(&b).unwrap().critical_path, k, "barrier n={n}");
    }
    // Bruck: ceil(log2 n) rounds and a ring's n-1 blocks per rank at any
    // n, where recursive doubling's fold sends twice that off powers of two.
    for n in [2usize, 3, 5, 6, 7, 12, 13, 16] {
        for coll in [Collective::AllGather, Collective::ReduceScatter] {
            let p = Problem::new(coll, 40 * n, n, 1);
            let s = Schedule::new(p, Algorithm::Bruck).unwrap();
            let rep = check(&s).unwrap();
            let log = n.next_power_of_two().trailing_zeros();
            assert_eq!(rep.critical_path, log, "{} n={n}", coll.name());
            assert_eq!(rep.max_bytes_sent(), 4 * 40 * (n as u64 - 1));
            assert_eq!(rep.max_bytes_recv(), 4 * 40 * (n as u64 - 1));
        }
        let rd = Schedule::new(
            Problem::new(Collective::AllGather, 40 * n, n, 1),
            Algorithm::RecursiveDoubling,
        )
        .unwrap();
        let folded = check(&rd).unwrap().max_bytes_sent();
        if n.is_power_of_two() {
            assert_eq!(folded, 4 * 40 * (n as u64 - 1));
        } else {
            assert!(folded > 4 * 40 * (n as u64 - 1), "n={n}: {folded}");
        }
    }
    // Rabenseifner: 2 log2 n steps, 2 (n-1)/n of the buffer.
    let s = Schedule::new(
        Problem::new(Collective::AllReduce, 8000, 8, 8),
        Algorithm::HalvingDoubling,
    )
    .unwrap();
    let rep = check(&s).unwrap();
    assert_eq!(rep.critical_path, 6);
    assert_eq!(rep.max_bytes_sent(), 2 * 7 * 4 * 8000 / 8);
}

#[test]
fn chunking_pipelines_the_ring() {
    let p = Problem::new(Collective::AllReduce, 4 * 64, 4, 4);
    let s = Schedule::new(p, Algorithm::Ring)
        .unwrap()
        .with_chunk_elems(16);
    // 64 elements per block in chunks of 16: 4 chunks. Every transfer of a
    // ring step uses the same connection, so chunking multiplies the steps
    // (each 4 times smaller): 2 (n-1) * 4.
    assert_eq!(check(&s).unwrap().critical_path, 24);
    let b = Schedule::new(
        Problem::new(Collective::Broadcast { root: 2 }, 100, 5, 5),
        Algorithm::Ring,
    )
    .unwrap()
    .with_chunk_elems(10);
    // A chain pipelines: the last of 10 chunks leaves the root at step 10
    // and needs 3 more hops.
    assert_eq!(check(&b).unwrap().critical_path, 4 + 10 - 1);
}

#[test]
fn tuner_prefers_latency_for_small_and_bandwidth_for_large() {
    let m = CostModel::default();
    let small = tune(&Problem::new(Collective::AllReduce, 2, 64, 8), &m).unwrap();
    let large = tune(&Problem::new(Collective::AllReduce, 1 << 28, 64, 8), &m).unwrap();
    let ps = predict(&small, &m);
    let pl = predict(&large, &m);
    assert!(
        ps.steps < 2 * 63,
        "small messages should not take a 64-rank ring: {ps:?}"
    );
    assert_ne!(small.algorithm, Algorithm::Ring);
    // The tuned schedule beats the plain ring at both sizes.
    for (s, p) in [(&small, &ps), (&large, &pl)] {
        let ring = Schedule::new(s.problem, Algorithm::Ring).unwrap();
        assert!(p.time_us <= predict(&ring, &m).time_us);
    }
    // And a single-channel schedule cannot fill a 450 GB/s link at 25 GB/s per channel.
    let one = Problem::new(Collective::AllReduce, 1 << 28, 8, 8);
    assert!(tune(&one, &m).unwrap().channels > 1);
}

#[test]
fn tune_rejects_bad_problems() {
    let m = CostModel::default();
    assert!(tune(&Problem::new(Collective::AllReduce, 8, 0, 1), &m).is_err());
    assert!(
        tune(
            &Problem::new(Collective::Broadcast { root: 9 }, 8, 4, 4),
            &m
        )
        .is_err()
    );
}

#[test]
fn hand_made_invalid_schedules_do_not_panic_the_model() {
    let mut s = Schedule::new(
        Problem::new(Collective::AllReduce, 8, 4, 4),
        Algorithm::Ring,
    )
    .unwrap();
    s.problem.nranks = 0;
    let p = predict(&s, &CostModel::default());
    assert!(p.time_us.is_infinite());
    assert_eq!(critical_path(&s), 0);
    assert!(gpucomm_algo::traffic(&s).is_empty());
}

#[test]
fn tuner_respects_engine_limits() {
    use gpucomm_algo::{TuneOptions, tune_with};
    let m = CostModel::default();
    let p = Problem::new(Collective::AllReduce, 1 << 28, 8, 8);
    let one = TuneOptions {
        max_channels: 1,
        ..TuneOptions::default()
    };
    assert_eq!(tune_with(&p, &m, &one).unwrap().channels, 1);
    let three = TuneOptions {
        max_channels: 3,
        ..TuneOptions::default()
    };
    assert!(tune_with(&p, &m, &three).unwrap().channels <= 3);
    let only_ring = TuneOptions {
        algorithms: vec![Algorithm::Ring],
        ..TuneOptions::default()
    };
    assert_eq!(
        tune_with(&p, &m, &only_ring).unwrap().algorithm,
        Algorithm::Ring
    );
    // A fixed channel count, chunk and intra-node cut: every candidate has
    // them, and is predicted as built with them.
    let fixed = TuneOptions {
        channels: Some(64),
        max_channels: 64,
        chunk_elems: Some(1024),
        intra_slices: 4,
        ..TuneOptions::default()
    };
    let all = gpucomm_algo::candidates_with(&p, &m, &fixed);
    assert!(!all.is_empty());
    for (s, pr) in &all {
        assert_eq!((s.channels, s.chunk_elems, s.intra_slices), (64, 1024, 4));
        assert_eq!(pr.time_us, gpucomm_algo::predict(s, &m).time_us);
    }
    let none = TuneOptions {
        algorithms: vec![Algorithm::Tree],
        ..TuneOptions::default()
    };
    let a2a = Problem::new(Collective::AllToAll, 4, 8, 8);
    assert!(tune_with(&a2a, &m, &none).is_err());
}

/// Local work: with `local_gbps` set, the prediction adds exactly rank 0's
/// reduced and copied bytes at that bandwidth; unset, nothing.
#[test]
fn local_work_is_added_when_modeled() {
    let p = Problem::new(Collective::AllReduce, 1 << 20, 4, 4);
    let s = Schedule::new(p, Algorithm::Ring).unwrap();
    let base = CostModel::uniform(1.0, 10.0);
    let local_elems: usize = s
        .rank_steps(0)
        .iter()
        .map(|st| match st.kind {
            StepKind::RecvReduce { dst, .. }
            | StepKind::Reduce { dst, .. }
            | StepKind::Copy { dst, .. } => dst.len,
            _ => 0,
        })
        .sum();
    // Ring all-reduce on 4 ranks: 3 receive-and-reduce blocks of a quarter.
    assert_eq!(local_elems, 3 * (1 << 18));
    let without = predict(&s, &base).time_us;
    let with = predict(&s, &base.with_local_gbps(2.0)).time_us;
    let expected = (local_elems * 4) as f64 / 2e3;
    assert!(
        ((with - without) - expected).abs() < 1e-6,
        "{with} - {without} != {expected}"
    );
}

#[test]
fn step_counts_past_u32_saturate_instead_of_wrapping() {
    // 8 GiB of bytes in one-byte chunks: 2 * (n - 1) * 2^33 / n steps.
    // In u32 this wrapped to 0 steps and 0 us on 2 ranks (tune ranked it
    // best, check built it) and overflowed on 3 (a debug panic).
    for n in [2usize, 3] {
        let p = Problem::new(Collective::AllReduce, 1 << 33, n, n).with_elem_size(1);
        let s = Schedule::new(p, Algorithm::Ring)
            .unwrap()
            .with_chunk_elems(1);
        assert_eq!(critical_path(&s), u32::MAX, "{n} ranks");
        let pred = predict(&s, &CostModel::default());
        assert_eq!(pred.steps, u32::MAX, "{n} ranks");
        // The time uses the whole count: over 2^33 steps of latency.
        assert!(pred.time_us > 1e9, "{n} ranks: {} us", pred.time_us);
    }
}

#[test]
fn one_rank_moves_nothing_and_takes_no_time() {
    // A 1-rank ring broadcast or reduce has no step, but its path came
    // out as (chunks - 1) pieces: 2.33 us on 32 channels.
    for coll in [
        Collective::Broadcast { root: 0 },
        Collective::Reduce { root: 0 },
    ] {
        let p = Problem::new(coll, 1 << 18, 1, 1).with_elem_size(4);
        let s = Schedule::new(p, Algorithm::Ring)
            .unwrap()
            .with_chunk_elems(4)
            .with_channels(32);
        let pred = predict(&s, &CostModel::default());
        assert_eq!(pred.steps, 0);
        assert_eq!(
            pred.intra_path_bytes + pred.inter_path_bytes,
            0.0,
            "{coll:?}"
        );
    }
}
