//! The host-staged path: device → pinned (shared) host memory → device, for
//! when the GPUs cannot reach each other directly (no P2P, or P2P disabled
//! to compare).
//!
//! A transfer of `total` bytes is cut into chunks that cycle through `slots`
//! slots of a staging area. The sender copies chunk `i` out of its device
//! into slot `i % slots`, then publishes `filled = i + 1`; the receiver waits
//! for `filled > i`, copies the slot into its device and publishes
//! `drained = i + 1`; the sender may fill chunk `i` only once
//! `drained + slots > i`. With two or more slots the sender's
//! device-to-host copy of one chunk overlaps the receiver's host-to-device
//! copy of the previous one (double buffering), the "traditional" path's two
//! copies pipelined.
//!
//! The protocol state (the two counters and an abort flag) lives in the
//! first [`HEADER_BYTES`] of the staging memory, on separate cache lines, so
//! the same layout works in a shared-memory segment mapped by two processes.
//! The copy functions are parameters: the tests run the protocol on host
//! memory with `memcpy`, [`StagedCopier`] runs it with CUDA copies.
//! Every wait is bounded and an abort on either side ends both.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::Error;

/// Bytes at the start of the staging memory holding the protocol state.
pub const HEADER_BYTES: usize = 256;
const FILLED: usize = 0;
const DRAINED: usize = 64;
const ABORTED: usize = 128;

/// How a transfer is cut into chunks and slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingPlan {
    total: usize,
    chunk: usize,
    slots: usize,
}

/// One chunk of a [`StagingPlan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Position in the transfer (0, 1, ...).
    pub index: u64,
    /// The slot it passes through.
    pub slot: usize,
    /// Byte offset in the source and destination buffers.
    pub offset: usize,
    /// Bytes in this chunk (the last may be short).
    pub len: usize,
}

impl StagingPlan {
    /// `total` bytes in chunks of `chunk` bytes through `slots` slots.
    pub fn new(total: usize, chunk: usize, slots: usize) -> Result<StagingPlan, Error> {
        if chunk == 0 || slots == 0 {
            return Err(Error::InvalidArgument(format!(
                "staging needs a nonzero chunk size and slot count (got {chunk} bytes, {slots} slots)"
            )));
        }
        chunk
            .checked_mul(slots)
            .and_then(|b| b.checked_add(HEADER_BYTES))
            .ok_or_else(|| {
                Error::InvalidArgument(format!("{slots} slots of {chunk} bytes overflow"))
            })?;
        Ok(StagingPlan {
            total,
            chunk,
            slots,
        })
    }

    /// Number of chunks.
    pub fn chunks(&self) -> u64 {
        self.total.div_ceil(self.chunk) as u64
    }

    /// Chunk `i` (`i < chunks()`).
    pub fn chunk(&self, i: u64) -> Chunk {
        let offset = i as usize * self.chunk;
        Chunk {
            index: i,
            slot: (i % self.slots as u64) as usize,
            offset,
            len: self.chunk.min(self.total - offset),
        }
    }

    /// Bytes of staging memory needed: the header and the slots.
    pub fn memory_bytes(&self) -> usize {
        HEADER_BYTES + self.chunk * self.slots
    }

    /// Whether the sender may fill chunk `i` when `drained` chunks are drained.
    pub fn may_fill(&self, i: u64, drained: u64) -> bool {
        i < drained + self.slots as u64
    }

    /// Whether the receiver may drain chunk `i` when `filled` chunks are filled.
    pub fn may_drain(&self, i: u64, filled: u64) -> bool {
        i < filled
    }
}

