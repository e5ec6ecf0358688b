//! Rings follow the NVLinks on a mesh (DGX-1's hybrid cube mesh), as
//! NCCL's topology search orders them: rank order would send GPU 3's data to
//! GPU 4, which it has no link to, through a third GPU, and use one ring's
//! links only. On one DGX A100, where NCCL reads over NVLink, rings and
//! point-to-point run at NCCL's channels and slices (`nccl_reads`).

mod common;

use gpucomm_algo::Collective;
use gpucomm_sim::collective::{CollOptions, simulate};
use gpucomm_sim::model::Protocol;
use gpucomm_sim::{Engine, Machine};

#[test]
fn dgx1_rings_use_every_nvlink_and_only_direct_ones() {
    let f = common::fabric("dgx1-v100", 1);
    let rings = f.nvlink_rings();
    // Each V100 has six NVLinks: one outgoing link of every GPU per ring.
    assert_eq!(rings.len(), 6, "{rings:?}");
    // GPU 0's NVLink neighbours (one or two links to each).
    let neighbours = (1..8).filter(|&b| f.nvlink_count(0, b) > 0).count();
    let opts = common::forced("ring", Some(Protocol::Simple));
    let bytes = 1u64 << 30;
    // Broadcast and reduce chain along the same rings, from or to the root
    // (NCCL's do): in rank order they crossed to GPU 4 and ran at 20 GB/s.
    for coll in [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast { root: 0 },
        // Rooted elsewhere, so that GPU 0 sends on every ring.
        Collective::Reduce { root: 7 },
    ] {
        let r = simulate(&f, coll, bytes, &opts).unwrap();
        let ex = r.exec.expect("a schedule ran");
        // Data moved on NVLinks only, and to every one of GPU 0's
        // neighbours.
        for l in &ex.links {
            assert!(
                l.name.contains("nvlink"),
                "{}: {} carried {} bytes",
                coll.name(),
                l.name,
                l.bytes
            );
        }
        let gpu0_out: Vec<_> = ex
            .links
            .iter()
            .filter(|l| l.name.starts_with("node0:gpu0->"))
            .collect();
        assert_eq!(gpu0_out.len(), neighbours, "{}: {gpu0_out:?}", coll.name());
        // GPU 0's outgoing NVLink capacity, as the fabric has it.
        let gpu0_links: f64 = gpu0_out.iter().map(|l| l.capacity_gbps).sum();
        // Every GPU sends (n-1)/n of the data per phase over its links (the
        // root of a broadcast all of it, over every ring): at the bound of
        // all six links, within the pipeline's fill.
        let per_gpu = match coll {
            Collective::AllReduce => 2.0 * 7.0 / 8.0,
            Collective::Broadcast { .. } | Collective::Reduce { .. } => 1.0,
            _ => 7.0 / 8.0,
        } * bytes as f64;
        let bound_us = per_gpu / (gpu0_links * 1e9) * 1e6;
        let t = r.time.as_us();
        assert!(
            t < 1.1 * bound_us && t > bound_us,
            "{}: {t} us, the links' bound is {bound_us} us",
            coll.name()
        );
    }
}

#[test]
fn the_tuner_picks_the_nvlink_rings_on_a_dgx1() {
    let f = common::fabric("dgx1-v100", 1);
    let r = simulate(&f, Collective::AllReduce, 1 << 30, &CollOptions::default()).unwrap();
    assert_eq!(r.algorithm.name(), "ring");
    // Six rings of 20 GB/s (NCCL's SM70 NVLink figure): about 120 GB/s.
    assert!(r.busbw_gbps > 100.0, "{}", r.busbw_gbps);
}

