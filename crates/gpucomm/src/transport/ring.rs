//! Rings of slots in shared memory: the in-process and shared-memory transports.
//!
//! Each rank owns one *region* (a memfd segment; in-process ranks use the same
//! layout): a control block, then one inbound ring per (source rank, channel).
//! A sender writes into the ring in the receiver's region; the receiver reads
//! its own region. Layout (bytes):
//!
//! ```text
//! region:  [control 4096][ring(src 0, ch 0)][ring(src 0, ch 1)]...[ring(src n-1, ch C-1)]
//! control: doorbell u32 @0 | sleepers u32 @64 | state u32 @128 (0 alive, 1 closed, 2 aborted)
//! ring:    head u64 @0 | tail u64 @64 | NSLOTS slots of SLOT_BYTES @128
//! slot:    kind u32, _, seq u64, desc [u64;2], total u64, offset u64, len u64, zero-copy ref u64 (64 B)
//!          then PAYLOAD bytes (data, or for a segment reference: fd u64, segment length u64, offset u64)
//! ```
//!
//! `head` is written only by the sender, `tail` only by the receiver (single
//! producer, single consumer): a slot is published by a release store of its
//! *stamp* (word 0: message index + 1) and freed by a release store of
//! `tail`. A zero-copy send is complete when `tail` passes its slot, i.e.
//! when the receiver has finished reading the sender's memory. Before it
//! reads through a reference the receiver *claims* the slot (compare and
//! swap of the stamp to `stamp | CLAIMED`); a sender whose operation failed
//! *withdraws* an unclaimed reference the same way (`stamp | WITHDRAWN`)
//! before its buffer goes back to the caller, and waits for a claimed one
//! to be read, so the receiver never reads memory its owner has reused or
//! freed.
//!
//! Waiting: the engine spins first, then sleeps on its region's doorbell futex
//! after announcing itself in `sleepers`; whoever publishes or frees a slot
//! bumps the peer's doorbell and wakes it only if it sleeps, so the hot path
//! has no system call (the handshake, and the loom model that checks it, are
//! in `doorbell.rs`).

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::Duration;

use super::doorbell::{self, Bell};
use super::{CHANNELS, Link, MsgKind, OpDesc, RecvReq, SendReq, WaitHandle, XferState, ZeroCopy};
use crate::buffer::Segment;
use crate::error::{LinkError, TransportKind};

pub(crate) const NSLOTS: u64 = 16;
pub(crate) const SLOT_HDR: usize = 64;
pub(crate) const PAYLOAD: usize = 64 * 1024;
pub(crate) const SLOT_BYTES: usize = SLOT_HDR + PAYLOAD;
const RING_HDR: usize = 128;
pub(crate) const RING_BYTES: usize = RING_HDR + NSLOTS as usize * SLOT_BYTES;
const CONTROL_BYTES: usize = 4096;

/// Peer segments a link keeps mapped (least recently used dropped first).
const PEER_SEGMENTS: usize = 64;

/// Stamp bit: the receiver is reading through the slot's reference.
const CLAIMED: u64 = 1 << 63;
/// Stamp bit: the sender took the slot's reference back (its operation
/// failed); the receiver must not read through it.
const WITHDRAWN: u64 = 1 << 62;

const KIND_DATA: u32 = 1;
const KIND_DESC: u32 = 2;
const KIND_REF_ADDR: u32 = 3;
const KIND_REF_SEG: u32 = 4;
const KIND_REF_CMA: u32 = 5;
/// A message kind that points at the sender's memory (read in place).
fn is_ref(kind: u32) -> bool {
    matches!(kind, KIND_REF_ADDR | KIND_REF_SEG | KIND_REF_CMA)
}

/// Staging for receive-and-reduce through cross-memory attach.
const CMA_STAGE: usize = 256 * 1024;

pub(crate) const STATE_ALIVE: u32 = 0;
pub(crate) const STATE_CLOSED: u32 = 1;
pub(crate) const STATE_ABORTED: u32 = 2;

/// Bytes of a region for `world` ranks; `None` when that overflows.
pub(crate) fn region_bytes(world: usize) -> Option<usize> {
    world
        .checked_mul(CHANNELS * RING_BYTES)?
        .checked_add(CONTROL_BYTES)
}

