//! A connection moves its transfers one after another, so a chunked chain
//! (ring broadcast/reduce, tree) pipelines: the next hop forwards the first
//! chunk while later ones are still arriving.

use gpucomm_algo::Collective;
use gpucomm_sim::collective::{AlgoChoice, CollOptions, simulate};
use gpucomm_sim::model::Protocol;
use gpucomm_sim::{Engine, Machine};

#[test]
fn a_chunked_ring_broadcast_pipelines_instead_of_storing_and_forwarding() {
    let f = Machine::preset("dgx-h100")
        .unwrap()
        .fabric(Engine::Nccl, 1)
        .unwrap();
    let bytes = 1u64 << 30;
    let opts = CollOptions {
        algorithm: AlgoChoice::parse("ring"),
        protocol: Some(Protocol::Simple),
        ..Default::default()
    };
    let r = simulate(&f, Collective::Broadcast { root: 0 }, bytes, &opts).unwrap();
    // One GPU's NVLink ports: 18 links at NCCL's 20.6 GB/s.
    let one_hop_us = bytes as f64 / (18.0 * 20.6e9) * 1e6;
    let t = r.time.as_us();
    // Store and forward over 7 hops would take 7 one-hop times; a pipeline
    // of 32 chunks takes about (32 + 6) / 32 of one.
    assert!(
        t < 1.5 * one_hop_us,
        "broadcast took {t} us, one hop is {one_hop_us} us"
    );
    assert!(t > one_hop_us, "faster than the link: {t} us");
}

#[test]
fn transfers_on_one_connection_follow_each_other() {
    // A ring broadcast of two chunks between two GPUs: the first chunk is
    // delivered after half the bytes, not together with the second.
    let f = Machine::preset("dgx-h100")
        .unwrap()
        .fabric(Engine::Nccl, 1)
        .unwrap();
    let opts = CollOptions {
        algorithm: AlgoChoice::parse("ring"),
        protocol: Some(Protocol::Simple),
        trace_ranks: 8,
        ..Default::default()
    };
    let bytes = 64u64 << 20;
    let r = simulate(&f, Collective::Broadcast { root: 0 }, bytes, &opts).unwrap();
    let ex = r.exec.expect("a schedule ran");
    // Rank 1's receives from rank 0, in order: their ends strictly increase
    // and are spread over the whole transfer, not bunched at its end.
    let ends: Vec<f64> = ex
        .rank_spans
        .iter()
        .filter(|s| s.rank == 1 && s.what == "recv<-0")
        .map(|s| s.end.as_us())
        .collect();
    assert!(ends.len() >= 2, "{ends:?}");
    assert!(ends.windows(2).all(|w| w[0] < w[1]), "{ends:?}");
    let first = ends[0];
    let last = *ends.last().unwrap();
    assert!(
        first < last / 2.0,
        "first chunk at {first} us, last at {last} us"
    );
}
