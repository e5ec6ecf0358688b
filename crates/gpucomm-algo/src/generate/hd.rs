//! Recursive halving-doubling (Rabenseifner) and recursive doubling.
//!
//! Both work on a power of two `p2 <= n` of ranks. With `rem = n - p2`
//! extra ranks, the standard fold (Thakur, Rabenseifner and Gropp, "Optimization
//! of collective communication operations in MPICH", 2005) pairs the first
//! `2 rem` ranks: each even one hands its data to the odd one above it and
//! sits out; the odd one stands for both. At the end the odd rank hands the
//! result back. Ranks are renumbered `0..p2` ("new ranks").
//!
//! * Halving-doubling all_reduce: reduce-scatter by recursive halving
//!   (distance `p2/2`, `p2/4`, ..., 1; each round exchanges half of the
//!   remaining range), then all-gather by recursive doubling. Moves
//!   `2 (p2-1)/p2` of the buffer per rank in `2 log2 p2` rounds. The blocks
//!   are "super-blocks": new rank `i`'s block is the union of the n-way blocks
//!   of the ranks it stands for, so reduce_scatter and all_gather work too.
//! * Recursive doubling all_reduce: `log2 p2` rounds, each exchanging the
//!   whole vector with the partner at distance 1, 2, 4, ... (latency optimal).
//! * Recursive doubling barrier: the dissemination barrier (`ceil(log2 n)`
//!   rounds, any n, no fold). Broadcast and reduce: binomial trees.
//!
//! Chunking does not apply here (every round needs the previous one
//! complete); channels split each exchange into parallel parts.

use super::{Builder, Group, Plan, sl};
use crate::{Algorithm, Buf, Collective, Schedule};

/// The fold: `(p2, rem)`.
pub(crate) fn fold(n: usize) -> (usize, usize) {
    let p2 = if n == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    };
    (p2, n - p2)
}

fn new_rank(n: usize, r: usize) -> Option<usize> {
    let (_, rem) = fold(n);
    if r < 2 * rem {
        (r % 2 == 1).then_some(r / 2)
    } else {
        Some(r - rem)
    }
}

fn real_rank(n: usize, nr: usize) -> usize {
    let (_, rem) = fold(n);
    if nr < rem { 2 * nr + 1 } else { nr + rem }
}

/// Element range of super-blocks `lo..hi` (new ranks).
fn span(p: &crate::Problem, lo: usize, hi: usize) -> (usize, usize) {
    let n = p.nranks;
    let first = if lo < fold(n).1 {
        2 * lo
    } else {
        lo + fold(n).1
    };
    let last = real_rank(n, hi - 1);
    let start = p.block(first).0;
    let (o, l) = p.block(last);
    (start, o + l - start)
}

/// The plan for one exchange: channels only.
fn plan(s: &Schedule, unit: usize) -> Plan {
    let mut pl = Plan::new(s, unit);
    pl.chunks = 1;
    pl
}

/// Sends `region` in plan pieces, after `after` (the previous round's
/// receives: a structural dependency that also holds for empty pieces).
fn send_after(
    b: &mut Builder,
    pl: &Plan,
    peer: usize,
    buf: Buf,
    region: (usize, usize),
    after: &[u32],
) {
    for j in 0..pl.pieces() {
        let (o, l, ch) = pl.piece(region, j);
        b.send(peer, sl(buf, o, l), ch, after);
    }
}

fn send_region(b: &mut Builder, pl: &Plan, peer: usize, buf: Buf, region: (usize, usize)) {
    send_after(b, pl, peer, buf, region, &[]);
}

/// Receives `region` in plan pieces; returns the receive steps.
fn recv_region(
    b: &mut Builder,
    pl: &Plan,
    peer: usize,
    buf: Buf,
    region: (usize, usize),
) -> Vec<u32> {
    recv_after(b, pl, peer, buf, region, &[])
}

/// Receives `region` in plan pieces after `after`; returns the receive steps.
fn recv_after(
    b: &mut Builder,
    pl: &Plan,
    peer: usize,
    buf: Buf,
    region: (usize, usize),
    after: &[u32],
) -> Vec<u32> {
    (0..pl.pieces())
        .map(|j| {
            let (o, l, ch) = pl.piece(region, j);
            b.recv(peer, sl(buf, o, l), ch, after)
        })
        .collect()
}

fn recv_reduce_region(
    b: &mut Builder,
    pl: &Plan,
    peer: usize,
    own: Buf,
    acc: Buf,
    region: (usize, usize),
    after: &[u32],
) -> Vec<u32> {
    (0..pl.pieces())
        .map(|j| {
            let (o, l, ch) = pl.piece(region, j);
            b.recv_reduce(peer, sl(own, o, l), sl(acc, o, l), ch, after)
        })
        .collect()
}

