//! Runs a [`Schedule`] on a [`Fabric`]: the same steps the runtime executes,
//! as flows on modeled links.
//!
//! Semantics follow `gpucomm_algo::schedule`: a step starts when its
//! dependencies are done; sends and receives match FIFO per
//! `(sender, receiver, channel)`; a transfer is a rendezvous (both steps
//! complete when the data is delivered). A matched pair becomes a flow at
//! once, delivered after its route's latency plus the per-step overhead of
//! the engine driving it (by path class); local
//! copies and reductions take their bytes over the device's local bandwidth.
//!
//! # Symmetry
//!
//! When the fabric says translating every rank by a period of nodes is an
//! automorphism ([`Fabric::node_orbits`]: one node where nodes are
//! identical, every link owned by one node and the core non-blocking; a
//! leaf's nodes behind oversubscribed leaf uplinks), and the schedule's
//! steps are invariant under the same translation (checked on every rank
//! of the second period and of the last: same kinds, channels and
//! dependencies, peers shifted by the period; lengths may differ by one
//! element, as blocks do when a count does not divide by the rank count),
//! only the ranks of the first period are simulated: a link stands for its
//! whole orbit, a flow for the same flow in every period. Max-min fairness
//! is preserved because the fair allocation of a symmetric network is
//! itself symmetric. This is what makes a 16384-rank ring cheap;
//! [`ExecConfig::symmetry`] turns it off.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use gpucomm_algo::{Schedule, StepKind, StepList};

use crate::engine::{BusySpan, EngineStats, FlowNet, LinkId, Output, PathId};
use crate::fabric::{Fabric, PathClass};
use crate::par::par_map;
use crate::{SimError, SimTime};

/// Software overheads of the engine that runs a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Overheads {
    /// Fixed cost of launching the operation (kernel launch, proxy wake-up).
    pub launch: SimTime,
    /// How long after its last byte leaves a transfer step completes, by
    /// path class: NVLink, PCIe, network; or the route's wire latency if
    /// that is longer. A per-step latency measured end to end (NCCL's
    /// `hwLat`) already holds the wire's, so the two are not added.
    pub step_nvlink: SimTime,
    /// See `step_nvlink`.
    pub step_pcie: SimTime,
    /// See `step_nvlink`.
    pub step_net: SimTime,
    /// Added to every local copy/reduce step.
    pub step_local: SimTime,
}

impl Overheads {
    /// No overhead at all (pure fabric time).
    pub const NONE: Overheads = Overheads {
        launch: SimTime::ZERO,
        step_nvlink: SimTime::ZERO,
        step_pcie: SimTime::ZERO,
        step_net: SimTime::ZERO,
        step_local: SimTime::ZERO,
    };

    fn step(&self, class: PathClass) -> SimTime {
        match class {
            PathClass::Local => self.step_local,
            PathClass::NvLink => self.step_nvlink,
            PathClass::Pcie => self.step_pcie,
            PathClass::Net => self.step_net,
        }
    }
}

/// How to run a schedule.
#[derive(Clone, Debug)]
pub struct ExecConfig {
    /// Software overheads.
    pub overheads: Overheads,
    /// Stop with [`SimError::Limit`] past this simulated time (livelock guard).
    pub time_limit: SimTime,
    /// Stop with [`SimError::Limit`] past this many events.
    pub max_events: u64,
    /// Use node-translation symmetry when the fabric and schedule allow it.
    pub symmetry: bool,
    /// Events closer than this are processed together (a time resolution;
    /// default 0: only identical timestamps, exact).
    pub batch_window: SimTime,
    /// Record per-rank step spans and link busy spans (for Chrome traces)
    /// for ranks below this number (0 = no trace).
    pub trace_ranks: usize,
    /// A limit on each rank's total sending rate, GB/s (a protocol's
    /// bandwidth cap, [`crate::model::ProtocolBandwidth`]): every transfer
    /// a rank sends also crosses a link of this capacity of its own.
    pub send_cap_gbps: Option<f64>,
    /// Bytes on the wire per byte a transfer step moves (a protocol's flags
    /// and line format, [`crate::model::ProtocolBandwidth::factor`]); local
    /// steps are not scaled.
    pub wire_factor: f64,
    /// An NVLink connection starts its next transfer when the previous one
    /// is delivered (its step overhead past its last byte), not when its
    /// last byte leaves: the receiver pulls each slice and posts back
    /// before the next moves (NCCL's Simple protocol with P2P reads,
    /// [`crate::model::nccl_p2p_read`]). Meant for schedules cut at
    /// NCCL's own channels and slices, where a transfer is one slice.
    pub hold_nvlink: bool,
}

impl Default for ExecConfig {
    fn default() -> Self {
        ExecConfig {
            overheads: Overheads::NONE,
            time_limit: SimTime::from_secs_f64(3600.0),
            max_events: 20_000_000_000,
            symmetry: true,
            batch_window: SimTime::from_ps(0),
            trace_ranks: 0,
            send_cap_gbps: None,
            wire_factor: 1.0,
            hold_nvlink: false,
        }
    }
}

/// A span of one rank's activity (for traces).
#[derive(Clone, Debug, PartialEq)]
pub struct RankSpan {
    /// Rank.
    pub rank: usize,
    /// Step index.
    pub step: usize,
    /// `send->5`, `recv<-3`, `copy`.
    pub what: String,
    /// Channel.
    pub channel: u16,
    /// Bytes.
    pub bytes: u64,
    /// Start of the transfer (after overhead) or local op.
    pub start: SimTime,
    /// Completion.
    pub end: SimTime,
}

/// Use of one link in a run.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkUsage {
    /// Link name.
    pub name: String,
    /// Bytes carried (summed over the link's orbit when symmetry was used,
    /// divided by its size: i.e. per link).
    pub bytes: f64,
    /// Time busy.
    pub busy: SimTime,
    /// Capacity in GB/s.
    pub capacity_gbps: f64,
}

/// Which ranks a run simulated, and why ([`ExecResult::symmetry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symmetry {
    /// The first `period` nodes' ranks stood for all (node symmetry; a
    /// leaf's nodes behind oversubscribed leaf uplinks; on one node,
    /// trivially).
    Reduced {
        /// Nodes per period.
        period: usize,
    },
    /// Every rank: the reduction was turned off (`--no-symmetry`, a trace).
    Off,
    /// Every rank: the fabric has no translation symmetry that fits the
    /// ranks (a partial last leaf behind oversubscribed uplinks).
    Fabric,
    /// Every rank: the schedule is not invariant under the fabric's
    /// translation (NCCL's double binary tree, a root).
    Schedule,
}

impl Symmetry {
    /// Why every rank ran, in a few words; `None` when the reduction did.
    ///
    /// ```
    /// use gpucomm_sim::exec::Symmetry;
    /// assert_eq!(Symmetry::Reduced { period: 1 }.why_every_rank(), None);
    /// assert!(Symmetry::Schedule.why_every_rank().unwrap().contains("schedule"));
    /// ```
    pub fn why_every_rank(self) -> Option<&'static str> {
        match self {
            Symmetry::Reduced { .. } => None,
            Symmetry::Off => Some("symmetry reduction off"),
            Symmetry::Fabric => Some("the fabric has no translation symmetry over these ranks"),
            Symmetry::Schedule => Some("the schedule is not the same on every node"),
        }
    }
}

/// The bytes a prepared schedule puts on each link in any run
/// ([`Prepared::link_load`]).
#[derive(Clone, Debug, PartialEq)]
pub struct LinkLoad {
    /// Bytes per fabric link (by [`LinkId`]), at wire factor 1.
    pub link_bytes: Vec<f64>,
    /// The most bytes one simulated rank sends.
    pub max_rank_sent: f64,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct ExecResult {
    /// When the last rank finished.
    pub time: SimTime,
    /// When each simulated rank finished its last step (a rank without
    /// steps: at the launch). Under the symmetry reduction, the first
    /// period's ranks (node 0's, or leaf 0's), which stand for all.
    pub rank_finish: Vec<SimTime>,
    /// When each simulated rank finished each iteration of a
    /// [`Prepared::repeated`] schedule, in order (one per iteration; the
    /// last is its `rank_finish`).
    pub iteration_finish: Vec<Vec<SimTime>>,
    /// Engine counters.
    pub stats: EngineStats,
    /// Ranks actually simulated (fewer than the schedule's with symmetry).
    pub simulated_ranks: usize,
    /// Channels that carried transfers (one past the highest channel of a
    /// simulated rank's send or receive; 0 with none): fewer than the
    /// schedule's where it has fewer pieces than channels.
    pub channels: u16,
    /// Whether the symmetry reduction ran, or why not.
    pub symmetry: Symmetry,
    /// Steps executed (of the simulated ranks).
    pub steps: u64,
    /// Links that carried data, by link id.
    pub links: Vec<LinkUsage>,
    /// Rank spans (only with `trace_ranks`).
    pub rank_spans: Vec<RankSpan>,
    /// Link busy spans (only with `trace_ranks`).
    pub link_spans: Vec<BusySpan>,
}

/// A fast, deterministic hasher for small integer keys (FxHash's multiply-rotate).
#[derive(Default, Clone, Copy)]
struct Fx(u64);
impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}
type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

