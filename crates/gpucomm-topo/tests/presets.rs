//! Every preset's structure, checked against its vendor's description.

use gpucomm_topo::{
    ClusterOptions, DGX1_V100_NVLINKS, Fabric, LinkKind, NodeKind, PRESETS, PathClass, Topology,
    preset, select,
};

fn nvlinks_of(t: &Topology, gpu: gpucomm_topo::NodeIx) -> u32 {
    t.links_of(gpu)
        .iter()
        .map(|(l, _)| match t.link(*l).kind {
            LinkKind::NvLink { count, .. } => u32::from(count),
            _ => 0,
        })
        .sum()
}

fn class_matrix(t: &Topology) -> Vec<Vec<String>> {
    let g = t.gpus();
    g.iter()
        .map(|&a| {
            g.iter()
                .map(|&b| t.path(a, b).unwrap().class.to_string())
                .collect()
        })
        .collect()
}

#[test]
fn every_preset_builds_and_routes_every_gpu_pair() {
    for (name, _) in PRESETS {
        let t = preset(name).unwrap();
        assert!(!t.gpus().is_empty(), "{name}");
        for &a in t.gpus() {
            for &b in t.gpus() {
                let p = t.path(a, b).unwrap();
                if a != b {
                    assert!(p.bandwidth > 0.0, "{name}");
                    assert!(p.latency_us > 0.0, "{name}");
                }
            }
        }
    }
}

#[test]
fn dgx1_v100_hybrid_cube_mesh() {
    let t = preset("dgx1-v100").unwrap();
    let g = t.gpus();
    assert_eq!(g.len(), 8);
    for &x in g {
        assert_eq!(nvlinks_of(&t, x), 6, "each V100 has 6 NVLinks");
        let neighbours = t
            .links_of(x)
            .iter()
            .filter(|(l, _)| t.link(*l).kind.is_nvlink())
            .count();
        assert_eq!(neighbours, 4, "each V100 has 4 NVLink neighbours");
    }
    // The nvidia-smi topo -m matrix of a DGX-1V (NV2 pairs per the whitepaper).
    let expected = [
        "X NV1 NV1 NV2 NV2 SYS SYS SYS",
        "NV1 X NV2 NV1 SYS NV2 SYS SYS",
        "NV1 NV2 X NV2 SYS SYS NV1 SYS",
        "NV2 NV1 NV2 X SYS SYS SYS NV1",
        "NV2 SYS SYS SYS X NV1 NV1 NV2",
        "SYS NV2 SYS SYS NV1 X NV2 NV1",
        "SYS SYS NV1 SYS NV1 NV2 X NV2",
        "SYS SYS SYS NV1 NV2 NV1 NV2 X",
    ];
    let m = class_matrix(&t);
    for (i, row) in expected.iter().enumerate() {
        assert_eq!(m[i].join(" "), *row, "row {i}");
    }
    let doubles: Vec<(u32, u32)> = DGX1_V100_NVLINKS
        .iter()
        .filter(|p| p.2 == 2)
        .map(|p| (p.0, p.1))
        .collect();
    assert_eq!(
        doubles,
        [
            (0, 3),
            (0, 4),
            (1, 2),
            (1, 5),
            (2, 3),
            (4, 7),
            (5, 6),
            (6, 7)
        ]
    );
    // Bandwidths: 1 link = 25 GB/s per direction, 2 = 50; no NVLink: PCIe Gen3 x16.
    assert_eq!(t.path(g[0], g[1]).unwrap().bandwidth, 25.0);
    assert_eq!(t.path(g[0], g[3]).unwrap().bandwidth, 50.0);
    let sys = t.path(g[0], g[5]).unwrap();
    assert!((sys.bandwidth - 15.754).abs() < 0.01);
    assert!(!sys.p2p);
    // GPU0 and NIC0 share a PCIe switch: GPUDirect RDMA applies.
    let nic0 = t.find("nic0").unwrap();
    let p = t.path(g[0], nic0).unwrap();
    assert_eq!(p.class, PathClass::Pix);
    assert!(p.rdma);
}

