//! The CUDA backend of gpucomm: device memory, pinned host memory, streams,
//! events, CUDA IPC, peer-to-peer copies, the host-staged path, and
//! reduction kernels compiled at run time — with no CUDA needed to build.
//!
//! # Design: load at run time, absent is a normal state
//!
//! The driver (`libcuda.so.1`) and NVRTC (`libnvrtc.so*`) are opened with
//! `dlopen` on first use and the few dozen entry points gpucomm needs are
//! resolved by name (`ffi`). Nothing links against CUDA, so the default
//! build needs no toolkit, and one binary runs on machines with and without
//! a GPU. [`Gpu::probe`] returns [`Error::NoGpu`] with the reason (library
//! not found, `cuInit` failed, no device) and never panics; everything else
//! in gpucomm works without it. (We bind the driver ourselves rather than
//! through `cudarc`: about 45 functions, no generated bindings to compile,
//! and no panic path when a library is missing.)
//!
//! # What is here
//!
//! - [`Gpu`], [`Device`]: the driver and its devices (primary contexts).
//! - Memory spaces: [`DeviceBuffer`] (`cuMemAlloc`), [`PinnedBuffer`]
//!   (`cuMemHostAlloc`), [`RegisteredHost`] / [`RegisteredRegion`]
//!   (`cuMemHostRegister` over existing memory, e.g. a shared segment), and
//!   ordinary pageable slices; [`DeviceSlice`] views a chunk of device memory.
//! - [`Stream`] (copies H2D/D2H/D2D/peer in stream order) and [`Event`]
//!   (the "operation done" the caller waits on, stream-waitable, shareable
//!   between processes).
//! - CUDA IPC: [`DeviceBuffer::ipc_handle`], [`Device::open_ipc_memory`],
//!   [`Event::ipc_handle`], [`Device::open_ipc_event`], and
//!   [`IpcBufferDesc`], the checked wire form ranks exchange via the store.
//! - The host-staged path ([`staging`]): device → pinned host → device in
//!   double-buffered chunks, as a protocol whose copies are parameters.
//! - Reduction kernels ([`kernels`]): CUDA C generated per (op, type) for
//!   every op and type of the CPU path, compiled with NVRTC
//!   ([`Device::kernels`]), equal to [`mod@reference`].
//! - [`mod@bench`]: the copy measurements behind `gpucomm bandwidth`.
//!
//! # Who uses it
//!
//! The runtime's `gpucomm::device::CudaBackend` implements the runtime's
//! device trait with this crate: collectives on device buffers over CUDA
//! IPC or the host-staged path, `gpucomm bench --memory device` (see
//! `docs/gpu.md`). NVML topology is in `gpucomm-topo`.
//!
//! # Tests
//!
//! Host-side logic runs everywhere: loading and absence, IPC descriptor
//! encoding, the staging protocol on host memory, and the generated kernels
//! compiled with the host C++ compiler and compared with the reference. The
//! GPU tests (`tests/gpu.rs`) skip with a message when there is no GPU,
//! unless `GPUCOMM_REQUIRE_GPU=1`, which makes a missing GPU a failure:
//!
//! ```text
//! GPUCOMM_REQUIRE_GPU=1 cargo test --workspace
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bench;
mod device;
mod error;
mod ffi;
pub mod ipc;
pub mod kernels;
mod launch;
pub mod reference;
pub mod staging;

pub use device::{
    Device, DeviceBuffer, DeviceInfo, DeviceMemory, DeviceSlice, Event, Gpu, IpcBuffer,
    PinnedBuffer, ProbeConfig, RegisteredHost, RegisteredRegion, Stream,
};
pub use error::Error;
pub use ipc::{IpcBufferDesc, IpcEventHandle, IpcMemHandle};
pub use kernels::DType;
pub use launch::{CodeKind, Kernels, compile, nvrtc_library, nvrtc_version};
pub use staging::{StagedCopier, StagingPlan, StagingRing};

/// The environment variable that turns a missing GPU into a test failure.
pub const REQUIRE_GPU_ENV: &str = "GPUCOMM_REQUIRE_GPU";
