//! Route invariants on presets and clusters: hops chain from source to
//! destination, routes are deterministic and the same from many threads,
//! and a route's reverse has the same class and bottleneck.

use gpucomm_topo::{ClusterOptions, Fabric, Hop, NodeIx, NodeKind, PathClass, Topology, select};
use proptest::prelude::*;

fn check_chain(t: &Topology, a: NodeIx, b: NodeIx, hops: &[Hop]) {
    let mut at = a;
    for h in hops {
        let l = t.link(h.link);
        assert_eq!(
            l.tail(h.dir),
            at,
            "hop leaves from where the last one arrived"
        );
        at = l.head(h.dir);
    }
    assert_eq!(at, b);
    // No link is crossed twice.
    let mut seen: Vec<_> = hops.iter().map(|h| h.link).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), hops.len());
    // Endpoints other than the two ends never forward.
    for h in &hops[..hops.len().saturating_sub(1)] {
        let mid = t.node(t.link(h.link).head(h.dir)).kind;
        assert!(mid.is_transit(), "{mid:?} forwarded traffic");
    }
}

fn cluster(preset: &str, nodes: usize, fabric: Fabric) -> Topology {
    select(
        preset,
        &ClusterOptions {
            nodes,
            fabric,
            nodes_per_leaf: 2,
            ..Default::default()
        },
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn routes_chain_and_are_symmetric(
        preset in prop::sample::select(vec!["dgx1-v100", "dgx2", "dgx-a100", "dgx-h100", "pcie-8gpu", "gb200-nvl72"]),
        nodes in 1usize..5,
        fabric in prop::sample::select(vec![Fabric::RailOptimized, Fabric::SingleSwitch, Fabric::LeafSpine]),
        picks in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 1..20),
    ) {
        let t = cluster(preset, nodes, fabric);
        let devs: Vec<NodeIx> = (0..t.nodes().len() as u32)
            .map(NodeIx)
            .filter(|&n| matches!(t.node(n).kind, NodeKind::Gpu | NodeKind::Nic | NodeKind::Cpu | NodeKind::Storage))
            // One NVL72 rack without a fabric: trays meet only through GPUs.
            .filter(|&n| !(preset.starts_with("gb200") && nodes == 1 && t.node(n).kind != NodeKind::Gpu))
            .collect();
        for (x, y) in picks {
            let (a, b) = (*x.get(&devs), *y.get(&devs));
            let p = t.path(a, b).unwrap();
            check_chain(&t, a, b, &p.hops);
            prop_assert_eq!(&t.route(a, b).unwrap(), &p.hops, "deterministic");
            let q = t.path(b, a).unwrap();
            prop_assert_eq!(p.class, q.class);
            if t.node(a).kind == NodeKind::Gpu && t.node(b).kind == NodeKind::Gpu {
                prop_assert_eq!(p.bandwidth, q.bandwidth);
            }
            let cross = t.node(a).host.is_some() && t.node(b).host.is_some() && t.node(a).host != t.node(b).host;
            if cross && !preset.starts_with("gb200") {
                prop_assert_eq!(p.class, PathClass::Net);
            }
        }
    }
}

#[test]
fn the_same_routes_from_many_threads() {
    let t = cluster("dgx-h100", 8, Fabric::RailOptimized);
    let gpus = t.gpus().to_vec();
    let results: Vec<Vec<Vec<Hop>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    gpus.iter()
                        .flat_map(|&a| gpus.iter().map(move |&b| (a, b)))
                        .map(|(a, b)| t.route(a, b).unwrap())
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &results[1..] {
        assert_eq!(r, &results[0]);
    }
}

#[test]
fn host_memory_and_remote_cpu_routes() {
    let t = cluster("dgx-h100", 2, Fabric::RailOptimized);
    let g = t.gpus()[5];
    let cpu = t.local_cpu(g).unwrap();
    assert_eq!(t.node(cpu).id, "n0.cpu1");
    let p = t.path(cpu, g).unwrap();
    assert_eq!(
        p.hops.len(),
        3,
        "CPU -> PCIe switch -> its GPU switch -> GPU"
    );
    assert!((p.bandwidth - 63.015).abs() < 0.01);
    // A CPU on another host goes through the nearest NIC.
    let remote = t.find("n1.cpu0").unwrap();
    let p = t.path(cpu, remote).unwrap();
    assert_eq!(p.class, PathClass::Net);
}

#[test]
fn nodes_without_a_way_out_have_no_route() {
    // GB200 NVL72 alone: trays meet only through their GPUs, which do not
    // forward, so two trays' CPUs have no route without a network fabric.
    let t = select("gb200-nvl72", &ClusterOptions::default()).unwrap();
    let a = t.find("tray0.cpu0").unwrap();
    let b = t.find("tray1.cpu0").unwrap();
    let e = t.path(a, b).unwrap_err();
    assert!(e.to_string().contains("no route"), "{e}");
}

#[test]
fn topology_is_send_sync_and_exposes_channels() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Topology>();
    let t = select("dgx-h100", &ClusterOptions::default()).unwrap();
    let g = t.gpus()[0];
    let (sw, link) = t.nvswitch_of(g).unwrap();
    assert!(t.node(sw).reduction);
    assert_eq!(t.link(link).bandwidth, 450.0);
    let hops = t.route(g, t.gpus()[1]).unwrap();
    for h in hops {
        assert!(h.channel() < t.channel_count());
        assert_eq!(t.channel_bandwidth(h.channel()), 450.0);
    }
    assert!(
        select("dgx1-v100", &ClusterOptions::default())
            .unwrap()
            .nvswitch_of(g)
            .is_none()
    );
}

