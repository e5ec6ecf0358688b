//! Presets of real systems, built from their vendors' published
//! descriptions. `docs/topology.md` lists the source of each and the
//! simplifications made (NVSwitch chips as one logical node; NUMA nodes per
//! socket; storage NICs left out).

use crate::catalog::{IbSpeed, LinkKind, NvLinkGen, PcieGen};
use crate::error::TopoError;
use crate::hardware::{GpuArch, ddr_gbps, gpu_memory};
use crate::model::{Link, Node, NodeIx, NodeKind, Topology, TopologyBuilder};

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
    (
        "dgx-b200",
        "NVIDIA DGX B200: 8x B200, 2 NVSwitch gen4 with NVLS (NVLink 5 x18), 2x Xeon 8570, 8x NDR",
    ),
    (
        "workstation-rtx4090",
        "Workstation: 1x GeForce RTX 4090 on PCIe Gen4 x16 of a Core i9-13900K, no NIC",
    ),
    (
        "dgx1-p100",
        "NVIDIA DGX-1 with 8x Tesla P100: NVLink 1 hybrid cube mesh (one link per pair), 2x Xeon E5-2698 v4, 4x EDR",
    ),
    (
        "hgx-a800",
        "HGX A800 8-GPU: 8x A800 SXM4 on 6 NVSwitch gen2 (NVLink 3 x8, 400 GB/s), host as the DGX A100's",
    ),
    (
        "hgx-h800",
        "HGX H800 8-GPU: 8x H800 SXM5 on 4 NVSwitch gen3 with NVLS (NVLink 4 x8, 400 GB/s), host as the DGX H100's",
    ),
    (
        "gh200",
        "One GH200 480GB superchip per node: Grace and H100 96GB on NVLink-C2C, 1x NDR on the Grace's PCIe Gen5",
    ),
    (
        "quad-gh200",
        "4x GH200 120GB per node (JUPITER, Alps): GPUs all-to-all by 6 NVLink 4 each pair, Graces at 100 GB/s, 4x 200 Gb/s NICs",
    ),
];

/// Other names accepted by [`preset`], with the preset each stands for.
pub const PRESET_ALIASES: &[(&str, &str)] = &[
    ("dgx1", "dgx1-v100"),
    ("dgx-2", "dgx2"),
    ("hgx-b200", "dgx-b200"),
    ("rtx4090", "workstation-rtx4090"),
];

/// Whether `name` is a preset name or an alias of one.
pub fn is_preset(name: &str) -> bool {
    PRESETS.iter().any(|p| p.0 == name) || PRESET_ALIASES.iter().any(|a| a.0 == name)
}

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
    let name = PRESET_ALIASES
        .iter()
        .find(|a| a.0 == name)
        .map_or(name, |a| a.1);
    let b = match name {
        "dgx1-v100" => dgx1(&DGX1_V100),
        "dgx2" => dgx2(),
        "dgx-a100" => nvswitch_box(&DGX_A100),
        "dgx-h100" => nvswitch_box(&DGX_H100),
        "hgx-h200" => nvswitch_box(&HGX_H200),
        "dgx-b200" => nvswitch_box(&DGX_B200),
        "gb200-nvl72" => gb200_nvl72(),
        "pcie-8gpu" => pcie_8gpu(),
        "workstation-rtx4090" => workstation_rtx4090(),
        "dgx1-p100" => dgx1(&DGX1_P100),
        "hgx-a800" => nvswitch_box(&HGX_A800),
        "hgx-h800" => nvswitch_box(&HGX_H800),
        "gh200" => gh200(),
        "quad-gh200" => quad_gh200(),
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
    /// CPU socket `i` with its memory bandwidth (GB/s).
    fn cpu(&mut self, prefix: &str, i: u32, label: &str, memory_gbps: f64) -> NodeIx {
        let ix = self.node(format!("{prefix}cpu{i}"), NodeKind::Cpu, label, i);
        self.b.node_mut(ix).memory_bandwidth = Some(memory_gbps);
        ix
    }
    /// A GPU with its architecture and device-memory bandwidth (GB/s).
    fn gpu(&mut self, id: String, g: Gpu, socket: u32) -> NodeIx {
        let ix = self.node(id, NodeKind::Gpu, g.label, socket);
        let n = self.b.node_mut(ix);
        n.arch = Some(g.arch);
        n.memory_bandwidth = Some(g.memory_gbps);
        ix
    }
    /// Puts a node under root complex (host bridge) `rc`: devices under
    /// different root complexes of one socket are NODE apart, under one
    /// PHB (`nvidia-smi topo -m`).
    fn under(&mut self, ix: NodeIx, rc: &str) -> NodeIx {
        self.b.node_mut(ix).root_complex = Some(rc.to_string());
        ix
    }
    fn nic(&mut self, prefix: &str, i: u32, label: &str, socket: u32, port: LinkKind) -> NodeIx {
        let ix = self.node(format!("{prefix}nic{i}"), NodeKind::Nic, label, socket);
        self.b.node_mut(ix).port = Some(port);
        ix
    }
}