/// A rank's region, with typed accessors.
#[derive(Clone)]
pub(crate) struct Region {
    seg: Arc<Segment>,
}

impl Region {
    pub fn create(world: usize) -> Result<Region, crate::Error> {
        let len = region_bytes(world).ok_or_else(|| {
            crate::Error::InvalidArgument(format!("a region for {world} ranks is too large"))
        })?;
        Ok(Region {
            seg: Segment::create(len, "gpucomm-region")?,
        })
    }
    pub fn from_segment(seg: Arc<Segment>) -> Region {
        Region { seg }
    }
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= self.seg.len());
        // SAFETY: in bounds, 4-aligned (offsets are multiples of 64), and the
        // mapping lives as long as `self`; all shared words are only accessed
        // atomically.
        unsafe { &*(self.seg.ptr().add(off) as *const AtomicU32) }
    }
    pub fn doorbell(&self) -> &AtomicU32 {
        self.u32_at(0)
    }
    pub fn sleepers(&self) -> &AtomicU32 {
        self.u32_at(64)
    }
    pub fn state(&self) -> &AtomicU32 {
        self.u32_at(128)
    }
    fn ring(&self, src: usize, ch: usize) -> Ring {
        let off = CONTROL_BYTES + (src * CHANNELS + ch) * RING_BYTES;
        assert!(off + RING_BYTES <= self.seg.len(), "ring out of region");
        // SAFETY: in bounds (asserted).
        Ring {
            base: unsafe { self.seg.ptr().add(off) },
        }
    }

    /// Wakes the owner of this region if it sleeps on its doorbell (after
    /// a release store that gave it work; [`doorbell::ring`]).
    pub fn wake(&self) {
        doorbell::ring(self);
    }
}

/// The region's doorbell words, with futex system calls.
impl Bell for Region {
    fn announce(&self) {
        self.sleepers().fetch_add(1, Ordering::SeqCst);
    }
    fn retire(&self) {
        self.sleepers().fetch_sub(1, Ordering::SeqCst);
    }
    fn sleepers(&self) -> u32 {
        Region::sleepers(self).load(Ordering::Relaxed)
    }
    fn bell(&self) -> u32 {
        self.doorbell().load(Ordering::SeqCst)
    }
    fn bump(&self) {
        self.doorbell().fetch_add(1, Ordering::SeqCst);
    }
    fn fence(&self) {
        fence(Ordering::SeqCst);
    }
    fn wait(&self, v: u32, max: Duration) {
        futex_wait(self.doorbell(), v, max);
    }
    fn wake_all(&self) {
        futex_wake(self.doorbell());
    }
}

#[derive(Clone, Copy)]
struct Ring {
    base: *mut u8,
}

impl Ring {
    fn head(&self) -> &AtomicU64 {
        // SAFETY: the ring header is inside a live mapping (see Region::ring),
        // 64-aligned, accessed only atomically.
        unsafe { &*(self.base as *const AtomicU64) }
    }
    fn tail(&self) -> &AtomicU64 {
        // SAFETY: as for head.
        unsafe { &*(self.base.add(64) as *const AtomicU64) }
    }
    fn slot(&self, i: u64) -> *mut u8 {
        // SAFETY: i % NSLOTS < NSLOTS, inside the ring.
        unsafe { self.base.add(RING_HDR + (i % NSLOTS) as usize * SLOT_BYTES) }
    }
}

#[derive(Clone, Copy, Debug)]
struct SlotHdr {
    kind: u32,
    seq: u64,
    desc: [u64; 2],
    total: u64,
    offset: u64,
    len: u64,
    zref: u64,
}

/// The slot's stamp: message index + 1 once published (word 0, atomic).
/// The receiver polls the stamp of the slot it expects, in the same cache
/// line as the header, instead of a separate head counter.
fn stamp(slot: *mut u8) -> &'static AtomicU64 {
    // SAFETY: word 0 of a slot inside a live mapping, 64-aligned; only ever
    // accessed atomically. The 'static is local to the callers, which never
    // keep the reference beyond the link's (and so the mapping's) life.
    unsafe { &*(slot as *const AtomicU64) }
}

