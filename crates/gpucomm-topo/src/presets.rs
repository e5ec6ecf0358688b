//! Presets of real systems, built from their vendors' published
//! descriptions. `docs/topology.md` lists the source of each and the
//! simplifications made (NVSwitch chips as one logical node; NUMA nodes per
//! socket; storage NICs left out).

use crate::catalog::{IbSpeed, LinkKind, NvLinkGen, PcieGen};
use crate::error::TopoError;
use crate::model::{Node, NodeIx, NodeKind, Topology, TopologyBuilder};

/// The preset names with a one-line description each.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "dgx1-v100",
        "NVIDIA DGX-1 with 8x Tesla V100: NVLink 2 hybrid cube mesh, 2x Xeon E5-2698 v4, 4x EDR",
    ),
    (
        "dgx2",
        "NVIDIA DGX-2: 16x V100 on 12 NVSwitch gen1 (two baseboards), 2x Xeon 8168, 8x EDR",
    ),
    (
        "dgx-a100",
        "NVIDIA DGX A100: 8x A100 SXM4, 6 NVSwitch gen2 (NVLink 3 x12), 2x EPYC 7742, 8x HDR",
    ),
    (
        "dgx-h100",
        "NVIDIA DGX H100: 8x H100 SXM5, 4 NVSwitch gen3 with NVLS (NVLink 4 x18), 2x Xeon 8480C, 8x NDR",
    ),
    (
        "hgx-h200",
        "NVIDIA HGX H200 8-GPU: 8x H200, 4 NVSwitch gen3 with NVLS (NVLink 4 x18), 2 sockets, 8x NDR",
    ),
    (
        "gb200-nvl72",
        "NVIDIA GB200 NVL72: 18 trays x (2 Grace + 4 B200), 18 NVLink switch chips (NVLink 5 x18)",
    ),
    (
        "pcie-8gpu",
        "8 PCIe GPUs: 2 sockets x 2 PCIe Gen4 switches x 2 GPUs, one HDR NIC per switch",
    ),
];

/// The names of all presets, comma-separated (for messages).
pub fn preset_names() -> String {
    PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
}

/// Builds a preset by name (see [`PRESETS`]).
///
/// ```
/// let t = gpucomm_topo::preset("dgx-h100").unwrap();
/// assert_eq!(t.gpus().len(), 8);
/// ```
pub fn preset(name: &str) -> Result<Topology, TopoError> {
    let b = match name {
        "dgx1-v100" | "dgx1" => dgx1_v100(),
        "dgx2" | "dgx-2" => dgx2(),
        "dgx-a100" => dgx_a100(),
        "dgx-h100" => nvswitch_box(
            "dgx-h100",
            "H100 SXM5 80GB",
            "Xeon Platinum 8480C",
            PRESETS[3].1,
        ),
        "hgx-h200" => nvswitch_box(
            "hgx-h200",
            "H200 SXM 141GB",
            "Xeon Platinum 8480C",
            PRESETS[4].1,
        ),
        "gb200-nvl72" => gb200_nvl72(),
        "pcie-8gpu" => pcie_8gpu(),
        _ => {
            return Err(TopoError::UnknownTopology {
                name: name.to_string(),
                known: preset_names(),
            });
        }
    };
    b.build()
}

/// Helper for building one host.
struct Host<'a> {
    b: &'a mut TopologyBuilder,
    host: NodeIx,
}

impl<'a> Host<'a> {
    fn new(b: &'a mut TopologyBuilder, id: &str, label: &str) -> Self {
        let host = b.node(Node::new(id, NodeKind::Host).with_label(label));
        Host { b, host }
    }
    fn node(&mut self, id: String, kind: NodeKind, label: &str, socket: u32) -> NodeIx {
        self.b.node(
            Node::new(id, kind)
                .with_label(label)
                .with_numa(socket)
                .with_socket(socket)
                .in_host(self.host),
        )
    }
    fn cpu(&mut self, prefix: &str, i: u32, label: &str) -> NodeIx {
        self.node(format!("{prefix}cpu{i}"), NodeKind::Cpu, label, i)
    }
    fn nic(&mut self, prefix: &str, i: u32, label: &str, socket: u32, port: LinkKind) -> NodeIx {
        let ix = self.node(format!("{prefix}nic{i}"), NodeKind::Nic, label, socket);
        self.b.node_mut(ix).port = Some(port);
        ix
    }
}

