//! Copy measurements for `gpucomm bandwidth` (nvbandwidth / bandwidthTest
//! style): each test allocates its buffers once, warms up, then times
//! `iters` back-to-back copies on one stream between two timing events
//! (the host-staged path, which runs on two threads, is timed on the host
//! clock). Latency ([`Timing::RoundTrip`]) issues one copy at a time and
//! waits for it, on the host clock.

#![allow(unsafe_code)]

use std::time::Instant;

use crate::{Device, Error, staging};

/// What a bandwidth test copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CopyKind {
    /// Host to device from page-locked memory (copy engine, direct DMA).
    HostToDevicePinned,
    /// Host to device from ordinary memory (the driver stages it).
    HostToDevicePageable,
    /// Device to host into page-locked memory.
    DeviceToHostPinned,
    /// Device to host into ordinary memory.
    DeviceToHostPageable,
    /// Within one device, on a copy engine (`cuMemcpyDtoDAsync`).
    DeviceToDeviceCopyEngine,
    /// Within one device, by a copy kernel on the SMs.
    DeviceToDeviceKernel,
    /// Between two devices on a copy engine (`cuMemcpyPeerAsync`).
    PeerCopyEngine,
    /// Between two devices by a kernel on the destination reading the
    /// source over P2P (needs peer access).
    PeerKernel,
    /// Between two devices (or within one) through pinned host memory, the
    /// traditional path: device → host → device, pipelined in chunks.
    HostStaged,
}

impl CopyKind {
    /// Every kind, in report order.
    pub const ALL: [CopyKind; 9] = [
        CopyKind::HostToDevicePinned,
        CopyKind::HostToDevicePageable,
        CopyKind::DeviceToHostPinned,
        CopyKind::DeviceToHostPageable,
        CopyKind::DeviceToDeviceCopyEngine,
        CopyKind::DeviceToDeviceKernel,
        CopyKind::PeerCopyEngine,
        CopyKind::PeerKernel,
        CopyKind::HostStaged,
    ];

    /// Short name used on the command line and in JSON.
    pub const fn name(self) -> &'static str {
        match self {
            CopyKind::HostToDevicePinned => "h2d_pinned",
            CopyKind::HostToDevicePageable => "h2d_pageable",
            CopyKind::DeviceToHostPinned => "d2h_pinned",
            CopyKind::DeviceToHostPageable => "d2h_pageable",
            CopyKind::DeviceToDeviceCopyEngine => "d2d_ce",
            CopyKind::DeviceToDeviceKernel => "d2d_kernel",
            CopyKind::PeerCopyEngine => "p2p_ce",
            CopyKind::PeerKernel => "p2p_kernel",
            CopyKind::HostStaged => "host_staged",
        }
    }

    /// Parses [`CopyKind::name`].
    pub fn from_name(s: &str) -> Option<CopyKind> {
        CopyKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether the test involves two devices (source and destination).
    pub const fn is_pairwise(self) -> bool {
        matches!(
            self,
            CopyKind::PeerCopyEngine | CopyKind::PeerKernel | CopyKind::HostStaged
        )
    }
}

/// One measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// The test.
    pub kind: CopyKind,
    /// Source device (the device, for host copies).
    pub src: u32,
    /// Destination device.
    pub dst: u32,
    /// Bytes per copy.
    pub bytes: usize,
    /// Timed copies.
    pub iters: u32,
    /// Mean seconds per copy.
    pub seconds: f64,
}

impl Measurement {
    /// Bandwidth in GB/s (10^9 bytes per second).
    pub fn gbps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }
}

/// Chunk size of the host-staged path (and its slot count).
pub const STAGING_CHUNK: usize = 4 << 20;
/// Slots of the host-staged path (double buffering).
pub const STAGING_SLOTS: usize = 2;

/// How copies are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// `iters` copies back to back on one stream between two timing events:
    /// bandwidth (and the per-copy cost when the queue is kept full).
    Stream,
    /// Each copy issued and then waited for (`cuStreamSynchronize`), timed
    /// on the host clock: the latency a caller sees for one small copy.
    RoundTrip,
}

/// Runs one bandwidth test: `kind` from `src` to `dst` (equal for
/// single-device kinds), `bytes` per copy, `warmup` untimed then `iters`
/// timed copies ([`Timing::Stream`]).
pub fn measure(
    kind: CopyKind,
    src: &Device,
    dst: &Device,
    bytes: usize,
    warmup: u32,
    iters: u32,
) -> Result<Measurement, Error> {
    measure_with(kind, src, dst, bytes, warmup, iters, Timing::Stream)
}

