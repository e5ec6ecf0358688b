//! [`CudaBackend`]: the [`DeviceBackend`] on the real driver
//! (`gpucomm-cuda`, loaded at run time).
//!
//! Handles (streams, events, allocations, IPC mappings, registrations) live
//! in tables keyed by number or address; a table lock is never held while
//! the host waits on the device.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gpucomm_cuda::{
    Device, DeviceBuffer, DeviceMemory, Event, Gpu, IpcBuffer, IpcBufferDesc, Kernels,
    RegisteredRegion,
};

use super::opened::{Close, Opened};
use super::{DeviceBackend, DevicePtr, EventId, StreamId};
use crate::{DataType, Error, ReduceOp};

/// Opens the CUDA driver: [`Error::NoGpu`] (with the reason: library
/// missing, `cuInit` failing, no device) when there is no usable GPU.
///
/// ```
/// use gpucomm::device::DeviceBackend;
/// match gpucomm::device::open_cuda() {
///     Ok(gpu) => println!("{} devices", gpu.device_count()),
///     Err(e) => assert!(e.to_string().starts_with("no GPU: ")),
/// }
/// ```
pub fn open_cuda() -> Result<Arc<CudaBackend>, Error> {
    let gpu = Gpu::probe().map_err(|e| match e {
        gpucomm_cuda::Error::NoGpu { reason } => Error::NoGpu(reason),
        e => Error::NoGpu(e.to_string()),
    })?;
    let n = gpu.device_count() as usize;
    Ok(Arc::new(CudaBackend {
        gpu,
        devices: Mutex::new(vec![None; n]),
        t: Mutex::new(Tables::default()),
    }))
}

/// Device memory addressed by a raw pointer, for `gpucomm-cuda`'s copy and
/// kernel calls.
struct Raw<'a> {
    dev: &'a Device,
    ptr: u64,
    len: usize,
}

impl<'a> Raw<'a> {
    /// # Safety
    /// `ptr..ptr + len` is memory `dev`'s context reaches (an allocation of
    /// this backend, a peer's mapping opened through IPC) and stays
    /// allocated until the stream has run the work using the value: what
    /// the [`DeviceBackend`] caller guarantees.
    unsafe fn new(dev: &'a Device, ptr: u64, len: usize) -> Self {
        Raw { dev, ptr, len }
    }
}

// SAFETY: `Raw::new`'s contract is `DeviceMemory`'s; the fields never change.
unsafe impl DeviceMemory for Raw<'_> {
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn device(&self) -> &Device {
        self.dev
    }
}

#[derive(Default)]
struct Tables {
    next: u64,
    streams: HashMap<u64, Arc<gpucomm_cuda::Stream>>,
    events: HashMap<u64, Arc<Event>>,
    allocs: HashMap<u64, DeviceBuffer>,
    opened: Opened<IpcBuffer>,
    registered: HashMap<usize, RegisteredRegion>,
    kernels: HashMap<u32, Arc<Kernels>>,
}

/// The CUDA implementation of [`DeviceBackend`]; made by [`open_cuda`].
pub struct CudaBackend {
    gpu: Gpu,
    /// Opened on first use (each holds the device's primary context).
    devices: Mutex<Vec<Option<Device>>>,
    t: Mutex<Tables>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBackend({} devices)", self.gpu.device_count())
    }
}

impl CudaBackend {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        crate::lock(&self.t)
    }

    fn dev(&self, device: u32) -> Result<Device, Error> {
        let mut ds = crate::lock(&self.devices);
        let slot = ds.get_mut(device as usize).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "device {device}: this machine has {} CUDA devices",
                self.gpu.device_count()
            ))
        })?;
        if let Some(d) = slot {
            return Ok(d.clone());
        }
        let d = self
            .gpu
            .device(device)
            .map_err(|e| Self::err(device, "open the device", e))?;
        *slot = Some(d.clone());
        Ok(d)
    }

    fn err(device: u32, what: &str, e: gpucomm_cuda::Error) -> Error {
        Error::Device {
            backend: "cuda".into(),
            device,
            what: what.into(),
            detail: e.to_string(),
        }
    }

    fn stream(&self, s: StreamId) -> Result<Arc<gpucomm_cuda::Stream>, Error> {
        self.lock()
            .streams
            .get(&s.0)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument(format!("unknown stream {}", s.0)))
    }

    fn event(&self, e: EventId) -> Result<Arc<Event>, Error> {
        self.lock()
            .events
            .get(&e.0)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument(format!("unknown event {}", e.0)))
    }

    fn kernels(&self, device: u32) -> Result<Arc<Kernels>, Error> {
        if let Some(k) = self.lock().kernels.get(&device) {
            return Ok(k.clone());
        }
        // Compiling takes a while: not under the lock (a race compiles twice).
        let k = self
            .dev(device)?
            .kernels()
            .map_err(|e| Self::err(device, "compile the reduction kernels (NVRTC)", e))?;
        self.lock().kernels.insert(device, k.clone());
        Ok(k)
    }
}

