//! The simulator's parametric machine: identical nodes (GPUs, NVLink or
//! NVSwitch, a PCIe tree, NICs) joined by an inter-node network ([`Network`]:
//! rails, one switch, or leaves joined by a possibly oversubscribed spine;
//! switches with or without in-network reduction), and the
//! [`ClusterFabric`] of directional links built from it for one engine.
//!
//! Link capacities are the catalog's per-direction data rates times the
//! efficiency of the engine that moves the bytes (see [`crate::model`]).

use crate::engine::LinkId;
use crate::fabric::{Fabric, NodeOrbits, PathClass, Route};
use crate::model;
pub use crate::model::Arch;
use crate::{SimError, SimTime};

/// How GPUs of a node are joined by NVLink.
#[derive(Clone, Debug, PartialEq)]
pub enum NvFabric {
    /// No NVLink: GPUs talk over PCIe.
    None,
    /// Every GPU has `links` NVLinks of generation `gen` to an NVSwitch
    /// fabric; `nvls` when the switches can reduce (NVLink SHARP, 3rd-gen
    /// NVSwitch and later).
    Switch {
        /// NVLink generation (1-5).
        generation: u8,
        /// Links per GPU.
        links: u32,
        /// In-switch reduction and multicast.
        nvls: bool,
    },
    /// Direct GPU-GPU links: `(a, b, links)` (hybrid cube mesh and similar).
    Mesh {
        /// NVLink generation.
        generation: u8,
        /// Pairs and link counts.
        pairs: Vec<(usize, usize, u32)>,
    },
}

/// Where a GPU or NIC sits in its node's PCIe tree, as the topology has
/// it.
///
/// ```
/// use gpucomm_sim::{Machine, PcieSite};
/// // The PCIe server: two GPUs and a NIC under each of four switches, two
/// // switches a socket.
/// let m = Machine::preset("pcie-8gpu").unwrap();
/// assert_eq!(m.node.gpu_sites[5], PcieSite { tree: Some(2), socket: 1 });
/// assert_eq!(m.node.nic_sites[1], PcieSite { tree: Some(1), socket: 0 });
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcieSite {
    /// The PCIe switch tree it sits under (switches joined without a CPU
    /// between them; the routes take a tree as one switch with one uplink
    /// to its CPU), numbered from 0 over the node's GPUs and NICs; `None`
    /// on a CPU's own port (or a Grace's NVLink-C2C).
    pub tree: Option<usize>,
    /// The socket whose CPU its tree, or its own link, reaches (below
    /// [`NodeModel::sockets`]).
    pub socket: usize,
}

impl PcieSite {
    /// Both sit under one PCIe switch tree (NCCL's `PATH_PIX` or
    /// `PATH_PXB` apart).
    pub fn shares_tree(&self, other: &PcieSite) -> bool {
        self.tree.is_some() && self.tree == other.tree
    }
}

/// One node's hardware.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeModel {
    /// GPU architecture (decides engine efficiencies).
    pub arch: Arch,
    /// GPU product name.
    pub gpu_name: String,
    /// GPUs per node.
    pub gpus: usize,
    /// Device memory bandwidth, GB/s.
    pub hbm_gbps: f64,
    /// NVLink fabric.
    pub nvlink: NvFabric,
    /// PCIe generation of GPU, NIC and switch links (3, 4, 5, 6).
    pub pcie_gen: u8,
    /// PCIe lanes of each GPU link.
    pub pcie_width: u32,
    /// Per-direction GB/s of the NVLink-C2C link by which each GPU reaches
    /// its CPU and host memory (Grace superchips: GB200, GH200) in place of
    /// a PCIe link; `None`: the GPUs sit on PCIe (NICs stay on PCIe of
    /// generation `pcie_gen` either way).
    pub c2c_gbps: Option<f64>,
    /// CPU sockets.
    pub sockets: usize,
    /// Where each GPU sits in the PCIe tree, as the topology has it: two
    /// GPUs of one switch tree are `PATH_PIX` or `PATH_PXB` apart for NCCL,
    /// which joins them peer to peer ([`ClusterFabric::nccl_p2p`]).
    pub gpu_sites: Vec<PcieSite>,
    /// Per-direction bandwidth between two sockets, GB/s (QPI/UPI/xGMI).
    pub inter_socket_gbps: f64,
    /// Host memory bandwidth per socket, GB/s.
    pub host_mem_gbps: f64,
    /// Single-thread CPU memcpy bandwidth, GB/s (pageable staging copies).
    pub cpu_memcpy_gbps: f64,
    /// NICs per node.
    pub nics: usize,
    /// For each NIC, the GPU next to it, as the topology has it: one under
    /// its own PCIe switch, else its switch tree, else on its CPU (a
    /// Grace's), else one of its host; a switch's or CPU's NICs spread
    /// evenly over its GPUs. NCCL's relay through a peer GPU (PXN) goes to
    /// it.
    pub nic_gpus: Vec<usize>,
    /// For each GPU, the NICs nearest it by NCCL's path types
    /// (`ncclTopoGetLocalNet`): under its own PCIe switch, or beside it on
    /// its Grace, else under its switch tree, else on its CPU, else on
    /// another CPU of its host; none in another host.
    pub gpu_nics: Vec<Vec<usize>>,
    /// For each GPU, whether its nearest NICs are `PATH_PXB` from it or
    /// nearer (its switch, its tree, its Grace): the NIC's traffic relays
    /// through such a GPU (NCCL's PXN), never through one a CPU away.
    pub gpu_nics_near: Vec<bool>,
    /// Where each NIC sits in the PCIe tree, as the topology has it (a tree
    /// of NICs alone has a number of its own): the routes to the network
    /// cross the CPU unless a GPU shares the NIC's tree.
    pub nic_sites: Vec<PcieSite>,
    /// Per-direction data rate of each NIC port, GB/s (after line coding).
    pub nic_gbps: f64,
    /// Storage read bandwidth (NVMe drives of the node together), GB/s.
    pub storage_gbps: f64,
    /// The host CPUs are AMD's (NCCL's LL bandwidth cap across nodes
    /// depends on the CPU vendor).
    pub amd_cpu: bool,
    /// How the GPUs reach their NICs (NCCL's rule for LL128 across nodes).
    /// The modeled network traffic still leaves each GPU's PCIe switch.
    pub nic_reach: crate::model::NicReach,
    /// Hosts (operating-system instances) the node's GPUs sit in, their
    /// GPUs in equal consecutive blocks: 1, but for an NVLink domain wider
    /// than a host (a GB200 NVL72: 18 trays of 4 GPUs), whose GPUs of
    /// different hosts share NVLink but no host memory.
    pub hosts: usize,
}

impl NodeModel {
    /// Device memory per GPU, GB (1e9 bytes), where the GPU's name tells it
    /// ([`gpucomm_topo::hardware::gpu_memory_gb_from_label`]).
    pub fn gpu_memory_gb(&self) -> Option<f64> {
        gpucomm_topo::hardware::gpu_memory_gb_from_label(&self.gpu_name)
    }

    /// The GPUs are joined by NVLink (NCCL's `typeIntra` NVLink rows: the
    /// NVLink latencies, LL128).
    pub fn has_nvlink(&self) -> bool {
        !matches!(self.nvlink, NvFabric::None)
    }

    /// NCCL's figure for each GPU's NVLinks to the NVSwitch, GB/s: its
    /// per-link bandwidth ([`model::nccl_nvlink_gbps`]) times the links;
    /// `None` without an NVSwitch.
    pub fn nccl_switch_gbps(&self) -> Option<f64> {
        match self.nvlink {
            NvFabric::Switch { links, .. } => {
                Some(model::nccl_nvlink_gbps(self.arch) * f64::from(links))
            }
            _ => None,
        }
    }
}

/// How the nodes' NICs reach each other (gpucomm-topo's
/// [`gpucomm_topo::Fabric`], as [`gpucomm_topo::ClusterOptions`] builds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NetLayout {
    /// One switch per rail: NIC `k` of every node on rail switch `k`. The
    /// simulator keeps every transfer on its rail (channel `c` of GPU `g`
    /// leaves and arrives on NIC `(g + c) mod nics`), so the spine joining
    /// the rails carries nothing and its oversubscription does not matter.
    #[default]
    Rails,
    /// Every NIC on one non-blocking switch.
    SingleSwitch,
    /// Leaves of `nodes_per_leaf` consecutive nodes (all their NICs), joined
    /// by a spine: traffic between leaves crosses the leaves' uplinks.
    LeafSpine {
        /// Nodes per leaf switch.
        nodes_per_leaf: usize,
    },
}

/// The inter-node network of a [`Machine`].
///
/// ```
/// use gpucomm_sim::machine::{NetLayout, Network};
/// let n = Network::from_options(&gpucomm_topo::ClusterOptions {
///     fabric: gpucomm_topo::Fabric::LeafSpine,
///     oversubscription: 2.0,
///     sharp: true,
///     ..Default::default()
/// }).unwrap();
/// assert_eq!(n.layout, NetLayout::LeafSpine { nodes_per_leaf: 4 });
/// assert!(n.sharp);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    /// Switch layout.
    pub layout: NetLayout,
    /// Leaf downlink over uplink bandwidth (1 = non-blocking).
    pub oversubscription: f64,
    /// The switches reduce in the network (InfiniBand SHARP): gpucomm-topo's
    /// [`gpucomm_topo::Node::reduction`] on the network switches, or
    /// [`gpucomm_topo::ClusterOptions::sharp`].
    pub sharp: bool,
    /// InfiniBand speed of the NIC ports (None: Ethernet/RoCE, or unknown);
    /// decides the switch generation and so what SHARP can do.
    pub ib: Option<gpucomm_topo::IbSpeed>,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            layout: NetLayout::Rails,
            oversubscription: 1.0,
            sharp: false,
            ib: None,
        }
    }
}

impl Network {
    /// The network gpucomm-topo's [`gpucomm_topo::cluster`] would
    /// build with `opts` (the NIC speed is left as it is: see
    /// [`Machine::with_cluster_options`]).
    pub fn from_options(opts: &gpucomm_topo::ClusterOptions) -> Result<Network, SimError> {
        use gpucomm_topo::Fabric as F;
        if !(opts.oversubscription.is_finite() && opts.oversubscription >= 1.0) {
            return Err(SimError::Model(format!(
                "oversubscription must be at least 1 (got {})",
                gpucomm_topo::readable_number(opts.oversubscription)
            )));
        }
        let layout = match opts.fabric {
            F::RailOptimized => NetLayout::Rails,
            F::SingleSwitch => NetLayout::SingleSwitch,
            F::LeafSpine => {
                if opts.nodes_per_leaf == 0 {
                    return Err(SimError::Model("nodes per leaf must be at least 1".into()));
                }
                NetLayout::LeafSpine {
                    nodes_per_leaf: opts.nodes_per_leaf,
                }
            }
        };
        Ok(Network {
            layout,
            oversubscription: opts.oversubscription,
            sharp: opts.sharp,
            ib: None,
        })
    }

