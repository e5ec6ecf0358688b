//! `Communicator::split` on in-process ranks (the multi-process cases are in
//! `multiproc.rs`): groups, ranks left out, splits of splits, groups that
//! outlive their parent, and a split that meets another call.

mod common;

use std::time::{Duration, Instant};

use common::on_threads;
use gpucomm::ReduceOp;

#[test]
fn groups_of_in_process_ranks() {
    for n in [1, 2, 3, 5, 8] {
        let results = on_threads(n, Duration::from_secs(60), |c| {
            let g = common::split_checks(&c)?;
            // The group outlives its parent.
            drop(c);
            let mut v = [1u32];
            g.all_reduce_in_place(&mut v, ReduceOp::Sum)
                .map_err(|e| e.to_string())?;
            (v[0] as usize == g.world_size())
                .then_some(())
                .ok_or(format!("group sum {} after the parent went", v[0]))
        });
        for (r, res) in results.iter().enumerate() {
            assert!(res.is_ok(), "{n} ranks, rank {r}: {res:?}");
        }
    }
}

#[test]
fn a_split_that_meets_another_call_fails_on_every_rank() {
    // Rank 0 splits while the others reduce: both calls must end in an
    // error within the timeout, not a hang.
    let timeout = Duration::from_secs(2);
    let t = Instant::now();
    let results = on_threads(3, timeout, |c| {
        if c.rank() == 0 {
            c.split(Some(0), 0).map(|_| ())
        } else {
            let mut v = [0i64; 2];
            c.all_reduce_in_place(&mut v, ReduceOp::Sum)
        }
    });
    assert!(results.iter().all(Result::is_err), "{results:?}");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}

#[test]
fn a_group_member_stops_waiting_when_its_rank_0_aborts() {
    // Rank 0 takes part in the split's all-gather and then aborts instead
    // of making the group: rank 1 stops waiting for it at the next look at
    // the parent's link, not at its timeout (it waited all 20 s before).
    let t = Instant::now();
    let results = on_threads(2, Duration::from_secs(20), |c| {
        if c.rank() == 0 {
            let mut all = [0i64; 4];
            c.all_gather(&[0, 0], &mut all).map_err(|e| e.to_string())?;
            c.abort();
            Ok(())
        } else {
            c.split(Some(0), 1).map(|_| ()).map_err(|e| e.to_string())
        }
    });
    let e = results[1].as_ref().unwrap_err();
    assert!(e.contains("rank 0 of the parent communicator"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

mod prop {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::on_threads;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(30))]
        /// Random colors (some ranks in no group) and keys (ties included):
        /// each group is its color's ranks ordered by key, then by rank.
        #[test]
        fn random_colors_and_keys(
            picks in (1usize..9).prop_flat_map(|n| prop::collection::vec(
                (prop::option::weighted(0.8, 0u32..3), -2i64..3),
                n,
            )),
        ) {
            let n = picks.len();
            let picks = &picks;
            let results = on_threads(n, Duration::from_secs(30), move |c| {
                let r = c.rank();
                let (color, key) = picks[r];
                let g = c.split(color, key).map_err(|e| e.to_string())?;
                let Some(color) = color else {
                    return g.is_none().then_some(()).ok_or("a group for no color".to_string());
                };
                let g = g.ok_or("no group")?;
                let mut members: Vec<(i64, usize)> = (0..n)
                    .filter(|&p| picks[p].0 == Some(color))
                    .map(|p| (picks[p].1, p))
                    .collect();
                members.sort();
                let want: Vec<u64> = members.iter().map(|&(_, p)| p as u64).collect();
                let mut got = vec![0u64; g.world_size()];
                g.all_gather(&[r as u64], &mut got).map_err(|e| e.to_string())?;
                (got == want).then_some(()).ok_or(format!("rank {r}: group {got:?}, expected {want:?}"))
            });
            for res in results {
                prop_assert!(res.is_ok(), "{:?}", res);
            }
        }
    }
}
