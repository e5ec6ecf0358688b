//! Routes and paths: which links a transfer crosses, in which direction,
//! and what that means (bottleneck bandwidth, latency, `nvidia-smi topo -m`
//! class, GPUDirect P2P / RDMA).
//!
//! # How routes are chosen
//!
//! A route is the cheapest path where each link costs `1 / bandwidth`
//! (seconds per byte) plus a tiny per-hop term, so a wide link wins over a
//! narrow one and, at equal width, fewer hops win. Ties are broken by link
//! index, so routes are deterministic. GPUs, storage and other endpoints
//! never forward (CUDA P2P does not route through a GPU); CPUs, PCIe
//! switches, NVSwitches and network switches do, and NICs only between
//! their host side and the network (never from one PCIe link to another,
//! nor from one network port to another).
//!
//! The graph is cut in two layers. *Islands* are what stays connected
//! without the network links: a host, or a rack joined by NVLink switches.
//! The *fabric* is the network links with their NICs and switches. Inside
//! an island the route is the island's cheapest path. Between islands it is
//! source → exit NIC → fabric → entry NIC → destination, where a GPU's exit
//! NIC is its own rail NIC ([`Topology::nic_of_gpu`]) and any other node's
//! the closest NIC of its island: GPU → its NIC → leaf (→ spine → leaf) →
//! peer's NIC → peer GPU, as rail-optimized clusters and NCCL do.
//!
//! # Cost
//!
//! Shortest-path trees are built on first use and cached in `OnceLock`s:
//! one per source node over its island, one per fabric switch (a NIC's
//! route starts with its single port and continues on its switch's tree).
//! A route is then a few tree walks, `O(hops)`, lock-free. Measured with
//! `cargo run --release -p gpucomm-topo --example route_speed` on the
//! shared 2-core build machine: 128 x dgx-h100 (3,593 nodes, 1,024 GPUs)
//! builds in 2–3 ms, assigns rails in 9–25 ms, and routes all 1,048,576
//! GPU pairs in 0.19–0.21 s (180–200 ns per route).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::OnceLock;

use crate::catalog::LinkKind;
use crate::error::TopoError;
use crate::model::{Dir, LinkIx, NodeIx, NodeKind, Topology};

/// One hop of a route: a link crossed in one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hop {
    /// The link.
    pub link: LinkIx,
    /// The direction it is crossed in.
    pub dir: Dir,
}

impl Hop {
    /// A number unique to this (link, direction): `link * 2 + dir`, for
    /// indexing per-direction capacities in a flat array of
    /// `2 * links().len()`.
    pub fn channel(self) -> usize {
        self.link.index() * 2 + self.dir.index()
    }
}

/// The relation of two endpoints, as `nvidia-smi topo -m` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathClass {
    /// The same device (`X`).
    Same,
    /// Only NVLink, directly or through NVSwitches; the number is the links
    /// bonded at the ends (`NV12`, `NV18`).
    NvLink(u8),
    /// At most one PCIe switch.
    Pix,
    /// Several PCIe switches, no host bridge.
    Pxb,
    /// Through a PCIe host bridge (the CPU).
    Phb,
    /// Through the interconnect between host bridges within a NUMA node.
    Node,
    /// Through the SMP interconnect between NUMA nodes (QPI/UPI/Infinity
    /// Fabric).
    Sys,
    /// Through the network (another host).
    Net,
}

impl fmt::Display for PathClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Same => f.write_str("X"),
            Self::NvLink(n) => write!(f, "NV{n}"),
            Self::Pix => f.write_str("PIX"),
            Self::Pxb => f.write_str("PXB"),
            Self::Phb => f.write_str("PHB"),
            Self::Node => f.write_str("NODE"),
            Self::Sys => f.write_str("SYS"),
            Self::Net => f.write_str("NET"),
        }
    }
}

impl PathClass {
    /// The legend `nvidia-smi topo -m` prints, one line per class.
    pub const LEGEND: &'static str = "  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NET  = Connection traversing the network (another host, through NICs)
  NV#  = Connection traversing a bonded set of # NVLinks (directly or through NVSwitch)";
}