/// Writes the header (words 1..8) then publishes the slot with its stamp.
fn write_hdr(slot: *mut u8, h: &SlotHdr, msg_index: u64) {
    let w = slot as *mut u64;
    // SAFETY: the slot is ours to write (fewer than NSLOTS in flight) and
    // 64-aligned; the release store of the stamp orders these writes (and
    // the payload's) before the receiver's acquire load.
    unsafe {
        w.add(1).write((h.kind as u64) << 56 | h.len);
        w.add(2).write(h.seq);
        w.add(3).write(h.desc[0]);
        w.add(4).write(h.desc[1]);
        w.add(5).write(h.total);
        w.add(6).write(h.offset);
        w.add(7).write(h.zref);
    }
    stamp(slot).store(msg_index + 1, Ordering::Release);
}

fn read_hdr(slot: *const u8) -> SlotHdr {
    let w = slot as *const u64;
    // SAFETY: the slot was published (its stamp was loaded with acquire).
    unsafe {
        let kl = w.add(1).read();
        SlotHdr {
            kind: (kl >> 56) as u32,
            len: kl & ((1 << 56) - 1),
            seq: w.add(2).read(),
            desc: [w.add(3).read(), w.add(4).read()],
            total: w.add(5).read(),
            offset: w.add(6).read(),
            zref: w.add(7).read(),
        }
    }
}

/// How a link learns that its peer is gone.
pub(crate) enum Liveness {
    /// A thread of this process: the peer's region state says closed/aborted.
    Thread,
    /// A process: its pidfd becomes readable when it exits.
    Process { pid: u32, pidfd: Option<OwnedFd> },
}

/// A link over rings in shared memory (in-process or between processes).
pub(crate) struct RingLink {
    kind: TransportKind,
    mine: Region,
    theirs: Region,
    me: usize,
    peer: usize,
    liveness: Liveness,
    /// The peer's segments mapped so far, by id, with when each was last
    /// used (at most [`PEER_SEGMENTS`]: the least recently used goes).
    peer_segments: HashMap<u64, (Arc<Segment>, u64)>,
    /// References resolved so far (the clock of `peer_segments`).
    resolved: u64,
    /// Last tail seen per outbound ring: read the receiver's line only when
    /// the ring looks full.
    tail_cache: [u64; CHANNELS],
    /// Cross-memory attach to the peer works (probed at setup).
    cma: bool,
    cma_stage: Vec<u64>,
}

// SAFETY: the raw pointers inside Region/Ring point into Arc'd mappings that
// live as long as the link; cross-thread access goes through atomics.
unsafe impl Send for RingLink {}

impl RingLink {
    pub fn new(
        kind: TransportKind,
        me: usize,
        peer: usize,
        mine: Region,
        theirs: Region,
        liveness: Liveness,
    ) -> Self {
        RingLink {
            kind,
            mine,
            theirs,
            me,
            peer,
            liveness,
            peer_segments: HashMap::new(),
            resolved: 0,
            tail_cache: [0; CHANNELS],
            cma: false,
            cma_stage: Vec::new(),
        }
    }

    fn out_ring(&self, ch: usize) -> Ring {
        self.theirs.ring(self.me, ch)
    }
    fn in_ring(&self, ch: usize) -> Ring {
        self.mine.ring(self.peer, ch)
    }

    fn peer_state(&self) -> Result<(), LinkError> {
        match self.theirs.state().load(Ordering::Acquire) {
            STATE_ALIVE => Ok(()),
            STATE_ABORTED => Err(LinkError {
                failure: crate::error::Failure::Aborted(format!("peer {} aborted", self.peer)),
            }),
            _ => Err(LinkError::gone(format!(
                "peer {} closed its communicator",
                self.peer
            ))),
        }
    }

    /// Enables cross-memory attach if reading `probe` (the address of the
    /// peer's [`CMA_PROBE`]) from the peer process returns the magic value.
    pub fn probe_cma(&mut self, probe: usize) -> bool {
        let Liveness::Process { pid, .. } = self.liveness else {
            return false;
        };
        let mut v = 0u64;
        let ok = cma_copy(pid, &mut v as *mut u64 as *mut u8, probe, 8).is_ok();
        self.cma = ok && v == CMA_MAGIC;
        if self.cma {
            self.cma_stage = vec![0u64; CMA_STAGE / 8];
        }
        self.cma
    }

