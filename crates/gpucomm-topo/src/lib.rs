//! The hardware model of GPU interconnects.
//!
//! (Being built: catalog, presets, discovery, paths, file format.)

#![forbid(unsafe_code)]
