//! Schedule generation: one module per algorithm family.
//!
//! Generators list a rank's steps in an order that is a valid sequential
//! execution; the [`Builder`] derives every data dependency from the buffer
//! ranges each step reads and writes (read-after-write, write-after-read,
//! write-after-write), so generators only add the structural dependencies that
//! carry no data (zero-length pieces, barrier tokens). For algorithms declared
//! in-place safe the builder tracks hazards on the aliased layout (input and
//! output the same memory, see [`locate`]), so the dependencies also order
//! the accesses an in-place call makes conflict.

mod bruck;
mod direct;
pub(crate) mod hd;
mod hier;
pub(crate) mod ring;
pub(crate) mod tree;

use crate::{
    Algorithm, Buf, Collective, Problem, Schedule, Slice, StepKind, StepList, schedule::AlgoError,
};

/// No step (a segment not yet written).
const NO_STEP: u32 = u32::MAX;

/// Which (algorithm, collective) pairs have a schedule, and why not.
pub(crate) fn support(p: &Problem, a: Algorithm) -> Result<(), String> {
    use Collective as C;
    let c = p.collective;
    let ok = match a {
        Algorithm::Ring => matches!(
            c,
            C::AllReduce | C::ReduceScatter | C::AllGather | C::Broadcast { .. } | C::Reduce { .. }
        ),
        Algorithm::Direct => true,
        Algorithm::Tree => matches!(c, C::AllReduce | C::Broadcast { .. } | C::Reduce { .. }),
        Algorithm::HalvingDoubling => {
            matches!(c, C::AllReduce | C::ReduceScatter | C::AllGather)
        }
        Algorithm::RecursiveDoubling => matches!(
            c,
            C::AllReduce | C::AllGather | C::Barrier | C::Broadcast { .. } | C::Reduce { .. }
        ),
        Algorithm::Bruck => matches!(c, C::AllGather | C::ReduceScatter),
        Algorithm::Hierarchical => {
            if !matches!(
                c,
                C::AllReduce | C::ReduceScatter | C::AllGather | C::Broadcast { .. }
            ) {
                false
            } else if p.nranks % p.ranks_per_node != 0 {
                return Err(format!(
                    ": {} ranks are not whole nodes of {}",
                    p.nranks, p.ranks_per_node
                ));
            } else {
                true
            }
        }
    };
    if ok { Ok(()) } else { Err(String::new()) }
}

pub(crate) fn validate(p: &Problem, algorithm: Algorithm) -> Result<(), AlgoError> {
    p.validate()?;
    support(p, algorithm).map_err(|why| {
        // Where the layout is not the reason, name the algorithms that do.
        let why = if why.is_empty() {
            let can: Vec<&str> = Algorithm::ALL
                .iter()
                .filter(|&&a| support(p, a).is_ok())
                .map(|a| a.name())
                .collect();
            format!(" (implemented by {})", can.join(", "))
        } else {
            why
        };
        AlgoError::Unsupported {
            collective: p.collective.name(),
            algorithm: algorithm.name(),
            why,
        }
    })
}

pub(crate) fn rank_steps(s: &Schedule, rank: usize) -> StepList {
    let mut b = Builder::new(&s.problem, rank, in_place_safe(s));
    match s.algorithm {
        Algorithm::Ring => ring::steps(s, &mut b),
        Algorithm::Direct => direct::steps(s, &mut b),
        Algorithm::Tree => tree::steps(s, &mut b),
        Algorithm::HalvingDoubling | Algorithm::RecursiveDoubling => hd::steps(s, &mut b),
        Algorithm::Hierarchical => hier::steps(s, &mut b),
        Algorithm::Bruck => bruck::steps(s, &mut b),
    }
    b.finish()
}

pub(crate) fn scratch_len(s: &Schedule, rank: usize) -> usize {
    match s.algorithm {
        Algorithm::Ring => ring::scratch_len(s, rank),
        Algorithm::Direct => direct::scratch_len(s, rank),
        Algorithm::Tree => tree::scratch_len(s, rank),
        Algorithm::HalvingDoubling | Algorithm::RecursiveDoubling => hd::scratch_len(s, rank),
        Algorithm::Hierarchical => hier::scratch_len(s, rank),
        Algorithm::Bruck => bruck::scratch_len(s, rank),
    }
}