    /// A short description for table headers.
    pub fn describe(&self) -> String {
        let per_leaf = |n: usize| format!("{n} node{} per leaf", if n == 1 { "" } else { "s" });
        let layout = match self.layout {
            NetLayout::Rails => "rail-optimized (transfers stay on their rail)".to_string(),
            NetLayout::SingleSwitch => "one non-blocking switch".to_string(),
            NetLayout::LeafSpine { nodes_per_leaf } if self.oversubscription > 1.0 => format!(
                "leaf/spine, {}, {}:1 oversubscribed uplinks (max-min shared)",
                per_leaf(nodes_per_leaf),
                self.oversubscription
            ),
            NetLayout::LeafSpine { nodes_per_leaf } => {
                format!("leaf/spine, {}, non-blocking", per_leaf(nodes_per_leaf))
            }
        };
        if self.sharp {
            format!("{layout}; switches reduce in the network (SHARP)")
        } else {
            layout
        }
    }
}

/// A cluster of identical nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// Name (preset or file).
    pub name: String,
    /// Node hardware.
    pub node: NodeModel,
    /// Number of nodes.
    pub nodes: usize,
    /// Nodes the topology itself describes, as read: 1 for a one-node
    /// topology (which `nodes` replicates, `--nodes`), more for a
    /// topology file that holds several nodes and their network (then
    /// `nodes` is the same count). Headers name the machine by it: `2 x
    /// dgx-h100` is a node replicated twice, `dgx-h100x2 (2 nodes)` a
    /// file of two.
    pub topology_nodes: usize,
    /// Use only the first `gpus` GPUs of each node (`--gpus`), if set.
    pub gpus_used: Option<usize>,
    /// The network between nodes.
    pub network: Network,
    /// `NCCL_P2P_LEVEL` as the run sets it (`--nccl-p2p-level`); `None`:
    /// NCCL's own rule ([`ClusterFabric::nccl_p2p`]).
    pub nccl_p2p_level: Option<P2pLevel>,
}

/// How far apart two GPUs of a node NCCL still joins peer to peer
/// (`NCCL_P2P_LEVEL`, NVIDIA/nccl `src/graph/paths.cc`); pairs further
/// apart go through host memory, its SHM transport.
///
/// ```
/// use gpucomm_sim::machine::P2pLevel;
/// assert_eq!(P2pLevel::parse("SYS"), Some(P2pLevel::Sys));
/// assert_eq!(P2pLevel::parse("pxb"), Some(P2pLevel::Pxb));
/// assert_eq!(P2pLevel::parse("far"), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum P2pLevel {
    /// Never (`LOC`).
    Loc,
    /// Over a direct NVLink or the NVSwitch only (`NVL`).
    Nvl,
    /// Also over NVLink through one other GPU (`NVB`).
    Nvb,
    /// NVLink, or the same PCIe switch (`PIX`; the model knows the
    /// switch trees a node's GPUs sit under, not single switches, so the
    /// same as `PXB`).
    Pix,
    /// NVLink, or one PCIe switch tree without the CPU (`PXB`).
    Pxb,
    /// Also through the CPU's root complex of one socket (`PHB`).
    Phb,
    /// Also across sockets (`SYS`).
    Sys,
}

impl P2pLevel {
    /// All levels, nearest first.
    pub const ALL: [P2pLevel; 7] = [
        Self::Loc,
        Self::Nvl,
        Self::Nvb,
        Self::Pix,
        Self::Pxb,
        Self::Phb,
        Self::Sys,
    ];

    /// `NCCL_P2P_LEVEL`'s name (`"SYS"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Loc => "LOC",
            Self::Nvl => "NVL",
            Self::Nvb => "NVB",
            Self::Pix => "PIX",
            Self::Pxb => "PXB",
            Self::Phb => "PHB",
            Self::Sys => "SYS",
        }
    }

    /// Parses a name, any case.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s.trim()))
    }
}

/// Who moves the bytes: this decides link efficiencies and overheads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// NCCL-style collective kernels (SMs copying through FIFOs, Simple protocol).
    Nccl,
    /// DMA copy engines (`cudaMemcpy`, p2pBandwidthLatencyTest, bandwidthTest).
    CopyEngine,
}

impl Machine {
    /// Refuses a run whose buffers need more device memory per GPU than
    /// the GPU has (where its name tells how much,
    /// [`NodeModel::gpu_memory_gb`]): `need` bytes per GPU for `what`.
    ///
    /// ```
    /// use gpucomm_sim::Machine;
    ///
    /// let m = Machine::preset("dgx-h100").unwrap();
    /// assert!(m.check_device_memory(64 << 30, "64 GiB").is_ok());
    /// let e = m.check_device_memory(100 << 30, "all_reduce of 50 GiB").unwrap_err();
    /// assert!(e.to_string().contains("80 GB"), "{e}");
    /// ```
    pub fn check_device_memory(&self, need: u128, what: &str) -> Result<(), SimError> {
        match self.node.gpu_memory_gb() {
            Some(gb) if need as f64 > gb * 1e9 => Err(SimError::Model(format!(
                "{what} needs {:.1} GB of device memory per GPU, more than the {gb:.0} GB \
                 of a {} ({})",
                need as f64 / 1e9,
                self.node.gpu_name,
                self.name
            ))),
            _ => Ok(()),
        }
    }

    /// Uses only the first `gpus` GPUs of each node (`--gpus`): at least
    /// one, at most the node's.
    ///
    /// ```
    /// let mut m = gpucomm_sim::Machine::preset("dgx-h100").unwrap();
    /// m.use_gpus(2).unwrap();
    /// assert_eq!(m.gpus_per_node(), 2);
    /// assert!(m.use_gpus(9).is_err());
    /// ```
    pub fn use_gpus(&mut self, gpus: usize) -> Result<(), SimError> {
        if gpus == 0 || gpus > self.node.gpus {
            return Err(SimError::Model(format!(
                "{} has {} GPUs per node, {gpus} asked",
                self.name, self.node.gpus
            )));
        }
        self.gpus_used = Some(gpus);
        Ok(())
    }

    /// GPUs (ranks) per node actually used.
    pub fn gpus_per_node(&self) -> usize {
        self.gpus_used.unwrap_or(self.node.gpus).min(self.node.gpus)
    }

    /// The GPU next to NIC `k` ([`NodeModel::nic_gpus`]; `gpucomm topo
    /// --nics` spreads NICs evenly over the GPUs' PCIe switches).
    pub fn nic_gpu(&self, k: usize) -> usize {
        self.node.nic_gpus[k]
    }

    /// The NICs the GPUs in use send through: every NIC next to one of them
    /// (on its PCIe switch, or its Grace), all of them when every GPU is in
    /// use. NCCL's search takes a GPU's nearest NICs and no farther one
    /// while a nearer one is found: one H100 of a DGX H100 node reaches
    /// the network through its own 400 Gb/s NIC, not the node's eight, and
    /// four GPUs of a node with four NICs (next to GPUs 0, 2, 4, 6) through
    /// two. Empty without NICs; never empty with them: where no NIC sits
    /// next to a GPU in use, the NICs near one, else all of them.
    ///
    /// ```
    /// use gpucomm_sim::Machine;
    /// let hdr = gpucomm_topo::catalog::parse_port("hdr");
    /// let mut m = Machine::select_with_nics("dgx-h100", Some(4), hdr).unwrap();
    /// assert_eq!(m.nics_in_use(), [0, 1, 2, 3]);
    /// m.use_gpus(4).unwrap();
    /// assert_eq!(m.nics_in_use(), [0, 1]);
    /// ```
    pub fn nics_in_use(&self) -> Vec<usize> {
        let rpn = self.gpus_per_node();
        let nics = 0..self.node.nics;
        let next: Vec<usize> = nics.clone().filter(|&k| self.nic_gpu(k) < rpn).collect();
        if !next.is_empty() {
            return next;
        }
        // No NIC's GPU in use (a topology's NICs beside other GPUs): the
        // NICs of the GPUs in use, else every NIC, as NCCL takes the
        // nearest there are.
        let near = &self.node.gpu_nics[..rpn];
        let own: Vec<usize> = nics
            .clone()
            .filter(|k| near.iter().any(|n| n.contains(k)))
            .collect();
        if own.is_empty() { nics.collect() } else { own }
    }

    /// Total ranks (saturating; a fabric refuses more than [`MAX_RANKS`]).
    pub fn ranks(&self) -> usize {
        self.gpus_per_node().saturating_mul(self.nodes)
    }

    /// The same machine on the network `opts` describes (layout,
    /// oversubscription, in-network reduction); the NIC speed stays the
    /// machine's. For a one-node topology replicated with `--nodes`; a
    /// multi-node topology file describes its own network.
    pub fn with_cluster_options(
        mut self,
        opts: &gpucomm_topo::ClusterOptions,
    ) -> Result<Machine, SimError> {
        let ib = self.network.ib;
        self.network = Network::from_options(opts)?;
        self.network.ib = ib;
        Ok(self)
    }

    /// Builds the fabric for `engine` with `nodes` nodes (overrides `self.nodes`).
    pub fn fabric(&self, engine: Engine, nodes: usize) -> Result<ClusterFabric, SimError> {
        ClusterFabric::new(self.clone(), engine, nodes)
    }

    /// A gpucomm-topo preset by name (case-insensitive; see
    /// [`gpucomm_topo::PRESETS`]), read with [`Machine::from_topology`].
    pub fn preset(name: &str) -> Result<Machine, SimError> {
        let t = gpucomm_topo::preset(&name.to_ascii_lowercase())
            .map_err(|e| SimError::Model(e.to_string()))?;
        Machine::from_topology(&t)
    }

    /// What `--topology` accepts: whatever [`gpucomm_topo::select`] does (a
    /// preset name, `local`, or a topology file), read with
    /// [`Machine::from_topology`].
    pub fn select(spec: &str) -> Result<Machine, SimError> {
        Machine::select_with_nics(spec, None, None)
    }

    /// [`Machine::select`] with the node's NICs replaced by `nics` new ones
    /// and/or their ports set to `nic_speed`, as `gpucomm topo --nics N
    /// --nic-speed SPEED` builds them ([`gpucomm_topo::cluster`]: NIC `j`
    /// on the PCIe attachment of GPU `j * gpus / nics`). A topology that
    /// already describes several nodes and their network is refused: its
    /// NICs are the file's to say.
    ///
    /// ```
    /// use gpucomm_sim::Machine;
    /// let hdr = gpucomm_topo::catalog::parse_port("hdr");
    /// let m = Machine::select_with_nics("dgx-h100", Some(4), hdr).unwrap();
    /// assert_eq!((m.node.nics, m.node.nic_gbps), (4, 25.0));
    /// ```
    pub fn select_with_nics(
        spec: &str,
        nics: Option<usize>,
        nic_speed: Option<gpucomm_topo::LinkKind>,
    ) -> Result<Machine, SimError> {
        // Read (or discovered) once; the NICs are then rebuilt on it.
        let t = gpucomm_topo::select(spec, &gpucomm_topo::ClusterOptions::default())
            .map_err(|e| SimError::Model(e.to_string()))?;
        Machine::from_topology(&t)?.with_nics(&t, nics, nic_speed)
    }

