//! `gpucomm sim` end to end: the commands of the simulator issue through the
//! binary, their `--json` fields, traces, the calibration default path and
//! bad input.

mod common;

use std::time::Duration;

use common::{gpucomm, scratch_dir};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(120);

/// Runs `gpucomm sim ARGS --json`, asserting a clean exit.
fn sim_json(args: &[&str]) -> Value {
    let mut all = vec!["sim"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = gpucomm(&all, LIMIT);
    out.assert_ok();
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.dump()))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {key} in {v}"))
}

#[test]
fn collective_json_has_one_row_per_size_with_nccl_tests_fields() {
    let v = sim_json(&[
        "all_reduce",
        "--topology",
        "dgx-h100",
        "--nodes",
        "2",
        "-b",
        "8",
        "-e",
        "8M",
        "-f",
        "8",
    ]);
    let rows = v["results"].as_array().unwrap();
    let sizes: Vec<u64> = rows.iter().map(|r| r["bytes"].as_u64().unwrap()).collect();
    // Factor steps from -b, and -e itself.
    assert_eq!(sizes, [8, 64, 512, 4096, 32768, 262144, 2097152, 8388608]);
    let n = 16.0;
    let mut last = 0.0;
    for r in rows {
        let (t, alg, bus) = (f(r, "time_us"), f(r, "algbw_gbps"), f(r, "busbw_gbps"));
        assert!(t > last, "time grows with size: {r}");
        last = t;
        let bytes = r["bytes"].as_u64().unwrap() as f64;
        assert!((alg - bytes / (t * 1e-6) / 1e9).abs() <= alg * 1e-9, "{r}");
        assert!((bus - alg * 2.0 * (n - 1.0) / n).abs() <= bus * 1e-9, "{r}");
        assert!(!r["algorithm"].as_str().unwrap().is_empty());
        assert!(r["protocol"].is_string());
    }
    // An algorithm and protocol asked for are the ones that run.
    let v = sim_json(&[
        "reduce_scatter",
        "--topology",
        "dgx-a100",
        "-b",
        "1M",
        "-e",
        "1M",
        "--algorithm",
        "ring",
        "--protocol",
        "ll128",
    ]);
    let r = &v["results"][0];
    assert_eq!(r["algorithm"], "ring");
    assert_eq!(r["protocol"], "LL128");
    // The options given are recorded beside the results.
    assert_eq!(v["tuner"]["algorithm"], "ring");
    assert_eq!(v["tuner"]["protocol"], "ll128");
}

#[test]
fn p2p_and_copy_show_the_staged_paths_cost() {
    let args = ["p2p", "--topology", "dgx1-v100", "--pair", "0,1"];
    let direct = sim_json(&args);
    let mut staged_args = args.to_vec();
    staged_args.push("--no-p2p");
    let staged = sim_json(&staged_args);
    assert!(f(&direct, "bandwidth_gbps") > f(&staged, "bandwidth_gbps"));
    assert!(f(&direct, "latency_us") < f(&staged, "latency_us"));
    let copy = [
        "copy",
        "--topology",
        "dgx-h100",
        "--from",
        "host",
        "--to",
        "gpu0",
    ];
    let pinned = sim_json(&copy);
    let mut pageable_args = copy.to_vec();
    pageable_args.push("--pageable");
    let pageable = sim_json(&pageable_args);
    assert!(f(&pinned, "bandwidth_gbps") > f(&pageable, "bandwidth_gbps"));
}

#[test]
fn train_sweep_reports_the_step_and_its_exposed_communication() {
    let v = sim_json(&[
        "train",
        "--topology",
        "dgx-h100",
        "--model",
        "resnet50",
        "--sweep-nodes",
        "1,2,4",
    ]);
    let rows = v["results"].as_array().unwrap();
    // One GPU, then every node count of the sweep.
    let gpus: Vec<u64> = rows.iter().map(|r| r["gpus"].as_u64().unwrap()).collect();
    assert_eq!(gpus, [1, 8, 16, 32]);
    for r in rows {
        let (step, compute) = (f(r, "step_ms"), f(r, "compute_ms"));
        let (comm, exposed) = (f(r, "comm_ms"), f(r, "exposed_comm_ms"));
        assert!(exposed >= 0.0 && exposed <= comm + 1e-9, "{r}");
        assert!((step - (compute + exposed)).abs() < 1e-6 * step, "{r}");
        assert!(
            (f(r, "scaling_efficiency") - compute / step).abs() < 1e-9,
            "{r}"
        );
    }
    // Crossing from one node to two adds network time.
    assert!(f(&rows[2], "comm_ms") > f(&rows[1], "comm_ms"));
    // NCCL_ALGO=^NVLS,NVLSTree for the buckets: other all_reduce times,
    // and the restriction recorded.
    let args = "train --topology dgx-h100 --model resnet50 --sweep-nodes 1,2,4";
    let args: Vec<&str> = args.split(' ').collect();
    let no_nvls = sim_json(&[&args[..], &["--algorithm", "^nvls,nvls_tree"]].concat());
    assert_eq!(no_nvls["tuner"]["algorithm"], "^nvls,nvls_tree");
    assert_eq!(v["tuner"]["algorithm"], serde_json::Value::Null);
    assert_eq!(v["tuner"]["tuner"], "nccl");
    let other = no_nvls["results"].as_array().unwrap();
    assert!(
        (1..4).any(|i| f(&other[i], "comm_ms") != f(&rows[i], "comm_ms")),
        "{no_nvls}"
    );
}

#[test]
fn an_explicit_bucket_cap_caps_the_first_bucket_too() {
    // PyTorch keeps its 1 MiB first bucket only where bucket_cap_mb is
    // left out: --bucket-mb 25 ran as the default did (step 113.867 ms on
    // 2 nodes, exposed 0.167), the fc layer's 8.2 MB alone in bucket 0.
    let run = |extra: &[&str]| {
        let args = "train --topology dgx-h100 --model resnet50 --nodes 2";
        let mut args: Vec<&str> = args.split(' ').collect();
        args.extend_from_slice(extra);
        sim_json(&args)
    };
    let (default, given) = (run(&[]), run(&["--bucket-mb", "25"]));
    assert_eq!(
        (f(&default, "bucket_mb"), f(&default, "first_bucket_mb")),
        (25.0, 1.0)
    );
    assert_eq!(
        (f(&given, "bucket_mb"), f(&given, "first_bucket_mb")),
        (25.0, 25.0)
    );
    let step = |v: &Value| f(&v["results"][1], "step_ms");
    // Other buckets, another step (113.790 ms).
    assert_ne!(step(&given), step(&default), "{default}\n{given}");
}

#[test]
fn train_shards_as_fsdp_does() {
    let base = "train --topology dgx-h100 --model bert-large --sweep-nodes 1,4";
    let run = |sharding: &str| {
        let mut args: Vec<&str> = base.split(' ').collect();
        args.extend(["--sharding", sharding]);
        sim_json(&args)
    };
    let (ddp, zero2, full) = (run("ddp"), run("zero2"), run("FULL_SHARD"));
    assert_eq!(full["sharding"], "full_shard");
    assert_eq!(zero2["sharding"], "shard_grad_op");
    assert_eq!(run("fsdp")["sharding"], "full_shard");
    let rows = |v: &serde_json::Value| v["results"].as_array().unwrap().clone();
    let (d, z, fs) = (rows(&ddp), rows(&zero2), rows(&full));
    // 26 layers: DDP's buckets; FSDP gathers each layer (again in backward
    // but the last) and reduce-scatters each.
    assert_eq!(fs[1]["comm_ops"], 26 + 25 + 26, "{full}");
    assert_eq!(z[1]["comm_ops"], 26 + 26, "{zero2}");
    assert_eq!(d[1]["buckets"], d[1]["comm_ops"]);
    assert!(fs[1].get("buckets").is_none());
    for i in 1..3 {
        // FULL_SHARD moves 1.5x DDP's bytes: more communication time.
        assert!(f(&fs[i], "comm_ms") > f(&z[i], "comm_ms"), "{full}");
        // Same compute; the state shrinks with the GPUs as sharded.
        assert_eq!(f(&fs[i], "compute_ms"), f(&d[i], "compute_ms"));
        let gpus = fs[i]["gpus"].as_f64().unwrap();
        let whole = f(&d[i], "state_gb_per_gpu");
        assert!((f(&fs[i], "state_gb_per_gpu") * gpus - whole).abs() < 1e-3 * whole);
        assert!(f(&z[i], "state_gb_per_gpu") < whole);
    }
    assert_eq!(f(&d[0], "state_gb_per_gpu"), f(&d[2], "state_gb_per_gpu"));
    assert_eq!(full["gpu_memory_gb"], 80.0);
    // A stage that is not one is refused, naming the ones there are.
    let out = gpucomm(&["sim", "train", "--sharding", "zero1"], LIMIT);
    out.assert_fails(2, "unknown sharding \"zero1\" (ddp, shard_grad_op");
}

