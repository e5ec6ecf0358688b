//! Safe wrappers over the driver: the loaded driver ([`Gpu`]), devices,
//! device / pinned / registered memory, streams, events and CUDA IPC.
//!
//! Every object holds its [`Device`] (an `Arc`), so the device's primary
//! context outlives everything allocated in it. Each call makes the device's
//! context current on the calling thread first (`cuCtxSetCurrent`, a few
//! nanoseconds), so objects may move between threads.

#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, OnceLock};

use crate::Error;
use crate::ffi::{self, CuDevicePtr, CuHandle, Driver};
use crate::ipc::{IpcEventHandle, IpcMemHandle};

/// Where [`Gpu::probe_with`] looks for the driver.
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    /// Library names or paths tried in order with `dlopen`.
    pub driver_libraries: Vec<String>,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            driver_libraries: ffi::DRIVER_NAMES.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// The CUDA driver, loaded and initialised, with at least one device.
///
/// ```
/// match gpucomm_cuda::Gpu::probe() {
///     Ok(gpu) => println!("{} device(s), driver {:?}", gpu.device_count(), gpu.driver_version()),
///     Err(e) => println!("{e}"), // "no GPU: libcuda.so.1: cannot open shared object file..."
/// }
/// ```
#[derive(Clone)]
pub struct Gpu {
    drv: Arc<Driver>,
    count: u32,
    version: i32,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("library", &self.drv.library)
            .field("devices", &self.count)
            .field("driver_version", &self.version)
            .finish()
    }
}

fn check(drv: &Driver, call: &'static str, device: i32, code: ffi::CuResult) -> Result<(), Error> {
    if code == ffi::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver {
            call,
            device,
            code,
            message: drv.describe(code),
        })
    }
}

static DEFAULT_GPU: OnceLock<Result<Gpu, String>> = OnceLock::new();

impl Gpu {
    /// Loads the driver from the default library names, once per process.
    /// Fails with [`Error::NoGpu`] (never panics) when there is no driver,
    /// no device, or the driver cannot initialise.
    pub fn probe() -> Result<Gpu, Error> {
        DEFAULT_GPU
            .get_or_init(|| Gpu::probe_with(&ProbeConfig::default()).map_err(|e| e.to_string()))
            .clone()
            .map_err(|reason| Error::NoGpu {
                reason: reason
                    .strip_prefix("no GPU: ")
                    .unwrap_or(&reason)
                    .to_string(),
            })
    }

    /// Loads the driver from the libraries named in `cfg` (not cached).
    /// Every failure is [`Error::NoGpu`] with the reason, as for
    /// [`Gpu::probe`]: no library, a library without an entry point we need,
    /// `cuInit`, `cuDeviceGetCount` or `cuDriverGetVersion` failing, or no
    /// device.
    pub fn probe_with(cfg: &ProbeConfig) -> Result<Gpu, Error> {
        let names: Vec<&str> = cfg.driver_libraries.iter().map(String::as_str).collect();
        let drv = ffi::load_driver(&names).map_err(|e| Error::NoGpu {
            reason: format!("cannot load the CUDA driver ({e})"),
        })?;
        // SAFETY: cuInit(0) has no preconditions.
        let r = unsafe { (drv.init)(0) };
        if r != ffi::CUDA_SUCCESS {
            return Err(Error::NoGpu {
                reason: format!("cuInit failed: {}", drv.describe(r)),
            });
        }
        let mut n: c_int = 0;
        let mut version: c_int = 0;
        // A driver that initialised but cannot count its devices or say its
        // version is no usable GPU either (`probe` said so; this said
        // `Error::Driver`, which callers took for a broken machine).
        let usable = |call: &str, r: ffi::CuResult| {
            if r == ffi::CUDA_SUCCESS {
                Ok(())
            } else {
                Err(Error::NoGpu {
                    reason: format!("{call} failed: {}", drv.describe(r)),
                })
            }
        };
        // SAFETY: out-pointers to live locals.
        usable("cuDeviceGetCount", unsafe {
            (drv.device_get_count)(&mut n)
        })?;
        // SAFETY: as above.
        usable("cuDriverGetVersion", unsafe {
            (drv.driver_get_version)(&mut version)
        })?;
        if n <= 0 {
            return Err(Error::NoGpu {
                reason: "the CUDA driver is loaded but reports no device".into(),
            });
        }
        Ok(Gpu {
            drv: Arc::new(drv),
            count: n as u32,
            version,
        })
    }

    /// Number of devices the driver sees.
    pub fn device_count(&self) -> u32 {
        self.count
    }

    /// The driver's CUDA version as (major, minor), e.g. (12, 4).
    pub fn driver_version(&self) -> (u32, u32) {
        (
            (self.version / 1000) as u32,
            ((self.version % 1000) / 10) as u32,
        )
    }

    /// The file the driver was loaded from.
    pub fn library(&self) -> &str {
        &self.drv.library
    }

