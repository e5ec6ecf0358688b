//! The checker: executes a schedule symbolically and proves it right.
//!
//! Every element of every rank's buffers holds a symbolic value: "element
//! `i` of the collective's data, combined over the set `S` of ranks" (a
//! bitset), or "undefined". The checker
//!
//! 1. validates the structure: dependencies point to earlier steps, peers
//!    exist, slices lie inside [`crate::Schedule::buffer_len`], nothing
//!    writes the input;
//! 2. pairs sends with receives (FIFO per `(sender, receiver, channel)`,
//!    same length) and runs the schedule under rendezvous semantics until
//!    nothing can move: any step left over is a deadlock, explained by the
//!    chain of steps waiting on each other;
//! 3. replays that execution on the symbolic values: reading undefined data,
//!    combining different elements, or adding a rank's contribution twice is
//!    an error at the step that does it; at the end every output element must
//!    hold exactly what the collective defines (see [`crate::Collective`]),
//!    and for a barrier every rank must have causally heard from every rank;
//! 4. proves the execution order does not matter: any two steps of a rank
//!    whose accesses conflict (one writes what the other reads or writes) are
//!    ordered by dependencies, so every engine computes the same result;
//! 5. for schedules that claim [`crate::Schedule::in_place_safe`], repeats
//!    3 and 4 with input and output aliased as in an in-place call.
//!
//! Values are kept as runs (a range of elements `i..i+len` with one rank
//! set), so the cost grows with the number of steps, not the element count.

mod order;

use std::rc::Rc;

use order::validate_rank;
pub(crate) use order::{Event, order, validate};

use crate::generate::{locate, physical_lens};
use crate::{Buf, Collective, Problem, Schedule, Slice, Step, StepKind};
use order::show_slice;

/// What went wrong, and where. Every variant names the rank and step (or
/// the rank and element) at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The step lists do not fit the problem.
    #[error("malformed schedule: {0}")]
    Shape(String),
    /// A step is malformed (bad dependency, peer or slice).
    #[error("rank {rank} step {step}: {what}")]
    InvalidStep {
        /// Rank.
        rank: usize,
        /// Step index.
        step: usize,
        /// What is wrong.
        what: String,
    },
    /// A send and its matching receive differ in length.
    #[error(
        "size mismatch on channel {channel}: rank {from} step {send} sends {send_len} elements to rank {to}, whose matching receive (step {recv}) takes {recv_len}"
    )]
    SizeMismatch {
        /// Sender.
        from: usize,
        /// Sender's step.
        send: usize,
        /// Receiver.
        to: usize,
        /// Receiver's step.
        recv: usize,
        /// Channel.
        channel: u16,
        /// Elements sent.
        send_len: usize,
        /// Elements expected.
        recv_len: usize,
    },
    /// A send with no matching receive.
    #[error(
        "rank {rank} step {step}: send to rank {peer} on channel {channel} has no matching receive (rank {rank} sends {sends} time(s) to {peer} on that channel, rank {peer} receives {recvs} time(s))"
    )]
    UnmatchedSend {
        /// Sender.
        rank: usize,
        /// The first unmatched send.
        step: usize,
        /// Receiver.
        peer: usize,
        /// Channel.
        channel: u16,
        /// Sends on the connection.
        sends: usize,
        /// Receives on the connection.
        recvs: usize,
    },
    /// A receive with no matching send.
    #[error(
        "rank {rank} step {step}: receive from rank {peer} on channel {channel} has no matching send (rank {peer} sends {sends} time(s) to {rank} on that channel, rank {rank} receives {recvs} time(s))"
    )]
    UnmatchedRecv {
        /// Receiver.
        rank: usize,
        /// The first unmatched receive.
        step: usize,
        /// Sender.
        peer: usize,
        /// Channel.
        channel: u16,
        /// Sends on the connection.
        sends: usize,
        /// Receives on the connection.
        recvs: usize,
    },
    /// Steps remain that can never run.
    #[error("deadlock at rank {rank} step {step}: {explanation}")]
    Deadlock {
        /// The first blocked rank.
        rank: usize,
        /// Its first blocked step.
        step: usize,
        /// The chain of waits.
        explanation: String,
    },
    /// A step computes something wrong (reads undefined data, mixes
    /// elements, counts a contribution twice).
    #[error("rank {rank} step {step}: {what}")]
    BadData {
        /// Rank.
        rank: usize,
        /// Step index.
        step: usize,
        /// What is wrong.
        what: String,
    },
    /// A rank ends with the wrong result.
    #[error("rank {rank}: {what}")]
    WrongResult {
        /// Rank.
        rank: usize,
        /// What is wrong.
        what: String,
    },
    /// Two steps of a rank touch the same memory with no order between them.
    #[error("rank {rank}: steps {first} and {second} race: {what}")]
    Race {
        /// Rank.
        rank: usize,
        /// The earlier step.
        first: usize,
        /// The later step.
        second: usize,
        /// The conflicting accesses.
        what: String,
    },
    /// The schedule claims to be in-place safe but fails with aliased buffers.
    #[error("in-place (input and output aliased): {0}")]
    InPlace(Box<CheckError>),
}

/// What one rank does, as counted by the checker.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RankReport {
    /// Steps in the rank's list.
    pub steps: usize,
    /// Send steps.
    pub sends: usize,
    /// Receive steps (`Recv` and `RecvReduce`).
    pub recvs: usize,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_recv: u64,
    /// Sequential communication steps: transfers on the longest chain
    /// (dependencies, messages and connection order) ending at this rank.
    pub comm_steps: u32,
}