/// [`measure`] with a choice of [`Timing`] (`RoundTrip` for latency).
pub fn measure_with(
    kind: CopyKind,
    src: &Device,
    dst: &Device,
    bytes: usize,
    warmup: u32,
    iters: u32,
    timing: Timing,
) -> Result<Measurement, Error> {
    if iters == 0 {
        return Err(Error::InvalidArgument(
            "at least one timed iteration is needed".into(),
        ));
    }
    if !kind.is_pairwise() && src.ordinal() != dst.ordinal() {
        return Err(Error::InvalidArgument(format!(
            "{} is a single-device test",
            kind.name()
        )));
    }
    let dev = dst; // the device whose stream issues the copies
    let stream = dev.stream()?;
    let (t0, t1) = (dev.event(true, false)?, dev.event(true, false)?);
    // One timed loop: `op` issues one copy on `stream`.
    let run = |op: &mut dyn FnMut() -> Result<(), Error>| -> Result<f64, Error> {
        for _ in 0..warmup {
            op()?;
        }
        stream.synchronize()?;
        if timing == Timing::RoundTrip {
            let start = Instant::now();
            for _ in 0..iters {
                op()?;
                stream.synchronize()?;
            }
            return Ok(start.elapsed().as_secs_f64() / iters as f64);
        }
        t0.record(&stream)?;
        for _ in 0..iters {
            op()?;
        }
        t1.record(&stream)?;
        t1.wait()?;
        Ok(t1.elapsed_ms(&t0)? as f64 / 1e3 / iters as f64)
    };
    // A failure leaves the stream synchronized too: copies queued before it
    // still use the host buffer the caller frees next (an error of this
    // synchronize is dropped, the first one is returned).
    let timed = |op: &mut dyn FnMut() -> Result<(), Error>| -> Result<f64, Error> {
        let r = run(op);
        if r.is_err() {
            let _ = stream.synchronize();
        }
        r
    };
    let seconds = match kind {
        CopyKind::HostToDevicePinned | CopyKind::DeviceToHostPinned => {
            let mut host = dev.alloc_pinned(bytes)?;
            let d = dev.alloc(bytes)?;
            let to_device = kind == CopyKind::HostToDevicePinned;
            let host_ptr: *mut [u8] = &mut *host;
            timed(&mut || {
                // SAFETY: `host` outlives the loop, which ends with the
                // stream synchronized (t1.wait, or `timed` on an error), and
                // nothing else touches it.
                unsafe {
                    if to_device {
                        stream.copy_from_host_async(&d, 0, &*host_ptr)
                    } else {
                        stream.copy_to_host_async(&mut *host_ptr, &d, 0)
                    }
                }
            })?
        }
        CopyKind::HostToDevicePageable | CopyKind::DeviceToHostPageable => {
            let mut host = vec![1u8; bytes];
            let d = dev.alloc(bytes)?;
            let to_device = kind == CopyKind::HostToDevicePageable;
            let host_ptr: *mut [u8] = host.as_mut_slice();
            timed(&mut || {
                // SAFETY: as for pinned memory: `host` outlives the
                // synchronized loop and is not otherwise accessed.
                unsafe {
                    if to_device {
                        stream.copy_from_host_async(&d, 0, &*host_ptr)
                    } else {
                        stream.copy_to_host_async(&mut *host_ptr, &d, 0)
                    }
                }
            })?
        }
        CopyKind::DeviceToDeviceCopyEngine => {
            let (a, b) = (dev.alloc(bytes)?, dev.alloc(bytes)?);
            timed(&mut || stream.copy_device(&b, 0, &a, 0, bytes))?
        }
        CopyKind::DeviceToDeviceKernel => {
            let k = dev.kernels()?;
            let (a, b) = (dev.alloc(bytes)?, dev.alloc(bytes)?);
            timed(&mut || k.copy(&stream, &b, 0, &a, 0, bytes))?
        }
        CopyKind::PeerCopyEngine => {
            let (a, b) = (src.alloc(bytes)?, dst.alloc(bytes)?);
            if dst.can_access_peer(src)? {
                dst.enable_peer_access(src)?;
            }
            timed(&mut || stream.copy_peer(&b, 0, &a, 0, bytes))?
        }
        CopyKind::PeerKernel => {
            if !dst.can_access_peer(src)? {
                return Err(Error::InvalidArgument(format!(
                    "device {} cannot access device {} directly (no P2P): no kernel copy",
                    dst.ordinal(),
                    src.ordinal()
                )));
            }
            dst.enable_peer_access(src)?;
            let k = dst.kernels()?;
            let (a, b) = (src.alloc(bytes)?, dst.alloc(bytes)?);
            timed(&mut || k.copy(&stream, &b, 0, &a, 0, bytes))?
        }
        CopyKind::HostStaged => {
            let (a, b) = (src.alloc(bytes)?, dst.alloc(bytes)?);
            let mut copier = staging::StagedCopier::new(
                src,
                dst,
                bytes,
                STAGING_CHUNK.min(bytes.max(1)),
                STAGING_SLOTS,
            )?;
            for _ in 0..warmup {
                copier.copy(&a, &b)?;
            }
            let start = Instant::now();
            for _ in 0..iters {
                copier.copy(&a, &b)?;
            }
            start.elapsed().as_secs_f64() / iters as f64
        }
    };
    Ok(Measurement {
        kind,
        src: src.ordinal(),
        dst: dst.ordinal(),
        bytes,
        iters,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in CopyKind::ALL {
            assert_eq!(CopyKind::from_name(k.name()), Some(k));
        }
        assert_eq!(CopyKind::from_name("h2d"), None);
    }

    #[test]
    fn gbps_is_bytes_over_seconds() {
        let m = Measurement {
            kind: CopyKind::DeviceToDeviceCopyEngine,
            src: 0,
            dst: 0,
            bytes: 2_000_000_000,
            iters: 1,
            seconds: 0.5,
        };
        assert_eq!(m.gbps(), 4.0);
    }
}
