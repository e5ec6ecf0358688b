//! `gpucomm bench`: every collective over shared memory and TCP on 2, 3, 4
//! and 8 ranks with every result checked against a reference, the table format,
//! and the failure cases (a killed rank, abort, a mismatched call, a hung
//! rank, a stray connection sending garbage, a wrong token), each of which
//! must end in an error within the timeout naming the rank that failed.

mod common;

use common::{Output, assert_all_right, bench_json_rows, gpucomm};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

const COLLECTIVES: [&str; 10] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "sendrecv",
    "barrier",
    "gather",
    "scatter",
];

fn json_rows(args: &[&str]) -> Vec<serde_json::Value> {
    bench_json_rows(args, "50", LIMIT)
}

fn sweep_every_collective(transport: &str) {
    for nranks in ["2", "3", "4", "8"] {
        // The last rank is the root: not rank 0, which algorithms favour.
        let root = (nranks.parse::<usize>().unwrap() - 1).to_string();
        for coll in COLLECTIVES {
            // Odd sizes: counts that do not divide by the number of ranks
            // (with 8 ranks, the first blocked sizes are empty).
            let rows = json_rows(&[
                coll,
                "--ranks",
                nranks,
                "--transport",
                transport,
                "-b",
                "4",
                "-e",
                "20K",
                "-f",
                "9",
                "-n",
                "2",
                "-w",
                "1",
                "-r",
                &root,
            ]);
            let what = format!("{coll} on {nranks} ranks over {transport}");
            assert_all_right(&rows, &what);
            let expected_rows = if coll == "barrier" { 1 } else { 5 }; // 4 36 324 2916 20480
            assert_eq!(rows.len(), expected_rows, "{what}: {rows:?}");
            assert!(
                rows.iter()
                    .all(|r| r["ranks"] == nranks.parse::<u64>().unwrap()),
                "{what}"
            );
        }
    }
}

#[test]
fn every_collective_over_shared_memory() {
    sweep_every_collective("shm");
}

#[test]
fn every_collective_over_tcp() {
    sweep_every_collective("tcp");
}

#[test]
fn every_dtype_and_op() {
    let ops = ["sum", "prod", "min", "max", "avg"];
    let dtypes = [
        "f32", "f64", "f16", "bf16", "i8", "u8", "i32", "u32", "i64", "u64",
    ];
    for (i, dtype) in dtypes.iter().enumerate() {
        for (coll, op) in [
            ("all_reduce", ops[i % 5]),
            ("reduce_scatter", ops[(i + 2) % 5]),
            ("reduce", ops[(i + 4) % 5]),
        ] {
            let transport = if i % 2 == 0 { "shm" } else { "tcp" };
            let rows = json_rows(&[
                coll,
                "--ranks",
                "3",
                "--transport",
                transport,
                "-d",
                dtype,
                "-o",
                op,
                "-b",
                "3",
                "-e",
                "3000",
                "-f",
                "10",
                "-n",
                "1",
                "-w",
                "0",
                "-r",
                "2",
            ]);
            assert_all_right(&rows, &format!("{coll} {dtype} {op} over {transport}"));
        }
    }
}

#[test]
fn forced_algorithms_check_clean() {
    for algo in ["ring", "direct"] {
        let rows = json_rows(&[
            "all_reduce",
            "--ranks",
            "3",
            "--algorithm",
            algo,
            "-b",
            "8",
            "-e",
            "64K",
            "-f",
            "16",
            "-n",
            "2",
        ]);
        assert_all_right(&rows, algo);
        assert!(rows.iter().all(|r| r["algorithm"] == algo));
    }
}