    /// Opens device `ordinal` (retains its primary context).
    pub fn device(&self, ordinal: u32) -> Result<Device, Error> {
        if ordinal >= self.count {
            return Err(Error::InvalidArgument(format!(
                "device {ordinal} does not exist ({} device(s))",
                self.count
            )));
        }
        let drv = self.drv.clone();
        let o = ordinal as i32;
        let mut dev: ffi::CuDevice = 0;
        let mut ctx: CuHandle = std::ptr::null_mut();
        // SAFETY: out-pointers to live locals; `o` is a valid ordinal.
        unsafe {
            check(&drv, "cuDeviceGet", o, (drv.device_get)(&mut dev, o))?;
            check(
                &drv,
                "cuDevicePrimaryCtxRetain",
                o,
                (drv.primary_ctx_retain)(&mut ctx, dev),
            )?;
        }
        // Every `?` below releases the context again; on success the
        // `Device` (its `DevInner`) takes the reference over.
        let retained = Retained { drv: &drv, dev };
        let attr = |a: c_int| -> Result<i32, Error> {
            let mut v: c_int = 0;
            // SAFETY: out-pointer to a live local; `dev` is valid.
            check(&drv, "cuDeviceGetAttribute", o, unsafe {
                (drv.device_get_attribute)(&mut v, a, dev)
            })?;
            Ok(v)
        };
        let mut name = [0 as c_char; 256];
        let mut bus = [0 as c_char; 64];
        let mut total: usize = 0;
        // SAFETY: buffers of the length passed; the driver NUL-terminates.
        unsafe {
            check(
                &drv,
                "cuDeviceGetName",
                o,
                (drv.device_get_name)(name.as_mut_ptr(), 255, dev),
            )?;
            check(
                &drv,
                "cuDeviceGetPCIBusId",
                o,
                (drv.device_get_pci_bus_id)(bus.as_mut_ptr(), 63, dev),
            )?;
            check(
                &drv,
                "cuDeviceTotalMem",
                o,
                (drv.device_total_mem)(&mut total, dev),
            )?;
        }
        let info = DeviceInfo {
            ordinal,
            // SAFETY: NUL-terminated by the driver (and by our zeroed last byte).
            name: unsafe { CStr::from_ptr(name.as_ptr()) }
                .to_string_lossy()
                .into_owned(),
            // SAFETY: as above.
            pci_bus_id: unsafe { CStr::from_ptr(bus.as_ptr()) }
                .to_string_lossy()
                .into_owned(),
            total_memory: total as u64,
            compute_capability: (
                attr(ffi::ATTR_CC_MAJOR)? as u32,
                attr(ffi::ATTR_CC_MINOR)? as u32,
            ),
            multiprocessors: attr(ffi::ATTR_SM_COUNT)? as u32,
            copy_engines: attr(ffi::ATTR_ASYNC_ENGINES)? as u32,
            unified_addressing: attr(ffi::ATTR_UNIFIED_ADDRESSING)? != 0,
        };
        // DevInner's Drop releases the context from here on.
        std::mem::forget(retained);
        Ok(Device {
            inner: Arc::new(DevInner {
                drv,
                dev,
                ctx,
                info,
                kernels: Mutex::new(None),
            }),
        })
    }

    /// Every device.
    pub fn devices(&self) -> Result<Vec<Device>, Error> {
        (0..self.count).map(|i| self.device(i)).collect()
    }
}

/// A primary context retained by [`Gpu::device`] and not yet owned by a
/// [`Device`]: released if `Gpu::device` fails after the retain.
struct Retained<'a> {
    drv: &'a Driver,
    dev: ffi::CuDevice,
}

impl Drop for Retained<'_> {
    fn drop(&mut self) {
        // SAFETY: balances the cuDevicePrimaryCtxRetain of `Gpu::device`,
        // which made nothing that uses the context before failing.
        unsafe {
            (self.drv.primary_ctx_release)(self.dev);
        }
    }
}

/// What the driver says about a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// CUDA ordinal.
    pub ordinal: u32,
    /// Marketing name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// PCI address (`0000:1B:00.0`).
    pub pci_bus_id: String,
    /// Bytes of device memory.
    pub total_memory: u64,
    /// (major, minor), e.g. (9, 0).
    pub compute_capability: (u32, u32),
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Asynchronous copy engines (`CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT`).
    pub copy_engines: u32,
    /// Whether host and device share one address space (UVA).
    pub unified_addressing: bool,
}

struct DevInner {
    drv: Arc<Driver>,
    dev: ffi::CuDevice,
    ctx: CuHandle,
    info: DeviceInfo,
    kernels: Mutex<Option<Arc<crate::launch::Kernels>>>,
}

// SAFETY: the context handle is only passed to the (thread-safe) driver.
unsafe impl Send for DevInner {}
// SAFETY: as above.
unsafe impl Sync for DevInner {}

