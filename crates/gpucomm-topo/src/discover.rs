//! Discovery of the live machine from sysfs, plus NVML when it loads.
//!
//! - `sys/devices/system/node/node*` gives the NUMA nodes (CPU list,
//!   memory; a node without CPUs is memory only, noted on the host); `sys/devices/system/cpu/cpu*/topology/physical_package_id`
//!   the socket of each; `proc/cpuinfo` the CPU model.
//! - `sys/bus/pci/devices/*` are symlinks into `sys/devices/pci*/...`; the
//!   resolved path is the PCIe tree (root complex, root port, switch ports,
//!   endpoint). `class`/`vendor` identify GPUs, NICs and storage;
//!   `max_link_speed`/`max_link_width` of a function and of its upstream
//!   port give each link (`current_link_*` where `max_link_*` is missing);
//!   `numa_node` places a device.
//! - `sys/class/net/*` and `sys/class/infiniband/*` name the NICs' ports and
//!   give their speed.
//! - NVML (through `nvml-wrapper`, which loads `libnvidia-ml.so` at run
//!   time) names the GPUs and reports their NVLinks. A machine without the
//!   library is normal: discovery records why NVML was not used and carries
//!   on.
//!
//! Everything is read under [`DiscoverOptions::root`], so tests point it at
//! fixture trees (`tests/fixtures/`).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use crate::catalog::{IbSpeed, LinkKind, NvLinkGen, PcieGen};
use crate::error::TopoError;
use crate::model::{Link, Node, NodeIx, NodeKind, Topology, TopologyBuilder};

/// Options of [`discover`].
#[derive(Clone, Debug)]
pub struct DiscoverOptions {
    /// Directory holding `sys/` (and optionally `proc/`): `/` for this
    /// machine, a fixture directory in tests.
    pub root: PathBuf,
    /// Ask NVML for GPU names and NVLinks (when the library loads).
    pub nvml: bool,
}

impl Default for DiscoverOptions {
    fn default() -> Self {
        DiscoverOptions {
            root: PathBuf::from("/"),
            nvml: true,
        }
    }
}

impl DiscoverOptions {
    /// Options reading a fixture tree, without NVML.
    pub fn fixture(root: impl Into<PathBuf>) -> Self {
        DiscoverOptions {
            root: root.into(),
            nvml: false,
        }
    }
}

/// Memory this process may still take, bytes (what the simulator and
/// `cluster` check a large job against before building it): the kernel's
/// `MemAvailable`, or less where a cgroup (v2) limit is closer; `None`
/// where neither can be read (not Linux).
pub fn available_memory() -> Option<u64> {
    let mut avail = meminfo_bytes("MemAvailable")?;
    let read = |f: &str| std::fs::read_to_string(format!("/sys/fs/cgroup/{f}")).ok();
    if let (Some(max), Some(cur)) = (read("memory.max"), read("memory.current")) {
        if let (Ok(max), Ok(cur)) = (max.trim().parse::<u64>(), cur.trim().parse::<u64>()) {
            avail = avail.min(max.saturating_sub(cur));
        }
    }
    Some(avail)
}

/// Field `key` of `/proc/meminfo` (given in kB), bytes.
///
/// ```
/// // Read in bytes from the kernel's kB: some memory, no more than the
/// // machine has.
/// if let Some(total) = gpucomm_topo::discover::meminfo_bytes("MemTotal") {
///     let avail = gpucomm_topo::discover::available_memory().unwrap();
///     assert!(avail > 0 && avail <= total, "{avail} of {total}");
/// }
/// ```
pub fn meminfo_bytes(key: &str) -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

fn read(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn parse_hex(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// Parses a CPU list (`0-3,8,10-11`) into its count.
pub fn cpulist_len(s: &str) -> usize {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.trim().split_once('-') {
            Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 0,
            },
            None => usize::from(p.trim().parse::<usize>().is_ok()),
        })
        .sum()
}

fn first_cpu(s: &str) -> Option<usize> {
    s.split([',', '-']).next()?.trim().parse().ok()
}

fn vendor_name(v: u32) -> &'static str {
    match v {
        0x10de => "NVIDIA",
        0x1002 | 0x1022 => "AMD",
        0x15b3 => "Mellanox",
        0x8086 => "Intel",
        0x1af4 => "virtio",
        0x14e4 => "Broadcom",
        0x1000 => "LSI",
        0x10b5 => "PLX",
        0x144d => "Samsung",
        0x1a03 => "ASPEED",
        0x1d0f => "Amazon",
        0x1dd8 => "Pensando",
        0x1924 => "Solarflare",
        _ => "vendor",
    }
}

fn class_name(class: u32) -> &'static str {
    match class >> 8 {
        0x0100 => "SCSI controller",
        0x0101 => "IDE controller",
        0x0104 => "RAID controller",
        0x0106 => "SATA controller",
        0x0107 => "SAS controller",
        0x0108 => "NVMe controller",
        0x0180 => "storage controller",
        0x0200 => "Ethernet controller",
        0x0207 => "InfiniBand controller",
        0x0280 => "network controller",
        0x0300 => "VGA controller",
        0x0302 => "3D controller",
        0x0380 => "display controller",
        0x0403 => "audio device",
        0x0600 => "host bridge",
        0x0601 => "ISA bridge",
        0x0604 => "PCI bridge",
        0x0680 => "bridge",
        0x0700 | 0x0780 => "communication controller",
        0x0880 => "system peripheral",
        0x0c03 => "USB controller",
        0x0c05 => "SMBus controller",
        0x1200 => "processing accelerator",
        0xff00 => "unassigned class",
        _ => "device",
    }
}

/// NVIDIA GPU names by PCI device id (from the PCI ID repository,
/// pci-ids.ucw.cz); others print as "NVIDIA GPU [10de:xxxx]".
fn nvidia_gpu_name(device: u32) -> Option<&'static str> {
    Some(match device {
        0x1db1 => "Tesla V100 SXM2 16GB",
        0x1db5 => "Tesla V100 SXM2 32GB",
        0x1db4 => "Tesla V100 PCIe 16GB",
        0x20b0 => "A100 SXM4 40GB",
        0x20b2 => "A100 SXM4 80GB",
        0x20b5 => "A100 PCIe 80GB",
        0x20f1 => "A100 PCIe 40GB",
        0x2330 => "H100 SXM5 80GB",
        0x2331 => "H100 PCIe",
        0x2684 => "GeForce RTX 4090",
        0x26b9 => "L40S",
        _ => return None,
    })
}