    /// This machine, which [`Machine::from_topology`] read from `t`, with
    /// the NICs of [`Machine::select_with_nics`]; itself when neither is
    /// given. What only the NIC options make fail (a topology of several
    /// nodes, more NICs than [`gpucomm_topo::cluster`] places) is a
    /// [`SimError::Model`] that names them: a caller that has read `t`
    /// tells a topology that fails from options it cannot take.
    ///
    /// ```
    /// use gpucomm_sim::Machine;
    /// let t = gpucomm_topo::preset("dgx-h100").unwrap();
    /// let m = Machine::from_topology(&t).unwrap().with_nics(&t, Some(2), None).unwrap();
    /// assert_eq!(m.node.nics, 2);
    /// ```
    pub fn with_nics(
        self,
        t: &gpucomm_topo::Topology,
        nics: Option<usize>,
        nic_speed: Option<gpucomm_topo::LinkKind>,
    ) -> Result<Machine, SimError> {
        if nics.is_none() && nic_speed.is_none() {
            return Ok(self);
        }
        if self.nodes > 1 {
            return Err(SimError::Model(format!(
                "{} describes {} nodes and their network; --nics and --nic-speed \
                 apply to a one-node topology",
                t.name(),
                self.nodes
            )));
        }
        let opts = gpucomm_topo::ClusterOptions {
            nics,
            nic_speed,
            ..Default::default()
        };
        let clustered =
            gpucomm_topo::cluster(t, &opts).map_err(|e| SimError::Model(e.to_string()))?;
        Machine::from_topology(&clustered)
    }
}

/// Local link roles inside one node (for names and orbits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    GpuUp(usize),
    GpuDown(usize),
    Mesh(usize, usize),
    PcieUp(usize),
    PcieDown(usize),
    SwUp(usize),
    SwDown(usize),
    NicPcieUp(usize),
    NicPcieDown(usize),
    NicOut(usize),
    NicIn(usize),
    Qpi(usize, usize),
    HostMem(usize),
    Memcpy(usize),
    Storage,
}

/// Directional links of a [`Machine`] for one [`Engine`], with routes.
///
/// Links are laid out node by node, the same local links in the same order
/// on every node. When the network is non-blocking (rails, one switch, or
/// leaves with 1:1 uplinks, which can never be the tightest link: every
/// flow crossing an uplink also crosses one of the leaf's NIC ports, whose
/// capacities sum to the uplink's) only NIC ports are modeled, so
/// translating by one node is an automorphism and the executor's symmetry
/// reduction applies. An oversubscribed leaf/spine network adds, after the
/// node links, an uplink and a downlink per leaf (capacity: the leaf's NIC
/// ports over the oversubscription), crossed by every transfer between
/// leaves and shared max-min fairly with everything else; translating by
/// one node then moves nodes across leaves, so the symmetry reduction
/// takes a whole leaf as its period when every leaf is full
/// ([`ClusterFabric::node_orbits`]).
#[derive(Clone, Debug)]
pub struct ClusterFabric {
    /// The machine.
    pub machine: Machine,
    /// The engine the capacities are for.
    pub engine: Engine,
    nodes: usize,
    rpn: usize,
    roles: Vec<Role>,
    caps: Vec<f64>,
    lat: Vec<SimTime>,
    per_node: usize,
    // Local link index of each role, for quick lookup.
    gpu_up: Vec<u32>,
    gpu_down: Vec<u32>,
    mesh: Vec<Vec<Option<(u32, u32)>>>,
    pcie_up: Vec<u32>,
    pcie_down: Vec<u32>,
    sw_up: Vec<u32>,
    sw_down: Vec<u32>,
    nic_pcie_up: Vec<u32>,
    nic_pcie_down: Vec<u32>,
    nic_out: Vec<u32>,
    nic_in: Vec<u32>,
    qpi: Vec<Vec<Option<u32>>>,
    host_mem: Vec<u32>,
    memcpy: Vec<u32>,
    storage: Option<u32>,
    // Oversubscribed leaf/spine: nodes per leaf and the (up, down)
    // capacity of each leaf's uplink trunk; empty when non-blocking.
    npl: usize,
    trunks: Vec<f64>,
    /// The NVLink rings, searched once (see [`ClusterFabric::nvlink_rings`]).
    rings: std::sync::OnceLock<Vec<Vec<u32>>>,
    /// The NICs the GPUs in use send through (see [`ClusterFabric::rails`]).
    rails: std::sync::OnceLock<Vec<usize>>,
    /// Each GPU's nearest NICs (see [`ClusterFabric::nearest_nics`]).
    nearest: std::sync::OnceLock<Vec<Vec<usize>>>,
}

/// The most ranks a fabric takes: 16384 nodes of 8 GPUs. At that size a
/// 1 MiB all_reduce with the tuner's search (`gpucomm sim all_reduce
/// --topology dgx-h100 --nodes 16384 -b 1M -e 1M`) took 61 s and 3.3 GB
/// on the 2-core machine of BENCHMARKS.md; 30,000 such nodes had reached
/// 5 GB after 30 s, and 10^8 nodes asked for a 63 GB link table.
pub const MAX_RANKS: usize = 1 << 17;

impl ClusterFabric {
    fn new(machine: Machine, engine: Engine, nodes: usize) -> Result<Self, SimError> {
        let nm = &machine.node;
        if nodes == 0 || nm.gpus == 0 {
            return Err(SimError::Model(
                "a machine needs at least one node and one GPU".into(),
            ));
        }
        if nm.sockets == 0 {
            return Err(SimError::Model(
                "a node needs at least one CPU socket".into(),
            ));
        }
        let placed = |sites: &[PcieSite], n: usize| {
            sites.len() == n && sites.iter().all(|s| s.socket < nm.sockets)
        };
        if !placed(&nm.gpu_sites, nm.gpus)
            || !placed(&nm.nic_sites, nm.nics)
            || nm.nic_gpus.len() != nm.nics
            || nm.nic_gpus.iter().any(|&g| g >= nm.gpus)
            || nm.gpu_nics.len() != nm.gpus
            || nm.gpu_nics_near.len() != nm.gpus
            || nm.gpu_nics.iter().flatten().any(|&k| k >= nm.nics)
        {
            return Err(SimError::Model(format!(
                "a node of {} GPUs and {} NICs needs a PCIe site (switch tree, socket below \
                 {}) for each, a GPU next to each NIC and each GPU's own NICs",
                nm.gpus, nm.nics, nm.sockets
            )));
        }
        let rpn = machine.gpus_per_node();
        if rpn == 0 {
            return Err(SimError::Model("--gpus must be at least 1".into()));
        }
        match nodes.checked_mul(rpn) {
            Some(r) if r <= MAX_RANKS => {}
            _ => {
                return Err(SimError::Model(format!(
                    "{nodes} nodes of {rpn} GPUs: the simulator takes at most {MAX_RANKS} GPUs \
                     (more would take minutes and gigabytes here, and its per-link state \
                     grows with the nodes)"
                )));
            }
        }
        let eff = model::Efficiency::new(nm.arch, engine);
        let pcie_raw = model::pcie_gbps(nm.pcie_gen, nm.pcie_width)?;
        let pcie16_raw = model::pcie_gbps(nm.pcie_gen, 16)?;
        let pcie = pcie_raw * eff.pcie(nm.pcie_gen);
        let pcie16 = pcie16_raw * eff.pcie(nm.pcie_gen);
        let mut f = ClusterFabric {
            engine,
            nodes,
            rpn,
            roles: Vec::new(),
            caps: Vec::new(),
            lat: Vec::new(),
            per_node: 0,
            gpu_up: vec![u32::MAX; nm.gpus],
            gpu_down: vec![u32::MAX; nm.gpus],
            mesh: vec![vec![None; nm.gpus]; nm.gpus],
            pcie_up: Vec::new(),
            pcie_down: Vec::new(),
            sw_up: Vec::new(),
            sw_down: Vec::new(),
            nic_pcie_up: Vec::new(),
            nic_pcie_down: Vec::new(),
            nic_out: Vec::new(),
            nic_in: Vec::new(),
            qpi: vec![vec![None; nm.sockets]; nm.sockets],
            host_mem: Vec::new(),
            memcpy: Vec::new(),
            storage: None,
            npl: nodes,
            trunks: Vec::new(),
            rings: std::sync::OnceLock::new(),
            rails: std::sync::OnceLock::new(),
            nearest: std::sync::OnceLock::new(),
            machine: machine.clone(),
        };
        let add = |f: &mut ClusterFabric, role: Role, cap: f64, lat_us: f64| -> u32 {
            f.roles.push(role);
            f.caps.push(cap);
            f.lat.push(SimTime::from_us(lat_us));
            (f.roles.len() - 1) as u32
        };
        match &nm.nvlink {
            NvFabric::None => {}
            NvFabric::Switch {
                generation, links, ..
            } => {
                let bw = eff.nvlink_link(*generation)? * f64::from(*links);
                for g in 0..nm.gpus {
                    f.gpu_up[g] = add(&mut f, Role::GpuUp(g), bw, model::NVLINK_HOP_US);
                    f.gpu_down[g] = add(&mut f, Role::GpuDown(g), bw, model::NVLINK_HOP_US);
                }
            }
            NvFabric::Mesh { generation, pairs } => {
                let per = eff.nvlink_link(*generation)?;
                for &(a, b, k) in pairs {
                    if a >= nm.gpus || b >= nm.gpus || a == b {
                        return Err(SimError::Model(format!("bad NVLink pair ({a}, {b})")));
                    }
                    let ab = add(
                        &mut f,
                        Role::Mesh(a, b),
                        per * f64::from(k),
                        model::NVLINK_HOP_US,
                    );
                    let ba = add(
                        &mut f,
                        Role::Mesh(b, a),
                        per * f64::from(k),
                        model::NVLINK_HOP_US,
                    );
                    f.mesh[a][b] = Some((ab, ba));
                    f.mesh[b][a] = Some((ba, ab));
                }
            }
        }
        // A GPU's link to its CPU: PCIe, or NVLink-C2C on a superchip (up:
        // from the GPU, down: to it).
        let (up, down, host_hop) = match nm.c2c_gbps {
            Some(c2c) => (
                eff.c2c(c2c, false),
                eff.c2c(c2c, true),
                model::NVLINK_HOP_US,
            ),
            None => (pcie, pcie, model::PCIE_HOP_US),
        };
        for g in 0..nm.gpus {
            let u = add(&mut f, Role::PcieUp(g), up, host_hop);
            let d = add(&mut f, Role::PcieDown(g), down, host_hop);
            f.pcie_up.push(u);
            f.pcie_down.push(d);
        }
        let switches = f.switch_count();
        for s in 0..switches {
            let u = add(&mut f, Role::SwUp(s), pcie16, model::PCIE_HOP_US);
            let d = add(&mut f, Role::SwDown(s), pcie16, model::PCIE_HOP_US);
            f.sw_up.push(u);
            f.sw_down.push(d);
        }
        let nic_bw = nm.nic_gbps * eff.net();
        for k in 0..nm.nics {
            let u = add(&mut f, Role::NicPcieUp(k), pcie16, model::PCIE_HOP_US);
            let d = add(&mut f, Role::NicPcieDown(k), pcie16, model::PCIE_HOP_US);
            let o = add(&mut f, Role::NicOut(k), nic_bw, model::NET_HOP_US);
            let i = add(&mut f, Role::NicIn(k), nic_bw, model::NET_HOP_US);
            f.nic_pcie_up.push(u);
            f.nic_pcie_down.push(d);
            f.nic_out.push(o);
            f.nic_in.push(i);
        }
        for a in 0..nm.sockets {
            for b in 0..nm.sockets {
                if a != b {
                    let l = add(
                        &mut f,
                        Role::Qpi(a, b),
                        nm.inter_socket_gbps * eff.smp(),
                        model::SMP_HOP_US,
                    );
                    f.qpi[a][b] = Some(l);
                }
            }
            let m = add(&mut f, Role::HostMem(a), nm.host_mem_gbps, 0.0);
            let c = add(&mut f, Role::Memcpy(a), nm.cpu_memcpy_gbps, 0.0);
            f.host_mem.push(m);
            f.memcpy.push(c);
        }
        if nm.storage_gbps > 0.0 {
            let s = add(&mut f, Role::Storage, nm.storage_gbps, model::PCIE_HOP_US);
            f.storage = Some(s);
        }
        f.per_node = f.roles.len();
        let net = &machine.network;
        if let NetLayout::LeafSpine { nodes_per_leaf } = net.layout {
            if nodes_per_leaf == 0 {
                return Err(SimError::Model("nodes per leaf must be at least 1".into()));
            }
            if !(net.oversubscription.is_finite() && net.oversubscription >= 1.0) {
                return Err(SimError::Model(format!(
                    "oversubscription must be at least 1 (got {})",
                    gpucomm_topo::readable_number(net.oversubscription)
                )));
            }
            let leaves = nodes.div_ceil(nodes_per_leaf);
            if leaves > 1 && net.oversubscription > 1.0 && nm.nics > 0 {
                f.npl = nodes_per_leaf;
                for leaf in 0..leaves {
                    let members = nodes_per_leaf.min(nodes - leaf * nodes_per_leaf);
                    f.trunks
                        .push(members as f64 * nm.nics as f64 * nic_bw / net.oversubscription);
                }
            }
        }
        for (i, c) in f.caps.iter().enumerate() {
            if !(c.is_finite() && *c > 0.0) {
                return Err(SimError::Model(format!(
                    "link {} has no usable bandwidth ({c} GB/s)",
                    f.role_name(f.roles[i])
                )));
            }
        }
        Ok(f)
    }

