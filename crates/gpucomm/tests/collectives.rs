//! Every collective on in-process ranks, compared element by element.

mod common;

use gpucomm::{Communicator, InProcessOptions};
use std::time::Duration;

fn run(n: usize, big: bool) {
    let comms = Communicator::in_process_with(
        n,
        &InProcessOptions {
            timeout: Some(Duration::from_secs(60)),
            ..Default::default()
        },
    )
    .unwrap();
    let cases: Vec<_> = common::cases(n, big)
        .into_iter()
        .filter(|c| common::supported(c, n))
        .collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                let cases = &cases;
                s.spawn(move || {
                    let mut checked = 0;
                    for case in cases {
                        checked += common::run_dyn(c, case).unwrap_or_else(|e| panic!("{e}"));
                    }
                    checked
                })
            })
            .collect();
        for h in hs {
            assert!(h.join().unwrap() > 0);
        }
    });
}

#[test]
fn two_ranks() {
    run(2, true);
}

#[test]
fn three_ranks() {
    run(3, true);
}

#[test]
fn four_ranks() {
    run(4, false);
}

#[test]
fn five_ranks() {
    run(5, false);
}

#[test]
fn one_rank() {
    run(1, false);
}

mod prop {
    use super::common;
    use gpucomm::{Algorithm, Call, Communicator, DataType, InProcessOptions, ReduceOp};
    use proptest::prelude::*;
    use std::time::Duration;

    fn call_strategy(n: usize) -> impl Strategy<Value = Call> {
        let op = prop::sample::select(ReduceOp::ALL.to_vec());
        prop_oneof![
            op.clone().prop_map(Call::AllReduce),
            op.clone().prop_map(Call::ReduceScatter),
            (op, 0..n).prop_map(|(op, root)| Call::Reduce { op, root }),
            (0..n).prop_map(|root| Call::Broadcast { root }),
            Just(Call::AllGather),
            Just(Call::AllToAll),
            (0..2 * n).prop_map(|shift| Call::SendRecv { shift }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        /// Random rank counts, counts, calls, dtypes, algorithms, placement.
        #[test]
        fn random_calls_match_the_reference(
            (n, call) in (1usize..7).prop_flat_map(|n| (Just(n), call_strategy(n))),
            count in 0usize..2500,
            dtype in prop::sample::select(DataType::ALL.to_vec()),
            algorithm in prop::option::of(prop::sample::select(Algorithm::ALL.to_vec())),
            in_place in any::<bool>(),
            shared in any::<bool>(),
        ) {
            let in_place = in_place && !matches!(call, Call::SendRecv { .. });
            let case = common::Case { call, dtype, count, in_place, algorithm, shared };
            prop_assume!(common::supported(&case, n));
            let comms = Communicator::in_process_with(n, &InProcessOptions {
                timeout: Some(Duration::from_secs(30)),
                ..Default::default()
            }).unwrap();
            let results: Vec<Result<usize, String>> = std::thread::scope(|s| {
                let hs: Vec<_> = comms.iter().map(|c| s.spawn(move || common::run_dyn(c, &case))).collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for r in results {
                prop_assert!(r.is_ok(), "{:?}", r);
            }
        }
    }
}
