//! Collectives as nccl-tests measures them: one operation of `bytes` on
//! every rank, each rank timed from launch to its own completion, and the
//! ranks' times combined as nccl-tests' `-a` does ([`Average`]; the last
//! rank's, the completion, is kept beside it).
//!
//! Point-to-point algorithms run the schedules of gpucomm-algo through
//! [`crate::exec`]; NVLS (in-switch reduction on NVSwitch gen 3+) is a
//! hardware feature no point-to-point schedule expresses, modeled here as
//! flows to and from the switch; across nodes NVLS and CollNet reduce in
//! the InfiniBand switches (SHARP, [`crate::innet`]).

use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};

use crate::exec::{ExecConfig, ExecResult, LinkLoad, Prepared};
use crate::fabric::Fabric;
use crate::innet;
use crate::machine::{ClusterFabric, Engine, Machine};
use crate::model::{self, Protocol};
use crate::par::par_map;
use crate::{SimError, SimTime};

/// Which algorithm runs a collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlgoChoice {
    /// A gpucomm-algo schedule.
    Schedule(Algorithm),
    /// NVLink SHARP: reduction and multicast in the NVSwitch; across nodes
    /// with InfiniBand SHARP between the nodes (NCCL's NVLS with CollNet).
    Nvls,
    /// NCCL's CollNet Direct: reduce-scatter to the NIC heads over NVLink,
    /// all_reduce in the InfiniBand switches (SHARP), broadcast back.
    CollNet,
    /// NCCL's CollNet Chain: the node's GPUs chained to each NIC's head
    /// over their links, reduced up the chain, all_reduced in the
    /// InfiniBand switches (SHARP) and broadcast back down; needs no
    /// NVSwitch.
    CollNetChain,
    /// NCCL's NVLSTree: NVLink SHARP inside each node, a double binary
    /// tree between the nodes (no switch support in the network).
    NvlsTree,
    /// NCCL's PAT (parallel aggregated trees, NCCL 2.23 and later):
    /// all_gather and reduce_scatter in a logarithmic number of rounds
    /// where every node has one GPU (`ncclPatEnable`, `src/graph/tuning.cc`).
    /// Simulated as gpucomm-algo's Bruck schedule, whose rounds move the
    /// same blocks along the same binomial trees, with NCCL's PAT costs:
    /// its latency (`8 + 2.8 x ranks` us at launch, NCCL's "linear part",
    /// and a network round of `14 / 3.5` us) and its 0.75 of the ring's
    /// bandwidth (`tuning.cc`), the Simple protocol only.
    Pat,
    /// Nothing runs: NCCL discards a collective of no elements
    /// (`src/enqueue.cc`, `taskAppend`: "Empty collectives can be
    /// discarded"); [`simulate`] answers it, it cannot be asked for.
    Discarded,
}

impl AlgoChoice {
    /// NCCL's algorithms beyond gpucomm-algo's schedules, in the tuner's
    /// order.
    const BEYOND_SCHEDULES: [AlgoChoice; 5] = [
        AlgoChoice::Nvls,
        AlgoChoice::CollNet,
        AlgoChoice::CollNetChain,
        AlgoChoice::NvlsTree,
        AlgoChoice::Pat,
    ];

    /// Whether this is one of NCCL's algorithms (the ring, the tree and
    /// those beyond gpucomm-algo's schedules), which NCCL_ALGO names.
    pub fn is_nccl(&self) -> bool {
        match self {
            AlgoChoice::Schedule(a) => NCCL_ALGORITHMS.contains(a),
            AlgoChoice::Discarded => false,
            _ => true,
        }
    }

    /// Whether this choice can run `collective` on `fabric`, and if not,
    /// why: NCCL's conditions for its algorithms; for a schedule, that
    /// gpucomm-algo implements the collective on these ranks.
    pub fn eligible(&self, fabric: &ClusterFabric, collective: Collective) -> Result<(), SimError> {
        match self {
            AlgoChoice::Schedule(a) => {
                let n = fabric.ranks();
                let p = Problem::new(collective, n.max(1), n, fabric.ranks_per_node());
                Schedule::new(p, *a)
                    .map(drop)
                    .map_err(|e| SimError::Model(e.to_string()))
            }
            AlgoChoice::Nvls => nvls_eligible(fabric, collective),
            AlgoChoice::CollNet => innet::collnet_eligible(fabric, collective).map(drop),
            AlgoChoice::CollNetChain => innet::collnet_chain_eligible(fabric, collective).map(drop),
            AlgoChoice::NvlsTree => innet::nvls_tree_eligible(fabric, collective),
            AlgoChoice::Pat => pat_eligible(fabric, collective),
            AlgoChoice::Discarded => Ok(()),
        }
    }

    /// Every choice that can be asked for (`--algorithm`): gpucomm-algo's
    /// schedules, then NCCL's algorithms beyond them.
    ///
    /// ```
    /// use gpucomm_sim::collective::AlgoChoice;
    ///
    /// for c in AlgoChoice::all() {
    ///     assert_eq!(AlgoChoice::parse(c.name()), Some(c));
    /// }
    /// assert!(AlgoChoice::all().any(|c| c == AlgoChoice::Pat));
    /// ```
    pub fn all() -> impl Iterator<Item = AlgoChoice> {
        Algorithm::ALL
            .into_iter()
            .map(AlgoChoice::Schedule)
            .chain(Self::BEYOND_SCHEDULES)
    }

    /// The names of [`AlgoChoice::all`], comma-separated (for messages).
    pub fn names() -> String {
        Self::list(Self::all())
    }

    /// The names of `choices`, comma-separated (for messages).
    fn list(choices: impl IntoIterator<Item = AlgoChoice>) -> String {
        let names: Vec<&str> = choices.into_iter().map(|c| c.name()).collect();
        names.join(", ")
    }

    /// The name printed and accepted on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            AlgoChoice::Schedule(a) => a.name(),
            AlgoChoice::Nvls => "nvls",
            AlgoChoice::CollNet => "collnet",
            AlgoChoice::CollNetChain => "collnet_chain",
            AlgoChoice::NvlsTree => "nvls_tree",
            AlgoChoice::Pat => "pat",
            AlgoChoice::Discarded => "none",
        }
    }

    /// The gpucomm-algo schedule this choice runs (`None` for the models
    /// of switch hardware and for nothing).
    pub fn schedule(&self) -> Option<Algorithm> {
        match self {
            AlgoChoice::Schedule(a) => Some(*a),
            AlgoChoice::Pat => Some(Algorithm::Bruck),
            _ => None,
        }
    }

    /// Parses `ring`, `tree`, `nvls`, `halving_doubling`, ... (case
    /// ignored; NCCL's `NVLSTree`, `CollnetDirect` and `CollnetChain`
    /// too).
    pub fn parse(s: &str) -> Option<Self> {
        if s.eq_ignore_ascii_case("nvls") {
            return Some(AlgoChoice::Nvls);
        }
        if ["collnet", "collnet_direct", "collnetdirect"]
            .iter()
            .any(|n| s.eq_ignore_ascii_case(n))
        {
            return Some(AlgoChoice::CollNet);
        }
        if s.eq_ignore_ascii_case("collnet_chain") || s.eq_ignore_ascii_case("collnetchain") {
            return Some(AlgoChoice::CollNetChain);
        }
        if s.eq_ignore_ascii_case("nvls_tree") || s.eq_ignore_ascii_case("nvlstree") {
            return Some(AlgoChoice::NvlsTree);
        }
        if s.eq_ignore_ascii_case("pat") {
            return Some(AlgoChoice::Pat);
        }
        Algorithm::from_name(s).map(AlgoChoice::Schedule)
    }
}

/// Which algorithms (or protocols) the tuner may pick from, as NCCL's
/// `NCCL_ALGO` and `NCCL_PROTO` say it (NVIDIA/nccl `src/graph/tuning.cc`,
/// `parseList`): a comma-separated list allows those only, one after `^`
/// every one but those.
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::collective::{simulate, AlgoChoice, CollOptions, Select};
/// use gpucomm_sim::model::Protocol;
/// use gpucomm_sim::{Engine, Machine};
///
/// let no_nvls = Select::parse("^NVLS,NVLSTree", AlgoChoice::parse).unwrap();
/// assert!(!no_nvls.allows(AlgoChoice::Nvls) && !no_nvls.allows(AlgoChoice::NvlsTree));
/// let simple = Select::parse("Simple", Protocol::parse).unwrap();
/// assert_eq!(simple.single(), Some(Protocol::Simple));
/// assert!(Select::parse("ring,warp", AlgoChoice::parse).is_err());
///
/// // One DGX H100 at 64 MiB: NCCL runs NVLS; with NVLS off, a ring.
/// let f = Machine::preset("dgx-h100").unwrap().fabric(Engine::Nccl, 1).unwrap();
/// let run = |algorithm| {
///     let opts = CollOptions { algorithm, ..Default::default() };
///     simulate(&f, Collective::AllReduce, 64 << 20, &opts).unwrap().algorithm
/// };
/// assert_eq!(run(Select::Any), AlgoChoice::Nvls);
/// assert_eq!(run(no_nvls).name(), "ring");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Select<T> {
    /// Every one the machine offers.
    #[default]
    Any,
    /// These only, in this order (one: that one runs).
    Only(Vec<T>),
    /// Every one the machine offers but these.
    Except(Vec<T>),
}

impl<T: Copy + PartialEq> Select<T> {
    /// Parses NCCL's syntax (`ring`, `ring,tree`, `^nvls,nvls_tree`), each
    /// name through `item`; an unknown or missing name is an error naming it.
    pub fn parse(s: &str, item: impl Fn(&str) -> Option<T>) -> Result<Self, String> {
        let (except, list) = match s.trim().strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, s.trim()),
        };
        let mut v = Vec::new();
        for name in list.split(',').map(str::trim) {
            if name.is_empty() {
                return Err(format!("empty name in {s:?}"));
            }
            let x = item(name).ok_or_else(|| format!("unknown name {name:?} in {s:?}"))?;
            if !v.contains(&x) {
                v.push(x);
            }
        }
        Ok(if except {
            Select::Except(v)
        } else {
            Select::Only(v)
        })
    }

    /// Whether `x` may be picked.
    pub fn allows(&self, x: T) -> bool {
        match self {
            Select::Any => true,
            Select::Only(v) => v.contains(&x),
            Select::Except(v) => !v.contains(&x),
        }
    }

    /// The one named, where exactly one is.
    pub fn single(&self) -> Option<T> {
        match self {
            Select::Only(v) if v.len() == 1 => Some(v[0]),
            _ => None,
        }
    }

    /// Whether the names are the user's choice ([`Select::Only`]): those
    /// run even where the tuner would not offer them.
    pub fn named(&self) -> bool {
        matches!(self, Select::Only(_))
    }

    /// Those of `offered` allowed; under [`Select::Only`] the named ones,
    /// offered or not.
    pub fn apply(&self, offered: Vec<T>) -> Vec<T> {
        match self {
            Select::Only(v) => v.clone(),
            _ => offered.into_iter().filter(|&x| self.allows(x)).collect(),
        }
    }
}

/// `None` is [`Select::Any`], `Some(x)` that one only.
impl<T> From<Option<T>> for Select<T> {
    fn from(x: Option<T>) -> Self {
        match x {
            None => Select::Any,
            Some(x) => Select::Only(vec![x]),
        }
    }
}

/// How the tuner picks the algorithm and protocol among the candidates.
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::collective::{simulate, CollOptions, Tuner};
/// use gpucomm_sim::{Engine, Machine};
///
/// let f = Machine::preset("dgx-h100").unwrap().fabric(Engine::Nccl, 1).unwrap();
/// // At 8 MiB on one DGX H100 NCCL runs NVLS; a simulated ring is faster.
/// let nccl = simulate(&f, Collective::AllReduce, 8 << 20, &CollOptions::default()).unwrap();
/// let fastest = CollOptions { tuner: Tuner::Fastest, ..Default::default() };
/// let fast = simulate(&f, Collective::AllReduce, 8 << 20, &fastest).unwrap();
/// assert_eq!(nccl.algorithm.name(), "nvls");
/// assert!(fast.time < nccl.time);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tuner {
    /// As NCCL does: the candidate NCCL's cost model rates fastest, which
    /// is then simulated. The model (`ncclTopoGetAlgoTime`, NVIDIA/nccl
    /// `src/graph/tuning.cc`) is NCCL's latency
    /// ([`model::nccl_model_latency_us`]) plus the bytes over its
    /// bandwidth. Where NCCL takes its topology search's channels times
    /// their bandwidth as the bus bandwidth, the simulator takes NCCL's
    /// search across nodes of NVLink-joined GPUs with NICs
    /// ([`model::nccl_inter_graph`]: the ring's `nChannels x bwInter`, the
    /// tree's `bwIntra` raised on two NVSwitch nodes,
    /// [`model::NcclInterGraph::tree_bw_intra`]), NCCL's intra-node search
    /// on one NVSwitch node ([`model::nccl_nvswitch_ring_bus_gbps`]), and
    /// otherwise the bus bandwidth of
    /// the ring's busiest link (the candidate's own where no ring runs),
    /// and applies NCCL's refinements to it: the protocol's
    /// factor and cap ([`model::nccl_protocol_bandwidth`]), a tree
    /// all_reduce's x0.92 and correction by size, the per-channel ceilings
    /// where the channels are NCCL's search's
    /// ([`model::nccl_channel_caps`]), and NCCL's algorithm
    /// bandwidth ratio (ring `nRanks / nsteps`, tree 0.5). NVLS inside a
    /// node is rated from the NVLS graph NCCL's search finds
    /// ([`nvls_model_time`]) with NCCL's 25 us latency, NVLSTree from the
    /// NVLS graph across nodes
    /// ([`crate::innet::nvls_tree_model_time`]); the other switch
    /// algorithms across nodes (NVLS with SHARP, CollNet) are NCCL-style
    /// models already, their simulated time is their rating.
    /// Where none of NCCL's algorithms implements the collective
    /// (all_to_all, sendrecv) NCCL has no choice to make and the fastest
    /// simulated candidate is taken.
    #[default]
    Nccl,
    /// The candidate whose simulated time is shortest: what setting
    /// `NCCL_ALGO` and `NCCL_PROTO` could get where NCCL's model errs.
    Fastest,
}