/// Everything about the path between two endpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct PathInfo {
    /// The hops, in order from source to destination.
    pub hops: Vec<Hop>,
    /// Bottleneck bandwidth per direction (GB/s): the narrowest hop;
    /// infinite for the empty route from a node to itself.
    pub bandwidth: f64,
    /// Sum of the hops' latencies (µs).
    pub latency_us: f64,
    /// The `nvidia-smi topo -m` class.
    pub class: PathClass,
    /// GPUDirect P2P applies: two GPUs joined only by NVLink (in one host,
    /// or across the trays of one NVLink domain such as a GB200 NVL72), or
    /// two GPUs of one host joined by PCIe within one CPU socket (PIX,
    /// PXB, PHB, NODE: between the host bridges of one socket too; not
    /// SYS, where CUDA P2P is not supported across the SMP link).
    pub p2p: bool,
    /// GPUDirect RDMA applies: a GPU and a NIC under a common PCIe switch
    /// (PIX/PXB) or joined through a Grace CPU by NVLink-C2C; for a NET path
    /// between GPUs, at both ends.
    pub rdma: bool,
    /// The routing cost (seconds per GB summed over hops, plus hop terms).
    pub cost: f64,
}

const NONE: u32 = u32::MAX;
const HOP_COST: f64 = 1e-6;

/// The route cache.
///
/// The graph is cut in two layers. *Islands* are the connected pieces left
/// when network links (InfiniBand, Ethernet) are removed: a host, or a rack
/// joined by NVLink switches. The *fabric* is the network links with their
/// NICs and switches. A route inside an island uses the island's
/// shortest-path tree from the source; a route between islands is
/// source → exit NIC (island tree) → entry NIC (fabric tree) → destination
/// (island tree). Trees are built on first use, one per source node (island)
/// or per fabric node, and cached in `OnceLock`s, so routing is `&self`,
/// lock-free once warm, and each tree only spans its own layer.
#[derive(Debug)]
pub(crate) struct Router {
    /// Island of each node.
    island: Vec<u32>,
    /// Index of each node within its island.
    local: Vec<u32>,
    /// Nodes of each island, in node order.
    members: Vec<Vec<NodeIx>>,
    /// Island tree of each source node (indexed by node).
    island_trees: Vec<OnceLock<Box<[u32]>>>,
    /// Index of each node in the fabric (NONE when it has no network link).
    fabric_ix: Vec<u32>,
    /// Fabric nodes in node order.
    fabric_nodes: Vec<NodeIx>,
    /// Fabric tree of each fabric node (indexed by fabric index).
    fabric_trees: Vec<OnceLock<Box<[u32]>>>,
    /// Exit NIC of each node (rail NIC for GPUs, nearest NIC otherwise).
    exit_nic: Vec<OnceLock<Option<NodeIx>>>,
}

impl Router {
    pub(crate) fn new(nodes: usize, links: &[crate::model::Link]) -> Self {
        // Union-find over non-network links.
        let mut parent: Vec<u32> = (0..nodes as u32).collect();
        fn find(p: &mut [u32], mut x: u32) -> u32 {
            while p[x as usize] != x {
                p[x as usize] = p[p[x as usize] as usize];
                x = p[x as usize];
            }
            x
        }
        let mut fabric = vec![false; nodes];
        for l in links {
            if l.kind.is_network() {
                fabric[l.a.index()] = true;
                fabric[l.b.index()] = true;
                continue;
            }
            let (a, b) = (find(&mut parent, l.a.0), find(&mut parent, l.b.0));
            if a != b {
                parent[a.max(b) as usize] = a.min(b);
            }
        }
        let mut island = vec![0u32; nodes];
        let mut local = vec![0u32; nodes];
        let mut members: Vec<Vec<NodeIx>> = Vec::new();
        let mut id_of_root: std::collections::HashMap<u32, u32> = Default::default();
        for i in 0..nodes {
            let r = find(&mut parent, i as u32);
            let next = members.len() as u32;
            let id = *id_of_root.entry(r).or_insert(next);
            if id == next {
                members.push(Vec::new());
            }
            island[i] = id;
            local[i] = members[id as usize].len() as u32;
            members[id as usize].push(NodeIx(i as u32));
        }
        let mut fabric_ix = vec![NONE; nodes];
        let mut fabric_nodes = Vec::new();
        for (i, &f) in fabric.iter().enumerate() {
            if f {
                fabric_ix[i] = fabric_nodes.len() as u32;
                fabric_nodes.push(NodeIx(i as u32));
            }
        }
        Router {
            island,
            local,
            members,
            island_trees: (0..nodes).map(|_| OnceLock::new()).collect(),
            fabric_trees: (0..fabric_nodes.len()).map(|_| OnceLock::new()).collect(),
            fabric_ix,
            fabric_nodes,
            exit_nic: (0..nodes).map(|_| OnceLock::new()).collect(),
        }
    }
}

