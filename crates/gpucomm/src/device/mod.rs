//! Device memory: collectives on GPU buffers, in stream order.
//!
//! # Design
//!
//! Everything the runtime needs from a GPU goes through one small trait,
//! [`DeviceBackend`]: allocate and free, copy host-to-device,
//! device-to-host and device-to-device on a stream, the reduction kernels,
//! events (record, wait, make a stream wait), page-locking host memory, and
//! CUDA IPC (export a buffer as bytes, open a peer's bytes). Two
//! implementations:
//!
//! * [`CudaBackend`] — the real one, on `gpucomm-cuda` (driver loaded at run
//!   time: with no driver, [`open_cuda`] returns [`Error::NoGpu`], never a
//!   panic);
//! * [`FakeDevice`] — a test double in plain host memory: "device" memory is
//!   a `memfd` segment (so another process can "IPC-open" it through
//!   `/proc/<pid>/fd`), copies are `memcpy`, kernels are the CPU reference
//!   reduction, and stream work is *deferred* until the stream is
//!   synchronized, so a missing synchronization shows up as wrong data.
//!
//! On top of the trait, [`DeviceComm`] wraps a host [`Communicator`](crate::Communicator) and
//! runs every call on [`DeviceBuffer`]s, on a caller's [`Stream`], over one
//! of two paths ([`GpuPath`], `GPUCOMM_GPU_PATH=auto|ipc|staged`):
//!
//! * **IPC** (every rank on one host): each call exchanges a small
//!   descriptor of its buffers with the other ranks over the host
//!   transports (an all-gather, which is also the "inputs ready" barrier);
//!   a peer in another process is opened once through CUDA IPC and cached,
//!   a peer thread's buffer is used by address. Then each rank reads its
//!   peers' device memory directly: copies device-to-device (P2P) and the
//!   reduction kernels take their operands from peer memory. All-reduce is
//!   a direct reduce-scatter (rank r folds block r of every input, in rank
//!   order) then a direct all-gather of the blocks. Send, recv and exchange
//!   keep the host path's semantics: under 16 KiB the bytes go inline and
//!   the send does not wait; from 16 KiB the receiver copies from the
//!   sender's buffer (mapped for that copy alone) and acknowledges.
//! * **Staged** (the traditional path, and the fallback across hosts):
//!   device → page-locked host memory that peers map (a communicator
//!   segment registered with the device) → the host collective (zero copy
//!   between ranks, reductions on the CPU) → device.
//!
//! A call synchronizes the caller's stream before it publishes its buffers
//! (its inputs are ready), and returns a [`DeviceEvent`] recorded on the
//! stream after the last step: work the caller queues on the same stream
//! afterwards sees the result, as with NCCL. Today the host waits for each
//! phase (ranks must know a peer's block is final before reading it), so
//! the event is already complete when the call returns.
//!
//! ```
//! use gpucomm::device::{DeviceComm, DeviceOptions, FakeDevice};
//! use gpucomm::{Communicator, ReduceOp};
//! use std::sync::Arc;
//!
//! // Two ranks as threads; host memory stands in for the GPU.
//! let gpu = Arc::new(FakeDevice::new(1));
//! let handles: Vec<_> = Communicator::in_process(2)?
//!     .into_iter()
//!     .map(|c| {
//!         let gpu = gpu.clone();
//!         std::thread::spawn(move || -> Result<Vec<f32>, gpucomm::Error> {
//!             let r = c.rank() as f32;
//!             let dc = DeviceComm::new(c, gpu, 0, &DeviceOptions::default())?;
//!             let stream = dc.stream()?;
//!             let send = dc.alloc_from(&[r, 10.0 + r], &stream)?;
//!             let mut recv = dc.alloc::<f32>(2)?;
//!             dc.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?.wait()?;
//!             recv.to_vec(&stream)
//!         })
//!     })
//!     .collect();
//! for h in handles {
//!     assert_eq!(h.join().unwrap()?, vec![1.0, 21.0]);
//! }
//! # Ok::<(), gpucomm::Error>(())
//! ```

#![allow(unsafe_code)]

mod comm;
mod cuda;
mod fake;
mod opened;

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::dtype::Element;
use crate::{DataType, Error, ReduceOp};