/// A GPU product: label, architecture, device memory bandwidth (GB/s,
/// [`gpu_memory`]).
#[derive(Clone, Copy)]
struct Gpu {
    label: &'static str,
    arch: GpuArch,
    memory_gbps: f64,
}

const P100_SXM2: Gpu = Gpu {
    label: "Tesla P100 SXM2 16GB",
    arch: GpuArch::Pascal,
    memory_gbps: gpu_memory::P100,
};
/// The DGX-1's V100 as sold from 2018 (32 GB; the first DGX-1 V100 had
/// 16 GB): 8 GiB collectives fit, as on the DGX-2's SXM3 parts.
const V100_SXM2: Gpu = Gpu {
    label: "Tesla V100 SXM2 32GB",
    arch: GpuArch::Volta,
    memory_gbps: gpu_memory::V100,
};
const V100_SXM3: Gpu = Gpu {
    label: "Tesla V100 SXM3 32GB",
    arch: GpuArch::Volta,
    memory_gbps: gpu_memory::V100,
};
const A100_SXM4_80GB: Gpu = Gpu {
    label: "A100 SXM4 80GB",
    arch: GpuArch::Ampere,
    memory_gbps: gpu_memory::A100_80GB_SXM,
};
const A800_SXM4_80GB: Gpu = Gpu {
    label: "A800 SXM4 80GB",
    arch: GpuArch::Ampere,
    memory_gbps: gpu_memory::A100_80GB_SXM,
};
const A100_PCIE_80GB: Gpu = Gpu {
    label: "A100 PCIe 80GB",
    arch: GpuArch::Ampere,
    memory_gbps: gpu_memory::A100_80GB_PCIE,
};
const H100_SXM5: Gpu = Gpu {
    label: "H100 SXM5 80GB",
    arch: GpuArch::Hopper,
    memory_gbps: gpu_memory::H100_SXM,
};
const H800_SXM5: Gpu = Gpu {
    label: "H800 SXM5 80GB",
    arch: GpuArch::Hopper,
    memory_gbps: gpu_memory::H100_SXM,
};
const H200_SXM: Gpu = Gpu {
    label: "H200 SXM 141GB",
    arch: GpuArch::Hopper,
    memory_gbps: gpu_memory::H200,
};
const GH200_480GB: Gpu = Gpu {
    label: "GH200 480GB (H100 96GB HBM3)",
    arch: GpuArch::Hopper,
    memory_gbps: gpu_memory::GH200_96GB,
};
const GH200_120GB: Gpu = Gpu {
    label: "GH200 120GB (H100 96GB HBM3)",
    arch: GpuArch::Hopper,
    memory_gbps: gpu_memory::GH200_96GB,
};
const B200: Gpu = Gpu {
    label: "B200 180GB",
    arch: GpuArch::Blackwell,
    memory_gbps: gpu_memory::B200,
};
const B200_GB200: Gpu = Gpu {
    label: "B200 (GB200)",
    arch: GpuArch::Blackwell,
    memory_gbps: gpu_memory::B200,
};
const RTX_4090: Gpu = Gpu {
    label: "GeForce RTX 4090",
    arch: GpuArch::Ada,
    memory_gbps: gpu_memory::RTX_4090,
};

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

