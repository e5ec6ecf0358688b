//! Trees: NCCL's tree for all_reduce, a pipelined binary tree for broadcast
//! and reduce.
//!
//! The binary tree is NCCL's `ncclGetBtree` (src/graph/trees.cc): on ranks
//! `0..n` with root 0, a rank's parent is found from its lowest set bit, so
//! that about half the ranks are leaves. The second tree is the first one
//! mirrored (`n - 1 - r`, n even) or shifted by one (n odd), which makes most
//! of the first tree's leaves interior nodes of the second: each rank then
//! sends and receives about the same amount in total.
//!
//! All-reduce runs NCCL's tree ([`nccl_tree`], src/graph/connect.cc): the
//! double binary tree joins the *nodes*, and inside a node the ranks form a
//! chain, so that a node sends one copy of the data up and its children
//! send theirs to it, whatever its GPU count. With one rank per node this
//! is the double binary tree over ranks; on one node, a chain. The data is
//! split between channels, the first half of them running on tree 0 and the
//! others on tree 1 ([`tree_of_channel`]; with one channel only the first
//! tree is used): a reduce towards the root, then a broadcast back, chunk
//! after chunk so both directions pipeline.

use super::{Builder, Plan, sl};
use crate::{Buf, Collective, Schedule};

/// Parent of `v` in the binary tree on `0..n` rooted at 0.
pub(crate) fn btree_parent(n: usize, v: usize) -> Option<usize> {
    if v == 0 || v >= n {
        return None;
    }
    let bit = v & v.wrapping_neg();
    let up = (v ^ bit) | (bit << 1);
    Some(if up >= n { v ^ bit } else { up })
}

/// Children of `v` in the binary tree on `0..n` rooted at 0 (at most two).
pub(crate) fn btree_children(n: usize, v: usize) -> Vec<usize> {
    let limit = if v == 0 {
        n.next_power_of_two()
    } else {
        v & v.wrapping_neg()
    };
    let mut out = Vec::new();
    let mut b = 1;
    while b < limit {
        for u in [v.wrapping_sub(b), v + b] {
            if u < n && u != v && btree_parent(n, u) == Some(v) && !out.contains(&u) {
                out.push(u);
            }
        }
        b <<= 1;
    }
    out.sort_unstable();
    out
}

/// Depth (edges from root to the deepest leaf) of the binary tree on `n` ranks.
pub(crate) fn btree_depth(n: usize) -> usize {
    (0..n)
        .map(|mut v| {
            let mut d = 0;
            while let Some(p) = btree_parent(n, v) {
                v = p;
                d += 1;
            }
            d
        })
        .max()
        .unwrap_or(0)
}

/// Rank `x`'s place in tree `t`'s numbering (the binary tree is built on
/// it): tree 0 as is, tree 1 mirrored (`n` even) or shifted by one (`n` odd).
fn to_virtual(n: usize, t: usize, x: usize) -> usize {
    match (t, n % 2) {
        (0, _) => x,
        (_, 1) => (x + n - 1) % n,
        _ => n - 1 - x,
    }
}

/// Inverse of [`to_virtual`].
fn from_virtual(n: usize, t: usize, v: usize) -> usize {
    match (t, n % 2) {
        (0, _) => v,
        (_, 1) => (v + 1) % n,
        _ => n - 1 - v,
    }
}

/// One tree of the double binary tree, in real ranks: `(parent, children)`
/// of `r`, children in NCCL's order (`d0` then `d1`: the one below the
/// parent in the tree's numbering first).
pub(crate) fn dtree(n: usize, t: usize, r: usize) -> (Option<usize>, Vec<usize>) {
    let v = to_virtual(n, t, r);
    (
        btree_parent(n, v).map(|x| from_virtual(n, t, x)),
        btree_children(n, v)
            .into_iter()
            .map(|x| from_virtual(n, t, x))
            .collect(),
    )
}

