//! Ring algorithms: every rank sends to the next and receives from the
//! previous. All-reduce is a reduce-scatter followed by an all-gather, each in
//! `n - 1` rounds; broadcast and reduce are pipelined chains. Every block is
//! cut into [`Plan`] pieces (channels x chunks) that travel independently.

use super::{Builder, Group, Plan, blocks, max_block, sl};
use crate::{Buf, Collective, Schedule};

/// Where a block lives: element `i` of the block is at `(buf, base + i)`.
pub(crate) type Loc = (Buf, usize);

pub(super) fn steps(s: &Schedule, b: &mut Builder) {
    let p = *b.p;
    let n = p.nranks;
    let r = b.rank;
    let g = Group::all(&p, r);
    if p.count == 0 {
        return;
    }
    match p.collective {
        Collective::AllReduce => {
            if n == 1 {
                b.copy(sl(Buf::Input, 0, p.count), sl(Buf::Output, 0, p.count));
                return;
            }
            let bl = blocks(p.count, n);
            let plan = Plan::new(s, max_block(p.count, n));
            let mut chain = vec![None; plan.pieces()];
            reduce_scatter(
                b,
                &plan,
                g,
                &bl,
                Buf::Input,
                Buf::Output,
                (Buf::Output, bl[r].0),
                &mut chain,
            );
            all_gather(
                b,
                &plan,
                g,
                &bl,
                (Buf::Output, bl[r].0),
                Buf::Output,
                &mut chain,
            );
        }
        Collective::ReduceScatter => {
            let bl = blocks(p.count, n);
            if n == 1 {
                b.copy(sl(Buf::Input, 0, p.count), sl(Buf::Output, 0, p.count));
                return;
            }
            let plan = Plan::new(s, max_block(p.count, n));
            let mut chain = vec![None; plan.pieces()];
            reduce_scatter(
                b,
                &plan,
                g,
                &bl,
                Buf::Input,
                Buf::Scratch,
                (Buf::Output, 0),
                &mut chain,
            );
        }
        Collective::AllGather => {
            let bl = blocks(p.count, n);
            b.copy(
                sl(Buf::Input, 0, bl[r].1),
                sl(Buf::Output, bl[r].0, bl[r].1),
            );
            if n == 1 {
                return;
            }
            let plan = Plan::new(s, max_block(p.count, n));
            let mut chain = vec![None; plan.pieces()];
            all_gather(b, &plan, g, &bl, (Buf::Input, 0), Buf::Output, &mut chain);
        }
        Collective::Broadcast { root } => {
            let plan = Plan::new(s, p.count);
            let d = (r + n - root) % n;
            if d == 0 {
                b.copy(sl(Buf::Input, 0, p.count), sl(Buf::Output, 0, p.count));
            }
            for j in 0..plan.pieces() {
                let (o, l, ch) = plan.piece((0, p.count), j);
                if d == 0 {
                    if n > 1 {
                        b.send(g.after(1), sl(Buf::Input, o, l), ch, &[]);
                    }
                } else {
                    let rv = b.recv(g.before(1), sl(Buf::Output, o, l), ch, &[]);
                    if d < n - 1 {
                        b.send(g.after(1), sl(Buf::Output, o, l), ch, &[rv]);
                    }
                }
            }
        }
        Collective::Reduce { root } => {
            let plan = Plan::new(s, p.count);
            let d = (r + n - root) % n;
            if n == 1 {
                b.copy(sl(Buf::Input, 0, p.count), sl(Buf::Output, 0, p.count));
                return;
            }
            for j in 0..plan.pieces() {
                let (o, l, ch) = plan.piece((0, p.count), j);
                if d == 1 {
                    b.send(g.after(1), sl(Buf::Input, o, l), ch, &[]);
                } else {
                    let rv = b.recv_reduce(
                        g.before(1),
                        sl(Buf::Input, o, l),
                        sl(Buf::Output, o, l),
                        ch,
                        &[],
                    );
                    if d != 0 {
                        b.send(g.after(1), sl(Buf::Output, o, l), ch, &[rv]);
                    }
                }
            }
        }
        _ => unreachable!("validated by support()"),
    }
}

pub(super) fn scratch_len(s: &Schedule, _rank: usize) -> usize {
    let p = &s.problem;
    match p.collective {
        Collective::ReduceScatter if p.nranks > 2 => p.count,
        _ => 0,
    }
}

/// Ring reduce-scatter among `g` of `bl` (one block per member, global
/// offsets, identical on every member). This rank's contribution to block i
/// is at `(own, bl[i].0)`, partial sums go to `(acc, bl[i].0)`, and block
/// `g.pos`, complete, to `fin`. In round `s` the rank sends block
/// `pos - s - 1` and receives-and-reduces block `pos - s - 2`, so it ends
/// with its own block. `chain[j]` is the last step on piece `j`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_scatter(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    bl: &[(usize, usize)],
    own: Buf,
    acc: Buf,
    fin: Loc,
    chain: &mut [Option<u32>],
) {
    let m = g.size;
    if m == 1 {
        let (o, l) = bl[g.pos];
        if (own, o) != fin {
            b.copy(sl(own, o, l), sl(fin.0, fin.1, l));
        }
        return;
    }
    for s in 0..m - 1 {
        let sb = (g.pos + 2 * m - s - 1) % m;
        let rb = (g.pos + 2 * m - s - 2) % m;
        for (j, last) in chain.iter_mut().enumerate() {
            let (so, sl_len, ch) = plan.piece(bl[sb], j);
            let src = if s == 0 { own } else { acc };
            let deps: Vec<u32> = last.iter().copied().collect();
            b.send(g.after(1), sl(src, so, sl_len), ch, &deps);
            let (ro, rl, _) = plan.piece(bl[rb], j);
            let dst = if s == m - 2 {
                sl(fin.0, fin.1 + (ro - bl[rb].0), rl)
            } else {
                sl(acc, ro, rl)
            };
            *last = Some(b.recv_reduce(g.before(1), sl(own, ro, rl), dst, ch, &[]));
        }
    }
}

/// Ring all-gather among `g` of `bl` into `(out, bl[i].0)`; this rank's own
/// block starts at `first`. In round `s` the rank sends block `pos - s` and
/// receives block `pos - s - 1`.
pub(crate) fn all_gather(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    bl: &[(usize, usize)],
    first: Loc,
    out: Buf,
    chain: &mut [Option<u32>],
) {
    let m = g.size;
    for s in 0..m.saturating_sub(1) {
        let sb = (g.pos + m - s) % m;
        let rb = (g.pos + 2 * m - s - 1) % m;
        for (j, last) in chain.iter_mut().enumerate() {
            let (so, sl_len, ch) = plan.piece(bl[sb], j);
            let src = if s == 0 {
                sl(first.0, first.1 + (so - bl[sb].0), sl_len)
            } else {
                sl(out, so, sl_len)
            };
            let deps: Vec<u32> = last.iter().copied().collect();
            b.send(g.after(1), src, ch, &deps);
            let (ro, rl, _) = plan.piece(bl[rb], j);
            *last = Some(b.recv(g.before(1), sl(out, ro, rl), ch, &[]));
        }
    }
}