/// The checker's verdict on a correct schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckReport {
    /// Per rank.
    pub ranks: Vec<RankReport>,
    /// The longest chain of transfers over all ranks.
    pub critical_path: u32,
    /// True when the in-place (aliased) execution was verified too.
    pub in_place_verified: bool,
}

impl CheckReport {
    /// The most bytes any rank sends.
    pub fn max_bytes_sent(&self) -> u64 {
        self.ranks.iter().map(|r| r.bytes_sent).max().unwrap_or(0)
    }
    /// The most bytes any rank receives.
    pub fn max_bytes_recv(&self) -> u64 {
        self.ranks.iter().map(|r| r.bytes_recv).max().unwrap_or(0)
    }
    /// Bytes sent by all ranks together.
    pub fn total_bytes_sent(&self) -> u64 {
        self.ranks.iter().map(|r| r.bytes_sent).sum()
    }
}

/// Checks a schedule: generates every rank's steps and proves them right
/// (and, when the schedule claims it, right in place too).
///
/// The proof holds every rank's steps (about 200 bytes each) and a state
/// that can grow as the square of the ranks where the steps do not (an
/// all_gather's runs, a reduction's source sets): neither is bounded
/// here. Size a large schedule up first, as `gpucomm algo check` does
/// (it refuses past 50 million steps, counted from the cost model's
/// critical path, and past 4 GiB of [`check_state_bytes`]): `gpucomm
/// algo check all_gather -a ring -n 2048 -b 1M` (8.4 million steps) took
/// 1.8 GB and 14 s on a 2-core machine, and four times that at twice the
/// ranks.
///
/// ```
/// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule, check};
///
/// let s = Schedule::new(Problem::new(Collective::AllReduce, 10, 4, 4), Algorithm::Ring).unwrap();
/// let report = check(&s).unwrap();
/// assert_eq!(report.critical_path, 6); // 2 (n - 1)
/// ```
pub fn check(s: &Schedule) -> Result<CheckReport, CheckError> {
    s.validate().map_err(|e| CheckError::Shape(e.to_string()))?;
    let n = s.problem.nranks;
    let steps: Vec<Vec<Step>> = (0..n).map(|r| s.rank_steps(r)).collect();
    let scratch: Vec<usize> = (0..n).map(|r| s.buffer_len(r, Buf::Scratch)).collect();
    let mut report = check_steps(&s.problem, &steps, &scratch)?;
    if s.in_place_safe() {
        check_steps_in_place(&s.problem, &steps, &scratch)
            .map_err(|e| CheckError::InPlace(Box::new(e)))?;
        report.in_place_verified = true;
    }
    Ok(report)
}

/// Checks explicit per-rank step lists for `problem`, with
/// `scratch_len[rank]` elements of scratch per rank (separate input and
/// output buffers).
pub fn check_steps(
    problem: &Problem,
    steps: &[Vec<Step>],
    scratch_len: &[usize],
) -> Result<CheckReport, CheckError> {
    run(problem, steps, scratch_len, false)
}

/// Like [`check_steps`], with input and output aliased as in an in-place
/// call (see [`Schedule::in_place_safe`]).
pub fn check_steps_in_place(
    problem: &Problem,
    steps: &[Vec<Step>],
    scratch_len: &[usize],
) -> Result<CheckReport, CheckError> {
    run(problem, steps, scratch_len, true)
}

/// Checks the structure of one rank's steps alone (dependencies point to
/// earlier steps, peers exist, slices lie inside the buffers, nothing writes
/// the input): what can be checked without the other ranks, for schedules
/// too large to check whole.
pub fn check_rank(s: &Schedule, rank: usize, steps: &[Step]) -> Result<(), CheckError> {
    if rank >= s.problem.nranks {
        return Err(CheckError::Shape(format!(
            "rank {rank} out of range ({} ranks)",
            s.problem.nranks
        )));
    }
    validate_rank(&s.problem, rank, steps, s.buffer_len(rank, Buf::Scratch))
}

/// The checker's state, estimated in bytes: every rank's buffers hold
/// runs of data, each labelled with the set of ranks it comes from (a
/// bitset of n bits). An all_gather or all_to_all leaves up to n runs on
/// every rank; every rank's input (a barrier has none) starts a set, and
/// each reducing step makes a new one. Measured against the checker
/// (bruck all_gather of 8192 ranks: 4.8 GB, estimated 4.5 GiB;
/// halving-doubling reduce_scatter of 32768: 2.3 GB, estimated 2 GiB;
/// tree reduce of 32768: 235 MB, estimated 260 MiB).
///
/// `steps` bounds the steps over all ranks (`u64::MAX` when unknown),
/// and so the reducing steps: they are counted (from the steps, generated
/// one rank at a time) only when that bound puts the state past
/// [`CHECK_STATE_COUNTED`]. `gpucomm algo check` refuses schedules
/// estimated past 4 GiB.
///
/// ```
/// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule, check_state_bytes};
///
/// // 13 rounds per rank, but every rank ends with 8192 runs of data.
/// let p = Problem::new(Collective::AllGather, 1 << 20, 8192, 8);
/// let s = Schedule::new(p, Algorithm::Bruck).unwrap();
/// assert!(check_state_bytes(&s, u64::MAX) > 4 << 30);
/// ```
pub fn check_state_bytes(s: &Schedule, steps: u64) -> u64 {
    const RUN_BYTES: u64 = 72;
    let p = &s.problem;
    let n = p.nranks as u64;
    let runs_per_rank = match p.collective {
        Collective::AllGather | Collective::AllToAll => n.min(p.output_len(0) as u64).max(1),
        _ => 1,
    };
    let inputs = (0..p.nranks).filter(|&r| p.input_len(r) > 0).count() as u64;
    let set_bytes = n.div_ceil(64) * 8 + 40;
    let bytes = |reductions: u64| {
        n.saturating_mul(runs_per_rank)
            .saturating_mul(RUN_BYTES)
            .saturating_add(inputs.saturating_add(reductions).saturating_mul(set_bytes))
    };
    if !p.collective.reduces() {
        return bytes(0);
    }
    if bytes(steps) <= CHECK_STATE_COUNTED {
        return bytes(steps);
    }
    bytes(
        (0..p.nranks)
            .map(|r| {
                s.rank_steps(r)
                    .iter()
                    .filter(|st| {
                        matches!(
                            st.kind,
                            StepKind::RecvReduce { .. } | StepKind::Reduce { .. }
                        )
                    })
                    .count() as u64
            })
            .sum(),
    )
}

