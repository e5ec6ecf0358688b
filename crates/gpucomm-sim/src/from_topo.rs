//! From a gpucomm-topo [`Topology`] (preset, file or discovered machine) to
//! the simulator's parametric [`Machine`].
//!
//! The simulator models identical nodes, so it reads the first host of the
//! topology: its GPUs, how they reach each other (NVSwitch, direct NVLink,
//! PCIe switches), CPU sockets and the link between them, NICs and their
//! port speed, and NVMe drives. What a topology does not describe (device
//! and host memory bandwidth) comes from the GPU and CPU tables in
//! [`crate::model`]. The inter-node network is modeled as non-blocking
//! rails; a multi-node topology's leaf/spine layout and oversubscription
//! are not read.

use std::collections::BTreeMap;

use gpucomm_topo::{LinkKind, NodeIx, NodeKind, Topology};

use crate::SimError;
use crate::machine::{Machine, NodeModel, NvFabric};
use crate::model::{self, Arch};

/// GPU architecture and device-memory bandwidth (GB/s) from a product name
/// (NVIDIA datasheets: V100 SXM2 900, A100 80GB 2039, A100 40GB PCIe 1555,
/// H100 SXM5 3350, H200 4800, B200 8000, RTX 4090 1008).
pub fn gpu_from_label(label: &str) -> Option<(Arch, f64)> {
    let l = label.to_ascii_uppercase();
    Some(
        if l.contains("B200") || l.contains("GB200") || l.contains("B100") {
            (Arch::Blackwell, 8000.0)
        } else if l.contains("H200") {
            (Arch::Hopper, 4800.0)
        } else if l.contains("H100") || l.contains("H800") {
            (Arch::Hopper, 3350.0)
        } else if l.contains("A100") || l.contains("A800") {
            (
                Arch::Ampere,
                if l.contains("PCIE") || l.contains("40") {
                    1555.0
                } else {
                    2039.0
                },
            )
        } else if l.contains("V100") {
            (Arch::Volta, 900.0)
        } else if l.contains("P100") {
            (Arch::Pascal, 732.0)
        } else if l.contains("4090") || l.contains("L40") || l.contains("A40") || l.contains("ADA")
        {
            (Arch::Ada, 1008.0)
        } else {
            return None;
        },
    )
}

/// Host memory bandwidth per socket (GB/s) from a CPU name (vendor
/// datasheets: channels x transfer rate x 8 bytes). Unknown CPUs get 8
/// channels of DDR4-3200 (204.8).
pub fn host_mem_from_cpu(label: &str) -> f64 {
    let l = label.to_ascii_uppercase();
    if l.contains("E5-26") || l.contains("E5-2698") {
        76.8 // 4 x DDR4-2400
    } else if l.contains("8480") || l.contains("SAPPHIRE") || l.contains("8468") {
        307.2 // 8 x DDR5-4800
    } else if l.contains("8168") || l.contains("PLATINUM 81") {
        127.8 // 6 x DDR4-2666
    } else if l.contains("GRACE") {
        500.0 // LPDDR5X, Grace datasheet
    } else {
        204.8
    }
}

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
        let label = topo.node(gpus[0]).label.clone();
        let (arch, hbm) = gpu_from_label(&label).ok_or_else(|| {
            SimError::Model(format!(
                "unknown GPU {label:?} in topology {} (no architecture)",
                topo.name()
            ))
        })?;
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
            .map(|&c| host_mem_from_cpu(&topo.node(c).label))
            .unwrap_or(204.8);
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
        Ok(Machine {
            name: topo.name().to_string(),
            node,
            nodes: 1,
            gpus_used: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn unknown_gpus_are_errors() {
        assert!(gpu_from_label("Voodoo 3").is_none());
        assert_eq!(
            gpu_from_label("NVIDIA H100 80GB HBM3").unwrap().0,
            Arch::Hopper
        );
    }
}