impl Tuner {
    /// `nccl` or `fastest`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "nccl" => Some(Tuner::Nccl),
            "fastest" => Some(Tuner::Fastest),
            _ => None,
        }
    }
}

/// Options of a collective simulation.
#[derive(Clone, Debug)]
pub struct CollOptions {
    /// The algorithms the tuner picks from ([`Select::Any`]: those NCCL
    /// has on the machine, [`candidates`]; one named: that one runs).
    pub algorithm: Select<AlgoChoice>,
    /// How the tuner picks.
    pub tuner: Tuner,
    /// NCCL's wire protocols the tuner picks from, among those NCCL enables
    /// on the machine ([`model::nccl_protocol_check`]).
    pub protocol: Select<Protocol>,
    /// Channels, run as given; `None`: one per NIC on multi-node runs (as
    /// NCCL binds channels to NICs), one inside a node (NCCL's where it
    /// reads over NVLink), fewer for a small ring or tree operation
    /// ([`model::nccl_op_channels`]), NCCL's per peer for a point-to-point
    /// operation across nodes ([`model::nccl_p2p_net_channels`]).
    pub channels: Option<u16>,
    /// Use the executor's symmetry reduction when possible.
    pub symmetry: bool,
    /// Trace this many ranks (0: no trace).
    pub trace_ranks: usize,
    /// Which rank's time is reported (nccl-tests' `-a`); `None`: the
    /// default of [`Average::default_for`].
    pub average: Option<Average>,
    /// Back-to-back iterations each rank's time is taken over, as a
    /// benchmark loop runs them (nccl-tests' `-n`, whose default is
    /// [`NCCL_TESTS_ITERATIONS`]): every rank starts its next operation
    /// when it has finished its own previous one, so on a chain the ranks
    /// done early overlap the next iteration with the late ones
    /// ([`loop_times`], [`Prepared::repeated`]). Default 1: one operation,
    /// each rank timed to its own end. Measured chains overlap less than
    /// this model lets them at mid sizes (docs/sim.md, "Back-to-back
    /// iterations"), so it is not the default. 0 is taken as 1.
    pub iterations: u32,
}

impl Default for CollOptions {
    fn default() -> Self {
        CollOptions {
            algorithm: Select::Any,
            tuner: Tuner::Nccl,
            protocol: Select::Any,
            channels: None,
            symmetry: true,
            trace_ranks: 0,
            average: None,
            iterations: 1,
        }
    }
}

/// Which rank's time a collective's reported time is, as nccl-tests'
/// `-a/--average` option chooses it (NVIDIA/nccl-tests `src/common.cu`:
/// every process times its own iterations, from launch to its stream's
/// completion, and the times are combined across processes; default
/// [`Average::Avg`]).
///
/// On a symmetric collective every rank finishes at about the same time and
/// the choice hardly matters; on a chain (ring broadcast and reduce) the
/// ranks finish one after another along it, the first of them a pipeline
/// fill before the last, and nccl-tests' default reports their mean
/// ([`Average::default_for`]: what the simulator reports unless told).
/// nccl-tests run with several GPUs per process (`-g 8`) times each process
/// until its slowest GPU is done: [`Average::Max`] for one process.
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::collective::{simulate, Average, CollOptions};
/// use gpucomm_sim::{Engine, Machine};
///
/// let f = Machine::preset("dgx-h100").unwrap().fabric(Engine::Nccl, 2).unwrap();
/// let last = CollOptions { average: Some(Average::Max), ..Default::default() };
/// let mean = simulate(&f, Collective::Broadcast { root: 0 }, 64 << 20, &CollOptions::default()).unwrap();
/// let max = simulate(&f, Collective::Broadcast { root: 0 }, 64 << 20, &last).unwrap();
/// // The chain's ranks finish one after another: their mean is earlier.
/// assert!(mean.time < max.time);
/// assert_eq!(max.time, max.completion);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Average {
    /// Rank 0's time (nccl-tests `-a 0`).
    Rank0,
    /// The mean over ranks (`-a 1`, nccl-tests' default).
    #[default]
    Avg,
    /// The first rank to finish (`-a 2`).
    Min,
    /// The last rank to finish (`-a 3`): the collective's completion.
    Max,
}

impl Average {
    /// `rank0`, `avg`, `min` or `max`, or nccl-tests' number for one (0-3).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "rank0" | "0" => Some(Average::Rank0),
            "avg" | "mean" | "1" => Some(Average::Avg),
            "min" | "2" => Some(Average::Min),
            "max" | "3" => Some(Average::Max),
            _ => None,
        }
    }

    /// What nccl-tests' default (the mean over ranks) comes to for
    /// `collective`, as the simulator reports it by default. On the rooted
    /// chains (broadcast, reduce) the ranks finish one after another along
    /// the chain, by the pipeline's fill: [`Average::Avg`]. In NCCL's
    /// symmetric collectives every rank receives its last chunk in the
    /// same step of the last loop, so the mean is the completion to within
    /// a chunk; the simulator runs a ring's steps whole (a step carries a
    /// rank's share of the channel's data, not NCCL's chunk), which would
    /// spread the ranks by whole steps that NCCL does not have:
    /// [`Average::Max`].
    pub fn default_for(collective: Collective) -> Self {
        match collective {
            Collective::Broadcast { .. } | Collective::Reduce { .. } => Average::Avg,
            _ => Average::Max,
        }
    }

    /// The name [`Average::parse`] takes.
    pub fn name(self) -> &'static str {
        match self {
            Average::Rank0 => "rank0",
            Average::Avg => "avg",
            Average::Min => "min",
            Average::Max => "max",
        }
    }

    /// This statistic of the ranks' finishing times (`None` when empty).
    pub fn of(self, times: &[SimTime]) -> Option<SimTime> {
        match self {
            Average::Rank0 => times.first().copied(),
            Average::Avg if times.is_empty() => None,
            Average::Avg => {
                let sum: u128 = times.iter().map(|t| u128::from(t.as_ps())).sum();
                // A mean of u64 values is no larger than their largest.
                Some(SimTime::from_ps((sum / times.len() as u128) as u64))
            }
            Average::Min => times.iter().min().copied(),
            Average::Max => times.iter().max().copied(),
        }
    }
}

/// nccl-tests' default iterations per size (`-n`, NVIDIA/nccl-tests
/// `src/common.cu`: `iters = 20`), for [`CollOptions::iterations`].
pub const NCCL_TESTS_ITERATIONS: u32 = 20;

/// Iterations of a benchmark loop that are simulated; longer loops are
/// extrapolated from the last of them ([`loop_times`]). Three: the first
/// starts with every rank together, the second with the ranks as the
/// first left them, the third shows the loop's steady period.
pub const SIMULATED_ITERATIONS: usize = 3;

/// Each rank's time per iteration in a loop of `n` back-to-back
/// iterations, as nccl-tests times it (from the loop's launch to the end
/// of the rank's stream, over `n`), from `finish`: each rank's ends of the
/// simulated iterations ([`ExecResult::iteration_finish`]). Past the
/// simulated ones every iteration is taken to last as long as the last
/// simulated one did on that rank (the loop's steady period); `rest` (the
/// part of a pipelined schedule left out of the run, [`schedule_for`]) is
/// added to every iteration.
///
/// ```
/// use gpucomm_sim::collective::loop_times;
/// use gpucomm_sim::SimTime;
///
/// let us = SimTime::from_us;
/// // A rank that ends its iterations at 30, 40 and 50 us runs 20 in
/// // 30 + 19 x 10 us.
/// let t = loop_times(&[vec![us(30.0), us(40.0), us(50.0)]], 20, SimTime::ZERO);
/// assert_eq!(t, vec![us(11.0)]);
/// // One iteration: its own end.
/// assert_eq!(loop_times(&[vec![us(30.0)]], 1, us(2.0)), vec![us(32.0)]);
/// ```
pub fn loop_times(finish: &[Vec<SimTime>], n: u32, rest: SimTime) -> Vec<SimTime> {
    let n = n.max(1);
    finish
        .iter()
        .map(|f| {
            let k = f.len().min(n as usize);
            let Some(&last) = f.get(k.wrapping_sub(1)) else {
                return rest;
            };
            let period = match k {
                0 | 1 => last,
                _ => last - f[k - 2],
            };
            let total =
                u128::from(last.as_ps()) + u128::from(n - k as u32) * u128::from(period.as_ps());
            let each = (total + u128::from(n) / 2) / u128::from(n);
            SimTime::from_ps(u64::try_from(each).unwrap_or(u64::MAX)).saturating_add(rest)
        })
        .collect()
}

/// The result for one size.
#[derive(Clone, Debug)]
pub struct CollResult {
    /// Size as nccl-tests reports it.
    pub bytes: u64,
    /// Ranks.
    pub ranks: usize,
    /// Simulated time of the operation as nccl-tests reports it: the
    /// ranks' times (each rank's finish, or its loop's time per iteration
    /// over [`CollOptions::iterations`]) combined as
    /// [`CollOptions::average`] says (by default as
    /// [`Average::default_for`] the collective).
    pub time: SimTime,
    /// When the last rank finished: the collective's completion. The tuner
    /// compares candidates by it.
    pub completion: SimTime,
    /// bytes / time, GB/s.
    pub algbw_gbps: f64,
    /// algbw times nccl-tests' bus factor, GB/s.
    pub busbw_gbps: f64,
    /// The algorithm that ran.
    pub algorithm: AlgoChoice,
    /// The protocol it ran with (Simple, and meaningless, when
    /// [`AlgoChoice::Discarded`]: nothing ran).
    pub protocol: Protocol,
    /// The channels its schedule's transfers ran on (as NCCL's
    /// `NCCL_DEBUG=INFO` prints `channel{Lo..Hi}` per operation; fewer than
    /// the schedule's where it has fewer pieces than channels); `None` for
    /// a hardware model (NVLS, CollNet, NVLSTree), no transfer (one rank)
    /// or nothing run.
    pub channels: Option<u16>,
    /// Every candidate the tuner simulated, with its time.
    pub candidates: Vec<(AlgoChoice, Protocol, SimTime)>,
    /// The candidates it did not simulate, with the lower bound on their
    /// time where their steps were generated (under [`Tuner::Fastest`]
    /// always: the bound ruled them out, it is above the best time found;
    /// under [`Tuner::Nccl`] only the ring's, which NCCL's model rates
    /// every candidate from up to two nodes).
    pub skipped: Vec<(AlgoChoice, Protocol, Option<SimTime>)>,
    /// NCCL's cost model's time of every candidate it rated, in the order
    /// of the candidates (under [`Tuner::Nccl`]; empty otherwise).
    pub model: Vec<(AlgoChoice, Protocol, SimTime)>,
    /// Candidates NCCL's model rates above the one reported that could not
    /// be simulated, with why (too large to simulate here, say): the table
    /// then reports the best rated one that ran, which is not NCCL's pick.
    pub passed_over: Vec<(AlgoChoice, Protocol, String)>,
    /// Details of the run of a schedule (None for NVLS and CollNet): of
    /// its first chunks where only they were simulated.
    pub exec: Option<ExecResult>,
    /// The bytes of the collective simulated where a pipelined schedule
    /// simulated only its first chunks and took the rest at its busiest
    /// link's rate ([`schedule_for`]); `None` when it ran whole.
    pub simulated_bytes: Option<u64>,
}

/// NCCL's point-to-point algorithms among gpucomm's: the tuner chooses
/// among these, and NVLS and CollNet where the hardware has them, as NCCL
/// would.
pub const NCCL_ALGORITHMS: [Algorithm; 2] = [Algorithm::Ring, Algorithm::Tree];

/// The algorithms the tuner considers for `collective` on this machine, in
/// a fixed order: NCCL's ring and tree where gpucomm-algo implements them,
/// NVLS where the hardware has it (across nodes: with SHARP switches),
/// CollNet where the switches reduce, PAT for all_gather and reduce_scatter
/// with one GPU per node; if neither ring nor tree implements the
/// collective (all_to_all, sendrecv), every gpucomm algorithm that does.
pub fn candidates(fabric: &ClusterFabric, collective: Collective) -> Vec<AlgoChoice> {
    // Of the point-to-point algorithms NCCL runs broadcast, reduce,
    // all_gather and reduce_scatter on rings (tree is an all_reduce
    // algorithm: NVIDIA/nccl src/graph/tuning.cc; PAT, below, serves
    // all_gather and reduce_scatter where nodes have one GPU).
    let tree_ok = matches!(collective, Collective::AllReduce);
    let mut v: Vec<AlgoChoice> = NCCL_ALGORITHMS
        .into_iter()
        .filter(|&a| implements(fabric, collective, a) && (a != Algorithm::Tree || tree_ok))
        .map(AlgoChoice::Schedule)
        .collect();
    if v.is_empty() {
        v = schedules(fabric, collective);
    }
    v.extend(beyond_schedules(fabric, collective));
    v
}

/// Every algorithm that implements `collective` (for `--algorithm all`-style listings).
pub fn all_candidates(fabric: &ClusterFabric, collective: Collective) -> Vec<AlgoChoice> {
    let mut v = schedules(fabric, collective);
    v.extend(beyond_schedules(fabric, collective));
    v
}

