//! The hardware model of GPU interconnects.
//!
//! A [`Topology`] is a graph: [`Node`]s (hosts, CPU sockets / NUMA nodes,
//! PCIe switches, GPUs, NICs, NVSwitches, network switches, storage) joined
//! by full-duplex [`Link`]s whose [`LinkKind`] (PCIe Gen1–6 x width, NVLink
//! 1–5 x count, InfiniBand FDR–XDR, Ethernet/RoCE, QPI/UPI, Infinity Fabric,
//! NVLink-C2C) gives, through the [`catalog`], a bandwidth **per direction
//! in GB/s (1e9 B/s)** and a latency in µs.
//!
//! # Design
//!
//! - **Pure data, no I/O in the core.** Presets, clusters, routing and the
//!   file format are functions of their inputs. Only [`discover()`] reads the
//!   machine, and it takes the root directory as an argument so tests point
//!   it at fixture trees.
//! - **One graph for every scale.** A DGX box, a GB200 NVL72 rack and a
//!   128-node rail-optimized cluster are the same type; the simulator shares
//!   each link direction among the flows whose [`Hop`]s cross it.
//! - **Logical switches.** The NVSwitch chips of a baseboard (or rack) are
//!   one [`NodeKind::NvSwitch`] node, and a fabric's spine layer is one
//!   [`NodeKind::NetSwitch`], with links whose bandwidth is the sum of the
//!   ports they stand for. This is what NCCL's traffic sees (it spreads
//!   over all planes) and keeps routes single-path and cheap.
//! - **Routes are deterministic and cached.** Cheapest path by
//!   `1/bandwidth` per hop; GPUs never forward; traffic leaving a host goes
//!   through the GPU's own NIC (rail). Trees are cached per source node in
//!   `OnceLock`s, so [`Topology::route`] takes `&self` and scales to many
//!   threads and millions of flows.
//!
//! # For the simulator
//!
//! - [`Topology::gpus`]: GPUs in rank order; [`Topology::host_of_rank`],
//!   [`Topology::nic_of_rank`] (rail), [`Topology::local_cpu`] (host
//!   memory endpoint for H2D/D2H copies).
//! - [`Topology::route_into`] → `Vec<`[`Hop`]`>`: link + direction;
//!   [`Hop::channel`] numbers each direction (`2 * links().len()` of them);
//!   [`Link::bandwidth`] is that direction's capacity.
//! - [`Node::reduction`] on NVSwitch (NVLS) and network switches (SHARP);
//!   [`Topology::reduction_support`].
//! - [`select`] picks a topology from command-line input for both
//!   `gpucomm topo` and `gpucomm sim`.
//! - [`Node::gpu_arch`] and [`Node::memory_gbps`]: a GPU's architecture
//!   and device-memory bandwidth, a CPU socket's memory bandwidth
//!   ([`hardware`]); the presets are the one source of machines for the
//!   simulator, which has no table of its own.
//!
//! # Example
//!
//! ```
//! use gpucomm_topo::{select, ClusterOptions, PathClass};
//! let t = select("dgx-h100", &ClusterOptions::default()).unwrap();
//! let g = t.gpus();
//! let p = t.path(g[0], g[7]).unwrap();
//! assert_eq!(p.class, PathClass::NvLink(18));
//! assert_eq!(p.bandwidth, 450.0); // GB/s per direction (900 bidirectional)
//! ```
//!
//! # What this crate does not do
//!
//! It does not measure anything, pick collective algorithms, or model
//! congestion (that is the simulator's job); it does not model switch radix
//! or adaptive routing.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod catalog;
mod cluster;
pub mod discover;
mod error;
pub mod format;
pub mod hardware;
mod model;
mod presets;
mod route;

use std::path::Path;

