//! The catalog of interconnect generations: bandwidth per direction and
//! latency of every [`LinkKind`], each figure with its source.
//!
//! Units everywhere: bandwidth in GB/s **per direction** (1 GB/s = 1e9 B/s),
//! latency in microseconds. A "bidirectional" figure is twice the
//! per-direction one; vendors often quote that, which is where many
//! write-ups go wrong (see `docs/topology.md`).
//!
//! Bandwidths are the *data* rates after line coding (128b/130b for PCIe
//! Gen3–5, 64b/66b for InfiniBand and Ethernet), before protocol overhead
//! (TLP headers, flow-control credits, packet headers). Measured throughput
//! is lower: e.g. 53 GB/s host-to-device on PCIe Gen5 x16 against 63.0
//! here (`shared/calibration/measurements.toml`); applying an efficiency is
//! the simulator's job, not the catalog's.
//!
//! Latencies are per link traversal and are *modeling assumptions* of the
//! right order of magnitude (no standard specifies them); each says so in
//! its source. End-to-end latencies are calibrated by the simulator.

use std::fmt;

/// PCI Express generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PcieGen {
    /// PCIe 1.x: 2.5 GT/s, 8b/10b.
    Gen1,
    /// PCIe 2.x: 5 GT/s, 8b/10b.
    Gen2,
    /// PCIe 3.x: 8 GT/s, 128b/130b.
    Gen3,
    /// PCIe 4.0: 16 GT/s, 128b/130b.
    Gen4,
    /// PCIe 5.0: 32 GT/s, 128b/130b.
    Gen5,
    /// PCIe 6.0: 64 GT/s PAM4, FLIT mode.
    Gen6,
}

impl PcieGen {
    /// Generation from its number (1..=6).
    pub fn from_number(n: u8) -> Option<Self> {
        Some(match n {
            1 => Self::Gen1,
            2 => Self::Gen2,
            3 => Self::Gen3,
            4 => Self::Gen4,
            5 => Self::Gen5,
            6 => Self::Gen6,
            _ => return None,
        })
    }
    /// Generation from the transfer rate in GT/s as sysfs prints it
    /// (`current_link_speed`: "16.0 GT/s PCIe").
    pub fn from_gts(gts: f64) -> Option<Self> {
        let table = [
            (2.5, Self::Gen1),
            (5.0, Self::Gen2),
            (8.0, Self::Gen3),
            (16.0, Self::Gen4),
            (32.0, Self::Gen5),
            (64.0, Self::Gen6),
        ];
        table
            .iter()
            .find(|(r, _)| (r - gts).abs() < 0.01)
            .map(|&(_, g)| g)
    }
    /// The generation's number.
    pub fn number(self) -> u8 {
        self as u8 + 1
    }
    /// Signaling rate per lane in GT/s.
    pub fn gts(self) -> f64 {
        match self {
            Self::Gen1 => 2.5,
            Self::Gen2 => 5.0,
            Self::Gen3 => 8.0,
            Self::Gen4 => 16.0,
            Self::Gen5 => 32.0,
            Self::Gen6 => 64.0,
        }
    }
    /// Data bandwidth per lane per direction in GB/s, after line coding.
    ///
    /// Source: PCI-SIG specifications (8b/10b for 1.x/2.x, 128b/130b for
    /// 3.x–5.0; PCI-SIG quotes 6.0 as 64 GT/s, 256 GB/s bidirectional for
    /// x16, i.e. 8 GB/s per lane per direction before FLIT overhead).
    pub fn lane_gbps(self) -> f64 {
        match self {
            Self::Gen1 | Self::Gen2 => self.gts() * 8.0 / 10.0 / 8.0,
            Self::Gen3 | Self::Gen4 | Self::Gen5 => self.gts() * 128.0 / 130.0 / 8.0,
            Self::Gen6 => self.gts() / 8.0,
        }
    }
}

/// NVLink generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NvLinkGen {
    /// NVLink 1.0 (P100): 20 GB/s per link per direction.
    V1,
    /// NVLink 2.0 (V100): 25 GB/s per link per direction.
    V2,
    /// NVLink 3.0 (A100): 25 GB/s per link per direction.
    V3,
    /// NVLink 4.0 (H100/H200): 25 GB/s per link per direction.
    V4,
    /// NVLink 5.0 (B200/GB200): 50 GB/s per link per direction.
    V5,
}