#[test]
fn rails_of_a_large_cluster_follow_the_gpus() {
    // Rails of a cluster this size (assigning them was quadratic: 5 s at
    // 4,000 DGX H100s in release, over a minute at 10,000; the speed is
    // `examples/route_speed.rs`'s to show, not a test's).
    let t = cluster("dgx-h100", 4000, Fabric::RailOptimized);
    let g = t.gpus();
    // GPU j of every host on NIC j (rail j), as on one host.
    for rank in [0, 7, 8 * 1999 + 3, g.len() - 1] {
        let nic = t.nic_of_rank(rank).unwrap();
        let host = t.node(g[rank]).host;
        assert_eq!(t.node(nic).host, host);
        assert!(
            t.node(nic).id.ends_with(&format!(".nic{}", rank % 8)),
            "{}",
            t.node(nic).id
        );
    }
    let p = t.path(g[0], g[g.len() - 1]).unwrap();
    assert_eq!(p.class, PathClass::Net);
}

#[test]
fn a_nic_on_two_sockets_is_no_bridge_between_them() {
    // A multi-socket NIC (Socket Direct) with a PCIe Gen5 x16 link to each
    // CPU: wider than the SMP link between them, but traffic between the
    // sockets crosses the SMP link, never the NIC from one PCIe link to
    // the other.
    use gpucomm_topo::{LinkKind, Node, PcieGen, TopologyBuilder};
    let mut b = TopologyBuilder::new("socket-direct");
    let host = b.node(Node::new("host0", NodeKind::Host));
    let cpu0 = b.node(Node::new("cpu0", NodeKind::Cpu).in_host(host));
    let cpu1 = b.node(Node::new("cpu1", NodeKind::Cpu).in_host(host));
    let gpu0 = b.node(Node::new("gpu0", NodeKind::Gpu).in_host(host));
    let gpu1 = b.node(Node::new("gpu1", NodeKind::Gpu).in_host(host));
    let nic0 = b.node(Node::new("nic0", NodeKind::Nic).in_host(host));
    let gen5 = LinkKind::Pcie {
        generation: PcieGen::Gen5,
        width: 16,
    };
    b.link(cpu0, cpu1, LinkKind::Smp);
    b.link(gpu0, cpu0, gen5);
    b.link(gpu1, cpu1, gen5);
    b.link(nic0, cpu0, gen5);
    b.link(nic0, cpu1, gen5);
    let t = b.build().unwrap();
    for (x, y) in [(gpu0, gpu1), (gpu1, gpu0), (cpu0, cpu1), (gpu0, cpu1)] {
        let p = t.path(x, y).unwrap();
        check_chain(&t, x, y, &p.hops);
        let via: Vec<&str> = p
            .hops
            .iter()
            .map(|h| t.node(t.link(h.link).head(h.dir)).id.as_str())
            .collect();
        assert!(!via.contains(&"nic0"), "{via:?}");
        assert_eq!(p.bandwidth, LinkKind::Smp.bandwidth(), "{via:?}");
    }
    assert_eq!(t.path(gpu0, gpu1).unwrap().class, PathClass::Sys);
    // The NIC itself is reached from either socket directly.
    assert_eq!(t.path(gpu1, nic0).unwrap().hops.len(), 2);
    assert_eq!(t.path(gpu0, nic0).unwrap().hops.len(), 2);
}

/// A link of vanishing bandwidth (a file's `bandwidth = 1e-20`, valid: a
/// positive number) made its neighbours tie on cost once the hop term was
/// lost in the sum; the tie rule pointed each at the other and `topo --all`
/// built a route that never ended (over 20 GB in 20 s). Every route still
/// chains, and the slow link is crossed only by routes that must.
#[test]
fn a_link_of_vanishing_bandwidth_still_routes() {
    use gpucomm_topo::format::{Format, parse, to_string};
    let text = to_string(&gpucomm_topo::preset("dgx-h100").unwrap(), Format::Toml);
    let link = "a = \"nic0\"\nb = \"pcisw0\"\n";
    assert!(text.contains(link));
    for bw in ["1e-20", "1e-300", "5e-324"] {
        let slow = text.replacen(link, &format!("{link}bandwidth = {bw}\n"), 1);
        let t = parse(&slow, Format::Toml, "slow.toml").unwrap();
        let devs: Vec<NodeIx> = (0..t.nodes().len() as u32)
            .map(NodeIx)
            .filter(|&n| {
                matches!(
                    t.node(n).kind,
                    NodeKind::Gpu | NodeKind::Nic | NodeKind::Cpu | NodeKind::Storage
                )
            })
            .collect();
        for &a in &devs {
            for &b in &devs {
                if a != b {
                    let hops = t.route(a, b).unwrap();
                    check_chain(&t, a, b, &hops);
                }
            }
        }
        let nic0 = t.find("nic0").unwrap();
        let gpu0 = t.find("gpu0").unwrap();
        assert!(t.path(gpu0, nic0).unwrap().bandwidth <= 1e-19, "{bw}");
    }
}
