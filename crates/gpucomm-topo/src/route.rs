//! Routes and paths: which links a transfer crosses, in which direction,
//! and what that means (bottleneck bandwidth, latency, `nvidia-smi topo -m`
//! class, GPUDirect P2P / RDMA).
//!
//! # How routes are chosen
//!
//! Within the graph, a route is the cheapest path where each link costs
//! `1 / bandwidth` (seconds per byte) plus a tiny per-hop term, so a wide
//! link wins over a narrow one and, at equal width, fewer hops win. Ties are
//! broken by node and link index, so routes are deterministic. GPUs,
//! storage and other endpoints never forward (CUDA P2P does not route
//! through a GPU); CPUs, PCIe switches, NVSwitches, NICs and network
//! switches do.
//!
//! A route that leaves a host through the network goes through the
//! source GPU's own NIC (its *rail*, [`Topology::nic_of_gpu`]) and arrives
//! through the destination GPU's NIC: GPU → its NIC → fabric → peer's NIC
//! → peer GPU, as rail-optimized clusters and NCCL do.
//!
//! # Cost
//!
//! Shortest-path trees are computed once per source node (Dijkstra over
//! the whole graph) and cached in a lock-free `OnceLock` per node; a route
//! is then a walk up the tree, `O(hops)`. A 128-node DGX H100 cluster has
//! about 3,000 nodes; see the `route_speed` test for measured figures.

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
    /// Bottleneck bandwidth per direction (GB/s): the narrowest hop.
    pub bandwidth: f64,
    /// Sum of the hops' latencies (µs).
    pub latency_us: f64,
    /// The `nvidia-smi topo -m` class.
    pub class: PathClass,
    /// GPUDirect P2P applies: two GPUs in one host joined by NVLink or by
    /// PCIe through at most a host bridge (PIX, PXB, PHB; not NODE or SYS,
    /// where CUDA P2P is not supported across the SMP link).
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

/// The route cache: one shortest-path tree per source node, built on first
/// use.
#[derive(Debug)]
pub(crate) struct Router {
    trees: Vec<OnceLock<Box<[u32]>>>,
}

impl Router {
    pub(crate) fn new(nodes: usize) -> Self {
        Router {
            trees: (0..nodes).map(|_| OnceLock::new()).collect(),
        }
    }
}

#[derive(PartialEq)]
struct Entry(f64, u32);
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // Min-heap on (cost, node).
        other.0.total_cmp(&self.0).then(other.1.cmp(&self.1))
    }
}

fn link_cost(kind: LinkKind, bandwidth: f64) -> f64 {
    let _ = kind;
    1.0 / bandwidth + HOP_COST
}

impl Topology {
    /// The shortest-path tree from `src`: for each node, the channel
    /// (`link * 2 + dir`) of the hop that reaches it, or `NONE`.
    fn tree(&self, src: NodeIx) -> &[u32] {
        self.router.trees[src.index()].get_or_init(|| {
            let n = self.nodes().len();
            let mut dist = vec![f64::INFINITY; n];
            let mut pred = vec![NONE; n];
            let mut heap = BinaryHeap::new();
            dist[src.index()] = 0.0;
            heap.push(Entry(0.0, src.0));
            while let Some(Entry(d, u)) = heap.pop() {
                if d > dist[u as usize] {
                    continue;
                }
                let ux = NodeIx(u);
                if ux != src && !self.node(ux).kind.is_transit() {
                    continue;
                }
                for &(l, dir) in self.links_of(ux) {
                    let link = self.link(l);
                    let v = link.head(dir).index();
                    let nd = d + link_cost(link.kind, link.bandwidth);
                    let ch = (l.index() * 2 + dir.index()) as u32;
                    if nd < dist[v] || (nd == dist[v] && ch < pred[v]) {
                        let improved = nd < dist[v];
                        dist[v] = nd;
                        pred[v] = ch;
                        if improved {
                            heap.push(Entry(nd, v as u32));
                        }
                    }
                }
            }
            pred.into_boxed_slice()
        })
    }

    /// Appends the tree route `src → dst` to `out`; false when unreachable.
    fn tree_route(&self, src: NodeIx, dst: NodeIx, out: &mut Vec<Hop>) -> bool {
        if src == dst {
            return true;
        }
        let tree = self.tree(src);
        let start = out.len();
        let mut at = dst;
        while at != src {
            let ch = tree[at.index()];
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
        if !self.tree_route(src, dst, out) {
            return Err(no_route());
        }
        if !out.iter().any(|h| self.link(h.link).kind.is_network()) {
            return Ok(());
        }
        // Leaves the host through the network: use the rails.
        let sn = self.rail_nic(src);
        let dn = self.rail_nic(dst);
        if sn.is_none() && dn.is_none() {
            return Ok(());
        }
        let mut railed = Vec::with_capacity(out.len() + 2);
        let a = sn.unwrap_or(src);
        let b = dn.unwrap_or(dst);
        let ok = self.tree_route(src, a, &mut railed)
            && self.tree_route(a, b, &mut railed)
            && self.tree_route(b, dst, &mut railed);
        if ok {
            *out = railed;
        }
        Ok(())
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

    fn rail_nic(&self, n: NodeIx) -> Option<NodeIx> {
        match self.node(n).kind {
            NodeKind::Gpu => self.nic_of_gpu(n),
            _ => None,
        }
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
            cost += link_cost(l.kind, l.bandwidth);
        }
        let class = self.classify(src, dst, &hops);
        let (sk, dk) = (self.node(src).kind, self.node(dst).kind);
        let same_host = self.node(src).host.is_some() && self.node(src).host == self.node(dst).host;
        let p2p = sk == NodeKind::Gpu
            && dk == NodeKind::Gpu
            && same_host
            && matches!(
                class,
                PathClass::NvLink(_) | PathClass::Pix | PathClass::Pxb | PathClass::Phb
            );
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
            bandwidth: if bandwidth.is_finite() {
                bandwidth
            } else {
                0.0
            },
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
                self.tree_route(gpu, nic, &mut hops) && self.gdr_ok(gpu, &hops)
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
    for (rank, &g) in t.gpus().iter().enumerate() {
        let Some(host) = t.node(g).host else { continue };
        let nics = t.nodes_in_host(host, NodeKind::Nic);
        let costs: Vec<(NodeIx, f64)> = nics
            .iter()
            .filter_map(|&n| {
                hops.clear();
                if !t.tree_route(g, n, &mut hops)
                    || hops.iter().any(|h| t.link(h.link).kind.is_network())
                {
                    return None;
                }
                let c: f64 = hops
                    .iter()
                    .map(|h| link_cost(t.link(h.link).kind, t.link(h.link).bandwidth))
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
