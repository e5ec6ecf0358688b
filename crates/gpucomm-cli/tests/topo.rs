//! `gpucomm topo` end to end: it takes the machine as `gpucomm sim` does
//! (`--topology PRESET|local|FILE`), besides `--preset` and `--file`.

mod common;

use std::time::Duration;

use common::{gpucomm, scratch_dir};

const LIMIT: Duration = Duration::from_secs(60);

fn ok(args: &[&str]) -> String {
    gpucomm(args, LIMIT).assert_ok().to_string()
}

#[test]
fn topology_names_a_preset_or_a_file_as_sim_does() {
    let by_preset = ok(&["topo", "--preset", "dgx-h100", "--nodes", "2", "--json"]);
    assert!(
        by_preset.contains("\"name\": \"dgx-h100x2\""),
        "{by_preset}"
    );
    assert_eq!(
        ok(&["topo", "--topology", "dgx-h100", "--nodes", "2", "--json"]),
        by_preset
    );
    // Preset names in any case, as `gpucomm sim --topology` takes them.
    assert_eq!(
        ok(&["topo", "-t", "DGX-H100", "--nodes", "2", "--json"]),
        by_preset
    );
    assert_eq!(
        ok(&["topo", "--preset", "Dgx-H100", "--nodes", "2", "--json"]),
        by_preset
    );
    let dir = scratch_dir("topo-topology");
    let file = dir.join("a100.toml");
    let file = file.to_str().unwrap();
    ok(&["topo", "--topology", "dgx-a100", "--export", file]);
    assert_eq!(
        ok(&["topo", "--topology", file, "--gpus", "4", "--json"]),
        ok(&["topo", "--file", file, "--gpus", "4", "--json"])
    );
    let nope = gpucomm(&["topo", "--topology", "no-such-machine"], LIMIT);
    nope.assert_fails(2, "--topology no-such-machine: unknown topology");
    // A path that exists but is no topology file says what it is.
    let dir_arg = dir.to_str().unwrap();
    let not_a_file = gpucomm(&["topo", "--topology", dir_arg], LIMIT);
    not_a_file.assert_fails(1, &format!("--topology {dir_arg}: {dir_arg}: "));
    let both = gpucomm(
        &["topo", "--topology", "dgx-h100", "--preset", "dgx-a100"],
        LIMIT,
    );
    both.assert_fails(2, "cannot be used with");
}

#[test]
fn a_cluster_or_matrix_too_large_is_refused_at_once() {
    // It built the cluster until the kernel killed it (24 GB).
    let huge = gpucomm(
        &[
            "topo",
            "--preset",
            "dgx-a100",
            "--nodes",
            "18446744073709551615",
        ],
        LIMIT,
    );
    huge.assert_fails(2, "--nodes 18446744073709551615: ");
    // --all on 4800 devices built a 4800 x 4800 grid of strings.
    let all = gpucomm(
        &["topo", "--preset", "dgx-h100", "--nodes", "300", "--all"],
        LIMIT,
    );
    all.assert_fails(
        2,
        "--all: 4800 GPUs and NICs would make a 4800 x 4800 matrix",
    );
    // Under the cap it prints every host.
    let out = ok(&["topo", "--preset", "dgx-h100", "--nodes", "3", "--all"]);
    assert!(out.contains("n2.host0.GPU7"), "{out}");
}

#[test]
fn file_says_what_is_wrong_with_a_path_that_is_not_a_topology_file() {
    let dir = scratch_dir("topo-file");
    let d = dir.to_str().unwrap();
    // Once, not "Is a directory (os error 21): Is a directory (os error 21)".
    let out = gpucomm(&["topo", "--file", d], LIMIT);
    out.assert_fails(
        1,
        &format!("gpucomm: error: {d}: Is a directory (os error 21)\n"),
    );
    let missing = dir.join("missing.toml");
    let m = missing.to_str().unwrap();
    gpucomm(&["topo", "--file", m], LIMIT).assert_fails(2, &format!("--file {m}: no such file"));
}