#[test]
fn dgx_h100_every_pair_is_nv18_through_the_switch() {
    for name in ["dgx-h100", "hgx-h200"] {
        let t = preset(name).unwrap();
        let g = t.gpus();
        assert_eq!(g.len(), 8);
        let sw: Vec<_> = t.nodes_of_kind(NodeKind::NvSwitch).collect();
        assert_eq!(sw.len(), 1);
        assert!(
            t.node(sw[0]).reduction,
            "NVSwitch gen3 has NVLS in-switch reduction"
        );
        assert_eq!(t.node(sw[0]).chips, Some(4));
        for &a in g {
            assert_eq!(nvlinks_of(&t, a), 18);
            for &b in g {
                if a == b {
                    continue;
                }
                let p = t.path(a, b).unwrap();
                assert_eq!(p.class, PathClass::NvLink(18));
                assert_eq!(p.hops.len(), 2, "through the switch");
                assert_eq!(p.bandwidth, 450.0);
                assert!(p.p2p);
            }
        }
        assert_eq!(t.reduction_support(), (true, false));
        // Each GPU has its own NDR NIC under its PCIe switch.
        for (r, &gpu) in g.iter().enumerate() {
            let nic = t.nic_of_rank(r).unwrap();
            assert_eq!(t.node(nic).id, format!("nic{r}"));
            assert!(t.path(gpu, nic).unwrap().rdma);
        }
    }
}

#[test]
fn every_preset_gpu_and_cpu_has_its_hardware_attributes() {
    for (name, _) in PRESETS {
        let t = preset(name).unwrap();
        for n in t.nodes() {
            match n.kind {
                NodeKind::Gpu => {
                    assert!(n.arch.is_some(), "{name} {}", n.id);
                    assert!(n.memory_bandwidth.unwrap() > 0.0, "{name} {}", n.id);
                    // The label table agrees with what the preset sets.
                    let inferred = gpucomm_topo::hardware::gpu_from_label(&n.label);
                    assert_eq!(
                        inferred,
                        Some((n.arch.unwrap(), n.memory_bandwidth.unwrap()))
                    );
                }
                NodeKind::Cpu => {
                    let bw = n.memory_bandwidth.unwrap();
                    assert!(bw > 0.0, "{name} {}", n.id);
                    let inferred = gpucomm_topo::hardware::cpu_memory_from_label(&n.label);
                    assert_eq!(inferred, Some(bw), "{name} {}", n.id);
                }
                _ => assert!(n.arch.is_none() && n.memory_bandwidth.is_none()),
            }
        }
    }
    for (alias, name) in gpucomm_topo::PRESET_ALIASES {
        assert_eq!(preset(alias).unwrap().name(), *name);
    }
}

#[test]
fn dgx_b200_nv18_of_nvlink5_through_nvswitch_gen4() {
    let t = preset("dgx-b200").unwrap();
    let g = t.gpus();
    assert_eq!(g.len(), 8);
    let sw = t.find("nvswitch0").unwrap();
    assert!(t.node(sw).reduction);
    assert_eq!(t.node(sw).chips, Some(2));
    for &a in g {
        assert_eq!(nvlinks_of(&t, a), 18);
        assert_eq!(t.node(a).gpu_arch(), Some(gpucomm_topo::GpuArch::Blackwell));
        assert_eq!(t.node(a).memory_gbps(), Some(8000.0));
    }
    // 18 NVLink 5 links of 50 GB/s per direction: 900 GB/s (1.8 TB/s both ways).
    let p = t.path(g[0], g[7]).unwrap();
    assert_eq!(p.class, PathClass::NvLink(18));
    assert_eq!(p.bandwidth, 900.0);
    assert_eq!(t.nodes_of_kind(NodeKind::Nic).count(), 8);
    // 4 UPI links at 20 GT/s between the Xeon 8570s.
    let c0 = t.find("cpu0").unwrap();
    let c1 = t.find("cpu1").unwrap();
    assert_eq!(t.link(t.links_between(c0, c1)[0]).bandwidth, 160.0);
    assert!((t.node(c0).memory_gbps().unwrap() - 358.4).abs() < 1e-9);
}

