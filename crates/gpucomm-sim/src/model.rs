//! Hardware parameters and efficiency factors, each with its source.
//!
//! Nothing here is fitted to a calibration case: every figure is a line
//! rate from a standard or datasheet, a protocol overhead computed from a
//! packet format, or a constant published in NCCL's source. `docs/sim.md`
//! lists them in one table.
//!
//! Machines are not here: every machine comes from a gpucomm-topo
//! [`Topology`](gpucomm_topo::Topology) (preset, cluster, file or
//! discovered), read by [`Machine::from_topology`](crate::Machine::from_topology);
//! the hardware figures it needs beyond links (GPU architecture, device
//! and host memory bandwidth) are attributes of topo's nodes.

use crate::SimError;
use crate::SimTime;
use crate::exec::Overheads;
use crate::machine::Engine;
use gpucomm_algo::Collective;

/// GPU architecture, which decides NCCL's per-link bandwidth figures and
/// NVLS efficiency: gpucomm-topo's, an attribute of its GPU nodes.
pub use gpucomm_topo::GpuArch as Arch;

/// Latency of one NVLink traversal incl. port logic, us (gpucomm-topo's
/// catalog assumption; order of magnitude, no standard gives it).
pub const NVLINK_HOP_US: f64 = 0.15;
/// Latency of one PCIe traversal incl. switch/root port, us (same source).
pub const PCIE_HOP_US: f64 = 0.25;
/// Latency of a NIC port (serialisation + HCA), us (same source).
pub const NET_HOP_US: f64 = 0.6;
/// Latency through the switched network core (one to three InfiniBand
/// switch hops of ~130 ns each, NVIDIA Quantum QM8700 datasheet: 130 ns port-to-port), us.
pub const NET_SWITCH_US: f64 = 0.4;
/// Latency of an inter-socket link, us (topo catalog assumption).
pub const SMP_HOP_US: f64 = 0.1;

/// PCIe per-direction data rate in GB/s after line coding (PCI-SIG base
/// specifications: 8b/10b for Gen1-2, 128b/130b for Gen3-5, FLIT mode
/// 242/256 for Gen6).
pub fn pcie_gbps(generation: u8, width: u32) -> Result<f64, SimError> {
    let per_lane = match generation {
        1 => 2.5 * 0.8 / 8.0,
        2 => 5.0 * 0.8 / 8.0,
        3 => 8.0 * 128.0 / 130.0 / 8.0,
        4 => 16.0 * 128.0 / 130.0 / 8.0,
        5 => 32.0 * 128.0 / 130.0 / 8.0,
        6 => 64.0 * 242.0 / 256.0 / 8.0,
        _ => {
            return Err(SimError::Model(format!(
                "unknown PCIe generation {generation}"
            )));
        }
    };
    Ok(per_lane * f64::from(width))
}

/// NVLink per-link, per-direction data rate in GB/s (NVIDIA P100, V100,
/// A100, H100 whitepapers; Blackwell technical brief).
pub fn nvlink_link_gbps(generation: u8) -> Result<f64, SimError> {
    Ok(match generation {
        1 => 20.0,
        2..=4 => 25.0,
        5 => 50.0,
        _ => {
            return Err(SimError::Model(format!(
                "unknown NVLink generation {generation}"
            )));
        }
    })
}

/// Payload efficiency of an NVLink 1/2 packet carrying 256 bytes: one
/// 16-byte header flit per up to 16 data flits of 16 bytes (NVLink packet
/// format: Foley & Danskin, "Ultra-Performance Pascal GPU and NVLink
/// Interconnect", IEEE Micro 37(2), 2017).
pub const NVLINK_FLIT_EFFICIENCY: f64 = 256.0 / (256.0 + 16.0);

/// Payload efficiency of an NVLink 3+ packet carrying the 256 bytes a copy
/// engine writes: 32 bytes of overhead per packet. Source: the NCCL
/// maintainer on NVLink 3 (NVIDIA/nccl-tests issue 149): "a line rate of
/// 25GB/s (in each direction) which converts to ~20GB/s effective bandwidth
/// with a 128B payload size [...] SMs are limited to 128B payload size, when
/// Copy Engines can use 256B", i.e. 128 / (128 + 32); NCCL's own per-link
/// figures for SM-driven copies agree (topo.h: SM80 20.0 and SM90 20.6 of
/// 25 GB/s, SM100 40.1 of 50).
pub const NVLINK3_CE_EFFICIENCY: f64 = 256.0 / (256.0 + 32.0);

/// GB/s a copy engine moves from host memory to its GPU over NVLink-C2C
/// where the link does not bind: 337.55, the median of three published
/// GH200 480GB runs (host to device, pinned): bandwidthTest 335.3 GB/s for
/// 32 MB (slitvinov/grace `grace/README.md`), 343.7 once the host copy
/// start is taken off; nvbandwidth `host_to_device_memcpy_ce` 337.55
/// (microsoft/superbenchmark
/// `tests/benchmarks/micro_benchmarks/test_nvbandwidth.py`, output of
/// v0.6) and 299.51 (a third host, v0.5 under `perf stat`; repository not
/// named by the search index). A GH200's link (450 GB/s per direction) at
/// NVLink's packet efficiency ([`NVLINK3_CE_EFFICIENCY`]) would carry 400:
/// the copy engines bind there, not the link. A measurement, not a
/// protocol figure; on Blackwell superchips the same (an **assumption**:
/// a GB200's link binds first, [`c2c_copy_gbps`]).
pub const C2C_CE_TO_GPU_GBPS: f64 = 337.55;

/// GB/s a copy engine moves from its GPU to host memory over NVLink-C2C
/// where the link does not bind (writes to the Grace's memory): 295.23,
/// the median of the same three runs' device-to-host rates (bandwidthTest
/// 291.6 for 32 MB, 297.9 without the copy start; nvbandwidth 295.23 and
/// 272.94). Writes are the slower direction here, where on PCIe hosts
/// reads are.
pub const C2C_CE_FROM_GPU_GBPS: f64 = 295.23;

/// GB/s copy engines move over an NVLink-C2C link of `link_gbps` per
/// direction toward the GPU (`to_gpu`) or from it: the link at NVLink's
/// packet efficiency ([`NVLINK3_CE_EFFICIENCY`]; NVLink-C2C carries the
/// NVLink protocol), at most the engines' rate ([`C2C_CE_TO_GPU_GBPS`],
/// [`C2C_CE_FROM_GPU_GBPS`]). A GH200 (450 GB/s each way) is bound by its
/// engines; a GB200's GPU, on half of its Grace's C2C (225 GB/s each way),
/// by the link: 200 GB/s both ways, where Azure's ND GB200 v6 measured 201
/// host to device and 193 device to host with nvbandwidth
/// (Azure/AI-benchmarking-guide `Azure_Results/ND_GB200_v6_results.md`).
///
/// ```
/// use gpucomm_sim::model::c2c_copy_gbps;
/// assert_eq!(c2c_copy_gbps(450.0, true), 337.55);
/// assert!((c2c_copy_gbps(225.0, true) - 200.0).abs() < 1e-9);
/// ```
pub fn c2c_copy_gbps(link_gbps: f64, to_gpu: bool) -> f64 {
    let engines = if to_gpu {
        C2C_CE_TO_GPU_GBPS
    } else {
        C2C_CE_FROM_GPU_GBPS
    };
    (link_gbps * NVLINK3_CE_EFFICIENCY).min(engines)
}

/// Copy-engine payload efficiency of an NVLink of generation `generation`:
/// [`NVLINK_FLIT_EFFICIENCY`] for NVLink 1 and 2, [`NVLINK3_CE_EFFICIENCY`]
/// from NVLink 3 (A100) on.
pub fn nvlink_ce_efficiency(generation: u8) -> f64 {
    if generation <= 2 {
        NVLINK_FLIT_EFFICIENCY
    } else {
        NVLINK3_CE_EFFICIENCY
    }
}

/// PCIe TLP efficiency of DMA copies: 128-byte payloads (the read
/// completion boundary of root ports, PCIe Base Spec 2.3.1.1, and the
/// common Max_Payload_Size) with 20 bytes of framing (4-byte STP token),
/// 12-byte completion/3DW header and 4-byte LCRC (PCIe 3.0 Base Spec 4.2.2, 3.3).
pub const PCIE_TLP_EFFICIENCY: f64 = 128.0 / (128.0 + 20.0);

/// InfiniBand payload efficiency with a 4096-byte MTU: LRH 8 + BTH 12 +
/// ICRC 4 + VCRC 2 bytes per packet (InfiniBand Architecture Spec vol. 1,
/// ch. 5-9).
pub const IB_EFFICIENCY: f64 = 4096.0 / (4096.0 + 26.0);

/// NCCL's effective bandwidth of one NVLink for its kernels, GB/s
/// (NVIDIA/nccl `src/graph/topo.h`: SM60 18.0, SM70 20.0, SM80 20.0,
/// SM90 20.6, SM100 40.1).
pub fn nccl_nvlink_gbps(arch: Arch) -> f64 {
    match arch {
        Arch::Pascal => 18.0,
        Arch::Volta | Arch::Ampere => 20.0,
        Arch::Ada => 12.0, // SM86_NVLINK_BW
        Arch::Hopper => 20.6,
        Arch::Blackwell => 40.1,
    }
}

/// NCCL's PCIe bandwidth for its kernels, GB/s for x16: `width * gen / 80`
/// with gen 60/120/240/480 for Gen3/4/5/6 (NVIDIA/nccl `src/graph/xml.cc`
/// kvDictPciGen and `topo.cc`), i.e. 12, 24, 48, 96 GB/s.
pub fn nccl_pcie_gbps(generation: u8, width: u32) -> f64 {
    let g = match generation {
        1 => 15.0,
        2 => 30.0,
        3 => 60.0,
        4 => 120.0,
        5 => 240.0,
        _ => 480.0,
    };
    f64::from(width) * g / 80.0
}

/// NCCL's NVLS efficiency (NVIDIA/nccl `src/graph/tuning.cc`
/// `nvlsEfficiency`: Hopper 0.85, Blackwell 0.74; 0 before Hopper).
pub fn nvls_efficiency(arch: Arch) -> f64 {
    match arch {
        Arch::Hopper => 0.85,
        Arch::Blackwell => 0.74,
        _ => 0.0,
    }
}

/// NCCL's default number of NVLS channels (`NCCL_NVLS_NCHANNELS` unset;
/// NVIDIA/nccl `src/transport/nvls.cc`, `ncclNvlsTuning`): 16 on Hopper;
/// on Blackwell (compute capability 10.0) 24 inside one NVLink domain and
/// 32 across nodes (NCCL 2.27 on; 2.25 and 2.26 took 32 for both). NCCL's
/// model scales NVLS bandwidth by `(nChannels - 1) / nChannels`
/// (tuning.cc), and each channel takes its share of the buffer.
///
/// ```
/// use gpucomm_sim::model::{nvls_channels, Arch};
/// assert_eq!(nvls_channels(Arch::Hopper, 4), 16.0);
/// assert_eq!(nvls_channels(Arch::Blackwell, 1), 24.0);
/// assert_eq!(nvls_channels(Arch::Blackwell, 2), 32.0);
/// ```
pub fn nvls_channels(arch: Arch, nodes: usize) -> f64 {
    match (arch >= Arch::Blackwell, nodes > 1) {
        (false, _) => 16.0,
        (true, false) => 24.0,
        (true, true) => 32.0,
    }
}

/// NCCL's largest NVLS group (`NCCL_MAX_NVLS_ARITY`, NVIDIA/nccl
/// `src/include/device.h`): the NVLS graph has at most this many channels.
pub const NCCL_MAX_NVLS_ARITY: usize = 32;

/// The most GPUs per node CollNet (Direct and Chain) runs on:
/// `NCCL_MAX_DIRECT_ARITY + 1` (NVIDIA/nccl `src/include/device.h`: 7;
/// `src/enqueue.cc` `updateCollCostTable` skips both CollNets when
/// `maxLocalRanks` is above it, "CollNetDirect is only supported for up to
/// 8 local GPUs").
pub const NCCL_MAX_COLLNET_LOCAL_RANKS: usize = 8;