#[test]
fn no_rings_where_the_links_close_none_or_any_order_is_the_same() {
    let first = |g: usize| {
        let mut m = Machine::preset("dgx1-v100").unwrap();
        m.gpus_used = Some(g);
        m.fabric(Engine::Nccl, 1).unwrap()
    };
    // GPUs 0-4: GPU 4's only link among them goes to GPU 0.
    assert!(first(5).nvlink_rings().is_empty());
    // GPUs 0-3 are linked pairwise (one or two links each): rings exist.
    let four = first(4);
    let rings = four.nvlink_rings();
    assert!(!rings.is_empty());
    assert!(rings.iter().all(|r| r.len() == 4));
    // NVSwitch: every order is the same, none is needed.
    let h = common::fabric("dgx-h100", 1);
    assert!(h.nvlink_rings().is_empty());
}

#[test]
fn across_dgx1_nodes_each_channel_leaves_through_its_own_nic() {
    let f = common::fabric("dgx1-v100", 2);
    let orders = f.ring_orders(4);
    assert_eq!(orders.len(), 4);
    let opts = common::forced("ring", Some(Protocol::Simple));
    let r = simulate(&f, Collective::AllReduce, 1 << 30, &opts).unwrap();
    let ex = r.exec.expect("a schedule ran");
    // The four NICs share the inter-node traffic evenly.
    let out: Vec<f64> = (0..4)
        .map(|k| {
            ex.links
                .iter()
                .filter(|l| l.name == format!("node0:nic{k}->net"))
                .map(|l| l.bytes)
                .sum()
        })
        .collect();
    let max = out.iter().cloned().fold(0.0, f64::max);
    let min = out.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(min > 0.99 * max, "NIC loads {out:?}");
    // Well above one NIC's 12.5 GB/s.
    assert!(r.busbw_gbps > 30.0, "{}", r.busbw_gbps);
}

#[test]
fn the_ring_search_stays_bounded_on_a_dense_mesh() {
    // Eight GPUs all joined pairwise (no real system; a topology file can
    // say so): thousands of rings. The search is bounded in steps and
    // returns rings that the links carry together.
    let mut m = Machine::preset("dgx1-v100").unwrap();
    let mut pairs = Vec::new();
    for a in 0..8 {
        for b in a + 1..8 {
            pairs.push((a, b, 1));
        }
    }
    m.node.nvlink = gpucomm_sim::machine::NvFabric::Mesh {
        generation: 2,
        pairs,
    };
    let f = m.fabric(Engine::Nccl, 1).unwrap();
    let rings = f.nvlink_rings();
    assert!(!rings.is_empty() && rings.len() <= 7, "{}", rings.len());
    let mut used = [[0u32; 8]; 8];
    for r in &rings {
        let mut seen = [false; 8];
        for i in 0..8 {
            let (a, b) = (r[i] as usize, r[(i + 1) % 8] as usize);
            assert!(!std::mem::replace(&mut seen[a], true), "{r:?}");
            used[a][b] += 1;
            assert!(used[a][b] <= 1, "pair {a}->{b} carries two rings");
        }
    }
}

