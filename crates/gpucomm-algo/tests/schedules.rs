//! Every supported (collective, algorithm) over small rank counts: the
//! checker accepts it and the reference executor matches the definition.

mod common;

use common::{collectives, inputs, same, schedules};
use gpucomm_algo::{Problem, ReduceOp, check, execute, expected};

#[test]
fn all_schedules_small() {
    let mut seen = std::collections::BTreeMap::new();
    for n in 1..=9 {
        for coll in collectives(n) {
            for count in [0, 1, 5, 13] {
                let p = Problem::new(coll, count, n, if n % 3 == 0 { 3 } else { n });
                for s in schedules(p) {
                    let ctx = format!(
                        "{} {} n={n} count={count} ch={} chunk={}",
                        coll.name(),
                        s.algorithm.name(),
                        s.channels,
                        s.chunk_elems
                    );
                    check(&s).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                    *seen.entry(s.algorithm.name()).or_insert(0) += 1;
                    for op in ReduceOp::ALL {
                        let inp = inputs(&p, op, 7);
                        let got = execute(&s, op, &inp).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                        same(&got, &expected(&p, op, &inp))
                            .unwrap_or_else(|e| panic!("{ctx} {}: {e}", op.name()));
                    }
                }
            }
        }
    }
    eprintln!("schedules checked per algorithm: {seen:?}");
    assert_eq!(seen.len(), gpucomm_algo::Algorithm::ALL.len());
}

#[test]
fn steps_round_trip_through_json() {
    use gpucomm_algo::{Algorithm, Collective, Schedule, Step};
    let s = Schedule::new(
        Problem::new(Collective::AllReduce, 10, 4, 2),
        Algorithm::Hierarchical,
    )
    .unwrap()
    .with_channels(2);
    for r in 0..4 {
        let json = s.rank_steps_json(r);
        let back: Vec<Step> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s.rank_steps(r));
    }
    let json = Schedule::new(
        Problem::new(Collective::AllReduce, 4, 2, 2),
        Algorithm::Ring,
    )
    .unwrap()
    .rank_steps_json(0);
    assert!(json.starts_with(r#"[{"kind":"send","peer":1,"src":{"buf":"input","offset":2,"len":2},"channel":0,"deps":[]}"#), "{json}");
    // The schedule description itself is a few numbers, whatever the size.
    let big = Schedule::new(
        Problem::new(Collective::AllReduce, 1 << 30, 16384, 8),
        Algorithm::Ring,
    )
    .unwrap();
    assert!(serde_json::to_string(&big).unwrap().len() < 300);
}

#[test]
fn rank_structure_check_on_a_large_ring() {
    use gpucomm_algo::{Algorithm, Collective, Schedule, check_rank};
    let s = Schedule::new(
        Problem::new(Collective::AllReduce, 1 << 20, 1024, 8),
        Algorithm::Ring,
    )
    .unwrap();
    let steps = s.rank_steps(0);
    assert_eq!(steps.len(), 4 * 1023);
    check_rank(&s, 0, &steps).unwrap();
    let mut bad = steps.clone();
    bad[7].deps.push(9);
    let e = check_rank(&s, 0, &bad).unwrap_err().to_string();
    assert!(e.contains("rank 0 step 7: depends on step 9"), "{e}");
}