/// NCCL's per-channel speeds for graphs inside a node, GB/s, fastest
/// first (NVIDIA/nccl `src/graph/search.cc`: `speedArrayIntra`, and
/// `sm90SpeedArrayIntra` / `sm100SpeedArrayIntra` from Hopper /
/// Blackwell).
pub fn nccl_intra_speeds(arch: Arch) -> &'static [f64] {
    match arch {
        Arch::Hopper => &[
            60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0,
        ],
        Arch::Blackwell => &[
            90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
        ],
        _ => &NCCL_SPEEDS_INTRA,
    }
}

/// The NVLS graph NCCL's topology search finds on one node
/// ([`nccl_nvls_graph`]), which its model rates NVLS from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NcclNvlsGraph {
    /// Channels: one per GPU pulling from the switch, at most
    /// [`NCCL_MAX_NVLS_ARITY`].
    pub channels: usize,
    /// `bwIntra`, GB/s per channel.
    pub bw_intra: f64,
    /// `bwInter`, GB/s per channel (on one node the search raises it
    /// freely, no path using it).
    pub bw_inter: f64,
}

/// NCCL's NVLS graph on one node of `gpus` GPUs of `arch` that each reach
/// the NVSwitch at `gpu_gbps` (NCCL's per-link figure times the links,
/// [`nccl_nvlink_gbps`]), as NVIDIA/nccl `src/graph/search.cc` finds it
/// (`ncclTopoCompute`, `ncclTopoSearchTryNvls`): a channel per GPU (at
/// most [`NCCL_MAX_NVLS_ARITY`], all of them required on one node); each
/// channel takes its speed on every GPU's link to the switch and twice on
/// its own GPU's, both ways, so `bwIntra` is the fastest of the node
/// speeds ([`nccl_intra_speeds`]) with `(channels + 1) x speed` within a
/// link (the search starts at the first speed within the link whose
/// channels fit in `link x gpus / (gpus - 1)`); its second pass then
/// raises `bwInter` a speed at a time while it is below twice `bwIntra`.
/// `None` with fewer than two GPUs or no speed that fits.
///
/// ```
/// use gpucomm_sim::model::{nccl_nvls_graph, Arch};
/// // HGX H100: 18 NVLinks x 20.6 GB/s to the switches.
/// let g = |n| nccl_nvls_graph(Arch::Hopper, 18.0 * 20.6, n).unwrap();
/// assert_eq!((g(4).channels, g(4).bw_intra, g(4).bw_inter), (4, 60.0, 60.0));
/// assert_eq!((g(6).bw_intra, g(6).bw_inter), (50.0, 60.0));
/// assert_eq!((g(8).bw_intra, g(8).bw_inter), (40.0, 60.0));
/// ```
pub fn nccl_nvls_graph(arch: Arch, gpu_gbps: f64, gpus: usize) -> Option<NcclNvlsGraph> {
    if gpus < 2 || !gpu_gbps.is_finite() || gpu_gbps <= 0.0 {
        return None;
    }
    let speeds = nccl_intra_speeds(arch);
    let channels = gpus.min(NCCL_MAX_NVLS_ARITY);
    let ch = channels as f64;
    // Non-ring patterns may exceed the link's total by gpus / (gpus - 1).
    let total = gpu_gbps * gpus as f64 / (gpus as f64 - 1.0);
    let start = speeds
        .iter()
        .position(|&s| s <= gpu_gbps && s * ch <= total)?;
    nvls_search(speeds, channels, start, gpu_gbps, f64::INFINITY)
}

/// The NVLS search's two passes from speed `start` of `speeds`: `bwIntra`
/// the first speed with `(channels + 1) x speed` within a GPU's link
/// `gpu_gbps` (NCCL rounds the links' remaining bandwidth to 1e-3), then
/// `bwInter` raised a speed at a time while below twice `bwIntra` and the
/// next speed is within `inter_cap`.
fn nvls_search(
    speeds: &[f64],
    channels: usize,
    start: usize,
    gpu_gbps: f64,
    inter_cap: f64,
) -> Option<NcclNvlsGraph> {
    let ch = channels as f64;
    let intra = start
        + speeds[start..]
            .iter()
            .position(|&s| (ch + 1.0) * s <= gpu_gbps + 1e-3)?;
    let bw_intra = speeds[intra];
    let mut inter = intra;
    while inter > 0 && speeds[inter] < 2.0 * bw_intra && speeds[inter - 1] <= inter_cap {
        inter -= 1;
    }
    Some(NcclNvlsGraph {
        channels,
        bw_intra,
        bw_inter: speeds[inter],
    })
}

/// NCCL's NVLS graph across nodes (NVLSTree's), on nodes of GPUs of
/// `arch` that each reach the NVSwitch at `gpu_gbps`, with `heads` GPUs
/// that have a NIC of their own at `nic_path_gbps` (the NIC's rate and the
/// PCIe link before it, NCCL's [`nccl_pcie_gbps`]), as
/// NVIDIA/nccl `src/graph/search.cc` finds it: a channel per head (NCCL's
/// NVLS search "only tries to find NIC:GPU combinations to compute the
/// heads"), each taking its speed on every GPU's link to the switch and
/// twice on its head's; the speeds are the inter-node ones
/// ([`nccl_inter_speeds`]) from the fastest within the NIC's path, so
/// `bwIntra` is the first with `(channels + 1) x speed` within the link;
/// the second pass raises `bwInter` a speed at a time while it is below
/// twice `bwIntra` and within the NIC's path. `None` without a head or a
/// speed that fits.
///
/// ```
/// use gpucomm_sim::model::{nccl_nvls_graph_across, Arch};
/// // DGX H100: 8 heads, 9 x 40 <= 370.8; bwInter raised to 48, the NIC's path.
/// let g = nccl_nvls_graph_across(Arch::Hopper, 18.0 * 20.6, 8, 48.0).unwrap();
/// assert_eq!((g.channels, g.bw_intra, g.bw_inter), (8, 40.0, 48.0));
/// ```
pub fn nccl_nvls_graph_across(
    arch: Arch,
    gpu_gbps: f64,
    heads: usize,
    nic_path_gbps: f64,
) -> Option<NcclNvlsGraph> {
    if heads == 0 || !gpu_gbps.is_finite() || gpu_gbps <= 0.0 {
        return None;
    }
    let speeds = nccl_inter_speeds(arch);
    let start = speeds.iter().position(|&s| s <= nic_path_gbps)?;
    let channels = heads.min(NCCL_MAX_NVLS_ARITY);
    nvls_search(speeds, channels, start, gpu_gbps, nic_path_gbps)
}

impl NcclNvlsGraph {
    /// NCCL's NVLS bandwidth on one node, GB/s, as `tuning.cc` rates it
    /// (`nvlsEfficiency` and `(nChannels - 1) / nChannels` on `bwIntra`,
    /// twice for all_reduce, which "pipelines two operations", `(ppn - 1)
    /// / ppn` otherwise; at most `bwInter`; times the channels): the bus
    /// bandwidth of an all_reduce (the algorithm bandwidth is `ranks / (2
    /// (ranks - 1))` of it), and for all_gather and reduce_scatter the
    /// figure NCCL's model takes as their algorithm bandwidth.
    ///
    /// ```
    /// use gpucomm_sim::model::{nccl_nvls_graph, Arch};
    /// // NCCL 2.29's tuning table on 4 and 6 H100s: all_reduce 160.0 and
    /// // 216.0 GB/s algorithm bandwidth, all_gather 114.8 and 177.1.
    /// let g = |n| nccl_nvls_graph(Arch::Hopper, 18.0 * 20.6, n).unwrap();
    /// let ar = |n: usize| g(n).gbps(Arch::Hopper, true, n) * n as f64 / (2.0 * (n as f64 - 1.0));
    /// assert!((ar(4) - 160.0).abs() < 0.05 && (ar(6) - 216.0).abs() < 0.05);
    /// assert!((g(4).gbps(Arch::Hopper, false, 4) - 114.8).abs() < 0.05);
    /// assert!((g(6).gbps(Arch::Hopper, false, 6) - 177.1).abs() < 0.05);
    /// ```
    pub fn gbps(&self, arch: Arch, all_reduce: bool, ppn: usize) -> f64 {
        let ch = self.channels as f64;
        let mut intra = self.bw_intra * nvls_efficiency(arch) * (ch - 1.0) / ch;
        if all_reduce {
            intra *= 2.0;
        } else {
            let ppn = ppn.max(1) as f64;
            intra *= (ppn - 1.0) / ppn;
        }
        ch * intra.min(self.bw_inter)
    }

    /// NCCL's NVLSTree bus bandwidth on `nodes` nodes, GB/s, as
    /// `tuning.cc` rates it from this graph (the graph across nodes,
    /// [`nccl_nvls_graph_across`]): per channel the least of `bwIntra` x
    /// `nvlsEfficiency` x `(nChannels - 1) / nChannels` x 2 (all_reduce),
    /// `bwInter` (twice on two nodes: "Handle 2 node case of NVLSTree") and
    /// NCCL's per-channel ceiling ([`nccl_channel_caps`]), times the
    /// channels; 0 below two channels ("NVLS/NVLStree needs at least 2
    /// channels"). The algorithm bandwidth is `ranks / (2 (ranks - 1))` of
    /// it.
    ///
    /// ```
    /// use gpucomm_sim::model::{nccl_nvls_graph_across, Arch};
    /// let g = nccl_nvls_graph_across(Arch::Hopper, 18.0 * 20.6, 8, 48.0).unwrap();
    /// // 8 x min(40 x 0.85 x 7/8 x 2, 96, 57.7) on 2 nodes; 8 x 45.5 beyond.
    /// assert!((g.tree_bus_gbps(Arch::Hopper, 2) - 461.6).abs() < 1e-9);
    /// assert!((g.tree_bus_gbps(Arch::Hopper, 4) - 364.0).abs() < 1e-9);
    /// ```
    pub fn tree_bus_gbps(&self, arch: Arch, nodes: usize) -> f64 {
        if self.channels < 2 {
            return 0.0;
        }
        let ch = self.channels as f64;
        let intra = self.bw_intra * nvls_efficiency(arch) * (ch - 1.0) / ch * 2.0;
        let inter = self.bw_inter * if nodes <= 2 { 2.0 } else { 1.0 };
        ch * intra
            .min(inter)
            .min(nccl_channel_caps(arch, nodes).nvls_tree)
    }
}

/// NCCL's largest NVLS chunk, bytes per head and channel
/// (`NCCL_NVLS_CHUNKSIZE` default, NVIDIA/nccl `src/transport/nvls.cc`).
pub const NVLS_MAX_CHUNK: u64 = 128 * 1024;

/// The chunk NCCL's NVLS all_reduce runs for `bytes` on `channels`
/// channels of `heads` heads (NVIDIA/nccl `src/enqueue.cc`
/// `calcCollChunking`): with `ops = channels x heads` chunks in flight,
/// 128 KiB, 64 KiB below `64 x ops x chunk` bytes, 32 KiB below `8 x ops x
/// chunk`, 16 KiB below `2 x ops x chunk`, each test on the chunk the
/// previous one left.
///
/// ```
/// use gpucomm_sim::model::nvls_chunk;
/// // 16 channels x 8 heads: 64 KiB chunks below 1 GiB, 16 KiB at 1 MiB.
/// assert_eq!(nvls_chunk(8 << 30, 16, 8), 128 * 1024);
/// assert_eq!(nvls_chunk(128 << 20, 16, 8), 64 * 1024);
/// assert_eq!(nvls_chunk(1 << 20, 16, 8), 16 * 1024);
/// ```
pub fn nvls_chunk(bytes: u64, channels: u64, heads: u64) -> u64 {
    let ops = channels.max(1) * heads.max(1);
    let mut chunk = NVLS_MAX_CHUNK;
    for (times, smaller) in [(64, 65_536), (8, 32_768), (2, 16_384)] {
        if bytes < times * ops * chunk && chunk > smaller {
            chunk = smaller;
        }
    }
    chunk
}

