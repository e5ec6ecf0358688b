//! A discrete-event, flow-level simulator that runs gpucomm schedules on
//! modeled fabrics.
//!
//! # Design
//!
//! The same [`gpucomm_algo::Schedule`] the runtime executes is run here on a
//! model of the hardware: every transfer becomes a *flow* along its route,
//! every directional link's bandwidth is shared max-min fairly among the
//! flows crossing it, each hop adds its latency and each step the software
//! overhead of the engine that runs it. Like `quinn-proto`, the core does no
//! I/O and reads no clock: time is [`SimTime`], advanced from event to event.
//!
//! ```text
//!  Machine (model.rs presets, or gpucomm-topo)      Schedule (gpucomm-algo)
//!        │ .fabric(engine, nodes)                          │ rank_steps(r)
//!        ▼                                                  ▼
//!   ClusterFabric: links + routes  ──────────────▶  exec::run_schedule
//!                                                        │ flows, timers
//!                                                        ▼
//!                                   engine::FlowNet (max-min, BinaryHeap of events)
//! ```
//!
//! * [`engine`]: the flow network and event queue. Rates are recomputed
//!   once per timestamp, incrementally (only the flows a change can move,
//!   checked against the max-min optimality condition).
//! * [`exec`]: runs a schedule (dependencies, FIFO matching per
//!   (sender, receiver, channel), rendezvous), with a node-translation
//!   symmetry reduction that simulates one node's ranks when the fabric
//!   and schedule allow it.
//! * [`machine`] and [`model`]: the hardware model and every efficiency
//!   factor with its source.
//! * [`collective`], [`transfer`], [`train`]: what the `gpucomm sim`
//!   commands run (collective sweeps with a model-based tuner and NVLS,
//!   p2p/copy/RDMA/storage data paths, data-parallel training steps).
//! * [`innet`]: in-network reduction on InfiniBand switches (SHARP):
//!   NCCL's CollNet Direct and Chain, and NVLS across nodes.
//! * [`calibration`]: resolves a published measurement to a prediction.
//!
//! # What it does not do
//!
//! No packet-level effects (congestion control, adaptive routing, head-of-line
//! blocking), no LL/LL128 protocols (Simple only), no compute/communication
//! interference on SMs or memory. The inter-node core is modeled at the
//! level of leaf uplinks (oversubscription), not switch ports. See
//! `docs/sim.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod calibration;
pub mod collective;
pub mod engine;
mod error;
pub mod exec;
pub mod fabric;
pub mod from_topo;
pub mod innet;
pub mod machine;
pub mod model;
mod par;
mod time;
pub mod trace;
pub mod train;
pub mod transfer;

pub use error::SimError;
pub use machine::{Engine, MAX_RANKS, Machine, PcieSite};
pub use time::SimTime;