#[test]
fn a_bad_oversubscription_is_refused_as_typed() {
    // The error wrote 1e-300 back as a 302-character decimal.
    for (value, preset) in [
        ("1e-300", None),
        ("1e-300", Some("dgx-h100")),
        ("0.5", Some("dgx-h100")),
        ("-3", Some("dgx-h100")),
        ("nan", Some("dgx-h100")),
        ("inf", Some("dgx-h100")),
        ("four", Some("dgx-h100")),
    ] {
        let flag = format!("--oversubscription={value}");
        let mut argv = vec!["topo", "--nodes", "2", "--fabric", "leaf-spine", &flag];
        if let Some(p) = preset {
            argv.extend(["--preset", p]);
        }
        let out = gpucomm(&argv, LIMIT);
        out.assert_fails(
            2,
            &format!("invalid value '{value}' for '--oversubscription"),
        );
        assert!(out.stderr.contains("at least 1"), "{}", out.dump());
        assert!(out.stderr.len() < 400, "{}", out.dump());
    }
}

#[test]
fn catalog_and_list_print_json_with_json() {
    // --json was ignored: the text table came out.
    let text = ok(&["topo", "--catalog", "--json"]);
    let rows: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let rows = rows.as_array().unwrap();
    let table = ok(&["topo", "--catalog"]);
    // One object per row of the table (header and rule aside).
    assert_eq!(rows.len(), table.lines().count() - 2, "{text}");
    let ndr = rows
        .iter()
        .find(|r| r["generation"] == "InfiniBand NDR")
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(ndr["gbps_per_direction"], 50.0);
    assert_eq!(ndr["gbps_bidirectional"], 100.0);
    assert_eq!(ndr["lanes"], "4");
    for key in ["signaling", "products", "source"] {
        assert!(ndr[key].is_string(), "{key}: {ndr}");
    }
    let list = ok(&["topo", "--list", "--json"]);
    let presets: serde_json::Value =
        serde_json::from_str(&list).unwrap_or_else(|e| panic!("{e}: {list}"));
    let presets = presets.as_array().unwrap();
    assert_eq!(presets.len(), ok(&["topo", "--list"]).lines().count());
    assert!(
        presets
            .iter()
            .any(|p| p["name"] == "dgx-h100" && p["description"].as_str().unwrap().contains("H100")),
        "{list}"
    );
}