impl NvLinkGen {
    /// Generation from its number (1..=5).
    pub fn from_number(n: u8) -> Option<Self> {
        Some(match n {
            1 => Self::V1,
            2 => Self::V2,
            3 => Self::V3,
            4 => Self::V4,
            5 => Self::V5,
            _ => return None,
        })
    }
    /// The generation's number.
    pub fn number(self) -> u8 {
        self as u8 + 1
    }
    /// Per-lane signaling rate in Gb/s and lanes per link per direction.
    pub fn signaling(self) -> (f64, u8) {
        match self {
            Self::V1 => (20.0, 8),
            Self::V2 => (25.0, 8),
            Self::V3 => (50.0, 4),
            Self::V4 => (100.0, 2),
            Self::V5 => (200.0, 2),
        }
    }
    /// Bandwidth of one link per direction in GB/s.
    ///
    /// Sources: NVIDIA Tesla P100 whitepaper (4 links, 160 GB/s
    /// bidirectional), Tesla V100 whitepaper (6 links, 300 GB/s), A100
    /// Tensor Core GPU Architecture whitepaper (12 links, 600 GB/s), H100
    /// Tensor Core GPU Architecture whitepaper (18 links, 900 GB/s),
    /// NVIDIA Blackwell Architecture Technical Brief (18 links, 1.8 TB/s).
    pub fn link_gbps(self) -> f64 {
        match self {
            Self::V1 => 20.0,
            Self::V2 | Self::V3 | Self::V4 => 25.0,
            Self::V5 => 50.0,
        }
    }
    /// Links per GPU on the flagship GPU of the generation.
    pub fn links_per_gpu(self) -> u8 {
        match self {
            Self::V1 => 4,
            Self::V2 => 6,
            Self::V3 => 12,
            Self::V4 | Self::V5 => 18,
        }
    }
}

/// An FDR lane's data rate: 14.0625 Gb/s signaling, 64b/66b coding (IBTA).
const FDR_LANE_GBIT: f64 = 14.0625 * 64.0 / 66.0;

/// InfiniBand speed (4x port unless the name says otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IbSpeed {
    /// FDR 4x: sold as 56 Gb/s; 4 lanes signaling at 14.0625 Gb/s with
    /// 64b/66b coding carry 54.55 Gb/s of data.
    Fdr,
    /// EDR 4x: 100 Gb/s (25 Gb/s per lane).
    Edr,
    /// HDR100: 100 Gb/s (2 lanes of 50 Gb/s PAM4).
    Hdr100,
    /// HDR 4x: 200 Gb/s (50 Gb/s PAM4 per lane).
    Hdr,
    /// NDR200: 200 Gb/s (2 lanes of 100 Gb/s PAM4) = 25 GB/s per direction.
    Ndr200,
    /// NDR 4x: 400 Gb/s (100 Gb/s PAM4 per lane).
    Ndr,
    /// XDR 4x: 800 Gb/s (200 Gb/s per lane).
    Xdr,
}