pub(crate) fn in_place_safe(s: &Schedule) -> bool {
    match s.algorithm {
        Algorithm::Direct => direct::in_place_safe(s),
        Algorithm::Ring
        | Algorithm::Tree
        | Algorithm::HalvingDoubling
        | Algorithm::RecursiveDoubling
        | Algorithm::Hierarchical
        | Algorithm::Bruck => true,
    }
}

/// Where `slice` of `rank` lives: `(buffer index, element offset)`.
///
/// Not aliased: input, output and scratch are buffers 0, 1 and 2. Aliased
/// (an in-place call, laid out as NCCL does): input and output share buffer 0
/// (the input is block `rank` of the output for all_gather and the root's
/// for gather, the output is block `rank` of the input for reduce_scatter
/// and the root's for scatter) and scratch is buffer 2.
pub(crate) fn locate(p: &Problem, rank: usize, aliased: bool, sl: Slice) -> (usize, usize) {
    match (sl.buf, aliased) {
        (Buf::Scratch, _) => (2, sl.offset),
        (Buf::Input, false) => (0, sl.offset),
        (Buf::Output, false) => (1, sl.offset),
        (Buf::Input, true) => match p.collective {
            Collective::AllGather => (0, p.block(rank).0 + sl.offset),
            Collective::Gather { root } if rank == root => (0, root * p.count + sl.offset),
            _ => (0, sl.offset),
        },
        (Buf::Output, true) => match p.collective {
            Collective::ReduceScatter => (0, p.block(rank).0 + sl.offset),
            Collective::Scatter { root } if rank == root => (0, root * p.count + sl.offset),
            _ => (0, sl.offset),
        },
    }
}

/// Lengths of the physical buffers [`locate`] maps into.
pub(crate) fn physical_lens(p: &Problem, rank: usize, aliased: bool, scratch: usize) -> [usize; 3] {
    if aliased {
        [p.input_len(rank).max(p.output_len(rank)), 0, scratch]
    } else {
        [p.input_len(rank), p.output_len(rank), scratch]
    }
}

/// How a region of up to `unit` elements is cut into pieces: `channels`
/// parts, each in `chunks` pipelined chunks. Piece `j` is on channel
/// `j % channels`, chunk `j / channels`, so iterating pieces in order walks
/// the chunks one after another with every channel busy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub channels: usize,
    pub chunks: usize,
}

impl Plan {
    /// The plan every generator and the cost model use for a region of
    /// `unit` elements (the largest region cut the same way).
    pub(crate) fn new(s: &Schedule, unit: usize) -> Self {
        let channels = (s.channels.max(1) as usize).min(unit.max(1));
        let per = unit.div_ceil(channels);
        let chunks = if s.chunk_elems == 0 || per == 0 {
            1
        } else {
            per.div_ceil(s.chunk_elems)
        };
        Plan { channels, chunks }
    }

    pub(crate) fn pieces(&self) -> usize {
        self.channels * self.chunks
    }

    /// The channel of piece `j` (of any region).
    pub(crate) fn channel(&self, j: usize) -> u16 {
        (j % self.channels) as u16
    }

    /// Piece `j` of the region `(off, len)`: `(offset, len, channel)`.
    pub(crate) fn piece(&self, region: (usize, usize), j: usize) -> (usize, usize, u16) {
        let c = self.channel(j);
        let k = j / self.channels;
        let (co, cl) = crate::block_partition(region.1, self.channels, usize::from(c));
        let (ko, kl) = crate::block_partition(cl, self.chunks, k);
        (region.0 + co + ko, kl, c)
    }
}

/// A group of ranks `base + i * stride` for `i < size`, this rank at `pos`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Group {
    pub base: usize,
    pub stride: usize,
    pub size: usize,
    pub pos: usize,
}

impl Group {
    pub(crate) fn all(p: &Problem, rank: usize) -> Self {
        Group {
            base: 0,
            stride: 1,
            size: p.nranks,
            pos: rank,
        }
    }
    pub(crate) fn member(&self, i: usize) -> usize {
        self.base + (i % self.size) * self.stride
    }
    /// The member `d` places after this rank (modulo the group size).
    pub(crate) fn after(&self, d: usize) -> usize {
        self.member(self.pos + d % self.size)
    }
    /// The member `d` places before this rank (modulo the group size).
    pub(crate) fn before(&self, d: usize) -> usize {
        self.member(self.pos + self.size - d % self.size)
    }
}

/// One access of a step: `(buffer index, first element, end element)` on
/// the layout [`locate`] maps to.
type Access = (u8, usize, usize);

