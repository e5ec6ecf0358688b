//! Transports: one small trait, tried in priority order, as in NCCL's
//! `transport.h` (`can_connect`, then setup).
//!
//! A `Link` joins this rank to one peer. It carries messages on
//! independent FIFO streams, one per channel and direction; the engine never
//! blocks inside a link: it calls `Link::poll_send` / `Link::poll_recv`,
//! which make whatever progress is possible now and say whether the transfer
//! is complete. Every message carries the operation's descriptor
//! (`OpDesc`), so a peer that called a different operation is detected on
//! the first message, and every length is checked against the posted receive
//! before a byte is copied.
//!
//! | transport | `can_connect` when | memory |
//! |---|---|---|
//! | in-process | the peer is a thread of this process | any host memory, read in place |
//! | shm | same host id (hostname, boot id, namespaces) | ring of slots in a memfd; `alloc`ed buffers read in place |
//! | tcp | always (the fallback) | copied through sockets |

pub(crate) mod doorbell;
pub(crate) mod fault;
pub(crate) mod ring;
pub(crate) mod tcp;

use std::os::fd::RawFd;

use gpucomm_algo::{Collective, ReduceOp};

use crate::buffer::MemorySpace;
use crate::dtype::{DataType, Reducer};
use crate::error::{LinkError, TransportKind};

/// Channels (independent streams per peer) the runtime opens.
pub(crate) const CHANNELS: usize = 1;

/// What an operation is, as exchanged with peers: compared on every message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpDesc {
    /// Collective code (see [`OpDesc::coll_code`]), 9 = send/recv (and
    /// exchange), 10 = gather, 11 = scatter; 6 with `arg` 1 = all-to-all
    /// of blocks of any size.
    pub coll: u8,
    pub dtype: u8,
    pub op: u8,
    pub algo: u8,
    /// Root or shift.
    pub arg: u32,
    pub count: u64,
}

impl OpDesc {
    pub fn coll_code(c: &Collective) -> (u8, u32) {
        match *c {
            Collective::AllReduce => (1, 0),
            Collective::ReduceScatter => (2, 0),
            Collective::AllGather => (3, 0),
            Collective::Broadcast { root } => (4, root as u32),
            Collective::Reduce { root } => (5, root as u32),
            Collective::AllToAll => (6, 0),
            Collective::SendRecv { shift } => (7, shift as u32),
            Collective::Barrier => (8, 0),
            Collective::Gather { root } => (10, root as u32),
            Collective::Scatter { root } => (11, root as u32),
        }
    }

    pub fn op_code(op: ReduceOp) -> u8 {
        match op {
            ReduceOp::Sum => 1,
            ReduceOp::Prod => 2,
            ReduceOp::Min => 3,
            ReduceOp::Max => 4,
            ReduceOp::Avg => 5,
        }
    }

    pub fn encode(&self) -> [u64; 2] {
        let a = self.coll as u64
            | (self.dtype as u64) << 8
            | (self.op as u64) << 16
            | (self.algo as u64) << 24
            | (self.arg as u64) << 32;
        [a, self.count]
    }

    pub fn decode(w: [u64; 2]) -> OpDesc {
        OpDesc {
            coll: w[0] as u8,
            dtype: (w[0] >> 8) as u8,
            op: (w[0] >> 16) as u8,
            algo: (w[0] >> 24) as u8,
            arg: (w[0] >> 32) as u32,
            count: w[1],
        }
    }
}

impl std::fmt::Display for OpDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.coll {
            1 => "all_reduce",
            2 => "reduce_scatter",
            3 => "all_gather",
            4 => "broadcast",
            5 => "reduce",
            6 => "all_to_all",
            7 => "sendrecv",
            8 => "barrier",
            9 => "send/recv",
            10 => "gather",
            11 => "scatter",
            _ => "unknown",
        };
        let dt = DataType::from_code(self.dtype)
            .map(|d| d.name())
            .unwrap_or("?");
        let op = match self.op {
            1 => "sum",
            2 => "prod",
            3 => "min",
            4 => "max",
            5 => "avg",
            _ => "-",
        };
        write!(f, "{name}(count={}, dtype={dt}, op={op}", self.count)?;
        match self.coll {
            4 | 5 | 10 | 11 => write!(f, ", root={}", self.arg)?,
            6 if self.arg == 1 => write!(f, ", blocks of any size")?,
            7 => write!(f, ", shift={}", self.arg)?,
            _ => {}
        }
        write!(f, ", algo#{})", self.algo)
    }
}

