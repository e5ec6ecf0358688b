//! The progress engine: runs one rank's steps of a schedule on its links.
//!
//! A [`Plan`] is a schedule compiled for one rank: its steps, plus one FIFO
//! queue per `(peer, channel, direction)` (the schedule's matching rule), plus
//! the descriptor messages exchanged with peers this rank talks to in one
//! direction only. [`execute`] polls the head of every queue whose
//! dependencies are met and runs local steps as they become ready, never
//! blocking inside a link. When nothing moves it spins (~20 us), then yields,
//! then sleeps on the rank's doorbell futex (shared memory) or `poll`s the
//! sockets (TCP), waking at least every few milliseconds to check the
//! timeout (a bound on each wait: it counts from the last progress, so a
//! transfer that keeps moving is never timed out), `abort()` and whether
//! peers are alive. Every exit path is an
//! error naming the operation, its sequence number, the peer and transport.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpucomm_algo::{Buf, Schedule, Slice, Step, StepKind};

use crate::dtype::Reducer;
use crate::error::{Error, Failure, LinkError, OpContext};
use crate::transport::doorbell;
use crate::transport::ring::Region;
use crate::transport::{
    CHANNELS, Link, MsgKind, OpDesc, RecvReq, SendReq, WaitHandle, XferState, ZeroCopy,
};

/// Sends of at least this many bytes go zero-copy when the link allows.
pub(crate) const ZERO_COPY_MIN: usize = 16 * 1024;
/// How long an idle engine polls before it yields or sleeps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Patience {
    /// Pure polling (no system call).
    pub spin: Duration,
    /// Then `sched_yield` until this much idle time.
    pub yield_until: Duration,
}

impl Patience {
    /// Every local rank can have a core: poll for 2 ms, as MPI libraries do,
    /// so both sides of a transfer stay on their cores.
    pub const DEDICATED: Patience = Patience {
        spin: Duration::from_millis(2),
        yield_until: Duration::from_millis(2),
    };
    /// More local ranks than cores: give the core away quickly.
    pub const SHARED: Patience = Patience {
        spin: Duration::from_micros(20),
        yield_until: Duration::from_micros(300),
    };

    /// The right patience for `local_ranks` ranks on this host.
    pub fn for_local_ranks(local_ranks: usize) -> Patience {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        if local_ranks <= cores {
            Patience::DEDICATED
        } else {
            Patience::SHARED
        }
    }
}
const LIVENESS_EVERY: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ItemKind {
    Send,
    Recv,
    RecvReduce,
    Copy,
    Reduce,
    DescSend,
    DescRecv,
}

#[derive(Clone, Debug)]
struct Item {
    kind: ItemKind,
    peer: usize,
    src: Slice,
    dst: Slice,
    deps: Vec<u32>,
}

#[derive(Clone, Debug)]
struct Stream {
    peer: usize,
    ch: usize,
    send: bool,
    items: Vec<u32>,
}

/// A schedule compiled for one rank.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    items: Vec<Item>,
    streams: Vec<Stream>,
    locals: Vec<u32>,
    /// Buffer lengths in elements: input, output, scratch.
    pub lens: [usize; 3],
    /// Peers this rank exchanges messages with.
    pub peers: Vec<usize>,
}

fn buf_index(b: Buf) -> usize {
    match b {
        Buf::Input => 0,
        Buf::Output => 1,
        Buf::Scratch => 2,
    }
}

const NO_SLICE: Slice = Slice::new(Buf::Scratch, 0, 0);

impl Plan {
    /// Compiles `rank`'s steps of `schedule`, checking every slice against
    /// the buffer lengths and every peer and channel against the job.
    pub fn compile(schedule: &Schedule, rank: usize, exchange_desc: bool) -> Result<Plan, Error> {
        let lens = [
            schedule.buffer_len(rank, Buf::Input),
            schedule.buffer_len(rank, Buf::Output),
            schedule.buffer_len(rank, Buf::Scratch),
        ];
        let steps = schedule.rank_steps(rank);
        Self::from_steps(&steps, rank, schedule.problem.nranks, lens, exchange_desc)
    }