/// A distance: the routing cost, then the hop count. The hops break ties
/// the cost cannot: past about 1e10 s/GB (a link of 1e-20 GB/s) the hop
/// term vanishes in the sum, two neighbours came out at one cost, and the
/// tie rule below pointed each at the other: a route that never ended,
/// growing until memory ran out. Hops grow along every link, so a
/// predecessor is always strictly closer.
#[derive(Clone, Copy, PartialEq)]
struct Dist(f64, u32);

impl Dist {
    const FAR: Dist = Dist(f64::INFINITY, u32::MAX);

    fn cmp(self, other: Dist) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

struct Entry(Dist, u32);
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // Min-heap on (distance, node).
        other.0.cmp(self.0).then(other.1.cmp(&self.1))
    }
}

fn link_cost(bandwidth: f64) -> f64 {
    1.0 / bandwidth + HOP_COST
}

/// Which layer a tree spans.
#[derive(Clone, Copy, PartialEq)]
enum Layer {
    Island,
    Fabric,
}

impl Topology {
    /// Dijkstra from `src` within one layer; `slot(node)` maps a node to
    /// its index in the layer (NONE outside it). Returns, per layer index,
    /// the channel (`link * 2 + dir`) of the hop that reaches it, or NONE.
    fn layer_tree(&self, src: NodeIx, layer: Layer) -> Box<[u32]> {
        let r = &self.router;
        let (size, slot): (usize, &dyn Fn(NodeIx) -> u32) = match layer {
            Layer::Island => {
                let isl = r.island[src.index()];
                (r.members[isl as usize].len(), &move |n: NodeIx| {
                    if r.island[n.index()] == isl {
                        r.local[n.index()]
                    } else {
                        NONE
                    }
                })
            }
            Layer::Fabric => (r.fabric_nodes.len(), &|n: NodeIx| r.fabric_ix[n.index()]),
        };
        let mut dist = vec![Dist::FAR; size];
        let mut pred = vec![NONE; size];
        let mut heap = BinaryHeap::new();
        dist[slot(src) as usize] = Dist(0.0, 0);
        heap.push(Entry(Dist(0.0, 0), src.0));
        while let Some(Entry(d, u)) = heap.pop() {
            let ux = NodeIx(u);
            if d.cmp(dist[slot(ux) as usize]) == Ordering::Greater {
                continue;
            }
            let kind = self.node(ux).kind;
            // A NIC forwards only between its host side and the network
            // (where `route_into` joins an island route to a fabric route):
            // inside an island it does not pass traffic from one PCIe link
            // to another (a NIC on both sockets is no bridge between them),
            // and in the fabric not from one port to another.
            let transit = kind.is_transit() && kind != NodeKind::Nic;
            if ux != src && !transit {
                continue;
            }
            for &(l, dir) in self.links_of(ux) {
                let link = self.link(l);
                if link.kind.is_network() != (layer == Layer::Fabric) {
                    continue;
                }
                let v = link.head(dir);
                let vs = slot(v);
                if vs == NONE {
                    continue;
                }
                let vs = vs as usize;
                let nd = Dist(d.0 + link_cost(link.bandwidth), d.1 + 1);
                let ch = (l.index() * 2 + dir.index()) as u32;
                match nd.cmp(dist[vs]) {
                    Ordering::Less => {
                        dist[vs] = nd;
                        pred[vs] = ch;
                        heap.push(Entry(nd, v.0));
                    }
                    Ordering::Equal if ch < pred[vs] => pred[vs] = ch,
                    _ => {}
                }
            }
        }
        pred.into_boxed_slice()
    }