/// Message kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MsgKind {
    /// Payload of a schedule step.
    Data,
    /// An empty message carrying only the descriptor (peers that talk in one
    /// direction only exchange one, so a mismatch is seen on both sides).
    Desc,
}

/// Where the receiver may read a sender's data in place.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ZeroCopy {
    /// Same address space: a plain address.
    Addr(usize),
    /// A segment of the sender's process: `(segment id, fd in the sender, segment length, offset)`.
    Segment {
        id: u64,
        fd: i32,
        seg_len: usize,
        offset: usize,
    },
    /// Any address of the sender's process, read with cross-memory attach
    /// (`process_vm_readv`) where the kernel allows it.
    Remote(usize),
}

/// A posted send.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendReq {
    pub kind: MsgKind,
    pub seq: u64,
    pub desc: OpDesc,
    pub data: *const u8,
    pub len: usize,
    /// Set when the receiver may read the data in place.
    pub zero_copy: Option<ZeroCopy>,
}

/// A posted receive: `dst = incoming` or `dst = reduce_src op incoming`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvReq {
    pub kind: MsgKind,
    pub desc: OpDesc,
    pub dst: *mut u8,
    pub len: usize,
    pub reduce: Option<(*const u8, Reducer)>,
}

/// Progress of one transfer (owned by the engine, reset per step).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct XferState {
    /// Bytes done so far.
    pub done: usize,
    /// A header or reference has been sent / received.
    pub started: bool,
    /// Ring slot of a zero-copy send, complete when the peer's tail passes it.
    pub slot: u64,
    /// A zero-copy reference to the sender's memory is posted in `slot`
    /// and the peer may read through it (until it completes, or
    /// [`Link::withdraw`]).
    pub zero_copy: bool,
    /// Bytes of the current chunk already read (TCP).
    pub partial: usize,
}

/// How the engine may sleep while a link has nothing to do.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WaitHandle {
    /// A socket: poll it.
    Fd(RawFd),
    /// Shared memory: the rank's doorbell futex wakes it.
    Doorbell,
}

/// One peer connection.
pub(crate) trait Link: Send {
    /// The transport.
    fn kind(&self) -> TransportKind;
    /// Whether this link can read and write memory of `space`.
    fn can_access(&self, space: MemorySpace) -> bool {
        !matches!(space, MemorySpace::Device(_))
    }
    /// Whether the receiver can read `zc` in place over this link.
    fn zero_copy_ok(&self, zc: &ZeroCopy) -> bool;
    /// Makes progress on a send on `channel`; `Ok(true)` once complete.
    fn poll_send(
        &mut self,
        channel: usize,
        req: &SendReq,
        st: &mut XferState,
    ) -> Result<bool, LinkError>;
    /// Makes progress on a receive on `channel`; `Ok(true)` once complete.
    fn poll_recv(
        &mut self,
        channel: usize,
        req: &RecvReq,
        st: &mut XferState,
    ) -> Result<bool, LinkError>;
    /// Checks the peer is still alive (called while idle, not on the hot path).
    fn check_peer(&mut self) -> Result<(), LinkError>;
    /// What to sleep on.
    fn wait_handle(&self) -> WaitHandle;
    /// Tells the peer this rank is going away (abort or drop); best effort.
    fn shutdown(&mut self);
    /// Takes back a send that failed (timeout, abort, an error elsewhere)
    /// before its buffer goes back to the caller: a zero-copy reference the
    /// peer has not started reading is withdrawn, one it is reading is
    /// waited for (bounded by `give_up` where the reader is another
    /// process). Links that copy what they send have nothing to take back.
    fn withdraw(&mut self, _channel: usize, _st: &XferState, _give_up: std::time::Instant) {}
}
