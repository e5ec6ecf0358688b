//! The file format: round trips, and every bad-input case named by file,
//! field and problem.

use std::path::PathBuf;

use gpucomm_topo::format::{self, Format};
use gpucomm_topo::{ClusterOptions, PRESETS, PathClass, TopoError, preset, select};

const GOOD: &str = r#"
version = 1
name = "two-gpus"

[[node]]
id = "host0"
kind = "host"

[[node]]
id = "cpu0"
kind = "cpu"
host = "host0"
numa = 0

[[node]]
id = "gpu0"
kind = "gpu"
host = "host0"

[[node]]
id = "gpu1"
kind = "gpu"
host = "host0"

[[link]]
a = "gpu0"
b = "gpu1"
kind = "nvlink"
gen = 4
count = 18

[[link]]
a = "gpu0"
b = "cpu0"
kind = "pcie"
gen = 5
width = 16

[[link]]
a = "gpu1"
b = "cpu0"
kind = "pcie"
gen = 5
"#;

fn err(text: &str) -> String {
    format::parse(text, Format::Toml, "bad.toml")
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

/// Replaces the first occurrence of `from` in GOOD.
fn good_with(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from}");
    GOOD.replacen(from, to, 1)
}

fn assert_names(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{msg:?} should contain {p:?}");
    }
}

#[test]
fn the_good_file_loads() {
    let t = format::parse(GOOD, Format::Toml, "good.toml").unwrap();
    assert_eq!(t.gpus().len(), 2);
    let p = t.path(t.gpus()[0], t.gpus()[1]).unwrap();
    assert_eq!(p.class, PathClass::NvLink(18));
    // width defaults to 16
    assert!(
        (t.path(t.gpus()[1], t.find("cpu0").unwrap())
            .unwrap()
            .bandwidth
            - 63.015)
            .abs()
            < 0.01
    );
}

#[test]
fn unknown_link_kind() {
    let m = err(&good_with("kind = \"nvlink\"", "kind = \"warp-drive\""));
    assert_names(
        &m,
        &[
            "bad.toml",
            "link[0].kind",
            "unknown link kind \"warp-drive\"",
        ],
    );
}

/// A number where an integer belongs is quoted as the file writes it:
/// serde's own words wrote 1e300 out in 301 digits.
#[test]
fn a_float_of_the_wrong_type_is_quoted_as_written() {
    for (written, quoted) in [("1e300", "`1e300`"), ("2.5", "`2.5`"), ("16.0", "`16.0`")] {
        let m = err(&good_with("width = 16", &format!("width = {written}")));
        assert_names(&m, &["bad.toml", "width", "floating point", quoted]);
        assert!(m.len() < 300, "{m}");
    }
}

#[test]
fn link_to_a_missing_node() {
    let m = err(&good_with("b = \"gpu1\"", "b = \"gpu9\""));
    assert_names(&m, &["bad.toml", "link[0].b", "no node with id \"gpu9\""]);
}

#[test]
fn negative_bandwidth() {
    let m = err(&good_with("count = 18", "count = 18\nbandwidth = -5.0"));
    assert_names(&m, &["bad.toml", "link[0].bandwidth", "positive", "-5"]);
}

#[test]
fn negative_count_and_out_of_range_generation() {
    let m = err(&good_with("count = 18", "count = -2"));
    assert_names(&m, &["bad.toml", "link[0].count", "-2 is out of range"]);
    let m = err(&good_with("gen = 4", "gen = 7"));
    assert_names(
        &m,
        &["bad.toml", "link[0].gen", "7 is out of range (1 to 5)"],
    );
    let m = err(&good_with("width = 16", "width = 3"));
    assert_names(&m, &["bad.toml", "link[1].width", "3 is not a PCIe width"]);
}

#[test]
fn a_transfer_rate_too_small_to_hold_is_named_by_its_field() {
    // 0.0004 GT/s rounds to 0 MT/s: the error blamed `bandwidth`, which the
    // file does not have.
    let upi = |rate: &str| {
        good_with(
            "[[link]]\na = \"gpu0\"\nb = \"gpu1\"",
            &format!(
                "[[node]]\nid = \"cpu1\"\nkind = \"cpu\"\nhost = \"host0\"\n\n\
                 [[link]]\na = \"cpu0\"\nb = \"cpu1\"\nkind = \"upi\"\nrate_gts = {rate}\n\n\
                 [[link]]\na = \"gpu0\"\nb = \"gpu1\""
            ),
        )
    };
    let m = err(&upi("0.0004"));
    assert_names(
        &m,
        &["bad.toml", "link[0].rate_gts", "0.0004 GT/s is below 0.001"],
    );
    assert!(!m.contains("bandwidth"), "{m}");
    // The smallest rate that holds loads.
    format::parse(&upi("0.001"), Format::Toml, "ok.toml").unwrap();
}