    /// Reads `n` bytes at the sender's `addr` into the posted receive at
    /// offset `done` (through a staging buffer for a receive-and-reduce).
    fn cma_read(
        &mut self,
        req: &RecvReq,
        done: usize,
        addr: usize,
        n: usize,
    ) -> Result<(), LinkError> {
        let Liveness::Process { pid, .. } = self.liveness else {
            return Err(LinkError::protocol(
                "cross-memory reference between threads",
            ));
        };
        if !self.cma {
            return Err(LinkError::protocol(
                "cross-memory reference on a link without it",
            ));
        }
        let err = |e: std::io::Error| {
            LinkError::gone(format!("process_vm_readv from process {pid}: {e}"))
        };
        match req.reduce {
            None => {
                // SAFETY: dst is valid for req.len >= done + n bytes.
                cma_copy(pid, unsafe { req.dst.add(done) }, addr, n).map_err(err)
            }
            Some((a, r)) => {
                let stage = self.cma_stage.as_mut_ptr() as *mut u8;
                let mut off = 0;
                while off < n {
                    let m = (n - off).min(CMA_STAGE);
                    cma_copy(pid, stage, addr + off, m).map_err(err)?;
                    // SAFETY: dst/a valid for req.len bytes (engine contract),
                    // stage holds m bytes, 8-aligned, disjoint from dst.
                    unsafe { r.apply(req.dst.add(done + off), a.add(done + off), stage, m) };
                    off += m;
                }
                Ok(())
            }
        }
    }

    /// Resolves a zero-copy reference to a readable pointer of `len` bytes.
    fn resolve(
        &mut self,
        h: &SlotHdr,
        slot: *const u8,
        len: usize,
    ) -> Result<*const u8, LinkError> {
        match h.kind {
            KIND_REF_ADDR => {
                if self.kind != TransportKind::InProcess {
                    return Err(LinkError::protocol(
                        "address reference over a process boundary",
                    ));
                }
                Ok(h.zref as usize as *const u8)
            }
            _ => {
                let Liveness::Process { pid, .. } = self.liveness else {
                    return Err(LinkError::protocol("segment reference between threads"));
                };
                // SAFETY: payload of a published slot, 3 words.
                let (fd, seg_len, off) = unsafe {
                    let p = slot.add(SLOT_HDR) as *const u64;
                    (
                        p.read() as i32,
                        p.add(1).read() as usize,
                        p.add(2).read() as usize,
                    )
                };
                if off.checked_add(len).is_none_or(|e| e > seg_len) {
                    return Err(LinkError::protocol(format!(
                        "segment reference [{off}, +{len}) outside a {seg_len}-byte segment"
                    )));
                }
                self.resolved += 1;
                let now = self.resolved;
                let seg = match self.peer_segments.get_mut(&h.zref) {
                    Some((s, used)) if s.len() >= seg_len => {
                        *used = now;
                        s.clone()
                    }
                    _ => {
                        let s = Segment::open_peer(pid, fd, seg_len).map_err(|e| {
                            LinkError::protocol(format!(
                                "cannot map peer segment (pid {pid}, fd {fd}): {e}"
                            ))
                        })?;
                        // Segment ids are never reused: a buffer the peer
                        // freed is never asked for again, so keep only the
                        // most recently used mappings (their fds and pages).
                        if self.peer_segments.len() >= PEER_SEGMENTS
                            && let Some(old) = self
                                .peer_segments
                                .iter()
                                .min_by_key(|(_, (_, used))| *used)
                                .map(|(&id, _)| id)
                        {
                            self.peer_segments.remove(&old);
                        }
                        self.peer_segments.insert(h.zref, (s.clone(), now));
                        s
                    }
                };
                // SAFETY: off + len <= seg_len <= mapping length (checked above).
                Ok(unsafe { seg.ptr().add(off) as *const u8 })
            }
        }
    }
}

impl Link for RingLink {
    fn kind(&self) -> TransportKind {
        self.kind
    }

    fn zero_copy_ok(&self, zc: &ZeroCopy) -> bool {
        match zc {
            ZeroCopy::Addr(_) => self.kind == TransportKind::InProcess,
            ZeroCopy::Segment { .. } => self.kind == TransportKind::Shm,
            ZeroCopy::Remote(_) => self.kind == TransportKind::Shm && self.cma,
        }
    }

