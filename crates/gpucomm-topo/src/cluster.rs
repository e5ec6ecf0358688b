//! Multi-node clusters built from any single-unit topology (a preset, a
//! file, the discovered machine): N copies, NICs per node and their speed,
//! and an inter-node fabric.
//!
//! Fabric switches are *logical*: one node per leaf (or rail) and one for
//! the whole spine layer, with trunk links whose bandwidth is the sum of
//! the ports they stand for. Switch radix is not modeled.

use std::collections::HashMap;

use crate::catalog::{LinkKind, PcieGen};
use crate::error::TopoError;
use crate::model::{Link, Node, NodeIx, NodeKind, Topology, TopologyBuilder};

/// The inter-node fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fabric {
    /// One leaf switch per rail: NIC `j` of every node on leaf `railj`; the
    /// rail leaves joined by a spine (for traffic between rails).
    #[default]
    RailOptimized,
    /// Every NIC on one switch (non-blocking).
    SingleSwitch,
    /// Leaves of [`ClusterOptions::nodes_per_leaf`] nodes (all their NICs),
    /// joined by a spine.
    LeafSpine,
}

impl Fabric {
    /// The name [`Fabric::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            Fabric::RailOptimized => "rail-optimized",
            Fabric::SingleSwitch => "single-switch",
            Fabric::LeafSpine => "leaf-spine",
        }
    }
    /// Parses `rail`, `single`, `leaf-spine`.
    pub fn parse(s: &str) -> Option<Fabric> {
        match s {
            "rail" | "rail-optimized" => Some(Fabric::RailOptimized),
            "single" | "single-switch" => Some(Fabric::SingleSwitch),
            "leaf-spine" | "fat-tree" => Some(Fabric::LeafSpine),
            _ => None,
        }
    }
}

/// How to derive a topology from a base one (used by [`crate::select`]).
///
/// ```
/// use gpucomm_topo::{ClusterOptions, select};
/// let opts = ClusterOptions { nodes: 4, ..Default::default() };
/// let t = select("dgx-h100", &opts).unwrap();
/// assert_eq!(t.gpus().len(), 32);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterOptions {
    /// Number of copies of the base topology (nodes). 1 = no cluster.
    pub nodes: usize,
    /// Keep only the first N GPUs of each host of the base topology (of a
    /// GB200 NVL72 rack, N per tray).
    pub gpus: Option<usize>,
    /// NICs per host: replace the base's NICs with this many in each host,
    /// spread evenly over the PCIe attachment points (switches, or the CPU)
    /// of the host's GPUs ([`cluster`] says how).
    pub nics: Option<usize>,
    /// NIC port speed (see [`crate::catalog::parse_port`]); default: the
    /// base's.
    pub nic_speed: Option<LinkKind>,
    /// The fabric between nodes.
    pub fabric: Fabric,
    /// Leaf-to-spine oversubscription: downlink over uplink bandwidth
    /// (1 = non-blocking, 2 = half the bandwidth up).
    pub oversubscription: f64,
    /// Nodes per leaf for [`Fabric::LeafSpine`].
    pub nodes_per_leaf: usize,
    /// Network switches offer in-network reduction (InfiniBand SHARP).
    pub sharp: bool,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            nodes: 1,
            gpus: None,
            nics: None,
            nic_speed: None,
            fabric: Fabric::RailOptimized,
            oversubscription: 1.0,
            nodes_per_leaf: 4,
            sharp: false,
        }
    }
}