/// On one DGX A100 NCCL's Simple protocol reads over NVLink: the ring runs
/// at NCCL's channels (24) and slices, each slice waiting for the last
/// one's delivery, so at mid sizes it is slower than the streaming ring
/// (the DGX H100 writes and is not held), and the slices are NCCL's.
#[test]
fn a100_rings_run_nccls_channels_and_slices_where_nccl_reads() {
    use gpucomm_algo::Algorithm;
    use gpucomm_sim::collective::schedule_for;
    let a100 = common::fabric("dgx-a100", 1);
    let ring = |f, coll, bytes, p| schedule_for(f, coll, bytes, Algorithm::Ring, None, p).unwrap();
    let s = ring(&a100, Collective::AllReduce, 32 << 20, Protocol::Simple).schedule;
    assert_eq!(s.channels, 24);
    // 32 MiB / (8 ranks x 24 channels) = 170.7 KiB, up to 172 KiB (4 KiB
    // aligned), two slices of 86 KiB.
    assert_eq!(s.chunk_elems * 4, 86 << 10);
    // Past a loop (24 x 8 x 2 MiB), slices of 1 MiB.
    let s = ring(&a100, Collective::AllReduce, 8 << 30, Protocol::Simple).schedule;
    assert_eq!(s.chunk_elems * 4, 1 << 20);
    // Not under LL128, not for the broadcast chain, not across nodes, not
    // on the H100 (NCCL writes there).
    assert_eq!(
        ring(&a100, Collective::AllReduce, 32 << 20, Protocol::Ll128)
            .schedule
            .channels,
        1
    );
    assert_eq!(
        ring(
            &a100,
            Collective::Broadcast { root: 0 },
            32 << 20,
            Protocol::Simple
        )
        .schedule
        .channels,
        1
    );
    let two = common::fabric("dgx-a100", 2);
    assert_eq!(
        ring(&two, Collective::AllReduce, 32 << 20, Protocol::Simple)
            .schedule
            .channels,
        8
    );
    let h100 = common::fabric("dgx-h100", 1);
    assert_eq!(
        ring(&h100, Collective::AllReduce, 32 << 20, Protocol::Simple)
            .schedule
            .channels,
        1
    );

    // The hold costs the step latency per slice: at 32 MiB, 14 rounds of
    // two slices on the critical path pay it; at 8 GiB it is ~3% of a 1 MiB
    // slice's time on a 24th of the link.
    let opts = common::forced("ring", Some(Protocol::Simple));
    let time = |f, bytes| {
        simulate(f, Collective::AllReduce, bytes, &opts)
            .unwrap()
            .time
            .as_us()
    };
    let streaming_32m = 32.0 * 1.048576 * 2.0 * 7.0 / 8.0 / 240.0 * 1e3; // us at the link rate
    let t = time(&a100, 32 << 20);
    assert!(t > streaming_32m + 14.0 * 3.4, "{t} us");
    let t = time(&a100, 8 << 30);
    let ideal = streaming_32m * 256.0;
    assert!(
        t > ideal * 1.02 && t < ideal * 1.06,
        "{t} us against {ideal}"
    );
    let h = time(&h100, 8 << 30);
    let h_ideal = 8.0 * 1.073741824 * 2.0 * 7.0 / 8.0 / 370.8 * 1e6;
    assert!(h < h_ideal * 1.01, "{h} us against {h_ideal}");
}

/// Point-to-point on one DGX A100 reads too: a sendrecv runs NCCL's
/// point-to-point channels (16 at 1 GiB) in 512 KiB chunks, each waiting
/// for the last one's delivery, and stays short of the link rate by about
/// the step latency per chunk; on the DGX H100 (writes) it streams.
#[test]
fn a100_sendrecv_runs_nccls_p2p_channels_and_chunks() {
    use gpucomm_algo::Algorithm;
    use gpucomm_sim::collective::schedule_for;
    let shift = Collective::SendRecv { shift: 1 };
    let a100 = common::fabric("dgx-a100", 1);
    let s = schedule_for(
        &a100,
        shift,
        1 << 30,
        Algorithm::Direct,
        None,
        Protocol::Simple,
    )
    .unwrap()
    .schedule;
    assert_eq!((s.channels, s.chunk_elems * 4), (16, 512 << 10));
    let opts = CollOptions::default();
    let gbps = |f, bytes: u64| {
        let r = simulate(f, shift, bytes, &opts).unwrap();
        bytes as f64 / r.time.as_us() / 1e3
    };
    // 240 GB/s of NVLink; a 512 KiB chunk at a 16th of it takes 34.95 us,
    // plus 3.4 us held: 0.91 of the link.
    let a = gbps(&a100, 1 << 30);
    assert!((0.89 * 240.0..0.92 * 240.0).contains(&a), "{a} GB/s");
    let h = gbps(&common::fabric("dgx-h100", 1), 1 << 30);
    assert!(h > 0.99 * 370.8, "{h} GB/s");
}

