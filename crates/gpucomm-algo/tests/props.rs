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

/// Rank `b`'s steps are rank `a`'s moved by `shift` on `n` ranks: peers
/// shifted (modulo `n`), the same kinds, channels and dependencies, each
/// length within one element (what [`Schedule::node_symmetric_by_construction`]
/// promises, and what a simulator running one node for all compares).
fn moved_by(a: &[Step], b: &[Step], shift: usize, n: usize) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("{} steps against {}", b.len(), a.len()));
    }
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let same = std::mem::discriminant(&x.kind) == std::mem::discriminant(&y.kind)
            && x.channel == y.channel
            && x.deps == y.deps
            && x.kind.len().abs_diff(y.kind.len()) <= 1
            && x.kind.peer().map(|p| (p + shift) % n) == y.kind.peer();
        if !same {
            return Err(format!("step {i}: {y:?} against {x:?}"));
        }
    }
    Ok(())
}

/// Ring all_reduce, reduce_scatter and all_gather on two or more nodes,
/// with random ring orders (or rank order), channels and chunks.
fn ring_across_nodes() -> impl Strategy<Value = Schedule> {
    (
        1usize..=8,
        2usize..=6,
        0usize..3,
        0usize..7,
        1u16..=4,
        0usize..6,
        any::<u64>(),
    )
        .prop_map(|(rpn, nodes, coll, size, channels, chunk, seed)| {
            let n = rpn * nodes;
            let coll = [
                Collective::AllReduce,
                Collective::ReduceScatter,
                Collective::AllGather,
            ][coll];
            let count = match size {
                0 => 0,
                1 => 1,
                2 => n - 1,
                3 => n + 1,
                4 => 3 * n + 2,
                // Whole blocks (nccl-tests' all_gather and reduce_scatter).
                5 => n * ((seed >> 24) as usize % 40),
                _ => (seed >> 24) as usize % 500,
            };
            let p = Problem::new(coll, count, n, rpn);
            let s = Schedule::new(p, Algorithm::Ring)
                .unwrap()
                .with_channels(channels)
                .with_chunk_elems([0, 1, 2, 3, 7, 64][chunk]);
            if seed % 3 == 0 {
                return s;
            }
            // A permutation of the local ranks per channel (a shuffle
            // driven by the seed).
            let mut x = seed | 1;
            let orders = (0..channels)
                .map(|_| {
                    let mut o: Vec<u32> = (0..rpn as u32).collect();
                    for i in (1..rpn).rev() {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        o.swap(i, (x % (i as u64 + 1)) as usize);
                    }
                    o
                })
                .collect();
            s.with_ring_orders(orders).unwrap()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn node_symmetry_a_schedule_declares_holds_rank_by_rank(s in ring_across_nodes()) {
        let p = s.problem;
        let (n, rpn) = (p.nranks, p.ranks_per_node);
        let steps: Vec<Vec<Step>> = (0..n).map(|r| s.rank_steps(r)).collect();
        for shift in (rpn..n).step_by(rpn) {
            if !s.node_symmetric_by_construction(shift) {
                continue;
            }
            for r in 0..n {
                moved_by(&steps[r], &steps[(r + shift) % n], shift, n)
                    .map_err(|e| TestCaseError::fail(format!("rank {} by {shift}: {e}", r)))?;
            }
        }
    }
}

/// What the declaration leaves out can differ between nodes: the double
/// binary tree's second node does not run its first's steps (so the
/// comparison above can fail), and the schedule does not claim it.
#[test]
fn a_tree_across_nodes_is_not_declared_symmetric() {
    let p = Problem::new(Collective::AllReduce, 1000, 32, 8);
    let s = Schedule::new(p, Algorithm::Tree).unwrap().with_channels(2);
    assert!(!s.node_symmetric_by_construction(8));
    assert!(moved_by(&s.rank_steps(1), &s.rank_steps(9), 8, 32).is_err());
    let ring = Schedule::new(p, Algorithm::Ring).unwrap().with_channels(2);
    assert!(moved_by(&ring.rank_steps(1), &ring.rank_steps(9), 8, 32).is_ok());
    // Rooted chains and partial nodes claim nothing either.
    let chain = Problem::new(Collective::Broadcast { root: 0 }, 1000, 32, 8);
    let chain = Schedule::new(chain, Algorithm::Ring).unwrap();
    assert!(!chain.node_symmetric_by_construction(8));
    assert!(!ring.node_symmetric_by_construction(4));
    // An all_gather of uneven blocks is left to be compared: one element
    // on two ranks, the second rank's own block (and copy) is empty.
    let uneven = Problem::new(Collective::AllGather, 1, 2, 1);
    let uneven = Schedule::new(uneven, Algorithm::Ring).unwrap();
    assert!(!uneven.node_symmetric_by_construction(1));
    assert!(moved_by(&uneven.rank_steps(0), &uneven.rank_steps(1), 1, 2).is_err());
    // A schedule with no ranks (made by hand, or read from a file) is
    // answered, not a division by zero.
    let mut empty = ring.clone();
    empty.problem.nranks = 0;
    assert!(!empty.node_symmetric_by_construction(8));
}