pub use comm::{DeviceComm, DeviceOptions, GPU_PATH_ENV, GpuPath};
pub use cuda::{CudaBackend, open_cuda};
pub use fake::{FakeDevice, FakeStats};

/// A device address (`CUdeviceptr`; for [`FakeDevice`], a host address).
pub type DevicePtr = u64;

/// A backend's stream handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamId(pub u64);

/// A backend's event handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId(pub u64);

/// The device operations the runtime uses. Every method that takes raw
/// addresses is `unsafe`: the caller guarantees that each range is live
/// memory of the right kind (device memory of `device`, or host memory) and
/// stays untouched by anyone else until the stream has run the operation.
/// Operations on a stream run in issue order; results are visible to the
/// host after [`DeviceBackend::synchronize`] or an event wait.
pub trait DeviceBackend: Send + Sync {
    /// `"cuda"`, `"fake"`.
    fn name(&self) -> &str;
    /// Number of devices.
    fn device_count(&self) -> u32;
    /// Human-readable device name.
    fn device_name(&self, device: u32) -> Result<String, Error>;
    /// Identifies the physical device (PCI bus id): two ranks whose ids are
    /// equal share one GPU.
    fn physical_id(&self, device: u32) -> Result<String, Error>;
    /// Whether `device` can read and write `peer`'s memory directly (P2P).
    fn can_access_peer(&self, device: u32, peer: u32) -> Result<bool, Error>;
    /// Allocates `bytes` (> 0) of device memory.
    fn alloc(&self, device: u32, bytes: usize) -> Result<DevicePtr, Error>;
    /// Frees memory from [`DeviceBackend::alloc`].
    ///
    /// # Safety
    /// `ptr` came from `alloc` on `device` and is freed once.
    unsafe fn free(&self, device: u32, ptr: DevicePtr);
    /// Page-locks and registers host memory for DMA (`cuMemHostRegister`).
    ///
    /// # Safety
    /// The range is live host memory until [`DeviceBackend::unregister_host`].
    unsafe fn register_host(&self, device: u32, ptr: *mut u8, len: usize) -> Result<(), Error>;
    /// Undoes [`DeviceBackend::register_host`].
    ///
    /// # Safety
    /// `ptr` was registered and no copy using it is in flight.
    unsafe fn unregister_host(&self, ptr: *mut u8);
    /// A new stream on `device`.
    fn create_stream(&self, device: u32) -> Result<StreamId, Error>;
    /// Destroys a stream (after its work completes).
    fn destroy_stream(&self, stream: StreamId);
    /// Host → device copy of `bytes`.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn copy_h2d(
        &self,
        stream: StreamId,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), Error>;
    /// Device → host copy of `bytes`.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn copy_d2h(
        &self,
        stream: StreamId,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), Error>;
    /// Device → device copy (either side may be a peer's memory opened
    /// through IPC: the copy then crosses P2P).
    ///
    /// # Safety
    /// See the trait.
    unsafe fn copy_d2d(
        &self,
        stream: StreamId,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), Error>;
    /// `dst = a op b` over `count` elements (`avg` combines as `sum`); `dst`
    /// may equal `a`. Operands may be peer memory.
    ///
    /// # Safety
    /// See the trait.
    #[allow(clippy::too_many_arguments)]
    unsafe fn reduce(
        &self,
        stream: StreamId,
        op: ReduceOp,
        dtype: DataType,
        dst: DevicePtr,
        a: DevicePtr,
        b: DevicePtr,
        count: usize,
    ) -> Result<(), Error>;
    /// `dst[i] /= ranks`: `avg` (of the sum for integers, of each input
    /// before the sum for floating-point types).
    ///
    /// # Safety
    /// See the trait.
    unsafe fn divide(
        &self,
        stream: StreamId,
        dtype: DataType,
        dst: DevicePtr,
        count: usize,
        ranks: u64,
    ) -> Result<(), Error>;
    /// Waits on the host until the stream's work is done.
    fn synchronize(&self, stream: StreamId) -> Result<(), Error>;
    /// Records an event after the stream's current work.
    fn record_event(&self, stream: StreamId) -> Result<EventId, Error>;
    /// Waits on the host for an event.
    fn event_wait(&self, event: EventId) -> Result<(), Error>;
    /// Whether an event has completed (without waiting).
    fn event_done(&self, event: EventId) -> Result<bool, Error>;
    /// Makes `stream`'s later work wait for `event`.
    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<(), Error>;
    /// Destroys an event.
    fn destroy_event(&self, event: EventId);
    /// Exports an allocation for another process of this host (CUDA IPC
    /// handle in a checked wire form).
    fn ipc_export(&self, device: u32, ptr: DevicePtr, bytes: usize) -> Result<Vec<u8>, Error>;
    /// Opens bytes from [`DeviceBackend::ipc_export`] of another process;
    /// returns the local address and the usable length (refused when the
    /// handle announces more than the allocation it maps). As with CUDA,
    /// opening an allocation this process has open already returns the
    /// same address and counts one more reference.
    fn ipc_open(&self, device: u32, handle: &[u8]) -> Result<(DevicePtr, usize), Error>;
    /// Closes one [`DeviceBackend::ipc_open`]: the mapping goes with the
    /// last reference.
    ///
    /// # Safety
    /// `ptr` came from `ipc_open`, each open is closed once, and no work
    /// using this reference is in flight.
    unsafe fn ipc_close(&self, device: u32, ptr: DevicePtr);
}