/// NCCL runs a small ring or tree operation on fewer channels than its
/// communicator has, so that each thread gets its least share
/// (`topoGetAlgoInfo`, `model::nccl_op_channels`): on 4 DGX H100 nodes (32
/// ranks, one channel per NIC, two per NIC for the tree all_reduce) a ring
/// under LL keeps 8 x 32 bytes per thread of 512, 128 KiB per channel.
#[test]
fn small_rings_and_trees_run_on_the_channels_nccl_gives_them() {
    use gpucomm_algo::Algorithm::{Ring, Tree};
    use gpucomm_sim::collective::schedule_for;
    let f = common::fabric("dgx-h100", 4);
    let ch = |coll, bytes, algo, p| {
        schedule_for(&f, coll, bytes, algo, None, p)
            .unwrap()
            .schedule
            .channels
    };
    assert_eq!(ch(Collective::AllGather, 128 << 10, Ring, Protocol::Ll), 1);
    assert_eq!(ch(Collective::AllGather, 512 << 10, Ring, Protocol::Ll), 4);
    assert_eq!(ch(Collective::AllGather, 1 << 20, Ring, Protocol::Ll), 8);
    assert_eq!(ch(Collective::AllReduce, 8 << 20, Ring, Protocol::Ll), 8);
    // LL128 keeps 8 x 640 = 5 KiB per channel, Simple 64 x 512 = 32 KiB,
    // whatever the ranks; a reduce_scatter's traffic is its whole input,
    // at least 16 KiB a channel.
    let rs = Collective::ReduceScatter;
    assert_eq!(ch(rs, 48 << 10, Ring, Protocol::Ll128), 3);
    assert_eq!(ch(rs, 16 << 10, Ring, Protocol::Ll128), 1);
    assert_eq!(ch(rs, 100 << 10, Ring, Protocol::Simple), 3);
    assert_eq!(ch(rs, 64 << 10, Ring, Protocol::Simple), 2);
    // The tree all_reduce under LL: 8 x 512 = 4 KiB per channel, of 16,
    // and an all_reduce's traffic is twice its bytes: 8 KiB a channel.
    let ar = Collective::AllReduce;
    assert_eq!(ch(ar, 4 << 10, Tree, Protocol::Ll), 1);
    assert_eq!(ch(ar, 8 << 10, Tree, Protocol::Ll), 1);
    assert_eq!(ch(ar, 40 << 10, Tree, Protocol::Ll), 5);
    assert_eq!(ch(ar, 64 << 10, Tree, Protocol::Ll), 8);
    assert_eq!(ch(ar, 128 << 10, Tree, Protocol::Ll), 16);
    // NCCL's first tree channels, all on its first tree (their copies, on
    // the second, are channels 8 to 15), each through its own NIC: four
    // chains hanging from four GPUs.
    let tree = schedule_for(&f, ar, 32 << 10, Tree, None, Protocol::Ll)
        .unwrap()
        .schedule;
    assert_eq!((tree.channels, tree.tree_split), (4, 8));
    let heads: std::collections::BTreeSet<u32> = tree.ring_orders.iter().map(|o| o[0]).collect();
    assert_eq!(heads.len(), 4, "{:?}", tree.ring_orders);
    let full = schedule_for(&f, ar, 1 << 20, Tree, None, Protocol::Ll)
        .unwrap()
        .schedule;
    assert_eq!((full.channels, full.tree_split), (16, 8));
    // A broadcast's chain keeps one channel per NIC (docs/sim.md, "What is
    // not modeled"), and a count the user set runs as set.
    let bcast = Collective::Broadcast { root: 0 };
    assert_eq!(ch(bcast, 128 << 10, Ring, Protocol::Ll), 8);
    let set = schedule_for(
        &f,
        Collective::AllGather,
        4 << 10,
        Ring,
        Some(8),
        Protocol::Ll,
    );
    assert_eq!(set.unwrap().schedule.channels, 8);
}