/// NCCL's tree `t` for all_reduce (NVIDIA/nccl `src/graph/connect.cc`,
/// `connectTrees`, with the `BALANCED_TREE` pattern its search tries
/// first): `(parent, children)` of rank `r` of `n`, `rpn` consecutive
/// ranks per node (1 when `rpn` does not divide `n`).
///
/// A node's ranks form a chain in `order` (local ranks; rank order when
/// empty): each sends up to the one before it. The first (the head) sends
/// up to the parent node of the double binary tree over nodes ([`dtree`]);
/// of a node's two children in that tree, the first (`d0`) sends to its
/// second chain rank and the other to its head, which spreads a node's
/// network traffic over two GPUs. Children come in NCCL's order: the chain
/// successor, then the child nodes' heads.
pub(crate) fn nccl_tree(
    n: usize,
    rpn: usize,
    order: &[u32],
    t: usize,
    r: usize,
) -> (Option<usize>, Vec<usize>) {
    let rpn = node_size(n, rpn);
    let nodes = n / rpn;
    let chain = |i: usize| order.get(i).map_or(i, |&l| l as usize);
    let (node, local) = (r / rpn, r % rpn);
    let pos = (0..rpn).find(|&i| chain(i) == local).unwrap_or(local);
    let at = |node: usize, i: usize| node * rpn + chain(i);
    // The chain position facing child `c` of node `p`: d0 on the second
    // rank, d1 on the head (one rank per node: the head for both).
    let facing = |c: usize, p: usize| {
        let d0 = to_virtual(nodes, t, c) < to_virtual(nodes, t, p);
        usize::from(d0 && rpn > 1)
    };
    let (up, down) = dtree(nodes, t, node);
    let parent = if pos > 0 {
        Some(at(node, pos - 1))
    } else {
        up.map(|p| at(p, facing(node, p)))
    };
    let mut children = Vec::with_capacity(3);
    if pos + 1 < rpn {
        children.push(at(node, pos + 1));
    }
    children.extend(
        down.into_iter()
            .filter(|&c| facing(c, node) == pos)
            .map(|c| at(c, 0)),
    );
    (parent, children)
}

/// The tree channel `ch` of `channels` runs on: NCCL duplicates its tree
/// channels, the originals on tree 0 and the copies on tree 1
/// (`src/graph/connect.cc`): here the channels below `split`
/// ([`Schedule::tree_split`](crate::Schedule::tree_split); 0: the first
/// `ceil(channels / 2)`) on tree 0, the others on tree 1. The simulator
/// gives channels `c` and `c + split` one chain order (and one NIC, where
/// the first tree's channels have one each), so that NIC carries both
/// trees.
pub(crate) fn tree_of_channel(ch: usize, channels: usize, split: u16) -> usize {
    let split = match split {
        0 => channels.div_ceil(2),
        k => usize::from(k),
    };
    usize::from(ch >= split)
}

/// The ranks per node [`nccl_tree`] builds on: `rpn`, or 1 when it does
/// not divide `n` into whole nodes.
fn node_size(n: usize, rpn: usize) -> usize {
    if rpn > 1 && n % rpn == 0 { rpn } else { 1 }
}

/// Edges from the root to the deepest rank of NCCL's tree `t` ([`nccl_tree`]):
/// the longest walk up from a node's last chain rank (the chain order
/// does not change the depth).
pub(crate) fn nccl_tree_depth(n: usize, rpn: usize, t: usize) -> usize {
    let rpn = node_size(n, rpn);
    (0..n / rpn)
        .map(|node| {
            let (mut r, mut d) = (node * rpn + rpn - 1, 0);
            while let Some(p) = nccl_tree(n, rpn, &[], t, r).0 {
                r = p;
                d += 1;
            }
            d
        })
        .max()
        .unwrap_or(0)
}

/// The binary tree re-rooted at `root`: `(parent, children)` of `r`.
pub(crate) fn rooted(n: usize, root: usize, r: usize) -> (Option<usize>, Vec<usize>) {
    let v = (r + n - root) % n;
    let back = |x: usize| (x + root) % n;
    (
        btree_parent(n, v).map(back),
        btree_children(n, v).into_iter().map(back).collect(),
    )
}