#[test]
fn trace_is_a_chrome_trace_with_rank_and_link_tracks() {
    let dir = scratch_dir("sim-trace");
    let path = dir.join("ring.json");
    let p = path.to_str().unwrap();
    let out = gpucomm(
        &[
            "sim",
            "all_reduce",
            "--topology",
            "dgx-a100",
            "-b",
            "1M",
            "-e",
            "1M",
            "--algorithm",
            "ring",
            "--trace",
            p,
        ],
        LIMIT,
    );
    out.assert_ok();
    assert!(out.stdout.contains("link utilisation"), "{}", out.dump());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let pids: std::collections::BTreeSet<u64> = events
        .iter()
        .filter(|e| e["ph"] == "X")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    // Ranks and links are separate processes in the trace.
    assert!(pids.len() >= 2, "{pids:?}");
    // One node: nothing said about the node-symmetry reduction; two
    // nodes: the traced size ran every rank, and the output says so.
    assert!(!out.stdout.contains("ran every rank"), "{}", out.dump());
    let out = gpucomm(
        &[
            "sim",
            "all_reduce",
            "--topology",
            "dgx-a100",
            "--nodes",
            "2",
            "-b",
            "1M",
            "-e",
            "1M",
            "--trace",
            p,
        ],
        LIMIT,
    );
    out.assert_ok();
    assert!(out.stdout.contains("ran every rank"), "{}", out.dump());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn calibrate_finds_the_shared_file_beside_the_checkout() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if !root
        .join("../shared/calibration/measurements.toml")
        .exists()
        && !root.join("shared/calibration/measurements.toml").exists()
    {
        panic!("shared/calibration/measurements.toml must sit beside the checkout");
    }
    let out = common::gpucomm_in(&root, &["sim", "calibrate", "--json"], LIMIT);
    // Exit 1 says a case missed 10%; either way every case was predicted.
    assert!(matches!(out.code, Some(0 | 1)), "{}", out.dump());
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(v.to_string().contains("h100-8gpu-allreduce-ring"), "{v}");
}

