//! [`FakeDevice`]: a [`DeviceBackend`] in host memory, to test everything
//! above the device without a GPU.

use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::opened::{Close, Opened};
use super::{DeviceBackend, DevicePtr, EventId, StreamId};
use crate::buffer::Segment;
use crate::{DataType, Error, ReduceOp};

type Op = Box<dyn FnOnce() + Send>;

struct FakeStream {
    device: u32,
    queue: Mutex<VecDeque<Op>>,
    /// Operations issued / executed so far.
    issued: AtomicU64,
    done: AtomicU64,
}

impl FakeStream {
    fn push(&self, op: Op) {
        let mut q = crate::lock(&self.queue);
        q.push_back(op);
        self.issued.fetch_add(1, Ordering::AcqRel);
    }
    /// Runs every queued operation, in order.
    fn flush(&self) {
        let mut q = crate::lock(&self.queue);
        while let Some(op) = q.pop_front() {
            op();
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }
}

struct FakeEvent {
    stream: Arc<FakeStream>,
    target: u64,
}

/// A peer's whole allocation mapped here, and which file it is (device,
/// inode): the same allocation opened again reuses it, as CUDA does.
#[derive(Clone)]
struct PeerMapping {
    seg: Arc<Segment>,
    file: (u64, u64),
}

#[derive(Default)]
struct State {
    /// Our allocations: base → (device, segment).
    allocs: HashMap<u64, (u32, Arc<Segment>)>,
    /// Peers' allocations opened through "IPC", counted as CUDA counts
    /// them: base → mapping.
    opened: Opened<PeerMapping>,
    streams: HashMap<u64, Arc<FakeStream>>,
    events: HashMap<u64, FakeEvent>,
    registered: HashMap<usize, usize>,
    next: u64,
}

/// Counters of what a [`FakeDevice`] was asked to do (tests assert which
/// path a call took).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FakeStats {
    /// Allocations.
    pub allocs: u64,
    /// Host → device copies.
    pub h2d: u64,
    /// Device → host copies.
    pub d2h: u64,
    /// Device → device copies.
    pub d2d: u64,
    /// Reduction kernel launches.
    pub reduce: u64,
    /// Divide kernel launches.
    pub divide: u64,
    /// IPC exports.
    pub ipc_export: u64,
    /// IPC opens.
    pub ipc_open: u64,
    /// IPC closes.
    pub ipc_close: u64,
    /// Host registrations.
    pub register_host: u64,
}

#[derive(Default)]
struct Counters {
    allocs: AtomicU64,
    h2d: AtomicU64,
    d2h: AtomicU64,
    d2d: AtomicU64,
    reduce: AtomicU64,
    divide: AtomicU64,
    ipc_export: AtomicU64,
    ipc_open: AtomicU64,
    ipc_close: AtomicU64,
    register_host: AtomicU64,
}

/// A test double of a GPU, in plain host memory.
///
/// * Device memory is a `memfd` segment per allocation; its "IPC handle" is
///   `(pid, fd, length)`, opened by another process through
///   `/proc/<pid>/fd/<fd>` — and, as with CUDA, refused in the process
///   that exported it. As with CUDA, opening maps the whole allocation (a
///   length beyond it is refused), and opening an allocation that is open
///   already returns the same address and counts a reference: each close
///   drops one, and the mapping goes with the last.
/// * Stream work is **deferred**: copies and kernels are queued and run, in
///   order, only when the stream is synchronized or an event on it is
///   waited for. Code that reads a result without synchronizing reads stale
///   memory, so the tests catch it.
/// * Kernels are `gpucomm_cuda::reference` (the CPU definition the real
///   kernels are checked against).
/// * Every device address handed to a copy or kernel must lie inside an
///   allocation or an opened peer allocation, else the call fails.
///
/// ```
/// use gpucomm::device::{DeviceBackend, FakeDevice};
/// let gpu = FakeDevice::new(1);
/// let p = gpu.alloc(0, 8)?;
/// let s = gpu.create_stream(0)?;
/// let mut back = [0u8; 8];
/// // SAFETY: `p` is 8 bytes of fake device memory; the arrays outlive the sync.
/// unsafe {
///     gpu.copy_h2d(s, p, [7u8; 8].as_ptr(), 8)?;
///     gpu.copy_d2h(s, back.as_mut_ptr(), p, 8)?;
/// }
/// assert_eq!(back, [0; 8]); // deferred: nothing has run yet
/// gpu.synchronize(s)?;
/// assert_eq!(back, [7; 8]);
/// # Ok::<(), gpucomm::Error>(())
/// ```
pub struct FakeDevice {
    devices: u32,
    peer_access: bool,
    state: Mutex<State>,
    counters: Counters,
    fail_on: Mutex<Option<String>>,
}