impl std::fmt::Debug for dyn DeviceBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBackend({})", self.name())
    }
}

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// An exported allocation dropped while peers may still map it (CUDA:
/// freeing memory another process has open is undefined behaviour). Every
/// communicator that exposed it to peers for longer than a call holds an
/// `Arc` until a call of its own has announced it retired and its peers
/// have closed their mappings; the memory is freed when the last goes.
pub(crate) struct Retired {
    backend: Arc<dyn DeviceBackend>,
    device: u32,
    key: u64,
    ptr: DevicePtr,
}

impl Retired {
    /// The buffer's key (what peers cache its mapping under).
    pub fn key(&self) -> u64 {
        self.key
    }
}

impl Drop for Retired {
    fn drop(&mut self) {
        // SAFETY: the buffer's own allocation (it dropped), freed once, here;
        // every communicator that exposed it has announced it to its peers,
        // which closed their mappings before that call's closing barrier,
        // or is gone (dropped on every rank together).
        unsafe { self.backend.free(self.device, self.ptr) }
    }
}

/// A backend and the device a communicator uses, shared by its buffers,
/// streams and events.
pub(crate) struct DevCtx {
    pub backend: Arc<dyn DeviceBackend>,
    pub device: u32,
    /// Exported allocations dropped while this communicator's peers may
    /// still map them, to announce in its next calls. `None` once the
    /// communicator is gone (then it holds none).
    retired: Mutex<Option<Vec<Arc<Retired>>>>,
}

impl DevCtx {
    pub fn new(backend: Arc<dyn DeviceBackend>, device: u32, defer: bool) -> Arc<DevCtx> {
        Arc::new(DevCtx {
            backend,
            device,
            retired: Mutex::new(defer.then(Vec::new)),
        })
    }

    /// Keeps `r` until a call of this communicator has announced it (no
    /// effect once the communicator is gone).
    fn retire(&self, r: &Arc<Retired>) {
        if let Some(v) = crate::lock(&self.retired).as_mut() {
            v.push(r.clone());
        }
    }

    /// Up to `max` retired allocations, to announce in a call.
    pub fn take_retired(&self, max: usize) -> Vec<Arc<Retired>> {
        match crate::lock(&self.retired).as_mut() {
            Some(v) => {
                let k = v.len().min(max);
                v.drain(..k).collect()
            }
            None => Vec::new(),
        }
    }

    /// After a call that announced `freeing`: let them go when every peer
    /// has closed them (`done`; each is freed once no other communicator
    /// still has to announce it), else keep them for later.
    pub fn finish_retired(&self, freeing: Vec<Arc<Retired>>, done: bool) {
        let release = if done {
            Some(freeing)
        } else {
            match crate::lock(&self.retired).as_mut() {
                Some(v) => {
                    v.extend(freeing);
                    None
                }
                None => Some(freeing),
            }
        };
        // Freed outside the lock.
        drop(release);
    }

