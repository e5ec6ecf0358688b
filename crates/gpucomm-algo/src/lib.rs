//! Collective algorithms as pure schedules.
//!
//! Every collective in gpucomm is written once, as a [`Schedule`]: for each
//! rank, the ordered steps it performs on element ranges of its input, output
//! and scratch buffers. A schedule is data produced by pure functions: no
//! sockets, no threads, no clocks. The runtime (`gpucomm`) executes it on real
//! memory and transports, the simulator (`gpucomm-sim`) on a modeled fabric,
//! and the checker in this crate executes it symbolically to prove it right.
//!
//! ```text
//!  Problem ──Schedule::new(algorithm)──> Schedule ──rank_steps(r)──> Vec<Step>
//!     │                                     │                          │
//!     └──tune(&CostModel)──> Schedule       ├─check()──> CheckReport   ├─ runtime
//!                                           ├─predict()─> Prediction   ├─ simulator
//!                                           └─execute()─> Vec<f64>s    └─ JSON
//! ```
//!
//! * [`Schedule::new`] picks an [`Algorithm`] for a [`Problem`] (ring, double
//!   binary tree, halving-doubling, recursive doubling, direct, hierarchical);
//!   [`Schedule::rank_steps`] generates one rank's [`Step`]s on demand, so a
//!   16384-rank schedule costs a few numbers until a rank asks for its steps.
//! * [`check`] proves a schedule right: every rank ends with exactly the
//!   contributions the collective defines, every send meets a receive of
//!   the same size, no rendezvous deadlock, no race between a rank's steps,
//!   and (when claimed) in-place safety. It counts bytes and the critical path.
//! * [`execute`] runs a schedule on numbers, [`expected`] computes the
//!   collective directly: the reference both engines are tested against.
//! * [`predict`] and [`tune`]: an alpha-beta [`CostModel`] whose byte and step
//!   counts equal the checker's, and a tuner over algorithm, channels, chunk.
//!
//! Why generate dependencies instead of writing them: generators list a
//! rank's steps in a valid sequential order and a builder derives every data
//! dependency from the ranges each step reads and writes, so a schedule
//! cannot forget one; the checker then proves that no two unordered steps
//! conflict, so any engine order gives the same result.
//!
//! What this crate does not do: move bytes, know about topology beyond
//! `ranks_per_node`, or apply reduction ops to real data outside the
//! reference executor. See `docs/algo.md` for the representation with a
//! worked example.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod check;
mod cost;
mod dtype;
mod exec;
mod generate;
mod problem;
mod schedule;
mod size;

pub use check::{
    CHECK_STATE_COUNTED, CheckError, CheckReport, RankReport, check, check_rank, check_state_bytes,
    check_steps, check_steps_in_place,
};
pub use cost::{
    CostModel, LinkClass, Prediction, TUNE_CHANNELS, TUNE_CHUNK_BYTES, TuneOptions, candidates,
    candidates_with, critical_path, predict, traffic, tune, tune_with,
};
pub use dtype::DataType;
pub use exec::{ExecError, apply, execute, execute_steps, expected, finish_avg};
pub use problem::{Algorithm, Collective, Problem, ReduceOp, block_partition};
pub use schedule::{AlgoError, Buf, Schedule, Slice, Step, StepKind, StepList};
pub use size::{SizeError, parse_size};

/// NCCL's double binary tree over `nodes` nodes (`ncclGetDtree`, the
/// inter-node part of its tree and of NVLSTree): `(parent, children)` of
/// `node` in tree `tree` (0, or 1: the first mirrored, or shifted by one
/// on an odd count). Every node is a leaf in one of the two trees or an
/// inner node in it. A node outside `0..nodes` has neither.
///
/// ```
/// use gpucomm_algo::nccl_double_tree;
/// // Four nodes: tree 0 is 0 -> 2 -> {1, 3}; tree 1 mirrors it.
/// assert_eq!(nccl_double_tree(4, 0, 0), (None, vec![2]));
/// assert_eq!(nccl_double_tree(4, 0, 2), (Some(0), vec![1, 3]));
/// assert_eq!(nccl_double_tree(4, 1, 1), (Some(3), vec![2, 0]));
/// assert_eq!(nccl_double_tree(0, 0, 0), (None, vec![]));
/// ```
pub fn nccl_double_tree(nodes: usize, tree: usize, node: usize) -> (Option<usize>, Vec<usize>) {
    if node >= nodes {
        return (None, Vec::new());
    }
    generate::tree::dtree(nodes, tree.min(1), node)
}
