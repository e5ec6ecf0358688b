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