pub(super) fn steps(s: &Schedule, b: &mut Builder) {
    let p = *b.p;
    let n = p.nranks;
    let r = b.rank;
    let c = p.count;
    match p.collective {
        Collective::Barrier => return dissemination(b),
        _ if c == 0 => return,
        Collective::Broadcast { root } => return binomial_bcast(s, b, root),
        Collective::Reduce { root } => return binomial_reduce(s, b, root),
        _ => {}
    }
    let (p2, rem) = fold(n);
    let nr = new_rank(n, r);
    let pl = plan(s, c);
    let all = (0, c);
    // `last`: the previous round's receives, on which the next round's sends
    // depend (a structural order that also holds for empty pieces).
    match p.collective {
        Collective::AllReduce => {
            // Fold: even ranks below 2 rem hand their input up and wait.
            let (own, mut last) = if r < 2 * rem {
                if r % 2 == 0 {
                    send_region(b, &pl, r + 1, Buf::Input, all);
                    recv_region(b, &pl, r + 1, Buf::Output, all);
                    return;
                }
                (
                    Buf::Output,
                    recv_reduce_region(b, &pl, r - 1, Buf::Input, Buf::Output, all, &[]),
                )
            } else {
                (Buf::Input, Vec::new())
            };
            let nr = nr.expect("participant");
            if s.algorithm == Algorithm::HalvingDoubling {
                last = halving(s, b, nr, p2, own, Buf::Output, last);
                last = doubling(s, b, nr, p2, last);
            } else {
                let mut cur = own;
                if own == Buf::Input {
                    b.copy(sl(Buf::Input, 0, c), sl(Buf::Output, 0, c));
                }
                let mut d = 1;
                while d < p2 {
                    let peer = real_rank(n, nr ^ d);
                    send_after(b, &pl, peer, cur, all, &last);
                    last = recv_after(b, &pl, peer, Buf::Scratch, all, &last);
                    for j in 0..pl.pieces() {
                        let (o, l, ch) = pl.piece(all, j);
                        if let Some(red) =
                            b.reduce(sl(Buf::Scratch, o, l), sl(Buf::Output, o, l), ch)
                        {
                            last.push(red);
                        }
                    }
                    cur = Buf::Output;
                    d <<= 1;
                }
            }
            if r < 2 * rem {
                send_after(b, &pl, r - 1, Buf::Output, all, &last);
            }
        }
        Collective::ReduceScatter => {
            let (o, l) = p.block(r);
            let (own, mut last) = if r < 2 * rem {
                if r % 2 == 0 {
                    send_region(b, &pl, r + 1, Buf::Input, all);
                    recv_region(b, &plan(s, l), r + 1, Buf::Output, (0, l));
                    return;
                }
                (
                    Buf::Scratch,
                    recv_reduce_region(b, &pl, r - 1, Buf::Input, Buf::Scratch, all, &[]),
                )
            } else {
                (Buf::Input, Vec::new())
            };
            let nr = nr.expect("participant");
            last = halving(s, b, nr, p2, own, Buf::Scratch, last);
            if r < 2 * rem {
                let (po, plen) = p.block(r - 1);
                send_after(b, &plan(s, plen), r - 1, Buf::Scratch, (po, plen), &last);
            }
            b.copy(sl(Buf::Scratch, o, l), sl(Buf::Output, 0, l));
        }
        Collective::AllGather => {
            let (o, l) = p.block(r);
            if r < 2 * rem && r % 2 == 0 {
                send_region(b, &plan(s, l), r + 1, Buf::Input, (0, l));
                recv_region(b, &pl, r + 1, Buf::Output, all);
                return;
            }
            let mut last: Vec<u32> = b
                .copy(sl(Buf::Input, 0, l), sl(Buf::Output, o, l))
                .into_iter()
                .collect();
            if r < 2 * rem {
                let (po, plen) = p.block(r - 1);
                last.extend(recv_region(
                    b,
                    &plan(s, plen),
                    r - 1,
                    Buf::Output,
                    (po, plen),
                ));
            }
            last = doubling(s, b, nr.expect("participant"), p2, last);
            if r < 2 * rem {
                send_after(b, &pl, r - 1, Buf::Output, all, &last);
            }
        }
        _ => unreachable!("validated by support()"),
    }
}