const K_SEND: u8 = 0;
const K_RECV: u8 = 1;
const K_LOCAL: u8 = 2;
/// The gap between a rank's consecutive iterations ([`Prepared::repeated`]):
/// it starts when the rank's iteration is done and lasts the launch
/// overhead, the next iteration's start.
const K_GAP: u8 = 3;

/// No partner step.
const NO_PARTNER: u32 = u32::MAX;

/// A transfer step is idle, waiting for its partner, or matched.
const S_IDLE: u8 = 0;
const S_WAITING: u8 = 1;
const S_MATCHED: u8 = 2;

#[derive(Clone, Copy)]
struct CStep {
    peer: u32,
    bytes: u64,
    /// For sends and receives: the index of the matching step in the
    /// partner's steps (the partner is simulated rank `peer % g`), or
    /// `NO_PARTNER`.
    partner: u32,
    /// Dependencies (their count).
    deps: u32,
    channel: u16,
    kind: u8,
}

/// What a run changes of a step: dependencies left and matching state.
#[derive(Clone, Copy)]
struct Live {
    deps_left: u32,
    state: u8,
}

/// A rank's transfer steps with one (peer, channel, kind), in order: the
/// FIFO the matching rule pairs with the partner's opposite group.
type Groups = FxMap<(u32, u16, u8), Vec<u32>>;

#[derive(Clone)]
struct RankState {
    steps: Vec<CStep>,
    dep_off: Vec<u32>,
    dependents: Vec<u32>,
    groups: Groups,
}

struct Transfer {
    src: (u32, u32),
    dst: (u32, u32),
    start: SimTime,
    /// Route (and connection) index.
    route: u32,
    bytes: f64,
}

enum Pending {
    Launch,
    Local(u32, u32),
    /// A rank's gap between iterations ([`K_GAP`]) is over.
    Gap(u32, u32),
    /// A transfer's last byte has left; it completes after its route
    /// latency and step overhead.
    Deliver(u32),
}

/// A connection `(sender, receiver, channel)` moves its transfers one after
/// another, in matching order: a transfer's bytes start when the previous
/// transfer's last byte has left (chunks of a pipeline follow each other
/// on the wire instead of sharing it, so the next hop can forward the first
/// chunk while the later ones are still arriving).
#[derive(Default)]
struct Conn {
    busy: bool,
    queue: std::collections::VecDeque<u32>,
}

struct Exec<'a> {
    net: FlowNet,
    /// The prepared steps (shared by every run of a [`Prepared`]).
    ranks: &'a [RankState],
    /// Per rank and step, the run's state.
    live: Vec<Vec<Live>>,
    route_cache: FxMap<(u32, u32, u16), u32>,
    routes: Vec<(PathId, SimTime, PathClass)>,
    /// One connection per route.
    conns: Vec<Conn>,
    transfers: Vec<Transfer>,
    free_transfers: Vec<u32>,
    pending: Vec<Pending>,
    free_pending: Vec<u32>,
    remaining: u64,
    /// Steps left per simulated rank, and when each rank finished.
    rank_left: Vec<u64>,
    rank_finish: Vec<SimTime>,
    /// When each rank finished each iteration but its last.
    iteration_finish: Vec<Vec<SimTime>>,
    fabric: &'a dyn Fabric,
    orbit: Option<&'a [Option<LinkId>]>,
    elem: u64,
    cfg: &'a ExecConfig,
    local_gbps: Vec<f64>,
    /// When each rank's device memory is free of its local steps: they
    /// share it, one after another in the order they become ready (the
    /// chunks of a chain's root would otherwise each copy at the full
    /// rate at once, a 1 GiB broadcast on one GPU in 9 us).
    local_free: Vec<SimTime>,
    spans: Vec<RankSpan>,
    work: Vec<(u32, u32)>,
    /// First of the per-rank sending-limit links, if any.
    send_links: Option<LinkId>,
}

/// Runs `schedule` on `fabric`. The fabric's ranks must equal the schedule's.
///
/// ```
/// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
/// use gpucomm_sim::exec::{ExecConfig, run_schedule};
/// use gpucomm_sim::fabric::Fabric;
/// use gpucomm_sim::machine::{Machine, Engine};
///
/// let m = Machine::preset("dgx-a100").unwrap();
/// let fabric = m.fabric(Engine::Nccl, 1).unwrap();
/// let p = Problem::new(Collective::AllReduce, 1 << 20, fabric.ranks(), fabric.ranks_per_node());
/// let s = Schedule::new(p, Algorithm::Ring).unwrap();
/// let r = run_schedule(&s, &fabric, &ExecConfig::default()).unwrap();
/// assert!(r.time.as_us() > 0.0);
/// ```
pub fn run_schedule(
    schedule: &Schedule,
    fabric: &dyn Fabric,
    cfg: &ExecConfig,
) -> Result<ExecResult, SimError> {
    Prepared::new(schedule, fabric, cfg)?.run(fabric, cfg)
}

/// A schedule made ready to run on a fabric: the steps of the ranks to
/// simulate (every rank, or the first period's under the symmetry
/// reduction: node 0's, or leaf 0's behind oversubscribed leaf uplinks),
/// compacted, with sends paired to receives. Generating the steps is a
/// large part of a run at scale; a prepared schedule runs any number of
/// times, under configurations that differ in overheads, protocol wire
/// factor and caps (the tuner's protocols), without generating them again.
///
/// ```
/// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
/// use gpucomm_sim::exec::{ExecConfig, Prepared};
/// use gpucomm_sim::fabric::Fabric;
/// use gpucomm_sim::machine::{Machine, Engine};
///
/// let fabric = Machine::preset("dgx-a100").unwrap().fabric(Engine::Nccl, 4).unwrap();
/// let p = Problem::new(Collective::AllReduce, 1 << 20, fabric.ranks(), fabric.ranks_per_node());
/// let s = Schedule::new(p, Algorithm::Ring).unwrap();
/// let cfg = ExecConfig::default();
/// let prepared = Prepared::new(&s, &fabric, &cfg).unwrap();
/// assert_eq!(prepared.simulated_ranks(), 8); // node 0 stands for all 4
/// let plain = prepared.run(&fabric, &cfg).unwrap();
/// let flagged = prepared.run(&fabric, &ExecConfig { wire_factor: 2.0, ..cfg }).unwrap();
/// assert!(flagged.time > plain.time);
/// ```
pub struct Prepared {
    ranks: Vec<RankState>,
    orbit: Option<Vec<Option<LinkId>>>,
    symmetry: Symmetry,
    n: usize,
    elem: u64,
    /// Back-to-back iterations of the schedule ([`Prepared::repeated`]).
    iterations: usize,
    /// Channels its transfers use ([`ExecResult::channels`]).
    channels: u16,
}