/// Whether NCCL moves Simple-protocol data over NVLink by reads, the
/// receiver pulling each slice from the sender's buffer: between GPUs of
/// compute capability 8.0 only (A100; NVIDIA/nccl `src/graph/paths.cc`,
/// `ncclTopoCheckP2p`: "Enable P2P Read for Ampere/NVLink only"), and for
/// the Simple protocol only (the sender keeps the Simple buffer when it
/// is read, `src/transport/p2p.cc`; LL and LL128 always write).
pub fn nccl_p2p_read(arch: Arch) -> bool {
    arch == Arch::Ampere
}

/// NCCL's speeds per ring channel inside a node before Hopper, GB/s
/// (NVIDIA/nccl `src/graph/search.cc` `speedArrayIntra`).
const NCCL_SPEEDS_INTRA: [f64; 13] = [
    40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
];

/// NCCL's ring channels inside one NVSwitch node of GPUs before Hopper
/// that each reach the switch at `gpu_gbps` (NCCL's per-link figure times
/// the links, [`nccl_nvlink_gbps`]), as NCCL 2.18 sets them up
/// (NVIDIA/nccl `src/graph/search.cc` `ncclTopoCompute`, `connect.cc`
/// `ncclTopoPostset`): the search takes the fastest speed whose channels
/// (at most `MAXCHANNELS / 2` = 16, each taking its speed on every GPU's
/// link) use the whole bandwidth, else the speed that uses the most of
/// it; at 25 GB/s or more it duplicates the channels at half the speed;
/// the communicator then doubles them (at most `MAXCHANNELS` = 32).
///
/// ```
/// use gpucomm_sim::model::nccl_nvswitch_ring_channels;
/// // DGX A100: 12 NVLinks x 20 GB/s: 6 channels at 40, 12, then 24.
/// assert_eq!(nccl_nvswitch_ring_channels(240.0), 24);
/// // Four links: 2 channels at 40, 4, then 8.
/// assert_eq!(nccl_nvswitch_ring_channels(80.0), 8);
/// ```
pub fn nccl_nvswitch_ring_channels(gpu_gbps: f64) -> u16 {
    const MAX: f64 = 16.0;
    let (mut n, s) = nvswitch_ring_search(&NCCL_SPEEDS_INTRA, gpu_gbps);
    if s >= 25.0 {
        n = (2.0 * n).min(MAX);
    }
    (2.0 * n).min(32.0) as u16
}

/// The bus bandwidth NCCL's search gives rings (and trees) inside one
/// NVSwitch node of GPUs of `arch` that each reach the switch at
/// `gpu_gbps`, `nChannels x bwIntra`, GB/s, which NCCL's model rates them
/// from on one node: the search of [`nccl_nvswitch_ring_channels`] over
/// the node speeds of `arch` ([`nccl_intra_speeds`]); duplicating the
/// channels halves their speed, so the product stays.
///
/// ```
/// use gpucomm_sim::model::{nccl_nvswitch_ring_bus_gbps, Arch};
/// // HGX H100, 18 x 20.6 = 370.8 GB/s: 6 channels at 60.
/// assert_eq!(nccl_nvswitch_ring_bus_gbps(Arch::Hopper, 18.0 * 20.6), 360.0);
/// // DGX A100, 12 x 20: 6 at 40, the whole link.
/// assert_eq!(nccl_nvswitch_ring_bus_gbps(Arch::Ampere, 240.0), 240.0);
/// ```
pub fn nccl_nvswitch_ring_bus_gbps(arch: Arch, gpu_gbps: f64) -> f64 {
    let (n, s) = nvswitch_ring_search(nccl_intra_speeds(arch), gpu_gbps);
    n * s
}

/// NCCL's ring search on one NVSwitch node (see
/// [`nccl_nvswitch_ring_channels`]): `(channels, speed)` before
/// duplication, `(1, 0)` where no speed fits.
fn nvswitch_ring_search(speeds: &[f64], gpu_gbps: f64) -> (f64, f64) {
    const MAX: f64 = 16.0;
    let mut best = (0.0, 0.0); // (channels, speed)
    for &s in speeds {
        if s > gpu_gbps {
            continue;
        }
        // The search lowers the speed only while the next is above 0.49 of
        // the best found.
        if best.0 > 0.0 && s / best.1 <= 0.49 {
            break;
        }
        let n = (gpu_gbps / s).floor().min(MAX);
        if n * s > best.0 * best.1 {
            best = (n, s);
        }
        if n * s >= gpu_gbps {
            break;
        }
    }
    if best.0 > 0.0 { best } else { (1.0, 0.0) }
}

/// The largest point-to-point operation, bytes per peer, that NCCL moves
/// with LL (`NCCL_P2P_LL_THRESHOLD` default, NVIDIA/nccl `src/enqueue.cc`;
/// 2.24 on multiply it by the channels a peer gets, `p2pnChannelsPerPeer`,
/// which the simulator does not: docs/sim.md, "What is not modeled");
/// larger ones move with Simple, whatever its tuner would pick.
pub const NCCL_P2P_LL_THRESHOLD: u64 = 16384;

/// The protocol NCCL moves a point-to-point operation of `peer_bytes`
/// with: LL up to [`NCCL_P2P_LL_THRESHOLD`] where its connections have LL
/// buffers (`ll_buffers`: none where `NCCL_PROTO` excludes LL, and none
/// for a peer over the network, whose point-to-point connections share
/// Simple buffers unless `NCCL_ALLOC_P2P_NET_LL_BUFFERS=1`,
/// `src/transport/net.cc`), else Simple.
///
/// ```
/// use gpucomm_sim::model::{nccl_p2p_protocol, Protocol};
/// assert_eq!(nccl_p2p_protocol(16384, true), Protocol::Ll);
/// assert_eq!(nccl_p2p_protocol(16385, true), Protocol::Simple);
/// assert_eq!(nccl_p2p_protocol(8, false), Protocol::Simple);
/// ```
pub fn nccl_p2p_protocol(peer_bytes: u64, ll_buffers: bool) -> Protocol {
    if ll_buffers && peer_bytes <= NCCL_P2P_LL_THRESHOLD {
        Protocol::Ll
    } else {
        Protocol::Simple
    }
}

/// NCCL's chunk for point-to-point transfers over NVLink, bytes
/// (`NCCL_P2P_NVL_CHUNKSIZE` default, NVIDIA/nccl `src/init.cc`).
pub const NCCL_P2P_NVL_CHUNK: u64 = 512 * 1024;

/// NCCL 2.18's channels for one point-to-point operation (a send or a
/// receive) of `bytes` inside one node of `ranks` ranks whose ring has
/// `ring_channels` channels. NCCL rounds its channel count up to a power
/// of two for point-to-point (`src/graph/paths.cc`
/// `ncclTopoComputeP2pChannels`: 32 from 24 on a DGX A100, per peer and
/// in all); inside one node an operation takes from the largest power of
/// two with `ranks x min` within that count up to the largest with `ranks
/// x max` within four times it, the fewest of those (doubling) that keep
/// a part within 16 MiB, parts of at least 64 KiB (`enqueue.cc`
/// `scheduleP2pTasksToPlan`, `calcP2pChunkSize`: 32 and 1/8 of a 512 KiB
/// step).
///
/// ```
/// use gpucomm_sim::model::nccl_p2p_channels;
/// // DGX A100 (24 ring channels), 8 ranks: 4 to 16 channels.
/// assert_eq!(nccl_p2p_channels(1 << 30, 8, 24), 16);
/// assert_eq!(nccl_p2p_channels(128 << 20, 8, 24), 8);
/// assert_eq!(nccl_p2p_channels(1 << 20, 8, 24), 4);
/// assert_eq!(nccl_p2p_channels(100 << 10, 8, 24), 2);
/// // Counts past a u16 stay within one.
/// assert_eq!(nccl_p2p_channels(u64::MAX, 1, u16::MAX), u16::MAX);
/// ```
pub fn nccl_p2p_channels(bytes: u64, ranks: usize, ring_channels: u16) -> u16 {
    let all = u64::from(ring_channels.max(1)).next_power_of_two();
    let ranks = ranks.max(1) as u64;
    let mut min = all;
    while min * ranks > all && min > 1 {
        min /= 2;
    }
    let mut max = all;
    while max * ranks > 4 * all && max > 1 {
        max /= 2;
    }
    let (min_size, max_size) = (NCCL_P2P_NVL_CHUNK / 8, 32 * NCCL_P2P_NVL_CHUNK);
    let mut size = min_size.max(bytes.div_ceil(min));
    let mut n = min;
    while size > max_size && n <= max / 2 {
        n *= 2;
        size = bytes.div_ceil(n);
    }
    let size = size.next_multiple_of(min_size);
    bytes.div_ceil(size).clamp(1, n).min(u64::from(u16::MAX)) as u16
}

/// NCCL's point-to-point Simple step on a communicator across nodes, bytes
/// (`NCCL_P2P_NET_CHUNKSIZE` default, NVIDIA/nccl `src/init.cc`: every
/// peer's, those on the same node too).
pub const NCCL_P2P_NET_CHUNK: u64 = 128 * 1024;

/// NCCL's channels for one point-to-point operation of `bytes` (a send or
/// a receive) on a communicator of `ranks` ranks across nodes and
/// `ring_channels` channels (NCCL's `comm->nChannels`, its ring graph's
/// duplicated, [`nccl_comm_channels`]; at most `MAXCHANNELS`, 64 from NCCL
/// 2.25, as the simulator counts them) whose GPUs each drive `nics` NICs by
/// bandwidth (`getLocalNetCountByBw`: 0 where a GPU reaches its CPU
/// through a PCIe switch); `local` is what NCCL gives a peer on the same
/// node (2 per NVLink's worth of bandwidth, 2 over PCIe; `None` with one
/// GPU per node). NVIDIA/nccl 2.24-2.25 `src/graph/paths.cc`: a peer on
/// another node gets 2 channels, halved while `2 x ranks` passes four
/// times the channels, but at least `nics` (`ncclTopoGetNchannels`);
/// every peer then gets the fewest of those, rounded up to a power of two
/// and at most `p2pnChannels`, the channels rounded up to one
/// (`ncclTopoComputeP2pChannels`, `p2pnChannelsPerPeer`). `src/enqueue.cc`
/// (`scheduleP2pTasksToPlan`, `addP2pToPlan`): an operation starts from
/// that count halved while `count x ranks` passes `p2pnChannels`, with
/// parts of at least half a step, and doubles it (up to the peer's count)
/// while a part is above a step: 128 KiB under Simple
/// ([`NCCL_P2P_NET_CHUNK`]), 64 KiB under LL (its buffer over
/// `NCCL_STEPS`). So from more than twice the channels in ranks (33 on
/// 16 channels, 129 on 64) an operation runs on one channel.
///
/// ```
/// use gpucomm_sim::model::nccl_p2p_net_channels;
/// // 2 DGX H100 nodes (16 channels, GPUs behind PCIe switches, 18 NVLinks).
/// assert_eq!(nccl_p2p_net_channels(256 << 20, 16, 16, 0, Some(36), false), 2);
/// assert_eq!(nccl_p2p_net_channels(64 << 10, 16, 16, 0, Some(36), false), 1);
/// // 8 nodes: one.
/// assert_eq!(nccl_p2p_net_channels(256 << 20, 64, 16, 0, Some(36), false), 1);
/// // 16 GB200 NVL72 racks: 1152 ranks, 64 channels.
/// assert_eq!(nccl_p2p_net_channels(1 << 30, 1152, 64, 0, Some(36), false), 1);
/// // Two NICs a GPU drives keep two channels.
/// assert_eq!(nccl_p2p_net_channels(1 << 30, 1152, 64, 2, Some(36), false), 2);
/// // The halving counts the ring channels as they are (12), not rounded up.
/// assert_eq!(nccl_p2p_net_channels(1 << 30, 32, 12, 0, Some(36), false), 1);
/// // Counts past a u16 stay within one.
/// assert_eq!(nccl_p2p_net_channels(u64::MAX, 1, u16::MAX, 1 << 20, None, false), u16::MAX);
/// ```
pub fn nccl_p2p_net_channels(
    bytes: u64,
    ranks: usize,
    ring_channels: u16,
    nics: usize,
    local: Option<u64>,
    ll: bool,
) -> u16 {
    let per_peer = nccl_p2p_net_peer_channels(ranks, ring_channels, nics, local);
    let all = u64::from(ring_channels.max(1)).next_power_of_two();
    let ranks = ranks.max(1) as u64;
    let mut n = per_peer;
    while n.saturating_mul(ranks) > all && n > 1 {
        n /= 2;
    }
    if bytes == 0 {
        return 1;
    }
    let step = if ll { 64 * 1024 } else { NCCL_P2P_NET_CHUNK };
    let (min_part, max_part) = (step / 2, step);
    n = n.min(bytes.div_ceil(min_part));
    let mut part = min_part.max(bytes.div_ceil(n));
    while part > max_part && n <= per_peer / 2 {
        n *= 2;
        part = bytes.div_ceil(n);
    }
    // (A count past a u16's, from a ring count near its top, rounded up.)
    n.min(u64::from(u16::MAX)) as u16
}

