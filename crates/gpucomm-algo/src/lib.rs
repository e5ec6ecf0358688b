//! Collective algorithms as pure schedules.
//!
//! Every collective in gpucomm is written once, as a [`Schedule`]: for each
//! rank, the ordered steps it performs on element ranges of its input, output
//! and scratch buffers. A schedule is data produced by pure functions: no
//! sockets, no threads, no clocks. The runtime (`gpucomm`) executes it on real
//! memory and transports, the simulator (`gpucomm-sim`) on a modeled fabric,
//! and the checker in this crate executes it symbolically to prove it right.
//!
//! See `docs/algo.md` for the representation with a worked example.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod generate;
mod problem;
mod schedule;

pub use problem::{Algorithm, Collective, Problem, ReduceOp, block_partition};
pub use schedule::{AlgoError, Buf, Schedule, Slice, Step, StepKind};