#[test]
fn duplicate_id() {
    let m = err(&good_with("id = \"gpu1\"", "id = \"gpu0\""));
    assert_names(
        &m,
        &["bad.toml", "node[3].id", "duplicate id \"gpu0\"", "node[2]"],
    );
}

#[test]
fn not_toml() {
    let m = err("this is { not toml");
    assert_names(&m, &["bad.toml", "not a valid TOML topology file"]);
    let m = format::parse("{ nope", Format::Json, "bad.json")
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert_names(
        &m,
        &["bad.json", "not a valid JSON topology file", "line 1"],
    );
}

#[test]
fn wrong_or_missing_version() {
    let m = err(&good_with("version = 1", "version = 2"));
    assert_names(&m, &["bad.toml", "version", "unsupported version 2"]);
    let m = err(&good_with("version = 1", ""));
    assert_names(&m, &["bad.toml", "version", "missing"]);
}

#[test]
fn unknown_node_kind_and_bad_host() {
    let m = err(&good_with("kind = \"cpu\"", "kind = \"tpu\""));
    assert_names(
        &m,
        &["bad.toml", "node[1].kind", "unknown node kind \"tpu\""],
    );
    let m = err(&good_with(
        "host = \"host0\"\nnuma",
        "host = \"gpu0\"\nnuma",
    ));
    assert_names(
        &m,
        &["bad.toml", "node[1].host", "not a node of kind \"host\""],
    );
    let m = err(&good_with(
        "host = \"host0\"\nnuma",
        "host = \"nowhere\"\nnuma",
    ));
    assert_names(
        &m,
        &["bad.toml", "node[1].host", "no node with id \"nowhere\""],
    );
}

#[test]
fn unknown_field_and_field_of_the_wrong_kind() {
    let m = err(&good_with("count = 18", "count = 18\nbandwith = 5.0"));
    assert_names(&m, &["bad.toml", "bandwith"]);
    let m = err(&good_with("count = 18", "count = 18\nwidth = 16"));
    assert_names(
        &m,
        &[
            "bad.toml",
            "link[0].width",
            "not used by links of kind \"nvlink\"",
        ],
    );
    let m = err(&good_with("gen = 5\nwidth = 16", "width = 16"));
    assert_names(&m, &["bad.toml", "link[1].gen", "required"]);
}

#[test]
fn self_link_and_wrong_types() {
    let m = err(&good_with("b = \"gpu1\"", "b = \"gpu0\""));
    assert_names(&m, &["bad.toml", "link[0]", "to itself"]);
    let m = err(&good_with("gen = 4", "gen = \"four\""));
    assert_names(
        &m,
        &[
            "bad.toml",
            "not a valid TOML topology file",
            "field link[0].gen",
            "line 29",
        ],
    );
    let m = err(&good_with("numa = 0", "numa = -1"));
    assert_names(&m, &["bad.toml", "node[1].numa", "out of range"]);
}

