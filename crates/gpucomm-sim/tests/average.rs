//! The reported time combines the ranks' finishing times as nccl-tests'
//! `-a` does (docs/sim.md, "What a sweep's time is").

mod common;

use gpucomm_algo::Collective;
use gpucomm_sim::SimTime;
use gpucomm_sim::collective::{Average, CollOptions, CollResult, simulate};

fn run(coll: Collective, bytes: u64, average: Option<Average>) -> CollResult {
    let f = common::fabric("dgx-h100", 2);
    let opts = CollOptions {
        average,
        ..Default::default()
    };
    simulate(&f, coll, bytes, &opts).unwrap()
}

fn times(coll: Collective, bytes: u64) -> [SimTime; 5] {
    let default = run(coll, bytes, None);
    let at = |a| run(coll, bytes, Some(a)).time;
    let (rank0, avg, min, max) = (
        at(Average::Rank0),
        at(Average::Avg),
        at(Average::Min),
        at(Average::Max),
    );
    // Every statistic is of the same run: the completion does not move.
    for a in [Average::Rank0, Average::Avg, Average::Min, Average::Max] {
        assert_eq!(run(coll, bytes, Some(a)).completion, default.completion);
    }
    assert_eq!(max, default.completion, "max is the last rank's");
    assert!(min <= avg && avg <= max, "{min} {avg} {max}");
    [default.time, rank0, avg, min, max]
}

#[test]
fn a_broadcast_reports_the_mean_over_ranks_and_its_root_finishes_first() {
    // 16 ranks on a chain across two nodes: the root is done when its
    // last chunk is handed on, the chain's end a pipeline fill later.
    let [default, rank0, avg, min, max] = times(Collective::Broadcast { root: 0 }, 64 << 20);
    assert_eq!(default, avg, "nccl-tests' default");
    assert_eq!(rank0, min, "the root finishes first");
    assert!(
        avg.as_us() < 0.9 * max.as_us(),
        "the chain's ranks finish one after another: mean {avg}, last {max}"
    );
}

#[test]
fn a_reduce_root_finishes_last() {
    let [default, rank0, avg, _min, max] = times(Collective::Reduce { root: 0 }, 64 << 20);
    assert_eq!(default, avg);
    assert_eq!(rank0, max, "the root receives the chain's last chunk");
    assert!(avg < max);
}

#[test]
fn symmetric_collectives_report_their_completion_by_default() {
    for coll in [Collective::AllReduce, Collective::AllGather] {
        let r = run(coll, 64 << 20, None);
        assert_eq!(r.time, r.completion, "{}", coll.name());
        let avg = run(coll, 64 << 20, Some(Average::Avg));
        assert!(avg.time <= r.completion);
    }
}

#[test]
fn nccl_tests_numbers_and_names_parse() {
    for (s, a) in [
        ("0", Average::Rank0),
        ("avg", Average::Avg),
        ("1", Average::Avg),
        ("MIN", Average::Min),
        ("3", Average::Max),
    ] {
        assert_eq!(Average::parse(s), Some(a));
        assert_eq!(Average::parse(a.name()), Some(a));
    }
    assert_eq!(Average::parse("4"), None);
    assert_eq!(Average::parse("mean of squares"), None);
    assert_eq!(Average::Avg.of(&[]), None);
    let t = |us| SimTime::from_us(us);
    assert_eq!(Average::Avg.of(&[t(1.0), t(2.0), t(6.0)]), Some(t(3.0)));
    assert_eq!(Average::Rank0.of(&[t(5.0), t(2.0)]), Some(t(5.0)));
}