impl FakeDevice {
    /// `devices` fake devices, P2P possible between all of them.
    pub fn new(devices: u32) -> FakeDevice {
        FakeDevice {
            devices,
            peer_access: true,
            state: Mutex::new(State::default()),
            counters: Counters::default(),
            fail_on: Mutex::new(None),
        }
    }

    /// Like [`FakeDevice::new`], with P2P between different devices
    /// reported impossible (so `auto` picks the staged path).
    pub fn without_peer_access(devices: u32) -> FakeDevice {
        FakeDevice {
            peer_access: false,
            ..FakeDevice::new(devices)
        }
    }

    /// Makes every later operation named `op` (`"alloc"`, `"copy_d2d"`,
    /// `"reduce"`, `"ipc_open"`, ...) fail; `None` clears it.
    pub fn fail_on(&self, op: Option<&str>) {
        *crate::lock(&self.fail_on) = op.map(str::to_string);
    }

    /// What was done so far.
    pub fn stats(&self) -> FakeStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FakeStats {
            allocs: g(&c.allocs),
            h2d: g(&c.h2d),
            d2h: g(&c.d2h),
            d2d: g(&c.d2d),
            reduce: g(&c.reduce),
            divide: g(&c.divide),
            ipc_export: g(&c.ipc_export),
            ipc_open: g(&c.ipc_open),
            ipc_close: g(&c.ipc_close),
            register_host: g(&c.register_host),
        }
    }

    /// Live allocations (own, not opened peers').
    pub fn live_allocations(&self) -> usize {
        self.lock().allocs.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock(&self.state)
    }

    fn err(&self, device: u32, what: &str, detail: impl Into<String>) -> Error {
        Error::Device {
            backend: "fake".into(),
            device,
            what: what.into(),
            detail: detail.into(),
        }
    }

    fn check_fail(&self, device: u32, what: &str) -> Result<(), Error> {
        let f = crate::lock(&self.fail_on);
        if f.as_deref() == Some(what) {
            return Err(self.err(device, what, "injected failure"));
        }
        Ok(())
    }

    fn check_device(&self, device: u32) -> Result<(), Error> {
        if device >= self.devices {
            return Err(self.err(
                device,
                "select device",
                format!("there are {} fake devices", self.devices),
            ));
        }
        Ok(())
    }

    /// The stream, after checking the range lies in known device memory.
    fn stream(&self, s: StreamId) -> Result<Arc<FakeStream>, Error> {
        self.lock()
            .streams
            .get(&s.0)
            .cloned()
            .ok_or_else(|| self.err(0, "stream", format!("unknown stream {}", s.0)))
    }

    fn check_range(
        &self,
        device: u32,
        what: &str,
        p: DevicePtr,
        bytes: usize,
    ) -> Result<(), Error> {
        if bytes == 0 {
            return Ok(());
        }
        let st = self.lock();
        let inside = st
            .allocs
            .values()
            .map(|(_, s)| s)
            .chain(st.opened.iter().map(|(_, m)| &m.seg))
            .any(|s| s.contains(p as *const u8, bytes));
        if inside {
            Ok(())
        } else {
            Err(self.err(
                device,
                what,
                format!("{bytes} bytes at {p:#x} are not in any device allocation"),
            ))
        }
    }

    fn enqueue(&self, s: StreamId, what: &str, op: Op) -> Result<(), Error> {
        let st = self.stream(s)?;
        self.check_fail(st.device, what)?;
        st.push(op);
        Ok(())
    }
}

