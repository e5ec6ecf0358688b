//! The alpha-beta cost model and the tuner.
//!
//! For a [`Schedule`] the model gives, in closed form (no steps generated):
//!
//! * `steps`: the number of sequential communication steps, equal to the
//!   checker's [`crate::CheckReport::critical_path`];
//! * `max_bytes_sent` / `max_bytes_recv`: the busiest rank's traffic, equal to
//!   the checker's counts;
//! * `time_us`: `sum over link classes of steps_c * (latency_c + overhead)
//!   + path_bytes_c / bandwidth_c`, where the overhead is paid per message
//!   (`n - 1` per step for direct algorithms, which post to every peer at
//!   once), `path_bytes` is what one rank moves
//!   along the critical path (for a pipelined algorithm: steps times the
//!   piece that moves per step; for the others: the busiest rank's bytes),
//!   and the bandwidth is `min(link, channels * per-channel)`.
//!
//! Flat algorithms on more than one node run every step at the inter-node
//! class (a ring or tree step waits for its slowest link); hierarchical
//! algorithms put their intra-node phases on the intra-node class and their
//! rail phases on the inter-node class. Every rank is assumed to have its own
//! link of each class (one NIC per GPU, as on rail-optimised clusters).
//!
//! Textbook checks (in the tests): ring all_reduce moves `2 (n-1)/n` of the
//! buffer per rank in `2 (n-1)` steps; recursive doubling takes `log2 n`
//! steps on a power of two.

use serde::{Deserialize, Serialize};

use crate::generate::hd::fold;
use crate::generate::ring::{Hops, Order};
use crate::generate::tree::{btree_depth, nccl_tree, nccl_tree_depth, rooted, tree_of_channel};
use crate::generate::{Plan, max_block};
use crate::{Algorithm, Collective, Problem, Schedule, StepKind, block_partition};

/// One class of link: latency per hop and bandwidth per direction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkClass {
    /// One-way latency of a hop, microseconds.
    pub latency_us: f64,
    /// Bandwidth per direction, GB/s (1e9 bytes per second).
    pub bandwidth_gbps: f64,
}

/// Alpha-beta parameters for the two link classes a collective crosses.
///
/// ```
/// use gpucomm_algo::{Algorithm, Collective, CostModel, LinkClass, Problem, Schedule, predict};
///
/// let model = CostModel::new(
///     LinkClass { latency_us: 1.0, bandwidth_gbps: 100.0 },
///     LinkClass { latency_us: 5.0, bandwidth_gbps: 25.0 },
/// );
/// let p = Problem::new(Collective::AllReduce, 1 << 20, 8, 8);
/// let s = Schedule::new(p, Algorithm::Ring).unwrap().with_channels(4);
/// let pred = predict(&s, &model);
/// assert_eq!(pred.steps, 14);
/// assert!(pred.time_us > 0.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// Links between ranks on the same node (NVLink, PCIe, shared memory).
    pub intra: LinkClass,
    /// Links between nodes (InfiniBand, RoCE, TCP).
    pub inter: LinkClass,
    /// Software overhead per communication step, microseconds.
    pub step_overhead_us: f64,
    /// Bandwidth one channel can drive, GB/s (several channels are needed
    /// to fill a fast link, as in NCCL).
    pub channel_gbps: f64,
    /// Bandwidth of a rank's local work (the elements its reduce, copy and
    /// receive-and-reduce steps write), GB/s; 0 = not modeled. On a CPU
    /// with zero-copy transports this, not the link, is what a large
    /// all-reduce costs.
    #[serde(default)]
    pub local_gbps: f64,
}

impl CostModel {
    /// A model with the given link classes, 1 µs step overhead and 25 GB/s
    /// per channel.
    pub const fn new(intra: LinkClass, inter: LinkClass) -> Self {
        CostModel {
            intra,
            inter,
            step_overhead_us: 1.0,
            channel_gbps: 25.0,
            local_gbps: 0.0,
        }
    }

    /// Both classes the same (one flat network).
    pub const fn uniform(latency_us: f64, bandwidth_gbps: f64) -> Self {
        let l = LinkClass {
            latency_us,
            bandwidth_gbps,
        };
        Self::new(l, l)
    }

    /// Nominal figures for an H100 SXM node with NDR InfiniBand: 450 GB/s
    /// per direction of NVLink 4 per GPU (900 GB/s total, NVIDIA H100
    /// datasheet) and one 400 Gb/s NDR port per GPU (50 GB/s). The
    /// latencies (2 µs NVLink hop, 5 µs network hop) are assumptions to be
    /// calibrated against measurements, not measurements.
    pub const fn h100_ndr() -> Self {
        Self::new(
            LinkClass {
                latency_us: 2.0,
                bandwidth_gbps: 450.0,
            },
            LinkClass {
                latency_us: 5.0,
                bandwidth_gbps: 50.0,
            },
        )
    }

