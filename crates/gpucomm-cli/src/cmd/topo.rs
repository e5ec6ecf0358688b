//! `gpucomm topo`: show a topology — this machine (default), a preset, or
//! a file — as a summary tree, an `nvidia-smi topo -m` style matrix, a
//! bandwidth matrix, a path, the catalog, or the file format.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use super::common::{OrUsage, usage, usage_error};
use comfy_table::{Table, presets::ASCII_MARKDOWN};
use gpucomm_topo::catalog::{self, LinkKind, parse_port};
use gpucomm_topo::format::{self, Format};
use gpucomm_topo::{
    ClusterOptions, DiscoverOptions, Fabric, NodeIx, NodeKind, PRESETS, PathClass, TopoError,
    Topology,
};

/// Arguments of `gpucomm topo`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Presets: dgx1-v100, dgx2, dgx-a100, dgx-h100, hgx-h200, gb200-nvl72, pcie-8gpu,\n\
dgx-b200, workstation-rtx4090, dgx1-p100, hgx-a800, hgx-h800, gh200, quad-gh200\n\
(aliases: dgx1, dgx-2, hgx-b200, rtx4090).\n\
Examples:\n  gpucomm topo\n  gpucomm topo --topology dgx1-v100 (or --preset dgx1-v100)\n  gpucomm topo --preset dgx-h100 --nodes 4 --bandwidth\n  \
gpucomm topo --file my.toml --path gpu0 gpu3\n  gpucomm topo --preset dgx-a100 --export dgx-a100.toml"
)]
pub struct Args {
    /// Machine: a preset (see --list), `local` (this machine, the default),
    /// or a topology file: the same option as `gpucomm sim --topology`.
    #[arg(long, short = 't', conflicts_with_all = ["preset", "file"])]
    pub topology: Option<String>,
    /// A preset system (see --list).
    #[arg(long, conflicts_with = "file")]
    pub preset: Option<String>,
    /// A topology file (TOML, or JSON when it ends in .json); always read
    /// as a file, even when named like a preset or `local`.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Discover from this root directory instead of / (it must hold sys/).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["topology", "preset", "file"])]
    pub sysfs_root: Option<PathBuf>,
    /// Do not query NVML during discovery.
    #[arg(long)]
    pub no_nvml: bool,
    /// Cluster options.
    #[command(flatten)]
    pub cluster: Box<ClusterArgs>,
    /// Also print the matrix of bottleneck bandwidths (GB/s per direction).
    #[arg(long)]
    pub bandwidth: bool,
    /// Also print which GPU pairs can use GPUDirect P2P, as `nvidia-smi topo
    /// -p2p r` does (from the topology: NVLink, or PCIe without crossing
    /// the SMP link between sockets).
    #[arg(long)]
    pub p2p: bool,
    /// Print the route and figures between two node ids.
    #[arg(long, num_args = 2, value_names = ["SRC", "DST"],
          conflicts_with_all = ["bandwidth", "p2p", "all", "json"])]
    pub path: Option<Vec<String>>,
    /// Write the topology to this file (TOML, or JSON for .json).
    #[arg(long, value_name = "FILE")]
    pub export: Option<PathBuf>,
    /// Print the topology as JSON (the file format) instead of text; with
    /// --list or --catalog, their rows as JSON objects.
    #[arg(long, conflicts_with_all = ["bandwidth", "p2p", "all"])]
    pub json: bool,
    /// List the presets.
    #[arg(long, conflicts_with_all = MACHINE_OPTIONS, conflicts_with = "catalog")]
    pub list: bool,
    /// Print the catalog of link generations.
    #[arg(long, conflicts_with_all = MACHINE_OPTIONS)]
    pub catalog: bool,
    /// Print matrices for every GPU even when there are many.
    #[arg(long)]
    pub all: bool,
}

/// The options that say which machine to show and how: `--list` and
/// `--catalog` show no machine, so each is refused beside them (named one
/// by one: a clap group's conflict error lists all of its members).
const MACHINE_OPTIONS: [&str; 18] = [
    "topology",
    "preset",
    "file",
    "sysfs_root",
    "bandwidth",
    "p2p",
    "path",
    "export",
    "all",
    "no_nvml",
    "nodes",
    "gpus",
    "nics",
    "nic_speed",
    "fabric",
    "oversubscription",
    "nodes_per_leaf",
    "sharp",
];

/// Options that turn a node into a cluster (`gpucomm topo`; `gpucomm sim`
/// has its own, which leave a topology file's network alone).
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Build a cluster of this many nodes.
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// Keep only the first N GPUs of each host (of a GB200 NVL72, of each
    /// tray).
    #[arg(long)]
    pub gpus: Option<usize>,
    /// NICs per host (replaces its NICs), spread evenly over its GPUs' PCIe
    /// switches; 0 removes them.
    #[arg(long)]
    pub nics: Option<usize>,
    /// NIC port speed: edr, hdr, hdr100, ndr, ndr200, xdr, roce400, eth100...
    /// (refused where there is no NIC to set).
    #[arg(long)]
    pub nic_speed: Option<String>,
    /// Inter-node fabric: rail (default), single, leaf-spine.
    #[arg(long)]
    pub fabric: Option<String>,
    /// Leaf-to-spine oversubscription (default 1 = non-blocking; above 1
    /// needs --fabric leaf-spine and more than one leaf: --nodes above
    /// --nodes-per-leaf).
    #[arg(long, value_parser = parse_oversubscription)]
    pub oversubscription: Option<f64>,
    /// Nodes per leaf switch (default 4; needs --fabric leaf-spine and
    /// --nodes above 1).
    #[arg(long)]
    pub nodes_per_leaf: Option<usize>,
    /// Network switches support in-network reduction (SHARP).
    #[arg(long)]
    pub sharp: bool,
}