/// The channels NCCL gives every peer of a communicator across nodes
/// (`p2pnChannelsPerPeer`, NVIDIA/nccl 2.24-2.25 `src/graph/paths.cc`
/// `ncclTopoComputeP2pChannels`), from the arguments of
/// [`nccl_p2p_net_channels`]: a remote peer's 2, halved while `2 x ranks`
/// passes four times the ring channels, at least `nics`, at most `local`,
/// rounded up to a power of two and at most the channels rounded up to
/// one. It caps an operation's channels.
///
/// ```
/// use gpucomm_sim::model::nccl_p2p_net_peer_channels;
/// // DGX H100 nodes, 16 channels: 2 up to 4 nodes, 1 on 8.
/// assert_eq!(nccl_p2p_net_peer_channels(16, 16, 0, Some(36)), 2);
/// assert_eq!(nccl_p2p_net_peer_channels(32, 16, 0, Some(36)), 2);
/// assert_eq!(nccl_p2p_net_peer_channels(64, 16, 0, Some(36)), 1);
/// // GPUs that each drive two NICs keep two.
/// assert_eq!(nccl_p2p_net_peer_channels(1152, 64, 2, Some(36)), 2);
/// ```
pub fn nccl_p2p_net_peer_channels(
    ranks: usize,
    ring_channels: u16,
    nics: usize,
    local: Option<u64>,
) -> u64 {
    let ring = u64::from(ring_channels.max(1));
    let all = ring.next_power_of_two();
    let ranks = ranks.max(1) as u64;
    let mut net = 2u64;
    while net.saturating_mul(ranks) > 4 * ring && net > 1 {
        net /= 2;
    }
    let net = net.max(nics as u64);
    local
        .map_or(net, |l| net.min(l.max(1)))
        .next_power_of_two()
        .min(all)
}

/// Threads of one NCCL channel (a thread block) under `protocol`, as its
/// tuning sets them (`comm->maxThreads`, NVIDIA/nccl `src/graph/tuning.cc`;
/// `NCCL_LL_MAX_NTHREADS`, `NCCL_LL128_MAX_NTHREADS`,
/// `NCCL_SIMPLE_MAX_NTHREADS`, `src/include/device.h`). NCCL gives a ring's
/// Simple channels 256 instead where its ring graph's whole bandwidth
/// (`bwIntra x nChannels`) is within `PCI_BW` (12 GB/s), a PCIe Gen3
/// machine's; the simulator does not find that graph and takes 512.
pub fn nccl_max_threads(protocol: Protocol) -> u64 {
    match protocol {
        Protocol::Ll | Protocol::Simple => 512,
        Protocol::Ll128 => 640,
    }
}

/// Bytes each thread of a channel gets at least before NCCL adds a
/// channel to a ring or tree operation (`comm->threadThresholds`,
/// `tuning.cc`: `NCCL_LL_THREAD_THRESHOLD` 8, `NCCL_LL128_THREAD_THRESHOLD`
/// 8, `NCCL_SIMPLE_THREAD_THRESHOLD` 64 from `src/include/comm.h`; a
/// ring's LL threshold is multiplied by the ranks).
pub fn nccl_thread_threshold(ring: bool, protocol: Protocol, ranks: usize) -> u64 {
    match protocol {
        Protocol::Ll if ring => 8u64.saturating_mul(ranks.max(1) as u64),
        Protocol::Ll | Protocol::Ll128 => 8,
        Protocol::Simple => 64,
    }
}

/// The channels NCCL runs one ring or tree operation of `bytes` on, of
/// the communicator's `channels` (`topoGetAlgoInfo`, NVIDIA/nccl
/// `src/enqueue.cc`: `while (nBytes < nc * nt * threadThreshold) nc--`,
/// down to one; `nBytes` is the larger of what a rank sends and receives,
/// the whole output of an all_gather and input of a reduce_scatter,
/// `ncclFuncMaxSendRecvCount`). A channel is a thread block, and a small
/// operation spread over all of them would give each thread a few bytes:
/// NCCL keeps [`nccl_max_threads`] x [`nccl_thread_threshold`] bytes per
/// channel. NVLS, CollNet and point-to-point operations take their own
/// channel counts and are not reduced this way. NCCL's planner then
/// spreads the operation over about this many ([`nccl_plan_channels`]).
///
/// ```
/// use gpucomm_sim::model::{nccl_op_channels, Protocol};
/// // A ring under LL keeps 8 x ranks bytes per thread, 512 threads:
/// // 128 KiB per channel on 32 ranks, so 1 MiB runs 8 channels of 64.
/// assert_eq!(nccl_op_channels(true, Protocol::Ll, 1 << 20, 32, 64), 8);
/// // On 288 ranks (4 GB200 NVL72 racks), 1.1 MiB per channel: one.
/// assert_eq!(nccl_op_channels(true, Protocol::Ll, 1 << 20, 288, 64), 1);
/// // Simple keeps 64 x 512 = 32 KiB per channel, whatever the ranks.
/// assert_eq!(nccl_op_channels(false, Protocol::Simple, 100 << 10, 16, 16), 3);
/// // LL128, 8 x 640 = 5 KiB: 64 channels from 320 KiB.
/// assert_eq!(nccl_op_channels(true, Protocol::Ll128, 320 << 10, 1024, 64), 64);
/// assert_eq!(nccl_op_channels(true, Protocol::Ll128, 8, 16, 8), 1);
/// // A rank count past any run's does not wrap round to many channels.
/// assert_eq!(nccl_op_channels(true, Protocol::Ll, u64::MAX / 2, usize::MAX, 64), 1);
/// ```
pub fn nccl_op_channels(
    ring: bool,
    protocol: Protocol,
    bytes: u64,
    ranks: usize,
    channels: u16,
) -> u16 {
    // (Saturating: a rank count no run reaches must not wrap.)
    let per_channel =
        nccl_max_threads(protocol).saturating_mul(nccl_thread_threshold(ring, protocol, ranks));
    let mut nc = channels.max(1);
    while nc >= 2 && bytes < u64::from(nc).saturating_mul(per_channel) {
        nc -= 1;
    }
    nc
}

/// The least traffic NCCL gives a channel when it spreads an operation
/// over its channels (`MinTrafficPerChannel` in `scheduleCollTasksToPlan`,
/// NVIDIA/nccl `src/enqueue.cc`): 16 KiB from NCCL 2.23 to 2.28 (512
/// bytes in 2.22, 32 KiB from 2.29). The simulator follows 2.23-2.25,
/// the NCCL of the published sweeps it is checked against at small
/// sizes (NCCL 2.24.3); from 2.26 an LL operation's traffic also counts
/// four times (`docs/sim.md`, "What is not modeled").
pub const NCCL_MIN_TRAFFIC_PER_CHANNEL: u64 = 16 << 10;

/// Bytes an operation moves per byte of its count, as NCCL counts its
/// traffic (`ncclFuncTrafficPerByte`, `src/enqueue.cc`): 2 for an
/// all_reduce, the ranks for an all_gather or reduce_scatter (whose count
/// is a rank's block), 1 otherwise.
pub fn nccl_traffic_per_byte(collective: Collective, ranks: usize) -> u64 {
    match collective {
        Collective::AllReduce => 2,
        Collective::AllGather | Collective::ReduceScatter => ranks.max(1) as u64,
        _ => 1,
    }
}

/// The channels NCCL spreads one ring or tree operation over when it is
/// alone in its kernel, as nccl-tests launches them
/// (`scheduleCollTasksToPlan`, NCCL 2.23-2.25): the operation's count is
/// cut into cells of at least [`NCCL_MIN_TRAFFIC_PER_CHANNEL`] of traffic,
/// and each channel takes the cells of its share of the traffic, the
/// larger of that least traffic and the traffic over the operation's
/// [`nccl_op_channels`] (`max_channels`, of the communicator's
/// `comm_channels`). `rank_bytes` is the operation's count in bytes (a
/// rank's block for an all_gather or reduce_scatter) and
/// `traffic_per_byte` [`nccl_traffic_per_byte`]'s. So an operation of
/// less traffic than `max_channels` x 16 KiB runs on fewer channels than
/// [`nccl_op_channels`] allows, and one whose cells do not divide evenly
/// may take one more than it (as NCCL: a 49,153-byte all_reduce allowed
/// 3 of 4 runs on 4). Checked against NCCL 2.24.3's arithmetic over
/// 431,569 inputs in review, no mismatch.
///
/// ```
/// use gpucomm_sim::model::{nccl_plan_channels, nccl_traffic_per_byte};
/// use gpucomm_algo::Collective;
/// let ar = nccl_traffic_per_byte(Collective::AllReduce, 32);
/// // An 8 KiB all_reduce moves 16 KiB of traffic: one channel, of two
/// // its protocol would allow.
/// assert_eq!(nccl_plan_channels(2, 16, 8 << 10, ar), 1);
/// assert_eq!(nccl_plan_channels(8, 16, 32 << 10, ar), 4);
/// // Past max_channels x 16 KiB, every channel it allows, and one more
/// // where the cells do not divide evenly.
/// assert_eq!(nccl_plan_channels(8, 16, 1 << 20, ar), 8);
/// assert_eq!(nccl_plan_channels(3, 4, 49153, ar), 4);
/// // An all_gather's traffic is its whole output: 64 KiB over 32 ranks.
/// let ag = nccl_traffic_per_byte(Collective::AllGather, 32);
/// assert_eq!(nccl_plan_channels(8, 8, 2 << 10, ag), 4);
/// ```
pub fn nccl_plan_channels(
    max_channels: u16,
    comm_channels: u16,
    rank_bytes: u64,
    traffic_per_byte: u64,
) -> u16 {
    const MIN: u64 = NCCL_MIN_TRAFFIC_PER_CHANNEL;
    let comm = u64::from(comm_channels.max(1));
    let tpb = traffic_per_byte.max(1);
    if rank_bytes == 0 {
        return 1;
    }
    // The plan's traffic, shared by the channels the operation may take.
    let traffic = (rank_bytes.saturating_mul(tpb)).max(MIN);
    let shared = u64::from(max_channels.max(1)).min(comm);
    let per_channel = (traffic / shared).max(MIN);
    // Cells of at least MIN traffic (16-byte multiples of count bytes).
    let cell = MIN.div_ceil(tpb).div_ceil(16) * 16;
    let cells = rank_bytes.div_ceil(cell);
    let per_cell = cell.saturating_mul(tpb);
    let cells_per_channel = cells.min(per_channel.div_ceil(per_cell)).max(1);
    // The first channel takes a channel's share (all of it when it is the
    // communicator's last), the middle ones a share each, the last the
    // rest; past the communicator's channels the rest is spread over them.
    let lo = if comm == 1 { cells } else { cells_per_channel };
    let mid = (cells - lo) / cells_per_channel;
    let hi = (cells - lo) % cells_per_channel;
    let n = 1 + mid + u64::from(hi != 0);
    n.min(comm) as u16
}

