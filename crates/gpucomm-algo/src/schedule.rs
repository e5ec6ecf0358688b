//! The schedule representation: what one rank does, step by step.
//!
//! A [`Schedule`] is a *description* of a collective algorithm for a given
//! [`Problem`]: it holds only the parameters (collective, counts, ranks,
//! algorithm, channels, chunking), and produces a rank's ordered [`Step`]s on
//! demand with [`Schedule::rank_steps`]. Nothing is stored per rank, so a
//! 16384-rank ring costs the same to describe as a 4-rank one; only the steps of
//! the ranks an engine actually asks for are materialised.
//!
//! # Semantics (shared by the runtime, the simulator and the checker)
//!
//! * Every rank owns three buffers of elements: [`Buf::Input`], [`Buf::Output`]
//!   and [`Buf::Scratch`]. Their lengths are given by [`Schedule::buffer_len`].
//!   Offsets and lengths in steps are in **elements**, never bytes; multiply by
//!   [`Problem::elem_size`] for bytes.
//! * A step may start once every step listed in its [`Step::deps`] (indices
//!   into the same rank's step list, always smaller than its own index) has
//!   completed. Steps with no dependency between them may run concurrently; an
//!   engine is free to run them in any order.
//! * Point-to-point matching is FIFO per `(sender, receiver, channel)`: the
//!   k-th [`StepKind::Send`] from rank `a` to rank `b` on channel `c` (in step
//!   order of `a`) matches the k-th receive ([`StepKind::Recv`] or
//!   [`StepKind::RecvReduce`]) posted by `b` from `a` on channel `c`, and both
//!   carry the same `len`.
//! * Transfers are treated as rendezvous: a send completes when its receive
//!   has completed, and the transfers of one `(sender, receiver, channel)`
//!   connection happen in order. A schedule must not deadlock under those
//!   rules (the checker proves it), so an engine with buffering is also safe.
//! * Two steps of a rank that touch the same elements (one of them writing)
//!   are always ordered by dependencies (the checker proves that too), so any
//!   order an engine picks computes the same result.
//! * Schedules are independent of the reduction operator: they combine
//!   contributions with "the op". [`crate::ReduceOp::Avg`] is a sum followed by
//!   a division by the number of ranks, applied by the engine to the elements
//!   the collective defines as results (see [`crate::Collective`]).
//! * Unless [`Schedule::in_place_safe`] says otherwise, engines running an
//!   in-place call (input and output the same memory, laid out as in NCCL)
//!   must stage the input first.

use serde::{Deserialize, Serialize};

use crate::{Algorithm, Collective, Problem};

/// Which of a rank's buffers a [`Slice`] refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Buf {
    /// The user's send buffer (read only for schedules).
    Input,
    /// The user's receive buffer.
    Output,
    /// Temporary space owned by the engine, `Schedule::buffer_len(rank, Buf::Scratch)` elements.
    Scratch,
}

/// A contiguous range of elements in one of a rank's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Slice {
    /// The buffer.
    pub buf: Buf,
    /// First element.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

impl Slice {
    /// A slice of `len` elements of `buf` starting at `offset`.
    pub const fn new(buf: Buf, offset: usize, len: usize) -> Self {
        Self { buf, offset, len }
    }

    /// One past the last element.
    pub const fn end(&self) -> usize {
        self.offset + self.len
    }
}

/// What a step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepKind {
    /// Send `src` to `peer`.
    Send {
        /// Destination rank.
        peer: usize,
        /// Local data sent.
        src: Slice,
    },
    /// Receive from `peer` into `dst` (overwriting it).
    Recv {
        /// Source rank.
        peer: usize,
        /// Where the data lands.
        dst: Slice,
    },
    /// Receive from `peer` and combine with the op: `dst[i] = src[i] op incoming[i]`.
    /// `src` and `dst` may be the same slice (accumulate in place); keeping
    /// them apart lets an engine reduce straight from a peer's memory into the
    /// output without an intermediate copy.
    RecvReduce {
        /// Source rank.
        peer: usize,
        /// Local operand.
        src: Slice,
        /// Result.
        dst: Slice,
    },
    /// Local copy `dst = src`.
    Copy {
        /// Source.
        src: Slice,
        /// Destination.
        dst: Slice,
    },
    /// Local reduction `dst[i] = dst[i] op src[i]`.
    Reduce {
        /// Operand.
        src: Slice,
        /// Accumulator and result.
        dst: Slice,
    },
}