/// A DGX-1: 8 GPUs in the hybrid cube mesh on 4 PLX PCIe Gen3 switches
/// (2 GPUs and one EDR HCA each) of two Xeon E5-2698 v4.
struct Dgx1 {
    name: &'static str,
    description: &'static str,
    host: &'static str,
    gpu: Gpu,
    nvlink: NvLinkGen,
    /// Links between two neighbours: the V100's pairs as
    /// [`DGX1_V100_NVLINKS`]; the P100's four links, one per neighbour.
    single_links: bool,
}

const DGX1_V100: Dgx1 = Dgx1 {
    name: "dgx1-v100",
    description: PRESETS[0].1,
    host: "DGX-1 (Tesla V100)",
    gpu: V100_SXM2,
    nvlink: NvLinkGen::V2,
    single_links: false,
};

/// DGX-1 with Tesla P100 (NVIDIA DGX-1 System Architecture whitepaper,
/// 2017: each P100 has four NVLink 1 links, one to each of the four
/// neighbours the V100 model later joins with one or two links; same
/// host, PCIe switches and HCAs).
const DGX1_P100: Dgx1 = Dgx1 {
    name: "dgx1-p100",
    description: PRESETS[9].1,
    host: "DGX-1 (Tesla P100)",
    gpu: P100_SXM2,
    nvlink: NvLinkGen::V1,
    single_links: true,
};

fn dgx1(spec: &Dgx1) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(spec.name);
    b.description(spec.description);
    let mut h = Host::new(&mut b, "host0", spec.host);
    // Xeon E5-2698 v4: 4 channels of DDR4-2400 per socket (Intel ARK).
    let mem = ddr_gbps(4, 2400);
    let cpus = [
        h.cpu("", 0, "Xeon E5-2698 v4", mem),
        h.cpu("", 1, "Xeon E5-2698 v4", mem),
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
        // Broadwell-EP has one PCIe host bridge per socket: both switches of
        // a socket are under it, so GPU0 to NIC1 is PHB, not NODE (the
        // DGX-1's published `nvidia-smi topo -m`).
        let rc = format!("rc{socket}");
        let sw = h.node(
            format!("pcisw{s}"),
            NodeKind::PcieSwitch,
            "PLX PCIe Gen3 switch",
            socket,
        );
        h.under(sw, &rc);
        h.b.link(sw, cpus[socket as usize], pcie(PcieGen::Gen3, 16));
        for g in 0..2 {
            let gpu = h.gpu(format!("gpu{}", s * 2 + g), spec.gpu, socket);
            h.under(gpu, &rc);
            h.b.link(gpu, sw, pcie(PcieGen::Gen3, 16));
            gpus.push(gpu);
        }
        let nic = h.nic("", s, "ConnectX-4 EDR", socket, ib(IbSpeed::Edr));
        h.under(nic, &rc);
        h.b.link(nic, sw, pcie(PcieGen::Gen3, 16));
    }
    for (x, y, n) in DGX1_V100_NVLINKS {
        let n = if spec.single_links { 1 } else { n };
        h.b.link(gpus[x as usize], gpus[y as usize], nvlink(spec.nvlink, n));
    }
    b
}