#[test]
fn the_table_is_in_nccl_tests_format() {
    let out = gpucomm(
        &[
            "bench",
            "-b",
            "8",
            "-e",
            "1K",
            "-f",
            "4",
            "-n",
            "5",
            "--timeout",
            "50",
        ],
        LIMIT,
    );
    out.assert_ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with(
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        )),
        "{}",
        out.dump()
    );
    let rows: Vec<Vec<&str>> = lines
        .iter()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 5, "{}", out.dump());
    for (row, size) in rows.iter().zip([8u64, 32, 128, 512, 1024]) {
        assert_eq!(row.len(), 13, "{row:?}");
        assert_eq!(row[0], size.to_string());
        assert_eq!(row[1], (size / 4).to_string());
        assert_eq!(&row[2..5], &["float", "sum", "-1"]);
        assert_eq!(row[8], "0");
        assert_eq!(row[12], "0");
    }
    assert!(
        out.stdout.contains("# Out of bounds values : 0 OK"),
        "{}",
        out.dump()
    );
    assert!(
        out.stdout.contains("# Avg bus bandwidth    : "),
        "{}",
        out.dump()
    );
}

#[test]
fn no_check_prints_na() {
    let out = gpucomm(
        &[
            "bench",
            "broadcast",
            "-b",
            "64",
            "-e",
            "64",
            "--no-check",
            "-r",
            "1",
        ],
        LIMIT,
    );
    out.assert_ok();
    let row = out.stdout.lines().find(|l| !l.starts_with('#')).unwrap();
    assert_eq!(row.matches("N/A").count(), 2, "{row}");
    assert!(row.contains("  none       1"), "{row}");
}

#[test]
fn bad_arguments_fail_cleanly() {
    // A bad command line exits 2 whether clap or the bench finds it.
    let out = gpucomm(&["bench", "broadcast", "--root", "5"], LIMIT);
    out.assert_fails(2, "--root 5 is not a rank of a 2-rank job");
    let out = gpucomm(&["bench", "all_reduce", "-b", "1M", "-e", "1K"], LIMIT);
    out.assert_fails(2, "larger than max bytes");
    gpucomm(&["bench", "-f", "0"], LIMIT).assert_fails(2, "step factor must be at least 2");
    gpucomm(&["bench", "-n", "0"], LIMIT).assert_fails(2, "--iters must be at least 1");
    gpucomm(&["bench", "--ranks", "0"], LIMIT).assert_fails(2, "--ranks must be at least 1");
    gpucomm(&["bench", "--algorithm", "foo"], LIMIT).assert_fails(2, "expected auto or one of");
    // GPU options without GPU memory (they were ignored).
    gpucomm(&["bench", "--gpu-path", "ipc"], LIMIT)
        .assert_fails(2, "--gpu-path ipc needs --memory device or pinned");
    gpucomm(&["bench", "--device", "3"], LIMIT)
        .assert_fails(2, "--device 3 needs --memory device or pinned");
    // Buffers beyond the host's memory: refused before any rank starts
    // (each rank mapped 3 TiB and ran row by row towards the OOM killer),
    // a size too large for this host is a bad command line (exit 2).
    let out = gpucomm(
        &["bench", "-b", "1G", "-e", "1T", "-n", "1", "-w", "0"],
        LIMIT,
    );
    out.assert_fails(
        2,
        "all_reduce of 1 TiB on 2 ranks needs about 6144.0 GiB of host memory",
    );
    let out = gpucomm(&["bench", "scan"], LIMIT);
    out.assert_fails(2, "unknown collective");
    // A worker started by hand, outside any launcher, says why it cannot run.
    let out = gpucomm(&["bench", "--worker"], LIMIT);
    out.assert_fails(1, "no launcher environment found");
}

/// Runs a bench with an injected fault; it must fail within `within`.
fn faulty(args: &[&str], within: Duration) -> Output {
    let mut argv = vec![
        "bench",
        "-b",
        "8",
        "-e",
        "256K",
        "-f",
        "8",
        "-n",
        "40",
        "-w",
        "1",
        "--timeout",
        "40",
    ];
    argv.extend_from_slice(args);
    if !args.contains(&"--rank-timeout") {
        argv.extend_from_slice(&["--rank-timeout", "5"]);
    }
    let out = gpucomm(&argv, LIMIT);
    assert_ne!(out.code, Some(0), "{argv:?} succeeded:\n{}", out.dump());
    assert!(
        out.elapsed < within,
        "{argv:?} took too long:\n{}",
        out.dump()
    );
    out
}