pub(super) fn steps(s: &Schedule, b: &mut Builder) {
    let p = *b.p;
    let n = p.nranks;
    let r = b.rank;
    let c = p.count;
    if c == 0 {
        return;
    }
    if n == 1 {
        b.copy(sl(Buf::Input, 0, c), sl(Buf::Output, 0, c));
        return;
    }
    let plan = Plan::new(s, c);
    match p.collective {
        Collective::AllReduce => {
            // Per channel: its tree along its chain order.
            let trees: Vec<_> = (0..plan.channels)
                .map(|ch| {
                    let t = tree_of_channel(ch, plan.channels, s.tree_split);
                    nccl_tree(n, p.ranks_per_node, s.chain_order(ch), t, r)
                })
                .collect();
            for j in 0..plan.pieces() {
                let (o, l, ch) = plan.piece((0, c), j);
                let (parent, children) = &trees[usize::from(ch)];
                up(b, o, l, ch, *parent, children);
                down(b, o, l, ch, *parent, children, Buf::Output);
            }
        }
        Collective::Reduce { root } => {
            let (parent, children) = rooted(n, root, r);
            for j in 0..plan.pieces() {
                let (o, l, ch) = plan.piece((0, c), j);
                up(b, o, l, ch, parent, &children);
            }
        }
        Collective::Broadcast { root } => {
            let (parent, children) = rooted(n, root, r);
            if parent.is_none() {
                b.copy(sl(Buf::Input, 0, c), sl(Buf::Output, 0, c));
            }
            let src = if parent.is_none() {
                Buf::Input
            } else {
                Buf::Output
            };
            for j in 0..plan.pieces() {
                let (o, l, ch) = plan.piece((0, c), j);
                down(b, o, l, ch, parent, &children, src);
            }
        }
        _ => unreachable!("validated by support()"),
    }
}

/// Reduce piece `(o, l)` from the children into the output, then send it up.
fn up(b: &mut Builder, o: usize, l: usize, ch: u16, parent: Option<usize>, children: &[usize]) {
    let own = sl(Buf::Input, o, l);
    let acc = sl(Buf::Output, o, l);
    let mut last = None;
    match children.split_first() {
        None => {}
        Some((&first, rest)) => {
            last = Some(b.recv_reduce(first, own, acc, ch, &[]));
            for &child in rest {
                let tmp = sl(Buf::Scratch, o, l);
                let rv = b.recv(child, tmp, ch, &[]);
                let red = b.reduce(tmp, acc, ch);
                last = red.or(Some(rv)).max(last);
            }
        }
    }
    if let Some(parent) = parent {
        let src = if children.is_empty() { own } else { acc };
        let deps: Vec<u32> = last.into_iter().collect();
        b.send(parent, src, ch, &deps);
    }
}

/// Receive piece `(o, l)` from the parent (unless root) and pass it on.
fn down(
    b: &mut Builder,
    o: usize,
    l: usize,
    ch: u16,
    parent: Option<usize>,
    children: &[usize],
    root_src: Buf,
) {
    let mut deps = Vec::new();
    let src = match parent {
        Some(parent) => {
            deps.push(b.recv(parent, sl(Buf::Output, o, l), ch, &[]));
            Buf::Output
        }
        None => root_src,
    };
    for &child in children {
        b.send(child, sl(src, o, l), ch, &deps);
    }
}