    /// The same model with another per-step overhead.
    pub const fn with_step_overhead_us(mut self, us: f64) -> Self {
        self.step_overhead_us = us;
        self
    }

    /// The same model with another per-channel bandwidth.
    pub const fn with_channel_gbps(mut self, gbps: f64) -> Self {
        self.channel_gbps = gbps;
        self
    }

    /// The same model with local work (reduce and copy steps) at `gbps`.
    pub const fn with_local_gbps(mut self, gbps: f64) -> Self {
        self.local_gbps = gbps;
        self
    }
}

impl Default for CostModel {
    fn default() -> Self {
        Self::h100_ndr()
    }
}

/// What the model predicts for one schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Channels asked for.
    pub channels: u16,
    /// Chunk limit in elements (0 = none).
    pub chunk_elems: usize,
    /// Sequential communication steps (the checker's critical path;
    /// `u32::MAX` for more).
    pub steps: u32,
    /// Steps on the intra-node class.
    pub intra_steps: u32,
    /// Steps on the inter-node class.
    pub inter_steps: u32,
    /// Most bytes any rank sends.
    pub max_bytes_sent: u64,
    /// Most bytes any rank receives.
    pub max_bytes_recv: u64,
    /// Bytes moved along the critical path, intra-node class.
    pub intra_path_bytes: f64,
    /// Bytes moved along the critical path, inter-node class.
    pub inter_path_bytes: f64,
    /// Predicted time, microseconds.
    pub time_us: f64,
}

/// Per-rank `(sent, received)` element counts of `s`, in closed form
/// (empty for a schedule that fails [`Schedule::validate`]).
pub fn traffic(s: &Schedule) -> Vec<(u64, u64)> {
    if s.validate().is_err() {
        return Vec::new();
    }
    let p = &s.problem;
    let n = p.nranks;
    (0..n)
        .map(|r| rank_traffic(s, r))
        .map(|(a, b)| (a as u64, b as u64))
        .collect()
}

fn len(p: &Problem, i: isize) -> usize {
    let n = p.nranks as isize;
    p.block(i.rem_euclid(n) as usize).1
}

/// The blocks of a ring group: `m` members, member `i` owning `len(i)`
/// elements, `total` in all. Evaluated lazily so that a rank's traffic
/// costs O(1) however large the group (the tuner asks it of every rank).
struct Blocks<F: Fn(usize) -> usize> {
    m: usize,
    total: usize,
    len: F,
}

impl<F: Fn(usize) -> usize> Blocks<F> {
    /// A ring reduce-scatter's traffic of member `pos`: (sent, received).
    fn rs(&self, pos: usize) -> (usize, usize) {
        if self.m <= 1 {
            return (0, 0);
        }
        let prev = (pos + self.m - 1) % self.m;
        (self.total - (self.len)(pos), self.total - (self.len)(prev))
    }

    /// A ring all-gather's traffic of member `pos`: (sent, received).
    fn ag(&self, pos: usize) -> (usize, usize) {
        if self.m <= 1 {
            return (0, 0);
        }
        let next = (pos + 1) % self.m;
        (self.total - (self.len)(next), self.total - (self.len)(pos))
    }

    /// Both phases (an all-reduce).
    fn rs_ag(&self, pos: usize) -> (usize, usize) {
        add(self.rs(pos), self.ag(pos))
    }
}

/// `count` cut in `parts` blocks as [`block_partition`] cuts it.
fn partition(count: usize, parts: usize) -> Blocks<impl Fn(usize) -> usize> {
    Blocks {
        m: parts,
        total: count,
        len: move |j| block_partition(count, parts, j).1,
    }
}

fn add(a: (usize, usize), b: (usize, usize)) -> (usize, usize) {
    (a.0 + b.0, a.1 + b.1)
}

