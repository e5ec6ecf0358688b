//! The topology file format: TOML or JSON, versioned.
//!
//! ```toml
//! version = 1
//! name = "two-gpus"
//!
//! [[node]]
//! id = "host0"
//! kind = "host"
//!
//! [[node]]
//! id = "gpu0"
//! kind = "gpu"
//! host = "host0"
//!
//! [[node]]
//! id = "gpu1"
//! kind = "gpu"
//! host = "host0"
//!
//! [[link]]
//! a = "gpu0"
//! b = "gpu1"
//! kind = "nvlink"
//! gen = 4
//! count = 18
//! ```
//!
//! Every field is described in `docs/topology.md`. Loading checks
//! everything and names the file, the field (`link[3].kind`) and the
//! problem.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::catalog::{
    IbSpeed, LinkKind, MAX_ETHERNET_GBIT, NvLinkGen, PcieGen, parse_port, port_name,
};
use crate::error::TopoError;
use crate::hardware::GpuArch;
use crate::model::{Link, Node, NodeIx, NodeKind, Topology, TopologyBuilder};

/// The file format version this crate reads and writes.
pub const FORMAT_VERSION: i64 = 1;

/// A topology file as it is on disk (TOML or JSON).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    /// Format version; must be [`FORMAT_VERSION`].
    pub version: Option<i64>,
    /// Name of the topology.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// One-line description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Nodes; GPUs' rank order is their order here.
    #[serde(default)]
    pub node: Vec<NodeEntry>,
    /// Links.
    #[serde(default)]
    pub link: Vec<LinkEntry>,
}

/// A node in a file.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    /// Unique id.
    pub id: String,
    /// `host`, `cpu`, `pcie-switch`, `gpu`, `nic`, `nvswitch`, `switch`,
    /// `storage`, `pcie-device`.
    pub kind: String,
    /// Model or description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// Id of the host node this node is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// NUMA node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa: Option<i64>,
    /// CPU socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<i64>,
    /// PCI address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    /// PCIe root complex (host bridge) name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_complex: Option<String>,
    /// In-network reduction (NVSwitch NVLS, InfiniBand SHARP).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reduction: bool,
    /// Chips behind a logical NVSwitch node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chips: Option<i64>,
    /// NIC port speed: `edr`, `hdr`, `ndr`, `ndr200`, `xdr`, `roce400`, `eth100`...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// GPU architecture: `pascal`, `volta`, `ampere`, `ada`, `hopper`,
    /// `blackwell` (default: inferred from the label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Memory bandwidth in GB/s: a GPU's device memory, a CPU socket's
    /// memory (default: inferred from the label; CPUs 204.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bandwidth: Option<f64>,
    /// Free-form properties.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub props: BTreeMap<String, String>,
}

/// A link in a file.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkEntry {
    /// Id of one end.
    pub a: String,
    /// Id of the other end.
    pub b: String,
    /// `pcie`, `nvlink`, `infiniband` (or `ib`), `ethernet`, `roce`, `qpi`,
    /// `upi`, `infinity-fabric`, `nvlink-c2c`, `smp`, `integrated`.
    pub kind: String,
    /// Generation: PCIe 1–6, NVLink 1–5.
    #[serde(default, rename = "gen", skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// PCIe lanes (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<i64>,
    /// Links or ports in the bundle (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// InfiniBand speed: `fdr`, `edr`, `hdr100`, `hdr`, `ndr200`, `ndr`, `xdr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<String>,
    /// Ethernet / RoCE port speed in Gb/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbit: Option<i64>,
    /// QPI / UPI / Infinity Fabric transfer rate in GT/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_gts: Option<f64>,
    /// Bandwidth per direction in GB/s, overriding the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<f64>,
    /// Latency in µs, overriding the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
}

/// File formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// TOML.
    Toml,
    /// JSON.
    Json,
}

impl Format {
    /// From a file name: `.json` is JSON, anything else TOML.
    pub fn from_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Toml,
        }
    }
}

fn bad(field: String, problem: impl Into<String>) -> TopoError {
    TopoError::invalid(field, problem)
}

fn small(field: String, v: i64, lo: i64, hi: i64) -> Result<i64, TopoError> {
    if v < lo || v > hi {
        return Err(bad(field, format!("{v} is out of range ({lo} to {hi})")));
    }
    Ok(v)
}