impl DeviceBackend for CudaBackend {
    fn name(&self) -> &str {
        "cuda"
    }

    fn device_count(&self) -> u32 {
        self.gpu.device_count()
    }

    fn device_name(&self, device: u32) -> Result<String, Error> {
        Ok(self.dev(device)?.info().name.clone())
    }

    fn physical_id(&self, device: u32) -> Result<String, Error> {
        Ok(self.dev(device)?.info().pci_bus_id.clone())
    }

    fn can_access_peer(&self, device: u32, peer: u32) -> Result<bool, Error> {
        self.dev(device)?
            .can_access_peer(&self.dev(peer)?)
            .map_err(|e| Self::err(device, "cuDeviceCanAccessPeer", e))
    }

    fn alloc(&self, device: u32, bytes: usize) -> Result<DevicePtr, Error> {
        let b = self
            .dev(device)?
            .alloc(bytes)
            .map_err(|e| Self::err(device, "allocate device memory", e))?;
        let p = b.device_ptr();
        self.lock().allocs.insert(p, b);
        Ok(p)
    }

    unsafe fn free(&self, _device: u32, ptr: DevicePtr) {
        let b = self.lock().allocs.remove(&ptr);
        drop(b);
    }

    unsafe fn register_host(&self, device: u32, ptr: *mut u8, len: usize) -> Result<(), Error> {
        // SAFETY: the caller keeps the range live until unregister_host.
        let r = unsafe { self.dev(device)?.register_raw(ptr, len) }
            .map_err(|e| Self::err(device, "register host memory", e))?;
        self.lock().registered.insert(ptr as usize, r);
        Ok(())
    }

    unsafe fn unregister_host(&self, ptr: *mut u8) {
        let r = self.lock().registered.remove(&(ptr as usize));
        drop(r);
    }

    fn create_stream(&self, device: u32) -> Result<StreamId, Error> {
        let s = self
            .dev(device)?
            .stream()
            .map_err(|e| Self::err(device, "create a stream", e))?;
        let mut t = self.lock();
        t.next += 1;
        let id = t.next;
        t.streams.insert(id, Arc::new(s));
        Ok(StreamId(id))
    }

    fn destroy_stream(&self, stream: StreamId) {
        let s = self.lock().streams.remove(&stream.0);
        drop(s);
    }

    unsafe fn copy_h2d(
        &self,
        stream: StreamId,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), Error> {
        let s = self.stream(stream)?;
        let dev = s.device();
        // SAFETY: the caller keeps `src` live and unchanged until the stream
        // has run the copy.
        let src = unsafe { std::slice::from_raw_parts(src, bytes) };
        // SAFETY: the caller guarantees `dst` is `bytes` of live device memory.
        let d = unsafe { Raw::new(dev, dst, bytes) };
        // SAFETY: as above.
        unsafe { s.copy_from_host_async(&d, 0, src) }
            .map_err(|e| Self::err(dev.ordinal(), "host-to-device copy", e))
    }

    unsafe fn copy_d2h(
        &self,
        stream: StreamId,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), Error> {
        let s = self.stream(stream)?;
        let dev = s.device();
        // SAFETY: the caller keeps `dst` live and untouched until the
        // stream has run the copy.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, bytes) };
        // SAFETY: the caller guarantees `src` is `bytes` of live device memory.
        let sr = unsafe { Raw::new(dev, src, bytes) };
        // SAFETY: as above.
        unsafe { s.copy_to_host_async(dst, &sr, 0) }
            .map_err(|e| Self::err(dev.ordinal(), "device-to-host copy", e))
    }

    unsafe fn copy_d2d(
        &self,
        stream: StreamId,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), Error> {
        let s = self.stream(stream)?;
        let dev = s.device();
        // SAFETY: the caller guarantees both ranges are `bytes` of live
        // device memory (ours or a peer's mapping).
        let (d, sr) = unsafe { (Raw::new(dev, dst, bytes), Raw::new(dev, src, bytes)) };
        // Peer memory opened through IPC is mapped into our context (UVA),
        // so a plain device-to-device copy reaches it over P2P.
        s.copy_device(&d, 0, &sr, 0, bytes)
            .map_err(|e| Self::err(dev.ordinal(), "device-to-device copy", e))
    }

    unsafe fn reduce(
        &self,
        stream: StreamId,
        op: ReduceOp,
        dtype: DataType,
        dst: DevicePtr,
        a: DevicePtr,
        b: DevicePtr,
        count: usize,
    ) -> Result<(), Error> {
        let s = self.stream(stream)?;
        let dev = s.device();
        let k = self.kernels(dev.ordinal())?;
        let len = count * dtype.size();
        // SAFETY: the caller guarantees the three operands are `count`
        // elements of live device memory (ours or a peer's mapping).
        let r = |ptr| unsafe { Raw::new(dev, ptr, len) };
        k.reduce(&s, op, dtype, &r(dst), &r(a), &r(b), count)
            .map_err(|e| Self::err(dev.ordinal(), "reduction kernel", e))
    }