#[test]
fn a_killed_rank_is_named_and_the_others_fail_with_an_error() {
    for transport in ["shm", "tcp"] {
        let out = faulty(
            &[
                "--ranks",
                "3",
                "--transport",
                transport,
                "--fault",
                "kill",
                "--fault-rank",
                "1",
                "--fault-row",
                "2",
            ],
            Duration::from_secs(20),
        );
        assert_eq!(out.code, Some(128 + 6), "{}", out.dump());
        assert!(
            out.stderr
                .contains("rank 1 failed first: it was killed by signal 6 (SIGABRT)"),
            "{}",
            out.dump()
        );
        // The survivors noticed on their own (within the term delay) and said so.
        for r in [0, 2] {
            assert!(
                out.stderr.contains(&format!("[{r}] gpucomm: error:")),
                "rank {r} over {transport}:\n{}",
                out.dump()
            );
        }
    }
}

#[test]
fn a_killed_rank_under_gpucomm_launch() {
    // The bench worker is an ordinary program of the launcher: run it directly.
    let out = gpucomm(
        &[
            "launch",
            "-n",
            "2",
            "--term-delay",
            "5",
            "--timeout",
            "40",
            "--rank-timeout",
            "5",
            "--transport",
            "tcp",
            "--",
            common::exe(),
            "bench",
            "--worker",
            "--ranks",
            "2",
            "-b",
            "8",
            "-e",
            "64K",
            "-n",
            "20",
            "--fault",
            "kill",
            "--fault-rank",
            "0",
            "--fault-row",
            "1",
        ],
        LIMIT,
    );
    assert_eq!(out.code, Some(128 + 6), "{}", out.dump());
    assert!(
        out.stderr
            .contains("rank 0 failed first: it was killed by signal 6 (SIGABRT)"),
        "{}",
        out.dump()
    );
    assert!(out.stderr.contains("[1] gpucomm: error:"), "{}", out.dump());
    assert!(out.stdout.contains("[0] @gpucomm-bench"), "{}", out.dump());
}

#[test]
fn a_wrong_result_is_counted_and_fails_the_run() {
    // One element of rank 1's out-of-place result is changed after the
    // collective, as a corrupting transport would: the row counts it, the
    // footer says FAILED, and the run exits 1 as nccl-tests exits
    // EXIT_FAILURE (it exited 2, the code of a bad command line).
    let out = faulty(
        &[
            "--ranks",
            "2",
            "--fault",
            "corrupt",
            "--fault-rank",
            "1",
            "--fault-row",
            "1",
        ],
        LIMIT,
    );
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert!(
        out.stdout.contains("# Out of bounds values : 1 FAILED"),
        "{}",
        out.dump()
    );
    assert!(
        out.stderr.contains("1 result(s) had wrong elements"),
        "{}",
        out.dump()
    );
    // The other rows are right.
    let rows: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(rows.len(), 6, "8 B to 256 KiB by 8: {}", out.dump());
    for (i, row) in rows.iter().enumerate() {
        let cols: Vec<&str> = row.split_whitespace().collect();
        // out-of-place #wrong is column 9, in-place column 13.
        let want = if i == 1 { "1" } else { "0" };
        assert_eq!((cols[8], cols[12]), (want, "0"), "row {i}: {row}");
    }
}

#[test]
fn abort_from_another_thread() {
    let out = faulty(
        &[
            "--ranks",
            "2",
            "--fault",
            "abort",
            "--fault-rank",
            "0",
            "--fault-row",
            "1",
        ],
        Duration::from_secs(20),
    );
    assert!(out.stderr.contains("rank 0 failed first"), "{}", out.dump());
    assert!(
        out.stderr.to_lowercase().contains("abort"),
        "{}",
        out.dump()
    );
}

