//! The graph: nodes, links, and the [`Topology`] that owns them.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::OnceLock;

use crate::catalog::LinkKind;
use crate::error::TopoError;
use crate::hardware::{self, GpuArch};
use crate::route::Router;

/// Index of a node in [`Topology::nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeIx(pub u32);

impl NodeIx {
    /// As a `usize` index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Index of a link in [`Topology::links`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkIx(pub u32);

impl LinkIx {
    /// As a `usize` index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum NodeKind {
    /// A host (one operating system): a container, never linked. Other
    /// nodes name it in [`Node::host`].
    Host,
    /// A CPU socket or NUMA node with its memory and PCIe root complex; the
    /// endpoint of host-memory copies.
    Cpu,
    /// A PCIe switch (collapsed upstream + downstream ports).
    PcieSwitch,
    /// A GPU.
    Gpu,
    /// A network adapter (InfiniBand HCA or Ethernet/RoCE NIC).
    Nic,
    /// An NVSwitch fabric: one logical node for the NVSwitch chips of a
    /// baseboard or rack ([`Node::chips`] says how many).
    NvSwitch,
    /// A network switch of the inter-node fabric (leaf, spine, rail).
    NetSwitch,
    /// A storage device (NVMe drive).
    Storage,
    /// Any other PCIe endpoint (found by discovery).
    PcieDevice,
}

impl NodeKind {
    /// All kinds.
    pub const ALL: [NodeKind; 9] = [
        Self::Host,
        Self::Cpu,
        Self::PcieSwitch,
        Self::Gpu,
        Self::Nic,
        Self::NvSwitch,
        Self::NetSwitch,
        Self::Storage,
        Self::PcieDevice,
    ];
    /// The name used in files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Cpu => "cpu",
            Self::PcieSwitch => "pcie-switch",
            Self::Gpu => "gpu",
            Self::Nic => "nic",
            Self::NvSwitch => "nvswitch",
            Self::NetSwitch => "switch",
            Self::Storage => "storage",
            Self::PcieDevice => "pcie-device",
        }
    }
    /// Parses a file name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
    /// Whether traffic may pass *through* a node of this kind. GPUs, storage
    /// and other endpoints only send and receive (CUDA P2P does not forward
    /// through a GPU); switches, CPUs (root complex) and NICs forward. A NIC
    /// forwards only between its host side (PCIe) and the network: routes
    /// never cross one from one PCIe link to another, nor from one network
    /// port to another.
    pub fn is_transit(self) -> bool {
        matches!(
            self,
            Self::Cpu | Self::PcieSwitch | Self::Nic | Self::NvSwitch | Self::NetSwitch
        )
    }
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A node of the graph.
///
/// ```
/// use gpucomm_topo::{Node, NodeKind};
/// let gpu = Node::new("gpu0", NodeKind::Gpu).with_label("H100 SXM5 80GB").with_numa(0);
/// assert_eq!(gpu.numa, Some(0));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Unique id (`"gpu0"`, `"n3.nic1"`).
    pub id: String,
    /// What it is.
    pub kind: NodeKind,
    /// Model or description (`"H100 SXM5 80GB"`, `"Xeon Platinum 8480C"`).
    pub label: String,
    /// The host it belongs to; `None` for hosts themselves and for fabric
    /// shared between hosts (network switches, a rack's NVLink switches).
    pub host: Option<NodeIx>,
    /// NUMA node.
    pub numa: Option<u32>,
    /// CPU socket.
    pub socket: Option<u32>,
    /// PCI address (`0000:17:00.0`).
    pub pci_address: Option<String>,
    /// The PCIe root complex (host bridge) it sits under (`pci0000:00`):
    /// two devices under different root complexes of one CPU are `NODE`,
    /// not `PHB`, apart.
    pub root_complex: Option<String>,
    /// In-network reduction: NVSwitch NVLink SHARP (NVLS, generation 3+) or
    /// InfiniBand SHARP on a network switch.
    pub reduction: bool,
    /// Physical chips behind a logical switch node (NVSwitch).
    pub chips: Option<u32>,
    /// For NICs: the kind of the network port (InfiniBand or Ethernet);
    /// clusters link the NIC to the fabric with it.
    pub port: Option<LinkKind>,
    /// For GPUs: the architecture. `None`: inferred from the label
    /// ([`Node::gpu_arch`]).
    pub arch: Option<GpuArch>,
    /// Memory bandwidth in GB/s: device memory for a GPU, the socket's
    /// memory for a CPU. `None`: inferred from the label
    /// ([`Node::memory_gbps`]).
    pub memory_bandwidth: Option<f64>,
    /// Free-form properties shown by `gpucomm topo` (interface names,
    /// driver, CPU list, memory size).
    pub props: BTreeMap<String, String>,
}

