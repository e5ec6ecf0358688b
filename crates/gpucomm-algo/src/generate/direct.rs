//! Direct algorithms: every rank talks to every peer at once. One
//! communication round per phase, so the fewest sequential steps, at the cost
//! of `n - 1` connections per rank: the natural all_to_all, and fast for small
//! messages on a non-blocking switch. All-reduce is a direct reduce-scatter
//! (each rank receives its block from every peer into scratch and reduces it)
//! followed by a direct all-gather.

use super::{Builder, Group, Plan, blocks, max_block, sl};
use crate::{Buf, Collective, Schedule};

pub(super) fn steps(s: &Schedule, b: &mut Builder) {
    let p = *b.p;
    let n = p.nranks;
    let r = b.rank;
    let g = Group::all(&p, r);
    if let Collective::Barrier = p.collective {
        for i in 1..n {
            b.send(g.after(i), sl(Buf::Input, 0, 0), 0, &[]);
            b.recv(g.before(i), sl(Buf::Output, 0, 0), 0, &[]);
        }
        return;
    }
    if p.count == 0 && !p.collective.meets_when_empty() {
        return;
    }
    let c = p.count;
    match p.collective {
        Collective::AllToAll => {
            b.copy(sl(Buf::Input, r * c, c), sl(Buf::Output, r * c, c));
            let plan = Plan::new(s, c);
            for i in 1..n {
                let (to, from) = (g.after(i), g.before(i));
                for j in 0..plan.pieces() {
                    let (o, l, ch) = plan.piece((0, c), j);
                    b.send(to, sl(Buf::Input, to * c + o, l), ch, &[]);
                    b.recv(from, sl(Buf::Output, from * c + o, l), ch, &[]);
                }
            }
        }
        Collective::SendRecv { shift } => {
            let (to, from) = (g.after(shift), g.before(shift));
            if to == r {
                b.copy(sl(Buf::Input, 0, c), sl(Buf::Output, 0, c));
                return;
            }
            let plan = Plan::new(s, c);
            for j in 0..plan.pieces() {
                let (o, l, ch) = plan.piece((0, c), j);
                b.send(to, sl(Buf::Input, o, l), ch, &[]);
                b.recv(from, sl(Buf::Output, o, l), ch, &[]);
            }
        }
        Collective::Broadcast { root } => {
            let plan = Plan::new(s, c);
            if r == root {
                b.copy(sl(Buf::Input, 0, c), sl(Buf::Output, 0, c));
                for i in 1..n {
                    for j in 0..plan.pieces() {
                        let (o, l, ch) = plan.piece((0, c), j);
                        b.send(g.after(i), sl(Buf::Input, o, l), ch, &[]);
                    }
                }
            } else {
                for j in 0..plan.pieces() {
                    let (o, l, ch) = plan.piece((0, c), j);
                    b.recv(root, sl(Buf::Output, o, l), ch, &[]);
                }
            }
        }
        Collective::Reduce { root } => {
            let plan = Plan::new(s, c);
            if r == root {
                gather_reduce(b, &plan, g, (0, c), (Buf::Input, 0), (Buf::Output, 0));
            } else {
                for j in 0..plan.pieces() {
                    let (o, l, ch) = plan.piece((0, c), j);
                    b.send(root, sl(Buf::Input, o, l), ch, &[]);
                }
            }
        }
        Collective::Gather { root } | Collective::Scatter { root } => {
            // A gather is a scatter run backwards: the root's whole is n
            // blocks of c in rank order; its own block is a copy.
            let gather = matches!(p.collective, Collective::Gather { .. });
            let (block, whole) = if gather {
                (Buf::Input, Buf::Output)
            } else {
                (Buf::Output, Buf::Input)
            };
            let plan = Plan::new(s, c);
            if r == root {
                let (src, dst) = if gather {
                    (sl(block, 0, c), sl(whole, r * c, c))
                } else {
                    (sl(whole, r * c, c), sl(block, 0, c))
                };
                b.copy(src, dst);
                for i in 1..n {
                    let q = g.after(i);
                    for j in 0..plan.pieces() {
                        let (o, l, ch) = plan.piece((0, c), j);
                        let part = sl(whole, q * c + o, l);
                        if gather {
                            b.recv(q, part, ch, &[]);
                        } else {
                            b.send(q, part, ch, &[]);
                        }
                    }
                }
            } else {
                for j in 0..plan.pieces() {
                    let (o, l, ch) = plan.piece((0, c), j);
                    if gather {
                        b.send(root, sl(block, o, l), ch, &[]);
                    } else {
                        b.recv(root, sl(block, o, l), ch, &[]);
                    }
                }
            }
        }
        Collective::AllGather => {
            let bl = blocks(c, n);
            b.copy(
                sl(Buf::Input, 0, bl[r].1),
                sl(Buf::Output, bl[r].0, bl[r].1),
            );
            let plan = Plan::new(s, max_block(c, n));
            all_gather(b, &plan, g, &bl, (Buf::Input, 0), Buf::Output);
        }
        Collective::AllReduce | Collective::ReduceScatter => {
            let bl = blocks(c, n);
            let plan = Plan::new(s, max_block(c, n));
            let fin = if p.collective == Collective::AllReduce {
                bl[r].0
            } else {
                0
            };
            reduce_scatter(b, &plan, g, &bl, Buf::Input, (Buf::Output, fin));
            if p.collective == Collective::AllReduce {
                all_gather(b, &plan, g, &bl, (Buf::Output, bl[r].0), Buf::Output);
            }
        }
        Collective::Barrier => unreachable!("handled above"),
    }
}