/// Accumulates one rank's steps and derives their data dependencies.
///
/// [`Builder::push`] only records a step and the buffer ranges it reads and
/// writes; [`Builder::finish`] derives the dependencies in one pass, once
/// every range boundary is known: each buffer is cut at all of them into
/// segments that never split again, numbered in a sorted array whose
/// positions a hash table gives (no tree walk or search per access, no
/// copying of reader lists).
pub(crate) struct Builder<'a> {
    pub(crate) p: &'a Problem,
    pub(crate) rank: usize,
    /// Each step's kind and channel.
    kinds: Vec<(StepKind, u16)>,
    /// The generators' own dependencies, step `i`'s at
    /// `extra[extra_off[i]..extra_off[i + 1]]`.
    extra: Vec<u32>,
    extra_off: Vec<u32>,
    aliased: bool,
}

impl<'a> Builder<'a> {
    pub(crate) fn new(p: &'a Problem, rank: usize, aliased: bool) -> Self {
        Builder {
            p,
            rank,
            kinds: Vec::new(),
            extra: Vec::new(),
            extra_off: vec![0],
            aliased,
        }
    }

    fn locate(&self, sl: Option<Slice>) -> Option<Access> {
        let sl = sl.filter(|s| s.len > 0)?;
        let (b, o) = locate(self.p, self.rank, self.aliased, sl);
        Some((b as u8, o, o + sl.len))
    }

    /// What step `kind` reads (up to two ranges) and writes (one), on the
    /// layout [`locate`] maps to. Derived again where needed rather than
    /// stored: kept per step it was 96 bytes, more than the step, and the
    /// largest allocation of a long rank's generation.
    #[inline]
    fn accesses(&self, kind: &StepKind) -> [Option<Access>; 3] {
        let (reads, write): ([Option<Slice>; 2], Option<Slice>) = match *kind {
            StepKind::Send { src, .. } => ([Some(src), None], None),
            StepKind::Recv { dst, .. } => ([None, None], Some(dst)),
            StepKind::RecvReduce { src, dst, .. } | StepKind::Copy { src, dst } => {
                ([Some(src), None], Some(dst))
            }
            StepKind::Reduce { src, dst } => ([Some(src), Some(dst)], Some(dst)),
        };
        [
            self.locate(reads[0]),
            self.locate(reads[1]),
            self.locate(write),
        ]
    }

    /// Room for `n` more steps (a generator that knows its step count saves
    /// the copies of growing).
    pub(crate) fn reserve(&mut self, n: usize) {
        self.kinds.reserve(n);
        self.extra_off.reserve(n);
    }

    /// Appends a step; its dependencies will be `extra` plus every earlier
    /// step whose accesses conflict with this one's (added by
    /// [`Builder::finish`]). Returns the step's index.
    pub(crate) fn push(&mut self, kind: StepKind, channel: u16, extra: &[u32]) -> u32 {
        let idx = self.kinds.len() as u32;
        self.kinds.push((kind, channel));
        self.extra.extend_from_slice(extra);
        self.extra_off.push(self.extra.len() as u32);
        idx
    }