/// Recursive halving among the `p2` new ranks: this rank ends with its
/// super-block reduced in `acc`. Round 0 reads `own`, later rounds `acc`.
/// Returns the last round's receives.
#[allow(clippy::too_many_arguments)]
fn halving(
    s: &Schedule,
    b: &mut Builder,
    nr: usize,
    p2: usize,
    own: Buf,
    acc: Buf,
    mut last: Vec<u32>,
) -> Vec<u32> {
    let p = *b.p;
    let n = p.nranks;
    let (mut lo, mut hi) = (0, p2);
    let mut src = own;
    let mut d = p2 / 2;
    while d >= 1 {
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if nr & d == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let peer = real_rank(n, nr ^ d);
        let gr = span(&p, give.0, give.1);
        let kr = span(&p, keep.0, keep.1);
        let pl = plan(s, gr.1.max(kr.1));
        send_after(b, &pl, peer, src, gr, &last);
        last = recv_reduce_region(b, &pl, peer, src, acc, kr, &last);
        src = acc;
        (lo, hi) = keep;
        d /= 2;
    }
    if src == own && own != acc {
        // p2 == 1: nothing exchanged.
        let (o, l) = span(&p, nr, nr + 1);
        last.extend(b.copy(sl(own, o, l), sl(acc, o, l)));
    }
    last
}

/// Recursive doubling all-gather of super-blocks in the output among the
/// `p2` new ranks; this rank's super-block must be in place. Returns the
/// last round's receives.
fn doubling(s: &Schedule, b: &mut Builder, nr: usize, p2: usize, mut last: Vec<u32>) -> Vec<u32> {
    let p = *b.p;
    let n = p.nranks;
    let mut d = 1;
    while d < p2 {
        let mine = nr & !(d - 1);
        let theirs = (nr ^ d) & !(d - 1);
        let peer = real_rank(n, nr ^ d);
        let mr = span(&p, mine, mine + d);
        let tr = span(&p, theirs, theirs + d);
        let pl = plan(s, mr.1.max(tr.1));
        send_after(b, &pl, peer, Buf::Output, mr, &last);
        last = recv_after(b, &pl, peer, Buf::Output, tr, &last);
        d <<= 1;
    }
    last
}

/// The dissemination barrier: in round k, signal rank `r + 2^k`, hear from `r - 2^k`.
fn dissemination(b: &mut Builder) {
    let g = Group::all(b.p, b.rank);
    let n = g.size;
    let mut d = 1;
    let mut last: Vec<u32> = Vec::new();
    while d < n {
        b.send(g.after(d), sl(Buf::Input, 0, 0), 0, &last);
        last = vec![b.recv(g.before(d), sl(Buf::Output, 0, 0), 0, &last)];
        d <<= 1;
    }
}

/// Binomial-tree broadcast (MPICH): rank v (relative to the root) receives
/// from `v - mask` where mask is v's lowest set bit, then sends to `v + m`
/// for every smaller power of two m.
fn binomial_bcast(s: &Schedule, b: &mut Builder, root: usize) {
    let p = *b.p;
    let n = p.nranks;
    let c = p.count;
    let v = (b.rank + n - root) % n;
    let real = |x: usize| (x + root) % n;
    let pl = plan(s, c);
    let mut mask = 1;
    let mut src = Buf::Input;
    if v == 0 {
        b.copy(sl(Buf::Input, 0, c), sl(Buf::Output, 0, c));
    }
    while mask < n {
        if v & mask != 0 {
            let _ = recv_region(b, &pl, real(v - mask), Buf::Output, (0, c));
            src = Buf::Output;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if v + mask < n {
            send_region(b, &pl, real(v + mask), src, (0, c));
        }
        mask >>= 1;
    }
}

/// Binomial-tree reduce: rank v receives from `v + mask` for each mask below
/// its lowest set bit, then sends to `v - lowbit`.
fn binomial_reduce(s: &Schedule, b: &mut Builder, root: usize) {
    let p = *b.p;
    let n = p.nranks;
    let c = p.count;
    let v = (b.rank + n - root) % n;
    let real = |x: usize| (x + root) % n;
    let pl = plan(s, c);
    let mut cur = Buf::Input;
    let mut mask = 1;
    while mask < n {
        if v & mask == 0 {
            if v + mask < n {
                let _ = recv_reduce_region(b, &pl, real(v + mask), cur, Buf::Output, (0, c), &[]);
                cur = Buf::Output;
            }
        } else {
            send_region(b, &pl, real(v - mask), cur, (0, c));
            return;
        }
        mask <<= 1;
    }
    if cur == Buf::Input {
        b.copy(sl(Buf::Input, 0, c), sl(Buf::Output, 0, c));
    }
}

pub(super) fn scratch_len(s: &Schedule, _rank: usize) -> usize {
    let p = &s.problem;
    match (s.algorithm, p.collective) {
        (Algorithm::RecursiveDoubling, Collective::AllReduce) => p.count,
        (Algorithm::HalvingDoubling, Collective::ReduceScatter) => p.count,
        _ => 0,
    }
}
