//! Discovery on the fixture trees (tests/fixtures/, written by
//! make_fixtures.py) and on the machine the tests run on.

use std::path::PathBuf;

use gpucomm_topo::{
    ClusterOptions, DiscoverOptions, IbSpeed, LinkKind, NodeKind, PathClass, PcieGen, Topology,
    cluster, discover,
};

fn fixture(name: &str) -> Topology {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    discover(&DiscoverOptions::fixture(root)).unwrap()
}

fn class(t: &Topology, a: &str, b: &str) -> PathClass {
    t.path(t.find(a).unwrap(), t.find(b).unwrap())
        .unwrap()
        .class
}

fn uplink(t: &Topology, id: &str) -> LinkKind {
    let ix = t.find(id).unwrap();
    t.link(t.links_of(ix)[0].0).kind
}

#[test]
fn two_socket_pcie_server() {
    let t = fixture("pcie-server");
    assert_eq!(t.name(), "pcie-server");
    assert_eq!(t.gpus().len(), 8);
    let cpus: Vec<_> = t.nodes_of_kind(NodeKind::Cpu).collect();
    assert_eq!(cpus.len(), 2);
    assert_eq!(t.node(cpus[1]).socket, Some(1));
    assert_eq!(t.node(cpus[0]).props["cpus"], "0-31 (32 CPUs)");
    assert!(t.node(cpus[0]).label.contains("Gold 6338"));
    assert_eq!(t.nodes_of_kind(NodeKind::PcieSwitch).count(), 4);
    assert_eq!(
        t.nodes_of_kind(NodeKind::Nic).count(),
        5,
        "eno1 + 4 HDR HCAs; lo ignored"
    );
    assert_eq!(t.nodes_of_kind(NodeKind::Storage).count(), 2, "SATA + NVMe");
    // The BMC's ASPEED VGA is not a GPU.
    assert!(
        t.nodes()
            .iter()
            .any(|n| n.kind == NodeKind::PcieDevice && n.label.contains("ASPEED"))
    );
    // A device reporting numa_node -1 sits with its root complex's node.
    let peri = t
        .nodes()
        .iter()
        .position(|n| n.pci_address.as_deref() == Some("0000:98:00.1"))
        .unwrap();
    assert_eq!(t.node(gpucomm_topo::NodeIx(peri as u32)).numa, Some(1));
    // GPUs in PCI order, with their link and NUMA node.
    assert_eq!(
        t.node(t.gpus()[0]).pci_address.as_deref(),
        Some("0000:19:00.0")
    );
    assert_eq!(t.node(t.gpus()[0]).label, "NVIDIA A100 PCIe 80GB");
    assert_eq!(t.node(t.gpus()[7]).numa, Some(1));
    assert_eq!(
        uplink(&t, "gpu0"),
        LinkKind::Pcie {
            generation: PcieGen::Gen4,
            width: 16
        }
    );
    // Same switch, other root complex of the same socket, other socket.
    assert_eq!(class(&t, "gpu0", "gpu1"), PathClass::Pix);
    assert_eq!(class(&t, "gpu0", "gpu2"), PathClass::Node);
    assert_eq!(class(&t, "gpu0", "gpu4"), PathClass::Sys);
    // NICs: ports from sysfs; each GPU pair's rail is the HCA on its switch.
    let hca = t.find("nic1").unwrap();
    assert_eq!(t.node(hca).props["ports"], "mlx5_0,ib0");
    assert_eq!(
        t.node(hca).port,
        Some(LinkKind::Infiniband {
            speed: IbSpeed::Hdr,
            count: 1
        })
    );
    let eno = t.find("nic0").unwrap();
    assert_eq!(
        t.node(eno).port,
        Some(LinkKind::Ethernet {
            gbit: 10,
            count: 1,
            roce: false
        })
    );
    assert_eq!(t.nic_of_rank(0), Some(hca));
    assert_eq!(t.nic_of_rank(1), Some(hca));
    assert!(t.path(t.gpus()[0], hca).unwrap().rdma);
    assert!(!t.path(t.gpus()[0], eno).unwrap().rdma);
    // P2P within a switch, not across sockets.
    assert!(t.path(t.gpus()[0], t.gpus()[1]).unwrap().p2p);
    assert!(!t.path(t.gpus()[0], t.gpus()[4]).unwrap().p2p);
}