impl Node {
    /// A node with only id and kind set.
    pub fn new(id: impl Into<String>, kind: NodeKind) -> Self {
        Node {
            id: id.into(),
            kind,
            label: String::new(),
            host: None,
            numa: None,
            socket: None,
            pci_address: None,
            root_complex: None,
            reduction: false,
            chips: None,
            port: None,
            arch: None,
            memory_bandwidth: None,
            props: BTreeMap::new(),
        }
    }
    /// Sets the GPU architecture and memory bandwidth (GB/s).
    pub fn with_gpu(mut self, arch: GpuArch, memory_gbps: f64) -> Self {
        self.arch = Some(arch);
        self.memory_bandwidth = Some(memory_gbps);
        self
    }
    /// Sets the memory bandwidth (GB/s): a GPU's device memory, a CPU
    /// socket's memory.
    pub fn with_memory_bandwidth(mut self, gbps: f64) -> Self {
        self.memory_bandwidth = Some(gbps);
        self
    }
    /// A GPU's architecture: [`Node::arch`] if set, else inferred from the
    /// label ([`hardware::gpu_from_label`]); `None` for other kinds and
    /// unknown GPUs.
    ///
    /// ```
    /// use gpucomm_topo::{GpuArch, Node, NodeKind};
    /// let g = Node::new("gpu0", NodeKind::Gpu).with_label("NVIDIA H100 80GB HBM3");
    /// assert_eq!(g.gpu_arch(), Some(GpuArch::Hopper));
    /// ```
    pub fn gpu_arch(&self) -> Option<GpuArch> {
        if self.kind != NodeKind::Gpu {
            return None;
        }
        self.arch
            .or_else(|| hardware::gpu_from_label(&self.label).map(|g| g.0))
    }
    /// Memory bandwidth in GB/s: [`Node::memory_bandwidth`] if set, else
    /// inferred from the label ([`hardware::gpu_from_label`],
    /// [`hardware::cpu_memory_from_label`]); a CPU not in the table gets
    /// [`hardware::DEFAULT_CPU_MEMORY_GBPS`]. `None` for other kinds and
    /// unknown GPUs.
    ///
    /// ```
    /// use gpucomm_topo::{Node, NodeKind};
    /// let c = Node::new("cpu0", NodeKind::Cpu).with_label("Z80");
    /// assert_eq!(c.memory_gbps(), Some(204.8));
    /// ```
    pub fn memory_gbps(&self) -> Option<f64> {
        match self.kind {
            NodeKind::Gpu => self
                .memory_bandwidth
                .or_else(|| hardware::gpu_from_label(&self.label).map(|g| g.1)),
            NodeKind::Cpu => Some(
                self.memory_bandwidth
                    .or_else(|| hardware::cpu_memory_from_label(&self.label))
                    .unwrap_or(hardware::DEFAULT_CPU_MEMORY_GBPS),
            ),
            _ => None,
        }
    }
    /// Sets the label.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }
    /// Sets the NUMA node (and the socket, if not set, to the same number).
    pub fn with_numa(mut self, numa: u32) -> Self {
        self.numa = Some(numa);
        self
    }
    /// Sets the socket.
    pub fn with_socket(mut self, socket: u32) -> Self {
        self.socket = Some(socket);
        self
    }
    /// Sets the host.
    pub fn in_host(mut self, host: NodeIx) -> Self {
        self.host = Some(host);
        self
    }
    /// Sets a property.
    pub fn with_prop(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.props.insert(key.into(), value.into());
        self
    }
}