/// Elements `(sent, received)` by `r`.
fn rank_traffic(s: &Schedule, r: usize) -> (usize, usize) {
    let p = &s.problem;
    let n = p.nranks;
    let c = p.count;
    let ri = r as isize;
    if n == 1 || (c == 0 && p.collective != Collective::Barrier) {
        return (0, 0);
    }
    let whole = |b: bool| if b { c } else { 0 };
    match (s.algorithm, p.collective) {
        (_, Collective::Barrier) => (0, 0),
        (Algorithm::Ring, Collective::AllReduce) => (
            2 * c - len(p, ri) - len(p, ri + 1),
            2 * c - len(p, ri - 1) - len(p, ri),
        ),
        (Algorithm::Ring, Collective::ReduceScatter) => (c - len(p, ri), c - len(p, ri - 1)),
        (Algorithm::Ring, Collective::AllGather) => (c - len(p, ri + 1), c - len(p, ri)),
        (Algorithm::Ring, Collective::Broadcast { root }) => {
            let d = (r + n - root) % n;
            (whole(d < n - 1), whole(d != 0))
        }
        (Algorithm::Ring, Collective::Reduce { root }) => {
            let d = (r + n - root) % n;
            (whole(d != 0), whole(d != 1))
        }
        (Algorithm::Direct, coll) => {
            let l = len(p, ri);
            match coll {
                Collective::AllReduce => ((c - l) + (n - 1) * l, (n - 1) * l + (c - l)),
                Collective::ReduceScatter => (c - l, (n - 1) * l),
                Collective::AllGather => ((n - 1) * l, c - l),
                Collective::Broadcast { root } => {
                    if r == root {
                        ((n - 1) * c, 0)
                    } else {
                        (0, c)
                    }
                }
                Collective::Reduce { root } => {
                    if r == root {
                        (0, (n - 1) * c)
                    } else {
                        (c, 0)
                    }
                }
                Collective::AllToAll => ((n - 1) * c, (n - 1) * c),
                Collective::Gather { root } => {
                    if r == root {
                        (0, (n - 1) * c)
                    } else {
                        (c, 0)
                    }
                }
                Collective::Scatter { root } => {
                    if r == root {
                        ((n - 1) * c, 0)
                    } else {
                        (0, c)
                    }
                }
                Collective::SendRecv { shift } => {
                    if shift % n == 0 {
                        (0, 0)
                    } else {
                        (c, c)
                    }
                }
                Collective::Barrier => (0, 0),
            }
        }
        (Algorithm::Tree, Collective::AllReduce) => {
            let plan = Plan::new(s, c);
            let mut t = (0, 0);
            for ch in 0..plan.channels {
                let d = block_partition(c, plan.channels, ch).1;
                let tree = tree_of_channel(ch, plan.channels, s.tree_split);
                let (par, kids) = nccl_tree(n, p.ranks_per_node, s.chain_order(ch), tree, r);
                let deg = kids.len() + usize::from(par.is_some());
                t = add(t, (deg * d, deg * d));
            }
            t
        }
        (Algorithm::Tree, Collective::Broadcast { root }) => {
            let (par, kids) = rooted(n, root, r);
            (kids.len() * c, whole(par.is_some()))
        }
        (Algorithm::Tree, Collective::Reduce { root }) => {
            let (par, kids) = rooted(n, root, r);
            (whole(par.is_some()), kids.len() * c)
        }
        (Algorithm::HalvingDoubling | Algorithm::RecursiveDoubling, coll) => hd_traffic(s, r, coll),
        (Algorithm::Hierarchical, coll) => {
            let (a, b) = hier_traffic(p, r, coll);
            add(a, b)
        }
        (Algorithm::Bruck, coll) => bruck_traffic(p, r, coll),
        _ => (0, 0),
    }
}

/// Elements `(sent, received)` by `r` in Bruck's rounds, mirroring
/// `generate::bruck`: in the round of distance `d` the all-gather sends
/// blocks `r .. r+cnt` and receives `r+d .. r+d+cnt` (`cnt = min(d, n-d)`);
/// the reduce-scatter sends `r+d ..` and receives `r ..`.
fn bruck_traffic(p: &Problem, r: usize, coll: Collective) -> (usize, usize) {
    let n = p.nranks;
    // The elements of blocks first .. first + cnt (mod n), from the
    // blocks' offsets: O(1) however many blocks.
    let start = |i: usize| if i == n { p.count } else { p.block(i).0 };
    let run = |first: usize, cnt: usize| {
        let (a, b) = (first % n, first % n + cnt);
        if b <= n {
            start(b) - start(a)
        } else {
            p.count - start(a) + start(b - n)
        }
    };
    let mut t = (0, 0);
    let mut d = 1;
    while d < n {
        let cnt = d.min(n - d);
        let (mine, theirs) = (run(r, cnt), run(r + d, cnt));
        t = add(
            t,
            match coll {
                Collective::AllGather => (mine, theirs),
                _ => (theirs, mine),
            },
        );
        d <<= 1;
    }
    t
}

