//! From a gpucomm-topo [`Topology`] (preset, file or discovered machine) to
//! the simulator's parametric [`Machine`].
//!
//! The simulator models identical nodes, so it reads the first host (or
//! NVLink domain) of the topology and counts how many such nodes the
//! topology holds ([`Machine::nodes`]; hosts with other GPU counts are an
//! error, not silently dropped): its GPUs, how they reach each other (NVSwitch, direct NVLink,
//! PCIe switches), CPU sockets and the link between them, NICs and their
//! port speed, NVMe drives, and the hardware attributes of its nodes: GPU
//! architecture and device-memory bandwidth, memory bandwidth per socket
//! ([`gpucomm_topo::Node::gpu_arch`], [`gpucomm_topo::Node::memory_gbps`]:
//! set by topo's presets or the file, else inferred by topo from the
//! node's label).
//!
//! The inter-node network ([`Network`]) of a multi-node topology is read
//! from its network switches: one switch for every NIC (single switch),
//! NIC `k` of every host on switch `k` (rails), or leaves of consecutive
//! hosts whose uplink (the leaf's link to another network switch) gives
//! the oversubscription (the leaf's NIC port bandwidth over the uplink's);
//! in-network reduction (SHARP) when every switch a NIC reaches has
//! [`gpucomm_topo::Node::reduction`] (NICs joined without a switch: rails,
//! non-blocking). A one-node topology gets the
//! default network (rails, non-blocking, no SHARP), which
//! [`Machine::with_cluster_options`] replaces. The NICs' InfiniBand speed
//! is kept ([`Network::ib`]): it decides the switch generation.

use std::collections::BTreeMap;

use gpucomm_topo::{LinkKind, NodeIx, NodeKind, Topology};

use crate::SimError;
use crate::machine::{Machine, NetLayout, Network, NodeModel, NvFabric, PcieSite};
use crate::model::{self, NicReach};

fn other_end(t: &Topology, l: &gpucomm_topo::Link, me: NodeIx) -> NodeIx {
    let _ = t;
    if l.a == me { l.b } else { l.a }
}

/// Where each of a node's GPUs and then NICs sits in its host's PCIe tree.
struct Placement {
    /// Its site in the routes ([`PcieSite`]): its PCIe switch tree
    /// (switches joined to each other by PCIe without a CPU between them,
    /// what NCCL's `PATH_PXB` spans), numbered from 0 in the order of the
    /// devices, `None` on a CPU's own port; its socket: the place, among
    /// its host's CPUs, of the CPU its PCIe (or NVLink-C2C) path reaches,
    /// or, reaching none, spread over the `sockets` with the others of its
    /// kind in order.
    sites: Vec<PcieSite>,
    /// The switch it hangs from directly (two devices of one are
    /// `PATH_PIX` apart), numbered from 0; `None` on a CPU's own port.
    switches: Vec<Option<usize>>,
    /// The CPU its path reaches.
    cpus: Vec<Option<NodeIx>>,
    /// Its host.
    hosts: Vec<Option<NodeIx>>,
}

impl Placement {
    /// Devices `d` and `i` hang from one PCIe switch (`PATH_PIX`).
    fn same_switch(&self, d: usize, i: usize) -> bool {
        self.switches[d].is_some() && self.switches[d] == self.switches[i]
    }

    /// Devices `d` and `i` sit under one PCIe switch tree.
    fn same_tree(&self, d: usize, i: usize) -> bool {
        self.sites[d].shares_tree(&self.sites[i])
    }

    /// Devices `d` and `i` reach one CPU.
    fn same_cpu(&self, d: usize, i: usize) -> bool {
        self.cpus[d].is_some() && self.cpus[d] == self.cpus[i]
    }
}

fn pcie_placement(topo: &Topology, gpus: &[NodeIx], nics: &[NodeIx], sockets: usize) -> Placement {
    let devices: Vec<NodeIx> = gpus.iter().chain(nics).copied().collect();
    let is_switch = |n: NodeIx| topo.node(n).kind == NodeKind::PcieSwitch;
    let host_links = |n: NodeIx| {
        topo.links_of(n)
            .iter()
            .map(move |&(l, _)| topo.link(l))
            .filter(|l| matches!(l.kind, LinkKind::Pcie { .. } | LinkKind::NvLinkC2c))
            .map(move |l| other_end(topo, l, n))
    };
    // The switches reachable from `s` through switches only.
    let tree_of = |s: NodeIx| {
        let mut seen = vec![s];
        let mut next = vec![s];
        while let Some(n) = next.pop() {
            for o in host_links(n).filter(|&o| is_switch(o)) {
                if !seen.contains(&o) {
                    seen.push(o);
                    next.push(o);
                }
            }
        }
        seen
    };
    // Dense numbers for switches, in order of first sight.
    let number = |names: &mut Vec<NodeIx>, first: NodeIx| {
        names.iter().position(|&t| t == first).unwrap_or_else(|| {
            names.push(first);
            names.len() - 1
        })
    };
    let cpu_kind = |n: NodeIx| topo.node(n).kind == NodeKind::Cpu;
    let (mut tree_names, mut switch_names) = (Vec::new(), Vec::new());
    let mut trees = Vec::with_capacity(devices.len());
    let mut switches = Vec::with_capacity(devices.len());
    let mut cpus = Vec::with_capacity(devices.len());
    for &d in &devices {
        let switch = host_links(d).find(|&o| is_switch(o));
        let tree = switch.map(tree_of);
        switches.push(switch.map(|s| number(&mut switch_names, s)));
        // A tree's name: its lowest switch.
        let first = tree.as_ref().and_then(|t| t.iter().copied().min());
        trees.push(first.map(|f| number(&mut tree_names, f)));
        cpus.push(match &tree {
            Some(t) => t.iter().find_map(|&s| host_links(s).find(|&o| cpu_kind(o))),
            None => host_links(d).find(|&o| cpu_kind(o)),
        });
    }
    let last = sockets.max(1) - 1;
    let sites = cpus
        .iter()
        .zip(&trees)
        .enumerate()
        .map(|(i, (cpu, &tree))| {
            let socket = match cpu {
                Some(c) => {
                    let host = topo.node(*c).host;
                    topo.nodes_of_kind(NodeKind::Cpu)
                        .filter(|&o| topo.node(o).host == host)
                        .position(|o| o == *c)
                        .unwrap_or(0)
                        .min(last)
                }
                None => {
                    let (i, of) = match i.checked_sub(gpus.len()) {
                        Some(k) => (k, nics.len()),
                        None => (i, gpus.len()),
                    };
                    (i * (last + 1) / of).min(last)
                }
            };
            PcieSite { tree, socket }
        })
        .collect();
    Placement {
        sites,
        switches,
        cpus,
        hosts: devices.iter().map(|&d| topo.node(d).host).collect(),
    }
}

