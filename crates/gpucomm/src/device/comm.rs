//! [`DeviceComm`]: collectives on device buffers over CUDA IPC or the
//! host-staged path.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use gpucomm_algo::block_partition;

use super::{DevCtx, DeviceBackend, DeviceBuffer, DeviceEvent, DevicePtr, Stream, StreamId};
use crate::dtype::Element;
use crate::{Buffer, Call, CallOptions, Communicator, DataType, Error, MemorySpace, ReduceOp};
use crate::{Failure, OpContext, TransportKind};

/// The environment variable that picks the device path: `auto` (default),
/// `ipc` or `staged`.
pub const GPU_PATH_ENV: &str = "GPUCOMM_GPU_PATH";

/// How device data moves between ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GpuPath {
    /// IPC when every rank is on this host and every pair of GPUs can reach
    /// each other (the same GPU, or P2P); staged otherwise.
    #[default]
    Auto,
    /// CUDA IPC: each rank reads its peers' device memory directly
    /// (device-to-device copies and kernels over P2P). Same host only.
    Ipc,
    /// Device → page-locked shared host memory → host collective → device.
    Staged,
}

impl GpuPath {
    /// `auto`, `ipc`, `staged`.
    pub fn name(self) -> &'static str {
        match self {
            GpuPath::Auto => "auto",
            GpuPath::Ipc => "ipc",
            GpuPath::Staged => "staged",
        }
    }

    /// Parses [`GpuPath::name`]'s words.
    pub fn parse(s: &str) -> Result<GpuPath, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(GpuPath::Auto),
            "ipc" => Ok(GpuPath::Ipc),
            "staged" => Ok(GpuPath::Staged),
            other => Err(Error::InvalidArgument(format!(
                "{GPU_PATH_ENV}={other}: expected auto, ipc or staged"
            ))),
        }
    }

    /// The path `GPUCOMM_GPU_PATH` asks for (`auto` when unset).
    pub fn from_env() -> Result<GpuPath, Error> {
        match std::env::var(GPU_PATH_ENV) {
            Ok(s) => GpuPath::parse(&s),
            Err(_) => Ok(GpuPath::Auto),
        }
    }
}

impl std::fmt::Display for GpuPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Options of [`DeviceComm::new`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceOptions {
    /// The path; `None` reads [`GPU_PATH_ENV`].
    pub path: Option<GpuPath>,
}

/// Bytes of one rank's hello at setup.
const HELLO: usize = 128;
/// Bytes of one buffer descriptor in a call's exchange.
const DESC: usize = 160;
const DESC_HEADER: usize = 48;
const DESC_MAGIC: &[u8; 4] = b"GCDB";
const DESC_VERSION: u8 = 2;
/// Point-to-point messages under this many bytes travel inline on the IPC
/// path, and their sends do not wait for the receiver, as host messages
/// under the engine's zero-copy size do.
pub(crate) const EAGER_MAX: usize = crate::engine::ZERO_COPY_MIN;
/// Messages a rank keeps from a peer that sent them before this rank
/// received (see `DeviceComm::p2p_ipc`).
const MAX_EARLY: usize = 1024;
/// Peer allocations kept open (oldest closed first).
const MAX_OPENED: usize = 256;
/// Retired (dropped, exported) allocations announced per call.
const MAX_RETIRE: usize = 13;
/// Bytes of one rank's record in a call's exchange: send and receive
/// descriptors, then the count and keys of its retired allocations.
const REC: usize = 2 * DESC + 8 + 8 * MAX_RETIRE;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DescKind {
    /// No buffer (in place: the send side).
    None = 0,
    /// An address valid in the same process.
    Address = 1,
    /// A backend IPC handle.
    Ipc = 2,
    /// Point-to-point: `bytes` follow in a message of their own.
    Inline = 3,
    /// Point-to-point: the receiver has copied the sender's buffer.
    Ack = 4,
}

/// A peer buffer as published for one call.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Desc {
    kind: DescKind,
    pid: u32,
    key: u64,
    ptr: u64,
    bytes: u64,
    /// Hash of the call (collective, op, root, dtype, count): equal on
    /// every rank of a matching call.
    call: u64,
    handle: Vec<u8>,
}

impl Desc {
    /// A point-to-point record without a buffer: `bytes` sent inline.
    fn inline(bytes: usize, call: u64) -> Desc {
        Desc {
            kind: DescKind::Inline,
            pid: std::process::id(),
            key: 0,
            ptr: 0,
            bytes: bytes as u64,
            call,
            handle: vec![],
        }
    }

    fn encode(&self) -> [u8; DESC] {
        let mut b = [0u8; DESC];
        b[..4].copy_from_slice(DESC_MAGIC);
        b[4] = DESC_VERSION;
        b[5] = self.kind as u8;
        b[6..8].copy_from_slice(&(self.handle.len() as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b[24..32].copy_from_slice(&self.ptr.to_le_bytes());
        b[32..40].copy_from_slice(&self.bytes.to_le_bytes());
        b[40..48].copy_from_slice(&self.call.to_le_bytes());
        b[DESC_HEADER..DESC_HEADER + self.handle.len()].copy_from_slice(&self.handle);
        b
    }

    fn decode(b: &[u8]) -> Result<Desc, String> {
        if b.len() != DESC {
            return Err(format!("{} bytes, expected {DESC}", b.len()));
        }
        if &b[..4] != DESC_MAGIC {
            return Err(format!("bad magic {:02x?}", &b[..4]));
        }
        if b[4] != DESC_VERSION {
            return Err(format!("version {}, this build reads {DESC_VERSION}", b[4]));
        }
        let kind = match b[5] {
            0 => DescKind::None,
            1 => DescKind::Address,
            2 => DescKind::Ipc,
            3 => DescKind::Inline,
            4 => DescKind::Ack,
            k => return Err(format!("unknown kind {k}")),
        };
        let hl = u16::from_le_bytes([b[6], b[7]]) as usize;
        if hl > DESC - DESC_HEADER {
            return Err(format!("handle of {hl} bytes"));
        }
        if b[12..16] != [0; 4] || b[DESC_HEADER + hl..].iter().any(|&x| x != 0) {
            return Err("reserved bytes are not zero".into());
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Ok(Desc {
            kind,
            pid: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            key: u64_at(16),
            ptr: u64_at(24),
            bytes: u64_at(32),
            call: u64_at(40),
            handle: b[DESC_HEADER..DESC_HEADER + hl].to_vec(),
        })
    }
}

/// A peer's buffer as this rank reaches it.
#[derive(Clone, Copy, Debug)]
struct Peer {
    ptr: DevicePtr,
    bytes: usize,
}

struct Staging {
    send: Buffer<u8>,
    recv: Buffer<u8>,
}

#[derive(Default)]
struct State {
    opened: HashMap<(usize, u64), Peer>,
    order: VecDeque<(usize, u64)>,
    scratch: Option<DeviceBuffer<u8>>,
    /// This rank's input divided by the rank count, published instead of
    /// the input by a floating-point `avg` (see `DeviceComm::premul`).
    premul: Option<DeviceBuffer<u8>>,
    staging: Option<Staging>,
    calls: u64,
    /// Point-to-point records (and inline payloads) per peer, received
    /// before the receive they are for.
    early: HashMap<usize, VecDeque<(Desc, Vec<u8>)>>,
}

/// Unregisters host memory from the device when the buffer goes.
struct Registration {
    ctx: Arc<DevCtx>,
    ptr: *mut u8,
}

// SAFETY: the pointer is only passed back to the (thread-safe) backend.
unsafe impl Send for Registration {}
// SAFETY: as above.
unsafe impl Sync for Registration {}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: registered by `DeviceComm::alloc_host`; the buffer owning
        // this guard drops it before its memory.
        unsafe { self.ctx.backend.unregister_host(self.ptr) }
    }
}

/// A [`Communicator`] whose collectives also run on [`DeviceBuffer`]s.
///
/// Made collectively (every rank calls [`DeviceComm::new`]): the ranks
/// exchange their process, device and GPU identity over the host transports
/// and agree on the [`GpuPath`]. Every call takes a [`Stream`]: the call
/// starts after the stream's earlier work and returns a [`DeviceEvent`]
/// recorded after its last step. Buffers follow the conventions of the host
/// calls ([`Communicator::run`]): `send` `None` means in place, and lengths
/// are checked the same way. Ranks in one process must share one backend.
/// A buffer may come from any `DeviceComm` of the same backend and device
/// (a parent used with its split child, say, as NCCL takes any device
/// pointer): a dropped buffer is freed once every communicator whose peer
/// processes mapped it has announced it in a later call of its own.
///
/// See the [module documentation](super) for an example.
pub struct DeviceComm {
    comm: Communicator,
    ctx: Arc<DevCtx>,
    path: GpuPath,
    /// Why that path (for `bench` and logs).
    reason: String,
    pids: Vec<u32>,
    st: Mutex<State>,
}

impl std::fmt::Debug for DeviceComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceComm(rank {} of {}, {} device {}, path {})",
            self.comm.rank(),
            self.comm.world_size(),
            self.ctx.backend.name(),
            self.ctx.device,
            self.path
        )
    }
}