impl LinkEntry {
    fn link_kind(&self, i: usize) -> Result<LinkKind, TopoError> {
        let f = |name: &str| format!("link[{i}].{name}");
        let used: &[&str] = match self.kind.as_str() {
            "pcie" => &["gen", "width"],
            "nvlink" => &["gen", "count"],
            "infiniband" | "ib" => &["speed", "count"],
            "ethernet" | "roce" => &["gbit", "count"],
            "qpi" | "upi" | "infinity-fabric" => &["rate_gts", "count"],
            _ => &[],
        };
        let present = [
            ("gen", self.generation.is_some()),
            ("width", self.width.is_some()),
            ("count", self.count.is_some()),
            ("speed", self.speed.is_some()),
            ("gbit", self.gbit.is_some()),
            ("rate_gts", self.rate_gts.is_some()),
        ];
        let known = [
            "pcie",
            "nvlink",
            "infiniband",
            "ib",
            "ethernet",
            "roce",
            "qpi",
            "upi",
            "infinity-fabric",
            "nvlink-c2c",
            "smp",
            "integrated",
        ];
        if !known.contains(&self.kind.as_str()) {
            return Err(bad(
                f("kind"),
                format!(
                    "unknown link kind {:?} (expected one of: {})",
                    self.kind,
                    known.join(", ")
                ),
            ));
        }
        for (name, p) in present {
            if p && !used.contains(&name) {
                return Err(bad(
                    f(name),
                    format!("not used by links of kind {:?}", self.kind),
                ));
            }
        }
        let count = |max: i64| -> Result<i64, TopoError> {
            small(f("count"), self.count.unwrap_or(1), 1, max)
        };
        let need = |name: &str| {
            bad(
                f(name),
                format!("required for links of kind {:?}", self.kind),
            )
        };
        Ok(match self.kind.as_str() {
            "pcie" => {
                let g = self.generation.ok_or_else(|| need("gen"))?;
                let generation =
                    PcieGen::from_number(small(f("gen"), g, 1, 6)? as u8).expect("range checked");
                let width = self.width.unwrap_or(16);
                if ![1, 2, 4, 8, 12, 16, 32].contains(&width) {
                    return Err(bad(
                        f("width"),
                        format!("{width} is not a PCIe width (1, 2, 4, 8, 12, 16, 32)"),
                    ));
                }
                LinkKind::Pcie {
                    generation,
                    width: width as u8,
                }
            }
            "nvlink" => {
                let g = self.generation.ok_or_else(|| need("gen"))?;
                let generation =
                    NvLinkGen::from_number(small(f("gen"), g, 1, 5)? as u8).expect("range checked");
                LinkKind::NvLink {
                    generation,
                    count: count(255)? as u8,
                }
            }
            "infiniband" | "ib" => {
                let s = self.speed.as_deref().ok_or_else(|| need("speed"))?;
                let speed = IbSpeed::parse(s).ok_or_else(|| {
                    bad(
                        f("speed"),
                        format!(
                            "unknown InfiniBand speed {s:?} (expected one of: {})",
                            IbSpeed::ALL.map(|s| s.name()).join(", ")
                        ),
                    )
                })?;
                LinkKind::Infiniband {
                    speed,
                    count: count(65535)? as u16,
                }
            }
            "ethernet" | "roce" => {
                let g = self.gbit.ok_or_else(|| need("gbit"))?;
                LinkKind::Ethernet {
                    gbit: small(f("gbit"), g, 1, i64::from(MAX_ETHERNET_GBIT))? as u16,
                    count: count(65535)? as u16,
                    roce: self.kind == "roce",
                }
            }
            "qpi" | "upi" | "infinity-fabric" => {
                let r = self.rate_gts.ok_or_else(|| need("rate_gts"))?;
                if !(r.is_finite() && r > 0.0 && r <= 64.0) {
                    return Err(bad(
                        f("rate_gts"),
                        format!("{r} is not a transfer rate in GT/s (0 to 64)"),
                    ));
                }
                let mts = (r * 1000.0).round() as u16;
                // A rate under half an MT/s rounds to 0: a link of no
                // bandwidth, which the error used to blame on `bandwidth`,
                // a field the file need not have.
                if mts == 0 {
                    return Err(bad(
                        f("rate_gts"),
                        format!(
                            "{r} GT/s is below 0.001 GT/s (1 MT/s), the finest rate a link holds"
                        ),
                    ));
                }
                let count = count(16)? as u8;
                match self.kind.as_str() {
                    "qpi" => LinkKind::Qpi { mts, count },
                    "upi" => LinkKind::Upi { mts, count },
                    _ => LinkKind::InfinityFabric { mts, count },
                }
            }
            "nvlink-c2c" => LinkKind::NvLinkC2c,
            "integrated" => LinkKind::Integrated,
            _ => LinkKind::Smp,
        })
    }

