//! Property tests: random problems over 1..=64 ranks (powers of two and
//! not), sizes 0, 1, around the rank count and random, every collective,
//! algorithm and op. For each: the checker accepts the schedule, the model's
//! bytes and steps equal the checker's, and the reference executor matches
//! the direct computation (small-integer inputs, so float sums are exact).

mod common;

use common::{inputs, same};
use gpucomm_algo::{
    AlgoError, Algorithm, Buf, Collective, CostModel, Problem, ReduceOp, Schedule, Step, check,
    execute, execute_steps, expected, predict,
};
use proptest::prelude::*;

fn problem() -> impl Strategy<Value = (Problem, Algorithm, u16, usize, usize, u64)> {
    (
        1usize..=64,
        any::<u64>(),
        0usize..10,
        0usize..6,
        0usize..Algorithm::ALL.len(),
        1u16..=4,
        0usize..6,
        1usize..=4,
        any::<u64>(),
    )
        .prop_map(
            |(n, pick, coll, size, alg, channels, chunk, slices, seed)| {
                let divisors: Vec<usize> = (1..=n).filter(|d| n % d == 0).collect();
                let rpn = divisors[(pick as usize) % divisors.len()];
                let root = (pick >> 8) as usize % n;
                let coll = match coll {
                    0 => Collective::AllReduce,
                    1 => Collective::ReduceScatter,
                    2 => Collective::AllGather,
                    3 => Collective::Broadcast { root },
                    4 => Collective::Reduce { root },
                    5 => Collective::AllToAll,
                    6 => Collective::SendRecv {
                        shift: (pick >> 16) as usize % (2 * n),
                    },
                    7 => Collective::Barrier,
                    8 => Collective::Gather { root },
                    _ => Collective::Scatter { root },
                };
                let count = match size {
                    0 => 0,
                    1 => 1,
                    2 => n.saturating_sub(1),
                    3 => n + 1,
                    4 => 3 * n + 2,
                    _ => (pick >> 24) as usize % 200,
                };
                // all_to_all moves n * count per rank, gather and scatter
                // n * count on the root: keep them small.
                let count = if matches!(
                    coll,
                    Collective::AllToAll | Collective::Gather { .. } | Collective::Scatter { .. }
                ) {
                    count % 5
                } else {
                    count
                };
                let chunk = [0, 1, 2, 3, 7, 64][chunk];
                (
                    Problem::new(coll, count, n, rpn),
                    Algorithm::ALL[alg],
                    channels,
                    chunk,
                    slices,
                    seed,
                )
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn schedules_are_correct_and_modelled((p, alg, channels, chunk, slices, seed) in problem()) {
        let s = match Schedule::new(p, alg) {
            // A tree all_reduce's first-tree channels: the default half,
            // or any count up to all of them and past.
            Ok(s) => s
                .with_channels(channels)
                .with_chunk_elems(chunk)
                .with_intra_slices(slices)
                .with_tree_split((seed % (u64::from(channels) + 2)) as u16),
            Err(AlgoError::Unsupported { .. }) => return Ok(()),
            Err(e) => panic!("valid problem rejected: {e}"),
        };
        let rep = check(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(rep.in_place_verified, s.in_place_safe());
        let pred = predict(&s, &CostModel::default());
        prop_assert_eq!(pred.steps, rep.critical_path);
        prop_assert_eq!(pred.max_bytes_sent, rep.max_bytes_sent());
        prop_assert_eq!(pred.max_bytes_recv, rep.max_bytes_recv());
        let steps: Vec<Vec<Step>> = (0..p.nranks).map(|r| s.rank_steps(r)).collect();
        let scratch: Vec<usize> = (0..p.nranks).map(|r| s.buffer_len(r, Buf::Scratch)).collect();
        for op in ReduceOp::ALL {
            let inp = inputs(&p, op, seed);
            let want = expected(&p, op, &inp);
            let got = execute(&s, op, &inp).map_err(|e| TestCaseError::fail(e.to_string()))?;
            same(&got, &want).map_err(|e| TestCaseError::fail(format!("{}: {e}", op.name())))?;
            if s.in_place_safe() {
                let got = execute_steps(&p, &steps, &scratch, op, &inp, true)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                same(&got, &want).map_err(|e| TestCaseError::fail(format!("in place {}: {e}", op.name())))?;
            }
        }
    }
}

/// Every collective has at least one algorithm at every rank count, and the
/// ones that make no sense are refused with `Unsupported`, not a panic.
#[test]
fn support_matrix() {
    for n in [1usize, 2, 3, 7, 8, 64] {
        for coll in common::collectives(n) {
            let p = Problem::new(coll, 10, n, 1);
            let ok: Vec<_> = Algorithm::ALL
                .iter()
                .filter(|&&a| Schedule::new(p, a).is_ok())
                .collect();
            assert!(!ok.is_empty(), "{} has no algorithm", coll.name());
        }
    }
    let bad =
        Schedule::new(Problem::new(Collective::AllToAll, 4, 4, 4), Algorithm::Ring).unwrap_err();
    assert!(
        bad.to_string()
            .contains("ring does not implement all_to_all"),
        "{bad}"
    );
    let bad = Schedule::new(
        Problem::new(Collective::AllReduce, 4, 6, 4),
        Algorithm::Hierarchical,
    )
    .unwrap_err();
    assert!(
        bad.to_string().contains("6 ranks are not whole nodes of 4"),
        "{bad}"
    );
    assert!(matches!(
        Schedule::new(
            Problem::new(Collective::Reduce { root: 4 }, 4, 4, 4),
            Algorithm::Ring
        ),
        Err(AlgoError::InvalidProblem(_))
    ));
    assert!(
        Schedule::new(
            Problem::new(Collective::AllReduce, 4, 0, 1),
            Algorithm::Ring
        )
        .is_err()
    );
    assert!(
        Schedule::new(
            Problem::new(Collective::AllReduce, 4, 4, 0),
            Algorithm::Ring
        )
        .is_err()
    );
}