/// Efficiency factors of one engine on one architecture.
#[derive(Clone, Copy, Debug)]
pub struct Efficiency {
    arch: Arch,
    engine: Engine,
}

impl Efficiency {
    /// Factors for `engine` on `arch`.
    pub fn new(arch: Arch, engine: Engine) -> Self {
        Efficiency { arch, engine }
    }

    /// Usable GB/s of one NVLink of generation `gen`.
    pub fn nvlink_link(&self, generation: u8) -> Result<f64, SimError> {
        let raw = nvlink_link_gbps(generation)?;
        Ok(match self.engine {
            Engine::Nccl => nccl_nvlink_gbps(self.arch).min(raw),
            Engine::CopyEngine => raw * nvlink_ce_efficiency(generation),
        })
    }

    /// Fraction of the PCIe data rate usable.
    pub fn pcie(&self, generation: u8) -> f64 {
        match self.engine {
            Engine::Nccl => {
                let raw = pcie_gbps(generation, 16).unwrap_or(1.0);
                (nccl_pcie_gbps(generation, 16) / raw).min(1.0)
            }
            Engine::CopyEngine => PCIE_TLP_EFFICIENCY,
        }
    }

    /// GB/s usable on an NVLink-C2C link of `link_gbps` per direction
    /// toward the GPU (`to_gpu`) or toward the host. NCCL takes the link at
    /// the rate NVML reports (`src/graph/topo.cc` `ncclTopoAddC2c`: bw x
    /// count), both ways; copy engines as [`c2c_copy_gbps`].
    pub fn c2c(&self, link_gbps: f64, to_gpu: bool) -> f64 {
        match self.engine {
            Engine::Nccl => link_gbps,
            Engine::CopyEngine => c2c_copy_gbps(link_gbps, to_gpu),
        }
    }

    /// Fraction of a NIC's data rate usable (RDMA writes, 4 KiB MTU).
    pub fn net(&self) -> f64 {
        IB_EFFICIENCY
    }

    /// Fraction of an inter-socket link's rate usable (no published
    /// protocol model; taken as 1).
    pub fn smp(&self) -> f64 {
        1.0
    }
}

/// NCCL's three wire protocols (NVIDIA/nccl `src/device/prims_*.h`).
///
/// They trade bandwidth for latency: *LL* stores 4 bytes of data and a
/// 4-byte flag in every 8-byte word, so a receiver polls the data itself
/// (no fence, lowest per-step cost, half the bandwidth); *LL128* does the
/// same per 128-byte line (120 bytes of data and an 8-byte flag), which
/// needs NVLink's ordering guarantees; *Simple* moves whole buffers and
/// synchronises with a fence and a flag per step (full bandwidth, highest
/// per-step cost).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// Low latency: 8-byte words of 4 data bytes and a 4-byte flag.
    Ll,
    /// Low latency on 128-byte lines: 120 data bytes and an 8-byte flag.
    Ll128,
    /// Whole buffers, fence and flag per step.
    Simple,
}

impl Protocol {
    /// All three, in NCCL's order.
    pub const ALL: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

    /// NCCL's name (`LL`, `LL128`, `Simple`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Ll => "LL",
            Protocol::Ll128 => "LL128",
            Protocol::Simple => "Simple",
        }
    }

    /// Parses a name, case-insensitively.
    pub fn parse(s: &str) -> Option<Protocol> {
        Protocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
    }

    /// Bytes on the wire per byte of payload, from the line formats
    /// (NVIDIA/nccl `src/device/prims_ll.h`: `union ncclLLFifoLine`, two
    /// 4-byte data words and two 4-byte flags per 16 bytes;
    /// `prims_ll128.h`: `NCCL_LL128_LINEELEMS` 16 8-byte words per line,
    /// one of them the flag).
    pub fn wire_factor(self) -> f64 {
        match self {
            Protocol::Ll => 2.0,
            Protocol::Ll128 => 128.0 / 120.0,
            Protocol::Simple => 1.0,
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How fast a protocol moves data in NCCL's own model, relative to Simple
/// (NVIDIA/nccl `src/graph/tuning.cc`, "Various model refinements" after
/// `busBw = nChannels * bw`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProtocolBandwidth {
    /// Time on the links per byte of payload, relative to Simple (the
    /// inverse of NCCL's bus bandwidth factor): ring LL 1/0.5, ring LL128
    /// 1/0.92, tree LL 3.8, tree LL128 9/7 on one node and 128/120 across
    /// nodes. It covers the flag bytes of the line formats
    /// ([`Protocol::wire_factor`]) and the cost of the threads storing and
    /// polling them, which NCCL measured; the simulator moves this many
    /// bytes per payload byte.
    pub factor: f64,
    /// NCCL's cap on the protocol's bus bandwidth (`llMaxBws` for LL),
    /// GB/s, applied as a limit on each rank's total sending rate.
    pub cap_gbps: Option<f64>,
}

/// NCCL's bandwidth model of `protocol` for `algo` on `nodes` nodes of
/// `arch` GPUs; `amd_cpu` picks NCCL's AMD row of `llMaxBws` across nodes.
/// Algorithms NCCL does not have use the ring figures. NCCL's per-channel
/// LL128 caps (`perChMaxRingLL128Bws`, `perChMaxTreeLL128Bws`) are not
/// applied: they scale with NCCL's channel count, which the simulator does
/// not reproduce (docs/sim.md).
pub fn nccl_protocol_bandwidth(
    algo: &str,
    protocol: Protocol,
    arch: Arch,
    nodes: usize,
    amd_cpu: bool,
) -> ProtocolBandwidth {
    // llMaxBws: one node by GPU generation, across nodes by CPU vendor,
    // columns 1 node / 2 nodes / more.
    let ll_max = || {
        if nodes <= 1 {
            match arch {
                Arch::Pascal | Arch::Volta => 39.0,
                Arch::Ampere | Arch::Ada => 87.7,
                Arch::Hopper => 141.0,
                Arch::Blackwell => 2.0 * 141.0,
            }
        } else {
            match (amd_cpu, nodes) {
                (false, 2) => 39.0,
                (false, _) => 20.4,
                (true, 2) => 22.5,
                (true, _) => 19.0,
            }
        }
    };
    let tree = algo == "tree";
    let (factor, cap) = match protocol {
        // "if (a == NCCL_ALGO_PAT) busBw *= .75".
        Protocol::Simple if algo == "pat" => (1.0 / 0.75, None),
        Protocol::Simple => (1.0, None),
        Protocol::Ll if tree => (3.8, Some(ll_max())),
        Protocol::Ll => (1.0 / 0.5, Some(ll_max())),
        Protocol::Ll128 if tree && nodes <= 1 => (9.0 / 7.0, None),
        Protocol::Ll128 if tree => (128.0 / 120.0, None),
        Protocol::Ll128 => (1.0 / 0.92, None),
    };
    ProtocolBandwidth {
        factor,
        cap_gbps: cap,
    }
}

/// The part of NCCL's PAT latency that grows with the ranks, us per rank
/// (NVIDIA/nccl `src/graph/tuning.cc`: "nRanks * 2.8; // Still a linear
/// part; hopefully we'll manage to remove it at some point"): PAT moves
/// each rank's chunk in steps of its own.
pub const NCCL_PAT_PER_RANK_US: f64 = 2.8;

/// What NCCL divides the network latency by for each of PAT's rounds
/// (`tuning.cc`: "log2i(nNodes) * (interLat / 3.5)").
const NCCL_PAT_ROUND_DIVISOR: f64 = 3.5;

/// NCCL's latency figures (NVIDIA/nccl `src/graph/tuning.cc`,
/// `baseLatencies` and `hwLatencies`): the launch cost of an algorithm and
/// protocol, and its per-step cost by path (NVLink, PCIe, network).
/// NVLS, NVLSTree and CollNet (Direct and Chain) run the Simple protocol only;
/// algorithms NCCL does not have use the ring figures.
pub fn nccl_overheads(algo: &str, protocol: Protocol) -> Overheads {
    use Protocol::*;
    // (base, nvlink, pci, net) in us.
    let (base, nvl, pci, net) = match (algo, protocol) {
        ("nvls", _) => (0.0, 25.0, 0.0, 18.0),
        ("nvls_tree", _) => (0.0, 25.0, 0.0, 20.9),
        ("collnet", _) => (0.0, 3.7, 3.7, 31.0),
        ("collnet_chain", _) => (0.0, 2.8, 2.8, 30.0),
        // PAT's network round: "log2i(nNodes) * (interLat / 3.5)", its
        // linear part in the launch ([`NCCL_PAT_PER_RANK_US`]).
        ("pat", _) => (8.0, 4.0, 4.0, 14.0 / NCCL_PAT_ROUND_DIVISOR),
        ("tree", Ll) => (6.8, 0.6, 1.0, 5.0),
        ("tree", Ll128) => (14.0, 1.25, 1.9, 8.5),
        ("tree", Simple) => (8.4, 4.0, 4.0, 14.0),
        (_, Ll) => (6.6, 0.6, 1.0, 2.7),
        (_, Ll128) => (14.0, 1.9, 2.5, 4.0),
        (_, Simple) => (8.4, 3.4, 5.7, 14.0),
    };
    Overheads {
        launch: SimTime::from_us(base),
        step_nvlink: SimTime::from_us(nvl),
        step_pcie: SimTime::from_us(pci),
        step_net: SimTime::from_us(net),
        step_local: SimTime::ZERO,
    }
}

/// Whether NCCL enables `protocol` by default for `algo` on a machine whose
/// GPUs are (`nvlink`) or are not joined by NVLink (NVIDIA/nccl
/// `src/graph/tuning.cc`), and if not, why: NVLS and CollNet run Simple
/// only; LL128 needs Volta or later and GPUs joined by NVLink
/// (`typeIntra <= PATH_NVB`) and, across nodes (`nic` is `Some` then), NICs
/// the GPUs reach closely enough ([`NicReach`]).
///
/// ```
/// use gpucomm_sim::model::{nccl_protocol_check, Arch, NicReach, Protocol};
/// assert!(nccl_protocol_check("tree", Protocol::Ll128, Arch::Hopper, true, Some(NicReach::Pxn)).is_ok());
/// assert!(nccl_protocol_check("tree", Protocol::Ll128, Arch::Ampere, true, Some(NicReach::Pxn)).is_err());
/// assert!(nccl_protocol_check("ring", Protocol::Ll128, Arch::Ampere, true, None).is_ok());
/// ```
pub fn nccl_protocol_check(
    algo: &str,
    protocol: Protocol,
    arch: Arch,
    nvlink: bool,
    nic: Option<NicReach>,
) -> Result<(), &'static str> {
    match protocol {
        Protocol::Simple => Ok(()),
        _ if matches!(algo, "nvls" | "collnet" | "collnet_chain" | "nvls_tree") => {
            Err("NVLS, NVLSTree and CollNet run the Simple protocol only")
        }
        _ if algo == "pat" => Err("PAT runs the Simple protocol only"),
        Protocol::Ll => Ok(()),
        Protocol::Ll128 if !(nvlink && arch >= Arch::Volta) => {
            Err("LL128 needs Volta or later and GPUs joined by NVLink")
        }
        Protocol::Ll128 => match nic {
            None | Some(NicReach::Near) => Ok(()),
            Some(NicReach::Pxn) if arch >= Arch::Hopper => Ok(()),
            Some(NicReach::Pxn) => Err(
                "LL128 across nodes needs each GPU's NIC within its PCIe switches before Hopper (a GPU here reaches one only through an NVLink peer, PXN)",
            ),
            Some(NicReach::Far) => Err(
                "LL128 across nodes needs each GPU's NIC within its PCIe switches, or an NVLink peer's on Hopper and later (a GPU here reaches its NIC only through the CPU)",
            ),
        },
    }
}

