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
