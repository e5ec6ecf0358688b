//! Shared by the in-process and multi-process collective tests: a list of
//! cases every rank runs in the same order, each checked element by element
//! against a direct computation of what the collective promises.

#![allow(dead_code)]

use gpucomm::{Algorithm, Call, CallOptions, Communicator, DataType, Element, ReduceOp, bf16, f16};
use gpucomm_algo::block_partition;

#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub call: Call,
    pub dtype: DataType,
    pub count: usize,
    pub in_place: bool,
    pub algorithm: Option<Algorithm>,
    /// Use a library-allocated (shared, zero-copy) buffer.
    pub shared: bool,
}

/// Input element `i` of rank `r` (small, so every op is exact in every dtype).
pub fn val<T: Element>(call: Call, r: usize, i: usize) -> T {
    let v = match call.op() {
        Some(ReduceOp::Prod) => 1 + ((r + i) % 3 == 0) as i64,
        _ => ((r * 7 + i * 3) % 9) as i64 - 4,
    };
    T::from_i64(v)
}

/// Whether `got` is the expected `want` of `call` on `n` ranks: equal,
/// except that a floating-point average divides every input before the sum
/// (as NCCL's PreMulSum), so it may differ from `sum / n` by the rounding
/// of `n` additions of values of at most 4 in magnitude.
pub fn same<T: Element>(got: T, want: T, call: Call, n: usize) -> bool {
    if call.op() != Some(ReduceOp::Avg) || T::DTYPE.is_integer() {
        return got == want;
    }
    let eps = match T::DTYPE {
        DataType::F16 => 2f64.powi(-10),
        DataType::Bf16 => 2f64.powi(-7),
        DataType::F32 => 2f64.powi(-23),
        _ => 2f64.powi(-52),
    };
    (got.to_f64() - want.to_f64()).abs() <= 8.0 * n as f64 * eps
}

pub fn reduced<T: Element>(call: Call, n: usize, i: usize, op: ReduceOp) -> T {
    let mut acc = val::<T>(call, 0, i);
    for r in 1..n {
        acc = acc.combine(val::<T>(call, r, i), op);
    }
    if op == ReduceOp::Avg {
        acc = acc.div_ranks(n);
    }
    acc
}

/// Logical input of rank `r` of `n` for `call` on `count` elements.
pub fn input_of<T: Element>(call: Call, count: usize, n: usize, r: usize) -> Vec<T> {
    match call {
        Call::AllGather => {
            let (o, l) = block_partition(count, n, r);
            (o..o + l).map(|i| val::<T>(call, r, i)).collect()
        }
        Call::AllToAll => (0..n * count).map(|i| val::<T>(call, r, i)).collect(),
        Call::Barrier => vec![],
        _ => (0..count).map(|i| val::<T>(call, r, i)).collect(),
    }
}

/// Output length on rank `me` of `n` for `call` on `count` elements.
pub fn out_len(call: Call, count: usize, n: usize, me: usize) -> usize {
    match call {
        Call::ReduceScatter(_) => block_partition(count, n, me).1,
        Call::AllToAll => n * count,
        Call::Barrier => 0,
        _ => count,
    }
}