#[test]
fn workstation_rtx4090_one_gpu_on_the_cpu() {
    let t = preset("workstation-rtx4090").unwrap();
    assert_eq!(t.gpus().len(), 1);
    assert_eq!(t.nodes_of_kind(NodeKind::Cpu).count(), 1);
    assert_eq!(t.nodes_of_kind(NodeKind::Nic).count(), 0);
    let gpu = t.gpus()[0];
    let cpu = t.find("cpu0").unwrap();
    let l = t.links_between(gpu, cpu);
    assert_eq!(
        t.link(l[0]).kind,
        LinkKind::Pcie {
            generation: gpucomm_topo::PcieGen::Gen4,
            width: 16
        }
    );
    assert_eq!(t.node(gpu).gpu_arch(), Some(gpucomm_topo::GpuArch::Ada));
    assert!((t.node(cpu).memory_gbps().unwrap() - 89.6).abs() < 1e-9);
}

/// The GPU/NIC rows of `nvidia-smi topo -m` for GPU `r`: its class to
/// each NIC, in NIC order.
fn nic_row(t: &Topology, r: usize) -> String {
    let nics: Vec<_> = t.nodes_of_kind(NodeKind::Nic).collect();
    nics.iter()
        .map(|&n| t.path(t.gpus()[r], n).unwrap().class.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn nvswitch_boxes_print_the_published_nic_classes() {
    // DGX H100 (vllm-project/vllm#6746) and DGX B200-class machines
    // (vllm-project/vllm#16336): a root port per GPU, each GPU PXB to its
    // own ConnectX-7, NODE to the other NICs of its socket, SYS across.
    // HGX H200 and H800 are taken as the DGX H100's host. It was PIX to two
    // NICs (both on one switch with two GPUs), PHB to the next two.
    for name in ["dgx-h100", "hgx-h200", "hgx-h800", "dgx-b200"] {
        let t = preset(name).unwrap();
        assert_eq!(
            nic_row(&t, 0),
            "PXB NODE NODE NODE SYS SYS SYS SYS",
            "{name}"
        );
        assert_eq!(
            nic_row(&t, 5),
            "SYS SYS SYS SYS NODE PXB NODE NODE",
            "{name}"
        );
        let g = t.gpus();
        // Under NVLink, the GPUs' PCIe relation: other root ports of the
        // socket, NODE (vllm#16336 shows it where a GPU's NVLink was down).
        let cpu0 = t.find("cpu0").unwrap();
        let mut pcie = t.route(g[0], cpu0).unwrap();
        pcie.extend(t.route(cpu0, g[2]).unwrap());
        assert_eq!(t.classify(g[0], g[2], &pcie), PathClass::Node, "{name}");
        for (r, &gpu) in g.iter().enumerate() {
            let nic = t.nic_of_rank(r).unwrap();
            assert_eq!(t.node(nic).id, format!("nic{r}"), "{name}");
            let p = t.path(gpu, nic).unwrap();
            assert!(p.rdma, "{name}");
            // Each GPU and each NIC on its own Gen5 x16, 63 GB/s, and the
            // NIC at 400 Gb/s.
            assert!((p.bandwidth - 63.015).abs() < 0.01, "{name}");
            let cpu = t.local_cpu(gpu).unwrap();
            assert!((t.path(cpu, gpu).unwrap().bandwidth - 63.015).abs() < 0.01);
            assert_eq!(t.node(nic).port.unwrap().bandwidth(), 50.0);
        }
        let switches = t.nodes_of_kind(NodeKind::PcieSwitch).count();
        assert_eq!(switches, 16, "{name}: a switch per GPU, one more per NIC");
        assert_eq!(t.nodes_of_kind(NodeKind::Storage).count(), 4, "{name}");
    }
    // DGX A100 (NVIDIA/nccl#1505, rapidsai/dask-cuda#1358): GPU0 PXB to
    // NIC0 and NIC1, nested switches. HGX A800 as it.
    for name in ["dgx-a100", "hgx-a800"] {
        let t = preset(name).unwrap();
        assert_eq!(
            nic_row(&t, 0),
            "PXB PXB NODE NODE SYS SYS SYS SYS",
            "{name}"
        );
        assert_eq!(
            nic_row(&t, 7),
            "SYS SYS SYS SYS NODE NODE PXB PXB",
            "{name}"
        );
        // NIC to NIC PXB too: each behind its own switch (dask-cuda#1358,
        // ucx-py#749, DCGM#149; nccl#1505's topology dump puts mlx5_0 behind
        // its own bridge). It was PIX, both NICs on the upper switch.
        let nic = |i: usize| t.find(&format!("nic{i}")).unwrap();
        assert_eq!(
            t.path(nic(0), nic(1)).unwrap().class,
            PathClass::Pxb,
            "{name}"
        );
        assert_eq!(
            t.path(nic(0), nic(2)).unwrap().class,
            PathClass::Node,
            "{name}"
        );
        let switches = t.nodes_of_kind(NodeKind::PcieSwitch).count();
        assert_eq!(
            switches, 16,
            "{name}: per root port, one for its GPUs, one per NIC, one above"
        );
        let g = t.gpus();
        assert!(t.path(g[0], t.find("nic0").unwrap()).unwrap().rdma);
        // The pair of GPUs shares a switch (and its uplink).
        let sw = |gpu| {
            t.links_of(gpu)
                .iter()
                .map(|&(l, d)| t.link(l).head(d))
                .find(|&n| t.node(n).kind == NodeKind::PcieSwitch)
                .unwrap()
        };
        assert_eq!(sw(g[0]), sw(g[1]));
        assert_ne!(sw(g[1]), sw(g[2]));
    }
    // DGX-2 (NVIDIA/nccl-tests#78): GPU0 to the NICs PIX, PXB, NODE, NODE.
    let t = preset("dgx2").unwrap();
    assert_eq!(nic_row(&t, 0), "PIX PXB NODE NODE SYS SYS SYS SYS");
    assert_eq!(nic_row(&t, 4), "NODE NODE PIX PXB SYS SYS SYS SYS");
    // DGX-1 (Broadwell, one host bridge per socket): PHB stays PHB.
    let t = preset("dgx1-v100").unwrap();
    assert_eq!(nic_row(&t, 0), "PIX PHB SYS SYS");
}

#[test]
fn dgx_a100_nv12_and_hdr_rails() {
    let t = preset("dgx-a100").unwrap();
    let g = t.gpus();
    for &a in g {
        assert_eq!(nvlinks_of(&t, a), 12);
    }
    assert_eq!(t.path(g[0], g[7]).unwrap().class, PathClass::NvLink(12));
    assert_eq!(t.path(g[0], g[7]).unwrap().bandwidth, 300.0);
    assert_eq!(t.nodes_of_kind(NodeKind::Nic).count(), 8);
    assert!(!t.node(t.find("nvswitch0").unwrap()).reduction);
}

#[test]
fn dgx2_sixteen_gpus_nv6_everywhere() {
    let t = preset("dgx2").unwrap();
    let g = t.gpus();
    assert_eq!(g.len(), 16);
    for &a in g {
        assert_eq!(nvlinks_of(&t, a), 6);
    }
    // Across baseboards: GPU -> board switch -> other board -> GPU.
    let p = t.path(g[0], g[15]).unwrap();
    assert_eq!(p.class, PathClass::NvLink(6));
    assert_eq!(p.hops.len(), 3);
    assert_eq!(p.bandwidth, 150.0);
    // 48 links between the baseboards: 1.2 TB/s per direction.
    let a = t.find("nvswitch0").unwrap();
    let b = t.find("nvswitch1").unwrap();
    let l = t.links_between(a, b);
    assert_eq!(t.link(l[0]).bandwidth, 1200.0);
}

#[test]
fn gb200_nvl72_rack() {
    let t = preset("gb200-nvl72").unwrap();
    let g = t.gpus();
    assert_eq!(g.len(), 72);
    assert_eq!(t.hosts().len(), 18);
    let p = t.path(g[0], g[71]).unwrap();
    assert_eq!(p.class, PathClass::NvLink(18));
    assert_eq!(p.bandwidth, 900.0); // NVLink 5: 1.8 TB/s bidirectional per GPU
    assert!(p.p2p, "NVLink P2P spans the trays of the rack");
    assert_eq!(t.host_of_rank(5), Some(1));
    // Grace <-> B200 over NVLink-C2C: the superchip's 900 GB/s (450 per
    // direction) shared by its two GPUs, 225 per direction each.
    let cpu = t.local_cpu(g[0]).unwrap();
    assert_eq!(t.path(cpu, g[0]).unwrap().bandwidth, 225.0);
    assert_eq!(t.local_cpu(g[1]), Some(cpu), "two B200s per Grace");
}

#[test]
fn gh200_superchips_one_and_four_per_node() {
    // One GH200: its Grace over NVLink-C2C, its NIC behind the Grace.
    let t = preset("gh200").unwrap();
    let g = t.gpus();
    assert_eq!(g.len(), 1);
    let cpu = t.local_cpu(g[0]).unwrap();
    assert_eq!(t.path(cpu, g[0]).unwrap().bandwidth, 450.0);
    assert_eq!(t.node(g[0]).memory_bandwidth, Some(4000.0));
    assert_eq!(class_matrix(&t)[0].join(" "), "X");
    // Four: every GPU pair NV6 (150 GB/s per direction), each GPU's own
    // NIC at PHB through its Grace, the others across the Grace links.
    let t = preset("quad-gh200").unwrap();
    let g = t.gpus();
    assert_eq!(g.len(), 4);
    for &a in g {
        for &b in g {
            if a != b {
                let p = t.path(a, b).unwrap();
                assert_eq!((p.class, p.bandwidth), (PathClass::NvLink(6), 150.0));
            }
        }
    }
    for (r, &gpu) in g.iter().enumerate() {
        let cpu = t.local_cpu(gpu).unwrap();
        assert_eq!(t.node(cpu).socket, Some(r as u32));
        let nic = t.nic_of_rank(r).unwrap();
        assert_eq!(t.node(nic).id, format!("nic{r}"));
        assert_eq!(t.path(gpu, nic).unwrap().class, PathClass::Phb);
    }
    let cpus: Vec<_> = t
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind == NodeKind::Cpu)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(cpus.len(), 4);
    let smp: Vec<f64> = t
        .links()
        .iter()
        .filter(|l| l.kind == LinkKind::Smp)
        .map(|l| l.bandwidth)
        .collect();
    assert_eq!(
        smp,
        vec![100.0; 6],
        "each Grace pair at 100 GB/s per direction"
    );
}

#[test]
fn pcie_8gpu_classes() {
    let t = preset("pcie-8gpu").unwrap();
    let m = class_matrix(&t);
    // Ice Lake-SP: each switch on its own root port and host bridge, so
    // the other switch of the socket is NODE (the `pcie-server` fixture's
    // expectation), not PHB.
    assert_eq!(m[0].join(" "), "X PIX NODE NODE SYS SYS SYS SYS");
    assert_eq!(m[5].join(" "), "SYS SYS SYS SYS PIX X NODE NODE");
    let g = t.gpus();
    // CUDA P2P runs between the host bridges of one socket (NCCL uses it
    // there with NCCL_P2P_LEVEL=NODE, "traffic will go through the CPU";
    // by default only up to PXB), not across the SMP link; `gpucomm sim
    // p2p` copies the same way.
    assert!(t.path(g[0], g[1]).unwrap().p2p);
    assert!(t.path(g[0], g[2]).unwrap().p2p);
    assert!(!t.path(g[0], g[4]).unwrap().p2p);
    // Two GPUs share each switch's NIC.
    assert_eq!(t.nic_of_rank(0), t.nic_of_rank(1));
    assert_ne!(t.nic_of_rank(1), t.nic_of_rank(2));
}

#[test]
fn rail_optimized_cluster_routes_through_the_rails() {
    let opts = ClusterOptions {
        nodes: 4,
        ..Default::default()
    };
    let t = select("dgx-h100", &opts).unwrap();
    let g = t.gpus();
    assert_eq!(g.len(), 32);
    assert_eq!(t.host_of_rank(9), Some(1));
    // GPU 3 of node 0 to GPU 3 of node 2: own NIC, rail3, peer's NIC.
    let p = t.path(g[3], g[19]).unwrap();
    assert_eq!(p.class, PathClass::Net);
    assert!(p.rdma);
    let ids: Vec<String> = p
        .hops
        .iter()
        .map(|h| t.node(t.link(h.link).head(h.dir)).id.clone())
        .collect();
    assert_eq!(
        ids,
        [
            "n0.pcisw3.0",
            "n0.pcisw3",
            "n0.nic3",
            "rail3",
            "n2.nic3",
            "n2.pcisw3",
            "n2.pcisw3.0",
            "n2.gpu3"
        ]
    );
    assert_eq!(p.bandwidth, 50.0);
    // Different rails cross the spine.
    let p = t.path(g[0], g[9]).unwrap();
    assert!(
        p.hops
            .iter()
            .any(|h| t.node(t.link(h.link).head(h.dir)).id == "spine")
    );
    // Within a node nothing changes.
    assert_eq!(t.path(g[8], g[9]).unwrap().class, PathClass::NvLink(18));
}

#[test]
fn leaf_spine_oversubscription_narrows_the_uplink() {
    let opts = ClusterOptions {
        nodes: 8,
        fabric: Fabric::LeafSpine,
        nodes_per_leaf: 4,
        oversubscription: 2.0,
        ..Default::default()
    };
    let t = select("dgx-a100", &opts).unwrap();
    let spine = t.find("spine").unwrap();
    let leaf = t.find("leaf0").unwrap();
    let up = t.links_between(leaf, spine)[0];
    // 4 nodes x 8 HDR NICs x 25 GB/s / 2.
    assert_eq!(t.link(up).bandwidth, 400.0);
    let g = t.gpus();
    assert_eq!(t.path(g[0], g[63]).unwrap().class, PathClass::Net);
}

#[test]
fn cluster_options_change_gpus_and_nics() {
    let opts = ClusterOptions {
        nodes: 2,
        gpus: Some(4),
        nics: Some(2),
        nic_speed: gpucomm_topo::catalog::parse_port("roce400"),
        fabric: Fabric::SingleSwitch,
        ..Default::default()
    };
    let t = select("dgx-h100", &opts).unwrap();
    assert_eq!(t.gpus().len(), 8);
    assert_eq!(t.nodes_of_kind(NodeKind::Nic).count(), 4);
    let p = t.path(t.gpus()[0], t.gpus()[4]).unwrap();
    assert_eq!(p.class, PathClass::Net);
    assert_eq!(p.bandwidth, 50.0);
    assert!(
        select(
            "dgx-h100",
            &ClusterOptions {
                gpus: Some(9),
                ..Default::default()
            }
        )
        .is_err()
    );
    assert!(
        select(
            "dgx-h100",
            &ClusterOptions {
                nodes: 0,
                ..Default::default()
            }
        )
        .is_err()
    );
    // A NIC count past what NCCL's topology holds is refused at once (ten
    // million were built, 12 GB and a minute in, before).
    let nics = |n| {
        select(
            "dgx-h100",
            &ClusterOptions {
                nics: Some(n),
                ..Default::default()
            },
        )
    };
    assert_eq!(
        nics(gpucomm_topo::MAX_NICS)
            .unwrap()
            .nodes_of_kind(NodeKind::Nic)
            .count(),
        gpucomm_topo::MAX_NICS
    );
    let e = nics(10_000_000).unwrap_err().to_string();
    assert!(e.contains("at most 640 per node"), "{e}");
}

#[test]
fn a_spine_trunk_past_u16_links_is_refused_not_wrapped() {
    // 128 nodes of 512 NICs on one leaf: 65,536 downlinks, whose trunk
    // count wrapped to 0 links (at the full bandwidth of 65,536).
    let opts = |nics| ClusterOptions {
        nodes: 129,
        nics: Some(nics),
        nic_speed: gpucomm_topo::catalog::parse_port("ndr"),
        fabric: Fabric::LeafSpine,
        nodes_per_leaf: 128,
        ..Default::default()
    };
    let Err(err) = select("workstation-rtx4090", &opts(512)) else {
        panic!("built a leaf of 65,536 ports");
    };
    let msg = err.to_string();
    assert!(
        msg.contains("leaf switch leaf0 would have 65536 ports") && msg.contains("65535"),
        "{msg}"
    );
    // One NIC fewer fits: the trunk counts every downlink.
    let t = select("workstation-rtx4090", &opts(511)).unwrap();
    let (leaf, spine) = (t.find("leaf0").unwrap(), t.find("spine").unwrap());
    let trunk = t.link(t.links_between(leaf, spine)[0]).kind;
    assert!(
        matches!(trunk, LinkKind::Infiniband { count: 65408, .. }),
        "{trunk:?}"
    );
}

/// The PCIe switch (or CPU) a NIC hangs off.
fn attachment(t: &Topology, id: &str) -> String {
    let n = t.find(id).unwrap_or_else(|| panic!("no {id}"));
    let (l, d) = t
        .links_of(n)
        .iter()
        .find(|(l, _)| t.link(*l).kind.is_pcie())
        .unwrap();
    t.node(t.link(*l).head(*d)).id.clone()
}

#[test]
fn nics_spread_over_the_gpus_switches_not_their_first_gpus() {
    // Three GPUs of the PCIe server: two on pcisw0, one on pcisw1. NIC j
    // went next to GPU j * 3 / 2 (GPUs 0 and 1): both on pcisw0.
    let opts = ClusterOptions {
        gpus: Some(3),
        nics: Some(2),
        ..Default::default()
    };
    let t = select("pcie-8gpu", &opts).unwrap();
    assert_eq!(attachment(&t, "nic0"), "pcisw0");
    assert_eq!(attachment(&t, "nic1"), "pcisw1");
    // Eight switches, four NICs: every other one (next to GPUs 0, 2, 4, 6,
    // as gpucomm sim's --nics places them); eight GPUs on four switches
    // and eight NICs: two on each.
    let four = select(
        "dgx-h100",
        &ClusterOptions {
            nics: Some(4),
            ..Default::default()
        },
    )
    .unwrap();
    let at: Vec<String> = (0..4)
        .map(|j| attachment(&four, &format!("nic{j}")))
        .collect();
    assert_eq!(at, ["pcisw0.0", "pcisw2.0", "pcisw4.0", "pcisw6.0"]);
    let eight = select(
        "pcie-8gpu",
        &ClusterOptions {
            nics: Some(8),
            ..Default::default()
        },
    )
    .unwrap();
    let at: Vec<String> = (0..8)
        .map(|j| attachment(&eight, &format!("nic{j}")))
        .collect();
    assert_eq!(
        at,
        [
            "pcisw0", "pcisw0", "pcisw1", "pcisw1", "pcisw2", "pcisw2", "pcisw3", "pcisw3"
        ]
    );
}

#[test]
fn nics_0_and_nic_speed_without_nics() {
    let ws = |nics, nic_speed| {
        select(
            "workstation-rtx4090",
            &ClusterOptions {
                nics,
                nic_speed,
                ..Default::default()
            },
        )
    };
    // --nics 0 on a machine without NICs needs no port speed.
    let t = ws(Some(0), None).unwrap();
    assert_eq!(t.nodes_of_kind(NodeKind::Nic).count(), 0);
    // --nic-speed with no NIC to set changed nothing, silently.
    let ndr = gpucomm_topo::catalog::parse_port("ndr");
    for (nics, says) in [
        (
            None,
            "workstation-rtx4090 has none (--nics N gives it some)",
        ),
        (Some(0), "--nics 0 leaves none"),
    ] {
        match ws(nics, ndr) {
            Err(gpucomm_topo::TopoError::NoEffect(m)) => {
                assert!(m.starts_with("--nic-speed ndr: no NIC to set it on"), "{m}");
                assert!(m.contains(says), "{m}");
            }
            other => panic!("{nics:?}: {other:?}"),
        }
    }
    // With NICs to set, or NICs to make, it applies.
    let t = ws(Some(1), ndr).unwrap();
    assert_eq!(t.nodes_of_kind(NodeKind::Nic).count(), 1);
    assert!(
        select(
            "pcie-8gpu",
            &ClusterOptions {
                nic_speed: ndr,
                ..Default::default()
            }
        )
        .is_ok()
    );
}

#[test]
fn a_multi_host_unit_keeps_gpus_and_nics_per_host_and_rails_per_host() {
    let nvl72 = |nodes, gpus, nics| {
        select(
            "gb200-nvl72",
            &ClusterOptions {
                nodes,
                gpus,
                nics,
                ..Default::default()
            },
        )
        .unwrap()
    };
    // Rails by the NIC's index in its tray: 4 rails, not 72.
    let t = nvl72(2, None, None);
    let rails: Vec<&str> = t
        .nodes()
        .iter()
        .filter(|n| n.id.starts_with("rail"))
        .map(|n| n.id.as_str())
        .collect();
    assert_eq!(rails, ["rail0", "rail1", "rail2", "rail3"]);
    let hops = |t: &Topology, a: &str, b: &str| -> Vec<String> {
        let p = t.path(t.find(a).unwrap(), t.find(b).unwrap()).unwrap();
        p.hops
            .iter()
            .map(|h| t.node(t.link(h.link).head(h.dir)).id.clone())
            .collect()
    };
    // GPU 0 of tray 1 to GPU 0 of tray 5 of the other rack: one rail, no
    // spine (NIC 0 of both trays is on rail 0).
    let h = hops(&t, "n0.tray1.gpu0", "n1.tray5.gpu0");
    assert!(
        h.contains(&"rail0".to_string()) && !h.contains(&"spine".to_string()),
        "{h:?}"
    );
    // --nics N: N in every tray. With 4 per rack one tray in 18 had one
    // and the others no route out.
    for n in [1, 4] {
        let t = nvl72(2, None, Some(n));
        assert_eq!(t.nodes_of_kind(NodeKind::Nic).count(), 2 * 18 * n);
        assert!(t.find("n1.tray17.nic0").is_some());
        let h = hops(&t, "n0.tray1.gpu0", "n1.tray1.gpu0");
        assert!(h.contains(&"rail0".to_string()), "{h:?}");
    }
    // --gpus N: N of each tray, as for one host.
    let t = nvl72(1, Some(2), None);
    assert_eq!(t.gpus().len(), 36);
    assert!(t.find("tray17.gpu1").is_some() && t.find("tray17.gpu2").is_none());
    let e = select(
        "gb200-nvl72",
        &ClusterOptions {
            gpus: Some(5),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert_eq!(e, "--gpus 5: host tray0 of gb200-nvl72 has 4 GPUs");
}

#[test]
fn a_unit_with_its_own_network_is_not_joined_again() {
    // An exported 2-node cluster, replicated: each NIC got a second port
    // (the file's rail and a new one), and rails were numbered across the
    // file's two hosts (n0.n0.gpu0 -> rail0 -> spine -> rail8 -> n1.n1.gpu0).
    let two = select(
        "dgx-h100",
        &ClusterOptions {
            nodes: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let file = gpucomm_topo::format::to_string(&two, gpucomm_topo::format::Format::Toml);
    let unit =
        gpucomm_topo::format::parse(&file, gpucomm_topo::format::Format::Toml, "c2.toml").unwrap();
    let e = gpucomm_topo::cluster(
        &unit,
        &ClusterOptions {
            nodes: 2,
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with(
            "--nodes 2: dgx-h100x2 already has its own network (n0.nic0 is cabled to rail0)"
        ),
        "{e}"
    );
    // As it is, it routes on its own rails.
    let p = unit.path(unit.find("n0.gpu3").unwrap(), unit.find("n1.gpu3").unwrap());
    assert_eq!(p.unwrap().class, PathClass::Net);
}