    fn switch_count(&self) -> usize {
        let nm = &self.machine.node;
        let sites = nm.gpu_sites.iter().chain(&nm.nic_sites);
        sites.filter_map(|s| s.tree).max().map_or(0, |t| t + 1)
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Links per node.
    pub fn links_per_node(&self) -> usize {
        self.per_node
    }

    /// Leaf uplinks are modeled (an oversubscribed leaf/spine network
    /// spanning more than one leaf).
    pub fn has_uplinks(&self) -> bool {
        !self.trunks.is_empty()
    }

    /// The leaf of node `node`.
    pub fn leaf_of(&self, node: usize) -> usize {
        node / self.npl.max(1)
    }

    /// Global id of leaf `leaf`'s uplink (`up`) or downlink.
    fn trunk_link(&self, leaf: usize, up: bool) -> LinkId {
        (self.per_node * self.nodes + 2 * leaf + usize::from(!up)) as LinkId
    }

    /// Capacity of leaf `leaf`'s uplink (each direction), GB/s.
    pub fn uplink_gbps(&self, leaf: usize) -> Option<f64> {
        self.trunks.get(leaf).copied()
    }

    fn gl(&self, node: usize, local: u32) -> LinkId {
        (node * self.per_node) as u32 + local
    }

    /// PCIe switch tree of GPU `g` (None: attached to the CPU directly).
    pub(crate) fn switch_of_gpu(&self, g: usize) -> Option<usize> {
        self.machine.node.gpu_sites[g].tree
    }

    /// The GPU next to NIC `k` ([`Machine::nic_gpu`]).
    pub fn nic_gpu(&self, k: usize) -> usize {
        self.machine.nic_gpu(k)
    }

    /// Socket of GPU `g`.
    pub fn socket_of_gpu(&self, g: usize) -> usize {
        self.machine.node.gpu_sites[g].socket
    }

    /// PCIe links from GPU `g` up to its socket's root complex (node-local ids).
    fn pcie_to_cpu(&self, g: usize, out: &mut Vec<u32>) {
        out.push(self.pcie_up[g]);
        if let Some(s) = self.switch_of_gpu(g) {
            out.push(self.sw_up[s]);
        }
    }

    fn pcie_from_cpu(&self, g: usize, out: &mut Vec<u32>) {
        if let Some(s) = self.switch_of_gpu(g) {
            out.push(self.sw_down[s]);
        }
        out.push(self.pcie_down[g]);
    }

    fn qpi_hop(&self, a: usize, b: usize, out: &mut Vec<u32>) {
        if a != b {
            if let Some(l) = self.qpi[a][b] {
                out.push(l);
            }
        }
    }

    /// PCIe-only path between two GPUs of a node (node-local ids).
    fn pcie_path(&self, a: usize, b: usize, out: &mut Vec<u32>) {
        let (sa, sb) = (self.switch_of_gpu(a), self.switch_of_gpu(b));
        out.push(self.pcie_up[a]);
        if sa.is_some() && sa == sb {
            out.push(self.pcie_down[b]);
            return;
        }
        if let Some(s) = sa {
            out.push(self.sw_up[s]);
        }
        self.qpi_hop(self.socket_of_gpu(a), self.socket_of_gpu(b), out);
        if let Some(s) = sb {
            out.push(self.sw_down[s]);
        }
        out.push(self.pcie_down[b]);
    }

    /// NVLink path between two GPUs of a node, if any (node-local ids).
    fn nvlink_path(&self, a: usize, b: usize, out: &mut Vec<u32>) -> bool {
        match &self.machine.node.nvlink {
            NvFabric::None => false,
            NvFabric::Switch { .. } => {
                out.push(self.gpu_up[a]);
                out.push(self.gpu_down[b]);
                true
            }
            NvFabric::Mesh { .. } => {
                if let Some((ab, _)) = self.mesh[a][b] {
                    out.push(ab);
                    return true;
                }
                // Two hops through a GPU linked to both (NCCL's PATH_NVB),
                // one of the GPUs in use: NCCL's topology holds the
                // communicator's GPUs only.
                for c in 0..self.rpn {
                    if let (Some((ac, _)), Some((cb, _))) = (self.mesh[a][c], self.mesh[c][b]) {
                        out.push(ac);
                        out.push(cb);
                        return true;
                    }
                }
                false
            }
        }
    }

    /// True when GPUs `a` and `b` of one node have an NVLink path.
    pub fn has_nvlink(&self, a: usize, b: usize) -> bool {
        let mut v = Vec::new();
        self.nvlink_path(a, b, &mut v)
    }

    /// True when GPUs `a` and `b` of one node are joined by a direct NVLink
    /// (or the NVSwitch), and how many links.
    pub fn nvlink_count(&self, a: usize, b: usize) -> u32 {
        match &self.machine.node.nvlink {
            NvFabric::None => 0,
            NvFabric::Switch { links, .. } => *links,
            NvFabric::Mesh { pairs, .. } => pairs
                .iter()
                .filter(|&&(x, y, _)| (x, y) == (a, b) || (y, x) == (a, b))
                .map(|&(_, _, k)| k)
                .sum(),
        }
    }

    /// Whether GPUs `a` and `b` of a node sit under one PCIe switch tree
    /// (NCCL's `PATH_PIX` or `PATH_PXB`, [`NodeModel::gpu_sites`]).
    fn same_switch_tree(&self, a: usize, b: usize) -> bool {
        let sites = &self.machine.node.gpu_sites;
        sites[a].shares_tree(&sites[b])
    }

    /// Whether NCCL joins local GPUs `a` and `b` peer to peer
    /// (`ncclTopoCheckP2p`, NVIDIA/nccl `src/graph/paths.cc`, as from NCCL
    /// 2.23.4): by default up to `PATH_PXB` ("don't use P2P across CPU Host
    /// Bridges and further apart"), but between the two GPUs of an AMD
    /// host (`PATH_SYS`): a direct NVLink (or the NVSwitch), NVLink through
    /// one other GPU of the communicator (`PATH_NVB`), or one PCIe switch
    /// tree; at [`Machine::nccl_p2p_level`] where set. NCCL 2.9 to 2.22
    /// allowed `PATH_SYS` on every AMD host (`PATH_PXB` on Intel, Arm and
    /// Zhaoxin ones). Other pairs go through host memory, NCCL's SHM
    /// transport (or, for pairs that both reach a NIC faster than each
    /// other, its network transport, not considered here).
    pub fn nccl_p2p(&self, a: usize, b: usize) -> bool {
        if a == b {
            return true;
        }
        // An NVLink route: direct, or through a GPU in use (PATH_NVB).
        let nvb = || self.has_nvlink(a, b);
        let pxb = || nvb() || self.same_switch_tree(a, b);
        match self.machine.nccl_p2p_level {
            None => pxb() || self.machine.node.amd_cpu && self.rpn <= 2,
            Some(P2pLevel::Loc) => false,
            Some(P2pLevel::Nvl) => self.nvlink_count(a, b) > 0,
            Some(P2pLevel::Nvb) => nvb(),
            Some(P2pLevel::Pix | P2pLevel::Pxb) => pxb(),
            Some(P2pLevel::Phb) => pxb() || self.socket_of_gpu(a) == self.socket_of_gpu(b),
            Some(P2pLevel::Sys) => true,
        }
    }

    /// Why NCCL does not join two GPUs peer to peer, for a note: the
    /// `NCCL_P2P_LEVEL` set, or what is missing between them.
    pub fn nccl_shm_reason(&self) -> String {
        match self.machine.nccl_p2p_level {
            Some(l) => format!("NCCL_P2P_LEVEL={}", l.name()),
            None => "no NVLink, no common PCIe switch".to_string(),
        }
    }

    /// Two of a node's GPUs in use that NCCL's ring does not join peer to
    /// peer ([`ClusterFabric::nccl_p2p`]), so that it passes some of its
    /// data through host memory, its shared-memory (SHM) transport: the
    /// first pair in GPU order that is not P2P (not necessarily neighbours
    /// of the ring), where no ring through all the GPUs runs over P2P
    /// pairs. `None` where such a ring exists, with one GPU per node, and,
    /// above 20 GPUs per node (where rings are not searched), where the
    /// rank-order ring is P2P or no GPU has fewer than two P2P peers. The
    /// simulator moves that data peer to peer: published SHM runs are far
    /// below that (docs/sim.md, "What is not modeled"). Across nodes only a
    /// path through a node's GPUs is needed, not a closed ring; the check
    /// asks for the ring (no preset differs).
    ///
    /// ```
    /// use gpucomm_sim::{Engine, Machine};
    ///
    /// // GPUs under four PCIe switches of an Intel host: the ring leaves
    /// // its switch through the CPU.
    /// let pcie = Machine::preset("pcie-8gpu").unwrap();
    /// assert_eq!(pcie.fabric(Engine::Nccl, 1).unwrap().nccl_shm_pair(), Some((0, 2)));
    /// // Two GPUs of one switch, peer to peer.
    /// let mut two = pcie.clone();
    /// two.use_gpus(2).unwrap();
    /// assert_eq!(two.fabric(Engine::Nccl, 1).unwrap().nccl_shm_pair(), None);
    /// // DGX-1: not every pair has NVLink, but a ring over NVLinks does.
    /// let dgx1 = Machine::preset("dgx1-v100").unwrap();
    /// assert_eq!(dgx1.fabric(Engine::Nccl, 1).unwrap().nccl_shm_pair(), None);
    /// ```
    pub fn nccl_shm_pair(&self) -> Option<(usize, usize)> {
        let n = self.rpn;
        let first = || {
            (0..n)
                .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
                .find(|&(a, b)| !self.nccl_p2p(a, b))
        };
        if n > 20 {
            // No n x n table here (a node may hold thousands of GPUs): the
            // rank-order ring first, then each GPU's first two P2P peers.
            if (0..n).all(|a| self.nccl_p2p(a, (a + 1) % n)) {
                return None;
            }
            let stranded = (0..n).any(|a| {
                (0..n)
                    .filter(|&b| b != a && self.nccl_p2p(a, b))
                    .take(2)
                    .count()
                    < 2
            });
            return if stranded { first() } else { None };
        }
        let first = first()?;
        // A ring through every GPU over P2P pairs (a Hamiltonian cycle):
        // ends[mask] holds the GPUs a path from GPU 0 through the GPUs of
        // `mask` can end at; peers[a] the GPUs `a` joins peer to peer.
        let peers: Vec<u32> = (0..n)
            .map(|a| {
                (0..n)
                    .filter(|&b| b != a && self.nccl_p2p(a, b))
                    .fold(0u32, |m, b| m | 1 << b)
            })
            .collect();
        let mut ends = vec![0u32; 1 << n];
        ends[1] = 1;
        for mask in 1..1usize << n {
            let e = ends[mask];
            if e == 0 || mask & 1 == 0 {
                continue;
            }
            for (v, &next) in peers.iter().enumerate() {
                if e >> v & 1 == 1 {
                    let mut free = next & !(mask as u32);
                    while free != 0 {
                        let w = free.trailing_zeros() as usize;
                        free &= free - 1;
                        ends[mask | 1 << w] |= 1 << w;
                    }
                }
            }
        }
        let closes = ends[(1 << n) - 1] & peers[0] != 0;
        (!closes).then_some(first)
    }

    /// NCCL's ring search on a mesh of direct NVLinks (`graph/search.cc`):
    /// the most rings through every GPU of a node over direct links only
    /// that fit together, each directed pair carrying at most as many
    /// rings as it has links (a backtracking search over sets of rings;
    /// NCCL's search also looks for as many rings as the links carry). Each ring is the
    /// GPUs' order, for [`gpucomm_algo::Schedule::with_ring_orders`].
    /// Empty on an NVSwitch (every order is the same), without NVLink, and
    /// where no ring of direct links exists: rank order is used then.
    ///
    /// ```
    /// use gpucomm_sim::{Engine, Machine};
    ///
    /// let m = Machine::preset("dgx1-v100").unwrap();
    /// let f = m.fabric(Engine::Nccl, 1).unwrap();
    /// let rings = f.nvlink_rings();
    /// // Six NVLinks per V100: six rings, each over direct links only.
    /// assert_eq!(rings.len(), 6);
    /// for r in &rings {
    ///     for i in 0..8 {
    ///         let (a, b) = (r[i] as usize, r[(i + 1) % 8] as usize);
    ///         assert!(f.nvlink_count(a, b) > 0);
    ///     }
    /// }
    /// ```
    pub fn nvlink_rings(&self) -> Vec<Vec<u32>> {
        self.mesh_rings().to_vec()
    }

    /// [`ClusterFabric::nvlink_rings`], searched once, borrowed.
    pub(crate) fn mesh_rings(&self) -> &[Vec<u32>] {
        self.rings.get_or_init(|| self.search_rings())
    }

    /// The search behind [`ClusterFabric::nvlink_rings`].
    fn search_rings(&self) -> Vec<Vec<u32>> {
        let NvFabric::Mesh { pairs, .. } = &self.machine.node.nvlink else {
            return Vec::new();
        };
        // The node's first `rpn` GPUs (`--gpus`).
        let n = self.rpn;
        if n < 3 {
            return Vec::new();
        }
        let mut left = vec![vec![0u32; n]; n];
        for &(a, b, k) in pairs.iter().filter(|p| p.0 < n && p.1 < n) {
            left[a][b] += k;
            left[b][a] += k;
        }
        // Every ring takes one outgoing link of each GPU.
        let most = (0..n)
            .map(|a| left[a].iter().sum::<u32>())
            .min()
            .unwrap_or(0) as usize;
        let mut search = RingSearch {
            left,
            chosen: Vec::new(),
            best: Vec::new(),
            most,
            budget: MAX_RING_SEARCH,
        };
        search.sets();
        search
            .best
            .iter()
            .map(|r| r.iter().map(|&g| g as u32).collect())
            .collect()
    }

    /// The ring order of each of `channels` channels (for
    /// [`gpucomm_algo::Schedule::with_ring_orders`]): in one node channel
    /// `c` follows ring `c % len` of [`ClusterFabric::nvlink_rings`].
    /// Across nodes a ring leaves a node from its last GPU through the
    /// channel's NIC and enters the next node at its first GPU. NCCL gives
    /// each channel a NIC (channel `c`: NIC `c mod nics`, so the NICs
    /// share the channels evenly) and its search starts and ends the
    /// channel's path through the node at GPUs next to it: each channel
    /// takes the ring and rotation with the fewest hops from its last GPU
    /// to the NIC and from the NIC to its first GPU, the least used ring
    /// among equals (on a DGX-1, the four channels take four different
    /// rings, each entering and leaving at the two GPUs beside its NIC;
    /// `ring c % len`, rotated, made two channels reach their NIC over a
    /// single NVLink another ring was using).
    /// Empty where [`ClusterFabric::nvlink_rings`] is.
    pub fn ring_orders(&self, channels: u16) -> Vec<Vec<u32>> {
        let rings = self.mesh_rings();
        let nics = self.machine.node.nics;
        if rings.is_empty() || self.nodes == 1 || nics == 0 {
            return rings.to_vec();
        }
        let n = self.rpn;
        let mut used = vec![0u32; rings.len()];
        (0..usize::from(channels.max(1)))
            .map(|c| {
                let k = self.rail(0, c);
                // The hops from leaving GPU `ring[i]` through the channel's
                // NIC to entering GPU `ring[i + 1]`.
                let cost = |ring: &[u32], i: usize| {
                    let (a, b) = (ring[i] as usize, ring[(i + 1) % n] as usize);
                    let (mut out, mut inn) = (Vec::new(), Vec::new());
                    self.to_nic(a, k, &mut out);
                    self.nic_to_gpu(k, b, false, &mut inn);
                    out.len() + inn.len()
                };
                let (r, exit) = (0..rings.len())
                    .flat_map(|r| (0..n).map(move |i| (r, i)))
                    .min_by_key(|&(r, i)| (cost(&rings[r], i), used[r], r, i))
                    .unwrap_or((c % rings.len(), n - 1));
                used[r] += 1;
                (1..=n).map(|d| rings[r][(exit + d) % n]).collect()
            })
            .collect()
    }

    /// The chain order of each of `channels` tree channels (for
    /// [`gpucomm_algo::Schedule::with_ring_orders`]; a tree chains a node's
    /// GPUs from the order's first, its head, which sends up to the parent
    /// node, and the second receives a child node). On a mesh, the ring
    /// orders ([`ClusterFabric::ring_orders`]: NVLink hops, entering next to
    /// the channel's NIC). On an NVSwitch node across nodes, rank order
    /// rotated so that the heads spread over the GPUs while the channels'
    /// NICs (GPU `a` of channel `c` on NIC `(a + c) mod nics`) stay spread
    /// over the NICs: each channel in turn takes the head whose NIC the
    /// fewest channels use so far, then the least used head (NCCL starts
    /// each channel's chain at the GPU next to its NIC; all chains from GPU
    /// 0 would put every channel's network traffic through GPUs 0 and 1).
    /// Empty (rank order) on one node or without NICs.
    ///
    /// ```
    /// use gpucomm_sim::{Engine, Machine};
    ///
    /// let f = Machine::preset("dgx-a100").unwrap().fabric(Engine::Nccl, 4).unwrap();
    /// let orders = f.chain_orders(8);
    /// let heads: Vec<u32> = orders.iter().map(|o| o[0]).collect();
    /// // Eight channels on eight NICs, from seven different heads.
    /// let nics: std::collections::BTreeSet<u32> =
    ///     heads.iter().enumerate().map(|(c, &h)| (h + c as u32) % 8).collect();
    /// assert_eq!(nics.len(), 8);
    /// assert!(heads.iter().collect::<std::collections::BTreeSet<_>>().len() >= 7);
    /// ```
    pub fn chain_orders(&self, channels: u16) -> Vec<Vec<u32>> {
        let nics = self.machine.node.nics;
        if !self.mesh_rings().is_empty() || self.nodes == 1 || nics == 0 {
            return self.ring_orders(channels);
        }
        let n = self.rpn;
        let mut nic_use = vec![0u32; nics];
        let mut head_use = vec![0u32; n];
        (0..usize::from(channels.max(1)))
            .map(|c| {
                let h = (0..n)
                    .min_by_key(|&h| (nic_use[self.rail(h, c)], head_use[h], h))
                    .unwrap_or(0);
                nic_use[self.rail(h, c)] += 1;
                head_use[h] += 1;
                (0..n).map(|d| ((h + d) % n) as u32).collect()
            })
            .collect()
    }

    /// Node-local path from GPU `a` out through NIC `k` (ends with the
    /// NIC's port), with its latency.
    pub(crate) fn gpu_to_net(&self, a: usize, k: usize) -> (Vec<LinkId>, SimTime) {
        let mut v = Vec::new();
        self.to_nic(a, k, &mut v);
        (v.clone(), self.latency_of(&v))
    }

    /// Node-local path from NIC `k`'s port into GPU `b`, with its latency.
    pub(crate) fn net_to_gpu(&self, k: usize, b: usize) -> (Vec<LinkId>, SimTime) {
        let mut v = Vec::new();
        self.nic_to_gpu(k, b, false, &mut v);
        (v.clone(), self.latency_of(&v))
    }

    /// GPU `g`'s NVSwitch uplink and downlink (node 0), if the node has an
    /// NVSwitch.
    pub(crate) fn nvswitch_links(&self, g: usize) -> Option<(LinkId, LinkId)> {
        match self.machine.node.nvlink {
            NvFabric::Switch { .. } => Some((self.gpu_up[g], self.gpu_down[g])),
            _ => None,
        }
    }

    /// Capacities of node 0's links (ids `0..links_per_node()`).
    pub(crate) fn node_caps(&self) -> &[f64] {
        &self.caps
    }

    fn latency_of(&self, links: &[u32]) -> SimTime {
        links.iter().fold(SimTime::ZERO, |t, &l| {
            t + self.lat[l as usize % self.per_node]
        })
    }

    /// Global link ids of a node-local list.
    fn globalize(&self, node: usize, local: &[u32]) -> Vec<LinkId> {
        local.iter().map(|&l| self.gl(node, l)).collect()
    }

    /// Route of a peer-to-peer copy between GPUs of node 0 over PCIe only.
    pub fn pcie_route(&self, a: usize, b: usize) -> Route {
        let mut v = Vec::new();
        self.pcie_path(a, b, &mut v);
        Route {
            latency: self.latency_of(&v),
            links: self.globalize(0, &v),
            class: Some(PathClass::Pcie),
        }
    }

    /// Route from host memory of GPU `g`'s socket (node 0) to GPU `g`
    /// (`to_gpu`) or back: host memory, then PCIe.
    pub fn host_route(&self, g: usize, to_gpu: bool) -> Route {
        self.host_route_at(g, self.socket_of_gpu(g), to_gpu)
    }

    /// Route from host memory of socket `sock` (node 0) to GPU `g`
    /// (`to_gpu`) or back: host memory, the socket link where `sock` is
    /// not `g`'s socket, then PCIe.
    pub fn host_route_at(&self, g: usize, sock: usize, to_gpu: bool) -> Route {
        let mut v = vec![self.host_mem[sock]];
        if to_gpu {
            self.qpi_hop(sock, self.socket_of_gpu(g), &mut v);
            self.pcie_from_cpu(g, &mut v);
        } else {
            self.pcie_to_cpu(g, &mut v);
            self.qpi_hop(self.socket_of_gpu(g), sock, &mut v);
        }
        Route {
            latency: self.latency_of(&v),
            links: self.globalize(0, &v),
            class: Some(PathClass::Pcie),
        }
    }

    /// A CPU memcpy on GPU `g`'s socket (node 0): the memcpy thread's link
    /// and host memory (read and write).
    pub fn memcpy_route(&self, g: usize) -> Route {
        let sock = self.socket_of_gpu(g);
        let v = vec![self.memcpy[sock], self.host_mem[sock]];
        Route {
            latency: SimTime::ZERO,
            links: self.globalize(0, &v),
            class: Some(PathClass::Local),
        }
    }

    /// Storage (node 0) to GPU `g`: directly over PCIe (GPUDirect Storage) or
    /// into host memory (`to_host`).
    pub fn storage_route(&self, g: usize, to_host: bool) -> Result<Route, SimError> {
        let s = self
            .storage
            .ok_or_else(|| SimError::Model("this machine has no storage modeled".into()))?;
        let sock = self.socket_of_gpu(g);
        let mut v = vec![s];
        if to_host {
            v.push(self.host_mem[sock]);
        } else {
            self.pcie_from_cpu(g, &mut v);
        }
        Ok(Route {
            latency: self.latency_of(&v),
            links: self.globalize(0, &v),
            class: Some(PathClass::Pcie),
        })
    }

    /// The NIC (rail) that channel `channel` of local GPU `a` uses: the
    /// `(a + channel) mod r`-th of the node's `r` [`ClusterFabric::rails`],
    /// as NCCL spreads channels over NICs; on a mesh of direct NVLinks
    /// (where [`ClusterFabric::nvlink_rings`] finds rings) the channel's
    /// own NIC, the `channel mod r`-th, whichever GPU sends, since NCCL's
    /// search gives each channel one NIC and its ring enters and leaves
    /// the node next to it ([`ClusterFabric::ring_orders`]). The peer node
    /// receives on the same rail. Needs a node with NICs.
    fn rail(&self, a: usize, channel: usize) -> usize {
        let rails = self.rails();
        if self.mesh_rings().is_empty() {
            rails[(a + channel) % rails.len()]
        } else {
            rails[channel % rails.len()]
        }
    }

    /// The NICs the GPUs in use send through ([`Machine::nics_in_use`]),
    /// computed once.
    pub fn rails(&self) -> &[usize] {
        self.rails.get_or_init(|| self.machine.nics_in_use())
    }

    /// GPU `g` and NIC `k` sit under one PCIe switch tree.
    fn shares_switch_with_nic(&self, g: usize, k: usize) -> bool {
        let nm = &self.machine.node;
        nm.gpu_sites[g].shares_tree(&nm.nic_sites[k])
    }

    /// PCIe links from GPU `a` to NIC `k` (node-local ids, not the NIC's
    /// own): up to their common switch, else up to the CPU, across to the
    /// NIC's socket and down into its switch.
    fn pcie_to_nic(&self, a: usize, k: usize, out: &mut Vec<u32>) {
        if self.shares_switch_with_nic(a, k) {
            out.push(self.pcie_up[a]);
            return;
        }
        self.pcie_to_cpu(a, out);
        let nm = &self.machine.node;
        self.qpi_hop(self.socket_of_gpu(a), nm.nic_sites[k].socket, out);
        if let Some(s) = nm.nic_sites[k].tree {
            out.push(self.sw_down[s]);
        }
    }

    /// The reverse of [`ClusterFabric::pcie_to_nic`].
    fn pcie_from_nic(&self, k: usize, b: usize, out: &mut Vec<u32>) {
        if self.shares_switch_with_nic(b, k) {
            out.push(self.pcie_down[b]);
            return;
        }
        let nm = &self.machine.node;
        if let Some(s) = nm.nic_sites[k].tree {
            out.push(self.sw_up[s]);
        }
        self.qpi_hop(nm.nic_sites[k].socket, self.socket_of_gpu(b), out);
        self.pcie_from_cpu(b, out);
    }

    /// Route from GPU `a` of node `na` to the network through NIC `k` of
    /// that node (node-local ids): NVLink to the NIC's GPU (NCCL's PXN)
    /// and its PCIe where there is one, else PCIe, through the switch
    /// shared with the NIC or the CPU.
    fn to_nic(&self, a: usize, k: usize, out: &mut Vec<u32>) {
        if let Some(g) = self.pxn_relay(a, k, false) {
            // PXN: over NVLink to the GPU next to the NIC, then its PCIe.
            self.nvlink_path(a, g, out);
            self.pcie_to_nic(g, k, out);
        } else {
            self.pcie_to_nic(a, k, out);
        }
        out.push(self.nic_pcie_up[k]);
        out.push(self.nic_out[k]);
    }

    /// Route from NIC `k` to GPU `b` of its node, the reverse of
    /// [`ClusterFabric::to_nic`]; with `pcie_first` through the PCIe switch
    /// shared with the NIC before NVLink from the NIC's GPU.
    fn nic_to_gpu(&self, k: usize, b: usize, pcie_first: bool, out: &mut Vec<u32>) {
        out.push(self.nic_in[k]);
        out.push(self.nic_pcie_down[k]);
        let relay = self
            .pxn_relay(b, k, false)
            .filter(|_| !(pcie_first && self.shares_switch_with_nic(b, k)));
        if let Some(g) = relay {
            self.pcie_from_nic(k, g, out);
            self.nvlink_path(g, b, out);
        } else {
            self.pcie_from_nic(k, b, out);
        }
    }

    /// Route from host memory of socket `sock` out through NIC `k`
    /// (node-local ids, ending with the NIC's port): the socket link to the
    /// NIC's socket where it is another, the CPU's way down into the NIC's
    /// PCIe switch, the NIC's PCIe link, its port.
    fn host_to_nic(&self, sock: usize, k: usize, out: &mut Vec<u32>) {
        let nm = &self.machine.node;
        out.push(self.host_mem[sock]);
        self.qpi_hop(sock, nm.nic_sites[k].socket, out);
        if let Some(s) = nm.nic_sites[k].tree {
            out.push(self.sw_down[s]);
        }
        out.push(self.nic_pcie_up[k]);
        out.push(self.nic_out[k]);
    }

    /// Route from NIC `k`'s port into host memory of socket `sock`, the
    /// reverse of [`ClusterFabric::host_to_nic`].
    fn nic_to_host(&self, k: usize, sock: usize, out: &mut Vec<u32>) {
        let nm = &self.machine.node;
        out.push(self.nic_in[k]);
        out.push(self.nic_pcie_down[k]);
        if let Some(s) = nm.nic_sites[k].tree {
            out.push(self.sw_up[s]);
        }
        self.qpi_hop(nm.nic_sites[k].socket, sock, out);
        out.push(self.host_mem[sock]);
    }

    fn role_name(&self, r: Role) -> String {
        match r {
            Role::GpuUp(g) => format!("gpu{g}->nvswitch"),
            Role::GpuDown(g) => format!("nvswitch->gpu{g}"),
            Role::Mesh(a, b) => format!("gpu{a}->gpu{b} nvlink"),
            Role::PcieUp(g) if self.machine.node.c2c_gbps.is_some() => format!("gpu{g}->c2c"),
            Role::PcieDown(g) if self.machine.node.c2c_gbps.is_some() => format!("c2c->gpu{g}"),
            Role::PcieUp(g) => format!("gpu{g}->pcie"),
            Role::PcieDown(g) => format!("pcie->gpu{g}"),
            Role::SwUp(s) => format!("pcie-switch{s}->cpu"),
            Role::SwDown(s) => format!("cpu->pcie-switch{s}"),
            Role::NicPcieUp(k) => format!("pcie->nic{k}"),
            Role::NicPcieDown(k) => format!("nic{k}->pcie"),
            Role::NicOut(k) => format!("nic{k}->net"),
            Role::NicIn(k) => format!("net->nic{k}"),
            Role::Qpi(a, b) => format!("cpu{a}->cpu{b}"),
            Role::HostMem(s) => format!("cpu{s} memory"),
            Role::Memcpy(s) => format!("cpu{s} memcpy thread"),
            Role::Storage => "nvme".to_string(),
        }
    }

    /// The fabric's translation symmetry: translating by one node maps
    /// every node's links onto the next node's (representatives: node
    /// 0's). Behind oversubscribed leaf uplinks it takes a whole leaf:
    /// translating by one leaf's nodes maps node links and leaf uplinks
    /// onto the next leaf's (representatives: the first leaf's), provided
    /// every leaf is full (`None` otherwise: the last leaf's uplink would be
    /// narrower).
    ///
    /// ```
    /// use gpucomm_sim::{Engine, Machine};
    /// use gpucomm_topo::{ClusterOptions, Fabric};
    /// let leaves = ClusterOptions {
    ///     fabric: Fabric::LeafSpine,
    ///     nodes_per_leaf: 2,
    ///     oversubscription: 2.0,
    ///     ..Default::default()
    /// };
    /// let m = Machine::preset("dgx-h100").unwrap().with_cluster_options(&leaves).unwrap();
    /// assert_eq!(m.fabric(Engine::Nccl, 4).unwrap().node_orbits().unwrap().period, 2);
    /// // Three nodes: the second leaf has one node, and a narrower uplink.
    /// assert!(m.fabric(Engine::Nccl, 3).unwrap().node_orbits().is_none());
    /// // Rails: every node is alike.
    /// let rails = Machine::preset("dgx-h100").unwrap().fabric(Engine::Nccl, 3).unwrap();
    /// assert_eq!(rails.node_orbits().unwrap().period, 1);
    /// ```
    pub fn node_orbits(&self) -> Option<NodeOrbits> {
        // Without uplinks every link is a node's (`trunks` is empty).
        let period = if self.has_uplinks() {
            self.npl.max(1)
        } else {
            1
        };
        if self.nodes % period != 0 {
            return None;
        }
        let node_links = self.per_node * self.nodes;
        let group = self.per_node * period;
        let mut rep: Vec<Option<LinkId>> = (0..node_links)
            .map(|l| Some((l % group) as LinkId))
            .collect();
        // Every leaf's uplink (even ids) and downlink stand in leaf 0's.
        for t in 0..2 * self.trunks.len() {
            rep.push(Some((node_links + t % 2) as LinkId));
        }
        Some(NodeOrbits { period, rep })
    }
}

impl Fabric for ClusterFabric {
    fn ranks(&self) -> usize {
        self.rpn * self.nodes
    }