/// Past this estimate [`check_state_bytes`] counts the reducing steps
/// instead of taking its bound on them, 4 GiB.
pub const CHECK_STATE_COUNTED: u64 = 4 << 30;

fn run(
    p: &Problem,
    steps: &[Vec<Step>],
    scratch_len: &[usize],
    aliased: bool,
) -> Result<CheckReport, CheckError> {
    validate(p, steps, scratch_len)?;
    let ord = order(steps)?;
    let n = p.nranks;
    for (rank, list) in steps.iter().enumerate() {
        races(p, rank, list, aliased)?;
    }
    let mut sym = Symbolic::new(p, scratch_len, aliased);
    sym.replay(steps, &ord.events)?;
    sym.final_check()?;
    let mut report = CheckReport::default();
    for (rank, list) in steps.iter().enumerate() {
        let mut rr = RankReport {
            steps: list.len(),
            ..Default::default()
        };
        for st in list {
            let bytes = (st.kind.len() * p.elem_size) as u64;
            if st.kind.is_send() {
                rr.sends += 1;
                rr.bytes_sent += bytes;
            } else if st.kind.is_recv() {
                rr.recvs += 1;
                rr.bytes_recv += bytes;
            }
        }
        rr.comm_steps = ord.level[rank].iter().copied().max().unwrap_or(0);
        report.critical_path = report.critical_path.max(rr.comm_steps);
        report.ranks.push(rr);
    }
    if p.collective == Collective::Barrier {
        barrier_check(n, steps, &ord.events, BARRIER_BLOCK_RANKS)?;
    }
    Ok(report)
}

// ---------------------------------------------------------------------------
// Rank sets.

type Set = Rc<Vec<u64>>;

fn set_one(n: usize, r: usize) -> Set {
    let mut v = vec![0u64; n.div_ceil(64).max(1)];
    v[r / 64] |= 1 << (r % 64);
    Rc::new(v)
}

fn set_all(n: usize) -> Set {
    let mut v = vec![0u64; n.div_ceil(64).max(1)];
    for r in 0..n {
        v[r / 64] |= 1 << (r % 64);
    }
    Rc::new(v)
}

fn members(s: &[u64]) -> Vec<usize> {
    let mut out = Vec::new();
    for (w, &bits) in s.iter().enumerate() {
        let mut b = bits;
        while b != 0 {
            let t = b.trailing_zeros() as usize;
            out.push(w * 64 + t);
            b &= b - 1;
        }
    }
    out
}

fn fmt_ranks(r: &[usize]) -> String {
    let list: Vec<String> = r.iter().take(8).map(|x| x.to_string()).collect();
    let more = if r.len() > 8 {
        format!(", ... ({} ranks)", r.len())
    } else {
        String::new()
    };
    format!("{{{}{more}}}", list.join(", "))
}

fn fmt_set(s: &[u64], n: usize) -> String {
    let m = members(s);
    if m.len() == n && n > 1 {
        format!("all {n} ranks")
    } else {
        format!("rank(s) {}", fmt_ranks(&m))
    }
}

// ---------------------------------------------------------------------------
// Symbolic memory.

/// `len` elements whose element `k` is "element `idx + k`, combined over `set`".
#[derive(Clone, Debug)]
struct Run {
    len: usize,
    val: Option<(usize, Set)>,
}