/// Whether NCCL runs PAT for `collective` here, and if not, why: an
/// all_gather or reduce_scatter on nodes of one GPU each (NVIDIA/nccl
/// `src/graph/tuning.cc`, `ncclPatEnable`: "PAT only supports 1 GPU per
/// node"; `src/init.cc` connects PAT only where `maxLocalRanks == 1`).
pub fn pat_eligible(fabric: &ClusterFabric, collective: Collective) -> Result<(), SimError> {
    if !matches!(
        collective,
        Collective::AllGather | Collective::ReduceScatter
    ) {
        return Err(SimError::Model(
            "pat implements all_gather and reduce_scatter only".into(),
        ));
    }
    if fabric.ranks_per_node() != 1 {
        return Err(SimError::Model(format!(
            "NCCL runs PAT only with one GPU per node (ncclPatEnable, src/graph/tuning.cc): \
             here {} per node (--gpus 1 gives one)",
            fabric.ranks_per_node()
        )));
    }
    Ok(())
}

/// Whether gpucomm-algo's `algorithm` implements `collective` on the fabric's ranks.
fn implements(fabric: &ClusterFabric, collective: Collective, algorithm: Algorithm) -> bool {
    AlgoChoice::Schedule(algorithm)
        .eligible(fabric, collective)
        .is_ok()
}

/// Every gpucomm-algo algorithm that implements `collective`.
fn schedules(fabric: &ClusterFabric, collective: Collective) -> Vec<AlgoChoice> {
    Algorithm::ALL
        .into_iter()
        .filter(|&a| implements(fabric, collective, a))
        .map(AlgoChoice::Schedule)
        .collect()
}

/// NCCL's algorithms beyond gpucomm-algo's schedules that can run
/// `collective` here (NVLS, CollNet Direct or, without it, Chain,
/// NVLSTree, PAT). CollNet Chain is offered only where Direct cannot run
/// (no NVSwitch): NCCL's CollNet there; on NVSwitch nodes the chain runs
/// when asked for by name.
fn beyond_schedules(fabric: &ClusterFabric, collective: Collective) -> Vec<AlgoChoice> {
    let ok = |c: AlgoChoice| c.eligible(fabric, collective).is_ok();
    let direct = ok(AlgoChoice::CollNet);
    AlgoChoice::BEYOND_SCHEDULES
        .into_iter()
        .filter(|&c| ok(c) && !(c == AlgoChoice::CollNetChain && direct))
        .collect()
}

fn nvls_eligible(fabric: &ClusterFabric, collective: Collective) -> Result<(), SimError> {
    innet::nvls_capable(fabric, "NVLS")?;
    match collective {
        Collective::AllReduce => {}
        Collective::AllGather | Collective::ReduceScatter => {
            if fabric.nodes() > 1 {
                return Err(SimError::Model(format!(
                    "nvls {} across nodes needs NCCL's CollNet with the network's own \
                     all_gather/reduce_scatter (a SHARP plugin's iallgather/ireducescatter), \
                     which is not modeled; inside one node it runs",
                    collective.name()
                )));
            }
            let ppn = fabric.ranks_per_node();
            if ppn > model::NCCL_MAX_NVLS_ARITY {
                return Err(SimError::Model(format!(
                    "nvls {} runs on at most {} GPUs (NCCL_MAX_NVLS_ARITY; NCCL's enqueue.cc \
                     skips NVLS beyond it but for all_reduce), not {ppn}",
                    collective.name(),
                    model::NCCL_MAX_NVLS_ARITY
                )));
            }
        }
        _ => {
            return Err(SimError::Model(
                "nvls runs all_reduce, all_gather and reduce_scatter (NCCL's NVLS kernels)".into(),
            ));
        }
    }
    if fabric.nodes() > 1 {
        innet::nvls_sharp_eligible(fabric, collective)?;
    }
    Ok(())
}

/// Bytes per element of a run of `bytes` in the schedules: 4-byte
/// elements, or single bytes when `bytes` is not a whole number of them.
fn element_bytes(bytes: u64) -> u64 {
    if bytes % 4 == 0 { 4 } else { 1 }
}

/// The size nccl-tests runs for a size of its sweep (`-b`..`-e`) in
/// elements of `elem` bytes (its `-d`; 4 for float), and prints: a whole
/// number of elements (`count = size / wordSize`); all_gather,
/// reduce_scatter, all_to_all, gather and scatter a whole number per rank
/// (per peer),
/// rounded down to 16 bytes (NVIDIA/nccl-tests `src/all_gather.cu` and its
/// siblings, `*GetCollByteCount`: `base = (count/nranks) & ~(16/eltSize -
/// 1)`; the table shows `max(sendBytes, recvBytes)` = `base * nranks`
/// elements), so a size under 16 bytes per rank runs empty.
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::collective::nccl_tests_bytes;
///
/// // 32 ranks of floats: 256 B is 8 B per rank, under 16: nothing runs.
/// assert_eq!(nccl_tests_bytes(Collective::AllGather, 256, 32, 4), 0);
/// assert_eq!(nccl_tests_bytes(Collective::AllGather, 512, 32, 4), 512);
/// assert_eq!(nccl_tests_bytes(Collective::ReduceScatter, 1000, 8, 4), 896);
/// assert_eq!(nccl_tests_bytes(Collective::AllToAll, 1 << 20, 24, 4), 1048320);
/// // Doubles: 2 per 16 bytes.
/// assert_eq!(nccl_tests_bytes(Collective::AllGather, 1000, 8, 8), 896);
/// assert_eq!(nccl_tests_bytes(Collective::AllReduce, 1000, 8, 4), 1000);
/// assert_eq!(nccl_tests_bytes(Collective::AllReduce, 7, 8, 4), 4);
/// assert_eq!(nccl_tests_bytes(Collective::Broadcast { root: 0 }, 7, 8, 1), 7);
/// ```
pub fn nccl_tests_bytes(collective: Collective, bytes: u64, ranks: usize, elem: u64) -> u64 {
    let elem = elem.clamp(1, 16);
    let (parts, align) = match nccl_tests_parts(collective, ranks) {
        Some(n) => (n, 16 / elem),
        None => (1, 1),
    };
    ((bytes / elem / parts) & !(align - 1)) * parts * elem
}

/// The count nccl-tests prints beside a size it runs
/// ([`nccl_tests_bytes`]): the elements of one call, per rank (per peer)
/// for all_gather, reduce_scatter, all_to_all, gather and scatter.
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::collective::nccl_tests_count;
///
/// assert_eq!(nccl_tests_count(Collective::AllGather, 512, 32, 4), 4);
/// assert_eq!(nccl_tests_count(Collective::AllReduce, 512, 32, 4), 128);
/// ```
pub fn nccl_tests_count(collective: Collective, bytes: u64, ranks: usize, elem: u64) -> u64 {
    bytes / elem.max(1) / nccl_tests_parts(collective, ranks).unwrap_or(1)
}

/// The parts nccl-tests cuts a size in for collectives whose ranks (or
/// peers) each own one, `None` for the others.
fn nccl_tests_parts(collective: Collective, ranks: usize) -> Option<u64> {
    matches!(
        collective,
        Collective::AllGather
            | Collective::ReduceScatter
            | Collective::AllToAll
            | Collective::Gather { .. }
            | Collective::Scatter { .. }
    )
    .then_some(ranks.max(1) as u64)
}

/// Device memory each GPU holds for `collective` of `bytes` on `ranks`
/// ranks as nccl-tests allocates it, out of place: the send and the
/// receive buffer (an all_gather sends its 1/n and receives all, a
/// reduce_scatter the reverse; nccl-tests' size is the larger of the two).
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::collective::buffer_bytes;
///
/// assert_eq!(buffer_bytes(Collective::AllReduce, 1 << 30, 8), 2 << 30);
/// assert_eq!(buffer_bytes(Collective::AllGather, 8 << 20, 8), 9 << 20);
/// // Past 2^64 bytes too (a memory check must not saturate).
/// assert_eq!(buffer_bytes(Collective::AllReduce, u64::MAX, 8), 2 * u64::MAX as u128);
/// ```
pub fn buffer_bytes(collective: Collective, bytes: u64, ranks: usize) -> u128 {
    let part = u128::from(bytes / ranks.max(1) as u64);
    let bytes = u128::from(bytes);
    match collective {
        Collective::AllGather
        | Collective::ReduceScatter
        | Collective::Gather { .. }
        | Collective::Scatter { .. } => bytes + part,
        _ => bytes * 2,
    }
}

/// The most channels NCCL runs ([`model::NCCL_MAX_CHANNELS`]).
pub const MAX_CHANNELS: u16 = model::NCCL_MAX_CHANNELS;

/// Slices per ring round and channel: NCCL's ring all_reduce, all_gather
/// and reduce_scatter move each chunk in `CHUNKSTEPS / SLICESTEPS` =
/// `NCCL_MAX_SLICE_PER_CHUNK` = 2 slices (`src/include/collectives.h`) and a
/// rank forwards a slice as soon as it has arrived; LL and LL128 forward
/// line by line, finer still, which 2 slices already stand for (4 give the
/// same times, docs/sim.md). Without slicing a round is store-and-forward:
/// every round waits for the previous one's last byte plus the hop's
/// latency, and at scale the result depends on whether channels happen to
/// fill each other's gaps.
pub const RING_SLICES: usize = 2;

/// Lines of NCCL's LL buffer per thread and step (NVIDIA/nccl
/// `src/include/device.h`, `NCCL_LL_LINES_PER_THREAD`).
const NCCL_LL_LINES_PER_THREAD: usize = 8;

/// The data one step of NCCL's LL buffer holds, bytes (see
/// [`schedule_for`]): 8 lines per thread x 512 threads of 16-byte lines,
/// half of each data.
const NCCL_LL_STEP_BYTES: f64 = (NCCL_LL_LINES_PER_THREAD * 512 * 16 / 2) as f64;

/// At most this many chunks per channel are simulated for the chunked
/// schedules other than a ring chain; see [`schedule_for`].
const MAX_CHUNKS: f64 = 32.0;

/// Chunks over all ranks and channels past which a chunked schedule
/// simulates fewer per channel (at least 8): 16 per channel for NCCL's 16
/// tree channels on 1024 GPUs, the full 32 up to 512 GPUs.
const CHUNK_BUDGET: f64 = 262_144.0;

/// Refuses a channel count NCCL would not run.
fn check_channels(ch: u16) -> Result<(), SimError> {
    if !(1..=MAX_CHANNELS).contains(&ch) {
        return Err(SimError::Model(format!(
            "{ch} channels: NCCL runs 1 to {MAX_CHANNELS} (MAXCHANNELS, src/include/device.h)"
        )));
    }
    Ok(())
}

/// What [`simulate`] runs of a schedule: its steps, or for a pipelined
/// schedule too long to simulate whole, its first chunks (see
/// [`schedule_for`]).
///
/// ```
/// use gpucomm_algo::{Algorithm, Collective};
/// use gpucomm_sim::collective::schedule_for;
/// use gpucomm_sim::model::Protocol;
/// use gpucomm_sim::{Engine, Machine};
///
/// let f = Machine::preset("dgx-a100").unwrap().fabric(Engine::Nccl, 8).unwrap();
/// let tree = |bytes| {
///     schedule_for(&f, Collective::AllReduce, bytes, Algorithm::Tree, None, Protocol::Simple)
///         .unwrap()
/// };
/// // 64 MiB: 8 of NCCL's 512 KiB chunks per channel (16 channels), all run.
/// assert_eq!(tree(64 << 20).scale, 1.0);
/// assert_eq!(tree(0).scale, 1.0);
/// // 1 GiB: 128 per channel, the first 32 run and stand for the rest.
/// let p = tree(1 << 30);
/// assert_eq!(p.scale, 4.0);
/// assert_eq!(p.schedule.problem.count * p.schedule.problem.elem_size, 256 << 20);
/// ```
#[derive(Clone, Debug)]
pub struct Planned {
    /// The steps simulated.
    pub schedule: Schedule,
    /// The collective's bytes over the bytes `schedule` moves: 1 when it is
    /// the whole collective; above 1 when its first chunks stand for it and
    /// the rest is taken at the busiest link's rate.
    pub scale: f64,
}

/// The schedule gpucomm would run for `collective` of `bytes` with
/// `algorithm` under `protocol` (its chunks are NCCL buffer slots, counted
/// in wire bytes, and a tree all_reduce under LL128 takes NCCL's smaller
/// chunks at mid sizes).
///
/// A pipelined schedule (NCCL's tree, a ring broadcast or reduce, which is
/// a chain) keeps NCCL's chunk size (an LL ring chain cuts each chunk in
/// 8 parts on its hops inside a node, [`Schedule::intra_slices`]); where its chunks per channel would
/// pass the simulator's budget (ranks x channels x chunks, to bound the
/// event count), only its first chunks are simulated, as the same
/// collective of fewer bytes, and [`Planned::scale`] says how many times
/// that the whole collective is. Past the pipeline's fill every chunk
/// adds its bytes on the busiest link: the rest costs that link's time
/// for the bytes not simulated (on 8 to 128 DGX A100 nodes the tree at
/// 1 GiB comes within 0.1-1.2% of simulating all of NCCL's 128 chunks,
/// where bigger chunks, the budget's other way, were 8-43% slow: the
/// pipeline fills in as many chunk times whatever their size).
pub fn schedule_for(
    fabric: &ClusterFabric,
    collective: Collective,
    bytes: u64,
    algorithm: Algorithm,
    channels: Option<u16>,
    protocol: Protocol,
) -> Result<Planned, SimError> {
    schedule_for_named(
        fabric,
        collective,
        bytes,
        algorithm,
        algorithm.name(),
        channels,
        protocol,
    )
}