impl Prepared {
    /// Generates and compacts the steps `cfg` asks to simulate: with
    /// `cfg.symmetry` and no trace, the first period's ranks when the fabric
    /// and the schedule are symmetric under translation by that period
    /// ([`Fabric::node_orbits`]). Ranks are generated on all cores.
    pub fn new(
        schedule: &Schedule,
        fabric: &dyn Fabric,
        cfg: &ExecConfig,
    ) -> Result<Self, SimError> {
        let n = schedule.problem.nranks;
        if n != fabric.ranks() {
            return Err(SimError::RankMismatch {
                schedule: n,
                fabric: fabric.ranks(),
            });
        }
        let rpn = fabric.ranks_per_node().max(1);
        let elem = schedule.problem.elem_size as u64;
        // Each rank's steps are compacted as soon as they are generated
        // (the compact form is a fraction of the size), and the symmetry
        // check compares compact forms.
        let generate = |r: &usize| compact(*r, &schedule.rank_step_list(*r), elem, n);
        // The ranks of one period of the fabric's translation symmetry.
        let mut orbit = None;
        let mut group = n;
        let mut symmetry = if n <= rpn {
            // One node: nothing to reduce, nothing to explain.
            Symmetry::Reduced { period: 1 }
        } else if cfg.symmetry && cfg.trace_ranks == 0 {
            Symmetry::Fabric
        } else {
            Symmetry::Off
        };
        if symmetry == Symmetry::Fabric
            && let Some(o) = fabric.node_orbits()
        {
            let period = o.period.max(1);
            if n % (period * rpn) == 0 && n > period * rpn {
                group = period * rpn;
                orbit = Some(o.rep);
                symmetry = Symmetry::Reduced { period };
            }
        }
        // Ranks compacted so far, by rank.
        let mut have: Vec<(usize, RankState)> = Vec::new();
        if orbit.is_some() {
            // The first period's ranks (simulated either way), then every
            // rank of the second period and of the last against them, a
            // few at a time and dropped once compared (a ring on 16384
            // ranks has half a million steps per rank). Every rank: a tree
            // whose chains all start at one GPU (a quad-GH200 node's
            // NVLink rings) differs between nodes at that head only, and
            // probing the first, middle and last local rank alone took
            // such a tree for node-symmetric (and deadlocked on 2 nodes).
            let locals: Vec<usize> = (0..group).collect();
            for (r, st) in locals.iter().zip(par_map(&locals, generate)) {
                have.push((*r, st?));
            }
            let periods = n / group;
            // Unless the schedule guarantees it
            // ([`Schedule::node_symmetric_by_construction`], checked rank by rank in
            // gpucomm-algo's property tests).
            let mut probe_periods = Vec::new();
            if !schedule.node_symmetric_by_construction(group) {
                probe_periods.push(1);
                if periods > 2 {
                    probe_periods.push(periods - 1);
                }
            }
            let probes: Vec<usize> = probe_periods
                .iter()
                .flat_map(|&p| locals.iter().map(move |&l| p * group + l))
                .collect();
            // A probe is compared as it is generated, with no compact form
            // of its own (4% of a 4-rack NVL72 all_gather sweep's time);
            // its base's dependencies are laid out forward for it (once per
            // probe: kept for every base rank they took as much memory as
            // the ranks).
            let matches = |r: &usize| {
                let l = r % group;
                Forward::of(&have[l].1).matches(&schedule.rank_step_list(*r), *r, r - l, n, elem)
            };
            'probe: for batch in probes.chunks(crate::par::threads().max(1)) {
                if !par_map(batch, matches).into_iter().all(|same| same) {
                    orbit = None;
                    symmetry = Symmetry::Schedule;
                    break 'probe;
                }
            }
        }
        let simulate = if orbit.is_some() { group } else { n };
        // Every run is checked: a few ranks of very many steps (a 2056-rank
        // ring on 64 channels, every rank simulated) need as much as many
        // ranks of a few.
        if simulate > 1 {
            if have.is_empty() {
                have.push((0, generate(&0)?));
            }
            let largest = have
                .iter()
                .map(|(_, st)| st)
                .max_by_key(|st| st.steps.len())
                .expect("a rank generated");
            let why = symmetry
                .why_every_rank()
                .unwrap_or("one period of the fabric's symmetry");
            fits_in_memory(
                simulate,
                largest,
                gpucomm_topo::discover::available_memory(),
                why,
            )?;
        }
        let rest: Vec<usize> = (0..simulate)
            .filter(|r| have.iter().all(|(h, _)| h != r))
            .collect();
        for (r, st) in rest.iter().zip(par_map(&rest, generate)) {
            have.push((*r, st?));
        }
        have.sort_by_key(|(r, _)| *r);
        let mut ranks: Vec<RankState> = have.into_iter().map(|(_, st)| st).collect();
        pair_partners(&mut ranks, n);
        let channels = ranks
            .iter()
            .flat_map(|r| &r.steps)
            .filter(|s| s.kind == K_SEND || s.kind == K_RECV)
            .map(|s| s.channel + 1)
            .max()
            .unwrap_or(0);
        Ok(Prepared {
            ranks,
            orbit,
            symmetry,
            n,
            elem,
            iterations: 1,
            channels,
        })
    }

    /// The schedule run `k` times back to back, as a benchmark loop runs a
    /// collective (nccl-tests' `-n` iterations on one stream): every rank
    /// starts its next iteration when it has finished its own previous one
    /// (its stream's order), one launch overhead later
    /// ([`Overheads::launch`]), whatever the other ranks are doing; the
    /// iterations' transfers pair up in order. A rank that is done early
    /// (the root of a broadcast) thus starts the next iteration while the
    /// others are still in this one. [`ExecResult::iteration_finish`] has
    /// each rank's iterations' ends. `k` is at least 1.
    ///
    /// ```
    /// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
    /// use gpucomm_sim::exec::{ExecConfig, Overheads, Prepared};
    /// use gpucomm_sim::{Engine, Machine, SimTime};
    ///
    /// let fabric = Machine::preset("dgx-h100").unwrap().fabric(Engine::Nccl, 1).unwrap();
    /// let p = Problem::new(Collective::Broadcast { root: 0 }, 1024, 8, 8);
    /// let s = Schedule::new(p, Algorithm::Ring).unwrap();
    /// let cfg = ExecConfig {
    ///     overheads: Overheads { launch: SimTime::from_us(5.0), ..Overheads::NONE },
    ///     ..ExecConfig::default()
    /// };
    /// let once = Prepared::new(&s, &fabric, &cfg).unwrap();
    /// let one = once.run(&fabric, &cfg).unwrap();
    /// let three = once.repeated(3).run(&fabric, &cfg).unwrap();
    /// // Each rank's first iteration ends as in a single run ...
    /// for (f, once) in three.iteration_finish.iter().zip(&one.rank_finish) {
    ///     assert_eq!(f.len(), 3);
    ///     assert_eq!(f[0], *once);
    /// }
    /// // ... and the root, done first, starts its next one before the
    /// // chain's last rank has its data: three take less than three runs.
    /// assert!(three.time < one.time + one.time + one.time);
    /// ```
    pub fn repeated(&self, k: usize) -> Prepared {
        let k = k.max(1);
        let lens: Vec<u32> = self.ranks.iter().map(|r| r.steps.len() as u32).collect();
        let ranks = self
            .ranks
            .iter()
            .map(|rs| repeat_rank(rs, k, &lens))
            .collect();
        Prepared {
            ranks,
            orbit: self.orbit.clone(),
            symmetry: self.symmetry,
            n: self.n,
            elem: self.elem,
            iterations: self.iterations * k,
            channels: self.channels,
        }
    }

    /// Back-to-back iterations of the schedule this runs (1 unless
    /// [`Prepared::repeated`]).
    pub fn iterations(&self) -> usize {
        self.iterations
    }

    /// What every run of this schedule must carry, known before running
    /// it: the bytes each fabric link carries at wire factor 1 (per link,
    /// as [`LinkUsage::bytes`] reports them under the symmetry reduction)
    /// and the most bytes one rank sends. A run under wire factor `w`
    /// takes at least its launch plus `w` times a link's bytes over the
    /// link's capacity, for every link: the tuner skips a candidate whose
    /// bound is above a time already simulated.
    ///
    /// ```
    /// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
    /// use gpucomm_sim::exec::{ExecConfig, Prepared};
    /// use gpucomm_sim::{Engine, Machine};
    ///
    /// let fabric = Machine::preset("dgx-h100").unwrap().fabric(Engine::Nccl, 2).unwrap();
    /// let p = Problem::new(Collective::AllReduce, 1 << 24, 16, 8);
    /// let s = Schedule::new(p, Algorithm::Ring).unwrap().with_channels(8);
    /// let cfg = ExecConfig::default();
    /// let prepared = Prepared::new(&s, &fabric, &cfg).unwrap();
    /// let load = prepared.link_load(&fabric).unwrap();
    /// let run = prepared.run(&fabric, &cfg).unwrap();
    /// for l in &run.links {
    ///     let id = (0..load.link_bytes.len())
    ///         .find(|&i| gpucomm_sim::fabric::Fabric::link_name(&fabric, i as u32) == l.name)
    ///         .unwrap();
    ///     assert!((load.link_bytes[id] - l.bytes).abs() <= 1e-6 * l.bytes);
    /// }
    /// ```
    pub fn link_load(&self, fabric: &dyn Fabric) -> Result<LinkLoad, SimError> {
        let mut link_bytes = vec![0.0; fabric.capacities().len()];
        let mut max_rank_sent = 0.0f64;
        let mut routes: FxMap<(u32, u32, u16), Vec<LinkId>> = HashMap::default();
        for (r, rank) in self.ranks.iter().enumerate() {
            let mut sent = 0.0;
            for st in rank
                .steps
                .iter()
                .filter(|st| st.kind == K_SEND && st.bytes > 0)
            {
                let key = (r as u32, st.peer, st.channel);
                let links = match routes.entry(key) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        let route = fabric.route(r, st.peer as usize, st.channel)?;
                        v.insert(match &self.orbit {
                            None => route.links,
                            Some(orb) => route
                                .links
                                .iter()
                                .filter_map(|&l| orb.get(l as usize).copied().flatten())
                                .collect(),
                        })
                    }
                };
                let b = st.bytes as f64;
                for &l in links.iter() {
                    link_bytes[l as usize] += b;
                }
                sent += b;
            }
            max_rank_sent = max_rank_sent.max(sent);
        }
        Ok(LinkLoad {
            link_bytes,
            max_rank_sent,
        })
    }

    /// Ranks simulated: the first period's (node 0's, or leaf 0's) under the
    /// symmetry reduction, else all.
    pub fn simulated_ranks(&self) -> usize {
        self.ranks.len()
    }

    /// Runs the prepared schedule on `fabric` (the one it was prepared
    /// for) under `cfg`; `cfg.symmetry` and `cfg.trace_ranks` were decided
    /// when it was prepared.
    pub fn run(&self, fabric: &dyn Fabric, cfg: &ExecConfig) -> Result<ExecResult, SimError> {
        if self.n != fabric.ranks() {
            return Err(SimError::RankMismatch {
                schedule: self.n,
                fabric: fabric.ranks(),
            });
        }
        if !(cfg.wire_factor.is_finite() && cfg.wire_factor > 0.0) {
            return Err(SimError::Model(format!(
                "wire factor {} is not a positive number",
                cfg.wire_factor
            )));
        }
        let g = self.ranks.len();
        let mut caps = fabric.capacities();
        // The fabric's links, then one sending limit per simulated rank.
        let fabric_links = caps.len();
        if let Some(cap) = cfg.send_cap_gbps {
            caps.extend(std::iter::repeat_n(cap, g));
        }
        let mut net = FlowNet::new(&caps);
        net.set_batch_window(cfg.batch_window);
        if cfg.trace_ranks > 0 {
            net.record_busy_spans();
        }
        let mut ex = Exec::new(
            net,
            fabric,
            cfg,
            &self.ranks,
            self.orbit.as_deref(),
            self.elem,
        );
        ex.send_links = cfg.send_cap_gbps.map(|_| fabric_links as LinkId);
        let total_steps = ex.remaining;
        let p = ex.alloc_pending(Pending::Launch);
        ex.net.timer(cfg.overheads.launch, u64::from(p));
        let mut out = Vec::new();
        let mut finish = SimTime::ZERO;
        while let Some(t) = ex.net.next_batch(&mut out) {
            if t > cfg.time_limit {
                return Err(SimError::Limit {
                    what: format!("time limit {}", cfg.time_limit),
                    time_us: t.as_us(),
                });
            }
            if ex.net.stats().events > cfg.max_events {
                return Err(SimError::Limit {
                    what: format!("{} events", cfg.max_events),
                    time_us: t.as_us(),
                });
            }
            for &o in &out {
                match o {
                    Output::Timer(tag) => ex.on_timer(tag as u32, t)?,
                    Output::Delivered(tag) => ex.sent(tag as u32, t)?,
                }
            }
            if ex.remaining == 0 {
                finish = t;
            }
        }
        if ex.remaining > 0 {
            let (rank, step) = ex.first_stuck();
            return Err(SimError::Deadlock {
                time_us: ex.net.now().as_us(),
                pending: ex.remaining as usize,
                rank,
                step,
            });
        }
        let links = (0..fabric_links)
            .filter(|&l| ex.net.link_bytes(l as LinkId) > 0.0)
            .map(|l| LinkUsage {
                name: fabric.link_name(l as LinkId),
                bytes: ex.net.link_bytes(l as LinkId),
                busy: ex.net.link_busy(l as LinkId),
                capacity_gbps: caps[l],
            })
            .collect();
        let rank_finish = std::mem::take(&mut ex.rank_finish);
        let mut iteration_finish = std::mem::take(&mut ex.iteration_finish);
        for (f, &last) in iteration_finish.iter_mut().zip(&rank_finish) {
            // A rank without steps has no gaps: it is done with every
            // iteration at the launch.
            f.resize(self.iterations - 1, last);
            f.push(last);
        }
        Ok(ExecResult {
            time: finish,
            rank_finish,
            iteration_finish,
            stats: ex.net.stats(),
            simulated_ranks: g,
            channels: self.channels,
            symmetry: self.symmetry,
            steps: total_steps,
            links,
            link_spans: ex
                .net
                .busy_spans()
                .iter()
                .filter(|s| (s.link as usize) < fabric_links)
                .copied()
                .collect(),
            rank_spans: std::mem::take(&mut ex.spans),
        })
    }
}

