//! Runs the built `gpucomm` binary with a hard deadline, so that a hang
//! fails the test instead of stalling the suite.

#![allow(dead_code)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a run of the binary produced.
#[derive(Debug)]
pub struct Output {
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Wall time.
    pub elapsed: Duration,
}

impl Output {
    /// Asserts the run exited with 0; its stdout.
    pub fn assert_ok(&self) -> &str {
        assert_eq!(self.code, Some(0), "{}", self.dump());
        &self.stdout
    }

    /// Asserts the run exited with `code` and said `says` on stderr.
    pub fn assert_fails(&self, code: i32, says: &str) {
        assert_eq!(self.code, Some(code), "{}", self.dump());
        assert!(self.stderr.contains(says), "{}", self.dump());
    }

    /// Everything, for assertion messages.
    pub fn dump(&self) -> String {
        format!(
            "exit {:?} after {:.2} s\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.elapsed.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }
}

/// Runs `gpucomm ARGS`; kills it and panics after `limit`.
pub fn gpucomm(args: &[&str], limit: Duration) -> Output {
    run(None, args, limit)
}

/// [`gpucomm`] with `dir` as the current directory.
pub fn gpucomm_in(dir: &std::path::Path, args: &[&str], limit: Duration) -> Output {
    run(Some(dir), args, limit)
}

fn run(dir: Option<&std::path::Path>, args: &[&str], limit: Duration) -> Output {
    let start = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpucomm"));
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting gpucomm");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for gpucomm") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gpucomm {args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        code: status.code(),
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
        elapsed: start.elapsed(),
    }
}

/// A fresh directory of this test process under the system's temporary
/// directory, `gpucomm-{tag}-{pid}` (created if missing).
pub fn scratch_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gpucomm-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The path of the binary under test.
pub fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_gpucomm")
}

/// Runs `gpucomm bench --json` with `args` (its own `--timeout` of
/// `timeout_s` seconds, each process killed after `limit`) and returns its
/// rows, asserting a clean exit and at least one row.
pub fn bench_json_rows(args: &[&str], timeout_s: &str, limit: Duration) -> Vec<serde_json::Value> {
    let mut argv = vec![
        "bench",
        "--json",
        "--rank-timeout",
        "20",
        "--timeout",
        timeout_s,
    ];
    argv.extend_from_slice(args);
    let out = gpucomm(&argv, limit);
    assert_eq!(out.code, Some(0), "{argv:?}\n{}", out.dump());
    let rows: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{}", out.dump())))
        .collect();
    assert!(!rows.is_empty(), "{}", out.dump());
    rows
}

/// Asserts that every bench row checked out (no wrong element, in or out
/// of place) and took some time.
pub fn assert_all_right(rows: &[serde_json::Value], what: &str) {
    for r in rows {
        assert_eq!(r["wrong"], 0, "{what}: {r}");
        assert_eq!(r["in_place_wrong"], 0, "{what}: {r}");
        assert!(r["time_us"].as_f64().unwrap() > 0.0, "{what}: {r}");
    }
}