impl IbSpeed {
    /// All speeds, slowest first.
    pub const ALL: [IbSpeed; 7] = [
        Self::Fdr,
        Self::Edr,
        Self::Hdr100,
        Self::Hdr,
        Self::Ndr200,
        Self::Ndr,
        Self::Xdr,
    ];
    /// The name used in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fdr => "fdr",
            Self::Edr => "edr",
            Self::Hdr100 => "hdr100",
            Self::Hdr => "hdr",
            Self::Ndr200 => "ndr200",
            Self::Ndr => "ndr",
            Self::Xdr => "xdr",
        }
    }
    /// Parses a name (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|v| v.name().eq_ignore_ascii_case(s))
    }
    /// Data rate of the port in Gb/s (after line coding, as every other
    /// rate of the catalog).
    ///
    /// Source: InfiniBand Trade Association roadmap (EDR 100, HDR 200,
    /// NDR 400, XDR 800 Gb/s per 4x port; HDR100/NDR200 are 2-lane ports);
    /// NVIDIA ConnectX-6/-7 and Quantum/Quantum-2 datasheets. FDR is the
    /// exception to its name: IBTA's FDR lane signals at 14.0625 Gb/s with
    /// 64b/66b coding, so a 4x port carries 4 x 14.0625 x 64/66 = 54.55
    /// Gb/s of data; "56" is 4 x 14 rounded from the signaling rate
    /// ([`IbSpeed::nominal_gbit`]).
    ///
    /// ```
    /// use gpucomm_topo::IbSpeed;
    /// assert!((IbSpeed::Fdr.gbit() - 54.545).abs() < 0.001);
    /// assert_eq!(IbSpeed::Edr.gbit(), 100.0);
    /// ```
    pub fn gbit(self) -> f64 {
        match self {
            Self::Fdr => FDR_LANE_GBIT * 4.0,
            Self::Edr | Self::Hdr100 => 100.0,
            Self::Hdr | Self::Ndr200 => 200.0,
            Self::Ndr => 400.0,
            Self::Xdr => 800.0,
        }
    }
    /// The rate the port is sold as and sysfs names it by ("56 Gb/sec
    /// (4X FDR)"): [`IbSpeed::gbit`] but for FDR's 56.
    pub fn nominal_gbit(self) -> f64 {
        match self {
            Self::Fdr => 56.0,
            other => other.gbit(),
        }
    }
    /// Lanes per port and per-lane data rate in Gb/s (their product is
    /// [`IbSpeed::gbit`]; FDR's lane signals at 14.0625 Gb/s, 64b/66b).
    pub fn lanes(self) -> (u8, f64) {
        match self {
            Self::Fdr => (4, FDR_LANE_GBIT),
            Self::Edr => (4, 25.0),
            Self::Hdr100 => (2, 50.0),
            Self::Hdr => (4, 50.0),
            Self::Ndr200 => (2, 100.0),
            Self::Ndr => (4, 100.0),
            Self::Xdr => (4, 200.0),
        }
    }
}

/// A link kind with its generation and width: what the catalog needs to
/// give bandwidth and latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LinkKind {
    /// PCI Express with `width` lanes (1, 2, 4, 8, 16, 32).
    Pcie {
        /// Generation.
        generation: PcieGen,
        /// Lanes.
        width: u8,
    },
    /// `count` NVLink links bonded between two chips (GPU–GPU, GPU–NVSwitch,
    /// NVSwitch–NVSwitch: an NVSwitch port is an NVLink port of the switch's
    /// generation).
    NvLink {
        /// Generation.
        generation: NvLinkGen,
        /// Links in the bundle.
        count: u8,
    },
    /// `count` InfiniBand ports of one speed (count > 1 for aggregated
    /// switch-to-switch trunks).
    Infiniband {
        /// Port speed.
        speed: IbSpeed,
        /// Ports in the trunk.
        count: u16,
    },
    /// `count` Ethernet ports of `gbit` Gb/s (100, 200, 400, 800; also 1,
    /// 10, 25, 40, 50 for discovered NICs), RDMA-capable when `roce`.
    Ethernet {
        /// Port speed in Gb/s.
        gbit: u16,
        /// Ports in the trunk.
        count: u16,
        /// RoCE (RDMA over Converged Ethernet) is enabled.
        roce: bool,
    },
    /// Intel QuickPath Interconnect: `count` links at `mts` MT/s.
    Qpi {
        /// Transfer rate in MT/s (6400, 7200, 8000, 9600).
        mts: u16,
        /// Links between the two sockets.
        count: u8,
    },
    /// Intel Ultra Path Interconnect: `count` links at `mts` MT/s.
    Upi {
        /// Transfer rate in MT/s (10400, 11200, 12800, 14400, 16000, 20000).
        mts: u16,
        /// Links between the two sockets.
        count: u8,
    },
    /// AMD Infinity Fabric between sockets (xGMI, x16 links): `count` links
    /// at `mts` MT/s per lane.
    InfinityFabric {
        /// Per-lane rate in MT/s (10600, 16000, 18000, 25000, 32000).
        mts: u16,
        /// x16 links between the two sockets.
        count: u8,
    },
    /// NVLink-C2C between a Grace CPU and a Hopper/Blackwell GPU.
    NvLinkC2c,
    /// A link between NUMA nodes whose technology is not known (discovery
    /// cannot read QPI/UPI speeds); classified SYS like the others.
    Smp,
    /// A connection with no link of its own to model: a device integrated
    /// in the root complex or a virtual (VM) device, as discovery finds
    /// them. Its bandwidth is a nominal 1000 GB/s, meaning "not the
    /// bottleneck", not a measured or specified figure.
    Integrated,
}

/// Where a figure comes from.
pub type Source = &'static str;