/// Direction in which a route crosses a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// From [`Link::a`] to [`Link::b`].
    AtoB,
    /// From [`Link::b`] to [`Link::a`].
    BtoA,
}

impl Dir {
    /// 0 for `AtoB`, 1 for `BtoA`: index of the direction's capacity
    /// (`link.index() * 2 + dir.index()` numbers every direction).
    pub fn index(self) -> usize {
        match self {
            Dir::AtoB => 0,
            Dir::BtoA => 1,
        }
    }
    /// The other direction.
    pub fn reverse(self) -> Dir {
        match self {
            Dir::AtoB => Dir::BtoA,
            Dir::BtoA => Dir::AtoB,
        }
    }
}

/// A full-duplex link: `bandwidth` GB/s in each direction independently.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    /// One end.
    pub a: NodeIx,
    /// The other end.
    pub b: NodeIx,
    /// Kind and generation.
    pub kind: LinkKind,
    /// Bandwidth per direction in GB/s (the catalog's unless overridden).
    pub bandwidth: f64,
    /// Latency of one traversal in microseconds (the catalog's unless
    /// overridden).
    pub latency_us: f64,
    /// True when `bandwidth` was set explicitly rather than from the catalog.
    pub bandwidth_overridden: bool,
    /// True when `latency_us` was set explicitly.
    pub latency_overridden: bool,
}

impl Link {
    /// A link with the catalog's figures.
    pub fn new(a: NodeIx, b: NodeIx, kind: LinkKind) -> Self {
        Link {
            a,
            b,
            kind,
            bandwidth: kind.bandwidth(),
            latency_us: kind.latency_us(),
            bandwidth_overridden: false,
            latency_overridden: false,
        }
    }
    /// Overrides the per-direction bandwidth (GB/s).
    pub fn with_bandwidth(mut self, gbps: f64) -> Self {
        self.bandwidth = gbps;
        self.bandwidth_overridden = true;
        self
    }
    /// Overrides the latency (µs).
    pub fn with_latency(mut self, us: f64) -> Self {
        self.latency_us = us;
        self.latency_overridden = true;
        self
    }
    /// The end a route reaches when crossing in `dir`.
    pub fn head(&self, dir: Dir) -> NodeIx {
        match dir {
            Dir::AtoB => self.b,
            Dir::BtoA => self.a,
        }
    }
    /// The end a route leaves from when crossing in `dir`.
    pub fn tail(&self, dir: Dir) -> NodeIx {
        match dir {
            Dir::AtoB => self.a,
            Dir::BtoA => self.b,
        }
    }
}

/// Builds a [`Topology`]: add nodes and links, then [`build`](Self::build)
/// validates and indexes them.
///
/// ```
/// use gpucomm_topo::{TopologyBuilder, Node, NodeKind, LinkKind, NvLinkGen};
/// let mut b = TopologyBuilder::new("pair");
/// let h = b.node(Node::new("host0", NodeKind::Host));
/// let g0 = b.node(Node::new("gpu0", NodeKind::Gpu).in_host(h));
/// let g1 = b.node(Node::new("gpu1", NodeKind::Gpu).in_host(h));
/// b.link(g0, g1, LinkKind::NvLink { generation: NvLinkGen::V2, count: 2 });
/// let t = b.build().unwrap();
/// assert_eq!(t.path(t.gpus()[0], t.gpus()[1]).unwrap().bandwidth, 50.0);
/// ```
#[derive(Clone, Debug, Default)]
pub struct TopologyBuilder {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) nodes: Vec<Node>,
    pub(crate) links: Vec<Link>,
}