    fn ranks_per_node(&self) -> usize {
        self.rpn
    }

    fn capacities(&self) -> Vec<f64> {
        let mut v = Vec::with_capacity(self.per_node * self.nodes + 2 * self.trunks.len());
        for _ in 0..self.nodes {
            v.extend_from_slice(&self.caps);
        }
        for &t in &self.trunks {
            v.push(t);
            v.push(t);
        }
        v
    }

    fn link_name(&self, link: LinkId) -> String {
        let node_links = self.per_node * self.nodes;
        if link as usize >= node_links {
            let i = link as usize - node_links;
            let leaf = i / 2;
            return if i % 2 == 0 {
                format!("leaf{leaf}->spine")
            } else {
                format!("spine->leaf{leaf}")
            };
        }
        let node = link as usize / self.per_node;
        let r = self.roles[link as usize % self.per_node];
        format!("node{node}:{}", self.role_name(r))
    }

    fn route(&self, src: usize, dst: usize, channel: u16) -> Result<Route, SimError> {
        self.route_via(src, dst, channel, false)
    }

    fn local_gbps(&self, _rank: usize) -> f64 {
        // A copy reads and writes device memory.
        self.machine.node.hbm_gbps / 2.0
    }

    fn node_orbits(&self) -> Option<NodeOrbits> {
        ClusterFabric::node_orbits(self)
    }
}

/// A [`ClusterFabric`] as NCCL's point-to-point operations (sendrecv,
/// all_to_all, gather, scatter) use it ([`ClusterFabric::transfers`]).
pub struct Transfers<'a> {
    fabric: &'a ClusterFabric,
    peer_nics: bool,
}

