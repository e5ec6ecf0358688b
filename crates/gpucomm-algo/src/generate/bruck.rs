//! Bruck's all-gather and its mirror image, a reduce-scatter, for any
//! number of ranks (J. Bruck et al., "Efficient algorithms for all-to-all
//! communications in multiport message-passing systems", IEEE TPDS 8(11),
//! 1997; MPICH's allgather for short messages on a non-power-of-two
//! communicator, Thakur, Rabenseifner and Gropp 2005).
//!
//! * All-gather: `ceil(log2 n)` rounds; in the round of distance `d` (1, 2,
//!   4, ...) a rank holding blocks `r .. r+d` (modulo `n`) sends the first
//!   `min(d, n-d)` of them to rank `r - d` and receives as many, blocks
//!   `r+d ..`, from rank `r + d`. Every rank sends `n-1` blocks in all, as
//!   in a ring, in a logarithmic number of rounds and without the fold
//!   recursive doubling needs when `n` is not a power of two (which sends
//!   twice as much on the folded ranks). As in MPICH, the blocks gather in
//!   a scratch buffer rotated so that block `r` is first, which makes every
//!   round one contiguous message each way; the output is written from it
//!   at the end (two copies).
//! * Reduce-scatter: the same rounds backwards, each edge reversed: in the
//!   round of distance `d` (largest first) rank `r` sends its partial sums
//!   of blocks `r+d .. r+d+min(d, n-d)` to rank `r + d` and adds those of
//!   rank `r - d` to its own partial sums of blocks `r ..`. Each block's
//!   contributions travel up the binomial tree the all-gather would
//!   broadcast it down, so each is added exactly once. The partial sums
//!   live in the rotated scratch (the input copied there first).
//!
//! NCCL's PAT ("parallel aggregated trees", `src/include/collectives.h`,
//! one GPU per node) moves data along the same binomial trees, one
//! dimension `2^k` at a time.
//!
//! Every round needs the previous one complete; channels split each
//! exchange into parallel parts.

use super::{Builder, Plan, sl};
use crate::{Buf, Collective, Schedule};

/// Where the blocks `r .. r+k` (modulo `n`, `k <= n`) end in `r`'s rotated
/// scratch, which holds block `r + j` at position `j`: their total length,
/// from the blocks' offsets (no per-rank table: a rank uses a few of these).
fn rotated_end(s: &Schedule, r: usize, k: usize) -> usize {
    let p = &s.problem;
    let n = p.nranks;
    // Offset of block j in rank order, `count` for j == n.
    let at = |j: usize| if j < n { p.block(j).0 } else { p.count };
    if r + k <= n {
        at(r + k) - at(r)
    } else {
        p.count - at(r) + at(r + k - n)
    }
}

/// Copies between the output (or input) in rank order and the rotated
/// scratch: `to_scratch` moves blocks `r ..` of `buf` to the scratch's
/// front, else the scratch back to `buf`'s rank order. Blocks `r .. n-1`
/// are one contiguous run, `0 .. r-1` another. Returns the copy steps.
fn rotate(s: &Schedule, b: &mut Builder, buf: Buf, to_scratch: bool) -> Vec<u32> {
    let p = &s.problem;
    let (r, c) = (b.rank, p.count);
    let start = p.block(r).0;
    let tail = c - start;
    [(start, 0, tail), (0, tail, start)]
        .into_iter()
        .filter_map(|(o, so, l)| {
            if to_scratch {
                b.copy(sl(buf, o, l), sl(Buf::Scratch, so, l))
            } else {
                b.copy(sl(Buf::Scratch, so, l), sl(buf, o, l))
            }
        })
        .collect()
}

/// The plan of one exchange: channels only, cut as the largest region (a
/// round moves at most half the blocks).
fn plan(s: &Schedule) -> Plan {
    let mut pl = Plan::new(s, s.problem.count.div_ceil(2));
    pl.chunks = 1;
    pl
}

pub(super) fn steps(s: &Schedule, b: &mut Builder) {
    let p = *b.p;
    if p.count == 0 {
        return;
    }
    if p.nranks == 1 {
        // One block, the whole buffer: nothing to exchange.
        b.copy(sl(Buf::Input, 0, p.count), sl(Buf::Output, 0, p.count));
        return;
    }
    match p.collective {
        Collective::AllGather => all_gather(s, b),
        Collective::ReduceScatter => reduce_scatter(s, b),
        _ => unreachable!("validated by support()"),
    }
}

/// Sends `region` of the scratch to `to` and receives `into` from `from`,
/// in plan pieces, after `after`; `reduce` adds what arrives to what is
/// there. Returns the receives.
#[allow(clippy::too_many_arguments)]
fn exchange(
    b: &mut Builder,
    pl: &Plan,
    to: usize,
    region: (usize, usize),
    from: usize,
    into: (usize, usize),
    reduce: bool,
    after: &[u32],
) -> Vec<u32> {
    for j in 0..pl.pieces() {
        let (o, l, ch) = pl.piece(region, j);
        b.send(to, sl(Buf::Scratch, o, l), ch, after);
    }
    (0..pl.pieces())
        .map(|j| {
            let (o, l, ch) = pl.piece(into, j);
            let dst = sl(Buf::Scratch, o, l);
            if reduce {
                b.recv_reduce(from, dst, dst, ch, after)
            } else {
                b.recv(from, dst, ch, after)
            }
        })
        .collect()
}

fn all_gather(s: &Schedule, b: &mut Builder) {
    let p = *b.p;
    let n = p.nranks;
    let r = b.rank;
    let l = p.block(r).1;
    let off = |k| rotated_end(s, r, k);
    let pl = plan(s);
    // `last`: the previous round's receives, on which the next round's
    // sends depend (a structural order that also holds for empty pieces).
    let mut last: Vec<u32> = b
        .copy(sl(Buf::Input, 0, l), sl(Buf::Scratch, 0, l))
        .into_iter()
        .collect();
    let mut d = 1;
    while d < n {
        let cnt = d.min(n - d);
        let (to, from) = ((r + n - d) % n, (r + d) % n);
        // Blocks r .. r+cnt to r-d; blocks r+d .. r+d+cnt from r+d.
        last = exchange(
            b,
            &pl,
            to,
            (0, off(cnt)),
            from,
            (off(d), off(d + cnt) - off(d)),
            false,
            &last,
        );
        d <<= 1;
    }
    rotate(s, b, Buf::Output, false);
}

fn reduce_scatter(s: &Schedule, b: &mut Builder) {
    let p = *b.p;
    let n = p.nranks;
    let r = b.rank;
    let off = |k| rotated_end(s, r, k);
    let pl = plan(s);
    let mut last = rotate(s, b, Buf::Input, true);
    let mut d = 1 << (n - 1).ilog2();
    while d >= 1 {
        let cnt = d.min(n - d);
        let (to, from) = ((r + d) % n, (r + n - d) % n);
        // Partial sums of blocks r+d .. r+d+cnt to r+d; rank r-d's of
        // blocks r .. r+cnt added to ours.
        last = exchange(
            b,
            &pl,
            to,
            (off(d), off(d + cnt) - off(d)),
            from,
            (0, off(cnt)),
            true,
            &last,
        );
        d >>= 1;
    }
    let l = p.block(r).1;
    b.copy(sl(Buf::Scratch, 0, l), sl(Buf::Output, 0, l));
}

pub(super) fn scratch_len(s: &Schedule, _rank: usize) -> usize {
    if s.problem.nranks > 1 {
        s.problem.count
    } else {
        0
    }
}