#[test]
fn a_mismatched_call_is_an_error_on_every_rank() {
    for transport in ["shm", "tcp"] {
        let out = faulty(
            &[
                "--ranks",
                "3",
                "--transport",
                transport,
                "--fault",
                "mismatch",
                "--fault-rank",
                "2",
                "--fault-row",
                "1",
            ],
            Duration::from_secs(20),
        );
        assert!(out.stderr.contains("failed first"), "{}", out.dump());
        assert!(
            out.stderr.to_lowercase().contains("mismatch"),
            "{}",
            out.dump()
        );
    }
}

#[test]
fn a_hung_rank_makes_the_others_time_out() {
    let out = faulty(
        &[
            "--ranks",
            "2",
            "--transport",
            "tcp",
            "--rank-timeout",
            "2",
            "--fault",
            "hang",
            "--fault-rank",
            "1",
            "--fault-row",
            "1",
        ],
        Duration::from_secs(20),
    );
    assert!(out.stderr.contains("rank 0 failed first"), "{}", out.dump());
    assert!(out.stderr.contains("timed out"), "{}", out.dump());
}

#[test]
fn a_stray_connection_sending_garbage_does_not_disturb_the_job() {
    for transport in ["shm", "tcp"] {
        let rows = json_rows(&[
            "--ranks",
            "3",
            "--transport",
            transport,
            "-b",
            "8",
            "-e",
            "4K",
            "-f",
            "8",
            "-n",
            "2",
            "--fault",
            "garbage-store",
            "--fault-rank",
            "1",
        ]);
        assert_all_right(&rows, "garbage-store");
    }
}

#[test]
fn a_rank_with_the_wrong_token_is_refused() {
    let out = faulty(
        &["--ranks", "2", "--fault", "bad-token", "--fault-rank", "1"],
        Duration::from_secs(25),
    );
    assert!(out.stderr.contains("failed first"), "{}", out.dump());
    assert!(
        out.stderr
            .contains("[1] gpucomm: error: rank 1 cannot join the job"),
        "{}",
        out.dump()
    );
}

#[test]
fn threads_instead_of_processes() {
    for coll in ["all_reduce", "all_to_all", "broadcast", "gather", "scatter"] {
        let rows = json_rows(&[
            coll,
            "--threads",
            "--ranks",
            "3",
            "-b",
            "8",
            "-e",
            "40K",
            "-f",
            "9",
            "-n",
            "2",
            "-r",
            "2",
        ]);
        assert_all_right(&rows, coll);
        assert!(
            rows.iter().all(|r| r["transport"] == "in-process"),
            "{rows:?}"
        );
    }
}

