//! `Communicator::gather` and `scatter`, in place too, and their blocks-of-any-size
//! forms (`all_gather_v`, `gather_v`, `scatter_v`) on in-process ranks
//! (processes over shared memory and TCP in `multiproc.rs`), and their
//! errors.

mod common;

use std::time::{Duration, Instant};

use common::on_threads;
use gpucomm::{Communicator, Failure};

#[test]
fn every_root_and_size() {
    for n in 1..=5 {
        for len in [0, 1, 1000, 300_000] {
            let results = on_threads(n, Duration::from_secs(60), |c| {
                common::gather_scatter_checks(&c, len)
            });
            for (r, res) in results.iter().enumerate() {
                assert!(res.is_ok(), "{n} ranks, {len} elements, rank {r}: {res:?}");
            }
        }
    }
}

#[test]
fn bad_arguments_are_refused() {
    let comms = Communicator::in_process(2).unwrap();
    let c = &comms[0];
    let cases: [(&str, Result<(), gpucomm::Error>); 4] = [
        ("root 2 out of range", c.gather(&[1u8], &mut [], 2)),
        (
            "the root's recv has 3 elements, 2 blocks of 1 need 2",
            c.gather(&[1u8], &mut [0; 3], 0),
        ),
        ("root 9 out of range", c.scatter(&[1u8], &mut [0], 9)),
        (
            "the root's send has 3 elements, 2 blocks of 2 need 4",
            c.scatter(&[1u8; 3], &mut [0; 2], 0),
        ),
    ];
    assert_refused(cases);
}