fn dgx2() -> TopologyBuilder {
    let mut b = TopologyBuilder::new("dgx2");
    b.description(PRESETS[1].1);
    let mut h = Host::new(&mut b, "host0", "DGX-2");
    // Xeon Platinum 8168: 6 channels of DDR4-2666 per socket (Intel ARK).
    let mem = ddr_gbps(6, 2666);
    let cpus = [
        h.cpu("", 0, "Xeon Platinum 8168", mem),
        h.cpu("", 1, "Xeon Platinum 8168", mem),
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
    // PCIe: per socket two upper switches, each on its own root port (host
    // bridge) and with two lower switches; each lower switch holds two GPUs
    // and one EDR NIC. GPU0 to the NICs: PIX, PXB, NODE, NODE, then SYS,
    // as the DGX-2's `nvidia-smi topo -m` (NVIDIA/nccl-tests#78).
    let mut gi = 0u32;
    let mut ni = 0u32;
    for up in 0..4u32 {
        let socket = up / 2;
        let rc = format!("rc{up}");
        let usw = h.node(
            format!("pcisw{up}"),
            NodeKind::PcieSwitch,
            "PCIe Gen3 switch",
            socket,
        );
        h.under(usw, &rc);
        h.b.link(usw, cpus[socket as usize], pcie(PcieGen::Gen3, 16));
        for low in 0..2u32 {
            let lsw = h.node(
                format!("pcisw{up}.{low}"),
                NodeKind::PcieSwitch,
                "PCIe Gen3 switch",
                socket,
            );
            h.under(lsw, &rc);
            h.b.link(lsw, usw, pcie(PcieGen::Gen3, 16));
            for _ in 0..2 {
                let gpu = h.gpu(format!("gpu{gi}"), V100_SXM3, socket);
                h.under(gpu, &rc);
                h.b.link(gpu, lsw, pcie(PcieGen::Gen3, 16));
                h.b.link(gpu, boards[(gi / 8) as usize], nvlink(NvLinkGen::V2, 6));
                gi += 1;
            }
            let nic = h.nic("", ni, "ConnectX-5 EDR", socket, ib(IbSpeed::Edr));
            h.under(nic, &rc);
            h.b.link(nic, lsw, pcie(PcieGen::Gen3, 16));
            ni += 1;
        }
    }
    b
}

/// How an NVSwitch box's GPUs and NICs hang off the CPUs' PCIe.
#[derive(Clone, Copy)]
enum PcieLayout {
    /// DGX A100: per socket two root ports (host bridges), each with a
    /// switch holding an NVMe drive, a switch for its two GPUs and one
    /// switch for each of its two NICs. GPU to NIC is PXB (two switches),
    /// NIC to NIC of the pair PXB, NODE across root ports of a socket: GPU0
    /// reads `PXB PXB SYS ...`, mlx5_0 to mlx5_1 PXB (NVIDIA/nccl#1505,
    /// rapidsai/dask-cuda#1358, rapidsai/ucx-py#749, NVIDIA/DCGM#149, all
    /// DGX A100; nccl#1505's topology dump has mlx5_0 behind a bridge of
    /// its own). The two GPUs share their switch's uplink.
    PairsNested,
    /// DGX H100 / DGX B200: a root port (host bridge) per GPU, whose switch
    /// holds the GPU's own ConnectX-7 and, one switch further, the GPU: GPU
    /// to its NIC PXB, to the other NICs and GPUs of its socket NODE, SYS
    /// across (DGX H100: vllm-project/vllm#6746; DGX B200-class, Xeon
    /// 0-55,112-167: vllm-project/vllm#16336, GPU0 `PXB NODE NODE NODE SYS
    /// SYS SYS SYS`, GPU0-GPU2 NODE where NVLink was down; the DGX H100 user
    /// guide pairs each GPU with one ConnectX-7 of the network modules).
    /// Each GPU has its own Gen5 x16 up to the CPU.
    PerGpu,
}

/// An 8-GPU NVSwitch baseboard system (DGX A100, HGX A800, DGX H100, HGX
/// H200, HGX H800, DGX B200): two sockets, 8 GPUs, 8 NICs and 4 NVMe
/// drives on PCIe laid out as [`PcieLayout`] says.
struct NvSwitchBox {
    name: &'static str,
    description: &'static str,
    host: &'static str,
    gpu: Gpu,
    nvlink: NvLinkGen,
    /// NVLinks per GPU.
    nvlinks: u8,
    nvswitch: &'static str,
    nvswitch_chips: u32,
    /// The switches reduce (NVLink SHARP, NVSwitch gen3 on).
    nvls: bool,
    cpu: &'static str,
    cpu_memory_gbps: f64,
    /// The link between the two sockets.
    sockets_link: LinkKind,
    /// PCIe generation of the switches, GPUs and NICs.
    pcie: PcieGen,
    /// The PCIe tree.
    layout: PcieLayout,
    nic: &'static str,
    nic_speed: IbSpeed,
}

/// DGX A100 (NVIDIA DGX A100 user guide): 2x EPYC 7742 (8 x DDR4-3200,
/// AMD: 204.8 GB/s; 4 xGMI links assumed), 6 NVSwitch gen2 chips, NVLink
/// 3 x12 per GPU, PCIe Gen4, 8x ConnectX-6 HDR.
const DGX_A100: NvSwitchBox = NvSwitchBox {
    name: "dgx-a100",
    description: PRESETS[2].1,
    host: "DGX A100",
    gpu: A100_SXM4_80GB,
    nvlink: NvLinkGen::V3,
    nvlinks: 12,
    nvswitch: "NVSwitch gen2 x6",
    nvswitch_chips: 6,
    nvls: false,
    cpu: "EPYC 7742",
    cpu_memory_gbps: ddr_gbps(8, 3200),
    sockets_link: LinkKind::InfinityFabric {
        mts: 18000,
        count: 4,
    },
    pcie: PcieGen::Gen4,
    layout: PcieLayout::PairsNested,
    nic: "ConnectX-6 HDR",
    nic_speed: IbSpeed::Hdr,
};

/// HGX A800: the A100's export variant with 400 GB/s of NVLink (NVIDIA
/// A800 40GB/80GB datasheets: "NVLink 400GB/s", 8 links of 50 GB/s both
/// ways); everything else as the DGX A100.
const HGX_A800: NvSwitchBox = NvSwitchBox {
    name: "hgx-a800",
    description: PRESETS[10].1,
    host: "HGX A800",
    gpu: A800_SXM4_80GB,
    nvlinks: 8,
    ..DGX_A100
};

/// DGX H100 (NVIDIA DGX H100 user guide / datasheet): 2x Xeon Platinum
/// 8480C (Sapphire Rapids: 8 x DDR5-4800, 4 UPI at 16 GT/s), 4 NVSwitch
/// gen3 chips, NVLink 4 x18 per GPU.
const DGX_H100: NvSwitchBox = NvSwitchBox {
    name: "dgx-h100",
    description: PRESETS[3].1,
    host: "DGX H100",
    gpu: H100_SXM5,
    nvlink: NvLinkGen::V4,
    nvlinks: 18,
    nvswitch: "NVSwitch gen3 x4 (NVLS)",
    nvswitch_chips: 4,
    nvls: true,
    cpu: "Xeon Platinum 8480C",
    cpu_memory_gbps: ddr_gbps(8, 4800),
    sockets_link: LinkKind::Upi {
        mts: 16000,
        count: 4,
    },
    pcie: PcieGen::Gen5,
    layout: PcieLayout::PerGpu,
    nic: "ConnectX-7 NDR",
    nic_speed: IbSpeed::Ndr,
};

/// HGX H200 8-GPU: the DGX H100 baseboard with H200 141GB (NVIDIA H200
/// datasheet); host side taken as the DGX H100's.
const HGX_H200: NvSwitchBox = NvSwitchBox {
    name: "hgx-h200",
    description: PRESETS[4].1,
    host: "HGX H200",
    gpu: H200_SXM,
    ..DGX_H100
};

/// HGX H800 8-GPU: the H100's export variant with 400 GB/s of NVLink
/// (NVIDIA H800 datasheet: "NVLink 400GB/s", 8 links of 50 GB/s both
/// ways; NCCL's topology dump on such a machine shows `NVL[164.8]`, 8 x
/// 20.6) and NVLink SHARP; host side taken as the DGX H100's.
const HGX_H800: NvSwitchBox = NvSwitchBox {
    name: "hgx-h800",
    description: PRESETS[11].1,
    host: "HGX H800",
    gpu: H800_SXM5,
    nvlinks: 8,
    ..DGX_H100
};

/// DGX B200 (NVIDIA DGX B200 datasheet and user guide): 8x B200 (1,440 GB
/// HBM3e, 64 TB/s in all), 2 fifth-generation NVLink switch chips (NVSwitch
/// gen4, NVLink SHARP), NVLink 5 x18 per GPU (1.8 TB/s), 2x Xeon Platinum
/// 8570 (Emerald Rapids: 8 x DDR5-5600, 4 UPI at 20 GT/s, Intel ARK), 8x
/// ConnectX-7 400 Gb/s, 8x 3.84 TB U.2 NVMe.
const DGX_B200: NvSwitchBox = NvSwitchBox {
    name: "dgx-b200",
    description: PRESETS[7].1,
    host: "DGX B200",
    gpu: B200,
    nvlink: NvLinkGen::V5,
    nvlinks: 18,
    nvswitch: "NVSwitch gen4 x2 (NVLS)",
    nvswitch_chips: 2,
    cpu: "Xeon Platinum 8570",
    cpu_memory_gbps: ddr_gbps(8, 5600),
    sockets_link: LinkKind::Upi {
        mts: 20000,
        count: 4,
    },
    ..DGX_H100
};

/// 8 GPUs on one NVSwitch fabric, their PCIe tree as `spec.layout` says.
fn nvswitch_box(spec: &NvSwitchBox) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(spec.name);
    b.description(spec.description);
    let mut h = Host::new(&mut b, "host0", spec.host);
    let cpus = [
        h.cpu("", 0, spec.cpu, spec.cpu_memory_gbps),
        h.cpu("", 1, spec.cpu, spec.cpu_memory_gbps),
    ];
    h.b.link(cpus[0], cpus[1], spec.sockets_link);
    let nvs = h.node("nvswitch0".into(), NodeKind::NvSwitch, spec.nvswitch, 0);
    {
        let n = h.b.node_mut(nvs);
        n.chips = Some(spec.nvswitch_chips);
        n.reduction = spec.nvls;
        n.numa = None;
        n.socket = None;
    }
    let switch = format!("PCIe Gen{} switch", spec.pcie.number());
    let x16 = pcie(spec.pcie, 16);
    // A switch `id` under root complex `rc`, linked up to `up`.
    let add_switch = |h: &mut Host, id: String, rc: &str, socket: u32, up: NodeIx| {
        let sw = h.node(id, NodeKind::PcieSwitch, &switch, socket);
        h.under(sw, rc);
        h.b.link(sw, up, x16);
        sw
    };
    let gpu = |h: &mut Host, i: u32, rc: &str, socket: u32, sw: NodeIx| {
        let gx = h.gpu(format!("gpu{i}"), spec.gpu, socket);
        h.under(gx, rc);
        h.b.link(gx, sw, x16);
        h.b.link(gx, nvs, nvlink(spec.nvlink, spec.nvlinks));
    };
    let nic = |h: &mut Host, i: u32, rc: &str, socket: u32, sw: NodeIx| {
        let n = h.nic("", i, spec.nic, socket, ib(spec.nic_speed));
        h.under(n, rc);
        h.b.link(n, sw, x16);
    };
    let nvme = |h: &mut Host, i: u32, rc: &str, socket: u32, sw: NodeIx| {
        let d = h.node(
            format!("nvme{i}"),
            NodeKind::Storage,
            "NVMe U.2 3.84TB",
            socket,
        );
        h.under(d, rc);
        h.b.link(d, sw, pcie(PcieGen::Gen4, 4));
    };
    match spec.layout {
        PcieLayout::PairsNested => {
            for s in 0..4u32 {
                let socket = s / 2;
                let rc = format!("rc{s}");
                let up = cpus[socket as usize];
                let top = add_switch(&mut h, format!("pcisw{s}"), &rc, socket, up);
                let gsw = add_switch(&mut h, format!("pcisw{s}.0"), &rc, socket, top);
                for g in 0..2 {
                    gpu(&mut h, s * 2 + g, &rc, socket, gsw);
                }
                for n in 0..2 {
                    let nsw = add_switch(&mut h, format!("pcisw{s}.{}", n + 1), &rc, socket, top);
                    nic(&mut h, s * 2 + n, &rc, socket, nsw);
                }
                nvme(&mut h, s, &rc, socket, top);
            }
        }
        PcieLayout::PerGpu => {
            for i in 0..8u32 {
                let socket = i / 4;
                let rc = format!("rc{i}");
                let up = cpus[socket as usize];
                let sw = add_switch(&mut h, format!("pcisw{i}"), &rc, socket, up);
                let gsw = add_switch(&mut h, format!("pcisw{i}.0"), &rc, socket, sw);
                gpu(&mut h, i, &rc, socket, gsw);
                nic(&mut h, i, &rc, socket, sw);
                if i % 2 == 0 {
                    nvme(&mut h, i / 2, &rc, socket, sw);
                }
            }
        }
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
        // Grace: up to 500 GB/s of LPDDR5X (NVIDIA Grace CPU datasheet).
        let cpus = [h.cpu(&p, 0, "Grace", 500.0), h.cpu(&p, 1, "Grace", 500.0)];
        // The two Graces of a tray share the tray's memory space; their link
        // is not in NVIDIA's published figures, so it is an SMP link of
        // unknown speed (classified SYS, like any socket-to-socket link).
        h.b.link(cpus[0], cpus[1], LinkKind::Smp);
        for g in 0..4u32 {
            let socket = g / 2;
            let gpu = h.gpu(format!("{p}gpu{g}"), B200_GB200, socket);
            // A GB200 superchip is one Grace and two B200s joined by
            // NVLink-C2C at 900 GB/s (NVIDIA's superchip figure): the
            // Grace's C2C, the GH200's 900 GB/s, shared by its two GPUs,
            // each on half of it, 225 GB/s per direction (one GPU copies
            // at 193-201 GB/s: Azure ND GB200 v6 nvbandwidth).
            h.b.push_link(
                Link::new(gpu, cpus[socket as usize], LinkKind::NvLinkC2c)
                    .with_bandwidth(LinkKind::NvLinkC2c.bandwidth() / 2.0),
            );
            h.b.link(gpu, nvs, nvlink(NvLinkGen::V5, 18));
            let nic = h.nic(&p, g, "ConnectX-7 NDR", socket, ib(IbSpeed::Ndr));
            h.b.link(nic, cpus[socket as usize], pcie(PcieGen::Gen5, 16));
        }
    }
    b
}