impl StepKind {
    /// The peer of a communication step, `None` for local steps.
    pub const fn peer(&self) -> Option<usize> {
        match *self {
            StepKind::Send { peer, .. }
            | StepKind::Recv { peer, .. }
            | StepKind::RecvReduce { peer, .. } => Some(peer),
            StepKind::Copy { .. } | StepKind::Reduce { .. } => None,
        }
    }

    /// Number of elements the step moves or combines.
    pub const fn len(&self) -> usize {
        match *self {
            StepKind::Send { src, .. } => src.len,
            StepKind::Recv { dst, .. }
            | StepKind::RecvReduce { dst, .. }
            | StepKind::Copy { dst, .. }
            | StepKind::Reduce { dst, .. } => dst.len,
        }
    }

    /// True when the step moves or combines no element.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True for `Send`.
    pub const fn is_send(&self) -> bool {
        matches!(self, StepKind::Send { .. })
    }

    /// True for `Recv` and `RecvReduce`.
    pub const fn is_recv(&self) -> bool {
        matches!(self, StepKind::Recv { .. } | StepKind::RecvReduce { .. })
    }
}

/// One step of one rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// What the step does.
    #[serde(flatten)]
    pub kind: StepKind,
    /// Channel the step runs on. Channels are independent streams of steps
    /// (NCCL's channels): an engine may drive each on its own connection.
    pub channel: u16,
    /// Indices (into the same rank's steps) of the steps that must complete
    /// before this one starts. Each index is smaller than this step's own.
    pub deps: Vec<u32>,
}

/// One rank's steps with their dependencies in one flat list: step `i` is
/// [`StepList::kind`]`(i)` on [`StepList::channel`]`(i)` after the steps
/// [`StepList::deps`]`(i)` (sorted, each smaller than `i`).
///
/// ```
/// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
///
/// let s = Schedule::new(Problem::new(Collective::AllReduce, 64, 4, 4), Algorithm::Ring).unwrap();
/// let list = s.rank_step_list(1);
/// let steps = s.rank_steps(1);
/// assert_eq!(list.len(), steps.len());
/// for (i, st) in steps.iter().enumerate() {
///     assert_eq!(list.kind(i), &st.kind);
///     assert_eq!(list.deps(i), st.deps.as_slice());
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepList {
    pub(crate) kinds: Vec<(StepKind, u16)>,
    pub(crate) deps: Vec<u32>,
    /// Step `i`'s dependencies are `deps[dep_off[i]..dep_off[i + 1]]`.
    pub(crate) dep_off: Vec<u32>,
}

impl StepList {
    /// Number of steps.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// True when the rank has no step.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// What step `i` does.
    pub fn kind(&self, i: usize) -> &StepKind {
        &self.kinds[i].0
    }

    /// The channel step `i` runs on.
    pub fn channel(&self, i: usize) -> u16 {
        self.kinds[i].1
    }

    /// The steps step `i` waits for.
    pub fn deps(&self, i: usize) -> &[u32] {
        &self.deps[self.dep_off[i] as usize..self.dep_off[i + 1] as usize]
    }

    /// The list of hand-written (or deserialized) steps, as they are: no
    /// check (an engine reports a dependency on a later step itself).
    pub fn from_steps(steps: &[Step]) -> Self {
        let mut list = StepList {
            kinds: Vec::with_capacity(steps.len()),
            deps: Vec::new(),
            dep_off: Vec::with_capacity(steps.len() + 1),
        };
        list.dep_off.push(0);
        for st in steps {
            list.kinds.push((st.kind, st.channel));
            list.deps.extend_from_slice(&st.deps);
            list.dep_off.push(list.deps.len() as u32);
        }
        list
    }

    /// The steps, each with its own dependency vector.
    pub fn into_steps(self) -> Vec<Step> {
        let mut out = Vec::with_capacity(self.kinds.len());
        for (i, &(kind, channel)) in self.kinds.iter().enumerate() {
            out.push(Step {
                kind,
                channel,
                deps: self.deps(i).to_vec(),
            });
        }
        out
    }
}