    fn poll_send(
        &mut self,
        ch: usize,
        req: &SendReq,
        st: &mut XferState,
    ) -> Result<bool, LinkError> {
        let ring = self.out_ring(ch);
        let desc = req.desc.encode();
        if st.started && req.zero_copy.is_some() {
            // Waiting for the receiver to finish reading our memory.
            if ring.tail().load(Ordering::Acquire) > st.slot {
                return Ok(true);
            }
            return Ok(false);
        }
        let mut progressed = false;
        loop {
            let head = ring.head().load(Ordering::Relaxed);
            if head - self.tail_cache[ch] >= NSLOTS {
                self.tail_cache[ch] = ring.tail().load(Ordering::Acquire);
                if head - self.tail_cache[ch] >= NSLOTS {
                    break;
                }
            }
            let slot = ring.slot(head);
            let mut h = SlotHdr {
                kind: match req.kind {
                    MsgKind::Desc => KIND_DESC,
                    MsgKind::Data => KIND_DATA,
                },
                seq: req.seq,
                desc,
                total: req.len as u64,
                offset: st.done as u64,
                len: 0,
                zref: 0,
            };
            match req.zero_copy {
                Some(ZeroCopy::Addr(a)) if req.kind == MsgKind::Data => {
                    h.kind = KIND_REF_ADDR;
                    h.len = req.len as u64;
                    h.zref = a as u64;
                }
                Some(ZeroCopy::Remote(a)) if req.kind == MsgKind::Data => {
                    h.kind = KIND_REF_CMA;
                    h.len = req.len as u64;
                    h.zref = a as u64;
                }
                Some(ZeroCopy::Segment {
                    id,
                    fd,
                    seg_len,
                    offset,
                }) if req.kind == MsgKind::Data => {
                    h.kind = KIND_REF_SEG;
                    h.len = req.len as u64;
                    h.zref = id;
                    // SAFETY: our slot's payload, 3 words.
                    unsafe {
                        let p = slot.add(SLOT_HDR) as *mut u64;
                        p.write(fd as u64);
                        p.add(1).write(seg_len as u64);
                        p.add(2).write(offset as u64);
                    }
                }
                _ => {
                    let n = (req.len - st.done).min(PAYLOAD);
                    h.len = n as u64;
                    if n > 0 {
                        // SAFETY: req.data is valid for req.len bytes (engine
                        // contract); the slot payload holds PAYLOAD bytes.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                req.data.add(st.done),
                                slot.add(SLOT_HDR),
                                n,
                            )
                        };
                    }
                }
            }
            write_hdr(slot, &h, head);
            ring.head().store(head + 1, Ordering::Relaxed);
            progressed = true;
            st.started = true;
            if is_ref(h.kind) {
                st.slot = head;
                st.zero_copy = true;
                self.theirs.wake();
                return Ok(false);
            }
            st.done += h.len as usize;
            if st.done >= req.len {
                self.theirs.wake();
                return Ok(true);
            }
        }
        if progressed {
            self.theirs.wake();
        }
        Ok(false)
    }

    fn poll_recv(
        &mut self,
        ch: usize,
        req: &RecvReq,
        st: &mut XferState,
    ) -> Result<bool, LinkError> {
        let ring = self.in_ring(ch);
        loop {
            let tail = ring.tail().load(Ordering::Relaxed);
            let slot = ring.slot(tail);
            if stamp(slot).load(Ordering::Acquire) != tail + 1 {
                return Ok(false);
            }
            let h = read_hdr(slot);
            let theirs = OpDesc::decode(h.desc);
            if theirs != req.desc {
                return Err(LinkError::mismatch(
                    req.desc.to_string(),
                    theirs.to_string(),
                ));
            }
            let want_kind = match req.kind {
                MsgKind::Desc => h.kind == KIND_DESC,
                MsgKind::Data => h.kind == KIND_DATA || is_ref(h.kind),
            };
            if !want_kind {
                return Err(LinkError::mismatch(
                    format!("{} expecting a {:?} message", req.desc, req.kind),
                    format!("{} sending message kind {}", theirs, h.kind),
                ));
            }
            if h.total != req.len as u64 {
                return Err(LinkError::protocol(format!(
                    "message of {} bytes for a receive of {} bytes",
                    h.total, req.len
                )));
            }
            if h.kind == KIND_DATA && h.len > PAYLOAD as u64 {
                return Err(LinkError::protocol(format!(
                    "chunk of {} bytes in a {PAYLOAD}-byte slot",
                    h.len
                )));
            }
            if h.offset != st.done as u64 || h.len > (req.len - st.done) as u64 {
                return Err(LinkError::protocol(format!(
                    "chunk [{}, +{}) out of order (expected offset {}, {} bytes left)",
                    h.offset,
                    h.len,
                    st.done,
                    req.len - st.done
                )));
            }
            let n = h.len as usize;
            if let Some((_, r)) = req.reduce
                && n % r.dtype.size() != 0
            {
                return Err(LinkError::protocol(format!(
                    "chunk of {n} bytes is not whole {}-byte elements",
                    r.dtype.size()
                )));
            }
            if is_ref(h.kind)
                && stamp(slot)
                    .compare_exchange(
                        tail + 1,
                        (tail + 1) | CLAIMED,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_err()
            {
                // Only the sender changes a published stamp: it withdrew the
                // reference, as its operation failed.
                return Err(LinkError {
                    failure: crate::error::Failure::Aborted(format!(
                        "peer {} withdrew its message (its operation failed)",
                        self.peer
                    )),
                });
            }
            if h.kind == KIND_REF_CMA {
                self.cma_read(req, st.done, h.zref as usize, n)?;
                st.done += n;
                ring.tail().store(tail + 1, Ordering::Release);
                self.theirs.wake();
                if st.done >= req.len {
                    return Ok(true);
                }
                continue;
            }
            let src: *const u8 = match h.kind {
                KIND_REF_ADDR | KIND_REF_SEG => self.resolve(&h, slot, n)?,
                // SAFETY: payload of a published slot.
                _ => unsafe { slot.add(SLOT_HDR) },
            };
            if n > 0 {
                // SAFETY: dst valid for req.len bytes (engine contract), the
                // source valid for n bytes (slot payload or resolved, bounds
                // checked reference), disjoint from dst.
                unsafe {
                    let dst = req.dst.add(st.done);
                    match req.reduce {
                        None => std::ptr::copy_nonoverlapping(src, dst, n),
                        Some((a, r)) => r.apply(dst, a.add(st.done), src, n),
                    }
                }
            }
            st.done += n;
            ring.tail().store(tail + 1, Ordering::Release);
            self.theirs.wake();
            if st.done >= req.len {
                return Ok(true);
            }
        }
    }

    fn check_peer(&mut self) -> Result<(), LinkError> {
        self.peer_state()?;
        if let Liveness::Process { pid, pidfd } = &self.liveness {
            match pidfd {
                Some(fd) => {
                    let mut fds = [libc::pollfd {
                        fd: std::os::fd::AsRawFd::as_raw_fd(fd),
                        events: libc::POLLIN,
                        revents: 0,
                    }];
                    // SAFETY: one valid pollfd, zero timeout.
                    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
                    if n > 0 {
                        return Err(LinkError::gone(format!("process {pid} exited")));
                    }
                }
                None => {
                    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                        return Err(LinkError::gone(format!("process {pid} exited")));
                    }
                }
            }
        }
        Ok(())
    }

    fn wait_handle(&self) -> WaitHandle {
        WaitHandle::Doorbell
    }

    fn withdraw(&mut self, ch: usize, st: &XferState, give_up: std::time::Instant) {
        if !st.zero_copy {
            return;
        }
        let ring = self.out_ring(ch);
        let published = st.slot + 1;
        if ring.tail().load(Ordering::Acquire) > st.slot
            || stamp(ring.slot(st.slot))
                .compare_exchange(
                    published,
                    published | WITHDRAWN,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            return;
        }
        // Claimed: the receiver is copying out of our memory and waits on
        // nothing until it is done. A thread of this process always
        // finishes; another process is waited for while it lives, up to
        // `give_up` (one that is stopped could hold us for ever).
        let process = matches!(self.liveness, Liveness::Process { .. });
        while ring.tail().load(Ordering::Acquire) <= st.slot {
            if process && (std::time::Instant::now() >= give_up || self.check_peer().is_err()) {
                return;
            }
            std::thread::yield_now();
        }
    }

    fn shutdown(&mut self) {
        self.theirs.wake();
    }
}