/// Virtio device names by PCI device id (virtio 1.x: 0x1040 + device type;
/// legacy: 0x1000..).
fn virtio_name(device: u32) -> Option<&'static str> {
    Some(match device {
        0x1000 | 0x1041 => "virtio network device",
        0x1001 | 0x1042 => "virtio block device",
        0x1002 | 0x1045 => "virtio memory balloon",
        0x1003 | 0x1043 => "virtio console",
        0x1004 | 0x1048 => "virtio SCSI controller",
        0x1005 | 0x1044 => "virtio RNG",
        0x1009 | 0x1049 => "virtio 9P transport",
        0x1050 => "virtio GPU",
        0x1052 => "virtio input",
        0x1053 => "virtio socket",
        0x105a => "virtio filesystem",
        _ => return None,
    })
}

fn device_label(d: &PciDev, kind: NodeKind) -> String {
    if d.vendor == 0x10de && kind == NodeKind::Gpu {
        return match nvidia_gpu_name(d.device) {
            Some(n) => format!("NVIDIA {n}"),
            None => format!("NVIDIA GPU [10de:{:04x}]", d.device),
        };
    }
    if d.vendor == 0x10de && d.class >> 8 == 0x0680 {
        return "NVIDIA NVSwitch (PCIe management function)".to_string();
    }
    if d.vendor == 0x1af4
        && let Some(n) = virtio_name(d.device)
    {
        return n.to_string();
    }
    format!("{} {}", vendor_name(d.vendor), class_name(d.class))
}

#[derive(Debug, Clone)]
struct PciDev {
    bdf: String,
    /// Components of the resolved path under `sys/devices`: `pci0000:00`,
    /// then BDFs.
    chain: Vec<String>,
    class: u32,
    vendor: u32,
    device: u32,
    numa: Option<u32>,
    link: Option<LinkKind>,
    /// Why `link` is a guess, where it is (see [`link_of`]).
    link_note: Option<String>,
    dir: PathBuf,
}

impl PciDev {
    fn is_bridge(&self) -> bool {
        self.class >> 8 == 0x0604
    }
    fn kind(&self) -> Option<NodeKind> {
        let base = self.class >> 16;
        let sub = (self.class >> 8) & 0xff;
        Some(match base {
            0x06 if sub == 0x00 || sub == 0x04 => return None,
            0x03 if matches!(self.vendor, 0x10de | 0x1002) => NodeKind::Gpu,
            0x12 if self.vendor == 0x1002 => NodeKind::Gpu,
            0x02 => NodeKind::Nic,
            0x01 => NodeKind::Storage,
            _ => NodeKind::PcieDevice,
        })
    }
}

/// Link files of one PCIe function: its maximum (what the link trains to
/// under load) and current (what it runs at now, often downtrained to
/// 2.5 GT/s while idle) speed and width. `None` where a file is missing
/// or does not parse ("Unknown", width 0).
struct LinkFiles {
    any: bool,
    max_gts: Option<f64>,
    max_width: Option<u8>,
    cur_gts: Option<f64>,
    cur_width: Option<u8>,
}

fn link_files(dir: &Path) -> LinkFiles {
    let raw = |f: &str| read(&dir.join(f));
    let gts = |s: Option<String>| {
        s.and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
            .filter(|&g| PcieGen::from_gts(g).is_some())
    };
    let width = |s: Option<String>| s.and_then(|s| s.parse::<u8>().ok()).filter(|&w| w > 0);
    let (ms, mw, cs, cw) = (
        raw("max_link_speed"),
        raw("max_link_width"),
        raw("current_link_speed"),
        raw("current_link_width"),
    );
    LinkFiles {
        any: ms.is_some() || mw.is_some() || cs.is_some() || cw.is_some(),
        max_gts: gts(ms),
        max_width: width(mw),
        cur_gts: gts(cs),
        cur_width: width(cw),
    }
}

/// The PCIe link of the function in `dir` to its upstream port (`up`, the
/// parent directory's function; `None` under a root complex), and a note
/// where sysfs did not say enough.
///
/// A link trains to the smaller of its two ends' maxima, so that is the
/// link (the current speed and width are what an idle, power-saving link
/// runs at); `current_link_*` stands in only where `max_link_*` is
/// missing. A function without any link file is root-complex-integrated
/// or virtual: `None`, which discovery models as `integrated`. One with
/// link files that do not say a speed or width (`Unknown`, width 0: link
/// down, or the device asleep) gets the slowest, PCIe Gen1 x1, and a
/// note, never `integrated`'s "no bottleneck".
fn link_of(dir: &Path, up: Option<&Path>) -> (Option<LinkKind>, Option<String>) {
    let own = link_files(dir);
    if !own.any {
        return (None, None);
    }
    let upstream = up.map(link_files);
    let up_max_gts = upstream.as_ref().and_then(|u| u.max_gts);
    let up_max_width = upstream.as_ref().and_then(|u| u.max_width);
    let gts = match (own.max_gts, up_max_gts) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (Some(a), None) => Some(a),
        (None, _) => own.cur_gts,
    };
    let width = match (own.max_width, up_max_width) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (Some(a), None) => Some(a),
        (None, _) => own.cur_width,
    };
    let mut unknown = Vec::new();
    if gts.is_none() {
        unknown.push("speed");
    }
    if width.is_none() {
        unknown.push("width");
    }
    let generation = gts.and_then(PcieGen::from_gts).unwrap_or(PcieGen::Gen1);
    let width = width.unwrap_or(1);
    let note = (!unknown.is_empty()).then(|| {
        format!(
            "PCIe link {} unknown in sysfs (link down or device asleep): modeled as Gen1 x1",
            unknown.join(" and ")
        )
    });
    (Some(LinkKind::Pcie { generation, width }), note)
}

fn io_err(path: &Path, source: std::io::Error) -> TopoError {
    TopoError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn scan_pci(root: &Path) -> Result<Vec<PciDev>, TopoError> {
    let bus = root.join("sys/bus/pci/devices");
    let devices_root = root.join("sys/devices");
    let Ok(devices_root) = fs::canonicalize(&devices_root) else {
        return Ok(Vec::new());
    };
    let entries = match fs::read_dir(&bus) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(&bus, e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|err| io_err(&bus, err))?;
        let bdf = e.file_name().to_string_lossy().into_owned();
        let Ok(dir) = fs::canonicalize(e.path()) else {
            continue;
        };
        let Ok(rel) = dir.strip_prefix(&devices_root) else {
            continue;
        };
        let chain: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if chain.len() < 2 || !chain[0].starts_with("pci") {
            continue;
        }
        let class = read(&dir.join("class"))
            .and_then(|s| parse_hex(&s))
            .unwrap_or(0);
        let vendor = read(&dir.join("vendor"))
            .and_then(|s| parse_hex(&s))
            .unwrap_or(0);
        let device = read(&dir.join("device"))
            .and_then(|s| parse_hex(&s))
            .unwrap_or(0);
        let numa = read(&dir.join("numa_node"))
            .and_then(|s| s.parse::<i64>().ok())
            .and_then(|n| u32::try_from(n).ok());
        // The upstream port: the parent directory, unless that is the
        // root complex (`pci0000:00`).
        let up = dir.parent().filter(|p| {
            p.file_name()
                .is_some_and(|n| !n.to_string_lossy().starts_with("pci"))
        });
        let (link, link_note) = link_of(&dir, up);
        out.push(PciDev {
            bdf,
            chain,
            class,
            vendor,
            device,
            numa,
            link,
            link_note,
            dir,
        });
    }
    out.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    Ok(out)
}

