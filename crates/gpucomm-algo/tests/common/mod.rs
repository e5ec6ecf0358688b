//! Helpers shared by the integration tests.
#![allow(dead_code)]

use gpucomm_algo::{Algorithm, Collective, Problem, ReduceOp, Schedule};

/// Every collective shape for `n` ranks (roots and shifts varied).
pub fn collectives(n: usize) -> Vec<Collective> {
    vec![
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast { root: 0 },
        Collective::Broadcast { root: n - 1 },
        Collective::Reduce { root: 0 },
        Collective::Reduce { root: n / 2 },
        Collective::AllToAll,
        Collective::SendRecv { shift: 1 },
        Collective::SendRecv { shift: n + 2 },
        Collective::Barrier,
        Collective::Gather { root: 0 },
        Collective::Gather { root: n - 1 },
        Collective::Scatter { root: 0 },
        Collective::Scatter { root: n / 2 },
    ]
}

/// Small-integer inputs so every op is exact in f64: values in 1..=3
/// (products of up to 64 such values stay exact below 2^53 only for small
/// exponents, so products use 1 and 2 only on few ranks).
pub fn inputs(p: &Problem, op: ReduceOp, seed: u64) -> Vec<Vec<f64>> {
    (0..p.nranks)
        .map(|r| {
            (0..p.input_len(r))
                .map(|i| {
                    let h = (seed ^ (r as u64 * 0x9E37_79B9) ^ (i as u64 * 0x85EB_CA6B))
                        .wrapping_mul(0xC2B2_AE35);
                    let h = h ^ (h >> 29);
                    match op {
                        // at most a few factors of 2 in any product
                        ReduceOp::Prod => {
                            if h % 16 == 0 {
                                2.0
                            } else if h % 16 == 1 {
                                -1.0
                            } else {
                                1.0
                            }
                        }
                        _ => ((h % 7) as f64) - 3.0,
                    }
                })
                .collect()
        })
        .collect()
}

/// Compares outputs, ignoring undefined elements (NaN in `want`).
pub fn same(got: &[Vec<f64>], want: &[Vec<f64>]) -> Result<(), String> {
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        if g.len() != w.len() {
            return Err(format!("rank {r}: {} elements, want {}", g.len(), w.len()));
        }
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            if !b.is_nan() && a != b {
                return Err(format!("rank {r} output[{i}] = {a}, want {b}"));
            }
        }
    }
    Ok(())
}

/// The schedules of every supported algorithm for `p`, with a few channel
/// and chunk settings.
pub fn schedules(p: Problem) -> Vec<Schedule> {
    let mut out = Vec::new();
    for a in Algorithm::ALL {
        let Ok(s) = Schedule::new(p, a) else { continue };
        out.push(s.clone());
        out.push(s.clone().with_channels(2));
        out.push(s.clone().with_channels(3).with_chunk_elems(2));
        // Rings and tree chains in another order than the ranks' (reversed
        // on one channel, rotated with two locals swapped on the next), as a
        // topology search would order them; other algorithms ignore the
        // orders.
        let rpn = p.ranks_per_node;
        let orders = (rpn > 1 && p.nranks % rpn == 0).then(|| {
            let rev: Vec<u32> = (0..rpn as u32).rev().collect();
            let mut rot: Vec<u32> = (1..rpn as u32).chain([0]).collect();
            rot.swap(0, rpn - 1);
            vec![rev, rot]
        });
        if let Some(o) = orders
            .clone()
            .filter(|_| matches!(a, Algorithm::Ring | Algorithm::Tree))
        {
            let s = s.clone().with_channels(3).with_chunk_elems(2);
            out.push(s.with_ring_orders(o).expect("permutations"));
        }
        // Chains cut in parts inside a node (pieces of 5 in 3 parts of 2,
        // 2 and 1; shorter pieces in as many as they have), in rank order
        // and in the orders above, swapped between the channels.
        if a == Algorithm::Ring {
            let s = s.with_channels(2).with_chunk_elems(5).with_intra_slices(3);
            out.push(s.clone());
            if let Some(mut o) = orders {
                o.reverse();
                out.push(s.with_ring_orders(o).expect("permutations"));
            }
        }
    }
    out
}