impl Drop for DevInner {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `Gpu::device`; every object using the
        // context holds a `Device`, so none is left.
        unsafe {
            (self.drv.primary_ctx_release)(self.dev);
        }
    }
}

/// One GPU, with its primary context. Cheap to clone.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DevInner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("info", &self.inner.info)
            .finish()
    }
}

impl Device {
    /// Facts about the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// CUDA ordinal.
    pub fn ordinal(&self) -> u32 {
        self.inner.info.ordinal
    }

    pub(crate) fn drv(&self) -> &Driver {
        &self.inner.drv
    }

    pub(crate) fn check(&self, call: &'static str, code: ffi::CuResult) -> Result<(), Error> {
        check(&self.inner.drv, call, self.ordinal() as i32, code)
    }

    /// Makes this device's context current on the calling thread.
    pub(crate) fn bind(&self) -> Result<(), Error> {
        // SAFETY: `ctx` is a retained primary context.
        let r = unsafe { (self.inner.drv.ctx_set_current)(self.inner.ctx) };
        self.check("cuCtxSetCurrent", r)
    }

    pub(crate) fn downgrade(&self) -> WeakDevice {
        WeakDevice(Arc::downgrade(&self.inner))
    }

    pub(crate) fn ctx(&self) -> CuHandle {
        self.inner.ctx
    }

    pub(crate) fn kernel_slot(&self) -> &Mutex<Option<Arc<crate::launch::Kernels>>> {
        &self.inner.kernels
    }

    /// Waits until all work on the device is done (`cuCtxSynchronize`).
    pub fn synchronize(&self) -> Result<(), Error> {
        self.bind()?;
        // SAFETY: no arguments; a context is current.
        let r = unsafe { (self.drv().ctx_synchronize)() };
        self.check("cuCtxSynchronize", r)
    }