struct NumaNode {
    id: u32,
    cpulist: String,
    mem_kb: Option<u64>,
}

fn scan_numa(root: &Path) -> Vec<NumaNode> {
    let dir = root.join("sys/devices/system/node");
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(&dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(id) = name
                .strip_prefix("node")
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let cpulist = read(&e.path().join("cpulist")).unwrap_or_default();
            let mem_kb = read(&e.path().join("meminfo")).and_then(|m| {
                m.lines()
                    .find(|l| l.contains("MemTotal:"))
                    .and_then(|l| l.split_whitespace().rev().nth(1)?.parse().ok())
            });
            out.push(NumaNode {
                id,
                cpulist,
                mem_kb,
            });
        }
    }
    out.sort_by_key(|n| n.id);
    out
}

fn cpu_model(root: &Path) -> Option<String> {
    let text = read(&root.join("proc/cpuinfo"))?;
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    // Arm's cpuinfo has no model name: the core, as lscpu names it from
    // the implementer and part numbers.
    field("model name").or_else(|| arm_core_name(&field("CPU implementer")?, &field("CPU part")?))
}

/// The name lscpu gives an Arm core (util-linux `lscpu-arm.c`) from
/// cpuinfo's `CPU implementer` and `CPU part` ("0x41", "0xd4f":
/// "ARM Neoverse-V2"); the numbers where the core is not in the table.
fn arm_core_name(implementer: &str, part: &str) -> Option<String> {
    let hex = |s: &str| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok();
    let (i, p) = (hex(implementer)?, hex(part)?);
    Some(match (i, p) {
        (0x41, 0xd0c) => "ARM Neoverse-N1".to_string(),
        (0x41, 0xd40) => "ARM Neoverse-V1".to_string(),
        (0x41, 0xd49) => "ARM Neoverse-N2".to_string(),
        (0x41, 0xd4f) => "ARM Neoverse-V2".to_string(),
        (0x4e, 0x004) => "NVIDIA Carmel".to_string(),
        _ => format!("Arm CPU (implementer {implementer}, part {part})"),
    })
}

/// Port speed of a NIC from its InfiniBand device or netdev.
struct Port {
    names: Vec<String>,
    kind: Option<LinkKind>,
    detail: Vec<String>,
}

fn class_links(root: &Path, class: &str) -> Vec<(String, PathBuf)> {
    let dir = root.join("sys/class").join(class);
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(&dir) {
        for e in entries.flatten() {
            if let Ok(p) = fs::canonicalize(e.path()) {
                out.push((e.file_name().to_string_lossy().into_owned(), p));
            }
        }
    }
    out.sort();
    out
}

/// The InfiniBand speed of a port from its sysfs `rate`
/// (`"200 Gb/sec (4X HDR)"`): the leading Gb/s figure is the port's data
/// rate, and decides; the name in parentheses picks among speeds of that
/// rate (2X HDR is HDR100, 2X NDR is NDR200). A rate no [`IbSpeed`] has
/// (`"100 Gb/sec (1X NDR)"`, `"50 Gb/sec (2X EDR)"`) is the fastest speed
/// not faster than it; one slower than every speed (`"40 Gb/sec (4X
/// QDR)"`), or a rate that does not parse, is an error saying so.
fn ib_speed_of_rate(rate: &str) -> Result<IbSpeed, String> {
    let inner = rate
        .split_once('(')
        .and_then(|(_, r)| r.trim().strip_suffix(')'))
        .unwrap_or("");
    let mut parts = inner.split_whitespace();
    let width = parts.next().unwrap_or("").to_ascii_uppercase();
    let name = parts.next().unwrap_or("").to_ascii_uppercase();
    let named = match (width.as_str(), name.as_str()) {
        ("2X", "HDR") => Some(IbSpeed::Hdr100),
        ("2X", "NDR") => Some(IbSpeed::Ndr200),
        ("4X", n) => IbSpeed::parse(n),
        _ => None,
    };
    let gbit = rate
        .split_whitespace()
        .next()
        .and_then(|g| g.parse::<f64>().ok())
        .filter(|g| g.is_finite() && *g > 0.0);
    let Some(gbit) = gbit else {
        return Err(format!(
            "InfiniBand rate {rate:?} not understood: port speed unknown"
        ));
    };
    // Compared with the rate each speed is sold as, which is what sysfs
    // prints ("56 Gb/sec (4X FDR)" for FDR's 54.55 Gb/s of data).
    if let Some(s) = named.filter(|s| (s.nominal_gbit() - gbit).abs() < 0.5) {
        return Ok(s);
    }
    match IbSpeed::ALL
        .into_iter()
        .rev()
        .find(|s| s.nominal_gbit() <= gbit + 0.5)
    {
        Some(s) => Ok(s),
        None => Err(format!(
            "InfiniBand rate {rate:?} is slower than every modeled speed (FDR, 56 Gb/s and up): \
             port speed unknown"
        )),
    }
}

