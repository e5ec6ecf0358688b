//! `Communicator::all_to_all_v` on in-process ranks (processes over shared
//! memory and TCP in `multiproc.rs`): blocks of any size, and counts that
//! do not add up or pair up, which must be errors on every rank, not hangs.

mod common;

use std::time::{Duration, Instant};

use common::on_threads;
use gpucomm::Communicator;

#[test]
fn blocks_of_any_size() {
    for n in 1..=6 {
        let results = on_threads(n, Duration::from_secs(60), |c| {
            // Twice: the second call reuses nothing it should not.
            common::all_to_all_v_checks(&c, 300_001)?;
            common::all_to_all_v_checks(&c, 5)
        });
        for (r, res) in results.iter().enumerate() {
            assert!(res.is_ok(), "{n} ranks, rank {r}: {res:?}");
        }
    }
}

#[test]
fn counts_that_do_not_add_up_are_refused() {
    let comms = Communicator::in_process(2).unwrap();
    let c = &comms[0];
    let mut recv = vec![0u8; 4];
    for (send_counts, recv_counts, says) in [
        (
            &[1usize][..],
            &[2usize, 2][..],
            "1 send counts and 2 receive counts for 2 ranks",
        ),
        (
            &[1, 1][..],
            &[2, 2][..],
            "send counts add up to 2 elements, the send buffer has 3",
        ),
        (
            &[1, 2][..],
            &[1, 2][..],
            "receive counts add up to 3 elements, the receive buffer has 4",
        ),
        (
            &[2, 1][..],
            &[1, 3][..],
            "rank 0 sends itself 2 elements and receives 1",
        ),
        (&[usize::MAX, 4][..], &[2, 2][..], "send counts overflow"),
    ] {
        let e = c
            .all_to_all_v(&[1u8, 2, 3], send_counts, &mut recv, recv_counts)
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{e}");
    }
}

#[test]
fn counts_that_do_not_pair_up_end_the_job_in_errors() {
    // Rank 0 expects 3 elements from rank 1, which sends 2: rank 0's call
    // fails on the message's length; rank 1's may complete (its data went
    // out), and its next call fails, the communicator being poisoned.
    let timeout = Duration::from_secs(20);
    let t = Instant::now();
    let results = on_threads(2, timeout, |c| {
        let r = c.rank();
        let send = vec![r as u32; 4];
        let send_counts = [2, 2];
        let recv_counts = if r == 0 { [2, 3] } else { [2, 2] };
        let mut recv = vec![0u32; recv_counts.iter().sum()];
        let v = c
            .all_to_all_v(&send, &send_counts, &mut recv, &recv_counts)
            .map_err(|e| e.to_string());
        (v, c.barrier().map_err(|e| e.to_string()))
    });
    let (v0, _) = &results[0];
    assert!(
        v0.as_ref()
            .unwrap_err()
            .contains("for a receive of 12 bytes"),
        "{results:?}"
    );
    for (r, (_, barrier)) in results.iter().enumerate() {
        assert!(barrier.is_err(), "rank {r}: {results:?}");
    }
    // Found from the message, not by waiting out the timeout.
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

mod prop {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::on_threads;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(30))]
        /// Random rank counts and count matrices (empty blocks, and blocks
        /// past the zero-copy threshold), element by element.
        #[test]
        fn random_count_matrices(
            counts in (1usize..7).prop_flat_map(|n| prop::collection::vec(
                prop::collection::vec(prop_oneof![4 => 0usize..600, 1 => Just(0usize), 1 => 60_000usize..70_000], n),
                n,
            )),
        ) {
            let n = counts.len();
            let value = |s: usize, d: usize, i: usize| (s * 1_000_003 + d * 10_007 + i) as u32;
            let counts = &counts;
            let results = on_threads(n, Duration::from_secs(30), move |c| {
                let r = c.rank();
                let send: Vec<u32> = (0..n).flat_map(|d| (0..counts[r][d]).map(move |i| value(r, d, i))).collect();
                let recv_counts: Vec<usize> = (0..n).map(|s| counts[s][r]).collect();
                let mut recv = vec![0u32; recv_counts.iter().sum()];
                c.all_to_all_v(&send, &counts[r], &mut recv, &recv_counts).map_err(|e| e.to_string())?;
                let want: Vec<u32> = (0..n).flat_map(|s| (0..counts[s][r]).map(move |i| value(s, r, i))).collect();
                (recv == want).then_some(()).ok_or(format!("rank {r}: wrong data"))
            });
            for res in results {
                prop_assert!(res.is_ok(), "{:?}", res);
            }
        }
    }
}