const SRC_PCIE: Source = "PCI-SIG PCI Express Base Specification 1.0-6.0 (line rate x coding)";
const SRC_NVLINK: Source = "NVIDIA P100/V100/A100/H100 whitepapers, Blackwell technical brief";
const SRC_IB: Source = "IBTA InfiniBand roadmap; NVIDIA ConnectX/Quantum datasheets";
const SRC_ETH: Source = "IEEE 802.3 (100/200/400/800GBASE data rate)";
const SRC_QPI: Source = "Intel QPI: 2 bytes per transfer per direction (e.g. 9.6 GT/s = 19.2 GB/s)";
const SRC_UPI: Source =
    "Intel Xeon Scalable datasheets: 2 bytes per transfer per direction (10.4 GT/s = 20.8 GB/s)";
const SRC_IF: Source =
    "AMD EPYC 7002/9004 architecture overviews: xGMI x16 links (16 bits/transfer)";
const SRC_C2C: Source = "NVIDIA Grace Hopper Superchip whitepaper: NVLink-C2C 900 GB/s total";
const SRC_SMP: Source = "assumption: unknown CPU interconnect, one UPI 10.4 GT/s link";
const SRC_INTEGRATED: Source = "nominal: integrated or virtual device, not a bottleneck";

impl LinkKind {
    /// Bandwidth per direction in GB/s.
    pub fn bandwidth(self) -> f64 {
        match self {
            Self::Pcie { generation, width } => generation.lane_gbps() * f64::from(width),
            Self::NvLink { generation, count } => generation.link_gbps() * f64::from(count),
            Self::Infiniband { speed, count } => speed.gbit() / 8.0 * f64::from(count),
            Self::Ethernet { gbit, count, .. } => f64::from(gbit) / 8.0 * f64::from(count),
            // 16 data bits (2 bytes) per transfer per direction.
            Self::Qpi { mts, count }
            | Self::Upi { mts, count }
            | Self::InfinityFabric { mts, count } => {
                f64::from(mts) * 2.0 / 1000.0 * f64::from(count)
            }
            Self::NvLinkC2c => 450.0,
            Self::Smp => 20.8,
            Self::Integrated => 1000.0,
        }
    }

    /// Bidirectional bandwidth (both directions together) in GB/s.
    pub fn bidirectional(self) -> f64 {
        2.0 * self.bandwidth()
    }

    /// Latency of one traversal of this link, including the port logic at
    /// its ends, in microseconds. A modeling assumption (see module docs).
    pub fn latency_us(self) -> f64 {
        match self {
            Self::Pcie { .. } => 0.25,
            Self::NvLink { .. } => 0.15,
            Self::Infiniband { .. } => 0.6,
            Self::Ethernet { roce: true, .. } => 0.8,
            Self::Ethernet { roce: false, .. } => 5.0,
            Self::Qpi { .. } | Self::Upi { .. } | Self::InfinityFabric { .. } | Self::Smp => 0.1,
            Self::NvLinkC2c => 0.1,
            Self::Integrated => 0.0,
        }
    }

    /// The source of the bandwidth figure.
    pub fn source(self) -> Source {
        match self {
            Self::Pcie { .. } => SRC_PCIE,
            Self::NvLink { .. } => SRC_NVLINK,
            Self::Infiniband { .. } => SRC_IB,
            Self::Ethernet { .. } => SRC_ETH,
            Self::Qpi { .. } => SRC_QPI,
            Self::Upi { .. } => SRC_UPI,
            Self::InfinityFabric { .. } => SRC_IF,
            Self::NvLinkC2c => SRC_C2C,
            Self::Smp => SRC_SMP,
            Self::Integrated => SRC_INTEGRATED,
        }
    }

    /// True for network links (InfiniBand, Ethernet): crossing one makes a
    /// path `NET`.
    pub fn is_network(self) -> bool {
        matches!(self, Self::Infiniband { .. } | Self::Ethernet { .. })
    }

    /// True for NVLink bundles.
    pub fn is_nvlink(self) -> bool {
        matches!(self, Self::NvLink { .. })
    }

    /// True for links between CPU sockets / NUMA nodes (QPI, UPI, Infinity
    /// Fabric, unknown SMP): crossing one makes a path `SYS`.
    pub fn is_smp(self) -> bool {
        matches!(
            self,
            Self::Qpi { .. } | Self::Upi { .. } | Self::InfinityFabric { .. } | Self::Smp
        )
    }