impl Run {
    fn clip(&self, from: usize, len: usize) -> Run {
        Run {
            len,
            val: self.val.as_ref().map(|(i, s)| (i + from, s.clone())),
        }
    }
    fn continues(&self, next: &Run) -> bool {
        match (&self.val, &next.val) {
            (None, None) => true,
            (Some((i, s)), Some((j, t))) => *j == i + self.len && (Rc::ptr_eq(s, t) || s == t),
            _ => false,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Mem {
    /// `(start, run)`, sorted, covering the buffer.
    runs: Vec<(usize, Run)>,
}

impl Mem {
    fn new(len: usize) -> Self {
        let mut m = Mem::default();
        if len > 0 {
            m.runs.push((0, Run { len, val: None }));
        }
        m
    }

    fn read(&self, off: usize, len: usize) -> Vec<Run> {
        let mut out = Vec::new();
        if len == 0 {
            return out;
        }
        let mut k = self.runs.partition_point(|(s, _)| *s <= off) - 1;
        let end = off + len;
        while k < self.runs.len() && self.runs[k].0 < end {
            let (s, r) = &self.runs[k];
            let lo = off.max(*s);
            let hi = end.min(s + r.len);
            out.push(r.clip(lo - s, hi - lo));
            k += 1;
        }
        out
    }

    /// Writes `new` (runs in order) at `off`, replacing what was there.
    ///
    /// The run list stays normalized (no run continues the one before
    /// it), so only the written range and its two borders need merging:
    /// the runs around it are spliced, not rebuilt (a rebuild compared
    /// every pair of runs on every write, which made checking a 1024-rank
    /// ring take half a minute).
    fn write(&mut self, off: usize, new: Vec<Run>) {
        let len: usize = new.iter().map(|r| r.len).sum();
        if len == 0 {
            return;
        }
        let end = off + len;
        // Runs [k0, k1) overlap [off, end).
        let k0 = self.runs.partition_point(|(s, r)| s + r.len <= off);
        let k1 = self.runs.partition_point(|(s, _)| *s < end);
        let mut mid: Vec<(usize, Run)> = Vec::with_capacity(new.len() + 4);
        let push = |out: &mut Vec<(usize, Run)>, start: usize, r: Run| {
            if let Some((_, pr)) = out.last_mut() {
                if pr.continues(&r) {
                    pr.len += r.len;
                    return;
                }
            }
            out.push((start, r));
        };
        // The run ending where the written range starts, to merge with its
        // first run (a run cut at `off` keeps its own start instead).
        let starts_at_off = k0 == k1 || self.runs[k0].0 >= off;
        let lo = if k0 > 0 && starts_at_off { k0 - 1 } else { k0 };
        if lo < k0 {
            mid.push(self.runs[lo].clone());
        }
        if k0 < k1 {
            let (s, r) = &self.runs[k0];
            if *s < off {
                push(&mut mid, *s, r.clip(0, off - s));
            }
        }
        let mut at = off;
        for nr in new {
            let l = nr.len;
            push(&mut mid, at, nr);
            at += l;
        }
        if k0 < k1 {
            let (s, r) = &self.runs[k1 - 1];
            let e = s + r.len;
            if e > end {
                push(&mut mid, end, r.clip(end - s, e - end));
            }
        }
        // The run after it, to merge with its last run.
        let mut hi = k1;
        if k1 < self.runs.len() {
            push(&mut mid, self.runs[k1].0, self.runs[k1].1.clone());
            hi = k1 + 1;
        }
        self.runs.splice(lo..hi, mid);
    }
}

/// Combines two aligned run lists; on failure, the element offset and why.
fn combine(a: &[Run], b: &[Run], n: usize) -> Result<Vec<Run>, (usize, String)> {
    let mut out = Vec::new();
    let (mut i, mut j, mut ai, mut bj, mut pos) = (0, 0, 0, 0, 0);
    while i < a.len() && j < b.len() {
        let take = (a[i].len - ai).min(b[j].len - bj);
        let (x, y) = (a[i].clip(ai, take), b[j].clip(bj, take));
        match (&x.val, &y.val) {
            (Some((ix, sx)), Some((iy, sy))) => {
                if ix != iy {
                    return Err((pos, format!("combines element {ix} with element {iy}")));
                }
                let twice: Vec<u64> = sx.iter().zip(sy.iter()).map(|(p, q)| p & q).collect();
                if twice.iter().any(|&w| w != 0) {
                    return Err((
                        pos,
                        format!(
                            "counts the contribution of {} twice (combining {} with {})",
                            fmt_set(&twice, n),
                            fmt_set(sx, n),
                            fmt_set(sy, n)
                        ),
                    ));
                }
                let u: Vec<u64> = sx.iter().zip(sy.iter()).map(|(p, q)| p | q).collect();
                out.push(Run {
                    len: take,
                    val: Some((*ix, Rc::new(u))),
                });
            }
            _ => return Err((pos, "combines undefined data".into())),
        }
        pos += take;
        ai += take;
        bj += take;
        if ai == a[i].len {
            i += 1;
            ai = 0;
        }
        if bj == b[j].len {
            j += 1;
            bj = 0;
        }
    }
    Ok(out)
}

fn first_undefined(runs: &[Run]) -> Option<usize> {
    let mut pos = 0;
    for r in runs {
        if r.val.is_none() {
            return Some(pos);
        }
        pos += r.len;
    }
    None
}

struct Symbolic<'a> {
    p: &'a Problem,
    aliased: bool,
    mem: Vec<[Mem; 3]>,
}

impl<'a> Symbolic<'a> {
    fn new(p: &'a Problem, scratch_len: &[usize], aliased: bool) -> Self {
        let n = p.nranks;
        let mut mem = Vec::with_capacity(n);
        for (r, &scratch) in scratch_len.iter().enumerate() {
            let lens = physical_lens(p, r, aliased, scratch);
            let mut m = [Mem::new(lens[0]), Mem::new(lens[1]), Mem::new(lens[2])];
            let ilen = p.input_len(r);
            if ilen > 0 {
                let idx0 = match p.collective {
                    Collective::AllGather => p.block(r).0,
                    _ => 0,
                };
                let (b, o) = locate(p, r, aliased, Slice::new(Buf::Input, 0, ilen));
                m[b].write(
                    o,
                    vec![Run {
                        len: ilen,
                        val: Some((idx0, set_one(n, r))),
                    }],
                );
            }
            mem.push(m);
        }
        Symbolic { p, aliased, mem }
    }

    fn read(&self, rank: usize, s: Slice) -> Vec<Run> {
        let (b, o) = locate(self.p, rank, self.aliased, s);
        self.mem[rank][b].read(o, s.len)
    }

    fn write(&mut self, rank: usize, s: Slice, runs: Vec<Run>) {
        let (b, o) = locate(self.p, rank, self.aliased, s);
        self.mem[rank][b].write(o, runs);
    }

    fn defined(
        &self,
        rank: usize,
        step: usize,
        s: Slice,
        what: &str,
    ) -> Result<Vec<Run>, CheckError> {
        let runs = self.read(rank, s);
        if let Some(at) = first_undefined(&runs) {
            return Err(CheckError::BadData {
                rank,
                step,
                what: format!(
                    "{what} {} but element {} of it holds no data yet",
                    show_slice(&s),
                    s.offset + at
                ),
            });
        }
        Ok(runs)
    }

    fn reduce_into(
        &mut self,
        rank: usize,
        step: usize,
        a: Vec<Run>,
        b: Vec<Run>,
        dst: Slice,
        what: &str,
    ) -> Result<(), CheckError> {
        let res = combine(&a, &b, self.p.nranks).map_err(|(at, why)| CheckError::BadData {
            rank,
            step,
            what: format!(
                "{what} {why} at {}[{}]",
                show_slice(&dst).split('[').next().unwrap_or(""),
                dst.offset + at
            ),
        })?;
        self.write(rank, dst, res);
        Ok(())
    }

    fn replay(&mut self, steps: &[Vec<Step>], events: &[Event]) -> Result<(), CheckError> {
        for ev in events {
            match *ev {
                Event::Local { rank, step } => match steps[rank][step].kind {
                    StepKind::Copy { src, dst } => {
                        let v = self.defined(rank, step, src, "copies")?;
                        self.write(rank, dst, v);
                    }
                    StepKind::Reduce { src, dst } => {
                        let a = self.defined(rank, step, dst, "reduces into")?;
                        let b = self.defined(rank, step, src, "reduces from")?;
                        self.reduce_into(rank, step, a, b, dst, "reduce")?;
                    }
                    _ => unreachable!("local events are local steps"),
                },
                Event::Transfer {
                    from,
                    send,
                    to,
                    recv,
                } => {
                    let StepKind::Send { src, .. } = steps[from][send].kind else {
                        unreachable!("a transfer starts with a send")
                    };
                    let data = self.defined(from, send, src, "sends")?;
                    match steps[to][recv].kind {
                        StepKind::Recv { dst, .. } => self.write(to, dst, data),
                        StepKind::RecvReduce { src: own, dst, .. } => {
                            let mine = self.defined(to, recv, own, "receive-reduces with")?;
                            self.reduce_into(to, recv, mine, data, dst, "receive-reduce")?;
                        }
                        _ => unreachable!("a transfer ends with a receive"),
                    }
                }
            }
        }
        Ok(())
    }

    fn final_check(&self) -> Result<(), CheckError> {
        let p = self.p;
        let n = p.nranks;
        let all = set_all(n);
        for rank in 0..n {
            let len = p.output_len(rank);
            let runs = self.read(rank, Slice::new(Buf::Output, 0, len));
            let mut pos = 0;
            for run in runs {
                let mut k = 0;
                while k < run.len {
                    let i = pos + k;
                    let (want, stretch) = expected(p, rank, i);
                    let take = stretch.min(run.len - k);
                    if let Some((widx, wset)) = want {
                        let wset: Set = match wset {
                            None => all.clone(),
                            Some(q) => set_one(n, q),
                        };
                        let bad = match &run.val {
                            None => Some("holds no data".to_string()),
                            Some((idx, set)) => {
                                let idx = idx + k;
                                if idx != widx {
                                    Some(format!("holds element {idx} of {}", fmt_set(set, n)))
                                } else if **set != *wset {
                                    let missing: Vec<usize> = members(&wset)
                                        .into_iter()
                                        .filter(|&q| set[q / 64] & (1 << (q % 64)) == 0)
                                        .collect();
                                    let extra: Vec<usize> = members(set)
                                        .into_iter()
                                        .filter(|&q| wset[q / 64] & (1 << (q % 64)) == 0)
                                        .collect();
                                    let mut s =
                                        format!("holds element {idx} of {}", fmt_set(set, n));
                                    if !missing.is_empty() {
                                        s.push_str(&format!(", missing {}", fmt_ranks(&missing)));
                                    }
                                    if !extra.is_empty() {
                                        s.push_str(&format!(", with extra {}", fmt_ranks(&extra)));
                                    }
                                    Some(s)
                                } else {
                                    None
                                }
                            }
                        };
                        if let Some(bad) = bad {
                            return Err(CheckError::WrongResult {
                                rank,
                                what: format!(
                                    "output[{i}] {bad}; {} defines element {widx} of {}",
                                    p.collective.name(),
                                    fmt_set(&wset, n)
                                ),
                            });
                        }
                    }
                    k += take;
                }
                pos += run.len;
            }
        }
        Ok(())
    }
}

/// What `output[i]` of `rank` must hold — `Some((element, None))` for the
/// combination over all ranks, `Some((element, Some(q)))` for rank q's
/// element, `None` for anything — and for how many elements from `i` on
/// that stays so (the element index growing by one per element).
fn expected(p: &Problem, rank: usize, i: usize) -> (Option<(usize, Option<usize>)>, usize) {
    let n = p.nranks;
    let c = p.count;
    match p.collective {
        Collective::AllReduce => (Some((i, None)), c - i),
        Collective::ReduceScatter => (Some((p.block(rank).0 + i, None)), p.block(rank).1 - i),
        Collective::AllGather => {
            let base = c / n;
            let extra = c % n;
            let q = if i < extra * (base + 1) {
                i / (base + 1)
            } else {
                extra + (i - extra * (base + 1)) / base
            };
            let (o, l) = p.block(q);
            (Some((i, Some(q))), o + l - i)
        }
        Collective::Broadcast { root } => (Some((i, Some(root))), c - i),
        Collective::Reduce { root } => {
            if rank == root {
                (Some((i, None)), c - i)
            } else {
                (None, c - i)
            }
        }
        Collective::AllToAll => {
            let (q, k) = (i / c, i % c);
            (Some((rank * c + k, Some(q))), c - k)
        }
        Collective::SendRecv { shift } => {
            let from = (rank + n - shift % n) % n;
            (Some((i, Some(from))), c - i)
        }
        Collective::Gather { root } => {
            // Only the root has an output: n blocks of c.
            debug_assert_eq!(rank, root);
            let (q, k) = (i / c, i % c);
            (Some((k, Some(q))), c - k)
        }
        Collective::Scatter { root } => (Some((rank * c + i, Some(root))), c - i),
        Collective::Barrier => (None, usize::MAX),
    }
}

/// Every rank must causally hear from every rank before it completes.
///
/// Answered for `block` source ranks at a time by [`barrier_block`], so
/// the sets it keeps are at most that wide whatever the rank count (one
/// n-bit set per step took 17 GB for a recursive-doubling barrier of 65535
/// ranks). The lowest rank found incomplete is reported, with every rank it
/// never heard from (a second pass, only on failure).
fn barrier_check(
    n: usize,
    steps: &[Vec<Step>],
    events: &[Event],
    block: usize,
) -> Result<(), CheckError> {
    let blocks = || (0..n).step_by(block).map(|lo| (lo, n.min(lo + block)));
    let mut wrong: Option<usize> = None;
    for (lo, hi) in blocks() {
        barrier_block(steps, events, lo, hi, |r, heard| {
            if wrong.is_none_or(|w| r < w) && (lo..hi).any(|q| q != r && !heard(q)) {
                wrong = Some(r);
            }
        });
    }
    let Some(rank) = wrong else {
        return Ok(());
    };
    let mut missing = Vec::new();
    for (lo, hi) in blocks() {
        barrier_block(steps, events, lo, hi, |r, heard| {
            if r == rank {
                missing.extend((lo..hi).filter(|&q| q != r && !heard(q)));
            }
        });
    }
    Err(CheckError::WrongResult {
        rank,
        what: format!(
            "barrier: completes without hearing from {}",
            fmt_ranks(&missing)
        ),
    })
}

/// Source ranks the barrier check follows at a time (2 KiB a set). Each
/// block is one walk of the schedule, so fewer make it faster: a
/// recursive-doubling barrier of 65535 ranks takes 4, and its sets stay
/// under the rest of the check's memory (docs/algo.md has the figures).
const BARRIER_BLOCK_RANKS: usize = 16384;

/// Which of the source ranks `lo..hi` every rank has causally heard from
/// when it completes: `done(rank, heard)` is called once per rank, `heard(q)`
/// telling whether source `q` reached it.
///
/// Each step knows the set of sources that reached it: its own rank, its
/// dependencies' sets and, for a receive, the matching send's. A set is
/// dropped once the last step of its rank that depends on it has been
/// computed, so only the sets of steps still awaited are held. A rank
/// heard from the union of its steps' sets, which is the union of its
/// sinks' (steps nothing depends on), as every other step's set lies
/// inside a dependent's; the rank is judged once its last step is done.
fn barrier_block(
    steps: &[Vec<Step>],
    events: &[Event],
    lo: usize,
    hi: usize,
    mut done: impl FnMut(usize, &dyn Fn(usize) -> bool),
) {
    let words = (hi - lo).div_ceil(64).max(1);
    // Steps of the same rank still to be computed that depend on each step.
    let mut consumers: Vec<Vec<u32>> = steps
        .iter()
        .map(|l| {
            let mut c = vec![0u32; l.len()];
            for st in l {
                for &d in &st.deps {
                    c[d as usize] += 1;
                }
            }
            c
        })
        .collect();
    let mut know: Vec<Vec<Vec<u64>>> = steps.iter().map(|l| vec![Vec::new(); l.len()]).collect();
    // Union of each rank's sinks so far; steps of each rank not yet computed.
    let mut heard: Vec<Vec<u64>> = vec![Vec::new(); steps.len()];
    let mut left: Vec<usize> = steps.iter().map(Vec::len).collect();
    let mut judge = |r: usize, k: &[u64]| {
        done(r, &|q| {
            q == r
                || (lo..hi).contains(&q)
                    && k.get((q - lo) / 64)
                        .is_some_and(|w| w & (1 << ((q - lo) % 64)) != 0)
        })
    };
    let base = |know: &Vec<Vec<Vec<u64>>>, r: usize, i: usize| {
        let mut k = vec![0u64; words];
        if (lo..hi).contains(&r) {
            k[(r - lo) / 64] |= 1 << ((r - lo) % 64);
        }
        for &d in &steps[r][i].deps {
            for (w, x) in k.iter_mut().zip(&know[r][d as usize]) {
                *w |= x;
            }
        }
        k
    };
    // Step `i` of rank `r` now knows `k`: release the sets only it was
    // waiting for, keep `k` for its consumers or fold it into the rank's
    // union, and judge the rank once its last step is done.
    let mut settle = |know: &mut Vec<Vec<Vec<u64>>>, r: usize, i: usize, k: Vec<u64>| {
        for &d in &steps[r][i].deps {
            let c = &mut consumers[r][d as usize];
            *c -= 1;
            if *c == 0 {
                know[r][d as usize] = Vec::new();
            }
        }
        if consumers[r][i] > 0 {
            know[r][i] = k;
        } else if heard[r].is_empty() {
            heard[r] = k;
        } else {
            for (w, x) in heard[r].iter_mut().zip(&k) {
                *w |= x;
            }
        }
        left[r] -= 1;
        if left[r] == 0 {
            judge(r, &std::mem::take(&mut heard[r]));
        }
    };
    for ev in events {
        match *ev {
            Event::Local { rank, step } => {
                let k = base(&know, rank, step);
                settle(&mut know, rank, step, k);
            }
            Event::Transfer {
                from,
                send,
                to,
                recv,
            } => {
                let ks = base(&know, from, send);
                let mut kr = base(&know, to, recv);
                for (w, x) in kr.iter_mut().zip(&ks) {
                    *w |= x;
                }
                settle(&mut know, from, send, ks);
                settle(&mut know, to, recv, kr);
            }
        }
    }
    // Ranks with no steps hear only from themselves; a rank with steps the
    // order left out (it leaves none) is judged on what it knew so far.
    for r in 0..steps.len() {
        if steps[r].is_empty() || left[r] > 0 {
            let mut k = std::mem::take(&mut heard[r]);
            for s in &know[r] {
                k.resize(k.len().max(s.len()), 0);
                for (w, x) in k.iter_mut().zip(s) {
                    *w |= x;
                }
            }
            judge(r, &k);
        }
    }
}

/// The most memory one rank's ancestor sets may take in the race check,
/// bytes (about 93,000 steps); above it each question is a search.
const RACE_BITS_BYTES: usize = 1 << 30;

/// Whether one step of a rank happens before another, along the
/// dependencies. Every step's ancestors are held as a bit set (steps² / 8
/// bytes) while that fits in `limit` bytes; past it each question is a
/// search back along the dependencies from the later step, which only
/// steps after the earlier one can lie on (dependencies point back). The
/// root of a direct broadcast cut in 64-byte chunks has 245,761 steps: 7
/// GiB of sets, which ended the process before.
struct Reach<'a> {
    steps: &'a [Step],
    bits: Option<Vec<Vec<u64>>>,
    mark: Vec<u32>,
    epoch: u32,
    stack: Vec<usize>,
}

impl<'a> Reach<'a> {
    fn new(steps: &'a [Step], limit: usize) -> Self {
        let m = steps.len();
        let words = m.div_ceil(64);
        let bits = (m.saturating_mul(words).saturating_mul(8) <= limit).then(|| {
            let mut anc: Vec<Vec<u64>> = Vec::with_capacity(m);
            for st in steps {
                let mut a = vec![0u64; words];
                for &d in &st.deps {
                    let d = d as usize;
                    a[d / 64] |= 1 << (d % 64);
                    for (w, v) in a.iter_mut().zip(&anc[d]) {
                        *w |= v;
                    }
                }
                anc.push(a);
            }
            anc
        });
        let mark = if bits.is_some() {
            Vec::new()
        } else {
            vec![0; m]
        };
        Reach {
            steps,
            bits,
            mark,
            epoch: 0,
            stack: Vec::new(),
        }
    }