/// Halving-doubling spans, mirroring `generate::hd`.
fn hd_span(p: &Problem, lo: usize, hi: usize) -> usize {
    let n = p.nranks;
    let (_, rem) = fold(n);
    let real = |nr: usize| if nr < rem { 2 * nr + 1 } else { nr + rem };
    let first = if lo < rem { 2 * lo } else { lo + rem };
    let last = real(hi - 1);
    let (o, l) = p.block(last);
    o + l - p.block(first).0
}

fn halving_traffic(p: &Problem, nr: usize, p2: usize) -> (usize, usize) {
    let (mut lo, mut hi, mut d) = (0, p2, p2 / 2);
    let mut t = (0, 0);
    while d >= 1 {
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if nr & d == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        t = add(t, (hd_span(p, give.0, give.1), hd_span(p, keep.0, keep.1)));
        (lo, hi) = keep;
        d /= 2;
    }
    t
}

fn doubling_traffic(p: &Problem, nr: usize, p2: usize) -> (usize, usize) {
    let mut d = 1;
    let mut t = (0, 0);
    while d < p2 {
        let mine = nr & !(d - 1);
        let theirs = (nr ^ d) & !(d - 1);
        t = add(
            t,
            (hd_span(p, mine, mine + d), hd_span(p, theirs, theirs + d)),
        );
        d <<= 1;
    }
    t
}

fn hd_traffic(s: &Schedule, r: usize, coll: Collective) -> (usize, usize) {
    let p = &s.problem;
    let n = p.nranks;
    let c = p.count;
    let (p2, rem) = fold(n);
    let folded_even = r < 2 * rem && r % 2 == 0;
    let folded_odd = r < 2 * rem && r % 2 == 1;
    let nr = if r < 2 * rem { r / 2 } else { r - rem };
    let log = p2.trailing_zeros() as usize;
    match coll {
        Collective::AllReduce => {
            if folded_even {
                return (c, c);
            }
            let mid = if s.algorithm == Algorithm::HalvingDoubling {
                add(halving_traffic(p, nr, p2), doubling_traffic(p, nr, p2))
            } else {
                (log * c, log * c)
            };
            if folded_odd { add(mid, (c, c)) } else { mid }
        }
        Collective::ReduceScatter => {
            if folded_even {
                return (c, p.block(r).1);
            }
            let mid = halving_traffic(p, nr, p2);
            if folded_odd {
                add(mid, (p.block(r - 1).1, c))
            } else {
                mid
            }
        }
        Collective::AllGather => {
            if folded_even {
                return (p.block(r).1, c);
            }
            let mid = doubling_traffic(p, nr, p2);
            if folded_odd {
                add(mid, (c, p.block(r - 1).1))
            } else {
                mid
            }
        }
        Collective::Broadcast { root } => {
            let v = (r + n - root) % n;
            let low = if v == 0 {
                n.next_power_of_two()
            } else {
                v & v.wrapping_neg()
            };
            let kids = (0..usize::BITS)
                .map(|b| 1usize << b)
                .take_while(|&m| m < low)
                .filter(|&m| v + m < n)
                .count();
            (kids * c, if v == 0 { 0 } else { c })
        }
        Collective::Reduce { root } => {
            let v = (r + n - root) % n;
            let low = if v == 0 {
                n.next_power_of_two()
            } else {
                v & v.wrapping_neg()
            };
            let kids = (0..usize::BITS)
                .map(|b| 1usize << b)
                .take_while(|&m| m < low)
                .filter(|&m| v + m < n)
                .count();
            (if v == 0 { 0 } else { c }, kids * c)
        }
        _ => (0, 0),
    }
}

/// Hierarchical traffic of rank r: `(intra (sent, recv), inter (sent, recv))`.
fn hier_traffic(p: &Problem, r: usize, coll: Collective) -> ((usize, usize), (usize, usize)) {
    let n = p.nranks;
    let l = p.ranks_per_node;
    let nodes = n / l;
    let (q, loc) = (r / l, r % l);
    let c = p.count;
    if c == 0 {
        return ((0, 0), (0, 0));
    }
    // Rank j of every node: the elements of blocks j, j + l, j + 2l, ...
    // (the first `extra` blocks hold one more element).
    let (base, extra) = (c / n, c % n);
    let column = move |j: usize| {
        nodes * base
            + if j < extra {
                (extra - j - 1) / l + 1
            } else {
                0
            }
    };
    let interleaved = Blocks {
        m: l,
        total: c,
        len: column,
    };
    let across = Blocks {
        m: nodes,
        total: column(loc),
        len: |x: usize| p.block(x * l + loc).1,
    };
    match coll {
        Collective::AllReduce => {
            let mine = block_partition(c, l, loc).1;
            (partition(c, l).rs_ag(loc), partition(mine, nodes).rs_ag(q))
        }
        Collective::ReduceScatter => (interleaved.rs(loc), across.rs(q)),
        Collective::AllGather => (interleaved.ag(loc), across.ag(q)),
        Collective::Broadcast { root } => {
            let (rq, rl) = (root / l, root % l);
            let mut inter = (0, 0);
            if loc == rl && nodes > 1 {
                let d = (q + nodes - rq) % nodes;
                inter = (
                    if d < nodes - 1 { c } else { 0 },
                    if d != 0 { c } else { 0 },
                );
            }
            let mut intra = (0, 0);
            if l > 1 {
                let e = (loc + l - rl) % l;
                intra = (if e < l - 1 { c } else { 0 }, if e != 0 { c } else { 0 });
            }
            (intra, inter)
        }
        _ => ((0, 0), (0, 0)),
    }
}