/// Memory a staging ring can live in: its address must not change while the
/// value lives (heap, `mmap`, pinned memory do not move).
///
/// # Safety
/// `as_mut_ptr` must return the same address, valid for `len()` bytes, for
/// the whole life of the value.
pub unsafe trait StagingMemory: Send + Sync {
    /// Start of the memory.
    fn as_mut_ptr(&mut self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the length is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// SAFETY: pinned memory from cuMemHostAlloc never moves; the pointer is the
// allocation's own, valid for reads and writes of `len()` bytes.
unsafe impl StagingMemory for crate::PinnedBuffer {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.base_mut()
    }
    fn len(&self) -> usize {
        (**self).len()
    }
}

/// A staging area: protocol header and slots in one piece of memory.
pub struct StagingRing<M: StagingMemory> {
    plan: StagingPlan,
    mem: M,
    base: *mut u8,
    sender: AtomicBool,
    receiver: AtomicBool,
    timeout: Duration,
}

// SAFETY: the header is only accessed through atomics; slot bytes are only
// touched by the one Sender and the one Receiver, in disjoint slots as the
// protocol guarantees (see `may_fill` / `may_drain`).
unsafe impl<M: StagingMemory> Sync for StagingRing<M> {}
// SAFETY: as above; `M` is Send.
unsafe impl<M: StagingMemory> Send for StagingRing<M> {}

impl<M: StagingMemory> StagingRing<M> {
    /// Lays a ring for `plan` over `mem` (at least [`StagingPlan::memory_bytes`],
    /// 64-byte aligned) and resets its header. Waits give up after `timeout`.
    pub fn new(plan: StagingPlan, mut mem: M, timeout: Duration) -> Result<Self, Error> {
        if mem.len() < plan.memory_bytes() {
            return Err(Error::InvalidArgument(format!(
                "staging memory has {} bytes, the plan needs {}",
                mem.len(),
                plan.memory_bytes()
            )));
        }
        let base = mem.as_mut_ptr();
        if base as usize % 64 != 0 {
            return Err(Error::InvalidArgument(
                "staging memory must be 64-byte aligned".into(),
            ));
        }
        let mut ring = StagingRing {
            plan,
            mem,
            base,
            sender: AtomicBool::new(false),
            receiver: AtomicBool::new(false),
            timeout,
        };
        ring.reset();
        Ok(ring)
    }

    /// Clears the counters and the abort flag for another transfer (`&mut`:
    /// no side can be running).
    pub fn reset(&mut self) {
        self.counter(FILLED).store(0, Ordering::Relaxed);
        self.counter(DRAINED).store(0, Ordering::Relaxed);
        self.counter(ABORTED).store(0, Ordering::Release);
    }

    /// The plan.
    pub fn plan(&self) -> &StagingPlan {
        &self.plan
    }

    /// Gives the memory back.
    pub fn into_memory(self) -> M {
        self.mem
    }

