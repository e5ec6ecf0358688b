//! Data paths: GPU-GPU copies with and without P2P, host-device copies from
//! pinned and pageable memory, inter-node GPUDirect RDMA versus host
//! staging, and storage reads with GPUDirect Storage versus a bounce buffer.
//!
//! Each path is a sequence of *phases*; a phase is a set of concurrent
//! flows on the copy-engine fabric ([`Engine::CopyEngine`]), and the next
//! phase starts when the previous one is delivered (a staged copy waits for
//! its first half). Pipelined paths put all their flows in one phase.

use crate::engine::{FlowNet, LinkId};
use crate::fabric::{Fabric, Route};
use crate::machine::{ClusterFabric, Engine, Machine, NvFabric};
use crate::model;
use crate::{SimError, SimTime};

/// One flow of a phase.
#[derive(Clone, Debug)]
pub struct PhaseFlow {
    /// Links crossed.
    pub links: Vec<LinkId>,
    /// Bytes.
    pub bytes: f64,
    /// Latency of the route.
    pub latency: SimTime,
}

impl PhaseFlow {
    fn new(r: &Route, bytes: f64) -> Self {
        PhaseFlow {
            links: r.links.clone(),
            bytes,
            latency: r.latency,
        }
    }
}

/// Runs phases one after another; `gap` is added before every phase (copy
/// submission, host synchronisation). Returns the total time.
pub fn run_phases(caps: &[f64], phases: &[(SimTime, Vec<PhaseFlow>)]) -> SimTime {
    run_phases_spans(caps, phases)
        .last()
        .map(|s| s.1)
        .unwrap_or(SimTime::ZERO)
}

/// Like [`run_phases`], returning each phase's (start after its gap, end).
pub fn run_phases_spans(
    caps: &[f64],
    phases: &[(SimTime, Vec<PhaseFlow>)],
) -> Vec<(SimTime, SimTime)> {
    let mut net = FlowNet::new(caps);
    let mut out = Vec::new();
    let mut now = SimTime::ZERO;
    let mut spans = Vec::new();
    for (gap, flows) in phases {
        net.timer(now + *gap, u64::MAX);
        // Wait for the gap timer, then start the phase's flows.
        while let Some(t) = net.next_batch(&mut out) {
            now = t;
            if out.contains(&crate::engine::Output::Timer(u64::MAX)) {
                break;
            }
        }
        let start = now;
        for (i, f) in flows.iter().enumerate() {
            net.start_flow(&f.links, f.bytes, f.latency, i as u64);
        }
        while let Some(t) = net.next_batch(&mut out) {
            now = t;
        }
        spans.push((start, now));
    }
    spans
}

/// What `gpucomm sim p2p` reports.
#[derive(Clone, Debug, PartialEq)]
pub struct P2pResult {
    /// Bandwidth (sum of both directions when bidirectional), GB/s.
    pub bandwidth_gbps: f64,
    /// Latency of a 4-byte copy, us.
    pub latency_us: f64,
    /// `NVLink x2`, `PCIe`, `staged through host`.
    pub path: String,
    /// True when the copy went peer to peer.
    pub p2p: bool,
    /// The phases of the bandwidth run: (name, start, end).
    pub phases: Vec<(String, SimTime, SimTime)>,
}

/// A GPU-GPU copy between GPUs `a` and `b` of one node, as
/// p2pBandwidthLatencyTest measures it (copy engines, `bytes` per copy).
/// With `allow_p2p` the copy goes peer to peer when the hardware allows
/// (a direct NVLink or the NVSwitch; else PCIe below one CPU socket);
/// otherwise, or across sockets, the driver stages it through host memory:
/// a device-to-host copy, a host synchronisation, a host-to-device copy.
pub fn p2p(
    machine: &Machine,
    a: usize,
    b: usize,
    bidirectional: bool,
    allow_p2p: bool,
    bytes: u64,
) -> Result<P2pResult, SimError> {
    let f = machine.fabric(Engine::CopyEngine, 1)?;
    let g = machine.node.gpus;
    let check = gpu_in_use(machine);
    let (a, b) = (check(a)?, check(b)?);
    if a == b {
        return Err(SimError::Model("--pair needs two different GPUs".into()));
    }
    let caps = f.capacities();
    let s = bytes as f64;
    let dirs: Vec<(usize, usize)> = if bidirectional {
        vec![(a, b), (b, a)]
    } else {
        vec![(a, b)]
    };
    let nv = f.nvlink_count(a, b);
    let same_socket = f.socket_of_gpu(a) == f.socket_of_gpu(b);
    let (path, p2p_ok) = if allow_p2p && nv > 0 {
        (format!("NVLink x{nv}"), true)
    } else if allow_p2p && same_socket {
        ("PCIe".to_string(), true)
    } else {
        ("staged through host memory".to_string(), false)
    };
    // GPUs of different hosts in one NVLink domain (a GB200 NVL72's trays)
    // share no host memory to stage through.
    let per_host = (g / machine.node.hosts.max(1)).max(1);
    if !p2p_ok && a / per_host != b / per_host {
        return Err(SimError::Model(format!(
            "GPU {a} and GPU {b} are in different hosts of {}'s NVLink domain ({per_host} GPUs \
             per host): they share no host memory to stage a copy through; NVLink (P2P) is \
             their path",
            machine.name
        )));
    }
    // A peer copy through an NVSwitch starts later than one over a direct
    // NVLink or PCIe (published runs, model::nvswitch_peer_copy_start_us).
    let switched = nv > 0 && matches!(machine.node.nvlink, NvFabric::Switch { .. });
    let ce = SimTime::from_us(if switched {
        model::nvswitch_peer_copy_start_us(machine.node.arch)
    } else {
        model::CE_COPY_OVERHEAD_US
    });
    let direct_route = |x: usize, y: usize| -> Result<Route, SimError> {
        if nv > 0 {
            f.route(x, y, 0)
        } else {
            Ok(f.pcie_route(x, y))
        }
    };
    let (spans, latency, names) = if p2p_ok {
        let flows = dirs
            .iter()
            .map(|&(x, y)| direct_route(x, y).map(|r| PhaseFlow::new(&r, s)))
            .collect::<Result<Vec<_>, _>>()?;
        let sp = run_phases_spans(&caps, &[(ce, flows)]);
        let lat = ce + direct_route(a, b)?.latency;
        (sp, lat, vec!["peer copy".to_string()])
    } else {
        let sp = staged_copies(&caps, &f, &dirs, s);
        // p2pBandwidthLatencyTest's latency: a 16-byte copy, one chunk.
        let lat = staged_copies(&caps, &f, &dirs[..1], 16.0)[0].1;
        let chunks = (s / model::STAGED_CHUNK_BYTES).ceil().max(1.0);
        let names = dirs
            .iter()
            .map(|&(x, y)| format!("GPU{x} -> host -> GPU{y}, {chunks} chunks"))
            .collect();
        (sp, lat, names)
    };
    let time =
        SimError::within_time_range(spans.iter().map(|x| x.1).max().unwrap_or(SimTime::ZERO))?;
    let total = s * dirs.len() as f64;
    Ok(P2pResult {
        bandwidth_gbps: total / time.as_secs_f64() / 1e9,
        latency_us: latency.as_us(),
        path,
        p2p: p2p_ok,
        phases: names
            .into_iter()
            .zip(&spans)
            .map(|(n, &(a, b))| (n, a, b))
            .collect(),
    })
}