    /// Allocates `bytes` of device memory (`cuMemAlloc`), zero-filled.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, Error> {
        let mut ptr: CuDevicePtr = 0;
        if bytes > 0 {
            self.bind()?;
            // SAFETY: out-pointer to a live local; a context is current.
            let r = unsafe { (self.drv().mem_alloc)(&mut ptr, bytes) };
            self.check("cuMemAlloc", r)?;
        }
        let b = DeviceBuffer {
            dev: self.clone(),
            ptr,
            len: bytes,
        };
        if bytes > 0 {
            let s = self.stream()?;
            s.memset(&b, 0)?;
            s.synchronize()?;
        }
        Ok(b)
    }

    /// Allocates `bytes` of page-locked host memory (`cuMemHostAlloc`,
    /// portable to every context), zero-filled.
    pub fn alloc_pinned(&self, bytes: usize) -> Result<PinnedBuffer, Error> {
        let mut p: *mut c_void = std::ptr::null_mut();
        if bytes > 0 {
            self.bind()?;
            // SAFETY: out-pointer to a live local.
            let r = unsafe { (self.drv().mem_host_alloc)(&mut p, bytes, ffi::HOST_PORTABLE) };
            self.check("cuMemHostAlloc", r)?;
            // SAFETY: the driver returned `bytes` writable bytes at `p`.
            unsafe { std::ptr::write_bytes(p as *mut u8, 0, bytes) };
        }
        Ok(PinnedBuffer {
            dev: self.clone(),
            ptr: p as *mut u8,
            len: bytes,
        })
    }

    /// Page-locks existing host memory (`cuMemHostRegister`, portable) for
    /// as long as the returned guard lives: DMA reads it directly, without
    /// the driver's staging copy. Used for shared-memory segments.
    pub fn register<'a>(&self, mem: &'a mut [u8]) -> Result<RegisteredHost<'a>, Error> {
        if !mem.is_empty() {
            self.bind()?;
            // SAFETY: `mem` is valid for its length and stays borrowed (so
            // neither freed nor moved) until the guard unregisters it.
            let r = unsafe {
                (self.drv().mem_host_register)(
                    mem.as_mut_ptr() as *mut c_void,
                    mem.len(),
                    ffi::HOST_PORTABLE,
                )
            };
            self.check("cuMemHostRegister", r)?;
        }
        Ok(RegisteredHost {
            dev: self.clone(),
            mem,
        })
    }

    /// Page-locks host memory that is not a Rust borrow (a shared-memory
    /// mapping owned elsewhere, e.g. the runtime's segments) until the
    /// returned guard is dropped.
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay mapped until the guard is dropped.
    pub unsafe fn register_raw(&self, ptr: *mut u8, len: usize) -> Result<RegisteredRegion, Error> {
        if len > 0 {
            self.bind()?;
            // SAFETY: the caller keeps the range mapped for the guard's life.
            let r = unsafe {
                (self.drv().mem_host_register)(ptr as *mut c_void, len, ffi::HOST_PORTABLE)
            };
            self.check("cuMemHostRegister", r)?;
        }
        Ok(RegisteredRegion {
            dev: self.clone(),
            ptr,
            len,
        })
    }

    /// A new non-blocking stream.
    pub fn stream(&self) -> Result<Stream, Error> {
        self.bind()?;
        let mut s: CuHandle = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local; a context is current.
        let r = unsafe { (self.drv().stream_create)(&mut s, ffi::STREAM_NON_BLOCKING) };
        self.check("cuStreamCreate", r)?;
        Ok(Stream {
            dev: self.clone(),
            raw: s,
        })
    }

    /// A new event. `timing`: usable with [`Event::elapsed_ms`];
    /// `interprocess`: shareable with [`Event::ipc_handle`] (cannot time).
    pub fn event(&self, timing: bool, interprocess: bool) -> Result<Event, Error> {
        if timing && interprocess {
            return Err(Error::InvalidArgument(
                "an interprocess event cannot record timing (CUDA restriction)".into(),
            ));
        }
        let mut flags = 0;
        if !timing {
            flags |= ffi::EVENT_DISABLE_TIMING;
        }
        if interprocess {
            flags |= ffi::EVENT_INTERPROCESS;
        }
        self.bind()?;
        let mut e: CuHandle = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local; a context is current.
        let r = unsafe { (self.drv().event_create)(&mut e, flags) };
        self.check("cuEventCreate", r)?;
        Ok(Event {
            dev: self.clone(),
            raw: e,
            owned: true,
        })
    }

    /// Whether this device can read and write `peer`'s memory directly.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool, Error> {
        if peer.inner.dev == self.inner.dev {
            return Ok(true);
        }
        let mut v: c_int = 0;
        // SAFETY: out-pointer to a live local; both devices are valid.
        let r =
            unsafe { (self.drv().device_can_access_peer)(&mut v, self.inner.dev, peer.inner.dev) };
        self.check("cuDeviceCanAccessPeer", r)?;
        Ok(v != 0)
    }

    /// Lets kernels and copies of this device's context reach `peer`'s
    /// memory (`cuCtxEnablePeerAccess`); enabling twice is not an error.
    pub fn enable_peer_access(&self, peer: &Device) -> Result<(), Error> {
        if peer.inner.dev == self.inner.dev {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `peer.ctx` is a retained context; flags must be 0.
        let r = unsafe { (self.drv().ctx_enable_peer_access)(peer.inner.ctx, 0) };
        if r == ffi::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        self.check("cuCtxEnablePeerAccess", r)
    }

    /// Maps device memory another process exported with
    /// [`DeviceBuffer::ipc_handle`] (`cuIpcOpenMemHandle`, peer access
    /// enabled lazily). `len` is what the exporter announced: checked
    /// against the allocation the driver mapped (`cuMemGetAddressRange`),
    /// and a longer one is refused ([`Error::Malformed`]) and the mapping
    /// closed. A handle from this same process is refused by CUDA.
    pub fn open_ipc_memory(&self, handle: &IpcMemHandle, len: usize) -> Result<IpcBuffer, Error> {
        self.bind()?;
        let mut p: CuDevicePtr = 0;
        // SAFETY: out-pointer to a live local; the handle is passed by value.
        let r = unsafe {
            (self.drv().ipc_open_mem_handle)(&mut p, handle.raw(), ffi::IPC_LAZY_ENABLE_PEER_ACCESS)
        };
        self.check("cuIpcOpenMemHandle", r)?;
        // From here on an error drops (closes) the mapping.
        let b = IpcBuffer {
            dev: self.clone(),
            ptr: p,
            len,
        };
        let (mut base, mut size): (CuDevicePtr, usize) = (0, 0);
        // SAFETY: out-pointers to live locals; `p` is a live mapping of
        // this (current) context.
        let r = unsafe { (self.drv().mem_get_address_range)(&mut base, &mut size, p) };
        self.check("cuMemGetAddressRange", r)?;
        fits_allocation(p, len, base, size)?;
        Ok(b)
    }

    /// Opens an event another process exported with [`Event::ipc_handle`].
    pub fn open_ipc_event(&self, handle: &IpcEventHandle) -> Result<Event, Error> {
        self.bind()?;
        let mut e: CuHandle = std::ptr::null_mut();
        // SAFETY: out-pointer to a live local; the handle is passed by value.
        let r = unsafe { (self.drv().ipc_open_event_handle)(&mut e, handle.raw()) };
        self.check("cuIpcOpenEventHandle", r)?;
        Ok(Event {
            dev: self.clone(),
            raw: e,
            owned: true,
        })
    }
}

/// A non-owning reference to a [`Device`].
pub(crate) struct WeakDevice(std::sync::Weak<DevInner>);

impl WeakDevice {
    pub(crate) fn upgrade(&self) -> Option<Device> {
        self.0.upgrade().map(|inner| Device { inner })
    }

    /// Whether `d` is this device (the same opened `Device`).
    pub(crate) fn is(&self, d: &Device) -> bool {
        std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&d.inner))
    }
}

