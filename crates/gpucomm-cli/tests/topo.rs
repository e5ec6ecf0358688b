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
    nope.assert_fails(1, "--topology no-such-machine: unknown topology");
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