    /// The steps with their data dependencies: read-after-write,
    /// write-after-read and write-after-write on overlapping ranges, in
    /// push order.
    pub(crate) fn finish(self) -> StepList {
        // Segment boundaries of each buffer: every access's ends. Most ends
        // repeat (every round of a ring touches the same piece boundaries):
        // a direct-mapped table of ends already listed keeps the lists, and
        // their sort, near the number of distinct ends (a value evicted
        // from the table is only listed again; the dedup below drops it).
        let mut bounds: [Vec<usize>; 3] = Default::default();
        let steps = self.kinds.len();
        let size = (2 * steps).next_power_of_two().clamp(16, 1 << 16);
        let shift = u64::BITS - size.trailing_zeros();
        let mut listed = vec![(u8::MAX, usize::MAX); size];
        for (kind, _) in &self.kinds {
            for a in self.accesses(kind).iter().flatten() {
                for x in [a.1, a.2] {
                    let h = ((x as u64 ^ u64::from(a.0) << 62).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        >> shift) as usize;
                    if listed[h] != (a.0, x) {
                        listed[h] = (a.0, x);
                        bounds[a.0 as usize].push(x);
                    }
                }
            }
        }
        for b in &mut bounds {
            b.sort_unstable();
            b.dedup();
        }
        // Per segment: its last writer and the readers since, as a list
        // threaded through one arena (`(step, next)`, `NO_STEP` ends it).
        let segs = |i: usize| bounds[i].len().saturating_sub(1);
        let mut writer: [Vec<u32>; 3] = std::array::from_fn(|i| vec![NO_STEP; segs(i)]);
        let mut readers: [Vec<u32>; 3] = std::array::from_fn(|i| vec![NO_STEP; segs(i)]);
        let mut arena: Vec<(u32, u32)> = Vec::with_capacity(steps);
        let index: [BoundIndex; 3] = std::array::from_fn(|i| BoundIndex::new(&bounds[i]));
        let seg = |b: usize, x: usize| index[b].get(x);
        // Every step's dependencies, one list after another.
        let mut deps: Vec<u32> = Vec::with_capacity(self.extra.len() + 2 * steps);
        let mut dep_off: Vec<u32> = Vec::with_capacity(steps + 1);
        dep_off.push(0);
        for (i, (kind, _)) in self.kinds.iter().enumerate() {
            let idx = i as u32;
            let acc = self.accesses(kind);
            let start = deps.len();
            let (e0, e1) = (self.extra_off[i] as usize, self.extra_off[i + 1] as usize);
            deps.extend_from_slice(&self.extra[e0..e1]);
            // Reads record themselves as readers; then the write depends on
            // earlier readers (not on this step) and clears them.
            for &(b, lo, hi) in acc[..2].iter().flatten() {
                let b = b as usize;
                for k in seg(b, lo)..seg(b, hi) {
                    if writer[b][k] != NO_STEP {
                        deps.push(writer[b][k]);
                    }
                    arena.push((idx, readers[b][k]));
                    readers[b][k] = (arena.len() - 1) as u32;
                }
            }
            if let Some((b, lo, hi)) = acc[2] {
                let b = b as usize;
                for k in seg(b, lo)..seg(b, hi) {
                    if writer[b][k] != NO_STEP {
                        deps.push(writer[b][k]);
                    }
                    let mut r = readers[b][k];
                    while r != NO_STEP {
                        let (step, next) = arena[r as usize];
                        if step != idx {
                            deps.push(step);
                        }
                        r = next;
                    }
                    writer[b][k] = idx;
                    readers[b][k] = NO_STEP;
                }
            }
            // Sorted, without repeats.
            deps[start..].sort_unstable();
            let mut kept = start;
            for k in start..deps.len() {
                if kept == start || deps[k] != deps[kept - 1] {
                    deps[kept] = deps[k];
                    kept += 1;
                }
            }
            deps.truncate(kept);
            dep_off.push(deps.len() as u32);
        }
        StepList {
            kinds: self.kinds,
            deps,
            dep_off,
        }
    }

    pub(crate) fn send(&mut self, peer: usize, src: Slice, ch: u16, extra: &[u32]) -> u32 {
        self.push(StepKind::Send { peer, src }, ch, extra)
    }
    pub(crate) fn recv(&mut self, peer: usize, dst: Slice, ch: u16, extra: &[u32]) -> u32 {
        self.push(StepKind::Recv { peer, dst }, ch, extra)
    }
    pub(crate) fn recv_reduce(
        &mut self,
        peer: usize,
        src: Slice,
        dst: Slice,
        ch: u16,
        extra: &[u32],
    ) -> u32 {
        self.push(StepKind::RecvReduce { peer, src, dst }, ch, extra)
    }
    /// A local copy; skipped (returns `None`) when empty.
    pub(crate) fn copy(&mut self, src: Slice, dst: Slice) -> Option<u32> {
        (src.len > 0).then(|| self.push(StepKind::Copy { src, dst }, 0, &[]))
    }
    /// A local reduction; skipped when empty.
    pub(crate) fn reduce(&mut self, src: Slice, dst: Slice, ch: u16) -> Option<u32> {
        (src.len > 0).then(|| self.push(StepKind::Reduce { src, dst }, ch, &[]))
    }
}

/// Position of each of a sorted list of distinct boundaries, by value: the
/// range from the first boundary to the last cut into power-of-two buckets,
/// at most two per boundary, each knowing where its boundaries start in the
/// list. A lookup is a shift, two reads and a search among the bucket's
/// boundaries (one or two where they are spread evenly, as a schedule's
/// blocks are: a scan; a binary search past eight, where they cluster,
/// so no bucket costs more than a logarithm). Values close together
/// look up entries close together, so a generator walking its buffers in
/// order stays in cache (a hash table spread them over the whole table,
/// and its lookups were most of a 16384-rank ring's generation).
struct BoundIndex<'a> {
    bounds: &'a [usize],
    /// The first boundary; buckets count from it.
    lo: usize,
    /// log2 of a bucket's width.
    shift: u32,
    /// Per bucket, the position of its first boundary (of the first one
    /// after it where it has none), and the list's length at the end.
    first: Vec<u32>,
}

