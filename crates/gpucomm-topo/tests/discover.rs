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

/// A made-up sysfs tree under the temporary directory, for cases the
/// fixture trees do not have: files are written as sysfs holds them, and
/// `sys/bus/pci/devices/<bdf>` and `sys/class/*/<name>` are symlinks into
/// `sys/devices`.
struct Tree(PathBuf);

impl Tree {
    fn new(tag: &str) -> Tree {
        let root = std::env::temp_dir().join(format!(
            "gpucomm-topo-discover-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
        Tree(root)
    }
    fn write(&self, rel: &str, text: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{text}\n")).unwrap();
    }
    /// A PCI function at `sys/devices/<chain>` with these sysfs files.
    fn dev(&self, chain: &str, class: u32, vendor: u32, files: &[(&str, &str)]) -> String {
        let rel = format!("sys/devices/{chain}");
        self.write(&format!("{rel}/class"), &format!("0x{class:06x}"));
        self.write(&format!("{rel}/vendor"), &format!("0x{vendor:04x}"));
        self.write(&format!("{rel}/device"), "0x20b5");
        self.write(&format!("{rel}/numa_node"), "0");
        for (f, v) in files {
            self.write(&format!("{rel}/{f}"), v);
        }
        let bdf = chain.rsplit('/').next().unwrap();
        std::os::unix::fs::symlink(
            format!("../../../devices/{chain}"),
            self.0.join("sys/bus/pci/devices").join(bdf),
        )
        .unwrap();
        rel
    }
    /// A class device (`infiniband/mlx5_0`, `net/ib0`) of the function at
    /// `dev` (what [`Tree::dev`] returned), with these files.
    fn class_dev(&self, dev: &str, class: &str, name: &str, files: &[(&str, &str)]) {
        let rel = format!("{dev}/{class}/{name}");
        for (f, v) in files {
            self.write(&format!("{rel}/{f}"), v);
        }
        let link = self.0.join("sys/class").join(class).join(name);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        let target = rel.strip_prefix("sys/").unwrap();
        std::os::unix::fs::symlink(format!("../../{target}"), link).unwrap();
    }
    fn discover(&self) -> Topology {
        discover(&DiscoverOptions::fixture(&self.0)).unwrap()
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const BRIDGE: u32 = 0x060400;
const GPU: u32 = 0x030200;

/// One GPU under a root port, each with these link files: the GPU's link.
fn gpu_link(tag: &str, port: &[(&str, &str)], gpu: &[(&str, &str)]) -> Topology {
    let t = Tree::new(tag);
    t.write("sys/devices/system/node/node0/cpulist", "0-3");
    t.dev("pci0000:00/0000:00:01.0", BRIDGE, 0x8086, port);
    t.dev("pci0000:00/0000:00:01.0/0000:01:00.0", GPU, 0x10de, gpu);
    let topo = t.discover();
    assert_eq!(topo.gpus().len(), 1);
    topo
}

#[test]
fn pcie_links_are_their_maximum_not_an_idle_downtrained_speed() {
    let pcie = |g, width| LinkKind::Pcie {
        generation: g,
        width,
    };
    let gen4 = [
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("max_link_width", "16"),
        ("current_link_speed", "16.0 GT/s PCIe"),
        ("current_link_width", "16"),
    ];
    // An idle Gen4 GPU downtrains to 2.5 GT/s: the link is still Gen4.
    let idle = [
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("max_link_width", "16"),
        ("current_link_speed", "2.5 GT/s PCIe"),
        ("current_link_width", "16"),
    ];
    let t = gpu_link("idle", &gen4, &idle);
    assert_eq!(uplink(&t, "gpu0"), pcie(PcieGen::Gen4, 16));
    // A Gen5 x16 GPU in a Gen4 x8 slot trains to Gen4 x8: the smaller of
    // the two ends' maxima.
    let port = [
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("max_link_width", "8"),
        ("current_link_speed", "16.0 GT/s PCIe"),
        ("current_link_width", "8"),
    ];
    let gpu = [
        ("max_link_speed", "32.0 GT/s PCIe"),
        ("max_link_width", "16"),
        ("current_link_speed", "2.5 GT/s PCIe"),
        ("current_link_width", "8"),
    ];
    let t = gpu_link("slot", &port, &gpu);
    assert_eq!(uplink(&t, "gpu0"), pcie(PcieGen::Gen4, 8));
    // Without max_link_*, the current figures stand in (older kernels,
    // the fixtures).
    let cur = [
        ("current_link_speed", "8.0 GT/s PCIe"),
        ("current_link_width", "16"),
    ];
    let t = gpu_link("current", &gen4, &cur);
    assert_eq!(uplink(&t, "gpu0"), pcie(PcieGen::Gen3, 16));
}

#[test]
fn an_unknown_pcie_link_is_slow_and_said_never_integrated() {
    let port = [
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("max_link_width", "16"),
    ];
    // Link down (or the device asleep): sysfs says "Unknown" and width 0.
    let down = [
        ("current_link_speed", "Unknown"),
        ("current_link_width", "0"),
    ];
    let t = gpu_link("unknown", &port, &down);
    let link = uplink(&t, "gpu0");
    assert_eq!(
        link,
        LinkKind::Pcie {
            generation: PcieGen::Gen1,
            width: 1
        }
    );
    assert!(link.bandwidth() < 1.0, "{link:?}");
    let gpu = t.node(t.gpus()[0]);
    assert!(
        gpu.props["link_note"].contains("speed and width unknown"),
        "{:?}",
        gpu.props
    );
    // A function without any link file is root-complex-integrated.
    let t = gpu_link("integrated", &port, &[]);
    assert_eq!(uplink(&t, "gpu0"), LinkKind::Integrated);
    assert!(!t.node(t.gpus()[0]).props.contains_key("link_note"));
}

#[test]
fn infiniband_ports_run_at_their_rate_and_stay_infiniband() {
    // rate -> the port discovery models (None: no known speed).
    let cases = [
        ("200 Gb/sec (4X HDR)", Some(IbSpeed::Hdr)),
        ("100 Gb/sec (2X HDR)", Some(IbSpeed::Hdr100)),
        ("400 Gb/sec (4X NDR)", Some(IbSpeed::Ndr)),
        ("200 Gb/sec (2X NDR)", Some(IbSpeed::Ndr200)),
        // FDR is named by its nominal 56 Gb/s and runs at its 54.55 of data.
        ("56 Gb/sec (4X FDR)", Some(IbSpeed::Fdr)),
        // One NDR lane is 100 Gb/s, not NDR's 400: a 100 Gb/s speed.
        ("100 Gb/sec (1X NDR)", Some(IbSpeed::Hdr100)),
        // Two EDR lanes, 50 Gb/s, and QDR's 40: slower than any speed
        // modeled; never the ib netdev's speed as RoCE.
        ("50 Gb/sec (2X EDR)", None),
        ("40 Gb/sec (4X QDR)", None),
        ("Unknown", None),
    ];
    for (i, (rate, want)) in cases.iter().enumerate() {
        let t = Tree::new(&format!("ib{i}"));
        t.write("sys/devices/system/node/node0/cpulist", "0-3");
        t.dev("pci0000:00/0000:00:01.0", BRIDGE, 0x8086, &[]);
        let hca = t.dev(
            "pci0000:00/0000:00:01.0/0000:01:00.0",
            0x020700,
            0x15b3,
            &[],
        );
        t.class_dev(
            &hca,
            "infiniband",
            "mlx5_0",
            &[("ports/1/rate", rate), ("ports/1/link_layer", "InfiniBand")],
        );
        t.class_dev(&hca, "net", "ib0", &[("speed", "200000"), ("type", "32")]);
        let topo = t.discover();
        let nic = topo.node(topo.find("nic0").unwrap());
        let want = want.map(|speed| LinkKind::Infiniband { speed, count: 1 });
        assert_eq!(nic.port, want, "{rate}: {:?}", nic.props);
        if let Some(port) = want {
            let gbit: f64 = rate.split_whitespace().next().unwrap().parse().unwrap();
            // The port's data rate; FDR's "56" is its nominal rate.
            let data = match want {
                Some(LinkKind::Infiniband { speed, .. }) => {
                    gbit * speed.gbit() / speed.nominal_gbit()
                }
                _ => gbit,
            };
            assert_eq!(port.bandwidth(), data / 8.0, "{rate}");
        } else {
            assert!(
                nic.props["speed"].contains("port speed unknown"),
                "{rate}: {:?}",
                nic.props
            );
        }
    }
}

#[test]
fn memory_only_numa_nodes_are_no_cpus() {
    // CXL or HBM memory shows as a NUMA node with an empty cpulist: no CPU
    // and no SMP link for it, a note on the host.
    let t = Tree::new("memory-only");
    t.write("sys/devices/system/node/node0/cpulist", "0-3");
    t.write("sys/devices/system/node/node1/cpulist", "4-7");
    t.write("sys/devices/system/node/node2/cpulist", "");
    t.write(
        "sys/devices/system/node/node2/meminfo",
        "Node 2 MemTotal:       104857600 kB",
    );
    let topo = t.discover();
    let cpus: Vec<_> = topo.nodes_of_kind(NodeKind::Cpu).collect();
    let ids: Vec<&str> = cpus.iter().map(|&c| topo.node(c).id.as_str()).collect();
    assert_eq!(ids, ["cpu0", "cpu1"]);
    let smp = topo
        .links()
        .iter()
        .filter(|l| l.kind == LinkKind::Smp)
        .count();
    assert_eq!(smp, 1);
    let host = topo.node(topo.nodes_of_kind(NodeKind::Host).next().unwrap());
    assert_eq!(host.props["memory_only_numa"], "node2 (100.0 GiB)");
    // Only memory-only nodes: the online CPUs make the one CPU node.
    let t = Tree::new("memory-only-all");
    t.write("sys/devices/system/node/node1/cpulist", "");
    t.write("sys/devices/system/cpu/online", "0-7");
    let topo = t.discover();
    let cpus: Vec<_> = topo.nodes_of_kind(NodeKind::Cpu).collect();
    assert_eq!(cpus.len(), 1);
    assert_eq!(topo.node(cpus[0]).props["cpus"], "0-7 (8 CPUs)");
}
