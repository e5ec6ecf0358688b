//! What a collective computes: the [`Problem`] a schedule solves.

use serde::{Deserialize, Serialize};

/// A collective operation, with the buffer layout every engine uses.
///
/// `count` below is [`Problem::count`]; "block `r`" is element range
/// [`block_partition`]`(count, nranks, r)`, so counts need not divide by the
/// number of ranks (the first `count % nranks` blocks get one element more).
///
/// | collective | input of rank r | output of rank r |
/// |---|---|---|
/// | `AllReduce` | `count` | `count`: the op over all inputs |
/// | `ReduceScatter` | `count` | block r of the op over all inputs |
/// | `AllGather` | block r of the full vector (`block_len(r)` elements) | `count`: every rank's block in place |
/// | `Broadcast` | `count` (only the root's is read) | `count`: the root's input |
/// | `Reduce` | `count` | `count` on the root: the op over all inputs (other ranks: undefined, length `count`) |
/// | `AllToAll` | `nranks * count`: block p (of `count`) goes to rank p | `nranks * count`: block p came from rank p |
/// | `SendRecv` | `count`, sent to rank `(r + shift) % n` | `count`, received from rank `(r - shift) mod n` |
/// | `Gather` | `count`, sent to the root | on the root `nranks * count`: block q came from rank q (other ranks: 0) |
/// | `Scatter` | on the root `nranks * count`: block q goes to rank q (other ranks: 0) | `count`: block r of the root's input |
/// | `Barrier` | 0 | 0: completes on a rank only after every rank has entered |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Collective {
    /// Every rank ends with the reduction of all inputs.
    AllReduce,
    /// Rank r ends with block r of the reduction of all inputs.
    ReduceScatter,
    /// Every rank ends with the concatenation of all ranks' blocks.
    AllGather,
    /// Every rank ends with the root's input.
    Broadcast {
        /// The rank whose data is broadcast.
        root: usize,
    },
    /// The root ends with the reduction of all inputs.
    Reduce {
        /// The rank that receives the result.
        root: usize,
    },
    /// Rank r sends block p of its input to rank p, which stores it as block r.
    AllToAll,
    /// Each rank sends its input to the rank `shift` places after it (a ring
    /// shift, as nccl-tests' sendrecv measures).
    SendRecv {
        /// Distance to the destination rank (taken modulo `nranks`).
        shift: usize,
    },
    /// Synchronisation only.
    Barrier,
    /// The root ends with every rank's input, in rank order (`MPI_Gather`;
    /// nccl-tests' gather).
    Gather {
        /// The rank that receives every block.
        root: usize,
    },
    /// Rank r ends with block r of the root's input (`MPI_Scatter`;
    /// nccl-tests' scatter).
    Scatter {
        /// The rank whose input is cut into blocks.
        root: usize,
    },
}

