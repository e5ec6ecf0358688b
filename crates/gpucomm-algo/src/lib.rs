//! Collective algorithms as pure schedules.
//!
//! Every collective in gpucomm is written once, as a [`Schedule`]: for each
//! rank, the ordered steps it performs on element ranges of its input, output
//! and scratch buffers. A schedule is data produced by pure functions: no
//! sockets, no threads, no clocks. The runtime (`gpucomm`) executes it on real
//! memory and transports, the simulator (`gpucomm-sim`) on a modeled fabric,
//! and the checker in this crate executes it symbolically to prove it right.
//!
//! * [`Schedule::new`] picks an [`Algorithm`] for a [`Problem`];
//!   [`Schedule::rank_steps`] generates one rank's [`Step`]s on demand.
//! * [`check`] proves a schedule right and counts its bytes and steps.
//! * [`execute`] runs it on numbers, [`expected`] computes the collective
//!   directly: the reference both engines are tested against.
//!
//! See `docs/algo.md` for the representation with a worked example.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod check;
mod cost;
mod exec;
mod generate;
mod problem;
mod schedule;

pub use check::{
    CheckError, CheckReport, RankReport, check, check_rank, check_steps, check_steps_in_place,
};
pub use cost::{
    CostModel, LinkClass, Prediction, TUNE_CHANNELS, TUNE_CHUNK_BYTES, candidates, critical_path,
    predict, traffic, tune,
};
pub use exec::{ExecError, apply, execute, execute_steps, expected, finish_avg};
pub use problem::{Algorithm, Collective, Problem, ReduceOp, block_partition};
pub use schedule::{AlgoError, Buf, Schedule, Slice, Step, StepKind};