pub use catalog::{IbSpeed, LinkKind, NvLinkGen, PcieGen};
pub use cluster::{ClusterOptions, Fabric, MAX_NICS, cluster, first_gpus, readable_number};
pub use discover::{DiscoverOptions, discover};
pub use error::TopoError;
pub use hardware::GpuArch;
pub use model::{Dir, Link, LinkIx, Node, NodeIx, NodeKind, Topology, TopologyBuilder};
pub use presets::{DGX1_V100_NVLINKS, PRESET_ALIASES, PRESETS, is_preset, preset, preset_names};
pub use route::{Hop, PathClass, PathInfo};

/// Picks a topology from command-line-ish input; used by `gpucomm topo` and
/// `gpucomm sim` alike.
///
/// `spec` is a preset name (see [`PRESETS`]; any case), `local` (discover
/// this machine with default options), or the path of a topology file
/// (TOML, or JSON when it ends in `.json`). Then `opts` applies: `gpus` keeps the
/// first N GPUs, `nics` / `nic_speed` change the NICs, and `nodes > 1`
/// builds a cluster of that many copies joined by `opts.fabric`
/// ([`cluster`]).
///
/// ```
/// use gpucomm_topo::{select, ClusterOptions, Fabric};
/// let opts = ClusterOptions { nodes: 2, fabric: Fabric::RailOptimized, ..Default::default() };
/// let t = select("dgx-a100", &opts).unwrap();
/// assert_eq!(t.gpus().len(), 16);
/// assert_eq!(t.hosts().len(), 2);
/// assert!(select("no-such-thing", &opts).is_err());
/// assert_eq!(select("DGX-A100", &opts).unwrap().gpus().len(), 16);
/// ```
pub fn select(spec: &str, opts: &ClusterOptions) -> Result<Topology, TopoError> {
    if !names_topology(spec) {
        return Err(TopoError::UnknownTopology {
            name: spec.to_string(),
            known: preset_names(),
        });
    }
    let lower = spec.to_ascii_lowercase();
    let base = if is_preset(&lower) {
        preset(&lower)?
    } else if lower == "local" {
        discover(&DiscoverOptions::default())?
    } else {
        // Not only regular files: a directory or a device says what is
        // wrong with it when read, rather than "no such file".
        format::load(Path::new(spec))?
    };
    with_options(base, opts)
}

/// Whether [`select`] takes `spec` for something to read: a preset (any
/// case), `local`, or an existing path; otherwise it answers
/// [`TopoError::UnknownTopology`] (a command line's fault, where reading
/// what it names may fail for the file's own reasons).
///
/// ```
/// assert!(gpucomm_topo::names_topology("DGX-H100"));
/// assert!(gpucomm_topo::names_topology("local"));
/// assert!(!gpucomm_topo::names_topology("/no/such/topology.toml"));
/// ```
pub fn names_topology(spec: &str) -> bool {
    let lower = spec.to_ascii_lowercase();
    is_preset(&lower) || lower == "local" || Path::new(spec).exists()
}

/// [`select`] for a path that is always a topology file, never a preset
/// name or `local` (what `gpucomm topo --file` takes): a file named
/// `dgx-a100` is read, and a missing one is an error.
///
/// ```
/// use gpucomm_topo::{select_file, ClusterOptions};
/// let err = select_file("dgx-a100".as_ref(), &ClusterOptions::default()).unwrap_err();
/// assert!(err.to_string().contains("dgx-a100"), "{err}");
/// ```
pub fn select_file(path: &Path, opts: &ClusterOptions) -> Result<Topology, TopoError> {
    with_options(format::load(path)?, opts)
}

/// Applies `opts` to a topology as [`select`] says.
fn with_options(base: Topology, opts: &ClusterOptions) -> Result<Topology, TopoError> {
    let plain =
        opts.nodes == 1 && opts.gpus.is_none() && opts.nics.is_none() && opts.nic_speed.is_none();
    if plain {
        return Ok(base);
    }
    cluster(&base, opts)
}
