//! The flow-level, discrete-event core.
//!
//! A [`FlowNet`] holds directional links (capacity in GB/s) and the flows
//! crossing them. The bandwidth of every link is shared **max-min fairly**
//! (progressive filling) among the flows crossing it. Rates are recomputed
//! only when flows start or end, once per timestamp (all events with the
//! same time are processed before that recomputation, so a thousand flows
//! starting at once cost one pass, not a thousand).
//!
//! # Paths
//!
//! Flows on exactly the same links (a *path*: the channels of a ring send
//! to the same neighbour over the same links, dozens of flows at once)
//! always get the same max-min rate, so the allocation below works on
//! paths, each weighted by its number of flows, and a path's flows drain
//! against one clock, the bytes each has been served, as in processor
//! sharing: a flow ends when the clock passes its mark (the clock when it
//! started plus its bytes), and only the path's first flow to finish sits
//! in the event queue. A flow starting or ending changes its path's weight,
//! and a rate change is one update per path, however many flows share it.
//! A flow that starts on a path where one ended in the same batch leaves
//! the weight, and so every rate, as it was: no recomputation.
//!
//! # Incremental max-min
//!
//! A recomputation does not refill every path it could reach. It starts
//! from the paths a change can move directly (new ones, and those whose
//! *bottleneck link* is one of the links that gained or lost a flow),
//! holds every other path at its current rate, and runs progressive filling
//! for that set on the capacity the others leave. (Below, "flow" stands
//! for a path and its weight.) It then checks the
//! optimality condition of max-min fairness on every link the set touches:
//! each flow needs a bottleneck, a saturated link on which no flow is
//! faster (Bertsekas & Gallager, *Data Networks*, 6.5.2). A flow of the set
//! frozen on a link where a held flow is faster, and a held flow whose
//! bottleneck is no longer saturated or no longer its fastest, join the set
//! and the filling runs again. The set only grows, so this ends; when it
//! passes half the active flows, or when its rounds have refilled more
//! flows in all than are active (what one fill of the whole component
//! would cost at most), the set is closed over its connected component of
//! links and flows and filled in full, which is the textbook algorithm. A
//! passed check means the allocation is the max-min fair one (to a
//! relative 1e-9, the tolerance of the saturation and "no faster flow"
//! tests: far below the picosecond resolution of event times for any
//! realistic flow; but a schedule's pipelines can amplify a picosecond's
//! difference in when a transfer starts to tenths of a percent of a run:
//! docs/sim.md, Engine).
//!
//! The set is filled piece by piece (its connected components, given the
//! held flows): small pieces by scanning their links, large ones with an
//! indexed min-heap of links by fair share.
//!
//! In a cluster-wide ring, where every flow is coupled to every other
//! through shared NVLink and NIC links, a flow ending usually moves a few
//! dozen rates; refilling the component moved thousands. See
//! `BENCHMARKS.md` ("Simulator speed") for the effect.
//!
//! # Events
//!
//! A flow's data phase ends when its bytes have drained at its (changing)
//! rate; it is *delivered* `latency` later (the last byte's flight time along
//! its route). Timers let the driver (the schedule executor) model software
//! overheads and local work. Data-phase ends sit in an indexed min-heap
//! (one entry per busy path, for its first flow to finish, re-keyed in
//! place when its rate changes, no stale entries); deliveries and timers in
//! a `BinaryHeap`. Both are
//! ordered by `(time, sequence number)` and merged, so runs are
//! deterministic.
//!
//! State per flow is a handful of numbers, per path its route: no per-byte
//! or per-packet state.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::SimTime;

/// Index of a directional link in a [`FlowNet`].
pub type LinkId = u32;

/// Bytes per picosecond in one GB/s (1e9 B/s).
const BPS_PER_GBPS: f64 = 1e-3;

/// No link / no heap position.
const NONE: u32 = u32::MAX;

/// Relative tolerance of the optimality check (saturation, fastest flow).
const EPS: f64 = 1e-9;

/// Components with more links than this are filled with a heap, not scans.
const SCAN_LINKS: usize = 64;