/// One GH200 480GB superchip (NVIDIA GH200 datasheet: a 72-core Grace
/// with up to 480 GB of LPDDR5X at up to 500 GB/s, an H100 with 96 GB of
/// HBM3 at 4 TB/s, joined by NVLink-C2C at 900 GB/s, 450 each way), as
/// in the single-superchip MGX servers (Supermicro ARS-111GL-NHR, HPE
/// ProLiant DL384 Gen12 with one superchip): one ConnectX-7 NDR NIC on the
/// Grace's PCIe Gen5 x16 lanes. No NVLink to other GPUs: nodes of it meet
/// over the network (`--nodes`).
fn gh200() -> TopologyBuilder {
    let mut b = TopologyBuilder::new("gh200");
    b.description(PRESETS[12].1);
    let mut h = Host::new(&mut b, "host0", "GH200 superchip server");
    let cpu = h.cpu("", 0, "Grace", 500.0);
    let gpu = h.gpu("gpu0".into(), GH200_480GB, 0);
    h.b.link(gpu, cpu, LinkKind::NvLinkC2c);
    let nic = h.nic("", 0, "ConnectX-7 NDR", 0, ib(IbSpeed::Ndr));
    h.b.link(nic, cpu, pcie(PcieGen::Gen5, 16));
    b
}

