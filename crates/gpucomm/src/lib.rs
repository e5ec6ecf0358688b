//! The gpucomm runtime: communicators, transports and collectives.
//!
//! # Design
//!
//! A collective is a *schedule* from `gpucomm-algo` (pure data: each rank's
//! send / receive / receive-and-reduce / copy / reduce steps on slices of its
//! input, output and scratch buffers). This crate is the thin driver that runs
//! schedules on real memory and real transports:
//!
//! ```text
//!  Communicator::all_reduce(&send, &mut recv, op)
//!        │  check lengths, root, dtype; pick algorithm (forced or tuned)
//!        ▼
//!  Plan (cached per problem): rank's steps + FIFO queue per (peer, channel, direction)
//!        │
//!        ▼
//!  engine::execute ──poll──► Link (in-process | shm ring | tcp) ──► peer
//!        │  spin → yield → futex/poll; deadline, abort, peer liveness
//!        ▼
//!  Ok(()) or Error::Op { op, seq, peer, transport, failure }
//! ```
//!
//! * **Transports** implement one small trait ([`transport`]'s `Link`) and
//!   are chosen per peer in priority order: in-process (threads), shared
//!   memory (same host id), TCP. Fault injection is a wrapper ([`Fault`]).
//! * **Zero copy**: buffers from [`Communicator::alloc`] live in memfd
//!   segments peers map; large sends from them travel as references and the
//!   receiver reduces straight from the peer's memory into its output.
//!   In-process ranks read each other's memory directly for any buffer.
//! * **No hangs**: every wait has a deadline ([`CallOptions::timeout`],
//!   [`Communicator::set_timeout`]); a dead peer, a closed link, a mismatched
//!   call (every message carries the operation descriptor) or
//!   [`Communicator::abort`] ends the operation with an [`Error::Op`] naming
//!   the operation, its sequence number, the peer and the transport. After a
//!   failure the communicator is poisoned (peers are told) and must be dropped.
//! * **Async**: [`Communicator::start`] queues an operation on a progress
//!   thread and returns a [`Request`]; operations complete in issue order.
//! * **Groups**: [`Communicator::split`] makes a communicator per color, as
//!   `MPI_Comm_split` and `ncclCommSplit` do, connected as a job is.
//! * **Beyond the schedules**: [`Communicator::exchange`] (`MPI_Sendrecv`)
//!   and the calls whose blocks differ in size
//!   ([`Communicator::all_to_all_v`], [`Communicator::all_gather_v`],
//!   [`Communicator::gather_v`], [`Communicator::scatter_v`]) run steps
//!   made by hand, under the same descriptors, deadlines and failure
//!   handling; gather and scatter run gpucomm-algo's schedule.
//!
//! * **Device memory** ([`device`]): [`device::DeviceComm`] runs every call
//!   on [`device::DeviceBuffer`]s in stream order, over CUDA IPC (peers'
//!   device memory read directly) or the host-staged path, behind the
//!   [`device::DeviceBackend`] trait — the CUDA driver ([`device::CudaBackend`],
//!   loaded at run time: no GPU is [`Error::NoGpu`]) or a host-memory test
//!   double ([`device::FakeDevice`]). Host [`Buffer`]s stay host memory
//!   (pageable or pinned).
//!
//! What it does not do (yet): RDMA, several channels per peer, recovery
//! after a failure.
//!
//! See `docs/runtime.md` for the wire formats and how this is tested.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod bootstrap;
mod buffer;
mod comm;
pub mod device;
mod dtype;
mod engine;
pub mod env;
mod error;
pub mod launch;
mod netif;
mod split;
pub mod store;
pub mod transport;

/// Locks `m`, taking the guard back from a panic that poisoned it, so that
/// one panic does not turn every later call into another (the
/// communicator's call state is the exception: it answers `Error::Broken`).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

use std::sync::Arc;
use std::time::Duration;