/// [`schedule_for`] with the wire factor of the algorithm NCCL calls
/// `nccl` (PAT runs the Bruck schedule).
fn schedule_for_named(
    fabric: &ClusterFabric,
    collective: Collective,
    bytes: u64,
    algorithm: Algorithm,
    nccl: &str,
    channels: Option<u16>,
    protocol: Protocol,
) -> Result<Planned, SimError> {
    let wire_factor = protocol_bandwidth(fabric, nccl, protocol).factor;
    let n = fabric.ranks();
    let elem = element_bytes(bytes);
    let elems = (bytes / elem) as usize;
    let count = if collective.count_is_a_block() {
        elems / n
    } else {
        elems
    };
    let tree_all_reduce = algorithm == Algorithm::Tree && collective == Collective::AllReduce;
    // A ring broadcast or reduce is a chain, which NCCL pipelines in chunks.
    let ring_chain = algorithm == Algorithm::Ring
        && matches!(
            collective,
            Collective::Broadcast { .. } | Collective::Reduce { .. }
        );
    // One channel per NIC across nodes; a tree all_reduce two, as NCCL
    // duplicates its tree channels (one copy per tree, so that every NIC
    // carries both trees: a node inside one tree is mostly a leaf of the
    // other).
    let per_nic = if tree_all_reduce { 2 } else { 1 };
    // LL forwards every line as it lands (a channel's threads move one
    // line each per trip, NCCL_LL_LINES_PER_THREAD trips a step, and the
    // network proxy sends whole steps): a ring chain's hops inside a node
    // move each step in that many parts. LL128 chains and trees keep whole
    // steps: the published 4-node H100 sweeps fit them (docs/sim.md, "What
    // a sweep's time is").
    let parts = if ring_chain && protocol == Protocol::Ll {
        NCCL_LL_LINES_PER_THREAD
    } else {
        1
    };
    let reads = nccl_reads(fabric, collective, algorithm, protocol);
    let peer_bytes = peer_bytes(collective, bytes, n);
    let mut ch = channels.unwrap_or(if let Some(gpu_gbps) = reads {
        nccl_read_channels(fabric, algorithm, gpu_gbps, peer_bytes)
    } else if fabric.nodes() > 1 {
        if is_p2p(collective) {
            // A point-to-point operation's own (the transfers' results do
            // not depend on it: a peer's channels share its routes).
            model::nccl_p2p_net_channels(
                peer_bytes,
                n,
                nccl_comm_channels(fabric),
                nccl_net_count_by_bw(fabric),
                nccl_local_peer_channels(fabric),
                protocol == Protocol::Ll,
            )
        } else {
            // At most NCCL's MAXCHANNELS: a GB200 NVL72 domain has 72 NICs.
            (fabric.rails().len().max(1) * per_nic).min(usize::from(MAX_CHANNELS)) as u16
        }
    } else {
        1
    });
    // Rings follow the NVLinks NCCL's search finds on a mesh (rank order
    // would cross pairs with no link). In one node every ring gets the
    // same number of channels; across nodes the channels stay one per NIC
    // (the network is the narrower part) and each ring is rotated to
    // enter and leave next to its channel's NIC. A tree all_reduce chains
    // a node's GPUs in the same orders (NCCL's tree search looks for the
    // same NVLink paths).
    let mut orders = Vec::new();
    let mut tree_split = 0;
    if algorithm == Algorithm::Ring {
        let rings = fabric.mesh_rings().len() as u16;
        if channels.is_none() && rings > 0 && fabric.nodes() == 1 {
            ch = ch.div_ceil(rings).saturating_mul(rings);
        }
    }
    // Of those, NCCL runs a small ring or tree operation on as many as
    // give each thread its least share and then each channel its least
    // traffic (a count the user set runs as set). Not a ring chain
    // (broadcast, reduce): NCCL reduces its channels too, but this
    // simulator's LL chain, whose hops share the rank's LL ceiling among
    // the channels, then runs 25-46% fast against the published 4-node
    // sweeps from 128 to 512 KiB, where one channel per NIC is within 20%
    // (docs/sim.md, "What is not modeled").
    let comm_channels = ch;
    let nccl_ring_or_tree = tree_all_reduce
        || (algorithm == Algorithm::Ring
            && matches!(
                collective,
                Collective::AllReduce | Collective::AllGather | Collective::ReduceScatter
            ));
    if channels.is_none() && nccl_ring_or_tree {
        let most = model::nccl_op_channels(algorithm == Algorithm::Ring, protocol, bytes, n, ch);
        // NCCL's count: a rank's block for an all_gather or
        // reduce_scatter (whose traffic is then the whole buffer).
        let op_bytes = match collective {
            Collective::AllGather | Collective::ReduceScatter => (count / n) as u64 * elem,
            _ => count as u64 * elem,
        };
        let per_byte = model::nccl_traffic_per_byte(collective, n);
        ch = model::nccl_plan_channels(most, ch, op_bytes, per_byte);
    }
    if algorithm == Algorithm::Ring {
        orders = fabric.ring_orders(ch);
    } else if tree_all_reduce {
        // A tree channel and its copy on the other tree share a chain
        // (NCCL duplicates the channel: c and c + half); an operation on
        // fewer channels takes the first ones, on the first tree while
        // it has at most half.
        let half = usize::from(comm_channels.div_ceil(2));
        tree_split = half as u16;
        let base = fabric.chain_orders(half as u16);
        if !base.is_empty() {
            orders = (0..usize::from(ch))
                .map(|c| base[(c % half) % base.len()].clone())
                .collect();
        }
    }
    check_channels(ch)?;
    // A ring all_reduce/all_gather/reduce_scatter moves 1/n of the data per
    // round on every rank at once: each round's block is cut into
    // RING_SLICES pieces per channel, so that a rank forwards the first
    // slice while the second arrives, as NCCL does.
    let (chunk_elems, run_count) = if algorithm == Algorithm::Ring && !ring_chain {
        let per_channel = count.div_ceil(n).div_ceil(usize::from(ch));
        if reads.is_some() {
            // NCCL's slices: a channel's chunk per rank and loop (4 Simple
            // buffer steps, 2 MiB; all of it below a loop, aligned up to
            // 4 KiB), cut in two slices of at least 32 KiB
            // (`src/device/all_reduce.h`, `prims_simple.h`).
            let chunk = (per_channel * elem as usize)
                .next_multiple_of(4096)
                .min(2 << 20);
            let slice = (chunk / RING_SLICES).max(32 << 10).min(chunk);
            (slice.div_ceil(elem as usize).max(1), count)
        } else {
            (per_channel.div_ceil(RING_SLICES).max(1), count)
        }
    } else {
        // NCCL pipelines in chunks of a buffer slot (its Simple protocol
        // moves NCCL_BUFFSIZE / NCCL_STEPS = 512 KiB per step; LL128's
        // slot is taken as 512 KiB of lines, NCCL's holds 614,400 bytes of
        // lines, 576,000 of data; LL's buffer is 8 lines per thread x 512
        // threads x 8 steps of 16-byte lines, half of each data, so 32 KiB
        // per step, `src/include/device.h`, `src/device/primitives.h`);
        // simulate at most MAX_CHUNKS
        // chunks per channel, fewer (down to 8) when ranks x channels x
        // chunks would pass CHUNK_BUDGET, to bound the event count (a
        // schedule that is not node-symmetric, NCCL's tree, simulates every
        // rank): a pipelined schedule its first chunks, the others bigger
        // chunks.
        let per_channel = bytes as f64 * wire_factor / f64::from(ch);
        let mut slot = if protocol == Protocol::Ll {
            NCCL_LL_STEP_BYTES
        } else {
            512.0 * 1024.0 / wire_factor
        };
        if tree_all_reduce && protocol == Protocol::Ll128 {
            slot = tree_ll128_chunk(bytes, ch, fabric.nodes(), fabric.ranks_per_node()) as f64;
        }
        // A chain's pipeline fills in (ranks - 2) chunk times: past a few
        // dozen chunks that is a visible share of the transfer (6 of 32
        // chunks on 8 GPUs), so chains simulate chunks up to the budget.
        let flows = (n * usize::from(ch) * parts) as f64;
        let cap = if ring_chain {
            f64::INFINITY
        } else {
            MAX_CHUNKS
        };
        let most = cap.min((CHUNK_BUDGET / flows).max(8.0));
        let pipelined = algorithm == Algorithm::Tree || ring_chain;
        if reads.is_some() {
            // NCCL's point-to-point chunks over NVLink
            // (`NCCL_P2P_NVL_CHUNKSIZE`, 512 KiB), every one simulated.
            let chunk = model::NCCL_P2P_NVL_CHUNK.min(peer_bytes.div_ceil(u64::from(ch)));
            ((chunk.max(elem) / elem) as usize, count)
        } else if pipelined && per_channel / wire_factor > most * slot {
            // NCCL's chunks, the first `most` per channel.
            let chunk = ((slot as u64).max(elem) / elem) as usize;
            (chunk, count.min(most as usize * usize::from(ch) * chunk))
        } else {
            let chunk = (slot.max(per_channel / most / wire_factor) as u64).max(elem);
            ((chunk / elem) as usize, count)
        }
    };
    let problem = |count| {
        let p = Problem::new(collective, count, n, fabric.ranks_per_node())
            .with_elem_size(elem as usize);
        Schedule::new(p, algorithm).map_err(|e| SimError::Schedule(e.to_string()))
    };
    // The whole collective is checked (its size) even where only its
    // first chunks run.
    let whole = problem(count)?;
    let s = if run_count < count {
        problem(run_count)?
    } else {
        whole
    };
    let mut s = s
        .with_channels(ch)
        .with_chunk_elems(chunk_elems)
        .with_intra_slices(parts)
        .with_tree_split(tree_split);
    if !orders.is_empty() {
        s = s
            .with_ring_orders(orders)
            .map_err(|e| SimError::Schedule(e.to_string()))?;
    }
    Ok(Planned {
        schedule: s,
        scale: if run_count < count {
            count as f64 / run_count as f64
        } else {
            1.0
        },
    })
}

/// Where `collective` with `algorithm` under `protocol` runs on NVLink
/// reads on `fabric`, the NVLinks of each GPU to the NVSwitch (else
/// `None`); such a schedule is simulated at NCCL's own granularity: NCCL's
/// Simple protocol reads over NVLink on the A100 ([`model::nccl_p2p_read`])
/// and the receiving thread block pulls a slice and posts back before the
/// next moves, so per slice the step latency (NCCL's `hwLat`) is not
/// hidden behind data. Inside one NVSwitch node a ring all_reduce,
/// all_gather and reduce_scatter then runs NCCL's ring channels and slices,
/// a sendrecv and an all_to_all NCCL's point-to-point channels and chunks
/// ([`nccl_read_channels`]), and each NVLink connection takes its next
/// slice only once the last is delivered ([`ExecConfig::hold_nvlink`]).
fn nccl_reads(
    fabric: &ClusterFabric,
    collective: Collective,
    algorithm: Algorithm,
    protocol: Protocol,
) -> Option<f64> {
    let node = &fabric.machine.node;
    let gpu_gbps = node.nccl_switch_gbps()?;
    let granular = match algorithm {
        Algorithm::Ring => !matches!(
            collective,
            Collective::Broadcast { .. } | Collective::Reduce { .. }
        ),
        Algorithm::Direct => is_p2p(collective),
        _ => false,
    };
    (granular
        && protocol == Protocol::Simple
        && fabric.nodes() == 1
        && fabric.ranks() > 1
        && model::nccl_p2p_read(node.arch))
    .then_some(gpu_gbps)
}

/// NCCL's channels for a schedule [`nccl_reads`] accepts, whose GPUs
/// reach the switch at `gpu_gbps` (NCCL's figure,
/// [`NodeModel::nccl_switch_gbps`](crate::machine::NodeModel::nccl_switch_gbps)): its ring channels
/// ([`model::nccl_nvswitch_ring_channels`]) for a ring, its point-to-point
/// channels for each peer's `peer_bytes` ([`model::nccl_p2p_channels`]) for
/// a sendrecv or all_to_all.
fn nccl_read_channels(
    fabric: &ClusterFabric,
    algorithm: Algorithm,
    gpu_gbps: f64,
    peer_bytes: u64,
) -> u16 {
    let ring = model::nccl_nvswitch_ring_channels(gpu_gbps);
    match algorithm {
        Algorithm::Ring => ring,
        _ => model::nccl_p2p_channels(peer_bytes, fabric.ranks(), ring),
    }
}

/// NCCL's communicator channels across nodes
/// ([`model::nccl_comm_channels`]): its ring graph's
/// ([`model::nccl_inter_graph`]) where the nodes' GPUs are joined by
/// NVLink or a node has one, else one per NIC (the graph NCCL would
/// search over PCIe is not reproduced); NVLS's channels where NVLS runs.
fn nccl_comm_channels(fabric: &ClusterFabric) -> u16 {
    let node = &fabric.machine.node;
    let rails = fabric.rails().len();
    let searched = node.has_nvlink() || fabric.ranks_per_node() == 1;
    let (channels, bw) = if searched && rails > 0 {
        let g = nccl_net_graph(fabric);
        (g.channels, g.bw_inter)
    } else {
        (rails.min(model::NCCL_MAX_RING_GRAPH_CHANNELS), 0.0)
    };
    // NCCL 2.25-2.27 enable NVLS with more than two GPUs a node
    // (`src/transport/nvls.cc`; 2.28 on with two, as `nvls_capable`).
    let nvls = (crate::innet::nvls_capable(fabric, "NVLS").is_ok() && fabric.ranks_per_node() > 2)
        .then(|| model::nvls_channels(node.arch, fabric.nodes()) as u16);
    model::nccl_comm_channels(channels, bw, node.arch, nvls)
}

/// NCCL's ring graph across the nodes of `fabric`
/// ([`model::nccl_inter_graph`] of its NICs in use, their rate and the
/// PCIe link before them).
fn nccl_net_graph(fabric: &ClusterFabric) -> model::NcclInterGraph {
    let node = &fabric.machine.node;
    model::nccl_inter_graph(
        node.arch,
        fabric.rails().len(),
        node.nic_gbps,
        model::nccl_pcie_gbps(node.pcie_gen, node.pcie_width),
    )
}