#[test]
fn the_environment_algorithm_is_used_or_refused_as_such() {
    let env = |v: &str, args: &[&str]| {
        let out = std::process::Command::new(common::exe())
            .args(args)
            .env("GPUCOMM_ALGORITHM", v)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // It blamed "the bench worker runs under the bench coordinator".
    let (code, _, err) = env("foo", &["bench", "-b", "8", "-e", "8"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("GPUCOMM_ALGORITHM=\"foo\" (environment): unknown algorithm"),
        "{err}"
    );
    // A known algorithm that cannot run the collective is the environment's
    // fault too: exit 1, not the 2 of a bad command line.
    let (code, _, err) = env("tree", &["bench", "all_to_all", "-b", "8", "-e", "8"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("GPUCOMM_ALGORITHM"), "{err}");
    // A valid one was silently ignored; it is the bench's algorithm now.
    let (code, out, err) = env("bruck", &["bench", "all_gather", "-b", "8", "-e", "64"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("algorithm bruck"), "{out}");
    // --algorithm wins over the environment.
    let (code, out, err) = env(
        "bruck",
        &["bench", "-b", "8", "-e", "64", "--algorithm", "ring"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("algorithm ring"), "{out}");
}

#[test]
fn threads_are_bound_by_the_run_timeout() {
    // --threads ignored --timeout: only each wait was bounded, so a long
    // sweep ran on past the run's bound. 500 all_reduces of 64 MiB take
    // seconds at any memory bandwidth; the bound is a fifth of one.
    let out = gpucomm(
        &[
            "bench",
            "--threads",
            "--ranks",
            "2",
            "-b",
            "64M",
            "-e",
            "64M",
            "-n",
            "500",
            "--timeout",
            "0.2",
        ],
        LIMIT,
    );
    out.assert_fails(124, "timed out after 0.2 s with rank(s) 0, 1 still running");
}

#[test]
fn threads_refuse_what_only_processes_can_honour() {
    // --transport tcp ran in-process and said so only in the header.
    for transport in ["tcp", "shm", "auto"] {
        let out = gpucomm(
            &["bench", "--threads", "--transport", transport, "-e", "64"],
            LIMIT,
        );
        out.assert_fails(2, "--transport");
        assert!(out.stdout.is_empty(), "{}", out.dump());
    }
    // The internal fault injection, refused at the same place.
    let out = gpucomm(
        &["bench", "--threads", "--fault", "kill", "-e", "64"],
        LIMIT,
    );
    out.assert_fails(2, "--fault");
}

#[test]
fn a_bad_gpu_path_names_where_it_came_from() {
    // The flag's error named GPUCOMM_GPU_PATH=foo, which was not set.
    let out = gpucomm(&["bench", "--gpu-path", "foo"], LIMIT);
    out.assert_fails(2, "--gpu-path");
    assert!(
        out.stderr
            .contains("\"foo\" (expected auto, ipc or staged)")
            && !out.stderr.contains("GPUCOMM_GPU_PATH"),
        "{}",
        out.dump()
    );
    // From the environment, the error names the variable.
    let out = std::process::Command::new(common::exe())
        .args([
            "bench",
            "--memory",
            "device",
            "--fake-gpu",
            "-e",
            "64",
            "--timeout",
            "30",
        ])
        .env("GPUCOMM_GPU_PATH", "foo")
        .output()
        .unwrap();
    // Once, before any rank starts (each of the ranks said it).
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("GPUCOMM_GPU_PATH=\"foo\" (environment): unknown GPU path"),
        "{err}"
    );
    assert_eq!(err.matches("GPUCOMM_GPU_PATH").count(), 1, "{err}");
    assert!(!err.contains("rank"), "{err}");
    // Pinned memory makes a device communicator too: the same, once.
    let out = std::process::Command::new(common::exe())
        .args(["bench", "--memory", "pinned", "--fake-gpu", "-e", "64"])
        .env("GPUCOMM_GPU_PATH", "foo")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("GPUCOMM_GPU_PATH").count(), 1, "{err}");
}

/// Sweep sizes that round to one size run and print once: `-b 0 -e 16`
/// printed three rows of 0 B (0, 1 and 2 bytes are no whole float), and
/// all_gather on 4 ranks five (below 16 B no rank has a whole float).
#[test]
fn a_size_the_sweep_rounds_to_twice_is_one_row() {
    for (args, want) in [
        (&["-b", "0", "-e", "16"][..], &[0u64, 4, 8, 16][..]),
        (
            &["all_gather", "--ranks", "4", "-b", "0", "-e", "64"],
            &[0, 16, 32, 64],
        ),
    ] {
        let mut argv = vec!["--threads", "-n", "1", "-w", "0"];
        argv.extend_from_slice(args);
        let rows = bench_json_rows(&argv, "60", LIMIT);
        let bytes: Vec<u64> = rows.iter().map(|r| r["bytes"].as_u64().unwrap()).collect();
        assert_eq!(bytes, want, "{args:?}");
        assert_all_right(&rows, "rounded sweep");
    }
}