    fn counter(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at + 8 <= HEADER_BYTES <= len`, the base is 64-byte aligned,
        // and this word is only ever accessed atomically.
        unsafe { &*(self.base.add(at) as *const AtomicU64) }
    }

    /// Ends the transfer on both sides: their waits fail at once.
    pub fn abort(&self) {
        self.counter(ABORTED).store(1, Ordering::Release);
    }

    /// Chunks the sender has published.
    pub fn filled(&self) -> u64 {
        self.counter(FILLED).load(Ordering::Acquire)
    }

    /// Chunks the receiver has released.
    pub fn drained(&self) -> u64 {
        self.counter(DRAINED).load(Ordering::Acquire)
    }

    fn wait(&self, what: &str, at: usize, ready: impl Fn(u64) -> bool) -> Result<(), Error> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.counter(ABORTED).load(Ordering::Acquire) != 0 {
                return Err(Error::Transfer(format!(
                    "the staged transfer was aborted while waiting for {what}"
                )));
            }
            if ready(self.counter(at).load(Ordering::Acquire)) {
                return Ok(());
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else if spins < 256 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
                if start.elapsed() > self.timeout {
                    return Err(Error::Timeout {
                        what: what.to_string(),
                        millis: self.timeout.as_millis() as u64,
                    });
                }
            }
        }
    }

    fn slot_ptr(&self, c: &Chunk) -> *mut u8 {
        // SAFETY: slot < slots, so the slot lies within `memory_bytes() <= len`.
        unsafe { self.base.add(HEADER_BYTES + c.slot * self.plan.chunk) }
    }

    /// Refuses to start a side whose counter (`at`) is not 0: that side
    /// already ran on this ring, and a second run without
    /// [`StagingRing::reset`] would take the first transfer's counters for
    /// its own (the receiver reading stale slots while the sender
    /// overwrites them). Only that side writes the counter, so it is
    /// exact.
    fn check_fresh(&self, side: &str, at: usize) -> Result<(), Error> {
        let done = self.counter(at).load(Ordering::Acquire);
        if done != 0 {
            return Err(Error::InvalidArgument(format!(
                "this staging ring's {side} already ran ({done} chunks): reset() the ring before the next transfer"
            )));
        }
        Ok(())
    }

    /// Runs the sending side: for each chunk, waits for a free slot and calls
    /// `fill(chunk, slot)`, which must have written the slot completely
    /// when it returns. An error from `fill` aborts the transfer. Once per
    /// transfer: a second send before [`StagingRing::reset`] is refused.
    pub fn send(
        &self,
        mut fill: impl FnMut(&Chunk, &mut [u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if self.sender.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidArgument(
                "this staging ring already has a sender".into(),
            ));
        }
        if let Err(e) = self.check_fresh("sender", FILLED) {
            self.sender.store(false, Ordering::Release);
            return Err(e);
        }
        let r = (|| {
            for i in 0..self.plan.chunks() {
                self.wait("a free staging slot", DRAINED, |d| self.plan.may_fill(i, d))?;
                let c = self.plan.chunk(i);
                // SAFETY: the receiver has drained the last chunk that used
                // this slot (may_fill) and will not read it before we publish
                // `filled > i`; we are the only sender (flag above).
                let slot = unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(&c), c.len) };
                fill(&c, slot)?;
                self.counter(FILLED).store(i + 1, Ordering::Release);
            }
            Ok(())
        })();
        if r.is_err() {
            self.abort();
        }
        self.sender.store(false, Ordering::Release);
        r
    }

    /// Runs the receiving side: for each chunk, waits until it is filled and
    /// calls `drain(chunk, slot)`, which must be done reading the slot when
    /// it returns. An error from `drain` aborts the transfer. Once per
    /// transfer: a second receive before [`StagingRing::reset`] is refused.
    pub fn receive(
        &self,
        mut drain: impl FnMut(&Chunk, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if self.receiver.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidArgument(
                "this staging ring already has a receiver".into(),
            ));
        }
        if let Err(e) = self.check_fresh("receiver", DRAINED) {
            self.receiver.store(false, Ordering::Release);
            return Err(e);
        }
        let r = (|| {
            for i in 0..self.plan.chunks() {
                self.wait("a filled staging slot", FILLED, |f| {
                    self.plan.may_drain(i, f)
                })?;
                let c = self.plan.chunk(i);
                // SAFETY: the sender published chunk i (Acquire above) and will
                // not write this slot again before we publish `drained > i`.
                let slot = unsafe { std::slice::from_raw_parts(self.slot_ptr(&c), c.len) };
                drain(&c, slot)?;
                self.counter(DRAINED).store(i + 1, Ordering::Release);
            }
            Ok(())
        })();
        if r.is_err() {
            self.abort();
        }
        self.receiver.store(false, Ordering::Release);
        r
    }
}

/// Copies device buffers of one size through pinned host memory: a sender
/// thread copies chunks device-to-host on one stream while the calling
/// thread copies the previous chunk host-to-device on another. The staging
/// memory and streams are made once and reused by every [`StagedCopier::copy`].
///
/// ```no_run
/// # fn main() -> Result<(), gpucomm_cuda::Error> {
/// let dev = gpucomm_cuda::Gpu::probe()?.device(0)?;
/// let (a, b) = (dev.alloc(64 << 20)?, dev.alloc(64 << 20)?);
/// let mut c = gpucomm_cuda::StagedCopier::new(&dev, &dev, 64 << 20, 4 << 20, 2)?;
/// c.copy(&a, &b)?; // b = a, through the host
/// # Ok(()) }
/// ```
pub struct StagedCopier {
    ring: StagingRing<crate::PinnedBuffer>,
    out_stream: crate::Stream,
    in_stream: crate::Stream,
}

impl StagedCopier {
    /// Staging for copies of `total` bytes from `src_dev` to `dst_dev`.
    pub fn new(
        src_dev: &crate::Device,
        dst_dev: &crate::Device,
        total: usize,
        chunk: usize,
        slots: usize,
    ) -> Result<StagedCopier, Error> {
        let plan = StagingPlan::new(total, chunk, slots)?;
        let mem = src_dev.alloc_pinned(plan.memory_bytes())?;
        Ok(StagedCopier {
            ring: StagingRing::new(plan, mem, Duration::from_secs(30))?,
            out_stream: src_dev.stream()?,
            in_stream: dst_dev.stream()?,
        })
    }

    /// `dst = src` (both of the planned length, on the planned devices).
    pub fn copy(
        &mut self,
        src: &crate::DeviceBuffer,
        dst: &crate::DeviceBuffer,
    ) -> Result<(), Error> {
        use crate::DeviceMemory;
        let total = self.ring.plan().total;
        if src.len() != total || dst.len() != total {
            return Err(Error::InvalidArgument(format!(
                "staged copy planned for {total} bytes, given {} into {}",
                src.len(),
                dst.len()
            )));
        }
        for (what, b, s) in [
            ("source", src.device(), &self.out_stream),
            ("destination", dst.device(), &self.in_stream),
        ] {
            if b.ordinal() != s.device().ordinal() {
                return Err(Error::InvalidArgument(format!(
                    "staged copy {what} is on another device than planned"
                )));
            }
        }
        self.ring.reset();
        let (ring, out_stream, in_stream) = (&self.ring, &self.out_stream, &self.in_stream);
        std::thread::scope(|s| {
            let sender =
                s.spawn(|| ring.send(|c, slot| out_stream.copy_to_host(slot, src, c.offset)));
            let r = ring.receive(|c, slot| in_stream.copy_from_host(dst, c.offset, slot));
            let s = sender
                .join()
                .unwrap_or_else(|_| Err(Error::Transfer("the staging sender panicked".into())));
            r.and(s)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU8;

    #[repr(C, align(64))]
    #[derive(Clone, Copy)]
    struct Line([u8; 64]);

    /// 64-byte-aligned host memory for the tests.
    struct Aligned(Vec<Line>);

    // SAFETY: the Vec is never resized, so its buffer does not move.
    unsafe impl StagingMemory for Aligned {
        fn as_mut_ptr(&mut self) -> *mut u8 {
            self.0.as_mut_ptr() as *mut u8
        }
        fn len(&self) -> usize {
            self.0.len() * 64
        }
    }

    fn ring_for(plan: StagingPlan) -> StagingRing<Aligned> {
        let mem = Aligned(vec![Line([0; 64]); plan.memory_bytes().div_ceil(64)]);
        StagingRing::new(plan, mem, Duration::from_secs(10)).unwrap()
    }

    /// Runs a transfer with memcpy stand-ins for the device copies and checks
    /// both the data and that no slot is ever written while unread.
    fn transfer(total: usize, chunk: usize, slots: usize, jitter: bool) {
        let plan = StagingPlan::new(total, chunk, slots).unwrap();
        let ring = ring_for(plan);
        let src: Vec<u8> = (0..total).map(|i| (i * 131 + total) as u8).collect();
        let mut dst = vec![0u8; total];
        // Slot states: 0 free, 1 filling, 2 full, 3 draining.
        let state: Vec<AtomicU8> = (0..slots).map(|_| AtomicU8::new(0)).collect();
        std::thread::scope(|s| {
            let sender = s.spawn(|| {
                ring.send(|c, slot| {
                    assert_eq!(
                        state[c.slot].swap(1, Ordering::AcqRel),
                        0,
                        "filling a slot not yet drained: {c:?}"
                    );
                    slot.copy_from_slice(&src[c.offset..c.offset + c.len]);
                    if jitter && c.index % 3 == 0 {
                        std::thread::yield_now();
                    }
                    state[c.slot].store(2, Ordering::Release);
                    Ok(())
                })
            });
            ring.receive(|c, slot| {
                assert_eq!(
                    state[c.slot].swap(3, Ordering::AcqRel),
                    2,
                    "draining a slot not filled: {c:?}"
                );
                dst[c.offset..c.offset + c.len].copy_from_slice(slot);
                if jitter && c.index % 2 == 0 {
                    std::thread::yield_now();
                }
                state[c.slot].store(0, Ordering::Release);
                Ok(())
            })
            .unwrap();
            sender.join().unwrap().unwrap();
        });
        assert_eq!(dst, src, "total {total} chunk {chunk} slots {slots}");
        assert_eq!(ring.filled(), plan.chunks());
        assert_eq!(ring.drained(), plan.chunks());
    }

    #[test]
    fn transfers_every_shape() {
        for total in [0usize, 1, 63, 64, 65, 1000, 4096, 100_003] {
            for chunk in [1usize, 7, 64, 4096] {
                if total / chunk > 20_000 {
                    continue;
                }
                for slots in [1usize, 2, 3, 4] {
                    transfer(total, chunk, slots, total % 2 == 1);
                }
            }
        }
    }

    #[test]
    fn a_reset_ring_runs_another_transfer() {
        let plan = StagingPlan::new(100, 16, 2).unwrap();
        let mut ring = ring_for(plan);
        for round in 0..3u8 {
            let mut dst = [0u8; 100];
            std::thread::scope(|s| {
                let sender = s.spawn(|| {
                    ring.send(|_, slot| {
                        slot.fill(round + 1);
                        Ok(())
                    })
                });
                ring.receive(|c, slot| {
                    dst[c.offset..c.offset + c.len].copy_from_slice(slot);
                    Ok(())
                })
                .unwrap();
                sender.join().unwrap().unwrap();
            });
            assert!(dst.iter().all(|&b| b == round + 1));
            ring.reset();
        }
    }

    /// `send` and `receive` take `&self`: a second transfer on a ring that
    /// was not reset ran on the first one's counters, the receiver taking
    /// stale slots as filled (and the sender overwriting slots being read).
    #[test]
    fn a_second_transfer_without_reset_is_refused() {
        let plan = StagingPlan::new(64, 16, 2).unwrap();
        let mut ring = ring_for(plan);
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                ring.send(|_, slot| {
                    slot.fill(0xAA);
                    Ok(())
                })
            });
            ring.receive(|_, _| Ok(())).unwrap();
            t.join().unwrap().unwrap();
        });
        let mut filled = false;
        let e = ring
            .send(|_, _| {
                filled = true;
                Ok(())
            })
            .unwrap_err();
        assert!(e.to_string().contains("reset()"), "{e}");
        assert!(!filled, "a slot was written");
        let mut drained = false;
        let e = ring
            .receive(|_, _| {
                drained = true;
                Ok(())
            })
            .unwrap_err();
        assert!(e.to_string().contains("reset()"), "{e}");
        assert!(!drained, "a stale slot was read");
        // Refusing neither aborted the ring nor kept a side claimed.
        ring.reset();
        let mut dst = [0u8; 64];
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                ring.send(|_, slot| {
                    slot.fill(0xBB);
                    Ok(())
                })
            });
            ring.receive(|c, slot| {
                dst[c.offset..c.offset + c.len].copy_from_slice(slot);
                Ok(())
            })
            .unwrap();
            t.join().unwrap().unwrap();
        });
        assert!(dst.iter().all(|&b| b == 0xBB));
    }

    #[test]
    fn chunks_cover_the_transfer_once() {
        let p = StagingPlan::new(10, 4, 2).unwrap();
        let cs: Vec<Chunk> = (0..p.chunks()).map(|i| p.chunk(i)).collect();
        assert_eq!(
            cs,
            vec![
                Chunk {
                    index: 0,
                    slot: 0,
                    offset: 0,
                    len: 4
                },
                Chunk {
                    index: 1,
                    slot: 1,
                    offset: 4,
                    len: 4
                },
                Chunk {
                    index: 2,
                    slot: 0,
                    offset: 8,
                    len: 2
                },
            ]
        );
        assert!(p.may_fill(1, 0) && !p.may_fill(2, 0) && p.may_fill(2, 1));
        assert!(!p.may_drain(0, 0) && p.may_drain(0, 1));
    }

    /// With two slots the sender fills chunk 1 while chunk 0 is being
    /// drained (the copies overlap); with one slot it cannot.
    #[test]
    fn double_buffering_overlaps_and_single_buffering_does_not() {
        for (slots, overlaps) in [(2usize, true), (1, false)] {
            let ring = ring_for(StagingPlan::new(64, 16, slots).unwrap());
            let mut saw_overlap = false;
            std::thread::scope(|s| {
                let sender = s.spawn(|| {
                    ring.send(|_, slot| {
                        slot.fill(1);
                        Ok(())
                    })
                });
                ring.receive(|c, _| {
                    if c.index == 0 {
                        let start = Instant::now();
                        while ring.filled() < 2 && start.elapsed() < Duration::from_millis(200) {
                            std::thread::yield_now();
                        }
                        saw_overlap = ring.filled() >= 2;
                    }
                    Ok(())
                })
                .unwrap();
                sender.join().unwrap().unwrap();
            });
            assert_eq!(saw_overlap, overlaps, "{slots} slot(s)");
        }
    }

    #[test]
    fn a_stalled_peer_times_out_and_an_error_aborts_both_sides() {
        let plan = StagingPlan::new(64, 16, 1).unwrap();
        let mut ring = ring_for(plan);
        ring.timeout = Duration::from_millis(50);
        // No receiver: the second chunk never gets a slot.
        let e = ring.send(|_, _| Ok(())).unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");

        let ring = ring_for(plan);
        std::thread::scope(|s| {
            let sender = s.spawn(|| {
                ring.send(|c, _| {
                    if c.index == 1 {
                        Err(Error::InvalidArgument("copy failed".into()))
                    } else {
                        Ok(())
                    }
                })
            });
            let r = ring.receive(|_, _| Ok(()));
            assert!(
                sender
                    .join()
                    .unwrap()
                    .unwrap_err()
                    .to_string()
                    .contains("copy failed")
            );
            // The other side's failure is a failed transfer, not a bad
            // argument (which `gpucomm bandwidth` skips as "cannot run
            // here").
            let e = r.unwrap_err();
            assert!(matches!(e, Error::Transfer(_)), "{e:?}");
            assert!(e.to_string().contains("aborted"), "{e}");
        });
    }

    #[test]
    fn bad_plans_and_memory_are_refused() {
        assert!(StagingPlan::new(10, 0, 2).is_err());
        assert!(StagingPlan::new(10, 4, 0).is_err());
        assert!(StagingPlan::new(10, usize::MAX, 2).is_err());
        let plan = StagingPlan::new(10, 4, 2).unwrap();
        assert!(
            StagingRing::new(plan, Aligned(vec![Line([0; 64])]), Duration::from_secs(1)).is_err()
        );
    }

    #[test]
    fn one_sender_at_a_time() {
        let ring = ring_for(StagingPlan::new(16, 16, 1).unwrap());
        std::thread::scope(|s| {
            let first = s.spawn(|| {
                ring.send(|_, _| {
                    std::thread::sleep(Duration::from_millis(50));
                    Ok(())
                })
            });
            std::thread::sleep(Duration::from_millis(10));
            let second = ring.send(|_, _| Ok(()));
            assert!(
                second
                    .unwrap_err()
                    .to_string()
                    .contains("already has a sender")
            );
            ring.receive(|_, _| Ok(())).unwrap();
            first.join().unwrap().unwrap();
        });
    }
}