impl Fabric for Transfers<'_> {
    fn ranks(&self) -> usize {
        self.fabric.ranks()
    }

    fn ranks_per_node(&self) -> usize {
        self.fabric.ranks_per_node()
    }

    fn capacities(&self) -> Vec<f64> {
        self.fabric.capacities()
    }

    fn link_name(&self, link: LinkId) -> String {
        self.fabric.link_name(link)
    }

    fn route(&self, src: usize, dst: usize, channel: u16) -> Result<Route, SimError> {
        self.fabric.route_via(src, dst, channel, self.peer_nics)
    }

    fn local_gbps(&self, rank: usize) -> f64 {
        self.fabric.local_gbps(rank)
    }

    fn node_orbits(&self) -> Option<NodeOrbits> {
        self.fabric.node_orbits()
    }
}

impl ClusterFabric {
    /// This fabric as a collective's transfers use it. Between nodes a
    /// collective's channel leaves and enters on its rail
    /// ([`ClusterFabric::rails`]); NCCL's point-to-point operations
    /// (`peer_nics`) instead go through a NIC next to the receiving GPU
    /// (`ncclTopoGetNetDev` with PXN, NVIDIA/nccl `src/graph/topo.cc`: the
    /// receiver's proxy posts on its local NIC, the sender reaches the same
    /// rail over NVLink to the GPU next to that rail's NIC), so all of a
    /// GPU's incoming traffic from other nodes lands on its own NICs, the
    /// channels taking them in turn. A sender that cannot reach that NIC
    /// over NVLink (or its PCIe switch) keeps its channel's rail.
    pub fn transfers(&self, peer_nics: bool) -> Transfers<'_> {
        Transfers {
            fabric: self,
            peer_nics,
        }
    }

    /// The NICs nearest local GPU `g` by NCCL's path types
    /// (`ncclTopoGetLocalNet`): its own ([`NodeModel::gpu_nics`]) where they
    /// are `PATH_PXB` or nearer; else those its NVLink peers in use have so
    /// near (`PATH_PXN`: it reaches them through the peer, nearer than
    /// through its CPU), where it has a direct NVLink (or the NVSwitch) to
    /// one; else its own (its CPU's, `PATH_PHB`, or its host's, `PATH_SYS`).
    /// Every NIC of the node counts, in use by a collective's rails or not,
    /// as NCCL trims only GPUs from its topology. Empty where no NIC is in
    /// its host (a Grace rack's other trays).
    pub(crate) fn nearest_nics(&self, g: usize) -> &[usize] {
        &self.nearest.get_or_init(|| self.find_nearest_nics())[g]
    }

    fn find_nearest_nics(&self) -> Vec<Vec<usize>> {
        let nm = &self.machine.node;
        (0..nm.gpus)
            .map(|g| {
                if nm.gpu_nics_near[g] {
                    return nm.gpu_nics[g].clone();
                }
                let mut pxn: Vec<usize> = (0..self.rpn)
                    .filter(|&h| h != g && nm.gpu_nics_near[h] && self.nvlink_count(g, h) > 0)
                    .flat_map(|h| nm.gpu_nics[h].iter().copied())
                    .collect();
                pxn.sort_unstable();
                pxn.dedup();
                if pxn.is_empty() {
                    nm.gpu_nics[g].clone()
                } else {
                    pxn
                }
            })
            .collect()
    }

    /// NIC `k` is one of local GPU `g`'s nearest.
    fn nic_near(&self, k: usize, g: usize) -> bool {
        self.nearest_nics(g).contains(&k)
    }

    /// The GPU local GPU `a` relays NIC `k`'s traffic through over NVLink
    /// (NCCL's PXN, `ncclTopoGetLocalGpu`), if any: a GPU in use to which
    /// the NIC is among the nearest and `PATH_PXB` or nearer (no relay to a
    /// NIC across a CPU), the NIC's own GPU ([`NodeModel::nic_gpus`]) if it
    /// is one, else the first such; and an NVLink path joins them
    /// (`direct`: a direct link or the NVSwitch, NCCL's `PATH_NVL`).
    fn pxn_relay(&self, a: usize, k: usize, direct: bool) -> Option<usize> {
        let nm = &self.machine.node;
        let local = |g: usize| g < self.rpn && nm.gpu_nics_near[g] && nm.gpu_nics[g].contains(&k);
        let home = self.nic_gpu(k);
        let g = if local(home) {
            home
        } else {
            (0..self.rpn).find(|&g| local(g))?
        };
        let linked = if direct {
            self.nvlink_count(a, g) > 0
        } else {
            self.has_nvlink(a, g)
        };
        (a != g && linked).then_some(g)
    }

    /// The NIC `ncclTopoGetLocalNet` gives local GPU `g` on `channel`
    /// (`None` without a NIC near it): the GPUs in use sharing its nearest NICs
    /// split them, each starting at its device index modulo their count
    /// (bit-mirrored when the NICs are a power of two) and taking
    /// ceil(NICs / GPUs) of them in turn over the channels: one each where
    /// as many GPUs as NICs share a PCIe switch.
    fn local_nic(&self, g: usize, channel: usize) -> Option<usize> {
        let home = self.nearest_nics(g);
        let first = *home.first()?;
        let sharing = (0..self.rpn)
            .filter(|&h| self.nic_near(first, h))
            .count()
            .max(1);
        let per = home.len().div_ceil(sharing);
        let base = if home.len().is_power_of_two() {
            mirror_bits(g % sharing, home.len())
        } else {
            g % sharing
        };
        Some(home[(base + channel % per) % home.len()])
    }

    /// The NICs NCCL's point-to-point operation from local GPU `a` to local
    /// GPU `b` of another node takes on `channel`, `(sending, receiving)`
    /// ([`ClusterFabric::transfers`], `ncclTopoGetNetDev`): the receiver
    /// posts on its own NIC; the sender sends on the NIC its node's GPU of
    /// the receiver's index would take, relaying over a direct NVLink to
    /// that NIC's GPU (PXN, NCCL's `PATH_NVL`) unless the NIC is near it,
    /// and on its own NIC where neither holds. A receiver with no NIC near
    /// it keeps the sender's channel rail at both ends.
    fn peer_nics(&self, a: usize, b: usize, channel: usize) -> (usize, usize) {
        let Some(k) = self.local_nic(b, channel) else {
            let k = self.rail(a, channel);
            return (k, k);
        };
        if self.nic_near(k, a) || self.pxn_relay(a, k, true).is_some() {
            (k, k)
        } else {
            (
                self.local_nic(a, channel)
                    .unwrap_or_else(|| self.rail(a, channel)),
                k,
            )
        }
    }

    fn route_via(
        &self,
        src: usize,
        dst: usize,
        channel: u16,
        peer_nics: bool,
    ) -> Result<Route, SimError> {
        let n = self.ranks();
        if src >= n || dst >= n {
            return Err(SimError::NoRoute {
                src,
                dst,
                why: format!("only {n} ranks"),
            });
        }
        let (na, a) = (src / self.rpn, src % self.rpn);
        let (nb, b) = (dst / self.rpn, dst % self.rpn);
        if src == dst {
            return Ok(Route {
                links: Vec::new(),
                latency: SimTime::ZERO,
                class: Some(PathClass::Local),
            });
        }
        let mut v = Vec::with_capacity(8);
        if na == nb {
            let class = if self.nvlink_path(a, b, &mut v) {
                PathClass::NvLink
            } else {
                self.pcie_path(a, b, &mut v);
                PathClass::Pcie
            };
            return Ok(Route {
                latency: self.latency_of(&v),
                links: self.globalize(na, &v),
                class: Some(class),
            });
        }
        let nics = self.machine.node.nics;
        if nics == 0 {
            return Err(SimError::NoRoute {
                src,
                dst,
                why: "the nodes have no NIC".into(),
            });
        }
        let (ks, kr) = if peer_nics {
            self.peer_nics(a, b, usize::from(channel))
        } else {
            let k = self.rail(a, usize::from(channel));
            (k, k)
        };
        let mut w = Vec::with_capacity(6);
        // A point-to-point send relays over NVLink to the NIC's GPU even
        // where the NIC shares its PCIe switch (PXN takes the GPU that
        // uses the NIC, `ncclTopoGetLocalGpu`); its receive is read from
        // the NIC through the PCIe switch (NCCL has no PXN on receive).
        self.to_nic(a, ks, &mut v);
        self.nic_to_gpu(kr, b, peer_nics, &mut w);
        Ok(self.across_network(na, &v, nb, &w))
    }

    /// The route of a transfer between nodes that leaves node `na` by the
    /// node-local links `out` (ending with a NIC's port) and enters node
    /// `nb` by `into` (starting with one): between them the leaves'
    /// uplink and downlink where they are modeled and the nodes are on
    /// different leaves, and the network switch's latency.
    fn across_network(&self, na: usize, out: &[u32], nb: usize, into: &[u32]) -> Route {
        let latency =
            self.latency_of(out) + self.latency_of(into) + SimTime::from_us(model::NET_SWITCH_US);
        let mut links = self.globalize(na, out);
        let (la, lb) = (self.leaf_of(na), self.leaf_of(nb));
        if self.has_uplinks() && la != lb {
            links.push(self.trunk_link(la, true));
            links.push(self.trunk_link(lb, false));
        }
        links.extend(self.globalize(nb, into));
        Route {
            links,
            latency,
            class: Some(PathClass::Net),
        }
    }

    /// The network leg of a transfer staged through host memory between
    /// rank `src` and rank `dst` of another node, on the NIC that
    /// [`Fabric::route`] gives the GPUs' transfer on `channel`: from host
    /// memory of `src`'s socket out through that NIC (crossing the socket
    /// link and the CPU's way down into the NIC's PCIe switch as the route
    /// structure has them), over the network as the GPUs' transfer goes
    /// (leaf uplinks included), into host memory of `dst`'s socket.
    pub fn host_net_route(&self, src: usize, dst: usize, channel: u16) -> Result<Route, SimError> {
        let n = self.ranks();
        let (na, a) = (src / self.rpn, src % self.rpn);
        let (nb, b) = (dst / self.rpn, dst % self.rpn);
        if src >= n || dst >= n || na == nb || self.machine.node.nics == 0 {
            return Err(SimError::NoRoute {
                src,
                dst,
                why: "a host-staged network transfer joins two nodes with NICs".into(),
            });
        }
        let k = self.rail(a, usize::from(channel));
        let (mut v, mut w) = (Vec::with_capacity(6), Vec::with_capacity(6));
        self.host_to_nic(self.socket_of_gpu(a), k, &mut v);
        self.nic_to_host(k, self.socket_of_gpu(b), &mut w);
        Ok(self.across_network(na, &v, nb, &w))
    }
}