/// Runs one case on this rank and checks the result; returns the number of
/// checked elements.
pub fn run_case<T: Element>(c: &Communicator, case: &Case) -> Result<usize, String> {
    let (n, me) = (c.world_size(), c.rank());
    let call = case.call;
    let count = case.count;
    let blk = |r: usize| block_partition(count, n, r);
    let input_of = |r: usize| input_of::<T>(call, count, n, r);
    let out_len = out_len(call, count, n, me);
    let mine = input_of(me);
    let opts = CallOptions {
        algorithm: case.algorithm,
        ..Default::default()
    };
    // The buffer handed to the call.
    let mut recv_len = out_len;
    let mut buf: Vec<T> = if case.in_place {
        match call {
            Call::AllGather => {
                let mut b = vec![T::default(); count];
                let (o, l) = blk(me);
                b[o..o + l].copy_from_slice(&mine);
                b
            }
            Call::ReduceScatter(_) => {
                recv_len = count;
                mine.clone()
            }
            _ => {
                let mut b = mine.clone();
                b.resize(out_len.max(mine.len()), T::default());
                b
            }
        }
    } else {
        vec![T::default(); out_len]
    };
    let _ = recv_len;
    if case.shared {
        let mut sb = c.alloc::<T>(mine.len()).map_err(|e| e.to_string())?;
        sb.copy_from_slice(&mine);
        let mut rb = c.alloc::<T>(buf.len()).map_err(|e| e.to_string())?;
        rb.copy_from_slice(&buf);
        let send = if case.in_place { None } else { Some(&sb[..]) };
        c.run(call, send, &mut rb, &opts)
            .map_err(|e| e.to_string())?;
        buf.copy_from_slice(&rb);
    } else {
        let send = if case.in_place { None } else { Some(&mine[..]) };
        c.run(call, send, &mut buf, &opts)
            .map_err(|e| e.to_string())?;
    }
    // Expected result and where it is.
    let (expect, at): (Vec<T>, usize) = match call {
        Call::AllReduce(op) => (
            (0..count).map(|i| reduced::<T>(call, n, i, op)).collect(),
            0,
        ),
        Call::ReduceScatter(op) => {
            let (o, l) = blk(me);
            (
                (o..o + l).map(|i| reduced::<T>(call, n, i, op)).collect(),
                if case.in_place { o } else { 0 },
            )
        }
        Call::AllGather => ((0..n).flat_map(input_of).collect(), 0),
        Call::Broadcast { root } => (input_of(root), 0),
        Call::Reduce { op, root } => {
            if me == root {
                (
                    (0..count).map(|i| reduced::<T>(call, n, i, op)).collect(),
                    0,
                )
            } else {
                (vec![], 0)
            }
        }
        Call::AllToAll => (
            (0..n)
                .flat_map(|q| input_of(q)[me * count..(me + 1) * count].to_vec())
                .collect(),
            0,
        ),
        Call::SendRecv { shift } => (input_of((me + n - shift % n) % n), 0),
        _ => (vec![], 0),
    };
    for (i, e) in expect.iter().enumerate() {
        if !same(buf[at + i], *e, call, n) {
            return Err(format!(
                "rank {me}: {case:?}: element {i} is {:?}, expected {e:?}",
                buf[at + i]
            ));
        }
    }
    Ok(expect.len())
}

pub fn run_dyn(c: &Communicator, case: &Case) -> Result<usize, String> {
    match case.dtype {
        DataType::F32 => run_case::<f32>(c, case),
        DataType::F64 => run_case::<f64>(c, case),
        DataType::F16 => run_case::<f16>(c, case),
        DataType::Bf16 => run_case::<bf16>(c, case),
        DataType::I8 => run_case::<i8>(c, case),
        DataType::U8 => run_case::<u8>(c, case),
        DataType::I32 => run_case::<i32>(c, case),
        DataType::U32 => run_case::<u32>(c, case),
        DataType::I64 => run_case::<i64>(c, case),
        DataType::U64 => run_case::<u64>(c, case),
    }
}

/// The case list: every call, dtypes and ops rotated over counts, in and out
/// of place, with and without shared buffers. `big` adds counts above the
/// zero-copy threshold.
pub fn cases(n: usize, big: bool) -> Vec<Case> {
    let mut calls = vec![Call::AllGather, Call::AllToAll, Call::Barrier];
    for op in ReduceOp::ALL {
        calls.push(Call::AllReduce(op));
        calls.push(Call::ReduceScatter(op));
        calls.push(Call::Reduce { op, root: n - 1 });
    }
    calls.push(Call::Broadcast { root: 0 });
    calls.push(Call::Broadcast { root: n / 2 });
    calls.push(Call::SendRecv { shift: 1 });
    calls.push(Call::SendRecv { shift: n + 1 });
    let mut counts = vec![0usize, 1, 7, 1001];
    if big {
        counts.push(40_009);
    }
    let mut out = Vec::new();
    let mut k = 0usize;
    for call in &calls {
        for &count in &counts {
            for in_place in [false, true] {
                if matches!(call, Call::SendRecv { .. }) && in_place {
                    continue;
                }
                let dtype = DataType::ALL[k % DataType::ALL.len()];
                let shared = k % 3 == 0;
                k += 1;
                out.push(Case {
                    call: *call,
                    dtype,
                    count,
                    in_place,
                    algorithm: None,
                    shared,
                });
            }
        }
    }
    // Every dtype with sum and max all-reduce, and every algorithm.
    for dtype in DataType::ALL {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg] {
            out.push(Case {
                call: Call::AllReduce(op),
                dtype,
                count: 37,
                in_place: false,
                algorithm: None,
                shared: false,
            });
        }
    }
    for algorithm in Algorithm::ALL {
        for call in [
            Call::AllReduce(ReduceOp::Sum),
            Call::AllGather,
            Call::ReduceScatter(ReduceOp::Min),
            Call::Broadcast { root: 1 % n },
            Call::Reduce {
                op: ReduceOp::Prod,
                root: 0,
            },
            Call::AllToAll,
        ] {
            for in_place in [false, true] {
                out.push(Case {
                    call,
                    dtype: DataType::I32,
                    count: 23,
                    in_place,
                    algorithm: Some(algorithm),
                    shared: in_place,
                });
            }
        }
    }
    out
}

