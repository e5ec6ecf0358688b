//! Engine tests: hand-computed cases, and the incremental allocation against
//! a brute-force water-filling reference and against whole-component
//! refilling on random flow sets.

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
fn flows_on_one_path_share_its_rate_whenever_they_start() {
    // One 10 GB/s link. A (10 MB) starts at 0 and runs alone at 10 GB/s
    // for 500 us (5 MB). B (4 MB) starts on the same path then, C (1 MB)
    // 100 us later: A and B at 5 GB/s (500 KB each) for 100 us, then all
    // three at 10/3 GB/s: C's 1 MB take 300 us (ends at 900 us), A has
    // 3.5 MB left, B 2.5 MB, so at 5 GB/s each B ends at 1400 us and A
    // with 1 MB left at 10 GB/s at 1500 us.
    let mut net = FlowNet::new(&[10.0]);
    let p = net.path(&[0]);
    assert_eq!(net.path(&[0]), p, "the same links, the same path");
    assert_ne!(net.path(&[0, 0]), p);
    net.start_flow_on(p, 10e6, SimTime::ZERO, 1);
    net.timer(SimTime::from_us(500.0), 2);
    net.timer(SimTime::from_us(600.0), 3);
    let mut out = Vec::new();
    let mut ends = Vec::new();
    while let Some(t) = net.next_batch(&mut out) {
        for &o in &out {
            match o {
                Output::Timer(2) => net.start_flow(&[0], 4e6, SimTime::ZERO, 2),
                Output::Timer(3) => net.start_flow_on(p, 1e6, SimTime::ZERO, 3),
                Output::Delivered(tag) => ends.push((tag, t.as_us())),
                Output::Timer(_) => unreachable!(),
            }
        }
    }
    let want = [(3, 900.0), (2, 1400.0), (1, 1500.0)];
    assert_eq!(ends.len(), 3, "{ends:?}");
    for ((tag, t), (wtag, wt)) in ends.iter().zip(want) {
        assert_eq!(*tag, wtag, "{ends:?}");
        assert!(close(*t, wt), "flow {tag} ended at {t} us, not {wt}");
    }
    assert!(close(net.link_bytes(0), 15e6));
    assert!(close(net.link_busy(0).as_us(), 1500.0));
    let st = net.stats();
    assert_eq!((st.flows, st.max_active_flows), (3, 3));
    // Each start and each end changed the path's weight: six
    // recomputations, one path refilled in each but the last (nothing
    // left on the link).
    assert_eq!(st.recomputations, 6, "{st:?}");
    assert_eq!(st.paths_recomputed, 5, "{st:?}");
}

#[test]
fn a_link_is_busy_until_its_last_path_ends_whatever_order_they_leave_in() {
    // Link 0 (10 GB/s) carries path Q = [0] (flows 1 and 3) and path
    // P = [0, 1] (flow 2), 10/3 GB/s each: flow 1 ends at 300 us, 2 at
    // 300.3 us, 3 at 300.6 us, all in one batch of a 1 us window. Q
    // changed first, so it leaves its links first; link 0 is still busy
    // until 300.6 us, when flow 3 ends (it was taken as idle at 300.3 us,
    // P's end, when the paths left in that order; review of the forty-
    // fourth session).
    let mut net = FlowNet::new(&[10.0, 100.0]);
    net.set_batch_window(SimTime::from_us(1.0));
    net.record_busy_spans();
    net.start_flow(&[0], 1.000e6, SimTime::ZERO, 1);
    net.start_flow(&[0, 1], 1.001e6, SimTime::ZERO, 2);
    net.start_flow(&[0], 1.002e6, SimTime::ZERO, 3);
    let r = run_all(&mut net);
    assert_eq!(r.len(), 3, "{r:?}");
    let last = r[2].0;
    assert!(close(last, 300.6), "{r:?}");
    assert!(
        close(net.link_busy(0).as_us(), last),
        "{:?}",
        net.busy_spans()
    );
    assert!(
        close(net.link_busy(1).as_us(), 300.3),
        "{:?}",
        net.busy_spans()
    );
    let spans = net.busy_spans();
    assert_eq!(spans.len(), 2, "{spans:?}");
    for s in spans {
        let want = if s.link == 0 { last } else { 300.3 };
        assert!(close(s.end.as_us(), want), "{spans:?}");
    }
}