fn fnv(words: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        for b in w.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

impl DeviceComm {
    /// Attaches `device` of `backend` to `comm` (collective: every rank
    /// calls it). Fails with a clear error, on every rank, when the device
    /// does not exist or `ipc` is asked for where it cannot work (a peer on
    /// another host, GPUs without P2P).
    pub fn new(
        comm: Communicator,
        backend: Arc<dyn DeviceBackend>,
        device: u32,
        opts: &DeviceOptions,
    ) -> Result<DeviceComm, Error> {
        let want = match opts.path {
            Some(p) => p,
            None => GpuPath::from_env()?,
        };
        let (n, me) = (comm.world_size(), comm.rank());
        // A local problem still takes part in the exchange, so that every
        // rank fails instead of waiting for this one.
        let local = if device >= backend.device_count() {
            Err(format!(
                "device {device}: the {} backend has {} devices",
                backend.name(),
                backend.device_count()
            ))
        } else {
            backend.physical_id(device).map_err(|e| e.to_string())
        };
        let mut hello = [0u8; HELLO];
        hello[..4].copy_from_slice(&std::process::id().to_le_bytes());
        hello[4..8].copy_from_slice(&device.to_le_bytes());
        hello[8] = want as u8;
        hello[9] = u8::from(local.is_ok());
        if let Ok(id) = &local {
            let b = id.as_bytes();
            let l = b.len().min(HELLO - 12);
            hello[10..12].copy_from_slice(&(l as u16).to_le_bytes());
            hello[12..12 + l].copy_from_slice(&b[..l]);
        }
        let mut all = vec![0u8; HELLO * n];
        comm.all_gather(&hello, &mut all)?;
        let mut pids = Vec::with_capacity(n);
        let mut ids = Vec::with_capacity(n);
        let mut bad: Vec<usize> = Vec::new();
        for p in 0..n {
            let h = &all[p * HELLO..(p + 1) * HELLO];
            pids.push(u32::from_le_bytes(h[..4].try_into().expect("4 bytes")));
            if h[8] != want as u8 {
                return Err(Error::InvalidArgument(format!(
                    "rank {p} asks for another GPU path than this rank's {want} ({GPU_PATH_ENV} must be equal on every rank)"
                )));
            }
            if h[9] == 0 {
                bad.push(p);
            }
            let l = (u16::from_le_bytes([h[10], h[11]]) as usize).min(HELLO - 12);
            ids.push(String::from_utf8_lossy(&h[12..12 + l]).into_owned());
        }
        if let Err(e) = local {
            return Err(Error::InvalidArgument(e));
        }
        if !bad.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "ranks {bad:?} could not open their device"
            )));
        }
        // May this rank read every peer's device memory?
        let mut why_not: Option<String> = None;
        for p in (0..n).filter(|&p| p != me) {
            match comm.transport_to(p) {
                Some(TransportKind::InProcess | TransportKind::Shm) => {}
                other => {
                    why_not = Some(format!(
                        "rank {p} is on another host ({})",
                        other.map(|t| t.to_string()).unwrap_or_default()
                    ));
                    break;
                }
            }
            if ids[p] == ids[me] {
                continue;
            }
            let local_peer = (0..backend.device_count())
                .find(|&d| backend.physical_id(d).ok().as_deref() == Some(ids[p].as_str()));
            let ok = match local_peer {
                Some(d) => backend.can_access_peer(device, d).unwrap_or(false),
                None => false,
            };
            if !ok {
                why_not = Some(format!(
                    "no P2P between this rank's GPU {} and rank {p}'s GPU {}",
                    ids[me], ids[p]
                ));
                break;
            }
        }
        // Agree: IPC only if every rank can.
        let mut verdict = [u8::from(why_not.is_none())];
        comm.all_reduce_in_place(&mut verdict, ReduceOp::Min)?;
        let ipc_ok = verdict[0] == 1;
        let (path, reason) = match want {
            GpuPath::Staged => (GpuPath::Staged, "asked for".to_string()),
            GpuPath::Ipc if ipc_ok => (GpuPath::Ipc, "asked for".to_string()),
            GpuPath::Ipc => {
                return Err(Error::InvalidArgument(format!(
                    "{GPU_PATH_ENV}=ipc: {}",
                    why_not.unwrap_or_else(|| "another rank cannot reach its peers' GPUs".into())
                )));
            }
            GpuPath::Auto if ipc_ok => (
                GpuPath::Ipc,
                "every rank on this host, GPUs reachable".to_string(),
            ),
            GpuPath::Auto => (
                GpuPath::Staged,
                why_not.unwrap_or_else(|| "another rank cannot reach its peers' GPUs".into()),
            ),
        };
        tracing::debug!(rank = me, path = %path, reason = %reason, "device communicator");
        Ok(DeviceComm {
            comm,
            ctx: DevCtx::new(backend, device, true),
            path,
            reason,
            pids,
            st: Mutex::new(State::default()),
        })
    }

    /// [`DeviceComm::new`] on the CUDA driver: [`Error::NoGpu`] without one.
    pub fn cuda(
        comm: Communicator,
        device: u32,
        opts: &DeviceOptions,
    ) -> Result<DeviceComm, Error> {
        let gpu = super::open_cuda()?;
        DeviceComm::new(comm, gpu, device, opts)
    }

    /// Splits into groups as [`Communicator::split`] does (collective over
    /// this communicator's ranks); each group's `DeviceComm` uses this
    /// one's backend, device and path.
    pub fn split(&self, color: Option<u32>, key: i64) -> Result<Option<DeviceComm>, Error> {
        let Some(group) = self.comm.split(color, key)? else {
            return Ok(None);
        };
        let opts = DeviceOptions {
            path: Some(self.path),
        };
        DeviceComm::new(group, self.ctx.backend.clone(), self.ctx.device, &opts).map(Some)
    }

    /// The host communicator (host buffers, pinned or not, go through it).
    pub fn comm(&self) -> &Communicator {
        &self.comm
    }

    /// The path in use (never [`GpuPath::Auto`]).
    pub fn path(&self) -> GpuPath {
        self.path
    }

    /// Why that path was chosen.
    pub fn path_reason(&self) -> &str {
        &self.reason
    }

    /// The device ordinal.
    pub fn device(&self) -> u32 {
        self.ctx.device
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn DeviceBackend> {
        &self.ctx.backend
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// A new stream on the device.
    pub fn stream(&self) -> Result<Stream, Error> {
        Stream::new(&self.ctx)
    }

    /// `n` elements of device memory (contents undefined until written).
    pub fn alloc<T: Element>(&self, n: usize) -> Result<DeviceBuffer<T>, Error> {
        DeviceBuffer::alloc(&self.ctx, n)
    }

    /// A device buffer holding a copy of `data`.
    pub fn alloc_from<T: Element>(
        &self,
        data: &[T],
        stream: &Stream,
    ) -> Result<DeviceBuffer<T>, Error> {
        let mut b = self.alloc(data.len())?;
        b.copy_from_host(data, stream)?;
        Ok(b)
    }

    /// `n` zeroed elements of page-locked host memory registered with the
    /// device (DMA reads and writes it directly), in a segment that peers on
    /// this host map: a valid buffer for the host collectives of
    /// [`DeviceComm::comm`] and for copies to and from device buffers.
    pub fn alloc_host<T: Element>(&self, n: usize) -> Result<Buffer<T>, Error> {
        let b = self.comm.alloc::<T>(n)?;
        let (ptr, bytes) = (b.as_ptr() as *mut u8, b.len() * std::mem::size_of::<T>());
        if bytes == 0 {
            return Ok(b.into_space(MemorySpace::HostPinned, None));
        }
        // SAFETY: the segment lives as long as `b`, which drops the
        // registration guard before its memory.
        unsafe {
            self.ctx
                .backend
                .register_host(self.ctx.device, ptr, bytes)?
        };
        let guard = Registration {
            ctx: self.ctx.clone(),
            ptr,
        };
        Ok(b.into_space(MemorySpace::HostPinned, Some(Box::new(guard))))
    }

    fn check_buf<T: Element>(&self, what: &str, b: &DeviceBuffer<T>) -> Result<(), Error> {
        if !Arc::ptr_eq(&b.ctx.backend, &self.ctx.backend) || b.ctx.device != self.ctx.device {
            return Err(Error::InvalidArgument(format!(
                "{what} is memory of {} device {}, this communicator uses {} device {}",
                b.ctx.backend.name(),
                b.ctx.device,
                self.ctx.backend.name(),
                self.ctx.device
            )));
        }
        Ok(())
    }

    /// The general form: `call` on device buffers (`send` `None` = in
    /// place), after `stream`'s earlier work; returns the event recorded on
    /// `stream` after the last step. `opts.timeout` bounds each wait for a
    /// peer; `opts.algorithm` applies to the staged path.
    pub fn run<T: Element>(
        &self,
        call: Call,
        send: Option<&DeviceBuffer<T>>,
        recv: &mut DeviceBuffer<T>,
        stream: &Stream,
        opts: &CallOptions,
    ) -> Result<DeviceEvent, Error> {
        if let Some(s) = send {
            self.check_buf("the send buffer", s)?;
        }
        self.check_buf("the receive buffer", recv)?;
        recv.check_stream(stream)?;
        let count = counts(
            call,
            send.map(|s| s.len()),
            recv.len(),
            self.world_size(),
            self.rank(),
        )?;
        // Gather and scatter (no IPC plan yet) stage on either path.
        let staged_only = matches!(call, Call::Gather { .. } | Call::Scatter { .. });
        let r = match self.path {
            GpuPath::Ipc if !staged_only => {
                self.run_ipc(call, T::DTYPE, count, send, recv, stream, opts)
            }
            _ => self.run_staged(call, send, recv, stream, |s, r| {
                self.comm.run(call, s, r, opts)
            }),
        };
        if r.is_err() {
            // Peers may be waiting on this rank: make them fail now (a
            // failure of the host communicator has already done so). What
            // peers sent ahead is void with it (it names their buffers).
            crate::lock(&self.st).early.clear();
            self.comm.abort();
        }
        r?;
        stream.record()
    }

    /// All-reduce: every rank gets `op` over all ranks' `send`.
    pub fn all_reduce<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        self.run(
            Call::AllReduce(op),
            Some(send),
            recv,
            stream,
            &CallOptions::default(),
        )
    }

    /// All-reduce in place.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        self.run(
            Call::AllReduce(op),
            None,
            buf,
            stream,
            &CallOptions::default(),
        )
    }

    /// Reduce-scatter: rank r gets block r of `op` over all `send`s.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        self.run(
            Call::ReduceScatter(op),
            Some(send),
            recv,
            stream,
            &CallOptions::default(),
        )
    }

    /// All-gather: every rank gets every rank's block.
    pub fn all_gather<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        self.run(
            Call::AllGather,
            Some(send),
            recv,
            stream,
            &CallOptions::default(),
        )
    }

    /// Broadcast from `root`.
    pub fn broadcast<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        root: usize,
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        self.run(
            Call::Broadcast { root },
            Some(send),
            recv,
            stream,
            &CallOptions::default(),
        )
    }

    /// Reduce to `root` (other ranks' `recv` is scratch).
    pub fn reduce<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        op: ReduceOp,
        root: usize,
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        self.run(
            Call::Reduce { op, root },
            Some(send),
            recv,
            stream,
            &CallOptions::default(),
        )
    }

    /// All-to-all: block p of this rank's `send` goes to block r of rank p.
    pub fn all_to_all<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        self.run(
            Call::AllToAll,
            Some(send),
            recv,
            stream,
            &CallOptions::default(),
        )
    }

    /// All-to-all with blocks of any size
    /// ([`crate::Communicator::all_to_all_v`]) on device buffers, after
    /// `stream`'s earlier work, through pinned host memory on either path.
    pub fn all_to_all_v<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        send_counts: &[usize],
        recv: &mut DeviceBuffer<T>,
        recv_counts: &[usize],
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        let blocks = crate::comm::Blocks {
            send: send_counts.to_vec(),
            recv: recv_counts.to_vec(),
        };
        self.run_blocks("all_to_all_v", Call::AllToAll, send, recv, blocks, stream)
    }

    /// All-gather with blocks of any size
    /// ([`crate::Communicator::all_gather_v`]) on device buffers, staged as
    /// [`DeviceComm::all_to_all_v`].
    pub fn all_gather_v<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        counts: &[usize],
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        let blocks = crate::comm::Blocks {
            send: Vec::new(),
            recv: counts.to_vec(),
        };
        self.run_blocks("all_gather_v", Call::AllGather, send, recv, blocks, stream)
    }

    /// Gather with blocks of any size ([`crate::Communicator::gather_v`])
    /// on device buffers, staged as [`DeviceComm::all_to_all_v`].
    pub fn gather_v<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        counts: &[usize],
        root: usize,
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        let blocks = crate::comm::Blocks {
            send: Vec::new(),
            recv: counts.to_vec(),
        };
        self.run_blocks(
            "gather_v",
            Call::Gather { root },
            send,
            recv,
            blocks,
            stream,
        )
    }

    /// Scatter with blocks of any size ([`crate::Communicator::scatter_v`])
    /// on device buffers, staged as [`DeviceComm::all_to_all_v`].
    pub fn scatter_v<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        counts: &[usize],
        recv: &mut DeviceBuffer<T>,
        root: usize,
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        let blocks = crate::comm::Blocks {
            send: counts.to_vec(),
            recv: Vec::new(),
        };
        self.run_blocks(
            "scatter_v",
            Call::Scatter { root },
            send,
            recv,
            blocks,
            stream,
        )
    }

    /// A call whose blocks differ in size, its arguments checked as the
    /// host communicator checks them before anything moves, then staged
    /// through pinned host memory.
    fn run_blocks<T: Element>(
        &self,
        name: &str,
        call: Call,
        send: &DeviceBuffer<T>,
        recv: &mut DeviceBuffer<T>,
        blocks: crate::comm::Blocks,
        stream: &Stream,
    ) -> Result<DeviceEvent, Error> {
        self.check_buf("the send buffer", send)?;
        self.check_buf("the receive buffer", recv)?;
        recv.check_stream(stream)?;
        crate::comm::hand_made(
            call,
            Some(send.len()),
            recv.len(),
            Some(&blocks),
            self.rank(),
            self.world_size(),
        )
        .map_err(|e| Error::InvalidArgument(format!("{name}: {e}")))?;
        let r = self.run_staged(call, Some(send), recv, stream, |s, r| {
            self.comm
                .run_blocks(call, s.unwrap_or(&[]), r, blocks.send, blocks.recv)
        });
        if r.is_err() {
            self.comm.abort();
        }
        r?;
        stream.record()
    }

    /// Barrier, ordered after `stream`'s earlier work.
    pub fn barrier(&self, stream: &Stream) -> Result<DeviceEvent, Error> {
        let mut none = self.alloc::<u8>(0)?;
        self.run(
            Call::Barrier,
            None,
            &mut none,
            stream,
            &CallOptions::default(),
        )
    }

    fn op_err(&self, call: Call, peer: Option<usize>, failure: Failure) -> Error {
        Error::Op {
            ctx: OpContext {
                op: call.name(),
                seq: self.st.lock().map(|s| s.calls).unwrap_or(0),
                rank: self.rank(),
                peer,
                transport: peer.and_then(|p| self.comm.transport_to(p)),
            },
            failure,
        }
    }

    /// `b`'s descriptor for a call; `lasting`: peers may keep it mapped
    /// (collectives), so that its memory is freed only after this
    /// communicator has announced it retired and they closed it (`b` may
    /// come from another communicator on this backend and device, a
    /// parent or a split child: each that exposed it announces it; see
    /// `Retired`).
    fn desc<T: Element>(
        &self,
        b: Option<&DeviceBuffer<T>>,
        call_hash: u64,
        lasting: bool,
    ) -> Result<Desc, Error> {
        let Some(b) = b else {
            return Ok(Desc {
                kind: DescKind::None,
                pid: std::process::id(),
                key: 0,
                ptr: 0,
                bytes: 0,
                call: call_hash,
                handle: vec![],
            });
        };
        // A peer process needs the IPC handle; threads use the address.
        let other_process = self.pids.iter().any(|&p| p != std::process::id());
        let (kind, handle) = if other_process {
            let h = b.ipc_export()?;
            if h.len() > DESC - DESC_HEADER {
                return Err(Error::Device {
                    backend: self.ctx.backend.name().into(),
                    device: self.ctx.device,
                    what: "export a buffer".into(),
                    detail: format!("an IPC handle of {} bytes does not fit", h.len()),
                });
            }
            if lasting {
                b.mark_mapped(&self.ctx);
            }
            (DescKind::Ipc, h.to_vec())
        } else {
            (DescKind::Address, vec![])
        };
        Ok(Desc {
            kind,
            pid: std::process::id(),
            key: b.key,
            ptr: b.ptr,
            bytes: b.bytes() as u64,
            call: call_hash,
            handle,
        })
    }

    /// Where this rank reaches peer `p`'s buffer `d`, and whether the
    /// mapping was opened for this use alone (`keep` false: the caller
    /// closes it (`ipc_close`) once its work is done; a
    /// mapping already open stays). `keep` true caches the mapping until
    /// the owner announces the buffer retired (collectives).
    fn resolve(
        &self,
        call: Call,
        p: usize,
        d: &Desc,
        keep: bool,
    ) -> Result<Option<(Peer, bool)>, Error> {
        let bytes = usize::try_from(d.bytes).unwrap_or(usize::MAX);
        match d.kind {
            DescKind::None | DescKind::Inline | DescKind::Ack => Ok(None),
            DescKind::Address => {
                if d.pid != std::process::id() {
                    return Err(self.op_err(
                        call,
                        Some(p),
                        Failure::Protocol(format!(
                            "an address of process {} cannot be used by process {}",
                            d.pid,
                            std::process::id()
                        )),
                    ));
                }
                Ok(Some((Peer { ptr: d.ptr, bytes }, false)))
            }
            // Our own buffer, or a peer thread's (CUDA refuses to open a
            // handle in the process that exported it): the address.
            DescKind::Ipc if p == self.rank() || d.pid == std::process::id() => {
                Ok(Some((Peer { ptr: d.ptr, bytes }, false)))
            }
            DescKind::Ipc => {
                let mut st = crate::lock(&self.st);
                if let Some(m) = st.opened.get(&(p, d.key)) {
                    return Ok(Some((*m, false)));
                }
                let (ptr, len) = self.ctx.backend.ipc_open(self.ctx.device, &d.handle)?;
                if len < bytes {
                    // SAFETY: just opened, unused.
                    unsafe { self.ctx.backend.ipc_close(self.ctx.device, ptr) };
                    // op_err takes the lock (for the call count): it
                    // deadlocked here, forever and past any abort.
                    drop(st);
                    return Err(self.op_err(
                        call,
                        Some(p),
                        Failure::Protocol(format!(
                            "IPC handle maps {len} bytes, the descriptor says {bytes}"
                        )),
                    ));
                }
                let m = Peer { ptr, bytes };
                if !keep {
                    return Ok(Some((m, true)));
                }
                st.opened.insert((p, d.key), m);
                st.order.push_back((p, d.key));
                while st.order.len() > MAX_OPENED {
                    let old = st.order.pop_front().expect("non-empty");
                    if let Some(o) = st.opened.remove(&old) {
                        // SAFETY: every call synchronizes its stream before
                        // it returns, so no work uses an older mapping.
                        unsafe { self.ctx.backend.ipc_close(self.ctx.device, o.ptr) };
                    }
                }
                Ok(Some((m, false)))
            }
        }
    }

    fn scratch(&self, bytes: usize) -> Result<DevicePtr, Error> {
        let mut st = crate::lock(&self.st);
        if st.scratch.as_ref().is_none_or(|s| s.len() < bytes) {
            st.scratch = None;
            st.scratch = Some(DeviceBuffer::alloc(&self.ctx, bytes.next_power_of_two())?);
        }
        Ok(st.scratch.as_ref().expect("just made").ptr)
    }

    fn sync(&self, s: StreamId) -> Result<(), Error> {
        self.ctx.backend.synchronize(s)
    }

    /// `dst = srcs[0] op srcs[1] op ...` in rank order, then `/ n` for an
    /// `avg` whose inputs were not divided already (`premul`). `dst` may
    /// alias `srcs[0]` only.
    #[allow(clippy::too_many_arguments)]
    fn fold(
        &self,
        s: StreamId,
        op: ReduceOp,
        dtype: DataType,
        dst: DevicePtr,
        srcs: &[DevicePtr],
        count: usize,
        premul: bool,
    ) -> Result<(), Error> {
        if count == 0 {
            return Ok(());
        }
        let b = &self.ctx.backend;
        // SAFETY (all calls below): every range was checked against the
        // descriptors' lengths by the caller; the memory stays live and
        // unwritten by its owner until the closing barrier.
        unsafe {
            if srcs.len() == 1 {
                if dst != srcs[0] {
                    b.copy_d2d(s, dst, srcs[0], count * dtype.size())?;
                }
            } else {
                b.reduce(s, op, dtype, dst, srcs[0], srcs[1], count)?;
                for &x in &srcs[2..] {
                    b.reduce(s, op, dtype, dst, dst, x, count)?;
                }
            }
            if op == ReduceOp::Avg && !premul {
                b.divide(s, dtype, dst, count, srcs.len() as u64)?;
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn run_ipc<T: Element>(
        &self,
        call: Call,
        dtype: DataType,
        count: usize,
        send: Option<&DeviceBuffer<T>>,
        recv: &mut DeviceBuffer<T>,
        stream: &Stream,
        opts: &CallOptions,
    ) -> Result<(), Error> {
        let (n, me) = (self.world_size(), self.rank());
        let es = dtype.size();
        let s = stream.id;
        let hopts = CallOptions {
            timeout: opts.timeout,
            algorithm: None,
        };
        let barrier = || self.comm.run::<u8>(Call::Barrier, None, &mut [], &hopts);
        {
            let mut st = crate::lock(&self.st);
            st.calls += 1;
        }
        // Inputs ready before peers may read them.
        self.sync(s)?;
        let (root, shift, op) = match call {
            Call::Broadcast { root } => (root, 0, 0),
            Call::Reduce { op, root } => (root, 0, op as u64 + 1),
            Call::SendRecv { shift } => (0, shift, 0),
            Call::AllReduce(op) | Call::ReduceScatter(op) => (0, 0, op as u64 + 1),
            _ => (0, 0, 0),
        };
        let call_hash = fnv(&[
            call.name().len() as u64,
            fnv(&call.name().bytes().map(u64::from).collect::<Vec<_>>()),
            root as u64,
            shift as u64,
            op,
            dtype as u64,
            count as u64,
        ]);
        match call {
            Call::Send { peer } => {
                return self.p2p_ipc(call, Some(peer), send, None, recv, s, &hopts);
            }
            Call::Recv { peer } => {
                return self.p2p_ipc(call, None, None, Some(peer), recv, s, &hopts);
            }
            Call::Exchange { to, from } => {
                return self.p2p_ipc(call, Some(to), send, Some(from), recv, s, &hopts);
            }
            _ => {}
        }
        if call == Call::Barrier {
            return barrier();
        }
        // Floating-point avg divides every input by n before the sum (as
        // the host path and NCCL's PreMulSum): a sum of f16 gradients
        // overflows where their average does not. Each rank publishes a
        // divided copy of its input, and the folds only sum.
        let premul = n > 1
            && !dtype.is_integer()
            && matches!(
                call,
                Call::AllReduce(ReduceOp::Avg)
                    | Call::ReduceScatter(ReduceOp::Avg)
                    | Call::Reduce {
                        op: ReduceOp::Avg,
                        ..
                    }
            );
        let divided = if premul {
            let input = send.map_or(recv.ptr, |x| x.ptr);
            Some(self.premul(s, dtype, input, count, n)?)
        } else {
            None
        };
        // Exported buffers dropped since the last call: announced now, freed
        // once every peer has closed its mapping (after the closing barrier).
        let freeing = self.ctx.take_retired(MAX_RETIRE);
        let r = (|| -> Result<(), Error> {
            // Exchange: every rank's send and receive descriptors and retired keys.
            let mut mine = [0u8; REC];
            let sd = match &divided {
                Some(d) => self.desc(Some(d), call_hash, true)?,
                None => self.desc(send, call_hash, true)?,
            };
            mine[..DESC].copy_from_slice(&sd.encode());
            mine[DESC..2 * DESC]
                .copy_from_slice(&self.desc(Some(&*recv), call_hash, true)?.encode());
            mine[2 * DESC..2 * DESC + 8].copy_from_slice(&(freeing.len() as u64).to_le_bytes());
            for (i, r) in freeing.iter().enumerate() {
                mine[2 * DESC + 8 * (i + 1)..2 * DESC + 8 * (i + 2)]
                    .copy_from_slice(&r.key().to_le_bytes());
            }
            let mut all = vec![0u8; REC * n];
            self.comm
                .run(Call::AllGather, Some(&mine[..]), &mut all, &hopts)?;
            for p in (0..n).filter(|&p| p != me) {
                let rb = &all[REC * p + 2 * DESC..REC * (p + 1)];
                let cnt = u64::from_le_bytes(rb[..8].try_into().expect("8 bytes")) as usize;
                if cnt > MAX_RETIRE {
                    return Err(self.op_err(
                        call,
                        Some(p),
                        Failure::Protocol(format!(
                            "{cnt} retired buffers announced, at most {MAX_RETIRE}"
                        )),
                    ));
                }
                for i in 0..cnt {
                    let k = u64::from_le_bytes(
                        rb[8 * (i + 1)..8 * (i + 2)].try_into().expect("8 bytes"),
                    );
                    self.close_peer(p, k);
                }
            }
            let mut sends = Vec::with_capacity(n);
            let mut recvs = Vec::with_capacity(n);
            let mut any_in_place = false;
            for p in 0..n {
                let dec = |b: &[u8]| {
                    Desc::decode(b).map_err(|e| {
                        self.op_err(
                            call,
                            Some(p),
                            Failure::Protocol(format!("buffer descriptor: {e}")),
                        )
                    })
                };
                let sd = dec(&all[REC * p..REC * p + DESC])?;
                let rd = dec(&all[REC * p + DESC..REC * p + 2 * DESC])?;
                if sd.call != call_hash || rd.call != call_hash {
                    return Err(self.op_err(
                        call,
                        Some(p),
                        Failure::Mismatch {
                            ours: format!(
                                "{} of {count} {dtype} (root {root}, shift {shift})",
                                call.name()
                            ),
                            theirs: "a different call, count, type or root".into(),
                        },
                    ));
                }
                any_in_place |= sd.kind == DescKind::None;
                let rp = self
                    .resolve(call, p, &rd, true)?
                    .map(|m| m.0)
                    .ok_or_else(|| {
                        self.op_err(call, Some(p), Failure::Protocol("no receive buffer".into()))
                    })?;
                // In place: the input is the receive buffer.
                let sp = self.resolve(call, p, &sd, true)?.map_or(rp, |m| m.0);
                sends.push(sp);
                recvs.push(rp);
            }
            // Every peer range this rank reads is checked against what the
            // peer announced before any device work is queued.
            let need = |what: &str, p: usize, b: &Peer, end: usize| -> Result<(), Error> {
                if end > b.bytes {
                    return Err(self.op_err(
                        call,
                        Some(p),
                        Failure::Protocol(format!("{what} of {} bytes, {end} needed", b.bytes)),
                    ));
                }
                Ok(())
            };
            let blk = |r: usize| block_partition(count, n, r);
            let my_in_place = send.is_none();
            let rptr = recv.ptr;
            let b = self.ctx.backend.clone();
            match call {
                Call::AllReduce(op) => {
                    let (o, l) = blk(me);
                    for p in 0..n {
                        need("input", p, &sends[p], count * es)?;
                        need("output", p, &recvs[p], count * es)?;
                    }
                    let srcs: Vec<DevicePtr> =
                        sends.iter().map(|x| x.ptr + (o * es) as u64).collect();
                    let dst = rptr + (o * es) as u64;
                    let target = if my_in_place && me != 0 {
                        self.scratch(l * es)?
                    } else {
                        dst
                    };
                    self.fold(s, op, dtype, target, &srcs, l, premul)?;
                    if target != dst && l > 0 {
                        // SAFETY: scratch and our own block, both in bounds.
                        unsafe { b.copy_d2d(s, dst, target, l * es)? };
                    }
                    self.sync(s)?;
                    barrier()?;
                    for p in (0..n).filter(|&p| p != me) {
                        let (po, pl) = blk(p);
                        if pl > 0 {
                            // SAFETY: block p of peer p's output (final after
                            // the barrier) into ours; bounds checked above.
                            unsafe {
                                b.copy_d2d(
                                    s,
                                    rptr + (po * es) as u64,
                                    recvs[p].ptr + (po * es) as u64,
                                    pl * es,
                                )?
                            };
                        }
                    }
                }
                Call::ReduceScatter(op) => {
                    let (o, l) = blk(me);
                    for (p, x) in sends.iter().enumerate() {
                        need("input", p, x, count * es)?;
                    }
                    let srcs: Vec<DevicePtr> =
                        sends.iter().map(|x| x.ptr + (o * es) as u64).collect();
                    let dst = if my_in_place {
                        rptr + (o * es) as u64
                    } else {
                        rptr
                    };
                    let target = if my_in_place && me != 0 {
                        self.scratch(l * es)?
                    } else {
                        dst
                    };
                    self.fold(s, op, dtype, target, &srcs, l, premul)?;
                    if target != dst && l > 0 {
                        // SAFETY: scratch into our own block.
                        unsafe { b.copy_d2d(s, dst, target, l * es)? };
                    }
                }
                Call::AllGather => {
                    for p in 0..n {
                        let (po, pl) = blk(p);
                        if p == me && my_in_place {
                            continue;
                        }
                        // A peer in place holds its block inside its output.
                        let (src, end) = if sends[p].ptr == recvs[p].ptr {
                            (recvs[p].ptr + (po * es) as u64, (po + pl) * es)
                        } else {
                            (sends[p].ptr, pl * es)
                        };
                        need("input", p, &sends[p], end)?;
                        if pl > 0 {
                            // SAFETY: bounds checked; our block p.
                            unsafe { b.copy_d2d(s, rptr + (po * es) as u64, src, pl * es)? };
                        }
                    }
                }
                Call::Broadcast { root } => {
                    need("input", root, &sends[root], count * es)?;
                    if !(me == root && my_in_place) && count > 0 {
                        // SAFETY: bounds checked.
                        unsafe { b.copy_d2d(s, rptr, sends[root].ptr, count * es)? };
                    }
                }
                Call::Reduce { op, root } => {
                    if me == root {
                        for (p, x) in sends.iter().enumerate() {
                            need("input", p, x, count * es)?;
                        }
                        let srcs: Vec<DevicePtr> = sends.iter().map(|x| x.ptr).collect();
                        let target = if my_in_place && me != 0 {
                            self.scratch(count * es)?
                        } else {
                            rptr
                        };
                        self.fold(s, op, dtype, target, &srcs, count, premul)?;
                        if target != rptr && count > 0 {
                            // SAFETY: scratch into our output.
                            unsafe { b.copy_d2d(s, rptr, target, count * es)? };
                        }
                    }
                }
                Call::AllToAll | Call::SendRecv { .. } => {
                    let total = recv.bytes();
                    let target = if my_in_place {
                        self.scratch(total)?
                    } else {
                        rptr
                    };
                    if let Call::SendRecv { shift } = call {
                        let from = (me + n - shift % n) % n;
                        need("input", from, &sends[from], count * es)?;
                        if count > 0 {
                            // SAFETY: bounds checked.
                            unsafe { b.copy_d2d(s, target, sends[from].ptr, count * es)? };
                        }
                    } else {
                        for (p, x) in sends.iter().enumerate() {
                            need("input", p, x, n * count * es)?;
                            if count > 0 {
                                // SAFETY: block `me` of peer p's input into our block p.
                                unsafe {
                                    b.copy_d2d(
                                        s,
                                        target + (p * count * es) as u64,
                                        x.ptr + (me * count * es) as u64,
                                        count * es,
                                    )?
                                };
                            }
                        }
                    }
                    if any_in_place {
                        // Peers read in-place buffers until every rank is done.
                        self.sync(s)?;
                        barrier()?;
                        if my_in_place && total > 0 {
                            // SAFETY: scratch into our output.
                            unsafe { b.copy_d2d(s, rptr, target, total)? };
                        }
                    }
                }
                _ => {
                    return Err(Error::Unsupported(format!(
                        "{} on device buffers",
                        call.name()
                    )));
                }
            }
            // Nobody may touch its buffers while a peer still reads them.
            self.sync(s)?;
            barrier()
        })();
        self.ctx.finish_retired(freeing, r.is_ok());
        // Kept for the next call (peers cache its mapping).
        if let Some(d) = divided {
            crate::lock(&self.st).premul = Some(d);
        }
        r
    }

    /// This rank's `count` elements at `input`, divided by `n`, in the
    /// communicator's premultiplied-input buffer (taken out of the state
    /// for the call; grown as needed), ready when this returns.
    fn premul(
        &self,
        s: StreamId,
        dtype: DataType,
        input: DevicePtr,
        count: usize,
        n: usize,
    ) -> Result<DeviceBuffer<u8>, Error> {
        let bytes = count * dtype.size();
        let kept = crate::lock(&self.st).premul.take();
        let d = match kept {
            Some(d) if d.len() >= bytes => d,
            // A smaller one goes (retired, if peers map it).
            _ => DeviceBuffer::alloc(&self.ctx, bytes.next_power_of_two())?,
        };
        if count > 0 {
            let b = &self.ctx.backend;
            // SAFETY: `input` is this rank's live input of `count` elements
            // (checked by `counts`), `d` holds at least `bytes`; the stream
            // is synchronized before anyone reads `d`.
            unsafe {
                b.copy_d2d(s, d.ptr, input, bytes)?;
                b.divide(s, dtype, d.ptr, count, n as u64)?;
            }
        }
        self.sync(s)?;
        Ok(d)
    }

    /// Closes this rank's mapping of peer `p`'s allocation `key`, if open.
    fn close_peer(&self, p: usize, key: u64) {
        let mut st = crate::lock(&self.st);
        if let Some(m) = st.opened.remove(&(p, key)) {
            st.order.retain(|&x| x != (p, key));
            // SAFETY: every call synchronizes its stream before it returns,
            // so no work uses the mapping.
            unsafe { self.ctx.backend.ipc_close(self.ctx.device, m.ptr) };
        }
    }

    /// Point-to-point on the IPC path: a send half to `to` and a receive
    /// half from `from` (send, recv and exchange each have one or both),
    /// with the host path's semantics: a message under [`EAGER_MAX`]
    /// travels inline and its send never waits for the peer (as a small
    /// host send); a larger one sends its buffer's descriptor, the
    /// receiver copies from peer memory and acknowledges, and the send
    /// returns then (as a large host send, which waits for the receive).
    /// The halves of an exchange progress together, so each matches a
    /// send or recv on the peer, or another exchange. Every message is a
    /// [`DESC`]-byte control record (an inline payload follows its
    /// record): a record from a peer that is not the one this rank waits
    /// for (the peer's next send, come while we wait for its
    /// acknowledgement) is kept for the receive that takes it, as an
    /// unexpected message is in MPI.
    #[allow(clippy::too_many_arguments)]
    fn p2p_ipc<T: Element>(
        &self,
        call: Call,
        to: Option<usize>,
        send: Option<&DeviceBuffer<T>>,
        from: Option<usize>,
        recv: &mut DeviceBuffer<T>,
        s: StreamId,
        hopts: &CallOptions,
    ) -> Result<(), Error> {
        let hash = |bytes: usize| p2p_hash(T::DTYPE, bytes);
        let hsend =
            |b: &[u8], p: usize| self.host_p2p(call, Call::Send { peer: p }, b, &mut [], hopts);
        // 1. The send half's message: it never waits for the peer.
        let mut ack_from = None;
        if let (Some(to), Some(x)) = (to, send) {
            let bytes = x.bytes();
            if bytes < EAGER_MAX {
                let mut payload = vec![0u8; bytes];
                if bytes > 0 {
                    // SAFETY: `payload` holds `bytes` bytes; the buffer is
                    // live and borrowed; the stream is synchronized below,
                    // before `payload` is read.
                    unsafe {
                        self.ctx
                            .backend
                            .copy_d2h(s, payload.as_mut_ptr(), x.ptr, bytes)?
                    };
                    self.sync(s)?;
                }
                let rec = Desc::inline(bytes, hash(bytes));
                hsend(&rec.encode(), to)?;
                if bytes > 0 {
                    hsend(&payload, to)?;
                }
            } else {
                hsend(&self.desc(Some(x), hash(bytes), false)?.encode(), to)?;
                ack_from = Some(to);
            }
        }
        // 2. The receive half, and the send half's acknowledgement.
        let r = self.p2p_wait(call, from, &mut ack_from, recv, s, hopts);
        if ack_from.is_some()
            && let Some(x) = send
        {
            // Unacknowledged: the receiver may still map it.
            x.mark_mapped(&self.ctx);
        }
        r
    }

    /// The rest of [`Self::p2p_ipc`]: the receive from `from`, if any, and
    /// the acknowledgement from `ack_from` (cleared when it came).
    fn p2p_wait<T: Element>(
        &self,
        call: Call,
        from: Option<usize>,
        ack_from: &mut Option<usize>,
        recv: &mut DeviceBuffer<T>,
        s: StreamId,
        hopts: &CallOptions,
    ) -> Result<(), Error> {
        let proto = |p: usize, what: String| self.op_err(call, Some(p), Failure::Protocol(what));
        let mut recv_from = from;
        while recv_from.is_some() || ack_from.is_some() {
            if let Some(p) = recv_from {
                let early = {
                    let mut st = crate::lock(&self.st);
                    st.early.get_mut(&p).and_then(|q| q.pop_front())
                };
                if let Some((d, payload)) = early {
                    self.p2p_take(call, p, &d, payload, recv, s, hopts)?;
                    recv_from = None;
                    continue;
                }
            }
            let p = recv_from.or(*ack_from).expect("one is waited for");
            let mut rec = [0u8; DESC];
            self.host_p2p(call, Call::Recv { peer: p }, &[], &mut rec[..], hopts)?;
            let d = Desc::decode(&rec).map_err(|e| proto(p, format!("control record: {e}")))?;
            if d.kind == DescKind::Ack {
                if *ack_from != Some(p) {
                    return Err(proto(p, "an acknowledgement of no send".into()));
                }
                *ack_from = None;
                continue;
            }
            let payload = if d.kind == DescKind::Inline && d.bytes > 0 {
                let n = usize::try_from(d.bytes)
                    .ok()
                    .filter(|&n| n < EAGER_MAX)
                    .ok_or_else(|| proto(p, format!("an inline message of {} bytes", d.bytes)))?;
                let mut v = vec![0u8; n];
                self.host_p2p(call, Call::Recv { peer: p }, &[], &mut v[..], hopts)?;
                v
            } else {
                vec![]
            };
            if recv_from == Some(p) {
                self.p2p_take(call, p, &d, payload, recv, s, hopts)?;
                recv_from = None;
            } else {
                // The peer's next send, before its acknowledgement of ours.
                let mut st = crate::lock(&self.st);
                let q = st.early.entry(p).or_default();
                if q.len() >= MAX_EARLY {
                    drop(st);
                    return Err(proto(
                        p,
                        format!("{MAX_EARLY} messages sent to this rank are not received"),
                    ));
                }
                q.push_back((d, payload));
            }
        }
        Ok(())
    }

    /// The receive half of [`Self::p2p_ipc`]: `d` (and its inline
    /// `payload`) from peer `p` into `recv`.
    #[allow(clippy::too_many_arguments)]
    fn p2p_take<T: Element>(
        &self,
        call: Call,
        p: usize,
        d: &Desc,
        payload: Vec<u8>,
        recv: &mut DeviceBuffer<T>,
        s: StreamId,
        hopts: &CallOptions,
    ) -> Result<(), Error> {
        let rb = recv.bytes();
        if d.call != p2p_hash(T::DTYPE, rb) {
            let theirs = if d.bytes == rb as u64 {
                format!("a send of {} bytes of another type", d.bytes)
            } else {
                format!("a send of {} bytes", d.bytes)
            };
            return Err(self.op_err(
                call,
                Some(p),
                Failure::Mismatch {
                    ours: format!("a receive of {rb} bytes of {}", T::DTYPE),
                    theirs,
                },
            ));
        }
        if d.kind == DescKind::Inline {
            if payload.len() != rb {
                return Err(self.op_err(
                    call,
                    Some(p),
                    Failure::Protocol(format!(
                        "an inline message of {} bytes, its record says {rb}",
                        payload.len()
                    )),
                ));
            }
            if rb > 0 {
                // SAFETY: `payload` holds `rb` bytes (the hash covers the
                // length); the stream is synchronized before it drops.
                unsafe {
                    self.ctx
                        .backend
                        .copy_h2d(s, recv.ptr, payload.as_ptr(), rb)?
                };
            }
            return self.sync(s);
        }
        let (src, once) = self.resolve(call, p, d, false)?.ok_or_else(|| {
            self.op_err(call, Some(p), Failure::Protocol("no send buffer".into()))
        })?;
        // A sender's buffer is mapped for its message alone, so that the
        // sender may free it once acknowledged (a mapping a collective
        // opened is reused and stays).
        let copied = (|| {
            if src.bytes != rb {
                return Err(self.op_err(
                    call,
                    Some(p),
                    Failure::Protocol(format!(
                        "the send buffer maps {} bytes, its record says {rb}",
                        src.bytes
                    )),
                ));
            }
            // SAFETY: lengths equal, checked above; the sender keeps its
            // buffer until our acknowledgement.
            unsafe { self.ctx.backend.copy_d2d(s, recv.ptr, src.ptr, rb)? };
            self.sync(s)
        })();
        if once {
            // A failed copy's stream is synchronized before the mapping goes.
            if copied.is_err() {
                let _ = self.sync(s);
            }
            // SAFETY: opened by resolve for this copy alone, closed once;
            // the copy is done (synchronized) or never started.
            unsafe { self.ctx.backend.ipc_close(self.ctx.device, src.ptr) };
        }
        copied?;
        let ack = Desc {
            kind: DescKind::Ack,
            ..Desc::inline(0, 0)
        };
        self.host_p2p(call, Call::Send { peer: p }, &ack.encode(), &mut [], hopts)
    }

    /// One message of a device point-to-point `call` over the host
    /// communicator (`host`: its send or recv); a failure names `call` and
    /// this communicator's call count, as the staged path's do.
    fn host_p2p(
        &self,
        call: Call,
        host: Call,
        send: &[u8],
        recv: &mut [u8],
        hopts: &CallOptions,
    ) -> Result<(), Error> {
        let send = matches!(host, Call::Send { .. }).then_some(send);
        self.comm.run(host, send, recv, hopts).map_err(|e| match e {
            Error::Op { ctx, failure } => self.op_err(call, ctx.peer, failure),
            e => e,
        })
    }

    /// `call` through pinned host memory: the device data to the staging
    /// buffers, `host` (the host communicator's call) on them, the result
    /// back to the device.
    fn run_staged<T: Element>(
        &self,
        call: Call,
        send: Option<&DeviceBuffer<T>>,
        recv: &mut DeviceBuffer<T>,
        stream: &Stream,
        host: impl FnOnce(Option<&[T]>, &mut [T]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let s = stream.id;
        let sb = send.map(|x| x.bytes()).unwrap_or(0);
        let rb = recv.bytes();
        let mut st = crate::lock(&self.st);
        st.calls += 1;
        let fits = st
            .staging
            .as_ref()
            .is_some_and(|g| g.send.len() >= sb && g.recv.len() >= rb);
        if !fits {
            let cap = |x: usize| x.max(4096).next_power_of_two();
            let old = st.staging.take();
            let (os, or) = old.map(|g| (g.send.len(), g.recv.len())).unwrap_or((0, 0));
            st.staging = Some(Staging {
                send: self.alloc_host::<u8>(cap(sb.max(os)))?,
                recv: self.alloc_host::<u8>(cap(rb.max(or)))?,
            });
        }
        let g = st.staging.as_mut().expect("just made");
        let b = &self.ctx.backend;
        let is_send = matches!(call, Call::Send { .. });
        // Device → pinned host, after the stream's earlier work.
        // SAFETY: the staging buffers are ours (locked in `st`) and large
        // enough; the device buffers are live and borrowed; the stream is
        // synchronized before the host reads.
        unsafe {
            match send {
                Some(x) if sb > 0 => b.copy_d2h(s, g.send.as_mut_ptr(), x.ptr, sb)?,
                None if rb > 0 && !matches!(call, Call::Recv { .. }) => {
                    b.copy_d2h(s, g.recv.as_mut_ptr(), recv.ptr, rb)?
                }
                _ => {}
            }
        }
        self.sync(s)?;
        let es = std::mem::size_of::<T>();
        // SAFETY: segments are page aligned, `T` is plain data for which
        // every bit pattern is a value, and the lengths are in bounds.
        let hs: &[T] = unsafe { std::slice::from_raw_parts(g.send.as_ptr() as *const T, sb / es) };
        // SAFETY: as above; the two staging buffers do not overlap.
        let hr: &mut [T] =
            unsafe { std::slice::from_raw_parts_mut(g.recv.as_mut_ptr() as *mut T, rb / es) };
        host(send.map(|_| hs), hr)?;
        // A send writes no output, nor does a gather off its root (its
        // `recv` keeps what it held, as on the host path).
        let writes_recv = match call {
            Call::Gather { root } => root == self.rank(),
            _ => !is_send,
        };
        if rb > 0 && writes_recv {
            // SAFETY: as for the first copy.
            unsafe { b.copy_h2d(s, recv.ptr, g.recv.as_ptr(), rb)? };
        }
        // The staging buffers are reused by the next call.
        self.sync(s)
    }
}

impl Drop for DeviceComm {
    fn drop(&mut self) {
        let st = self.st.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, m) in st.opened.drain() {
            // SAFETY: no call is running (we are being dropped) and every
            // call synchronized its stream.
            unsafe { self.ctx.backend.ipc_close(self.ctx.device, m.ptr) };
        }
        st.order.clear();
        // Exported buffers dropped since the last call: peers that still
        // map them are dropping their communicators too (drop a DeviceComm
        // on every rank together, after its last call).
        self.ctx.close();
    }
}

/// The call hash of a point-to-point message: its type and length.
fn p2p_hash(dtype: DataType, bytes: usize) -> u64 {
    fnv(&[0x0070_3270, dtype as u64, bytes as u64])
}

/// Element count of a call, checked as the host path checks it.
fn counts(
    call: Call,
    send: Option<usize>,
    recv: usize,
    n: usize,
    me: usize,
) -> Result<usize, Error> {
    let name = call.name();
    let bad = |s: String| Err(Error::InvalidArgument(format!("{name}: {s}")));
    if let Some(root) = match call {
        Call::Broadcast { root } | Call::Reduce { root, .. } => Some(root),
        _ => None,
    } && root >= n
    {
        return bad(format!("root {root} out of range for {n} ranks"));
    }
    match call {
        Call::Send { peer } | Call::Recv { peer } => {
            if peer >= n || peer == me {
                return bad(format!("peer {peer} invalid on rank {me} of {n}"));
            }
            if matches!(call, Call::Send { .. }) {
                send.ok_or_else(|| Error::InvalidArgument(format!("{name}: needs a send buffer")))
            } else {
                Ok(recv)
            }
        }
        Call::AllReduce(_)
        | Call::Broadcast { .. }
        | Call::Reduce { .. }
        | Call::SendRecv { .. } => {
            if let Some(s) = send
                && s != recv
            {
                return bad(format!("send has {s} elements, recv {recv}"));
            }
            Ok(recv)
        }
        Call::ReduceScatter(_) => {
            let count = send.unwrap_or(recv);
            let mine = block_partition(count, n, me).1;
            if send.is_some() && recv != mine {
                return bad(format!(
                    "recv has {recv} elements, block {me} of {count} over {n} ranks has {mine}"
                ));
            }
            Ok(count)
        }
        Call::AllGather => {
            let mine = block_partition(recv, n, me).1;
            if let Some(s) = send
                && s != mine
            {
                return bad(format!(
                    "send has {s} elements, block {me} of {recv} over {n} ranks has {mine}"
                ));
            }
            Ok(recv)
        }
        Call::AllToAll => {
            if let Some(s) = send
                && s != recv
            {
                return bad(format!("send has {s} elements, recv {recv}"));
            }
            if recv % n != 0 {
                return bad(format!("{recv} elements do not divide into {n} blocks"));
            }
            Ok(recv / n)
        }
        Call::Barrier => Ok(0),
        Call::Gather { root } | Call::Scatter { root } => {
            let gather = matches!(call, Call::Gather { .. });
            crate::comm::rooted_block(gather, root, send, recv, me, n).or_else(bad)
        }
        // Exchange: its arguments are checked as the host
        // communicator checks them, before anything moves (an error then
        // stays this rank's own, as for every other call).
        Call::Exchange { .. } => crate::comm::hand_made(call, send, recv, None, me, n)
            .map(|_| 0)
            .or_else(bad),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A peer's IPC handle that maps fewer bytes than its descriptor says
    /// is a protocol error: resolve() held its state lock into the error
    /// path, which takes it again, and never returned.
    #[test]
    fn a_short_ipc_mapping_is_an_error_not_a_deadlock() {
        // Another process with fd 3 open on a 4096-byte file: the fake
        // device's IPC handle names (pid, fd, length).
        let path = std::env::temp_dir().join(format!("gpucomm-short-ipc-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("exec 3<>'{}'; exec sleep 30", path.display()),
            ])
            .spawn()
            .unwrap();
        let fd = format!("/proc/{}/fd/3", child.id());
        let t = std::time::Instant::now();
        while std::fs::read_link(&fd).is_err() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut handle = b"GFAK".to_vec();
        handle.extend_from_slice(&child.id().to_le_bytes());
        handle.extend_from_slice(&3i32.to_le_bytes());
        handle.extend_from_slice(&4096u64.to_le_bytes());
        let gpu = Arc::new(crate::device::FakeDevice::new(1));
        let dcs: Vec<DeviceComm> = std::thread::scope(|s| {
            let hs: Vec<_> = Communicator::in_process(2)
                .unwrap()
                .into_iter()
                .map(|c| {
                    let (g, o) = (
                        gpu.clone(),
                        DeviceOptions {
                            path: Some(GpuPath::Ipc),
                        },
                    );
                    s.spawn(move || DeviceComm::new(c, g, 0, &o).unwrap())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let dc = Arc::new(dcs.into_iter().next().unwrap());
        let desc = Desc {
            kind: DescKind::Ipc,
            pid: child.id(),
            key: 5,
            ptr: 0,
            bytes: 8192,
            call: 0,
            handle,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let dc2 = dc.clone();
        std::thread::spawn(move || {
            let r = dc2.resolve(Call::AllReduce(ReduceOp::Sum), 1, &desc, true);
            let _ = tx.send(r.map(|_| ()).map_err(|e| e.to_string()));
        });
        let got = rx.recv_timeout(Duration::from_secs(20));
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&path);
        let e = got
            .expect("resolve() did not return: it deadlocked on its own lock")
            .unwrap_err();
        assert!(
            e.contains("maps 4096 bytes, the descriptor says 8192"),
            "{e}"
        );
    }

    fn d() -> Desc {
        Desc {
            kind: DescKind::Ipc,
            pid: 42,
            key: 7,
            ptr: 0x1000,
            bytes: 4096,
            call: 0xdead_beef,
            handle: vec![9; 88],
        }
    }

    #[test]
    fn descriptor_round_trips_and_rejects_damage() {
        let e = d().encode();
        assert_eq!(Desc::decode(&e).unwrap(), d());
        assert!(Desc::decode(&e[..DESC - 1]).unwrap_err().contains("bytes"));
        let mut x = e;
        x[0] = b'X';
        assert!(Desc::decode(&x).unwrap_err().contains("magic"));
        let mut x = e;
        x[4] = DESC_VERSION + 1;
        assert!(Desc::decode(&x).unwrap_err().contains("version"));
        let mut x = e;
        x[5] = 9;
        assert!(Desc::decode(&x).unwrap_err().contains("kind"));
        let mut x = e;
        x[6..8].copy_from_slice(&500u16.to_le_bytes());
        assert!(Desc::decode(&x).unwrap_err().contains("handle"));
        let mut x = e;
        x[DESC - 1] = 1;
        assert!(Desc::decode(&x).unwrap_err().contains("reserved"));
        let mut x = e;
        x[13] = 1;
        assert!(Desc::decode(&x).unwrap_err().contains("reserved"));
    }

    #[test]
    fn counts_follow_the_host_rules() {
        assert_eq!(
            counts(Call::AllReduce(ReduceOp::Sum), Some(5), 5, 2, 0).unwrap(),
            5
        );
        assert!(counts(Call::AllReduce(ReduceOp::Sum), Some(4), 5, 2, 0).is_err());
        assert_eq!(
            counts(Call::ReduceScatter(ReduceOp::Sum), Some(7), 4, 2, 0).unwrap(),
            7
        );
        assert!(counts(Call::ReduceScatter(ReduceOp::Sum), Some(7), 3, 2, 0).is_err());
        assert_eq!(counts(Call::AllGather, Some(3), 7, 2, 1).unwrap(), 7);
        assert!(counts(Call::AllToAll, Some(7), 7, 2, 1).is_err());
        assert!(counts(Call::Broadcast { root: 2 }, None, 1, 2, 0).is_err());
        assert!(counts(Call::Send { peer: 0 }, Some(1), 0, 2, 0).is_err());
    }

    #[test]
    fn paths_parse() {
        assert_eq!(GpuPath::parse("IPC").unwrap(), GpuPath::Ipc);
        assert_eq!(GpuPath::parse("staged").unwrap(), GpuPath::Staged);
        assert_eq!(GpuPath::parse("").unwrap(), GpuPath::Auto);
        assert!(
            GpuPath::parse("nvlink")
                .unwrap_err()
                .to_string()
                .contains("auto, ipc or staged")
        );
    }
}
