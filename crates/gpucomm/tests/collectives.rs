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

/// Runs `f` on `n` in-process ranks, returning each rank's result.
fn on_ranks<R: Send>(n: usize, f: impl Fn(&Communicator) -> R + Sync) -> Vec<R> {
    let comms = Communicator::in_process(n).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn integer_avg_divides_by_rank_counts_the_type_cannot_hold() {
    // `n as u8` was 0 for 256 ranks (every rank panicked) and `n as i8`
    // was -128 for 128 ranks (the sign flipped).
    let got = on_ranks(256, |c| {
        let mut x = [200u8, 1];
        c.all_reduce_in_place(&mut x, gpucomm::ReduceOp::Avg)
            .map(|_| x)
    });
    // The sum wraps in u8 (as NCCL's SumPostDiv): 256 * 200 = 0 mod 256.
    assert!(
        got.iter().all(|r| r.as_ref().is_ok_and(|x| *x == [0, 0])),
        "{:?}",
        &got[0]
    );
    let got = on_ranks(128, |c| {
        let mut x = [-1i8, 1];
        c.all_reduce_in_place(&mut x, gpucomm::ReduceOp::Avg)
            .map(|_| x)
    });
    // -128 / 128 = -1 and 128 (wrapped to -128) / 128 = -1.
    assert!(
        got.iter().all(|r| r.as_ref().is_ok_and(|x| *x == [-1, -1])),
        "{:?}",
        &got[0]
    );
}

#[test]
fn half_precision_avg_does_not_overflow_where_the_average_fits() {
    // The sum of two f16 40000s is inf; NCCL divides before it sums.
    use gpucomm::{bf16, f16};
    for in_place in [true, false] {
        let got = on_ranks(2, |c| {
            let send = [f16::from_f32(40000.0), f16::from_f32(-3.0)];
            let mut x = send;
            let r = if in_place {
                c.all_reduce_in_place(&mut x, gpucomm::ReduceOp::Avg)
            } else {
                c.all_reduce(&send, &mut x, gpucomm::ReduceOp::Avg)
            };
            r.map(|_| x)
        });
        for g in &got {
            let x = g.as_ref().unwrap();
            assert_eq!(x[0].to_f32(), 40000.0, "in place {in_place}: {x:?}");
            assert_eq!(x[1].to_f32(), -3.0, "in place {in_place}: {x:?}");
        }
    }
    let got = on_ranks(3, |c| {
        let send = [f32::MAX, 3.0];
        let mut x = [0f32; 2];
        c.all_reduce(&send, &mut x, gpucomm::ReduceOp::Avg)
            .map(|_| x)
    });
    for g in &got {
        let x = g.as_ref().unwrap();
        assert!(
            x[0].is_finite() && (x[0] / f32::MAX - 1.0).abs() < 1e-6,
            "{x:?}"
        );
    }
    let got = on_ranks(2, |c| {
        let mut x = [bf16::from_f32(3.0e38)];
        c.all_reduce_in_place(&mut x, gpucomm::ReduceOp::Avg)
            .map(|_| x[0].to_f32())
    });
    assert!(
        got.iter().all(|r| r.as_ref().is_ok_and(|x| x.is_finite())),
        "{got:?}"
    );
}

#[test]
fn the_timeout_bounds_each_wait_not_a_call_that_keeps_moving() {
    // A call that moves data for longer than the timeout, without ever
    // waiting that long, succeeds (it failed at the timeout after start).
    // Every send completes 60 ms after its data went (a slow link), and a
    // ring all_reduce on 8 ranks sends 14 times one after another: the
    // call outlasts the 300 ms timeout twice over while no wait comes near
    // it, so a loaded machine's scheduling pauses do not fail it (a 40 ms
    // timeout on a call grown past 160 ms did fail so).
    let n = 8;
    let timeout = Duration::from_millis(300);
    let slow = gpucomm::Fault::Delay(Duration::from_millis(60));
    let comms = Communicator::in_process_with(
        n,
        &InProcessOptions {
            timeout: Some(timeout),
            algorithm: Some(gpucomm::Algorithm::Ring),
            faults: (0..n).map(|r| (r, (r + 1) % n, slow)).collect(),
        },
    )
    .unwrap();
    let count = 1 << 12;
    let took = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let send = vec![1.0f32; count];
                    let mut recv = vec![0.0f32; count];
                    let t = std::time::Instant::now();
                    c.all_reduce(&send, &mut recv, gpucomm::ReduceOp::Sum)
                        .unwrap_or_else(|e| panic!("{count} floats: {e}"));
                    assert!(recv.iter().all(|&x| x == n as f32));
                    t.elapsed()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).min().unwrap()
    });
    assert!(
        took > 2 * timeout,
        "{took:?}: the slow link did not slow it"
    );
}

#[test]
fn a_delay_beyond_any_instant_is_a_link_that_never_completes() {
    // `Instant + Duration::MAX` panics; the fault holds the send instead,
    // and the timeout ends the call.
    let never = gpucomm::Fault::Delay(Duration::MAX);
    let comms = Communicator::in_process_with(
        2,
        &InProcessOptions {
            timeout: Some(Duration::from_millis(100)),
            faults: vec![(0, 1, never), (1, 0, never)],
            ..Default::default()
        },
    )
    .unwrap();
    let got: Vec<Result<(), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let mut x = [1.0f32; 4];
                    c.all_reduce_in_place(&mut x, gpucomm::ReduceOp::Sum)
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // The rank whose wait ends first aborts, so under load (one thread
    // starting late) the other may learn that before its own timeout.
    assert!(
        got.iter()
            .all(|r| r.as_ref().is_err_and(|e| e.contains("timed out")
                || e.contains("peer 1 aborted")
                || e.contains("peer 0 aborted")))
            && got
                .iter()
                .any(|r| r.as_ref().is_err_and(|e| e.contains("timed out"))),
        "{got:?}"
    );
}