    /// The communicator is going: let go of what is retired, and hold
    /// nothing from now on.
    pub fn close(&self) {
        let left = crate::lock(&self.retired).take();
        // Freed outside the lock, where no other communicator holds them
        // (see DeviceComm's Drop for peers).
        drop(left);
    }
}

/// A stream of a [`DeviceComm`]'s device: device work in issue order.
/// Destroyed on drop.
pub struct Stream {
    ctx: Arc<DevCtx>,
    id: StreamId,
}

impl Stream {
    pub(crate) fn new(ctx: &Arc<DevCtx>) -> Result<Stream, Error> {
        let id = ctx.backend.create_stream(ctx.device)?;
        Ok(Stream {
            ctx: ctx.clone(),
            id,
        })
    }

    /// The backend's handle.
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// The device ordinal.
    pub fn device(&self) -> u32 {
        self.ctx.device
    }

    /// Waits on the host until the stream's work is done.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.ctx.backend.synchronize(self.id)
    }

    /// An event recorded after the stream's current work.
    pub fn record(&self) -> Result<DeviceEvent, Error> {
        let id = self.ctx.backend.record_event(self.id)?;
        Ok(DeviceEvent {
            ctx: self.ctx.clone(),
            id,
        })
    }

    /// Makes this stream's later work wait for `event` (no host wait).
    pub fn wait_event(&self, event: &DeviceEvent) -> Result<(), Error> {
        if !Arc::ptr_eq(&event.ctx.backend, &self.ctx.backend) {
            return Err(Error::InvalidArgument(
                "the event belongs to another device backend".into(),
            ));
        }
        self.ctx.backend.stream_wait_event(self.id, event.id)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.ctx.backend.destroy_stream(self.id);
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({:?} on device {})", self.id, self.ctx.device)
    }
}

/// "This operation is done": recorded on the caller's stream after the last
/// step of a device call. Wait on the host ([`DeviceEvent::wait`]) or make
/// another stream wait ([`Stream::wait_event`]). Destroyed on drop.
pub struct DeviceEvent {
    ctx: Arc<DevCtx>,
    id: EventId,
}

impl DeviceEvent {
    /// Waits on the host until the event has completed.
    pub fn wait(&self) -> Result<(), Error> {
        self.ctx.backend.event_wait(self.id)
    }

    /// Whether the event has completed.
    pub fn is_done(&self) -> Result<bool, Error> {
        self.ctx.backend.event_done(self.id)
    }
}

impl Drop for DeviceEvent {
    fn drop(&mut self) {
        self.ctx.backend.destroy_event(self.id);
    }
}

impl std::fmt::Debug for DeviceEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceEvent({:?})", self.id)
    }
}

/// `len` elements of `T` in device memory, allocated by
/// [`DeviceComm::alloc`]; freed on drop. Not addressable from the host:
/// copy in and out with [`DeviceBuffer::copy_from_host`] and
/// [`DeviceBuffer::copy_to_host`] (or [`DeviceBuffer::to_vec`]).
pub struct DeviceBuffer<T: Element> {
    ctx: Arc<DevCtx>,
    ptr: DevicePtr,
    len: usize,
    /// Unique in this process (the IPC cache key of peers).
    key: u64,
    /// The allocation's IPC export, made on first use.
    ipc: OnceLock<Vec<u8>>,
    /// The communicators (any that use this backend and device, not only
    /// the one that allocated it) whose peer processes may hold a lasting
    /// mapping of it (a collective published it, or a send was not
    /// acknowledged): freed only once each has announced it retired and
    /// its peers closed it. A point-to-point send's receiver maps the
    /// buffer for its copy alone.
    exposed: Mutex<Vec<Weak<DevCtx>>>,
    _t: PhantomData<T>,
}