    unsafe fn divide(
        &self,
        stream: StreamId,
        dtype: DataType,
        dst: DevicePtr,
        count: usize,
        ranks: u64,
    ) -> Result<(), Error> {
        let s = self.stream(stream)?;
        let dev = s.device();
        let k = self.kernels(dev.ordinal())?;
        // SAFETY: the caller guarantees `dst` is `count` elements of live
        // device memory.
        let d = unsafe { Raw::new(dev, dst, count * dtype.size()) };
        k.divide(&s, dtype, &d, count, ranks)
            .map_err(|e| Self::err(dev.ordinal(), "divide kernel", e))
    }

    fn synchronize(&self, stream: StreamId) -> Result<(), Error> {
        let s = self.stream(stream)?;
        s.synchronize()
            .map_err(|e| Self::err(s.device().ordinal(), "cuStreamSynchronize", e))
    }

    fn record_event(&self, stream: StreamId) -> Result<EventId, Error> {
        let s = self.stream(stream)?;
        let dev = s.device();
        let e = dev
            .event(false, false)
            .map_err(|e| Self::err(dev.ordinal(), "create an event", e))?;
        e.record(&s)
            .map_err(|e| Self::err(dev.ordinal(), "cuEventRecord", e))?;
        let mut t = self.lock();
        t.next += 1;
        let id = t.next;
        t.events.insert(id, Arc::new(e));
        Ok(EventId(id))
    }

    fn event_wait(&self, event: EventId) -> Result<(), Error> {
        self.event(event)?
            .wait()
            .map_err(|e| Self::err(0, "cuEventSynchronize", e))
    }

    fn event_done(&self, event: EventId) -> Result<bool, Error> {
        self.event(event)?
            .is_done()
            .map_err(|e| Self::err(0, "cuEventQuery", e))
    }

    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<(), Error> {
        let s = self.stream(stream)?;
        let e = self.event(event)?;
        s.wait_event(&e)
            .map_err(|er| Self::err(s.device().ordinal(), "cuStreamWaitEvent", er))
    }

    fn destroy_event(&self, event: EventId) {
        let e = self.lock().events.remove(&event.0);
        drop(e);
    }

    fn ipc_export(&self, device: u32, ptr: DevicePtr, bytes: usize) -> Result<Vec<u8>, Error> {
        let t = self.lock();
        let b = t.allocs.get(&ptr).ok_or_else(|| {
            Error::InvalidArgument(format!("ipc_export: {ptr:#x} is not an allocation"))
        })?;
        if bytes > b.len() {
            return Err(Error::InvalidArgument(format!(
                "ipc_export: {bytes} bytes of an allocation of {}",
                b.len()
            )));
        }
        let mem = b
            .ipc_handle()
            .map_err(|e| Self::err(device, "cuIpcGetMemHandle", e))?;
        Ok(IpcBufferDesc {
            pid: std::process::id(),
            device,
            len: bytes as u64,
            mem,
            ready: None,
        }
        .to_bytes())
    }

    fn ipc_open(&self, device: u32, handle: &[u8]) -> Result<(DevicePtr, usize), Error> {
        let d = IpcBufferDesc::from_bytes(handle)
            .map_err(|e| Self::err(device, "read a peer's IPC descriptor", e))?;
        if d.pid == std::process::id() {
            return Err(Error::InvalidArgument(
                "ipc_open: a CUDA IPC handle cannot be opened by the process that exported it"
                    .into(),
            ));
        }
        let len = usize::try_from(d.len)
            .map_err(|_| Error::InvalidArgument(format!("ipc_open: length {}", d.len)))?;
        let b = self
            .dev(device)?
            .open_ipc_memory(&d.mem, len)
            .map_err(|e| {
                Self::err(
                    device,
                    &format!("cuIpcOpenMemHandle (process {})", d.pid),
                    e,
                )
            })?;
        let p = b.device_ptr();
        // Open already (another user of this backend): the driver returned
        // the same address and counted a reference, which dropping the
        // duplicate (cuIpcCloseMemHandle) gives back; the table counts it.
        let dup = self.lock().opened.open(p, b);
        drop(dup);
        Ok((p, len))
    }

    unsafe fn ipc_close(&self, _device: u32, ptr: DevicePtr) {
        let last = match self.lock().opened.close(ptr) {
            Close::Last(b) => Some(b),
            Close::Kept | Close::NotOpen => None,
        };
        // Unmapped outside the table lock.
        drop(last);
    }
}