/// The GPUs of each host, hosts in order of their first GPU, GPUs in rank
/// order; GPUs that name no host are one group (host `None`).
fn gpus_by_host(t: &Topology) -> Vec<(Option<NodeIx>, Vec<NodeIx>)> {
    let mut groups: Vec<(Option<NodeIx>, Vec<NodeIx>)> = Vec::new();
    let mut at: HashMap<Option<NodeIx>, usize> = HashMap::new();
    for &g in t.gpus() {
        let h = t.node(g).host;
        let i = *at.entry(h).or_insert_with(|| {
            groups.push((h, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(g);
    }
    groups
}

/// Keeps the first `n` GPUs of each host (rank order) and drops the rest
/// with their links: on a one-host topology its first `n` GPUs, on a GB200
/// NVL72 rack `n` of each tray. GPUs that name no host count as one host.
pub fn first_gpus(t: &Topology, n: usize) -> Result<Topology, TopoError> {
    let groups = gpus_by_host(t);
    let fewest = groups.iter().min_by_key(|g| g.1.len());
    let have = fewest.map_or(0, |g| g.1.len());
    if n == 0 || n > have {
        let whose = match fewest {
            Some((Some(h), _)) if groups.len() > 1 => {
                format!("host {} of {}", t.node(*h).id, t.name())
            }
            _ => t.name().to_string(),
        };
        return Err(TopoError::Options(format!(
            "--gpus {n}: {whose} has {have} GPUs"
        )));
    }
    let drop: std::collections::HashSet<NodeIx> = groups
        .iter()
        .flat_map(|g| g.1[n..].iter().copied())
        .collect();
    retain(t.to_builder(), |ix, _| !drop.contains(&ix))
}

/// Rebuilds keeping the nodes `keep` accepts (and the links between them).
fn retain(b: TopologyBuilder, keep: impl Fn(NodeIx, &Node) -> bool) -> Result<Topology, TopoError> {
    let mut map = vec![None; b.nodes.len()];
    let mut out = TopologyBuilder::new(b.name.clone());
    out.description = b.description.clone();
    for (i, n) in b.nodes.iter().enumerate() {
        if keep(NodeIx(i as u32), n) {
            map[i] = Some(NodeIx(out.nodes.len() as u32));
            out.nodes.push(n.clone());
        }
    }
    for n in &mut out.nodes {
        n.host = n.host.and_then(|h| map[h.index()]);
    }
    for l in &b.links {
        if let (Some(a), Some(bb)) = (map[l.a.index()], map[l.b.index()]) {
            let mut l = l.clone();
            l.a = a;
            l.b = bb;
            out.links.push(l);
        }
    }
    out.build()
}

/// The most NICs `--nics` puts in a node: NCCL's topology holds at most
/// `NCCL_TOPO_MAX_NODES` (640) nodes of each kind.
pub const MAX_NICS: usize = 640;

/// Replaces the NICs of a single-unit topology by `count` new ones in each
/// host that has GPUs. A host's NICs are spread evenly over the distinct
/// PCIe attachment points of its GPUs (their switch, or their CPU where a
/// GPU has no PCIe link), taken in GPU order: with `a` of them, NIC `j`
/// goes on attachment point `j * a / count`, with the GPU's PCIe link.
/// Eight switches and four NICs: switches 0, 2, 4, 6; two switches (GPUs
/// 0-1 on one, GPU 2 on the other) and two NICs: one on each. NIC ids are
/// `nic<j>` with the host's GPUs' id prefix (`tray3.nic0`).
fn replace_nics(t: &Topology, count: usize, port: Option<LinkKind>) -> Result<Topology, TopoError> {
    if count > MAX_NICS {
        return Err(TopoError::Options(format!(
            "--nics {count}: at most {MAX_NICS} per node (NCCL's topology holds at most \
             NCCL_TOPO_MAX_NODES = {MAX_NICS} nodes of a kind, src/include/graph.h)"
        )));
    }
    let nb = retain(t.to_builder(), |_, n| n.kind != NodeKind::Nic)?;
    if count == 0 {
        // No NIC needs a port speed (a machine without NICs takes --nics 0).
        return Ok(nb);
    }
    let old_port = t.nodes_of_kind(NodeKind::Nic).find_map(|n| t.node(n).port);
    let port = port.or(old_port).ok_or_else(|| {
        TopoError::Options(format!(
            "{} has no NIC with a known port speed; pass --nic-speed",
            t.name()
        ))
    })?;
    if nb.gpus().is_empty() {
        return Err(TopoError::Options(
            "--nics needs GPUs to place NICs near".into(),
        ));
    }
    let mut b = nb.to_builder();
    let hosts = gpus_by_host(&nb);
    let several = hosts.len() > 1;
    for (host, gpus) in hosts {
        // The GPUs' attachment points, each once, in GPU order.
        let mut points: Vec<(NodeIx, LinkKind, NodeIx)> = Vec::new();
        for &g in &gpus {
            let attach = nb
                .links_of(g)
                .iter()
                .find(|(l, _)| nb.link(*l).kind.is_pcie())
                .map(|&(l, d)| (nb.link(l).head(d), nb.link(l).kind));
            let (at, kind) = match attach {
                Some(x) => x,
                None => match nb.local_cpu(g) {
                    Some(c) => (
                        c,
                        LinkKind::Pcie {
                            generation: PcieGen::Gen5,
                            width: 16,
                        },
                    ),
                    None => {
                        return Err(TopoError::Options(format!(
                            "cannot place a NIC near {}: no PCIe link and no CPU",
                            nb.node(g).id
                        )));
                    }
                },
            };
            if !points.iter().any(|p| p.0 == at) {
                points.push((at, kind, g));
            }
        }
        // The NICs are named as the host's GPUs are (`tray3.nic0` beside
        // `tray3.gpu0`); where those ids do not say the host and there
        // are several, after the host (`nic0` in every host clashed).
        let gid = &nb.node(gpus[0]).id;
        let prefix = match (gid.rfind('.'), host) {
            (Some(i), _) => gid[..=i].to_string(),
            (None, Some(h)) if several => format!("{}.", nb.node(h).id),
            _ => String::new(),
        };
        for j in 0..count {
            let (at, kind, g) = points[j * points.len() / count];
            let gnode = nb.node(g);
            let mut nic = Node::new(format!("{prefix}nic{j}"), NodeKind::Nic).with_label("NIC");
            nic.host = gnode.host;
            nic.numa = gnode.numa;
            nic.socket = gnode.socket;
            nic.root_complex = gnode.root_complex.clone();
            nic.port = Some(port);
            let ix = b.node(nic);
            b.link(ix, at, kind);
        }
    }
    b.build()
}

/// A number for messages: `{}` (which writes every digit of an `f64`,
/// 301 of them for 1e-300) where that is short, scientific notation for
/// the tiny and the huge.
///
/// ```
/// use gpucomm_topo::readable_number as n;
/// assert_eq!((n(2.0), n(0.5), n(1e-300), n(1e300)), ("2".into(), "0.5".into(), "1e-300".into(), "1e300".into()));
/// ```
pub fn readable_number(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 || !a.is_finite() || (1e-3..1e9).contains(&a) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// Bytes a cluster takes per node and link it holds, with its routing
/// cache's share: a 20000-node DGX A100 cluster (32 nodes and 45 links
/// each) peaks at 299 MB in `gpucomm topo`, 194 bytes per element.
const BYTES_PER_ELEMENT: u128 = 256;

/// Refuses a cluster whose node indexes would not fit their `u32`, or
/// that would not fit in the memory `avail` says is left (bytes; `None`:
/// unknown, not checked), before anything is built.
fn check_size(unit: &Topology, nodes: usize, avail: Option<u64>) -> Result<(), TopoError> {
    let elements = (nodes as u128) * (unit.nodes().len() + unit.links().len()) as u128;
    let need = elements * BYTES_PER_ELEMENT;
    let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
    if (nodes as u128) * (unit.nodes().len() as u128 + 2) > u128::from(u32::MAX) {
        return Err(TopoError::Options(format!(
            "--nodes {nodes}: {nodes} nodes of {} ({} devices each) are more devices than a \
             topology indexes ({})",
            unit.name(),
            unit.nodes().len(),
            u32::MAX
        )));
    }
    match avail {
        Some(avail) if need > u128::from(avail) => Err(TopoError::Options(format!(
            "--nodes {nodes}: {nodes} nodes of {} would need about {:.1} GiB of memory \
             ({elements} devices and links), {:.1} GiB available",
            unit.name(),
            gib(need),
            gib(u128::from(avail))
        ))),
        _ => Ok(()),
    }
}

/// Builds an `opts.nodes`-node cluster from a base topology (usually one
/// host). Node `i`'s ids get the prefix `n{i}.`; fabric switches are
/// `rail{j}`, `leaf{k}`, `spine` or `switch`. A leaf whose trunk to the
/// spine would hold more than `u16::MAX` links (its downlinks) is refused.
pub fn cluster(base: &Topology, opts: &ClusterOptions) -> Result<Topology, TopoError> {
    if opts.nodes == 0 {
        return Err(TopoError::Options("--nodes must be at least 1".into()));
    }
    if !(opts.oversubscription.is_finite() && opts.oversubscription >= 1.0) {
        return Err(TopoError::Options(format!(
            "--oversubscription must be at least 1 (got {})",
            readable_number(opts.oversubscription)
        )));
    }
    if opts.fabric == Fabric::LeafSpine && opts.nodes_per_leaf == 0 {
        return Err(TopoError::Options(
            "--nodes-per-leaf must be at least 1".into(),
        ));
    }
    if let Some(port) = opts.nic_speed {
        let none = match opts.nics {
            Some(0) => Some("--nics 0 leaves none".to_string()),
            None if base.nodes_of_kind(NodeKind::Nic).next().is_none() => {
                Some(format!("{} has none (--nics N gives it some)", base.name()))
            }
            _ => None,
        };
        if let Some(why) = none {
            return Err(TopoError::NoEffect(format!(
                "--nic-speed {}: no NIC to set it on; {why}",
                crate::catalog::port_name(port).unwrap_or_else(|| port.to_string())
            )));
        }
    }
    let mut unit = match opts.gpus {
        Some(n) => first_gpus(base, n)?,
        None => base.clone(),
    };
    if let Some(k) = opts.nics {
        unit = replace_nics(&unit, k, opts.nic_speed)?;
    } else if let Some(port) = opts.nic_speed {
        let mut b = unit.to_builder();
        for n in &mut b.nodes {
            if n.kind == NodeKind::Nic {
                n.port = Some(port);
            }
        }
        unit = b.build()?;
    }
    if opts.nodes == 1 {
        return Ok(unit);
    }
    let nics: Vec<NodeIx> = unit.nodes_of_kind(NodeKind::Nic).collect();
    if nics.is_empty() {
        let hint = if opts.nics == Some(0) {
            "--nics 0 leaves none"
        } else {
            "pass --nics N (and --nic-speed)"
        };
        return Err(TopoError::Options(format!(
            "{} has no NICs to join {} nodes with; {hint}",
            unit.name(),
            opts.nodes
        )));
    }
    for &n in &nics {
        if unit.node(n).port.is_none() {
            return Err(TopoError::Options(format!(
                "NIC {} has no known port speed; pass --nic-speed",
                unit.node(n).id
            )));
        }
    }
    // A unit with a network of its own (an exported cluster): joining its
    // copies would cable each of its NICs to a second switch.
    if let Some(l) = unit.links().iter().find(|l| l.kind.is_network()) {
        return Err(TopoError::Options(format!(
            "--nodes {}: {} already has its own network ({} is cabled to {}); --nodes would \
             give each of its NICs a second port. Build the cluster from one node of it, or \
             use it as it is",
            opts.nodes,
            unit.name(),
            unit.node(l.a).id,
            unit.node(l.b).id
        )));
    }
    // Each NIC's rail: its index among its host's NICs (NIC 2 of every
    // host, every tray of a GB200 NVL72 rack included, on rail 2).
    let mut seen: HashMap<Option<NodeIx>, usize> = HashMap::new();
    let rail_of: Vec<usize> = nics
        .iter()
        .map(|&n| {
            let k = seen.entry(unit.node(n).host).or_insert(0);
            *k += 1;
            *k - 1
        })
        .collect();
    let rails = rail_of.iter().max().map_or(0, |&r| r + 1);
    let per = unit.nodes().len();
    check_size(&unit, opts.nodes, crate::discover::available_memory())?;
    let mut b = TopologyBuilder::new(format!("{}x{}", unit.name(), opts.nodes));
    b.description(format!(
        "{} nodes of {} ({} fabric{})",
        opts.nodes,
        unit.name(),
        opts.fabric.name(),
        if opts.oversubscription > 1.0 {
            format!(
                ", {}:1 oversubscribed",
                readable_number(opts.oversubscription)
            )
        } else {
            String::new()
        }
    ));
    for i in 0..opts.nodes {
        let base_ix = (i * per) as u32;
        for n in unit.nodes() {
            let mut n = n.clone();
            n.id = format!("n{i}.{}", n.id);
            n.host = n.host.map(|h| NodeIx(h.0 + base_ix));
            b.node(n);
        }
        for l in unit.links() {
            let mut l = l.clone();
            l.a = NodeIx(l.a.0 + base_ix);
            l.b = NodeIx(l.b.0 + base_ix);
            b.push_link(l);
        }
    }
    let nic_at = |node: usize, j: usize| NodeIx((node * per) as u32 + nics[j].0);
    let port = |_node: usize, j: usize| unit.node(nics[j]).port.expect("checked above");
    let switch = |b: &mut TopologyBuilder, id: String, label: &str| {
        let mut n = Node::new(id, NodeKind::NetSwitch).with_label(label);
        n.reduction = opts.sharp;
        b.node(n)
    };
    // Downlinks per leaf, to size the leaf's uplink trunk.
    let mut leaves: Vec<(NodeIx, Vec<LinkKind>)> = Vec::new();
    match opts.fabric {
        Fabric::SingleSwitch => {
            let sw = switch(&mut b, "switch".into(), "network switch");
            for i in 0..opts.nodes {
                for j in 0..nics.len() {
                    b.link(nic_at(i, j), sw, port(i, j));
                }
            }
        }
        Fabric::RailOptimized => {
            for r in 0..rails {
                let sw = switch(&mut b, format!("rail{r}"), "rail leaf switch");
                let mut down = Vec::new();
                for i in 0..opts.nodes {
                    for j in (0..nics.len()).filter(|&j| rail_of[j] == r) {
                        b.link(nic_at(i, j), sw, port(i, j));
                        down.push(port(i, j));
                    }
                }
                leaves.push((sw, down));
            }
        }
        Fabric::LeafSpine => {
            let mut by_leaf: HashMap<usize, NodeIx> = HashMap::new();
            for i in 0..opts.nodes {
                let k = i / opts.nodes_per_leaf;
                let sw = *by_leaf
                    .entry(k)
                    .or_insert_with(|| switch(&mut b, format!("leaf{k}"), "leaf switch"));
                if leaves.len() <= k {
                    leaves.push((sw, Vec::new()));
                }
                for j in 0..nics.len() {
                    b.link(nic_at(i, j), sw, port(i, j));
                    leaves[k].1.push(port(i, j));
                }
            }
        }
    }
    if leaves.len() > 1 {
        let spine = switch(&mut b, "spine".into(), "spine switches (logical)");
        for (leaf, down) in leaves {
            let bw: f64 = down.iter().map(|k| k.bandwidth()).sum::<f64>() / opts.oversubscription;
            // A trunk holds at most u16::MAX links (the file format's
            // `count`); more is refused, not wrapped (65,536 wrote 0).
            let count = u16::try_from(down.len()).map_err(|_| {
                TopoError::Options(format!(
                    "leaf switch {} would have {} ports, more than the {} links one trunk to the \
                     spine holds; use fewer nodes per leaf or fewer NICs",
                    b.nodes()[leaf.index()].id,
                    down.len(),
                    u16::MAX
                ))
            })?;
            let trunk = match down[0] {
                LinkKind::Infiniband { speed, .. } => LinkKind::Infiniband { speed, count },
                LinkKind::Ethernet { gbit, roce, .. } => LinkKind::Ethernet { gbit, count, roce },
                other => other,
            };
            let mut l = Link::new(leaf, spine, trunk);
            if (l.bandwidth - bw).abs() > 1e-9 {
                l = l.with_bandwidth(bw);
            }
            b.push_link(l);
        }
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--nics` on a unit of several hosts whose GPU ids do not name the
    /// host (`gpu0` in every tray of a file): the NICs are named after
    /// the host. Every host's were `nic0`, and the build failed on the
    /// duplicate id.
    #[test]
    fn nics_of_hosts_whose_gpu_ids_do_not_say_the_host_get_distinct_ids() {
        let rack = crate::preset("gb200-nvl72").unwrap();
        let mut b = rack.to_builder();
        let gpus: Vec<NodeIx> = rack.gpus().to_vec();
        for (k, &g) in gpus.iter().enumerate() {
            b.node_mut(g).id = format!("g{k}");
        }
        let unit = b.build().unwrap();
        let opts = ClusterOptions {
            nics: Some(2),
            ..ClusterOptions::default()
        };
        let t = cluster(&unit, &opts).unwrap();
        let nics: Vec<&str> = t
            .nodes()
            .iter()
            .filter(|n| n.kind == NodeKind::Nic)
            .map(|n| n.id.as_str())
            .collect();
        assert_eq!(nics.len(), 18 * 2);
        let host0 = &t.node(t.node(t.find("g0").unwrap()).host.unwrap()).id;
        assert!(nics.contains(&format!("{host0}.nic1").as_str()), "{nics:?}");
    }

    #[test]
    fn an_oversubscription_is_written_readably() {
        let unit = crate::preset("dgx-h100").unwrap();
        let opts = |nodes, oversubscription| ClusterOptions {
            nodes,
            oversubscription,
            ..ClusterOptions::default()
        };
        // It printed 0.000...0001, 301 characters.
        for (x, shown) in [
            (1e-300, "1e-300"),
            (0.5, "0.5"),
            (-3.0, "-3"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            let e = cluster(&unit, &opts(2, x)).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("--oversubscription must be at least 1 (got {shown})")
            );
        }
        // Accepted, the description says it briefly too.
        let t = cluster(&unit, &opts(2, 1e300)).unwrap();
        assert!(
            t.description().ends_with(", 1e300:1 oversubscribed)"),
            "{}",
            t.description()
        );
        let t = cluster(&unit, &opts(2, 2.5)).unwrap();
        assert!(
            t.description().ends_with(", 2.5:1 oversubscribed)"),
            "{}",
            t.description()
        );
    }

    #[test]
    fn a_cluster_too_large_for_memory_or_indexes_is_refused_before_building() {
        let unit = crate::preset("dgx-a100").unwrap();
        let per = (unit.nodes().len() + unit.links().len()) as u64 * 256;
        // Exactly what fits passes; one node more does not, naming both sizes.
        assert!(check_size(&unit, 1000, Some(1000 * per)).is_ok());
        let e = check_size(&unit, 1001, Some(1000 * per))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--nodes 1001") && e.contains("GiB available"),
            "{e}"
        );
        // Memory unknown: only the index range is checked.
        assert!(check_size(&unit, 1 << 20, None).is_ok());
        let e = check_size(&unit, usize::MAX, None).unwrap_err().to_string();
        assert!(e.contains("more devices than a topology indexes"), "{e}");
        // Through `cluster`, on this machine: refused at once, not built.
        let opts = ClusterOptions {
            nodes: usize::MAX,
            ..ClusterOptions::default()
        };
        assert!(matches!(cluster(&unit, &opts), Err(TopoError::Options(_))));
    }
}