/// `v` with its low `log2(pow2)` bits in reverse order (NCCL's
/// `mirrorBits`, `src/graph/topo.cc`), `pow2` a power of two.
fn mirror_bits(v: usize, pow2: usize) -> usize {
    match pow2.trailing_zeros() {
        0 => 0,
        bits => (v & (pow2 - 1)).reverse_bits() >> (usize::BITS - bits),
    }
}

/// Steps the ring search may take in all (a node has a handful of GPUs;
/// this only bounds a pathological topology file).
const MAX_RING_SEARCH: u32 = 1_000_000;

/// Backtracking over sets of rings: the largest set of rings (each
/// through every GPU once, over links with capacity `left`) that the
/// links carry together, rings taken in lexicographic order so that each
/// set is tried once.
struct RingSearch {
    left: Vec<Vec<u32>>,
    chosen: Vec<Vec<usize>>,
    best: Vec<Vec<usize>>,
    most: usize,
    budget: u32,
}

impl RingSearch {
    /// Records `chosen` if it is the largest set so far, then tries to add
    /// one more ring; true once `most` rings are found (no larger set
    /// exists).
    fn sets(&mut self) -> bool {
        if self.chosen.len() > self.best.len() {
            self.best = self.chosen.clone();
        }
        if self.best.len() >= self.most {
            return true;
        }
        let n = self.left.len();
        let mut path = Vec::with_capacity(n);
        path.push(0);
        let mut used = vec![false; n];
        used[0] = true;
        self.next_ring(&mut path, &mut used)
    }