    /// Appends the route `src → dst` within one layer to `out`; false when
    /// unreachable there.
    fn layer_route(&self, src: NodeIx, dst: NodeIx, layer: Layer, out: &mut Vec<Hop>) -> bool {
        if src == dst {
            return true;
        }
        let r = &self.router;
        let (tree, slot): (&[u32], Box<dyn Fn(NodeIx) -> u32 + '_>) = match layer {
            Layer::Island => {
                if r.island[src.index()] != r.island[dst.index()] {
                    return false;
                }
                (
                    r.island_trees[src.index()].get_or_init(|| self.layer_tree(src, layer)),
                    Box::new(|n: NodeIx| r.local[n.index()]),
                )
            }
            Layer::Fabric => {
                let (s, d) = (r.fabric_ix[src.index()], r.fabric_ix[dst.index()]);
                if s == NONE || d == NONE {
                    return false;
                }
                (
                    r.fabric_trees[s as usize].get_or_init(|| self.layer_tree(src, layer)),
                    Box::new(|n: NodeIx| r.fabric_ix[n.index()]),
                )
            }
        };
        let start = out.len();
        let mut at = dst;
        while at != src {
            let ch = tree[slot(at) as usize];
            if ch == NONE {
                out.truncate(start);
                return false;
            }
            let link = LinkIx(ch / 2);
            let dir = if ch % 2 == 0 { Dir::AtoB } else { Dir::BtoA };
            out.push(Hop { link, dir });
            at = self.link(link).tail(dir);
        }
        out[start..].reverse();
        true
    }

    /// The fabric route between two fabric nodes. A node with a single
    /// network link (most NICs) starts with that link and continues on the
    /// tree of the node at its other end, so fabric trees are built per
    /// switch rather than per NIC.
    fn fabric_route(&self, a: NodeIx, b: NodeIx, out: &mut Vec<Hop>) -> bool {
        if a == b {
            return true;
        }
        let mut net = self
            .links_of(a)
            .iter()
            .filter(|(l, _)| self.link(*l).kind.is_network());
        if let (Some(&(l, dir)), None) = (net.next(), net.next()) {
            let next = self.link(l).head(dir);
            let start = out.len();
            out.push(Hop { link: l, dir });
            if next == b {
                return true;
            }
            let kind = self.node(next).kind;
            if kind.is_transit()
                && kind != NodeKind::Nic
                && self.layer_route(next, b, Layer::Fabric, out)
            {
                return true;
            }
            out.truncate(start);
        }
        self.layer_route(a, b, Layer::Fabric, out)
    }

    /// The NIC through which traffic from `n` leaves its island: itself
    /// for a NIC, the rail NIC for a GPU, else the closest NIC of its
    /// island that has a network link.
    fn exit_nic(&self, n: NodeIx) -> Option<NodeIx> {
        *self.router.exit_nic[n.index()].get_or_init(|| {
            if self.router.fabric_ix[n.index()] != NONE {
                return Some(n);
            }
            if self.node(n).kind == NodeKind::Gpu
                && let Some(nic) = self.nic_of_gpu(n)
                && self.router.fabric_ix[nic.index()] != NONE
            {
                return Some(nic);
            }
            let isl = self.router.island[n.index()] as usize;
            let mut hops = Vec::new();
            let mut best: Option<(f64, NodeIx)> = None;
            for &m in &self.router.members[isl] {
                if self.router.fabric_ix[m.index()] == NONE || self.node(m).kind != NodeKind::Nic {
                    continue;
                }
                hops.clear();
                if !self.layer_route(n, m, Layer::Island, &mut hops) {
                    continue;
                }
                let c: f64 = hops
                    .iter()
                    .map(|h| link_cost(self.link(h.link).bandwidth))
                    .sum();
                if best.is_none_or(|(bc, _)| c < bc) {
                    best = Some((c, m));
                }
            }
            best.map(|b| b.1)
        })
    }