impl Default for FakeDevice {
    fn default() -> Self {
        FakeDevice::new(1)
    }
}

impl std::fmt::Debug for FakeDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FakeDevice({} devices)", self.devices)
    }
}

const MAGIC: &[u8; 4] = b"GFAK";
const HANDLE_LEN: usize = 4 + 4 + 4 + 8;

impl DeviceBackend for FakeDevice {
    fn name(&self) -> &str {
        "fake"
    }

    fn device_count(&self) -> u32 {
        self.devices
    }

    fn device_name(&self, device: u32) -> Result<String, Error> {
        self.check_device(device)?;
        Ok(format!("fake GPU {device} (host memory)"))
    }

    fn physical_id(&self, device: u32) -> Result<String, Error> {
        self.check_device(device)?;
        Ok(format!("fake:{device}"))
    }

    fn can_access_peer(&self, device: u32, peer: u32) -> Result<bool, Error> {
        self.check_device(device)?;
        self.check_device(peer)?;
        Ok(device == peer || self.peer_access)
    }

    fn alloc(&self, device: u32, bytes: usize) -> Result<DevicePtr, Error> {
        self.check_device(device)?;
        self.check_fail(device, "alloc")?;
        let seg = Segment::create(bytes, "gpucomm-fake-device")?;
        let p = seg.ptr() as u64;
        self.lock().allocs.insert(p, (device, seg));
        self.counters.allocs.fetch_add(1, Ordering::Relaxed);
        Ok(p)
    }

    unsafe fn free(&self, _device: u32, ptr: DevicePtr) {
        self.lock().allocs.remove(&ptr);
    }