/// How the GPUs of a node reach their NICs, in the terms of NCCL's
/// `typeInter` (the path class of a graph's GPU-to-NIC hops), which decides
/// whether LL128 runs across nodes (NVIDIA/nccl `src/graph/tuning.cc`: LL128
/// is enabled up to `PATH_PXB`, and up to `PATH_PXN` from compute
/// capability 9.0 with `NCCL_LL128_C2C`, its default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NicReach {
    /// Every GPU has a NIC it reaches with GPUDirect RDMA: under common
    /// PCIe switches (`PIX`, `PXB`) or through a Grace CPU's NVLink-C2C
    /// (`P2C`).
    #[default]
    Near,
    /// Some GPU reaches one only through an NVLink peer that has one
    /// (`PXN`).
    Pxn,
    /// Some GPU reaches a NIC only through the CPU (`PHB`, `SYS`).
    Far,
}

/// Time a copy engine needs to start one peer-to-peer copy (GPU to GPU
/// over NVLink or PCIe), us: CUDA's asynchronous copy submission is of
/// the order of a microsecond or two (a modeling assumption, not a
/// published constant; see docs/sim.md). Copies to or from host memory
/// take [`HOST_COPY_START_US`].
pub const CE_COPY_OVERHEAD_US: f64 = 1.5;

/// Time a copy engine needs to start one peer copy to a GPU it reaches
/// through an NVSwitch, us: the median 16-byte peer copy of published
/// p2pBandwidthLatencyTest runs on NVSwitch machines of the architecture
/// (the midpoint of each run's GPU pairs, P2P enabled), less the route's
/// modeled latency (two NVLink hops, 0.3 us). Volta: DGX-2 2.26-2.76
/// (wohlbier/gpu-micro `README.md`); Ampere: HGX A100 2.94-3.49
/// (LLMServe/DistServe issue 3), 2.77-3.55 (B5paper/documents, host a147),
/// 2.72-3.33 (a third host; repository not named by the search index),
/// median 3.16; Hopper: HGX H100 2.26-3.35 (a server-validation sheet;
/// repository not named), one run; Blackwell: no published run found,
/// Hopper's taken (an **assumption**). Through a switch a peer copy takes
/// 0.4-0.9 us longer than over a direct link on the same generation (DGX-1
/// V100 pairs: 1.61-2.02, [`CE_COPY_OVERHEAD_US`] stays there) and longer
/// than the same GPU's own copies (A100 2.5-2.9, H100 2.1), which no
/// modeled hop latency accounts for: hence a figure per architecture. The
/// DGX A100 notebook (gpubootcamp, P2P enabled 3.36-3.47) is not among
/// them: it checks the figure (3.16 predicted).
pub fn nvswitch_peer_copy_start_us(arch: Arch) -> f64 {
    let route = 2.0 * NVLINK_HOP_US;
    match arch {
        // No NVSwitch machine of these (Pascal, Ada).
        Arch::Pascal | Arch::Ada => CE_COPY_OVERHEAD_US,
        Arch::Volta => 2.51 - route,
        Arch::Ampere => 3.16 - route,
        Arch::Hopper | Arch::Blackwell => 2.805 - route,
    }
}

/// Time one copy to or from host memory costs besides its bytes, us:
/// bandwidthTest's host copies, the two halves of a staged GPU-to-GPU copy,
/// the host-staged halves of a transfer across nodes. Derived, as
/// [`STAGED_SYNC_US`] is, from published p2pBandwidthLatencyTest runs, not
/// from the calibration cases: the median over the 16 machines of
/// docs/sim.md, "Staged copies", of their same-GPU 16-byte copy latency
/// (1.3-3.2 us across them), the figure the hand-over's derivation takes
/// for each half of a staged copy, so that the model's staged 16-byte copy
/// is that derivation run backwards (our own H100: a queued 16-byte copy
/// 2.21-2.36 us host to device, 1.56-1.61 device to host, 1.82-2.04 on the
/// same GPU; `tools/cuda_copy_latency.cu`).
pub const HOST_COPY_START_US: f64 = 2.31;

/// Hand-over between the two halves of a GPU-to-GPU copy the driver
/// stages through host memory (P2P disabled or impossible), us: the
/// destination's engine learns that a chunk has landed in host memory, or
/// the source's that a staging buffer is free again. Derived from
/// published p2pBandwidthLatencyTest runs, not from the calibration cases:
/// on each of 16 machines (docs/sim.md, "Staged copies"), the staged
/// 16-byte copy's time less two same-GPU copies' (the two halves' copy
/// cost); the median is 11.5 us, the range 5.1-18.7.
pub const STAGED_SYNC_US: f64 = 11.5;

/// Bytes the driver moves per chunk of a staged GPU-to-GPU copy (two
/// staging buffers per direction, so one chunk's host-to-device half
/// overlaps the next one's device-to-host half). Derived from the same 16
/// machines: the chunk that gives each its published staged bandwidth,
/// given its own hand-over time, [`HOST_COPY_START_US`] and its PCIe link;
/// the median is 1.24 MB, the range 0.6-2.7 MB.
pub const STAGED_CHUNK_BYTES: f64 = 1.24e6;

/// Staging buffers per direction of a staged GPU-to-GPU copy (double
/// buffering; a modeling assumption).
pub const STAGED_BUFFERS: usize = 2;

/// Bandwidth of one large `memcpy` on the host (one thread, as the CUDA
/// driver stages a pageable copy), GB/s: glibc switches to non-temporal
/// stores above 3/4 of the shared cache
/// (`__x86_shared_non_temporal_threshold`, glibc sysdeps/x86/dl-cacheinfo.h),
/// so each byte copied costs one read and one write of DRAM: at most half
/// the memory bandwidth; and the copy's reads come no faster than one core
/// streams from DRAM (`core_read_gbps`,
/// `gpucomm_topo::hardware::cpu_core_read_gbps_from_label`; the stores,
/// non-temporal, do not wait for memory), the bound on a server.
///
/// ```
/// use gpucomm_sim::model::memcpy_gbps;
/// assert_eq!(memcpy_gbps(204.8, Some(21.77)), 21.77); // EPYC 7742
/// assert_eq!(memcpy_gbps(89.6, None), 44.8); // a desktop's two channels
/// ```
pub fn memcpy_gbps(host_mem_gbps: f64, core_read_gbps: Option<f64>) -> f64 {
    let half = host_mem_gbps / 2.0;
    core_read_gbps.map_or(half, |c| c.min(half))
}

/// NCCL's network post overhead per ring step, us: "Inter-node rings
/// still have to launch nsteps * net overhead" (NVIDIA/nccl
/// `src/graph/tuning.cc`, `getNetOverhead`: 1 us on Intel hosts, 2 on
/// AMD; three times that under Simple). Across nodes every step of a ring
/// all_reduce, all_gather and reduce_scatter costs at least this, the
/// steps inside a node included: the ring advances in lock step, as fast
/// as its ranks at the network post their sends.
///
/// ```
/// use gpucomm_sim::model::{nccl_net_post_us, Protocol};
/// assert_eq!(nccl_net_post_us(false, Protocol::Ll), 1.0);
/// assert_eq!(nccl_net_post_us(true, Protocol::Simple), 6.0);
/// ```
pub fn nccl_net_post_us(amd_cpu: bool, protocol: Protocol) -> f64 {
    let post = if amd_cpu { 2.0 } else { 1.0 };
    if protocol == Protocol::Simple {
        post * 3.0
    } else {
        post
    }
}

/// What NCCL's cost model needs to know of a communicator
/// (NVIDIA/nccl `src/graph/tuning.cc`, `ncclTopoTuneModel`).
#[derive(Clone, Copy, Debug)]
pub struct NcclComm {
    /// Ranks.
    pub ranks: usize,
    /// Nodes.
    pub nodes: usize,
    /// Whether the GPUs of a node are joined by NVLink (NCCL's
    /// `typeIntra == LINK_NVL`: the NVLink `hwLat` row, else PCIe's).
    pub nvlink: bool,
    /// GPU architecture (the ring's plateau factor).
    pub arch: Arch,
    /// AMD host CPUs (NCCL's network post overhead: 2 us, Intel 1 us).
    pub amd_cpu: bool,
    /// Channels (the ring's plateau test).
    pub channels: usize,
    /// Whether the ring graph's channels all take one order through a
    /// node (NCCL's `graph->sameChannels`), which decides a broadcast's
    /// and a reduce's latency: across nodes each channel enters a node at
    /// its own NIC's GPU, so with more than one NIC in use the orders
    /// differ.
    pub same_channels: bool,
}

/// NCCL's latency of `algo` under `protocol` for one `collective` of
/// `bytes` (NVIDIA/nccl `src/graph/tuning.cc`: `ncclTopoTuneModel`'s
/// `latencies`, and `ncclTopoGetAlgoTime`'s ring plateau), us.
///
/// `baseLat`, plus per algorithm: ring, `nsteps` steps of the intra-node
/// `hwLat` (at least the network post overhead across nodes) of which the
/// inter-node ones cost the network `hwLat` (a broadcast or reduce ring one
/// step); tree, `2 ((ppn-1) intra + log2(nodes) inter)`; CollNet Direct,
/// `2 (min(1, ppn-1) intra + 0.4 (ppn-1)) + inter`; CollNet Chain,
/// `2 (ppn-1) intra + inter`; NVLS, `intra` (+
/// `inter` across nodes); NVLSTree, `intra + 2 log2(nodes) inter`. With one
/// GPU per node the network `hwLat` is the tree's. The network's own
/// latency (`latencyInter`, 0 for NCCL's InfiniBand and socket transports)
/// is left out. Algorithms NCCL does not have take the ring's figures.
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::model::{nccl_model_latency_us, Arch, NcclComm, Protocol};
/// let one_node = NcclComm { ranks: 8, nodes: 1, nvlink: true, arch: Arch::Hopper, amd_cpu: false, channels: 16, same_channels: true };
/// // Ring Simple on 8 GPUs: 8.4 + 14 x 3.4 us.
/// let lat = nccl_model_latency_us("ring", Protocol::Simple, Collective::AllReduce, 1 << 20, &one_node);
/// assert!((lat - 56.0).abs() < 1e-9);
/// ```
pub fn nccl_model_latency_us(
    algo: &str,
    protocol: Protocol,
    collective: gpucomm_algo::Collective,
    bytes: u64,
    comm: &NcclComm,
) -> f64 {
    use gpucomm_algo::Collective as C;
    // (No more nodes than ranks: a communicator has a rank on every node.)
    let n = comm.ranks.max(1);
    let nodes = comm.nodes.clamp(1, n);
    let ppn = n / nodes;
    let all_reduce = collective == C::AllReduce;
    let nsteps = match collective {
        C::AllReduce => 2 * (n - 1),
        C::ReduceScatter | C::AllGather => n - 1,
        _ => n,
    } as f64;
    let ov = nccl_overheads(algo, protocol);
    // NCCL's intraHw row: NVLink or PCIe.
    let intra_of = |o: &Overheads| {
        if comm.nvlink {
            o.step_nvlink
        } else {
            o.step_pcie
        }
        .as_us()
    };
    let intra = intra_of(&ov);
    // "With ppn=1 latencies are fully exposed, use the Tree network latency."
    let inter = if ppn == 1 {
        nccl_overheads("tree", protocol).step_net.as_us()
    } else {
        ov.step_net.as_us()
    };
    let log_nodes = f64::from(nodes.ilog2());
    let base = ov.launch.as_us();
    match algo {
        "tree" if all_reduce => base + 2.0 * ((ppn - 1) as f64 * intra + log_nodes * inter),
        "tree" => base,
        "collnet" => {
            let p = (ppn - 1) as f64;
            base + 2.0 * (p.min(1.0) * intra + 0.4 * p) + inter
        }
        "collnet_chain" => base + 2.0 * (ppn - 1) as f64 * intra + inter,
        "nvls" => base + intra + if nodes > 1 { inter } else { 0.0 },
        "nvls_tree" => base + intra + 2.0 * log_nodes * inter,
        // "Log latency" plus "Still a linear part".
        "pat" if matches!(collective, C::AllGather | C::ReduceScatter) => {
            base + log_nodes * inter / NCCL_PAT_ROUND_DIVISOR + NCCL_PAT_PER_RANK_US * n as f64
        }
        "pat" => base,
        // A broadcast's and a reduce's ring: one hop's latency where the
        // channels share their order, else every step's ("Add some chunk
        // latency, waiting for proper chunk modeling": Simple at the
        // tree's figure).
        _ if matches!(collective, C::Broadcast { .. } | C::Reduce { .. }) => {
            let hop = |o: &Overheads| {
                if nodes > 1 {
                    o.step_net.as_us()
                } else {
                    intra_of(o)
                }
            };
            if comm.same_channels {
                base + hop(&ov)
            } else if protocol == Protocol::Simple {
                base + nsteps * hop(&nccl_overheads("tree", protocol))
            } else {
                base + nsteps * hop(&ov)
            }
        }
        _ => {
            let post = if nodes > 1 {
                nccl_net_post_us(comm.amd_cpu, protocol)
            } else {
                0.0
            };
            let inter_steps = match (nodes, all_reduce) {
                (1, _) => 0.0,
                (_, true) => 2.0 * (nodes - 1) as f64,
                (_, false) => (nodes - 1) as f64,
            };
            let mut lat = base + (nsteps - inter_steps) * intra.max(post) + inter_steps * inter;
            // "Plateau effect of ring."
            if protocol == Protocol::Simple
                && nodes > 1
                && all_reduce
                && bytes / (comm.channels.max(1) * n) as u64 >= 64
            {
                lat *= if comm.arch < Arch::Ampere { 1.9 } else { 1.4 };
            }
            lat
        }
    }
}

