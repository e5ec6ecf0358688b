//! A discrete-event, flow-level simulator that runs gpucomm schedules on modeled fabrics.
//!
//! (Being built.)

#![forbid(unsafe_code)]