/// Device memory: something a copy or kernel can address on a device.
/// Implemented by [`DeviceBuffer`] (ours), [`IpcBuffer`] (a peer's) and
/// [`DeviceSlice`] (a view of either).
///
/// # Safety
///
/// Every copy, memset and kernel launch of this crate is a safe function
/// that trusts these methods: the driver writes `len()` bytes at
/// `device_ptr()`. An implementation guarantees, for as long as the value
/// is borrowed, that `device_ptr()..device_ptr() + len()` is memory that
/// the context of `device()` can read and write (an allocation of it, a
/// peer allocation mapped into it through IPC, or page-locked host memory
/// registered with it), that the range stays allocated and is not freed
/// while the work queued on it may run (device memory: `cuMemFree` waits
/// for it), and that the three methods return the same values every time.
///
/// A safe implementation does not compile:
///
/// ```compile_fail,E0200
/// use gpucomm_cuda::{Device, DeviceMemory};
/// struct Lie<'a> { dev: &'a Device, ptr: u64, len: usize }
/// impl DeviceMemory for Lie<'_> {
///     fn device_ptr(&self) -> u64 { self.ptr }
///     fn len(&self) -> usize { self.len }
///     fn device(&self) -> &Device { self.dev }
/// }
/// ```
pub unsafe trait DeviceMemory {
    /// The device address.
    fn device_ptr(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the length is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The device whose context owns the mapping.
    fn device(&self) -> &Device;
    /// A view of `range` of this memory (bounds checked), usable wherever
    /// device memory is: copies and kernels on a chunk of a buffer.
    fn slice(&self, range: std::ops::Range<usize>) -> Result<DeviceSlice<'_>, Error> {
        let len = range.end.checked_sub(range.start).ok_or_else(|| {
            Error::InvalidArgument(format!("slice {}..{} is reversed", range.start, range.end))
        })?;
        self::range("slice", range.start, len, self.len())?;
        Ok(DeviceSlice {
            dev: self.device(),
            ptr: self.device_ptr() + range.start as u64,
            len,
        })
    }
}

/// A range of device memory borrowed from a [`DeviceBuffer`] or [`IpcBuffer`].
#[derive(Clone, Copy)]
pub struct DeviceSlice<'a> {
    dev: &'a Device,
    ptr: CuDevicePtr,
    len: usize,
}

// SAFETY: made only by `DeviceMemory::slice`, a bounds-checked range of
// memory that satisfies the contract, borrowed for `'a`.
unsafe impl DeviceMemory for DeviceSlice<'_> {
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

/// Checks that `len` bytes at `ptr` lie inside the allocation
/// `base..base + size` the driver reports for it: a peer's descriptor may
/// announce no more than the memory its IPC handle maps.
pub(crate) fn fits_allocation(ptr: u64, len: usize, base: u64, size: usize) -> Result<(), Error> {
    let off = ptr.checked_sub(base);
    let ok = off
        .and_then(|o| o.checked_add(len as u64))
        .is_some_and(|end| end <= size as u64);
    if ok {
        return Ok(());
    }
    Err(Error::Malformed {
        what: "IPC buffer descriptor",
        detail: format!(
            "it announces {len} bytes at {ptr:#x}, the mapped allocation is {size} bytes at {base:#x}"
        ),
    })
}

/// Checks `[off, off + len)` lies within a buffer of `total` bytes.
pub(crate) fn range(what: &str, off: usize, len: usize, total: usize) -> Result<(), Error> {
    match off.checked_add(len) {
        Some(end) if end <= total => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "{what}: bytes {off}..{off}+{len} are outside a buffer of {total} bytes"
        ))),
    }
}

/// Memory on a device (`cuMemAlloc`), freed on drop.
///
/// ```no_run
/// # fn main() -> Result<(), gpucomm_cuda::Error> {
/// let dev = gpucomm_cuda::Gpu::probe()?.device(0)?;
/// let buf = dev.alloc(1 << 20)?;
/// let s = dev.stream()?;
/// s.copy_from_host(&buf, 0, &vec![7u8; 1 << 20])?;
/// let mut back = vec![0u8; 1 << 20];
/// s.copy_to_host(&mut back, &buf, 0)?;
/// assert!(back.iter().all(|&b| b == 7));
/// # Ok(()) }
/// ```
pub struct DeviceBuffer {
    dev: Device,
    ptr: CuDevicePtr,
    len: usize,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer({} bytes on device {})",
            self.len,
            self.dev.ordinal()
        )
    }
}

// SAFETY: our cuMemAlloc allocation of `len` bytes in `dev`'s context,
// freed only on drop (cuMemFree waits for queued work); fields never change.
unsafe impl DeviceMemory for DeviceBuffer {
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn device(&self) -> &Device {
        &self.dev
    }
}