#[test]
fn load_names_the_file_and_reports_missing_files() {
    let dir = std::env::temp_dir().join(format!("gpucomm-topo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("broken.toml");
    std::fs::write(&p, good_with("kind = \"nvlink\"", "kind = \"pcie9\"")).unwrap();
    let m = format::load(&p).unwrap_err().to_string();
    assert_names(&m, &["broken.toml", "link[0].kind", "pcie9"]);
    let missing = dir.join("missing.toml");
    let e = format::load(&missing).unwrap_err();
    assert!(matches!(e, TopoError::Io { .. }));
    // select() takes files too, and a file's cluster works like a preset's.
    let good = dir.join("good.toml");
    std::fs::write(&good, GOOD).unwrap();
    let t = select(good.to_str().unwrap(), &ClusterOptions::default()).unwrap();
    assert_eq!(t.gpus().len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_preset_round_trips_in_toml_and_json() {
    for (name, _) in PRESETS {
        let t = preset(name).unwrap();
        for f in [Format::Toml, Format::Json] {
            let text = format::to_string(&t, f);
            let back = format::parse(&text, f, name).unwrap();
            assert_eq!(back.nodes(), t.nodes(), "{name} {f:?}");
            assert_eq!(back.links(), t.links(), "{name} {f:?}");
            assert_eq!(format::to_string(&back, f), text);
        }
    }
    // Overridden bandwidths (oversubscribed uplinks) survive too.
    let opts = ClusterOptions {
        nodes: 8,
        fabric: gpucomm_topo::Fabric::LeafSpine,
        oversubscription: 3.0,
        ..Default::default()
    };
    let t = select("dgx-a100", &opts).unwrap();
    let back = format::parse(&format::to_string(&t, Format::Toml), Format::Toml, "x").unwrap();
    assert_eq!(back.links(), t.links());
}

#[test]
fn the_documented_example_loads() {
    // docs/topology.md carries this file as its full example.
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/example.toml");
    let t = format::load(&p).unwrap();
    assert!(!t.gpus().is_empty());
    // Set on gpu0 and equal to what the label gives gpu1.
    let g = t.gpus();
    assert_eq!(t.node(g[0]).memory_bandwidth, Some(3900.0));
    assert_eq!(t.node(g[1]).memory_bandwidth, None);
    assert_eq!(t.node(g[1]).memory_gbps(), Some(3900.0));
}

#[test]
fn hardware_attributes_load_validate_and_default() {
    let with = good_with(
        "id = \"gpu0\"\nkind = \"gpu\"",
        "id = \"gpu0\"\nkind = \"gpu\"\narch = \"hopper\"\nmemory_bandwidth = 3350.0",
    );
    let t = format::parse(&with, Format::Toml, "hw.toml").unwrap();
    let g0 = t.node(t.find("gpu0").unwrap());
    assert_eq!(g0.gpu_arch(), Some(gpucomm_topo::GpuArch::Hopper));
    assert_eq!(g0.memory_gbps(), Some(3350.0));
    // Unset and unlabelled: no architecture; a CPU gets the documented default.
    let g1 = t.node(t.find("gpu1").unwrap());
    assert_eq!((g1.gpu_arch(), g1.memory_gbps()), (None, None));
    let cpu = t.node(t.find("cpu0").unwrap());
    assert_eq!(
        cpu.memory_gbps(),
        Some(gpucomm_topo::hardware::DEFAULT_CPU_MEMORY_GBPS)
    );
    let m = err(&good_with(
        "id = \"gpu0\"\nkind = \"gpu\"",
        "id = \"gpu0\"\nkind = \"gpu\"\narch = \"kepler\"",
    ));
    assert_names(&m, &["bad.toml", "node[2].arch", "kepler", "hopper"]);
    let m = err(&good_with("numa = 0", "numa = 0\narch = \"volta\""));
    assert_names(&m, &["node[1].arch", "only GPUs"]);
    let m = err(&good_with("numa = 0", "numa = 0\nmemory_bandwidth = -1.0"));
    assert_names(&m, &["node[1].memory_bandwidth", "positive"]);
    let m = err(&good_with(
        "id = \"host0\"\nkind = \"host\"",
        "id = \"host0\"\nkind = \"host\"\nmemory_bandwidth = 10.0",
    ));
    assert_names(&m, &["node[0].memory_bandwidth", "only GPUs and CPUs"]);
}

#[test]
fn node_fields_of_the_wrong_kind_are_refused() {
    // `reduction` on a CPU or GPU, `chips` on anything but an NVSwitch, and
    // a host inside a host were taken and meant nothing.
    let cases = [
        (
            good_with("kind = \"cpu\"", "kind = \"cpu\"\nreduction = true"),
            "node[1].reduction",
            "node \"cpu0\" is a cpu",
        ),
        (
            good_with(
                "id = \"gpu0\"\nkind = \"gpu\"",
                "id = \"gpu0\"\nkind = \"gpu\"\nreduction = true",
            ),
            "node[2].reduction",
            "node \"gpu0\" is a gpu",
        ),
        (
            good_with(
                "id = \"gpu0\"\nkind = \"gpu\"",
                "id = \"gpu0\"\nkind = \"gpu\"\nchips = 4",
            ),
            "node[2].chips",
            "only nvswitch nodes have chips",
        ),
        (
            good_with("kind = \"host\"", "kind = \"host\"\nhost = \"host0\""),
            "node[0].host",
            "node \"host0\" is a host",
        ),
    ];
    for (text, field, says) in &cases {
        let m = err(text);
        assert_names(&m, &["bad.toml", field, says]);
    }
    // Where they mean something they load: NVLS and chips on an NVSwitch,
    // SHARP on a network switch.
    let ok = good_with(
        "[[link]]",
        "[[node]]\nid = \"nvs\"\nkind = \"nvswitch\"\nhost = \"host0\"\nreduction = true\nchips = 4\n\n\
         [[node]]\nid = \"sw\"\nkind = \"switch\"\nreduction = true\n\n[[link]]",
    );
    let t = format::parse(&ok, Format::Toml, "ok.toml").unwrap();
    let nvs = t.node(t.find("nvs").unwrap());
    assert!(nvs.reduction);
    assert_eq!(nvs.chips, Some(4));
    assert!(t.node(t.find("sw").unwrap()).reduction);
}