pub use bootstrap::host_id;
pub use buffer::{Buffer, MemorySpace};
pub use comm::{Call, CallOptions, DEFAULT_TIMEOUT, InProcessOptions, Request};
pub use dtype::{DataType, Element, div_ranks, reduce2, reduce3};
pub use env::{BootstrapConfig, TransportChoice};
pub use error::{Error, Failure, OpContext, TransportKind};
pub use gpucomm_algo::{Algorithm, Collective, ReduceOp};
pub use half::{bf16, f16};
pub use transport::fault::Fault;

use comm::{Inner, raw_call, run_blocking};

/// One rank's handle on a job: runs collectives and point-to-point calls
/// with its peers.
///
/// Create it from a [`BootstrapConfig`] ([`Communicator::new`], one per
/// process) or as several ranks in one process ([`Communicator::in_process`]).
/// It is `Send + Sync`: calls from several threads are serialised, and
/// [`Communicator::abort`] may be called from any thread.
///
/// # Fast path
///
/// For the fewest copies over shared memory, allocate buffers with
/// [`Communicator::alloc`]: their memory is mapped by peers, so large sends
/// travel as references and receivers reduce or copy straight from the peer's
/// buffer (one pass over the data instead of three). Any `&[T]` works too;
/// it is then copied through the shared ring. In-process ranks always read
/// each other's memory directly.
///
/// # Example
///
/// ```
/// use gpucomm::{Communicator, ReduceOp};
///
/// let comms = Communicator::in_process(3).unwrap();
/// let results: Vec<Vec<f32>> = std::thread::scope(|s| {
///     let hs: Vec<_> = comms
///         .iter()
///         .map(|c| {
///             s.spawn(move || {
///                 let send = vec![c.rank() as f32 + 1.0; 5];
///                 let mut recv = vec![0.0f32; 5];
///                 c.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
///                 // Zero-copy fast path: library-allocated buffers, in place.
///                 let mut buf = c.alloc::<f32>(5).unwrap();
///                 buf.fill(1.0);
///                 c.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap();
///                 assert_eq!(&buf[..], &[3.0; 5]);
///                 recv
///             })
///         })
///         .collect();
///     hs.into_iter().map(|h| h.join().unwrap()).collect()
/// });
/// assert!(results.iter().all(|r| r == &vec![6.0f32; 5]));
/// ```
pub struct Communicator {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.inner.rank)
            .field("world_size", &self.inner.world)
            .finish()
    }
}

/// Aborts a communicator from anywhere (cheap to clone, `Send`).
#[derive(Clone)]
pub struct AbortHandle {
    inner: Arc<Inner>,
}

impl AbortHandle {
    /// See [`Communicator::abort`].
    pub fn abort(&self) {
        self.inner.abort("abort() called");
    }
}

impl std::fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AbortHandle")
    }
}

impl Communicator {
    /// Joins the job described by `config` (rank 0 hosts the rendezvous
    /// store), connecting every peer over shared memory or TCP. Blocks until
    /// every rank has joined, at most `config.timeout`.
    pub fn new(config: &BootstrapConfig) -> Result<Communicator, Error> {
        Ok(Communicator::from_parts(bootstrap::bootstrap(config)?))
    }

    pub(crate) fn from_parts(parts: comm::InnerParts) -> Communicator {
        Communicator {
            inner: Arc::new(Inner::new(parts)),
        }
    }

    /// `n` ranks as communicators of this process (move each to its own thread).
    pub fn in_process(n: usize) -> Result<Vec<Communicator>, Error> {
        Self::in_process_with(n, &InProcessOptions::default())
    }

