//! What the executor needs from a modeled machine: directional links with
//! capacities, and routes between ranks.

use crate::{SimError, SimTime, engine::LinkId};

/// The kind of path a transfer takes, which decides the per-step software
/// overhead of the engine that drives it (NCCL's latency tables are per
/// path kind: NVLink, PCIe, network).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathClass {
    /// Same device.
    Local,
    /// NVLink (direct or through NVSwitch).
    NvLink,
    /// PCIe, possibly through host bridges.
    Pcie,
    /// Crosses the inter-node network.
    Net,
}

impl PathClass {
    /// Short name.
    pub const fn name(self) -> &'static str {
        match self {
            PathClass::Local => "LOC",
            PathClass::NvLink => "NVL",
            PathClass::Pcie => "PCI",
            PathClass::Net => "NET",
        }
    }
}

/// A route: the directional links crossed, in order, with the summed latency.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Route {
    /// Links crossed.
    pub links: Vec<LinkId>,
    /// Sum of the links' latencies (and of any fixed per-hop cost).
    pub latency: SimTime,
    /// What kind of path it is.
    pub class: Option<PathClass>,
}

/// A modeled machine as the executor sees it: ranks are the fabric's
/// endpoints `0..ranks()`.
pub trait Fabric {
    /// Number of rank endpoints (GPUs).
    fn ranks(&self) -> usize;
    /// Ranks per node (the executor's symmetry and the hierarchical
    /// algorithms use it).
    fn ranks_per_node(&self) -> usize;
    /// Capacity of every directional link in GB/s, indexed by [`LinkId`],
    /// for the engine that runs the transfers.
    fn capacities(&self) -> Vec<f64>;
    /// A readable name of a link (`gpu3->nvswitch`).
    fn link_name(&self, link: LinkId) -> String;
    /// The route of a transfer from `src` to `dst` on `channel`.
    fn route(&self, src: usize, dst: usize, channel: u16) -> Result<Route, SimError>;
    /// Bandwidth of a local copy or reduction on a rank's device, GB/s.
    fn local_gbps(&self, rank: usize) -> f64;
    /// When translating every rank by a whole number of nodes is an
    /// automorphism of the fabric: that period and the orbit representative
    /// of every link. `None` (the default) disables the executor's symmetry
    /// reduction.
    fn node_orbits(&self) -> Option<NodeOrbits> {
        None
    }
}

/// A fabric's translation symmetry ([`Fabric::node_orbits`]): moving every
/// rank by `period` nodes maps links onto links, so the first `period`
/// nodes stand for all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeOrbits {
    /// Nodes in one period: 1 where every node is alike, a leaf's nodes
    /// behind oversubscribed leaf uplinks.
    pub period: usize,
    /// The representative of every link (`None`: a link no route of the
    /// first period's ranks crosses).
    pub rep: Vec<Option<LinkId>>,
}