/// A collective algorithm instantiated for one [`Problem`]: a parametric
/// description that yields each rank's steps on demand.
///
/// ```
/// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
///
/// let problem = Problem::new(Collective::AllReduce, 1024, 4, 4);
/// let schedule = Schedule::new(problem, Algorithm::Ring).unwrap();
/// let steps = schedule.rank_steps(0);
/// assert!(!steps.is_empty());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// What is computed.
    pub problem: Problem,
    /// How.
    pub algorithm: Algorithm,
    /// Parallel channels (>= 1). The data is split between channels.
    pub channels: u16,
    /// Pipelining: the largest piece, in elements, one step moves (0 = no
    /// limit). Smaller chunks mean more, shorter steps that overlap.
    pub chunk_elems: usize,
    /// Ring orders (every ring collective: broadcast and reduce chain
    /// along the ring from or to the root; and the chain inside a node of
    /// tree all_reduce): for channel `c`, entry
    /// `c % len` lists a node's local ranks in the order data travels
    /// between them (a permutation of `0..ranks_per_node`, the same in
    /// every node; a ring leaves node `k` from its last entry to node
    /// `k + 1`'s first; a tree's chain hangs from its first entry). NCCL
    /// orders its rings and chains along the NVLinks it finds
    /// (`graph/search.cc`); on a hybrid cube mesh rank order crosses pairs
    /// with no direct link. Empty (the default): rank order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ring_orders: Vec<Vec<u32>>,
    /// A ring broadcast's or reduce's chain moves each piece between two
    /// ranks of one node in this many parts, one after another, and
    /// between nodes whole (at least 1; pieces of fewer elements go in as
    /// many parts as they have). A rank forwards each part once it has it,
    /// so inside a node a piece streams through the chain while a hop
    /// between nodes still waits for the whole piece: NCCL's LL and LL128
    /// protocols forward every line as it lands, while its network proxy
    /// sends whole buffer steps. Other algorithms ignore it. Default 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub intra_slices: usize,
    /// A tree all_reduce's channels below this run the first tree, the
    /// others the second (NCCL's tree channels and their copies,
    /// `src/graph/connect.cc`: channel `c` and `c + n` share a chain, on
    /// trees 0 and 1); 0 (the default): the first half, rounded up. An
    /// operation NCCL runs on fewer channels than its communicator has
    /// takes its first ones, all on the first tree while it has at most
    /// `n`. Other algorithms ignore it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tree_split: u16,
}

fn is_zero(k: &u16) -> bool {
    *k == 0
}

fn one() -> usize {
    1
}

fn is_one(k: &usize) -> bool {
    *k == 1
}

impl Schedule {
    /// Builds the schedule of `algorithm` for `problem`, with one channel and
    /// no chunk limit. Fails if the problem is malformed (no ranks, a root out
    /// of range, ...) or the algorithm does not implement the collective.
    pub fn new(problem: Problem, algorithm: Algorithm) -> Result<Self, AlgoError> {
        crate::generate::validate(&problem, algorithm)?;
        Ok(Self {
            problem,
            algorithm,
            channels: 1,
            chunk_elems: 0,
            ring_orders: Vec::new(),
            intra_slices: 1,
            tree_split: 0,
        })
    }

    /// Checks that the fields describe a schedule [`Schedule::new`] would
    /// build (useful after deserializing one): a valid problem, an algorithm
    /// that implements it, at least one channel and one slice.
    pub fn validate(&self) -> Result<(), AlgoError> {
        if self.channels == 0 {
            return Err(AlgoError::InvalidProblem(
                "channels must be at least 1".into(),
            ));
        }
        if self.intra_slices == 0 {
            return Err(AlgoError::InvalidProblem(
                "intra_slices must be at least 1".into(),
            ));
        }
        crate::generate::validate(&self.problem, self.algorithm)?;
        check_ring_orders(&self.problem, &self.ring_orders)
    }

    /// The same schedule spread over `channels` parallel channels (at least 1).
    pub fn with_channels(mut self, channels: u16) -> Self {
        self.channels = channels.max(1);
        self
    }

    /// The same schedule with the ring orders `orders` (see
    /// [`Schedule::ring_orders`]); fails unless each is a permutation of
    /// the local ranks and `ranks_per_node` divides the rank count.
    ///
    /// ```
    /// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
    ///
    /// let p = Problem::new(Collective::AllReduce, 64, 4, 4);
    /// let s = Schedule::new(p, Algorithm::Ring).unwrap();
    /// // Channel 0 visits ranks 0, 2, 1, 3; channel 1 the reverse.
    /// let s = s.with_channels(2).with_ring_orders(vec![vec![0, 2, 1, 3], vec![3, 1, 2, 0]]).unwrap();
    /// assert!(s.rank_steps(0).iter().any(|st| st.channel == 1));
    /// assert!(s.clone().with_ring_orders(vec![vec![0, 0, 1, 2]]).is_err());
    /// ```
    pub fn with_ring_orders(mut self, orders: Vec<Vec<u32>>) -> Result<Self, AlgoError> {
        check_ring_orders(&self.problem, &orders)?;
        self.ring_orders = orders;
        Ok(self)
    }