    fn from_link(t: &Topology, l: &Link) -> LinkEntry {
        let mut e = LinkEntry {
            a: t.node(l.a).id.clone(),
            b: t.node(l.b).id.clone(),
            kind: l.kind.kind_name().to_string(),
            ..Default::default()
        };
        let count = |c: i64| if c == 1 { None } else { Some(c) };
        match l.kind {
            LinkKind::Pcie { generation, width } => {
                e.generation = Some(generation.number().into());
                e.width = Some(width.into());
            }
            LinkKind::NvLink {
                generation,
                count: c,
            } => {
                e.generation = Some(generation.number().into());
                e.count = Some(c.into());
            }
            LinkKind::Infiniband { speed, count: c } => {
                e.speed = Some(speed.name().into());
                e.count = count(c.into());
            }
            LinkKind::Ethernet { gbit, count: c, .. } => {
                e.gbit = Some(gbit.into());
                e.count = count(c.into());
            }
            LinkKind::Qpi { mts, count: c }
            | LinkKind::Upi { mts, count: c }
            | LinkKind::InfinityFabric { mts, count: c } => {
                e.rate_gts = Some(f64::from(mts) / 1000.0);
                e.count = count(c.into());
            }
            LinkKind::NvLinkC2c | LinkKind::Smp | LinkKind::Integrated => {}
        }
        if l.bandwidth_overridden {
            e.bandwidth = Some(l.bandwidth);
        }
        if l.latency_overridden {
            e.latency_us = Some(l.latency_us);
        }
        e
    }
}