    /// Compiles explicit steps (point-to-point calls build theirs by hand).
    pub fn from_steps(
        steps: &[Step],
        rank: usize,
        nranks: usize,
        lens: [usize; 3],
        exchange_desc: bool,
    ) -> Result<Plan, Error> {
        let bad = |what: String| {
            Error::InvalidArgument(format!("schedule for rank {rank} is malformed: {what}"))
        };
        let check = |s: &Slice| -> Result<(), Error> {
            if s.offset
                .checked_add(s.len)
                .is_none_or(|e| e > lens[buf_index(s.buf)])
            {
                return Err(bad(format!(
                    "slice {s:?} outside its buffer of {} elements",
                    lens[buf_index(s.buf)]
                )));
            }
            Ok(())
        };
        let mut items = Vec::with_capacity(steps.len() + 4);
        for (i, st) in steps.iter().enumerate() {
            if st.deps.iter().any(|&d| d as usize >= i) {
                return Err(bad(format!("step {i} depends on a later step")));
            }
            if st.channel as usize >= CHANNELS {
                return Err(bad(format!(
                    "step {i} uses channel {} (runtime has {CHANNELS})",
                    st.channel
                )));
            }
            let (kind, peer, src, dst) = match st.kind {
                StepKind::Send { peer, src } => (ItemKind::Send, peer, src, NO_SLICE),
                StepKind::Recv { peer, dst } => (ItemKind::Recv, peer, NO_SLICE, dst),
                StepKind::RecvReduce { peer, src, dst } => (ItemKind::RecvReduce, peer, src, dst),
                StepKind::Copy { src, dst } => (ItemKind::Copy, rank, src, dst),
                StepKind::Reduce { src, dst } => (ItemKind::Reduce, rank, src, dst),
            };
            if peer >= nranks || (st.kind.peer().is_some() && peer == rank) {
                return Err(bad(format!("step {i} talks to rank {peer}")));
            }
            check(&src)?;
            check(&dst)?;
            if matches!(
                kind,
                ItemKind::RecvReduce | ItemKind::Copy | ItemKind::Reduce
            ) && src.len != dst.len
            {
                return Err(bad(format!("step {i}: operands of different lengths")));
            }
            // Reduce kernels accept dst == src or disjoint operands only.
            if kind == ItemKind::Reduce && src.buf == dst.buf {
                let (a, b) = (src.offset, dst.offset);
                if a < b + dst.len && b < a + src.len {
                    return Err(bad(format!("step {i}: overlapping reduce operands")));
                }
            }
            if kind == ItemKind::RecvReduce && src.buf == dst.buf && src.offset != dst.offset {
                let (a, b) = (src.offset, dst.offset);
                if a < b + dst.len && b < a + src.len {
                    return Err(bad(format!("step {i}: partially overlapping operands")));
                }
            }
            items.push(Item {
                kind,
                peer,
                src,
                dst,
                deps: st.deps.clone(),
            });
        }
        // Peers and directions.
        let mut dir = vec![(false, false); nranks];
        // Elements sent to or received from each peer (a one-way peer's
        // descriptor announces them where messages count their own).
        let mut moved = vec![0usize; nranks];
        for it in &items {
            match it.kind {
                ItemKind::Send => {
                    dir[it.peer].0 = true;
                    moved[it.peer] += it.src.len;
                }
                ItemKind::Recv | ItemKind::RecvReduce => {
                    dir[it.peer].1 = true;
                    moved[it.peer] += it.dst.len;
                }
                _ => {}
            }
        }
        let peers: Vec<usize> = (0..nranks).filter(|&p| dir[p].0 || dir[p].1).collect();
        // Streams: descriptor messages first, then steps in order.
        let mut streams: Vec<Stream> = Vec::new();
        let stream_index =
            |peer: usize, ch: usize, send: bool, streams: &mut Vec<Stream>| -> usize {
                if let Some(i) = streams
                    .iter()
                    .position(|s| s.peer == peer && s.ch == ch && s.send == send)
                {
                    return i;
                }
                streams.push(Stream {
                    peer,
                    ch,
                    send,
                    items: Vec::new(),
                });
                streams.len() - 1
            };
        if exchange_desc {
            for &p in &peers {
                if dir[p].0 != dir[p].1 {
                    for (kind, send) in [(ItemKind::DescSend, true), (ItemKind::DescRecv, false)] {
                        let idx = items.len() as u32;
                        // No data: the slice only carries the length
                        // (`count_per_message`).
                        let len = Slice::new(Buf::Scratch, 0, moved[p]);
                        items.push(Item {
                            kind,
                            peer: p,
                            src: len,
                            dst: len,
                            deps: Vec::new(),
                        });
                        let s = stream_index(p, 0, send, &mut streams);
                        streams[s].items.push(idx);
                    }
                }
            }
        }
        let mut locals = Vec::new();
        for (i, st) in steps.iter().enumerate() {
            let it = &items[i];
            match it.kind {
                ItemKind::Send => {
                    let s = stream_index(it.peer, st.channel as usize, true, &mut streams);
                    streams[s].items.push(i as u32);
                }
                ItemKind::Recv | ItemKind::RecvReduce => {
                    let s = stream_index(it.peer, st.channel as usize, false, &mut streams);
                    streams[s].items.push(i as u32);
                }
                _ => locals.push(i as u32),
            }
        }
        Ok(Plan {
            items,
            streams,
            locals,
            lens,
            peers,
        })
    }
}