#[test]
fn blocks_of_different_lengths_end_in_errors() {
    // Rank 2 sends 3 elements where the others send 2: the root's receive
    // from it is a mismatch naming rank 2; every rank's next call fails.
    let t = Instant::now();
    let results = on_threads(3, Duration::from_secs(20), |c| {
        let r = c.rank();
        let mine = vec![r as u32; if r == 2 { 3 } else { 2 }];
        let mut all = vec![0u32; if r == 0 { 6 } else { 0 }];
        let g = c.gather(&mine, &mut all, 0);
        (g, c.barrier())
    });
    let e = results[0].0.as_ref().unwrap_err();
    assert_eq!(e.context().map(|x| x.peer), Some(Some(2)), "{e}");
    assert!(matches!(e.failure(), Some(Failure::Mismatch { .. })), "{e}");
    // The rank with the other length is told too (descriptors go both ways).
    let e = results[2].0.as_ref().unwrap_err();
    assert!(matches!(e.failure(), Some(Failure::Mismatch { .. })), "{e}");
    for (r, (_, b)) in results.iter().enumerate() {
        assert!(b.is_err(), "rank {r}: {results:?}");
    }
    // Found from the message, not by waiting out the timeout.
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[test]
fn senders_do_not_finish_before_the_root_takes_part() {
    // The root refuses its own buffer, calls again (one gather in all);
    // the others gather twice. Their second gather must not finish: the
    // root never takes part in it. (Small blocks fit in the links'
    // buffers: before descriptors were exchanged, it returned Ok and left
    // its blocks for whatever the root called next.)
    let results = on_threads(3, Duration::from_secs(2), |c| {
        let r = c.rank() as u32;
        if r == 0 {
            let wrong = c.gather(&[0u32], &mut [0; 5], 0).is_err();
            let mut all = [0u32; 3];
            c.gather(&[0], &mut all, 0).map(|_| (wrong, all.to_vec()))
        } else {
            c.gather(&[r], &mut [], 0)?;
            c.gather(&[10 + r], &mut [], 0).map(|_| (true, vec![]))
        }
    });
    assert_eq!(results[0].as_ref().ok(), Some(&(true, vec![0, 1, 2])));
    for (r, res) in results.iter().enumerate().skip(1) {
        assert!(res.is_err(), "rank {r}: {res:?}");
    }
}

#[test]
fn blocks_of_any_size_every_root() {
    for n in 1..=5 {
        for big in [0, 1, 300_000] {
            let results = on_threads(n, Duration::from_secs(60), |c| common::v_checks(&c, big));
            for (r, res) in results.iter().enumerate() {
                assert!(res.is_ok(), "{n} ranks, big {big}, rank {r}: {res:?}");
            }
        }
    }
}

#[test]
fn bad_counts_are_refused() {
    let comms = Communicator::in_process(2).unwrap();
    let c = &comms[0];
    let cases: [(&str, Result<(), gpucomm::Error>); 5] = [
        (
            "1 receive counts for 2 ranks",
            c.all_gather_v(&[1u8], &mut [0; 2], &[2]),
        ),
        (
            "receive counts add up to 3 elements, the receive buffer has 2",
            c.all_gather_v(&[1u8], &mut [0; 2], &[1, 2]),
        ),
        (
            "rank 0's count is 2 elements, its own block has 1",
            c.all_gather_v(&[1u8], &mut [0; 3], &[2, 1]),
        ),
        ("root 2 out of range", c.gather_v(&[1u8], &mut [], &[], 2)),
        (
            "send counts add up to 2 elements, the send buffer has 3",
            c.scatter_v(&[1u8; 3], &[1, 1], &mut [0], 0),
        ),
    ];
    assert_refused(cases);
}

#[test]
fn a_block_of_another_length_than_the_roots_count_is_an_error_on_both() {
    let t = Instant::now();
    let results = on_threads(3, Duration::from_secs(20), |c| {
        let r = c.rank();
        // The root expects 2 elements from rank 2, which sends 3.
        let mine = vec![r as u32; if r == 2 { 3 } else { 2 }];
        let (counts, len): (&[usize], usize) = if r == 0 { (&[2, 2, 2], 6) } else { (&[], 0) };
        let mut all = vec![0u32; len];
        c.gather_v(&mine, &mut all, counts, 0)
    });
    for r in [0, 2] {
        let e = results[r].as_ref().unwrap_err();
        assert!(
            matches!(e.failure(), Some(Failure::Mismatch { .. })),
            "rank {r}: {e}"
        );
    }
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[test]
fn gather_v_senders_do_not_finish_before_the_root_takes_part() {
    // As for gather: the root's first call is refused before anything
    // moves, the senders' second gather_v must wait for a root that never
    // comes (their first one meets the root's retry).
    let results = on_threads(3, Duration::from_secs(2), |c| {
        let r = c.rank() as u32;
        if r == 0 {
            let wrong = c.gather_v(&[0u32], &mut [0; 5], &[1, 1, 1], 0).is_err();
            let mut all = [0u32; 3];
            c.gather_v(&[0], &mut all, &[1, 1, 1], 0)
                .map(|_| (wrong, all.to_vec()))
        } else {
            c.gather_v(&[r], &mut [], &[], 0)?;
            c.gather_v(&[10 + r], &mut [], &[], 0)
                .map(|_| (true, vec![]))
        }
    });
    assert_eq!(results[0].as_ref().ok(), Some(&(true, vec![0, 1, 2])));
    for (r, res) in results.iter().enumerate().skip(1) {
        assert!(res.is_err(), "rank {r}: {res:?}");
    }
}

#[test]
fn an_empty_block_where_the_root_expects_one_is_an_error_on_both() {
    // An empty block still meets the root (its schedule sends it), so the
    // descriptors disagree at once; before, the empty rank returned Ok and
    // the root waited out its timeout.
    let t = Instant::now();
    let results = on_threads(2, Duration::from_secs(20), |c| {
        let r = c.rank();
        let gather = if r == 0 {
            c.gather(&[5u32, 6], &mut [0; 4], 0)
        } else {
            c.gather::<u32>(&[], &mut [], 0)
        };
        // The root scatters nothing where rank 1 expects two elements.
        let scatter = c.scatter::<u32>(&[], &mut vec![0; 2 * r], 0);
        (gather, scatter)
    });
    for (r, (g, s)) in results.iter().enumerate() {
        let g = g.as_ref().unwrap_err();
        assert!(
            matches!(g.failure(), Some(Failure::Mismatch { .. })),
            "rank {r}: {g}"
        );
        assert!(s.is_err(), "rank {r}: {s:?}");
    }
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // Blocks all empty: a gather and a scatter of nothing complete.
    let results = on_threads(3, Duration::from_secs(20), |c| {
        c.gather::<u8>(&[], &mut [], 1)?;
        c.scatter::<u8>(&[], &mut [], 2)
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// Each call was refused as an invalid argument saying what it says.
fn assert_refused<const N: usize>(cases: [(&str, Result<(), gpucomm::Error>); N]) {
    for (says, r) in cases {
        let e = r.unwrap_err();
        assert!(
            matches!(e, gpucomm::Error::InvalidArgument(_)) && e.to_string().contains(says),
            "{e}"
        );
    }
}