/// NCCL's correction of its tree all_reduce bandwidth at `bytes`
/// (`treeCorrectionFactor`, NVIDIA/nccl `src/graph/tuning.cc`: "Trees are
/// not perfectly sticking to the model for medium sizes"), by protocol and
/// `log2(bytes / 64)` from 64 B to 256 MiB; 1 outside.
pub fn nccl_tree_correction(protocol: Protocol, bytes: u64) -> f64 {
    const LL: [f64; 24] = [
        1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.0, 1.0, 1.0, 1.0,
    ];
    const LL128: [f64; 24] = [
        1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9,
        0.9, 0.9, 0.9, 1.0, 1.0, 1.0,
    ];
    const SIMPLE: [f64; 24] = [
        0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8,
        0.7, 0.7, 0.8, 0.9, 0.9, 0.9,
    ];
    let units = bytes >> 6;
    if units == 0 {
        return 1.0;
    }
    let log = units.ilog2() as usize;
    // NCCL applies it below log 23 only.
    if log >= 23 {
        return 1.0;
    }
    match protocol {
        Protocol::Ll => LL[log],
        Protocol::Ll128 => LL128[log],
        Protocol::Simple => SIMPLE[log],
    }
}

/// NCCL's tree all_reduce bandwidth refinement (`tuning.cc`: `busBw *
/// .92` for every protocol, before the protocol's own factor).
pub const NCCL_TREE_ALL_REDUCE_BW: f64 = 0.92;

/// NCCL's ceilings on one channel's bus bandwidth, GB/s, which its model
/// applies to `nChannels x` the ceiling (NVIDIA/nccl `src/graph/tuning.cc`:
/// `perChMaxRingLL128Bws`, `perChMaxTreeLL128Bws`, `perChMaxTreeBws`,
/// `perChMaxNVLSTreeBws`; a row per architecture, Ada taking Ampere's, and
/// a column for one node, two nodes and more).
///
/// ```
/// use gpucomm_sim::model::{nccl_channel_caps, Arch};
/// let h = |nodes| nccl_channel_caps(Arch::Hopper, nodes);
/// assert_eq!((h(2).tree, h(2).nvls_tree, h(4).tree, h(4).tree_ll128), (41.4, 57.7, 36.0, 29.0));
/// assert_eq!(nccl_channel_caps(Arch::Ampere, 2).tree, 23.6);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NcclChannelCaps {
    /// Ring under LL128 (`perChMaxRingLL128Bws`).
    pub ring_ll128: f64,
    /// Tree under LL128 (`perChMaxTreeLL128Bws`).
    pub tree_ll128: f64,
    /// Tree all_reduce, every protocol (`perChMaxTreeBws`).
    pub tree: f64,
    /// NVLSTree (`perChMaxNVLSTreeBws`; 0 on one node, where NCCL does not
    /// run it).
    pub nvls_tree: f64,
}

/// NCCL's per-channel ceilings for `arch` on `nodes` nodes
/// ([`NcclChannelCaps`]).
pub fn nccl_channel_caps(arch: Arch, nodes: usize) -> NcclChannelCaps {
    let col = nodes.clamp(1, 3) - 1;
    let (ring_ll128, tree_ll128, tree, nvls_tree) = match arch {
        Arch::Pascal | Arch::Volta => {
            ([20.0; 3], [20.0; 3], [26.5, 18.5, 10.0], [26.5, 18.5, 10.0])
        }
        Arch::Ampere | Arch::Ada => ([20.0; 3], [20.0; 3], [24.0, 23.6, 17.8], [24.0, 23.6, 17.8]),
        Arch::Hopper => (
            [36.7; 3],
            [36.7, 36.7, 29.0],
            [38.7, 41.4, 36.0],
            [0.0, 57.7, 45.5],
        ),
        Arch::Blackwell => (
            [40.0; 3],
            [55.6, 31.67, 20.0],
            [70.0, 42.8, 24.0],
            [0.0, 96.0, 80.0],
        ),
    };
    NcclChannelCaps {
        ring_ll128: ring_ll128[col],
        tree_ll128: tree_ll128[col],
        tree: tree[col],
        nvls_tree: nvls_tree[col],
    }
}

/// NCCL's per-channel speeds for graphs across nodes, GB/s, fastest
/// first (NVIDIA/nccl `src/graph/search.cc`: `speedArrayInter`, and
/// `sm90SpeedArrayInter` / `sm100SpeedArrayInter` from Hopper / Blackwell).
pub fn nccl_inter_speeds(arch: Arch) -> &'static [f64] {
    match arch {
        Arch::Hopper => &[
            48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
            0.24, 0.12,
        ],
        Arch::Blackwell => &[
            96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
            6.0, 3.0, 2.4, 1.2, 0.24, 0.12,
        ],
        _ => &[
            48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
            2.4, 1.2, 0.24, 0.12,
        ],
    }
}

/// Most channels NCCL's ring (and tree) graph may have
/// (`ringGraph->maxChannels = MAXCHANNELS / 2`, NVIDIA/nccl `src/init.cc`;
/// [`NCCL_MAX_CHANNELS`]).
pub const NCCL_MAX_RING_GRAPH_CHANNELS: usize = NCCL_MAX_CHANNELS as usize / 2;

/// The most channels NCCL runs (`MAXCHANNELS`, NVIDIA/nccl
/// `src/include/device.h`: 64 since NCCL 2.25, 32 before).
pub const NCCL_MAX_CHANNELS: u16 = 64;

/// The channels of NCCL's communicator across nodes (`comm->nChannels`
/// once `ncclTopoPostset` has run, NVIDIA/nccl 2.25 `src/graph/connect.cc`),
/// which its point-to-point operations take theirs from
/// (`ncclTopoComputeP2pChannels` runs after it, `src/init.cc`): the ring
/// graph's `graph_channels` (at `graph_bw` GB/s each, [`nccl_inter_graph`])
/// duplicated, at most `MAXCHANNELS` (64; "Duplication should be complete
/// now"); doubled again on Hopper and later where the graph's speed is
/// above 45 GB/s and that leaves fewer than 16 ("Use 4 compute channels
/// per search channel to reach peak BW on <8 PPN"); at least NCCL's NVLS
/// channels where NVLS runs (`nvls`: `copyChannels` up to
/// `comm->nvlsChannels`, [`nvls_channels`]). NCCL 2.24.3 differs:
/// `MAXCHANNELS` 32 (GB200 NVL72 racks 32), 16 NVLS channels on Blackwell
/// too (DGX B200 nodes 16), the second doubling on compute capability
/// 9.0 only; 2.27 is 2.25's.
///
/// ```
/// use gpucomm_sim::model::{nccl_comm_channels, Arch};
/// // DGX H100 nodes: 8 graph channels at 48 GB/s, 16 channels.
/// assert_eq!(nccl_comm_channels(8, 48.0, Arch::Hopper, Some(16)), 16);
/// // DGX A100 nodes: 8 at 24, no NVLS: 16.
/// assert_eq!(nccl_comm_channels(8, 24.0, Arch::Ampere, None), 16);
/// // GB200 NVL72 racks: the graph's 32 rings, 64 channels.
/// assert_eq!(nccl_comm_channels(32, 48.0, Arch::Blackwell, Some(32)), 64);
/// // Six 400G NICs on an H100 node: 6 at 48, 12, then 24.
/// assert_eq!(nccl_comm_channels(6, 48.0, Arch::Hopper, None), 24);
/// // One NIC a GPU (GH200): its graph's 2 at 24, 4.
/// assert_eq!(nccl_comm_channels(2, 24.0, Arch::Hopper, None), 4);
/// ```
pub fn nccl_comm_channels(
    graph_channels: usize,
    graph_bw: f64,
    arch: Arch,
    nvls: Option<u16>,
) -> u16 {
    let mut c = graph_channels
        .max(1)
        .saturating_mul(2)
        .min(usize::from(NCCL_MAX_CHANNELS));
    if arch >= Arch::Hopper && graph_bw > 45.0 && c < 16 {
        c *= 2;
    }
    (c as u16).max(nvls.unwrap_or(0))
}

/// The graph NCCL's topology search finds for rings and trees across
/// nodes of NVLink-joined GPUs ([`nccl_inter_graph`]), which its model
/// rates them from (`tuning.cc`: `busBw = nChannels x bw`, `bw` being
/// `bwIntra` up to two nodes and `bwInter` beyond).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NcclInterGraph {
    /// Channels (`nChannels`); the tree graph has the ring's
    /// (`treeGraph->minChannels = maxChannels = ringGraph->nChannels`).
    pub channels: usize,
    /// `bwInter`, GB/s per channel (a ring's `bwIntra` is the same: the
    /// search raises both together).
    pub bw_inter: f64,
}