/// Everything one execution needs besides the plan.
pub(crate) struct Exec<'a> {
    pub ctx: OpContext,
    pub desc: OpDesc,
    /// Each message's descriptor counts that message's elements (point to
    /// point), not the call's.
    pub count_per_message: bool,
    pub elem: usize,
    pub reducer: Reducer,
    /// Base pointers of input, output, scratch.
    pub bases: [*mut u8; 3],
    pub links: &'a mut [Option<Box<dyn Link>>],
    /// Bound on each wait: a call fails when nothing has moved for this
    /// long (a transfer that keeps moving is not waiting).
    pub timeout: Duration,
    pub abort: &'a AtomicBool,
    pub region: Option<&'a Region>,
    pub patience: Patience,
    /// Finds a zero-copy reference for `bytes` bytes at a pointer.
    pub zero_copy: &'a dyn Fn(*const u8, usize) -> Option<ZeroCopy>,
}

impl Exec<'_> {
    fn ptr(&self, s: &Slice) -> *mut u8 {
        // SAFETY: the plan checked the slice against the buffer lengths and
        // the caller provides bases valid for those lengths.
        unsafe { self.bases[buf_index(s.buf)].add(s.offset * self.elem) }
    }

    fn fail(&self, peer: Option<usize>, failure: Failure) -> Error {
        let transport = peer.and_then(|p| self.links.get(p)?.as_ref().map(|l| l.kind()));
        Error::Op {
            ctx: OpContext {
                peer,
                transport,
                ..self.ctx.clone()
            },
            failure,
        }
    }

    fn link_err(&self, peer: usize, e: LinkError) -> Error {
        if self.abort.load(Ordering::Acquire) {
            // Our own abort closed the links: report the cause, not the symptom.
            return self.fail(
                Some(peer),
                Failure::Aborted("abort() called on this communicator".into()),
            );
        }
        self.fail(Some(peer), e.failure)
    }
}

/// Mutable per-execution state, kept apart from the plan so plans are shared.
#[derive(Default)]
pub(crate) struct ExecState {
    done: Vec<bool>,
    heads: Vec<usize>,
    xfer: Vec<XferState>,
    local_done: Vec<bool>,
}

/// Runs `plan` to completion or to the first error. On an error, sends
/// still in flight are withdrawn ([`Link::withdraw`]) before the buffers go
/// back to the caller: no peer reads them after this returns.
pub(crate) fn execute(plan: &Plan, ex: &mut Exec<'_>, state: &mut ExecState) -> Result<(), Error> {
    let r = run(plan, ex, state);
    if r.is_err() {
        let give_up = crate::comm::deadline_after(ex.timeout);
        // A finished send's state was reset: only those in flight have
        // anything to take back.
        for (s, st) in plan.streams.iter().zip(&state.xfer) {
            if s.send
                && let Some(Some(link)) = ex.links.get_mut(s.peer)
            {
                link.withdraw(s.ch, st, give_up);
            }
        }
    }
    r
}

