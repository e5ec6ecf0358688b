//! Every published measurement in shared/calibration/measurements.toml,
//! predicted from hardware parameters, must be within 10%.

use gpucomm_sim::calibration::{parse, predict};

const FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/calibration/measurements.toml"
);

/// Cases the model is known to miss by more than 10%, with the reason (see
/// docs/sim.md, "Known misses"). They are still checked: within 50%, and the
/// test fails when one comes within 10% so that it leaves this list. Every
/// other case, including any added to the file later, must be within 10%.
const KNOWN_MISSES: &[(&str, &str)] = &[
    (
        "v100-pcie3-h2d-pinned",
        "PCIe Gen3 TLP model predicts 13.6 GB/s; the published 9.6 is below what the link \
         protocol allows: measured on a cloud VM whose A100 (Gen4) got 12.3, i.e. a host limit \
         (virtualized Gen3 root complex) that no preset describes",
    ),
    (
        "dgx1-v100-p2p-latency-disabled",
        "the host synchronisation between the two halves of a staged copy is an assumed \
         10 us; no published figure to derive it from",
    ),
];

#[test]
fn calibration_cases_within_10_percent_but_the_listed_known_misses() {
    // GPUCOMM_CALIBRATION overrides the path (for checkouts not beside shared/).
    let path = std::env::var("GPUCOMM_CALIBRATION").unwrap_or_else(|_| FILE.to_string());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "calibration file {path} is missing ({e}); it must sit in shared/ beside the checkout"
        )
    });
    let cases = parse(&text).expect("calibration file parses");
    assert!(!cases.is_empty(), "no case in {path}");
    let mut failures = Vec::new();
    println!("| case | measured | predicted | error | scenario |");
    println!("|---|---:|---:|---:|---|");
    for c in &cases {
        match predict(c) {
            Ok(p) => {
                let err = p.error(c.value);
                println!(
                    "| {} | {:.1} | {:.1} | {:+.1}% | `{}` |",
                    c.id,
                    c.value,
                    p.value,
                    err * 100.0,
                    p.scenario
                );
                let known = KNOWN_MISSES.iter().find(|(id, _)| *id == c.id);
                match known {
                    None if err.abs() > 0.10 => failures.push(format!(
                        "{}: measured {} predicted {:.2} ({:+.1}%)",
                        c.id,
                        c.value,
                        p.value,
                        err * 100.0
                    )),
                    Some((id, why)) if err.abs() <= 0.10 => failures.push(format!(
                        "{id} is now within 10% ({:+.1}%): remove it from KNOWN_MISSES ({why})",
                        err * 100.0
                    )),
                    Some((id, _)) if err.abs() > 0.50 => {
                        failures.push(format!("{id}: known miss got worse: {:+.1}%", err * 100.0))
                    }
                    _ => {}
                }
            }
            Err(e) => failures.push(format!("{}: cannot predict: {e}", c.id)),
        }
    }
    assert!(
        failures.is_empty(),
        "cases outside 10%:\n{}",
        failures.join("\n")
    );
}
