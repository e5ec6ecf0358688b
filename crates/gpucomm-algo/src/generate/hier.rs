//! Hierarchical two-level algorithms for ranks spread over nodes
//! (`ranks_per_node` = L consecutive ranks per node, N nodes).
//!
//! * all_reduce: intra-node ring reduce-scatter (local rank l ends with
//!   block l of the node's sum), inter-node ring all-reduce of block l among
//!   the ranks with local index l (one "rail" per local index, as NCCL's
//!   CollNet/NVLS-tree and rail-optimised fabrics do), intra-node ring
//!   all-gather. Network traffic per rank: `2 (N-1)/N * count/L` elements.
//! * reduce_scatter: intra-node ring reduce-scatter where local rank l's
//!   block is the union of the final blocks of the ranks with local index l
//!   (`q L + l` for every node q), then an inter-node ring reduce-scatter on
//!   each rail.
//! * all_gather: the reverse, inter-node ring all-gather on each rail, then
//!   intra-node ring all-gather of the same interleaved blocks.
//! * broadcast: pipelined chain over the root's rail, then pipelined chains
//!   inside every node from the rank on that rail.
//!
//! The reduce and gather phases are not chunked (each phase needs the
//! previous one's block); broadcast is.

use super::ring::{self, Block, Hops, single};
use super::{Builder, Group, Plan, blocks, max_block};
use crate::{Buf, Collective, Schedule};

fn unchunked(s: &Schedule, unit: usize) -> Plan {
    let mut pl = Plan::new(s, unit);
    pl.chunks = 1;
    pl
}

/// The intra-node group and the rail of `rank`.
pub(crate) fn groups(n: usize, l: usize, rank: usize) -> (Group, Group) {
    let (node, local) = (rank / l, rank % l);
    (
        Group {
            base: node * l,
            stride: 1,
            size: l,
            pos: local,
        },
        Group {
            base: local,
            stride: l,
            size: n / l,
            pos: node,
        },
    )
}

fn entry(chain: &[Vec<u32>]) -> Vec<u32> {
    let mut e: Vec<u32> = chain.concat();
    e.sort_unstable();
    e.dedup();
    e
}

pub(super) fn steps(s: &Schedule, b: &mut Builder) {
    let p = *b.p;
    let n = p.nranks;
    let l = p.ranks_per_node;
    let nodes = n / l;
    let r = b.rank;
    let c = p.count;
    let (intra, rail) = groups(n, l, r);
    let (node, local) = (intra.base / l, intra.pos);
    // The phases' rings run in group order.
    let id = ring::Order::identity();
    if c == 0 {
        return;
    }
    // Interleaved blocks: local index j owns the final blocks q L + j.
    let interleaved = |j: usize| -> Block { (0..nodes).map(|q| p.block(q * l + j)).collect() };
    match p.collective {
        Collective::AllReduce => {
            let bl1 = single(blocks(c, l));
            let pl1 = unchunked(s, max_block(c, l));
            let mut ch = vec![Vec::new(); ring::pieces(&pl1, &bl1)];
            let (bo, blen) = bl1[local][0];
            ring::reduce_scatter(
                b,
                &pl1,
                intra,
                &id,
                &bl1,
                Buf::Input,
                Buf::Output,
                Some((Buf::Output, bo)),
                &mut ch,
                None,
            );
            let bl2: Vec<Block> = blocks(blen, nodes)
                .into_iter()
                .map(|(o, x)| vec![(bo + o, x)])
                .collect();
            let pl2 = unchunked(s, max_block(blen, nodes));
            let mut ch2 = vec![entry(&ch); ring::pieces(&pl2, &bl2)];
            if nodes > 1 {
                let fin = Some((Buf::Output, bl2[node][0].0));
                ring::reduce_scatter(
                    b,
                    &pl2,
                    rail,
                    &id,
                    &bl2,
                    Buf::Output,
                    Buf::Output,
                    fin,
                    &mut ch2,
                    None,
                );
                ring::all_gather(b, &pl2, rail, &id, &bl2, Buf::Output, None, &mut ch2, None);
            }
            let mut ch3 = vec![entry(&ch2); ring::pieces(&pl1, &bl1)];
            ring::all_gather(b, &pl1, intra, &id, &bl1, Buf::Output, None, &mut ch3, None);
        }
        Collective::ReduceScatter => {
            let bl1: Vec<Block> = (0..l).map(interleaved).collect();
            let pl = unchunked(s, max_block(c, n));
            let mut ch = vec![Vec::new(); ring::pieces(&pl, &bl1)];
            ring::reduce_scatter(
                b,
                &pl,
                intra,
                &id,
                &bl1,
                Buf::Input,
                Buf::Scratch,
                None,
                &mut ch,
                None,
            );
            let bl2: Vec<Block> = (0..nodes).map(|q| vec![p.block(q * l + local)]).collect();
            let mut ch2 = vec![entry(&ch); ring::pieces(&pl, &bl2)];
            let fin = Some((Buf::Output, 0));
            ring::reduce_scatter(
                b,
                &pl,
                rail,
                &id,
                &bl2,
                Buf::Scratch,
                Buf::Scratch,
                fin,
                &mut ch2,
                None,
            );
        }
        Collective::AllGather => {
            // The rail ring sends the own block from the input and copies it
            // behind its sends (NCCL's directCopySend), so the copy does not
            // hold up the first send.
            let pl = unchunked(s, max_block(c, n));
            let bl2: Vec<Block> = (0..nodes).map(|q| vec![p.block(q * l + local)]).collect();
            let mut ch = vec![Vec::new(); ring::pieces(&pl, &bl2)];
            let first = Some((Buf::Input, 0));
            ring::all_gather(b, &pl, rail, &id, &bl2, Buf::Output, first, &mut ch, None);
            let bl1: Vec<Block> = (0..l).map(interleaved).collect();
            let mut ch2 = vec![entry(&ch); ring::pieces(&pl, &bl1)];
            ring::all_gather(b, &pl, intra, &id, &bl1, Buf::Output, None, &mut ch2, None);
        }
        Collective::Broadcast { root } => {
            let pl = Plan::new(s, c);
            let (root_node, root_local) = (root / l, root % l);
            let src = if r == root { Buf::Input } else { Buf::Output };
            if local == root_local {
                ring::chain_broadcast(
                    b,
                    &pl,
                    rail,
                    &id,
                    Hops::WHOLE,
                    root_node,
                    (0, c),
                    src,
                    false,
                );
            }
            // The root copies its input to its output behind its last sends.
            ring::chain_broadcast(
                b,
                &pl,
                intra,
                &id,
                Hops::WHOLE,
                root_local,
                (0, c),
                src,
                true,
            );
        }
        _ => unreachable!("validated by support()"),
    }
}

pub(super) fn scratch_len(s: &Schedule, _rank: usize) -> usize {
    match s.problem.collective {
        Collective::ReduceScatter => s.problem.count,
        _ => 0,
    }
}