impl Collective {
    /// The short name used on command lines and in JSON (`all_reduce`, ...).
    pub const fn name(&self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllGather => "all_gather",
            Collective::Broadcast { .. } => "broadcast",
            Collective::Reduce { .. } => "reduce",
            Collective::AllToAll => "all_to_all",
            Collective::SendRecv { .. } => "sendrecv",
            Collective::Barrier => "barrier",
            Collective::Gather { .. } => "gather",
            Collective::Scatter { .. } => "scatter",
        }
    }

    /// Every collective, rooted ones at rank 0 and sendrecv shifting by one
    /// (as nccl-tests runs them).
    pub const ALL: [Collective; 10] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast { root: 0 },
        Collective::Reduce { root: 0 },
        Collective::AllToAll,
        Collective::SendRecv { shift: 1 },
        Collective::Barrier,
        Collective::Gather { root: 0 },
        Collective::Scatter { root: 0 },
    ];

    /// Parses a name as NCCL, nccl-tests and [`Collective::name`] spell it:
    /// case, `_`, `-` and spaces aside, with or without nccl-tests'
    /// `_perf`, and `bcast`; rooted collectives at rank 0, sendrecv
    /// shifting by one.
    ///
    /// ```
    /// use gpucomm_algo::Collective;
    /// assert_eq!(Collective::from_name("AllReduce"), Some(Collective::AllReduce));
    /// assert_eq!(Collective::from_name("all_gather_perf"), Some(Collective::AllGather));
    /// assert_eq!(Collective::from_name("bcast"), Some(Collective::Broadcast { root: 0 }));
    /// assert_eq!(Collective::from_name("scan"), None);
    /// ```
    pub fn from_name(s: &str) -> Option<Self> {
        let key: String = s
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase();
        let key = key.strip_suffix("perf").unwrap_or(&key);
        if key == "bcast" {
            return Some(Collective::Broadcast { root: 0 });
        }
        Self::ALL
            .into_iter()
            .find(|c| c.name().replace('_', "") == key)
    }

    /// The same collective rooted at `root` where it has a root (command
    /// lines name the collective and give `--root` apart).
    ///
    /// ```
    /// use gpucomm_algo::Collective;
    /// let c = Collective::from_name("gather").unwrap();
    /// assert_eq!(c.with_root(3), Collective::Gather { root: 3 });
    /// assert_eq!(Collective::AllReduce.with_root(3), Collective::AllReduce);
    /// ```
    pub const fn with_root(self, root: usize) -> Self {
        match self {
            Collective::Broadcast { .. } => Collective::Broadcast { root },
            Collective::Reduce { .. } => Collective::Reduce { root },
            Collective::Gather { .. } => Collective::Gather { root },
            Collective::Scatter { .. } => Collective::Scatter { root },
            c => c,
        }
    }

    /// The root of a rooted collective.
    pub const fn root(&self) -> Option<usize> {
        match *self {
            Collective::Broadcast { root }
            | Collective::Reduce { root }
            | Collective::Gather { root }
            | Collective::Scatter { root } => Some(root),
            _ => None,
        }
    }

    /// True where [`Problem::count`] is one block, a peer's (all_to_all)
    /// or a rank's (gather, scatter), and the size nccl-tests reports is
    /// `nranks` of them.
    ///
    /// ```
    /// use gpucomm_algo::Collective;
    /// assert!(Collective::Gather { root: 0 }.count_is_a_block());
    /// assert!(!Collective::AllGather.count_is_a_block());
    /// ```
    pub const fn count_is_a_block(&self) -> bool {
        matches!(
            self,
            Collective::AllToAll | Collective::Gather { .. } | Collective::Scatter { .. }
        )
    }

    /// True where a call of no elements still meets its peers: the
    /// barrier, and gather and scatter, whose empty blocks go as NCCL's
    /// empty point-to-point operations do (a rank whose block is empty
    /// where the root's are not meets the root, and their descriptors
    /// disagree).
    pub const fn meets_when_empty(&self) -> bool {
        matches!(
            self,
            Collective::Barrier | Collective::Gather { .. } | Collective::Scatter { .. }
        )
    }

    /// True for the collectives that combine data with a reduction op.
    pub const fn reduces(&self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
        )
    }

    /// nccl-tests' bus-bandwidth factor: busbw = algbw * factor
    /// (doc/PERFORMANCE.md in NVIDIA/nccl-tests).
    pub fn busbw_factor(&self, nranks: usize) -> f64 {
        let n = nranks.max(1) as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::ReduceScatter
            | Collective::AllGather
            | Collective::AllToAll
            | Collective::Gather { .. }
            | Collective::Scatter { .. } => (n - 1.0) / n,
            Collective::Broadcast { .. }
            | Collective::Reduce { .. }
            | Collective::SendRecv { .. }
            | Collective::Barrier => 1.0,
        }
    }
}

/// Reduction operators. Schedules do not depend on the op (see the module
/// docs of [`crate::Schedule`]); engines apply it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Sum divided by the number of ranks.
    Avg,
}

impl ReduceOp {
    /// Every op, in a fixed order.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    /// The short name (`sum`, `prod`, `min`, `max`, `avg`).
    pub const fn name(&self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }
}

/// Algorithms a schedule can be built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Ring, with parallel channels and chunk pipelining.
    Ring,
    /// NCCL's double binary tree.
    Tree,
    /// Recursive halving-doubling (Rabenseifner), bandwidth-optimal.
    HalvingDoubling,
    /// Recursive doubling, latency-optimal for small messages.
    RecursiveDoubling,
    /// Every peer at once.
    Direct,
    /// Two levels: intra-node, then inter-node per rail, then intra-node.
    Hierarchical,
    /// Bruck's all-gather (and its mirror, a reduce-scatter): `ceil(log2 n)`
    /// rounds for any rank count, each rank sending `n-1` blocks in all.
    Bruck,
}

impl Algorithm {
    /// Every algorithm, in a fixed order.
    pub const ALL: [Algorithm; 7] = [
        Algorithm::Ring,
        Algorithm::Tree,
        Algorithm::HalvingDoubling,
        Algorithm::RecursiveDoubling,
        Algorithm::Direct,
        Algorithm::Hierarchical,
        Algorithm::Bruck,
    ];

    /// The short name used on command lines (`ring`, `tree`, `halving_doubling`, ...).
    pub const fn name(&self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::HalvingDoubling => "halving_doubling",
            Algorithm::RecursiveDoubling => "recursive_doubling",
            Algorithm::Direct => "direct",
            Algorithm::Hierarchical => "hierarchical",
            Algorithm::Bruck => "bruck",
        }
    }

    /// Parses a name as printed by [`Algorithm::name`] (`-` accepted for `_`).
    pub fn from_name(s: &str) -> Option<Self> {
        let s = s.replace('-', "_").to_ascii_lowercase();
        Self::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// The element range of block `index` when `count` elements are split into
/// `parts` blocks as evenly as possible: the first `count % parts` blocks get
/// one element more. Returns `(offset, len)`.
///
/// ```
/// assert_eq!(gpucomm_algo::block_partition(10, 4, 0), (0, 3));
/// assert_eq!(gpucomm_algo::block_partition(10, 4, 3), (8, 2));
/// ```
pub const fn block_partition(count: usize, parts: usize, index: usize) -> (usize, usize) {
    if parts == 0 {
        return (0, 0);
    }
    let base = count / parts;
    let extra = count % parts;
    let len = base + if index < extra { 1 } else { 0 };
    let offset = index * base + if index < extra { index } else { extra };
    (offset, len)
}

/// What a schedule computes: a collective on `count` elements of
/// `elem_size` bytes over `nranks` ranks, `ranks_per_node` of them per node
/// (ranks are numbered node by node: rank r is on node `r / ranks_per_node`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Problem {
    /// The collective and its root or shift.
    pub collective: Collective,
    /// Elements, as defined per collective in [`Collective`].
    pub count: usize,
    /// Bytes per element (4 for f32).
    pub elem_size: usize,
    /// Number of ranks (>= 1).
    pub nranks: usize,
    /// Ranks per node (>= 1, divides `nranks` for hierarchical algorithms).
    pub ranks_per_node: usize,
}