/// One copy of a staged pipeline, for [`staged_copies`].
#[derive(Clone, Copy, Debug)]
enum StagedOp {
    /// Chunk `.1` of direction `.0`, device to host.
    Down(usize, usize),
    /// Chunk `.1` of direction `.0`, host to device.
    Up(usize, usize),
}

impl StagedOp {
    /// The op and an event kind as a [`FlowNet`] tag: (chunk << 4) |
    /// (direction << 3) | (up << 2) | kind (two directions at most).
    fn tag(self, kind: u64) -> u64 {
        let (d, k, up) = match self {
            StagedOp::Down(d, k) => (d, k, 0),
            StagedOp::Up(d, k) => (d, k, 4),
        };
        debug_assert!(d < 2 && kind < 4);
        ((k as u64) << 4) | ((d as u64) << 3) | up | kind
    }

    /// The inverse of [`StagedOp::tag`].
    fn untag(t: u64) -> (Self, u64) {
        let (d, k) = (((t >> 3) & 1) as usize, (t >> 4) as usize);
        let op = if t & 4 == 0 {
            StagedOp::Down(d, k)
        } else {
            StagedOp::Up(d, k)
        };
        (op, t & 3)
    }
}

/// The copy engines and staging buffers of [`staged_run`].
struct StagedPipeline<'a> {
    /// (source, destination) per direction.
    dirs: &'a [(usize, usize)],
    /// Chunks per direction.
    chunks: usize,
    /// The next chunk each direction copies down.
    next_down: Vec<usize>,
    /// Each direction's staging buffers ready for a chunk.
    free: Vec<usize>,
    /// Per GPU: whether its engine is busy, and the copies waiting for it.
    engines: Vec<(usize, bool, std::collections::VecDeque<StagedOp>)>,
    /// An engine's start of one copy.
    ce: SimTime,
}

/// Event kinds of [`staged_run`]: a copy starts on its engine after the
/// engine's start cost, its flow is delivered, a chunk is known landed in
/// host memory, a buffer is known drained.
const STAGED_START: u64 = 0;
const STAGED_FLOW: u64 = 1;
const STAGED_LANDED: u64 = 2;
const STAGED_DRAINED: u64 = 3;

impl StagedPipeline<'_> {
    fn engine_of(&self, op: StagedOp) -> usize {
        match op {
            StagedOp::Down(d, _) => self.dirs[d].0,
            StagedOp::Up(d, _) => self.dirs[d].1,
        }
    }

    /// Queues `op` on its GPU's engine and starts the engine if it is idle.
    fn enqueue(&mut self, net: &mut FlowNet, op: StagedOp) {
        let g = self.engine_of(op);
        let i = match self.engines.iter().position(|e| e.0 == g) {
            Some(i) => i,
            None => {
                self.engines.push((g, false, Default::default()));
                self.engines.len() - 1
            }
        };
        self.engines[i].2.push_back(op);
        if !self.engines[i].1 {
            self.engines[i].1 = true;
            self.start_next(net, i);
        }
    }

    /// Engine `i` takes its next queued copy, or goes idle.
    fn start_next(&mut self, net: &mut FlowNet, i: usize) {
        match self.engines[i].2.pop_front() {
            Some(op) => net.timer(net.now() + self.ce, op.tag(STAGED_START)),
            None => self.engines[i].1 = false,
        }
    }

    /// `op` has been delivered: its engine moves on.
    fn done(&mut self, net: &mut FlowNet, op: StagedOp) {
        let g = self.engine_of(op);
        let i = self
            .engines
            .iter()
            .position(|e| e.0 == g)
            .expect("a copy ran on its engine");
        self.start_next(net, i);
    }

    /// Direction `d` copies its next chunks down into its free buffers.
    fn refill(&mut self, net: &mut FlowNet, d: usize) {
        while self.free[d] > 0 && self.next_down[d] < self.chunks {
            self.free[d] -= 1;
            self.enqueue(net, StagedOp::Down(d, self.next_down[d]));
            self.next_down[d] += 1;
        }
    }
}