impl<T: Element> DeviceBuffer<T> {
    pub(crate) fn alloc(ctx: &Arc<DevCtx>, len: usize) -> Result<Self, Error> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::InvalidArgument(format!("{len} elements overflow a device allocation"))
        })?;
        // A zero-length buffer still gets a real (tiny) allocation, so every
        // buffer has an address and an IPC handle.
        let ptr = ctx.backend.alloc(ctx.device, bytes.max(1))?;
        Ok(DeviceBuffer {
            ctx: ctx.clone(),
            ptr,
            len,
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            ipc: OnceLock::new(),
            exposed: Mutex::new(Vec::new()),
            _t: PhantomData,
        })
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes.
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The device ordinal.
    pub fn device(&self) -> u32 {
        self.ctx.device
    }

    /// The device address (for handing to other CUDA code).
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Always [`crate::MemorySpace::Device`].
    pub fn space(&self) -> crate::MemorySpace {
        crate::MemorySpace::Device(self.ctx.device)
    }

    fn check_stream(&self, stream: &Stream) -> Result<(), Error> {
        if !Arc::ptr_eq(&stream.ctx.backend, &self.ctx.backend)
            || stream.ctx.device != self.ctx.device
        {
            return Err(Error::InvalidArgument(format!(
                "a buffer on device {} used with a stream of device {} or of another backend",
                self.ctx.device, stream.ctx.device
            )));
        }
        Ok(())
    }

    /// Copies `src` (exactly [`DeviceBuffer::len`] elements) to the device
    /// and waits for the copy.
    pub fn copy_from_host(&mut self, src: &[T], stream: &Stream) -> Result<(), Error> {
        self.check_stream(stream)?;
        if src.len() != self.len {
            return Err(Error::InvalidArgument(format!(
                "copy_from_host: {} elements into a device buffer of {}",
                src.len(),
                self.len
            )));
        }
        // SAFETY: `src` is borrowed until the synchronize below returns; the
        // destination is this live allocation of `bytes()` bytes.
        unsafe {
            self.ctx.backend.copy_h2d(
                stream.id,
                self.ptr,
                src.as_ptr() as *const u8,
                self.bytes(),
            )?;
        }
        stream.synchronize()
    }

    /// Copies the device contents into `dst` (exactly
    /// [`DeviceBuffer::len`] elements) after the stream's earlier work,
    /// and waits for the copy.
    pub fn copy_to_host(&self, dst: &mut [T], stream: &Stream) -> Result<(), Error> {
        self.check_stream(stream)?;
        if dst.len() != self.len {
            return Err(Error::InvalidArgument(format!(
                "copy_to_host: a device buffer of {} elements into {}",
                self.len,
                dst.len()
            )));
        }
        // SAFETY: `dst` is borrowed mutably until the synchronize below
        // returns; the source is this live allocation.
        unsafe {
            self.ctx.backend.copy_d2h(
                stream.id,
                dst.as_mut_ptr() as *mut u8,
                self.ptr,
                self.bytes(),
            )?;
        }
        stream.synchronize()
    }

    /// The contents, copied to the host after the stream's earlier work.
    pub fn to_vec(&self, stream: &Stream) -> Result<Vec<T>, Error> {
        let mut v = vec![T::default(); self.len];
        self.copy_to_host(&mut v, stream)?;
        Ok(v)
    }

    /// Marks the buffer as mapped beyond the current call by peer
    /// processes of the communicator whose context is `by`.
    pub(crate) fn mark_mapped(&self, by: &Arc<DevCtx>) {
        let mut v = crate::lock(&self.exposed);
        if !v.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(by))) {
            v.push(Arc::downgrade(by));
        }
    }

    pub(crate) fn ipc_export(&self) -> Result<&[u8], Error> {
        if let Some(v) = self.ipc.get() {
            return Ok(v);
        }
        let v = self
            .ctx
            .backend
            .ipc_export(self.ctx.device, self.ptr, self.bytes().max(1))?;
        Ok(self.ipc.get_or_init(|| v))
    }
}

impl<T: Element> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // Device calls synchronize the caller's stream before they return,
        // so no work uses the memory; peers that opened it through IPC
        // close it first: it is freed when the last communicator that
        // exposed it lets go (see `Retired`), here if none did.
        let exposed = std::mem::take(self.exposed.get_mut().unwrap_or_else(|e| e.into_inner()));
        let r = Arc::new(Retired {
            backend: self.ctx.backend.clone(),
            device: self.ctx.device,
            key: self.key,
            ptr: self.ptr,
        });
        for c in exposed.iter().filter_map(Weak::upgrade) {
            c.retire(&r);
        }
        drop(r);
    }
}

impl<T: Element> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("len", &self.len)
            .field("device", &self.ctx.device)
            .field("backend", &self.ctx.backend.name())
            .finish()
    }
}