    /// Writes the route `src → dst` into `out` (cleared first), so callers
    /// routing many flows can reuse one buffer. Deterministic; see the
    /// module docs for the rules.
    pub fn route_into(
        &self,
        src: NodeIx,
        dst: NodeIx,
        out: &mut Vec<Hop>,
    ) -> Result<(), TopoError> {
        out.clear();
        let no_route = || TopoError::NoRoute {
            from: self.node(src).id.clone(),
            to: self.node(dst).id.clone(),
        };
        let r = &self.router;
        if src.index() >= r.island.len() || dst.index() >= r.island.len() {
            return Err(TopoError::Options(format!(
                "node index out of range ({} nodes)",
                r.island.len()
            )));
        }
        if r.island[src.index()] == r.island[dst.index()]
            && self.layer_route(src, dst, Layer::Island, out)
        {
            return Ok(());
        }
        // Another island, or no path inside this one (two Grace CPUs of a
        // GB200 tray): through the network.
        let (Some(a), Some(b)) = (self.exit_nic(src), self.exit_nic(dst)) else {
            return Err(no_route());
        };
        let ok = self.layer_route(src, a, Layer::Island, out)
            && self.fabric_route(a, b, out)
            && self.layer_route(b, dst, Layer::Island, out);
        if ok {
            Ok(())
        } else {
            out.clear();
            Err(no_route())
        }
    }

    /// The route `src → dst` as a list of hops.
    ///
    /// ```
    /// let t = gpucomm_topo::preset("dgx1-v100").unwrap();
    /// let g = t.gpus();
    /// let r = t.route(g[0], g[3]).unwrap();
    /// assert_eq!(r.len(), 1); // one bundle of two NVLinks
    /// ```
    pub fn route(&self, src: NodeIx, dst: NodeIx) -> Result<Vec<Hop>, TopoError> {
        let mut v = Vec::new();
        self.route_into(src, dst, &mut v)?;
        Ok(v)
    }

    /// The full description of the path `src → dst`.
    pub fn path(&self, src: NodeIx, dst: NodeIx) -> Result<PathInfo, TopoError> {
        let hops = self.route(src, dst)?;
        Ok(self.describe(src, dst, hops))
    }

    /// Describes a route (bottleneck, latency, class, P2P, RDMA).
    pub fn describe(&self, src: NodeIx, dst: NodeIx, hops: Vec<Hop>) -> PathInfo {
        let mut bandwidth = f64::INFINITY;
        let mut latency_us = 0.0;
        let mut cost = 0.0;
        for h in &hops {
            let l = self.link(h.link);
            bandwidth = bandwidth.min(l.bandwidth);
            latency_us += l.latency_us;
            cost += link_cost(l.bandwidth);
        }
        let class = self.classify(src, dst, &hops);
        let (sk, dk) = (self.node(src).kind, self.node(dst).kind);
        let same_host = self.node(src).host.is_some() && self.node(src).host == self.node(dst).host;
        // NVLink P2P also works across hosts of one NVLink domain (GB200
        // NVL72 trays); PCIe P2P only within a host, and not across its
        // sockets (the simulator's P2P copies follow the same rule).
        let p2p = sk == NodeKind::Gpu
            && dk == NodeKind::Gpu
            && src != dst
            && (matches!(class, PathClass::NvLink(_))
                || (same_host
                    && matches!(
                        class,
                        PathClass::Pix | PathClass::Pxb | PathClass::Phb | PathClass::Node
                    )));
        let rdma = match (sk, dk) {
            (NodeKind::Gpu, NodeKind::Nic) => self.gdr_ok(src, &hops),
            (NodeKind::Nic, NodeKind::Gpu) => self.gdr_ok(dst, &hops),
            (NodeKind::Gpu, NodeKind::Gpu) if class == PathClass::Net => {
                self.nic_gdr(src) && self.nic_gdr(dst)
            }
            _ => false,
        };
        PathInfo {
            hops,
            bandwidth,
            latency_us,
            class,
            p2p,
            rdma,
            cost,
        }
    }

    fn nic_gdr(&self, gpu: NodeIx) -> bool {
        match self.nic_of_gpu(gpu) {
            Some(nic) => {
                let mut hops = Vec::new();
                self.layer_route(gpu, nic, Layer::Island, &mut hops) && self.gdr_ok(gpu, &hops)
            }
            None => false,
        }
    }