/// A ring broadcast's or reduce's chain on the channel with the longest
/// critical path: its transfers and the elements they move.
///
/// A chain of `h` hops moving `k` pieces one after another takes `h + k -
/// 1` transfers. Cut in parts inside a node ([`Schedule::intra_slices`]),
/// a hop inside a node moves `t` parts (the sum over the channel's
/// pieces), so the path runs `t` of them on one such hop and one transfer
/// on every other hop; and where hops between nodes separate `g` runs of
/// hops inside nodes, the path crosses each such hop behind a piece's last
/// part and takes that piece's parts again on the next run: `(g - 1) *
/// (most parts of a piece - 1)` more.
fn ring_chain(s: &Schedule) -> (u64, f64) {
    let p = &s.problem;
    let (n, c) = (p.nranks, p.count);
    let plan = Plan::new(s, c);
    let hops = Hops::of(s);
    let ord = Order::of(s);
    let rpn = hops.rpn();
    let (root, first) = match p.collective {
        Collective::Broadcast { root } => (root, 0),
        Collective::Reduce { root } => (root, 1),
        _ => (0, 0),
    };
    let k = plan.chunks;
    let piece = c as f64 / k as f64;
    let mut best = (0u64, 0.0f64);
    for ch in 0..plan.channels {
        // The chain's hops, ring positions q -> q + 1 from the root's
        // position (a broadcast's) or the one after it (a reduce's).
        let start = ord.pos(ch as u16, root) + first;
        let (mut intra, mut runs, mut prev_intra) = (0usize, 0usize, false);
        for h in 0..n - 1 {
            let q = (start + h) % n;
            let inside = q / rpn == ((q + 1) % n) / rpn;
            intra += usize::from(inside);
            runs += usize::from(inside && !prev_intra);
            prev_intra = inside;
        }
        let hops_n = n - 1;
        let (steps, path) = if runs == 0 {
            (hops_n + k - 1, piece * (hops_n + k - 1) as f64)
        } else {
            let parts: Vec<usize> = (0..k)
                .map(|j| hops.parts(plan.piece((0, c), j * plan.channels + ch).1))
                .collect();
            let t: usize = parts.iter().sum();
            let most = parts.iter().copied().max().unwrap_or(1);
            let steps = hops_n + t - 1 + (runs - 1) * (most - 1);
            // Per transfer: a whole piece between nodes, a part inside.
            let part = piece * k as f64 / t as f64;
            let net = (hops_n - intra) as f64;
            let path = piece * (net + (k + runs - 1) as f64) + part * (intra - runs) as f64;
            (steps, path)
        };
        if steps as u64 > best.0 {
            best = (steps as u64, path);
        }
    }
    best
}

/// Sequential communication steps (the checker's critical path), in closed form
/// (0 for a schedule that fails [`Schedule::validate`]; `u32::MAX` for more).
pub fn critical_path(s: &Schedule) -> u32 {
    if s.validate().is_err() {
        return 0;
    }
    let (a, b) = class_steps(s);
    saturated(a.saturating_add(b))
}