/// A node of four GH200 120GB superchips (Jülich Supercomputing Centre,
/// JUPITER Booster configuration: "NVLink 4 GPU-to-GPU links, 300 GB/s
/// between pairs of GPUs (150 GB/s per direction)", "cNVLink between CPUs
/// (pairs connected with 100 GB/s per direction)", Grace with 120 GB
/// LPDDR5X at 512 GB/s, H100 with 96 GB HBM3 at 4 TB/s, NVLink-C2C 900 GB/s,
/// "4x InfiniBand NDR200 (Connect-X7)"; CSCS Alps, eth-cscs/cscs-docs
/// `docs/alps/hardware.md` and its node schematic: the same GPU links,
/// "~75GB/s per direction" between Graces, four Slingshot 200 Gb/s NICs,
/// each on a Grace's PCIe Gen5 x16; `nvidia-smi topo -m` on an HPE Cray EX
/// GH200 node shows NV6 for every GPU pair, no NVSwitch). The NICs are
/// NDR200, as JUPITER's (Slingshot 200 Gb/s runs at the same rate). Each
/// Grace's memory is taken at the GH200 datasheet's 500 GB/s, as in
/// [`gh200`], not JSC's 512.
fn quad_gh200() -> TopologyBuilder {
    let mut b = TopologyBuilder::new("quad-gh200");
    b.description(PRESETS[13].1);
    let mut h = Host::new(&mut b, "host0", "4x GH200 node");
    let cpus: Vec<NodeIx> = (0..4).map(|i| h.cpu("", i, "Grace", 500.0)).collect();
    let mut gpus = Vec::new();
    for (i, &cpu) in cpus.iter().enumerate() {
        let i = i as u32;
        let gpu = h.gpu(format!("gpu{i}"), GH200_120GB, i);
        h.b.link(gpu, cpu, LinkKind::NvLinkC2c);
        let nic = h.nic("", i, "ConnectX-7 NDR200", i, ib(IbSpeed::Ndr200));
        h.b.link(nic, cpu, pcie(PcieGen::Gen5, 16));
        gpus.push(gpu);
    }
    for a in 0..4 {
        for c in a + 1..4 {
            h.b.link(gpus[a], gpus[c], nvlink(NvLinkGen::V4, 6));
            h.b.push_link(Link::new(cpus[a], cpus[c], LinkKind::Smp).with_bandwidth(100.0));
        }
    }
    b
}