/// A compact rank's dependencies step by step (each step's ascending),
/// from its dependents: what a probed rank's generated steps are compared
/// with ([`Forward::matches`]).
struct Forward<'a> {
    base: &'a RankState,
    off: Vec<u32>,
    deps: Vec<u32>,
}

impl<'a> Forward<'a> {
    fn of(rs: &'a RankState) -> Self {
        let n = rs.steps.len();
        let mut off = vec![0u32; n + 1];
        for (i, st) in rs.steps.iter().enumerate() {
            off[i + 1] = off[i] + st.deps;
        }
        let mut fill = off.clone();
        let mut deps = vec![0u32; off[n] as usize];
        for d in 0..n {
            for &i in &rs.dependents[rs.dep_off[d] as usize..rs.dep_off[d + 1] as usize] {
                deps[fill[i as usize] as usize] = d as u32;
                fill[i as usize] += 1;
            }
        }
        Forward {
            base: rs,
            off,
            deps,
        }
    }

    /// True when `other`, the steps of rank `rank`, `shift` ranks after
    /// the base rank, are the base's with peers moved by `shift`: same
    /// kinds, channels and dependencies, lengths equal within one element
    /// (blocks of a count that does not divide by the rank count). What
    /// [`compact`] would refuse in `other` (a peer or a dependency out of
    /// range) differs from the base, which it accepted.
    fn matches(&self, other: &StepList, rank: usize, shift: usize, n: usize, elem: u64) -> bool {
        if other.len() != self.base.steps.len() {
            return false;
        }
        let mut sorted = Vec::new();
        self.base.steps.iter().enumerate().all(|(i, x)| {
            let step = other.kind(i);
            let want = &self.deps[self.off[i] as usize..self.off[i + 1] as usize];
            let deps = other.deps(i);
            let same_deps = if deps.is_sorted() {
                deps == want
            } else {
                sorted.clear();
                sorted.extend_from_slice(deps);
                sorted.sort_unstable();
                sorted == want
            };
            kind_class(step) == x.kind
                && other.channel(i) == x.channel
                && (step.len() as u64 * elem).abs_diff(x.bytes) <= elem
                && (x.peer as usize + shift) % n == step.peer().unwrap_or(rank)
                && same_deps
        })
    }
}

/// A step's kind as a run tells them apart.
fn kind_class(step: &StepKind) -> u8 {
    match step {
        StepKind::Send { .. } => K_SEND,
        StepKind::Recv { .. } | StepKind::RecvReduce { .. } => K_RECV,
        StepKind::Copy { .. } | StepKind::Reduce { .. } => K_LOCAL,
    }
}

/// Memory a run takes per byte of its ranks' steps ([`RankState::bytes`]),
/// and per simulated rank besides: the transfers, routes, connections and
/// flows it keeps, the fabric's per-rank state. Measured (peak resident
/// memory, `/usr/bin/time`, tree all_reduce on DGX H100 nodes): 16384
/// ranks of 276 steps (14.2 kB each) 420 MB, 8192 of them 213 MB, 16384
/// ranks of 8 steps (0.7 kB) 71 MB; on DGX A100 nodes 8192 ranks of 552
/// steps (26.2 kB, Simple, 128 MiB) 325 MB: 1.5-1.8 times the steps, and
/// 3.6 kB per rank where the steps are few.
const RUN_BYTES_PER_STEP_BYTE: f64 = 2.0;
/// See [`RUN_BYTES_PER_STEP_BYTE`]: the per-rank part.
const RUN_BYTES_PER_RANK: f64 = 4096.0;

impl RankState {
    /// Heap bytes of this rank's steps, with the state a run keeps per
    /// step ([`Live`]).
    fn bytes(&self) -> usize {
        use std::mem::size_of;
        let groups: usize = self
            .groups
            .values()
            .map(|v| v.capacity() * size_of::<u32>() + size_of::<((u32, u16, u8), Vec<u32>)>())
            .sum();
        self.steps.capacity() * size_of::<CStep>()
            + self.steps.len() * size_of::<Live>()
            + (self.dep_off.capacity() + self.dependents.capacity()) * size_of::<u32>()
            + groups
    }
}