/// A step count as the public `u32` fields show it (`u32::MAX` for more).
fn saturated(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

fn ceil_log2(n: usize) -> u32 {
    n.next_power_of_two().trailing_zeros()
}

/// `(first-class steps, rail steps)`: for hierarchical, intra and inter;
/// for flat algorithms everything is in the first. In u64: chunk counts of
/// a few billion (one-byte chunks of 8 GiB) times 2(n - 1) wrapped in u32
/// (0 steps, 0 us; a debug panic).
fn class_steps(s: &Schedule) -> (u64, u64) {
    let p = &s.problem;
    let n = p.nranks;
    let c = p.count;
    if n == 1 || (c == 0 && !p.collective.meets_when_empty()) {
        return (0, 0);
    }
    let k = |unit: usize| Plan::new(s, unit).chunks as u64;
    let n64 = n as u64;
    let flat = match (s.algorithm, p.collective) {
        (_, Collective::Barrier) => match s.algorithm {
            Algorithm::Direct => 1,
            _ => ceil_log2(n).into(),
        },
        (Algorithm::Ring, Collective::AllReduce) => 2 * (n64 - 1) * k(max_block(c, n)),
        (Algorithm::Ring, Collective::ReduceScatter | Collective::AllGather) => {
            (n64 - 1) * k(max_block(c, n))
        }
        (Algorithm::Ring, Collective::Broadcast { .. } | Collective::Reduce { .. }) => {
            ring_chain(s).0
        }
        (Algorithm::Direct, Collective::AllReduce) => 2 * k(max_block(c, n)),
        (Algorithm::Direct, Collective::ReduceScatter | Collective::AllGather) => {
            k(max_block(c, n))
        }
        (Algorithm::Direct, Collective::SendRecv { shift }) if shift % n == 0 => 0,
        (Algorithm::Direct, _) => k(c),
        (Algorithm::Tree, Collective::AllReduce) => {
            let depth = (0..2)
                .map(|t| nccl_tree_depth(n, p.ranks_per_node, t))
                .max()
                .unwrap_or(0);
            2 * depth as u64 + k(c) - 1
        }
        (Algorithm::Tree, _) => btree_depth(n) as u64 + k(c) - 1,
        (Algorithm::HalvingDoubling | Algorithm::RecursiveDoubling, coll) => {
            let (p2, rem) = fold(n);
            let log = u64::from(p2.trailing_zeros());
            let f = if rem > 0 { 2 } else { 0 };
            match coll {
                Collective::AllReduce if s.algorithm == Algorithm::HalvingDoubling => 2 * log + f,
                Collective::AllReduce | Collective::ReduceScatter | Collective::AllGather => {
                    log + f
                }
                Collective::Broadcast { .. } => {
                    let m = n - 1;
                    u64::from(m.count_ones().max(usize::BITS - m.leading_zeros() - 1))
                }
                Collective::Reduce { .. } => ceil_log2(n).into(),
                _ => 0,
            }
        }
        (Algorithm::Bruck, _) => ceil_log2(n).into(),
        (Algorithm::Hierarchical, coll) => {
            let l = p.ranks_per_node as u64;
            let nodes = n64 / l;
            return match coll {
                Collective::AllReduce => (2 * (l - 1), 2 * (nodes - 1)),
                // The intra-node phase moves one slice per node per step
                // (the interleaved blocks), one after another on a channel.
                Collective::ReduceScatter | Collective::AllGather => ((l - 1) * nodes, nodes - 1),
                Collective::Broadcast { .. } => ((l - 1) + k(c) - 1, nodes - 1),
                _ => (0, 0),
            };
        }
        _ => 0,
    };
    (flat, 0)
}

/// Predicts `s` under `model`. A schedule whose fields fail
/// [`Schedule::validate`] (only possible when set by hand) gets zero steps
/// and bytes and an infinite time.
pub fn predict(s: &Schedule, model: &CostModel) -> Prediction {
    if s.validate().is_err() {
        return Prediction {
            algorithm: s.algorithm,
            channels: s.channels,
            chunk_elems: s.chunk_elems,
            steps: 0,
            intra_steps: 0,
            inter_steps: 0,
            max_bytes_sent: 0,
            max_bytes_recv: 0,
            intra_path_bytes: 0.0,
            inter_path_bytes: 0.0,
            time_us: f64::INFINITY,
        };
    }
    let p = &s.problem;
    let e = p.elem_size as f64;
    let t = traffic(s);
    let max_sent = t.iter().map(|x| x.0).max().unwrap_or(0) * p.elem_size as u64;
    let max_recv = t.iter().map(|x| x.1).max().unwrap_or(0) * p.elem_size as u64;
    let busiest = max_sent.max(max_recv) as f64;
    let (a, b) = class_steps(s);
    let multi_node = p.nranks > p.ranks_per_node;
    let plan_c = |unit: usize| Plan::new(s, unit);
    let (intra_steps, inter_steps, intra_bytes, inter_bytes);
    if s.algorithm == Algorithm::Hierarchical {
        let mut intra_b = 0.0f64;
        let mut inter_b = 0.0f64;
        for r in 0..p.nranks {
            let (ia, ie) = hier_traffic(p, r, p.collective);
            intra_b = intra_b.max(ia.0.max(ia.1) as f64);
            inter_b = inter_b.max(ie.0.max(ie.1) as f64);
        }
        if let Collective::Broadcast { .. } = p.collective {
            let k = plan_c(p.count).chunks as f64;
            intra_b = a as f64 * p.count as f64 / k;
            inter_b = b as f64 * p.count as f64 / k;
        }
        (intra_steps, inter_steps, intra_bytes, inter_bytes) = (a, b, intra_b * e, inter_b * e);
    } else {
        let steps = a as f64;
        let c = p.count as f64;
        let n = p.nranks;
        let path = match (s.algorithm, p.collective) {
            (
                Algorithm::Ring,
                Collective::AllReduce | Collective::ReduceScatter | Collective::AllGather,
            ) => {
                let u = max_block(p.count, n);
                steps * (u as f64 / plan_c(u).chunks as f64) * e
            }
            // One rank: no hop (the chain's pieces stay put).
            (Algorithm::Ring, _) if a == 0 => 0.0,
            (Algorithm::Ring, _) => ring_chain(s).1 * e,
            (Algorithm::Tree, _) => steps * busiest / plan_c(p.count).chunks as f64,
            (
                Algorithm::RecursiveDoubling,
                Collective::Broadcast { .. } | Collective::Reduce { .. },
            ) => (steps * c * e).max(busiest),
            _ => busiest,
        };
        if multi_node {
            (intra_steps, inter_steps, intra_bytes, inter_bytes) = (0, a, 0.0, path);
        } else {
            (intra_steps, inter_steps, intra_bytes, inter_bytes) = (a, 0, path, 0.0);
        }
    }
    let ch = s.channels.max(1) as f64;
    let bw = |l: &LinkClass| l.bandwidth_gbps.min(ch * model.channel_gbps).max(1e-9) * 1e3; // bytes/us
    // Direct posts a message to every peer per step: the software overhead
    // is paid per message.
    let fanout = match (s.algorithm, p.collective) {
        (Algorithm::Direct, Collective::SendRecv { .. }) => 1.0,
        (Algorithm::Direct, _) => p.nranks.saturating_sub(1).max(1) as f64,
        _ => 1.0,
    };
    let o = model.step_overhead_us * fanout;
    // Local work of rank 0 (elements its reduce and copy steps write).
    let local_us = if model.local_gbps > 0.0 {
        let elems: usize = s
            .rank_steps(0)
            .iter()
            .map(|st| match st.kind {
                StepKind::RecvReduce { dst, .. }
                | StepKind::Reduce { dst, .. }
                | StepKind::Copy { dst, .. } => dst.len,
                _ => 0,
            })
            .sum();
        elems as f64 * e / (model.local_gbps * 1e3)
    } else {
        0.0
    };
    let time = intra_steps as f64 * (model.intra.latency_us + o)
        + inter_steps as f64 * (model.inter.latency_us + o)
        + intra_bytes / bw(&model.intra)
        + inter_bytes / bw(&model.inter)
        + local_us;
    // Counts past u32 (billions of steps) are shown saturated; the time
    // above used them whole.
    Prediction {
        algorithm: s.algorithm,
        channels: s.channels,
        chunk_elems: s.chunk_elems,
        steps: saturated(a.saturating_add(b)),
        intra_steps: saturated(intra_steps),
        inter_steps: saturated(inter_steps),
        max_bytes_sent: max_sent,
        max_bytes_recv: max_recv,
        intra_path_bytes: intra_bytes,
        inter_path_bytes: inter_bytes,
        time_us: time,
    }
}

/// Channel counts the tuner tries.
pub const TUNE_CHANNELS: [u16; 6] = [1, 2, 4, 8, 16, 32];
/// Chunk sizes (bytes) the tuner tries besides "no chunking".
pub const TUNE_CHUNK_BYTES: [usize; 5] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20];

