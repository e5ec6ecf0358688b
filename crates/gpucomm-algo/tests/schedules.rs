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