/// `--oversubscription`: a finite number of at least 1, refused as typed
/// (an `f64` written back with `{}` can take 300 digits).
pub(crate) fn parse_oversubscription(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 1.0 => Ok(x),
        _ => Err("expected a number of at least 1 (downlink over uplink bandwidth: 1 = non-blocking, 2 = half the bandwidth up)".into()),
    }
}

/// The network options as given on a command line (`gpucomm topo` and
/// `gpucomm sim`), for [`check_network_options`].
struct NetworkFlags {
    /// `--fabric`, where given, as typed.
    fabric: Option<(Fabric, String)>,
    /// The node count (a sweep's largest).
    nodes: usize,
    nodes_per_leaf: Option<usize>,
    oversubscription: Option<f64>,
    sharp: bool,
}

/// Checks the network options as given: each shapes the network between
/// nodes, so on one node it would be taken and change nothing; and
/// `--nodes-per-leaf` and an `--oversubscription` above 1 shape the uplinks
/// of a leaf-spine fabric (on rails, the spine no transfer crosses). Usage
/// errors (exit 2).
fn check_network_options(f: &NetworkFlags) -> anyhow::Result<()> {
    let default = ClusterOptions::default().fabric;
    let fabric = f.fabric.as_ref().map_or(default, |x| x.0);
    let oversubscribed = f.oversubscription.filter(|&x| x > 1.0);
    let leaf = [
        (
            "--nodes-per-leaf",
            f.nodes_per_leaf.map(|n| n.to_string()),
            "it sizes the leaves of nodes",
        ),
        (
            "--oversubscription",
            oversubscribed.map(gpucomm_topo::readable_number),
            "it narrows the leaves' uplinks to the spine; on rails every transfer stays on \
             its rail switch, and one switch has no uplinks",
        ),
    ];
    for (flag, value, what) in &leaf {
        let Some(value) = value else { continue };
        if fabric != Fabric::LeafSpine {
            usage!(
                "{flag} {value} needs --fabric leaf-spine ({what}; the fabric is {})",
                fabric.name()
            );
        }
    }
    // One leaf has no uplink to narrow: every node on it, no spine.
    let per_leaf = f
        .nodes_per_leaf
        .unwrap_or(ClusterOptions::default().nodes_per_leaf);
    if let Some(x) = oversubscribed
        && fabric == Fabric::LeafSpine
        && f.nodes > 1
        && f.nodes <= per_leaf
    {
        usage!(
            "--oversubscription {} needs more than one leaf: {} nodes at {per_leaf} per leaf \
             (--nodes-per-leaf) are one leaf switch, with no uplink to the spine to narrow",
            gpucomm_topo::readable_number(x),
            f.nodes
        );
    }
    if f.nodes <= 1 {
        let first = leaf
            .into_iter()
            .filter_map(|(flag, value, _)| Some(format!("{flag} {}", value?)))
            // The default fabric, given, changes nothing either way (as an
            // oversubscription of 1).
            .chain(
                f.fabric
                    .as_ref()
                    .filter(|x| x.0 != default)
                    .map(|x| format!("--fabric {}", x.1)),
            )
            .chain(f.sharp.then(|| "--sharp".to_string()))
            .next();
        if let Some(flag) = first {
            usage!(
                "{flag} needs more than one node (--nodes N): it shapes the network between \
                 the nodes --nodes makes (a topology file of several hosts keeps its own)"
            );
        }
    }
    if f.nodes_per_leaf == Some(0) {
        usage!("--nodes-per-leaf must be at least 1");
    }
    Ok(())
}

/// The most GPUs and NICs `--all` prints matrices for (128 DGX nodes): the
/// rows are built whole, so a 16384-device cluster would take gigabytes.
const MAX_ALL_DEVICES: usize = 2048;

