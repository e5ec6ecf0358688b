//! Measures routing cost on a large cluster: the build, the first route
//! from each GPU (which builds its shortest-path tree), and routing every
//! GPU pair once the trees are cached, on one thread and on several.
//!
//! `cargo run --release -p gpucomm-topo --example route_speed -- [NODES] [PRESET]`

use std::time::Instant;

use gpucomm_topo::{ClusterOptions, select};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let nodes: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(128);
    let preset = args.get(2).map_or("dgx-h100", String::as_str);
    let t0 = Instant::now();
    let t = select(
        preset,
        &ClusterOptions {
            nodes,
            ..Default::default()
        },
    )
    .expect("cluster builds");
    let build = t0.elapsed();
    let gpus = t.gpus().to_vec();
    println!(
        "{preset} x {nodes}: {} nodes, {} links, {} GPUs; build {:.1} ms",
        t.nodes().len(),
        t.links().len(),
        gpus.len(),
        build.as_secs_f64() * 1e3
    );
    let mut hops = Vec::new();
    let t0 = Instant::now();
    let _ = t.nic_of_rank(0);
    println!(
        "rail assignment: {:.1} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    let t1 = Instant::now();
    for &g in &gpus {
        t.route_into(g, gpus[0], &mut hops).expect("route");
    }
    let first = t1.elapsed();
    println!(
        "first route from each GPU (builds its tree): {:.1} ms total, {:.1} us per GPU",
        first.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e6 / gpus.len() as f64
    );
    let t2 = Instant::now();
    let mut total_hops = 0usize;
    for &a in &gpus {
        for &b in &gpus {
            t.route_into(a, b, &mut hops).expect("route");
            total_hops += hops.len();
        }
    }
    let all = t2.elapsed();
    let n = gpus.len() * gpus.len();
    println!(
        "all {n} GPU pairs, cached, 1 thread: {:.1} ms, {:.0} ns per route, {:.2} hops on average",
        all.as_secs_f64() * 1e3,
        all.as_secs_f64() * 1e9 / n as f64,
        total_hops as f64 / n as f64
    );
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let t3 = Instant::now();
    std::thread::scope(|s| {
        for k in 0..threads {
            let t = &t;
            let gpus = &gpus;
            s.spawn(move || {
                let mut hops = Vec::new();
                for a in gpus.iter().skip(k).step_by(threads) {
                    for &b in gpus {
                        t.route_into(*a, b, &mut hops).expect("route");
                    }
                }
            });
        }
    });
    let par = t3.elapsed();
    println!(
        "all pairs again on {threads} threads: {:.1} ms",
        par.as_secs_f64() * 1e3
    );
}
