//! `gpucomm bench --memory device|pinned` through the built binary.
//!
//! Without a GPU `--memory device` says so and exits with status 3; the
//! device sweep itself (buffers, stream-ordered calls, checks, the table)
//! runs on the hidden `--fake-gpu` (host memory standing in for the GPU,
//! IPC through `/proc/<pid>/fd`), over both device paths. With a GPU,
//! `gpu_bench_memory_device_prints_its_table` runs the real thing (and
//! fails without one when `GPUCOMM_REQUIRE_GPU=1`).

mod common;

use common::{assert_all_right, bench_json_rows, gpucomm};
use gpucomm::device::DeviceBackend;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

fn json_rows(args: &[&str]) -> Vec<serde_json::Value> {
    bench_json_rows(args, "60", LIMIT)
}

#[test]
fn memory_device_without_a_gpu_says_so_with_exit_3() {
    if let Ok(g) = gpucomm::device::open_cuda() {
        eprintln!(
            "a GPU is present ({} devices): the no-GPU path cannot be checked here",
            g.device_count()
        );
        return;
    }
    let out = gpucomm(&["bench", "--memory", "device", "-e", "1K"], LIMIT);
    out.assert_fails(3, "no GPU: ");
    assert!(
        out.stderr.contains("--memory device needs one"),
        "{}",
        out.dump()
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.dump());
    assert!(out.stdout.is_empty(), "{}", out.dump());
    let out = gpucomm(&["bench", "--json", "--memory", "device"], LIMIT);
    assert_eq!(out.code, Some(3), "{}", out.dump());
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
    assert_eq!(v["gpu"], false);
    assert!(v["reason"].as_str().unwrap().starts_with("no GPU: "), "{v}");
}

#[test]
fn device_sweep_on_the_fake_gpu_every_collective_both_paths() {
    let all = [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "all_to_all",
        "sendrecv",
        "gather",
        "scatter",
    ];
    // The staged path's collectives are the host engine's (tested at
    // length elsewhere): two of them suffice here.
    for (path, colls) in [("ipc", &all[..]), ("staged", &all[..3])] {
        for &coll in colls {
            let rows = json_rows(&[
                coll,
                "--memory",
                "device",
                "--fake-gpu",
                "--gpu-path",
                path,
                "--ranks",
                "3",
                "--root",
                "2",
                "-b",
                "4",
                "-e",
                "64K",
                "-f",
                "16",
                "-n",
                "2",
                "-w",
                "1",
                "-d",
                "bf16",
                "-o",
                "max",
            ]);
            assert_eq!(rows.len(), 5, "{coll} {path}");
            assert_all_right(&rows, &format!("{coll} {path}"));
            assert_eq!(rows[0]["memory"], "device");
        }
    }
}

#[test]
fn device_table_names_the_device_and_path() {
    let out = gpucomm(
        &[
            "bench",
            "--memory",
            "device",
            "--fake-gpu",
            "--ranks",
            "2",
            "-b",
            "1K",
            "-e",
            "64K",
            "-f",
            "8",
            "-o",
            "avg",
            "-d",
            "i32",
        ],
        LIMIT,
    );
    out.assert_ok();
    assert!(out.stdout.contains("memory device"), "{}", out.dump());
    assert!(
        out.stdout
            .contains("memory device 0 (fake GPU 0 (host memory)), path ipc"),
        "{}",
        out.dump()
    );
    // Threads share one backend.
    let rows = json_rows(&[
        "--memory",
        "device",
        "--fake-gpu",
        "--threads",
        "--ranks",
        "4",
        "-b",
        "8",
        "-e",
        "8K",
        "-f",
        "32",
        "-n",
        "2",
        "-w",
        "1",
    ]);
    assert_all_right(&rows, "threads");
}

#[test]
fn pinned_host_memory_without_a_gpu() {
    let out = gpucomm(
        &[
            "bench", "--memory", "pinned", "--ranks", "2", "-b", "8", "-e", "64K", "-f", "16",
        ],
        LIMIT,
    );
    out.assert_ok();
    assert!(out.stdout.contains("memory pinned"), "{}", out.dump());
    let rows = json_rows(&[
        "--memory",
        "pinned",
        "--fake-gpu",
        "--ranks",
        "2",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "16",
    ]);
    assert_all_right(&rows, "pinned, registered with the fake GPU");
}

#[test]
fn bad_memory_arguments_are_errors() {
    let out = gpucomm(&["bench", "--memory", "hbm"], LIMIT);
    out.assert_fails(2, "expected host, pinned or device");
    let out = gpucomm(
        &["bench", "--memory", "device", "--gpu-path", "nvlink"],
        LIMIT,
    );
    out.assert_fails(2, "auto, ipc or staged");
    let out = gpucomm(
        &[
            "bench",
            "--memory",
            "device",
            "--fake-gpu",
            "--fault",
            "kill",
        ],
        LIMIT,
    );
    assert_ne!(out.code, Some(0), "{}", out.dump());
    assert!(out.stderr.contains("fault injection"), "{}", out.dump());
}

#[test]
fn gpu_bench_memory_device_prints_its_table() {
    if let Err(e) = gpucomm::device::open_cuda() {
        if std::env::var("GPUCOMM_REQUIRE_GPU").as_deref() == Ok("1") {
            panic!("{e} (GPUCOMM_REQUIRE_GPU=1)");
        }
        eprintln!(
            "# gpu_bench_memory_device_prints_its_table: SKIPPED (set GPUCOMM_REQUIRE_GPU=1 to fail instead): {e}"
        );
        return;
    }
    for path in ["ipc", "staged"] {
        let out = gpucomm(
            &[
                "bench",
                "--memory",
                "device",
                "--gpu-path",
                path,
                "--ranks",
                "2",
                "-b",
                "8",
                "-e",
                "64M",
            ],
            Duration::from_secs(300),
        );
        out.assert_ok();
        assert!(
            out.stdout.contains(&format!("path {path}")),
            "{}",
            out.dump()
        );
        println!("{}", out.stdout);
    }
    let rows = json_rows(&[
        "--memory", "device", "--ranks", "4", "-b", "8", "-e", "16M", "-d", "bf16",
    ]);
    assert_all_right(&rows, "4 ranks on one GPU");
}