    unsafe fn register_host(&self, device: u32, ptr: *mut u8, len: usize) -> Result<(), Error> {
        self.check_device(device)?;
        self.check_fail(device, "register_host")?;
        self.lock().registered.insert(ptr as usize, len);
        self.counters.register_host.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    unsafe fn unregister_host(&self, ptr: *mut u8) {
        self.lock().registered.remove(&(ptr as usize));
    }

    fn create_stream(&self, device: u32) -> Result<StreamId, Error> {
        self.check_device(device)?;
        let mut st = self.lock();
        st.next += 1;
        let id = st.next;
        st.streams.insert(
            id,
            Arc::new(FakeStream {
                device,
                queue: Mutex::new(VecDeque::new()),
                issued: AtomicU64::new(0),
                done: AtomicU64::new(0),
            }),
        );
        Ok(StreamId(id))
    }

    fn destroy_stream(&self, stream: StreamId) {
        let s = self.lock().streams.remove(&stream.0);
        if let Some(s) = s {
            // As cuStreamDestroy: queued work still completes.
            s.flush();
        }
    }

    unsafe fn copy_h2d(
        &self,
        stream: StreamId,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), Error> {
        let dev = self.stream(stream)?.device;
        self.check_range(dev, "copy_h2d", dst, bytes)?;
        let s = src as usize;
        self.enqueue(
            stream,
            "copy_h2d",
            Box::new(move || {
                // SAFETY: the caller keeps both ranges live until the stream
                // is synchronized (the trait's contract); `dst` was checked.
                unsafe { std::ptr::copy(s as *const u8, dst as *mut u8, bytes) }
            }),
        )?;
        self.counters.h2d.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    unsafe fn copy_d2h(
        &self,
        stream: StreamId,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), Error> {
        let dev = self.stream(stream)?.device;
        self.check_range(dev, "copy_d2h", src, bytes)?;
        let d = dst as usize;
        self.enqueue(
            stream,
            "copy_d2h",
            Box::new(move || {
                // SAFETY: as in copy_h2d.
                unsafe { std::ptr::copy(src as *const u8, d as *mut u8, bytes) }
            }),
        )?;
        self.counters.d2h.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    unsafe fn copy_d2d(
        &self,
        stream: StreamId,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), Error> {
        let dev = self.stream(stream)?.device;
        self.check_range(dev, "copy_d2d destination", dst, bytes)?;
        self.check_range(dev, "copy_d2d source", src, bytes)?;
        self.enqueue(
            stream,
            "copy_d2d",
            Box::new(move || {
                // SAFETY: as in copy_h2d.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) }
            }),
        )?;
        self.counters.d2d.fetch_add(1, Ordering::Relaxed);
        Ok(())
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
        let dev = self.stream(stream)?.device;
        let bytes = count * dtype.size();
        self.check_range(dev, "reduce destination", dst, bytes)?;
        self.check_range(dev, "reduce left operand", a, bytes)?;
        self.check_range(dev, "reduce right operand", b, bytes)?;
        self.enqueue(
            stream,
            "reduce",
            Box::new(move || {
                // Copies of the operands: `dst` may alias `a`.
                // SAFETY: as in copy_h2d; the three ranges were checked.
                let (x, y) = unsafe {
                    (
                        std::slice::from_raw_parts(a as *const u8, bytes).to_vec(),
                        std::slice::from_raw_parts(b as *const u8, bytes).to_vec(),
                    )
                };
                // SAFETY: as above.
                let d = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, bytes) };
                gpucomm_cuda::reference::reduce(op, dtype, d, &x, &y)
                    .expect("lengths are equal by construction");
            }),
        )?;
        self.counters.reduce.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    unsafe fn divide(
        &self,
        stream: StreamId,
        dtype: DataType,
        dst: DevicePtr,
        count: usize,
        ranks: u64,
    ) -> Result<(), Error> {
        let dev = self.stream(stream)?.device;
        let bytes = count * dtype.size();
        self.check_range(dev, "divide destination", dst, bytes)?;
        gpucomm_cuda::reference::check_ranks(dtype, ranks)
            .map_err(|e| self.err(dev, "divide", e.to_string()))?;
        self.enqueue(
            stream,
            "divide",
            Box::new(move || {
                // SAFETY: as in copy_h2d.
                let d = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, bytes) };
                gpucomm_cuda::reference::divide(dtype, d, ranks)
                    .expect("ranks checked when queued");
            }),
        )?;
        self.counters.divide.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn synchronize(&self, stream: StreamId) -> Result<(), Error> {
        self.stream(stream)?.flush();
        Ok(())
    }

    fn record_event(&self, stream: StreamId) -> Result<EventId, Error> {
        let s = self.stream(stream)?;
        let target = s.issued.load(Ordering::Acquire);
        let mut st = self.lock();
        st.next += 1;
        let id = st.next;
        st.events.insert(id, FakeEvent { stream: s, target });
        Ok(EventId(id))
    }

    fn event_wait(&self, event: EventId) -> Result<(), Error> {
        let (s, target) = {
            let st = self.lock();
            let e = st
                .events
                .get(&event.0)
                .ok_or_else(|| self.err(0, "event wait", format!("unknown event {}", event.0)))?;
            (e.stream.clone(), e.target)
        };
        if s.done.load(Ordering::Acquire) < target {
            s.flush();
        }
        Ok(())
    }

    fn event_done(&self, event: EventId) -> Result<bool, Error> {
        let st = self.lock();
        let e = st
            .events
            .get(&event.0)
            .ok_or_else(|| self.err(0, "event query", format!("unknown event {}", event.0)))?;
        Ok(e.stream.done.load(Ordering::Acquire) >= e.target)
    }

    fn stream_wait_event(&self, _stream: StreamId, event: EventId) -> Result<(), Error> {
        // The dependency is met eagerly: run the event's stream now.
        self.event_wait(event)
    }

    fn destroy_event(&self, event: EventId) {
        self.lock().events.remove(&event.0);
    }

    fn ipc_export(&self, device: u32, ptr: DevicePtr, bytes: usize) -> Result<Vec<u8>, Error> {
        self.check_fail(device, "ipc_export")?;
        let st = self.lock();
        let (_, seg) = st.allocs.get(&ptr).ok_or_else(|| {
            self.err(
                device,
                "ipc_export",
                format!("{ptr:#x} is not an allocation"),
            )
        })?;
        if bytes > seg.len() {
            return Err(self.err(device, "ipc_export", "length beyond the allocation"));
        }
        let mut v = Vec::with_capacity(HANDLE_LEN);
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&std::process::id().to_le_bytes());
        v.extend_from_slice(&seg.raw_fd().to_le_bytes());
        v.extend_from_slice(&(bytes as u64).to_le_bytes());
        self.counters.ipc_export.fetch_add(1, Ordering::Relaxed);
        Ok(v)
    }