pub(super) fn scratch_len(s: &Schedule, _rank: usize) -> usize {
    let p = &s.problem;
    match p.collective {
        Collective::AllReduce | Collective::Reduce { .. } if p.nranks > 2 => p.count,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(n: usize, f: impl Fn(usize) -> (Option<usize>, Vec<usize>)) -> usize {
        let mut roots = 0;
        for r in 0..n {
            let (p, ch) = f(r);
            assert!(ch.len() <= 2, "n={n} r={r} children {ch:?}");
            match p {
                None => roots += 1,
                Some(p) => assert!(
                    f(p).1.contains(&r),
                    "n={n}: {p} is {r}'s parent but not listing it"
                ),
            }
            for c in ch {
                assert_eq!(f(c).0, Some(r), "n={n}");
            }
            // reaches the root
            let mut x = r;
            let mut hops = 0;
            while let Some(p) = f(x).0 {
                x = p;
                hops += 1;
                assert!(hops <= n);
            }
        }
        roots
    }

    #[test]
    fn trees_are_trees() {
        for n in 1..=70 {
            assert_eq!(valid(n, |r| dtree(n, 0, r)), 1);
            assert_eq!(valid(n, |r| dtree(n, 1, r)), 1);
            assert_eq!(valid(n, |r| rooted(n, n / 3, r)), 1);
        }
    }

    #[test]
    fn nccl_trees_are_trees_with_one_crossing_per_node() {
        let rev: Vec<u32> = (0..4).rev().collect();
        for (n, rpn) in [
            (1, 1),
            (8, 8),
            (12, 4),
            (20, 4),
            (64, 8),
            (9, 3),
            (6, 1),
            (10, 4),
        ] {
            for order in [&[][..], &rev[..]] {
                let order = if n % rpn == 0 && order.len() == rpn {
                    order
                } else {
                    &[]
                };
                for t in 0..2 {
                    let f = |r| nccl_tree(n, rpn, order, t, r);
                    assert_eq!(valid(n, f), 1, "n={n} rpn={rpn} t={t}");
                    let depth = (0..n)
                        .map(|mut r| {
                            let mut d = 0;
                            while let Some(p) = f(r).0 {
                                r = p;
                                d += 1;
                            }
                            d
                        })
                        .max()
                        .unwrap();
                    assert_eq!(depth, nccl_tree_depth(n, rpn, t), "n={n} rpn={rpn} t={t}");
                    if n % rpn != 0 {
                        continue;
                    }
                    // One rank per node sends up to another node, and a node's
                    // children in the node tree are received by at most two ranks.
                    for node in 0..n / rpn {
                        let ranks = node * rpn..(node + 1) * rpn;
                        let up = ranks
                            .clone()
                            .filter(|&r| f(r).0.is_some_and(|p| p / rpn != node))
                            .count();
                        let roots = ranks.clone().filter(|&r| f(r).0.is_none()).count();
                        assert_eq!(up + roots, 1, "n={n} rpn={rpn} t={t} node={node}");
                        let facing = ranks
                            .filter(|&r| f(r).1.iter().any(|&c| c / rpn != node))
                            .count();
                        assert!(facing <= 2);
                    }
                }
            }
        }
    }

    #[test]
    fn nccl_tree_on_four_nodes_of_eight() {
        // Tree 0 over nodes is ncclGetBtree(4): 0 -> 2 -> {1, 3}. Node 2
        // receives child 1 (d0) on its second GPU, child 3 (d1) on its head.
        let f = |r| nccl_tree(32, 8, &[], 0, r);
        assert_eq!(f(0), (None, vec![1, 16]));
        assert_eq!(f(16), (Some(0), vec![17, 24]));
        assert_eq!(f(17), (Some(16), vec![18, 8]));
        assert_eq!(f(8), (Some(17), vec![9]));
        assert_eq!(f(24), (Some(16), vec![25]));
        assert_eq!(f(31), (Some(30), vec![]));
        // A chain order: node 1's chain starts at its local 3.
        let order = [3, 1, 2, 0, 4, 5, 6, 7];
        let g = |r| nccl_tree(32, 8, &order, 0, r);
        assert_eq!(g(11), (Some(17), vec![9]));
        assert_eq!(g(9), (Some(11), vec![10]));
        assert_eq!(g(19), (Some(3), vec![17, 27]));
        assert_eq!(g(17), (Some(19), vec![18, 11]));
        // One rank per node: the double binary tree over ranks.
        for r in 0..6 {
            assert_eq!(nccl_tree(6, 1, &[], 1, r), dtree(6, 1, r));
        }
    }

    #[test]
    fn nccl_example_14_ranks() {
        // The picture in NCCL's trees.cc.
        assert_eq!(btree_children(14, 0), vec![8]);
        assert_eq!(btree_children(14, 8), vec![4, 12]);
        assert_eq!(btree_children(14, 12), vec![10, 13]);
        assert_eq!(btree_parent(14, 13), Some(12));
        assert_eq!(btree_children(14, 2), vec![1, 3]);
        assert_eq!(btree_depth(14), 4);
    }

    #[test]
    fn double_tree_balances_leaves() {
        // In the double tree, no rank is interior (2 children) in both trees.
        for n in [8usize, 16, 32, 64] {
            for r in 0..n {
                let busy = (0..2).filter(|&t| dtree(n, t, r).1.len() == 2).count();
                assert!(busy <= 1, "n={n} r={r}");
            }
        }
    }
}