impl Problem {
    /// The most bytes `count` x `nranks` x `elem_size` may come to
    /// ([`Problem::validate`]): 2^48 - 2^16, 256 TiB.
    pub const MAX_BYTES: usize = (u32::MAX as usize) << 16;

    /// A problem with 4-byte elements.
    pub const fn new(
        collective: Collective,
        count: usize,
        nranks: usize,
        ranks_per_node: usize,
    ) -> Self {
        Self {
            collective,
            count,
            elem_size: 4,
            nranks,
            ranks_per_node,
        }
    }

    /// Checks that the problem can be scheduled at all, whatever the
    /// algorithm: at least one rank, rank per node and byte per element,
    /// a root among the ranks, and a size the schedules can address.
    ///
    /// ```
    /// use gpucomm_algo::{Collective, Problem};
    ///
    /// assert!(Problem::new(Collective::AllReduce, 16, 4, 4).validate().is_ok());
    /// let e = Problem::new(Collective::Broadcast { root: 9 }, 16, 4, 4).validate();
    /// assert_eq!(e.unwrap_err().to_string(), "invalid problem: root 9 out of range for 4 ranks");
    /// ```
    pub fn validate(&self) -> Result<(), crate::AlgoError> {
        use crate::AlgoError::InvalidProblem;
        if self.nranks == 0 {
            return Err(InvalidProblem("nranks must be at least 1".into()));
        }
        if self.ranks_per_node == 0 {
            return Err(InvalidProblem("ranks_per_node must be at least 1".into()));
        }
        if self.elem_size == 0 {
            return Err(InvalidProblem("elem_size must be at least 1".into()));
        }
        if let Some(root) = self.collective.root() {
            if root >= self.nranks {
                return Err(InvalidProblem(format!(
                    "root {root} out of range for {} ranks",
                    self.nranks
                )));
            }
        }
        let elems = self
            .count
            .checked_mul(self.nranks)
            .and_then(|e| e.checked_mul(self.elem_size));
        if elems.is_none_or(|e| e > Self::MAX_BYTES) {
            return Err(InvalidProblem(format!(
                "count {} x {} ranks x {} bytes is too large",
                self.count, self.nranks, self.elem_size
            )));
        }
        Ok(())
    }

    /// The same problem with another element size.
    pub const fn with_elem_size(mut self, elem_size: usize) -> Self {
        self.elem_size = elem_size;
        self
    }

    /// Length in elements of `rank`'s input buffer (see the table in [`Collective`]).
    pub const fn input_len(&self, rank: usize) -> usize {
        match self.collective {
            Collective::AllGather => block_partition(self.count, self.nranks, rank).1,
            Collective::AllToAll => self.count * self.nranks,
            Collective::Scatter { root } => self.whole_on(root, rank),
            Collective::Barrier => 0,
            _ => self.count,
        }
    }

    /// Length in elements of `rank`'s output buffer (see the table in [`Collective`]).
    pub const fn output_len(&self, rank: usize) -> usize {
        match self.collective {
            Collective::ReduceScatter => block_partition(self.count, self.nranks, rank).1,
            Collective::AllToAll => self.count * self.nranks,
            Collective::Gather { root } => self.whole_on(root, rank),
            Collective::Barrier => 0,
            _ => self.count,
        }
    }

    /// A gather's output or a scatter's input: `nranks` blocks of `count`
    /// on the root, nothing elsewhere.
    const fn whole_on(&self, root: usize, rank: usize) -> usize {
        if rank == root {
            self.count * self.nranks
        } else {
            0
        }
    }

    /// Block `index` of the `nranks`-way [`block_partition`] of `count`, as `(offset, len)`.
    pub const fn block(&self, index: usize) -> (usize, usize) {
        block_partition(self.count, self.nranks, index)
    }

    /// The size nccl-tests reports for this problem, in bytes (the larger of a
    /// rank's input and output).
    pub fn bytes(&self) -> usize {
        let n = self.nranks.max(1);
        let elems = match self.collective {
            c if c.count_is_a_block() => self.count * n,
            Collective::Barrier => 0,
            _ => self.count,
        };
        elems * self.elem_size
    }
}
