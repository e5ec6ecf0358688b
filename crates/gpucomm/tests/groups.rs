//! The `groups` example (parallel groups as a training job sets them up:
//! tensor- and data-parallel `split`s, an expert exchange with
//! `all_to_all_v`, pipeline stages with `exchange`) run end to end under the
//! launcher: ranks are processes that join from the launcher's environment
//! (`BootstrapConfig::from_env`), over shared memory and TCP. The test
//! binary re-executes itself as the ranks and runs the example's own code.

#[allow(dead_code)] // the example's `main` is not called here
#[path = "../examples/groups.rs"]
mod groups;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpucomm::TransportChoice;
use gpucomm::launch::{LaunchConfig, LineSink, Stream, launch_with};

const ROLE: &str = "GPUCOMM_GROUPS_TEST_ROLE";

/// The rank role: never runs unless re-executed by the test below.
#[test]
#[ignore]
fn groups_rank() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    match groups::run() {
        Ok(line) => println!("{line}"),
        Err(e) => panic!("{e}"),
    }
}

fn job(n: usize, tp: usize, transport: TransportChoice) -> Vec<String> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let o = out.clone();
    let sink: LineSink = Arc::new(move |_, stream, line| {
        if stream == Stream::Stdout {
            o.lock()
                .unwrap()
                .push(String::from_utf8_lossy(line).into_owned());
        }
    });
    let mut cfg = LaunchConfig::new(n, std::env::current_exe().unwrap()).args([
        "--exact",
        "groups_rank",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    cfg.transport = Some(transport);
    cfg.rank_timeout = Some(Duration::from_secs(30));
    cfg.timeout = Some(Duration::from_secs(90));
    cfg.env = vec![
        (ROLE.into(), "1".into()),
        ("GROUPS_TP".into(), tp.to_string().into()),
    ];
    let r = launch_with(&cfg, sink);
    let lines = out.lock().unwrap().clone();
    assert!(r.is_ok(), "{r:?}\n{}", lines.join("\n"));
    lines
}

#[test]
fn the_groups_example_runs_under_the_launcher() {
    for (n, tp, transport) in [
        (4, 2, TransportChoice::Shm),
        (8, 2, TransportChoice::Auto),
        (6, 3, TransportChoice::Tcp),
    ] {
        let lines = job(n, tp, transport);
        for r in 0..n {
            let want = format!("rank {r} of {n}: tensor-parallel rank {} of {tp}", r % tp);
            assert!(
                lines
                    .iter()
                    .any(|l| l.contains(&want) && l.ends_with("all checked")),
                "{want}\n{}",
                lines.join("\n")
            );
        }
    }
}