#[test]
fn leaf_spine_options_need_a_leaf_spine_fabric_of_several_nodes() {
    // Each was accepted and changed nothing (or, on rails, the unused spine).
    for (argv, says) in [
        (
            &["--nodes", "2", "--nodes-per-leaf", "0"][..],
            "--nodes-per-leaf 0 needs --fabric leaf-spine",
        ),
        (
            &["--nodes", "2", "--nodes-per-leaf", "2", "--fabric", "rail"][..],
            "--nodes-per-leaf 2 needs --fabric leaf-spine",
        ),
        (
            &["--nodes", "2", "--oversubscription", "4"][..],
            "--oversubscription 4 needs --fabric leaf-spine",
        ),
        (
            &[
                "--nodes",
                "2",
                "--oversubscription",
                "4",
                "--fabric",
                "single",
            ][..],
            "--oversubscription 4 needs --fabric leaf-spine",
        ),
        (
            &["--oversubscription", "4", "--fabric", "leaf-spine"][..],
            "--oversubscription 4 needs more than one node",
        ),
        (
            &["--nodes-per-leaf", "1", "--fabric", "leaf-spine"][..],
            "--nodes-per-leaf 1 needs more than one node",
        ),
        // The network between nodes, on one node: taken and unused.
        (&["--sharp"][..], "--sharp needs more than one node"),
        (
            &["--fabric", "single"][..],
            "--fabric single needs more than one node",
        ),
        // Named briefly, not with 301 digits.
        (
            &["--nodes", "2", "--oversubscription", "1e300"][..],
            "--oversubscription 1e300 needs --fabric leaf-spine",
        ),
        // One leaf (nodes up to --nodes-per-leaf, 4 by default) has no
        // uplink: the oversubscription was taken and ignored.
        (
            &[
                "--nodes",
                "4",
                "--fabric",
                "leaf-spine",
                "--oversubscription",
                "2",
            ][..],
            "--oversubscription 2 needs more than one leaf: 4 nodes at 4 per leaf",
        ),
        (
            &[
                "--nodes",
                "8",
                "--nodes-per-leaf",
                "8",
                "--fabric",
                "leaf-spine",
                "--oversubscription",
                "3",
            ][..],
            "--oversubscription 3 needs more than one leaf: 8 nodes at 8 per leaf",
        ),
    ] {
        let mut full = vec!["topo", "--preset", "dgx-h100"];
        full.extend_from_slice(argv);
        gpucomm(&full, LIMIT).assert_fails(2, says);
    }
    // The default fabric, given on one node, changes nothing: taken.
    ok(&[
        "topo", "--preset", "dgx-h100", "--nodes", "1", "--fabric", "rail",
    ]);
    // What they are for still works; non-blocking (1) is what every fabric is.
    let out = ok(&[
        "topo",
        "--preset",
        "dgx-a100",
        "--nodes",
        "8",
        "--fabric",
        "leaf-spine",
        "--nodes-per-leaf",
        "4",
        "--oversubscription",
        "2",
    ]);
    assert!(
        out.contains("leaf-spine fabric, 2:1 oversubscribed"),
        "{out}"
    );
    // Two leaves: taken.
    ok(&[
        "topo",
        "--preset",
        "dgx-h100",
        "--nodes",
        "5",
        "--fabric",
        "leaf-spine",
        "--oversubscription",
        "2",
    ]);
    ok(&["topo", "--preset", "dgx-h100", "--oversubscription", "1"]);
    ok(&[
        "topo",
        "--preset",
        "dgx-h100",
        "--nodes",
        "2",
        "--oversubscription",
        "1",
    ]);
    gpucomm(
        &[
            "topo",
            "--preset",
            "dgx-h100",
            "--nodes",
            "2",
            "--fabric",
            "leaf-spine",
            "--nodes-per-leaf",
            "0",
        ],
        LIMIT,
    )
    .assert_fails(2, "--nodes-per-leaf must be at least 1");
}

#[test]
fn one_path_of_a_large_cluster() {
    // It ran past the 60 s limit at 10,000 nodes (rails were assigned in
    // quadratic time); the time itself is not asserted.
    let out = gpucomm(
        &[
            "topo", "--preset", "dgx-h100", "--nodes", "10000", "--path", "n0.gpu0", "n1.gpu7",
        ],
        LIMIT,
    );
    let text = out.assert_ok();
    assert!(text.starts_with("n0.gpu0 -> n1.gpu7: NET"), "{text}");
    assert!(text.contains("GPUDirect RDMA: yes"), "{text}");
}

