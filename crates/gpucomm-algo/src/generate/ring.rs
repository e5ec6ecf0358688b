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
    let ord = Order::of(s);
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
            // A send and a receive per piece per round, in 2 (n - 1) rounds.
            b.reserve(4 * (n - 1) * pieces(&plan, &bl));
            let mut chain = vec![Vec::new(); pieces(&plan, &bl)];
            let fin = Some((Buf::Output, bl[r][0].0));
            // Both phases work in the output: the all-gather's receives
            // wait for the reduce-scatter's steps on the same blocks,
            // declared explicitly so that an empty piece waits as a full
            // one does (the builder derives nothing from an empty range,
            // and a dependency graph that changed with the pieces'
            // emptiness would differ from node to node).
            let mut log = Vec::with_capacity((n - 1) * pieces(&plan, &bl));
            reduce_scatter(
                b,
                &plan,
                g,
                &ord,
                &bl,
                Buf::Input,
                Buf::Output,
                fin,
                &mut chain,
                Some(&mut log),
            );
            all_gather(
                b,
                &plan,
                g,
                &ord,
                &bl,
                Buf::Output,
                None,
                &mut chain,
                Some(&log),
            );
        }
        Collective::ReduceScatter => {
            let bl = single(blocks(p.count, n));
            let plan = Plan::new(s, max_block(p.count, n));
            b.reserve(2 * n.saturating_sub(1) * pieces(&plan, &bl) + 1);
            let mut chain = vec![Vec::new(); pieces(&plan, &bl)];
            let fin = Some((Buf::Output, 0));
            reduce_scatter(
                b,
                &plan,
                g,
                &ord,
                &bl,
                Buf::Input,
                Buf::Scratch,
                fin,
                &mut chain,
                None,
            );
        }
        Collective::AllGather => {
            let bl = single(blocks(p.count, n));
            let plan = Plan::new(s, max_block(p.count, n));
            b.reserve(2 * n * pieces(&plan, &bl));
            let mut chain = vec![Vec::new(); pieces(&plan, &bl)];
            // The own block goes out from the input, each piece copied to
            // the output behind its send (NCCL's directCopySend).
            let first = Some((Buf::Input, 0));
            all_gather(b, &plan, g, &ord, &bl, Buf::Output, first, &mut chain, None);
        }
        Collective::Broadcast { root } => {
            let plan = Plan::new(s, p.count);
            let hops = Hops::of(s);
            chain_broadcast(
                b,
                &plan,
                g,
                &ord,
                hops,
                root,
                (0, p.count),
                Buf::Input,
                true,
            );
        }
        Collective::Reduce { root } => {
            let plan = Plan::new(s, p.count);
            if n == 1 {
                b.copy(sl(Buf::Input, 0, p.count), sl(Buf::Output, 0, p.count));
                return;
            }
            // A chain along each channel's ring that ends at the root (the
            // builder derives each send's dependency on the receives of its
            // range; an empty piece's send follows its receive explicitly).
            let hops = Hops::of(s);
            for j in 0..plan.pieces() {
                let (o, l, ch) = plan.piece((0, p.count), j);
                let (d, next, prev) = along(&ord, g, ch, root);
                let mut rv = None;
                if d != 1 {
                    for (o, l) in hops.slices(prev, r, (o, l)) {
                        let (src, dst) = (sl(Buf::Input, o, l), sl(Buf::Output, o, l));
                        rv = Some(b.recv_reduce(prev, src, dst, ch, &[]));
                    }
                }
                if d != 0 {
                    let src = if d == 1 { Buf::Input } else { Buf::Output };
                    let after = rv.filter(|_| l == 0);
                    for (o, l) in hops.slices(r, next, (o, l)) {
                        b.send(next, sl(src, o, l), ch, after.as_slice());
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

/// Who sits where on each channel's ring: position `q` on channel `c` is
/// group member `at(c, q)`. Group order unless the schedule gives ring
/// orders ([`Schedule::ring_orders`], for the group of all ranks): then
/// node `k`'s positions `k * rpn ..` hold its local ranks in the channel's
/// order.
pub(crate) struct Order<'a> {
    orders: &'a [Vec<u32>],
    /// Inverse of each order: local rank -> position in the node.
    inv: Vec<Vec<u32>>,
    rpn: usize,
}

impl<'a> Order<'a> {
    /// Group order on every channel.
    pub(crate) fn identity() -> Self {
        Order {
            orders: &[],
            inv: Vec::new(),
            rpn: 1,
        }
    }

    /// The schedule's ring orders (validated by [`Schedule::validate`]).
    pub(crate) fn of(s: &'a Schedule) -> Self {
        let inv = s
            .ring_orders
            .iter()
            .map(|o| {
                let mut v = vec![0; o.len()];
                for (q, &l) in o.iter().enumerate() {
                    v[l as usize] = q as u32;
                }
                v
            })
            .collect();
        Order {
            orders: &s.ring_orders,
            inv,
            rpn: s.problem.ranks_per_node,
        }
    }

    /// Member at position `q` (modulo `m`) of channel `ch`'s ring of `m`.
    fn at(&self, ch: u16, q: usize, m: usize) -> usize {
        let q = q % m;
        if self.orders.is_empty() {
            return q;
        }
        let o = &self.orders[usize::from(ch) % self.orders.len()];
        q - q % self.rpn + o[q % self.rpn] as usize
    }

    /// Position of member `i` on channel `ch`'s ring.
    pub(crate) fn pos(&self, ch: u16, i: usize) -> usize {
        if self.orders.is_empty() {
            return i;
        }
        let inv = &self.inv[usize::from(ch) % self.inv.len()];
        i - i % self.rpn + inv[i % self.rpn] as usize
    }
}

/// Channel of piece `j` of a phase (the plan piece [`piece`] takes).
fn piece_channel(plan: &Plan, j: usize) -> u16 {
    plan.channel(j % plan.pieces())
}

/// Ring reduce-scatter among `g` of the blocks `bl` (one per member, global
/// offsets, identical on every member). This rank's contribution is at the
/// same offsets in `own`, partial sums go to `acc`, and its own block
/// `g.pos`, complete, to `fin` (regions packed one after another from
/// `fin.1`; `None`: in `acc` at its global offsets). In round `s` the rank sends block `pos - s - 1` and
/// receives-and-reduces block `pos - s - 2`, so it ends with its own block.
/// `chain[j]` holds the dependencies of the next send of piece `j` (the
/// previous step on that piece, also when it moves no data). With `log`,
/// round `s`'s send and receive of piece `j` are appended there as entry
/// `s * chain.len() + j` (for an [`all_gather`] in the same buffer).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_scatter(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    ord: &Order,
    bl: &[Block],
    own: Buf,
    acc: Buf,
    fin: Option<Loc>,
    chain: &mut [Vec<u32>],
    mut log: Option<&mut Vec<[u32; 2]>>,
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
        for (j, deps) in chain.iter_mut().enumerate() {
            let ch = piece_channel(plan, j);
            let pos = ord.pos(ch, g.pos);
            let sb = ord.at(ch, pos + 2 * m - s - 1, m);
            let rb = ord.at(ch, pos + 2 * m - s - 2, m);
            let (so, sl_len, _) = piece(plan, &bl[sb], j);
            let src = if s == 0 { own } else { acc };
            let sent = b.send(
                g.member(ord.at(ch, pos + 1, m)),
                sl(src, so, sl_len),
                ch,
                deps,
            );
            let (ro, rl, _) = piece(plan, &bl[rb], j);
            let dst = if s == m - 2 {
                let (db, d) = place(&bl[rb], ro);
                sl(db, d, rl)
            } else {
                sl(acc, ro, rl)
            };
            let prev = g.member(ord.at(ch, pos + m - 1, m));
            let rv = b.recv_reduce(prev, sl(own, ro, rl), dst, ch, &[]);
            if let Some(log) = log.as_deref_mut() {
                log.push([sent, rv]);
            }
            deps.clear();
            deps.push(rv);
        }
    }
}

/// Ring all-gather among `g` of the blocks `bl` in `out` (global offsets).
/// In round `s` the rank sends block `pos - s` and receives block
/// `pos - s - 1`. With `first` (element `i` of this rank's own block at
/// `(buf, base + i)`; blocks of one region) round 0 sends the own block
/// from there and copies each piece into `out` once it is sent, so the
/// copy overlaps the rest of the transfer as in NCCL's `directCopySend`
/// (the input is read while the output is written); without, the own block
/// must already be in `out` (alone in `g`, the rank only copies it there).
/// `rs`: the [`reduce_scatter`] log of the same blocks in `out`, its input
/// aliased with `out` (the builder's in-place layout); round `s`'s receive
/// of piece `j` then waits explicitly for what last wrote and read its
/// block there (that phase's receive in round `s - 1`, none in round 0,
/// and its send in round `s`), as a non-empty piece waits by its range.
#[allow(clippy::too_many_arguments)]
pub(crate) fn all_gather(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    ord: &Order,
    bl: &[Block],
    out: Buf,
    first: Option<Loc>,
    chain: &mut [Vec<u32>],
    rs: Option<&[[u32; 2]]>,
) {
    let m = g.size;
    let chain_len = chain.len();
    if let (1, Some((buf, base))) = (m, first) {
        let (o, l) = bl[g.pos][0];
        b.copy(sl(buf, base, l), sl(out, o, l));
    }
    for s in 0..m.saturating_sub(1) {
        for (j, deps) in chain.iter_mut().enumerate() {
            let ch = piece_channel(plan, j);
            let pos = ord.pos(ch, g.pos);
            let sb = ord.at(ch, pos + m - s, m);
            let rb = ord.at(ch, pos + 2 * m - s - 1, m);
            let (so, sl_len, _) = piece(plan, &bl[sb], j);
            let to = g.member(ord.at(ch, pos + 1, m));
            match first {
                Some((buf, base)) if s == 0 => {
                    let src = sl(buf, base + so - bl[sb][0].0, sl_len);
                    b.send(to, src, ch, deps);
                    b.copy(src, sl(out, so, sl_len));
                }
                _ => {
                    b.send(to, sl(out, so, sl_len), ch, deps);
                }
            }
            let (ro, rl, _) = piece(plan, &bl[rb], j);
            let prev = g.member(ord.at(ch, pos + m - 1, m));
            let per = chain_len;
            let wrote_read = match rs {
                Some(rs) if s > 0 => vec![rs[(s - 1) * per + j][1], rs[s * per + j][0]],
                Some(rs) => vec![rs[j][0]],
                None => Vec::new(),
            };
            let rv = b.recv(prev, sl(out, ro, rl), ch, &wrote_read);
            deps.clear();
            deps.push(rv);
        }
    }
}

/// This rank's place on channel `ch`'s ring of `g`, seen from member
/// `root` (a position in `g`): its distance from the root along the ring,
/// and the members after and before it.
fn along(ord: &Order, g: Group, ch: u16, root: usize) -> (usize, usize, usize) {
    let m = g.size;
    let pos = ord.pos(ch, g.pos);
    let d = (pos + m - ord.pos(ch, root)) % m;
    let next = g.member(ord.at(ch, pos + 1, m));
    let prev = g.member(ord.at(ch, pos + m - 1, m));
    (d, next, prev)
}

/// How a chain's hops cut its pieces ([`Schedule::intra_slices`]): a hop
/// between two ranks of one node moves each piece in `slices` parts, a hop
/// between nodes whole.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hops {
    slices: usize,
    rpn: usize,
}

