//! Gather and scatter (nccl-tests' gather_perf and scatter_perf): NCCL
//! runs them as grouped sends and receives to and from the root, so the
//! simulator runs gpucomm-algo's direct schedule with NCCL's point-to-point
//! protocol rule, and a size is cut into one block per rank as nccl-tests
//! cuts it.

mod common;

use gpucomm_algo::Collective;
use gpucomm_sim::collective::{CollOptions, nccl_tests_bytes, simulate};

const GIB: u64 = 1 << 30;

#[test]
fn the_roots_link_carries_every_other_block_and_nothing_else_is_busy() {
    let f = common::fabric("dgx-h100", 1);
    let n = 8u64;
    let opts = CollOptions::default();
    let mut times = Vec::new();
    for (coll, busy) in [
        (Collective::Gather { root: 3 }, "nvswitch->gpu3"),
        (Collective::Scatter { root: 3 }, "gpu3->nvswitch"),
    ] {
        let r = simulate(&f, coll, GIB, &opts).unwrap();
        let ex = r.exec.as_ref().expect("a schedule ran");
        let root = ex
            .links
            .iter()
            .find(|l| l.name.ends_with(busy))
            .unwrap_or_else(|| panic!("{coll:?}: no {busy} in {:?}", ex.links));
        // n - 1 blocks of size / n (nccl-tests' per-rank block).
        let want = (GIB / n * (n - 1)) as f64;
        assert!(
            (root.bytes - want).abs() < 1e-6 * want,
            "{coll:?}: {} bytes",
            root.bytes
        );
        // The others' links carry one block each.
        for l in ex.links.iter().filter(|l| !l.name.ends_with(busy)) {
            assert!(
                (l.bytes - (GIB / n) as f64).abs() < 1e-6 * want,
                "{coll:?}: {} {}",
                l.name,
                l.bytes
            );
        }
        // The root's link bounds the time: busbw, (n-1)/n of algbw, is
        // at most that link's rate, and within a few percent of it.
        let rate = root.capacity_gbps;
        assert!(
            r.busbw_gbps <= rate && r.busbw_gbps > 0.9 * rate,
            "{coll:?}: busbw {} on a {rate} GB/s link",
            r.busbw_gbps
        );
        times.push(r.time.as_us());
    }
    // A scatter is a gather run backwards.
    assert!((times[0] - times[1]).abs() < 1e-3 * times[0], "{times:?}");
}

#[test]
fn nccl_picks_the_protocol_by_the_bytes_per_peer_as_for_all_to_all() {
    let f = common::fabric("dgx-h100", 1);
    let opts = CollOptions::default();
    for bytes in [64u64 << 10, 1 << 20, 64 << 20] {
        let a2a = simulate(&f, Collective::AllToAll, bytes, &opts).unwrap();
        for coll in [
            Collective::Gather { root: 0 },
            Collective::Scatter { root: 5 },
        ] {
            let r = simulate(&f, coll, bytes, &opts).unwrap();
            assert_eq!(r.protocol, a2a.protocol, "{coll:?} at {bytes} B");
            assert_eq!(r.algorithm.name(), "direct", "{coll:?}");
        }
    }
}

#[test]
fn sizes_are_cut_in_blocks_as_nccl_tests_cuts_them() {
    // 16-byte blocks per rank, as every blocked collective of nccl-tests.
    for coll in [
        Collective::Gather { root: 0 },
        Collective::Scatter { root: 0 },
    ] {
        assert_eq!(nccl_tests_bytes(coll, 1000, 8, 4), 896);
        assert_eq!(nccl_tests_bytes(coll, 100, 8, 4), 0);
    }
    // A rooted collective elsewhere than rank 0 on two nodes runs every
    // rank (no symmetry to reduce by) and finishes.
    let f = common::fabric("dgx-h100", 2);
    let r = simulate(
        &f,
        Collective::Gather { root: 9 },
        64 << 20,
        &CollOptions::default(),
    )
    .unwrap();
    assert_eq!(r.exec.as_ref().unwrap().simulated_ranks, 16);
    assert!(r.busbw_gbps > 0.0);
}

#[test]
fn across_nodes_a_gpu_receives_on_its_own_nics_as_in_nccls_point_to_point() {
    // NCCL's point-to-point operations post receives on the receiving
    // GPU's own NIC (PXN moves the sender onto that rail over NVLink): a
    // gather's remote blocks all enter the root's node through NIC 0 on a
    // DGX H100 (GPUs 0 and 1 share NICs 0 and 1, one each, as
    // `ncclTopoGetLocalNet` splits them), where a collective's channels
    // would spread over all eight rails.
    let f = common::fabric("dgx-h100", 2);
    let opts = CollOptions::default();
    let gather = simulate(&f, Collective::Gather { root: 0 }, GIB, &opts).unwrap();
    let ex = gather.exec.as_ref().unwrap();
    let into_node0: Vec<&str> = ex
        .links
        .iter()
        .filter(|l| l.name.starts_with("node0:net->nic") && l.bytes > 0.0)
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(into_node0, ["node0:net->nic0"], "{:?}", ex.links);
    // That NIC bounds it: half the blocks (512 MiB) at its rate.
    let nic = ex
        .links
        .iter()
        .find(|l| l.name == "node0:net->nic0")
        .unwrap();
    let bound_us = (GIB / 2) as f64 / (nic.capacity_gbps * 1e3);
    assert!(
        gather.time.as_us() >= bound_us,
        "{} us",
        gather.time.as_us()
    );
    // A scatter's root reaches every remote GPU's own NICs over NVLink:
    // all eight leave node 0, and it is that much faster.
    let scatter = simulate(&f, Collective::Scatter { root: 0 }, GIB, &opts).unwrap();
    let out_of_node0 = scatter
        .exec
        .as_ref()
        .unwrap()
        .links
        .iter()
        .filter(|l| l.name.starts_with("node0:nic") && l.name.ends_with("->net") && l.bytes > 0.0)
        .count();
    assert_eq!(out_of_node0, 8);
    assert!(scatter.time.as_us() < 0.6 * gather.time.as_us());
    // A sendrecv ring's one pair across each node boundary likewise runs
    // at the receiver's NIC ("46-48 GB/s per NIC" at NDR, NCCL's
    // maintainers say), far below the NVLink pairs.
    let sr = simulate(&f, Collective::SendRecv { shift: 1 }, GIB, &opts).unwrap();
    assert!(
        sr.busbw_gbps <= nic.capacity_gbps && sr.busbw_gbps > 0.9 * nic.capacity_gbps,
        "sendrecv busbw {}",
        sr.busbw_gbps
    );
}