fn run(plan: &Plan, ex: &mut Exec<'_>, state: &mut ExecState) -> Result<(), Error> {
    state.done.clear();
    state.done.resize(plan.items.len(), false);
    state.heads.clear();
    state.heads.resize(plan.streams.len(), 0);
    state.xfer.clear();
    state.xfer.resize(plan.streams.len(), XferState::default());
    state.local_done.clear();
    state.local_done.resize(plan.locals.len(), false);
    for &p in &plan.peers {
        if ex.links.get(p).is_none_or(|l| l.is_none()) {
            return Err(ex.fail(
                Some(p),
                Failure::Protocol(format!("no connection to rank {p}")),
            ));
        }
    }
    let mut remaining = plan.items.len();
    let uses_fd = plan.peers.iter().any(|&p| {
        matches!(
            ex.links[p].as_ref().map(|l| l.wait_handle()),
            Some(WaitHandle::Fd(_))
        )
    });
    let mut idle_since: Option<Instant> = None;
    let mut last_liveness = Instant::now();
    loop {
        let progress = pass(plan, ex, state, &mut remaining)?;
        if remaining == 0 {
            return Ok(());
        }
        if progress {
            idle_since = None;
            // abort() ends a transfer that keeps moving too (the timeout
            // bounds waits: a moving transfer is not waiting).
            if ex.abort.load(Ordering::Acquire) {
                return Err(ex.fail(
                    blocked_peer(plan, state),
                    Failure::Aborted("abort() called on this communicator".into()),
                ));
            }
            continue;
        }
        let now = Instant::now();
        let since = *idle_since.get_or_insert(now);
        let idle = now - since;
        let give_up = crate::comm::deadline(since, ex.timeout);
        if idle < ex.patience.spin {
            // One pause per pass: a pause costs ~40-140 cycles, more would
            // add latency to every small message.
            std::hint::spin_loop();
            continue;
        }
        if ex.abort.load(Ordering::Acquire) {
            return Err(ex.fail(
                blocked_peer(plan, state),
                Failure::Aborted("abort() called on this communicator".into()),
            ));
        }
        if now >= give_up {
            let peer = blocked_peer(plan, state);
            return Err(ex.fail(peer, Failure::Timeout(ex.timeout)));
        }
        if now - last_liveness >= LIVENESS_EVERY
            || idle < ex.patience.yield_until + ex.patience.spin && last_liveness < since
        {
            last_liveness = now;
            let mut gone = None;
            for &p in &plan.peers {
                // Only a peer this rank is waiting on right now matters: one
                // that finished and closed has already written everything it
                // will ever send us.
                if !waiting_on(plan, state, p) {
                    continue;
                }
                if let Some(l) = ex.links[p].as_mut()
                    && let Err(e) = l.check_peer()
                {
                    gone = Some((p, e));
                    break;
                }
            }
            if let Some((p, e)) = gone {
                // What the peer wrote before it went away (a finished peer
                // closes its communicator; a dead one leaves its ring) is
                // still readable: fail only once nothing moves any more.
                if pass(plan, ex, state, &mut remaining)? {
                    idle_since = None;
                    last_liveness = since;
                    if remaining == 0 {
                        return Ok(());
                    }
                    continue;
                }
                return Err(ex.link_err(p, e));
            }
        }
        if idle < ex.patience.yield_until {
            std::thread::yield_now();
            continue;
        }
        let nap = give_up
            .saturating_duration_since(now)
            .min(Duration::from_millis(2));
        if uses_fd {
            poll_fds(plan, ex, state, nap.min(Duration::from_micros(500)));
        } else if let Some(region) = ex.region {
            let moved = doorbell::nap(region, nap, || {
                let moved = pass(plan, ex, state, &mut remaining)?;
                let sleep = !moved && remaining > 0 && !ex.abort.load(Ordering::Acquire);
                Ok::<_, Error>((moved, sleep))
            })?;
            if moved {
                idle_since = None;
            }
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// True when a stream with `peer` has its head step ready (dependencies met).
fn waiting_on(plan: &Plan, state: &ExecState, peer: usize) -> bool {
    plan.streams.iter().enumerate().any(|(si, s)| {
        s.peer == peer
            && s.items.get(state.heads[si]).is_some_and(|&it| {
                plan.items[it as usize]
                    .deps
                    .iter()
                    .all(|&d| state.done[d as usize])
            })
    })
}

/// The peer of the first stream that is ready but stuck (for timeout errors).
fn blocked_peer(plan: &Plan, state: &ExecState) -> Option<usize> {
    for (si, s) in plan.streams.iter().enumerate() {
        if let Some(&it) = s.items.get(state.heads[si])
            && plan.items[it as usize]
                .deps
                .iter()
                .all(|&d| state.done[d as usize])
        {
            return Some(s.peer);
        }
    }
    plan.streams
        .iter()
        .enumerate()
        .find(|(si, s)| state.heads[*si] < s.items.len())
        .map(|(_, s)| s.peer)
}

fn poll_fds(plan: &Plan, ex: &Exec<'_>, state: &ExecState, nap: Duration) {
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(plan.streams.len());
    for (si, s) in plan.streams.iter().enumerate() {
        if state.heads[si] >= s.items.len() {
            continue;
        }
        if let Some(WaitHandle::Fd(fd)) = ex.links[s.peer].as_ref().map(|l| l.wait_handle()) {
            let events = if s.send { libc::POLLOUT } else { libc::POLLIN };
            match fds.iter_mut().find(|p| p.fd == fd) {
                Some(p) => p.events |= events,
                None => fds.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                }),
            }
        }
    }
    if fds.is_empty() {
        std::thread::sleep(nap.min(Duration::from_micros(200)));
        return;
    }
    let ms = (nap.as_micros().div_ceil(1000)).max(1) as libc::c_int;
    // SAFETY: fds is a valid array of pollfd for the duration of the call.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms);
    }
}