/// Runs `gpucomm topo`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    if args.list {
        if args.json {
            let presets: Vec<_> = PRESETS
                .iter()
                .map(|(name, desc)| serde_json::json!({ "name": name, "description": desc }))
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&presets)?)?;
        } else {
            for (name, desc) in PRESETS {
                writeln!(out, "{name:<19} {desc}")?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.catalog {
        if args.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&catalog_json())?)?;
        } else {
            writeln!(out, "{}", catalog_table())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(path) = &args.export {
        super::common::check_output_path("--export", path)?;
    }
    let t = load(&args)?;
    if let Some(path) = &args.export {
        format::save(&t, path)?;
        eprintln!(
            "wrote {} ({} nodes, {} links)",
            path.display(),
            t.nodes().len(),
            t.links().len()
        );
    }
    if args.json {
        writeln!(out, "{}", format::to_string(&t, Format::Json))?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(p) = &args.path {
        print_path(&mut out, &t, &p[0], &p[1])?;
        return Ok(ExitCode::SUCCESS);
    }
    let devices = t.gpus().len() + t.nodes_of_kind(NodeKind::Nic).count();
    if args.all && devices > MAX_ALL_DEVICES {
        usage!(
            "--all: {devices} GPUs and NICs would make a {devices} x {devices} matrix; \
             --all prints at most {MAX_ALL_DEVICES} (--path A B shows one pair, --json the whole topology)"
        );
    }
    print_summary(&mut out, &t)?;
    writeln!(out)?;
    print_matrix(&mut out, &t, args.all)?;
    if args.bandwidth {
        writeln!(out)?;
        print_bandwidth(&mut out, &t, args.all)?;
    }
    if args.p2p {
        writeln!(out)?;
        print_p2p(&mut out, &t, args.all)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads `--nic-speed` (`gpucomm topo` and `gpucomm sim`).
pub fn nic_speed(s: &str) -> anyhow::Result<LinkKind> {
    match parse_port(s) {
        Some(k) => Ok(k),
        None => usage!(
            "--nic-speed {s:?}: expected edr, hdr, hdr100, ndr, ndr200, xdr, roce<Gb/s> or \
             eth<Gb/s> (1 to {} Gb/s)",
            catalog::MAX_ETHERNET_GBIT
        ),
    }
}

/// The network options as given (`--fabric` as typed; the others where
/// given), checked ([`check_network_options`] on `nodes`, a sweep's
/// largest), as [`ClusterOptions`] (the other fields their defaults).
/// `gpucomm topo` and `gpucomm sim` take them alike.
pub(crate) fn network_options(
    fabric: Option<&str>,
    nodes: usize,
    nodes_per_leaf: Option<usize>,
    oversubscription: Option<f64>,
    sharp: bool,
) -> anyhow::Result<ClusterOptions> {
    let fabric = fabric
        .map(|f| {
            Fabric::parse(f)
                .map(|x| (x, f.to_string()))
                .with_context(|| format!("--fabric {f:?}: expected rail, single or leaf-spine"))
                .or_usage()
        })
        .transpose()?;
    let defaults = ClusterOptions::default();
    let fabric_kind = fabric.as_ref().map_or(defaults.fabric, |x| x.0);
    check_network_options(&NetworkFlags {
        fabric,
        nodes,
        nodes_per_leaf,
        oversubscription,
        sharp,
    })?;
    Ok(ClusterOptions {
        fabric: fabric_kind,
        oversubscription: oversubscription.unwrap_or(defaults.oversubscription),
        nodes_per_leaf: nodes_per_leaf.unwrap_or(defaults.nodes_per_leaf),
        sharp,
        ..defaults
    })
}

/// Converts the cluster arguments to [`ClusterOptions`].
pub fn options(args: &ClusterArgs) -> anyhow::Result<ClusterOptions> {
    let network = network_options(
        args.fabric.as_deref(),
        args.nodes,
        args.nodes_per_leaf,
        args.oversubscription,
        args.sharp,
    )?;
    Ok(ClusterOptions {
        nodes: args.nodes,
        gpus: args.gpus,
        nics: args.nics,
        nic_speed: args.nic_speed.as_deref().map(nic_speed).transpose()?,
        ..network
    })
}

/// A topology error as `gpucomm topo` reports it: a name that is neither a
/// preset nor a file ([`TopoError::UnknownTopology`]), options that cannot
/// be applied ([`TopoError::Options`]: `--gpus` beyond the node's, too many
/// `--nodes`...) or would change nothing ([`TopoError::NoEffect`]) are bad
/// command lines (exit 2), as the network options refused before loading
/// are; a file that cannot be read or parsed stays a failure (exit 1).
fn topo_error(e: TopoError) -> anyhow::Error {
    match e {
        TopoError::UnknownTopology { .. } | TopoError::Options(_) | TopoError::NoEffect(_) => {
            usage_error(e)
        }
        other => other.into(),
    }
}

fn load(args: &Args) -> anyhow::Result<Topology> {
    let opts = options(&args.cluster)?;
    // `local` is discovered below, where --no-nvml applies.
    if let Some(t) = args
        .topology
        .as_ref()
        .filter(|t| !t.eq_ignore_ascii_case("local"))
    {
        return gpucomm_topo::select(t, &opts)
            .map_err(topo_error)
            .with_context(|| format!("--topology {t}"));
    }
    if let Some(p) = &args.preset {
        return gpucomm_topo::select(p, &opts).map_err(topo_error);
    }
    if let Some(f) = &args.file {
        // A path that exists but is not a file (a directory, /dev/null)
        // is read below, which says what is wrong with it. Always the
        // file: a file named like a preset (or `local`) is not the preset.
        if !f.exists() {
            usage!("--file {}: no such file", f.display());
        }
        return gpucomm_topo::select_file(f, &opts).map_err(topo_error);
    }
    if let Some(root) = &args.sysfs_root
        && !root.exists()
    {
        usage!("--sysfs-root {}: no such directory", root.display());
    }
    let d = DiscoverOptions {
        root: args
            .sysfs_root
            .clone()
            .unwrap_or_else(|| PathBuf::from("/")),
        nvml: !args.no_nvml,
    };
    let base = gpucomm_topo::discover(&d).map_err(topo_error)?;
    if opts == ClusterOptions::default() {
        Ok(base)
    } else {
        gpucomm_topo::cluster(&base, &opts).map_err(topo_error)
    }
}

fn catalog_table() -> Table {
    let mut t = Table::new();
    t.load_style(ASCII_MARKDOWN);
    t.set_header([
        "Generation",
        "Signaling",
        "Lanes",
        "GB/s per direction",
        "GB/s bidirectional",
        "Products",
        "Source",
    ]);
    for e in catalog::entries() {
        t.add_row([
            e.generation.to_string(),
            e.signaling.to_string(),
            e.lanes.to_string(),
            format!("{:.2}", e.kind.bandwidth()),
            format!("{:.2}", e.kind.bidirectional()),
            e.products.to_string(),
            e.source.to_string(),
        ]);
    }
    t
}

/// `--catalog --json`: the table's rows as objects, the bandwidths unrounded.
fn catalog_json() -> serde_json::Value {
    catalog::entries()
        .iter()
        .map(|e| {
            serde_json::json!({
                "generation": e.generation,
                "signaling": e.signaling,
                "lanes": e.lanes,
                "gbps_per_direction": e.kind.bandwidth(),
                "gbps_bidirectional": e.kind.bidirectional(),
                "products": e.products,
                "source": e.source.to_string(),
            })
        })
        .collect()
}

fn bw(g: f64) -> String {
    if g >= 100.0 {
        format!("{g:.0}")
    } else if g >= 10.0 {
        format!("{g:.1}")
    } else {
        format!("{g:.2}")
    }
}

/// A link's kind and per-direction rate; an SMP link's catalog rate is a
/// placeholder, shown only when the topology set one (`overridden`).
fn link_text(k: LinkKind, bandwidth: f64, overridden: bool) -> String {
    match k {
        LinkKind::Integrated => "integrated".to_string(),
        LinkKind::Smp if !overridden => "SMP link (speed unknown)".to_string(),
        _ => format!("{k}, {} GB/s/dir", bw(bandwidth)),
    }
}

fn node_line(t: &Topology, ix: NodeIx) -> String {
    let n = t.node(ix);
    let mut s = format!("{} [{}]", n.id, n.kind);
    if !n.label.is_empty() {
        s.push_str(&format!(" {}", n.label));
    }
    if n.kind == NodeKind::Cpu {
        if let Some(numa) = n.numa {
            s.push_str(&format!(", NUMA {numa}"));
        }
        if let Some(sock) = n.socket {
            s.push_str(&format!(", socket {sock}"));
        }
    }
    if let Some(a) = &n.pci_address {
        s.push_str(&format!(" @{a}"));
    }
    if let Some(a) = n.arch {
        s.push_str(&format!(", {a}"));
    }
    if let Some(m) = n.memory_bandwidth {
        s.push_str(&format!(", memory bandwidth {} GB/s", bw(m)));
    }
    if let Some(p) = n.port {
        s.push_str(&format!(", port {}", link_text(p, p.bandwidth(), false)));
    }
    if n.reduction {
        s.push_str(", in-switch reduction");
    }
    if let Some(c) = n.chips {
        s.push_str(&format!(", {c} chips"));
    }
    for (k, v) in &n.props {
        if k != "pci_id" && k != "nvml" {
            s.push_str(&format!(", {k} {v}"));
        }
    }
    s
}

fn is_attachment(k: LinkKind) -> bool {
    matches!(
        k,
        LinkKind::Pcie { .. } | LinkKind::Integrated | LinkKind::NvLinkC2c
    )
}

fn print_host_tree(out: &mut impl Write, t: &Topology, host: NodeIx) -> anyhow::Result<()> {
    writeln!(out, "{}", node_line(t, host))?;
    let cpus = t.nodes_in_host(host, NodeKind::Cpu);
    // Spanning tree over attachment links (PCIe, C2C, integrated) from the CPUs.
    let mut parent: BTreeMap<NodeIx, (NodeIx, String)> = BTreeMap::new();
    let mut seen: Vec<bool> = vec![false; t.nodes().len()];
    let mut queue: std::collections::VecDeque<NodeIx> = cpus.iter().copied().collect();
    for &c in &cpus {
        seen[c.index()] = true;
    }
    while let Some(u) = queue.pop_front() {
        for &(l, d) in t.links_of(u) {
            let link = t.link(l);
            let v = link.head(d);
            if seen[v.index()] || !is_attachment(link.kind) || t.node(v).kind == NodeKind::Cpu {
                continue;
            }
            if t.node(u).kind == NodeKind::Gpu {
                continue; // GPUs are leaves (C2C reaches the GPU, not past it)
            }
            seen[v.index()] = true;
            parent.insert(
                v,
                (
                    u,
                    link_text(link.kind, link.bandwidth, link.bandwidth_overridden),
                ),
            );
            queue.push_back(v);
        }
    }
    let mut children: BTreeMap<NodeIx, Vec<(NodeIx, String)>> = BTreeMap::new();
    for (c, (p, l)) in &parent {
        children.entry(*p).or_default().push((*c, l.clone()));
    }
    fn walk(
        out: &mut impl Write,
        t: &Topology,
        children: &BTreeMap<NodeIx, Vec<(NodeIx, String)>>,
        at: NodeIx,
        prefix: &str,
    ) -> anyhow::Result<()> {
        let Some(kids) = children.get(&at) else {
            return Ok(());
        };
        let (others, shown): (Vec<_>, Vec<_>) = kids.iter().partition(|(c, _)| {
            t.node(*c).kind == NodeKind::PcieDevice && !children.contains_key(c)
        });
        let collapse = others.len() > 6;
        let mut items: Vec<&(NodeIx, String)> = shown;
        if !collapse {
            items.extend(others.iter().copied());
            items.sort_by_key(|x| x.0);
        }
        let n = items.len() + usize::from(collapse);
        for (i, (c, l)) in items.iter().enumerate() {
            let last = i + 1 == n;
            writeln!(
                out,
                "{prefix}{} {}  ({l})",
                if last { "└─" } else { "├─" },
                node_line(t, *c)
            )?;
            let next = format!("{prefix}{}", if last { "   " } else { "│  " });
            walk(out, t, children, *c, &next)?;
        }
        if collapse {
            let mut names: Vec<String> = others
                .iter()
                .map(|(c, _)| t.node(*c).label.clone())
                .collect();
            names.sort();
            names.dedup();
            writeln!(
                out,
                "{prefix}└─ {} other PCIe devices ({})",
                others.len(),
                names.join(", ")
            )?;
        }
        Ok(())
    }
    for (i, &c) in cpus.iter().enumerate() {
        let last = i + 1 == cpus.len();
        writeln!(
            out,
            "{}{}",
            if last { "└─ " } else { "├─ " },
            node_line(t, c)
        )?;
        walk(out, t, &children, c, if last { "   " } else { "│  " })?;
    }
    Ok(())
}

fn print_summary(out: &mut impl Write, t: &Topology) -> anyhow::Result<()> {
    let count = |k| t.nodes_of_kind(k).count();
    writeln!(out, "Topology {}: {}", t.name(), t.description())?;
    writeln!(
        out,
        "  hosts {}, CPUs/NUMA nodes {}, GPUs {}, NICs {}, PCIe switches {}, NVSwitch nodes {}, network switches {}, storage {}, other PCIe devices {}",
        count(NodeKind::Host),
        count(NodeKind::Cpu),
        count(NodeKind::Gpu),
        count(NodeKind::Nic),
        count(NodeKind::PcieSwitch),
        count(NodeKind::NvSwitch),
        count(NodeKind::NetSwitch),
        count(NodeKind::Storage),
        count(NodeKind::PcieDevice),
    )?;
    let (nv, net) = t.reduction_support();
    if nv || net {
        let mut what = Vec::new();
        if nv {
            what.push("NVSwitch (NVLink SHARP / NVLS)");
        }
        if net {
            what.push("network switches (SHARP)");
        }
        writeln!(out, "  in-network reduction: {}", what.join(", "))?;
    }
    writeln!(out)?;
    let hosts = t.hosts();
    let shown = if hosts.len() > 2 { 1 } else { hosts.len() };
    for &h in &hosts[..shown] {
        print_host_tree(out, t, h)?;
    }
    if hosts.len() > shown {
        writeln!(out, "... and {} more hosts like it", hosts.len() - shown)?;
    }
    // Links that are not part of a tree: NVLink, CPU-CPU, network; grouped.
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let shown_hosts: Vec<NodeIx> = hosts[..shown].to_vec();
    let in_shown = |ix: NodeIx| match t.node(ix).host {
        Some(h) => shown_hosts.contains(&h),
        None => true,
    };
    let mut hidden = 0usize;
    for l in t.links() {
        if is_attachment(l.kind) {
            continue;
        }
        if !(in_shown(l.a) && in_shown(l.b)) {
            hidden += 1;
            continue;
        }
        let group = if l.kind.is_nvlink() {
            "NVLink"
        } else if l.kind.is_network() {
            "Network"
        } else {
            "CPU interconnect"
        };
        groups.entry(group.to_string()).or_default().push(format!(
            "{} <-> {}: {}",
            t.node(l.a).id,
            t.node(l.b).id,
            link_text(l.kind, l.bandwidth, l.bandwidth_overridden)
        ));
    }
    for (g, items) in &groups {
        writeln!(out, "{g} links:")?;
        let limit = 40;
        for s in items.iter().take(limit) {
            writeln!(out, "  {s}")?;
        }
        if items.len() > limit {
            writeln!(out, "  ... {} more", items.len() - limit)?;
        }
    }
    if hidden > 0 {
        writeln!(out, "({hidden} links of the other hosts not listed)")?;
    }
    Ok(())
}

/// More devices than this, and the matrices show the first host's only
/// (unless `--all`).
const MATRIX_LIMIT: usize = 24;

/// Devices for the matrices: GPUs then NICs, limited to the first host
/// when there are more than [`MATRIX_LIMIT`] (unless `all`); and whether
/// the limit left any out.
fn matrix_devices(t: &Topology, all: bool) -> (Vec<(String, NodeIx)>, bool) {
    let gpus: Vec<NodeIx> = t.gpus().to_vec();
    let nics: Vec<NodeIx> = t.nodes_of_kind(NodeKind::Nic).collect();
    let multi = t.hosts().len() > 1;
    let label = |prefix: &str, i: usize, ix: NodeIx| {
        if multi {
            let h = t
                .node(ix)
                .host
                .map(|h| t.node(h).id.clone())
                .unwrap_or_default();
            format!("{h}.{prefix}{i}")
        } else {
            format!("{prefix}{i}")
        }
    };
    let mut limited = false;
    let keep = |ix: &NodeIx| all || t.hosts().is_empty() || t.node(*ix).host == Some(t.hosts()[0]);
    let too_many = gpus.len() + nics.len() > MATRIX_LIMIT;
    let mut devs = Vec::new();
    let mut host_idx: BTreeMap<Option<NodeIx>, (usize, usize)> = BTreeMap::new();
    for &g in &gpus {
        let e = host_idx.entry(t.node(g).host).or_default();
        let i = e.0;
        e.0 += 1;
        if !too_many || keep(&g) {
            devs.push((label("GPU", i, g), g));
        } else {
            limited = true;
        }
    }
    for &n in &nics {
        let e = host_idx.entry(t.node(n).host).or_default();
        let i = e.1;
        e.1 += 1;
        if !too_many || keep(&n) {
            devs.push((label("NIC", i, n), n));
        } else {
            limited = true;
        }
    }
    (devs, limited)
}

fn print_grid(out: &mut impl Write, header: &[String], rows: &[Vec<String>]) -> anyhow::Result<()> {
    let width: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = width[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    writeln!(out, "{}", line(header))?;
    for r in rows {
        writeln!(out, "{}", line(r))?;
    }
    Ok(())
}

/// What to say when the first-host limit of [`matrix_devices`] left no
/// device for a matrix (`what`: "device matrix"): there are devices, but
/// more than the limit and none in the first host (they name no host).
fn filtered_out(t: &Topology, what: &str) -> String {
    let nics = t.nodes_of_kind(NodeKind::Nic).count();
    let first = t.hosts().first().map_or("", |&h| t.node(h).id.as_str());
    format!(
        "{} GPUs and {nics} NICs, more than the {MATRIX_LIMIT} a {what} shows without --all, \
         and none of them in the first host {first:?} (the ones without a host are left \
         out): no {what}; --all shows every device.",
        t.gpus().len()
    )
}

fn print_matrix(out: &mut impl Write, t: &Topology, all: bool) -> anyhow::Result<()> {
    let (devs, limited) = matrix_devices(t, all);
    if devs.is_empty() && limited {
        writeln!(out, "{}", filtered_out(t, "device matrix"))?;
        return Ok(());
    }
    if devs.is_empty() {
        writeln!(out, "No GPUs or NICs found, so no device matrix.")?;
        return Ok(());
    }
    if t.gpus().is_empty() {
        writeln!(out, "No GPUs found; matrix of the NICs:")?;
    }
    let mut header = vec![String::new()];
    header.extend(devs.iter().map(|d| d.0.clone()));
    // nvidia-smi's three affinity columns. A NIC row leaves them blank, as
    // nvidia-smi does; GPU NUMA ID is the GPU's own NUMA node where its
    // memory is one (Grace machines), which the model does not hold: N/A.
    header.push("CPU Affinity".into());
    header.push("NUMA Affinity".into());
    header.push("GPU NUMA ID".into());
    let mut rows = Vec::new();
    for (name, a) in &devs {
        let mut row = vec![name.clone()];
        for (_, b) in &devs {
            row.push(match t.path(*a, *b) {
                Ok(p) => p.class.to_string(),
                Err(_) => "-".into(),
            });
        }
        if t.node(*a).kind == NodeKind::Gpu {
            let cpu = t.local_cpu(*a);
            row.push(
                cpu.and_then(|c| t.node(c).props.get("cpus").cloned())
                    .map(|s| s.split(' ').next().unwrap_or("").to_string())
                    .unwrap_or_else(|| "N/A".into()),
            );
            row.push(
                t.node(*a)
                    .numa
                    .or_else(|| cpu.and_then(|c| t.node(c).numa))
                    .map_or("N/A".into(), |n| n.to_string()),
            );
            row.push("N/A".into());
        } else {
            row.extend([String::new(), String::new(), String::new()]);
        }
        rows.push(row);
    }
    print_grid(out, &header, &rows)?;
    if limited {
        writeln!(out, "(first host only; --all for every device)")?;
    }
    writeln!(out, "\nLegend:\n\n{}", PathClass::LEGEND)?;
    let nic_names: Vec<String> = devs
        .iter()
        .filter(|d| t.node(d.1).kind == NodeKind::Nic)
        .map(|(name, ix)| {
            let n = t.node(*ix);
            let ports = n
                .props
                .get("ports")
                .cloned()
                .unwrap_or_else(|| n.id.clone());
            format!("  {name}: {ports}")
        })
        .collect();
    if !nic_names.is_empty() {
        writeln!(out, "\nNIC Legend:\n\n{}", nic_names.join("\n"))?;
    }
    Ok(())
}

/// The GPUs of the device matrix, and whether they are the first host's only.
fn matrix_gpus(t: &Topology, all: bool) -> (Vec<(String, NodeIx)>, bool) {
    let (devs, limited) = matrix_devices(t, all);
    let gpus = devs
        .into_iter()
        .filter(|d| t.node(d.1).kind == NodeKind::Gpu)
        .collect();
    (gpus, limited)
}

/// A GPU-by-GPU grid: the header (an empty corner, then the names) and a
/// row per GPU, `X` on the diagonal and `cell(a, b)` elsewhere.
fn gpu_grid(
    gpus: &[(String, NodeIx)],
    cell: impl Fn(NodeIx, NodeIx) -> String,
) -> (Vec<String>, Vec<Vec<String>>) {
    let mut header = vec![String::new()];
    header.extend(gpus.iter().map(|d| d.0.clone()));
    let rows = gpus
        .iter()
        .map(|(name, a)| {
            let mut row = vec![name.clone()];
            row.extend(
                gpus.iter()
                    .map(|(_, b)| if a == b { "X".into() } else { cell(*a, *b) }),
            );
            row
        })
        .collect();
    (header, rows)
}

/// Which GPU pairs can use GPUDirect P2P, in `nvidia-smi topo -p2p r`'s
/// words (`OK`; `TNS`, topology not supported).
fn print_p2p(out: &mut impl Write, t: &Topology, all: bool) -> anyhow::Result<()> {
    let (gpus, limited) = matrix_gpus(t, all);
    if gpus.is_empty() && limited && !t.gpus().is_empty() {
        writeln!(out, "{}", filtered_out(t, "P2P matrix"))?;
        return Ok(());
    }
    if gpus.is_empty() {
        writeln!(out, "No GPUs, so no P2P matrix.")?;
        return Ok(());
    }
    writeln!(out, "GPUDirect P2P between GPUs (from the topology):")?;
    let (header, rows) = gpu_grid(&gpus, |a, b| match t.path(a, b) {
        Ok(p) if p.p2p => "OK".into(),
        Ok(_) => "TNS".into(),
        Err(_) => "U".into(),
    });
    print_grid(out, &header, &rows)?;
    writeln!(
        out,
        "\nLegend:\n\n  X    = Self\n  OK   = Status Ok (NVLink, or PCIe within one CPU socket)\n  TNS  = Topology not supported (PCIe across the SMP link between sockets, or another host)\n  U    = Unknown (no route)"
    )?;
    if limited {
        writeln!(out, "(first host only; --all for every GPU)")?;
    }
    Ok(())
}

fn print_bandwidth(out: &mut impl Write, t: &Topology, all: bool) -> anyhow::Result<()> {
    let (gpus, limited) = matrix_gpus(t, all);
    if gpus.is_empty() && limited && !t.gpus().is_empty() {
        writeln!(out, "{}", filtered_out(t, "bandwidth matrix"))?;
        return Ok(());
    }
    if gpus.is_empty() {
        writeln!(out, "No GPUs, so no bandwidth matrix.")?;
        return Ok(());
    }
    writeln!(
        out,
        "Bottleneck bandwidth, GB/s per direction (bidirectional is twice); Host = the GPU's local CPU memory:"
    )?;
    let (mut header, mut rows) = gpu_grid(&gpus, |a, b| {
        t.path(a, b).map_or("-".into(), |p| bw(p.bandwidth))
    });
    header.push("Host".into());
    for (row, (_, a)) in rows.iter_mut().zip(&gpus) {
        row.push(
            t.local_cpu(*a)
                .and_then(|c| t.path(c, *a).ok())
                .map_or("-".into(), |p| bw(p.bandwidth)),
        );
    }
    print_grid(out, &header, &rows)?;
    if limited {
        writeln!(out, "(first host only; --all for every GPU)")?;
    }
    Ok(())
}

fn print_path(out: &mut impl Write, t: &Topology, a: &str, b: &str) -> anyhow::Result<()> {
    let find = |id: &str| {
        t.find(id)
            .with_context(|| {
                let some: Vec<&str> = t.nodes().iter().take(12).map(|n| n.id.as_str()).collect();
                format!(
                    "no node {id:?} in {} (ids look like: {})",
                    t.name(),
                    some.join(", ")
                )
            })
            .or_usage()
    };
    let (x, y) = (find(a)?, find(b)?);
    if x == y {
        // No hop: it printed an infinite bottleneck.
        usage!("--path {a} {b}: the same node twice (give two different nodes)");
    }
    let p = t.path(x, y)?;
    writeln!(out, "{a} -> {b}: {}", p.class)?;
    let mut at = x;
    for h in &p.hops {
        let l = t.link(h.link);
        let next = l.head(h.dir);
        writeln!(
            out,
            "  {} -> {}  {}, {} us",
            t.node(at).id,
            t.node(next).id,
            link_text(l.kind, l.bandwidth, l.bandwidth_overridden),
            l.latency_us
        )?;
        at = next;
    }
    writeln!(
        out,
        "bottleneck {} GB/s per direction ({} bidirectional), latency {:.2} us, GPUDirect P2P: {}, GPUDirect RDMA: {}",
        bw(p.bandwidth),
        bw(2.0 * p.bandwidth),
        p.latency_us,
        if p.p2p { "yes" } else { "no" },
        if p.rdma { "yes" } else { "no" }
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option of `gpucomm topo` but the listings themselves (and
    /// --json, which they print with) is refused beside --list and
    /// --catalog: an option added later and left out of MACHINE_OPTIONS
    /// would be ignored silently.
    #[test]
    fn the_listings_refuse_every_machine_option() {
        use clap::{Args as _, Command};
        let cmd = Args::augment_args(Command::new("topo"));
        let mut ids: Vec<&str> = cmd
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .filter(|id| !["list", "catalog", "json"].contains(id))
            .collect();
        ids.sort_unstable();
        let mut listed = MACHINE_OPTIONS.to_vec();
        listed.sort_unstable();
        assert_eq!(ids, listed);
    }

    fn render(f: impl Fn(&mut Vec<u8>) -> anyhow::Result<()>) -> String {
        let mut buf = Vec::new();
        f(&mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn dgx1_matrix_is_the_hybrid_cube_mesh() {
        let t = gpucomm_topo::preset("dgx1-v100").unwrap();
        let out = render(|b| print_matrix(b, &t, false));
        let row0 = out.lines().find(|l| l.starts_with("GPU0 ")).unwrap();
        let cells: Vec<&str> = row0.split_whitespace().collect();
        assert_eq!(
            &cells[1..9],
            ["X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]
        );
        assert!(out.contains("NV#  = Connection traversing a bonded set of # NVLinks"));
        let p2p = render(|b| print_p2p(b, &t, false));
        let row0 = p2p.lines().find(|l| l.starts_with("GPU0 ")).unwrap();
        assert_eq!(
            row0.split_whitespace().collect::<Vec<_>>(),
            ["GPU0", "X", "OK", "OK", "OK", "OK", "TNS", "TNS", "TNS"]
        );
        assert!(p2p.contains("TNS  = Topology not supported"));
        let bw = render(|b| print_bandwidth(b, &t, false));
        let row3 = bw.lines().find(|l| l.starts_with("GPU3 ")).unwrap();
        assert_eq!(
            row3.split_whitespace().collect::<Vec<_>>(),
            [
                "GPU3", "50.0", "25.0", "50.0", "X", "15.8", "15.8", "15.8", "25.0", "15.8"
            ]
        );
    }

    #[test]
    fn summary_and_path_of_a_cluster() {
        let opts = ClusterOptions {
            nodes: 3,
            ..Default::default()
        };
        let t = gpucomm_topo::select("dgx-h100", &opts).unwrap();
        let out = render(|b| print_summary(b, &t));
        assert!(out.contains("hosts 3,"));
        assert!(out.contains("... and 2 more hosts like it"));
        assert!(out.contains("in-network reduction: NVSwitch"));
        let p = render(|b| print_path(b, &t, "n0.gpu2", "n2.gpu2"));
        assert!(p.starts_with("n0.gpu2 -> n2.gpu2: NET"), "{p}");
        assert!(p.contains("n0.nic2 -> rail2"));
        assert!(p.contains("GPUDirect RDMA: yes"));
        let e = print_path(&mut Vec::new(), &t, "gpu0", "n0.gpu1").unwrap_err();
        assert!(e.to_string().contains("no node \"gpu0\""));
        // Large clusters print the first host's matrix only.
        let m = render(|b| print_matrix(b, &t, false));
        assert!(m.contains("(first host only; --all for every device)"));
    }

    #[test]
    fn machine_without_gpus_prints_its_nics() {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../gpucomm-topo/tests/fixtures/pcie-server");
        let t = gpucomm_topo::discover(&DiscoverOptions { root, nvml: false }).unwrap();
        let out = render(|b| print_summary(b, &t));
        assert!(out.contains("gpu0 [gpu] NVIDIA A100 PCIe 80GB @0000:19:00.0"));
        assert!(out.contains("ports mlx5_0,ib0"));
        let this = gpucomm_topo::discover(&DiscoverOptions::default()).unwrap();
        let m = render(|b| print_matrix(b, &this, false));
        if this.gpus().is_empty() && this.nodes_of_kind(NodeKind::Nic).count() > 0 {
            assert!(m.starts_with("No GPUs found; matrix of the NICs:"));
        }
    }

    #[test]
    fn docs_carry_the_current_catalog_table() {
        let doc =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/topology.md");
        let doc = std::fs::read_to_string(doc).unwrap();
        for line in catalog_table().to_string().lines() {
            assert!(
                doc.contains(line.trim_end()),
                "docs/topology.md lacks catalog row {line:?}; paste `gpucomm topo --catalog`"
            );
        }
    }

    #[test]
    fn catalog_and_options() {
        let t = catalog_table().to_string();
        assert!(t.contains("InfiniBand NDR200") && t.contains("| 25.00"));
        let bad = ClusterArgs {
            nodes: 2,
            gpus: None,
            nics: None,
            nic_speed: Some("fast".into()),
            fabric: None,
            oversubscription: None,
            nodes_per_leaf: None,
            sharp: false,
        };
        assert!(
            options(&bad)
                .unwrap_err()
                .to_string()
                .contains("--nic-speed")
        );
    }
}