impl TopologyFile {
    /// Converts to a validated [`Topology`]. Errors name the field
    /// (`node[2].host`) but no file; [`load`] adds the file.
    pub fn to_topology(&self) -> Result<Topology, TopoError> {
        match self.version {
            None => return Err(bad("version".into(), "missing (expected version = 1)")),
            Some(FORMAT_VERSION) => {}
            Some(v) => {
                return Err(bad(
                    "version".into(),
                    format!("unsupported version {v} (this build reads version {FORMAT_VERSION})"),
                ));
            }
        }
        let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, n) in self.node.iter().enumerate() {
            if n.id.trim().is_empty() {
                return Err(bad(format!("node[{i}].id"), "empty id"));
            }
            if let Some(first) = ids.insert(n.id.as_str(), i) {
                return Err(bad(
                    format!("node[{i}].id"),
                    format!("duplicate id {:?} (also node[{first}])", n.id),
                ));
            }
        }
        let mut b = TopologyBuilder::new(self.name.clone());
        b.description(self.description.clone());
        for (i, e) in self.node.iter().enumerate() {
            let f = |name: &str| format!("node[{i}].{name}");
            let kind = NodeKind::parse(&e.kind).ok_or_else(|| {
                bad(
                    f("kind"),
                    format!(
                        "unknown node kind {:?} (expected one of: {})",
                        e.kind,
                        NodeKind::ALL.map(|k| k.name()).join(", ")
                    ),
                )
            })?;
            let mut n = Node::new(e.id.clone(), kind).with_label(e.label.clone());
            // Fields that mean nothing on this kind are refused, not
            // silently dropped.
            if kind == NodeKind::Host && e.host.is_some() {
                return Err(bad(
                    f("host"),
                    format!("node {:?} is a host: a host belongs to no host", e.id),
                ));
            }
            if e.reduction && !matches!(kind, NodeKind::NvSwitch | NodeKind::NetSwitch) {
                return Err(bad(
                    f("reduction"),
                    format!(
                        "node {:?} is a {kind}: only nvswitch (NVLS) and switch (SHARP) \
                         nodes reduce in the network",
                        e.id
                    ),
                ));
            }
            if e.chips.is_some() && kind != NodeKind::NvSwitch {
                return Err(bad(
                    f("chips"),
                    format!(
                        "node {:?} is a {kind}: only nvswitch nodes have chips",
                        e.id
                    ),
                ));
            }
            if let Some(h) = &e.host {
                match ids.get(h.as_str()) {
                    Some(&hi) if self.node[hi].kind == "host" => n.host = Some(NodeIx(hi as u32)),
                    Some(_) => {
                        return Err(bad(
                            f("host"),
                            format!("{h:?} is not a node of kind \"host\""),
                        ));
                    }
                    None => return Err(bad(f("host"), format!("no node with id {h:?}"))),
                }
            }
            let nonneg = |name: &str, v: Option<i64>| -> Result<Option<u32>, TopoError> {
                v.map(|v| small(f(name), v, 0, i64::from(u32::MAX)).map(|v| v as u32))
                    .transpose()
            };
            n.numa = nonneg("numa", e.numa)?;
            n.socket = nonneg("socket", e.socket)?;
            n.chips = nonneg("chips", e.chips)?;
            n.pci_address = e.pci.clone();
            n.root_complex = e.root_complex.clone();
            n.reduction = e.reduction;
            if let Some(p) = &e.port {
                if kind != NodeKind::Nic {
                    return Err(bad(f("port"), "only NICs have a port speed"));
                }
                n.port = Some(parse_port(p).ok_or_else(|| {
                    bad(
                        f("port"),
                        format!(
                            "unknown port speed {p:?} (e.g. hdr, ndr, ndr200, roce400, eth100; \
                             Ethernet 1 to {MAX_ETHERNET_GBIT} Gb/s)"
                        ),
                    )
                })?);
            }
            if let Some(a) = &e.arch {
                if kind != NodeKind::Gpu {
                    return Err(bad(f("arch"), "only GPUs have an architecture"));
                }
                n.arch = Some(GpuArch::parse(a).ok_or_else(|| {
                    bad(
                        f("arch"),
                        format!(
                            "unknown GPU architecture {a:?} (expected one of: {})",
                            GpuArch::ALL.map(|a| a.name()).join(", ")
                        ),
                    )
                })?);
            }
            if let Some(bw) = e.memory_bandwidth {
                if !matches!(kind, NodeKind::Gpu | NodeKind::Cpu) {
                    return Err(bad(
                        f("memory_bandwidth"),
                        "only GPUs and CPUs have a memory bandwidth",
                    ));
                }
                if !(bw.is_finite() && bw > 0.0) {
                    return Err(bad(
                        f("memory_bandwidth"),
                        format!("must be a positive number of GB/s, got {bw}"),
                    ));
                }
                n.memory_bandwidth = Some(bw);
            }
            n.props = e.props.clone();
            b.node(n);
        }
        for (i, e) in self.link.iter().enumerate() {
            let f = |name: &str| format!("link[{i}].{name}");
            let end = |name: &str, id: &str| -> Result<NodeIx, TopoError> {
                ids.get(id)
                    .map(|&x| NodeIx(x as u32))
                    .ok_or_else(|| bad(f(name), format!("no node with id {id:?}")))
            };
            let a = end("a", &e.a)?;
            let bb = end("b", &e.b)?;
            let kind = e.link_kind(i)?;
            let mut l = Link::new(a, bb, kind);
            if let Some(bw) = e.bandwidth {
                if !(bw.is_finite() && bw > 0.0) {
                    return Err(bad(
                        f("bandwidth"),
                        format!("must be a positive number of GB/s per direction, got {bw}"),
                    ));
                }
                l = l.with_bandwidth(bw);
            }
            if let Some(lat) = e.latency_us {
                if !(lat.is_finite() && lat >= 0.0) {
                    return Err(bad(
                        f("latency_us"),
                        format!("must be zero or a positive number of microseconds, got {lat}"),
                    ));
                }
                l = l.with_latency(lat);
            }
            b.push_link(l);
        }
        b.build()
    }

    /// The file form of a topology.
    pub fn from_topology(t: &Topology) -> TopologyFile {
        let node = t
            .nodes()
            .iter()
            .map(|n| NodeEntry {
                id: n.id.clone(),
                kind: n.kind.name().to_string(),
                label: n.label.clone(),
                host: n.host.map(|h| t.node(h).id.clone()),
                numa: n.numa.map(i64::from),
                socket: n.socket.map(i64::from),
                pci: n.pci_address.clone(),
                root_complex: n.root_complex.clone(),
                reduction: n.reduction,
                chips: n.chips.map(i64::from),
                port: n.port.and_then(port_name),
                arch: n.arch.map(|a| a.name().to_string()),
                memory_bandwidth: n.memory_bandwidth,
                props: n.props.clone(),
            })
            .collect();
        let link = t
            .links()
            .iter()
            .map(|l| LinkEntry::from_link(t, l))
            .collect();
        TopologyFile {
            version: Some(FORMAT_VERSION),
            name: t.name().to_string(),
            description: t.description().to_string(),
            node,
            link,
        }
    }
}