/// One non-blocking pass over every stream head and local step.
fn pass(
    plan: &Plan,
    ex: &mut Exec<'_>,
    state: &mut ExecState,
    remaining: &mut usize,
) -> Result<bool, Error> {
    let mut progress = false;
    for (si, s) in plan.streams.iter().enumerate() {
        while let Some(&idx) = s.items.get(state.heads[si]) {
            let it = &plan.items[idx as usize];
            if !it.deps.iter().all(|&d| state.done[d as usize]) {
                break;
            }
            let before = state.xfer[si];
            let fin = step_transfer(it, s, ex, &mut state.xfer[si])?;
            let after = state.xfer[si];
            if before.done != after.done
                || before.partial != after.partial
                || before.started != after.started
            {
                progress = true;
            }
            if !fin {
                break;
            }
            state.done[idx as usize] = true;
            state.heads[si] += 1;
            state.xfer[si] = XferState::default();
            *remaining -= 1;
            progress = true;
        }
    }
    for (li, &idx) in plan.locals.iter().enumerate() {
        if state.local_done[li] {
            continue;
        }
        let it = &plan.items[idx as usize];
        if !it.deps.iter().all(|&d| state.done[d as usize]) {
            continue;
        }
        let bytes = it.dst.len * ex.elem;
        let (src, dst) = (ex.ptr(&it.src), ex.ptr(&it.dst));
        if bytes > 0 {
            // SAFETY: both slices are inside their buffers (checked at
            // compile); `copy` tolerates overlap; a Reduce reads src and
            // accumulates into dst, which schedules keep disjoint.
            unsafe {
                match it.kind {
                    ItemKind::Copy => std::ptr::copy(src, dst, bytes),
                    _ => ex.reducer.apply(dst, dst, src, bytes),
                }
            }
        }
        state.local_done[li] = true;
        state.done[idx as usize] = true;
        *remaining -= 1;
        progress = true;
    }
    Ok(progress)
}

fn step_transfer(
    it: &Item,
    s: &Stream,
    ex: &mut Exec<'_>,
    st: &mut XferState,
) -> Result<bool, Error> {
    let peer = s.peer;
    let (seq, mut desc) = (ex.ctx.seq, ex.desc);
    if ex.count_per_message {
        let elems = match it.kind {
            ItemKind::Send => it.src.len,
            _ => it.dst.len,
        };
        desc.count = elems as u64;
    }
    let r = match it.kind {
        ItemKind::Send | ItemKind::DescSend => {
            let (data, len, kind) = if it.kind == ItemKind::Send {
                (
                    ex.ptr(&it.src) as *const u8,
                    it.src.len * ex.elem,
                    MsgKind::Data,
                )
            } else {
                (
                    std::ptr::NonNull::<u64>::dangling().as_ptr() as *const u8,
                    0,
                    MsgKind::Desc,
                )
            };
            let mut zero_copy = None;
            if kind == MsgKind::Data && len >= ZERO_COPY_MIN {
                zero_copy = (ex.zero_copy)(data, len);
            }
            let link = ex.links[peer].as_mut().expect("checked");
            if let Some(zc) = zero_copy
                && !link.zero_copy_ok(&zc)
            {
                zero_copy = None;
            }
            let req = SendReq {
                kind,
                seq,
                desc,
                data,
                len,
                zero_copy,
            };
            link.poll_send(s.ch, &req, st)
        }
        ItemKind::Recv | ItemKind::RecvReduce | ItemKind::DescRecv => {
            let req = match it.kind {
                ItemKind::DescRecv => RecvReq {
                    kind: MsgKind::Desc,
                    desc,
                    dst: std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8,
                    len: 0,
                    reduce: None,
                },
                _ => RecvReq {
                    kind: MsgKind::Data,
                    desc,
                    dst: ex.ptr(&it.dst),
                    len: it.dst.len * ex.elem,
                    reduce: (it.kind == ItemKind::RecvReduce)
                        .then(|| (ex.ptr(&it.src) as *const u8, ex.reducer)),
                },
            };
            let link = ex.links[peer].as_mut().expect("checked");
            link.poll_recv(s.ch, &req, st)
        }
        _ => unreachable!("local steps are not streamed"),
    };
    r.map_err(|e| ex.link_err(peer, e))
}