/// GPU-to-GPU copies of `bytes` each the driver stages through host memory,
/// one per direction `(source, destination)`, run together; returns each
/// direction's (start, end).
///
/// The model (docs/sim.md, "Staged copies"): a copy moves in chunks of
/// [`model::STAGED_CHUNK_BYTES`] through [`model::STAGED_BUFFERS`] pinned
/// host buffers per direction. A chunk is a device-to-host copy on the
/// source GPU's copy engine, then, [`model::STAGED_SYNC_US`] after it
/// lands, a host-to-device copy on the destination's; its buffer takes the
/// next chunk another hand-over after it is drained. Each copy costs the
/// engine [`model::HOST_COPY_START_US`] to start, and a GPU's engine runs
/// one staged copy at a time, first come first served, so in a
/// bidirectional copy each GPU's engine serves both its outgoing and its
/// incoming chunks (published bidirectional staged figures are 1.0-1.7
/// times the unidirectional ones, not twice). The buffers are in the
/// memory of the destination GPU's socket, where NCCL's shared-memory
/// transport (its path between GPUs without P2P) puts its buffers by
/// default (NVIDIA/nccl `src/transport/shm.cc`: `NCCL_SHM_LOCALITY`
/// defaults to `SHM_RECV_SIDE`, the receiver allocating them); the CUDA
/// driver's staging for `cudaMemcpyPeer` is not published. So a copy
/// across sockets crosses the socket link on its device-to-host half.
///
/// Beyond [`STAGED_EXACT_CHUNKS`] chunks the pipeline is periodic, so the
/// time is extrapolated from two exact runs (that many chunks and half as
/// many): a terabyte costs what 1024 chunks cost.
fn staged_copies(
    caps: &[f64],
    f: &ClusterFabric,
    dirs: &[(usize, usize)],
    bytes: f64,
) -> Vec<(SimTime, SimTime)> {
    let chunks = bytes / model::STAGED_CHUNK_BYTES;
    if chunks <= STAGED_EXACT_CHUNKS as f64 {
        return staged_run(caps, f, dirs, bytes);
    }
    let m = STAGED_EXACT_CHUNKS as f64;
    let full = staged_run(caps, f, dirs, m * model::STAGED_CHUNK_BYTES);
    let half = staged_run(caps, f, dirs, m / 2.0 * model::STAGED_CHUNK_BYTES);
    full.iter()
        .zip(&half)
        .map(|(&(s, e), &(_, h))| {
            let period = (e.as_secs_f64() - h.as_secs_f64()) / (m / 2.0);
            (s, e + SimTime::from_secs_f64((chunks - m) * period))
        })
        .collect()
}

/// Chunks a staged copy simulates one by one (see [`staged_copies`]).
const STAGED_EXACT_CHUNKS: usize = 1024;

/// [`staged_copies`], every chunk simulated.
fn staged_run(
    caps: &[f64],
    f: &ClusterFabric,
    dirs: &[(usize, usize)],
    bytes: f64,
) -> Vec<(SimTime, SimTime)> {
    let chunk = model::STAGED_CHUNK_BYTES;
    let n = ((bytes / chunk).ceil() as usize).max(1);
    let chunk_bytes = |k: usize| {
        if k + 1 < n {
            chunk
        } else {
            bytes - chunk * (n - 1) as f64
        }
    };
    let sync = SimTime::from_us(model::STAGED_SYNC_US);
    // The staging buffers sit in the destination GPU's socket's memory
    // (see `staged_copies`): the device-to-host half crosses the socket
    // link where the GPUs are on different sockets.
    let down: Vec<Route> = dirs
        .iter()
        .map(|&(x, y)| f.host_route_at(x, f.socket_of_gpu(y), false))
        .collect();
    let up: Vec<Route> = dirs.iter().map(|&(_, y)| f.host_route(y, true)).collect();
    let mut p = StagedPipeline {
        dirs,
        chunks: n,
        next_down: vec![0; dirs.len()],
        free: vec![model::STAGED_BUFFERS; dirs.len()],
        engines: Vec::new(),
        ce: SimTime::from_us(model::HOST_COPY_START_US),
    };
    let mut ups_done = vec![0usize; dirs.len()];
    let mut ends = vec![SimTime::ZERO; dirs.len()];
    let mut net = FlowNet::new(caps);
    for d in 0..dirs.len() {
        p.refill(&mut net, d);
    }
    let mut out = Vec::new();
    while net.next_batch(&mut out).is_some() {
        for o in out.drain(..) {
            let (op, kind) = match o {
                crate::engine::Output::Delivered(t) | crate::engine::Output::Timer(t) => {
                    StagedOp::untag(t)
                }
            };
            match (kind, op) {
                (STAGED_START, StagedOp::Down(d, k) | StagedOp::Up(d, k)) => {
                    let r = match op {
                        StagedOp::Down(..) => &down[d],
                        StagedOp::Up(..) => &up[d],
                    };
                    net.start_flow(&r.links, chunk_bytes(k), r.latency, op.tag(STAGED_FLOW));
                }
                (STAGED_FLOW, StagedOp::Down(..)) => {
                    p.done(&mut net, op);
                    net.timer(net.now() + sync, op.tag(STAGED_LANDED));
                }
                (STAGED_FLOW, StagedOp::Up(d, _)) => {
                    p.done(&mut net, op);
                    ups_done[d] += 1;
                    if ups_done[d] == n {
                        ends[d] = net.now();
                    }
                    net.timer(net.now() + sync, op.tag(STAGED_DRAINED));
                }
                (STAGED_LANDED, StagedOp::Down(d, k)) => p.enqueue(&mut net, StagedOp::Up(d, k)),
                (STAGED_DRAINED, StagedOp::Up(d, _)) => {
                    p.free[d] += 1;
                    p.refill(&mut net, d);
                }
                _ => unreachable!("staged pipeline event {kind} for {op:?}"),
            }
        }
    }
    ends.into_iter().map(|e| (SimTime::ZERO, e)).collect()
}