/// For each NIC of `place` (after its `n` GPUs), the GPU next to it
/// ([`NodeModel::nic_gpus`]), the NICs of a group spread evenly over its
/// GPUs in order (the `j`-th of `n` NICs on the `j * m / n`-th of `m`
/// GPUs): the GPUs under its own PCIe switch, else under its switch tree,
/// else those on its CPU's own ports (a Grace's on NVLink-C2C), else any
/// on its CPU, else its host's, else all (NIC `k` of `nics` on GPU `k *
/// gpus / nics`).
fn nic_gpus(place: &Placement, n: usize) -> Vec<usize> {
    let devices = place.sites.len();
    // Devices that share with device `i` what `same` compares.
    let group = |i: usize, same: &dyn Fn(usize, usize) -> bool| -> Vec<usize> {
        (0..devices).filter(|&d| same(d, i)).collect()
    };
    let switch = |d: usize, i: usize| place.same_switch(d, i);
    let tree = |d: usize, i: usize| place.same_tree(d, i);
    let cpu = |d: usize, i: usize| place.same_cpu(d, i);
    let rooted = |d: usize, i: usize| cpu(d, i) && place.sites[d].tree.is_none();
    let in_host = |d: usize, i: usize| place.hosts[d] == place.hosts[i];
    let everywhere = |_: usize, _: usize| true;
    let ways: [&dyn Fn(usize, usize) -> bool; 6] =
        [&switch, &tree, &rooted, &cpu, &in_host, &everywhere];
    (n..devices)
        .map(|i| {
            ways.iter()
                .find_map(|same| {
                    let members = group(i, same);
                    let (g, k): (Vec<usize>, Vec<usize>) = members.iter().partition(|&&d| d < n);
                    let j = k.iter().position(|&d| d == i)?;
                    (!g.is_empty()).then(|| g[j * g.len() / k.len()])
                })
                .unwrap_or(0)
        })
        .collect()
}

/// For each GPU of `place`, the NICs nearest it by NCCL's path types
/// ([`NodeModel::gpu_nics`], `ncclTopoGetLocalNet`), and whether they are
/// `PATH_PXB` or nearer ([`NodeModel::gpu_nics_near`]): under its own PCIe
/// switch (`PATH_PIX`), or its Grace's beside it where it is the NIC's GPU
/// (`PATH_P2C`, on NVLink-C2C only); else under its switch tree
/// (`PATH_PXB`); else on its CPU (`PATH_PHB`, `PATH_NODE`); else on
/// another CPU of its host (`PATH_SYS`); none in another host. (NICs a
/// GPU reaches through an NVLink peer, `PATH_PXN`, depend on the GPUs in
/// use: the fabric finds them.)
fn gpu_nics(
    place: &Placement,
    gpus: usize,
    nic_gpus: &[usize],
    c2c: bool,
) -> (Vec<Vec<usize>>, Vec<bool>) {
    let class = |g: usize, k: usize| {
        let i = gpus + k;
        let same_cpu = place.same_cpu(g, i);
        let beside = c2c
            && nic_gpus[k] == g
            && same_cpu
            && place.sites[g].tree.is_none()
            && place.sites[i].tree.is_none();
        if place.same_switch(g, i) || beside {
            Some(0)
        } else if place.same_tree(g, i) {
            Some(1)
        } else if same_cpu {
            Some(2)
        } else if place.hosts[g] == place.hosts[i] {
            Some(3)
        } else {
            None
        }
    };
    (0..gpus)
        .map(|g| {
            let best = (0..nic_gpus.len()).filter_map(|k| class(g, k)).min();
            let nics = (0..nic_gpus.len())
                .filter(|&k| best.is_some() && class(g, k) == best)
                .collect();
            (nics, best.is_some_and(|c| c <= 1))
        })
        .unzip()
}

