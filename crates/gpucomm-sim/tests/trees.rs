//! NCCL's tree for all_reduce across nodes: a node's GPUs chained, the
//! double binary tree over nodes (gpucomm-algo `generate::tree`). A node
//! sends one copy of its data up and receives its children's, so the
//! network carries each tree's data once per edge each way, and across
//! two nodes, where that is half of what a ring sends, the tree passes
//! the ring. A double binary tree over all ranks, which crosses between
//! nodes at several GPUs of each node, carried 1.7 times the bytes and
//! reached half the ring; chains all starting at GPU 0 (on NVSwitch nodes)
//! put every channel's network traffic through GPUs 0 and 1 and stayed
//! below the ring.

mod common;

use gpucomm_algo::Collective;
use gpucomm_sim::collective::simulate;
use gpucomm_sim::fabric::Fabric;
use gpucomm_sim::model::Protocol;

#[test]
fn the_network_carries_each_tree_once_per_edge_each_way() {
    let nodes = 4;
    let f = common::fabric("dgx-a100", nodes);
    let bytes = 1u64 << 30;
    let opts = common::forced("tree", Some(Protocol::Simple));
    let r = simulate(&f, Collective::AllReduce, bytes, &opts).unwrap();
    let ex = r.exec.expect("a schedule ran");
    // Every rank simulated (the tree is not node-symmetric): links per node.
    assert_eq!(ex.simulated_ranks, f.ranks());
    let sent: f64 = ex
        .links
        .iter()
        .filter(|l| l.name.contains(":nic") && l.name.ends_with("->net"))
        .map(|l| l.bytes)
        .sum();
    // Two trees of half the data, nodes - 1 edges each, up and down.
    let want = 2.0 * (nodes as f64 - 1.0) * bytes as f64;
    assert!(
        (sent - want).abs() <= 0.01 * want,
        "NICs sent {sent} B, want {want} B"
    );
}

#[test]
fn across_two_nodes_the_tree_passes_the_ring() {
    let f = common::fabric("dgx-a100", 2);
    let busbw = |algorithm| {
        simulate(
            &f,
            Collective::AllReduce,
            1 << 30,
            &common::forced(algorithm, None),
        )
        .unwrap()
        .busbw_gbps
    };
    let (tree, ring) = (busbw("tree"), busbw("ring"));
    assert!(tree > ring, "tree {tree} GB/s, ring {ring} GB/s");
}

#[test]
fn at_mid_sizes_on_sixteen_nodes_the_tree_is_picked() {
    // NCCL's tree has a depth of log2(nodes) across nodes where the ring
    // has 2 (ranks - 1) steps: at 8 MiB on 128 GPUs it wins.
    let f = common::fabric("dgx-a100", 16);
    let r = simulate(&f, Collective::AllReduce, 8 << 20, &Default::default()).unwrap();
    assert_eq!(r.algorithm.name(), "tree", "{:?}", r.candidates);
}
