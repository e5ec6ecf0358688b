//! Memory: where a buffer lives, and library-allocated buffers that peers map.
//!
//! [`Buffer`]s made by [`crate::Communicator::alloc`] live in a `memfd`
//! segment. A peer process on the same host maps the segment (through
//! `/proc/<pid>/fd/<fd>`, which needs no file name and leaves nothing behind
//! when a process dies) the first time it is sent a reference into it, then
//! reads the data in place: the shared-memory transport sends 48-byte
//! references instead of data, and a receive-and-reduce reads the peer's
//! buffer directly into the output.

#![allow(unsafe_code)]

use std::fs::File;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;
use crate::dtype::Element;

/// Where a buffer's memory lives. A [`Buffer`] is host memory (pageable, or
/// pinned: page-locked with `mlock`, or registered with a device by
/// [`crate::device::DeviceComm::alloc_host`]); device memory is a
/// [`crate::device::DeviceBuffer`], made by [`crate::device::DeviceComm::alloc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MemorySpace {
    /// Ordinary host memory.
    #[default]
    HostPageable,
    /// Page-locked host memory (`mlock`), what DMA engines need.
    HostPinned,
    /// Memory of device `n` ([`crate::device::DeviceBuffer`]).
    Device(u32),
}

impl std::fmt::Display for MemorySpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemorySpace::HostPageable => f.write_str("host-pageable"),
            MemorySpace::HostPinned => f.write_str("host-pinned"),
            MemorySpace::Device(n) => write!(f, "device {n}"),
        }
    }
}

impl MemorySpace {
    /// Fails with [`Error::Unsupported`] for device memory, which a
    /// host [`Buffer`] cannot hold.
    pub fn check_supported(self) -> Result<(), Error> {
        match self {
            MemorySpace::Device(n) => Err(Error::Unsupported(format!(
                "device memory (device {n}) in a host Buffer: allocate it with gpucomm::device::DeviceComm::alloc (a DeviceBuffer)"
            ))),
            _ => Ok(()),
        }
    }
}

static NEXT_SEGMENT: AtomicU64 = AtomicU64::new(1);

