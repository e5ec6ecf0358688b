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
//! node's label). The inter-node network is modeled as non-blocking
//! rails; a multi-node topology's leaf/spine layout and oversubscription
//! are not read.

use std::collections::BTreeMap;

use gpucomm_topo::{LinkKind, NodeIx, NodeKind, Topology};

use crate::SimError;
use crate::machine::{Machine, NodeModel, NvFabric};
use crate::model;

fn other_end(t: &Topology, l: &gpucomm_topo::Link, me: NodeIx) -> NodeIx {
    let _ = t;
    if l.a == me { l.b } else { l.a }
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
        let mut switch_links: Option<(u8, u32, bool)> = None;
        let mut pairs = Vec::new();
        let mut nvgen = 0u8;
        let mut pcie: Option<(u8, u32)> = None;
        let mut per_switch: BTreeMap<NodeIx, usize> = BTreeMap::new();
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
                                switch_links =
                                    Some((lg.number(), u32::from(count), topo.node(o).reduction));
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
                    LinkKind::Pcie {
                        generation: pg,
                        width,
                    } => {
                        pcie.get_or_insert((pg.number(), u32::from(width)));
                        if topo.node(o).kind == NodeKind::PcieSwitch {
                            *per_switch.entry(o).or_default() += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
        let nvlink = match switch_links {
            Some((generation, links, nvls)) => NvFabric::Switch {
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
        let (pcie_gen, pcie_width) = pcie.unwrap_or((4, 16));
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
        for &c in &cpus {
            for &(lix, _) in topo.links_of(c) {
                let l = topo.link(lix);
                if topo.node(other_end(topo, l, c)).kind == NodeKind::Cpu {
                    inter_socket = inter_socket.max(l.bandwidth);
                }
            }
        }
        let host_mem = cpus
            .first()
            .and_then(|&c| topo.node(c).memory_gbps())
            .unwrap_or(gpucomm_topo::hardware::DEFAULT_CPU_MEMORY_GBPS);
        let nics = in_domain(NodeKind::Nic);
        let nic_gbps = nics
            .first()
            .map(|&n| {
                let node = topo.node(n);
                node.port.map(|p| p.bandwidth()).unwrap_or_else(|| {
                    topo.links_of(n)
                        .iter()
                        .map(|&(l, _)| topo.link(l))
                        .filter(|l| l.kind.is_network())
                        .map(|l| l.bandwidth)
                        .fold(0.0, f64::max)
                })
            })
            .unwrap_or(0.0);
        let storage: f64 = in_domain(NodeKind::Storage)
            .iter()
            .map(|&s| {
                topo.links_of(s)
                    .iter()
                    .map(|&(l, _)| topo.link(l).bandwidth)
                    .fold(0.0, f64::max)
            })
            .sum();
        let gpus_per_switch = per_switch.values().copied().max().unwrap_or(0);
        let node = NodeModel {
            arch,
            gpu_name: label,
            gpus: gpus.len(),
            hbm_gbps: hbm,
            nvlink,
            pcie_gen,
            pcie_width,
            gpus_per_switch,
            sockets,
            inter_socket_gbps: if inter_socket > 0.0 {
                inter_socket
            } else {
                20.8
            },
            host_mem_gbps: host_mem,
            cpu_memcpy_gbps: model::memcpy_gbps(host_mem),
            nics: if nic_gbps > 0.0 { nics.len() } else { 0 },
            nic_gbps,
            storage_gbps: storage,
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
        Ok(Machine {
            name: topo.name().to_string(),
            node,
            nodes,
            gpus_used: None,
        })
    }
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
        assert_eq!(ws.node.gpus_per_switch, 0);
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
}