    /// [`Communicator::in_process`] with a timeout, forced algorithm or faults.
    pub fn in_process_with(n: usize, opts: &InProcessOptions) -> Result<Vec<Communicator>, Error> {
        use transport::ring::{Liveness, Region, RingLink};
        if n == 0 {
            return Err(Error::InvalidArgument(
                "in_process: at least one rank".into(),
            ));
        }
        if n > env::MAX_WORLD_SIZE {
            return Err(Error::InvalidArgument(format!(
                "in_process: world size {n} is more than gpucomm supports (at most {} ranks)",
                env::MAX_WORLD_SIZE
            )));
        }
        let regions: Vec<Region> = (0..n)
            .map(|_| Region::create(n))
            .collect::<Result<_, _>>()?;
        // Where these ranks meet when they split.
        let hub = Arc::new(split::Hub::default());
        let mut out = Vec::with_capacity(n);
        for me in 0..n {
            let mut links: Vec<Option<Box<dyn transport::Link>>> = Vec::with_capacity(n);
            for p in 0..n {
                if p == me {
                    links.push(None);
                    continue;
                }
                let mut l: Box<dyn transport::Link> = Box::new(RingLink::new(
                    TransportKind::InProcess,
                    me,
                    p,
                    regions[me].clone(),
                    regions[p].clone(),
                    Liveness::Thread,
                ));
                for &(r, q, f) in &opts.faults {
                    if r == me && q == p {
                        l = Box::new(transport::fault::FaultyLink::new(l, f));
                    }
                }
                links.push(Some(l));
            }
            let parts = comm::InnerParts {
                rank: me,
                world: n,
                ranks_per_node: n,
                local_ranks: n,
                links,
                region: Some(regions[me].clone()),
                timeout: opts.timeout.unwrap_or(DEFAULT_TIMEOUT),
                algorithm: opts.algorithm,
                sockets: Vec::new(),
                origin: Some(split::Origin::InProcess(hub.clone())),
                server: None,
                id: String::new(),
            };
            out.push(Communicator::from_parts(parts));
        }
        Ok(out)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.inner.world
    }

    /// The transport to `peer` (`None` for this rank itself).
    pub fn transport_to(&self, peer: usize) -> Option<TransportKind> {
        self.inner.kinds.get(peer).copied().flatten()
    }