fn pcie(generation: PcieGen, width: u8) -> LinkKind {
    LinkKind::Pcie { generation, width }
}

fn nvlink(generation: NvLinkGen, count: u8) -> LinkKind {
    LinkKind::NvLink { generation, count }
}

fn ib(speed: IbSpeed) -> LinkKind {
    LinkKind::Infiniband { speed, count: 1 }
}

/// The NVLink pairs of the DGX-1 V100 hybrid cube mesh as
/// `(gpu, gpu, links)`: 24 links, 6 per GPU, 4 neighbours each. Source:
/// NVIDIA DGX-1 With Tesla V100 System Architecture whitepaper (figure of
/// the hybrid cube-mesh topology) and the `nvidia-smi topo -m` matrix it
/// produces (NV1/NV2).
pub const DGX1_V100_NVLINKS: [(u32, u32, u8); 16] = [
    (0, 1, 1),
    (0, 2, 1),
    (0, 3, 2),
    (0, 4, 2),
    (1, 2, 2),
    (1, 3, 1),
    (1, 5, 2),
    (2, 3, 2),
    (2, 6, 1),
    (3, 7, 1),
    (4, 5, 1),
    (4, 6, 1),
    (4, 7, 2),
    (5, 6, 2),
    (5, 7, 1),
    (6, 7, 2),
];

fn dgx1_v100() -> TopologyBuilder {
    let mut b = TopologyBuilder::new("dgx1-v100");
    b.description(PRESETS[0].1);
    let mut h = Host::new(&mut b, "host0", "DGX-1 (Tesla V100)");
    let cpus = [
        h.cpu("", 0, "Xeon E5-2698 v4"),
        h.cpu("", 1, "Xeon E5-2698 v4"),
    ];
    // Two QPI links at 9.6 GT/s between the sockets (E5-2698 v4 datasheet).
    h.b.link(
        cpus[0],
        cpus[1],
        LinkKind::Qpi {
            mts: 9600,
            count: 2,
        },
    );
    let mut gpus = Vec::new();
    for s in 0..4u32 {
        let socket = s / 2;
        let sw = h.node(
            format!("pcisw{s}"),
            NodeKind::PcieSwitch,
            "PLX PCIe Gen3 switch",
            socket,
        );
        h.b.link(sw, cpus[socket as usize], pcie(PcieGen::Gen3, 16));
        for g in 0..2 {
            let gpu = h.node(
                format!("gpu{}", s * 2 + g),
                NodeKind::Gpu,
                "Tesla V100 SXM2 16GB",
                socket,
            );
            h.b.link(gpu, sw, pcie(PcieGen::Gen3, 16));
            gpus.push(gpu);
        }
        let nic = h.nic("", s, "ConnectX-4 EDR", socket, ib(IbSpeed::Edr));
        h.b.link(nic, sw, pcie(PcieGen::Gen3, 16));
    }
    for (x, y, n) in DGX1_V100_NVLINKS {
        h.b.link(gpus[x as usize], gpus[y as usize], nvlink(NvLinkGen::V2, n));
    }
    b
}