/// NCCL's ring graph across nodes (NVIDIA/nccl `src/graph/search.cc`,
/// `ncclTopoCompute`): the search starts at the fastest of its inter-node
/// speeds ([`nccl_inter_speeds`]) not above the best GPU-to-NIC path (the
/// NIC's rate and the PCIe link before it, NCCL's [`nccl_pcie_gbps`]); a
/// channel enters and leaves a node through one NIC, which takes as many
/// channels as fit in its path at that speed (`ncclTopoSearchRecNet`
/// subtracts each channel's speed from the NIC's), at most
/// [`NCCL_MAX_RING_GRAPH_CHANNELS`]; then `ncclTopoDupChannels` doubles the
/// channels at half the speed when the speed is 25 GB/s or more, except
/// after Ampere below 50 GB/s with more than 4 channels.
///
/// ```
/// use gpucomm_sim::model::{Arch, nccl_inter_graph, nccl_pcie_gbps};
/// // DGX H100: 8 NICs of 400 Gb/s behind PCIe Gen5: 8 channels x 48.
/// let h = nccl_inter_graph(Arch::Hopper, 8, 50.0, nccl_pcie_gbps(5, 16));
/// assert_eq!((h.channels, h.bw_inter, h.bus_gbps()), (8, 48.0, 384.0));
/// // DGX A100: 8 NICs of 200 Gb/s behind PCIe Gen4 (24 GB/s): 8 x 24.
/// let a = nccl_inter_graph(Arch::Ampere, 8, 25.0, nccl_pcie_gbps(4, 16));
/// assert_eq!((a.channels, a.bw_inter), (8, 24.0));
/// // One 400 Gb/s NIC on an A100 node: 1 channel at 48, doubled to 2 at 24.
/// let one = nccl_inter_graph(Arch::Ampere, 1, 50.0, 50.0);
/// assert_eq!((one.channels, one.bw_inter), (2, 24.0));
/// ```
pub fn nccl_inter_graph(arch: Arch, nics: usize, nic_gbps: f64, pcie_gbps: f64) -> NcclInterGraph {
    let path = nic_gbps.min(pcie_gbps);
    let speeds = nccl_inter_speeds(arch);
    let speed = speeds
        .iter()
        .copied()
        .find(|&s| s <= path)
        .unwrap_or(speeds[speeds.len() - 1]);
    let per_nic = (path / speed).floor().max(1.0) as usize;
    let mut channels = nics
        .max(1)
        .saturating_mul(per_nic)
        .min(NCCL_MAX_RING_GRAPH_CHANNELS);
    let mut bw = speed;
    let after_ampere = arch > Arch::Ampere;
    if bw >= 25.0 && !(after_ampere && bw < 50.0 && channels > 4) {
        let dup = (2 * channels).min(NCCL_MAX_RING_GRAPH_CHANNELS);
        bw /= dup.div_ceil(channels) as f64;
        channels = dup;
    }
    NcclInterGraph {
        channels,
        bw_inter: bw,
    }
}

impl NcclInterGraph {
    /// `nChannels x bwInter`, GB/s: the bus bandwidth NCCL rates its rings
    /// from across nodes, and its trees beyond two nodes.
    pub fn bus_gbps(&self) -> f64 {
        self.channels as f64 * self.bw_inter
    }

    /// The tree graph's `bwIntra` on `nodes` nodes whose GPUs each reach
    /// an NVSwitch at `switch_gbps` (NCCL's per-link figure times the
    /// links; `None` without a switch), GB/s: on two nodes the search's
    /// second pass raises a tree's `bwIntra` a speed at a time ("increase
    /// bwIntra for trees (2 nodes or collnet)", `search.cc`) while the
    /// last raise fit and it is below twice `bwInter`; a raise fits where
    /// every channel's chain, crossing each GPU's link to the switch once
    /// each way, leaves it within the link. Beyond two nodes, and without
    /// a switch (where the fit depends on the chains' orders, which the
    /// simulator does not search), `bwInter`.
    ///
    /// ```
    /// use gpucomm_sim::model::{Arch, nccl_inter_graph, nccl_pcie_gbps};
    /// // DGX A100 (12 NVLinks x 20 GB/s): 8 channels raise 24 to 30 (8 x 48 > 240).
    /// let a = nccl_inter_graph(Arch::Ampere, 8, 25.0, nccl_pcie_gbps(4, 16));
    /// assert_eq!(a.tree_bw_intra(Arch::Ampere, 2, Some(240.0)), 30.0);
    /// assert_eq!(a.tree_bw_intra(Arch::Ampere, 4, Some(240.0)), 24.0);
    /// // DGX H100: 48 is already NCCL's fastest speed across nodes.
    /// let h = nccl_inter_graph(Arch::Hopper, 8, 50.0, nccl_pcie_gbps(5, 16));
    /// assert_eq!(h.tree_bw_intra(Arch::Hopper, 2, Some(370.8)), 48.0);
    /// ```
    pub fn tree_bw_intra(&self, arch: Arch, nodes: usize, switch_gbps: Option<f64>) -> f64 {
        let Some(link) = switch_gbps.filter(|_| nodes <= 2) else {
            return self.bw_inter;
        };
        let speeds = nccl_inter_speeds(arch);
        let Some(mut i) = speeds.iter().position(|&s| s <= self.bw_inter) else {
            return self.bw_inter;
        };
        let mut bw = speeds[i];
        while i > 0 && bw < 2.0 * self.bw_inter {
            i -= 1;
            // (NCCL rounds the links' remaining bandwidth to 1e-3.)
            if self.channels as f64 * speeds[i] > link + 1e-3 {
                break;
            }
            bw = speeds[i];
        }
        bw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_bandwidth_factors_cover_the_line_formats() {
        // NCCL's measured protocol cost can only add to the flag bytes its
        // line formats put on the wire; LL alone is capped.
        for algo in ["ring", "tree", "halving_doubling"] {
            for p in Protocol::ALL {
                for nodes in [1, 2, 16] {
                    for arch in [Arch::Volta, Arch::Ampere, Arch::Hopper] {
                        for amd in [false, true] {
                            let bw = nccl_protocol_bandwidth(algo, p, arch, nodes, amd);
                            assert!(
                                bw.factor >= p.wire_factor() - 1e-12,
                                "{algo} {p} on {nodes} nodes: {} < {}",
                                bw.factor,
                                p.wire_factor()
                            );
                            assert_eq!(bw.cap_gbps.is_some(), p == Protocol::Ll);
                        }
                    }
                }
            }
        }
    }

    fn comm(ranks: usize, nodes: usize, nvlink: bool, amd_cpu: bool) -> NcclComm {
        NcclComm {
            ranks,
            nodes,
            nvlink,
            arch: Arch::Hopper,
            amd_cpu,
            channels: 8,
            same_channels: true,
        }
    }

    #[test]
    fn nccl_model_latency_follows_tuning_cc() {
        use Protocol::*;
        use gpucomm_algo::Collective as C;
        let ar = C::AllReduce;
        let lat =
            |algo, p, coll, bytes, c: &NcclComm| nccl_model_latency_us(algo, p, coll, bytes, c);
        let close = |got: f64, want: f64| assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        // One node of 8, NVLink: ring 14 steps, tree 2 x 7 steps, NVLS its hwLat.
        let one = comm(8, 1, true, false);
        close(lat("ring", Ll, ar, 8, &one), 6.6 + 14.0 * 0.6);
        close(lat("ring", Ll128, ar, 8, &one), 14.0 + 14.0 * 1.9);
        close(lat("tree", Simple, ar, 8, &one), 8.4 + 2.0 * 7.0 * 4.0);
        close(lat("nvls", Simple, ar, 8, &one), 25.0);
        // all_gather: 7 steps; broadcast: one hwLat (same channels).
        close(lat("ring", Simple, C::AllGather, 8, &one), 8.4 + 7.0 * 3.4);
        close(
            lat("ring", Simple, C::Broadcast { root: 0 }, 8, &one),
            8.4 + 3.4,
        );
        // Without NVLink: the PCIe row.
        close(
            lat("ring", Simple, ar, 8, &comm(8, 1, false, false)),
            8.4 + 14.0 * 5.7,
        );
        // 4 nodes of 8 (32 ranks): ring 62 steps, 6 across the network,
        // the others at least the network post overhead (Intel 1 us, AMD
        // 2 us; x3 under Simple); the plateau x1.4 from 64 B per channel
        // and rank (8 x 32 x 64 = 16 KiB).
        let four = comm(32, 4, true, false);
        close(lat("ring", Ll, ar, 8, &four), 6.6 + 56.0 * 1.0 + 6.0 * 2.7);
        close(
            lat("ring", Simple, ar, 8, &four),
            8.4 + 56.0 * 3.4 + 6.0 * 14.0,
        );
        close(
            lat("ring", Simple, ar, 16 << 10, &four),
            1.4 * (8.4 + 56.0 * 3.4 + 6.0 * 14.0),
        );
        let four_amd = comm(32, 4, true, true);
        close(
            lat("ring", Simple, ar, 8, &four_amd),
            8.4 + 56.0 * 6.0 + 6.0 * 14.0,
        );
        // Tree: 2 x (7 NVLink + log2(4) network) steps.
        close(
            lat("tree", Ll, ar, 8, &four),
            6.8 + 2.0 * (7.0 * 0.6 + 2.0 * 5.0),
        );
        // Broadcast across nodes where the channels take different orders
        // through a node (one NIC each): every one of the 32 steps at the
        // network hwLat, Simple at the tree's; with one order, one hop.
        let bc = C::Broadcast { root: 0 };
        let mixed = NcclComm {
            same_channels: false,
            ..four
        };
        close(lat("ring", Ll128, bc, 8, &mixed), 14.0 + 32.0 * 4.0);
        close(lat("ring", Simple, bc, 8, &mixed), 8.4 + 32.0 * 14.0);
        close(
            lat("ring", Ll, C::Reduce { root: 0 }, 8, &mixed),
            6.6 + 32.0 * 2.7,
        );
        close(lat("ring", Ll128, bc, 8, &four), 14.0 + 4.0);
        // The switch algorithms.
        close(lat("nvls", Simple, ar, 8, &four), 25.0 + 18.0);
        close(
            lat("nvls_tree", Simple, ar, 8, &four),
            25.0 + 2.0 * 2.0 * 20.9,
        );
        close(
            lat("collnet", Simple, ar, 8, &four),
            2.0 * (3.7 + 7.0 * 0.4) + 31.0,
        );
        // One GPU per node: the network hwLat is the tree's.
        let spread = comm(4, 4, true, false);
        close(lat("collnet", Simple, ar, 8, &spread), 14.0);
        close(lat("ring", Ll, ar, 8, &spread), 6.6 + 6.0 * 5.0);
        // PAT on 16 nodes of one GPU: log2(16) x 14 / 3.5 + 16 x 2.8.
        let sixteen = comm(16, 16, true, false);
        close(
            lat("pat", Simple, C::AllGather, 8, &sixteen),
            8.0 + 4.0 * 14.0 / 3.5 + 16.0 * 2.8,
        );
        close(
            lat("pat", Simple, C::ReduceScatter, 8, &sixteen),
            8.0 + 4.0 * 14.0 / 3.5 + 16.0 * 2.8,
        );
        let pat = nccl_protocol_bandwidth("pat", Simple, Arch::Hopper, 16, false);
        close(pat.factor, 1.0 / 0.75);
        assert!(nccl_protocol_check("pat", Ll, Arch::Hopper, true, None).is_err());
        assert!(nccl_protocol_check("pat", Simple, Arch::Hopper, true, None).is_ok());
    }

    #[test]
    fn more_nodes_than_ranks_is_taken_as_one_rank_per_node() {
        // A bad communicator neither panics nor goes negative.
        let bad = comm(2, 4, true, false);
        let lat = nccl_model_latency_us(
            "ring",
            Protocol::Ll,
            gpucomm_algo::Collective::AllReduce,
            8,
            &bad,
        );
        let two = nccl_model_latency_us(
            "ring",
            Protocol::Ll,
            gpucomm_algo::Collective::AllReduce,
            8,
            &comm(2, 2, true, false),
        );
        assert_eq!(lat, two);
        assert!(
            nccl_model_latency_us(
                "tree",
                Protocol::Simple,
                gpucomm_algo::Collective::AllReduce,
                8,
                &bad
            ) > 0.0
        );
    }

    #[test]
    fn the_tree_correction_is_nccls_table_by_size() {
        // 64 B is log 0, 256 MiB log 22; 512 MiB and up, and below 64 B: 1.
        assert_eq!(nccl_tree_correction(Protocol::Simple, 64), 0.9);
        assert_eq!(nccl_tree_correction(Protocol::Ll, 1 << 19), 0.4);
        assert_eq!(nccl_tree_correction(Protocol::Ll128, 1 << 20), 0.6);
        assert_eq!(nccl_tree_correction(Protocol::Simple, (1 << 20) + 5), 0.5);
        assert_eq!(nccl_tree_correction(Protocol::Simple, 256 << 20), 0.9);
        assert_eq!(nccl_tree_correction(Protocol::Simple, 512 << 20), 1.0);
        assert_eq!(nccl_tree_correction(Protocol::Ll, 8), 1.0);
    }
}
