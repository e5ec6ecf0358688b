//! `gpucomm launch`: environment, output prefixes, failure propagation.

mod common;

use common::gpucomm;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn prefixes_every_line_with_its_rank() {
    let out = gpucomm(
        &[
            "launch",
            "-n",
            "3",
            "--",
            "sh",
            "-c",
            "echo out $GPUCOMM_RANK of $GPUCOMM_WORLD_SIZE; echo err $GPUCOMM_RANK >&2; echo second",
        ],
        LIMIT,
    );
    out.assert_ok();
    for r in 0..3 {
        assert!(
            out.stdout.contains(&format!("[{r}] out {r} of 3\n")),
            "{}",
            out.dump()
        );
        assert!(
            out.stderr.contains(&format!("[{r}] err {r}\n")),
            "{}",
            out.dump()
        );
    }
    assert_eq!(out.stdout.matches("second").count(), 3, "{}", out.dump());
    assert!(
        out.stdout.lines().all(|l| l.starts_with('[')),
        "{}",
        out.dump()
    );
}

#[test]
fn every_rank_sees_the_same_store_and_token() {
    let out = gpucomm(
        &[
            "launch",
            "-n",
            "4",
            "--transport",
            "tcp",
            "--",
            "sh",
            "-c",
            "echo $GPUCOMM_STORE $GPUCOMM_TOKEN $GPUCOMM_TRANSPORT",
        ],
        LIMIT,
    );
    out.assert_ok();
    let rest: Vec<&str> = out
        .stdout
        .lines()
        .map(|l| l.split_once(' ').unwrap().1)
        .collect();
    assert_eq!(rest.len(), 4);
    assert!(rest.iter().all(|r| *r == rest[0]), "{}", out.dump());
    assert!(
        rest[0].starts_with("127.0.0.1:") && rest[0].ends_with(" tcp"),
        "{}",
        out.dump()
    );
}

#[test]
fn names_the_rank_that_failed_first_and_stops_the_others() {
    let out = gpucomm(
        &[
            "launch",
            "-n",
            "3",
            "--",
            "sh",
            "-c",
            r#"if [ "$GPUCOMM_RANK" = 2 ]; then sleep 0.2; exit 9; fi; exec sleep 60"#,
        ],
        LIMIT,
    );
    out.assert_fails(9, "rank 2 failed first: it exited with code 9");
    assert!(
        out.stderr.contains("stopped rank(s) 0, 1"),
        "{}",
        out.dump()
    );
    assert!(out.elapsed < Duration::from_secs(10), "{}", out.dump());
}

#[test]
fn a_rank_killed_by_a_signal_is_named_with_the_signal() {
    let out = gpucomm(
        &[
            "launch",
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            r#"if [ "$GPUCOMM_RANK" = 0 ]; then kill -KILL $$; fi; exec sleep 60"#,
        ],
        LIMIT,
    );
    assert_eq!(out.code, Some(128 + 9), "{}", out.dump());
    assert!(
        out.stderr
            .contains("rank 0 failed first: it was killed by signal 9 (SIGKILL)"),
        "{}",
        out.dump()
    );
}

#[test]
fn the_timeout_stops_a_hung_job() {
    let out = gpucomm(
        &["launch", "-n", "2", "--timeout", "0.5", "--", "sleep", "60"],
        LIMIT,
    );
    out.assert_fails(124, "timed out after 0.5 s with rank(s) 0, 1 still running");
    assert!(out.elapsed < Duration::from_secs(10), "{}", out.dump());
}

#[test]
fn bad_invocations_are_clear_errors() {
    let out = gpucomm(&["launch", "-n", "2"], LIMIT);
    out.assert_fails(2, "<PROGRAM>");
    let out = gpucomm(&["launch", "-n", "0", "--", "true"], LIMIT);
    out.assert_fails(1, "at least 1");
    let out = gpucomm(&["launch", "-n", "2", "--", "/nonexistent/program"], LIMIT);
    out.assert_fails(1, "cannot start rank 0 (/nonexistent/program)");
    let out = gpucomm(
        &["launch", "-n", "2", "--transport", "ib", "--", "true"],
        LIMIT,
    );
    out.assert_fails(2, "auto, shm or tcp");
}