impl Hops {
    /// Whole pieces on every hop.
    pub(crate) const WHOLE: Hops = Hops { slices: 1, rpn: 1 };

    /// The schedule's.
    pub(crate) fn of(s: &Schedule) -> Self {
        Hops {
            slices: s.intra_slices.max(1),
            rpn: s.problem.ranks_per_node.max(1),
        }
    }

    /// Ranks per node.
    pub(crate) fn rpn(self) -> usize {
        self.rpn
    }

    /// How many parts a hop inside a node cuts a piece of `len` elements in.
    pub(crate) fn parts(self, len: usize) -> usize {
        self.slices.min(len).max(1)
    }

    /// The parts of `(offset, len)` the hop from rank `a` to rank `b`
    /// moves one after another: `slices` inside a node (no more than the
    /// piece has elements, an empty piece in one), the whole piece
    /// between nodes.
    pub(crate) fn slices(
        self,
        a: usize,
        b: usize,
        (o, l): (usize, usize),
    ) -> impl Iterator<Item = (usize, usize)> {
        let k = if a / self.rpn == b / self.rpn {
            self.parts(l)
        } else {
            1
        };
        (0..k).map(move |i| {
            let (so, sl) = crate::block_partition(l, k, i);
            (o + so, sl)
        })
    }
}