    /// True for PCIe links.
    pub fn is_pcie(self) -> bool {
        matches!(self, Self::Pcie { .. })
    }

    /// The name of the kind in files (`kind = "..."`).
    pub fn kind_name(self) -> &'static str {
        match self {
            Self::Pcie { .. } => "pcie",
            Self::NvLink { .. } => "nvlink",
            Self::Infiniband { .. } => "infiniband",
            Self::Ethernet { roce: true, .. } => "roce",
            Self::Ethernet { roce: false, .. } => "ethernet",
            Self::Qpi { .. } => "qpi",
            Self::Upi { .. } => "upi",
            Self::InfinityFabric { .. } => "infinity-fabric",
            Self::NvLinkC2c => "nvlink-c2c",
            Self::Smp => "smp",
            Self::Integrated => "integrated",
        }
    }
}

impl fmt::Display for LinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Pcie { generation, width } => {
                write!(f, "PCIe Gen{} x{}", generation.number(), width)
            }
            Self::NvLink { generation, count } => {
                write!(f, "NVLink{} x{}", generation.number(), count)
            }
            Self::Infiniband { speed, count } => {
                write!(f, "IB {}", speed.name().to_uppercase())?;
                if count > 1 {
                    write!(f, " x{count}")?;
                }
                Ok(())
            }
            Self::Ethernet { gbit, count, roce } => {
                write!(f, "{} {gbit}G", if roce { "RoCE" } else { "Ethernet" })?;
                if count > 1 {
                    write!(f, " x{count}")?;
                }
                Ok(())
            }
            Self::Qpi { mts, count } => write!(f, "QPI {:.1} GT/s x{count}", f64::from(mts) / 1e3),
            Self::Upi { mts, count } => write!(f, "UPI {:.1} GT/s x{count}", f64::from(mts) / 1e3),
            Self::InfinityFabric { mts, count } => {
                write!(
                    f,
                    "Infinity Fabric {:.1} GT/s x{count}",
                    f64::from(mts) / 1e3
                )
            }
            Self::NvLinkC2c => write!(f, "NVLink-C2C"),
            Self::Smp => write!(f, "SMP interconnect"),
            Self::Integrated => write!(f, "integrated"),
        }
    }
}

/// The fastest Ethernet port speed, Gb/s (IEEE 802.3dj: 1.6 TbE), that
/// [`parse_port`], the file format and discovery take: one limit, so that
/// whatever is built exports and loads again.
pub const MAX_ETHERNET_GBIT: u16 = 1600;

/// Parses a NIC port speed as files and the command line write it:
/// an InfiniBand speed (`edr`, `hdr`, `hdr100`, `ndr`, `ndr200`, `xdr`,
/// `fdr`), `roce<Gb/s>` (`roce400`) or `eth<Gb/s>` (`eth100`), one port,
/// 1 to [`MAX_ETHERNET_GBIT`] Gb/s.
///
/// ```
/// use gpucomm_topo::catalog::parse_port;
/// assert!(parse_port("roce1600").is_some());
/// assert!(parse_port("roce1601").is_none());
/// assert!(parse_port("eth0").is_none());
/// ```
pub fn parse_port(s: &str) -> Option<LinkKind> {
    let s = s.trim().to_ascii_lowercase();
    if let Some(speed) = IbSpeed::parse(&s) {
        return Some(LinkKind::Infiniband { speed, count: 1 });
    }
    let (roce, rest) = if let Some(r) = s.strip_prefix("roce") {
        (true, r)
    } else if let Some(r) = s.strip_prefix("eth") {
        (false, r)
    } else {
        return None;
    };
    let rest = rest.trim_start_matches(['-', '_']);
    let rest = rest.strip_suffix('g').unwrap_or(rest);
    let gbit: u16 = rest.parse().ok()?;
    (1..=MAX_ETHERNET_GBIT)
        .contains(&gbit)
        .then_some(LinkKind::Ethernet {
            gbit,
            count: 1,
            roce,
        })
}

/// The name [`parse_port`] reads for a network link kind (`None` for
/// other kinds). The port count is not part of the name.
pub fn port_name(kind: LinkKind) -> Option<String> {
    match kind {
        LinkKind::Infiniband { speed, .. } => Some(speed.name().to_string()),
        LinkKind::Ethernet { gbit, roce, .. } => {
            Some(format!("{}{gbit}", if roce { "roce" } else { "eth" }))
        }
        _ => None,
    }
}