fn dgx2() -> TopologyBuilder {
    let mut b = TopologyBuilder::new("dgx2");
    b.description(PRESETS[1].1);
    let mut h = Host::new(&mut b, "host0", "DGX-2");
    let cpus = [
        h.cpu("", 0, "Xeon Platinum 8168"),
        h.cpu("", 1, "Xeon Platinum 8168"),
    ];
    h.b.link(
        cpus[0],
        cpus[1],
        LinkKind::Upi {
            mts: 10400,
            count: 3,
        },
    );
    // Each baseboard: 8 GPUs and 6 NVSwitch chips; each GPU has one NVLink
    // to each of the 6 chips; each chip has 8 links to its twin on the other
    // baseboard (48 links across, 2.4 TB/s bisection bidirectional).
    let mut boards = Vec::new();
    for board in 0..2u32 {
        let sw = h.node(
            format!("nvswitch{board}"),
            NodeKind::NvSwitch,
            "NVSwitch gen1 x6 (baseboard)",
            board,
        );
        h.b.node_mut(sw).chips = Some(6);
        h.b.node_mut(sw).numa = None;
        h.b.node_mut(sw).socket = None;
        boards.push(sw);
    }
    h.b.link(boards[0], boards[1], nvlink(NvLinkGen::V2, 48));
    // PCIe: per socket two upper switches, each with two lower switches;
    // each lower switch holds two GPUs and one EDR NIC.
    let mut gi = 0u32;
    let mut ni = 0u32;
    for up in 0..4u32 {
        let socket = up / 2;
        let usw = h.node(
            format!("pcisw{up}"),
            NodeKind::PcieSwitch,
            "PCIe Gen3 switch",
            socket,
        );
        h.b.link(usw, cpus[socket as usize], pcie(PcieGen::Gen3, 16));
        for low in 0..2u32 {
            let lsw = h.node(
                format!("pcisw{up}.{low}"),
                NodeKind::PcieSwitch,
                "PCIe Gen3 switch",
                socket,
            );
            h.b.link(lsw, usw, pcie(PcieGen::Gen3, 16));
            for _ in 0..2 {
                let gpu = h.node(
                    format!("gpu{gi}"),
                    NodeKind::Gpu,
                    "Tesla V100 SXM3 32GB",
                    socket,
                );
                h.b.link(gpu, lsw, pcie(PcieGen::Gen3, 16));
                h.b.link(gpu, boards[(gi / 8) as usize], nvlink(NvLinkGen::V2, 6));
                gi += 1;
            }
            let nic = h.nic("", ni, "ConnectX-5 EDR", socket, ib(IbSpeed::Edr));
            h.b.link(nic, lsw, pcie(PcieGen::Gen3, 16));
            ni += 1;
        }
    }
    b
}

fn dgx_a100() -> TopologyBuilder {
    let mut b = TopologyBuilder::new("dgx-a100");
    b.description(PRESETS[2].1);
    let mut h = Host::new(&mut b, "host0", "DGX A100");
    let cpus = [h.cpu("", 0, "EPYC 7742"), h.cpu("", 1, "EPYC 7742")];
    h.b.link(
        cpus[0],
        cpus[1],
        LinkKind::InfinityFabric {
            mts: 18000,
            count: 4,
        },
    );
    let nvs = h.node(
        "nvswitch0".into(),
        NodeKind::NvSwitch,
        "NVSwitch gen2 x6",
        0,
    );
    h.b.node_mut(nvs).chips = Some(6);
    h.b.node_mut(nvs).numa = None;
    h.b.node_mut(nvs).socket = None;
    for s in 0..4u32 {
        let socket = s / 2;
        let sw = h.node(
            format!("pcisw{s}"),
            NodeKind::PcieSwitch,
            "PCIe Gen4 switch",
            socket,
        );
        h.b.link(sw, cpus[socket as usize], pcie(PcieGen::Gen4, 16));
        for g in 0..2 {
            let gpu = h.node(
                format!("gpu{}", s * 2 + g),
                NodeKind::Gpu,
                "A100 SXM4 80GB",
                socket,
            );
            h.b.link(gpu, sw, pcie(PcieGen::Gen4, 16));
            h.b.link(gpu, nvs, nvlink(NvLinkGen::V3, 12));
        }
        for n in 0..2 {
            let nic = h.nic("", s * 2 + n, "ConnectX-6 HDR", socket, ib(IbSpeed::Hdr));
            h.b.link(nic, sw, pcie(PcieGen::Gen4, 16));
        }
        let nvme = h.node(
            format!("nvme{s}"),
            NodeKind::Storage,
            "NVMe U.2 3.84TB",
            socket,
        );
        h.b.link(nvme, sw, pcie(PcieGen::Gen4, 4));
    }
    b
}