/// The NICs NCCL has a GPU drive by bandwidth (`getLocalNetCountByBw`,
/// NVIDIA/nccl `src/graph/topo.cc`): its nearest NICs, counted until they
/// carry what the GPU's own link to the CPU does; none where the GPU
/// reaches its CPU through a PCIe switch (NCCL finds no GPU-to-CPU link
/// there).
fn nccl_net_count_by_bw(fabric: &ClusterFabric) -> usize {
    let node = &fabric.machine.node;
    if node.gpu_sites.iter().any(|s| s.tree.is_some()) {
        return 0;
    }
    let pcie = model::nccl_pcie_gbps(node.pcie_gen, node.pcie_width);
    let gpu = node.c2c_gbps.unwrap_or(pcie);
    let per_nic = node.nic_gbps.min(pcie).max(1e-9);
    let near = fabric.nearest_nics(0).len();
    near.min((gpu / per_nic).ceil() as usize)
}

/// The channels NCCL gives a peer on the same node, the fewest over the
/// pairs of the GPUs in use (`ncclTopoGetNchannels`: 2 per NVLink's worth
/// of the path's bandwidth, 2 over PCIe); `None` with one GPU per node.
fn nccl_local_peer_channels(fabric: &ClusterFabric) -> Option<u64> {
    let rpn = fabric.ranks_per_node();
    (0..rpn)
        .flat_map(|a| (a + 1..rpn).map(move |b| (a, b)))
        .map(|(a, b)| 2 * u64::from(fabric.nvlink_count(a, b).max(1)))
        .min()
}

/// Two GPUs of a node in use whose data NCCL passes through host memory,
/// its shared-memory (SHM) transport, for `collective` on `fabric`: for a
/// ring or tree, a pair not joined peer to peer where no ring through the
/// node's GPUs is ([`ClusterFabric::nccl_shm_pair`]); for a point-to-point
/// operation, the first pair it joins that is not P2P
/// ([`ClusterFabric::nccl_p2p`]): every pair of all_to_all, each rank and
/// the one `shift` after it in sendrecv, the root and the others of its
/// node in gather and scatter. The simulator moves their data peer to
/// peer, faster than published SHM runs (docs/sim.md, "What is not
/// modeled"); callers say so beside the result.
pub fn nccl_shm_pair(fabric: &ClusterFabric, collective: Collective) -> Option<(usize, usize)> {
    let n = fabric.ranks_per_node();
    let ranks = fabric.ranks();
    let node_pair = |x: usize, y: usize| (x / n == y / n && x != y).then_some((x % n, y % n));
    let pairs: Vec<(usize, usize)> = match collective {
        Collective::AllToAll => (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .collect(),
        Collective::SendRecv { shift } => (0..n)
            .filter_map(|r| node_pair(r, (r + shift) % ranks.max(1)))
            .collect(),
        Collective::Gather { root } | Collective::Scatter { root } => {
            let base = root / n * n;
            (base..base + n)
                .filter_map(|r| node_pair(root, r))
                .collect()
        }
        _ => return fabric.nccl_shm_pair(),
    };
    pairs
        .into_iter()
        .find(|&(a, b)| !fabric.nccl_p2p(a, b))
        .map(|(a, b)| (a.min(b), a.max(b)))
}

/// The collectives NCCL runs as grouped point-to-point operations
/// (`ncclSend`/`ncclRecv`, as nccl-tests' sendrecv, alltoall, gather and
/// scatter call them): no tuner protocol, NCCL's point-to-point channels.
fn is_p2p(collective: Collective) -> bool {
    matches!(
        collective,
        Collective::SendRecv { .. }
            | Collective::AllToAll
            | Collective::Gather { .. }
            | Collective::Scatter { .. }
    )
}

/// The bytes each rank sends to one peer in `collective` of `bytes` on
/// `ranks` ranks, as NCCL's point-to-point operations count them: an
/// all_to_all's, gather's or scatter's share per peer (one rank's block),
/// else the whole buffer.
fn peer_bytes(collective: Collective, bytes: u64, ranks: usize) -> u64 {
    if collective.count_is_a_block() {
        bytes / ranks.max(1) as u64
    } else {
        bytes
    }
}

/// NCCL's chunk (payload bytes) for a tree all_reduce under LL128
/// (NVIDIA/nccl `src/enqueue.cc`): a buffer step's payload, 576,000 bytes
/// (LL128's 4,915,200-byte buffer over `NCCL_STEPS` = 8, 15 of every 16
/// words data), halved while a channel would get fewer than `steps * 64 /
/// ppn` chunks (down to 128 KiB), then fewer than `steps * 16 / ppn` (down
/// to 32 KiB), where `steps = 1 + log2(nodes) + ppn / 10`: enough chunks in
/// flight to fill the tree's pipeline at mid sizes; then aligned down to
/// LL128's grain, 1920 bytes (`ncclProtoGrainSize`: a warp's 8 lines of 15
/// data words).
fn tree_ll128_chunk(bytes: u64, channels: u16, nodes: usize, ppn: usize) -> u64 {
    let ppn = ppn.max(1) as f64;
    let steps = 1.0 + f64::from(nodes.max(1).ilog2()) + 0.1 * ppn;
    let per = |chunk: u64| (bytes / (u64::from(channels.max(1)) * chunk)) as f64;
    let mut chunk = 576_000u64;
    while per(chunk) < steps * 64.0 / ppn && chunk > 131_072 {
        chunk /= 2;
    }
    while per(chunk) < steps * 16.0 / ppn && chunk > 32_768 {
        chunk /= 2;
    }
    chunk / LL128_GRAIN * LL128_GRAIN
}

/// LL128's chunk grain in bytes (NVIDIA/nccl `ncclProtoGrainSize`).
const LL128_GRAIN: u64 = 1920;

/// Simulates one collective of `bytes` on `fabric` (built for [`Engine::Nccl`]).
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::collective::{simulate, CollOptions, AlgoChoice};
/// use gpucomm_sim::{Machine, Engine};
///
/// let f = Machine::preset("dgx-h100").unwrap().fabric(Engine::Nccl, 1).unwrap();
/// let opts = CollOptions { algorithm: AlgoChoice::parse("nvls").into(), ..Default::default() };
/// let r = simulate(&f, Collective::AllReduce, 1 << 30, &opts).unwrap();
/// assert!(r.busbw_gbps > 400.0);
/// ```
pub fn simulate(
    fabric: &ClusterFabric,
    collective: Collective,
    bytes: u64,
    opts: &CollOptions,
) -> Result<CollResult, SimError> {
    // Checked up front: NVLS and CollNet take no channel count and would
    // otherwise accept any.
    if let Some(ch) = opts.channels {
        check_channels(ch)?;
    }
    let choices = match &opts.algorithm {
        Select::Only(named) if named.is_empty() => {
            return Err(SimError::Model("no algorithm named".into()));
        }
        Select::Only(named) if named.len() == 1 => named.clone(),
        // A list allows those of NCCL's algorithms that NCCL offers here,
        // as NCCL_ALGO does (a tree broadcast is not one), and gpucomm's
        // own schedules named in it.
        Select::Only(named) => {
            let offered = candidates(fabric, collective);
            let kept: Vec<AlgoChoice> = named
                .iter()
                .copied()
                .filter(|c| offered.contains(c) || !c.is_nccl())
                .collect();
            if kept.is_empty() {
                return Err(SimError::Model(format!(
                    "NCCL runs none of {} for {} here (it offers {})",
                    AlgoChoice::list(named.iter().copied()),
                    collective.name(),
                    AlgoChoice::list(offered)
                )));
            }
            kept
        }
        select => {
            let offered = candidates(fabric, collective);
            let allowed = select.apply(offered.clone());
            if allowed.is_empty() && !offered.is_empty() {
                return Err(SimError::Model(format!(
                    "every algorithm the tuner has for {} here is excluded ({})",
                    collective.name(),
                    AlgoChoice::list(offered)
                )));
            }
            allowed
        }
    };
    if choices.is_empty() {
        return Err(SimError::Schedule(format!(
            "no algorithm implements {}",
            collective.name()
        )));
    }
    let m = &fabric.machine;
    let nvlink = m.node.has_nvlink();
    // NCCL trims the NICs of a one-node communicator: no rule on them then.
    let nic = (fabric.nodes() > 1).then_some(m.node.nic_reach);
    // Candidates are (algorithm, protocol) in a fixed order, which breaks
    // ties; which of them run is decided by their bounds below.
    let protocols = opts
        .protocol
        .apply(vec![Protocol::Simple, Protocol::Ll128, Protocol::Ll]);
    if protocols.is_empty() {
        return Err(SimError::Model(
            "every protocol is excluded (Simple, LL128, LL)".into(),
        ));
    }
    let mut refused = None;
    // The enabled candidates in tie-breaking order.
    let mut jobs = Vec::new();
    // NCCL's point-to-point operations take no protocol from its tuner:
    // LL up to NCCL_P2P_LL_THRESHOLD bytes per peer where the connection
    // has LL buffers, else Simple. A peer over the network has none (its
    // point-to-point connections share Simple buffers), so an operation
    // across nodes runs Simple: its NVLink transfers might run LL, but the
    // network ones set its time.
    let p2p_protocol = is_p2p(collective).then(|| {
        let net = fabric.nodes() > 1;
        let q = model::nccl_p2p_protocol(
            peer_bytes(collective, bytes, fabric.ranks()),
            !net && opts.protocol.allows(Protocol::Ll),
        );
        let rule = if net {
            "Simple over the network, where NCCL gives them no LL buffers \
             (NCCL_ALLOC_P2P_NET_LL_BUFFERS=0, src/transport/net.cc)"
                .to_string()
        } else {
            format!(
                "LL up to {} bytes per peer and Simple above, NCCL_P2P_LL_THRESHOLD in \
                 src/enqueue.cc",
                model::NCCL_P2P_LL_THRESHOLD
            )
        };
        (q, rule)
    });
    for &c in &choices {
        for &p in &protocols {
            let check = match &p2p_protocol {
                Some((q, rule)) if c == AlgoChoice::Schedule(Algorithm::Direct) && p != *q => {
                    Err(format!(
                        "its point-to-point operations move {rule}: {} here",
                        q.name()
                    ))
                }
                _ => model::nccl_protocol_check(c.name(), p, m.node.arch, nvlink, nic)
                    .map_err(String::from),
            };
            match check {
                Ok(()) => jobs.push((c, p)),
                // A refusal is reported only when nothing else failed: an
                // error of a candidate that ran says more.
                Err(why) if opts.protocol.named() && refused.is_none() => {
                    refused = Some(SimError::Model(format!(
                        "NCCL does not run {} with the {} protocol on {} ({why})",
                        c.name(),
                        p.name(),
                        m.name
                    )));
                }
                Err(_) => {}
            }
        }
    }
    // NCCL launches nothing for a collective of no elements; its
    // point-to-point operations (sendrecv, all_to_all) still run, empty.
    // What a non-empty size would refuse is refused all the same.
    if bytes == 0
        && !matches!(
            collective,
            Collective::SendRecv { .. } | Collective::AllToAll
        )
    {
        let mut last_err = refused;
        let mut runs = false;
        for &(c, _) in &jobs {
            match c.eligible(fabric, collective) {
                Ok(()) => runs = true,
                Err(e) if opts.algorithm.single().is_some() => return Err(e),
                Err(e) => last_err = Some(e),
            }
        }
        if !runs {
            return Err(last_err.unwrap_or(SimError::Schedule("no candidate runs".into())));
        }
        return Ok(CollResult {
            bytes,
            ranks: fabric.ranks(),
            time: SimTime::ZERO,
            completion: SimTime::ZERO,
            algbw_gbps: 0.0,
            busbw_gbps: 0.0,
            algorithm: AlgoChoice::Discarded,
            protocol: Protocol::Simple,
            channels: None,
            candidates: Vec::new(),
            skipped: Vec::new(),
            model: Vec::new(),
            passed_over: Vec::new(),
            exec: None,
            simulated_bytes: None,
        });
    }
    // Each schedule's steps are generated once, for every protocol that
    // runs the same steps (protocols differ in overheads, wire factor and
    // caps; chunked schedules also in chunk size), and only when needed:
    // NCCL's model rates every candidate from one bus bandwidth (the
    // ring's busiest link's up to two nodes, its search's inter-node
    // figure beyond), so under it only the ring (up to two nodes) and the
    // pick are generated (a tree on 16384 ranks is every rank's steps).
    let schedules: Vec<Option<Result<Planned, SimError>>> = jobs
        .iter()
        .map(|&(c, p)| {
            c.schedule().map(|a| {
                if c == AlgoChoice::Pat {
                    pat_eligible(fabric, collective)?;
                }
                schedule_for_named(fabric, collective, bytes, a, c.name(), opts.channels, p)
            })
        })
        .collect();
    // A lone schedule needs neither loads nor bounds (nothing to compare
    // it with).
    let (hardware, mut order): (Vec<usize>, Vec<usize>) =
        (0..jobs.len()).partition(|&i| schedules[i].is_none());
    let compared = order.len() > 1 || (!order.is_empty() && !hardware.is_empty());
    let mut preps = Preps {
        fabric,
        peer_nics: is_p2p(collective),
        jobs: &jobs,
        schedules: &schedules,
        config: prepare_config(opts),
        // Link loads rate and bound compared candidates, and give the
        // time of what a pipelined schedule leaves out.
        caps: if compared || schedules.iter().flatten().flatten().any(|s| s.scale > 1.0) {
            fabric.capacities()
        } else {
            Vec::new()
        },
        compared,
        prepared: Vec::new(),
        job_prep: jobs.iter().map(|_| None).collect(),
    };
    type Run = Result<(SimTime, Option<ExecResult>), SimError>;
    let mut results: Vec<Option<Run>> = jobs.iter().map(|_| None).collect();
    let run_jobs = |which: &[usize], preps: &Preps, results: &mut [Option<Run>]| {
        let done = par_map(which, |&i| {
            let (c, p) = jobs[i];
            match (&schedules[i], &preps.job_prep[i]) {
                (None, _) => run_one(fabric, collective, bytes, c, p, opts, None),
                (Some(Err(e)), _) => Err(e.clone()),
                (Some(Ok(_)), Some(k)) => match &preps.prepared[*k].1 {
                    Ok(prep) => run_one(
                        fabric,
                        collective,
                        bytes,
                        c,
                        p,
                        opts,
                        Some((prep, preps.rest(i))),
                    ),
                    Err(e) => Err(e.clone()),
                },
                (Some(Ok(_)), None) => {
                    Err(SimError::Model(format!("{} was not prepared", c.name())))
                }
            }
        });
        for (&i, r) in which.iter().zip(done) {
            results[i] = Some(r);
        }
    };
    let time_of = |r: &Option<Run>| r.as_ref().and_then(|r| r.as_ref().ok()).map(|(t, _)| *t);
    // Every prepared schedule's bytes on its busiest link are known before
    // any run: over that link's capacity (and, under a protocol's rate
    // cap, a rank's bytes over the cap) they bound the run's time from
    // below and stand for the bandwidth term of NCCL's model. The hardware
    // models (NVLS, CollNet, NVLSTree) are cheap: they always run, first.
    let bound = |i: usize, preps: &Preps| -> Option<f64> {
        let (c, p) = jobs[i];
        c.schedule()?;
        let launch = exec_overheads(fabric, collective, c.name(), p).launch;
        Some(launch.as_secs_f64() + preps.steady_secs(i)?)
    };
    run_jobs(&hardware, &preps, &mut results);
    // NCCL's model applies where NCCL has the algorithms (or the user
    // named one and the protocol is to be picked).
    let nccl_choice = opts.tuner == Tuner::Nccl
        && compared
        && (opts.algorithm.named()
            || choices.iter().all(|c| match c {
                AlgoChoice::Schedule(a) => NCCL_ALGORITHMS.contains(a),
                _ => true,
            }));
    let mut model_times: Vec<Option<f64>> = vec![None; jobs.len()];
    let mut pick = None;
    let mut passed_over = Vec::new();
    if nccl_choice {
        let comm = nccl_comm(fabric, opts.channels);
        let rating = NcclRating {
            fabric,
            collective,
            bytes,
            comm,
            channels: opts.channels,
        };
        // The bus bandwidth NCCL's search would find, which it rates its
        // rings and trees from: its search across nodes where the
        // simulator reproduces it, its intra-node search on one NVSwitch
        // node, otherwise the ring's busiest link's. Without a ring, each
        // schedule's own.
        let searched = rating.searched().or_else(|| {
            let rings: Vec<usize> = (0..jobs.len())
                .filter(|&i| jobs[i].0 == AlgoChoice::Schedule(Algorithm::Ring))
                .collect();
            preps.prepare(&rings);
            let ring = rings.first().copied()?;
            let (link, _) = preps.link_times(ring)?;
            Some(SearchedBus::uniform(rating.bus_gbps(Algorithm::Ring, link)))
        });
        if searched.is_none() {
            preps.prepare(&order);
        }
        for (i, &(c, p)) in jobs.iter().enumerate() {
            model_times[i] = match c {
                // One rank: NCCL rates the ring with Simple at 0 and
                // nothing else (`updateCollCostTable`, src/enqueue.cc;
                // it launches one copy kernel). Its bus bandwidth factor
                // is 0, which made every other rating NaN.
                _ if fabric.ranks() == 1 => (c == AlgoChoice::Schedule(Algorithm::Ring)
                    && p == Protocol::Simple)
                    .then_some(0.0),
                AlgoChoice::Schedule(_) | AlgoChoice::Pat
                    if !matches!(schedules[i], Some(Ok(_))) =>
                {
                    None
                }
                AlgoChoice::Pat => match searched {
                    Some(bus) => Some(rating.pat_secs(p, bus.ring)),
                    None => preps.link_times(i).map(|(link, _)| {
                        rating.pat_secs(p, rating.bus_gbps(Algorithm::Ring, link))
                    }),
                },
                AlgoChoice::Schedule(a) => match searched {
                    Some(bus) => Some(rating.schedule_secs(a, p, bus)),
                    None => preps.link_times(i).map(|(link, _)| {
                        rating.schedule_secs(a, p, SearchedBus::uniform(rating.bus_gbps(a, link)))
                    }),
                },
                AlgoChoice::NvlsTree => crate::innet::nvls_tree_model_time(fabric, bytes)
                    .ok()
                    .map(|t| t.as_secs_f64()),
                AlgoChoice::Nvls if fabric.nodes() == 1 => {
                    nvls_model_time(fabric, collective, bytes)
                        .ok()
                        .map(|t| t.as_secs_f64())
                }
                _ => time_of(&results[i]).map(|t| t.as_secs_f64()),
            };
        }
        let mut rated: Vec<(f64, usize)> = model_times
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.map(|m| (m, i)))
            .collect();
        rated.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        // The first rated candidate that runs.
        for (_, i) in rated {
            if results[i].is_none() {
                preps.prepare(&[i]);
                run_jobs(&[i], &preps, &mut results);
            }
            if time_of(&results[i]).is_some() {
                pick = Some(i);
                break;
            }
            if let Some(Err(e)) = &results[i] {
                passed_over.push((jobs[i].0, jobs[i].1, e.to_string()));
            }
        }
    }
    if pick.is_none() {
        // Branch and bound: candidates run in order of their bound, as many
        // at once as there are cores; one whose bound is above the best
        // time simulated so far is skipped (it cannot win, so the pick is
        // the one running every candidate gives).
        preps.prepare(&order);
        let bounds: Vec<f64> = (0..jobs.len())
            .map(|i| bound(i, &preps).unwrap_or(0.0))
            .collect();
        order.sort_by(|&x, &y| bounds[x].total_cmp(&bounds[y]).then(x.cmp(&y)));
        let wave = crate::par::threads().max(1);
        let mut next = 0;
        while next < order.len() {
            let best = results.iter().filter_map(time_of).min();
            let mut batch = Vec::new();
            while next < order.len() && batch.len() < wave {
                let i = order[next];
                next += 1;
                // (A relative 1e-9 of slack: a bound is a float, times are
                // whole picoseconds.)
                if results[i].is_none()
                    && best.is_none_or(|b| bounds[i] <= b.as_secs_f64() * (1.0 + 1e-9))
                {
                    batch.push(i);
                }
            }
            run_jobs(&batch, &preps, &mut results);
        }
        // A wave runs candidates that a one-at-a-time search would have
        // skipped (their better-bounded peers were still running), and how
        // many depends on the machine's cores. The report keeps what the
        // one-at-a-time search runs, so it is the same on every machine;
        // the pick is unchanged (what is dropped cannot win).
        let times: Vec<Option<SimTime>> = results.iter().map(time_of).collect();
        for i in one_at_a_time_skips(&order, &bounds, &times) {
            results[i] = None;
        }
    }
    let mut best: Option<(SimTime, AlgoChoice, Protocol, Option<ExecResult>, usize)> = None;
    let mut tried = Vec::new();
    let mut skipped = Vec::new();
    let mut last_err = refused;
    for (i, (&(c, p), r)) in jobs.iter().zip(results).enumerate() {
        match r {
            None => skipped.push((c, p, bound(i, &preps).map(SimTime::from_secs_f64))),
            Some(Ok((t, ex))) => {
                tried.push((c, p, t));
                let better = match pick {
                    Some(k) => k == i,
                    None => best.as_ref().is_none_or(|b| t < b.0),
                };
                if better {
                    best = Some((t, c, p, ex, i));
                }
            }
            Some(Err(e)) => {
                if opts.algorithm.single().is_some() && opts.protocol.single().is_some() {
                    return Err(e);
                }
                last_err = Some(e);
            }
        }
    }
    let model = jobs
        .iter()
        .zip(&model_times)
        .filter_map(|(&(c, p), m)| m.map(|m| (c, p, SimTime::from_secs_f64(m))))
        .collect();
    let n = fabric.ranks();
    let (time, algorithm, protocol, exec, i) = match best {
        Some(b) => b,
        None => return Err(last_err.unwrap_or(SimError::Schedule("no candidate ran".into()))),
    };
    // The channels that carried transfers (a schedule of fewer pieces
    // than channels leaves some idle; a hardware model has no run).
    let channels = exec.as_ref().map(|e| e.channels).filter(|&c| c > 0);
    let simulated_bytes = match &schedules[i] {
        Some(Ok(planned)) if planned.scale > 1.0 => {
            let p = &planned.schedule.problem;
            Some((p.count * p.elem_size) as u64)
        }
        _ => None,
    };
    // Each rank's time: its loop's per iteration, the run's iterations
    // back to back, plus what the run left out (a pipelined schedule's
    // remaining chunks, which every rank moves). A hardware model's ranks
    // all finish together, one operation after another.
    let prepared = preps.job_prep[i].map(|k| &preps.prepared[k].1);
    let reported = match (algorithm.schedule(), &exec, prepared) {
        (Some(a), Some(e), Some(Ok(prep))) => {
            let rest = time - e.time;
            let looped;
            let finish = match opts.iterations {
                0 | 1 => e.iteration_finish.as_slice(),
                n => {
                    let k = (n as usize).min(SIMULATED_ITERATIONS);
                    let cfg = ExecConfig {
                        trace_ranks: 0,
                        ..exec_config_named(fabric, collective, a, algorithm.name(), protocol, opts)
                    };
                    looped = prep
                        .repeated(k)
                        .run(&fabric.transfers(is_p2p(collective)), &cfg)?;
                    looped.iteration_finish.as_slice()
                }
            };
            let times = loop_times(finish, opts.iterations, rest);
            opts.average
                .unwrap_or(Average::default_for(collective))
                .of(&times)
                .unwrap_or(time)
        }
        _ => time,
    };
    let secs = reported.as_secs_f64().max(1e-15);
    let algbw = bytes as f64 / secs / 1e9;
    Ok(CollResult {
        bytes,
        ranks: n,
        time: reported,
        completion: time,
        algbw_gbps: algbw,
        busbw_gbps: algbw * collective.busbw_factor(n),
        algorithm,
        protocol,
        channels,
        candidates: tried,
        skipped,
        model,
        passed_over,
        exec,
        simulated_bytes,
    })
}