/// Whether `algorithm` has a schedule for the case (skips unsupported pairs).
pub fn supported(case: &Case, n: usize) -> bool {
    let Some(a) = case.algorithm else { return true };
    let Some(coll) = case.call.collective() else {
        return true;
    };
    let p = gpucomm_algo::Problem::new(coll, case.count, n, n).with_elem_size(case.dtype.size());
    gpucomm_algo::Schedule::new(p, a).is_ok()
}

/// Waits for every child (all within `limit`) and returns (exit code,
/// stdout + stderr) per child; a child still running at the deadline is
/// killed and reported as (-2, "HUNG: killed by the test").
pub fn wait_children(
    children: &mut [std::process::Child],
    limit: std::time::Duration,
) -> Vec<(i32, String)> {
    use std::io::Read;
    let deadline = std::time::Instant::now() + limit;
    let mut out = Vec::new();
    for c in children.iter_mut() {
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                let mut s = String::new();
                c.stdout.take().unwrap().read_to_string(&mut s).unwrap();
                c.stderr.take().unwrap().read_to_string(&mut s).unwrap();
                out.push((st.code().unwrap_or(-1), s));
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                out.push((-2, "HUNG: killed by the test".into()));
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    out
}

/// Asserts that every rank exited 0 and printed `WORKER-OK`.
pub fn all_ok(res: &[(i32, String)]) {
    for (r, (code, out)) in res.iter().enumerate() {
        assert_eq!(*code, 0, "rank {r} failed:\n{out}");
        assert!(out.contains("WORKER-OK"), "rank {r} did not finish:\n{out}");
    }
}

/// A port for a job's store: outside the ephemeral range, so that no
/// outgoing connection of a test running beside this one takes it before
/// rank 0 binds it (`gpucomm::launch::free_port`).
pub fn free_port() -> u16 {
    gpucomm::launch::free_port("127.0.0.1").unwrap()
}

/// [`Communicator::split`] checked on every rank of `c` (collective: each
/// rank calls this once): parity groups numbered in reverse, a split that
/// leaves rank 0 out, a split of a split, and the parent still working.
/// Returns the parity group, for the caller to use once the parent is gone.
pub fn split_checks(c: &Communicator) -> Result<Communicator, String> {
    let (r, n) = (c.rank(), c.world_size());
    let e = |e: gpucomm::Error| format!("rank {r}: {e}");
    let sum = |g: &Communicator, x: u64| -> Result<u64, String> {
        let mut v = [x];
        g.all_reduce_in_place(&mut v, ReduceOp::Sum).map_err(e)?;
        Ok(v[0])
    };
    // Parity groups; key -rank numbers each group from its highest rank.
    let g = c
        .split(Some((r % 2) as u32), -(r as i64))
        .map_err(e)?
        .ok_or(format!("rank {r}: no parity group"))?;
    let members: Vec<usize> = (0..n).filter(|p| p % 2 == r % 2).rev().collect();
    if g.world_size() != members.len() || members[g.rank()] != r {
        return Err(format!(
            "rank {r}: parity group rank {} of {}, expected {:?}",
            g.rank(),
            g.world_size(),
            members
        ));
    }
    let mut got = vec![0u64; g.world_size()];
    g.all_gather(&[r as u64], &mut got).map_err(e)?;
    if got != members.iter().map(|&p| p as u64).collect::<Vec<_>>() {
        return Err(format!("rank {r}: parity group gathered {got:?}"));
    }
    for (q, &p) in members.iter().enumerate() {
        if p != r && g.transport_to(q) != c.transport_to(p) {
            return Err(format!(
                "rank {r}: group peer {q} (rank {p}) on another transport"
            ));
        }
    }
    // Rank 0 stays out; the others are one group in rank order.
    let rest = c.split(if r == 0 { None } else { Some(7) }, 0).map_err(e)?;
    match (r, &rest) {
        (0, None) => {}
        (0, Some(_)) => return Err("rank 0 got a group it stayed out of".into()),
        (_, None) => return Err(format!("rank {r}: no group")),
        (_, Some(h)) => {
            if (h.rank(), h.world_size()) != (r - 1, n - 1) {
                return Err(format!("rank {r}: rank {} of {}", h.rank(), h.world_size()));
            }
            let s = sum(h, r as u64)?;
            if s != (n * (n - 1) / 2) as u64 {
                return Err(format!("rank {r}: sum over ranks 1.. was {s}"));
            }
        }
    }
    // A split of a split: the parity group in pairs of its own ranks.
    let pair = g
        .split(Some((g.rank() / 2) as u32), 0)
        .map_err(e)?
        .ok_or(format!("rank {r}: no pair"))?;
    let first = g.rank() / 2 * 2;
    let want: u64 = members[first..(first + 2).min(members.len())]
        .iter()
        .map(|&p| p as u64)
        .sum();
    let s = sum(&pair, r as u64)?;
    if s != want {
        return Err(format!("rank {r}: pair sum {s}, expected {want}"));
    }
    // The parent is still whole.
    let s = sum(c, 1)?;
    if s != n as u64 {
        return Err(format!("rank {r}: parent sum {s}"));
    }
    Ok(g)
}

/// [`Communicator::all_to_all_v`] checked on every rank of `c` (collective):
/// blocks of sizes that differ by sender and receiver, empty ones, one of
/// `big` elements (the transports' large-message paths), element by element.
pub fn all_to_all_v_checks(c: &Communicator, big: usize) -> Result<usize, String> {
    let (r, n) = (c.rank(), c.world_size());
    // Rank s sends rank d a block of count(s, d) elements, each saying
    // where it came from and where it stands.
    let count = |s: usize, d: usize| match (s + 2 * d) % 5 {
        0 => 0,
        1 if s == 1 && d + 1 == n => big,
        k => k * 7 + s,
    };
    let value = |s: usize, d: usize, i: usize| (s * 1_000_003 + d * 10_007 + i) as u64;
    let send_counts: Vec<usize> = (0..n).map(|d| count(r, d)).collect();
    let recv_counts: Vec<usize> = (0..n).map(|s| count(s, r)).collect();
    let send: Vec<u64> = (0..n)
        .flat_map(|d| (0..count(r, d)).map(move |i| value(r, d, i)))
        .collect();
    let mut recv = vec![u64::MAX; recv_counts.iter().sum()];
    c.all_to_all_v(&send, &send_counts, &mut recv, &recv_counts)
        .map_err(|e| format!("rank {r}: {e}"))?;
    let want: Vec<u64> = (0..n)
        .flat_map(|s| (0..count(s, r)).map(move |i| value(s, r, i)))
        .collect();
    if recv != want {
        let at = recv.iter().zip(&want).position(|(a, b)| a != b);
        return Err(format!("rank {r}: wrong element at {at:?}"));
    }
    Ok(recv.len())
}

/// Runs `f` on each of `n` in-process ranks (each bounding its waits by
/// `timeout`), one thread per rank; the results by rank.
pub fn on_threads<T: Send>(
    n: usize,
    timeout: std::time::Duration,
    f: impl Fn(Communicator) -> T + Sync,
) -> Vec<T> {
    let opts = gpucomm::InProcessOptions {
        timeout: Some(timeout),
        ..Default::default()
    };
    let comms = Communicator::in_process_with(n, &opts).expect("in-process ranks");
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = comms.into_iter().map(|c| s.spawn(move || f(c))).collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

/// [`Communicator::gather`] and [`Communicator::scatter`] checked on every
/// rank of `c` (collective), with every rank as the root in turn and blocks
/// of `len` elements, element by element.
pub fn gather_scatter_checks(c: &Communicator, len: usize) -> Result<(), String> {
    let (r, n) = (c.rank(), c.world_size());
    let value = |s: usize, i: usize| (s * 7_919 + i) as i64 - 3;
    for root in 0..n {
        let mine: Vec<i64> = (0..len).map(|i| value(r, i)).collect();
        let mut all = vec![0i64; if r == root { n * len } else { 0 }];
        c.gather(&mine, &mut all, root)
            .map_err(|e| format!("rank {r}, gather to {root}: {e}"))?;
        if r == root {
            let want: Vec<i64> = (0..n)
                .flat_map(|s| (0..len).map(move |i| value(s, i)))
                .collect();
            if all != want {
                return Err(format!("rank {r}: gather to {root} wrong"));
            }
        }
        // The root scatters what it gathered (block s back to rank s).
        let mut back = vec![0i64; len];
        c.scatter(&all, &mut back, root)
            .map_err(|e| format!("rank {r}, scatter from {root}: {e}"))?;
        if back != mine {
            return Err(format!("rank {r}: scatter from {root} wrong"));
        }
        // In place: n blocks on every rank, its own at its place.
        let mut buf = vec![-1i64; n * len];
        buf[r * len..(r + 1) * len].copy_from_slice(&mine);
        c.gather_in_place(&mut buf, root)
            .map_err(|e| format!("rank {r}, in-place gather to {root}: {e}"))?;
        if r == root && buf != all {
            return Err(format!("rank {r}: in-place gather to {root} wrong"));
        }
        let mut buf = if r == root {
            all.clone()
        } else {
            vec![-1i64; n * len]
        };
        c.scatter_in_place(&mut buf, root)
            .map_err(|e| format!("rank {r}, in-place scatter from {root}: {e}"))?;
        if buf[r * len..(r + 1) * len] != mine[..] {
            return Err(format!("rank {r}: in-place scatter from {root} wrong"));
        }
    }
    Ok(())
}

/// [`Communicator::all_gather_v`], [`Communicator::gather_v`] (every rank
/// as the root) and [`Communicator::scatter_v`] (back from it) checked on
/// every rank of `c` (collective), rank q's block `count(q)` elements:
/// empty, small, and `big` on the last rank.
pub fn v_checks(c: &Communicator, big: usize) -> Result<(), String> {
    let (r, n) = (c.rank(), c.world_size());
    let count = |q: usize| match q % 4 {
        _ if q + 1 == n && n > 1 => big,
        0 => 3,
        1 => 0,
        k => 11 * k + q,
    };
    let counts: Vec<usize> = (0..n).map(count).collect();
    let value = |q: usize, i: usize| (q as i64) << 40 | i as i64;
    let mine: Vec<i64> = (0..count(r)).map(|i| value(r, i)).collect();
    let want: Vec<i64> = (0..n)
        .flat_map(|q| (0..count(q)).map(move |i| value(q, i)))
        .collect();
    let mut all = vec![-1i64; want.len()];
    c.all_gather_v(&mine, &mut all, &counts)
        .map_err(|e| format!("rank {r}, all_gather_v: {e}"))?;
    if all != want {
        return Err(format!("rank {r}: all_gather_v wrong"));
    }
    for root in 0..n {
        // Only the root passes counts and a whole.
        let (counts_here, len) = if r == root {
            (&counts[..], want.len())
        } else {
            (&[][..], 0)
        };
        let mut got = vec![-1i64; len];
        c.gather_v(&mine, &mut got, counts_here, root)
            .map_err(|e| format!("rank {r}, gather_v to {root}: {e}"))?;
        if r == root && got != want {
            return Err(format!("rank {r}: gather_v to {root} wrong"));
        }
        let mut back = vec![-1i64; count(r)];
        c.scatter_v(&got, counts_here, &mut back, root)
            .map_err(|e| format!("rank {r}, scatter_v from {root}: {e}"))?;
        if back != mine {
            return Err(format!("rank {r}: scatter_v from {root} wrong"));
        }
    }
    Ok(())
}