    /// Extends `path` (from GPU 0) over links with capacity left to every
    /// ring no smaller than the last chosen one, in lexicographic order
    /// (until the step budget runs out); each ring found is added to
    /// `chosen` and the search goes on from there. Rings are generated as
    /// they are tried: nothing is listed.
    fn next_ring(&mut self, path: &mut Vec<usize>, used: &mut [bool]) -> bool {
        let n = used.len();
        let last = *path.last().expect("starts at GPU 0");
        if path.len() == n {
            if self.left[last][path[0]] == 0 {
                return false;
            }
            for i in 0..n {
                self.left[path[i]][path[(i + 1) % n]] -= 1;
            }
            self.chosen.push(path.clone());
            if self.sets() {
                return true;
            }
            self.chosen.pop();
            for i in 0..n {
                self.left[path[i]][path[(i + 1) % n]] += 1;
            }
            return false;
        }
        for g in 0..n {
            if self.budget == 0 {
                return false;
            }
            if used[g] || self.left[last][g] == 0 {
                continue;
            }
            // Below the last chosen ring's prefix: every ring from here
            // is smaller than it.
            path.push(g);
            let below = self
                .chosen
                .last()
                .is_some_and(|c| path.as_slice() < &c[..path.len()]);
            if !below {
                self.budget -= 1;
                used[g] = true;
                let done = self.next_ring(path, used);
                used[g] = false;
                if done {
                    path.pop();
                    return true;
                }
            }
            path.pop();
        }
        false
    }
}

#[cfg(test)]
mod peer_nic_tests {
    use super::*;

    /// 10^8 nodes asked for a 63 GB link table (an abort), and 2^64 - 1
    /// nodes wrapped to a smaller rank count that simulated.
    #[test]
    fn a_fabric_past_max_ranks_is_refused_without_wrapping() {
        let m = Machine::preset("dgx-h100").unwrap();
        assert!(m.fabric(Engine::Nccl, MAX_RANKS / 8).is_ok());
        for nodes in [MAX_RANKS / 8 + 1, 100_000_000, usize::MAX] {
            let e = m.fabric(Engine::Nccl, nodes).unwrap_err().to_string();
            assert!(e.contains("at most 131072 GPUs"), "{nodes}: {e}");
        }
        let mut wide = m.clone();
        wide.nodes = usize::MAX;
        assert_eq!(wide.ranks(), usize::MAX);
    }

    /// NCCL's transport between a node's GPUs: P2P over NVLink (direct or
    /// through one GPU) and under a common PCIe switch, or between the two
    /// GPUs of an AMD host; else host memory (SHM), which a ring needs
    /// only where no ring of P2P pairs exists.
    #[test]
    fn nccl_joins_gpus_without_a_p2p_ring_through_host_memory() {
        let pair = |m: &Machine| m.fabric(Engine::Nccl, 1).unwrap().nccl_shm_pair();
        for (name, _) in gpucomm_topo::PRESETS {
            let m = Machine::preset(name).unwrap();
            let want = (*name == "pcie-8gpu").then_some((0, 2));
            assert_eq!(pair(&m), want, "{name}");
        }
        let mut pcie = Machine::preset("pcie-8gpu").unwrap();
        for (gpus, want) in [(1, None), (2, None), (3, Some((0, 2))), (4, Some((0, 2)))] {
            pcie.use_gpus(gpus).unwrap();
            assert_eq!(pair(&pcie), want, "{gpus} GPUs");
        }
        // GPUs on the CPU's own ports: P2P between an AMD host's two,
        // SHM on an Intel host and beyond two.
        let mut direct = Machine::preset("pcie-8gpu").unwrap();
        for s in &mut direct.node.gpu_sites {
            s.tree = None;
        }
        direct.use_gpus(2).unwrap();
        assert_eq!(pair(&direct), Some((0, 1)));
        direct.node.amd_cpu = true;
        assert_eq!(pair(&direct), None);
        direct.use_gpus(3).unwrap();
        assert_eq!(pair(&direct), Some((0, 1)));
        // DGX-1: every pair P2P by default, directly or through one GPU;
        // at NCCL_P2P_LEVEL=NVL only the directly linked ones.
        let mut dgx1 = Machine::preset("dgx1-v100").unwrap();
        let f = dgx1.fabric(Engine::Nccl, 1).unwrap();
        assert!((0..8).all(|a| (0..8).all(|b| f.nccl_p2p(a, b))));
        dgx1.nccl_p2p_level = Some(P2pLevel::Nvl);
        let f = dgx1.fabric(Engine::Nccl, 1).unwrap();
        assert!(f.nccl_p2p(0, 1) && !f.nccl_p2p(0, 5));
        // Switches in a tree (cascaded, as the topology's switch trees
        // say) join their GPUs peer to peer: four GPUs under one tree need
        // no host memory.
        let mut cascade = Machine::preset("pcie-8gpu").unwrap();
        for (g, s) in cascade.node.gpu_sites.iter_mut().enumerate() {
            s.tree = Some(if g < 4 { 0 } else { 9 });
        }
        cascade.use_gpus(4).unwrap();
        assert_eq!(pair(&cascade), None);
        cascade.use_gpus(5).unwrap();
        assert_eq!(pair(&cascade), Some((0, 4)));
        // NVLink through a GPU not in use is no path of NCCL's (its
        // topology holds the communicator's GPUs).
        let mut relay = Machine::preset("pcie-8gpu").unwrap();
        relay.node.nvlink = NvFabric::Mesh {
            generation: 3,
            pairs: vec![(0, 4, 2), (4, 1, 2)],
        };
        for s in &mut relay.node.gpu_sites {
            s.tree = None;
        }
        relay.use_gpus(5).unwrap();
        assert!(relay.fabric(Engine::Nccl, 1).unwrap().nccl_p2p(0, 1));
        relay.use_gpus(2).unwrap();
        let f = relay.fabric(Engine::Nccl, 1).unwrap();
        assert!(!f.nccl_p2p(0, 1));
        // Nor does the route relay through it.
        assert_eq!(f.route(0, 1, 0).unwrap().class, Some(PathClass::Pcie));
        // Above 20 GPUs a node is not searched, but one whose GPUs have
        // no P2P peer at all is noted.
        let mut rack = Machine::preset("gb200-nvl72").unwrap();
        assert_eq!(pair(&rack), None);
        rack.nccl_p2p_level = Some(P2pLevel::Loc);
        assert_eq!(pair(&rack), Some((0, 1)));
    }

    #[test]
    fn mirror_bits_reverses_the_low_bits() {
        assert_eq!(mirror_bits(0b001, 8), 0b100);
        assert_eq!(mirror_bits(0b110, 8), 0b011);
        assert_eq!(mirror_bits(1, 2), 1);
        assert_eq!(mirror_bits(5, 1), 0);
    }

    #[test]
    fn a_point_to_point_transfer_takes_the_receivers_own_nic() {
        // DGX H100: GPUs 2k and 2k+1 share NICs 2k and 2k+1, one each,
        // whatever the channel and the sender (over NVLink to the NIC's
        // GPU).
        let f = Machine::preset("dgx-h100")
            .unwrap()
            .fabric(Engine::Nccl, 2)
            .unwrap();
        for b in 0..8 {
            for (a, ch) in [(0, 0), (7, 1), (3, 5)] {
                assert_eq!(
                    f.peer_nics(a, b, ch),
                    (b, b),
                    "to GPU {b} from {a}, channel {ch}"
                );
            }
        }
        // Four NICs for eight GPUs (next to GPUs 0, 2, 4, 6): GPUs 2k and
        // 2k+1 both receive on NIC k.
        let hdr = gpucomm_topo::catalog::parse_port("hdr");
        let f = Machine::select_with_nics("dgx-a100", Some(4), hdr)
            .unwrap()
            .fabric(Engine::Nccl, 2)
            .unwrap();
        for b in 0..8 {
            assert_eq!(f.peer_nics(5, b, 3), (b / 2, b / 2), "GPU {b}");
        }
        // No direct NVLink to the receiver's NIC's GPU (DGX-1's GPU 7 and
        // GPU 0; NCCL relays over PATH_NVL only), or no NVLink at all
        // (PCIe server): the sender's own NIC, the receiver's own.
        for preset in ["dgx1-v100", "pcie-8gpu"] {
            let f = Machine::preset(preset)
                .unwrap()
                .fabric(Engine::Nccl, 2)
                .unwrap();
            assert_eq!(f.peer_nics(7, 0, 0), (3, 0), "{preset}");
            assert_eq!(
                f.peer_nics(1, 0, 0),
                (0, 0),
                "{preset}: NIC 0 is near GPU 1"
            );
        }
    }

    #[test]
    fn a_gpu_alone_in_use_keeps_every_nic_near_it() {
        // One GPU in use: NCCL trims only GPUs, so the NICs nearest GPU 0
        // are kept and alternate over the channels; a collective's rails
        // keep GPU 0's own (`rails`). A DGX H100's GPU 0 has one (its own
        // NIC behind its PCIe switch, PXB; the others are NODE, as the
        // published topo -m reads); with 16 NICs its switch holds two.
        let nics = |mut m: Machine| -> Vec<usize> {
            m.use_gpus(1).unwrap();
            let f = m.fabric(Engine::Nccl, 2).unwrap();
            (0..4).map(|ch| f.local_nic(0, ch).unwrap()).collect()
        };
        assert_eq!(nics(Machine::preset("dgx-h100").unwrap()), [0, 0, 0, 0]);
        let sixteen = Machine::select_with_nics("dgx-h100", Some(16), None).unwrap();
        assert_eq!(nics(sixteen), [0, 1, 0, 1]);
    }
}