    /// The bound on every wait of later calls.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout()
    }

    /// Changes the bound on every wait of later calls.
    pub fn set_timeout(&self, timeout: Duration) {
        self.inner.set_timeout(timeout)
    }

    /// Allocates `n` zeroed elements of host memory that peers on this host
    /// map (the zero-copy fast path; see the type's docs).
    pub fn alloc<T: Element>(&self, n: usize) -> Result<Buffer<T>, Error> {
        comm::alloc(&self.inner, n, MemorySpace::HostPageable)
    }

    /// Allocates in a given memory space: host pageable (shared), host pinned
    /// (shared and `mlock`ed), device (not supported yet: an error).
    pub fn alloc_in<T: Element>(&self, n: usize, space: MemorySpace) -> Result<Buffer<T>, Error> {
        comm::alloc(&self.inner, n, space)
    }

    /// Stops every operation of this communicator, now and later, with
    /// [`Failure::Aborted`]; peers see the abort too. Callable from any thread.
    pub fn abort(&self) {
        self.inner.abort("abort() called");
    }

    /// A handle that aborts this communicator from another thread.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            inner: self.inner.clone(),
        }
    }

    /// The general blocking call. `send` is `None` for an in-place call
    /// (`recv` then holds the input, laid out as in NCCL: for all-gather this
    /// rank's block sits at its place in `recv`; for reduce-scatter `recv`
    /// holds the whole input and the result lands in this rank's block;
    /// gather and scatter as nccl-tests runs them, every rank's `recv`
    /// holding `n` blocks and its own at its place).
    /// For [`Call::Send`] pass the data as `send` and an empty `recv`.
    pub fn run<T: Element>(
        &self,
        call: Call,
        send: Option<&[T]>,
        recv: &mut [T],
        opts: &CallOptions,
    ) -> Result<(), Error> {
        run_blocking(&self.inner, raw_call(call, send, recv, opts))
    }

    /// [`Communicator::run`] with the communicator's default options.
    fn call<T: Element>(
        &self,
        call: Call,
        send: Option<&[T]>,
        recv: &mut [T],
    ) -> Result<(), Error> {
        self.run(call, send, recv, &CallOptions::default())
    }

    /// Starts a non-blocking call on library-owned buffers (`send` `None` =
    /// in place). Calls complete in issue order; blocking calls issued later
    /// wait for them.
    pub fn start<T: Element>(
        &self,
        call: Call,
        send: Option<Buffer<T>>,
        recv: Buffer<T>,
        opts: CallOptions,
    ) -> Result<Request<T>, Error> {
        comm::start(&self.inner, call, send, recv, opts)
    }

    /// Non-blocking in-place all-reduce.
    pub fn all_reduce_async<T: Element>(
        &self,
        buf: Buffer<T>,
        op: ReduceOp,
    ) -> Result<Request<T>, Error> {
        self.start(Call::AllReduce(op), None, buf, CallOptions::default())
    }

    /// `recv = op over every rank's send` (both `count` elements).
    pub fn all_reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.call(Call::AllReduce(op), Some(send), recv)
    }

    /// In-place all-reduce.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.call(Call::AllReduce(op), None, buf)
    }

    /// `recv` (block r of `send.len()` split over the ranks) = op over every
    /// rank's `send` restricted to that block.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.call(Call::ReduceScatter(op), Some(send), recv)
    }

    /// In-place reduce-scatter: `buf` holds the whole input; the result
    /// lands in this rank's block of it.
    pub fn reduce_scatter_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.call(Call::ReduceScatter(op), None, buf)
    }

    /// `recv` = every rank's `send` block, in rank order (blocks as in
    /// [`gpucomm_algo::block_partition`]).
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        self.call(Call::AllGather, Some(send), recv)
    }

    /// In-place all-gather: this rank's block is already in place in `buf`.
    pub fn all_gather_in_place<T: Element>(&self, buf: &mut [T]) -> Result<(), Error> {
        self.call(Call::AllGather, None, buf)
    }

    /// `recv` = root's `send` (other ranks' `send` is not read).
    pub fn broadcast<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Result<(), Error> {
        self.call(Call::Broadcast { root }, Some(send), recv)
    }

    /// In-place broadcast of the root's `buf`.
    pub fn broadcast_in_place<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), Error> {
        self.call(Call::Broadcast { root }, None, buf)
    }

    /// On the root, `recv` = op over every rank's `send`; on other ranks
    /// `recv` (same length) is scratch and its content undefined.
    pub fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<(), Error> {
        self.call(Call::Reduce { op, root }, Some(send), recv)
    }

    /// In-place reduce to the root.
    pub fn reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<(), Error> {
        self.call(Call::Reduce { op, root }, None, buf)
    }

    /// Block p of `send` goes to rank p, block q of `recv` comes from rank q
    /// (both `n * count` elements).
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        self.call(Call::AllToAll, Some(send), recv)
    }

    /// All-to-all with blocks of any size, as `MPI_Alltoallv` and PyTorch's
    /// `all_to_all_single` with split sizes (mixture-of-experts token
    /// routing): `send` holds this rank's blocks for ranks 0, 1, ... packed
    /// in order, `send_counts[p]` elements for rank p; `recv` receives rank
    /// q's block for this rank at its place in rank order,
    /// `recv_counts[q]` elements. Each count list has one entry per rank and
    /// adds up to its buffer's length; `recv_counts[q]` must equal what rank
    /// q sends here: a message of another length is an error on the
    /// receiving rank, whose communicator is then poisoned, so the others'
    /// next call fails too.
    ///
    /// # Example
    ///
    /// ```
    /// use gpucomm::Communicator;
    ///
    /// // Rank r sends p + 1 copies of r to each rank p.
    /// let comms = Communicator::in_process(3).unwrap();
    /// std::thread::scope(|s| {
    ///     for c in &comms {
    ///         s.spawn(move || {
    ///             let (r, n) = (c.rank(), c.world_size());
    ///             let send_counts: Vec<usize> = (0..n).map(|p| p + 1).collect();
    ///             let send: Vec<u32> = (0..n).flat_map(|p| vec![r as u32; p + 1]).collect();
    ///             let recv_counts = vec![r + 1; n];
    ///             let mut recv = vec![0u32; n * (r + 1)];
    ///             c.all_to_all_v(&send, &send_counts, &mut recv, &recv_counts).unwrap();
    ///             let want: Vec<u32> = (0..n).flat_map(|q| vec![q as u32; r + 1]).collect();
    ///             assert_eq!(recv, want);
    ///         });
    ///     }
    /// });
    /// ```
    pub fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<(), Error> {
        self.run_blocks(
            Call::AllToAll,
            send,
            recv,
            send_counts.to_vec(),
            recv_counts.to_vec(),
        )
    }

    /// All-gather of blocks of any size (`MPI_Allgatherv`; an uneven
    /// `all_gather_into_tensor`): rank q's block has `counts[q]` elements,
    /// and `recv` ends with every rank's block packed in rank order. This
    /// rank's `send` is its block (`counts[rank]` elements); `counts` has one
    /// entry per rank, the same on every rank, and adds up to `recv.len()`.
    /// A block of another length than its count is an error on the
    /// receiving ranks.
    ///
    /// # Example
    ///
    /// ```
    /// use gpucomm::Communicator;
    ///
    /// // Rank r contributes r + 1 copies of r.
    /// let comms = Communicator::in_process(3).unwrap();
    /// std::thread::scope(|s| {
    ///     for c in &comms {
    ///         s.spawn(move || {
    ///             let r = c.rank();
    ///             let mut all = [0u8; 6];
    ///             c.all_gather_v(&vec![r as u8; r + 1], &mut all, &[1, 2, 3]).unwrap();
    ///             assert_eq!(all, [0, 1, 1, 2, 2, 2]);
    ///         });
    ///     }
    /// });
    /// ```
    pub fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<(), Error> {
        self.run_blocks(Call::AllGather, send, recv, Vec::new(), counts.to_vec())
    }

    /// Gather of blocks of any size (`MPI_Gatherv`): the root's `recv` ends
    /// with rank q's `send` (`counts[q]` elements) at its place, packed in
    /// rank order. `counts` (one entry per rank, adding up to the root's
    /// `recv.len()`) is read on the root only; other ranks may pass `&[]`
    /// and an empty `recv`. A rank whose `send` has another length than the
    /// root's count for it is an error on both.
    pub fn gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        root: usize,
    ) -> Result<(), Error> {
        self.run_blocks(
            Call::Gather { root },
            send,
            recv,
            Vec::new(),
            counts.to_vec(),
        )
    }

    /// Scatter of blocks of any size (`MPI_Scatterv`): rank q's `recv` ends
    /// with block q of the root's `send` (`counts[q]` elements, packed in
    /// rank order). `counts` (one entry per rank, adding up to the root's
    /// `send.len()`) is read on the root only; other ranks may pass `&[]`
    /// and an empty `send`.
    ///
    /// # Example
    ///
    /// ```
    /// use gpucomm::Communicator;
    ///
    /// let comms = Communicator::in_process(2).unwrap();
    /// std::thread::scope(|s| {
    ///     for c in &comms {
    ///         s.spawn(move || {
    ///             let r = c.rank();
    ///             let mut mine = vec![0u32; 1 + 2 * r];
    ///             let (send, counts): (&[u32], &[usize]) =
    ///                 if r == 0 { (&[7, 8, 9, 10], &[1, 3]) } else { (&[], &[]) };
    ///             c.scatter_v(send, counts, &mut mine, 0).unwrap();
    ///             assert_eq!(mine, if r == 0 { vec![7] } else { vec![8, 9, 10] });
    ///         });
    ///     }
    /// });
    /// ```
    pub fn scatter_v<T: Element>(
        &self,
        send: &[T],
        counts: &[usize],
        recv: &mut [T],
        root: usize,
    ) -> Result<(), Error> {
        self.run_blocks(
            Call::Scatter { root },
            send,
            recv,
            counts.to_vec(),
            Vec::new(),
        )
    }

    /// A blocking call whose blocks differ in size.
    fn run_blocks<T: Element>(
        &self,
        call: Call,
        send: &[T],
        recv: &mut [T],
        send_counts: Vec<usize>,
        recv_counts: Vec<usize>,
    ) -> Result<(), Error> {
        let mut rc = comm::raw_call(call, Some(send), recv, &CallOptions::default());
        rc.blocks = Some(comm::Blocks {
            send: send_counts,
            recv: recv_counts,
        });
        comm::run_blocking(&self.inner, rc)
    }

    /// Sends `send` to rank `rank + shift` and receives `recv` from `rank - shift`.
    pub fn sendrecv<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        shift: usize,
    ) -> Result<(), Error> {
        self.call(Call::SendRecv { shift }, Some(send), recv)
    }

    /// Sends `data` to `peer` (matched by a [`Communicator::recv`] there).
    pub fn send<T: Element>(&self, data: &[T], peer: usize) -> Result<(), Error> {
        self.call(Call::Send { peer }, Some(data), &mut [])
    }

    /// Receives exactly `data.len()` elements from `peer`.
    pub fn recv<T: Element>(&self, data: &mut [T], peer: usize) -> Result<(), Error> {
        self.call(Call::Recv { peer }, None, data)
    }

    /// The root gets every rank's `send` (all of one length), in rank order
    /// in its `recv` (`n * send.len()` elements), as `MPI_Gather`; the other
    /// ranks' `recv` is not used (pass an empty slice).
    ///
    /// # Example
    ///
    /// ```
    /// use gpucomm::Communicator;
    ///
    /// let comms = Communicator::in_process(3).unwrap();
    /// std::thread::scope(|s| {
    ///     for c in &comms {
    ///         s.spawn(move || {
    ///             let r = c.rank() as i32;
    ///             let mut all = vec![0i32; if r == 1 { 6 } else { 0 }];
    ///             c.gather(&[r, -r], &mut all, 1).unwrap();
    ///             if r == 1 {
    ///                 assert_eq!(all, [0, 0, 1, -1, 2, -2]);
    ///             }
    ///         });
    ///     }
    /// });
    /// ```
    pub fn gather<T: Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<(), Error> {
        self.call(Call::Gather { root }, Some(send), recv)
    }

    /// In-place gather: `buf` holds `n` blocks on every rank, this rank's
    /// own at its place (block r of rank r); the root's `buf` ends with
    /// every rank's block (`MPI_IN_PLACE` at the root, and nccl-tests'
    /// in-place layout on the others).
    ///
    /// # Example
    ///
    /// ```
    /// use gpucomm::Communicator;
    ///
    /// let comms = Communicator::in_process(3).unwrap();
    /// std::thread::scope(|s| {
    ///     for c in &comms {
    ///         s.spawn(move || {
    ///             let r = c.rank();
    ///             let mut buf = [0u8; 6];
    ///             buf[2 * r..2 * r + 2].copy_from_slice(&[r as u8; 2]);
    ///             c.gather_in_place(&mut buf, 0).unwrap();
    ///             if r == 0 {
    ///                 assert_eq!(buf, [0, 0, 1, 1, 2, 2]);
    ///             }
    ///         });
    ///     }
    /// });
    /// ```
    pub fn gather_in_place<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), Error> {
        self.call(Call::Gather { root }, None, buf)
    }

    /// Rank r gets block r of the root's `send` (`n * recv.len()` elements)
    /// in its `recv`, as `MPI_Scatter`; the other ranks' `send` is not used
    /// (pass an empty slice).
    pub fn scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Result<(), Error> {
        self.call(Call::Scatter { root }, Some(send), recv)
    }

    /// In-place scatter: `buf` holds `n` blocks on every rank (the root's
    /// are the input); rank r ends with the root's block r at its place,
    /// block r of its own `buf`.
    pub fn scatter_in_place<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), Error> {
        self.call(Call::Scatter { root }, None, buf)
    }

    /// Sends `send` to rank `to` and receives `recv` from rank `from` at
    /// once, as `MPI_Sendrecv` (the pattern of pipeline-parallel stages,
    /// which send activations on and take gradients back): each half
    /// matches a [`Communicator::send`] or [`Communicator::recv`] of its
    /// length on that peer, or the other half of its `exchange`. Two ranks
    /// that each `send` and then `recv` a large message wait for each other
    /// until their timeout; two that `exchange` do not.
    ///
    /// # Example
    ///
    /// ```
    /// use gpucomm::Communicator;
    ///
    /// // A ring: each rank passes 1 MiB on and takes its neighbour's.
    /// let comms = Communicator::in_process(3).unwrap();
    /// std::thread::scope(|s| {
    ///     for c in &comms {
    ///         s.spawn(move || {
    ///             let (r, n) = (c.rank(), c.world_size());
    ///             let mine = vec![r as u8; 1 << 20];
    ///             let mut theirs = vec![0u8; 1 << 20];
    ///             c.exchange(&mine, (r + 1) % n, &mut theirs, (r + n - 1) % n).unwrap();
    ///             assert!(theirs.iter().all(|&x| x as usize == (r + n - 1) % n));
    ///         });
    ///     }
    /// });
    /// ```
    pub fn exchange<T: Element>(
        &self,
        send: &[T],
        to: usize,
        recv: &mut [T],
        from: usize,
    ) -> Result<(), Error> {
        self.call(Call::Exchange { to, from }, Some(send), recv)
    }

    /// Returns once every rank has entered the barrier.
    pub fn barrier(&self) -> Result<(), Error> {
        self.call::<u8>(Call::Barrier, None, &mut [])
    }

    /// Splits the ranks into groups, each with a communicator of its own, as
    /// `MPI_Comm_split` and `ncclCommSplit` do (tensor- and data-parallel
    /// groups, `torch.distributed.new_group`). Collective: every rank calls
    /// it, in the same order as its other calls. The ranks that give the
    /// same `color` form a group, numbered by `key` and then by their rank
    /// here; a rank that gives `None` joins no group and gets `None`.
    ///
    /// A group connects as a job does (shared memory on one host, TCP
    /// between hosts, in-process ranks in-process), through the job's
    /// rendezvous store, which the job's rank 0 hosts: that rank's root
    /// communicator must live while groups are being made (a split of a
    /// split included: end the splits with a barrier on the root before
    /// dropping it), except for a group of one, which needs no store. The
    /// group keeps this rank's timeout and this communicator's forced
    /// algorithm. The groups are independent of this communicator and of
    /// each other afterwards; threads may split several communicators of
    /// one rank at once. A split that fails on one rank
    /// aborts this communicator and tells its group, so the others fail at
    /// once (within 100 ms for those waiting for it in the store; as when a
    /// member's process dies inside the split).
    ///
    /// # Example
    ///
    /// ```
    /// use gpucomm::{Communicator, ReduceOp};
    ///
    /// // Four ranks: evens and odds, each group numbered in reverse.
    /// let comms = Communicator::in_process(4).unwrap();
    /// let sums: Vec<(usize, usize, f32)> = std::thread::scope(|s| {
    ///     let hs: Vec<_> = comms
    ///         .iter()
    ///         .map(|c| {
    ///             s.spawn(move || {
    ///                 let r = c.rank();
    ///                 let g = c.split(Some(r as u32 % 2), -(r as i64)).unwrap().unwrap();
    ///                 let mut x = [r as f32];
    ///                 g.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
    ///                 (g.rank(), g.world_size(), x[0])
    ///             })
    ///         })
    ///         .collect();
    ///     hs.into_iter().map(|h| h.join().unwrap()).collect()
    /// });
    /// // Rank 2 is rank 0 of the evens (keys 0 and -2), whose sum is 0 + 2.
    /// assert_eq!(sums, vec![(1, 2, 2.0), (1, 2, 4.0), (0, 2, 2.0), (0, 2, 4.0)]);
    /// ```
    pub fn split(&self, color: Option<u32>, key: i64) -> Result<Option<Communicator>, Error> {
        split::split(self, color, key)
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if let Some(h) = self.inner.shutdown_queue() {
            let _ = h.join();
        }
        self.inner.close();
    }
}
