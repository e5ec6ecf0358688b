//! Ring algorithms: every rank sends to the next and receives from the
//! previous. All-reduce is a reduce-scatter followed by an all-gather, each in
//! `n - 1` rounds; broadcast and reduce are pipelined chains. Every block is
//! cut into [`Plan`] pieces (channels x chunks) that travel independently.

use super::{Builder, Group, Plan, blocks, max_block, sl};

/// Each block as a single region.
pub(crate) fn single(bl: Vec<(usize, usize)>) -> Vec<Block> {
    bl.into_iter().map(|x| vec![x]).collect()
}
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
            let bl = single(blocks(p.count, n));
            let plan = Plan::new(s, max_block(p.count, n));
            let mut chain = vec![Vec::new(); pieces(&plan, &bl)];
            let fin = Some((Buf::Output, bl[r][0].0));
            reduce_scatter(b, &plan, g, &bl, Buf::Input, Buf::Output, fin, &mut chain);
            all_gather(b, &plan, g, &bl, Buf::Output, &mut chain);
        }
        Collective::ReduceScatter => {
            let bl = single(blocks(p.count, n));
            let plan = Plan::new(s, max_block(p.count, n));
            let mut chain = vec![Vec::new(); pieces(&plan, &bl)];
            let fin = Some((Buf::Output, 0));
            reduce_scatter(b, &plan, g, &bl, Buf::Input, Buf::Scratch, fin, &mut chain);
        }
        Collective::AllGather => {
            let (o, l) = p.block(r);
            let copy = b.copy(sl(Buf::Input, 0, l), sl(Buf::Output, o, l));
            let bl = single(blocks(p.count, n));
            let plan = Plan::new(s, max_block(p.count, n));
            let mut chain = vec![copy.into_iter().collect(); pieces(&plan, &bl)];
            all_gather(b, &plan, g, &bl, Buf::Output, &mut chain);
        }
        Collective::Broadcast { root } => {
            let plan = Plan::new(s, p.count);
            if r == root {
                b.copy(sl(Buf::Input, 0, p.count), sl(Buf::Output, 0, p.count));
            }
            chain_broadcast(b, &plan, g, root, (0, p.count), Buf::Input);
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

/// A block of a ring phase: one or more regions (global element ranges).
/// Every block of a phase has the same number of regions.
pub(crate) type Block = Vec<(usize, usize)>;

/// Piece `j` of `block`: region `j / plan.pieces()`, plan piece `j % plan.pieces()`.
fn piece(plan: &Plan, block: &Block, j: usize) -> (usize, usize, u16) {
    let per = plan.pieces();
    plan.piece(block[j / per], j % per)
}

/// Pieces per block of a phase (regions x plan pieces).
pub(crate) fn pieces(plan: &Plan, bl: &[Block]) -> usize {
    plan.pieces() * bl.first().map_or(0, |b| b.len())
}

/// Ring reduce-scatter among `g` of the blocks `bl` (one per member, global
/// offsets, identical on every member). This rank's contribution is at the
/// same offsets in `own`, partial sums go to `acc`, and its own block
/// `g.pos`, complete, to `fin` (regions packed one after another from
/// `fin.1`; `None`: in `acc` at its global offsets). In round `s` the rank sends block `pos - s - 1` and
/// receives-and-reduces block `pos - s - 2`, so it ends with its own block.
/// `chain[j]` holds the dependencies of the next send of piece `j` (the
/// previous step on that piece, also when it moves no data).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_scatter(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    bl: &[Block],
    own: Buf,
    acc: Buf,
    fin: Option<Loc>,
    chain: &mut [Vec<u32>],
) {
    let m = g.size;
    // Where global offset `o` of `block` goes when the block is complete:
    // packed from `fin.1` in `fin.0`, or in place in `acc`.
    let place = |block: &Block, o: usize| -> (Buf, usize) {
        let Some((fb, base)) = fin else {
            return (acc, o);
        };
        let mut before = 0;
        for &(ro, rl) in block {
            if o >= ro && o < ro + rl.max(1) {
                return (fb, base + before + (o - ro));
            }
            before += rl;
        }
        (fb, base + before)
    };
    if m == 1 {
        for &(o, l) in &bl[g.pos] {
            let (db, dst) = place(&bl[g.pos], o);
            if (own, o) != (db, dst) {
                b.copy(sl(own, o, l), sl(db, dst, l));
            }
        }
        return;
    }
    for s in 0..m - 1 {
        let sb = (g.pos + 2 * m - s - 1) % m;
        let rb = (g.pos + 2 * m - s - 2) % m;
        for (j, deps) in chain.iter_mut().enumerate() {
            let (so, sl_len, ch) = piece(plan, &bl[sb], j);
            let src = if s == 0 { own } else { acc };
            b.send(g.after(1), sl(src, so, sl_len), ch, deps);
            let (ro, rl, _) = piece(plan, &bl[rb], j);
            let dst = if s == m - 2 {
                let (db, d) = place(&bl[rb], ro);
                sl(db, d, rl)
            } else {
                sl(acc, ro, rl)
            };
            let rv = b.recv_reduce(g.before(1), sl(own, ro, rl), dst, ch, &[]);
            deps.clear();
            deps.push(rv);
        }
    }
}

/// Ring all-gather among `g` of the blocks `bl` in `out` (global offsets);
/// this rank's own block must already be there. In round `s` the rank sends
/// block `pos - s` and receives block `pos - s - 1`.
pub(crate) fn all_gather(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    bl: &[Block],
    out: Buf,
    chain: &mut [Vec<u32>],
) {
    let m = g.size;
    for s in 0..m.saturating_sub(1) {
        let sb = (g.pos + m - s) % m;
        let rb = (g.pos + 2 * m - s - 1) % m;
        for (j, deps) in chain.iter_mut().enumerate() {
            let (so, sl_len, ch) = piece(plan, &bl[sb], j);
            b.send(g.after(1), sl(out, so, sl_len), ch, deps);
            let (ro, rl, _) = piece(plan, &bl[rb], j);
            let rv = b.recv(g.before(1), sl(out, ro, rl), ch, &[]);
            deps.clear();
            deps.push(rv);
        }
    }
}

/// Pipelined chain broadcast among `g` from member `root` (a position in
/// `g`): the root sends `(src, region)`, every other member receives into
/// `(Output, region)` and passes it on. Returns nothing; data dependencies
/// are derived by the builder.
pub(crate) fn chain_broadcast(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    root: usize,
    region: (usize, usize),
    src: Buf,
) {
    let m = g.size;
    let d = (g.pos + m - root) % m;
    for j in 0..plan.pieces() {
        let (o, l, ch) = plan.piece(region, j);
        if d == 0 {
            if m > 1 {
                b.send(g.after(1), sl(src, o, l), ch, &[]);
            }
        } else {
            let rv = b.recv(g.before(1), sl(Buf::Output, o, l), ch, &[]);
            if d < m - 1 {
                b.send(g.after(1), sl(Buf::Output, o, l), ch, &[rv]);
            }
        }
    }
}