fn nic_ports(root: &Path, dev: &PciDev) -> Port {
    let mut port = Port {
        names: Vec::new(),
        kind: None,
        detail: Vec::new(),
    };
    let under = |p: &Path| p.starts_with(&dev.dir);
    let mut rdma = false;
    // A port whose link layer is InfiniBand: its netdev (IPoIB) speed is
    // no Ethernet port, whatever the rate says.
    let mut infiniband = false;
    for (name, path) in class_links(root, "infiniband") {
        if !under(&path) {
            continue;
        }
        rdma = true;
        port.names.push(name.clone());
        let p1 = path.join("ports/1");
        let rate = read(&p1.join("rate")).unwrap_or_default();
        let layer = read(&p1.join("link_layer")).unwrap_or_default();
        if !rate.is_empty() {
            port.detail.push(format!("{name}: {rate} {layer}"));
        }
        if layer.eq_ignore_ascii_case("infiniband") {
            infiniband = true;
            if port.kind.is_none() {
                match ib_speed_of_rate(&rate) {
                    Ok(speed) => {
                        port.kind = Some(LinkKind::Infiniband { speed, count: 1 });
                    }
                    Err(why) => port.detail.push(format!("{name}: {why}")),
                }
            }
        }
    }
    for (name, path) in class_links(root, "net") {
        if !under(&path) {
            continue;
        }
        port.names.push(name.clone());
        let dir = root.join("sys/class/net").join(&name);
        let speed = read(&dir.join("speed")).and_then(|s| s.parse::<i64>().ok());
        if let Some(mbit) = speed.filter(|&s| s > 0) {
            port.detail.push(format!("{name}: {} Gb/s", mbit / 1000));
            if port.kind.is_none() && !infiniband && mbit >= 1000 {
                port.kind = u16::try_from(mbit / 1000)
                    .ok()
                    .filter(|&g| g <= crate::catalog::MAX_ETHERNET_GBIT)
                    .map(|gbit| LinkKind::Ethernet {
                        gbit,
                        count: 1,
                        roce: rdma,
                    });
            }
        }
    }
    port
}

/// Discovers the machine under `opts.root`. Missing pieces (no NUMA
/// directory, no PCI bus, no NVML) shrink the result; they are not errors.
///
/// ```
/// let t = gpucomm_topo::discover(&gpucomm_topo::DiscoverOptions::default()).unwrap();
/// assert!(t.nodes_of_kind(gpucomm_topo::NodeKind::Cpu).count() >= 1);
/// ```
pub fn discover(opts: &DiscoverOptions) -> Result<Topology, TopoError> {
    discover_with(opts, None)
}

/// [`discover`], with NVML's answers given instead of queried (tests).
pub(crate) fn discover_with(
    opts: &DiscoverOptions,
    fake_nvml: Option<&[NvmlGpu]>,
) -> Result<Topology, TopoError> {
    let root = &opts.root;
    if !root.join("sys").is_dir() {
        return Err(TopoError::Io {
            path: root.join("sys").display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no sysfs here"),
        });
    }
    let hostname = read(&root.join("proc/sys/kernel/hostname"))
        .or_else(|| read(&root.join("etc/hostname")))
        .unwrap_or_else(|| "localhost".to_string());
    let mut b = TopologyBuilder::new(hostname.clone());
    let host = b.node(Node::new("host0", NodeKind::Host).with_label(hostname));

    // CPUs: one node per NUMA node.
    let model = cpu_model(root).unwrap_or_else(|| "CPU".to_string());
    let mut numa = scan_numa(root);
    // A NUMA node without CPUs (CXL or HBM memory, as memory-only nodes
    // appear) is no CPU: the host notes it, and no `cpu` node or SMP link
    // is made for it.
    let (with_cpus, memory_only): (Vec<NumaNode>, Vec<NumaNode>) =
        numa.into_iter().partition(|n| cpulist_len(&n.cpulist) > 0);
    numa = with_cpus;
    if !memory_only.is_empty() {
        let text: Vec<String> = memory_only
            .iter()
            .map(|n| match n.mem_kb {
                Some(kb) => format!("node{} ({:.1} GiB)", n.id, kb as f64 / 1048576.0),
                None => format!("node{}", n.id),
            })
            .collect();
        b.node_mut(host)
            .props
            .insert("memory_only_numa".into(), text.join(", "));
    }
    if numa.is_empty() {
        numa.push(NumaNode {
            id: 0,
            cpulist: read(&root.join("sys/devices/system/cpu/online")).unwrap_or_default(),
            mem_kb: None,
        });
    }
    let mut cpu_of_numa: BTreeMap<u32, NodeIx> = BTreeMap::new();
    for n in &numa {
        let socket = first_cpu(&n.cpulist).and_then(|c| {
            read(&root.join(format!(
                "sys/devices/system/cpu/cpu{c}/topology/physical_package_id"
            )))
            .and_then(|s| s.parse::<u32>().ok())
        });
        let mut node = Node::new(format!("cpu{}", n.id), NodeKind::Cpu)
            .with_label(model.clone())
            .with_numa(n.id)
            .in_host(host);
        node.socket = socket;
        if !n.cpulist.is_empty() {
            node = node.with_prop(
                "cpus",
                format!("{} ({} CPUs)", n.cpulist, cpulist_len(&n.cpulist)),
            );
        }
        if let Some(kb) = n.mem_kb {
            node = node.with_prop("memory", format!("{:.1} GiB", kb as f64 / 1048576.0));
        }
        cpu_of_numa.insert(n.id, b.node(node));
    }
    let cpus: Vec<NodeIx> = cpu_of_numa.values().copied().collect();
    for (i, &x) in cpus.iter().enumerate() {
        for &y in &cpus[i + 1..] {
            b.link(x, y, LinkKind::Smp);
        }
    }
    let default_cpu = cpus[0];
    let cpu_for = |numa: Option<u32>| {
        numa.and_then(|n| cpu_of_numa.get(&n).copied())
            .unwrap_or(default_cpu)
    };

    // PCIe tree.
    let devs = scan_pci(root)?;
    let by_bdf: HashMap<&str, &PciDev> = devs.iter().map(|d| (d.bdf.as_str(), d)).collect();
    let mut switch_of: HashMap<String, NodeIx> = HashMap::new();
    let mut counters: HashMap<NodeKind, usize> = HashMap::new();
    let mut gpu_by_bdf: HashMap<String, NodeIx> = HashMap::new();
    // A root complex's NUMA node: the first one its devices report (a
    // device with numa_node -1 inherits it).
    let mut rc_numa: HashMap<&str, u32> = HashMap::new();
    for d in &devs {
        if let Some(n) = d.numa {
            rc_numa.entry(d.chain[0].as_str()).or_insert(n);
        }
    }
    for d in &devs {
        let Some(kind) = d.kind() else { continue };
        // Bridges between the root complex and the device: chain[1..len-1].
        let bridges: Vec<&PciDev> = d.chain[1..d.chain.len() - 1]
            .iter()
            .filter_map(|c| by_bdf.get(c.as_str()).copied())
            .filter(|x| x.is_bridge())
            .collect();
        let rc = d.chain[0].clone();
        // bridges[0] is the root port; then switch upstream/downstream pairs.
        let numa = d
            .numa
            .or_else(|| bridges.first().and_then(|x| x.numa))
            .or_else(|| rc_numa.get(d.chain[0].as_str()).copied());
        let mut parent = cpu_for(numa);
        let mut i = 1;
        // A switch is an upstream port followed by a downstream port; a lone
        // bridge (PCIe-to-PCI, as in front of BMC video) is not a switch.
        while i + 1 < bridges.len() {
            let up = bridges[i];
            let sw = match switch_of.get(&up.bdf) {
                Some(&s) => s,
                None => {
                    let n = counters.entry(NodeKind::PcieSwitch).or_default();
                    let mut node = Node::new(format!("pcisw{n}"), NodeKind::PcieSwitch)
                        .with_label(format!("{} PCIe switch", vendor_name(up.vendor)))
                        .in_host(host);
                    *n += 1;
                    node.pci_address = Some(up.bdf.clone());
                    node.root_complex = Some(rc.clone());
                    node.numa = up.numa.or(d.numa);
                    let from = if up.link.is_some() {
                        up
                    } else {
                        bridges[i - 1]
                    };
                    if let Some(note) = &from.link_note {
                        node = node.with_prop("link_note", note.clone());
                    }
                    let s = b.node(node);
                    let kind = from.link.unwrap_or(LinkKind::Integrated);
                    b.push_link(Link::new(s, parent, kind));
                    switch_of.insert(up.bdf.clone(), s);
                    s
                }
            };
            parent = sw;
            i += 2;
        }
        let n = counters.entry(kind).or_default();
        let prefix = match kind {
            NodeKind::Gpu => "gpu",
            NodeKind::Nic => "nic",
            NodeKind::Storage => "storage",
            _ => "pci",
        };
        let label = device_label(d, kind);
        let mut node = Node::new(format!("{prefix}{n}"), kind)
            .with_label(label)
            .in_host(host)
            .with_prop("pci_id", format!("{:04x}:{:04x}", d.vendor, d.device));
        *n += 1;
        node.pci_address = Some(d.bdf.clone());
        node.root_complex = Some(rc);
        node.numa = d.numa.or_else(|| b.nodes()[parent.index()].numa);
        if let Some(note) = &d.link_note {
            node = node.with_prop("link_note", note.clone());
        }
        if kind == NodeKind::Nic {
            let p = nic_ports(root, d);
            if !p.names.is_empty() {
                node = node.with_prop("ports", p.names.join(","));
            }
            if !p.detail.is_empty() {
                node = node.with_prop("speed", p.detail.join("; "));
            }
            node.port = p.kind;
        }
        let ix = b.node(node);
        let kind_link = d.link.unwrap_or(LinkKind::Integrated);
        b.push_link(Link::new(ix, parent, kind_link));
        if kind == NodeKind::Gpu {
            gpu_by_bdf.insert(norm_bus_id(&d.bdf), ix);
        }
    }
    for ix in 0..b.nodes().len() {
        let n = &b.nodes()[ix];
        if n.socket.is_none() && n.kind != NodeKind::Host {
            if let Some(numa) = n.numa {
                let s = cpu_of_numa
                    .get(&numa)
                    .and_then(|c| b.nodes()[c.index()].socket);
                b.node_mut(NodeIx(ix as u32)).socket = s;
            }
        }
    }

    let nvml_note = match (fake_nvml, opts.nvml) {
        (Some(gpus), _) => {
            let n = apply_nvml(&mut b, &gpu_by_bdf, host, gpus);
            format!("given, {n} NVLink bundles")
        }
        (None, true) => {
            let (gpus, note) = nvml::query();
            if gpus.is_empty() {
                note
            } else {
                let n = apply_nvml(&mut b, &gpu_by_bdf, host, &gpus);
                format!("{note}, {n} NVLink bundles")
            }
        }
        (None, false) => "not queried".to_string(),
    };
    b.description(format!(
        "discovered from {} (NVML: {nvml_note})",
        root.join("sys").display()
    ));
    b.node_mut(host).props.insert("nvml".into(), nvml_note);
    b.build()
}