#[test]
fn dgx_like_machine() {
    let t = fixture("dgx");
    assert_eq!(t.gpus().len(), 8);
    assert_eq!(t.node(t.gpus()[0]).label, "NVIDIA H100 SXM5 80GB");
    assert_eq!(t.nodes_of_kind(NodeKind::Nic).count(), 9);
    assert_eq!(t.nodes_of_kind(NodeKind::PcieSwitch).count(), 9);
    let nvswitch_fns = t
        .nodes()
        .iter()
        .filter(|n| n.label.contains("NVSwitch"))
        .count();
    assert_eq!(nvswitch_fns, 4);
    // Without NVML there are no NVLinks: GPUs meet through PCIe.
    assert_eq!(class(&t, "gpu0", "gpu1"), PathClass::Pix);
    assert_eq!(class(&t, "gpu0", "gpu3"), PathClass::Node);
    assert_eq!(class(&t, "gpu0", "gpu7"), PathClass::Sys);
    // The NVMe sits behind a nested switch: two bridges from the GPU.
    assert_eq!(class(&t, "gpu0", "storage0"), PathClass::Pxb);
    // Each GPU gets its own NDR HCA: mlx5_0 for GPU0, mlx5_1 for GPU1...
    for r in 0..8 {
        let nic = t.nic_of_rank(r).unwrap();
        assert_eq!(t.node(nic).props["ports"], format!("mlx5_{r},ibp{r}s0"));
        assert_eq!(
            t.node(nic).port,
            Some(LinkKind::Infiniband {
                speed: IbSpeed::Ndr,
                count: 1
            })
        );
    }
    assert_eq!(
        uplink(&t, "gpu0"),
        LinkKind::Pcie {
            generation: PcieGen::Gen5,
            width: 16
        }
    );
    // A discovered machine is a node like any other: cluster it.
    let c = cluster(
        &t,
        &ClusterOptions {
            nodes: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let p = c.path(c.gpus()[2], c.gpus()[10]).unwrap();
    assert_eq!(p.class, PathClass::Net);
    assert_eq!(p.bandwidth, 50.0);
    assert!(p.rdma);
}

#[test]
fn discovered_fixture_round_trips_through_the_file_format() {
    for name in ["pcie-server", "dgx"] {
        let t = fixture(name);
        let text = gpucomm_topo::format::to_string(&t, gpucomm_topo::format::Format::Toml);
        let back =
            gpucomm_topo::format::parse(&text, gpucomm_topo::format::Format::Toml, name).unwrap();
        assert_eq!(back.nodes(), t.nodes());
        assert_eq!(back.links(), t.links());
    }
}

#[test]
fn a_root_without_sysfs_is_an_error_not_a_panic() {
    let e = discover(&DiscoverOptions::fixture("/nonexistent-gpucomm-root")).unwrap_err();
    assert!(
        e.to_string().contains("/nonexistent-gpucomm-root/sys"),
        "{e}"
    );
}

/// Discovery of the machine the tests run on: must succeed (with or without
/// GPUs and NVML) and find every PCI endpoint sysfs lists.
#[test]
fn this_machine() {
    let t = discover(&DiscoverOptions::default()).unwrap();
    let cpus = t.nodes_of_kind(NodeKind::Cpu).count();
    assert!(cpus >= 1);
    if let Ok(nodes) = std::fs::read_dir("/sys/devices/system/node") {
        let numa = nodes
            .flatten()
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.starts_with("node") && n[4..].parse::<u32>().is_ok()
            })
            .count();
        assert_eq!(cpus, numa.max(1));
    }
    let mut endpoints = 0;
    if let Ok(devs) = std::fs::read_dir("/sys/bus/pci/devices") {
        for d in devs.flatten() {
            let class = std::fs::read_to_string(d.path().join("class")).unwrap_or_default();
            let class = u32::from_str_radix(class.trim().trim_start_matches("0x"), 16).unwrap_or(0);
            if class >> 8 != 0x0604 && class >> 8 != 0x0600 {
                endpoints += 1;
            }
        }
    }
    let found = t
        .nodes()
        .iter()
        .filter(|n| n.pci_address.is_some() && n.kind != NodeKind::PcieSwitch)
        .count();
    assert_eq!(found, endpoints);
    // Every device reaches every other one (one machine is connected).
    let devs: Vec<_> = t
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind != NodeKind::Host)
        .map(|(i, _)| gpucomm_topo::NodeIx(i as u32))
        .collect();
    for &a in &devs {
        for &b in &devs {
            t.path(a, b).unwrap();
        }
    }
}