    /// Whether step `a` happens before step `b` (`a < b`).
    fn before(&mut self, a: usize, b: usize) -> bool {
        if let Some(anc) = &self.bits {
            return anc[b][a / 64] & (1 << (a % 64)) != 0;
        }
        let epoch = bump_epoch(&mut self.epoch, &mut self.mark);
        self.stack.clear();
        self.stack.push(b);
        while let Some(x) = self.stack.pop() {
            for &d in &self.steps[x].deps {
                let d = d as usize;
                if d == a {
                    return true;
                }
                if d > a && self.mark[d] != epoch {
                    self.mark[d] = epoch;
                    self.stack.push(d);
                }
            }
        }
        false
    }
}

/// A generation counter for "visited in this search" marks, so they never
/// need clearing (except on wrap-around).
fn bump_epoch(epoch: &mut u32, marks: &mut [u32]) -> u32 {
    *epoch = epoch.wrapping_add(1);
    if *epoch == 0 {
        marks.iter_mut().for_each(|m| *m = 0);
        *epoch = 1;
    }
    *epoch
}

/// Any two steps of `rank` whose accesses conflict must be ordered by deps.
fn races(p: &Problem, rank: usize, steps: &[Step], aliased: bool) -> Result<(), CheckError> {
    let m = steps.len();
    if m < 2 {
        return Ok(());
    }
    // (buffer, lo, hi, step, writes)
    let mut acc: Vec<(usize, usize, usize, usize, bool)> = Vec::new();
    for (i, st) in steps.iter().enumerate() {
        let mut add = |s: Slice, w: bool| {
            if s.len > 0 {
                let (b, o) = locate(p, rank, aliased, s);
                acc.push((b, o, o + s.len, i, w));
            }
        };
        match st.kind {
            StepKind::Send { src, .. } => add(src, false),
            StepKind::Recv { dst, .. } => add(dst, true),
            StepKind::RecvReduce { src, dst, .. } | StepKind::Copy { src, dst } => {
                add(src, false);
                add(dst, true);
            }
            StepKind::Reduce { src, dst } => {
                add(src, false);
                add(dst, true);
            }
        }
    }
    acc.sort_unstable();
    let mut reach: Option<Reach> = None;
    let mut active: Vec<usize> = Vec::new();
    for x in 0..acc.len() {
        let (b, lo, _, sx, wx) = acc[x];
        active.retain(|&y| acc[y].0 == b && acc[y].2 > lo);
        for &y in &active {
            let (_, ylo, yhi, sy, wy) = acc[y];
            if sy == sx || !(wx || wy) {
                continue;
            }
            let reach = reach.get_or_insert_with(|| Reach::new(steps, RACE_BITS_BYTES));
            let (first, second) = (sx.min(sy), sx.max(sy));
            if !reach.before(first, second) {
                let hi = acc[x].2.min(yhi);
                let lo2 = lo.max(ylo);
                let name = ["input/output", "output", "scratch"][b];
                let name = if aliased {
                    name
                } else {
                    ["input", "output", "scratch"][b]
                };
                return Err(CheckError::Race {
                    rank,
                    first,
                    second,
                    what: format!(
                        "both access {name}[{lo2}..{hi}] ({} writes) and neither depends on the other",
                        if wx && wy { "both" } else { "one" }
                    ),
                });
            }
        }
        active.push(x);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps whose dependencies form a pseudo-random DAG (each step depends
    /// on up to three earlier ones, some far back).
    fn dag(m: usize) -> Vec<Step> {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..m)
            .map(|i| {
                let mut deps: Vec<u32> = (0..next() % 4)
                    .filter(|_| i > 0)
                    .map(|_| {
                        let back = if next() % 5 == 0 {
                            next() as usize % i
                        } else {
                            next() as usize % 3
                        };
                        i.saturating_sub(back + 1) as u32
                    })
                    .collect();
                deps.sort_unstable();
                deps.dedup();
                Step {
                    kind: StepKind::Copy {
                        src: Slice::new(Buf::Input, 0, 1),
                        dst: Slice::new(Buf::Output, 0, 1),
                    },
                    channel: 0,
                    deps,
                }
            })
            .collect()
    }

    /// A barrier's verdict and message do not depend on how many source
    /// ranks each pass follows.
    #[test]
    fn the_barrier_check_answers_alike_in_blocks() {
        use crate::{Algorithm, Problem, Schedule};
        let n = 150;
        let p = Problem::new(Collective::Barrier, 0, n, n);
        let steps = |a| {
            let s = Schedule::new(p, a).unwrap();
            (0..n).map(|r| s.rank_steps(r)).collect::<Vec<_>>()
        };
        let verdict = |steps: &[Vec<Step>], block| {
            let ord = order::order(steps).unwrap();
            barrier_check(n, steps, &ord.events, block).map_err(|e| e.to_string())
        };
        let doubling = steps(Algorithm::RecursiveDoubling);
        // A chain 0 -> 1 -> ... -> 149: rank r hears from 0..=r only, so
        // rank 0 misses sources in every block.
        let tok = |b| Slice::new(b, 0, 0);
        let chain: Vec<Vec<Step>> = (0..n)
            .map(|r| {
                let mut l = Vec::new();
                if r > 0 {
                    let dst = tok(Buf::Output);
                    l.push(Step {
                        kind: StepKind::Recv { peer: r - 1, dst },
                        channel: 0,
                        deps: Vec::new(),
                    });
                }
                if r + 1 < n {
                    let src = tok(Buf::Input);
                    l.push(Step {
                        kind: StepKind::Send { peer: r + 1, src },
                        channel: 0,
                        deps: if r > 0 { vec![0] } else { Vec::new() },
                    });
                }
                l
            })
            .collect();
        // Everyone tells everyone, but 149 never tells 3: rank 3 misses a
        // source of the last block only.
        let mut direct = steps(Algorithm::Direct);
        direct[149].retain(|st| {
            st.kind
                != StepKind::Send {
                    peer: 3,
                    src: tok(Buf::Input),
                }
        });
        direct[3].retain(|st| !matches!(st.kind, StepKind::Recv { peer: 149, .. }));
        for block in [1, 63, 64, 100, 149, BARRIER_BLOCK_RANKS] {
            assert_eq!(verdict(&doubling, block), Ok(()), "block {block}");
            assert_eq!(
                verdict(&chain, block),
                Err("rank 0: barrier: completes without hearing from \
                     {1, 2, 3, 4, 5, 6, 7, 8, ... (149 ranks)}"
                    .into()),
                "block {block}"
            );
            assert_eq!(
                verdict(&direct, block),
                Err("rank 3: barrier: completes without hearing from {149}".into()),
                "block {block}"
            );
        }
    }

    #[test]
    fn the_dependency_search_answers_as_the_ancestor_sets_do() {
        let steps = dag(300);
        let mut bits = Reach::new(&steps, usize::MAX);
        let mut search = Reach::new(&steps, 0);
        assert!(bits.bits.is_some() && search.bits.is_none());
        let mut yes = 0;
        for b in 0..steps.len() {
            for a in 0..b {
                let want = bits.before(a, b);
                assert_eq!(search.before(a, b), want, "{a} before {b}");
                yes += usize::from(want);
            }
        }
        // Both answers occur.
        assert!(yes > 1000 && yes < 300 * 299 / 2, "{yes}");
    }
}