impl DeviceBuffer {
    /// The CUDA IPC handle another process opens with
    /// [`Device::open_ipc_memory`]. Valid while this buffer lives.
    pub fn ipc_handle(&self) -> Result<IpcMemHandle, Error> {
        if self.len == 0 {
            return Err(Error::InvalidArgument(
                "an empty buffer has no IPC handle".into(),
            ));
        }
        self.dev.bind()?;
        let mut h = ffi::CuIpcHandle { reserved: [0; 64] };
        // SAFETY: out-pointer to a live local; `ptr` is our allocation.
        let r = unsafe { (self.dev.drv().ipc_get_mem_handle)(&mut h, self.ptr) };
        self.dev.check("cuIpcGetMemHandle", r)?;
        Ok(IpcMemHandle::from_raw(h))
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.len > 0 && self.dev.bind().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc and is freed once. cuMemFree
            // waits for work still using the allocation.
            unsafe {
                (self.dev.drv().mem_free)(self.ptr);
            }
        }
    }
}

/// A peer process's device memory mapped through CUDA IPC; unmapped on drop.
pub struct IpcBuffer {
    dev: Device,
    ptr: CuDevicePtr,
    len: usize,
}

// SAFETY: a mapping in `dev`'s context from cuIpcOpenMemHandle, closed only
// on drop; `len` was checked against the mapped allocation
// (`Device::open_ipc_memory`); fields never change.
unsafe impl DeviceMemory for IpcBuffer {
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn device(&self) -> &Device {
        &self.dev
    }
}

impl Drop for IpcBuffer {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: `ptr` came from cuIpcOpenMemHandle and is closed once.
            unsafe {
                (self.dev.drv().ipc_close_mem_handle)(self.ptr);
            }
        }
    }
}

/// Page-locked host memory from `cuMemHostAlloc`; reads and writes like a
/// byte slice; freed on drop.
pub struct PinnedBuffer {
    dev: Device,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain host memory owned by this value.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared access only reads through `&[u8]`.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// The start of the memory as the driver returned it: writes through it
    /// are allowed (a pointer taken from the `&[u8]` of `Deref` would only
    /// permit reads).
    pub(crate) fn base_mut(&mut self) -> *mut u8 {
        self.ptr
    }
}

impl Deref for PinnedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `len` initialised bytes (zero-filled at allocation) owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for PinnedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if self.len > 0 && self.dev.bind().is_ok() {
            // SAFETY: `ptr` came from cuMemHostAlloc and is freed once.
            unsafe {
                (self.dev.drv().mem_free_host)(self.ptr as *mut c_void);
            }
        }
    }
}

/// Host memory page-locked by [`Device::register`] until dropped.
pub struct RegisteredHost<'a> {
    dev: Device,
    mem: &'a mut [u8],
}

impl Deref for RegisteredHost<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.mem
    }
}

impl DerefMut for RegisteredHost<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.mem
    }
}

impl Drop for RegisteredHost<'_> {
    fn drop(&mut self) {
        if !self.mem.is_empty() && self.dev.bind().is_ok() {
            // SAFETY: the range was registered by `Device::register`.
            unsafe {
                (self.dev.drv().mem_host_unregister)(self.mem.as_mut_ptr() as *mut c_void);
            }
        }
    }
}

/// Host memory page-locked by [`Device::register_raw`] until dropped.
pub struct RegisteredRegion {
    dev: Device,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the guard only unregisters the range; it never touches the bytes.
unsafe impl Send for RegisteredRegion {}
// SAFETY: as above.
unsafe impl Sync for RegisteredRegion {}

impl RegisteredRegion {
    /// Start of the registered range.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Length of the registered range.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for RegisteredRegion {
    fn drop(&mut self) {
        if self.len > 0 && self.dev.bind().is_ok() {
            // SAFETY: the range was registered by `Device::register_raw`.
            unsafe {
                (self.dev.drv().mem_host_unregister)(self.ptr as *mut c_void);
            }
        }
    }
}

/// A CUDA stream (non-blocking). Work on one stream runs in issue order.
pub struct Stream {
    dev: Device,
    raw: CuHandle,
}

// SAFETY: the handle is only passed to the thread-safe driver.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: our stream, destroyed once; pending work still completes.
            unsafe {
                (self.dev.drv().stream_destroy)(self.raw);
            }
        }
    }
}