/// The schedules of [`simulate`]'s candidates, prepared on demand: a
/// schedule's steps are generated once for every candidate that runs the
/// same steps, with its link load when candidates are compared.
struct Preps<'a> {
    fabric: &'a ClusterFabric,
    /// The collective's transfers take NCCL's point-to-point NICs
    /// ([`ClusterFabric::transfers`]).
    peer_nics: bool,
    /// The candidates, and the schedule each runs (`None`: a hardware model).
    jobs: &'a [(AlgoChoice, Protocol)],
    schedules: &'a [Option<Result<Planned, SimError>>],
    config: ExecConfig,
    /// The fabric's link capacities (empty when no link load is needed).
    caps: Vec<f64>,
    /// Whether candidates are compared (then every link load is needed).
    compared: bool,
    /// Each distinct schedule, its prepared steps and its link load.
    prepared: Vec<(Schedule, Result<Prepared, SimError>, Option<LinkLoad>)>,
    /// Per candidate: the index in `prepared` once prepared.
    job_prep: Vec<Option<usize>>,
}

impl Preps<'_> {
    /// Prepares the candidates `which` whose schedules built and are not
    /// prepared yet.
    fn prepare(&mut self, which: &[usize]) {
        for &i in which {
            if self.job_prep[i].is_some() {
                continue;
            }
            let Some(Ok(Planned { schedule: s, scale })) = &self.schedules[i] else {
                continue;
            };
            let k = match self.prepared.iter().position(|(t, _, _)| t == s) {
                Some(k) => k,
                None => {
                    let xf = self.fabric.transfers(self.peer_nics);
                    let r = Prepared::new(s, &xf, &self.config);
                    let load = match &r {
                        Ok(p) if self.compared || *scale > 1.0 => p.link_load(&xf).ok(),
                        _ => None,
                    };
                    self.prepared.push((s.clone(), r, load));
                    self.prepared.len() - 1
                }
            };
            self.job_prep[i] = Some(k);
        }
    }

    /// Candidate `i`'s busiest link's time at one wire byte per payload
    /// byte, and under its protocol's rate cap a rank's bytes over the cap
    /// (else 0), seconds, for the whole collective (the part simulated
    /// times [`Planned::scale`]); `None` until prepared (or when not
    /// compared).
    fn link_times(&self, i: usize) -> Option<(f64, f64)> {
        let (c, p) = self.jobs[i];
        let (Some(_), Some(k), Some(Ok(planned))) =
            (c.schedule(), self.job_prep[i], &self.schedules[i])
        else {
            return None;
        };
        let load: &LinkLoad = self.prepared[k].2.as_ref()?;
        let link = load
            .link_bytes
            .iter()
            .zip(&self.caps)
            .map(|(&b, &cap)| b / (cap * 1e9))
            .fold(0.0, f64::max);
        let capped = protocol_bandwidth(self.fabric, c.name(), p)
            .cap_gbps
            .map_or(0.0, |cap| load.max_rank_sent / (cap * 1e9));
        Some((link * planned.scale, capped * planned.scale))
    }

    /// Candidate `i`'s time at its busiest link's rate, at its protocol's
    /// wire factor, or under its rate cap at its busiest sender's,
    /// whichever is longer, seconds, for the whole collective: what bounds
    /// its run from below; `None` as [`Preps::link_times`].
    fn steady_secs(&self, i: usize) -> Option<f64> {
        let (c, p) = self.jobs[i];
        let (link, capped) = self.link_times(i)?;
        Some((link * protocol_bandwidth(self.fabric, c.name(), p).factor).max(capped))
    }

    /// The time of the part of candidate `i`'s collective its schedule
    /// leaves out (past a pipeline's fill every chunk adds its bytes on
    /// the busiest link, [`schedule_for`]): that part's share of
    /// [`Preps::steady_secs`]; zero for a schedule that runs whole.
    fn rest(&self, i: usize) -> SimTime {
        match (&self.schedules[i], self.steady_secs(i)) {
            (Some(Ok(planned)), Some(steady)) if planned.scale > 1.0 => {
                SimTime::from_secs_f64(steady * (1.0 - 1.0 / planned.scale))
            }
            _ => SimTime::ZERO,
        }
    }
}

