//! The gpucomm runtime: communicators, transports and collectives.
//!
//! (Being built.)

#![deny(unsafe_code)]

pub mod env;
pub mod launch;