/// What NVML says about one GPU (gathered by [`nvml::query`], or made up
/// by tests).
#[derive(Clone, Debug, Default)]
pub(crate) struct NvmlGpu {
    /// NVML's index.
    pub index: u32,
    /// PCI bus id as NVML prints it (`00000000:17:00.0`).
    pub bus_id: String,
    /// Product name.
    pub name: Option<String>,
    /// Memory in bytes.
    pub memory: Option<u64>,
    /// Active NVLinks: (the `nvmlNvlinkVersion_t` code NVML gives, 0 where
    /// it gave none; remote PCI bus id).
    pub links: Vec<(u8, String)>,
}

/// A PCI address as sysfs names it: NVML's "00000000:17:00.0" is sysfs'
/// "0000:17:00.0", and a VMD domain keeps its fifth digit ("00010000" is
/// "10000"; cutting to four digits made it domain 0's).
fn norm_bus_id(s: &str) -> String {
    let s = s.trim().to_ascii_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) => match u32::from_str_radix(dom, 16) {
            Ok(d) => format!("{d:04x}:{rest}"),
            Err(_) => s,
        },
        None => s,
    }
}

/// NVLink generation from the code `nvmlDeviceGetNvLinkVersion` returns
/// (`nvmlNvlinkVersion_t`: 1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1,
/// 6 = 4.0, 7 = 5.0, 8 = 6.0); `None` for 0 (invalid) and codes this table
/// does not know.
fn nvlink_gen_of_code(code: u8) -> Option<NvLinkGen> {
    Some(match code {
        1 => NvLinkGen::V1,
        2 | 3 => NvLinkGen::V2,
        4 | 5 => NvLinkGen::V3,
        6 => NvLinkGen::V4,
        // 8 is NVLink 6.0, which this model does not have: its fastest
        // generation stands in.
        7 | 8 => NvLinkGen::V5,
        _ => return None,
    })
}

/// NVLink generation of a GPU model, from its NVML product name
/// ([`GpuProduct`](crate::hardware::GpuProduct)): one GPU model has one
/// NVLink generation (Pascal 1, Volta 2, Ampere 3, Hopper 4, Blackwell 5;
/// the bridges of the A40, RTX A6000 and RTX 3090 NVLink 3). `None` where
/// the name does not say, and for cards with no NVLink (RTX 4090, L40, L4,
/// A10, T4, the workstation Ada cards).
fn nvlink_gen_of_name(name: &str) -> Option<NvLinkGen> {
    use crate::hardware::{GpuArch, GpuProduct};
    let product = GpuProduct::from_label(name)?;
    Some(match product.arch()? {
        GpuArch::Pascal => NvLinkGen::V1,
        GpuArch::Volta => NvLinkGen::V2,
        GpuArch::Ampere => NvLinkGen::V3,
        GpuArch::Hopper => NvLinkGen::V4,
        GpuArch::Blackwell => NvLinkGen::V5,
        GpuArch::Ada => match product {
            GpuProduct::A40 | GpuProduct::RTX_A6000 | GpuProduct::RTX_3090 => NvLinkGen::V3,
            _ => return None,
        },
    })
}