/// DGX H100 / HGX H200: 8 GPUs on one NVSwitch gen3 fabric (4 chips, NVLink
/// SHARP), 4 PCIe Gen5 switches each with 2 GPUs and 2 NDR NICs.
fn nvswitch_box(name: &str, gpu: &str, cpu: &str, description: &str) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(name);
    b.description(description);
    let label = if name == "dgx-h100" {
        "DGX H100"
    } else {
        "HGX H200"
    };
    let mut h = Host::new(&mut b, "host0", label);
    let cpus = [h.cpu("", 0, cpu), h.cpu("", 1, cpu)];
    // Sapphire Rapids: 4 UPI 2.0 links at 16 GT/s.
    h.b.link(
        cpus[0],
        cpus[1],
        LinkKind::Upi {
            mts: 16000,
            count: 4,
        },
    );
    let nvs = h.node(
        "nvswitch0".into(),
        NodeKind::NvSwitch,
        "NVSwitch gen3 x4 (NVLS)",
        0,
    );
    {
        let n = h.b.node_mut(nvs);
        n.chips = Some(4);
        n.reduction = true;
        n.numa = None;
        n.socket = None;
    }
    for s in 0..4u32 {
        let socket = s / 2;
        let sw = h.node(
            format!("pcisw{s}"),
            NodeKind::PcieSwitch,
            "PCIe Gen5 switch",
            socket,
        );
        h.b.link(sw, cpus[socket as usize], pcie(PcieGen::Gen5, 16));
        for g in 0..2 {
            let gx = h.node(format!("gpu{}", s * 2 + g), NodeKind::Gpu, gpu, socket);
            h.b.link(gx, sw, pcie(PcieGen::Gen5, 16));
            h.b.link(gx, nvs, nvlink(NvLinkGen::V4, 18));
        }
        for n in 0..2 {
            let nic = h.nic("", s * 2 + n, "ConnectX-7 NDR", socket, ib(IbSpeed::Ndr));
            h.b.link(nic, sw, pcie(PcieGen::Gen5, 16));
        }
        let nvme = h.node(
            format!("nvme{s}"),
            NodeKind::Storage,
            "NVMe U.2 3.84TB",
            socket,
        );
        h.b.link(nvme, sw, pcie(PcieGen::Gen4, 4));
    }
    b
}

fn gb200_nvl72() -> TopologyBuilder {
    let mut b = TopologyBuilder::new("gb200-nvl72");
    b.description(PRESETS[5].1);
    let mut nvs =
        Node::new("nvswitch0", NodeKind::NvSwitch).with_label("NVLink Switch x18 (9 trays)");
    nvs.chips = Some(18);
    nvs.reduction = true;
    let nvs = b.node(nvs);
    for tray in 0..18u32 {
        let p = format!("tray{tray}.");
        let mut h = Host::new(&mut b, &format!("tray{tray}"), "GB200 compute tray");
        let cpus = [h.cpu(&p, 0, "Grace"), h.cpu(&p, 1, "Grace")];
        // The two Graces of a tray share the tray's memory space; their link
        // is not in NVIDIA's published figures, so it is an SMP link of
        // unknown speed (classified SYS, like any socket-to-socket link).
        h.b.link(cpus[0], cpus[1], LinkKind::Smp);
        for g in 0..4u32 {
            let socket = g / 2;
            let gpu = h.node(format!("{p}gpu{g}"), NodeKind::Gpu, "B200 (GB200)", socket);
            h.b.link(gpu, cpus[socket as usize], LinkKind::NvLinkC2c);
            h.b.link(gpu, nvs, nvlink(NvLinkGen::V5, 18));
            let nic = h.nic(&p, g, "ConnectX-7 NDR", socket, ib(IbSpeed::Ndr));
            h.b.link(nic, cpus[socket as usize], pcie(PcieGen::Gen5, 16));
        }
    }
    b
}

fn pcie_8gpu() -> TopologyBuilder {
    let mut b = TopologyBuilder::new("pcie-8gpu");
    b.description(PRESETS[6].1);
    let mut h = Host::new(&mut b, "host0", "2-socket PCIe GPU server");
    let cpus = [
        h.cpu("", 0, "Xeon (Ice Lake-SP)"),
        h.cpu("", 1, "Xeon (Ice Lake-SP)"),
    ];
    h.b.link(
        cpus[0],
        cpus[1],
        LinkKind::Upi {
            mts: 11200,
            count: 3,
        },
    );
    for s in 0..4u32 {
        let socket = s / 2;
        let sw = h.node(
            format!("pcisw{s}"),
            NodeKind::PcieSwitch,
            "PCIe Gen4 switch",
            socket,
        );
        h.b.link(sw, cpus[socket as usize], pcie(PcieGen::Gen4, 16));
        for g in 0..2 {
            let gpu = h.node(
                format!("gpu{}", s * 2 + g),
                NodeKind::Gpu,
                "A100 PCIe 80GB",
                socket,
            );
            h.b.link(gpu, sw, pcie(PcieGen::Gen4, 16));
        }
        let nic = h.nic("", s, "ConnectX-6 HDR", socket, ib(IbSpeed::Hdr));
        h.b.link(nic, sw, pcie(PcieGen::Gen4, 16));
    }
    b
}