impl Machine {
    /// Reads the first host of `topo` into a one-node machine.
    pub fn from_topology(topo: &Topology) -> Result<Machine, SimError> {
        let host = topo.hosts().first().copied();
        let mut gpus: Vec<NodeIx> = topo
            .gpus()
            .iter()
            .copied()
            .filter(|&g| host.is_none() || topo.node(g).host == host)
            .collect();
        // An NVLink domain wider than one host (GB200 NVL72): the modeled
        // "node" is the whole domain, all GPUs on the first GPU's NVSwitch.
        let mut hosts: Vec<Option<NodeIx>> = vec![host];
        if let Some(&g0) = gpus.first() {
            let sw = topo
                .links_of(g0)
                .iter()
                .map(|&(l, _)| other_end(topo, topo.link(l), g0))
                .find(|&o| topo.node(o).kind == NodeKind::NvSwitch);
            if let Some(sw) = sw {
                let domain: Vec<NodeIx> = topo
                    .gpus()
                    .iter()
                    .copied()
                    .filter(|&g| {
                        topo.links_of(g)
                            .iter()
                            .any(|&(l, _)| other_end(topo, topo.link(l), g) == sw)
                    })
                    .collect();
                if domain.len() > gpus.len() {
                    hosts = domain.iter().map(|&g| topo.node(g).host).collect();
                    hosts.sort();
                    hosts.dedup();
                    gpus = domain;
                }
            }
        }
        if gpus.is_empty() {
            return Err(SimError::Model(format!(
                "topology {} has no GPU",
                topo.name()
            )));
        }
        refuse_unmodeled(topo, &gpus)?;
        let index: BTreeMap<NodeIx, usize> =
            gpus.iter().enumerate().map(|(i, &g)| (g, i)).collect();
        let g0 = topo.node(gpus[0]);
        let label = g0.label.clone();
        let unknown = |what: &str| {
            SimError::Model(format!(
                "unknown GPU {label:?} in topology {} (no {what}; set the GPU node's \
                 `arch` and `memory_bandwidth`)",
                topo.name()
            ))
        };
        let arch = g0.gpu_arch().ok_or_else(|| unknown("architecture"))?;
        let hbm = g0
            .memory_gbps()
            .ok_or_else(|| unknown("memory bandwidth"))?;
        // The NVSwitch's generation and reduction, and each GPU's NVLinks to
        // it (entries summed).
        let mut switch: Option<(u8, bool)> = None;
        let mut to_switch: BTreeMap<NodeIx, u32> = BTreeMap::new();
        let mut pairs = Vec::new();
        let mut nvgen = 0u8;
        let mut pcie: Option<(u8, u32)> = None;
        let mut c2c: Option<f64> = None;
        for &g in &gpus {
            for &(lix, _) in topo.links_of(g) {
                let l = topo.link(lix);
                let o = other_end(topo, l, g);
                match l.kind {
                    LinkKind::NvLink {
                        generation: lg,
                        count,
                    } => {
                        nvgen = lg.number();
                        match topo.node(o).kind {
                            NodeKind::NvSwitch => {
                                *to_switch.entry(g).or_default() += u32::from(count);
                                switch = Some((lg.number(), topo.node(o).reduction));
                            }
                            NodeKind::Gpu => {
                                if let (Some(&a), Some(&b)) = (index.get(&g), index.get(&o)) {
                                    if a < b {
                                        pairs.push((a, b, u32::from(count)));
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                    LinkKind::NvLinkC2c if topo.node(o).kind == NodeKind::Cpu => {
                        c2c.get_or_insert(l.bandwidth);
                    }
                    LinkKind::Pcie {
                        generation: pg,
                        width,
                    } => {
                        pcie.get_or_insert((pg.number(), u32::from(width)));
                    }
                    _ => {}
                }
            }
        }
        // Two entries for one pair are one bundle (as topo's routes count
        // them).
        pairs.sort_unstable_by_key(|&(a, b, _)| (a, b));
        pairs.dedup_by(|next, kept| {
            let same = (next.0, next.1) == (kept.0, kept.1);
            if same {
                kept.2 += next.2;
            }
            same
        });
        let mut counts: Vec<u32> = to_switch.values().copied().collect();
        counts.dedup();
        if counts.len() > 1 || (!to_switch.is_empty() && to_switch.len() != gpus.len()) {
            return Err(SimError::Model(format!(
                "topology {}: its GPUs reach the NVSwitch with different NVLink counts \
                 ({} of {} GPUs on it, counts {counts:?}); the simulator models GPUs alike",
                topo.name(),
                to_switch.len(),
                gpus.len()
            )));
        }
        let nvlink = match switch.zip(counts.first()) {
            Some(((generation, nvls), &links)) => NvFabric::Switch {
                generation,
                links,
                nvls,
            },
            None if !pairs.is_empty() => NvFabric::Mesh {
                generation: nvgen,
                pairs,
            },
            None => NvFabric::None,
        };
        // GPUs on NVLink-C2C: the PCIe generation is the NICs' (GB200:
        // ConnectX-7 on Grace's Gen5 lanes).
        let nic_pcie = || {
            topo.nodes_of_kind(NodeKind::Nic).find_map(|n| {
                topo.links_of(n)
                    .iter()
                    .find_map(|&(l, _)| match topo.link(l).kind {
                        LinkKind::Pcie { generation, width } => {
                            Some((generation.number(), u32::from(width)))
                        }
                        _ => None,
                    })
            })
        };
        let (pcie_gen, pcie_width) = pcie.or_else(nic_pcie).unwrap_or((4, 16));
        let in_host = |k: NodeKind| -> Vec<NodeIx> {
            topo.nodes_of_kind(k)
                .filter(|&n| host.is_none() || topo.node(n).host == host)
                .collect()
        };
        let in_domain = |k: NodeKind| -> Vec<NodeIx> {
            topo.nodes_of_kind(k)
                .filter(|&n| host.is_none() || hosts.contains(&topo.node(n).host))
                .collect()
        };
        let cpus = in_host(NodeKind::Cpu);
        let sockets = cpus.len().max(1);
        let mut inter_socket = 0.0f64;
        // AMD: sockets joined by Infinity Fabric, or a CPU labelled so.
        let mut amd_cpu = cpus.iter().any(|&c| {
            let label = topo.node(c).label.to_ascii_lowercase();
            label.contains("epyc") || label.contains("amd")
        });
        for &c in &cpus {
            for &(lix, _) in topo.links_of(c) {
                let l = topo.link(lix);
                if topo.node(other_end(topo, l, c)).kind == NodeKind::Cpu {
                    inter_socket = inter_socket.max(l.bandwidth);
                    amd_cpu |= matches!(l.kind, LinkKind::InfinityFabric { .. });
                }
            }
        }
        if sockets > 1 && inter_socket <= 0.0 {
            return Err(SimError::Model(format!(
                "topology {}: its {sockets} CPU sockets have no link between them (QPI, UPI, \
                 Infinity Fabric), where the simulator needs one for copies across sockets",
                topo.name()
            )));
        }
        let host_mem = cpus
            .first()
            .and_then(|&c| topo.node(c).memory_gbps())
            .unwrap_or(gpucomm_topo::hardware::DEFAULT_CPU_MEMORY_GBPS);
        let core_read = cpus.first().and_then(|&c| {
            gpucomm_topo::hardware::cpu_core_read_gbps_from_label(&topo.node(c).label)
        });
        let nics = in_domain(NodeKind::Nic);
        // A NIC's rate: its port's, capped by its cable's when the file
        // gives the cable a figure (the slower of the two carries).
        let nic_rate = |n: NodeIx| {
            let cable = topo
                .links_of(n)
                .iter()
                .map(|&(l, _)| topo.link(l))
                .filter(|l| l.kind.is_network())
                .map(|l| l.bandwidth)
                .fold(0.0, f64::max);
            match topo.node(n).port.map(|p| p.bandwidth()) {
                Some(port) if cable > 0.0 => port.min(cable),
                Some(port) => port,
                None => cable,
            }
        };
        let nic_gbps = nics.first().map(|&n| nic_rate(n)).unwrap_or(0.0);
        if let Some(&odd) = nics.iter().find(|&&n| nic_rate(n) != nic_gbps) {
            return Err(SimError::Model(format!(
                "topology {}: NIC {} runs at {} GB/s and NIC {} at {} GB/s, where the \
                 simulator models a node's NICs alike",
                topo.name(),
                topo.node(odd).id,
                gpucomm_topo::readable_number(nic_rate(odd)),
                topo.node(nics[0]).id,
                gpucomm_topo::readable_number(nic_gbps)
            )));
        }
        let ib = nics.first().and_then(|&n| match topo.node(n).port {
            Some(LinkKind::Infiniband { speed, .. }) => Some(speed),
            _ => None,
        });
        let storage: f64 = in_domain(NodeKind::Storage)
            .iter()
            .map(|&s| {
                topo.links_of(s)
                    .iter()
                    .map(|&(l, _)| topo.link(l).bandwidth)
                    .fold(0.0, f64::max)
            })
            .sum();
        let nic_reach = nic_reach(topo, &gpus, &nics);
        let nics = if nic_gbps > 0.0 { nics } else { Vec::new() };
        let place = pcie_placement(topo, &gpus, &nics, sockets);
        if let Some(k) = (0..nics.len()).find(|&k| place.cpus[gpus.len() + k].is_none()) {
            return Err(SimError::Model(format!(
                "topology {}: NIC {} reaches no CPU over PCIe (directly or through PCIe \
                 switches), where the simulator routes a NIC's traffic through its switch or \
                 its CPU",
                topo.name(),
                topo.node(nics[k]).id
            )));
        }
        let nic_gpus = nic_gpus(&place, gpus.len());
        let (gpu_nics, gpu_nics_near) = gpu_nics(&place, gpus.len(), &nic_gpus, c2c.is_some());
        let (g, k) = (gpus.len(), nics.len());
        let node = NodeModel {
            arch,
            gpu_name: label,
            gpus: gpus.len(),
            hbm_gbps: hbm,
            nvlink,
            pcie_gen,
            pcie_width,
            c2c_gbps: c2c,
            sockets,
            gpu_sites: place.sites[..g].to_vec(),
            // 0 with one socket (no link is built then).
            inter_socket_gbps: inter_socket,
            host_mem_gbps: host_mem,
            cpu_memcpy_gbps: model::memcpy_gbps(host_mem, core_read),
            nics: k,
            nic_gpus,
            gpu_nics,
            gpu_nics_near,
            nic_sites: place.sites[g..].to_vec(),
            nic_gbps,
            storage_gbps: storage,
            amd_cpu,
            nic_reach,
            hosts: hosts.len().max(1),
        };
        // How many nodes like the first one the topology holds.
        let hosts_per_node = hosts.len().max(1);
        let all_hosts = topo.hosts().len().max(1);
        let nodes = all_hosts / hosts_per_node;
        if all_hosts % hosts_per_node != 0 || topo.gpus().len() != gpus.len() * nodes {
            return Err(SimError::Model(format!(
                "topology {} is not {} identical nodes of {} GPUs ({} hosts, {} GPUs): \
                 the simulator models identical nodes",
                topo.name(),
                nodes.max(1),
                gpus.len(),
                all_hosts,
                topo.gpus().len()
            )));
        }
        let mut network = if nodes > 1 {
            read_network(topo, &hosts, nodes)?
        } else {
            Network::default()
        };
        network.ib = ib;
        Ok(Machine {
            name: topo.name().to_string(),
            node,
            nodes,
            topology_nodes: nodes,
            gpus_used: None,
            network,
            nccl_p2p_level: None,
        })
    }
}

/// Refuses what a topology says that the simulator would otherwise ignore:
/// a figure set on a link whose rate the model takes from its kind (NVLink,
/// PCIe) or any latency (each hop's comes from its kind: docs/sim.md),
/// a GPU of the modeled node with no route to another or to a CPU, nodes
/// with no route between them, and hosts that differ (the simulator repeats
/// the first). `gpus` are the modeled node's. (Sockets without a link, an
/// uneven NVSwitch or NICs at different rates are refused where they are
/// read, in [`Machine::from_topology`].)
fn refuse_unmodeled(topo: &Topology, gpus: &[NodeIx]) -> Result<(), SimError> {
    let err = |why: String| SimError::Model(format!("topology {}: {why}", topo.name()));
    let ignored = "the simulator would ignore that figure, so it refuses the file (`gpucomm \
                   topo` reads it as it is)";
    let id = |n: NodeIx| topo.node(n).id.as_str();
    for l in topo.links() {
        let fixed_rate = matches!(l.kind, LinkKind::NvLink { .. } | LinkKind::Pcie { .. });
        if l.bandwidth_overridden && fixed_rate {
            return Err(err(format!(
                "link {}-{} ({}) sets its bandwidth to {} GB/s, where the simulator \
                 takes an NVLink's or PCIe link's rate from its generation, count and width: \
                 {ignored}",
                id(l.a),
                id(l.b),
                l.kind,
                gpucomm_topo::readable_number(l.bandwidth)
            )));
        }
        if l.latency_overridden {
            return Err(err(format!(
                "link {}-{} ({}) sets its latency to {} us, where the simulator takes \
                 each hop's latency from its kind: {ignored}",
                id(l.a),
                id(l.b),
                l.kind,
                gpucomm_topo::readable_number(l.latency_us)
            )));
        }
    }
    let needs = "the simulator needs every GPU of a node to reach the others and a CPU, and \
                 the nodes to reach each other";
    for (i, &g) in gpus.iter().enumerate() {
        if let Some(&h) = gpus[i + 1..].iter().find(|&&h| topo.path(g, h).is_err()) {
            return Err(err(format!(
                "{} has no route to {} ({needs})",
                id(g),
                id(h)
            )));
        }
        let host = topo.node(g).host;
        let cpus: Vec<NodeIx> = topo
            .nodes_of_kind(NodeKind::Cpu)
            .filter(|&c| topo.node(c).host == host)
            .collect();
        if !cpus.is_empty() && !cpus.iter().any(|&c| topo.path(g, c).is_ok()) {
            return Err(err(format!(
                "{} has no route to a CPU of its host ({needs})",
                id(g)
            )));
        }
    }
    // Another node (one off the modeled node's hosts) reachable through
    // the network.
    if let Some(&far) = topo
        .gpus()
        .iter()
        .rev()
        .find(|&&g| topo.node(g).host != topo.node(gpus[0]).host && !gpus.contains(&g))
    {
        if topo.path(gpus[0], far).is_err() {
            return Err(err(format!(
                "{} has no route to {} ({needs})",
                id(gpus[0]),
                id(far)
            )));
        }
    }
    // Hosts alike: the same nodes (kind, label, figures) and the same
    // links (ends' kinds, kind, figures), counted.
    let mut sigs: BTreeMap<NodeIx, Vec<String>> = BTreeMap::new();
    for n in topo.nodes().iter().filter(|n| n.host.is_some()) {
        let line = format!(
            "{} {} {:?} {:?} {:?} {}",
            n.kind.name(),
            n.label,
            n.gpu_arch(),
            n.memory_gbps(),
            n.port,
            n.reduction
        );
        sigs.entry(n.host.expect("filtered"))
            .or_default()
            .push(line);
    }
    for l in topo.links() {
        let (ha, hb) = (topo.node(l.a).host, topo.node(l.b).host);
        let mut ends = [topo.node(l.a).kind.name(), topo.node(l.b).kind.name()];
        ends.sort_unstable();
        let line = format!("{ends:?} {} {} {}", l.kind, l.bandwidth, l.latency_us);
        for h in [ha, hb.filter(|&b| Some(b) != ha)].into_iter().flatten() {
            sigs.entry(h).or_default().push(line.clone());
        }
    }
    for sig in sigs.values_mut() {
        sig.sort_unstable();
    }
    if let Some((&first, rest)) = topo.hosts().split_first() {
        let want = sigs.get(&first);
        if let Some(&other) = rest.iter().find(|&&h| sigs.get(&h) != want) {
            return Err(err(format!(
                "host {} differs from host {} (its nodes or links), where the simulator \
                 models every node like the first",
                id(other),
                id(first)
            )));
        }
    }
    Ok(())
}

/// How `gpus` reach `nics` (their node's), as NCCL's `typeInter` would
/// class it: [`NicReach::Near`] when every GPU has a NIC it reaches with
/// GPUDirect RDMA, [`NicReach::Pxn`] when each GPU without one has an
/// NVLink-only path to a GPU with one, [`NicReach::Far`] otherwise. No NIC:
/// `Near` (nothing crosses nodes through them).
fn nic_reach(topo: &Topology, gpus: &[NodeIx], nics: &[NodeIx]) -> NicReach {
    if nics.is_empty() {
        return NicReach::Near;
    }
    let near: Vec<bool> = gpus
        .iter()
        .map(|&g| nics.iter().any(|&n| topo.path(g, n).is_ok_and(|p| p.rdma)))
        .collect();
    if near.iter().all(|&x| x) {
        return NicReach::Near;
    }
    let through_peer = |g: NodeIx| {
        gpus.iter().zip(&near).any(|(&h, &n)| {
            n && topo
                .path(g, h)
                .is_ok_and(|p| matches!(p.class, gpucomm_topo::PathClass::NvLink(_)))
        })
    };
    if gpus.iter().zip(&near).all(|(&g, &n)| n || through_peer(g)) {
        NicReach::Pxn
    } else {
        NicReach::Far
    }
}

/// The network switch a NIC's port reaches, if any.
fn switch_of_nic(t: &Topology, nic: NodeIx) -> Option<(NodeIx, f64)> {
    t.links_of(nic).iter().find_map(|&(l, _)| {
        let link = t.link(l);
        let o = other_end(t, link, nic);
        (t.node(o).kind == NodeKind::NetSwitch).then_some((o, link.bandwidth))
    })
}

/// Reads the layout, oversubscription and in-network reduction of a
/// multi-node topology's network (see the module documentation).
fn read_network(
    topo: &Topology,
    first: &[Option<NodeIx>],
    nodes: usize,
) -> Result<Network, SimError> {
    let hosts_per_node = first.len().max(1);
    let all_hosts = topo.hosts();
    // NICs of each modeled node, in topology order.
    let mut node_nics: Vec<Vec<NodeIx>> = vec![Vec::new(); nodes];
    let host_pos: BTreeMap<NodeIx, usize> = all_hosts
        .iter()
        .enumerate()
        .map(|(i, &h)| (h, i / hosts_per_node))
        .collect();
    for n in topo.nodes_of_kind(NodeKind::Nic) {
        if let Some(&i) = topo.node(n).host.and_then(|h| host_pos.get(&h)) {
            node_nics[i].push(n);
        }
    }
    let unreadable = |why: String| {
        SimError::Model(format!(
            "topology {}: the simulator cannot read its network ({why})",
            topo.name()
        ))
    };
    let mut sw: Vec<Vec<(NodeIx, f64)>> = Vec::with_capacity(nodes);
    for nics in &node_nics {
        let v: Option<Vec<_>> = nics.iter().map(|&n| switch_of_nic(topo, n)).collect();
        match v {
            Some(v) if !v.is_empty() => sw.push(v),
            // NICs cabled to each other (or a node without NICs): no
            // switch to read; the network is taken as non-blocking rails.
            _ => {
                return Ok(Network::default());
            }
        }
    }
    let mut switches: Vec<NodeIx> = sw.iter().flatten().map(|s| s.0).collect();
    switches.sort();
    switches.dedup();
    let sharp = switches.iter().all(|&s| topo.node(s).reduction);
    let same = |a: &[(NodeIx, f64)], b: &[(NodeIx, f64)]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0 == y.0)
    };
    let layout_and_oversub = if switches.len() == 1 {
        (NetLayout::SingleSwitch, 1.0)
    } else if sw.iter().all(|s| same(s, &sw[0])) {
        // NIC k of every node on the same switch, a switch per NIC: rails.
        (NetLayout::Rails, 1.0)
    } else {
        // Leaves: all NICs of a node on one switch, consecutive nodes per leaf.
        if sw.iter().any(|s| s.iter().any(|x| x.0 != s[0].0)) {
            return Err(unreadable(
                "a node's NICs reach different switches, not on rails".into(),
            ));
        }
        let leaf0 = sw[0][0].0;
        let npl = sw.iter().take_while(|s| s[0].0 == leaf0).count();
        for (i, s) in sw.iter().enumerate() {
            if s[0].0 != sw[(i / npl) * npl][0].0
                || (i % npl == 0 && i > 0 && s[0].0 == sw[i - 1][0].0)
            {
                return Err(unreadable(format!(
                    "node {i} is not on the leaf of nodes {}..{}",
                    (i / npl) * npl,
                    (i / npl + 1) * npl
                )));
            }
        }
        // The leaf's downlinks over its uplink to the spine.
        let down: f64 = sw[..npl].iter().flatten().map(|x| x.1).sum();
        let up: f64 = topo
            .links_of(leaf0)
            .iter()
            .map(|&(l, _)| topo.link(l))
            .filter(|l| topo.node(other_end(topo, l, leaf0)).kind == NodeKind::NetSwitch)
            .map(|l| l.bandwidth)
            .sum();
        if up <= 0.0 {
            return Err(unreadable("leaf 0 has no uplink to a spine".into()));
        }
        (
            NetLayout::LeafSpine {
                nodes_per_leaf: npl,
            },
            (down / up).max(1.0),
        )
    };
    Ok(Network {
        layout: layout_and_oversub.0,
        oversubscription: layout_and_oversub.1,
        sharp,
        ib: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Arch;

    #[test]
    fn a_multi_node_topology_keeps_all_its_nodes() {
        let opts = gpucomm_topo::ClusterOptions {
            nodes: 3,
            ..Default::default()
        };
        let t = gpucomm_topo::select("dgx-h100", &opts).unwrap();
        let m = Machine::from_topology(&t).unwrap();
        assert_eq!((m.nodes, m.node.gpus), (3, 8));
        let one = Machine::from_topology(&gpucomm_topo::preset("dgx-h100").unwrap()).unwrap();
        assert_eq!(one.nodes, 1);
        let nvl = Machine::from_topology(&gpucomm_topo::preset("gb200-nvl72").unwrap()).unwrap();
        assert_eq!((nvl.nodes, nvl.node.gpus), (1, 72));
    }

    #[test]
    fn superchip_gpus_reach_the_host_over_c2c() {
        let nvl = Machine::from_topology(&gpucomm_topo::preset("gb200-nvl72").unwrap()).unwrap();
        // Each GB200 GPU on half of its Grace's C2C, 225 GB/s per direction
        // (gpucomm-topo's gb200-nvl72); the NICs' PCIe (Gen5 on Grace) sets
        // the generation.
        assert_eq!((nvl.node.c2c_gbps, nvl.node.pcie_gen), (Some(225.0), 5));
        let gh = Machine::preset("gh200").unwrap();
        assert_eq!(gh.node.c2c_gbps, Some(450.0));
        let h = Machine::from_topology(&gpucomm_topo::preset("dgx-h100").unwrap()).unwrap();
        assert_eq!(h.node.c2c_gbps, None);
        // A pinned host copy runs at the C2C copy rate (less the copy's
        // start), not at a PCIe link's 54 GB/s: on a GB200 the link binds
        // (225 x 256/288 = 200 GB/s both ways), on a GH200 the copy
        // engines (published runs: 338 to the GPU, 295 from it, where the
        // link would carry 400).
        use crate::transfer::Endpoint::{Gpu, Host};
        for (m, from, to, rate) in [
            (&nvl, Host, Gpu(0), 200.0),
            (&nvl, Gpu(0), Host, 200.0),
            (&gh, Host, Gpu(0), model::C2C_CE_TO_GPU_GBPS),
            (&gh, Gpu(0), Host, model::C2C_CE_FROM_GPU_GBPS),
        ] {
            let r = crate::transfer::copy(m, from, to, false, false, 1 << 30).unwrap();
            assert!(
                r.bandwidth_gbps < rate && r.bandwidth_gbps > 0.99 * rate,
                "{} {from:?} -> {to:?}: {} GB/s",
                m.name,
                r.bandwidth_gbps
            );
            assert!(r.path.contains("NVLink-C2C"), "{}", r.path);
        }
        // Across two racks NCCL runs at most MAXCHANNELS (64) of the 72
        // NICs' channels: a ring all_gather runs.
        let f = nvl.fabric(crate::Engine::Nccl, 2).unwrap();
        let g = crate::collective::simulate(
            &f,
            gpucomm_algo::Collective::AllGather,
            1 << 20,
            &crate::collective::CollOptions::default(),
        )
        .unwrap();
        assert!(g.busbw_gbps > 0.0);
    }

    /// A topology file edited as a user would: `edit` changes its entries.
    fn edited(
        preset: &str,
        nodes: usize,
        edit: impl FnOnce(&mut gpucomm_topo::format::TopologyFile),
    ) -> Result<Machine, String> {
        let opts = gpucomm_topo::ClusterOptions {
            nodes,
            ..Default::default()
        };
        let t = gpucomm_topo::select(preset, &opts).unwrap();
        let mut f = gpucomm_topo::format::TopologyFile::from_topology(&t);
        edit(&mut f);
        let t = f.to_topology().map_err(|e| e.to_string())?;
        Machine::from_topology(&t).map_err(|e| e.to_string())
    }

    fn link_between<'f>(
        f: &'f mut gpucomm_topo::format::TopologyFile,
        a: &str,
        b: &str,
    ) -> &'f mut gpucomm_topo::format::LinkEntry {
        f.link
            .iter_mut()
            .find(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a))
            .unwrap_or_else(|| panic!("no link {a}-{b}"))
    }

    /// What the simulator would ignore in a file is refused, naming it: a
    /// figure on an NVLink or PCIe link, any latency, a GPU cut off, a node
    /// unlike the first, nodes with no network between them.
    #[test]
    fn what_the_model_cannot_read_is_refused() {
        assert!(edited("dgx1-v100", 1, |_| ()).is_ok());
        let e = edited("dgx1-v100", 1, |f| {
            link_between(f, "gpu0", "gpu1").bandwidth = Some(5.0)
        })
        .unwrap_err();
        assert!(e.contains("gpu0-gpu1") && e.contains("5 GB/s"), "{e}");
        let e = edited("dgx1-v100", 1, |f| {
            f.link
                .iter_mut()
                .find(|l| l.kind == "pcie")
                .unwrap()
                .latency_us = Some(9.0)
        })
        .unwrap_err();
        assert!(e.contains("latency to 9 us"), "{e}");
        // Figures far from 1 in short form (1e-300 took 300 digits).
        let e = edited("dgx1-v100", 1, |f| {
            link_between(f, "gpu0", "gpu1").bandwidth = Some(1e-300)
        })
        .unwrap_err();
        assert!(e.contains("bandwidth to 1e-300 GB/s"), "{e}");
        let e = edited("dgx1-v100", 1, |f| {
            f.link
                .iter_mut()
                .find(|l| l.kind == "pcie")
                .unwrap()
                .latency_us = Some(1e-300)
        })
        .unwrap_err();
        assert!(e.contains("latency to 1e-300 us"), "{e}");
        let e = edited("dgx1-v100", 1, |f| {
            f.link.retain(|l| l.a != "gpu7" && l.b != "gpu7")
        })
        .unwrap_err();
        assert!(e.contains("no route to gpu7"), "{e}");
        // A second socket with no link to the first (its copies across
        // sockets ran at a made-up 20.8 GB/s).
        let e = edited("rtx4090", 1, |f| {
            let mut cpu1 = f.node.iter().find(|n| n.id == "cpu0").unwrap().clone();
            cpu1.id = "cpu1".into();
            cpu1.socket = Some(1);
            cpu1.numa = Some(1);
            f.node.push(cpu1);
        })
        .unwrap_err();
        assert!(e.contains("2 CPU sockets have no link between them"), "{e}");
        // Node 1 without NVLink, node 1's GPUs relabelled, no network.
        let e = edited("dgx-h100", 2, |f| {
            f.link
                .retain(|l| !(l.a.starts_with("n1.") && l.kind == "nvlink"))
        })
        .unwrap_err();
        assert!(
            e.contains("host n1.host0 differs from host n0.host0"),
            "{e}"
        );
        let e = edited("dgx-h100", 2, |f| {
            for n in f.node.iter_mut().filter(|n| n.id.starts_with("n1.gpu")) {
                n.label = "Tesla V100-SXM2-32GB".into();
            }
        })
        .unwrap_err();
        assert!(e.contains("differs"), "{e}");
        let e = edited("dgx-h100", 2, |f| {
            f.link
                .retain(|l| !matches!(l.kind.as_str(), "infiniband" | "ib" | "ethernet" | "roce"))
        })
        .unwrap_err();
        assert!(e.contains("no route to n1."), "{e}");
    }

    /// A figure the model does read is used: a NIC's cable slower than its
    /// port carries at the cable's rate; two entries for one GPU pair are
    /// one bundle of both counts.
    #[test]
    fn figures_the_model_reads_are_used() {
        let m = edited("dgx-h100", 2, |f| {
            for l in f.link.iter_mut().filter(|l| l.kind == "infiniband") {
                l.bandwidth = Some(10.0);
            }
        })
        .unwrap();
        assert_eq!(m.node.nic_gbps, 10.0);
        let m = edited("dgx1-v100", 1, |f| {
            let l = link_between(f, "gpu0", "gpu1").clone();
            f.link.push(l);
        })
        .unwrap();
        let NvFabric::Mesh { pairs, .. } = &m.node.nvlink else {
            panic!("{:?}", m.node.nvlink)
        };
        let p01: Vec<_> = pairs.iter().filter(|p| (p.0, p.1) == (0, 1)).collect();
        assert_eq!(p01.len(), 1, "{pairs:?}");
        let one = Machine::from_topology(&gpucomm_topo::preset("dgx1-v100").unwrap()).unwrap();
        let NvFabric::Mesh { pairs: p1, .. } = &one.node.nvlink else {
            panic!()
        };
        let before = p1.iter().find(|p| (p.0, p.1) == (0, 1)).unwrap().2;
        assert_eq!(p01[0].2, 2 * before);
    }

    #[test]
    fn topo_presets_read_like_the_hardware() {
        let m = Machine::from_topology(&gpucomm_topo::preset("dgx-h100").unwrap()).unwrap();
        assert_eq!(m.node.gpus, 8);
        assert_eq!(m.node.arch, Arch::Hopper);
        assert_eq!(
            m.node.nvlink,
            NvFabric::Switch {
                generation: 4,
                links: 18,
                nvls: true
            }
        );
        assert_eq!((m.node.pcie_gen, m.node.nics), (5, 8));
        assert!((m.node.nic_gbps - 50.0).abs() < 1e-9);
        let v = Machine::from_topology(&gpucomm_topo::preset("dgx1-v100").unwrap()).unwrap();
        let NvFabric::Mesh { pairs, .. } = &v.node.nvlink else {
            panic!("dgx1 is a mesh: {:?}", v.node.nvlink)
        };
        let links: u32 = pairs.iter().map(|p| p.2).sum();
        assert_eq!(links, 8 * 6 / 2, "6 NVLinks per V100");
        let a = Machine::from_topology(&gpucomm_topo::preset("dgx-a100").unwrap()).unwrap();
        assert_eq!(
            a.node.nvlink,
            NvFabric::Switch {
                generation: 3,
                links: 12,
                nvls: false
            }
        );
    }

    #[test]
    fn hardware_attributes_come_from_the_topology() {
        use gpucomm_topo::{GpuArch, Node, NodeKind, TopologyBuilder};
        let b200 = Machine::from_topology(&gpucomm_topo::preset("dgx-b200").unwrap()).unwrap();
        assert_eq!(b200.node.arch, GpuArch::Blackwell);
        assert_eq!(b200.node.hbm_gbps, 8000.0);
        assert_eq!(
            b200.node.nvlink,
            NvFabric::Switch {
                generation: 5,
                links: 18,
                nvls: true
            }
        );
        let ws = Machine::from_topology(&gpucomm_topo::preset("rtx4090").unwrap()).unwrap();
        assert_eq!((ws.node.gpus, ws.node.sockets, ws.node.nics), (1, 1, 0));
        assert_eq!(ws.node.gpu_sites, [PcieSite::default()]);
        assert!((ws.node.host_mem_gbps - 89.6).abs() < 1e-9);
        // An unknown GPU is an error unless the node says what it is.
        let mut b = TopologyBuilder::new("odd");
        let h = b.node(Node::new("h", NodeKind::Host));
        b.node(
            Node::new("g", NodeKind::Gpu)
                .with_label("Voodoo 3")
                .in_host(h),
        );
        let t = b.build().unwrap();
        assert!(Machine::from_topology(&t).is_err());
        b = TopologyBuilder::new("odd");
        let h = b.node(Node::new("h", NodeKind::Host));
        b.node(
            Node::new("g", NodeKind::Gpu)
                .with_label("Voodoo 3")
                .with_gpu(GpuArch::Ampere, 1000.0)
                .in_host(h),
        );
        let m = Machine::from_topology(&b.build().unwrap()).unwrap();
        assert_eq!((m.node.arch, m.node.hbm_gbps), (GpuArch::Ampere, 1000.0));
    }

    /// `preset` with each PCIe link `a = dev`, `b = from` of `moves`
    /// (`(dev, from, to)`) hung on `to` instead.
    fn relinked(preset: &str, moves: &[(&str, &str, &str)]) -> Topology {
        let t = gpucomm_topo::preset(preset).unwrap();
        let mut text = gpucomm_topo::format::to_string(&t, gpucomm_topo::format::Format::Toml);
        for (dev, from, to) in moves {
            let link = format!("a = \"{dev}\"\nb = \"{from}\"");
            assert!(text.contains(&link), "{preset} has no link {dev}-{from}");
            text = text.replace(&link, &format!("a = \"{dev}\"\nb = \"{to}\""));
        }
        gpucomm_topo::format::parse(&text, gpucomm_topo::format::Format::Toml, preset).unwrap()
    }

    /// A GPU's PCIe switch tree is the topology's: a switch hung under
    /// another (cascaded) is one tree with it, which NCCL's `PATH_PXB`
    /// spans, so its ring needs no host memory there.
    #[test]
    fn cascaded_pcie_switches_are_one_tree() {
        let t = relinked("pcie-8gpu", &[("pcisw1", "cpu0", "pcisw0")]);
        let mut m = Machine::from_topology(&t).unwrap();
        let trees: Vec<_> = m.node.gpu_sites.iter().map(|s| s.tree).collect();
        assert_eq!(trees.len(), 8);
        assert!(trees[..4].iter().all(|x| x.is_some() && *x == trees[0]));
        assert!(trees[4] != trees[0] && trees[4] == trees[5] && trees[6] != trees[4]);
        m.use_gpus(4).unwrap();
        assert_eq!(
            m.fabric(crate::Engine::Nccl, 1).unwrap().nccl_shm_pair(),
            None
        );
        let flat = Machine::from_topology(&gpucomm_topo::preset("pcie-8gpu").unwrap()).unwrap();
        assert_ne!(flat.node.gpu_sites[0].tree, flat.node.gpu_sites[2].tree);
    }

    /// The routes follow the topology's PCIe tree, however uneven: GPUs
    /// on a CPU's own ports reach each other through it, not through a
    /// switch made up for them, and a switch sits on the socket it hangs
    /// from, not on one its place in GPU order gives it.
    #[test]
    fn routes_follow_an_uneven_pcie_tree() {
        use crate::fabric::Fabric;
        // GPUs 0 and 1 on CPU 0's root ports (their switch keeps NIC 0);
        // GPUs 2 and 3's switch under CPU 1.
        let t = relinked(
            "pcie-8gpu",
            &[
                ("gpu0", "pcisw0", "cpu0"),
                ("gpu1", "pcisw0", "cpu0"),
                ("pcisw1", "cpu0", "cpu1"),
            ],
        );
        let m = Machine::from_topology(&t).unwrap();
        let trees: Vec<_> = m.node.gpu_sites.iter().map(|s| s.tree).collect();
        assert_eq!(trees[..2], [None, None]);
        assert!(trees[2].is_some() && trees[2] == trees[3] && trees[4] != trees[2]);
        let sockets: Vec<_> = m.node.gpu_sites.iter().map(|s| s.socket).collect();
        assert_eq!(sockets, [0, 0, 1, 1, 1, 1, 1, 1]);
        let f = m.fabric(crate::Engine::CopyEngine, 1).unwrap();
        let path = |a: usize, b: usize| -> Vec<String> {
            let r = f.route(a, b, 0).unwrap();
            r.links.iter().map(|&l| f.link_name(l)).collect()
        };
        let names = |p: &[&str]| p.iter().map(|s| format!("node0:{s}")).collect::<Vec<_>>();
        // Through CPU 0, no switch; to GPU 2 across the sockets and down
        // its switch.
        assert_eq!(path(0, 1), names(&["gpu0->pcie", "pcie->gpu1"]));
        assert_eq!(
            path(0, 2),
            names(&[
                "gpu0->pcie",
                "cpu0->cpu1",
                "cpu->pcie-switch0",
                "pcie->gpu2"
            ])
        );
        // GPUs 2 and 4: two switches under CPU 1, no socket link.
        let p24 = path(2, 4);
        assert!(p24.iter().all(|l| !l.contains("cpu0")), "{p24:?}");
        assert_eq!(p24.len(), 4, "{p24:?}");
        // Before, by GPU order, GPUs 0 and 1 shared a switch and 2 sat on
        // socket 0; the preset itself routes as it did.
        let flat = Machine::from_topology(&gpucomm_topo::preset("pcie-8gpu").unwrap()).unwrap();
        let sites = [0, 0, 1, 1, 2, 2, 3, 3].map(|t| PcieSite {
            tree: Some(t),
            socket: t / 2,
        });
        assert_eq!(flat.node.gpu_sites, sites);
    }

    /// `preset` with the PCIe links of the NICs under switches whose name
    /// starts with `switch` moved to CPU 0.
    fn nics_on_the_cpu(preset: &str, switch: &str) -> Topology {
        let t = gpucomm_topo::preset(preset).unwrap();
        let text = gpucomm_topo::format::to_string(&t, gpucomm_topo::format::Format::Toml);
        let mut out = String::new();
        let mut in_nic_link = false;
        for line in text.lines() {
            if line.starts_with("a = \"nic") {
                in_nic_link = true;
            } else if line.starts_with('[') {
                in_nic_link = false;
            }
            if in_nic_link && line.starts_with(&format!("b = \"{switch}")) {
                out.push_str("b = \"cpu0\"\n");
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        let moved =
            gpucomm_topo::format::parse(&out, gpucomm_topo::format::Format::Toml, preset).unwrap();
        assert_ne!(out, text, "no NIC link was moved");
        moved
    }

    /// A NIC's place is the topology's too: one on a CPU's own port is
    /// reached up through the GPU's switch and the CPU, not through a
    /// switch shared with a GPU (before the fifty-first session NIC `k`
    /// sat under the switch of GPU `k * gpus / nics` whatever the file
    /// said), and the NICs of a CPU are spread over its GPUs.
    #[test]
    fn routes_reach_a_nic_where_the_topology_puts_it() {
        use crate::fabric::Fabric;
        let site = |tree, socket| PcieSite { tree, socket };
        let trees = |sites: &[PcieSite]| sites.iter().map(|s| s.tree).collect::<Vec<_>>();
        let sockets = |sites: &[PcieSite]| sites.iter().map(|s| s.socket).collect::<Vec<_>>();
        let m = Machine::from_topology(&nics_on_the_cpu("pcie-8gpu", "pcisw")).unwrap();
        assert_eq!(m.node.nic_sites, [site(None, 0); 4]);
        assert_eq!(m.node.nic_gpus, [0, 1, 2, 3]);
        // NICs a CPU away: the nearest are on the GPU's CPU (NCCL's
        // PATH_PHB), else on the other (PATH_SYS), none PATH_PXB or nearer.
        assert_eq!(m.node.gpu_nics[0], [0, 1, 2, 3]);
        assert_eq!(m.node.gpu_nics[7], [0, 1, 2, 3]);
        assert!(!m.node.gpu_nics_near.iter().any(|&n| n));
        // The preset's NICs: under the GPUs' switches, one each.
        let preset = Machine::preset("pcie-8gpu").unwrap();
        assert_eq!(trees(&preset.node.nic_sites), [0, 1, 2, 3].map(Some));
        assert_eq!(sockets(&preset.node.nic_sites), [0, 0, 1, 1]);
        assert_eq!(preset.node.nic_gpus, [0, 2, 4, 6]);
        assert_eq!(preset.node.gpu_nics[5], [2]);
        let path = |m: &Machine, a: usize, b: usize, channel: u16| -> Vec<String> {
            let f = m.fabric(crate::Engine::Nccl, 2).unwrap();
            let r = f.route(a, b, channel).unwrap();
            r.links.iter().map(|&l| f.link_name(l)).collect()
        };
        let names = |p: &[&str]| p.iter().map(|l| format!("node0:{l}")).collect::<Vec<_>>();
        // GPU 4 (socket 1) to the next node on channel 2, whose rail is
        // NIC 2: up its switch, across the sockets to CPU 0's port.
        let far = path(&m, 4, 12, 2);
        assert_eq!(
            far[..5],
            names(&[
                "gpu4->pcie",
                "pcie-switch2->cpu",
                "cpu1->cpu0",
                "pcie->nic2",
                "nic2->net"
            ])
        );
        let near = path(&preset, 4, 12, 2);
        assert_eq!(near[..3], names(&["gpu4->pcie", "pcie->nic2", "nic2->net"]));
        // NIC 0 beside GPUs 2 and 3, two GPUs in use: no NIC sits next to
        // them, and they take the nearest there are (it divided by no
        // rails and panicked).
        let t = relinked("pcie-8gpu", &[("nic0", "pcisw0", "pcisw1")]);
        let mut m = Machine::from_topology(&t).unwrap();
        m.use_gpus(2).unwrap();
        // The NICs nearest them: on their CPU, under the next switch.
        assert_eq!(m.nics_in_use(), [0, 1]);
        for c in 0..4 {
            assert!(
                path(&m, 0, 2, c)
                    .iter()
                    .any(|l| l.contains("pcie-switch0->cpu"))
            );
        }
        // No PXN to a NIC across a CPU: DGX H100 GPU 1 reaches NIC 2 on
        // CPU 0's port through its switch and the CPU, not over the
        // NVSwitch through GPU 2.
        let m = Machine::from_topology(&nics_on_the_cpu("dgx-h100", "pcisw")).unwrap();
        let p = path(&m, 1, 9, 1);
        assert!(p.iter().all(|l| !l.contains("nvswitch")), "{p:?}");
        // A NIC on nothing but a GPU reaches no CPU: refused (it was put
        // on CPU 0's port).
        let t = relinked("pcie-8gpu", &[("nic0", "pcisw0", "gpu0")]);
        let e = Machine::from_topology(&t).unwrap_err().to_string();
        assert!(e.contains("NIC nic0 reaches no CPU"), "{e}");
        // PXN through a GPU in use next to the receiver's NIC: on 3 GPUs of
        // a DGX A100, GPU 2 receives on NIC 3 (its switch's second, whose
        // own GPU 3 is not in use), and a sender relays to it through GPU
        // 2, staying on that rail (it left on its own NIC 0).
        let mut a100 = Machine::preset("dgx-a100").unwrap();
        a100.use_gpus(3).unwrap();
        let f = a100.fabric(crate::Engine::Nccl, 2).unwrap();
        for c in 0..8 {
            let r = f.transfers(true).route(0, 5, c).unwrap();
            let names: Vec<String> = r.links.iter().map(|&l| f.link_name(l)).collect();
            let out = names.iter().find(|l| l.ends_with("->net")).unwrap();
            let rail = out
                .trim_start_matches("node0:nic")
                .trim_end_matches("->net");
            assert!(
                names.contains(&format!("node1:net->nic{rail}")),
                "{names:?}"
            );
        }
        // A GPU with no NIC under its switch reaches those of its NVLink
        // peers in use through them (PATH_PXN, nearer than its CPU's); with
        // those peers out of use, its CPU's (PATH_PHB). DGX H100 with NICs
        // 0-3 moved to CPU 0's ports.
        let t = relinked(
            "dgx-h100",
            &[
                ("nic0", "pcisw0", "cpu0"),
                ("nic1", "pcisw1", "cpu0"),
                ("nic2", "pcisw2", "cpu0"),
                ("nic3", "pcisw3", "cpu0"),
            ],
        );
        let mut m = Machine::from_topology(&t).unwrap();
        let nearest = |m: &Machine| {
            m.fabric(crate::Engine::Nccl, 2)
                .unwrap()
                .nearest_nics(0)
                .to_vec()
        };
        assert_eq!(nearest(&m), [4, 5, 6, 7]);
        m.use_gpus(4).unwrap();
        assert_eq!(nearest(&m), [0, 1, 2, 3]);
        // Nor through a GPU not in use, and a GPU's own NICs are its
        // switch's (PIX) before its switch tree's (PXB): DGX-2's GPU 1 has
        // NIC 0, not NIC 1 of the other switch of its tree.
        let mut dgx2 = Machine::preset("dgx2").unwrap();
        assert_eq!(dgx2.node.gpu_nics[1], [0]);
        dgx2.use_gpus(2).unwrap();
        for c in 0..4 {
            let p = path(&dgx2, 1, 3, c);
            assert!(p.iter().all(|l| !l.contains("gpu2")), "{p:?}");
        }
    }

    #[test]
    fn presets_reach_their_nics_as_nccl_classes_them() {
        for name in gpucomm_topo::preset_names().split(", ") {
            let m = Machine::from_topology(&gpucomm_topo::preset(name).unwrap()).unwrap();
            // Every preset puts a NIC under each GPU's PCIe switch, or
            // behind its Grace CPU (GB200: NCCL's P2C).
            assert_eq!(m.node.nic_reach, NicReach::Near, "{name}");
        }
    }

    #[test]
    fn nics_on_the_cpu_are_far_and_a_peer_s_nic_over_nvlink_is_pxn() {
        let m = Machine::from_topology(&nics_on_the_cpu("dgx-h100", "pcisw")).unwrap();
        assert_eq!(m.node.nic_reach, NicReach::Far);
        assert_eq!(m.node.nics, 8);
        // GPUs 0 and 1 lose their NICs (on a DGX H100 the NIC on GPU 0's
        // switch; on a DGX A100 both NICs of its root port, each behind a
        // switch of its own); GPU 2's is one NVSwitch hop away.
        for (preset, switch) in [("dgx-h100", "pcisw0\""), ("dgx-a100", "pcisw0.")] {
            let m = Machine::from_topology(&nics_on_the_cpu(preset, switch)).unwrap();
            assert_eq!(m.node.nic_reach, NicReach::Pxn, "{preset}");
        }
    }

    #[test]
    fn ll128_crosses_nodes_only_where_nccl_enables_it() {
        use crate::Engine;
        use crate::collective::{AlgoChoice, CollOptions, simulate};
        use crate::model::Protocol;
        use gpucomm_algo::{Algorithm, Collective};
        let tree_ll128 = CollOptions {
            algorithm: Some(AlgoChoice::Schedule(Algorithm::Tree)).into(),
            protocol: Some(Protocol::Ll128).into(),
            ..Default::default()
        };
        let run = |t: &Topology, nodes: usize, opts: &CollOptions| {
            let f = Machine::from_topology(t)
                .unwrap()
                .fabric(Engine::Nccl, nodes)
                .unwrap();
            simulate(&f, Collective::AllReduce, 2 << 20, opts)
        };
        let far = nics_on_the_cpu("dgx-h100", "pcisw");
        let e = run(&far, 4, &tree_ll128).unwrap_err().to_string();
        assert!(e.contains("only through the CPU"), "{e}");
        // The tuner then picks something else (4 DGX H100 nodes: tree LL128
        // at 2 MiB with their NICs in place, tests/protocols.rs).
        let tuned = run(&far, 4, &CollOptions::default()).unwrap();
        assert_ne!(tuned.protocol, Protocol::Ll128, "{:?}", tuned.candidates);
        // One node: no NIC in the communicator, no rule.
        assert!(
            run(
                &far,
                1,
                &CollOptions {
                    algorithm: Some(AlgoChoice::Schedule(Algorithm::Ring)).into(),
                    ..tree_ll128.clone()
                }
            )
            .is_ok()
        );
        // A peer's NIC over NVLink (PXN): Hopper yes, Ampere no.
        assert!(run(&nics_on_the_cpu("dgx-h100", "pcisw0\""), 4, &tree_ll128).is_ok());
        let e = run(&nics_on_the_cpu("dgx-a100", "pcisw0."), 4, &tree_ll128)
            .unwrap_err()
            .to_string();
        assert!(e.contains("before Hopper"), "{e}");
    }
}
