//! Trees: NCCL's double binary tree for all_reduce, a pipelined binary tree
//! for broadcast and reduce.
//!
//! The binary tree is NCCL's `ncclGetBtree` (src/graph/trees.cc): on ranks
//! `0..n` with root 0, a rank's parent is found from its lowest set bit, so
//! that about half the ranks are leaves. The second tree is the first one
//! mirrored (`n - 1 - r`, n even) or shifted by one (n odd), which makes most
//! of the first tree's leaves interior nodes of the second: each rank then
//! sends and receives about the same amount in total. All-reduce splits the
//! data between channels, channel `c` running on tree `c % 2` (with one
//! channel only the first tree is used): a reduce towards the root, then a
//! broadcast back, chunk after chunk so both directions pipeline.

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

/// One tree of the double binary tree, in real ranks: `(parent, children)` of `r`.
pub(crate) fn dtree(n: usize, t: usize, r: usize) -> (Option<usize>, Vec<usize>) {
    // Tree 1: mirror (n even) or shift by one (n odd); both maps are involutions
    // or inverse pairs between real and virtual ranks.
    let to_v = |x: usize| match (t, n % 2) {
        (0, _) => x,
        (_, 1) => (x + n - 1) % n,
        _ => n - 1 - x,
    };
    let from_v = |x: usize| match (t, n % 2) {
        (0, _) => x,
        (_, 1) => (x + 1) % n,
        _ => n - 1 - x,
    };
    let v = to_v(r);
    (
        btree_parent(n, v).map(from_v),
        btree_children(n, v).into_iter().map(from_v).collect(),
    )
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
            let trees = [dtree(n, 0, r), dtree(n, 1, r)];
            for j in 0..plan.pieces() {
                let (o, l, ch) = plan.piece((0, c), j);
                let (parent, children) = &trees[ch as usize % 2];
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