pub(super) fn scratch_len(s: &Schedule, rank: usize) -> usize {
    let p = &s.problem;
    let n = p.nranks;
    match p.collective {
        Collective::Reduce { root } if rank == root => (n - 1) * p.count,
        Collective::AllReduce | Collective::ReduceScatter => (n - 1) * p.block(rank).1,
        _ => 0,
    }
}

pub(super) fn in_place_safe(s: &Schedule) -> bool {
    // All-to-all and sendrecv overwrite blocks that a later send still reads.
    !matches!(
        s.problem.collective,
        Collective::AllToAll | Collective::SendRecv { .. }
    )
}

/// Receives `region` from every other member of `g` into scratch, then
/// reduces them with this rank's own contribution (at `own`) into `fin`.
/// Scratch holds `(g.size - 1) * region.1` elements, one slot per peer.
pub(crate) fn gather_reduce(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    region: (usize, usize),
    own: (Buf, usize),
    fin: (Buf, usize),
) {
    let len = region.1;
    b.copy(sl(own.0, own.1, len), sl(fin.0, fin.1, len));
    for i in 1..g.size {
        for j in 0..plan.pieces() {
            let (o, l, ch) = plan.piece((0, len), j);
            b.recv(g.before(i), sl(Buf::Scratch, (i - 1) * len + o, l), ch, &[]);
        }
    }
    for i in 1..g.size {
        for j in 0..plan.pieces() {
            let (o, l, ch) = plan.piece((0, len), j);
            b.reduce(
                sl(Buf::Scratch, (i - 1) * len + o, l),
                sl(fin.0, fin.1 + o, l),
                ch,
            );
        }
    }
}

/// Direct reduce-scatter among `g` of the blocks `bl` (global offsets of
/// `own`): block i of this rank's contribution goes to member i; this rank
/// collects its own block from everyone and reduces it into `fin`.
pub(crate) fn reduce_scatter(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    bl: &[(usize, usize)],
    own: Buf,
    fin: (Buf, usize),
) {
    for i in 1..g.size {
        let to = (g.pos + i) % g.size;
        for j in 0..plan.pieces() {
            let (o, l, ch) = plan.piece(bl[to], j);
            b.send(g.member(to), sl(own, o, l), ch, &[]);
        }
    }
    let mine = bl[g.pos];
    gather_reduce(b, plan, g, (0, mine.1), (own, mine.0), fin);
}

/// Direct all-gather among `g` of the blocks `bl` into `(out, bl[i].0)`;
/// this rank's own block is at `first`.
pub(crate) fn all_gather(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    bl: &[(usize, usize)],
    first: (Buf, usize),
    out: Buf,
) {
    let mine = bl[g.pos];
    for i in 1..g.size {
        for j in 0..plan.pieces() {
            let (o, l, ch) = plan.piece((0, mine.1), j);
            b.send(g.after(i), sl(first.0, first.1 + o, l), ch, &[]);
        }
        let from = (g.pos + g.size - i) % g.size;
        for j in 0..plan.pieces() {
            let (o, l, ch) = plan.piece(bl[from], j);
            b.recv(g.member(from), sl(out, o, l), ch, &[]);
        }
    }
}