    /// Channel `ch`'s order of a node's local ranks (empty: rank order).
    pub(crate) fn chain_order(&self, ch: usize) -> &[u32] {
        match self.ring_orders.len() {
            0 => &[],
            k => &self.ring_orders[ch % k],
        }
    }

    /// The same schedule with steps of at most `chunk_elems` elements (0 = no limit).
    pub fn with_chunk_elems(mut self, chunk_elems: usize) -> Self {
        self.chunk_elems = chunk_elems;
        self
    }

    /// The same schedule with a ring chain's pieces cut in `slices` parts
    /// on hops inside a node (see [`Schedule::intra_slices`]; at least 1).
    ///
    /// ```
    /// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule, StepKind};
    ///
    /// // Two nodes of two ranks; the chain from rank 0 runs 0 -> 1 -> 2 -> 3.
    /// let p = Problem::new(Collective::Broadcast { root: 0 }, 64, 4, 2);
    /// let s = Schedule::new(p, Algorithm::Ring).unwrap().with_chunk_elems(16).with_intra_slices(4);
    /// let sends = |r| s.rank_steps(r).iter().filter(|st| matches!(st.kind, StepKind::Send { .. })).count();
    /// // 4 pieces of 16: in 4 parts inside a node, whole between nodes.
    /// assert_eq!((sends(0), sends(1), sends(2)), (16, 4, 16));
    /// gpucomm_algo::check(&s).unwrap();
    /// // 0 parts (only by setting the field, from JSON say) is refused.
    /// let mut bad = s.clone();
    /// bad.intra_slices = 0;
    /// assert!(bad.validate().is_err() && gpucomm_algo::check(&bad).is_err());
    /// ```
    pub fn with_intra_slices(mut self, slices: usize) -> Self {
        self.intra_slices = slices.max(1);
        self
    }

    /// The same schedule with a tree all_reduce's channels below `split`
    /// on the first tree and the others on the second (see
    /// [`Schedule::tree_split`]; 0: the first half).
    ///
    /// ```
    /// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
    ///
    /// // Two nodes of one rank: rank 0 is tree 0's root and tree 1's leaf.
    /// let p = Problem::new(Collective::AllReduce, 64, 2, 1);
    /// let s = Schedule::new(p, Algorithm::Tree).unwrap().with_channels(2);
    /// let reduces = |s: &Schedule| {
    ///     s.rank_steps(0).iter().filter(|st| matches!(st.kind, gpucomm_algo::StepKind::RecvReduce { .. })).count()
    /// };
    /// // Channel 1 on tree 1 (the default split): rank 0 reduces one
    /// // channel's half; both on tree 0: both halves.
    /// assert!(reduces(&s) < reduces(&s.clone().with_tree_split(2)));
    /// gpucomm_algo::check(&s.with_tree_split(2)).unwrap();
    /// ```
    pub fn with_tree_split(mut self, split: u16) -> Self {
        self.tree_split = split;
        self
    }

    /// The ordered steps of `rank`, generated on demand.
    ///
    /// # Panics
    /// If `rank >= problem.nranks`, or if the fields were set by hand to
    /// something [`Schedule::validate`] rejects.
    pub fn rank_steps(&self, rank: usize) -> Vec<Step> {
        self.rank_step_list(rank).into_steps()
    }

    /// The steps of `rank` as one [`StepList`]: the same steps as
    /// [`Schedule::rank_steps`], their dependencies in one flat list
    /// instead of a vector per step (what an engine that runs millions of
    /// steps wants).
    ///
    /// # Panics
    /// As [`Schedule::rank_steps`].
    pub fn rank_step_list(&self, rank: usize) -> StepList {
        assert!(rank < self.problem.nranks, "rank {rank} out of range");
        crate::generate::rank_steps(self, rank)
    }

    /// The steps of `rank` as JSON (an array of objects such as
    /// `{"kind":"send","peer":1,"src":{"buf":"input","offset":0,"len":4},"channel":0,"deps":[]}`).
    ///
    /// # Panics
    /// If `rank >= problem.nranks`.
    pub fn rank_steps_json(&self, rank: usize) -> String {
        serde_json::to_string(&self.rank_steps(rank)).expect("steps serialize")
    }