impl Stream {
    /// The stream's device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    pub(crate) fn raw(&self) -> CuHandle {
        self.raw
    }

    fn same_device(&self, what: &str, d: &Device) -> Result<(), Error> {
        if Arc::ptr_eq(&d.inner, &self.dev.inner) || d.inner.dev == self.dev.inner.dev {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{what} is on device {}, the stream on device {}",
                d.ordinal(),
                self.dev.ordinal()
            )))
        }
    }

    /// Blocks until everything issued on the stream is done.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.dev.bind()?;
        // SAFETY: our stream.
        let r = unsafe { (self.dev.drv().stream_synchronize)(self.raw) };
        self.dev.check("cuStreamSynchronize", r)
    }

    /// Makes later work on this stream wait for `event` (which may belong to
    /// another stream, device or, through IPC, process).
    pub fn wait_event(&self, event: &Event) -> Result<(), Error> {
        self.dev.bind()?;
        // SAFETY: both handles are live.
        let r = unsafe { (self.dev.drv().stream_wait_event)(self.raw, event.raw, 0) };
        self.dev.check("cuStreamWaitEvent", r)
    }

    /// Fills device memory with `byte`, in stream order.
    pub fn memset(&self, dst: &impl DeviceMemory, byte: u8) -> Result<(), Error> {
        self.same_device("memset destination", dst.device())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.dev.bind()?;
        // SAFETY: the whole allocation, which outlives the call (device
        // memory is freed only after pending work, see DeviceBuffer::drop).
        let r = unsafe {
            (self.dev.drv().memset_d8_async)(dst.device_ptr(), byte, dst.len(), self.raw)
        };
        self.dev.check("cuMemsetD8Async", r)
    }

    /// Starts copying `src` (host memory) into `dst[dst_offset..]`.
    ///
    /// # Safety
    /// `src` must stay allocated and unmodified until the stream has passed
    /// this copy (synchronize the stream or wait on a later event). With
    /// pageable memory the driver stages the copy and the call may return
    /// only when `src` has been read.
    pub unsafe fn copy_from_host_async(
        &self,
        dst: &impl DeviceMemory,
        dst_offset: usize,
        src: &[u8],
    ) -> Result<(), Error> {
        self.same_device("copy destination", dst.device())?;
        range("host-to-device copy", dst_offset, src.len(), dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.dev.bind()?;
        // SAFETY: bounds checked above; the caller keeps `src` alive.
        let r = unsafe {
            (self.dev.drv().memcpy_htod_async)(
                dst.device_ptr() + dst_offset as u64,
                src.as_ptr() as *const c_void,
                src.len(),
                self.raw,
            )
        };
        self.dev.check("cuMemcpyHtoDAsync", r)
    }

    /// Starts copying `src[src_offset..src_offset + dst.len()]` into host memory `dst`.
    ///
    /// # Safety
    /// `dst` must stay allocated, and be neither read nor written, until the
    /// stream has passed this copy.
    pub unsafe fn copy_to_host_async(
        &self,
        dst: &mut [u8],
        src: &impl DeviceMemory,
        src_offset: usize,
    ) -> Result<(), Error> {
        self.same_device("copy source", src.device())?;
        range("device-to-host copy", src_offset, dst.len(), src.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.dev.bind()?;
        // SAFETY: bounds checked above; the caller keeps `dst` alive and untouched.
        let r = unsafe {
            (self.dev.drv().memcpy_dtoh_async)(
                dst.as_mut_ptr() as *mut c_void,
                src.device_ptr() + src_offset as u64,
                dst.len(),
                self.raw,
            )
        };
        self.dev.check("cuMemcpyDtoHAsync", r)
    }

    /// Copies host memory into device memory and waits for it.
    pub fn copy_from_host(
        &self,
        dst: &impl DeviceMemory,
        dst_offset: usize,
        src: &[u8],
    ) -> Result<(), Error> {
        // SAFETY: we synchronize before `src`'s borrow ends.
        unsafe { self.copy_from_host_async(dst, dst_offset, src)? };
        self.synchronize()
    }

    /// Copies device memory into host memory and waits for it.
    pub fn copy_to_host(
        &self,
        dst: &mut [u8],
        src: &impl DeviceMemory,
        src_offset: usize,
    ) -> Result<(), Error> {
        // SAFETY: we synchronize before `dst`'s borrow ends.
        unsafe { self.copy_to_host_async(dst, src, src_offset)? };
        self.synchronize()
    }

    /// Copies `len` bytes between two buffers of the stream's device, on a
    /// copy engine, in stream order (`cuMemcpyDtoDAsync`). With peer access
    /// enabled, either side may be a peer device's memory (UVA).
    pub fn copy_device(
        &self,
        dst: &impl DeviceMemory,
        dst_offset: usize,
        src: &impl DeviceMemory,
        src_offset: usize,
        len: usize,
    ) -> Result<(), Error> {
        range("device copy destination", dst_offset, len, dst.len())?;
        range("device copy source", src_offset, len, src.len())?;
        if len == 0 {
            return Ok(());
        }
        self.dev.bind()?;
        // SAFETY: bounds checked; device memory outlives pending work.
        let r = unsafe {
            (self.dev.drv().memcpy_dtod_async)(
                dst.device_ptr() + dst_offset as u64,
                src.device_ptr() + src_offset as u64,
                len,
                self.raw,
            )
        };
        self.dev.check("cuMemcpyDtoDAsync", r)
    }

    /// Copies between two devices' memories (`cuMemcpyPeerAsync`): direct
    /// over NVLink/PCIe when peer access is possible, staged by the driver
    /// otherwise.
    pub fn copy_peer(
        &self,
        dst: &impl DeviceMemory,
        dst_offset: usize,
        src: &impl DeviceMemory,
        src_offset: usize,
        len: usize,
    ) -> Result<(), Error> {
        range("peer copy destination", dst_offset, len, dst.len())?;
        range("peer copy source", src_offset, len, src.len())?;
        if len == 0 {
            return Ok(());
        }
        self.dev.bind()?;
        // SAFETY: bounds checked; both contexts are retained by the buffers.
        let r = unsafe {
            (self.dev.drv().memcpy_peer_async)(
                dst.device_ptr() + dst_offset as u64,
                dst.device().ctx(),
                src.device_ptr() + src_offset as u64,
                src.device().ctx(),
                len,
                self.raw,
            )
        };
        self.dev.check("cuMemcpyPeerAsync", r)
    }

    /// Records `event` at the current end of the stream.
    pub fn record(&self, event: &Event) -> Result<(), Error> {
        event.record(self)
    }
}

/// A CUDA event: a point in a stream that the host or other streams wait on.
///
/// ```no_run
/// # fn main() -> Result<(), gpucomm_cuda::Error> {
/// let dev = gpucomm_cuda::Gpu::probe()?.device(0)?;
/// let (s, done) = (dev.stream()?, dev.event(false, false)?);
/// let buf = dev.alloc(4096)?;
/// s.memset(&buf, 1)?;
/// done.record(&s)?;
/// done.wait()?; // the memset has finished
/// # Ok(()) }
/// ```
pub struct Event {
    dev: Device,
    raw: CuHandle,
    owned: bool,
}

// SAFETY: the handle is only passed to the thread-safe driver.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Drop for Event {
    fn drop(&mut self) {
        if self.owned && self.dev.bind().is_ok() {
            // SAFETY: our event, destroyed once.
            unsafe {
                (self.dev.drv().event_destroy)(self.raw);
            }
        }
    }
}