/// Something the driver must react to, returned by [`FlowNet::next_batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The flow started with this tag has been delivered.
    Delivered(u64),
    /// The timer set with this tag has fired.
    Timer(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum EvKind {
    Deliver(u64),
    Timer(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Ev {
    time: u64,
    seq: u64,
    kind: EvKind,
}

/// Identifies a route of a [`FlowNet`]: see [`FlowNet::path`].
pub type PathId = u32;

/// A route (its links, in `FlowNet::route`) and the flows on it.
///
/// Flows on the same links always get the same max-min rate, so the
/// allocation works on paths, each weighted by its number of flows, and
/// the flows of a path drain against one clock: `served`, the bytes each
/// of them has been sent since the path last became busy. A flow ends when
/// that clock reaches its own end mark (`served` when it started plus its
/// bytes), as in processor sharing. A rate change is one update per path,
/// however many flows share it (the channels of a ring share their
/// routes: dozens of flows per path).
#[derive(Debug, Default)]
struct Path {
    /// Number of links of the route.
    hops: u32,
    /// On its links' lists: busy, or emptied in the current batch.
    on_links: bool,
    /// Listed in `FlowNet::changed`.
    changed: bool,
    /// Bytes served per flow, as of `last`.
    served: f64,
    last: u64,
    /// When its last flow ended (the end of its links' busy time).
    emptied: u64,
    /// Flows that ended in the current batch: a flow started on the path
    /// now takes one's place (counted as a hand-over).
    ended: u32,
    /// Its flows in their data phase, by end mark: `(mark's bits, seq,
    /// flow)`.
    queue: BinaryHeap<Reverse<(u64, u64, u32)>>,
}

impl Path {
    /// Flows in their data phase.
    fn flows(&self) -> u32 {
        self.queue.len() as u32
    }
}

/// A flow on a path (in its data phase while in the path's queue).
#[derive(Clone, Copy, Debug, Default)]
struct Flow {
    bytes: f64,
    latency: u64,
    tag: u64,
}

/// Counters describing the work a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Flows started.
    pub flows: u64,
    /// Events processed: timers, deliveries and data-phase ends (a rate
    /// change re-keys a flow's data-phase end in place, so there are no
    /// stale events).
    pub events: u64,
    /// Rate recomputations (one per batch of same-time changes).
    pub recomputations: u64,
    /// Sum over recomputations of the paths whose rates were refilled
    /// (every filling round counted). A path is a route and every flow on
    /// it: flows on the same links share one rate.
    pub paths_recomputed: u64,
    /// Largest number of flows active at once.
    pub max_active_flows: u64,
    /// Recomputations that fell back to filling a whole connected component.
    pub component_fills: u64,
    /// Paths whose rate changed in a recomputation (each one re-keys the
    /// data-phase end of its first flow to finish).
    pub rate_changes: u64,
    /// Flows started on a route where a flow ended in the same batch: when
    /// as many start as end, the route's weight in the allocation is
    /// unchanged and nothing is recomputed.
    pub handovers: u64,
}

/// A busy interval of one link, recorded when tracing is on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BusySpan {
    /// The link.
    pub link: LinkId,
    /// When it started carrying at least one flow.
    pub start: SimTime,
    /// When it went idle again.
    pub end: SimTime,
}

/// Children per node of [`IndexedHeap`]: a 4-ary heap is half as deep as a
/// binary one, and a node's children share a cache line or two.
const ARITY: usize = 4;

/// Indexed 4-ary min-heap of ids keyed by `(u64, u64)`, updated in place:
/// active flows by `(data-phase end, seq)`, links during a filling by
/// `(fair share bits, link)` (a positive `f64`'s bits order like the value).
#[derive(Debug, Default)]
struct IndexedHeap {
    /// `(key, key, id)`.
    heap: Vec<(u64, u64, u32)>,
    /// Position of each id in `heap`, `NONE` when absent.
    pos: Vec<u32>,
}

impl IndexedHeap {
    fn grow(&mut self, slots: usize) {
        if self.pos.len() < slots {
            self.pos.resize(slots, NONE);
        }
    }

    fn peek(&self) -> Option<(u64, u64, u32)> {
        self.heap.first().copied()
    }

    fn clear(&mut self) {
        for &(_, _, id) in &self.heap {
            self.pos[id as usize] = NONE;
        }
        self.heap.clear();
    }

    /// Adds ids not in the heap (after `clear`), then orders the heap
    /// once: O(n), where `set` one by one is O(n log n).
    fn extend_unordered(&mut self, items: impl Iterator<Item = (u64, u64, u32)>) {
        for e in items {
            self.pos[e.2 as usize] = self.heap.len() as u32;
            self.heap.push(e);
        }
        if self.heap.len() > 1 {
            for i in (0..=(self.heap.len() - 2) / ARITY).rev() {
                self.down(i);
            }
        }
    }

    fn pop(&mut self) -> Option<(u64, u64, u32)> {
        let top = self.peek()?;
        self.remove(top.2);
        Some(top)
    }

    fn set(&mut self, slot: u32, time: u64, seq: u64) {
        let p = self.pos[slot as usize];
        if p == NONE {
            self.heap.push((time, seq, slot));
            let i = self.heap.len() - 1;
            self.pos[slot as usize] = i as u32;
            self.up(i);
        } else {
            let i = p as usize;
            let old = self.heap[i];
            self.heap[i] = (time, seq, slot);
            if (time, seq) < (old.0, old.1) {
                self.up(i);
            } else {
                self.down(i);
            }
        }
    }

    fn remove(&mut self, slot: u32) {
        let p = self.pos[slot as usize];
        if p == NONE {
            return;
        }
        let i = p as usize;
        self.pos[slot as usize] = NONE;
        let last = self.heap.pop().expect("slot is in the heap");
        if i < self.heap.len() {
            self.heap[i] = last;
            self.pos[last.2 as usize] = i as u32;
            self.up(i);
            let j = self.pos[last.2 as usize] as usize;
            self.down(j);
        }
    }

    fn up(&mut self, mut i: usize) {
        let e = self.heap[i];
        while i > 0 {
            let p = (i - 1) / ARITY;
            let pe = self.heap[p];
            if (pe.0, pe.1) <= (e.0, e.1) {
                break;
            }
            self.heap[i] = pe;
            self.pos[pe.2 as usize] = i as u32;
            i = p;
        }
        self.heap[i] = e;
        self.pos[e.2 as usize] = i as u32;
    }

    fn down(&mut self, mut i: usize) {
        let n = self.heap.len();
        let e = self.heap[i];
        loop {
            let a = ARITY * i + 1;
            if a >= n {
                break;
            }
            // The smallest of up to ARITY children.
            let mut c = a;
            let mut ck = (self.heap[a].0, self.heap[a].1);
            for j in a + 1..(a + ARITY).min(n) {
                let k = (self.heap[j].0, self.heap[j].1);
                if k < ck {
                    c = j;
                    ck = k;
                }
            }
            if (e.0, e.1) <= ck {
                break;
            }
            let ce = self.heap[c];
            self.heap[i] = ce;
            self.pos[ce.2 as usize] = i as u32;
            i = c;
        }
        self.heap[i] = e;
        self.pos[e.2 as usize] = i as u32;
    }
}

/// When `bytes` drain at `rate` (bytes per picosecond) from `now`: rounded
/// up to the picosecond, `u64::MAX` (never) at rate zero.
fn drain_end(now: u64, bytes: f64, rate: f64) -> u64 {
    let dt = if rate > 0.0 {
        (bytes / rate).ceil()
    } else {
        f64::MAX
    };
    if dt >= (u64::MAX - now) as f64 {
        u64::MAX
    } else {
        now + dt as u64
    }
}

/// A generation counter for "marked in this pass" arrays, so they never
/// need clearing (except on wrap-around).
fn bump(epoch: &mut u32, marks: &mut [u32]) -> u32 {
    *epoch = epoch.wrapping_add(1);
    if *epoch == 0 {
        marks.iter_mut().for_each(|m| *m = 0);
        *epoch = 1;
    }
    *epoch
}

/// Directional links and the flows crossing them, with the event queue.
///
/// ```
/// use gpucomm_sim::engine::{FlowNet, Output};
/// use gpucomm_sim::SimTime;
///
/// // One link of 10 GB/s; two flows of 10 MB share it fairly.
/// let mut net = FlowNet::new(&[10.0]);
/// net.start_flow(&[0], 10e6, SimTime::ZERO, 1);
/// net.start_flow(&[0], 10e6, SimTime::ZERO, 2);
/// let mut out = Vec::new();
/// let t = net.next_batch(&mut out).unwrap();
/// assert_eq!(out, vec![Output::Delivered(1), Output::Delivered(2)]);
/// assert!((t.as_us() - 2000.0).abs() < 1e-3); // 20 MB at 10 GB/s
/// ```
#[derive(Debug)]
pub struct FlowNet {
    cap: Vec<f64>,
    /// The busy paths on each link (a path crossing a link twice is listed
    /// twice).
    link_flows: Vec<Vec<PathId>>,
    paths: Vec<Path>,
    /// Each route's path.
    path_ids: HashMap<Vec<LinkId>, PathId>,
    /// Per path, the rate of each of its flows, bytes per picosecond
    /// (apart from `Path` so the filling's scans over links touch little
    /// memory).
    rate: Vec<f64>,
    /// Per path, its flows as the allocation counts them (`Path::flows`
    /// at the last recomputation).
    weight: Vec<u32>,
    /// The link that froze each path's rate (a saturated link on which it
    /// is the fastest); `NONE` before its first allocation.
    bott: Vec<LinkId>,
    /// Routes of the paths, `stride` links per path (the longest route
    /// so far; re-laid out when a longer one comes), so a path's links are
    /// contiguous.
    route: Vec<LinkId>,
    /// Beside `route`: where the path sits in each of its links'
    /// `link_flows`, so it leaves a link in O(1) (a search of the link's
    /// list was quadratic when thousands of routes share a link, as a
    /// rank's all-to-all routes share its NIC).
    link_pos: Vec<u32>,
    stride: usize,
    flows: Vec<Flow>,
    free_flows: Vec<u32>,
    heap: BinaryHeap<Reverse<Ev>>,
    /// Busy paths by the data-phase end of their first flow to finish.
    done: IndexedHeap,
    seq: u64,
    now: u64,
    dirty: Vec<LinkId>,
    /// Paths whose flows started or ended in the current batch. An emptied
    /// path stays on its links until the next recomputation, so a flow
    /// started on it in the same batch keeps its rate.
    changed: Vec<PathId>,
    /// Always fill whole components (the textbook algorithm; tests compare).
    full: bool,
    // Scratch for recomputation. Flow marks: `in_set` (member of the set
    // being filled, per recomputation), `frozen` (per filling round). Link
    // marks: `link_mark` (touched by the set, per round), `dirty_mark`.
    set_epoch: u32,
    round_epoch: u32,
    dirty_epoch: u32,
    in_set: Vec<u32>,
    frozen: Vec<u32>,
    new_rate: Vec<f64>,
    new_bott: Vec<LinkId>,
    link_mark: Vec<u32>,
    dirty_mark: Vec<u32>,
    rem: Vec<f64>,
    cnt: Vec<u32>,
    maxr: Vec<f64>,
    set: Vec<u32>,
    set_links: Vec<LinkId>,
    // Components of the set: links grouped (`comp_links`, split at
    // `comp_off`), marked per pass in `comp_mark` (links) and `visited`
    // (flows).
    comp_epoch: u32,
    comp_mark: Vec<u32>,
    visited: Vec<u32>,
    comp_links: Vec<LinkId>,
    comp_off: Vec<u32>,
    stack: Vec<LinkId>,
    fill: IndexedHeap,
    // Accounting.
    link_bytes: Vec<f64>,
    busy_since: Vec<u64>,
    /// Per link, the latest end among the paths that left it since it was
    /// last idle: with a batch window the paths of one batch empty at
    /// different times and leave in no time order, and the link's busy
    /// time ends at the latest.
    idle_at: Vec<u64>,
    busy_total: Vec<u64>,
    trace: Option<Vec<BusySpan>>,
    /// Flows in their data phase.
    active: u64,
    /// Paths on their links.
    active_paths: u64,
    stats: EngineStats,
    window: u64,
}

impl FlowNet {
    /// A network of links with the given capacities in GB/s per direction.
    /// Capacities must be positive and finite (checked by the callers that
    /// build fabrics; a non-positive capacity is treated as 1e-9 GB/s).
    pub fn new(capacities_gbps: &[f64]) -> Self {
        let n = capacities_gbps.len();
        FlowNet {
            cap: capacities_gbps
                .iter()
                .map(|&c| {
                    if c.is_finite() && c > 0.0 {
                        c * BPS_PER_GBPS
                    } else {
                        1e-9 * BPS_PER_GBPS
                    }
                })
                .collect(),
            link_flows: vec![Vec::new(); n],
            paths: Vec::new(),
            path_ids: HashMap::new(),
            rate: Vec::new(),
            weight: Vec::new(),
            bott: Vec::new(),
            route: Vec::new(),
            link_pos: Vec::new(),
            stride: 0,
            flows: Vec::new(),
            free_flows: Vec::new(),
            heap: BinaryHeap::new(),
            done: IndexedHeap::default(),
            seq: 0,
            now: 0,
            dirty: Vec::new(),
            changed: Vec::new(),
            full: false,
            set_epoch: 0,
            round_epoch: 0,
            dirty_epoch: 0,
            in_set: Vec::new(),
            frozen: Vec::new(),
            new_rate: Vec::new(),
            new_bott: Vec::new(),
            link_mark: vec![0; n],
            dirty_mark: vec![0; n],
            rem: vec![0.0; n],
            cnt: vec![0; n],
            maxr: vec![0.0; n],
            set: Vec::new(),
            set_links: Vec::new(),
            comp_epoch: 0,
            comp_mark: vec![0; n],
            visited: Vec::new(),
            comp_links: Vec::new(),
            comp_off: Vec::new(),
            stack: Vec::new(),
            fill: IndexedHeap {
                heap: Vec::new(),
                pos: vec![NONE; n],
            },
            link_bytes: vec![0.0; n],
            busy_since: vec![0; n],
            idle_at: vec![0; n],
            busy_total: vec![0; n],
            trace: None,
            active: 0,
            active_paths: 0,
            stats: EngineStats::default(),
            window: 0,
        }
    }

    /// Processes events less than `window` apart in one batch (one rate
    /// recomputation), at the time of the latest of them: a time resolution.
    /// Zero (the default) batches only identical timestamps.
    pub fn set_batch_window(&mut self, window: SimTime) {
        self.window = window.as_ps();
    }

    /// Refills the whole connected component on every recomputation (the
    /// textbook progressive filling) instead of the incremental check: the
    /// same allocation, slower on large coupled networks. For comparisons.
    pub fn set_full_recompute(&mut self, full: bool) {
        self.full = full;
    }

    /// Records every link's busy intervals (for Chrome traces).
    pub fn record_busy_spans(&mut self) {
        self.trace = Some(Vec::new());
    }

    /// The busy intervals recorded so far (empty unless recording).
    pub fn busy_spans(&self) -> &[BusySpan] {
        self.trace.as_deref().unwrap_or(&[])
    }

    /// The current simulated time.
    pub fn now(&self) -> SimTime {
        SimTime::from_ps(self.now)
    }

    /// Number of links.
    pub fn link_count(&self) -> usize {
        self.cap.len()
    }

    /// Bytes that crossed `link` so far (flows count when their data phase ends).
    pub fn link_bytes(&self, link: LinkId) -> f64 {
        self.link_bytes[link as usize]
    }

    /// Total time `link` carried at least one flow.
    pub fn link_busy(&self, link: LinkId) -> SimTime {
        SimTime::from_ps(self.busy_total[link as usize])
    }

    /// Work counters.
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Flows currently in their data phase.
    pub fn active_flows(&self) -> u64 {
        self.active
    }

    /// Sets a timer that fires at `at` (not before now).
    pub fn timer(&mut self, at: SimTime, tag: u64) {
        let t = at.as_ps().max(self.now);
        self.push(t, EvKind::Timer(tag));
    }

    /// The path of `links`: the id under which flows on exactly that route
    /// share a rate ([`FlowNet::start_flow_on`]). The same links give the
    /// same id; a path, once made, stays (a driver keeps one per route).
    ///
    /// # Panics
    ///
    /// If a link is not one of this network's.
    pub fn path(&mut self, links: &[LinkId]) -> PathId {
        if let Some(&p) = self.path_ids.get(links) {
            return p;
        }
        if let Some(&l) = links.iter().find(|&&l| l as usize >= self.cap.len()) {
            panic!("link {l} on a network of {} links", self.cap.len());
        }
        if links.len() > self.stride {
            self.relayout(links.len());
        }
        let p = self.paths.len();
        self.paths.push(Path {
            hops: links.len() as u32,
            ..Path::default()
        });
        let base = p * self.stride;
        self.route.resize((p + 1) * self.stride, 0);
        self.link_pos.resize((p + 1) * self.stride, 0);
        self.route[base..base + links.len()].copy_from_slice(links);
        self.rate.push(0.0);
        self.weight.push(0);
        self.bott.push(NONE);
        self.in_set.push(0);
        self.frozen.push(0);
        self.visited.push(0);
        self.new_rate.push(0.0);
        self.new_bott.push(NONE);
        self.done.grow(self.paths.len());
        self.path_ids.insert(links.to_vec(), p as PathId);
        p as PathId
    }

    /// Starts, now, a flow of `bytes` along `links`, delivered `latency`
    /// after its last byte leaves. A flow with no link or no byte is
    /// delivered after `latency` alone. Same as [`FlowNet::start_flow_on`]
    /// on [`FlowNet::path`]`(links)`, and panics as that does on a link
    /// that is not this network's.
    pub fn start_flow(&mut self, links: &[LinkId], bytes: f64, latency: SimTime, tag: u64) {
        let p = self.path(links);
        self.start_flow_on(p, bytes, latency, tag);
    }

    /// Starts, now, a flow of `bytes` on `path`, delivered `latency` after
    /// its last byte leaves (a path of no link, or no byte: after `latency`
    /// alone).
    ///
    /// A flow that starts when one on the same path ended in the same batch
    /// (the next chunk of a connection, typically) takes that flow's place:
    /// the path's weight, and so the max-min allocation, is unchanged, and
    /// the new flow drains at the path's rate with no recomputation.
    ///
    /// ```
    /// use gpucomm_sim::engine::{FlowNet, Output};
    /// use gpucomm_sim::SimTime;
    ///
    /// // Two channels on one 10 GB/s route: one path, 5 GB/s each.
    /// let mut net = FlowNet::new(&[10.0]);
    /// let p = net.path(&[0]);
    /// net.start_flow_on(p, 10e6, SimTime::ZERO, 1);
    /// net.start_flow_on(p, 5e6, SimTime::ZERO, 2);
    /// let mut out = Vec::new();
    /// let t = net.next_batch(&mut out).unwrap();
    /// assert_eq!(out, vec![Output::Delivered(2)]); // 5 MB at 5 GB/s
    /// assert!((t.as_us() - 1000.0).abs() < 1e-3);
    /// let t = net.next_batch(&mut out).unwrap(); // then 5 MB at 10 GB/s
    /// assert_eq!(out, vec![Output::Delivered(1)]);
    /// assert!((t.as_us() - 1500.0).abs() < 1e-3);
    /// ```
    ///
    /// # Panics
    ///
    /// If `path` is not one of this network's [`FlowNet::path`]s.
    pub fn start_flow_on(&mut self, path: PathId, bytes: f64, latency: SimTime, tag: u64) {
        self.stats.flows += 1;
        let bytes = if bytes.is_finite() {
            bytes.max(0.0)
        } else {
            0.0
        };
        let p = path as usize;
        if self.paths[p].hops == 0 || bytes <= 0.0 {
            let t = self.now.saturating_add(latency.as_ps());
            self.push(t, EvKind::Deliver(tag));
            return;
        }
        let now = self.now;
        if !self.paths[p].on_links {
            self.join_links(path);
        } else if self.paths[p].ended > 0 {
            self.paths[p].ended -= 1;
            self.stats.handovers += 1;
        }
        let flow = Flow {
            bytes,
            latency: latency.as_ps(),
            tag,
        };
        let f = match self.free_flows.pop() {
            Some(f) => {
                self.flows[f as usize] = flow;
                f
            }
            None => {
                self.flows.push(flow);
                (self.flows.len() - 1) as u32
            }
        };
        self.seq += 1;
        let rate = self.rate[p];
        let pa = &mut self.paths[p];
        if pa.queue.is_empty() {
            // The clock only orders the path's flows: with none, it
            // restarts (and a lone flow drains as `bytes / rate`).
            pa.served = 0.0;
            pa.last = now;
        }
        let mark = pa.served + rate * (now - pa.last) as f64 + bytes;
        let key = (mark.to_bits(), self.seq, f);
        let first = pa.queue.peek().is_none_or(|&Reverse(k)| key < k);
        pa.queue.push(Reverse(key));
        self.note_change(path);
        self.active += 1;
        self.stats.max_active_flows = self.stats.max_active_flows.max(self.active);
        if first {
            self.rekey(path);
        }
    }

    /// Lists `path` among those whose flows changed in this batch (once).
    fn note_change(&mut self, path: PathId) {
        let pa = &mut self.paths[path as usize];
        if !pa.changed {
            pa.changed = true;
            self.changed.push(path);
        }
    }

    /// Puts idle path `path` on its links, with no rate yet (it gets one at
    /// the next recomputation; its clock restarts with its first flow).
    fn join_links(&mut self, path: PathId) {
        let now = self.now;
        let p = path as usize;
        let base = p * self.stride;
        for h in base..base + self.paths[p].hops as usize {
            let l = self.route[h];
            let lf = &mut self.link_flows[l as usize];
            if lf.is_empty() {
                self.busy_since[l as usize] = now;
            }
            self.link_pos[h] = lf.len() as u32;
            lf.push(path);
        }
        self.paths[p].on_links = true;
        self.rate[p] = 0.0;
        self.weight[p] = 0;
        self.bott[p] = NONE;
        self.active_paths += 1;
    }

    /// Sets `path`'s place in the completion heap from its first flow to
    /// finish, its clock and its rate (out of it while it has no flow or no
    /// rate yet).
    fn rekey(&mut self, path: PathId) {
        let p = path as usize;
        let rate = self.rate[p];
        let pa = &self.paths[p];
        match pa.queue.peek() {
            Some(&Reverse((mark, _, _))) if rate > 0.0 => {
                let left = (f64::from_bits(mark) - pa.served).max(0.0);
                let t = drain_end(pa.last, left, rate).max(self.now);
                self.seq += 1;
                self.done.set(path, t, self.seq);
            }
            _ => self.done.remove(path),
        }
    }

    /// Widens every path's route storage to `stride` links.
    fn relayout(&mut self, stride: usize) {
        let mut route = vec![0; self.paths.len() * stride];
        let mut link_pos = vec![0; self.paths.len() * stride];
        for (f, pa) in self.paths.iter().enumerate() {
            let (old, new) = (f * self.stride, f * stride);
            let hops = pa.hops as usize;
            route[new..new + hops].copy_from_slice(&self.route[old..old + hops]);
            link_pos[new..new + hops].copy_from_slice(&self.link_pos[old..old + hops]);
        }
        self.route = route;
        self.link_pos = link_pos;
        self.stride = stride;
    }

    /// Takes the path whose route entry `h` (an index into `route`) is
    /// link `l` off that link's list: swaps the list's last path into its
    /// place and updates that path's position there.
    fn leave(&mut self, l: LinkId, h: usize) {
        let pos = self.link_pos[h] as usize;
        let lf = &mut self.link_flows[l as usize];
        debug_assert_eq!(lf[pos] as usize, h / self.stride, "link_pos out of date");
        let last = lf.len() - 1;
        lf.swap_remove(pos);
        // Off the list: an entry of this route left earlier must not pass
        // for the moved one below.
        self.link_pos[h] = NONE;
        if pos < last {
            // The moved path's entry for this link is the one that said
            // `last` (a route could cross a link twice).
            let base = lf[pos] as usize * self.stride;
            let hops = self.paths[lf[pos] as usize].hops as usize;
            let entry = (base..base + hops)
                .find(|&e| self.route[e] == l && self.link_pos[e] as usize == last)
                .expect("the moved path crosses the link");
            self.link_pos[entry] = pos as u32;
        }
    }

    /// Brings the allocation's view of the paths changed in this batch up
    /// to date: a path that gained or lost flows on balance marks its
    /// links dirty; an emptied one leaves its links.
    fn flush_changed(&mut self) {
        for k in 0..self.changed.len() {
            let path = self.changed[k];
            let p = path as usize;
            let pa = &mut self.paths[p];
            pa.changed = false;
            pa.ended = 0;
            let (flows, t) = (pa.flows(), pa.emptied);
            let base = p * self.stride;
            let hops = pa.hops as usize;
            if flows > 0 {
                if flows != self.weight[p] {
                    self.weight[p] = flows;
                    self.dirty.extend_from_slice(&self.route[base..base + hops]);
                }
                continue;
            }
            if !pa.on_links {
                continue;
            }
            pa.on_links = false;
            self.active_paths -= 1;
            self.weight[p] = 0;
            self.rate[p] = 0.0;
            self.bott[p] = NONE;
            for h in base..base + hops {
                let l = self.route[h];
                self.leave(l, h);
                let li = l as usize;
                self.idle_at[li] = self.idle_at[li].max(t);
                if self.link_flows[li].is_empty() {
                    let (since, end) = (self.busy_since[li], self.idle_at[li]);
                    self.idle_at[li] = 0;
                    self.busy_total[li] += end - since;
                    if let Some(tr) = &mut self.trace {
                        tr.push(BusySpan {
                            link: l,
                            start: SimTime::from_ps(since),
                            end: SimTime::from_ps(end),
                        });
                    }
                }
                self.dirty.push(l);
            }
        }
        self.changed.clear();
    }

    fn push(&mut self, time: u64, kind: EvKind) {
        self.seq += 1;
        self.heap.push(Reverse(Ev {
            time,
            seq: self.seq,
            kind,
        }));
    }

    /// The earliest pending `(time, seq)` and whether it is a data-phase end.
    fn peek(&self) -> Option<(u64, u64, bool)> {
        let a = self.heap.peek().map(|Reverse(e)| (e.time, e.seq, false));
        let b = self.done.peek().map(|(t, s, _)| (t, s, true));
        match (a, b) {
            (Some(x), Some(y)) => Some(if (y.0, y.1) < (x.0, x.1) { y } else { x }),
            (x, None) => x,
            (None, y) => y,
        }
    }

    /// Advances to the next event time and processes everything due then
    /// (and up to the batch window after it).
    /// Returns that time, with the outputs in `out` (cleared first), or
    /// `None` when nothing is left to happen.
    pub fn next_batch(&mut self, out: &mut Vec<Output>) -> Option<SimTime> {
        out.clear();
        self.flush_changed();
        if !self.dirty.is_empty() {
            self.recompute();
        }
        let t0 = self.peek()?.0;
        let horizon = t0.saturating_add(self.window);
        while let Some((time, _, is_done)) = self.peek() {
            if time > horizon {
                break;
            }
            self.now = time;
            self.stats.events += 1;
            if is_done {
                let (_, _, path) = self.done.peek().expect("peeked");
                self.finish_flow(path, out);
            } else {
                let Some(Reverse(ev)) = self.heap.pop() else {
                    break;
                };
                match ev.kind {
                    EvKind::Deliver(tag) => out.push(Output::Delivered(tag)),
                    EvKind::Timer(tag) => out.push(Output::Timer(tag)),
                }
            }
        }
        Some(SimTime::from_ps(self.now))
    }

    /// The first flow of `path` to finish has drained now.
    fn finish_flow(&mut self, path: PathId, out: &mut Vec<Output>) {
        let now = self.now;
        let p = path as usize;
        let pa = &mut self.paths[p];
        let Some(Reverse((_, _, f))) = pa.queue.pop() else {
            self.done.remove(path);
            return;
        };
        pa.ended += 1;
        pa.emptied = now;
        let (base, hops) = (p * self.stride, pa.hops as usize);
        self.note_change(path);
        let fl = self.flows[f as usize];
        let (bytes, latency, tag) = (fl.bytes, fl.latency, fl.tag);
        self.free_flows.push(f);
        for h in base..base + hops {
            self.link_bytes[self.route[h] as usize] += bytes;
        }
        // An emptied path leaves its links at the next recomputation,
        // unless a flow on it starts first.
        self.rekey(path);
        self.active -= 1;
        if latency == 0 {
            out.push(Output::Delivered(tag));
        } else {
            self.push(now.saturating_add(latency), EvKind::Deliver(tag));
        }
    }

    /// Adds flow `f` to the set being refilled.
    fn join(&mut self, f: u32) {
        if self.in_set[f as usize] != self.set_epoch {
            self.in_set[f as usize] = self.set_epoch;
            self.set.push(f);
        }
    }

    /// Max-min fair rates after the changes since the last call (see the
    /// module documentation for the incremental scheme).
    fn recompute(&mut self) {
        self.stats.recomputations += 1;
        bump(&mut self.set_epoch, &mut self.in_set);
        let de = bump(&mut self.dirty_epoch, &mut self.dirty_mark);
        self.set.clear();
        // Seed: new flows, and flows whose bottleneck gained or lost a flow.
        let mut dirty = std::mem::take(&mut self.dirty);
        for &l in &dirty {
            let li = l as usize;
            if self.dirty_mark[li] == de {
                continue;
            }
            self.dirty_mark[li] = de;
            for k in 0..self.link_flows[li].len() {
                let f = self.link_flows[li][k];
                let b = self.bott[f as usize];
                if self.full || b == NONE || b == l {
                    self.join(f);
                }
            }
        }
        dirty.clear();
        self.dirty = dirty;
        if self.set.is_empty() {
            return;
        }
        // Each round refills the whole set, so the rounds cost the sum of
        // the set's sizes; once that passes the busy paths, one fill of
        // the component (at most every busy path) would not have cost
        // more, and the set is closed over it.
        let mut closed = false;
        let mut work = 0u64;
        loop {
            work += self.set.len() as u64;
            if !closed
                && (self.full
                    || work > self.active_paths
                    || 2 * self.set.len() as u64 > self.active_paths)
            {
                self.close_over_component();
                self.stats.component_fills += 1;
                closed = true;
            }
            self.fill_set();
            if closed || self.check_and_grow() == 0 {
                break;
            }
        }
        self.commit();
    }

    /// A new epoch for `link_mark` and `frozen` (both cleared when it wraps).
    fn next_round(&mut self) -> u32 {
        let le = bump(&mut self.round_epoch, &mut self.link_mark);
        if le == 1 {
            self.frozen.iter_mut().for_each(|m| *m = 0);
        }
        le
    }

    /// Grows the set to the connected component of links and flows it touches.
    fn close_over_component(&mut self) {
        let le = self.next_round();
        let mut i = 0;
        while i < self.set.len() {
            let f = self.set[i] as usize;
            let base = f * self.stride;
            for h in base..base + self.paths[f].hops as usize {
                let l = self.route[h] as usize;
                if self.link_mark[l] == le {
                    continue;
                }
                self.link_mark[l] = le;
                for k in 0..self.link_flows[l].len() {
                    let g = self.link_flows[l][k];
                    self.join(g);
                }
            }
            i += 1;
        }
    }

    /// Progressive filling of the set on the capacity the other flows leave:
    /// sets `new_rate` and `new_bott` of every member, and `rem` (capacity
    /// left) of every link in `set_links`.
    fn fill_set(&mut self) {
        let se = self.set_epoch;
        let le = self.next_round();
        self.stats.paths_recomputed += self.set.len() as u64;
        self.set_links.clear();
        for i in 0..self.set.len() {
            let f = self.set[i] as usize;
            let base = f * self.stride;
            for h in base..base + self.paths[f].hops as usize {
                let l = self.route[h];
                if self.link_mark[l as usize] != le {
                    self.link_mark[l as usize] = le;
                    self.set_links.push(l);
                }
            }
        }
        for &l in &self.set_links {
            let li = l as usize;
            let mut rem = self.cap[li];
            let mut cnt = 0u32;
            let mut held_max = 0.0f64;
            for &g in &self.link_flows[li] {
                let w = self.weight[g as usize];
                if self.in_set[g as usize] == se {
                    cnt += w;
                } else {
                    let r = self.rate[g as usize];
                    rem -= r * f64::from(w);
                    held_max = held_max.max(r);
                }
            }
            self.rem[li] = rem.max(0.0);
            self.cnt[li] = cnt;
            self.maxr[li] = held_max;
        }
        // The set falls apart into independent problems: links joined by a
        // member (the other flows are held). Few links: fill them as one
        // (progressive filling of independent parts together gives each
        // part's own result); many: group the links by component.
        if self.set_links.len() <= SCAN_LINKS {
            let len = self.set_links.len();
            self.comp_links.clear();
            self.comp_links.extend_from_slice(&self.set_links);
            self.fill_component(0, len, le);
            return;
        }
        let ce = bump(&mut self.comp_epoch, &mut self.comp_mark);
        if ce == 1 {
            // First pass or wrapped: `visited` shares the pass's epoch.
            self.visited.iter_mut().for_each(|m| *m = 0);
        }
        self.comp_links.clear();
        self.comp_off.clear();
        self.comp_off.push(0);
        for i in 0..self.set_links.len() {
            let l0 = self.set_links[i];
            if self.comp_mark[l0 as usize] == ce {
                continue;
            }
            self.comp_mark[l0 as usize] = ce;
            self.stack.push(l0);
            while let Some(l) = self.stack.pop() {
                self.comp_links.push(l);
                for k in 0..self.link_flows[l as usize].len() {
                    let g = self.link_flows[l as usize][k] as usize;
                    if self.in_set[g] != se || self.visited[g] == ce {
                        continue;
                    }
                    self.visited[g] = ce;
                    let base = g * self.stride;
                    for h in base..base + self.paths[g].hops as usize {
                        let l2 = self.route[h];
                        if self.comp_mark[l2 as usize] != ce {
                            self.comp_mark[l2 as usize] = ce;
                            self.stack.push(l2);
                        }
                    }
                }
            }
            self.comp_off.push(self.comp_links.len() as u32);
        }
        for c in 0..self.comp_off.len() - 1 {
            let (a, b) = (self.comp_off[c] as usize, self.comp_off[c + 1] as usize);
            self.fill_component(a, b, le);
        }
    }

    /// Progressive filling of one component (`comp_links[a..b]`): repeatedly
    /// saturate the link with the smallest fair share and freeze its
    /// unfrozen members at that share. Few links: scan them; many: an
    /// indexed min-heap of links by share, re-keyed in place.
    fn fill_component(&mut self, a: usize, b: usize, le: u32) {
        let use_heap = b - a > SCAN_LINKS;
        self.fill.clear();
        if use_heap {
            let (links, rem, cnt) = (&self.comp_links[a..b], &self.rem, &self.cnt);
            self.fill.extend_unordered(links.iter().filter_map(|&l| {
                let li = l as usize;
                (cnt[li] > 0).then(|| ((rem[li] / f64::from(cnt[li])).to_bits(), u64::from(l), l))
            }));
        }
        loop {
            let (l, share) = if use_heap {
                let Some((share_bits, _, l)) = self.fill.pop() else {
                    break;
                };
                (l, f64::from_bits(share_bits))
            } else {
                let mut best: Option<(LinkId, f64)> = None;
                for &l in &self.comp_links[a..b] {
                    let li = l as usize;
                    if self.cnt[li] > 0 {
                        let sh = self.rem[li] / f64::from(self.cnt[li]);
                        if best.is_none_or(|(_, b)| sh < b) {
                            best = Some((l, sh));
                        }
                    }
                }
                match best {
                    Some(b) => b,
                    None => break,
                }
            };
            self.freeze_link(l, share, use_heap, le);
        }
    }

    /// Freezes every unfrozen member of the set on link `l` at `share`.
    fn freeze_link(&mut self, l: LinkId, share: f64, use_heap: bool, le: u32) {
        let li = l as usize;
        let se = self.set_epoch;
        for k in 0..self.link_flows[li].len() {
            let f = self.link_flows[li][k] as usize;
            if self.in_set[f] != se || self.frozen[f] == le {
                continue;
            }
            self.frozen[f] = le;
            self.new_rate[f] = share;
            self.new_bott[f] = l;
            let w = self.weight[f];
            let base = f * self.stride;
            for h in base..base + self.paths[f].hops as usize {
                let l2 = self.route[h] as usize;
                self.rem[l2] = (self.rem[l2] - share * f64::from(w)).max(0.0);
                self.cnt[l2] = self.cnt[l2].saturating_sub(w);
                if use_heap && l2 != li {
                    if self.cnt[l2] > 0 {
                        let s2 = self.rem[l2] / f64::from(self.cnt[l2]);
                        self.fill.set(l2 as u32, s2.to_bits(), l2 as u64);
                    } else {
                        self.fill.remove(l2 as u32);
                    }
                }
            }
        }
    }

    /// Checks max-min optimality on the links the set touches; adds the
    /// flows that break it to the set and returns how many joined.
    fn check_and_grow(&mut self) -> usize {
        let se = self.set_epoch;
        let before = self.set.len();
        // Fastest flow on every touched link: `fill_set` left the held
        // flows' fastest; the members' new rates join it.
        for i in 0..before {
            let f = self.set[i] as usize;
            let r = self.new_rate[f];
            let base = f * self.stride;
            for h in base..base + self.paths[f].hops as usize {
                let li = self.route[h] as usize;
                self.maxr[li] = self.maxr[li].max(r);
            }
        }
        // A member frozen where a held flow is faster: the faster ones join.
        for i in 0..before {
            let f = self.set[i] as usize;
            let b = self.new_bott[f] as usize;
            let r = self.new_rate[f];
            if r < self.maxr[b] * (1.0 - EPS) {
                for k in 0..self.link_flows[b].len() {
                    let g = self.link_flows[b][k];
                    if self.in_set[g as usize] != se && self.rate[g as usize] > r * (1.0 + EPS) {
                        self.join(g);
                    }
                }
            }
        }
        // A held flow whose bottleneck is touched must still be saturated
        // there and no slower than the fastest flow on it.
        for i in 0..self.set_links.len() {
            let l = self.set_links[i];
            let li = l as usize;
            let saturated = self.rem[li] <= EPS * self.cap[li];
            let m = self.maxr[li];
            for k in 0..self.link_flows[li].len() {
                let g = self.link_flows[li][k];
                let gi = g as usize;
                if self.in_set[gi] != se
                    && self.bott[gi] == l
                    && (!saturated || self.rate[gi] < m * (1.0 - EPS))
                {
                    self.join(g);
                }
            }
        }
        self.set.len() - before
    }

    /// Applies the new rates; a path whose rate changed sets its clock to
    /// now and re-keys its first flow's data-phase end.
    fn commit(&mut self) {
        let now = self.now;
        for i in 0..self.set.len() {
            let f = self.set[i];
            let fi = f as usize;
            let new = self.new_rate[fi];
            self.bott[fi] = self.new_bott[fi];
            let old = self.rate[fi];
            let changed = (new - old).abs() > 1e-12 * new.max(old) || old == 0.0;
            if !changed {
                continue;
            }
            self.rate[fi] = new;
            let pa = &mut self.paths[fi];
            pa.served += old * (now - pa.last) as f64;
            pa.last = now;
            self.stats.rate_changes += 1;
            self.rekey(f);
        }
    }

    /// Rates (GB/s) of the active flows by tag, after bringing the
    /// allocation up to date (tests compare them with a reference).
    #[cfg(test)]
    fn rates_by_tag(&mut self) -> Vec<(u64, f64)> {
        self.flush_changed();
        if !self.dirty.is_empty() {
            self.recompute();
        }
        let mut v: Vec<(u64, f64)> = Vec::new();
        for (p, pa) in self.paths.iter().enumerate() {
            for &Reverse((_, _, f)) in pa.queue.iter() {
                v.push((self.flows[f as usize].tag, self.rate[p] / BPS_PER_GBPS));
            }
        }
        v.sort_by_key(|a| a.0);
        v
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