    /// Length in elements of `buf` on `rank` (see the table in [`crate::Collective`]).
    pub fn buffer_len(&self, rank: usize, buf: Buf) -> usize {
        match buf {
            Buf::Input => self.problem.input_len(rank),
            Buf::Output => self.problem.output_len(rank),
            Buf::Scratch => crate::generate::scratch_len(self, rank),
        }
    }

    /// True where the schedule's construction guarantees that every rank
    /// `r + shift` runs the steps of rank `r` moved by `shift`: peers
    /// shifted by `shift` (modulo the ranks), the same kinds, channels and
    /// dependencies, each length within one element of `r`'s (blocks of a
    /// count the ranks do not divide). So for the ring all_reduce, and the
    /// ring reduce_scatter and all_gather of whole blocks (the count a
    /// multiple of the ranks), moved by whole nodes: every node runs the
    /// same ring orders and a rank's steps depend on its place in them
    /// alone (their pieces are cut from the largest block, with explicit
    /// dependencies where a piece is empty). False where only generating
    /// the ranks can tell (a simulator that runs one node for all compares
    /// them then); an uneven all_gather is one (count 1 on 2 ranks: the
    /// second rank's own block is empty, and so is its copy). The property
    /// tests check every schedule it holds for, rank by rank.
    ///
    /// ```
    /// use gpucomm_algo::{Algorithm, Collective, Problem, Schedule};
    /// let p = Problem::new(Collective::AllReduce, 1000, 16, 8);
    /// let ring = Schedule::new(p, Algorithm::Ring).unwrap();
    /// assert!(ring.node_symmetric_by_construction(8));
    /// assert!(!ring.node_symmetric_by_construction(3)); // not whole nodes
    /// let tree = Schedule::new(p, Algorithm::Tree).unwrap();
    /// assert!(!tree.node_symmetric_by_construction(8));
    /// ```
    pub fn node_symmetric_by_construction(&self, shift: usize) -> bool {
        let p = &self.problem;
        let rpn = p.ranks_per_node;
        // (A schedule made by hand or read from a file may hold no ranks.)
        let whole_nodes = p.nranks > 0 && rpn > 0 && p.nranks % rpn == 0 && shift % rpn == 0;
        whole_nodes
            && self.algorithm == Algorithm::Ring
            && match p.collective {
                Collective::AllReduce => true,
                Collective::ReduceScatter | Collective::AllGather => p.count % p.nranks == 0,
                _ => false,
            }
    }

    /// True when the schedule stays correct with input and output aliased as
    /// NCCL lays out in-place calls (same buffer for all_reduce, broadcast,
    /// reduce, all_to_all; the input is block r of the output for all_gather;
    /// the output is block r of the input for reduce_scatter).
    pub fn in_place_safe(&self) -> bool {
        crate::generate::in_place_safe(self)
    }
}

/// Each order a permutation of `0..ranks_per_node`, and whole nodes.
fn check_ring_orders(p: &Problem, orders: &[Vec<u32>]) -> Result<(), AlgoError> {
    if orders.is_empty() {
        return Ok(());
    }
    let rpn = p.ranks_per_node;
    if rpn == 0 || p.nranks % rpn != 0 {
        return Err(AlgoError::InvalidProblem(format!(
            "ring orders need ranks_per_node ({rpn}) to divide nranks ({})",
            p.nranks
        )));
    }
    for (c, o) in orders.iter().enumerate() {
        let mut seen = vec![false; rpn];
        let ok = o.len() == rpn
            && o.iter().all(|&l| {
                let l = l as usize;
                l < rpn && !std::mem::replace(&mut seen[l], true)
            });
        if !ok {
            return Err(AlgoError::InvalidProblem(format!(
                "ring order {c} ({o:?}) is not a permutation of the {rpn} local ranks"
            )));
        }
    }
    Ok(())
}

/// Errors building a schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AlgoError {
    /// The algorithm has no schedule for this collective (or rank layout).
    #[error("algorithm {algorithm} does not implement {collective}{why}")]
    Unsupported {
        /// The collective's name.
        collective: &'static str,
        /// The algorithm's name.
        algorithm: &'static str,
        /// Extra detail, starting with ": " when present.
        why: String,
    },
    /// The problem itself is malformed.
    #[error("invalid problem: {0}")]
    InvalidProblem(String),
}
