//! The flow-level, discrete-event core.
//!
//! A [`FlowNet`] holds directional links (capacity in GB/s) and the flows
//! crossing them. The bandwidth of every link is shared **max-min fairly**
//! (progressive filling) among the flows crossing it. Rates are recomputed
//! only when flows start or end, and only for the *connected component* of
//! links and flows touched since the last recomputation; all events with the
//! same timestamp are processed before that recomputation, so a thousand
//! flows starting at once cost one pass, not a thousand.
//!
//! A flow's data phase ends when its bytes have drained at its (changing)
//! rate; it is *delivered* `latency` later (the last byte's flight time along
//! its route). Timers let the driver (the schedule executor) model software
//! overheads and local work. Events are kept in a `BinaryHeap` ordered by
//! `(time, sequence number)`, so runs are deterministic.
//!
//! State per flow is a handful of numbers plus its route: no per-byte or
//! per-packet state.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::SimTime;

/// Index of a directional link in a [`FlowNet`].
pub type LinkId = u32;

/// Bytes per picosecond in one GB/s (1e9 B/s).
const BPS_PER_GBPS: f64 = 1e-3;

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
    /// Data phase of flow `slot` ends, if its version is still `ver`.
    DataDone {
        slot: u32,
        ver: u32,
    },
    Deliver(u64),
    Timer(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Ev {
    time: u64,
    seq: u64,
    kind: EvKind,
}

#[derive(Debug, Default)]
struct Flow {
    links: Vec<LinkId>,
    bytes: f64,
    remaining: f64,
    /// Bytes per picosecond.
    rate: f64,
    last: u64,
    latency: u64,
    tag: u64,
    ver: u32,
    active: bool,
}

/// Counters describing the work a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Flows started.
    pub flows: u64,
    /// Events popped from the queue (stale ones included).
    pub events: u64,
    /// Rate recomputations (one per batch of same-time changes).
    pub recomputations: u64,
    /// Sum over recomputations of the flows in the recomputed component.
    pub flows_recomputed: u64,
    /// Largest number of flows active at once.
    pub max_active_flows: u64,
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
    link_flows: Vec<Vec<u32>>,
    flows: Vec<Flow>,
    free: Vec<u32>,
    heap: BinaryHeap<Reverse<Ev>>,
    seq: u64,
    now: u64,
    dirty: Vec<LinkId>,
    // Scratch for recomputation, indexed by link / flow; `epoch` marks avoid clearing.
    epoch: u32,
    link_mark: Vec<u32>,
    flow_mark: Vec<u32>,
    frozen: Vec<u32>,
    rem: Vec<f64>,
    cnt: Vec<u32>,
    lver: Vec<u32>,
    comp_links: Vec<LinkId>,
    comp_flows: Vec<u32>,
    stack: Vec<LinkId>,
    fill: BinaryHeap<Reverse<(u64, u32, LinkId)>>,
    // Accounting.
    link_bytes: Vec<f64>,
    busy_since: Vec<u64>,
    busy_total: Vec<u64>,
    trace: Option<Vec<BusySpan>>,
    active: u64,
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
            flows: Vec::new(),
            free: Vec::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0,
            dirty: Vec::new(),
            epoch: 0,
            link_mark: vec![0; n],
            flow_mark: Vec::new(),
            frozen: Vec::new(),
            rem: vec![0.0; n],
            cnt: vec![0; n],
            lver: vec![0; n],
            comp_links: Vec::new(),
            comp_flows: Vec::new(),
            stack: Vec::new(),
            fill: BinaryHeap::new(),
            link_bytes: vec![0.0; n],
            busy_since: vec![0; n],
            busy_total: vec![0; n],
            trace: None,
            active: 0,
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

    /// Starts, now, a flow of `bytes` along `links`, delivered `latency`
    /// after its last byte leaves. A flow with no link or no byte is
    /// delivered after `latency` alone.
    pub fn start_flow(&mut self, links: &[LinkId], bytes: f64, latency: SimTime, tag: u64) {
        self.stats.flows += 1;
        let bytes = if bytes.is_finite() {
            bytes.max(0.0)
        } else {
            0.0
        };
        if links.is_empty() || bytes <= 0.0 {
            let t = self.now.saturating_add(latency.as_ps());
            self.push(t, EvKind::Deliver(tag));
            return;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.flows.push(Flow::default());
                self.flow_mark.push(0);
                self.frozen.push(0);
                (self.flows.len() - 1) as u32
            }
        };
        let now = self.now;
        let f = &mut self.flows[slot as usize];
        f.links.clear();
        f.links.extend_from_slice(links);
        f.bytes = bytes;
        f.remaining = bytes;
        f.rate = 0.0;
        f.last = now;
        f.latency = latency.as_ps();
        f.tag = tag;
        f.ver = f.ver.wrapping_add(1);
        f.active = true;
        for &l in links {
            let lf = &mut self.link_flows[l as usize];
            if lf.is_empty() {
                self.busy_since[l as usize] = now;
            }
            lf.push(slot);
            self.dirty.push(l);
        }
        self.active += 1;
        self.stats.max_active_flows = self.stats.max_active_flows.max(self.active);
    }

    fn push(&mut self, time: u64, kind: EvKind) {
        self.seq += 1;
        self.heap.push(Reverse(Ev {
            time,
            seq: self.seq,
            kind,
        }));
    }

    /// Advances to the next event time and processes everything due then
    /// (and up to the batch window after it).
    /// Returns that time, with the outputs in `out` (cleared first), or
    /// `None` when nothing is left to happen.
    pub fn next_batch(&mut self, out: &mut Vec<Output>) -> Option<SimTime> {
        out.clear();
        if !self.dirty.is_empty() {
            self.recompute();
        }
        let t0 = self.heap.peek()?.0.time;
        let horizon = t0.saturating_add(self.window);
        while let Some(Reverse(ev)) = self.heap.peek().copied() {
            if ev.time > horizon {
                break;
            }
            self.heap.pop();
            self.now = ev.time;
            self.stats.events += 1;
            match ev.kind {
                EvKind::DataDone { slot, ver } => {
                    if self.flows[slot as usize].ver == ver && self.flows[slot as usize].active {
                        self.finish_flow(slot, out);
                    }
                }
                EvKind::Deliver(tag) => out.push(Output::Delivered(tag)),
                EvKind::Timer(tag) => out.push(Output::Timer(tag)),
            }
        }
        Some(SimTime::from_ps(self.now))
    }

    fn finish_flow(&mut self, slot: u32, out: &mut Vec<Output>) {
        let now = self.now;
        let f = &mut self.flows[slot as usize];
        f.active = false;
        f.ver = f.ver.wrapping_add(1);
        let (bytes, latency, tag) = (f.bytes, f.latency, f.tag);
        let links = std::mem::take(&mut f.links);
        for &l in &links {
            let lf = &mut self.link_flows[l as usize];
            if let Some(pos) = lf.iter().position(|&s| s == slot) {
                lf.swap_remove(pos);
            }
            if lf.is_empty() {
                let since = self.busy_since[l as usize];
                self.busy_total[l as usize] += now - since;
                if let Some(tr) = &mut self.trace {
                    tr.push(BusySpan {
                        link: l,
                        start: SimTime::from_ps(since),
                        end: SimTime::from_ps(now),
                    });
                }
            }
            self.link_bytes[l as usize] += bytes;
            self.dirty.push(l);
        }
        self.flows[slot as usize].links = links;
        self.free.push(slot);
        self.active -= 1;
        if latency == 0 {
            out.push(Output::Delivered(tag));
        } else {
            self.push(now.saturating_add(latency), EvKind::Deliver(tag));
        }
    }

    /// Max-min fair rates for the component of links and flows reachable
    /// from the links changed since the last call (progressive filling).
    fn recompute(&mut self) {
        self.stats.recomputations += 1;
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // Wrapped: clear marks so old ones cannot collide.
            self.link_mark.iter_mut().for_each(|m| *m = 0);
            self.flow_mark.iter_mut().for_each(|m| *m = 0);
            self.frozen.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        let now = self.now;
        self.comp_links.clear();
        self.comp_flows.clear();
        self.stack.clear();
        for i in 0..self.dirty.len() {
            let l = self.dirty[i];
            if self.link_mark[l as usize] != epoch {
                self.link_mark[l as usize] = epoch;
                self.stack.push(l);
            }
        }
        self.dirty.clear();
        while let Some(l) = self.stack.pop() {
            self.comp_links.push(l);
            for &f in &self.link_flows[l as usize] {
                if self.flow_mark[f as usize] != epoch {
                    self.flow_mark[f as usize] = epoch;
                    self.comp_flows.push(f);
                    for &l2 in &self.flows[f as usize].links {
                        if self.link_mark[l2 as usize] != epoch {
                            self.link_mark[l2 as usize] = epoch;
                            self.stack.push(l2);
                        }
                    }
                }
            }
        }
        self.stats.flows_recomputed += self.comp_flows.len() as u64;
        // Bring every flow of the component up to now at its old rate.
        for &f in &self.comp_flows {
            let fl = &mut self.flows[f as usize];
            let dt = (now - fl.last) as f64;
            fl.remaining = (fl.remaining - fl.rate * dt).max(0.0);
            fl.last = now;
        }
        // Progressive filling: repeatedly saturate the link with the
        // smallest fair share and freeze its flows at that share. Small
        // components scan their links (cheaper than a heap); large ones use
        // a lazy min-heap (shares only grow as flows freeze, so stale
        // entries are recognised by a per-link version).
        for &l in &self.comp_links {
            let li = l as usize;
            self.rem[li] = self.cap[li];
            self.cnt[li] = self.link_flows[li].len() as u32;
            self.lver[li] = self.lver[li].wrapping_add(1);
        }
        let use_heap = self.comp_links.len() > 64;
        self.fill.clear();
        if use_heap {
            for &l in &self.comp_links {
                let li = l as usize;
                if self.cnt[li] > 0 {
                    let share = self.rem[li] / f64::from(self.cnt[li]);
                    self.fill.push(Reverse((share.to_bits(), self.lver[li], l)));
                }
            }
        }
        loop {
            let (l, share) = if use_heap {
                let Some(Reverse((share_bits, ver, l))) = self.fill.pop() else {
                    break;
                };
                if ver != self.lver[l as usize] || self.cnt[l as usize] == 0 {
                    continue;
                }
                (l, f64::from_bits(share_bits))
            } else {
                let mut best: Option<(LinkId, f64)> = None;
                for &l in &self.comp_links {
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
            self.freeze_link(l, share, use_heap, epoch, now);
        }
    }

    /// Freezes every unfrozen flow of link `l` at `share` (progressive filling step).
    fn freeze_link(&mut self, l: LinkId, share: f64, use_heap: bool, epoch: u32, now: u64) {
        let li = l as usize;
        for k in 0..self.link_flows[li].len() {
            let f = self.link_flows[li][k] as usize;
            if self.frozen[f] == epoch {
                continue;
            }
            self.frozen[f] = epoch;
            let old = self.flows[f].rate;
            self.flows[f].rate = share;
            for h in 0..self.flows[f].links.len() {
                let l2 = self.flows[f].links[h] as usize;
                self.rem[l2] = (self.rem[l2] - share).max(0.0);
                self.cnt[l2] = self.cnt[l2].saturating_sub(1);
                self.lver[l2] = self.lver[l2].wrapping_add(1);
                if use_heap && l2 != li && self.cnt[l2] > 0 {
                    let s2 = self.rem[l2] / f64::from(self.cnt[l2]);
                    self.fill
                        .push(Reverse((s2.to_bits(), self.lver[l2], l2 as u32)));
                }
            }
            // Reschedule the data-done event only when the rate changed.
            let fl = &mut self.flows[f];
            let changed = (fl.rate - old).abs() > 1e-12 * fl.rate.max(old) || old == 0.0;
            if changed {
                fl.ver = fl.ver.wrapping_add(1);
                let dt = if fl.rate > 0.0 {
                    (fl.remaining / fl.rate).ceil()
                } else {
                    f64::MAX
                };
                let done = if dt >= (u64::MAX - now) as f64 {
                    u64::MAX
                } else {
                    now + dt as u64
                };
                let ev = EvKind::DataDone {
                    slot: f as u32,
                    ver: fl.ver,
                };
                self.push(done, ev);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_all(net: &mut FlowNet) -> Vec<(f64, Output)> {
        let mut res = Vec::new();
        let mut out = Vec::new();
        while let Some(t) = net.next_batch(&mut out) {
            for o in &out {
                res.push((t.as_us(), *o));
            }
        }
        res
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn single_flow_takes_bytes_over_capacity_plus_latency() {
        let mut net = FlowNet::new(&[100.0, 50.0]);
        // 1 MB over a 100 and a 50 GB/s link: bottleneck 50 GB/s = 20 us, + 3 us latency.
        net.start_flow(&[0, 1], 1e6, SimTime::from_us(3.0), 7);
        let r = run_all(&mut net);
        assert_eq!(r.len(), 1);
        assert!(close(r[0].0, 23.0), "{r:?}");
        assert_eq!(r[0].1, Output::Delivered(7));
    }

    #[test]
    fn max_min_fairness_hand_computed() {
        // Classic example: links A (cap 10), B (cap 4).
        // f1 crosses A and B, f2 crosses B, f3 crosses A.
        // B is the bottleneck: f1 = f2 = 2; then f3 gets A's remaining 8.
        let mut net = FlowNet::new(&[10.0, 4.0]);
        net.start_flow(&[0, 1], 2e6, SimTime::ZERO, 1); // 2 MB at 2 GB/s = 1000 us
        net.start_flow(&[1], 4e6, SimTime::ZERO, 2); // 2 GB/s until f1 ends, then 4
        net.start_flow(&[0], 8e6, SimTime::ZERO, 3); // 8 GB/s until f1 ends, then 10
        let r = run_all(&mut net);
        // f1 ends at 1000 us; f2 has 2 MB left at 4 GB/s: 500 us more -> 1500 us;
        // f3 has 0 left at 1000 us (8 MB at 8 GB/s) -> also 1000 us.
        let t: Vec<(f64, Output)> = r;
        let time_of = |tag| {
            t.iter()
                .find(|(_, o)| *o == Output::Delivered(tag))
                .unwrap()
                .0
        };
        assert!(close(time_of(1), 1000.0));
        assert!(close(time_of(3), 1000.0));
        assert!(close(time_of(2), 1500.0));
    }

    #[test]
    fn rates_rise_when_a_competitor_leaves() {
        // Two flows on one 10 GB/s link, 1 MB and 3 MB: 5 GB/s each until
        // the first ends at 200 us, then the second has 2 MB left at 10 GB/s.
        let mut net = FlowNet::new(&[10.0]);
        net.start_flow(&[0], 1e6, SimTime::ZERO, 1);
        net.start_flow(&[0], 3e6, SimTime::ZERO, 2);
        let r = run_all(&mut net);
        assert!(close(r[0].0, 200.0) && r[0].1 == Output::Delivered(1));
        assert!(close(r[1].0, 400.0) && r[1].1 == Output::Delivered(2));
        assert!(close(net.link_busy(0).as_us(), 400.0));
        assert!(close(net.link_bytes(0), 4e6));
    }

    #[test]
    fn parking_lot_three_links() {
        // Parking lot: long flow over links 0,1,2 (cap 1 each), one short
        // flow per link: every flow gets 1/2.
        let mut net = FlowNet::new(&[1.0, 1.0, 1.0]);
        net.start_flow(&[0, 1, 2], 1e3, SimTime::ZERO, 0);
        for l in 0..3 {
            net.start_flow(&[l], 1e3, SimTime::ZERO, 1 + u64::from(l));
        }
        let r = run_all(&mut net);
        for (t, _) in &r {
            assert!(close(*t, 2.0), "{r:?}"); // 1000 B at 0.5 GB/s = 2 us
        }
    }

    #[test]
    fn separate_components_do_not_interact() {
        let mut net = FlowNet::new(&[1.0, 2.0]);
        net.start_flow(&[0], 1e3, SimTime::ZERO, 1);
        net.start_flow(&[1], 1e3, SimTime::ZERO, 2);
        let r = run_all(&mut net);
        assert!(close(r[0].0, 0.5) && r[0].1 == Output::Delivered(2));
        assert!(close(r[1].0, 1.0) && r[1].1 == Output::Delivered(1));
    }

    #[test]
    fn timers_and_empty_flows_and_order_is_deterministic() {
        let go = || {
            let mut net = FlowNet::new(&[1.0]);
            net.timer(SimTime::from_us(5.0), 10);
            net.start_flow(&[], 1e9, SimTime::from_us(1.0), 11);
            net.start_flow(&[0], 0.0, SimTime::from_us(2.0), 12);
            for i in 0..20 {
                net.start_flow(
                    &[0],
                    100.0 * f64::from(i + 1),
                    SimTime::ZERO,
                    100 + i as u64,
                );
            }
            run_all(&mut net)
        };
        let a = go();
        assert_eq!(a[0], (1.0, Output::Delivered(11)));
        assert_eq!(a[1], (2.0, Output::Delivered(12)));
        assert!(a.contains(&(5.0, Output::Timer(10))));
        assert_eq!(a, go());
    }
}