/// What the tuner may choose from (an engine's limits).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TuneOptions {
    /// The most channels the engine runs (candidates above are skipped).
    pub max_channels: u16,
    /// Algorithms allowed (empty: all).
    pub algorithms: Vec<Algorithm>,
    /// Try the chunk sizes in [`TUNE_CHUNK_BYTES`] besides no chunking.
    pub chunking: bool,
    /// Try this channel count only (at most `max_channels`), instead of
    /// [`TUNE_CHANNELS`] up to `max_channels`.
    pub channels: Option<u16>,
    /// Try this chunk only, in elements (0: no chunking), instead of what
    /// `chunking` says.
    pub chunk_elems: Option<usize>,
    /// Every candidate's [`Schedule::intra_slices`] (at least 1).
    pub intra_slices: usize,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            max_channels: u16::MAX,
            algorithms: Vec::new(),
            chunking: true,
            channels: None,
            chunk_elems: None,
            intra_slices: 1,
        }
    }
}

/// Every candidate the tuner considers for `p`, with its prediction,
/// fastest first (ties: fewer channels, then algorithm order).
pub fn candidates(p: &Problem, model: &CostModel) -> Vec<(Schedule, Prediction)> {
    candidates_with(p, model, &TuneOptions::default())
}

/// [`candidates`] within an engine's limits.
pub fn candidates_with(
    p: &Problem,
    model: &CostModel,
    opts: &TuneOptions,
) -> Vec<(Schedule, Prediction)> {
    let max_ch = opts.max_channels.max(1);
    let channels: Vec<u16> = match opts.channels {
        Some(c) => vec![c.clamp(1, max_ch)],
        None => {
            let mut v: Vec<u16> = TUNE_CHANNELS
                .iter()
                .copied()
                .filter(|&c| c <= max_ch)
                .collect();
            if max_ch < 32 && !v.contains(&max_ch) {
                v.push(max_ch);
            }
            v
        }
    };
    let chunks: Vec<usize> = match opts.chunk_elems {
        Some(k) => vec![k],
        None if opts.chunking => std::iter::once(0)
            .chain(
                TUNE_CHUNK_BYTES
                    .iter()
                    .map(|b| (b / p.elem_size.max(1)).max(1)),
            )
            .collect(),
        None => vec![0],
    };
    let mut out = Vec::new();
    for a in Algorithm::ALL {
        if !opts.algorithms.is_empty() && !opts.algorithms.contains(&a) {
            continue;
        }
        let Ok(base) = Schedule::new(*p, a) else {
            continue;
        };
        for &ch in &channels {
            for &chunk in &chunks {
                let s = base
                    .clone()
                    .with_channels(ch)
                    .with_chunk_elems(chunk)
                    .with_intra_slices(opts.intra_slices.max(1));
                let pred = predict(&s, model);
                out.push((s, pred));
            }
        }
    }
    // Chunk sizes that change nothing (same steps and time) are one candidate.
    out.sort_by(|x, y| {
        (x.0.algorithm, x.0.channels, x.1.steps, x.0.chunk_elems).cmp(&(
            y.0.algorithm,
            y.0.channels,
            y.1.steps,
            y.0.chunk_elems,
        ))
    });
    out.dedup_by(|later, first| {
        later.0.algorithm == first.0.algorithm
            && later.0.channels == first.0.channels
            && later.1.steps == first.1.steps
            && later.1.time_us == first.1.time_us
    });
    out.sort_by(tuner_order);
    out
}