/// The field at a line of a topology file, as `, field link[2].gen` (empty
/// when the line has no key).
fn toml_field(text: &str, line: usize) -> String {
    let (mut nodes, mut links) = (0usize, 0usize);
    let mut section = String::new();
    for (i, l) in text.lines().enumerate().take(line) {
        let t = l.trim();
        if t.starts_with("[[node]]") {
            nodes += 1;
            section = format!("node[{}]", nodes - 1);
        } else if t.starts_with("[[link]]") {
            links += 1;
            section = format!("link[{}]", links - 1);
        } else if t.starts_with("[node.props]") && nodes > 0 {
            section = format!("node[{}].props", nodes - 1);
        } else if t.starts_with('[') {
            section = t.trim_matches(['[', ']']).to_string();
        }
        if i + 1 == line {
            let key = t.split_once('=').map(|(k, _)| k.trim().trim_matches('"'));
            return match key {
                Some(k) if !k.is_empty() && section.is_empty() => format!(", field {k}"),
                Some(k) if !k.is_empty() => format!(", field {section}.{k}"),
                _ if !section.is_empty() => format!(", in {section}"),
                _ => String::new(),
            };
        }
    }
    String::new()
}

/// "line L, column C: message" from a TOML error.
fn toml_problem(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            let field = toml_field(text, line);
            let mut message = e.message().trim().to_string();
            // serde quotes a number of the wrong type as f64's Display
            // writes it, with ".0" where that has no point: 1e300 came out
            // as 301 digits. Quote it as written.
            let written = text.get(span.clone()).unwrap_or("").trim();
            if let Ok(v) = written.parse::<f64>() {
                for shown in [format!("`{v}`"), format!("`{v}.0`")] {
                    message = message.replace(&shown, &format!("`{written}`"));
                }
            }
            format!("line {line}, column {col}{field}: {message}")
        }
        None => e.message().trim().to_string(),
    }
}

/// Parses a topology from text; `name` is used in errors.
pub fn parse(text: &str, format: Format, name: &str) -> Result<Topology, TopoError> {
    let file: TopologyFile = match format {
        Format::Toml => toml::from_str(text).map_err(|e| TopoError::Syntax {
            file: name.to_string(),
            format: "TOML",
            problem: toml_problem(text, &e),
        })?,
        Format::Json => serde_json::from_str(text).map_err(|e| TopoError::Syntax {
            file: name.to_string(),
            format: "JSON",
            problem: e.to_string(),
        })?,
    };
    file.to_topology().map_err(|e| e.in_file(name))
}

/// Loads a topology file (`.json` is JSON, anything else TOML).
pub fn load(path: &Path) -> Result<Topology, TopoError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TopoError::Io {
        path: name.clone(),
        source,
    })?;
    let mut t = parse(&text, Format::from_path(path), &name)?;
    if t.name().is_empty() {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut b = t.into_builder();
        b.name = stem;
        t = b.build()?;
    }
    Ok(t)
}

/// Writes a topology as text in the given format.
pub fn to_string(t: &Topology, format: Format) -> String {
    let f = TopologyFile::from_topology(t);
    match format {
        Format::Toml => toml::to_string(&f).expect("a topology file always serializes to TOML"),
        Format::Json => {
            serde_json::to_string_pretty(&f).expect("a topology file always serializes to JSON")
        }
    }
}

/// Writes a topology file (`.json` is JSON, anything else TOML).
pub fn save(t: &Topology, path: &Path) -> Result<(), TopoError> {
    std::fs::write(path, to_string(t, Format::from_path(path))).map_err(|source| TopoError::Io {
        path: path.display().to_string(),
        source,
    })
}