impl Event {
    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<(), Error> {
        self.dev.bind()?;
        // SAFETY: both handles are live.
        let r = unsafe { (self.dev.drv().event_record)(self.raw, stream.raw) };
        self.dev.check("cuEventRecord", r)
    }

    /// Blocks until the work before the last record is done.
    pub fn wait(&self) -> Result<(), Error> {
        self.dev.bind()?;
        // SAFETY: our event.
        let r = unsafe { (self.dev.drv().event_synchronize)(self.raw) };
        self.dev.check("cuEventSynchronize", r)
    }

    /// Whether the work before the last record is done (does not block).
    pub fn is_done(&self) -> Result<bool, Error> {
        self.dev.bind()?;
        // SAFETY: our event.
        let r = unsafe { (self.dev.drv().event_query)(self.raw) };
        if r == ffi::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        self.dev.check("cuEventQuery", r)?;
        Ok(true)
    }

    /// Milliseconds between `start` and this event (both recorded, both
    /// created with timing).
    pub fn elapsed_ms(&self, start: &Event) -> Result<f32, Error> {
        self.dev.bind()?;
        let mut ms = 0f32;
        // SAFETY: out-pointer to a live local; both events are live.
        let r = unsafe { (self.dev.drv().event_elapsed_time)(&mut ms, start.raw, self.raw) };
        self.dev.check("cuEventElapsedTime", r)?;
        Ok(ms)
    }

    /// The handle another process opens with [`Device::open_ipc_event`]
    /// (the event must have been created `interprocess`).
    pub fn ipc_handle(&self) -> Result<IpcEventHandle, Error> {
        self.dev.bind()?;
        let mut h = ffi::CuIpcHandle { reserved: [0; 64] };
        // SAFETY: out-pointer to a live local; our event.
        let r = unsafe { (self.dev.drv().ipc_get_event_handle)(&mut h, self.raw) };
        self.dev.check("cuIpcGetEventHandle", r)?;
        Ok(IpcEventHandle::from_raw(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's descriptor announcing more than its allocation (a length
    /// CUDA IPC mapped for it) is refused: it was trusted, and copies ran
    /// past the mapping.
    #[test]
    fn an_ipc_length_beyond_the_mapped_allocation_is_refused() {
        let base = 0x7f00_0000_0000u64;
        assert!(fits_allocation(base, 64, base, 64).is_ok());
        assert!(fits_allocation(base, 0, base, 64).is_ok());
        assert!(fits_allocation(base + 16, 48, base, 64).is_ok());
        let e = fits_allocation(base, 1 << 40, base, 64).unwrap_err();
        assert!(matches!(e, Error::Malformed { .. }), "{e}");
        assert!(e.to_string().contains("1099511627776 bytes"), "{e}");
        assert!(fits_allocation(base, 65, base, 64).is_err());
        assert!(fits_allocation(base + 16, 49, base, 64).is_err());
        // Below the allocation, and lengths that wrap the address space.
        assert!(fits_allocation(base - 1, 1, base, 64).is_err());
        assert!(fits_allocation(base, usize::MAX, base, 64).is_err());
    }
}
