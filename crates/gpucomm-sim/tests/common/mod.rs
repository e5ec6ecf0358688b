//! Setup shared by the simulator's integration tests.
#![allow(dead_code)] // each test file uses its own part

use gpucomm_sim::collective::{AlgoChoice, CollOptions};
use gpucomm_sim::machine::ClusterFabric;
use gpucomm_sim::model::Protocol;
use gpucomm_sim::{Engine, Machine};

/// The NCCL-engine fabric of `nodes` nodes of preset `preset`.
pub fn fabric(preset: &str, nodes: usize) -> ClusterFabric {
    Machine::preset(preset)
        .unwrap()
        .fabric(Engine::Nccl, nodes)
        .unwrap()
}

/// The NCCL-engine fabric of `nodes` nodes of preset `preset` on their
/// first `gpus` GPUs (`--gpus`).
pub fn fabric_gpus(preset: &str, gpus: usize, nodes: usize) -> ClusterFabric {
    let mut m = Machine::preset(preset).unwrap();
    m.use_gpus(gpus).unwrap();
    m.fabric(Engine::Nccl, nodes).unwrap()
}

/// Options forcing `algorithm` (and `protocol`, if given).
pub fn forced(algorithm: &str, protocol: Option<Protocol>) -> CollOptions {
    CollOptions {
        algorithm: AlgoChoice::parse(algorithm).into(),
        protocol: protocol.into(),
        ..Default::default()
    }
}