/// Checks a GPU index of a copy on `machine`: one of the GPUs in use
/// ([`Machine::gpus_per_node`], `--gpus`), not merely of the node's.
fn gpu_in_use(machine: &Machine) -> impl Fn(usize) -> Result<usize, SimError> + '_ {
    move |g| {
        let used = machine.gpus_per_node();
        if g < used {
            Ok(g)
        } else if used < machine.node.gpus {
            Err(SimError::Model(format!(
                "gpu{g} is not in use: GPUs 0 to {} of {}'s {} are",
                used - 1,
                machine.name,
                machine.node.gpus
            )))
        } else {
            Err(SimError::Model(format!(
                "GPU index out of range: gpu{g} does not exist ({} GPUs)",
                machine.node.gpus
            )))
        }
    }
}

/// An endpoint of `gpucomm sim copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Host memory.
    Host,
    /// GPU `i` of node 0.
    Gpu(usize),
    /// The node's NVMe storage.
    Storage,
}

impl Endpoint {
    /// Parses `host`, `gpu3`, `storage`/`nvme`.
    pub fn parse(s: &str) -> Option<Self> {
        let l = s.to_ascii_lowercase();
        match l.as_str() {
            "host" | "cpu" => Some(Endpoint::Host),
            "storage" | "nvme" | "disk" => Some(Endpoint::Storage),
            _ => l
                .strip_prefix("gpu")
                .and_then(|n| n.parse().ok())
                .map(Endpoint::Gpu),
        }
    }
}

/// What `gpucomm sim copy` reports.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyResult {
    /// Throughput, GB/s.
    pub bandwidth_gbps: f64,
    /// Time of one copy of the size, us.
    pub time_us: f64,
    /// Description of the path.
    pub path: String,
    /// The phases: (name, start, end).
    pub phases: Vec<(String, SimTime, SimTime)>,
}

/// A copy of `bytes` between endpoints of node 0, as bandwidthTest (host
/// and device) or a storage read (GPUDirect Storage or bounce buffer) does it.
///
/// * host -> GPU pinned: one DMA over PCIe (NVLink-C2C on a superchip).
/// * host -> GPU pageable: the driver first copies into a pinned staging
///   buffer with the CPU, then DMAs (NVIDIA, "How to Optimize Data
///   Transfers in CUDA C/C++"); the two run one after the other.
/// * storage -> GPU: with GPUDirect Storage a DMA from the drive into GPU
///   memory; without (`bounce`), into host memory then a DMA to the GPU.
pub fn copy(
    machine: &Machine,
    from: Endpoint,
    to: Endpoint,
    pageable: bool,
    gds: bool,
    bytes: u64,
) -> Result<CopyResult, SimError> {
    let f = machine.fabric(Engine::CopyEngine, 1)?;
    let caps = f.capacities();
    let ce = SimTime::from_us(model::HOST_COPY_START_US);
    let s = bytes as f64;
    let check = gpu_in_use(machine);
    let (phases, path): (Vec<(SimTime, Vec<PhaseFlow>)>, String) = match (from, to) {
        (Endpoint::Host, Endpoint::Gpu(g)) | (Endpoint::Gpu(g), Endpoint::Host) => {
            let g = check(g)?;
            let h2d = from == Endpoint::Host;
            let dma = PhaseFlow::new(&f.host_route(g, h2d), s);
            let over = if machine.node.c2c_gbps.is_some() {
                "NVLink-C2C"
            } else {
                "PCIe"
            };
            if pageable {
                let cpu = PhaseFlow::new(&f.memcpy_route(g), s);
                let phases = if h2d {
                    vec![(SimTime::ZERO, vec![cpu]), (ce, vec![dma])]
                } else {
                    vec![(ce, vec![dma]), (SimTime::ZERO, vec![cpu])]
                };
                (
                    phases,
                    format!("pageable: CPU memcpy to a pinned staging buffer + DMA over {over}"),
                )
            } else {
                (vec![(ce, vec![dma])], format!("pinned: DMA over {over}"))
            }
        }
        (Endpoint::Storage, Endpoint::Gpu(g)) => {
            let g = check(g)?;
            if gds {
                // A storage DMA, not a host copy: the engine's start only.
                let start = SimTime::from_us(model::CE_COPY_OVERHEAD_US);
                (
                    vec![(start, vec![PhaseFlow::new(&f.storage_route(g, false)?, s)])],
                    "GPUDirect Storage: NVMe DMA straight into GPU memory".into(),
                )
            } else {
                (
                    vec![
                        (
                            SimTime::ZERO,
                            vec![PhaseFlow::new(&f.storage_route(g, true)?, s)],
                        ),
                        (ce, vec![PhaseFlow::new(&f.host_route(g, true), s)]),
                    ],
                    "bounce buffer: NVMe into host memory, then DMA to the GPU".into(),
                )
            }
        }
        (Endpoint::Storage, Endpoint::Host) => (
            vec![(
                SimTime::ZERO,
                vec![PhaseFlow::new(&f.storage_route(0, true)?, s)],
            )],
            "NVMe into host memory".into(),
        ),
        (Endpoint::Gpu(a), Endpoint::Gpu(b)) => {
            if a == b {
                // bandwidthTest's device-to-device figure rides on the GPU's
                // L2 cache (an H100's: 2.9 TB/s at 13-15 MB, 2.0-2.4 from 24
                // to 68 MB; ZiyanIshani/vpbenchmarking), which the model does
                // not have.
                return Err(SimError::Model(format!(
                    "--from and --to are both gpu{a}: a copy within one GPU is not modeled"
                )));
            }
            let r = p2p(machine, check(a)?, check(b)?, false, true, bytes)?;
            let t = s / (r.bandwidth_gbps * 1e9);
            return Ok(CopyResult {
                bandwidth_gbps: r.bandwidth_gbps,
                time_us: t * 1e6,
                path: r.path,
                phases: r.phases,
            });
        }
        _ => {
            return Err(SimError::Model(format!(
                "copy from {from:?} to {to:?} is not modeled (use host, gpuN, storage)"
            )));
        }
    };
    let spans = run_phases_spans(&caps, &phases);
    let t = SimError::within_time_range(spans.last().map(|x| x.1).unwrap_or(SimTime::ZERO))?;
    Ok(CopyResult {
        bandwidth_gbps: s / t.as_secs_f64() / 1e9,
        time_us: t.as_us(),
        phases: spans
            .iter()
            .enumerate()
            .map(|(i, &(a, b))| (format!("phase {}", i + 1), a, b))
            .collect(),
        path,
    })
}

