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

fn send_region(b: &mut Builder, pl: &Plan, peer: usize, buf: Buf, region: (usize, usize)) {
    for j in 0..pl.pieces() {
        let (o, l, ch) = pl.piece(region, j);
        b.send(peer, sl(buf, o, l), ch, &[]);
    }
}

fn recv_region(b: &mut Builder, pl: &Plan, peer: usize, buf: Buf, region: (usize, usize)) {
    for j in 0..pl.pieces() {
        let (o, l, ch) = pl.piece(region, j);
        b.recv(peer, sl(buf, o, l), ch, &[]);
    }
}

fn recv_reduce_region(
    b: &mut Builder,
    pl: &Plan,
    peer: usize,
    own: Buf,
    acc: Buf,
    region: (usize, usize),
) {
    for j in 0..pl.pieces() {
        let (o, l, ch) = pl.piece(region, j);
        b.recv_reduce(peer, sl(own, o, l), sl(acc, o, l), ch, &[]);
    }
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
    match p.collective {
        Collective::AllReduce => {
            // Fold: even ranks below 2 rem hand their input up.
            let own = if r < 2 * rem {
                if r % 2 == 0 {
                    send_region(b, &pl, r + 1, Buf::Input, all);
                    recv_region(b, &pl, r + 1, Buf::Output, all);
                    return;
                }
                recv_reduce_region(b, &pl, r - 1, Buf::Input, Buf::Output, all);
                Buf::Output
            } else {
                Buf::Input
            };
            let nr = nr.expect("participant");
            if s.algorithm == Algorithm::HalvingDoubling {
                halving(s, b, nr, p2, own, Buf::Output);
                doubling(s, b, nr, p2);
            } else {
                let mut cur = own;
                if own == Buf::Input {
                    b.copy(sl(Buf::Input, 0, c), sl(Buf::Output, 0, c));
                }
                let mut d = 1;
                while d < p2 {
                    let peer = real_rank(n, nr ^ d);
                    send_region(b, &pl, peer, cur, all);
                    recv_region(b, &pl, peer, Buf::Scratch, all);
                    for j in 0..pl.pieces() {
                        let (o, l, ch) = pl.piece(all, j);
                        b.reduce(sl(Buf::Scratch, o, l), sl(Buf::Output, o, l), ch);
                    }
                    cur = Buf::Output;
                    d <<= 1;
                }
            }
            if r < 2 * rem {
                send_region(b, &pl, r - 1, Buf::Output, all);
            }
        }
        Collective::ReduceScatter => {
            let (o, l) = p.block(r);
            let own = if r < 2 * rem {
                if r % 2 == 0 {
                    send_region(b, &pl, r + 1, Buf::Input, all);
                    let pl1 = plan(s, l);
                    recv_region(b, &pl1, r + 1, Buf::Output, (0, l));
                    return;
                }
                recv_reduce_region(b, &pl, r - 1, Buf::Input, Buf::Scratch, all);
                Buf::Scratch
            } else {
                Buf::Input
            };
            let nr = nr.expect("participant");
            halving(s, b, nr, p2, own, Buf::Scratch);
            if r < 2 * rem {
                let (po, plen) = p.block(r - 1);
                send_region(b, &plan(s, plen), r - 1, Buf::Scratch, (po, plen));
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
            b.copy(sl(Buf::Input, 0, l), sl(Buf::Output, o, l));
            if r < 2 * rem {
                let (po, plen) = p.block(r - 1);
                recv_region(b, &plan(s, plen), r - 1, Buf::Output, (po, plen));
            }
            doubling(s, b, nr.expect("participant"), p2);
            if r < 2 * rem {
                send_region(b, &pl, r - 1, Buf::Output, all);
            }
        }
        _ => unreachable!("validated by support()"),
    }
}

/// Recursive halving among the `p2` new ranks: this rank ends with its
/// super-block reduced in `acc`. Round 0 reads `own`, later rounds `acc`.
fn halving(s: &Schedule, b: &mut Builder, nr: usize, p2: usize, own: Buf, acc: Buf) {
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
        send_region(b, &pl, peer, src, gr);
        for j in 0..pl.pieces() {
            let (o, l, ch) = pl.piece(kr, j);
            b.recv_reduce(peer, sl(src, o, l), sl(acc, o, l), ch, &[]);
        }
        src = acc;
        (lo, hi) = keep;
        d /= 2;
    }
    if src == own && own != acc {
        // p2 == 1: nothing exchanged.
        let (o, l) = span(&p, nr, nr + 1);
        b.copy(sl(own, o, l), sl(acc, o, l));
    }
}

/// Recursive doubling all-gather of super-blocks in the output among the
/// `p2` new ranks; this rank's super-block must be in place.
fn doubling(s: &Schedule, b: &mut Builder, nr: usize, p2: usize) {
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
        send_region(b, &pl, peer, Buf::Output, mr);
        recv_region(b, &pl, peer, Buf::Output, tr);
        d <<= 1;
    }
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
            recv_region(b, &pl, real(v - mask), Buf::Output, (0, c));
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
                recv_reduce_region(b, &pl, real(v + mask), cur, Buf::Output, (0, c));
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
