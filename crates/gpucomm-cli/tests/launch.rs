//! `gpucomm launch`: environment, output prefixes, failure propagation,
//! process groups (nothing a rank started outlives the job), signals to the
//! launcher, output errors.

mod common;

use common::gpucomm;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);

/// `gpucomm launch -n N OPTIONS -- sh -c SCRIPT`.
fn launch_sh(n: &str, options: &[&str], script: &str) -> common::Output {
    let mut args = vec!["launch", "-n", n];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    gpucomm(&args, LIMIT)
}

#[test]
fn prefixes_every_line_with_its_rank() {
    let out = launch_sh(
        "3",
        &[],
        "echo out $GPUCOMM_RANK of $GPUCOMM_WORLD_SIZE; echo err $GPUCOMM_RANK >&2; echo second",
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
    let out = launch_sh(
        "4",
        &["--transport", "tcp"],
        "echo $GPUCOMM_STORE $GPUCOMM_TOKEN $GPUCOMM_TRANSPORT",
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
    let out = launch_sh(
        "3",
        &[],
        r#"if [ "$GPUCOMM_RANK" = 2 ]; then sleep 0.2; exit 9; fi; exec sleep 60"#,
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
    let out = launch_sh(
        "2",
        &[],
        r#"if [ "$GPUCOMM_RANK" = 0 ]; then kill -KILL $$; fi; exec sleep 60"#,
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

/// `--algorithm auto` is accepted (the tuner chooses), and it overrides a
/// GPUCOMM_ALGORITHM the launcher inherited; it was refused as an unknown
/// algorithm though the help says "auto means none".
#[test]
fn algorithm_auto_is_accepted_and_overrides_the_environment() {
    let run = |args: &[&str]| {
        let out = Command::new(common::exe())
            .args(["launch", "-n", "2"])
            .args(args)
            .args(["--", "sh", "-c", "echo algo=$GPUCOMM_ALGORITHM"])
            .env("GPUCOMM_ALGORITHM", "ring")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stdout}{stderr}");
        stdout
    };
    for (args, want) in [
        (&["--algorithm", "auto"][..], "algo=auto"),
        (&["--algorithm", "AUTO"][..], "algo=auto"),
        (&["--algorithm", "tree"][..], "algo=tree"),
        (&[][..], "algo=ring"),
    ] {
        let out = run(args);
        assert_eq!(out.matches(want).count(), 2, "{args:?}: {out}");
    }
    let out = gpucomm(
        &["launch", "-n", "1", "--algorithm", "magic", "--", "true"],
        LIMIT,
    );
    out.assert_fails(2, "expected auto or one of ring");
}

#[test]
fn bad_invocations_are_clear_errors() {
    let out = gpucomm(&["launch", "-n", "2"], LIMIT);
    out.assert_fails(2, "<PROGRAM>");
    // A bad command line exits 2, as documented, whether clap or the
    // launcher's own checks find it.
    let out = gpucomm(&["launch", "-n", "0", "--", "true"], LIMIT);
    out.assert_fails(2, "-n must be at least 1");
    // A mistyped option was started as the program (exit 1, "cannot start
    // rank 0 (--timout)"); the program's own options still pass through.
    let out = gpucomm(&["launch", "-n", "1", "--timout", "20", "true"], LIMIT);
    out.assert_fails(2, "unknown option \"--timout\"");
    let out = gpucomm(&["launch", "-n", "1", "--", "sh", "-c", "exit 0"], LIMIT);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    let out = gpucomm(&["launch", "-n", "1025", "--", "true"], LIMIT);
    out.assert_fails(2, "-n 1025 is more than gpucomm starts on one host (1024)");
    let out = gpucomm(&["launch", "-n", "2", "--", "/nonexistent/program"], LIMIT);
    out.assert_fails(1, "cannot start rank 0 (/nonexistent/program)");
    let out = gpucomm(
        &["launch", "-n", "2", "--transport", "ib", "--", "true"],
        LIMIT,
    );
    out.assert_fails(2, "auto, shm or tcp");
}

/// A `sleep` argument no other process has: the seconds encode this test
/// process and the test (`n`), so leftovers can be found in `/proc`.
fn unique_sleep(n: u32) -> String {
    format!("{}.{}{n:02}", 80 + n, std::process::id())
}

/// The pids of the live processes with `arg` among their arguments.
fn processes_with_arg(arg: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // A zombie's cmdline is empty: only the living match.
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline.split(|&b| b == 0).any(|a| a == arg.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// Asserts that no process with `arg` is left (within a moment: a killed
/// process takes a little while to go); kills any that is, by pid.
fn assert_none_left(arg: &str, what: &str) {
    let until = Instant::now() + Duration::from_secs(2);
    let mut left = processes_with_arg(arg);
    while !left.is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        left = processes_with_arg(arg);
    }
    for pid in &left {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(
        left.is_empty(),
        "{what}: `sleep {arg}` left running (pids {left:?})"
    );
}

/// Runs `gpucomm ARGS` with its stdout on `stdout`: exit code and stderr.
fn gpucomm_with_stdout(args: &[&str], stdout: Stdio) -> (Option<i32>, String) {
    gpucomm_reading(args, stdout, |_| {})
}

/// Runs gpucomm with `stdout`, after `then` (given the child) has run;
/// returns its exit code and stderr.
fn gpucomm_reading(
    args: &[&str],
    stdout: Stdio,
    then: impl FnOnce(&mut Child),
) -> (Option<i32>, String) {
    let mut child = Command::new(common::exe())
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting gpucomm");
    then(&mut child);
    let status = wait_at_most(&mut child, LIMIT);
    (status.code(), read_all(child.stderr.take()))
}

/// Everything left in a child's pipe.
fn read_all(pipe: Option<impl Read>) -> String {
    let mut s = String::new();
    pipe.expect("a piped stream")
        .read_to_string(&mut s)
        .unwrap();
    s
}

fn wait_at_most(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let until = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gpucomm still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_timeout_stops_what_the_ranks_started() {
    // The ranks ignore SIGTERM (and so does their child): SIGKILL after the
    // grace must reach the child too, not only the rank's shell.
    let tag = unique_sleep(1);
    let script = format!(r#"trap "" TERM; sleep {tag} & wait"#);
    let out = launch_sh("2", &["--timeout", "1", "--grace", "0.5"], &script);
    out.assert_fails(124, "timed out after 1.0 s with rank(s) 0, 1 still running");
    assert_none_left(&tag, "after --timeout");
    assert!(out.elapsed < Duration::from_secs(10), "{}", out.dump());
}

#[test]
fn a_failure_stops_what_every_rank_started() {
    // Rank 0 fails, leaving a child behind; rank 1's shell is stopped while
    // its child runs. Neither child may outlive the job.
    let (left_by_0, child_of_1) = (unique_sleep(2), unique_sleep(3));
    let script = format!(
        r#"if [ "$GPUCOMM_RANK" = 0 ]; then sleep {left_by_0} & exit 3; fi; sleep {child_of_1}"#
    );
    let out = launch_sh("2", &[], &script);
    out.assert_fails(3, "rank 0 failed first: it exited with code 3");
    assert!(out.stderr.contains("stopped rank(s) 1"), "{}", out.dump());
    assert_none_left(&left_by_0, "the failed rank's child");
    assert_none_left(&child_of_1, "the stopped rank's child");
    assert!(out.elapsed < Duration::from_secs(10), "{}", out.dump());
}

#[test]
fn a_sigterm_to_the_launcher_is_forwarded_to_every_rank_group() {
    let tag = unique_sleep(4);
    let script = format!("sleep {tag}; echo not stopped");
    let mut child = Command::new(common::exe())
        .args(["launch", "-n", "2", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting gpucomm");
    let until = Instant::now() + Duration::from_secs(10);
    while processes_with_arg(&tag).len() < 2 {
        assert!(Instant::now() < until, "the ranks did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = wait_at_most(&mut child, LIMIT);
    let (out, err) = (read_all(child.stdout.take()), read_all(child.stderr.take()));
    assert_none_left(&tag, "after SIGTERM to the launcher");
    assert_eq!(status.code(), Some(128 + 15), "{status:?}\n{out}\n{err}");
    assert!(
        err.contains("interrupted by SIGTERM; forwarded it to rank(s) 0, 1"),
        "{err}"
    );
    assert!(!out.contains("not stopped"), "{out}");
}

#[test]
fn a_signal_while_the_ranks_start_names_only_the_ranks_started() {
    // Rank 0 sends SIGINT to the launcher as soon as it runs, while the
    // launcher is still starting the other 1023 ranks: it starts no more,
    // stops those it started, and reports only those (not 1024 ranks, the
    // unstarted ones as "stopped").
    let tag = unique_sleep(5);
    let script = format!(r#"[ "$GPUCOMM_RANK" = 0 ] && kill -INT $PPID; exec sleep {tag}"#);
    let out = launch_sh("1024", &[], &script);
    assert_none_left(&tag, "after SIGINT while starting");
    assert_eq!(out.code, Some(128 + 2), "{}", out.dump());
    let msg = out
        .stderr
        .lines()
        .find(|l| l.starts_with("gpucomm launch: interrupted by SIGINT"))
        .unwrap_or_else(|| panic!("{}", out.dump()));
    // "... while starting the ranks (K of 1024 started); forwarded it to
    // rank(s) 0, 1, ... and stopped them; N rank(s) never started"
    let started: usize = msg
        .split_once("while starting the ranks (")
        .and_then(|(_, r)| r.split_once(" of 1024 started)"))
        .and_then(|(k, _)| k.parse().ok())
        .unwrap_or_else(|| panic!("{msg}"));
    assert!((1..1024).contains(&started), "{msg}");
    assert!(
        msg.ends_with(&format!("; {} rank(s) never started", 1024 - started)),
        "{msg}"
    );
    let forwarded: Vec<usize> = msg
        .split_once("forwarded it to rank(s) ")
        .and_then(|(_, r)| r.split_once(" and stopped them"))
        .map(|(list, _)| list.split(", ").map(|r| r.parse().unwrap()).collect())
        .unwrap_or_default();
    assert!(
        !forwarded.is_empty() && forwarded.iter().all(|&r| r < started),
        "{msg}"
    );
    assert!(out.elapsed < Duration::from_secs(20), "{}", out.dump());
}

#[test]
fn output_that_cannot_be_written_is_an_error_but_a_closed_pipe_is_not() {
    let full = || {
        Stdio::from(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .expect("opening /dev/full"),
        )
    };
    let (code, err) =
        gpucomm_with_stdout(&["launch", "-n", "2", "--", "sh", "-c", "echo hi"], full());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cannot write the ranks' output to stdout: No space left on device"),
        "{err}"
    );
    // A failed rank's code still wins.
    let (code, err) = gpucomm_with_stdout(
        &["launch", "-n", "2", "--", "sh", "-c", "echo hi; exit 4"],
        full(),
    );
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("rank 0 failed first") || err.contains("rank 1 failed first"),
        "{err}"
    );
    // A reader that went away (`| head`): quiet, as before.
    let (code, err) = gpucomm_reading(
        &[
            "launch",
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            "sleep 0.2; echo hi; echo again",
        ],
        Stdio::piped(),
        |child| drop(child.stdout.take()),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}