impl TopologyBuilder {
    /// An empty builder.
    pub fn new(name: impl Into<String>) -> Self {
        TopologyBuilder {
            name: name.into(),
            ..Default::default()
        }
    }
    /// Sets the description.
    pub fn description(&mut self, d: impl Into<String>) -> &mut Self {
        self.description = d.into();
        self
    }
    /// Adds a node and returns its index (ids are checked in `build`).
    pub fn node(&mut self, node: Node) -> NodeIx {
        self.nodes.push(node);
        NodeIx((self.nodes.len() - 1) as u32)
    }
    /// Adds a link with the catalog's figures.
    pub fn link(&mut self, a: NodeIx, b: NodeIx, kind: LinkKind) -> LinkIx {
        self.push_link(Link::new(a, b, kind))
    }
    /// Adds a fully specified link.
    pub fn push_link(&mut self, link: Link) -> LinkIx {
        self.links.push(link);
        LinkIx((self.links.len() - 1) as u32)
    }
    /// The nodes added so far.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    /// Mutable access to a node added earlier.
    pub fn node_mut(&mut self, ix: NodeIx) -> &mut Node {
        &mut self.nodes[ix.index()]
    }
    /// Validates and indexes: ids unique and non-empty, link ends exist and
    /// differ, bandwidths and latencies finite and positive (latency may be
    /// zero), hosts name host nodes.
    pub fn build(self) -> Result<Topology, TopoError> {
        Topology::from_parts(self.name, self.description, self.nodes, self.links)
    }
}

/// A validated topology: nodes, links, adjacency, GPUs in rank order, the
/// NIC (rail) of each GPU, and a route cache.
///
/// `Topology` is `Send + Sync`; routing takes `&self` and may be called
/// from many threads.
#[derive(Debug)]
pub struct Topology {
    name: String,
    description: String,
    nodes: Vec<Node>,
    links: Vec<Link>,
    adj: Vec<Vec<(LinkIx, Dir)>>,
    by_id: HashMap<String, NodeIx>,
    gpus: Vec<NodeIx>,
    hosts: Vec<NodeIx>,
    gpu_nic: OnceLock<Vec<Option<NodeIx>>>,
    pub(crate) router: Router,
}

impl Clone for Topology {
    fn clone(&self) -> Self {
        Topology::from_parts(
            self.name.clone(),
            self.description.clone(),
            self.nodes.clone(),
            self.links.clone(),
        )
        .expect("a valid topology stays valid")
    }
}

impl Topology {
    pub(crate) fn from_parts(
        name: String,
        description: String,
        nodes: Vec<Node>,
        links: Vec<Link>,
    ) -> Result<Topology, TopoError> {
        let mut by_id = HashMap::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            if n.id.is_empty() {
                return Err(TopoError::invalid(format!("node[{i}].id"), "empty id"));
            }
            if by_id.insert(n.id.clone(), NodeIx(i as u32)).is_some() {
                return Err(TopoError::invalid(
                    format!("node[{i}].id"),
                    format!("duplicate id {:?}", n.id),
                ));
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            if let Some(h) = n.host {
                match nodes.get(h.index()) {
                    Some(hn) if hn.kind == NodeKind::Host => {}
                    _ => {
                        return Err(TopoError::invalid(
                            format!("node[{i}].host"),
                            format!("{:?} is not a host node", n.id),
                        ));
                    }
                }
            }
        }
        let mut adj = vec![Vec::new(); nodes.len()];
        for (i, l) in links.iter().enumerate() {
            for (end, ix) in [("a", l.a), ("b", l.b)] {
                if ix.index() >= nodes.len() {
                    return Err(TopoError::invalid(
                        format!("link[{i}].{end}"),
                        "no such node",
                    ));
                }
            }
            if l.a == l.b {
                return Err(TopoError::invalid(
                    format!("link[{i}]"),
                    format!("links node {:?} to itself", nodes[l.a.index()].id),
                ));
            }
            if !(l.bandwidth.is_finite() && l.bandwidth > 0.0) {
                return Err(TopoError::invalid(
                    format!("link[{i}].bandwidth"),
                    format!("must be a positive number of GB/s, got {}", l.bandwidth),
                ));
            }
            if !(l.latency_us.is_finite() && l.latency_us >= 0.0) {
                return Err(TopoError::invalid(
                    format!("link[{i}].latency_us"),
                    format!("must be zero or positive, got {}", l.latency_us),
                ));
            }
            for (ix, role) in [(l.a, "a"), (l.b, "b")] {
                if nodes[ix.index()].kind == NodeKind::Host {
                    return Err(TopoError::invalid(
                        format!("link[{i}].{role}"),
                        format!("{:?} is a host; link its CPU instead", nodes[ix.index()].id),
                    ));
                }
            }
            adj[l.a.index()].push((LinkIx(i as u32), Dir::AtoB));
            adj[l.b.index()].push((LinkIx(i as u32), Dir::BtoA));
        }
        let gpus: Vec<NodeIx> = (0..nodes.len())
            .filter(|&i| nodes[i].kind == NodeKind::Gpu)
            .map(|i| NodeIx(i as u32))
            .collect();
        let hosts: Vec<NodeIx> = (0..nodes.len())
            .filter(|&i| nodes[i].kind == NodeKind::Host)
            .map(|i| NodeIx(i as u32))
            .collect();
        let mut t = Topology {
            router: Router::new(nodes.len(), &links),
            name,
            description,
            nodes,
            links,
            adj,
            by_id,
            gpus,
            hosts,
            gpu_nic: OnceLock::new(),
        };
        // Reachability is not required (discovery can see islands), but a
        // topology without GPUs or links is still a topology.
        t.links.shrink_to_fit();
        Ok(t)
    }