impl<'a> BoundIndex<'a> {
    fn new(bounds: &'a [usize]) -> Self {
        let (lo, hi) = match (bounds.first(), bounds.last()) {
            (Some(&lo), Some(&hi)) => (lo, hi),
            _ => (0, 0),
        };
        let span = hi - lo;
        let most = 2 * bounds.len().max(1);
        let mut shift = 0;
        while (span >> shift) >= most {
            shift += 1;
        }
        let buckets = (span >> shift) + 1;
        let mut first = Vec::with_capacity(buckets + 1);
        let mut i = 0;
        for b in 0..=buckets {
            let start = (b as u128) << shift;
            while i < bounds.len() && ((bounds[i] - lo) as u128) < start {
                i += 1;
            }
            first.push(i as u32);
        }
        BoundIndex {
            bounds,
            lo,
            shift,
            first,
        }
    }

    /// The position of boundary `x`, which must be in the list.
    #[inline]
    fn get(&self, x: usize) -> usize {
        // Below the first boundary the offset wraps past every bucket.
        let b = x.wrapping_sub(self.lo) >> self.shift;
        let k = match (self.first.get(b), self.first.get(b.wrapping_add(1))) {
            (Some(&a), Some(&e)) => {
                let (mut k, e) = (a as usize, e as usize);
                if e - k > 8 {
                    k += self.bounds[k..e].partition_point(|&v| v < x);
                } else {
                    while k < e && self.bounds[k] < x {
                        k += 1;
                    }
                }
                k
            }
            _ => usize::MAX,
        };
        match self.bounds.get(k) {
            Some(&v) if v == x => k,
            _ => panic!("every access end is a boundary ({x} is not)"),
        }
    }
}

/// Shorthand for a slice.
pub(crate) fn sl(buf: Buf, offset: usize, len: usize) -> Slice {
    Slice::new(buf, offset, len)
}

/// The `n`-way block partition of `count` as a vector of `(offset, len)`.
pub(crate) fn blocks(count: usize, n: usize) -> Vec<(usize, usize)> {
    (0..n)
        .map(|i| crate::block_partition(count, n, i))
        .collect()
}

/// Largest block length of the `n`-way partition of `count`.
pub(crate) fn max_block(count: usize, n: usize) -> usize {
    count.div_ceil(n.max(1))
}

#[cfg(test)]
mod tests {
    use super::BoundIndex;

    #[test]
    fn bound_index_finds_every_boundary_at_its_position() {
        // Clustered, spread and power-of-two strided values, and the empty
        // and one-element lists.
        for n in [0usize, 1, 2, 3, 100, 4097] {
            for stride in [1usize, 64, 1 << 20, (1 << 32) + 1] {
                let mut bounds: Vec<usize> = (0..n).map(|i| i * stride + (i % 3)).collect();
                // Sorted and distinct, as the builder lists them.
                bounds.sort_unstable();
                bounds.dedup();
                let idx = BoundIndex::new(&bounds);
                assert!(idx.first.len() <= 2 * n.max(1) + 1);
                for (i, &x) in bounds.iter().enumerate() {
                    assert_eq!(idx.get(x), i, "n {n} stride {stride} value {x}");
                }
            }
        }
        // A dense cluster and one far value: the cluster shares a bucket
        // (searched, not scanned) and the table stays two per boundary.
        let mut bounds: Vec<usize> = (0..5000).collect();
        bounds.push(1 << 40);
        let idx = BoundIndex::new(&bounds);
        assert!(idx.first.len() <= 2 * bounds.len() + 1);
        for (i, &x) in bounds.iter().enumerate() {
            assert_eq!(idx.get(x), i);
        }
    }

    #[test]
    #[should_panic(expected = "every access end is a boundary")]
    fn bound_index_refuses_a_value_not_listed() {
        let bounds = [10usize, 20, 30];
        BoundIndex::new(&bounds).get(25);
    }

    #[test]
    #[should_panic(expected = "every access end is a boundary")]
    fn bound_index_refuses_a_value_below_the_first() {
        let bounds = [10usize, 20, 30];
        BoundIndex::new(&bounds).get(5);
    }
}