/// Adds NVML's names and NVLinks to the discovered graph: GPU-to-GPU
/// bundles, and links to NVSwitches folded into one logical `nvswitch0`
/// (chips = distinct switch PCI ids; NVLS when every link to it is NVLink
/// 4 or later, i.e. NVSwitch gen 3). Returns the number of NVLink bundles.
///
/// A link's generation is the GPU model's (from its NVML name, see
/// `nvlink_gen_of_name`) where the name says, else the one its
/// `nvmlNvlinkVersion_t` code stands for (`nvlink_gen_of_code`; NVLink 1
/// for a code neither knows). A GPU pair's bundle is the larger of the
/// counts its two GPUs report (one GPU's query may have failed).
pub(crate) fn apply_nvml(
    b: &mut TopologyBuilder,
    gpu_by_bdf: &HashMap<String, NodeIx>,
    host: NodeIx,
    gpus: &[NvmlGpu],
) -> usize {
    // GPU pair (lower index first) -> (generation, links seen from the
    // lower GPU, links seen from the higher one).
    let mut pair_links: BTreeMap<(NodeIx, NodeIx), (NvLinkGen, u8, u8)> = BTreeMap::new();
    // (gpu, switch bus id) -> (generation, links).
    let mut switch_links: BTreeMap<(NodeIx, String), (NvLinkGen, u8)> = BTreeMap::new();
    for g in gpus {
        let Some(&gix) = gpu_by_bdf.get(&norm_bus_id(&g.bus_id)) else {
            continue;
        };
        if let Some(name) = &g.name {
            b.node_mut(gix).label = name.clone();
        }
        if let Some(m) = g.memory {
            b.node_mut(gix).props.insert(
                "memory".into(),
                format!("{:.0} GiB", m as f64 / 1073741824.0),
            );
        }
        b.node_mut(gix)
            .props
            .insert("nvml_index".into(), g.index.to_string());
        let model_gen = g.name.as_deref().and_then(nvlink_gen_of_name);
        for (code, remote) in &g.links {
            let generation = model_gen
                .or_else(|| nvlink_gen_of_code(*code))
                .unwrap_or(NvLinkGen::V1);
            let remote = norm_bus_id(remote);
            match gpu_by_bdf.get(&remote) {
                Some(&other) if other == gix => {}
                Some(&other) => {
                    let key = (gix.min(other), gix.max(other));
                    let e = pair_links.entry(key).or_insert((generation, 0, 0));
                    e.0 = e.0.min(generation);
                    if gix < other {
                        e.1 = e.1.saturating_add(1);
                    } else {
                        e.2 = e.2.saturating_add(1);
                    }
                }
                None => {
                    let e = switch_links.entry((gix, remote)).or_insert((generation, 0));
                    e.0 = e.0.min(generation);
                    e.1 = e.1.saturating_add(1);
                }
            }
        }
    }
    // A GH200's or GB200's CPU is a Grace, which cpuinfo names only by its
    // core (Neoverse-V2, as Graviton4's and Axion's).
    let superchip = gpus.iter().filter_map(|g| g.name.as_deref()).any(|n| {
        use crate::hardware::GpuProduct::*;
        matches!(
            crate::hardware::GpuProduct::from_label(n),
            Some(GH200_96GB | GH200_144GB | GB200)
        )
    });
    if superchip {
        for ix in 0..b.nodes().len() {
            let n = &b.nodes()[ix];
            if n.kind == NodeKind::Cpu && n.label.contains("Neoverse-V2") {
                let label = format!("NVIDIA Grace ({})", n.label);
                b.node_mut(NodeIx(ix as u32)).label = label;
            }
        }
    }
    let mut done = 0;
    for (&(x, y), &(generation, from_x, from_y)) in &pair_links {
        let count = from_x.max(from_y);
        b.link(x, y, LinkKind::NvLink { generation, count });
        done += 1;
    }
    let mut nvswitch: Option<NodeIx> = None;
    let mut switch_chips: std::collections::BTreeSet<&str> = Default::default();
    let mut min_gen: Option<NvLinkGen> = None;
    for ((gix, remote), &(generation, n)) in &switch_links {
        // Not a GPU: an NVSwitch. One logical node for all of them.
        switch_chips.insert(remote.as_str());
        min_gen = Some(min_gen.map_or(generation, |m| m.min(generation)));
        let sw = *nvswitch.get_or_insert_with(|| {
            b.node(
                Node::new("nvswitch0", NodeKind::NvSwitch)
                    .with_label("NVSwitch (via NVML)")
                    .in_host(host),
            )
        });
        match b.links.iter_mut().find(|x| x.a == *gix && x.b == sw) {
            Some(l) => {
                if let LinkKind::NvLink {
                    generation: had,
                    count,
                } = l.kind
                {
                    *l = Link::new(
                        *gix,
                        sw,
                        LinkKind::NvLink {
                            generation: had.min(generation),
                            count: count.saturating_add(n),
                        },
                    );
                }
            }
            None => {
                b.link(
                    *gix,
                    sw,
                    LinkKind::NvLink {
                        generation,
                        count: n,
                    },
                );
                done += 1;
            }
        }
    }
    if let Some(sw) = nvswitch {
        let n = b.node_mut(sw);
        n.chips = Some(switch_chips.len() as u32);
        // NVLink SHARP (NVLS) arrived with NVSwitch gen 3 (NVLink 4).
        n.reduction = min_gen.is_some_and(|g| g >= NvLinkGen::V4);
    }
    done
}

mod nvml {
    //! Queries NVML. Every failure is a note, not an error.
    use super::NvmlGpu;
    use nvml_wrapper::Nvml;