/// A `memfd` mapping that peers of the same host can map too.
pub(crate) struct Segment {
    pub id: u64,
    file: File,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; synchronisation of its contents
// is the job of the engine (a buffer is only touched by one operation at a time).
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates a zero-filled segment of at least `len` bytes (one page at least).
    pub fn create(len: usize, name: &str) -> Result<Arc<Segment>, Error> {
        // Whole pages, no larger than a slice may be (a wrapped size would
        // map less than the caller is told it has).
        let len = len
            .max(1)
            .checked_next_multiple_of(4096)
            .filter(|&l| l <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("a shared segment of {len} bytes is too large"))
            })?;
        let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| Error::io("memfd_create", e.into()))?;
        let file = File::from(fd);
        file.set_len(len as u64)
            .map_err(|e| Error::io("ftruncate memfd", e))?;
        // SAFETY: mapping a file we own of exactly `len` bytes; the result is
        // checked; the mapping is unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::io("mmap memfd", std::io::Error::last_os_error()));
        }
        Ok(Arc::new(Segment {
            id: NEXT_SEGMENT.fetch_add(1, Ordering::Relaxed),
            file,
            ptr: ptr as *mut u8,
            len,
        }))
    }

    /// Maps a peer's segment read-write through `/proc/<pid>/fd/<fd>`.
    pub fn open_peer(pid: u32, fd: i32, len: usize) -> std::io::Result<Arc<Segment>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/fd/{fd}"))?;
        let actual = file.metadata()?.len() as usize;
        if actual < len || len == 0 {
            return Err(std::io::Error::other(format!(
                "peer segment has {actual} bytes, {len} announced"
            )));
        }
        // SAFETY: as in `create`; the file is at least `len` bytes long, so no
        // access within the mapping can fault with SIGBUS unless the owner
        // shrinks it (it never does).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arc::new(Segment {
            id: 0,
            file,
            ptr: ptr as *mut u8,
            len,
        }))
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn raw_fd(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(&self.file)
    }
    pub fn contains(&self, p: *const u8, bytes: usize) -> bool {
        let a = self.ptr as usize;
        let p = p as usize;
        p >= a && p.saturating_add(bytes) <= a + self.len
    }
    fn lock(&self) -> std::io::Result<()> {
        // SAFETY: the range is our own live mapping.
        let r = unsafe { libc::mlock(self.ptr as *const libc::c_void, self.len) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in create/open_peer, once.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

enum Backing<T> {
    Heap(#[allow(dead_code)] Vec<T>),
    Segment(#[allow(dead_code)] Arc<Segment>),
}

/// A typed buffer owned by the library: either ordinary heap memory
/// ([`Buffer::from_vec`]) or memory in a segment that peers on the same host
/// map ([`crate::Communicator::alloc`]), which the shared-memory transport
/// reads in place (zero copy). Dereferences to a slice.
///
/// ```
/// let b = gpucomm::Buffer::from_vec(vec![1.0f32, 2.0]);
/// assert_eq!(&b[..], &[1.0, 2.0]);
/// assert_eq!(b.space(), gpucomm::MemorySpace::HostPageable);
/// ```
pub struct Buffer<T: Element> {
    ptr: *mut T,
    len: usize,
    space: MemorySpace,
    /// Dropped before the memory (e.g. a device registration of it).
    guard: Option<Box<dyn Send + Sync>>,
    backing: Backing<T>,
}

// SAFETY: a Buffer owns its memory exclusively (segments are only read by
// peers while an operation holding the buffer runs); T is plain data.
unsafe impl<T: Element> Send for Buffer<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: Element> Sync for Buffer<T> {}

impl<T: Element> Buffer<T> {
    /// Wraps a vector (host pageable memory, copied through the transports).
    pub fn from_vec(mut v: Vec<T>) -> Self {
        let ptr = v.as_mut_ptr();
        let len = v.len();
        Buffer {
            ptr,
            len,
            space: MemorySpace::HostPageable,
            guard: None,
            backing: Backing::Heap(v),
        }
    }

    /// `len` zeroed elements in a new shareable segment.
    pub(crate) fn new_shared(
        len: usize,
        space: MemorySpace,
    ) -> Result<(Self, Arc<Segment>), Error> {
        space.check_supported()?;
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{len} elements of {} bytes do not fit in an address space",
                std::mem::size_of::<T>()
            ))
        })?;
        let seg = Segment::create(bytes, "gpucomm-buffer")?;
        if space == MemorySpace::HostPinned {
            seg.lock()
                .map_err(|e| Error::io("mlock (pinned host memory)", e))?;
        }
        Ok((
            Buffer {
                ptr: seg.ptr() as *mut T,
                len,
                space,
                guard: None,
                backing: Backing::Segment(seg.clone()),
            },
            seg,
        ))
    }

    /// The same memory, described as `space`, keeping `guard` alive until
    /// the buffer drops (before its memory goes).
    pub(crate) fn into_space(
        mut self,
        space: MemorySpace,
        guard: Option<Box<dyn Send + Sync>>,
    ) -> Self {
        self.space = space;
        self.guard = guard;
        self
    }

    /// Where the memory lives.
    pub fn space(&self) -> MemorySpace {
        self.space
    }

    /// True when peers on this host can map the memory (allocated by
    /// [`crate::Communicator::alloc`]).
    pub fn is_shared(&self) -> bool {
        matches!(self.backing, Backing::Segment(_))
    }

    /// Copies the contents into a new vector.
    pub fn to_vec(&self) -> Vec<T> {
        self.deref().to_vec()
    }
}

impl<T: Element> Deref for Buffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr/len describe memory owned by `backing`, initialised
        // (zeroed segment or a Vec), aligned for T.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Element> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: Element> std::fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("len", &self.len)
            .field("space", &self.space)
            .field("shared", &self.is_shared())
            .finish()
    }
}
