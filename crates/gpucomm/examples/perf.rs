//! A quick all-reduce timing of the runtime itself (the user-facing bench is
//! `gpucomm bench`): `cargo run --release -p gpucomm --example perf -- 2 shm shared`
//! runs 2 local ranks over shm with library-allocated (zero-copy) buffers;
//! use `vec` for ordinary `Vec` buffers and `tcp` for TCP. Environment:
//! `PERF_SIZES=8,1048576` (bytes), `PERF_ALGO=ring`, `PERF_IN_PLACE=1`
//! (in place; includes refilling the buffer each iteration), `PERF_SCALE=n`
//! (n times more iterations), `PERF_REPEAT=r` (r timing loops, the fastest
//! reported). Times are the slowest rank's mean per call.

use std::process::Command;
use std::time::{Duration, Instant};

use gpucomm::{BootstrapConfig, Communicator, ReduceOp, TransportChoice};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let transport = args.get(2).cloned().unwrap_or_else(|| "shm".into());
    let mode = args.get(3).cloned().unwrap_or_else(|| "shared".into());
    if let Ok(rank) = std::env::var("PERF_RANK") {
        return worker(rank.parse().unwrap(), n, &transport, &mode);
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let kids: Vec<_> = (0..n)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args(&args[1..])
                .env("PERF_RANK", r.to_string())
                .env("PERF_STORE", format!("127.0.0.1:{port}"))
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
}

fn worker(rank: usize, n: usize, transport: &str, mode: &str) {
    let cfg = BootstrapConfig {
        rank,
        world_size: n,
        local_rank: Some(rank),
        local_world_size: Some(n),
        store_addr: std::env::var("PERF_STORE").unwrap(),
        token: "perf".into(),
        transport: if transport == "tcp" {
            TransportChoice::Tcp
        } else {
            TransportChoice::Shm
        },
        algorithm: std::env::var("PERF_ALGO")
            .ok()
            .and_then(|a| gpucomm::Algorithm::from_name(&a)),
        timeout: Duration::from_secs(60),
        socket_ifname: None,
    };
    let c = Communicator::new(&cfg).unwrap();
    if rank == 0 {
        println!("# {n} ranks, {transport}, {mode} buffers, f32 sum all_reduce, out of place");
        println!("{:>12} {:>10} {:>10}", "bytes", "time_us", "busbw_GB/s");
    }
    let sizes: Vec<usize> = match std::env::var("PERF_SIZES") {
        Ok(s) => s.split(',').map(|x| x.parse().unwrap()).collect(),
        Err(_) => vec![
            8,
            64,
            1024,
            32 << 10,
            256 << 10,
            1 << 20,
            4 << 20,
            16 << 20,
            64 << 20,
        ],
    };
    for bytes in sizes {
        let count = bytes / 4;
        let in_place = std::env::var("PERF_IN_PLACE").is_ok();
        let scale: usize = std::env::var("PERF_SCALE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let iters = scale
            * if bytes <= 64 << 10 {
                20000
            } else if bytes <= 4 << 20 {
                200
            } else {
                20
            };
        let (mut sb, mut rb);
        let (mut sv, mut rv);
        let (send, recv): (&[f32], &mut [f32]) = if mode == "shared" {
            sb = c.alloc::<f32>(count).unwrap();
            rb = c.alloc::<f32>(count).unwrap();
            sb.fill(1.0);
            (&sb[..], &mut rb[..])
        } else {
            sv = vec![1.0f32; count];
            rv = vec![0.0f32; count];
            let _ = &mut sv;
            (&sv[..], &mut rv[..])
        };
        for _ in 0..iters / 10 + 2 {
            if in_place {
                recv.fill(1.0);
                c.all_reduce_in_place(recv, ReduceOp::Sum).unwrap();
            } else {
                c.all_reduce(send, recv, ReduceOp::Sum).unwrap();
            }
        }
        // `PERF_REPEAT` timing loops; the fastest is reported (the machine
        // is shared: slower loops measure other processes).
        let repeat: usize = std::env::var("PERF_REPEAT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let mut us = f64::INFINITY;
        for _ in 0..repeat.max(1) {
            c.barrier().unwrap();
            let t = Instant::now();
            for _ in 0..iters {
                if in_place {
                    recv.fill(1.0);
                    c.all_reduce_in_place(recv, ReduceOp::Sum).unwrap();
                } else {
                    c.all_reduce(send, recv, ReduceOp::Sum).unwrap();
                }
            }
            // Every rank reports rank 0's view of the slowest rank: agree
            // on the time through an all-reduce of the maximum.
            let mut mine = [t.elapsed().as_secs_f64() * 1e6 / iters as f64];
            c.all_reduce_in_place(&mut mine, ReduceOp::Max).unwrap();
            us = us.min(mine[0]);
        }
        if !in_place {
            assert!(recv.iter().all(|&x| x == n as f32));
        }
        let busbw = bytes as f64 / us / 1e3 * 2.0 * (n - 1) as f64 / n as f64;
        if rank == 0 {
            println!("{bytes:>12} {us:>10.2} {busbw:>10.3}");
        }
    }
}