/// One row of the catalog table (what `docs/topology.md` prints).
#[derive(Clone, Debug)]
pub struct CatalogEntry {
    /// Generation name, e.g. "PCIe Gen4 x16".
    pub generation: &'static str,
    /// The link kind the row describes.
    pub kind: LinkKind,
    /// Signaling rate in words, e.g. "16 GT/s, 128b/130b".
    pub signaling: &'static str,
    /// Lanes (per direction) in the unit the row describes.
    pub lanes: &'static str,
    /// Products that use it.
    pub products: &'static str,
    /// Where the figure comes from.
    pub source: Source,
}

/// The catalog table: the generations of every link kind, with signaling,
/// lanes, products and sources. Bandwidths come from [`LinkKind::bandwidth`].
pub fn entries() -> Vec<CatalogEntry> {
    use IbSpeed::*;
    use LinkKind as K;
    let pcie = |generation, sig, prod| CatalogEntry {
        generation: match generation {
            PcieGen::Gen3 => "PCIe Gen3 x16",
            PcieGen::Gen4 => "PCIe Gen4 x16",
            PcieGen::Gen5 => "PCIe Gen5 x16",
            PcieGen::Gen6 => "PCIe Gen6 x16",
            PcieGen::Gen2 => "PCIe Gen2 x16",
            PcieGen::Gen1 => "PCIe Gen1 x16",
        },
        kind: K::Pcie {
            generation,
            width: 16,
        },
        signaling: sig,
        lanes: "16",
        products: prod,
        source: SRC_PCIE,
    };
    let nvl = |generation: NvLinkGen, name, sig, lanes, prod| CatalogEntry {
        generation: name,
        kind: K::NvLink {
            generation,
            count: generation.links_per_gpu(),
        },
        signaling: sig,
        lanes,
        products: prod,
        source: SRC_NVLINK,
    };
    let ib = |speed, name, sig, lanes, prod| CatalogEntry {
        generation: name,
        kind: K::Infiniband { speed, count: 1 },
        signaling: sig,
        lanes,
        products: prod,
        source: SRC_IB,
    };
    let eth = |gbit, name, sig, lanes, prod| CatalogEntry {
        generation: name,
        kind: K::Ethernet {
            gbit,
            count: 1,
            roce: true,
        },
        signaling: sig,
        lanes,
        products: prod,
        source: SRC_ETH,
    };
    vec![
        pcie(
            PcieGen::Gen3,
            "8 GT/s, 128b/130b",
            "V100, P100, Xeon E5/Cascade Lake",
        ),
        pcie(
            PcieGen::Gen4,
            "16 GT/s, 128b/130b",
            "A100, RTX 4090, EPYC 7002/7003, Ice Lake",
        ),
        pcie(
            PcieGen::Gen5,
            "32 GT/s, 128b/130b",
            "H100, H200, B200, Sapphire Rapids, EPYC 9004",
        ),
        pcie(
            PcieGen::Gen6,
            "64 GT/s PAM4, FLIT",
            "ConnectX-8, B300 platforms",
        ),
        nvl(
            NvLinkGen::V1,
            "NVLink 1 (4 links)",
            "20 Gb/s NRZ",
            "8 per link x 4 links",
            "P100 (DGX-1 P100)",
        ),
        nvl(
            NvLinkGen::V2,
            "NVLink 2 (6 links)",
            "25 Gb/s NRZ",
            "8 per link x 6 links",
            "V100 (DGX-1 V100, DGX-2)",
        ),
        nvl(
            NvLinkGen::V3,
            "NVLink 3 (12 links)",
            "50 Gb/s NRZ",
            "4 per link x 12 links",
            "A100 (DGX A100)",
        ),
        nvl(
            NvLinkGen::V4,
            "NVLink 4 (18 links)",
            "100 Gb/s PAM4",
            "2 per link x 18 links",
            "H100, H200 (DGX H100, HGX H200)",
        ),
        nvl(
            NvLinkGen::V5,
            "NVLink 5 (18 links)",
            "200 Gb/s PAM4",
            "2 per link x 18 links",
            "B200, GB200 NVL72",
        ),
        ib(
            Edr,
            "InfiniBand EDR",
            "25 Gb/s NRZ",
            "4",
            "ConnectX-4/5, DGX-1, DGX-2",
        ),
        ib(
            Hdr100,
            "InfiniBand HDR100",
            "50 Gb/s PAM4",
            "2",
            "ConnectX-6 split ports",
        ),
        ib(
            Hdr,
            "InfiniBand HDR",
            "50 Gb/s PAM4",
            "4",
            "ConnectX-6, DGX A100",
        ),
        ib(
            Ndr200,
            "InfiniBand NDR200",
            "100 Gb/s PAM4",
            "2",
            "ConnectX-7 split ports",
        ),
        ib(
            Ndr,
            "InfiniBand NDR",
            "100 Gb/s PAM4",
            "4",
            "ConnectX-7, DGX H100",
        ),
        ib(
            Xdr,
            "InfiniBand XDR",
            "200 Gb/s PAM4",
            "4",
            "ConnectX-8, Quantum-X800",
        ),
        eth(
            100,
            "Ethernet/RoCE 100G",
            "25 Gb/s NRZ or 50 Gb/s PAM4",
            "4 or 2",
            "ConnectX-5/6",
        ),
        eth(200, "Ethernet/RoCE 200G", "50 Gb/s PAM4", "4", "ConnectX-6"),
        eth(
            400,
            "Ethernet/RoCE 400G",
            "100 Gb/s PAM4",
            "4",
            "ConnectX-7, Spectrum-X",
        ),
        eth(
            800,
            "Ethernet/RoCE 800G",
            "100 Gb/s PAM4",
            "8",
            "ConnectX-8, Spectrum-X800",
        ),
        CatalogEntry {
            generation: "QPI 9.6 GT/s (1 link)",
            kind: K::Qpi {
                mts: 9600,
                count: 1,
            },
            signaling: "9.6 GT/s",
            lanes: "20 (16 data)",
            products: "Xeon E5 v3/v4 (DGX-1)",
            source: SRC_QPI,
        },
        CatalogEntry {
            generation: "UPI 10.4 GT/s (1 link)",
            kind: K::Upi {
                mts: 10400,
                count: 1,
            },
            signaling: "10.4 GT/s",
            lanes: "20 (16 data)",
            products: "Xeon Skylake-SP / Cascade Lake",
            source: SRC_UPI,
        },
        CatalogEntry {
            generation: "UPI 2.0 16 GT/s (1 link)",
            kind: K::Upi {
                mts: 16000,
                count: 1,
            },
            signaling: "16 GT/s",
            lanes: "-",
            products: "Xeon Sapphire Rapids (DGX H100)",
            source: SRC_UPI,
        },
        CatalogEntry {
            generation: "Infinity Fabric xGMI-2 (1 x16 link)",
            kind: K::InfinityFabric {
                mts: 18000,
                count: 1,
            },
            signaling: "18 GT/s",
            lanes: "16",
            products: "EPYC 7002/7003 (DGX A100)",
            source: SRC_IF,
        },
        CatalogEntry {
            generation: "Infinity Fabric xGMI-3 (1 x16 link)",
            kind: K::InfinityFabric {
                mts: 32000,
                count: 1,
            },
            signaling: "32 GT/s",
            lanes: "16",
            products: "EPYC 9004",
            source: SRC_IF,
        },
        CatalogEntry {
            generation: "NVLink-C2C",
            kind: K::NvLinkC2c,
            signaling: "not published per lane",
            lanes: "-",
            products: "GH200, GB200 (Grace to GPU)",
            source: SRC_C2C,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 0.01
    }

    #[test]
    fn pcie_x16_matches_pci_sig() {
        // PCI-SIG: x16 ~ 15.75 / 31.5 / 63 / 128 GB/s per direction (Gen3..6).
        let bw = |g| {
            LinkKind::Pcie {
                generation: g,
                width: 16,
            }
            .bandwidth()
        };
        assert!(close(bw(PcieGen::Gen3), 15.754));
        assert!(close(bw(PcieGen::Gen4), 31.508));
        assert!(close(bw(PcieGen::Gen5), 63.015));
        assert!(close(bw(PcieGen::Gen6), 128.0));
        assert!(close(bw(PcieGen::Gen1), 4.0));
        assert!(close(bw(PcieGen::Gen2), 8.0));
    }

    #[test]
    fn nvlink_per_gpu_matches_nvidia() {
        // Whitepapers give the bidirectional total per GPU.
        let total = |g: NvLinkGen| {
            LinkKind::NvLink {
                generation: g,
                count: g.links_per_gpu(),
            }
            .bidirectional()
        };
        assert!(close(total(NvLinkGen::V1), 160.0));
        assert!(close(total(NvLinkGen::V2), 300.0));
        assert!(close(total(NvLinkGen::V3), 600.0));
        assert!(close(total(NvLinkGen::V4), 900.0));
        assert!(close(total(NvLinkGen::V5), 1800.0));
        // Lanes x lane rate / 8 = per-link per-direction bandwidth.
        for g in [
            NvLinkGen::V1,
            NvLinkGen::V2,
            NvLinkGen::V3,
            NvLinkGen::V4,
            NvLinkGen::V5,
        ] {
            let (rate, lanes) = g.signaling();
            assert!(close(rate * f64::from(lanes) / 8.0, g.link_gbps()), "{g:?}");
        }
    }

    #[test]
    fn infiniband_matches_ibta() {
        let bw = |s| LinkKind::Infiniband { speed: s, count: 1 }.bandwidth();
        assert!(close(bw(IbSpeed::Edr), 12.5));
        assert!(close(bw(IbSpeed::Hdr), 25.0));
        assert!(close(bw(IbSpeed::Hdr100), 12.5));
        // NDR200 is 200 Gb/s = 25 GB/s, not 100 GB/s.
        assert!(close(bw(IbSpeed::Ndr200), 25.0));
        assert!(close(bw(IbSpeed::Ndr), 50.0));
        assert!(close(bw(IbSpeed::Xdr), 100.0));
        // FDR: 56 Gb/s was its signaling rate (4 x 14.0625), not its data.
        assert!(close(bw(IbSpeed::Fdr), 4.0 * 14.0625 * 64.0 / 66.0 / 8.0));
        assert!((bw(IbSpeed::Fdr) - 6.818).abs() < 0.001);
        assert_eq!(IbSpeed::Fdr.nominal_gbit(), 56.0);
        for s in IbSpeed::ALL {
            let (lanes, rate) = s.lanes();
            assert!(close(f64::from(lanes) * rate, s.gbit()), "{s:?}");
            assert_eq!(IbSpeed::parse(s.name()), Some(s));
        }
    }

    #[test]
    fn cpu_links_match_vendor_figures() {
        assert!(close(
            LinkKind::Qpi {
                mts: 9600,
                count: 1
            }
            .bandwidth(),
            19.2
        ));
        assert!(close(
            LinkKind::Upi {
                mts: 10400,
                count: 1
            }
            .bandwidth(),
            20.8
        ));
        assert!(close(
            LinkKind::Upi {
                mts: 16000,
                count: 1
            }
            .bandwidth(),
            32.0
        ));
        assert!(close(
            LinkKind::InfinityFabric {
                mts: 32000,
                count: 1
            }
            .bandwidth(),
            64.0
        ));
        assert!(close(LinkKind::NvLinkC2c.bidirectional(), 900.0));
        assert!(close(
            LinkKind::Ethernet {
                gbit: 400,
                count: 1,
                roce: true
            }
            .bandwidth(),
            50.0
        ));
    }

    #[test]
    fn every_entry_has_a_source_and_positive_bandwidth() {
        for e in entries() {
            assert!(!e.source.is_empty());
            assert!(e.kind.bandwidth() > 0.0 && e.kind.latency_us() > 0.0);
        }
    }

    #[test]
    fn port_names_round_trip() {
        for s in ["edr", "hdr", "ndr200", "ndr", "xdr", "roce400", "eth100"] {
            assert_eq!(port_name(parse_port(s).unwrap()).unwrap(), s);
        }
        assert_eq!(parse_port("ROCE-400G"), parse_port("roce400"));
        assert_eq!(parse_port("pcie4"), None);
        assert_eq!(parse_port("eth0"), None);
    }

    #[test]
    fn generation_numbers_round_trip() {
        for n in 1..=6 {
            assert_eq!(PcieGen::from_number(n).unwrap().number(), n);
        }
        for n in 1..=5 {
            assert_eq!(NvLinkGen::from_number(n).unwrap().number(), n);
        }
        assert_eq!(PcieGen::from_gts(16.0), Some(PcieGen::Gen4));
        assert_eq!(PcieGen::from_number(7), None);
    }
}