/// The order [`candidates_with`] ranks its candidates in: predicted time,
/// then fewer channels, then the algorithm and the chunk (deterministic).
fn tuner_order(x: &(Schedule, Prediction), y: &(Schedule, Prediction)) -> std::cmp::Ordering {
    x.1.time_us
        .total_cmp(&y.1.time_us)
        .then(x.0.channels.cmp(&y.0.channels))
        .then(x.0.algorithm.cmp(&y.0.algorithm))
        .then(x.0.chunk_elems.cmp(&y.0.chunk_elems))
}

/// Picks the algorithm, channels and chunk size the model predicts fastest.
/// Fails only when the problem itself is invalid.
///
/// ```
/// use gpucomm_algo::{Collective, CostModel, Problem, tune};
///
/// let s = tune(&Problem::new(Collective::AllReduce, 256 << 20, 8, 8), &CostModel::default()).unwrap();
/// assert!(s.channels >= 1);
/// ```
pub fn tune(p: &Problem, model: &CostModel) -> Result<Schedule, crate::AlgoError> {
    tune_with(p, model, &TuneOptions::default())
}

/// [`tune`] within an engine's limits (for example a runtime that drives
/// at most `max_channels` channels). Fails when the problem is invalid or no
/// allowed algorithm implements it.
pub fn tune_with(
    p: &Problem,
    model: &CostModel,
    opts: &TuneOptions,
) -> Result<Schedule, crate::AlgoError> {
    // Validate first, so the error names the problem, not an algorithm.
    Schedule::new(*p, Algorithm::Direct)?;
    candidates_with(p, model, opts)
        .into_iter()
        .next()
        .map(|c| c.0)
        .ok_or_else(|| crate::AlgoError::Unsupported {
            collective: p.collective.name(),
            algorithm: "any allowed algorithm",
            why: format!(": allowed {:?}", opts.algorithms),
        })
}