#[test]
#[should_panic(expected = "link 5 on a network of 2 links")]
fn a_route_through_a_link_the_network_lacks_is_refused_by_name() {
    FlowNet::new(&[1.0, 1.0]).path(&[0, 5]);
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

use proptest::prelude::*;

/// Textbook water-filling, written independently of the engine: raise every
/// unfrozen flow together until some link saturates, freeze the flows on
/// saturated links, repeat. Capacities and rates in GB/s.
fn water_filling(caps: &[f64], routes: &[Vec<LinkId>]) -> Vec<f64> {
    let mut rate = vec![0.0; routes.len()];
    let mut frozen = vec![false; routes.len()];
    let mut rem = caps.to_vec();
    loop {
        let mut count = vec![0usize; caps.len()];
        for (f, r) in routes.iter().enumerate() {
            if !frozen[f] {
                for &l in r {
                    count[l as usize] += 1;
                }
            }
        }
        let inc = (0..caps.len())
            .filter(|&l| count[l] > 0)
            .map(|l| rem[l] / count[l] as f64)
            .fold(f64::INFINITY, f64::min);
        if !inc.is_finite() {
            return rate;
        }
        for (l, &c) in count.iter().enumerate() {
            rem[l] -= inc * c as f64;
        }
        for (f, _) in routes.iter().enumerate() {
            if !frozen[f] {
                rate[f] += inc;
            }
        }
        for (f, r) in routes.iter().enumerate() {
            if !frozen[f]
                && r.iter()
                    .any(|&l| rem[l as usize] <= 1e-12 * caps[l as usize])
            {
                frozen[f] = true;
            }
        }
    }
}

/// A flow of a random scenario: start time (ps), route, bytes, and how
/// many flows of the same size follow it on the same route, each started
/// the instant the previous one is delivered (a connection's next chunk:
/// the engine hands the ended flow's place over).
#[derive(Clone, Debug)]
struct Spec {
    start: u64,
    links: Vec<LinkId>,
    bytes: f64,
    then: u64,
}

/// Tags: spec `i`'s `k`-th flow is `i * TAGS + k`.
const TAGS: u64 = 8;

/// Runs a scenario (flows started by timers, no latency, so delivery is
/// the data-phase end). After every batch, checks the engine's rates
/// against `water_filling` on the active flows. Returns the delivery time
/// (ps) of every spec's last flow and the engine's counters.
fn run_checked(caps: &[f64], specs: &[Spec], full: bool) -> (Vec<u64>, EngineStats) {
    let mut net = FlowNet::new(caps);
    net.set_full_recompute(full);
    for (i, s) in specs.iter().enumerate() {
        net.timer(SimTime::from_ps(s.start), i as u64);
    }
    let mut active: Vec<bool> = vec![false; specs.len()];
    let mut delivered = vec![u64::MAX; specs.len()];
    let mut out = Vec::new();
    while let Some(t) = net.next_batch(&mut out) {
        for &o in &out {
            match o {
                Output::Timer(i) => {
                    let s = &specs[i as usize];
                    net.start_flow(&s.links, s.bytes, SimTime::ZERO, i * TAGS);
                    active[i as usize] = true;
                }
                Output::Delivered(tag) => {
                    let (i, k) = ((tag / TAGS) as usize, tag % TAGS);
                    let s = &specs[i];
                    if k < s.then {
                        net.start_flow(&s.links, s.bytes, SimTime::ZERO, tag + 1);
                    } else {
                        active[i] = false;
                        delivered[i] = t.as_ps();
                    }
                }
            }
        }
        let got = net.rates_by_tag();
        let ids: Vec<usize> = (0..specs.len()).filter(|&i| active[i]).collect();
        let routes: Vec<Vec<LinkId>> = ids.iter().map(|&i| specs[i].links.clone()).collect();
        let want = water_filling(caps, &routes);
        assert_eq!(got.len(), ids.len());
        for ((tag, r), (&i, w)) in got.iter().zip(ids.iter().zip(&want)) {
            assert_eq!(*tag / TAGS, i as u64);
            assert!(
                (r - w).abs() <= 1e-9 * w.max(1e-9),
                "flow {i} at {t}: engine {r} GB/s, water-filling {w} GB/s (full: {full})"
            );
        }
    }
    (delivered, net.stats())
}

fn scenario() -> impl Strategy<Value = (Vec<f64>, Vec<Spec>)> {
    (2usize..10).prop_flat_map(|nl| {
        let caps = proptest::collection::vec(1u32..8, nl).prop_map(|v| {
            v.into_iter()
                .map(|c| f64::from(c) * 2.5)
                .collect::<Vec<f64>>()
        });
        let spec = (
            0u64..4,
            // Routes may repeat a link (a symmetry-reduced route can cross two
            // links of one orbit): the flow then counts twice on it.
            proptest::collection::vec(0..nl as u32, 1..=4),
            1u32..50,
            0..TAGS,
        )
            .prop_map(|(start, links, kb, then)| Spec {
                // Few distinct start times, so many changes share a batch.
                start: start * 1_000_000,
                links: links.into_iter().collect(),
                bytes: f64::from(kb) * 1000.0,
                then,
            });
        (caps, proptest::collection::vec(spec, 1..24))
    })
}

/// Like [`scenario`], but every flow takes one of a few routes, so many
/// flows share a path, start on it while others drain, and end on it
/// together.
fn shared_paths_scenario() -> impl Strategy<Value = (Vec<f64>, Vec<Spec>)> {
    (2usize..5, 1usize..4).prop_flat_map(|(nl, np)| {
        let caps = proptest::collection::vec(1u32..8, nl)
            .prop_map(|v| v.into_iter().map(|c| f64::from(c) * 2.5).collect());
        let pool = proptest::collection::vec(proptest::collection::vec(0..nl as u32, 1..=3), np);
        (caps, pool).prop_flat_map(move |(caps, pool)| {
            let spec =
                (0u64..6, 0..np, 1u32..50, 0..TAGS).prop_map(move |(start, r, kb, then)| Spec {
                    start: start * 300_000,
                    links: pool[r].clone(),
                    bytes: f64::from(kb) * 1000.0,
                    then,
                });
            (Just(caps), proptest::collection::vec(spec, 1..24))
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Flows sharing paths get water-filling's rates after every batch
    /// (checked per flow, so a path's weight must be right), and the
    /// incremental and whole-component fills deliver them together.
    #[test]
    fn flows_sharing_paths_are_max_min_fair((caps, specs) in shared_paths_scenario()) {
        both_fills_agree(&caps, &specs)?;
    }

    /// Incremental and whole-component allocations both equal water-filling
    /// after every batch, and deliver every flow at the same time to within
    /// 2 ps per flow + 1e-6 relative (the rounding of event times to
    /// picoseconds).
    #[test]
    fn incremental_allocation_is_max_min_fair((caps, specs) in scenario()) {
        both_fills_agree(&caps, &specs)?;
    }
}

/// Runs a scenario filled incrementally and by whole components (each
/// checked against water-filling after every batch by `run_checked`) and
/// checks that every flow is delivered, at the same time both ways to
/// within 2 ps per flow + 1e-6 relative: event times are whole
/// picoseconds, rounded up from each rate change, and a flow that follows
/// another starts at its rounded delivery, so the two may drift apart by
/// a couple of picoseconds per flow of the scenario.
fn both_fills_agree(caps: &[f64], specs: &[Spec]) -> Result<(), TestCaseError> {
    let (inc, _) = run_checked(caps, specs, false);
    let (full, _) = run_checked(caps, specs, true);
    let flows: u64 = specs.iter().map(|s| s.then + 1).sum();
    for (i, (a, b)) in inc.iter().zip(&full).enumerate() {
        prop_assert!(*a != u64::MAX, "flow {i} never delivered");
        prop_assert!(
            a.abs_diff(*b) <= 2 * flows + b / 1_000_000,
            "flow {i}: incremental {a} ps, full {b} ps"
        );
    }
    Ok(())
}

/// A coupled network like a multi-channel ring: `n` nodes, each with an up
/// and a down link (capacity 8) shared by `ch` channels; channel `c` of node
/// `g` sends to node `(g + c + 1) % n` over its up link, a per-channel
/// "rail" link (capacity 1.5, shared by every node's flow of that channel
/// whose destination wraps) and the destination's down link. Flows of
/// uneven sizes start in waves, so completions are spread in time.
fn coupled(n: u32, ch: u32, waves: u32) -> (Vec<f64>, Vec<Spec>) {
    let mut caps = vec![8.0; 2 * n as usize];
    caps.extend(std::iter::repeat_n(1.5, ch as usize));
    let mut specs = Vec::new();
    for w in 0..waves {
        for g in 0..n {
            for c in 0..ch {
                let dst = (g + c + 1) % n;
                let mut links = vec![2 * g];
                if dst < g {
                    links.push(2 * n + c);
                }
                links.push(2 * dst + 1);
                specs.push(Spec {
                    start: u64::from(w) * 3_000_000 + u64::from((g * 7 + c * 3) % 5) * 1000,
                    links,
                    bytes: 1000.0 * f64::from(1 + (g * 13 + c * 5 + w) % 9),
                    then: 0,
                });
            }
        }
    }
    (caps, specs)
}

#[test]
fn coupled_network_is_fair_and_incremental_work_is_smaller() {
    let (caps, specs) = coupled(32, 4, 3);
    let (inc, si) = run_checked(&caps, &specs, false);
    let (full, sf) = run_checked(&caps, &specs, true);
    for (i, (a, b)) in inc.iter().zip(&full).enumerate() {
        assert!(
            a.abs_diff(*b) <= 2,
            "flow {i}: incremental {a} ps, full {b} ps"
        );
    }
    assert_eq!(si.recomputations, sf.recomputations);
    // The point of the incremental check: far fewer flows refilled.
    assert!(
        si.paths_recomputed * 4 < sf.paths_recomputed,
        "incremental {si:?} vs full {sf:?}"
    );
    assert!(si.component_fills < si.recomputations);
}

#[test]
fn completion_heap_keeps_order_under_rekeying() {
    let mut h = IndexedHeap::default();
    h.grow(64);
    let mut model: Vec<Option<(u64, u64)>> = vec![None; 64];
    let mut x = 12345u64;
    let mut seq = 0;
    for _ in 0..5000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let slot = ((x >> 33) % 64) as u32;
        seq += 1;
        match (x >> 20) % 3 {
            0 => {
                h.remove(slot);
                model[slot as usize] = None;
            }
            _ => {
                let t = (x >> 40) % 100;
                h.set(slot, t, seq);
                model[slot as usize] = Some((t, seq));
            }
        }
        let want = model
            .iter()
            .enumerate()
            .filter_map(|(s, k)| k.map(|(t, q)| (t, q, s as u32)))
            .min();
        assert_eq!(h.peek(), want);
    }
}

#[test]
fn a_heap_built_at_once_pops_in_order_and_takes_updates() {
    let mut x = 99u64;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    for (n, updates) in [0usize, 1, 2, 4, 5, 6, 17, 64, 300]
        .into_iter()
        .flat_map(|n| [(n, false), (n, true)])
    {
        let mut h = IndexedHeap::default();
        h.grow(n);
        let mut model: Vec<Option<(u64, u64)>> = vec![None; n];
        let items: Vec<(u64, u64, u32)> = (0..n as u32)
            .map(|i| (next() % 50, u64::from(i), i))
            .collect();
        for &(k, s, i) in &items {
            model[i as usize] = Some((k, s));
        }
        h.extend_unordered(items.into_iter());
        // Keys may then move either way, and ids leave, as a filling does.
        for _ in 0..if updates { n } else { 0 } {
            let i = (next() % n as u64) as u32;
            if next() % 3 == 0 {
                h.remove(i);
                model[i as usize] = None;
            } else {
                let k = next() % 50;
                h.set(i, k, u64::from(i));
                model[i as usize] = Some((k, u64::from(i)));
            }
        }
        let mut want: Vec<(u64, u64, u32)> = model
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.map(|(k, s)| (k, s, i as u32)))
            .collect();
        want.sort_unstable();
        let got: Vec<(u64, u64, u32)> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(got, want, "{n} ids, updates: {updates}");
    }
}

#[test]
fn a_flow_started_on_the_route_of_one_that_just_ended_takes_its_place() {
    // Link 0 (10 GB/s) carries A (then its successor A2) and B; link 1
    // (4 GB/s) only A: A gets 4, B 6. A's 4 MB end at 1 ms; A2 takes A's
    // place without a recomputation and ends at 2 ms; B's 12 MB end at 2 ms.
    let specs = [
        Spec {
            start: 0,
            links: vec![0, 1],
            bytes: 4e6,
            then: 1,
        },
        Spec {
            start: 0,
            links: vec![0],
            bytes: 12e6,
            then: 0,
        },
    ];
    let (done, st) = run_checked(&[10.0, 4.0], &specs, false);
    assert_eq!(done, vec![2_000_000_000, 2_000_000_000]);
    assert_eq!(st.handovers, 1);
    assert_eq!(st.flows, 3);
    // One at the start, one when the last flows end; none at A's end.
    assert_eq!(st.recomputations, 2);
}

#[test]
fn a_long_cascade_is_refilled_flow_by_flow_not_by_component() {
    // A staircase: in each of `k` chains, flow i crosses links c_i and
    // c_(i+1); c_0 (1 GB/s) carries only flow 0, c_i (2i + 1 GB/s) flows
    // i - 1 and i, so flow i gets i + 1, held by c_i. Every flow also
    // crosses one wide link, so the chains are one component. A flow
    // started on chain 0's c_0 halves flow 0, which frees room for flow 1,
    // which takes room from flow 2, ...: every rate of chain 0 moves, one
    // more per round of the incremental check, and no other rate does.
    // The rounds refill about m^2 / 2 flows, far fewer than the component's
    // k m, so the check runs to the end of the chain instead of falling
    // back to the component (it fell back after six rounds before the
    // thirty-second session).
    let (k, m) = (40u32, 20u32);
    let wide = k * (m + 1);
    let mut caps = Vec::new();
    for _ in 0..k {
        caps.push(1.0);
        caps.extend((1..m).map(|i| f64::from(2 * i + 1)));
        caps.push(1000.0);
    }
    caps.push(1e6);
    let mut net = FlowNet::new(&caps);
    let mut routes = Vec::new();
    for c in 0..k {
        for i in 0..m {
            let base = c * (m + 1);
            let route = vec![base + i, base + i + 1, wide];
            net.start_flow(&route, 1e12, SimTime::ZERO, u64::from(c * m + i));
            routes.push(route);
        }
    }
    let before = net.rates_by_tag();
    for (tag, r) in &before {
        assert!(
            (r - f64::from(*tag as u32 % m + 1)).abs() < 1e-9,
            "{tag}: {r}"
        );
    }
    let s1 = net.stats();
    net.start_flow(&[0, wide], 1e12, SimTime::ZERO, u64::from(k * m));
    routes.push(vec![0, wide]);
    let after = net.rates_by_tag();
    let s2 = net.stats();
    let want = water_filling(&caps, &routes);
    for ((tag, r), w) in after.iter().zip(&want) {
        assert!((r - w).abs() <= 1e-9 * w, "flow {tag}: {r} GB/s, want {w}");
    }
    let moved = before
        .iter()
        .zip(&after)
        .filter(|((_, a), (_, b))| (a - b).abs() > 1e-9)
        .count();
    assert_eq!(moved, m as usize, "chain 0's flows, and only they, move");
    assert_eq!(s2.component_fills, s1.component_fills, "{s2:?}");
    let refilled = s2.paths_recomputed - s1.paths_recomputed;
    assert!(
        refilled < u64::from(k * m) / 2,
        "{refilled} flows refilled for a change of {m}"
    );
}

/// A flow of a chained scenario: its route (an index into a few shared
/// routes), bytes, latency (ps), and the flows started when it is
/// delivered.
#[derive(Clone, Debug)]
struct Chained {
    route: usize,
    bytes: f64,
    latency: u64,
    then: Vec<usize>,
}

/// A scenario of flows on a few shared routes (which may repeat a link):
/// some started by timers, the rest when a flow is delivered, some with no
/// byte, some with a latency. Returns the capacities, the routes, the
/// `(start ps, flow)` of the timed ones and the flows.
type ChainScenario = (Vec<f64>, Vec<Vec<LinkId>>, Vec<(u64, usize)>, Vec<Chained>);

fn chained_scenario() -> impl Strategy<Value = ChainScenario> {
    (2usize..6, 1usize..5, 1usize..40).prop_flat_map(|(nl, np, n)| {
        let caps = proptest::collection::vec(1u32..8, nl).prop_map(|v| {
            v.into_iter()
                .map(|c| f64::from(c) * 2.5)
                .collect::<Vec<f64>>()
        });
        let routes = proptest::collection::vec(proptest::collection::vec(0..nl as u32, 1..=4), np);
        let flows =
            proptest::collection::vec((0..np, 0u32..50, 0usize..3, 0usize..100, 0u64..4), n);
        (caps, routes, flows).prop_map(|(caps, routes, flows)| {
            let mut fl: Vec<Chained> = Vec::new();
            let mut timed = Vec::new();
            for (i, &(route, kb, lat, parent, start)) in flows.iter().enumerate() {
                fl.push(Chained {
                    route,
                    bytes: f64::from(kb) * 1000.0,
                    latency: [0, 0, 1_000_000][lat],
                    then: Vec::new(),
                });
                if i == 0 || parent % 3 == 0 {
                    timed.push((start * 300_000, i));
                } else {
                    fl[parent % i].then.push(i);
                }
            }
            (caps, routes, timed, fl)
        })
    })
}

/// The scenario as fluid flows, written apart from the engine: between
/// events every active flow drains at its water-filling rate, in `f64`
/// picoseconds. Returns each flow's delivery (NaN if never), each link's
/// busy time and bytes.
fn fluid_reference(sc: &ChainScenario) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (caps, routes, timed, fl) = sc;
    let mut delivered = vec![f64::NAN; fl.len()];
    let mut starts: Vec<(f64, usize)> = timed.iter().map(|&(t, i)| (t as f64, i)).collect();
    let mut deliveries: Vec<(f64, usize)> = Vec::new();
    let mut active: Vec<(usize, f64)> = Vec::new();
    let (mut busy, mut bytes) = (vec![0.0; caps.len()], vec![0.0; caps.len()]);
    let mut t = 0.0f64;
    loop {
        // Everything due now, deliveries first (they start flows now).
        loop {
            let mut moved = false;
            deliveries.sort_by(|a, b| a.partial_cmp(b).unwrap());
            while deliveries.first().is_some_and(|d| d.0 <= t + 1e-6) {
                let (td, i) = deliveries.remove(0);
                delivered[i] = td;
                starts.extend(fl[i].then.iter().map(|&c| (t, c)));
                moved = true;
            }
            starts.sort_by(|a, b| a.partial_cmp(b).unwrap());
            while starts.first().is_some_and(|s| s.0 <= t + 1e-6) {
                let (_, i) = starts.remove(0);
                if fl[i].bytes > 0.0 {
                    active.push((i, fl[i].bytes));
                } else {
                    deliveries.push((t + fl[i].latency as f64, i));
                }
                moved = true;
            }
            if !moved {
                break;
            }
        }
        let on: Vec<Vec<LinkId>> = active
            .iter()
            .map(|a| routes[fl[a.0].route].clone())
            .collect();
        let rates = water_filling(caps, &on);
        let mut dt = f64::INFINITY;
        for (a, r) in active.iter().zip(&rates) {
            dt = dt.min(a.1 / (r * 1e-3));
        }
        dt = starts
            .iter()
            .chain(&deliveries)
            .fold(dt, |d, e| d.min(e.0 - t));
        if !dt.is_finite() {
            break;
        }
        let mut used = vec![false; caps.len()];
        on.iter().flatten().for_each(|&l| used[l as usize] = true);
        for (b, u) in busy.iter_mut().zip(&used) {
            if *u {
                *b += dt;
            }
        }
        t += dt;
        let mut still = Vec::new();
        for (a, r) in active.iter().zip(&rates) {
            let left = a.1 - r * 1e-3 * dt;
            if left <= 1e-6 * fl[a.0].bytes {
                for &l in &routes[fl[a.0].route] {
                    bytes[l as usize] += fl[a.0].bytes;
                }
                deliveries.push((t + fl[a.0].latency as f64, a.0));
            } else {
                still.push((a.0, left));
            }
        }
        active = still;
    }
    (delivered, busy, bytes)
}

/// The scenario on the engine, through `path` and `start_flow_on`,
/// checking every batch's rates against water-filling. Returns what
/// [`fluid_reference`] does.
fn on_engine(sc: &ChainScenario, full: bool) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (caps, routes, timed, fl) = sc;
    let mut net = FlowNet::new(caps);
    net.set_full_recompute(full);
    let paths: Vec<PathId> = routes.iter().map(|r| net.path(r)).collect();
    for &(t, i) in timed {
        net.timer(SimTime::from_ps(t), i as u64);
    }
    let mut delivered = vec![f64::NAN; fl.len()];
    let mut out = Vec::new();
    let start = |net: &mut FlowNet, i: usize| {
        let f = &fl[i];
        net.start_flow_on(
            paths[f.route],
            f.bytes,
            SimTime::from_ps(f.latency),
            i as u64,
        );
    };
    while let Some(t) = net.next_batch(&mut out) {
        for &o in &out.clone() {
            match o {
                Output::Timer(i) => start(&mut net, i as usize),
                Output::Delivered(i) => {
                    delivered[i as usize] = t.as_ps() as f64;
                    for &c in &fl[i as usize].then {
                        start(&mut net, c);
                    }
                }
            }
        }
        let got = net.rates_by_tag();
        let on: Vec<Vec<LinkId>> = got
            .iter()
            .map(|&(tag, _)| routes[fl[tag as usize].route].clone())
            .collect();
        for ((tag, r), w) in got.iter().zip(water_filling(caps, &on)) {
            assert!(
                (r - w).abs() <= 1e-9 * w.max(1e-9),
                "flow {tag}: {r} GB/s, want {w}"
            );
        }
        assert_eq!(net.active_flows() as usize, got.len());
    }
    let links = 0..caps.len() as LinkId;
    let busy = links
        .clone()
        .map(|l| net.link_busy(l).as_ps() as f64)
        .collect();
    let bytes = links.map(|l| net.link_bytes(l)).collect();
    (delivered, busy, bytes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Flows that start one another on shared paths (a path emptied and
    /// refilled in one batch, counts that go down and up again, zero-byte
    /// flows, latencies) end, keep their links busy and count their bytes
    /// as fluid flows under water-filling do, to 3 ps per flow + 1e-6
    /// relative (the engine rounds event times up to picoseconds).
    #[test]
    fn chained_flows_match_a_fluid_reference(sc in chained_scenario()) {
        let (rd, rb, rbytes) = fluid_reference(&sc);
        let slack = 3.0 * sc.3.len() as f64;
        for full in [false, true] {
            let (ed, eb, ebytes) = on_engine(&sc, full);
            for (i, (e, r)) in ed.iter().zip(&rd).enumerate() {
                prop_assert_eq!(e.is_nan(), r.is_nan(), "flow {} delivered?", i);
                if !r.is_nan() {
                    prop_assert!((e - r).abs() <= slack + 1e-6 * r, "flow {i}: {e} ps, fluid {r}");
                }
            }
            for l in 0..sc.0.len() {
                prop_assert!((eb[l] - rb[l]).abs() <= slack + 1e-6 * rb[l], "link {l} busy {} ps, fluid {}", eb[l], rb[l]);
                prop_assert!((ebytes[l] - rbytes[l]).abs() <= 1e-6 * rbytes[l].max(1.0), "link {l} bytes");
            }
        }
    }
}