    /// The topology's name (preset name, file name or host name).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// A one-line description.
    pub fn description(&self) -> &str {
        &self.description
    }
    /// All nodes; `NodeIx(i)` is `nodes()[i]`.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    /// All links; `LinkIx(i)` is `links()[i]`.
    pub fn links(&self) -> &[Link] {
        &self.links
    }
    /// One node.
    pub fn node(&self, ix: NodeIx) -> &Node {
        &self.nodes[ix.index()]
    }
    /// One link.
    pub fn link(&self, ix: LinkIx) -> &Link {
        &self.links[ix.index()]
    }
    /// The links at a node, with the direction that leaves the node.
    pub fn links_of(&self, ix: NodeIx) -> &[(LinkIx, Dir)] {
        &self.adj[ix.index()]
    }
    /// The node with this id.
    pub fn find(&self, id: &str) -> Option<NodeIx> {
        self.by_id.get(id).copied()
    }
    /// GPUs in rank order: hosts in order, GPUs of a host by local index.
    /// Rank `r` of a simulated job runs on `gpus()[r]`.
    pub fn gpus(&self) -> &[NodeIx] {
        &self.gpus
    }
    /// Host nodes in order.
    pub fn hosts(&self) -> &[NodeIx] {
        &self.hosts
    }
    /// The host of GPU rank `rank` as a host number (index into
    /// [`hosts`](Self::hosts)), or `None` when the GPU has no host.
    pub fn host_of_rank(&self, rank: usize) -> Option<usize> {
        let h = self.nodes[self.gpus[rank].index()].host?;
        self.hosts.iter().position(|&x| x == h)
    }
    /// The NIC GPU rank `rank` uses for traffic leaving its host (its rail),
    /// if its host has NICs: the closest NIC, ties spread evenly.
    pub fn nic_of_rank(&self, rank: usize) -> Option<NodeIx> {
        self.gpu_nic
            .get_or_init(|| crate::route::assign_rails(self))
            .get(rank)
            .copied()
            .flatten()
    }
    /// The NIC of a GPU node (see [`nic_of_rank`](Self::nic_of_rank)).
    pub fn nic_of_gpu(&self, gpu: NodeIx) -> Option<NodeIx> {
        let r = self.gpus.iter().position(|&g| g == gpu)?;
        self.nic_of_rank(r)
    }
    /// Nodes of a kind, in order.
    pub fn nodes_of_kind(&self, kind: NodeKind) -> impl Iterator<Item = NodeIx> + '_ {
        (0..self.nodes.len())
            .filter(move |&i| self.nodes[i].kind == kind)
            .map(|i| NodeIx(i as u32))
    }
    /// Nodes of a kind in one host, in order.
    pub fn nodes_in_host(&self, host: NodeIx, kind: NodeKind) -> Vec<NodeIx> {
        self.nodes_of_kind(kind)
            .filter(|&i| self.nodes[i.index()].host == Some(host))
            .collect()
    }
    /// The CPU node closest to a node in its host (its NUMA node), for host
    /// memory copies.
    pub fn local_cpu(&self, ix: NodeIx) -> Option<NodeIx> {
        let n = &self.nodes[ix.index()];
        if n.kind == NodeKind::Cpu {
            return Some(ix);
        }
        let host = n.host?;
        let cpus = self.nodes_in_host(host, NodeKind::Cpu);
        if let Some(numa) = n.numa
            && let Some(&c) = cpus
                .iter()
                .find(|&&c| self.nodes[c.index()].numa == Some(numa))
        {
            return Some(c);
        }
        cpus.into_iter().min_by(|&x, &y| {
            let cx = self.path(ix, x).map_or(f64::INFINITY, |p| p.cost);
            let cy = self.path(ix, y).map_or(f64::INFINITY, |p| p.cost);
            cx.total_cmp(&cy).then(x.cmp(&y))
        })
    }
    /// The direct links between two nodes.
    pub fn links_between(&self, a: NodeIx, b: NodeIx) -> Vec<LinkIx> {
        self.adj[a.index()]
            .iter()
            .filter(|(l, d)| self.links[l.index()].head(*d) == b)
            .map(|(l, _)| *l)
            .collect()
    }
    /// Whether any network switch offers in-network reduction (SHARP), and
    /// whether an NVSwitch does (NVLS): `(nvswitch, network)`.
    pub fn reduction_support(&self) -> (bool, bool) {
        let nv = self
            .nodes
            .iter()
            .any(|n| n.kind == NodeKind::NvSwitch && n.reduction);
        let net = self
            .nodes
            .iter()
            .any(|n| n.kind == NodeKind::NetSwitch && n.reduction);
        (nv, net)
    }
    /// The NVSwitch node a GPU is attached to and the link to it (the
    /// widest, when several), if any: where NVLS in-switch reduction happens
    /// when [`Node::reduction`] is set on the switch.
    pub fn nvswitch_of(&self, gpu: NodeIx) -> Option<(NodeIx, LinkIx)> {
        self.adj[gpu.index()]
            .iter()
            .filter(|(l, d)| {
                self.nodes[self.links[l.index()].head(*d).index()].kind == NodeKind::NvSwitch
            })
            .max_by(|x, y| {
                self.links[x.0.index()]
                    .bandwidth
                    .total_cmp(&self.links[y.0.index()].bandwidth)
                    .then(y.0.cmp(&x.0))
            })
            .map(|&(l, d)| (self.links[l.index()].head(d), l))
    }
    /// Number of link directions (channels): `2 * links().len()`; a
    /// [`Hop::channel`](crate::Hop::channel) is below it.
    pub fn channel_count(&self) -> usize {
        2 * self.links.len()
    }
    /// Capacity of a channel (one direction of a link) in GB/s.
    pub fn channel_bandwidth(&self, channel: usize) -> f64 {
        self.links[channel / 2].bandwidth
    }
    /// Turns the topology back into a builder (to derive another from it).
    pub fn into_builder(self) -> TopologyBuilder {
        TopologyBuilder {
            name: self.name,
            description: self.description,
            nodes: self.nodes,
            links: self.links,
        }
    }
    /// A copy as a builder.
    pub fn to_builder(&self) -> TopologyBuilder {
        TopologyBuilder {
            name: self.name.clone(),
            description: self.description.clone(),
            nodes: self.nodes.clone(),
            links: self.links.clone(),
        }
    }
}