/// The bus bandwidth NCCL's model rates its rings and trees from
/// (`nChannels x bw` of the search's graphs), GB/s, and the channels
/// where they are NCCL's search's.
#[derive(Clone, Copy, Debug)]
struct SearchedBus {
    ring: f64,
    tree: f64,
    channels: Option<usize>,
}

impl SearchedBus {
    /// One figure for both, channels unknown.
    fn uniform(bus: f64) -> Self {
        SearchedBus {
            ring: bus,
            tree: bus,
            channels: None,
        }
    }
}

/// NCCL's cost model (`ncclTopoGetAlgoTime`, NVIDIA/nccl
/// `src/graph/tuning.cc`) of one collective: latency plus the bytes over
/// the algorithm bandwidth NCCL derives from its topology search's bus
/// bandwidth, which the simulator takes from NCCL's search where it
/// reproduces it and from the ring's busiest link otherwise
/// ([`Tuner::Nccl`]).
struct NcclRating<'a> {
    fabric: &'a ClusterFabric,
    collective: Collective,
    bytes: u64,
    comm: model::NcclComm,
    /// The channel count the user set ([`CollOptions::channels`]).
    channels: Option<u16>,
}

impl NcclRating<'_> {
    /// NCCL's algorithm bandwidth over its bus bandwidth for `a`: the ring
    /// `nRanks / nsteps` (nccl-tests' bus factor inverted), the tree
    /// all_reduce 0.5.
    fn ratio(&self, a: Algorithm) -> f64 {
        if a == Algorithm::Tree && self.collective == Collective::AllReduce {
            0.5
        } else {
            1.0 / self.collective.busbw_factor(self.comm.ranks)
        }
    }

    /// What NCCL's search gives its rings and trees where the simulator
    /// reproduces it ([`SearchedBus`]): across nodes of NVLink-joined
    /// GPUs with NICs, NCCL's graph across nodes
    /// ([`model::nccl_inter_graph`]; NCCL rates from `bwIntra` up to two
    /// nodes, which for a ring is its `bwInter` and for a tree is raised on
    /// two NVSwitch nodes); on one NVSwitch node its intra-node search
    /// ([`Self::intra_bus_gbps`]). `None` elsewhere (the intra-node search
    /// would decide) or with a channel count the user set (the ring's
    /// busiest link's to rate).
    fn searched(&self) -> Option<SearchedBus> {
        let node = &self.fabric.machine.node;
        let rails = self.fabric.rails().len();
        let searched = self.channels.is_none() && self.comm.nvlink && rails > 0;
        if self.comm.nodes >= 2 && searched {
            let g = nccl_net_graph(self.fabric);
            let tree = g.tree_bw_intra(node.arch, self.comm.nodes, node.nccl_switch_gbps());
            return Some(SearchedBus {
                ring: g.bus_gbps(),
                tree: g.channels as f64 * tree,
                channels: Some(g.channels),
            });
        }
        self.intra_bus_gbps().map(SearchedBus::uniform)
    }

    /// The bus bandwidth NCCL's search gives its rings and trees on one
    /// node whose GPUs meet at an NVSwitch, GB/s
    /// ([`model::nccl_nvswitch_ring_bus_gbps`]: on H100s 360, where the
    /// links give 370.8); `None` elsewhere, or with a channel count the user
    /// set (the ring's busiest link's to rate).
    fn intra_bus_gbps(&self) -> Option<f64> {
        let node = &self.fabric.machine.node;
        let gpu_gbps = node.nccl_switch_gbps()?;
        (self.comm.nodes == 1 && self.comm.ranks > 1 && self.channels.is_none())
            .then(|| model::nccl_nvswitch_ring_bus_gbps(node.arch, gpu_gbps))
    }

    /// The bus bandwidth, GB/s, of a schedule of `a` whose busiest link
    /// takes `link` seconds at one wire byte per payload byte.
    fn bus_gbps(&self, a: Algorithm, link: f64) -> f64 {
        self.bytes as f64 / (link.max(1e-18) * self.ratio(a)) / 1e9
    }

    /// NCCL's time of `a` under `p` from the bus bandwidth its search
    /// gives, seconds: `tuning.cc`'s refinements in its order (a tree
    /// all_reduce's x0.92 and ceiling per channel, the protocol's factor
    /// and `llMaxBws` cap, LL128's ceilings per channel), then a tree's
    /// correction by size, the algorithm bandwidth ratio and NCCL's
    /// latency. The per-channel ceilings ([`model::nccl_channel_caps`])
    /// apply to rings and trees where the channels are known.
    fn schedule_secs(&self, a: Algorithm, p: Protocol, bus: SearchedBus) -> f64 {
        let bw = protocol_bandwidth(self.fabric, a.name(), p);
        let tree = a == Algorithm::Tree && self.collective == Collective::AllReduce;
        let arch = self.fabric.machine.node.arch;
        let caps = bus
            .channels
            .filter(|_| matches!(a, Algorithm::Ring | Algorithm::Tree))
            .map(|ch| (ch as f64, model::nccl_channel_caps(arch, self.comm.nodes)));
        let mut busbw = if a == Algorithm::Tree {
            bus.tree
        } else {
            bus.ring
        };
        if tree {
            busbw *= model::NCCL_TREE_ALL_REDUCE_BW;
            if let Some((ch, c)) = caps {
                busbw = busbw.min(ch * c.tree);
            }
        }
        busbw /= bw.factor;
        if let Some(cap) = bw.cap_gbps {
            busbw = busbw.min(cap);
        }
        if let (Protocol::Ll128, Some((ch, c))) = (p, caps) {
            let per_channel = if a == Algorithm::Tree {
                c.tree_ll128
            } else {
                c.ring_ll128
            };
            busbw = busbw.min(ch * per_channel);
        }
        if tree {
            busbw *= model::nccl_tree_correction(p, self.bytes);
        }
        let lat =
            model::nccl_model_latency_us(a.name(), p, self.collective, self.bytes, &self.comm);
        lat * 1e-6 + self.bytes as f64 / (busbw * self.ratio(a) * 1e9)
    }

    /// NCCL's time of PAT under `p` at bus bandwidth `bus` GB/s, seconds:
    /// its factor (0.75 of the bus bandwidth) taken as the algorithm
    /// bandwidth, which NCCL does not convert for PAT ("Convert bus BW to
    /// algorithm BW" skips the all_gather and reduce_scatter of every
    /// algorithm but the ring), plus its latency.
    fn pat_secs(&self, p: Protocol, bus: f64) -> f64 {
        let bw = protocol_bandwidth(self.fabric, "pat", p);
        let lat = model::nccl_model_latency_us("pat", p, self.collective, self.bytes, &self.comm);
        lat * 1e-6 + self.bytes as f64 / (bus / bw.factor * 1e9)
    }
}

/// NCCL's bandwidth model of `protocol` for `algo` on this fabric.
fn protocol_bandwidth(
    fabric: &ClusterFabric,
    algo: &str,
    protocol: Protocol,
) -> model::ProtocolBandwidth {
    let node = &fabric.machine.node;
    model::nccl_protocol_bandwidth(algo, protocol, node.arch, fabric.nodes(), node.amd_cpu)
}

/// How the executor prepares schedules for `opts`.
fn prepare_config(opts: &CollOptions) -> ExecConfig {
    ExecConfig {
        symmetry: opts.symmetry,
        trace_ranks: opts.trace_ranks,
        ..ExecConfig::default()
    }
}

/// How [`simulate`] runs a schedule of `collective` with `a` under
/// `protocol`: NCCL's overheads, the protocol's wire factor and rate cap,
/// NVLink connections held per slice where NCCL reads
/// ([`ExecConfig::hold_nvlink`]), and `opts`' symmetry and tracing.
pub fn exec_config(
    fabric: &ClusterFabric,
    collective: Collective,
    a: Algorithm,
    protocol: Protocol,
    opts: &CollOptions,
) -> ExecConfig {
    exec_config_named(fabric, collective, a, a.name(), protocol, opts)
}

/// NCCL's overheads of the algorithm it calls `nccl` under `protocol` on
/// this fabric ([`model::nccl_overheads`]); PAT's launch adds NCCL's linear
/// part, [`model::NCCL_PAT_PER_RANK_US`] per rank; a ring all_reduce,
/// all_gather or reduce_scatter across nodes pays at least the network
/// post overhead on every step ([`model::nccl_net_post_us`]), inside a
/// node too.
fn exec_overheads(
    fabric: &ClusterFabric,
    collective: Collective,
    nccl: &str,
    protocol: Protocol,
) -> crate::exec::Overheads {
    let mut o = model::nccl_overheads(nccl, protocol);
    let ring_steps = matches!(
        collective,
        Collective::AllReduce | Collective::AllGather | Collective::ReduceScatter
    );
    if nccl == "ring" && ring_steps && fabric.nodes() > 1 {
        let post = SimTime::from_us(model::nccl_net_post_us(
            fabric.machine.node.amd_cpu,
            protocol,
        ));
        o.step_nvlink = o.step_nvlink.max(post);
        o.step_pcie = o.step_pcie.max(post);
    }
    if nccl == "pat" {
        o.launch = o.launch.saturating_add(SimTime::from_us(
            model::NCCL_PAT_PER_RANK_US * fabric.ranks() as f64,
        ));
    }
    o
}

/// [`exec_config`] of schedule `a` run with the figures of the algorithm
/// NCCL calls `nccl` (PAT runs the Bruck schedule).
fn exec_config_named(
    fabric: &ClusterFabric,
    collective: Collective,
    a: Algorithm,
    nccl: &str,
    protocol: Protocol,
    opts: &CollOptions,
) -> ExecConfig {
    let bw = protocol_bandwidth(fabric, nccl, protocol);
    ExecConfig {
        overheads: exec_overheads(fabric, collective, nccl, protocol),
        // The cap is on payload (bus) bandwidth; flows carry `factor`
        // bytes per payload byte.
        send_cap_gbps: bw.cap_gbps.map(|c| c * bw.factor),
        // The protocol's flags and their cost travel with the data:
        // transfers move NCCL's bandwidth factor times the payload.
        wire_factor: bw.factor,
        hold_nvlink: nccl_reads(fabric, collective, a, protocol).is_some(),
        ..prepare_config(opts)
    }
}

/// Simulates candidate `c` with `protocol`: its time, and the run's
/// details for a schedule (`prepared`: its steps, and the time of the
/// part of the collective they leave out, [`Preps::rest`]).
#[allow(clippy::too_many_arguments)]
fn run_one(
    fabric: &ClusterFabric,
    collective: Collective,
    bytes: u64,
    c: AlgoChoice,
    protocol: Protocol,
    opts: &CollOptions,
    prepared: Option<(&Prepared, SimTime)>,
) -> Result<(SimTime, Option<ExecResult>), SimError> {
    let r = match c {
        AlgoChoice::Nvls => {
            nvls_eligible(fabric, collective)?;
            if fabric.nodes() > 1 {
                (innet::nvls_sharp_all_reduce(fabric, bytes)?, None)
            } else {
                (nvls_one_node(fabric, collective, bytes)?, None)
            }
        }
        AlgoChoice::CollNet => {
            innet::collnet_eligible(fabric, collective)?;
            (innet::collnet_all_reduce(fabric, bytes)?, None)
        }
        AlgoChoice::CollNetChain => {
            innet::collnet_chain_eligible(fabric, collective)?;
            (innet::collnet_chain_all_reduce(fabric, bytes)?, None)
        }
        AlgoChoice::NvlsTree => {
            innet::nvls_tree_eligible(fabric, collective)?;
            (innet::nvls_tree_all_reduce(fabric, bytes)?, None)
        }
        AlgoChoice::Discarded => (SimTime::ZERO, None),
        AlgoChoice::Schedule(_) | AlgoChoice::Pat => {
            // (PAT's eligibility was checked when its schedule was built.)
            let a = c
                .schedule()
                .ok_or_else(|| SimError::Model(format!("{} runs no schedule", c.name())))?;
            let (prepared, rest) = prepared
                .ok_or_else(|| SimError::Model(format!("{} was not prepared", c.name())))?;
            let cfg = exec_config_named(fabric, collective, a, c.name(), protocol, opts);
            let r = prepared.run(&fabric.transfers(is_p2p(collective)), &cfg)?;
            (r.time.saturating_add(rest), Some(r))
        }
    };
    SimError::within_time_range(r.0)?;
    Ok(r)
}