    /// The GPUs NVML reports, and a note (driver version, or why NVML was
    /// not usable).
    pub(super) fn query() -> (Vec<NvmlGpu>, String) {
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => return (Vec::new(), format!("not available ({e})")),
        };
        let count = match nvml.device_count() {
            Ok(c) => c,
            Err(e) => return (Vec::new(), format!("device count failed ({e})")),
        };
        let driver = nvml.sys_driver_version().unwrap_or_default();
        let mut out = Vec::new();
        for i in 0..count {
            let Ok(dev) = nvml.device_by_index(i) else {
                continue;
            };
            let Ok(pci) = dev.pci_info() else { continue };
            let mut g = NvmlGpu {
                index: i,
                bus_id: pci.bus_id,
                name: dev.name().ok(),
                memory: dev.memory_info().ok().map(|m| m.total),
                links: Vec::new(),
            };
            // NVML_NVLINK_MAX_LINKS is 18 up to NVLink 5.
            for l in 0..18u32 {
                let link = dev.link_wrapper_for(l);
                if !link.is_active().unwrap_or(false) {
                    continue;
                }
                // The nvmlNvlinkVersion_t code, kept raw: apply_nvml maps
                // it (6 is NVLink 4.0, not 6).
                let version = link
                    .version()
                    .map_or(0, |v| u8::try_from(v).unwrap_or(u8::MAX));
                if let Ok(remote) = link.remote_pci_info() {
                    g.links.push((version, remote.bus_id));
                }
            }
            out.push(g);
        }
        let note = format!("{count} GPUs, driver {driver}");
        (out, note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::PathClass;

    fn fixture(name: &str) -> DiscoverOptions {
        DiscoverOptions::fixture(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(name),
        )
    }

    const DGX_GPUS: [&str; 8] = ["1b", "1c", "43", "44", "9b", "9c", "c3", "c4"];

    #[test]
    fn bus_ids_match_across_nvml_and_sysfs_spellings() {
        assert_eq!(norm_bus_id("00000000:17:00.0"), "0000:17:00.0");
        assert_eq!(norm_bus_id(" 0000:1B:00.0\n"), "0000:1b:00.0");
        // VMD domains have five digits in sysfs and keep them.
        assert_eq!(norm_bus_id("00010000:17:00.0"), "10000:17:00.0");
        assert_eq!(norm_bus_id("10000:17:00.0"), "10000:17:00.0");
        assert_ne!(norm_bus_id("00010000:17:00.0"), norm_bus_id("0000:17:00.0"));
    }

    /// The DGX fixture's 8 GPUs as NVML reports them, each with 18 links
    /// of NVML version code `code` spread 5/4/4/5 over four NVSwitch chips.
    fn dgx_nvml(name: Option<&str>, code: u8) -> Vec<NvmlGpu> {
        let chips = [
            "0000:07:00.0",
            "0000:08:00.0",
            "0000:09:00.0",
            "0000:0a:00.0",
        ];
        DGX_GPUS
            .iter()
            .enumerate()
            .map(|(i, bus)| NvmlGpu {
                index: i as u32,
                bus_id: format!("00000000:{}:00.0", bus.to_uppercase()),
                name: name.map(str::to_string),
                memory: Some(85_899_345_920),
                links: (0..18)
                    .map(|l| {
                        let chip = match l {
                            0..5 => 0,
                            5..9 => 1,
                            9..13 => 2,
                            _ => 3,
                        };
                        (code, chips[chip].to_string())
                    })
                    .collect(),
            })
            .collect()
    }

    /// The NVLink generation of every GPU's link to `nvswitch0`.
    fn switch_link_gens(t: &Topology) -> Vec<NvLinkGen> {
        let sw = t.find("nvswitch0").unwrap();
        t.gpus()
            .iter()
            .flat_map(|&g| t.links_between(g, sw))
            .map(|l| match t.link(l).kind {
                LinkKind::NvLink { generation, .. } => generation,
                k => panic!("not an NVLink: {k:?}"),
            })
            .collect()
    }

    #[test]
    fn nvml_nvswitch_links_fold_into_one_switch() {
        // DGX H100 as NVML reports it: each GPU's 18 NVLink 4.0 links (NVML
        // code 6) spread 5/4/4/5 over four NVSwitch chips.
        let gpus = dgx_nvml(Some("NVIDIA H100 80GB HBM3"), 6);
        let t = discover_with(&fixture("dgx"), Some(&gpus)).unwrap();
        let sw = t.find("nvswitch0").unwrap();
        assert_eq!(t.node(sw).chips, Some(4));
        assert!(t.node(sw).reduction);
        assert_eq!(t.node(t.gpus()[0]).label, "NVIDIA H100 80GB HBM3");
        assert_eq!(t.node(t.gpus()[0]).props["memory"], "80 GiB");
        for &a in t.gpus() {
            for &b in t.gpus() {
                if a != b {
                    let p = t.path(a, b).unwrap();
                    assert_eq!(p.class, PathClass::NvLink(18));
                    assert_eq!(p.bandwidth, 450.0);
                }
            }
        }
    }

    #[test]
    fn nvml_version_codes_are_not_generations() {
        // nvmlNvlinkVersion_t: 6 is NVLink 4.0 (H100); some drivers report
        // 7 for H100 links, and the GPU's name decides then. Either way an
        // H100 is NV18 at 450 GB/s with NVLS, never NVLink 5 at 900.
        for (name, code) in [
            (None, 6),
            (Some("NVIDIA H100 80GB HBM3"), 6),
            (Some("NVIDIA H100 80GB HBM3"), 7),
        ] {
            let t = discover_with(&fixture("dgx"), Some(&dgx_nvml(name, code))).unwrap();
            let sw = t.find("nvswitch0").unwrap();
            assert!(t.node(sw).reduction, "{name:?} code {code}");
            let gens = switch_link_gens(&t);
            assert_eq!(gens.len(), 8);
            assert!(
                gens.iter().all(|&g| g == NvLinkGen::V4),
                "{name:?} code {code}: {gens:?}"
            );
            let g = t.gpus();
            let p = t.path(g[0], g[1]).unwrap();
            assert_eq!(p.class, PathClass::NvLink(18), "{name:?} code {code}");
            assert_eq!(p.bandwidth, 450.0, "{name:?} code {code}");
        }
        // 4 is NVLink 3.0 (A100): no NVLS, whether the name says A100 or
        // not.
        for name in [None, Some("NVIDIA A100-SXM4-80GB")] {
            let t = discover_with(&fixture("dgx"), Some(&dgx_nvml(name, 4))).unwrap();
            let sw = t.find("nvswitch0").unwrap();
            assert!(!t.node(sw).reduction, "{name:?}");
            assert!(
                switch_link_gens(&t).iter().all(|&g| g == NvLinkGen::V3),
                "{name:?}"
            );
        }
        // Codes map per nvmlNvlinkVersion_t; 0 (invalid) and unknown codes
        // are none.
        let gens: Vec<_> = (0..=9).map(nvlink_gen_of_code).collect();
        use NvLinkGen::*;
        assert_eq!(
            gens,
            [
                None,
                Some(V1),
                Some(V2),
                Some(V2),
                Some(V3),
                Some(V3),
                Some(V4),
                Some(V5),
                Some(V5),
                None
            ]
        );
        // The Ada bucket's cards by product: the A40's, RTX A6000's and
        // RTX 3090's bridges are NVLink 3, the RTX 4090 and L40 have none.
        assert_eq!(nvlink_gen_of_name("NVIDIA A40"), Some(V3));
        assert_eq!(nvlink_gen_of_name("NVIDIA RTX A6000"), Some(V3));
        assert_eq!(nvlink_gen_of_name("NVIDIA GeForce RTX 4090"), None);
        assert_eq!(nvlink_gen_of_name("NVIDIA L40S"), None);
        assert_eq!(nvlink_gen_of_name("NVIDIA A30"), Some(V3));
        assert_eq!(nvlink_gen_of_name("Tesla V100-SXM2-16GB"), Some(V2));
        assert_eq!(nvlink_gen_of_name("NVIDIA B200"), Some(V5));
    }

    /// NVML's view of GPUs at these PCI buses (no name, no links).
    fn nvml_gpus(bus: &[&str]) -> Vec<NvmlGpu> {
        bus.iter()
            .enumerate()
            .map(|(i, b)| NvmlGpu {
                index: i as u32,
                bus_id: format!("00000000:{b}:00.0"),
                ..Default::default()
            })
            .collect()
    }

    /// Arm's cpuinfo names no model: the core's name from its implementer
    /// and part, as lscpu gives it; a GH200's or GB200's Neoverse-V2 is
    /// its Grace, whose memory the hardware table knows.
    #[test]
    fn an_arm_cpu_is_named_by_its_core_and_a_superchip_s_is_grace() {
        let root = std::env::temp_dir().join(format!("gpucomm-arm-cpuinfo-{}", std::process::id()));
        std::fs::create_dir_all(root.join("proc")).unwrap();
        std::fs::write(
            root.join("proc/cpuinfo"),
            "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU architecture: 8\n\
             CPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 0\n",
        )
        .unwrap();
        assert_eq!(cpu_model(&root).as_deref(), Some("ARM Neoverse-V2"));
        std::fs::write(
            root.join("proc/cpuinfo"),
            "CPU implementer\t: 0x61\nCPU part\t: 0x022\n",
        )
        .unwrap();
        assert_eq!(
            cpu_model(&root).as_deref(),
            Some("Arm CPU (implementer 0x61, part 0x022)")
        );
        std::fs::remove_dir_all(&root).unwrap();
        for (gpu, want) in [
            ("NVIDIA GH200 480GB", "NVIDIA Grace (ARM Neoverse-V2)"),
            ("NVIDIA H100 80GB HBM3", "ARM Neoverse-V2"),
        ] {
            let mut b = TopologyBuilder::new("arm");
            let host = b.node(Node::new("host0", NodeKind::Host));
            let cpu = b.node(
                Node::new("cpu0", NodeKind::Cpu)
                    .with_label("ARM Neoverse-V2")
                    .in_host(host),
            );
            let g = b.node(Node::new("gpu0", NodeKind::Gpu).in_host(host));
            let bdf = "00000009:01:00.0".to_string();
            let by_bdf = HashMap::from([(norm_bus_id(&bdf), g)]);
            let nvml = [NvmlGpu {
                bus_id: bdf,
                name: Some(gpu.to_string()),
                ..Default::default()
            }];
            apply_nvml(&mut b, &by_bdf, host, &nvml);
            assert_eq!(b.nodes()[cpu.index()].label, want, "{gpu}");
        }
        assert_eq!(
            crate::hardware::CpuFamily::from_label("NVIDIA Grace (ARM Neoverse-V2)"),
            Some(crate::hardware::CpuFamily::Grace)
        );
        assert_eq!(
            crate::hardware::CpuFamily::from_label("ARM Neoverse-V2"),
            None
        );
    }

    #[test]
    fn nvml_gpu_pair_link_reported_by_one_side_only() {
        // NVML reports the pair's 2 links only from one GPU (the other
        // GPU's query failed, or reported fewer): the bundle stays, with
        // the larger count.
        let base = nvml_gpus(&["19", "1a"]);
        let to = |b: &str| (2u8, format!("00000000:{b}:00.0"));
        for (from0, from1) in [
            (vec![], vec![to("19"), to("19")]),
            (vec![to("1A"), to("1a")], vec![]),
            (vec![to("1a")], vec![to("19"), to("19")]),
            (vec![to("1a"), to("1a")], vec![to("19"), to("19")]),
        ] {
            let mut gpus = base.clone();
            gpus[0].links = from0.clone();
            gpus[1].links = from1.clone();
            let t = discover_with(&fixture("pcie-server"), Some(&gpus)).unwrap();
            let g = t.gpus();
            assert_eq!(
                t.path(g[0], g[1]).unwrap().class,
                PathClass::NvLink(2),
                "{from0:?} / {from1:?}"
            );
            assert_eq!(t.links_between(g[0], g[1]).len(), 1);
        }
    }

    #[test]
    fn nvml_gpu_to_gpu_links_make_the_cube_mesh() {
        // The pcie-server fixture with DGX-1 V100 NVLinks reported by NVML.
        let mut gpus = nvml_gpus(&["19", "1a", "33", "34", "9b", "9c", "b3", "b4"]);
        for (x, y, n) in crate::presets::DGX1_V100_NVLINKS {
            for _ in 0..n {
                let (bx, by) = (
                    gpus[x as usize].bus_id.clone(),
                    gpus[y as usize].bus_id.clone(),
                );
                gpus[x as usize].links.push((2, by));
                gpus[y as usize].links.push((2, bx));
            }
        }
        let t = discover_with(&fixture("pcie-server"), Some(&gpus)).unwrap();
        assert!(t.find("nvswitch0").is_none());
        let g = t.gpus();
        assert_eq!(t.path(g[0], g[3]).unwrap().class, PathClass::NvLink(2));
        assert_eq!(t.path(g[0], g[1]).unwrap().class, PathClass::NvLink(1));
        assert_eq!(t.path(g[0], g[5]).unwrap().class, PathClass::Sys);
        assert_eq!(t.path(g[0], g[3]).unwrap().bandwidth, 50.0);
    }

    #[test]
    fn cpulists() {
        assert_eq!(cpulist_len("0-3,8,10-11"), 7);
        assert_eq!(cpulist_len(""), 0);
        assert_eq!(cpulist_len("5"), 1);
        assert_eq!(cpulist_len("3-1,x"), 0);
    }
}