/// Pipelined chain broadcast among `g` from member `root` (a position in
/// `g`) along each channel's ring (as NCCL's broadcast follows its rings):
/// the root sends `(src, region)`, every other member receives into
/// `(Output, region)` and passes it on, each hop in the parts `hops` cuts.
/// With `copy_out` a root whose `src` is not the output also copies each
/// piece there behind its send (NCCL's `directCopySend`: the copy overlaps
/// the transfer). Returns nothing; data dependencies are derived by the
/// builder.
#[allow(clippy::too_many_arguments)]
pub(crate) fn chain_broadcast(
    b: &mut Builder,
    plan: &Plan,
    g: Group,
    ord: &Order,
    hops: Hops,
    root: usize,
    region: (usize, usize),
    src: Buf,
    copy_out: bool,
) {
    let m = g.size;
    let me = g.member(g.pos);
    for j in 0..plan.pieces() {
        let (o, l, ch) = plan.piece(region, j);
        let (d, next, prev) = along(ord, g, ch, root);
        // An empty piece has no range to derive from: its send follows its
        // receive explicitly.
        let mut rv = None;
        if d != 0 {
            for (o, l) in hops.slices(prev, me, (o, l)) {
                rv = Some(b.recv(prev, sl(Buf::Output, o, l), ch, &[]));
            }
        }
        if d < m - 1 {
            let from = if d == 0 { src } else { Buf::Output };
            let after = rv.filter(|_| l == 0);
            for (o, l) in hops.slices(me, next, (o, l)) {
                b.send(next, sl(from, o, l), ch, after.as_slice());
            }
        }
        if d == 0 && copy_out && src != Buf::Output {
            b.copy(sl(src, o, l), sl(Buf::Output, o, l));
        }
    }
}