/// NVLS all_reduce inside one NVSwitch node, as NCCL's kernel runs it
/// (NVIDIA/nccl `src/device/all_reduce.h`, NVLS, one node); across nodes
/// NVLS with SHARP ([`innet::nvls_sharp_all_reduce`]).
///
/// Traffic: every GPU pulls its shard reduced by the switch
/// (`multimem.ld_reduce`: its link carries S up and S/n down) and
/// multicasts the result (`multimem.st`: S/n up, S down), so each direction
/// of each GPU link carries S(n+1)/n, at NCCL's per-link figure times
/// `nvlsEfficiency` and `(nChannels-1)/nChannels` (NCCL tuning.cc).
/// All_gather and reduce_scatter run one of the two phases
/// ([`nvls_one_node`]).
///
/// Pipeline: each of NCCL's [`model::nvls_channels`] channels (16 on
/// Hopper) takes its share of the buffer and runs it in loops of `n` chunks ([`model::nvls_chunk`]:
/// 16 KiB to 128 KiB by size); every loop its warps scatter the input,
/// the heads reduce and multicast, the others gather, each stage handing
/// the loop on with one Simple-protocol step over NVLink (NCCL's `hwLat`,
/// 3.4 us), which the data does not hide. The fill and drain cost one more
/// loop. `nvlsEfficiency` is NCCL's rate for large messages, which run
/// 128 KiB chunks, so the per-loop steps of that chunk are taken out of it
/// first (not counted twice). Latency: NCCL's NVLS `hwLat` (which holds
/// the switch's two hops).
pub fn nvls_all_reduce(fabric: &ClusterFabric, bytes: u64) -> Result<SimTime, SimError> {
    if fabric.nodes() > 1 {
        return innet::nvls_sharp_all_reduce(fabric, bytes);
    }
    nvls_one_node(fabric, Collective::AllReduce, bytes)
}

/// NVLS inside one NVSwitch node: all_reduce ([`nvls_all_reduce`]), or
/// all_gather or reduce_scatter of `bytes` in all (nccl-tests' size), as
/// NCCL's kernels run them (`src/device/all_gather.h`,
/// `reduce_scatter.h`, NVLS, one node): an all_gather multicasts each
/// GPU's part (`multimem.st`: its link carries S/n up and all S down), a
/// reduce_scatter pulls each GPU's part reduced (`multimem.ld_reduce`: S
/// up, S/n down). "Instead of transmitting (N-1)/N*size in both
/// directions, it will transmit size in one direction and 1/N*size in the
/// other ... in terms of total time, it's worse" (NCCL's maintainer,
/// NVIDIA/nccl issues 1506 and 1083). The same rate, chunks and loops as
/// the all_reduce (`enqueue.cc` chunks NVLS the same for all three), with
/// S instead of S(n+1)/n on the busier direction.
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::collective::nvls_one_node;
/// use gpucomm_sim::{Engine, Machine};
///
/// let f = Machine::preset("dgx-h100").unwrap().fabric(Engine::Nccl, 1).unwrap();
/// let ag = nvls_one_node(&f, Collective::AllGather, 1 << 30).unwrap();
/// let rs = nvls_one_node(&f, Collective::ReduceScatter, 1 << 30).unwrap();
/// let ar = nvls_one_node(&f, Collective::AllReduce, 1 << 30).unwrap();
/// assert_eq!(ag, rs);
/// // 8 GPUs: S against 9/8 S on the busier direction.
/// assert!(ag < ar && ar.as_us() < ag.as_us() * 9.0 / 8.0 + 1.0);
/// ```
pub fn nvls_one_node(
    fabric: &ClusterFabric,
    collective: Collective,
    bytes: u64,
) -> Result<SimTime, SimError> {
    let nv = NvlsNode::of(fabric, collective)?;
    let n = nv.ranks as f64;
    let ch = model::nvls_channels(fabric.machine.node.arch, 1);
    let step = model::nccl_overheads("ring", Protocol::Simple)
        .step_nvlink
        .as_us();
    // A loop of the largest chunks at NCCL's rate, us, and the rate
    // without its step (at most twice NCCL's, should a slow link make a
    // loop shorter than two steps).
    let rate = nv.rate / ch;
    let big = n * model::NVLS_MAX_CHUNK as f64 * nv.wire / rate;
    let raw = rate * big / (big - step).max(big / 2.0);
    let chunk = model::nvls_chunk(bytes, ch as u64, nv.ranks as u64) as f64;
    let per_channel = bytes as f64 / ch;
    let per_loop = n * chunk;
    let loops = (per_channel / per_loop).ceil().max(1.0);
    let data_us = (per_channel + per_loop.min(per_channel)) * nv.wire / raw;
    Ok(SimTime::from_us(
        nv.latency_us + (loops + 1.0) * step + data_us,
    ))
}

/// NCCL's model of NVLS inside one node, which its tuner
/// picks by: its latency plus the bytes at the algorithm bandwidth
/// `tuning.cc` gives NVLS from the NVLS graph its search finds
/// ([`model::nccl_nvls_graph`], [`model::NcclNvlsGraph::gbps`]). That
/// figure is not the simulated rate: it grows with the GPUs in a way the
/// links do not (on H100s 102, 160, 216 and 272 GB/s on 2, 4, 6 and 8
/// GPUs, where NCCL measures 207, 251, 266 and 274), so NCCL runs rings
/// on 2 and 4 H100s and NVLS from 6.
///
/// For all_gather and reduce_scatter NCCL's figure (25.5, 114.8, 177.1
/// GB/s on 2, 4, 6 H100s in the same tables) is taken as their algorithm
/// bandwidth without conversion, as `tuning.cc` takes it: NCCL's model
/// never prefers them to its rings.
pub fn nvls_model_time(
    fabric: &ClusterFabric,
    collective: Collective,
    bytes: u64,
) -> Result<SimTime, SimError> {
    let nv = NvlsNode::of(fabric, collective)?;
    let arch = fabric.machine.node.arch;
    let (n, gpu_gbps) = (nv.ranks, nv.gpu_gbps);
    let graph = model::nccl_nvls_graph(arch, gpu_gbps, n).ok_or_else(|| {
        SimError::Model(format!(
            "NCCL's search finds no NVLS graph for {n} GPUs at {gpu_gbps} GB/s each"
        ))
    })?;
    let algbw = if collective == Collective::AllReduce {
        graph.gbps(arch, true, n) * n as f64 / (2.0 * (n as f64 - 1.0))
    } else {
        graph.gbps(arch, false, n)
    };
    Ok(SimTime::from_us(
        nv.latency_us + bytes as f64 / (algbw * 1e3),
    ))
}

/// NVLS inside one node: what [`nvls_all_reduce`] and its NCCL model
/// rating share.
struct NvlsNode {
    ranks: usize,
    /// NCCL's figure for a GPU's link to the switch, GB/s (per link times
    /// the links).
    gpu_gbps: f64,
    /// Bytes per us on each direction of a GPU's link, at NCCL's per-link
    /// figure times `nvlsEfficiency` and `(nChannels-1)/nChannels`.
    rate: f64,
    /// Bytes the busier direction of a GPU's link carries per byte of
    /// buffer (all_reduce `(n+1)/n`, all_gather and reduce_scatter 1).
    wire: f64,
    /// NCCL's NVLS latency, us (its hwLat holds the switch's hops).
    latency_us: f64,
}

impl NvlsNode {
    /// Refuses a fabric of several nodes, one whose NVSwitch does not
    /// reduce, or a collective NVLS does not run there.
    fn of(fabric: &ClusterFabric, collective: Collective) -> Result<Self, SimError> {
        if fabric.nodes() > 1 {
            return Err(SimError::Model(
                "this NVLS model is for one node (across nodes: innet::nvls_sharp_all_reduce)"
                    .into(),
            ));
        }
        nvls_eligible(fabric, collective)?;
        let m = &fabric.machine;
        let gpu_gbps = m
            .node
            .nccl_switch_gbps()
            .ok_or_else(|| SimError::Model("nvls needs an NVSwitch".into()))?;
        let n = fabric.ranks();
        let ch = model::nvls_channels(m.node.arch, 1);
        let eff = model::nvls_efficiency(m.node.arch) * (ch - 1.0) / ch;
        Ok(NvlsNode {
            ranks: n,
            gpu_gbps,
            rate: gpu_gbps * eff * 1e3,
            wire: if collective == Collective::AllReduce {
                (n as f64 + 1.0) / n as f64
            } else {
                1.0
            },
            latency_us: innet::nccl_latency(fabric, "nvls", 0).as_us(),
        })
    }
}

/// The communicator `fabric` makes, as NCCL's cost model sees it
/// ([`model::NcclComm`]); `channels` as [`CollOptions::channels`] (by
/// default one per NIC).
pub fn nccl_comm(fabric: &ClusterFabric, channels: Option<u16>) -> model::NcclComm {
    let node = &fabric.machine.node;
    model::NcclComm {
        ranks: fabric.ranks(),
        nodes: fabric.nodes(),
        nvlink: node.has_nvlink(),
        arch: node.arch,
        amd_cpu: node.amd_cpu,
        channels: channels.map_or(fabric.rails().len().max(1), usize::from),
        same_channels: fabric.nodes() == 1 || fabric.rails().len() <= 1,
    }
}

/// Builds the NCCL-engine fabric of `machine` on `nodes` nodes.
pub fn nccl_fabric(machine: &Machine, nodes: usize) -> Result<ClusterFabric, SimError> {
    machine.fabric(Engine::Nccl, nodes)
}

/// The candidates of `order` (sorted by bound) that a branch and bound run
/// one at a time skips: those whose bound is above the best time of the
/// candidates before them that it ran (with 1e-9 of relative slack: a
/// bound is a float, times whole picoseconds). `times[i]` is candidate
/// i's simulated time, `None` for an error or a run that did not happen.
/// Running in waves runs a superset of these candidates' complement, so
/// this turns any wave size's outcome into the one-at-a-time outcome.
fn one_at_a_time_skips(order: &[usize], bounds: &[f64], times: &[Option<SimTime>]) -> Vec<usize> {
    let mut best: Option<SimTime> = None;
    let mut skips = Vec::new();
    for &i in order {
        if best.is_some_and(|b| bounds[i] > b.as_secs_f64() * (1.0 + 1e-9)) {
            skips.push(i);
        } else if let Some(t) = times[i] {
            best = Some(best.map_or(t, |b| b.min(t)));
        }
    }
    skips
}

#[cfg(test)]
mod bound_tests {
    use super::*;

    #[test]
    fn the_report_is_what_a_one_at_a_time_search_runs_whatever_ran_in_waves() {
        let t = |us: u64| Some(SimTime::from_secs_f64(us as f64 * 1e-6));
        // Bounds 1, 2, 3, 4 us; candidate 0 takes 2.5 us, 1 takes 5, 2
        // (bound 3 > 2.5) and 3 are skipped one at a time, though a wave
        // of four ran them all.
        let order = [0, 1, 2, 3];
        let bounds = [1e-6, 2e-6, 3e-6, 4e-6];
        let times = [Some(SimTime::from_secs_f64(2.5e-6)), t(5), t(3), t(4)];
        assert_eq!(one_at_a_time_skips(&order, &bounds, &times), vec![2, 3]);
        // The same when only the one-at-a-time set ran.
        let ran = [times[0], times[1], None, None];
        assert_eq!(one_at_a_time_skips(&order, &bounds, &ran), vec![2, 3]);
        // An error does not set the best: 1 and 2 run, 3 (4 > 3) is skipped.
        let err = [None, t(5), t(3), t(4)];
        assert_eq!(one_at_a_time_skips(&order, &bounds, &err), vec![3]);
    }
}

#[cfg(test)]
mod p2p_channel_tests {
    use super::*;

    #[test]
    fn nics_a_gpu_drives_and_what_a_local_peer_gets_follow_nccl() {
        let fabric = |name: &str, nics: Option<usize>, gpus: usize| {
            let mut m = Machine::select_with_nics(name, nics, None).unwrap();
            m.use_gpus(gpus).unwrap();
            m.fabric(Engine::Nccl, 2).unwrap()
        };
        // Behind a PCIe switch NCCL finds no GPU-to-CPU link: none.
        assert_eq!(nccl_net_count_by_bw(&fabric("dgx-h100", None, 8)), 0);
        // A Grace superchip's GPU reaches its CPU over C2C (450 GB/s): its
        // one NIC counts.
        assert_eq!(nccl_net_count_by_bw(&fabric("gh200", None, 1)), 1);
        // Two NICs next to it carry less than the C2C link: both count.
        assert_eq!(nccl_net_count_by_bw(&fabric("gh200", Some(2), 1)), 2);
        // Local peers: 2 per NVLink's worth (18 on an H100's switch), 2 on
        // a mesh pair with none, none with one GPU a node.
        assert_eq!(
            nccl_local_peer_channels(&fabric("dgx-h100", None, 8)),
            Some(36)
        );
        assert_eq!(
            nccl_local_peer_channels(&fabric("dgx1-v100", None, 8)),
            Some(2)
        );
        assert_eq!(
            nccl_local_peer_channels(&fabric("dgx1-v100", None, 1)),
            None
        );
        assert_eq!(
            nccl_local_peer_channels(&fabric("pcie-8gpu", None, 4)),
            Some(2)
        );
        // The communicator's channels point-to-point operations start
        // from: the ring graph's duplicated, NVLS's where it runs.
        let comm = |name, nics, gpus| nccl_comm_channels(&fabric(name, nics, gpus));
        // 8 graph channels at 48 GB/s (Hopper, no graph duplication): 16,
        // NVLS's 16 too; on 2 GPUs a node their 2 NICs, 2 at 48 duplicated
        // in the graph to 4 at 24: 8 (no NVLS on 2 GPUs).
        assert_eq!(comm("dgx-h100", None, 8), 16);
        assert_eq!(comm("dgx-h100", None, 2), 8);
        // 8 at 24 (A100 behind PCIe Gen4): 16.
        assert_eq!(comm("dgx-a100", None, 8), 16);
        // Blackwell's 32 NVLS channels across nodes.
        assert_eq!(comm("dgx-b200", None, 8), 32);
        // 72 NICs: the graph's 32 rings, duplicated to MAXCHANNELS.
        assert_eq!(comm("gb200-nvl72", None, 72), 64);
        // One 400G NIC a GPU: 1 at 48, duplicated in the graph to 2 at 24: 4.
        assert_eq!(comm("gh200", None, 1), 4);
        // Five 400G NICs on an H100 node: 5 at 48 (no duplication past 4
        // channels below 50 GB/s), 10, doubled again below 16: 20; NVLS 16.
        assert_eq!(comm("dgx-h100", Some(5), 8), 20);
    }
}