/// A word every process publishes the address of, so peers can check that
/// cross-memory attach works (and reads the right process) before using it.
pub(crate) static CMA_PROBE: AtomicU64 = AtomicU64::new(CMA_MAGIC);
const CMA_MAGIC: u64 = 0x6770_636f_6d6d_434d;

/// Copies `n` bytes at `addr` in process `pid` to `dst` (all of them, or an error).
fn cma_copy(pid: u32, dst: *mut u8, addr: usize, n: usize) -> std::io::Result<()> {
    let mut done = 0;
    while done < n {
        let local = libc::iovec {
            iov_base: dst.wrapping_add(done) as *mut libc::c_void,
            iov_len: n - done,
        };
        let remote = libc::iovec {
            iov_base: (addr + done) as *mut libc::c_void,
            iov_len: n - done,
        };
        // SAFETY: `local` describes memory this process may write (the
        // caller's contract); the kernel validates the remote range and
        // fails with EFAULT instead of touching anything else.
        let r = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if r == 0 {
            return Err(std::io::Error::other("process_vm_readv read nothing"));
        }
        done += r as usize;
    }
    Ok(())
}

/// Opens a pidfd for a peer process (None if the kernel refuses).
pub(crate) fn pidfd(pid: u32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid as i32)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

fn futex_wait(word: &AtomicU32, val: u32, max: Duration) {
    let ts = libc::timespec {
        tv_sec: max.as_secs() as libc::time_t,
        tv_nsec: max.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 that stays mapped; a
    // relative timeout; errors (EAGAIN, EINTR, ETIMEDOUT) just return.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            val,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 (shared, not PRIVATE, so it
    // works across processes mapping the same memfd).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0,
            0,
            0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{DataType, Reducer};
    use gpucomm_algo::ReduceOp;

    /// A region size that does not fit a usize is `None` (it wrapped in
    /// release builds, a small region for many rings), and `create` says so.
    #[test]
    fn region_size_overflow_is_an_error() {
        assert_eq!(
            region_bytes(2),
            Some(CONTROL_BYTES + 2 * CHANNELS * RING_BYTES)
        );
        assert_eq!(region_bytes(usize::MAX / RING_BYTES + 1), None);
        assert!(matches!(
            Region::create(usize::MAX),
            Err(crate::Error::InvalidArgument(_))
        ));
    }

    /// A peer (buggy, or not ours) that cuts a message of f32s into a
    /// chunk of 3 bytes: refused before anything is reduced (the reduction
    /// dropped the odd bytes and the next chunk landed misaligned).
    #[test]
    fn a_chunk_of_part_of_an_element_is_refused_before_reducing() {
        let (r0, r1) = (Region::create(2).unwrap(), Region::create(2).unwrap());
        let tx = RingLink::new(
            TransportKind::InProcess,
            0,
            1,
            r0.clone(),
            r1.clone(),
            Liveness::Thread,
        );
        let mut rx = RingLink::new(TransportKind::InProcess, 1, 0, r1, r0, Liveness::Thread);
        let desc = OpDesc {
            coll: 1,
            dtype: 0,
            op: 0,
            algo: 0,
            arg: 0,
            count: 2,
        };
        let h = SlotHdr {
            kind: KIND_DATA,
            seq: 0,
            desc: desc.encode(),
            total: 8,
            offset: 0,
            len: 3,
            zref: 0,
        };
        write_hdr(tx.out_ring(0).slot(0), &h, 0);
        let (mut acc, own) = ([1.0f32; 2], [2.0f32; 2]);
        let req = RecvReq {
            kind: MsgKind::Data,
            desc,
            dst: acc.as_mut_ptr() as *mut u8,
            len: 8,
            reduce: Some((
                own.as_ptr() as *const u8,
                Reducer {
                    dtype: DataType::F32,
                    op: ReduceOp::Sum,
                },
            )),
        };
        let e = rx
            .poll_recv(0, &req, &mut XferState::default())
            .unwrap_err();
        let e = format!("{:?}", e.failure);
        assert!(e.contains("not whole 4-byte elements"), "{e}");
        assert_eq!(acc, [1.0; 2]);
    }
}