    /// GPU–NIC hops qualify for GPUDirect RDMA.
    fn gdr_ok(&self, gpu: NodeIx, hops: &[Hop]) -> bool {
        if hops.is_empty() || hops.iter().any(|h| self.link(h.link).kind.is_network()) {
            return false;
        }
        let c2c = hops
            .iter()
            .any(|h| self.link(h.link).kind == LinkKind::NvLinkC2c);
        let class = self.classify(gpu, NodeIx(u32::MAX), hops);
        matches!(class, PathClass::Pix | PathClass::Pxb) || (c2c && class == PathClass::Phb)
    }

    /// Classifies a route like `nvidia-smi topo -m`.
    pub fn classify(&self, src: NodeIx, dst: NodeIx, hops: &[Hop]) -> PathClass {
        if src == dst || hops.is_empty() {
            return PathClass::Same;
        }
        let kinds = || hops.iter().map(|h| self.link(h.link).kind);
        if kinds().any(LinkKind::is_network) {
            return PathClass::Net;
        }
        if kinds().all(LinkKind::is_nvlink) {
            let count = |k: LinkKind| match k {
                LinkKind::NvLink { count, .. } => count,
                _ => 0,
            };
            let first = count(self.link(hops[0].link).kind);
            let last = count(self.link(hops[hops.len() - 1].link).kind);
            return PathClass::NvLink(first.min(last));
        }
        if kinds().any(LinkKind::is_smp) {
            return PathClass::Sys;
        }
        let mut class = PathClass::Pix;
        let mut switches = 0;
        for w in hops.windows(2) {
            let mid = self.link(w[0].link).head(w[0].dir);
            match self.node(mid).kind {
                NodeKind::PcieSwitch => switches += 1,
                NodeKind::Cpu => {
                    let before = self.node(self.link(w[0].link).tail(w[0].dir));
                    let after = self.node(self.link(w[1].link).head(w[1].dir));
                    let c = match (&before.root_complex, &after.root_complex) {
                        (Some(x), Some(y)) if x != y => PathClass::Node,
                        _ => PathClass::Phb,
                    };
                    class = class.max(c);
                }
                _ => {}
            }
        }
        if class == PathClass::Pix && switches > 1 {
            class = PathClass::Pxb;
        }
        class
    }
}

/// Assigns each GPU (rank order) the NIC of its host it sends through: the
/// cheapest to reach; among equally close NICs, the least used so far, then
/// the first. GPUs 0 and 1 under a switch with NICs 0 and 1 get one each.
pub(crate) fn assign_rails(t: &Topology) -> Vec<Option<NodeIx>> {
    let mut out = vec![None; t.gpus().len()];
    let mut load = vec![0usize; t.nodes().len()];
    let mut hops = Vec::new();
    // Every host's NICs in node order, gathered in one pass: asking
    // `nodes_in_host` per GPU scanned every node for every GPU, quadratic
    // in the cluster (80,000 GPUs of 10,000 DGX H100s: over a minute).
    let mut host_nics: std::collections::HashMap<NodeIx, Vec<NodeIx>> =
        std::collections::HashMap::new();
    for n in t.nodes_of_kind(NodeKind::Nic) {
        if let Some(h) = t.node(n).host {
            host_nics.entry(h).or_default().push(n);
        }
    }
    for (rank, &g) in t.gpus().iter().enumerate() {
        let Some(host) = t.node(g).host else { continue };
        let Some(nics) = host_nics.get(&host) else {
            continue;
        };
        let costs: Vec<(NodeIx, f64)> = nics
            .iter()
            .filter_map(|&n| {
                hops.clear();
                if !t.layer_route(g, n, Layer::Island, &mut hops) {
                    return None;
                }
                let c: f64 = hops
                    .iter()
                    .map(|h| link_cost(t.link(h.link).bandwidth))
                    .sum();
                Some((n, c))
            })
            .collect();
        let Some(best) = costs.iter().map(|x| x.1).min_by(f64::total_cmp) else {
            continue;
        };
        let pick = costs
            .iter()
            .filter(|x| x.1 <= best * (1.0 + 1e-9))
            .min_by_key(|x| (load[x.0.index()], x.0))
            .map(|x| x.0);
        if let Some(n) = pick {
            load[n.index()] += 1;
        }
        out[rank] = pick;
    }
    out
}