#[test]
fn file_is_always_read_even_when_named_like_a_preset() {
    // `--file dgx-a100` read the dgx-a100 preset, `--file local` the
    // machine, whatever the files held.
    let dir = scratch_dir("topo-file-preset-name");
    let workstation = ok(&["topo", "--preset", "workstation-rtx4090", "--json"]);
    for name in ["dgx-a100", "DGX-H100", "local"] {
        let path = dir.join(name);
        ok(&[
            "topo",
            "--preset",
            "workstation-rtx4090",
            "--export",
            path.to_str().unwrap(),
        ]);
        let run = std::process::Command::new(common::exe())
            .args(["topo", "--file", name, "--json"])
            .current_dir(&dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(run.status.success(), "{name}: {run:?}");
        assert_eq!(stdout, workstation, "--file {name}");
    }
    // A preset's name that is no file here is an error, not the preset.
    let missing = std::process::Command::new(common::exe())
        .args(["topo", "--file", "dgx-b200"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("--file dgx-b200: no such file"), "{stderr}");
}

#[test]
fn every_nic_speed_taken_exports_and_loads_again() {
    // --nic-speed took Ethernet up to 65535 Gb/s, which the file format
    // refused past 1600: the export did not load.
    let dir = scratch_dir("topo-nic-speed");
    for speed in ["roce1600", "eth1600", "roce1", "ndr"] {
        let file = dir.join(format!("{speed}.toml"));
        let file = file.to_str().unwrap();
        let built = ok(&[
            "topo",
            "--preset",
            "dgx-h100",
            "--nic-speed",
            speed,
            "--json",
        ]);
        ok(&[
            "topo",
            "--preset",
            "dgx-h100",
            "--nic-speed",
            speed,
            "--export",
            file,
        ]);
        assert_eq!(ok(&["topo", "--file", file, "--json"]), built, "{speed}");
    }
    for speed in ["roce1601", "eth3200", "roce65535"] {
        let run = gpucomm(
            &["topo", "--preset", "dgx-h100", "--nic-speed", speed],
            LIMIT,
        );
        run.assert_fails(2, &format!("--nic-speed {speed:?}: expected"));
        assert!(run.stderr.contains("1 to 1600 Gb/s"), "{}", run.dump());
    }
}

#[test]
fn matrices_left_empty_by_the_first_host_limit_say_so() {
    // 30 GPUs that name no host, in a file with one host: the matrices
    // keep the first host's devices when there are more than 24, which
    // left none, and said "No GPUs or NICs found".
    let mut text = String::from(
        "version = 1\n[[node]]\nid = \"host0\"\nkind = \"host\"\n\
         [[node]]\nid = \"cpu0\"\nkind = \"cpu\"\nhost = \"host0\"\n",
    );
    for i in 0..30 {
        text.push_str(&format!("[[node]]\nid = \"gpu{i}\"\nkind = \"gpu\"\n"));
    }
    for i in 0..30 {
        text.push_str(&format!(
            "[[link]]\na = \"gpu{i}\"\nb = \"cpu0\"\nkind = \"pcie\"\ngen = 4\n"
        ));
    }
    let dir = scratch_dir("topo-nohost");
    let file = dir.join("nohost.toml");
    std::fs::write(&file, text).unwrap();
    let file = file.to_str().unwrap();
    let out = ok(&["topo", "--file", file, "--bandwidth", "--p2p"]);
    assert!(!out.contains("No GPUs"), "{out}");
    for what in ["device matrix", "bandwidth matrix", "P2P matrix"] {
        assert!(
            out.contains(&format!(
                "30 GPUs and 0 NICs, more than the 24 a {what} shows without --all, and none of \
                 them in the first host \"host0\""
            )),
            "{what}: {out}"
        );
    }
    let all = ok(&["topo", "--file", file, "--all"]);
    assert!(all.lines().any(|l| l.starts_with("GPU29 ")), "{all}");
}

#[test]
fn nic_options_that_change_nothing_or_leave_gpus_without_a_route() {
    // --nic-speed on a machine without NICs was taken and did nothing.
    let ws = ["topo", "--preset", "workstation-rtx4090"];
    gpucomm(&[&ws[..], &["--nic-speed", "ndr"]].concat(), LIMIT).assert_fails(
        2,
        "--nic-speed ndr: no NIC to set it on; workstation-rtx4090 has none (--nics N gives it some)",
    );
    gpucomm(
        &[&ws[..], &["--nics", "0", "--nic-speed", "hdr"]].concat(),
        LIMIT,
    )
    .assert_fails(
        2,
        "--nic-speed hdr: no NIC to set it on; --nics 0 leaves none",
    );
    // --nics 0 needs no port speed there (it asked for --nic-speed).
    let out = ok(&[&ws[..], &["--nics", "0"]].concat());
    assert!(out.contains("GPUs 1, NICs 0,"), "{out}");
    // --nics on a GB200 NVL72 rack: N per tray. With 4 for the rack, 17
    // trays had none and no route out.
    let path = ok(&[
        "topo",
        "--preset",
        "gb200-nvl72",
        "--nics",
        "4",
        "--nodes",
        "2",
        "--path",
        "n0.tray1.gpu0",
        "n1.tray1.gpu0",
    ]);
    assert!(path.contains("n0.tray1.nic0 -> rail0"), "{path}");
    // Spread over the GPUs' switches: 3 GPUs of the PCIe server (two on
    // pcisw0, one on pcisw1) and 2 NICs put both on pcisw0.
    let tree = ok(&[
        "topo",
        "--preset",
        "pcie-8gpu",
        "--gpus",
        "3",
        "--nics",
        "2",
    ]);
    let under = |sw: &str| {
        let at = tree.find(&format!("{sw} [pcie-switch]")).unwrap();
        let rest = &tree[at..];
        let end = rest[1..].find("pcisw").map_or(rest.len(), |e| e + 1);
        rest[..end].matches("[nic]").count()
    };
    assert_eq!((under("pcisw0"), under("pcisw1")), (1, 1), "{tree}");
}

#[test]
fn an_exported_cluster_is_not_joined_again() {
    let dir = scratch_dir("topo-c2");
    let file = dir.join("c2.toml");
    let file = file.to_str().unwrap();
    ok(&[
        "topo", "--preset", "dgx-h100", "--nodes", "2", "--export", file,
    ]);
    // It routed n0.n0.gpu0 -> n1.n0.gpu0 over the file's rail0 and a new
    // rail0, each NIC cabled twice.
    gpucomm(
        &[
            "topo",
            "--file",
            file,
            "--nodes",
            "2",
            "--path",
            "n0.n0.gpu0",
            "n1.n0.gpu0",
        ],
        LIMIT,
    )
    .assert_fails(
        2,
        "--nodes 2: dgx-h100x2 already has its own network (n0.nic0 is cabled to rail0)",
    );
    // As it is, it routes on its own rails.
    let path = ok(&["topo", "--file", file, "--path", "n0.gpu3", "n1.gpu3"]);
    assert!(path.contains("n0.nic3 -> rail3"), "{path}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_matrix_has_nvidia_smi_s_affinity_columns() {
    // nvidia-smi prints CPU Affinity, NUMA Affinity and GPU NUMA ID, and
    // leaves them blank on NIC rows (which printed `N/A  0`).
    let out = ok(&["topo", "--preset", "dgx-h100"]);
    let header = out
        .lines()
        .find(|l| l.trim_start().starts_with("GPU0 "))
        .unwrap();
    assert!(
        header.ends_with("NIC7  CPU Affinity  NUMA Affinity  GPU NUMA ID"),
        "{header}"
    );
    let gpu4 = out.lines().find(|l| l.starts_with("GPU4 ")).unwrap();
    assert!(gpu4.ends_with("N/A           1              N/A"), "{gpu4}");
    let nic0 = out.lines().find(|l| l.starts_with("NIC0 ")).unwrap();
    assert!(
        nic0.ends_with("SYS   X     NODE  NODE  NODE  SYS   SYS   SYS   SYS"),
        "{nic0}"
    );
}

/// Options that another one would leave unused are refused (`--path` with
/// `--json` printed the topology file and no route; `--list` ignored
/// `--catalog` and a preset).
#[test]
fn options_another_would_ignore_are_refused() {
    for args in [
        &[
            "topo", "--preset", "dgx-h100", "--path", "gpu0", "gpu3", "--json",
        ][..],
        &[
            "topo", "--preset", "dgx-h100", "--path", "gpu0", "gpu3", "--p2p",
        ],
        &["topo", "--preset", "dgx-h100", "--bandwidth", "--json"],
        &["topo", "--preset", "dgx-h100", "--p2p", "--json"],
        &["topo", "--list", "--catalog"],
        &["topo", "--list", "--preset", "dgx2"],
        &["topo", "--catalog", "--preset", "dgx2"],
    ] {
        gpucomm(args, LIMIT).assert_fails(2, "cannot be used with");
    }
    // Each alone, and --list/--catalog with --json, still run.
    assert!(ok(&["topo", "--list", "--json"]).starts_with('['));
    assert!(ok(&["topo", "--preset", "dgx-h100", "--path", "gpu0", "gpu3"]).contains("NV18"));
}

/// A bad command line exits 2 wherever its value is checked (here or in
/// gpucomm-topo: an unknown preset, options the topology cannot take); a
/// file that exists but does not parse, or cannot be written, fails the
/// run (exit 1). They all exited 1.
#[test]
fn a_bad_command_line_exits_2_and_a_bad_file_1() {
    for (args, says) in [
        (
            &["topo", "--preset", "nosuch"][..],
            "unknown topology \"nosuch\": not a preset",
        ),
        (
            &["topo", "--preset", "dgx-h100", "--gpus", "99"],
            "--gpus 99: dgx-h100 has 8 GPUs",
        ),
        (
            &["topo", "--preset", "dgx-h100", "--nodes", "0"],
            "--nodes must be at least 1",
        ),
        (
            &["topo", "--preset", "dgx-h100", "--nics", "999"],
            "--nics 999: at most",
        ),
        (
            &[
                "topo", "--preset", "dgx-h100", "--fabric", "foo", "--nodes", "2",
            ],
            "--fabric \"foo\": expected",
        ),
        (
            &["topo", "--preset", "dgx-h100", "--path", "gpu0", "nosuch"],
            "no node \"nosuch\" in dgx-h100",
        ),
        (
            &["topo", "--sysfs-root", "/nonexistent-gpucomm"],
            "--sysfs-root /nonexistent-gpucomm: no such directory",
        ),
        // Options --list, --catalog and --json ignored (exit 0, the same
        // output).
        (&["topo", "--list", "--nodes", "2"], "cannot be used with"),
        (&["topo", "--catalog", "--sharp"], "cannot be used with"),
        (
            &["topo", "--preset", "dgx-h100", "--all", "--json"],
            "cannot be used with",
        ),
        // A path from a node to itself printed an infinite bottleneck.
        (
            &["topo", "--preset", "dgx-b200", "--path", "gpu0", "gpu0"],
            "--path gpu0 gpu0: the same node twice",
        ),
    ] {
        gpucomm(args, LIMIT).assert_fails(2, says);
    }
    let dir = scratch_dir("topo-bad-files");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "nodes = [\n").unwrap();
    let bad = bad.to_str().unwrap();
    for flag in ["--file", "--topology"] {
        gpucomm(&["topo", flag, bad], LIMIT).assert_fails(1, "not a valid TOML topology file");
        gpucomm(&["topo", flag, bad, "--gpus", "2"], LIMIT)
            .assert_fails(1, "not a valid TOML topology file");
    }
    // An output nowhere to be written is a bad command line, as `sim
    // --trace` refuses it (it failed after the topology was built, exit 1).
    let nowhere = dir.join("no-such-dir").join("x.toml");
    let nowhere = nowhere.to_str().unwrap();
    let export = |to: &str| gpucomm(&["topo", "--preset", "dgx-h100", "--export", to], LIMIT);
    export(nowhere).assert_fails(2, &format!("--export {nowhere}: no directory"));
    export(dir.to_str().unwrap()).assert_fails(2, "is a directory");
    let _ = std::fs::remove_dir_all(&dir);
}