/// Away from a checkout the default file is nowhere: the refusal names
/// both places looked at and --file, exit 2 as for `--file nosuch` (it
/// named one place and exited 1).
#[test]
fn calibrate_without_a_file_to_read_says_where_it_looked() {
    // Two levels down, so that neither it nor its parent holds shared/.
    let dir = common::scratch_dir("calibrate-nowhere");
    let cwd = dir.join("a/b");
    std::fs::create_dir_all(&cwd).unwrap();
    let out = common::gpucomm_in(&cwd, &["sim", "calibrate"], LIMIT);
    out.assert_fails(
        2,
        "neither shared/calibration/measurements.toml nor \
         ../shared/calibration/measurements.toml exists under",
    );
    out.assert_fails(2, "name one with --file");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn calibrate_reports_a_case_it_cannot_predict_and_goes_on() {
    let dir = scratch_dir("cal");
    let file = dir.join("cases.toml");
    std::fs::write(
        &file,
        "[[case]]\nid = \"grace\"\nsystem = \"GH200 NVL32, NVLink-C2C\"\nmetric = \"h2d_bandwidth\"\nvalue = 400.0\n\n\
         [[case]]\nid = \"h100\"\nsystem = \"H100 SXM, PCIe Gen5 x16\"\nmetric = \"h2d_bandwidth\"\nvalue = 53.0\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::exe())
        .args(["sim", "calibrate", "--file"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // A case that could not be checked fails the check (exit 1), as a
    // case past 10% does; 2 is for a bad command line.
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("| grace |") && stdout.contains("cannot predict"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| h100 |") && stdout.contains("+2.4%"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn collectives_are_spelled_as_bench_and_algo_take_them() {
    // `gpucomm bench allreduce` ran; `gpucomm sim allreduce` was refused.
    let same = |spelled: &str, name: &str| {
        let a = sim_json(&[spelled, "-b", "1M", "-e", "1M"]);
        let b = sim_json(&[name, "-b", "1M", "-e", "1M"]);
        assert_eq!(a, b, "{spelled} is not {name}");
    };
    same("allreduce", "all_reduce");
    same("AllGather", "all_gather");
    same("reduce_scatter_perf", "reduce_scatter");
    same("all-to-all", "all_to_all");
    same("bcast", "broadcast");
    same("gather_perf", "gather");
    same("Scatter", "scatter");
    // The help forms too (the clap aliases they used are gone).
    for argv in [
        &["sim", "help", "all-reduce"][..],
        &["help", "sim", "alltoall"][..],
    ] {
        gpucomm(argv, LIMIT).assert_ok();
    }
    // A word that names no collective, or none the simulator runs, is
    // still clap's error.
    for word in ["allreduces", "barrier"] {
        let out = gpucomm(&["sim", word], LIMIT);
        out.assert_fails(2, "unrecognized subcommand");
    }
}

#[test]
fn an_empty_collective_is_discarded_as_nccl_does() {
    let v = sim_json(&["all_reduce", "-b", "0", "-e", "4", "-f", "4"]);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows[0]["bytes"], 0);
    assert_eq!(rows[0]["algorithm"], "none");
    assert!(rows[0]["protocol"].is_null());
    assert_eq!(f(&rows[0], "time_us"), 0.0);
    // 1 B is no whole float: empty too, as in nccl-tests, the row of 0 B
    // already printed; 4 B runs.
    assert_eq!(rows.len(), 2, "{v}");
    assert_eq!(rows[1]["bytes"], 4);
    assert!(f(&rows[1], "time_us") > 0.0 && rows[1]["protocol"].is_string());
}

/// Nodes without a NIC cannot be joined: refused before the run, as a bad
/// command line, for every command that replicates a node (a train sweep
/// and rdma ran into "no route" or "has no NICs", exit 1).
#[test]
fn nodes_without_nics_are_refused_as_a_bad_command_line() {
    for (args, says) in [
        (
            &["all_reduce", "-t", "workstation-rtx4090", "--nodes", "2"][..],
            "--nodes 2: the nodes have no NIC to join them (workstation-rtx4090 has none",
        ),
        (
            &["train", "-t", "workstation-rtx4090", "--sweep-nodes", "1,2"],
            "2 nodes: the nodes have no NIC to join them",
        ),
        (
            &["rdma", "-t", "pcie-8gpu", "--nics", "0"],
            "the nodes have no NIC to join them (pcie-8gpu with --nics 0)",
        ),
    ] {
        sim_usage(args, says);
    }
    // One node needs none.
    sim_json(&["train", "-t", "workstation-rtx4090", "--model", "resnet50"]);
}

/// Sweep sizes that round to one size print one row: `-b 0 -e 16` printed
/// three rows of 0 B (0, 1 and 2 bytes are no whole float).
#[test]
fn a_size_the_sweep_rounds_to_twice_is_one_row() {
    let v = sim_json(&["all_reduce", "-b", "0", "-e", "16"]);
    let bytes: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(bytes, [0, 4, 8, 16], "{v}");
    let out = gpucomm(&["sim", "all_reduce", "-b", "0", "-e", "16"], LIMIT);
    let rows: Vec<&str> = out
        .assert_ok()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert_eq!(rows.len(), 4, "{}", out.dump());
    assert_eq!(
        rows[0].split_whitespace().next(),
        Some("0"),
        "{}",
        out.dump()
    );
    // all_gather's blocks of 16 B per rank: 8 ranks take 128 B a step.
    let v = sim_json(&["all_gather", "-b", "1", "-e", "1K", "-d", "half"]);
    let bytes: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .collect();
    assert!(bytes.windows(2).all(|w| w[0] < w[1]), "{bytes:?}");
}

#[test]
fn train_takes_a_node_count_or_a_sweep_not_both() {
    // `--nodes 3` beside a sweep was dropped without a word.
    let args: Vec<&str> = "sim train --model resnet50 --sweep-nodes 1,2 --nodes 3"
        .split(' ')
        .collect();
    let out = gpucomm(&args, LIMIT);
    out.assert_fails(2, "cannot be used with");
}

#[test]
fn bad_input_is_a_clear_error() {
    for (args, says) in [
        (
            &["all_reduce", "-b", "1G", "-e", "8"][..],
            "larger than max",
        ),
        (
            &["p2p", "--topology", "dgx1-v100", "--pair", "0,99"],
            "--pair: gpu99 does not exist: dgx1-v100 has 8 GPUs per node",
        ),
        (&["all_reduce", "--topology", "nope"], "unknown topology"),
        (&["copy", "--from", "host", "--to", "gpu99"], "gpu99"),
        // A copy of nothing has no bandwidth (p2p printed 0.00 GB/s).
        (
            &["p2p", "--pair", "0,1", "--size", "0"],
            "--size must be positive",
        ),
        (
            &["copy", "--from", "host", "--to", "gpu0", "--size", "0"],
            "--size must be positive",
        ),
        (&["rdma", "--size", "0"], "--size must be positive"),
        (&["broadcast", "--average", "median"], "not one of avg, max"),
        (&["broadcast", "--iters", "0"], "at least one iteration"),
        (
            &["broadcast", "--root", "8"],
            "the run has 8 ranks (0 to 7)",
        ),
        (
            &["reduce", "--nodes", "2", "--root", "16"],
            "the run has 16 ranks",
        ),
        (
            &["all_reduce", "--root", "1"],
            "applies to broadcast, reduce, gather and scatter only",
        ),
        // NCCL's point-to-point operations run no LL128.
        (
            &["sendrecv", "-b", "1M", "-e", "1M", "-p", "LL128"],
            "NCCL_P2P_LL_THRESHOLD",
        ),
        (&["train", "--model", "nope"], "unknown model"),
        // Refused before the run, not after it.
        (
            &["all_reduce", "--trace", "/nonexistent-gpucomm-dir/t.json"],
            "no directory /nonexistent-gpucomm-dir",
        ),
        (&["p2p", "--pair", "0,1", "--trace", "/"], "is a directory"),
        (&["all_reduce", "--nodes", "0"], "at least 1"),
        (
            &["all_reduce", "--nic-speed", "fast"],
            "--nic-speed \"fast\"",
        ),
        // Two nodes joined by no network.
        (
            &[
                "all_reduce",
                "--nodes",
                "2",
                "--nics",
                "0",
                "-b",
                "1M",
                "-e",
                "1M",
            ],
            "the nodes have no NIC",
        ),
        // Buffers no GPU of the machine holds (they were simulated: 100 TiB
        // on an 80 GB H100), refused before the sweep.
        (
            &["all_reduce", "-b", "1G", "-e", "100T"],
            "needs 219902.3 GB of device memory per GPU, more than the 80 GB of a H100",
        ),
        (
            &["all_reduce", "-b", "40G", "-e", "40G"],
            "send and receive buffers",
        ),
        (
            &["p2p", "--pair", "0,1", "--size", "50G"],
            "more than the 80 GB",
        ),
        (
            &["copy", "--from", "host", "--to", "gpu0", "--size", "1T"],
            "more than the 80 GB",
        ),
        (&["rdma", "--size", "1T"], "more than the 80 GB"),
        // EDR switches (SHARPv1) do not reduce large messages: --sharp was
        // accepted there and silently ran without in-network reduction.
        // CollNet Direct runs on NVSwitch nodes only (Chain elsewhere).
        (
            &[
                "all_reduce",
                "--topology",
                "dgx1-v100",
                "--nodes",
                "2",
                "--sharp",
            ],
            "--sharp: EDR InfiniBand switches",
        ),
        (
            &[
                "all_reduce",
                "--topology",
                "pcie-8gpu",
                "--nodes",
                "2",
                "--sharp",
                "--algorithm",
                "collnet",
            ],
            "collnet (NCCL's CollNet Direct) needs NVSwitch nodes (NCCL disables it without one); \
             pcie-8gpu has none: --algorithm collnet_chain runs NCCL's CollNet Chain there",
        ),
        (
            &[
                "all_gather",
                "--nodes",
                "2",
                "--sharp",
                "--algorithm",
                "collnet_chain",
            ],
            "collnet_chain is modeled for all_reduce only",
        ),
        (
            &["all_reduce", "--algorithm", "nvls", "--protocol", "ll"],
            "Simple protocol only",
        ),
        // NCCL_ALGO / NCCL_PROTO lists: a name that is none, an empty one,
        // every candidate excluded.
        (&["all_reduce", "--algorithm", "ring,warp"], "\"warp\""),
        (&["all_reduce", "--protocol", "^"], "empty name"),
        (
            &[
                "all_reduce",
                "--topology",
                "dgx-h100",
                "--algorithm",
                "^ring,tree,nvls",
            ],
            "every algorithm",
        ),
        (
            &["all_reduce", "--protocol", "^simple,ll128,ll"],
            "every protocol",
        ),
        // Zero channels divided by zero (on one node NVLS won and hid it);
        // 65535 generated steps for minutes.
        (
            &["all_reduce", "-b", "1M", "-e", "1M", "--channels", "0"],
            "1 to 64",
        ),
        (
            &["all_reduce", "--nodes", "2", "--channels", "65"],
            "1 to 64",
        ),
        (
            &[
                "all_reduce",
                "--topology",
                "dgx-h100",
                "--algorithm",
                "nvls_tree",
            ],
            "--nodes 2",
        ),
        (
            &[
                "all_reduce",
                "--topology",
                "dgx-a100",
                "--nodes",
                "2",
                "--algorithm",
                "nvls_tree",
            ],
            "Hopper or later",
        ),
    ] {
        // Each is a bad command line (exit 2, as clap's usage errors): an
        // unknown name, a value out of range, options that conflict or that
        // the machine cannot take.
        sim_usage(args, says);
    }
}

/// `--nics N --nic-speed S` builds the node `gpucomm topo --nics N
/// --nic-speed S` builds (the same time as its exported file), and the ring
/// across two nodes follows the NICs: 4 HDR ports per node carry 100 GB/s,
/// 8 NDR ports 400.
#[test]
fn nic_options_replace_the_nodes_nics_as_topo_does() {
    let ring = ["-b", "1G", "-e", "1G", "--algorithm", "ring"];
    let with = |extra: &[&str]| {
        let mut args = vec!["all_reduce", "--topology"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&ring);
        sim_json(&args)
    };
    let four = with(&[
        "dgx-h100",
        "--nodes",
        "2",
        "--nics",
        "4",
        "--nic-speed",
        "hdr",
    ]);
    assert_eq!(four["network"]["nics_per_node"], 4, "{four}");
    assert_eq!(f(&four["network"], "nic_gbps"), 25.0, "{four}");
    let eight = with(&["dgx-h100", "--nodes", "2"]);
    assert_eq!(eight["network"]["nics_per_node"], 8, "{eight}");
    let (b4, b8) = (
        f(&four["results"][0], "busbw_gbps"),
        f(&eight["results"][0], "busbw_gbps"),
    );
    assert!(b4 > 80.0 && b4 <= 100.0, "4 HDR NICs: busbw {b4}");
    assert!(b8 > 300.0 && b8 <= 400.0, "8 NDR NICs: busbw {b8}");

    let dir = scratch_dir("sim-nics");
    let file = dir.join("h100-4hdr.toml");
    let file = file.to_str().unwrap();
    let export: Vec<&str> = "topo --preset dgx-h100 --nics 4 --nic-speed hdr --export"
        .split(' ')
        .chain([file])
        .collect();
    let exported = gpucomm(&export, LIMIT);
    exported.assert_ok();
    let from_file = with(&[file, "--nodes", "2"]);
    assert_eq!(from_file["results"], four["results"]);

    // `--nics` gives the whole node its NICs (next to GPUs 0, 2, 4, 6);
    // four GPUs in use send through the two next to them, as a node of
    // those four GPUs and two NICs does, and the header says so.
    let half = with(&["dgx-h100", "--nodes", "2", "--gpus", "4", "--nics", "4"]);
    assert_eq!(half["network"]["nics_per_node"], 4, "{half}");
    assert_eq!(half["network"]["nics_in_use"], 2, "{half}");
    assert_eq!(four["network"]["nics_in_use"], 4, "{four}");
    let two_nics = dir.join("h100-4gpus-2nics.toml");
    let two_nics = two_nics.to_str().unwrap();
    let exported = gpucomm(
        &[
            "topo", "--preset", "dgx-h100", "--gpus", "4", "--nics", "2", "--export", two_nics,
        ],
        LIMIT,
    );
    exported.assert_ok();
    assert_eq!(
        with(&[two_nics, "--nodes", "2"])["results"],
        half["results"]
    );
    let args = "sim all_reduce --topology dgx-h100 --nodes 2 --gpus 4 --nics 4 -b 1M -e 1M";
    let text = gpucomm(&args.split(' ').collect::<Vec<_>>(), LIMIT);
    assert!(
        text.stdout.contains(
            "# network: 4 NIC(s) of 50.0 GB/s per node \
             (the 2 next to the 4 GPU(s) in use carry the traffic);"
        ),
        "{}",
        text.dump()
    );

    // A file of two nodes says what its NICs are.
    let two = dir.join("two.toml");
    let two = two.to_str().unwrap();
    let exported = gpucomm(
        &[
            "topo", "--preset", "dgx-h100", "--nodes", "2", "--export", two,
        ],
        LIMIT,
    );
    exported.assert_ok();
    let out = gpucomm(
        &["sim", "all_reduce", "--topology", two, "--nics", "4"],
        LIMIT,
    );
    out.assert_fails(2, "describes 2 nodes and their network");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn across_dgx_h100_nodes_the_tuner_runs_large_all_reduces_as_nvls_tree() {
    // NCCL's NVLSTree: NVLS inside each node, a tree between them; on two
    // nodes bound by the NVLS links (about 490 GB/s busbw), above the ring.
    let args = "all_reduce --topology dgx-h100 --nodes 2 -b 1G -e 1G";
    let args: Vec<&str> = args.split(' ').collect();
    let tuned = sim_json(&args);
    let ring = sim_json(&[&args[..], &["--algorithm", "ring"]].concat());
    let (t, r) = (&tuned["results"][0], &ring["results"][0]);
    assert_eq!(t["algorithm"], "nvls_tree", "{t}");
    assert_eq!(t["protocol"], "Simple", "{t}");
    assert!(f(t, "busbw_gbps") > 1.3 * f(r, "busbw_gbps"), "{t} vs {r}");
}

#[test]
fn a_chain_reports_nccl_tests_mean_and_its_completion() {
    // nccl-tests' default (`-a 1`) averages each rank's time; on a chain
    // the ranks finish one after another, so the mean is below the last.
    let args = [
        "broadcast",
        "--topology",
        "dgx-h100",
        "--nodes",
        "2",
        "-b",
        "64M",
        "-e",
        "64M",
    ];
    let v = sim_json(&args);
    assert_eq!(v["average"], "avg", "{v}");
    let row = &v["results"][0];
    assert!(f(row, "time_us") < f(row, "completion_us"), "{row}");
    let mut last = args.to_vec();
    last.extend(["--average", "max"]);
    let v = sim_json(&last);
    let row = &v["results"][0];
    assert_eq!(f(row, "time_us"), f(row, "completion_us"), "{row}");
    // A symmetric collective reports its completion by default.
    let v = sim_json(&[
        "all_reduce",
        "--topology",
        "dgx-h100",
        "-b",
        "1M",
        "-e",
        "1M",
    ]);
    assert_eq!(v["average"], "max", "{v}");
}

#[test]
fn gathers_run_and_print_the_sizes_nccl_tests_does() {
    // nccl-tests rounds an all_gather's part per rank down to 16 bytes:
    // on 32 ranks its published 4-node sweep (vpbenchmarking, NCCL 2.24.3)
    // prints 0 for 8 to 256 B (six rows of 0; here one, the sizes that
    // round to it run once) and then 512 B, count 4 (per rank).
    let args = "sim all_gather --topology dgx-h100 --nodes 4 -b 8 -e 512 -f 2";
    let text = gpucomm(&args.split(' ').collect::<Vec<_>>(), LIMIT);
    let rows: Vec<(u64, u64)> = text
        .assert_ok()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].parse().unwrap(), w[1].parse().unwrap())
        })
        .collect();
    assert_eq!(rows, [(0, 0), (512, 4)]);
    // 1000 B on 8 ranks: 125 B per rank, 112 (28 floats, 14 doubles)
    // run; the other collectives run whole elements: 7 B is one float, or
    // 7 int8s (`-d`, as nccl-tests takes it).
    for (args, runs, datatype) in [
        ("reduce_scatter -b 1000 -e 1000", 896, "float"),
        ("all_gather -b 1000 -e 1000 -d double", 896, "double"),
        ("all_reduce -b 1000 -e 1000", 1000, "float"),
        ("all_reduce -b 7 -e 7", 4, "float"),
        ("all_reduce -b 7 -e 7 -d int8", 7, "int8"),
        ("broadcast -b 7 -e 7 --datatype bf16", 6, "bfloat16"),
        ("gather -b 1000 -e 1000 --root 3", 896, "float"),
        ("scatter -b 1000 -e 1000 -d double", 896, "double"),
    ] {
        let args = format!("{args} --topology dgx-h100");
        let v = sim_json(&args.split(' ').collect::<Vec<_>>());
        assert_eq!(v["results"][0]["bytes"], runs, "{args}: {v}");
        assert_eq!(v["datatype"], datatype, "{args}: {v}");
    }
    let out = gpucomm(&["sim", "all_reduce", "-d", "fp8"], LIMIT);
    out.assert_fails(2, "unknown type \"fp8\"");
}

#[test]
fn the_root_is_where_a_chain_starts_or_ends() {
    // nccl-tests' `-r`: rank 0 times its own part. As the root of a
    // broadcast it only sends, so it finishes before the ranks down the
    // chain; as the root of a reduce it receives the last sum, so it
    // finishes last. With the root on the other node (rank 8, that node's
    // GPU 0) the completion is the same: the two nodes are alike.
    let run = |coll: &str, root: &str| {
        let args = format!(
            "{coll} --topology dgx-h100 --nodes 2 -b 64M -e 64M --average rank0 --root {root}"
        );
        let v = sim_json(&args.split(' ').collect::<Vec<_>>());
        assert_eq!(v["root"].as_u64(), root.parse().ok(), "{v}");
        let row = &v["results"][0];
        (f(row, "time_us"), f(row, "completion_us"))
    };
    let (own, done) = run("broadcast", "0");
    let (other, other_done) = run("broadcast", "8");
    assert!(own < 0.75 * done, "the root's own time {own} vs {done}");
    assert!(own < other, "{own} vs {other}");
    assert_eq!(done, other_done);
    let (own, done) = run("reduce", "0");
    let (other, other_done) = run("reduce", "8");
    assert_eq!(own, done);
    assert!(other < done, "{other} vs {done}");
    assert_eq!(done, other_done);
}

#[test]
fn a_loop_of_iterations_overlaps_a_chain() {
    // `-n 20` (nccl-tests' loop): a chain's early ranks start the next
    // iteration while the late ones finish this one.
    let args = [
        "broadcast",
        "--topology",
        "dgx-h100",
        "--nodes",
        "4",
        "-b",
        "8",
        "-e",
        "8",
    ];
    let one = sim_json(&args);
    assert_eq!(one["iterations"], 1, "{one}");
    let mut looped = args.to_vec();
    looped.extend(["-n", "20"]);
    let v = sim_json(&looped);
    assert_eq!(v["iterations"], 20, "{v}");
    let (a, b) = (&one["results"][0], &v["results"][0]);
    assert!(f(b, "time_us") < 0.6 * f(a, "time_us"), "{a} vs {b}");
    // The completion of one operation is the same either way.
    assert_eq!(f(a, "completion_us"), f(b, "completion_us"));
}

#[test]
fn device_memory_bounds_only_what_a_gpu_holds() {
    // The largest all_reduce whose two buffers fit in an H100's 80 GB runs,
    // and a copy from storage into host memory holds no GPU buffer (the
    // check refused 1 TiB there).
    let v = sim_json(&[
        "all_reduce",
        "--topology",
        "dgx-h100",
        "-b",
        "32G",
        "-e",
        "32G",
    ]);
    assert_eq!(v["results"].as_array().map(Vec::len), Some(1), "{v}");
    let c = sim_json(&[
        "copy",
        "--topology",
        "dgx-a100",
        "--from",
        "storage",
        "--to",
        "host",
        "--size",
        "1T",
    ]);
    assert!(f(&c, "bandwidth_gbps") > 0.0, "{c}");
}

/// The preset lists written into `gpucomm topo --help` and the `sim`
/// commands' `--topology` help name every preset gpucomm-topo has (they
/// are hand-written: a new preset must be added there too).
/// The words of `gpucomm ARGS --help` (letters, digits, dashes and
/// underscores: preset and algorithm names).
fn help_words(args: &[&str]) -> std::collections::BTreeSet<String> {
    gpucomm(args, Duration::from_secs(30))
        .assert_ok()
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .map(str::to_owned)
        .collect()
}

/// The algorithm names in the help texts are written by hand (clap needs
/// static text): every algorithm that each command accepts is listed.
#[test]
fn help_texts_list_every_algorithm() {
    let schedules: Vec<&str> = gpucomm_algo::Algorithm::ALL
        .iter()
        .map(|a| a.name())
        .collect();
    for args in [&["bench", "--help"][..], &["algo", "show", "--help"][..]] {
        let words = help_words(args);
        for name in &schedules {
            assert!(
                words.contains(*name),
                "{args:?} does not list algorithm {name}"
            );
        }
    }
    for args in [
        &["sim", "all_reduce", "--help"][..],
        &["sim", "train", "--help"][..],
    ] {
        let words = help_words(args);
        for c in gpucomm_sim::collective::AlgoChoice::all() {
            assert!(
                words.contains(c.name()),
                "{args:?} does not list algorithm {}",
                c.name()
            );
        }
    }
}

#[test]
fn help_texts_list_every_preset() {
    for args in [&["topo", "--help"][..], &["sim", "p2p", "--help"][..]] {
        let words = help_words(args);
        for (name, _) in gpucomm_topo::PRESETS {
            assert!(
                words.contains(*name),
                "{args:?} does not list preset {name}"
            );
        }
    }
}

#[test]
fn timing_says_which_ranks_ran_and_why() {
    let row = |args: &str| {
        let v = sim_json(&args.split(' ').collect::<Vec<_>>());
        v["results"][0].clone()
    };
    // Behind 2:1 leaves of 2 nodes, one leaf's 16 ranks stand for 64.
    let leaf = "all_reduce --topology dgx-h100 --nodes 8 --fabric leaf-spine --nodes-per-leaf 2 \
                --oversubscription 2 --algorithm ring -b 1M -e 1M --timing";
    let r = row(leaf);
    assert_eq!(r["simulated_ranks"], 16, "{r}");
    assert!(r["every_rank_because"].is_null(), "{r}");
    // A partial last leaf (7 nodes): every rank, and the reason.
    let r = row(&leaf.replace("--nodes 8", "--nodes 7"));
    assert_eq!(r["simulated_ranks"], 56, "{r}");
    assert!(
        r["every_rank_because"].as_str().unwrap().contains("fabric"),
        "{r}"
    );
    // NCCL's tree differs between nodes.
    let r = row(&leaf.replace("ring", "tree"));
    assert_eq!(r["simulated_ranks"], 64, "{r}");
    assert!(
        r["every_rank_because"]
            .as_str()
            .unwrap()
            .contains("schedule"),
        "{r}"
    );
    let r = row(&format!("{leaf} --no-symmetry"));
    assert!(
        r["every_rank_because"].as_str().unwrap().contains("off"),
        "{r}"
    );
    // One node: nothing to reduce, nothing to explain.
    let r = row("all_reduce --topology dgx-h100 -b 1M -e 1M --timing");
    assert!(r.get("every_rank_because").is_none(), "{r}");
}

/// Runs `gpucomm sim ARGS`, asserting exit 1, the words `says` on stderr
/// and no panic.
fn sim_fails(args: &[&str], says: &str) {
    sim_exits(1, args, says);
}

/// `gpucomm sim ARGS` is refused as a bad command line (exit 2) with `says`.
fn sim_usage(args: &[&str], says: &str) {
    sim_exits(2, args, says);
}

fn sim_exits(code: i32, args: &[&str], says: &str) {
    let mut all = vec!["sim"];
    all.extend_from_slice(args);
    let out = gpucomm(&all, LIMIT);
    out.assert_fails(code, says);
    assert!(!out.stderr.contains("panicked"), "{args:?}: {}", out.dump());
}

#[test]
fn model_files_refuse_and_calibration_files_report_unknown_fields() {
    // A misspelt `bytes_per_param` ran with 4 B per gradient; a case's
    // `algo` (for `algorithm`) ran as the tuner's choice (it is read as
    // `algorithm` now; a misspelling such as `algoritm` is said).
    let dir = scratch_dir("unknown-fields");
    let model = dir.join("model.toml");
    std::fs::write(
        &model,
        "name = \"m\"\nbytes_per_parm = 2\n[[layer]]\nname = \"a\"\nfwd_ms = 1.0\nbwd_ms = 2.0\nparams = 1000\n",
    )
    .unwrap();
    sim_fails(
        &["train", "--model", model.to_str().unwrap()],
        "unknown field `bytes_per_parm`",
    );
    // A .json model file is read as JSON (it was a TOML parse error), with
    // the same checks and the same result as its TOML twin.
    let toml = dir.join("twin.toml");
    std::fs::write(
        &toml,
        "name = \"m\"\n[[layer]]\nname = \"a\"\nfwd_ms = 1.0\nbwd_ms = 2.0\nparams = 100000000\n",
    )
    .unwrap();
    let json = dir.join("twin.json");
    std::fs::write(
        &json,
        r#"{"name": "m", "layer": [{"name": "a", "fwd_ms": 1.0, "bwd_ms": 2.0, "params": 100000000}]}"#,
    )
    .unwrap();
    let run =
        |p: &std::path::Path| sim_json(&["train", "--model", p.to_str().unwrap(), "--nodes", "2"]);
    assert_eq!(run(&toml)["results"], run(&json)["results"]);
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"name": "m", "bytes_per_parm": 2, "layer": []}"#).unwrap();
    sim_fails(
        &["train", "--model", bad.to_str().unwrap()],
        "unknown field `bytes_per_parm`",
    );
    let cases = dir.join("cases.toml");
    std::fs::write(
        &cases,
        "[[case]]\nid = \"x\"\nsystem = \"8x H100 SXM, NVSwitch\"\nmetric = \"busbw\"\n\
         collective = \"all_reduce\"\nalgoritm = \"ring\"\ngpus = 8\nnodes = 1\nbytes = 8589934592\nvalue = 368.0\n",
    )
    .unwrap();
    // A calibration file's unread field is said, not refused (a file of
    // cases from elsewhere may carry fields of its own).
    let out = gpucomm(
        &[
            "sim",
            "calibrate",
            "--file",
            cases.to_str().unwrap(),
            "--json",
        ],
        LIMIT,
    );
    assert!(
        out.stderr
            .contains("warning: case x: field(s) algoritm not read by the simulator"),
        "{}",
        out.dump()
    );
    let v: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.dump()));
    assert_eq!(
        v["cases"][0]["unread_fields"],
        serde_json::json!(["algoritm"])
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn calibrate_refuses_cases_it_cannot_check() {
    let dir = scratch_dir("cal-check");
    let file = dir.join("cases.toml");
    let case = |fields: &str| {
        format!(
            "[[case]]\nid = \"c1\"\nsystem = \"8x H100 SXM, NVSwitch\"\nmetric = \"busbw\"\n\
             collective = \"all_reduce\"\n{fields}\n"
        )
    };
    let run = |text: &str| {
        std::fs::write(&file, text).unwrap();
        gpucomm(
            &["sim", "calibrate", "--file", file.to_str().unwrap()],
            LIMIT,
        )
    };
    // 0 nodes ran as one; 5e-324 GB/s printed "measured 0.0", "+inf%".
    // Each is its case's row (the cases around it are still checked) and
    // fails the run.
    for (fields, says) in [
        (
            "gpus = 8\nnodes = 0\nbytes = 1048576\nvalue = 100.0",
            "case c1: nodes must be at least 1",
        ),
        (
            "gpus = 8\nnodes = 1\nbytes = 1048576\nvalue = 5e-324",
            "case c1: value must be a positive number",
        ),
        (
            "gpus = 8\nnodes = 1\nbytes = \"1 lot\"\nvalue = 100.0",
            "case c1: bytes = \"1 lot\" is not a whole number of bytes",
        ),
    ] {
        let good = case("gpus = 8\nnodes = 1\nbytes = \"1M\"\nvalue = 100.0").replace("c1", "c0");
        let out = run(&format!("{good}{}", case(fields)));
        out.assert_fails(1, "c1 (cannot read)");
        assert!(
            out.stdout.contains("| c1 | - | - | - | - | cannot read: ")
                && out.stdout.contains(says)
                && out.stdout.contains("| c0 | busbw | 100.0 | "),
            "{}",
            out.dump()
        );
    }
    // A busbw of one GPU is 0 (it printed a -100% error): the case's row
    // says why, and the run fails as for a case it cannot predict.
    let out = run(&case("gpus = 1\nnodes = 1\nbytes = 1048576\nvalue = 100.0")
        .replace("all_reduce", "all_to_all"));
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert!(
        out.stdout
            .contains("| c1 | busbw | 100.0 | - | - | cannot predict")
            && out.stdout.contains("case c1: the simulated busbw is 0"),
        "{}",
        out.dump()
    );
    // A small prediction shows its digits (it printed 0.0).
    let out = run(&case("gpus = 8\nnodes = 1\nbytes = 1\nvalue = 100.0"));
    assert!(
        out.stdout.contains("| c1 | busbw | 100.0 | 1."),
        "{}",
        out.dump()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn transfers_refuse_options_they_would_ignore() {
    // Each of these ran as if the option had not been given.
    sim_usage(
        &["copy", "--from", "host", "--to", "gpu5", "--gpus", "4"],
        "gpu5 is not in use: --gpus 4 uses GPUs 0 to 3",
    );
    sim_usage(
        &["p2p", "--pair", "0,5", "--gpus", "4"],
        "gpu5 is not in use",
    );
    sim_usage(&["rdma", "--gpu", "5", "--gpus", "4"], "gpu5 is not in use");
    sim_usage(
        &["p2p", "--nodes", "2"],
        "--nodes 2: p2p: a peer copy joins two GPUs of one node",
    );
    sim_usage(
        &["copy", "--nodes", "2"],
        "--nodes 2: copy: a copy stays inside one node",
    );
    // NICs carry nothing inside a node (they were ignored).
    for cmd in ["p2p", "copy"] {
        sim_usage(
            &[cmd, "--nic-speed", "edr"],
            "--nics and --nic-speed shape the network",
        );
        sim_usage(
            &[cmd, "--nics", "0"],
            "--nics and --nic-speed shape the network",
        );
    }
    // --bucket-mb buckets DDP's gradients only (it was ignored).
    sim_usage(
        &["train", "--sharding", "full_shard", "--bucket-mb", "10"],
        "--bucket-mb applies to DDP only",
    );
    sim_usage(&["rdma", "--nodes", "1"], "rdma runs between two nodes");
    sim_usage(
        &["copy", "--pageable", "--from", "storage", "--to", "gpu0"],
        "--pageable: applies to a copy between host memory and a GPU",
    );
    sim_usage(
        &["copy", "--no-gds", "--from", "host", "--to", "gpu0"],
        "--no-gds: applies to a read from storage into a GPU",
    );
    // What they do mean still runs.
    sim_json(&["rdma", "--nodes", "2", "--size", "1M"]);
    sim_json(&["rdma", "--nodes", "3", "--node-pair", "2,0", "--size", "1M"]);
    sim_json(&["p2p", "--nodes", "1", "--pair", "0,3", "--gpus", "4"]);
    sim_json(&["copy", "--from", "storage", "--to", "gpu0", "--no-gds"]);
}

#[test]
fn train_says_no_such_file_for_a_missing_model_file() {
    for path in [
        "/nonexistent-gpucomm/model.toml",
        "model-gpucomm-nonexistent.json",
    ] {
        sim_usage(
            &["train", "--model", path],
            &format!("--model {path}: no such file"),
        );
    }
    sim_usage(&["train", "--model", "nope"], "unknown model \"nope\"");
}

#[test]
fn a_sweep_on_a_multi_node_topology_runs_only_its_own_node_count() {
    // A file of two nodes describes their network: --nodes 3 was refused,
    // --sweep-nodes 1,3,4 ran the file's nodes 1, 3 and 4 times.
    let dir = scratch_dir("sweep-multi-node");
    let file = dir.join("2n.json");
    let file = file.to_str().unwrap();
    let export = [
        "topo", "--preset", "dgx-h100", "--nodes", "2", "--export", file,
    ];
    gpucomm(&export, LIMIT).assert_ok();
    let train = |nodes: &[&'static str]| {
        let mut args = vec!["train", "-t", file, "--model", "resnet50"];
        args.extend_from_slice(nodes);
        args
    };
    sim_usage(
        &train(&["--nodes", "3"]),
        &format!("--nodes 3: {file} already describes 2 nodes"),
    );
    for (sweep, says) in [("1,3,4", "--sweep-nodes 1:"), ("2,4", "--sweep-nodes 4:")] {
        sim_usage(
            &train(&["--sweep-nodes", sweep]),
            &format!("{says} {file} already describes 2 nodes"),
        );
    }
    let v = sim_json(&train(&["--sweep-nodes", "2"]));
    assert_eq!(v["results"][1]["nodes"], 2, "{v}");
}

#[test]
fn a_preset_model_name_is_the_preset_whatever_the_directory_holds() {
    // A file `resnet50` and a directory `bert-large` in the working
    // directory were read for `--model resnet50` and the default model
    // (a TOML parse error; "Is a directory"). Preset names win, as
    // `--topology dgx-h100` does over a file `dgx-h100`; `./resnet50`
    // reads the file.
    let dir = scratch_dir("model-shadow");
    std::fs::write(dir.join("resnet50"), "garbage").unwrap();
    std::fs::create_dir_all(dir.join("bert-large")).unwrap();
    std::fs::write(dir.join("dgx-h100"), "garbage").unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpucomm"))
            .args(["sim", "train", "--json"])
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    for (args, name) in [
        (&["--model", "resnet50"][..], "resnet50"),
        (&["--model", "RESNET50"][..], "resnet50"),
        (&[][..], "bert-large"),
        (&["-t", "dgx-h100", "--model", "resnet50"][..], "resnet50"),
    ] {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["model"], name, "{args:?}");
    }
    let (code, _, stderr) = run(&["--model", "./resnet50"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("model file"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn train_sweep_runs_in_order_and_refuses_a_count_twice() {
    sim_usage(
        &["train", "--model", "resnet50", "--sweep-nodes", "2,2,2"],
        "--sweep-nodes: 2 nodes given twice",
    );
    let v = sim_json(&["train", "--model", "resnet50", "--sweep-nodes", "4,1,2"]);
    let nodes: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["nodes"].as_u64().unwrap())
        .collect();
    // The one-GPU row, then the sweep in increasing order.
    assert_eq!(nodes, [1, 1, 2, 4], "{v}");
}

#[test]
fn a_model_without_compute_is_refused() {
    // Its one-GPU row printed an efficiency of 0.0% (0 / 0).
    let dir = scratch_dir("no-compute");
    let model = dir.join("zero.toml");
    std::fs::write(
        &model,
        "name = \"zero\"\n[[layer]]\nname = \"a\"\nfwd_ms = 0.0\nbwd_ms = 0.0\nparams = 1000000\n",
    )
    .unwrap();
    sim_fails(
        &["train", "--model", model.to_str().unwrap()],
        "needs some compute",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_one_byte_transfer_prints_its_bandwidth() {
    // They printed "bandwidth: 0.00 GB/s".
    for args in [
        &["p2p", "--size", "1"][..],
        &["copy", "--size", "1"],
        &["rdma", "--size", "1"],
    ] {
        let mut all = vec!["sim"];
        all.extend_from_slice(args);
        let out = gpucomm(&all, LIMIT);
        let line = out
            .assert_ok()
            .lines()
            .find(|l| l.starts_with("bandwidth:"))
            .unwrap_or_else(|| panic!("{}", out.dump()))
            .to_string();
        assert!(line.contains(" MB/s") && !line.contains(" 0.00 "), "{line}");
        let v = sim_json(args);
        let gbps = f(&v, "bandwidth_gbps");
        assert!(gbps > 0.0 && gbps < 0.01, "{v}");
        assert!(line.contains(&format!("{:.2} MB/s", gbps * 1e3)), "{line}");
    }
}

#[test]
fn a_memory_need_past_2_64_bytes_is_told_right() {
    // Saturated at 2^64 bytes it said 18446744073.7 GB.
    let max = u64::MAX.to_string();
    sim_usage(
        &["all_reduce", "-b", &max, "-e", &max],
        "needs 36893488147.4 GB of device memory per GPU",
    );
    sim_usage(
        &["p2p", "--size", &max],
        "needs 36893488147.4 GB of device memory per GPU",
    );
}

#[test]
fn rdma_joins_any_two_nodes_and_crosses_the_spine_between_leaves() {
    // `sim rdma` ran node 0 to node 1 only (any other --nodes was
    // refused), so a transfer between the leaves of an oversubscribed
    // leaf/spine network could not be asked for.
    let net = [
        "--nodes",
        "4",
        "--fabric",
        "leaf-spine",
        "--nodes-per-leaf",
        "2",
        "--oversubscription",
        "32",
        "--size",
        "256M",
    ];
    let run = |pair: &'static str, extra: &[&'static str]| {
        let mut a = vec!["rdma", "--node-pair", pair];
        a.extend_from_slice(&net);
        a.extend_from_slice(extra);
        sim_json(&a)
    };
    for extra in [&[][..], &["--no-gdr"][..]] {
        let near = run("0,1", extra);
        let far = run("3,0", extra);
        assert_eq!(near["leaves"], serde_json::json!([0, 0]), "{near}");
        assert_eq!(far["leaves"], serde_json::json!([1, 0]), "{far}");
        assert_eq!(far["node_pair"], serde_json::json!([3, 0]), "{far}");
        assert_eq!(far["nodes"], 4, "{far}");
        // Within a leaf the NIC's rate; across, the leaf's uplink: 2
        // nodes x 8 NICs / 32 is half a NIC.
        let (n, x) = (f(&near, "bandwidth_gbps"), f(&far, "bandwidth_gbps"));
        assert!(
            (x / n - 0.5).abs() < 0.01,
            "{extra:?}: {n} within a leaf, {x} across"
        );
    }
    let mut args = vec!["sim", "rdma", "--node-pair", "3,0"];
    args.extend_from_slice(&net);
    let text = gpucomm(&args, LIMIT);
    text.assert_ok();
    for line in [
        "# gpucomm sim rdma: 4 x dgx-h100 node3:gpu0 -> node0:gpu0, 256 MiB",
        "# leaves: node3 on leaf 1, node0 on leaf 0: across the spine",
    ] {
        assert!(text.stdout.contains(line), "{line}\n{}", text.dump());
    }
    // Bad pairs are bad command lines.
    sim_usage(
        &["rdma", "--node-pair", "1,1"],
        "rdma joins two different nodes",
    );
    sim_usage(&["rdma", "--node-pair", "0;1"], "expected two node indices");
    sim_usage(
        &["rdma", "--node-pair", "0,4", "--nodes", "4"],
        "the run has 4 nodes (0 to 3), no node 4; give --nodes 5 or more",
    );
    sim_usage(
        &["rdma", "--node-pair", "2,0"],
        "the run has 2 nodes (0 to 1), no node 2; give --nodes 3 or more",
    );
}

#[test]
fn a_multi_node_topology_file_is_named_once_with_its_nodes() {
    // Headers read "2 x dgx-h100x2" for a file that holds two nodes: two
    // copies of a two-node machine, where the run had two nodes.
    let dir = scratch_dir("multi-node-header");
    let file = dir.join("2n.json");
    let file = file.to_str().unwrap();
    gpucomm(
        &[
            "topo", "--preset", "dgx-h100", "--nodes", "2", "--export", file,
        ],
        LIMIT,
    )
    .assert_ok();
    let header = |args: &[&str]| {
        let out = gpucomm(args, LIMIT);
        out.assert_ok();
        out.stdout.lines().next().unwrap_or_default().to_string()
    };
    let coll = ["sim", "all_reduce", "-b", "1M", "-e", "1M", "-t"];
    let mut args = coll.to_vec();
    args.push(file);
    assert_eq!(
        header(&args),
        "# gpucomm sim all_reduce: dgx-h100x2 (2 nodes, 8 GPUs per node, 16 ranks)"
    );
    args.extend(["--gpus", "4"]);
    assert!(header(&args).starts_with("# gpucomm sim all_reduce: dgx-h100x2 (2 nodes, 4 GPUs"));
    let mut args = coll.to_vec();
    args.extend(["dgx-h100", "--nodes", "2"]);
    assert_eq!(
        header(&args),
        "# gpucomm sim all_reduce: 2 x dgx-h100 (8 GPUs per node, 16 ranks)"
    );
    assert_eq!(
        header(&["sim", "rdma", "-t", file, "--node-pair", "1,0"]),
        "# gpucomm sim rdma: dgx-h100x2 (2 nodes) node1:gpu0 -> node0:gpu0, 1 GiB"
    );
    sim_usage(
        &["rdma", "-t", file, "--node-pair", "0,2"],
        &format!("--node-pair 0,2: {file} holds 2 nodes (0 to 1), no node 2"),
    );
}

#[test]
fn train_says_when_the_model_times_are_another_gpus() {
    // The preset models' times are one A100's; on an H100 topology the
    // step used them unchanged and said nothing.
    let say =
        "# compute times: the model's, for A100, used as given on this topology's H100 SXM5 80GB";
    let text = |topo: &str, model: &str| {
        let out = gpucomm(&["sim", "train", "-t", topo, "--model", model], LIMIT);
        out.assert_ok();
        out.stdout
    };
    assert!(text("dgx-h100", "resnet50").contains(say));
    assert!(!text("dgx-a100", "resnet50").contains("# compute times"));
    let v = sim_json(&["train", "-t", "dgx-h100", "--model", "resnet50"]);
    assert_eq!(v["compute_measured_on"], "A100", "{v}");
    assert_eq!(v["compute_gpu_differs"], true, "{v}");
    assert_eq!(v["gpu"], "H100 SXM5 80GB", "{v}");
    let v = sim_json(&["train", "-t", "dgx-a100", "--model", "resnet50"]);
    assert_eq!(v["compute_gpu_differs"], false, "{v}");
    // A model file says its GPU, or nothing (then nothing is said).
    let dir = scratch_dir("model-gpu");
    let layer = "[[layer]]\nname = \"a\"\nfwd_ms = 1.0\nbwd_ms = 2.0\nparams = 1000\n";
    let write = |name: &str, head: &str| {
        let p = dir.join(name);
        std::fs::write(&p, format!("name = \"m\"\n{head}{layer}")).unwrap();
        p.to_str().unwrap().to_string()
    };
    let h100 = write("h100.toml", "measured_on = \"NVIDIA H100 SXM5\"\n");
    let v100 = write("v100.toml", "measured_on = \"V100\"\n");
    let none = write("none.toml", "");
    assert!(!text("dgx-h100", &h100).contains("# compute times"));
    assert!(text("dgx-h100", &v100).contains("the model's, for V100, used as given"));
    assert!(!text("dgx-h100", &none).contains("# compute times"));
    let v = sim_json(&["train", "-t", "dgx-h100", "--model", &none]);
    assert_eq!(v["compute_measured_on"], Value::Null, "{v}");
    assert_eq!(v["compute_gpu_differs"], Value::Null, "{v}");
    // A name that names no GPU is refused, as a model file's other faults.
    let bad = write("bad.toml", "measured_on = \"NVIDIA\"\n");
    sim_fails(
        &["train", "--model", &bad],
        "measured_on = \"NVIDIA\" names no GPU",
    );
}

/// A bad command line exits 2 wherever its value is checked, here or in a
/// library (an unknown preset or model, a GPU past the node's, an option
/// the machine cannot take, more than the simulator takes); a file that
/// exists but is not what it should be fails the run (exit 1). They all
/// exited 1.
#[test]
fn a_bad_command_line_exits_2_and_a_bad_file_1() {
    for (args, says) in [
        (
            &["all_reduce", "--topology", "nosuch"][..],
            "--topology nosuch: unknown topology \"nosuch\": not a preset",
        ),
        (
            &["all_reduce", "--nodes", "0"],
            "--nodes must be at least 1",
        ),
        (
            &["all_reduce", "--gpus", "99"],
            "dgx-h100 has 8 GPUs per node, 99 asked",
        ),
        (
            &["all_reduce", "--algorithm", "foo"],
            "unknown name \"foo\"",
        ),
        (&["all_reduce", "--protocol", "foo"], "unknown name \"foo\""),
        (&["all_reduce", "--tuner", "foo"], "unknown tuner \"foo\""),
        (&["all_reduce", "-b", "1X"], "invalid size \"1X\""),
        (&["all_reduce", "--nics", "999"], "--nics 999: at most"),
        (
            &["all_reduce", "--nodes", "100000"],
            "the simulator takes at most",
        ),
        (
            &["all_to_all", "--algorithm", "tree", "-e", "1M"],
            "algorithm tree does not implement all_to_all",
        ),
        (
            &[
                "all_reduce",
                "-t",
                "pcie-8gpu",
                "--algorithm",
                "nvls",
                "-e",
                "1M",
            ],
            "has no NVSwitch with in-switch reduction",
        ),
        (
            &["p2p", "--topology", "dgx1-v100", "--pair", "0,99"],
            "gpu99 does not exist",
        ),
        (&["p2p", "--pair", "0,0"], "two different GPUs"),
        // The option that named a GPU past the node's is said (it read
        // "GPU index out of range: gpu8 does not exist").
        (
            &["p2p", "--pair", "0,8"],
            "--pair: gpu8 does not exist: dgx-h100 has 8 GPUs per node (gpu0 to gpu7)",
        ),
        (&["rdma", "--gpu", "8"], "--gpu: gpu8 does not exist"),
        (&["copy", "--to", "gpu8"], "--to: gpu8 does not exist"),
        (&["p2p", "--pair", "x"], "expected two GPU indices"),
        (&["copy", "--from", "gpu99"], "gpu99 does not exist"),
        (
            &["copy", "--from", "host", "--to", "host"],
            "is not modeled",
        ),
        (&["copy", "--from", "foo"], "unknown endpoint \"foo\""),
        (
            &["train", "--topology", "dgx-h100", "--model", "nosuch"],
            "unknown model \"nosuch\"",
        ),
        (&["train", "--sweep-nodes", "0,1"], "at least 1"),
        (
            &["train", "--sweep-nodes", "100000"],
            "the simulator takes at most",
        ),
        (
            &["calibrate", "--file", "/nonexistent-gpucomm/m.toml"],
            "--file /nonexistent-gpucomm/m.toml: no such file",
        ),
    ] {
        sim_usage(args, says);
    }
    // Files that exist but do not parse: the run failed.
    let dir = scratch_dir("bad-files");
    let topology = dir.join("topology.toml");
    std::fs::write(&topology, "nodes = [\n").unwrap();
    let topology = topology.to_str().unwrap();
    // Named once ("--topology F: F: not a valid ..." named it twice).
    let says = format!("error: {topology}: not a valid TOML topology file");
    sim_fails(&["all_reduce", "--topology", topology], &says);
    // NIC options on it do not make the file's failure a bad command line.
    sim_fails(
        &["all_reduce", "--topology", topology, "--nics", "4"],
        &says,
    );
    for (name, text) in [("model.toml", "layer = [\n"), ("model.json", "{\"x\":")] {
        let model = dir.join(name);
        std::fs::write(&model, text).unwrap();
        let model = model.to_str().unwrap();
        // Named, and not "invalid model: model file:" (the hardware
        // model's words) without the file.
        sim_fails(
            &["train", "--model", model],
            &format!("error: --model {model}: not a valid model file: "),
        );
    }
    let cases = dir.join("cases.toml");
    std::fs::write(&cases, "[[case]\n").unwrap();
    let cases = cases.to_str().unwrap();
    sim_fails(
        &["calibrate", "--file", cases],
        &format!("error: {cases}: not a valid calibration file: "),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sweep prints its header at once and each row when its size is done,
/// as nccl-tests does, not the whole table at the end: the 1 MiB row is
/// there while the 1 GiB size over 6 GB200 NVL72 racks (seconds of
/// simulation) still runs, a second after the row came. The run is stopped
/// once that is seen.
#[test]
fn a_sweep_prints_each_row_as_its_size_is_done() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(common::exe())
        .args([
            "sim",
            "all_gather",
            "--topology",
            "gb200-nvl72",
            "--nodes",
            "6",
            "-b",
            "1M",
            "-e",
            "1G",
            "-f",
            "1024",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting gpucomm");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut header = Vec::new();
    let mut first_row = None;
    for line in lines {
        let line = line.expect("stdout");
        if line.starts_with('#') {
            header.push(line);
        } else {
            first_row = Some(line);
            break;
        }
    }
    // Printed at the end, the table came a few milliseconds before the
    // process exited; printed as it goes, the 1 GiB size has seconds left.
    std::thread::sleep(Duration::from_secs(1));
    let running = child.try_wait().expect("waiting").is_none();
    let _ = child.kill();
    let _ = child.wait();
    let row = first_row.expect("a row");
    assert!(row.trim_start().starts_with("1043712 "), "{row}");
    assert!(
        header.iter().any(|l| l.contains("busbw(GB/s)")),
        "{header:?}"
    );
    assert!(
        running,
        "the 1 MiB row came only when the whole sweep was done: {row}"
    );
}

/// JSON gives the channels each size's schedule ran on, as NCCL's
/// `NCCL_DEBUG=INFO` log gives `channel{Lo..Hi}`: on 4 DGX H100 nodes a
/// ring under LL keeps 128 KiB per channel (8 bytes x 32 ranks per
/// thread of 512), up to one per NIC; a hardware model (NVLS) has none.
#[test]
fn json_gives_the_channels_a_size_ran_on() {
    let channels = |args: &str| -> Vec<Value> {
        let v = sim_json(&args.split(' ').collect::<Vec<_>>());
        let rows = v["results"].as_array().unwrap();
        rows.iter().map(|r| r["channels"].clone()).collect()
    };
    let ag = "all_gather --topology dgx-h100 --nodes 4 -b 128K -e 512K -f 2 --protocol LL";
    assert_eq!(channels(ag), [1, 2, 4]);
    // --timing's lines say it too.
    let args: Vec<&str> = ["sim"]
        .into_iter()
        .chain(ag.split(' '))
        .chain(["--timing"])
        .collect();
    let out = gpucomm(&args, LIMIT);
    out.assert_ok();
    assert!(
        out.stdout.contains("of 32, 1 channel, ") && out.stdout.contains("of 32, 2 channels, "),
        "{}",
        out.dump()
    );
    // None for a hardware model; the channels that carried data (8 bytes
    // are two floats, so two of the 16 asked for); none for one rank.
    assert_eq!(
        channels("all_reduce --topology dgx-h100 -b 64M -e 64M -a nvls"),
        [Value::Null]
    );
    let tiny = "all_reduce --topology dgx-h100 --nodes 2 -b 8 -e 8 --channels 16 -a tree";
    assert_eq!(channels(tiny), [2]);
    assert_eq!(
        channels("all_reduce --topology dgx-h100 --gpus 1 -b 1M -e 1M"),
        [Value::Null]
    );
}

#[test]
fn point_to_point_operations_across_nodes_run_on_nccls_channels_per_peer() {
    // NCCL gives an operation to a peer on another node two channels at
    // most, one once the ranks pass twice the communicator's channels
    // (model::nccl_p2p_net_channels), where a
    // collective's ring has one per NIC; a peer's channels share its
    // routes, so the time is the one all the NICs' channels give.
    let rows = |args: &str| -> Vec<(Value, f64)> {
        let v = sim_json(&args.split(' ').collect::<Vec<_>>());
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["channels"].clone(), r["time_us"].as_f64().unwrap()))
            .collect()
    };
    let two_nodes = "all_to_all --topology dgx-h100 --nodes 2 -b 1M -e 4G -f 64";
    let nccl = rows(two_nodes);
    let nics = rows(&format!("{two_nodes} --channels 8"));
    let counts: Vec<Value> = nccl.iter().map(|r| r.0.clone()).collect();
    assert_eq!(counts, [1, 2, 2]);
    for ((_, a), (c, b)) in nccl.iter().zip(&nics) {
        assert_eq!(*c, 8);
        // (To the picosecond rounding of the parts' transfer times.)
        assert!((a - b).abs() <= 1e-6 * b, "{a} vs {b} us");
    }
    // 144 ranks of two GB200 NVL72 racks: one channel, where the racks'
    // 72 NICs gave 64.
    let racks = "sendrecv --topology gb200-nvl72 --nodes 2 -b 32M -e 32M";
    let (one, all) = (rows(racks), rows(&format!("{racks} --channels 64")));
    assert_eq!(one[0].0, 1);
    assert!((one[0].1 - all[0].1).abs() <= 1e-6 * all[0].1);
    // 32 ranks of 4 DGX H100 nodes: NCCL's communicator has 16 channels
    // (the ring graph's 8, duplicated), so a peer keeps two; the
    // simulator's 8 rings gave one (model::nccl_comm_channels).
    let four = rows("sendrecv --topology dgx-h100 --nodes 4 -b 64M -e 64M");
    assert_eq!(four[0].0, 2);
}

/// Where NCCL would join GPUs through host memory (its SHM transport,
/// not modeled), the table says so in its header and the JSON names the
/// pair; NVLink machines and GPUs of one PCIe switch carry no such note.
#[test]
fn collectives_say_where_nccl_would_use_its_shm_transport() {
    let args = [
        "all_reduce",
        "--topology",
        "pcie-8gpu",
        "-b",
        "1M",
        "-e",
        "1M",
    ];
    let v = sim_json(&args);
    assert_eq!(v["nccl_shm_pair"], serde_json::json!([0, 2]), "{v}");
    let out = gpucomm(&[&["sim"][..], &args].concat(), LIMIT);
    let table = out.assert_ok();
    assert!(
        table.contains("# note: NCCL passes data between some of a node's GPUs (GPU0 and GPU2")
            && table.contains("SHM"),
        "{table}"
    );
    let v = sim_json(&["train", "--topology", "pcie-8gpu", "--model", "resnet50"]);
    assert_eq!(v["nccl_shm_pair"], serde_json::json!([0, 2]), "{v}");
    // No note: GPUs of one PCIe switch (a ring, and a shift by one); a
    // ring over NVLinks, though not every pair has one; an NVSwitch;
    // NCCL_P2P_LEVEL=SYS, peer to peer through the CPU as simulated.
    let none = [
        ("all_reduce", "pcie-8gpu", "--gpus", "2"),
        ("sendrecv", "pcie-8gpu", "--gpus", "2"),
        ("all_reduce", "dgx1-v100", "--gpus", "8"),
        ("all_to_all", "dgx-h100", "--gpus", "8"),
        ("all_reduce", "pcie-8gpu", "--nccl-p2p-level", "sys"),
    ];
    for (coll, topology, flag, value) in none {
        let args = [coll, "--topology", topology, flag, value, "-e", "1M"];
        let v = sim_json(&args);
        assert!(v.get("nccl_shm_pair").is_none(), "{args:?}: {v}");
    }
    // PHB: across the sockets still through host memory; LOC: everywhere.
    for (topology, level, pair) in [("pcie-8gpu", "PHB", [0, 4]), ("dgx-h100", "loc", [0, 1])] {
        let v = sim_json(&[
            "all_reduce",
            "--topology",
            topology,
            "--nccl-p2p-level",
            level,
            "-e",
            "1M",
        ]);
        assert_eq!(v["nccl_shm_pair"], serde_json::json!(pair), "{v}");
    }
    // A point-to-point operation: the first pair it joins that is not P2P.
    let v = sim_json(&[
        "sendrecv",
        "--topology",
        "pcie-8gpu",
        "--gpus",
        "4",
        "-e",
        "1M",
    ]);
    assert_eq!(v["nccl_shm_pair"], serde_json::json!([1, 2]), "{v}");
    let out = gpucomm(&["sim", "all_reduce", "--nccl-p2p-level", "far"], LIMIT);
    assert_eq!(out.code, Some(2), "{}", out.dump());
    assert!(
        out.stderr.contains("loc, nvl, nvb, pix, pxb, phb, sys"),
        "{}",
        out.dump()
    );
}