/// Whether `ranks` ranks like `largest` fit in `available` bytes of memory
/// (unknown: assumed to), else [`SimError::TooLarge`]: a run that would be
/// killed for memory part way is refused before it starts.
fn fits_in_memory(
    ranks: usize,
    largest: &RankState,
    available: Option<u64>,
    why: &'static str,
) -> Result<(), SimError> {
    let need =
        ranks as f64 * (largest.bytes() as f64 * RUN_BYTES_PER_STEP_BYTE + RUN_BYTES_PER_RANK);
    match available {
        Some(avail) if need > avail as f64 => Err(SimError::TooLarge {
            ranks,
            why,
            steps: largest.steps.len(),
            need_gib: need / GIB,
            available_gib: avail as f64 / GIB,
        }),
        _ => Ok(()),
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// Pairs every send with its receive before the run: the `k`-th send from
/// `a` to `b` on channel `c` meets the `k`-th receive of `b` from `a` on
/// `c`. With `g` simulated ranks of `n` (node symmetry, `g` divides `n`), a
/// step's partner is simulated rank `peer % g`, and its own peer there is
/// this rank moved back by the peer's node. Steps left without a partner
/// wait forever (reported as a deadlock).
fn pair_partners(ranks: &mut [RankState], n: usize) {
    let g = ranks.len();
    for r in 0..g {
        let groups = std::mem::take(&mut ranks[r].groups);
        for (&(peer, ch, kind), mine) in &groups {
            let q = peer as usize % g;
            let back = (r + n - (peer as usize / g) * g) % n;
            let opposite = if kind == K_SEND { K_RECV } else { K_SEND };
            let theirs: &[u32] = if q == r {
                groups
                    .get(&(back as u32, ch, opposite))
                    .map_or(&[], |v| v.as_slice())
            } else {
                ranks[q]
                    .groups
                    .get(&(back as u32, ch, opposite))
                    .map_or(&[], |v| v.as_slice())
            };
            let pairs: Vec<(u32, u32)> = mine.iter().copied().zip(theirs.iter().copied()).collect();
            for (a, b) in pairs {
                ranks[r].steps[a as usize].partner = b;
            }
        }
        ranks[r].groups = groups;
    }
    for rs in ranks.iter_mut() {
        rs.groups = Groups::default();
    }
}

/// `rs`'s steps `k` times, paired as they are (`lens`: every simulated
/// rank's step count, to move partners into their iteration), with a
/// [`K_GAP`] step between iterations that waits for the iteration's last
/// steps (those nothing depends on) and that the next iteration's first
/// steps (those depending on nothing) wait for. A rank without steps stays
/// without.
fn repeat_rank(rs: &RankState, k: usize, lens: &[u32]) -> RankState {
    let n = rs.steps.len();
    if n == 0 || k == 1 {
        return rs.clone();
    }
    let block = n as u32 + 1;
    let sinks: Vec<u32> = (0..n as u32)
        .filter(|&i| rs.dep_off[i as usize] == rs.dep_off[i as usize + 1])
        .collect();
    let sources: Vec<u32> = (0..n as u32)
        .filter(|&i| rs.steps[i as usize].deps == 0)
        .collect();
    let total = k * n + (k - 1);
    let mut steps = Vec::with_capacity(total);
    let mut dep_off = Vec::with_capacity(total + 1);
    let mut dependents = Vec::with_capacity(k * rs.dependents.len() + 2 * (k - 1) * n);
    dep_off.push(0u32);
    let g = lens.len() as u32;
    for j in 0..k as u32 {
        let base = j * block;
        for i in 0..n {
            let mut st = rs.steps[i];
            if st.partner != NO_PARTNER {
                st.partner += j * (lens[(st.peer % g) as usize] + 1);
            }
            if j > 0 && st.deps == 0 {
                st.deps = 1;
            }
            steps.push(st);
            let (a, b) = (rs.dep_off[i] as usize, rs.dep_off[i + 1] as usize);
            dependents.extend(rs.dependents[a..b].iter().map(|&d| base + d));
            if a == b && (j as usize) < k - 1 {
                dependents.push(base + n as u32);
            }
            dep_off.push(dependents.len() as u32);
        }
        if (j as usize) < k - 1 {
            steps.push(CStep {
                peer: 0,
                bytes: 0,
                partner: NO_PARTNER,
                deps: sinks.len() as u32,
                channel: 0,
                kind: K_GAP,
            });
            dependents.extend(sources.iter().map(|&i| base + block + i));
            dep_off.push(dependents.len() as u32);
        }
    }
    RankState {
        steps,
        dep_off,
        dependents,
        groups: Groups::default(),
    }
}

fn compact(rank: usize, steps: &StepList, elem: u64, n: usize) -> Result<RankState, SimError> {
    let mut groups = Groups::default();
    let mut out = Vec::with_capacity(steps.len());
    let mut counts = vec![0u32; steps.len() + 1];
    for i in 0..steps.len() {
        let step = steps.kind(i);
        let kind = kind_class(step);
        let peer = step.peer().unwrap_or(rank);
        if peer >= n {
            return Err(SimError::Malformed {
                rank,
                step: i,
                why: format!("peer {peer} out of range ({n} ranks)"),
            });
        }
        let channel = steps.channel(i);
        if kind != K_LOCAL {
            groups
                .entry((peer as u32, channel, kind))
                .or_default()
                .push(i as u32);
        }
        let deps = steps.deps(i);
        for &d in deps {
            if d as usize >= i {
                return Err(SimError::Malformed {
                    rank,
                    step: i,
                    why: format!("depends on step {d}, not an earlier one"),
                });
            }
            counts[d as usize] += 1;
        }
        out.push(CStep {
            peer: peer as u32,
            bytes: step.len() as u64 * elem,
            partner: NO_PARTNER,
            deps: deps.len() as u32,
            channel,
            kind,
        });
    }
    // CSR of dependents.
    let mut dep_off = vec![0u32; steps.len() + 1];
    for i in 0..steps.len() {
        dep_off[i + 1] = dep_off[i] + counts[i];
    }
    let mut fill = dep_off.clone();
    let mut dependents = vec![0u32; dep_off[steps.len()] as usize];
    for i in 0..steps.len() {
        for &d in steps.deps(i) {
            dependents[fill[d as usize] as usize] = i as u32;
            fill[d as usize] += 1;
        }
    }
    Ok(RankState {
        steps: out,
        dep_off,
        dependents,
        groups,
    })
}

impl<'a> Exec<'a> {
    /// An executor of the simulated ranks `ranks`, paired.
    fn new(
        net: FlowNet,
        fabric: &'a dyn Fabric,
        cfg: &'a ExecConfig,
        ranks: &'a [RankState],
        orbit: Option<&'a [Option<LinkId>]>,
        elem: u64,
    ) -> Self {
        let g = ranks.len();
        let live: Vec<Vec<Live>> = ranks
            .iter()
            .map(|r| {
                r.steps
                    .iter()
                    .map(|st| Live {
                        deps_left: st.deps,
                        state: S_IDLE,
                    })
                    .collect()
            })
            .collect();
        Exec {
            net,
            ranks,
            route_cache: FxMap::default(),
            routes: Vec::new(),
            conns: Vec::new(),
            transfers: Vec::new(),
            free_transfers: Vec::new(),
            pending: Vec::new(),
            free_pending: Vec::new(),
            remaining: live.iter().map(|l| l.len() as u64).sum(),
            rank_left: live.iter().map(|l| l.len() as u64).collect(),
            // A rank without steps is done when the operation is launched.
            rank_finish: vec![cfg.overheads.launch; live.len()],
            iteration_finish: vec![Vec::new(); live.len()],
            live,
            fabric,
            orbit,
            elem,
            cfg,
            local_gbps: (0..g).map(|r| fabric.local_gbps(r).max(1e-9)).collect(),
            local_free: vec![SimTime::ZERO; g],
            spans: Vec::new(),
            work: Vec::new(),
            send_links: None,
        }
    }
}

impl Exec<'_> {
    #[cfg(test)]
    fn alloc_pending_launch(&mut self) -> u32 {
        self.alloc_pending(Pending::Launch)
    }

    fn alloc_pending(&mut self, p: Pending) -> u32 {
        match self.free_pending.pop() {
            Some(i) => {
                self.pending[i as usize] = p;
                i
            }
            None => {
                self.pending.push(p);
                (self.pending.len() - 1) as u32
            }
        }
    }

    fn on_timer(&mut self, tag: u32, t: SimTime) -> Result<(), SimError> {
        let p = std::mem::replace(&mut self.pending[tag as usize], Pending::Launch);
        self.free_pending.push(tag);
        match p {
            Pending::Launch => {
                for r in 0..self.ranks.len() {
                    for s in 0..self.ranks[r].steps.len() {
                        if self.live[r][s].deps_left == 0 {
                            self.ready(r as u32, s as u32, t)?;
                        }
                    }
                }
            }
            Pending::Deliver(ti) => self.delivered(ti, t)?,
            Pending::Gap(r, s) => self.complete(r, s, t)?,
            Pending::Local(r, s) => {
                if self.cfg.trace_ranks > r as usize {
                    let st = self.ranks[r as usize].steps[s as usize];
                    let dur = self.cfg.overheads.step_local
                        + SimTime::from_secs_f64(
                            st.bytes as f64 / (self.local_gbps[r as usize] * 1e9),
                        );
                    self.spans.push(RankSpan {
                        rank: r as usize,
                        step: s as usize,
                        what: "local".into(),
                        channel: st.channel,
                        bytes: st.bytes,
                        start: t - dur,
                        end: t,
                    });
                }
                self.complete(r, s, t)?;
            }
        }
        Ok(())
    }

    /// Step `s` of simulated rank `r` has all its dependencies done at `t`.
    fn ready(&mut self, r: u32, s: u32, t: SimTime) -> Result<(), SimError> {
        let st = self.ranks[r as usize].steps[s as usize];
        let g = self.ranks.len() as u32;
        match st.kind {
            K_LOCAL => {
                let dur = self.cfg.overheads.step_local
                    + SimTime::from_secs_f64(st.bytes as f64 / (self.local_gbps[r as usize] * 1e9));
                let end = t.max(self.local_free[r as usize]) + dur;
                self.local_free[r as usize] = end;
                let p = self.alloc_pending(Pending::Local(r, s));
                self.net.timer(end, u64::from(p));
            }
            K_GAP => {
                self.iteration_finish[r as usize].push(t);
                let p = self.alloc_pending(Pending::Gap(r, s));
                self.net.timer(t + self.cfg.overheads.launch, u64::from(p));
            }
            _ => {
                let (r2, s2) = (st.peer % g, st.partner);
                let partner_waiting =
                    s2 != NO_PARTNER && self.live[r2 as usize][s2 as usize].state == S_WAITING;
                match partner_waiting {
                    false => {
                        self.live[r as usize][s as usize].state = S_WAITING;
                    }
                    true => {
                        self.live[r as usize][s as usize].state = S_MATCHED;
                        self.live[r2 as usize][s2 as usize].state = S_MATCHED;
                        let ((sr, ss), (dr, ds)) = if st.kind == K_SEND {
                            ((r, s), (r2, s2))
                        } else {
                            ((r2, s2), (r, s))
                        };
                        let send = self.ranks[sr as usize].steps[ss as usize];
                        let recv = self.ranks[dr as usize].steps[ds as usize];
                        if send.kind != K_SEND || recv.kind != K_RECV {
                            return Err(SimError::Malformed {
                                rank: r as usize,
                                step: s as usize,
                                why: "send matched with a send".into(),
                            });
                        }
                        // Under symmetry a representative stands for ranks whose
                        // blocks may differ by one element (counts not divisible
                        // by the rank count).
                        let slack = if self.orbit.is_some() { self.elem } else { 0 };
                        if send.bytes.abs_diff(recv.bytes) > slack {
                            return Err(SimError::Malformed {
                                rank: dr as usize,
                                step: ds as usize,
                                why: format!(
                                    "receives {} bytes but rank {} step {} sends {}",
                                    recv.bytes, sr, ss, send.bytes
                                ),
                            });
                        }
                        // Global destination of the sender's transfer.
                        let dst_global = send.peer;
                        let route = self.route(sr, dst_global, send.channel)?;
                        let tr = Transfer {
                            src: (sr, ss),
                            dst: (dr, ds),
                            start: t,
                            route,
                            bytes: send.bytes as f64 * self.cfg.wire_factor,
                        };
                        let ti = match self.free_transfers.pop() {
                            Some(i) => {
                                self.transfers[i as usize] = tr;
                                i
                            }
                            None => {
                                self.transfers.push(tr);
                                (self.transfers.len() - 1) as u32
                            }
                        };
                        let conn = &mut self.conns[route as usize];
                        if conn.busy {
                            conn.queue.push_back(ti);
                        } else {
                            conn.busy = true;
                            self.start_transfer(ti);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Starts the bytes of transfer `ti` on its route.
    fn start_transfer(&mut self, ti: u32) {
        let tr = &self.transfers[ti as usize];
        let (path, _, _) = self.routes[tr.route as usize];
        self.net
            .start_flow_on(path, tr.bytes, SimTime::ZERO, u64::from(ti));
    }

    /// The last byte of transfer `ti` has left at `t`: its connection takes
    /// the next transfer (or, held, when this one is delivered), and it
    /// completes after the step's overhead or the route's latency,
    /// whichever is longer ([`Overheads::step_nvlink`]).
    fn sent(&mut self, ti: u32, t: SimTime) -> Result<(), SimError> {
        let route = self.transfers[ti as usize].route;
        if !self.held(route) {
            self.next_on(route, t);
        }
        let (_, lat, class) = &self.routes[route as usize];
        let delay = (*lat).max(self.cfg.overheads.step(*class));
        if delay == SimTime::ZERO {
            return self.delivered(ti, t);
        }
        let p = self.alloc_pending(Pending::Deliver(ti));
        self.net.timer(t + delay, u64::from(p));
        Ok(())
    }

    /// Whether `route`'s connection waits for a transfer's delivery before
    /// it starts the next ([`ExecConfig::hold_nvlink`]).
    fn held(&self, route: u32) -> bool {
        self.cfg.hold_nvlink && self.routes[route as usize].2 == PathClass::NvLink
    }

    /// `route`'s connection is free at `t`: it starts its next transfer.
    fn next_on(&mut self, route: u32, t: SimTime) {
        let conn = &mut self.conns[route as usize];
        match conn.queue.pop_front() {
            Some(next) => {
                self.transfers[next as usize].start = t;
                self.start_transfer(next);
            }
            None => conn.busy = false,
        }
    }

    /// Transfer `ti` is delivered at `t`: both its steps are done.
    fn delivered(&mut self, ti: u32, t: SimTime) -> Result<(), SimError> {
        let tr = &self.transfers[ti as usize];
        let (src, dst, route) = (tr.src, tr.dst, tr.route);
        if self.cfg.trace_ranks > 0 {
            self.trace_transfer(ti, t);
        }
        self.free_transfers.push(ti);
        if self.held(route) {
            self.next_on(route, t);
        }
        self.complete(src.0, src.1, t)?;
        self.complete(dst.0, dst.1, t)
    }

    fn route(&mut self, src: u32, dst: u32, ch: u16) -> Result<u32, SimError> {
        if let Some(&r) = self.route_cache.get(&(src, dst, ch)) {
            return Ok(r);
        }
        let route = self.fabric.route(src as usize, dst as usize, ch)?;
        let class = route.class.unwrap_or(PathClass::Local);
        let mut links = match self.orbit {
            None => route.links,
            Some(orb) => route
                .links
                .iter()
                .map(|&l| {
                    orb.get(l as usize).copied().flatten().ok_or_else(|| {
                        SimError::Model(format!(
                            "link {} has no orbit representative",
                            self.fabric.link_name(l)
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        if let Some(base) = self.send_links {
            links.push(base + src);
        }
        let path = self.net.path(&links);
        self.routes.push((path, route.latency, class));
        self.conns.push(Conn::default());
        let id = (self.routes.len() - 1) as u32;
        self.route_cache.insert((src, dst, ch), id);
        Ok(id)
    }

    fn complete(&mut self, r: u32, s: u32, t: SimTime) -> Result<(), SimError> {
        self.work.push((r, s));
        while let Some((r, s)) = self.work.pop() {
            self.remaining -= 1;
            self.rank_left[r as usize] -= 1;
            if self.rank_left[r as usize] == 0 {
                self.rank_finish[r as usize] = t;
            }
            let (a, b) = {
                let rs = &self.ranks[r as usize];
                (rs.dep_off[s as usize], rs.dep_off[s as usize + 1])
            };
            for k in a..b {
                let d = self.ranks[r as usize].dependents[k as usize];
                let st = &mut self.live[r as usize][d as usize];
                st.deps_left -= 1;
                if st.deps_left == 0 {
                    self.ready(r, d, t)?;
                }
            }
        }
        Ok(())
    }

    fn trace_transfer(&mut self, tag: u32, t: SimTime) {
        let tr = &self.transfers[tag as usize];
        let lim = self.cfg.trace_ranks;
        for (rank, step, send) in [(tr.src.0, tr.src.1, true), (tr.dst.0, tr.dst.1, false)] {
            if (rank as usize) < lim {
                let st = self.ranks[rank as usize].steps[step as usize];
                self.spans.push(RankSpan {
                    rank: rank as usize,
                    step: step as usize,
                    what: if send {
                        format!("send->{}", st.peer)
                    } else {
                        format!("recv<-{}", st.peer)
                    },
                    channel: st.channel,
                    bytes: st.bytes,
                    start: tr.start,
                    end: t,
                });
            }
        }
    }

    fn first_stuck(&self) -> (usize, usize) {
        // A step waiting for its partner, else one waiting for a dependency.
        for (r, rs) in self.live.iter().enumerate() {
            if let Some(s) = rs.iter().position(|st| st.state == S_WAITING) {
                return (r, s);
            }
        }
        for (r, rs) in self.live.iter().enumerate() {
            if let Some(s) = rs.iter().position(|st| st.deps_left > 0) {
                return (r, s);
            }
        }
        (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::Route;
    use gpucomm_algo::{Algorithm, Buf, Collective, Problem, Slice, Step};

    /// `n` ranks on a ring of 1 GB/s links (rank r -> r+1 uses link r), 1 us each.
    struct RingFabric(usize);
    impl Fabric for RingFabric {
        fn ranks(&self) -> usize {
            self.0
        }
        fn ranks_per_node(&self) -> usize {
            self.0
        }
        fn capacities(&self) -> Vec<f64> {
            vec![1.0; self.0]
        }
        fn link_name(&self, l: LinkId) -> String {
            format!("l{l}")
        }
        fn route(&self, src: usize, dst: usize, _ch: u16) -> Result<Route, SimError> {
            // Walk forward around the ring.
            let mut links = Vec::new();
            let mut r = src;
            while r != dst {
                links.push(r as LinkId);
                r = (r + 1) % self.0;
            }
            let latency = SimTime::from_us(links.len() as f64);
            Ok(Route {
                links,
                latency,
                class: Some(PathClass::NvLink),
            })
        }
        fn local_gbps(&self, _: usize) -> f64 {
            1.0
        }
    }

    #[test]
    fn a_run_beyond_memory_is_refused_before_it_starts() {
        let p = Problem::new(Collective::AllReduce, 4000, 4, 4);
        let s = Schedule::new(p, Algorithm::Ring).unwrap();
        let rank = compact(0, &s.rank_step_list(0), 4, 4).unwrap();
        let per_rank = rank.bytes() as f64 * RUN_BYTES_PER_STEP_BYTE + RUN_BYTES_PER_RANK;
        // A million such ranks need a million times a rank's share.
        let ranks = 1_000_000;
        let need = (ranks as f64 * per_rank) as u64;
        let why = Symmetry::Schedule.why_every_rank().unwrap();
        assert!(fits_in_memory(ranks, &rank, Some(need + 1), why).is_ok());
        assert!(
            fits_in_memory(ranks, &rank, None, why).is_ok(),
            "unknown: runs"
        );
        let e = fits_in_memory(ranks, &rank, Some(need / 2), why).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("1000000 ranks") && msg.contains("GiB") && msg.contains(why),
            "{msg}"
        );
        let SimError::TooLarge {
            ranks: r,
            steps,
            need_gib,
            available_gib,
            ..
        } = e
        else {
            panic!("{e:?}")
        };
        assert_eq!((r, steps), (ranks, rank.steps.len()));
        assert!((need_gib / available_gib - 2.0).abs() < 1e-6);
        // A rank's steps count in its bytes.
        assert!(rank.bytes() >= rank.steps.len() * std::mem::size_of::<CStep>());
    }

    #[test]
    fn ring_all_reduce_time_matches_hand_computation() {
        // 4 ranks, 4000 f32 = 16000 B; ring: 2*(n-1) = 6 steps of 4000 B at
        // 1 GB/s (4 us), then the step's 1.5 us overhead, which holds the
        // 1 us wire latency: 5.5 us each.
        let p = Problem::new(Collective::AllReduce, 4000, 4, 4);
        let s = Schedule::new(p, Algorithm::Ring).unwrap();
        let with = |us| ExecConfig {
            overheads: Overheads {
                step_nvlink: SimTime::from_us(us),
                ..Overheads::NONE
            },
            ..ExecConfig::default()
        };
        let cfg = with(1.5);
        let r = run_schedule(&s, &RingFabric(4), &cfg).unwrap();
        assert!((r.time.as_us() - 6.0 * 5.5).abs() < 1e-3, "{}", r.time);
        // An overhead below the wire latency leaves the latency.
        let short = run_schedule(&s, &RingFabric(4), &with(0.5)).unwrap();
        assert!(
            (short.time.as_us() - 6.0 * 5.0).abs() < 1e-3,
            "{}",
            short.time
        );
        assert_eq!(r.stats.flows, 4 * 6);
        // Deterministic.
        let r2 = run_schedule(&s, &RingFabric(4), &cfg).unwrap();
        assert_eq!(r.time, r2.time);
        assert_eq!(r.stats, r2.stats);
    }

    #[test]
    fn a_held_connection_takes_its_next_slice_once_the_last_is_delivered() {
        // 4 ranks, blocks of 4000 B cut in two 2000 B slices (2 us at
        // 1 GB/s), step overhead 1.5 us: 6 rounds x 2 slices per
        // connection. Streaming, a connection sends its 12 slices back to
        // back and the last is delivered 1.5 us after it leaves: 25.5 us.
        // Held, each slice waits for the last one's delivery: 12 x 3.5 us.
        let p = Problem::new(Collective::AllReduce, 4000, 4, 4);
        let s = Schedule::new(p, Algorithm::Ring)
            .unwrap()
            .with_chunk_elems(500);
        let cfg = |hold_nvlink| ExecConfig {
            overheads: Overheads {
                step_nvlink: SimTime::from_us(1.5),
                ..Overheads::NONE
            },
            hold_nvlink,
            ..ExecConfig::default()
        };
        let streaming = run_schedule(&s, &RingFabric(4), &cfg(false)).unwrap();
        let held = run_schedule(&s, &RingFabric(4), &cfg(true)).unwrap();
        assert!(
            (streaming.time.as_us() - 25.5).abs() < 1e-3,
            "{}",
            streaming.time
        );
        assert!((held.time.as_us() - 42.0).abs() < 1e-3, "{}", held.time);
        assert_eq!(held.stats.flows, 4 * 12);
        // Every rank's finish is recorded, the last one's is the run's.
        assert_eq!(held.rank_finish.len(), 4);
        assert_eq!(held.rank_finish.iter().max(), Some(&held.time));
        assert!(held.rank_finish.iter().all(|&t| t > SimTime::ZERO));
    }

    #[test]
    fn wrong_rank_count_and_time_limit_are_errors() {
        let p = Problem::new(Collective::AllReduce, 4000, 4, 4);
        let s = Schedule::new(p, Algorithm::Ring).unwrap();
        assert!(matches!(
            run_schedule(&s, &RingFabric(3), &ExecConfig::default()),
            Err(SimError::RankMismatch { .. })
        ));
        // Virtual-time bound: a 1 us limit stops a 33 us run.
        let cfg = ExecConfig {
            time_limit: SimTime::from_us(1.0),
            ..ExecConfig::default()
        };
        let cfg = ExecConfig {
            overheads: Overheads {
                launch: SimTime::from_us(0.1),
                ..Overheads::NONE
            },
            ..cfg
        };
        assert!(matches!(
            run_schedule(&s, &RingFabric(4), &cfg),
            Err(SimError::Limit { .. })
        ));
        let cfg = ExecConfig {
            max_events: 3,
            ..ExecConfig::default()
        };
        assert!(matches!(
            run_schedule(&s, &RingFabric(4), &cfg),
            Err(SimError::Limit { .. })
        ));
    }

    #[test]
    fn deadlock_and_malformed_steps_are_reported() {
        // Rank 0 receives from 1 first and rank 1 receives from 0 first,
        // each send depending on its receive: a cycle.
        let recv = |peer| Step {
            kind: StepKind::Recv {
                peer,
                dst: Slice::new(Buf::Output, 0, 4),
            },
            channel: 0,
            deps: vec![],
        };
        let send = |peer| Step {
            kind: StepKind::Send {
                peer,
                src: Slice::new(Buf::Input, 0, 4),
            },
            channel: 0,
            deps: vec![0],
        };
        let mut states = [
            compact(0, &StepList::from_steps(&[recv(1), send(1)]), 4, 2).unwrap(),
            compact(1, &StepList::from_steps(&[recv(0), send(0)]), 4, 2).unwrap(),
        ];
        assert_eq!(states[0].steps.len(), 2);
        // A dependency on a later step is malformed.
        let bad = Step {
            deps: vec![1],
            ..recv(1)
        };
        assert!(matches!(
            compact(0, &StepList::from_steps(&[bad]), 4, 2),
            Err(SimError::Malformed { .. })
        ));
        let far = recv(7);
        assert!(matches!(
            compact(0, &StepList::from_steps(&[far]), 4, 2),
            Err(SimError::Malformed { .. })
        ));
        // Run the cyclic pair through the executor's matching directly.
        let fabric = RingFabric(2);
        let cfg = ExecConfig::default();
        pair_partners(&mut states, 2);
        let mut ex = Exec::new(
            FlowNet::new(&fabric.capacities()),
            &fabric,
            &cfg,
            &states,
            None,
            4,
        );
        assert_eq!(ex.remaining, 4);
        let launch = ex.alloc_pending_launch();
        ex.on_timer(launch, SimTime::ZERO).unwrap();
        let mut out = Vec::new();
        while ex.net.next_batch(&mut out).is_some() {}
        assert_eq!(ex.remaining, 4, "nothing can run");
        assert_eq!(ex.first_stuck(), (0, 0));
    }

    #[test]
    fn sends_pair_with_receives_in_order_and_a_lone_send_waits() {
        // Rank 0 sends twice to rank 1 on channel 0; rank 1 receives once:
        // the first send pairs with the receive, the second has no partner.
        let send = Step {
            kind: StepKind::Send {
                peer: 1,
                src: Slice::new(Buf::Input, 0, 4),
            },
            channel: 0,
            deps: vec![],
        };
        let recv = Step {
            kind: StepKind::Recv {
                peer: 0,
                dst: Slice::new(Buf::Output, 0, 4),
            },
            channel: 0,
            deps: vec![],
        };
        let fabric = RingFabric(2);
        let cfg = ExecConfig::default();
        let mut ranks = vec![
            compact(0, &StepList::from_steps(&[send.clone(), send]), 4, 2).unwrap(),
            compact(1, &StepList::from_steps(&[recv]), 4, 2).unwrap(),
        ];
        pair_partners(&mut ranks, 2);
        let mut ex = Exec::new(
            FlowNet::new(&fabric.capacities()),
            &fabric,
            &cfg,
            &ranks,
            None,
            4,
        );
        assert_eq!(ex.remaining, 3);
        assert_eq!(ex.ranks[0].steps[0].partner, 0);
        assert_eq!(ex.ranks[0].steps[1].partner, NO_PARTNER);
        assert_eq!(ex.ranks[1].steps[0].partner, 0);
        let launch = ex.alloc_pending_launch();
        ex.on_timer(launch, SimTime::ZERO).unwrap();
        assert_eq!(ex.net.active_flows(), 1, "the pair became a flow");
        assert_eq!(ex.first_stuck(), (0, 1));
    }

    /// `nodes` DGX A100 nodes.
    fn a100(nodes: usize) -> crate::machine::ClusterFabric {
        use crate::machine::{Engine, Machine};
        Machine::preset("dgx-a100")
            .unwrap()
            .fabric(Engine::Nccl, nodes)
            .unwrap()
    }

    /// `s` on `f` with the symmetry reduction where it applies, and with
    /// every rank simulated.
    fn reduced_and_full(s: &Schedule, f: &dyn Fabric) -> (ExecResult, ExecResult) {
        let full = ExecConfig {
            symmetry: false,
            ..ExecConfig::default()
        };
        (
            run_schedule(s, f, &ExecConfig::default()).unwrap(),
            run_schedule(s, f, &full).unwrap(),
        )
    }

    /// An all_reduce of 4 Mi elements on every rank of `f`.
    fn all_reduce_4m(f: &dyn Fabric, algorithm: Algorithm, channels: u16) -> Schedule {
        let p = Problem::new(
            Collective::AllReduce,
            1 << 22,
            f.ranks(),
            f.ranks_per_node(),
        );
        Schedule::new(p, algorithm).unwrap().with_channels(channels)
    }

    #[test]
    fn symmetry_reduction_equals_full_simulation() {
        let f = a100(4);
        let s = all_reduce_4m(&f, Algorithm::Ring, 8);
        let (sym, full) = reduced_and_full(&s, &f);
        assert_eq!(sym.simulated_ranks, 8);
        assert_eq!(full.simulated_ranks, 32);
        assert_eq!(sym.time, full.time);
    }

    #[test]
    fn a_ring_with_empty_pieces_on_some_nodes_is_still_reduced() {
        // 40 elements over 24 ranks: blocks of 2 and of 1, cut in two
        // pieces (two channels), so a rank's piece 1 is empty in some
        // rounds and not in others, in a different order on every node.
        // The dependencies must not change with that (the all-gather's
        // receives wait for the reduce-scatter explicitly), or every rank
        // is simulated (a 2056-rank ring at 64 KiB: 47 s instead of 0.1).
        let f = a100(3);
        let p = Problem::new(Collective::AllReduce, 40, 24, 8);
        let s = Schedule::new(p, Algorithm::Ring).unwrap().with_channels(2);
        let (reduced, every) = reduced_and_full(&s, &f);
        assert_eq!(reduced.symmetry, Symmetry::Reduced { period: 1 });
        assert_eq!((reduced.simulated_ranks, every.simulated_ranks), (8, 24));
        // Node 0's lengths stand for every node's (one element apart).
        let (a, b) = (reduced.time.as_us(), every.time.as_us());
        assert!((a - b).abs() <= 0.01 * b, "{a} vs {b} us");
    }

    #[test]
    fn a_probed_rank_matches_its_base_shifted_by_their_distance_only() {
        // The probe compares a rank's generated steps with the compact
        // form of the rank one or more nodes before it.
        let f = a100(3);
        let elem = 4;
        let ring = all_reduce_4m(&f, Algorithm::Ring, 2);
        let base = compact(1, &ring.rank_step_list(1), elem, 24).unwrap();
        let fwd = Forward::of(&base);
        // Its dependencies, step by step, are what it was compacted from.
        let own = ring.rank_step_list(1);
        for i in 0..own.len() {
            let want = &fwd.deps[fwd.off[i] as usize..fwd.off[i + 1] as usize];
            assert_eq!(want, own.deps(i), "step {i}");
        }
        assert!(fwd.matches(&own, 1, 0, 24, elem));
        // Ring ranks 9 and 17 are rank 1 moved by one and two nodes ...
        for r in [9, 17] {
            assert!(fwd.matches(&ring.rank_step_list(r), r, r - 1, 24, elem));
        }
        // ... and not by another distance.
        for shift in [0, 16] {
            assert!(!fwd.matches(&ring.rank_step_list(9), 9, shift, 24, elem));
        }
        // The tree's second node does not do what its first does.
        let tree = all_reduce_4m(&f, Algorithm::Tree, 2);
        let tb = compact(1, &tree.rank_step_list(1), elem, 24).unwrap();
        let tf = Forward::of(&tb);
        assert!(!tf.matches(&tree.rank_step_list(9), 9, 8, 24, elem));
    }

    #[test]
    fn a_schedule_that_claims_no_symmetry_is_probed_and_may_still_be_reduced() {
        // The direct all_to_all does not declare itself node-symmetric;
        // the probe finds it is, and the reduction equals the full run.
        let f = a100(4);
        let p = Problem::new(Collective::AllToAll, 1 << 12, 32, 8);
        let s = Schedule::new(p, Algorithm::Direct)
            .unwrap()
            .with_channels(2);
        assert!(!s.node_symmetric_by_construction(8));
        let (reduced, every) = reduced_and_full(&s, &f);
        assert_eq!(reduced.symmetry, Symmetry::Reduced { period: 1 });
        assert_eq!(reduced.simulated_ranks, 8);
        // (To the picosecond rounding of the copies' event times.)
        assert!(reduced.time.as_ps().abs_diff(every.time.as_ps()) <= 2);
    }

    #[test]
    fn a_schedule_that_is_not_node_symmetric_runs_every_rank() {
        // NCCL's double binary tree between nodes: node 1's ranks do not do
        // what node 0's do, shifted. The fabric allows the reduction; the
        // schedule check must refuse it.
        let f = a100(4);
        assert!(f.node_orbits().is_some());
        let s = all_reduce_4m(&f, Algorithm::Tree, 2);
        let cfg = ExecConfig::default();
        let prepared = Prepared::new(&s, &f, &cfg).unwrap();
        assert_eq!(prepared.simulated_ranks(), 32);
        let full = ExecConfig {
            symmetry: false,
            ..ExecConfig::default()
        };
        let (reduced, every) = (
            prepared.run(&f, &cfg).unwrap(),
            run_schedule(&s, &f, &full).unwrap(),
        );
        assert_eq!(reduced.time, every.time);
        assert_eq!(reduced.symmetry, Symmetry::Schedule);
        assert_eq!(every.symmetry, Symmetry::Off);
        // The ring is the same on every node: node 0 stands for all.
        let ring = all_reduce_4m(&f, Algorithm::Ring, 2);
        let r = run_schedule(&ring, &f, &cfg).unwrap();
        assert_eq!(r.symmetry, Symmetry::Reduced { period: 1 });
    }
}