fn pcie_8gpu() -> TopologyBuilder {
    let mut b = TopologyBuilder::new("pcie-8gpu");
    b.description(PRESETS[6].1);
    let mut h = Host::new(&mut b, "host0", "2-socket PCIe GPU server");
    // Ice Lake-SP: 8 channels of DDR4-3200 per socket (Intel ARK).
    let mem = ddr_gbps(8, 3200);
    let cpus = [
        h.cpu("", 0, "Xeon (Ice Lake-SP)", mem),
        h.cpu("", 1, "Xeon (Ice Lake-SP)", mem),
    ];
    h.b.link(
        cpus[0],
        cpus[1],
        LinkKind::Upi {
            mts: 11200,
            count: 3,
        },
    );
    // Ice Lake-SP gives each x16 root port its own host bridge: each switch
    // is under its own root complex, so GPU0 to GPU2 (the other switch of
    // socket 0) is NODE, as on the `pcie-server` discovery fixture.
    for s in 0..4u32 {
        let socket = s / 2;
        let rc = format!("rc{s}");
        let sw = h.node(
            format!("pcisw{s}"),
            NodeKind::PcieSwitch,
            "PCIe Gen4 switch",
            socket,
        );
        h.under(sw, &rc);
        h.b.link(sw, cpus[socket as usize], pcie(PcieGen::Gen4, 16));
        for g in 0..2 {
            let gpu = h.gpu(format!("gpu{}", s * 2 + g), A100_PCIE_80GB, socket);
            h.under(gpu, &rc);
            h.b.link(gpu, sw, pcie(PcieGen::Gen4, 16));
        }
        let nic = h.nic("", s, "ConnectX-6 HDR", socket, ib(IbSpeed::Hdr));
        h.under(nic, &rc);
        h.b.link(nic, sw, pcie(PcieGen::Gen4, 16));
    }
    b
}

/// One GeForce RTX 4090 (NVIDIA: PCIe Gen4 x16, 24 GB GDDR6X at 1,008 GB/s)
/// on the CPU's own PCIe lanes of a Core i9-13900K (Intel ARK: one socket,
/// 2 channels of DDR5-5600, 89.6 GB/s); no NIC, no NVLink.
fn workstation_rtx4090() -> TopologyBuilder {
    let mut b = TopologyBuilder::new("workstation-rtx4090");
    b.description(PRESETS[8].1);
    let mut h = Host::new(&mut b, "host0", "workstation");
    let cpu = h.cpu("", 0, "Core i9-13900K", ddr_gbps(2, 5600));
    let gpu = h.gpu("gpu0".into(), RTX_4090, 0);
    h.b.link(gpu, cpu, pcie(PcieGen::Gen4, 16));
    b
}
