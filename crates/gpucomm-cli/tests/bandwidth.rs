//! `gpucomm bandwidth` through the built binary: without a GPU it says so
//! and exits with status 3; with one it prints its tables.

use std::process::Command;

fn gpucomm(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpucomm"))
        .args(args)
        .output()
        .expect("runs gpucomm");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn no_driver_means_exit_3_and_a_plain_reason() {
    // A driver library that cannot exist: the same on every machine.
    let (code, out, err) = gpucomm(&["bandwidth", "--cuda-driver", "libgpucomm-no-such-cuda.so.1"]);
    assert_eq!(code, Some(3), "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("no GPU: cannot load the CUDA driver"), "{err}");
    assert!(err.contains("libgpucomm-no-such-cuda.so.1"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.is_empty(), "{out}");

    let (code, out, _) = gpucomm(&[
        "bandwidth",
        "--json",
        "--cuda-driver",
        "libgpucomm-no-such-cuda.so.1",
    ]);
    assert_eq!(code, Some(3));
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["gpu"], false);
    assert!(v["reason"].as_str().unwrap().starts_with("no GPU: "), "{v}");
}

#[test]
fn this_machine_either_measures_or_says_no_gpu() {
    let (code, out, err) = gpucomm(&[
        "bandwidth",
        "-b",
        "1M",
        "-e",
        "4M",
        "-n",
        "3",
        "--latency-iters",
        "20",
    ]);
    match code {
        Some(3) => {
            assert!(err.contains("no GPU: "), "{err}");
            assert!(
                std::env::var("GPUCOMM_REQUIRE_GPU").as_deref() != Ok("1"),
                "GPUCOMM_REQUIRE_GPU=1 but: {err}"
            );
        }
        Some(0) => {
            for t in [
                "h2d_pinned",
                "h2d_pageable",
                "d2h_pinned",
                "d2h_pageable",
                "d2d_ce",
                "host_staged",
                "small-copy latency",
            ] {
                assert!(out.contains(t), "{t} missing:\n{out}");
            }
        }
        _ => panic!("exit {code:?}\nstdout:\n{out}\nstderr:\n{err}"),
    }
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let (code, _, err) = gpucomm(&["bandwidth", "-t", "h2d"]);
    assert_eq!(code, Some(2), "clap's usage error: {err}");
    assert!(err.contains("unknown test"), "{err}");
    // Exit 2 is a bad command line, as the help says, whoever finds it.
    let (code, _, err) = gpucomm(&["bandwidth", "-b", "64M", "-e", "1M"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("larger than max"), "{err}");
    // -n 0 measured nothing and exited 0; --latency-iters 0 ran 1.
    for bad in [&["-n", "0"][..], &["--latency-iters", "0"], &["-f", "1"]] {
        let argv: Vec<&str> = ["bandwidth"].iter().chain(bad).copied().collect();
        let (code, _, err) = gpucomm(&argv);
        assert_eq!(code, Some(2), "{bad:?}: {err}");
        assert!(err.contains("is not in"), "{bad:?}: {err}");
    }
    // A driver library path that is not there, or no name: a bad command
    // line (it exited 3, "no GPU", for a typo); a bare name the loader
    // cannot find stays "no GPU" (above).
    let (code, _, err) = gpucomm(&["bandwidth", "--cuda-driver", "/nonexistent/libcuda.so"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--cuda-driver /nonexistent/libcuda.so: no such file"),
        "{err}"
    );
    let (code, _, err) = gpucomm(&["bandwidth", "--cuda-driver", ""]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("empty library name"), "{err}");
}