/// What `gpucomm sim rdma` reports.
#[derive(Clone, Debug, PartialEq)]
pub struct RdmaResult {
    /// Throughput, GB/s.
    pub bandwidth_gbps: f64,
    /// Latency of a small message, us.
    pub latency_us: f64,
    /// Path description.
    pub path: String,
    /// The phases: (name, start, end).
    pub phases: Vec<(String, SimTime, SimTime)>,
}

/// [`rdma_between`] node 0 and node 1: `gpucomm sim rdma`'s default.
pub fn rdma(machine: &Machine, gpu: usize, gdr: bool, bytes: u64) -> Result<RdmaResult, SimError> {
    rdma_between(machine, (0, 1), gpu, gdr, bytes)
}

/// A GPU-to-GPU transfer from GPU `gpu` of node `from` to GPU `gpu` of
/// node `to` through NIC `gpu`'s rail: with GPUDirect RDMA the NIC reads
/// GPU memory directly; without, the data is copied to host memory, sent
/// from there and copied up on the far side (NCCL pipelines the three
/// copies, so they share the links concurrently). The fabric holds the
/// machine's `nodes` (at least two: a one-node machine runs as two of
/// it), so that a pair on different leaves of an oversubscribed
/// leaf/spine network crosses their uplinks, each of the capacity its
/// leaf's nodes give it; `from` and `to` are two different nodes among
/// them.
///
/// ```
/// use gpucomm_sim::{Machine, transfer::rdma_between};
/// let mut m = Machine::preset("dgx-h100").unwrap();
/// m.nodes = 4;
/// assert!(rdma_between(&m, (0, 3), 0, true, 1 << 20).is_ok());
/// assert!(rdma_between(&m, (0, 4), 0, true, 1 << 20).is_err());
/// assert!(rdma_between(&m, (2, 2), 0, true, 1 << 20).is_err());
/// ```
pub fn rdma_between(
    machine: &Machine,
    (from, to): (usize, usize),
    gpu: usize,
    gdr: bool,
    bytes: u64,
) -> Result<RdmaResult, SimError> {
    if machine.node.nics == 0 {
        return Err(SimError::Model(format!("{} has no NICs", machine.name)));
    }
    let nodes = machine.nodes.max(2);
    if from == to || from >= nodes || to >= nodes {
        return Err(SimError::Model(format!(
            "nodes {from} and {to}: a transfer joins two different nodes of the {nodes} (0 to {})",
            nodes - 1
        )));
    }
    let f = machine.fabric(Engine::CopyEngine, nodes)?;
    let rpn = f.ranks_per_node();
    let gpu = gpu_in_use(machine)(gpu)?;
    let caps = f.capacities();
    let s = bytes as f64;
    let (src, dst) = (from * rpn + gpu, to * rpn + gpu);
    let net = f.route(src, dst, 0)?;
    let ce = SimTime::from_us(model::HOST_COPY_START_US);
    if gdr {
        let t = SimError::within_time_range(run_phases(
            &caps,
            &[(SimTime::ZERO, vec![PhaseFlow::new(&net, s)])],
        ))?;
        return Ok(RdmaResult {
            bandwidth_gbps: s / t.as_secs_f64() / 1e9,
            latency_us: net.latency.as_us(),
            path: "GPUDirect RDMA: NIC reads and writes GPU memory over PCIe".into(),
            phases: vec![("RDMA write".into(), SimTime::ZERO, t)],
        });
    }
    // Host staged: D2H on node `from`, host memory to host memory over
    // the NIC the GPUDirect transfer takes (and the network links it
    // crosses), H2D on node `to` (the host routes are node 0's: moved to
    // those nodes' links).
    let d2h = f.host_route(gpu, false);
    let h2d = f.host_route(gpu, true);
    let per_node = f.links_per_node() as u32;
    let on_node = |r: &Route, node: usize| {
        let mut r = r.clone();
        r.links
            .iter_mut()
            .for_each(|l| *l += per_node * node as u32);
        r
    };
    let (d2h_near, h2d_far) = (on_node(&d2h, from), on_node(&h2d, to));
    let wire = f.host_net_route(src, dst, 0)?;
    let flows = vec![
        PhaseFlow::new(&d2h_near, s),
        PhaseFlow::new(&wire, s),
        PhaseFlow::new(&h2d_far, s),
    ];
    let t = SimError::within_time_range(run_phases(&caps, &[(ce, flows)]))?;
    let lat = ce + d2h.latency + wire.latency + ce + h2d.latency;
    Ok(RdmaResult {
        bandwidth_gbps: s / t.as_secs_f64() / 1e9,
        latency_us: lat.as_us(),
        path: "host-staged: D2H copy, RDMA from host memory, H2D copy (pipelined)".into(),
        phases: vec![("D2H + RDMA + H2D (pipelined)".into(), ce, t)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `gpucomm sim p2p` copies GPU to GPU exactly where `gpucomm topo
    /// --p2p` says GPUDirect P2P applies (`PathInfo::p2p`): the topology
    /// read NODE pairs (host bridges of one socket) as no P2P while the
    /// simulator copied P2P between them.
    #[test]
    fn p2p_copies_where_the_topology_says_p2p_applies() {
        for name in ["pcie-8gpu", "dgx1-v100", "dgx-h100", "dgx2", "quad-gh200"] {
            let t = gpucomm_topo::preset(name).unwrap();
            let m = Machine::preset(name).unwrap();
            let g = t.gpus();
            for a in 0..g.len() {
                for b in (0..g.len()).filter(|&b| b != a) {
                    let topo = t.path(g[a], g[b]).unwrap().p2p;
                    let sim = p2p(&m, a, b, false, true, 1 << 20).unwrap().p2p;
                    assert_eq!(sim, topo, "{name} gpu{a} -> gpu{b}");
                }
            }
        }
    }

    #[test]
    fn gpus_of_different_hosts_of_an_nvlink_domain_do_not_stage_through_host_memory() {
        let m = Machine::preset("gb200-nvl72").unwrap();
        assert_eq!((m.node.gpus, m.node.hosts), (72, 18));
        // Within a tray (GPUs 0-3): staged through its Graces' memory.
        assert!(!p2p(&m, 0, 3, false, false, 1 << 20).unwrap().p2p);
        // Across trays only NVLink joins them.
        let e = p2p(&m, 0, 4, false, false, 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("different hosts"), "{e}");
        assert!(p2p(&m, 0, 71, false, true, 1 << 20).unwrap().p2p);
        // A machine of one host is unaffected.
        let h = Machine::preset("dgx-h100").unwrap();
        assert_eq!(h.node.hosts, 1);
        assert!(!p2p(&h, 0, 7, false, false, 1 << 20).unwrap().p2p);
    }

    #[test]
    fn a_transfer_past_the_time_range_is_an_error_not_a_time() {
        // A GH200 whose C2C moves a few bytes a second: a host copy, a
        // host-staged RDMA and a staged peer copy through it would end
        // past the ~213 days SimTime holds; each says so instead of
        // reporting the saturated time.
        let mut m = Machine::preset("gh200").unwrap();
        m.node.c2c_gbps = Some(1e-9);
        let e = copy(&m, Endpoint::Host, Endpoint::Gpu(0), false, false, 32 << 20).unwrap_err();
        assert!(matches!(e, SimError::Limit { .. }), "{e}");
        let e = rdma(&m, 0, false, 32 << 20).unwrap_err();
        assert!(matches!(e, SimError::Limit { .. }), "{e}");
        let mut q = Machine::preset("quad-gh200").unwrap();
        q.node.c2c_gbps = Some(1e-9);
        let e = p2p(&q, 0, 1, false, false, 32 << 20).unwrap_err();
        assert!(matches!(e, SimError::Limit { .. }), "{e}");
        // The same sizes on the real links finish.
        let ok = Machine::preset("gh200").unwrap();
        assert!(
            copy(
                &ok,
                Endpoint::Host,
                Endpoint::Gpu(0),
                false,
                false,
                32 << 20
            )
            .is_ok()
        );
    }

    /// The slower of a staged copy's two host routes on GPUs `x` -> `y`,
    /// GB/s (their links' least capacity).
    fn staged_link_gbps(f: &ClusterFabric, x: usize, y: usize) -> f64 {
        let caps = f.capacities();
        [
            f.host_route_at(x, f.socket_of_gpu(y), false),
            f.host_route(y, true),
        ]
        .iter()
        .flat_map(|r| r.links.iter().map(|&l| caps[l as usize]))
        .fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn staged_copy_runs_at_the_pipelines_steady_state() {
        // DGX-1 GPUs 0 and 5: different sockets, no link in common.
        let m = Machine::preset("dgx1-v100").unwrap();
        let f = m.fabric(Engine::CopyEngine, 1).unwrap();
        let caps = f.capacities();
        let r = staged_link_gbps(&f, 0, 5) * 1e9;
        let c = model::STAGED_CHUNK_BYTES;
        let ce = model::HOST_COPY_START_US * 1e-6;
        let sync = model::STAGED_SYNC_US * 1e-6;
        let bytes = 200.0 * c;
        // One way: with two buffers a buffer cycles through both halves and
        // both hand-overs, and the two buffers take turns: one chunk per
        // (copy start + chunk on the wire + hand-over).
        let one = staged_copies(&caps, &f, &[(0, 5)], bytes);
        let got = bytes / one[0].1.as_secs_f64();
        let want = c / (ce + c / r + sync);
        assert!(
            (got / want - 1.0).abs() < 0.02,
            "one way {got:e} B/s, steady state {want:e}"
        );
        // Both ways: each GPU's engine carries its outgoing and its incoming
        // chunks one after the other, so together they move one chunk per
        // engine time (two copies), not twice the one-way rate.
        let both = staged_copies(&caps, &f, &[(0, 5), (5, 0)], bytes);
        let end = both[0].1.max(both[1].1);
        let got2 = 2.0 * bytes / end.as_secs_f64();
        let want2 = 2.0 * c / (2.0 * (ce + c / r));
        assert!(
            (got2 / want2 - 1.0).abs() < 0.02,
            "both ways {got2:e} B/s, engine-bound {want2:e}"
        );
        assert!(got2 < 1.5 * got);
    }

    #[test]
    fn long_staged_copies_extrapolate_the_periodic_pipeline() {
        let m = Machine::preset("dgx1-v100").unwrap();
        let f = m.fabric(Engine::CopyEngine, 1).unwrap();
        let caps = f.capacities();
        let bytes = 3000.5 * model::STAGED_CHUNK_BYTES;
        for dirs in [&[(0, 1)][..], &[(0, 1), (1, 0)], &[(0, 5), (5, 0)]] {
            let exact = staged_run(&caps, &f, dirs, bytes);
            let fast = staged_copies(&caps, &f, dirs, bytes);
            for (e, x) in exact.iter().zip(&fast) {
                let (e, x) = (e.1.as_secs_f64(), x.1.as_secs_f64());
                assert!(
                    (x / e - 1.0).abs() < 1e-3,
                    "{dirs:?}: exact {e} s, extrapolated {x} s"
                );
            }
        }
    }

    #[test]
    fn staged_latency_is_two_copies_and_a_hand_over() {
        let m = Machine::preset("dgx1-v100").unwrap();
        let f = m.fabric(Engine::CopyEngine, 1).unwrap();
        let r = p2p(&m, 0, 1, false, false, 1 << 20).unwrap();
        let want = 2.0 * model::HOST_COPY_START_US
            + model::STAGED_SYNC_US
            + f.host_route(0, false).latency.as_us()
            + f.host_route(1, true).latency.as_us();
        // 16 bytes on the wire add well under a nanosecond.
        assert!(
            (r.latency_us - want).abs() < 0.01,
            "{} vs {want}",
            r.latency_us
        );
        // A copy smaller than a chunk is one chunk; the odd last chunk of a
        // larger one is moved too.
        let caps = f.capacities();
        let c = model::STAGED_CHUNK_BYTES;
        let one = staged_copies(&caps, &f, &[(0, 1)], 0.5 * c)[0].1;
        let two = staged_copies(&caps, &f, &[(0, 1)], 1.5 * c)[0].1;
        let three = staged_copies(&caps, &f, &[(0, 1)], 2.5 * c)[0].1;
        assert!(one < two && two < three, "{one:?} {two:?} {three:?}");
    }

    #[test]
    fn a_staged_copy_across_sockets_crosses_the_socket_link() {
        // pcie-8gpu: GPUs 0-3 on socket 0, 4-7 on socket 1. A staged copy
        // from GPU 0 to GPU 4 went through no socket link: it cost what
        // GPU 0 to GPU 1 did (20.35 GB/s, 17.12 us).
        let m = Machine::preset("pcie-8gpu").unwrap();
        let f = m.fabric(Engine::CopyEngine, 1).unwrap();
        assert_ne!(f.socket_of_gpu(0), f.socket_of_gpu(4));
        assert_eq!(f.socket_of_gpu(0), f.socket_of_gpu(1));
        let size = 64 << 20;
        let near = p2p(&m, 0, 1, false, false, size).unwrap();
        let far = p2p(&m, 0, 4, false, false, size).unwrap();
        // The buffers are on the destination's socket: the device-to-host
        // half crosses the socket link, its hop latency once per chunk.
        assert!(
            (far.latency_us - near.latency_us - model::SMP_HOP_US).abs() < 1e-6,
            "{} vs {}",
            far.latency_us,
            near.latency_us
        );
        assert!(far.bandwidth_gbps < near.bandwidth_gbps);
        let down = f.host_route_at(0, f.socket_of_gpu(4), false);
        let names: Vec<String> = down.links.iter().map(|&l| f.link_name(l)).collect();
        assert!(names.contains(&"node0:cpu0->cpu1".to_string()), "{names:?}");
        assert!(
            names.contains(&"node0:cpu1 memory".to_string()),
            "{names:?}"
        );
        // A socket link slower than PCIe binds the copy across sockets
        // only.
        let mut slow = m.clone();
        slow.node.inter_socket_gbps = 2.0;
        let slow_far = p2p(&slow, 0, 4, false, false, size).unwrap();
        assert!(slow_far.bandwidth_gbps < 2.0, "{}", slow_far.bandwidth_gbps);
        let slow_near = p2p(&slow, 0, 1, false, false, size).unwrap();
        assert_eq!(slow_near.bandwidth_gbps, near.bandwidth_gbps);
    }

    #[test]
    fn staged_copy_is_slower_than_p2p() {
        let m = Machine::preset("dgx1-v100").unwrap();
        let p = p2p(&m, 0, 3, false, true, 64 << 20).unwrap();
        let s = p2p(&m, 0, 3, false, false, 64 << 20).unwrap();
        assert!(p.p2p && !s.p2p);
        assert!(p.bandwidth_gbps > 2.0 * s.bandwidth_gbps);
        assert!(s.latency_us > 5.0 * p.latency_us);
    }

    #[test]
    fn a_host_copy_costs_the_host_copy_start_besides_its_bytes() {
        // A 16-byte pinned copy is the start and the route's latency; the
        // peer copy start (CE_COPY_OVERHEAD_US) is not used for host copies.
        let m = Machine::preset("dgx-h100").unwrap();
        let f = m.fabric(Engine::CopyEngine, 1).unwrap();
        for (from, to, h2d) in [
            (Endpoint::Host, Endpoint::Gpu(2), true),
            (Endpoint::Gpu(2), Endpoint::Host, false),
        ] {
            let r = copy(&m, from, to, false, false, 16).unwrap();
            let want = model::HOST_COPY_START_US + f.host_route(2, h2d).latency.as_us();
            assert!((r.time_us - want).abs() < 0.01, "{} vs {want}", r.time_us);
        }
    }

    #[test]
    fn pageable_is_slower_than_pinned() {
        let m = Machine::preset("dgx-h100").unwrap();
        let pinned = copy(
            &m,
            Endpoint::Host,
            Endpoint::Gpu(0),
            false,
            false,
            256 << 20,
        )
        .unwrap();
        let pageable = copy(&m, Endpoint::Host, Endpoint::Gpu(0), true, false, 256 << 20).unwrap();
        assert!(pageable.bandwidth_gbps < pinned.bandwidth_gbps);
    }

    #[test]
    fn gds_beats_bounce_and_gdr_beats_staging_on_latency() {
        let m = Machine::preset("dgx-a100").unwrap();
        let g = copy(
            &m,
            Endpoint::Storage,
            Endpoint::Gpu(0),
            false,
            true,
            1 << 30,
        )
        .unwrap();
        let b = copy(
            &m,
            Endpoint::Storage,
            Endpoint::Gpu(0),
            false,
            false,
            1 << 30,
        )
        .unwrap();
        assert!(g.bandwidth_gbps > b.bandwidth_gbps);
        let d = rdma(&m, 0, true, 1 << 30).unwrap();
        let h = rdma(&m, 0, false, 1 << 30).unwrap();
        assert!(d.latency_us < h.latency_us);
        assert!(d.bandwidth_gbps >= h.bandwidth_gbps * 0.999);
    }

    #[test]
    fn host_staged_rdma_crosses_the_leaf_uplinks_and_the_way_to_the_nic() {
        // One 400 Gb/s NIC per node, one node per leaf, 4:1 uplinks: the
        // uplink (a quarter of the NIC) binds GPUDirect RDMA at 12.42 GB/s;
        // the staged transfer crosses the same uplink (it ran at 49.67,
        // the NIC's rate, past it).
        let leaves = gpucomm_topo::ClusterOptions {
            fabric: gpucomm_topo::Fabric::LeafSpine,
            nodes_per_leaf: 1,
            oversubscription: 4.0,
            ..Default::default()
        };
        let m = Machine::select_with_nics("dgx-h100", Some(1), None)
            .unwrap()
            .with_cluster_options(&leaves)
            .unwrap();
        let f = m.fabric(Engine::CopyEngine, 2).unwrap();
        let uplink = f.uplink_gbps(0).unwrap();
        let gdr = rdma(&m, 0, true, 1 << 30).unwrap().bandwidth_gbps;
        let staged = rdma(&m, 0, false, 1 << 30).unwrap().bandwidth_gbps;
        assert!(gdr <= uplink * 1.0001, "GDR {gdr} GB/s, uplink {uplink}");
        assert!(staged <= gdr * 1.0001, "staged {staged} GB/s, GDR {gdr}");
        // GPU 4 sits on the other socket from the node's one NIC (next to
        // GPU 0): host memory reaches it over the socket link and the
        // CPU's way down into the NIC's PCIe switch, on both nodes.
        let rpn = f.ranks_per_node();
        let names: Vec<String> = f
            .host_net_route(4, rpn + 4, 0)
            .unwrap()
            .links
            .iter()
            .map(|&l| f.link_name(l))
            .collect();
        for want in [
            "node0:cpu1 memory",
            "node0:cpu1->cpu0",
            "node0:cpu->pcie-switch0",
            "node0:nic0->net",
            "leaf0->spine",
            "spine->leaf1",
            "node1:pcie-switch0->cpu",
            "node1:cpu0->cpu1",
            "node1:cpu1 memory",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
    }

    #[test]
    fn copies_take_only_the_gpus_in_use() {
        // pcie-8gpu with --gpus 4: a copy with GPU 5 ran (over PCIe, or
        // staged, or from host memory) on a GPU not in use.
        let mut m = Machine::preset("pcie-8gpu").unwrap();
        m.use_gpus(4).unwrap();
        assert!(p2p(&m, 0, 3, false, true, 1 << 20).is_ok());
        let refused = [
            p2p(&m, 0, 5, false, true, 1 << 20).unwrap_err(),
            p2p(&m, 5, 0, true, false, 1 << 20).unwrap_err(),
            copy(&m, Endpoint::Host, Endpoint::Gpu(5), false, false, 1024).unwrap_err(),
            copy(&m, Endpoint::Gpu(4), Endpoint::Gpu(0), false, false, 1024).unwrap_err(),
        ];
        for e in refused {
            let e = e.to_string();
            assert!(e.contains("is not in use: GPUs 0 to 3"), "{e}");
        }
    }

    #[test]
    fn bad_endpoints_are_errors() {
        let m = Machine::preset("dgx-h100").unwrap();
        assert!(p2p(&m, 0, 0, false, true, 1024).is_err());
        assert!(p2p(&m, 0, 99, false, true, 1024).is_err());
        assert!(copy(&m, Endpoint::Host, Endpoint::Gpu(42), false, false, 1024).is_err());
        let same = copy(&m, Endpoint::Gpu(1), Endpoint::Gpu(1), false, false, 1024).unwrap_err();
        assert!(same.to_string().contains("within one GPU"), "{same}");
        assert!(Endpoint::parse("gpu3") == Some(Endpoint::Gpu(3)));
        assert!(Endpoint::parse("banana").is_none());
    }
}
