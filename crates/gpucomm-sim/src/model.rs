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

/// NCCL's default number of NVLS channels (`NCCL_NVLS_NCHANNELS`, NCCL
/// environment-variable documentation: 16); NCCL's model scales NVLS
/// bandwidth by `(nChannels - 1) / nChannels` (tuning.cc).
pub const NVLS_CHANNELS: f64 = 16.0;

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

/// NCCL's latency figures (NVIDIA/nccl `src/graph/tuning.cc`,
/// `baseLatencies` and `hwLatencies`): the launch cost of an algorithm and
/// protocol, and its per-step cost by path (NVLink, PCIe, network).
/// NVLS runs the Simple protocol only; algorithms NCCL does not have use
/// the ring figures.
pub fn nccl_overheads(algo: &str, protocol: Protocol) -> Overheads {
    use Protocol::*;
    // (base, nvlink, pci, net) in us.
    let (base, nvl, pci, net) = match (algo, protocol) {
        ("nvls", _) => (0.0, 25.0, 0.0, 0.0),
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
/// (`typeIntra <= PATH_NVB`).
pub fn nccl_protocol_check(
    algo: &str,
    protocol: Protocol,
    arch: Arch,
    nvlink: bool,
) -> Result<(), &'static str> {
    match protocol {
        Protocol::Simple => Ok(()),
        _ if algo == "nvls" || algo == "collnet" || algo == "nvls_tree" => {
            Err("NVLS, NVLSTree and CollNet run the Simple protocol only")
        }
        Protocol::Ll => Ok(()),
        Protocol::Ll128 if nvlink && arch >= Arch::Volta => Ok(()),
        Protocol::Ll128 => Err("LL128 needs Volta or later and GPUs joined by NVLink"),
    }
}

/// Time a copy engine needs to start one copy, us: CUDA's asynchronous
/// copy submission is of the order of a microsecond or two (a modeling
/// assumption, not a published constant; see docs/sim.md).
pub const CE_COPY_OVERHEAD_US: f64 = 1.5;

/// Extra cost of a copy the driver stages through host memory: the host
/// thread waits for the device-to-host half before issuing the
/// host-to-device half (an event synchronisation plus a second submission).
/// A modeling assumption (order of magnitude of a CUDA event wait, 5-10 us).
pub const STAGED_SYNC_US: f64 = 10.0;

/// Bandwidth of one large `memcpy` on the host, GB/s: glibc switches to
/// non-temporal stores above 3/4 of the shared cache
/// (`__x86_shared_non_temporal_threshold`, glibc sysdeps/x86/dl-cacheinfo.h),
/// so each byte copied costs one read and one write of DRAM: half the
/// memory bandwidth.
pub fn memcpy_gbps(host_mem_gbps: f64) -> f64 {
    host_mem_gbps / 2.0
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
}