    fn ipc_open(&self, device: u32, h: &[u8]) -> Result<(DevicePtr, usize), Error> {
        self.check_device(device)?;
        self.check_fail(device, "ipc_open")?;
        if h.len() != HANDLE_LEN || &h[..4] != MAGIC {
            return Err(self.err(device, "ipc_open", "not a fake IPC handle"));
        }
        let pid = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
        let fd = i32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        let len = u64::from_le_bytes(h[12..20].try_into().expect("8 bytes")) as usize;
        if pid == std::process::id() {
            return Err(self.err(
                device,
                "ipc_open",
                "a handle cannot be opened by the process that exported it (as with CUDA IPC)",
            ));
        }
        let fail = |what: String| self.err(device, "ipc_open", format!("process {pid}: {what}"));
        let path = format!("/proc/{pid}/fd/{fd}");
        let meta = std::fs::metadata(&path).map_err(|e| fail(e.to_string()))?;
        let file = (meta.dev(), meta.ino());
        let size =
            usize::try_from(meta.len()).map_err(|_| fail("an allocation too large".into()))?;
        if len > size {
            return Err(fail(format!(
                "the handle announces {len} bytes of an allocation of {size}"
            )));
        }
        let mut st = self.lock();
        let known = st
            .opened
            .iter()
            .find(|(_, m)| m.file == file)
            .map(|(p, m)| (p, m.clone()));
        let (p, m) = match known {
            Some(k) => k,
            None => {
                // The whole allocation, as cuIpcOpenMemHandle maps it.
                let seg = Segment::open_peer(pid, fd, size).map_err(|e| fail(e.to_string()))?;
                let own = std::fs::metadata(format!("/proc/self/fd/{}", seg.raw_fd()))
                    .map_err(|e| fail(e.to_string()))?;
                if (own.dev(), own.ino()) != file {
                    return Err(fail("its descriptor changed while being opened".into()));
                }
                (seg.ptr() as u64, PeerMapping { seg, file })
            }
        };
        // A duplicate handed back is a clone of the mapping kept.
        let _ = st.opened.open(p, m);
        drop(st);
        self.counters.ipc_open.fetch_add(1, Ordering::Relaxed);
        Ok((p, len))
    }

    unsafe fn ipc_close(&self, _device: u32, ptr: DevicePtr) {
        let last = match self.lock().opened.close(ptr) {
            Close::NotOpen => return,
            Close::Kept => None,
            Close::Last(m) => Some(m),
        };
        // Unmapped (the last reference) outside the state lock.
        drop(last);
        self.counters.ipc_close.fetch_add(1, Ordering::Relaxed);
    }
}
