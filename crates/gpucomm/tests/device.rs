//! Collectives on device buffers ([`gpucomm::device`]).
//!
//! Without a GPU: everything host-side runs on [`FakeDevice`] (host memory,
//! deferred stream work, IPC through `/proc/<pid>/fd`) — in-process ranks
//! and real processes (this binary re-executes itself, as in
//! `multiproc.rs`), IPC and staged paths, every call, op and dtype, in and
//! out of place, and the error cases.
//!
//! With a GPU (`gpu_*` tests): the same cases on the CUDA backend, 2 and 4
//! processes sharing device 0, both paths. Without one they print SKIPPED
//! and pass, unless `GPUCOMM_REQUIRE_GPU=1`, which makes them fail.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpucomm::device::{
    DeviceBackend, DeviceBuffer, DeviceComm, DeviceOptions, FakeDevice, GpuPath, Stream,
};
use gpucomm::{
    BootstrapConfig, Call, CallOptions, Communicator, DataType, Element, Error, Failure,
    InProcessOptions, MemorySpace, ReduceOp, TransportChoice, bf16, f16,
};
use gpucomm_algo::block_partition;

use common::{all_ok, reduced};

const ROLE: &str = "GPUCOMM_DEVICE_TEST_ROLE";

#[derive(Clone, Copy, Debug)]
struct Case {
    call: Call,
    dtype: DataType,
    count: usize,
    in_place: bool,
}

/// Runs one case on this rank's device buffers and checks every element.
fn run_case<T: Element>(dc: &DeviceComm, s: &Stream, case: &Case) -> Result<usize, String> {
    let (n, me) = (dc.world_size(), dc.rank());
    let (call, count) = (case.call, case.count);
    let blk = |r: usize| block_partition(count, n, r);
    let input_of = |r: usize| common::input_of::<T>(call, count, n, r);
    let out_len = common::out_len(call, count, n, me);
    let mine = input_of(me);
    let e = |e: Error| format!("rank {me}: {case:?}: {e}");
    let host: Vec<T> = if case.in_place {
        match call {
            Call::AllGather => {
                let mut b = vec![T::default(); count];
                let (o, l) = blk(me);
                b[o..o + l].copy_from_slice(&mine);
                b
            }
            Call::ReduceScatter(_) => mine.clone(),
            _ => {
                let mut b = mine.clone();
                b.resize(out_len.max(mine.len()), T::default());
                b
            }
        }
    } else {
        // Garbage, so a missing write shows.
        vec![T::from_i64(99); out_len]
    };
    let mut recv = dc.alloc_from(&host, s).map_err(e)?;
    let send = if case.in_place {
        None
    } else {
        Some(dc.alloc_from(&mine, s).map_err(e)?)
    };
    let ev = dc
        .run(call, send.as_ref(), &mut recv, s, &CallOptions::default())
        .map_err(e)?;
    ev.wait().map_err(e)?;
    if !ev.is_done().map_err(e)? {
        return Err(format!("rank {me}: {case:?}: event not done after wait"));
    }
    let got = recv.to_vec(s).map_err(e)?;
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
        Call::Reduce { op, root } if me == root => (
            (0..count).map(|i| reduced::<T>(call, n, i, op)).collect(),
            0,
        ),
        Call::AllToAll => (
            (0..n)
                .flat_map(|q| input_of(q)[me * count..(me + 1) * count].to_vec())
                .collect(),
            0,
        ),
        Call::SendRecv { shift } => (input_of((me + n - shift % n) % n), 0),
        _ => (vec![], 0),
    };
    for (i, x) in expect.iter().enumerate() {
        if !common::same(got[at + i], *x, call, n) {
            return Err(format!(
                "rank {me}: {case:?} on the {} path: element {i} is {:?}, expected {x:?}",
                dc.path(),
                got[at + i]
            ));
        }
    }
    Ok(expect.len())
}

fn run_dyn(dc: &DeviceComm, s: &Stream, case: &Case) -> Result<usize, String> {
    match case.dtype {
        DataType::F32 => run_case::<f32>(dc, s, case),
        DataType::F64 => run_case::<f64>(dc, s, case),
        DataType::F16 => run_case::<f16>(dc, s, case),
        DataType::Bf16 => run_case::<bf16>(dc, s, case),
        DataType::I8 => run_case::<i8>(dc, s, case),
        DataType::U8 => run_case::<u8>(dc, s, case),
        DataType::I32 => run_case::<i32>(dc, s, case),
        DataType::U32 => run_case::<u32>(dc, s, case),
        DataType::I64 => run_case::<i64>(dc, s, case),
        DataType::U64 => run_case::<u64>(dc, s, case),
    }
}

fn calls(n: usize) -> Vec<Call> {
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
    calls
}

/// `full`: every call x op x dtype, in and out of place, counts 1 and 37
/// (plus 0 and 1001 on a rotation). Otherwise dtypes rotate over the calls.
fn cases(n: usize, full: bool) -> Vec<Case> {
    let mut out = Vec::new();
    let mut k = 0usize;
    for call in calls(n) {
        let dtypes: Vec<DataType> = if full {
            DataType::ALL.to_vec()
        } else {
            vec![DataType::ALL[k % 10], DataType::ALL[(k + 3) % 10]]
        };
        for dtype in dtypes {
            for in_place in [false, true] {
                let extra = [0, 1001][k % 2];
                k += 1;
                for count in [1, 37, extra] {
                    out.push(Case {
                        call,
                        dtype,
                        count,
                        in_place,
                    });
                }
            }
        }
    }
    out
}

fn opts(path: GpuPath) -> DeviceOptions {
    DeviceOptions { path: Some(path) }
}

/// `n` in-process ranks on one fake device, every case; returns the device
/// for its counters.
fn in_process(n: usize, path: GpuPath, full: bool) -> Arc<FakeDevice> {
    let gpu = Arc::new(FakeDevice::new(1));
    let comms = Communicator::in_process_with(
        n,
        &InProcessOptions {
            timeout: Some(Duration::from_secs(60)),
            ..Default::default()
        },
    )
    .unwrap();
    let cases = cases(n, full);
    std::thread::scope(|sc| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let (gpu, cases) = (gpu.clone(), &cases);
                sc.spawn(move || {
                    let dc = DeviceComm::new(c, gpu, 0, &opts(path)).unwrap();
                    assert_eq!(dc.path(), path, "{}", dc.path_reason());
                    let s = dc.stream().unwrap();
                    let mut checked = 0;
                    for case in cases {
                        checked += run_dyn(&dc, &s, case).unwrap_or_else(|e| panic!("{e}"));
                    }
                    checked
                })
            })
            .collect();
        for h in hs {
            assert!(h.join().unwrap() > 0);
        }
    });
    assert_eq!(gpu.live_allocations(), 0, "device memory leaked");
    gpu
}

#[test]
fn ipc_every_call_op_and_dtype_1_to_4_ranks() {
    for n in 1..=4 {
        let gpu = in_process(n, GpuPath::Ipc, n == 2 || n == 3);
        let st = gpu.stats();
        if n > 1 {
            // Reductions ran as kernels on device memory.
            assert!(st.reduce > 0 && st.d2d > 0, "{st:?}");
        }
        // Threads share addresses: no IPC handle was needed.
        assert_eq!(st.ipc_open, 0, "{st:?}");
    }
}

#[test]
fn staged_every_call_op_and_dtype_2_and_3_ranks() {
    for n in [2, 3] {
        let gpu = in_process(n, GpuPath::Staged, n == 2);
        let st = gpu.stats();
        // Reductions ran on the host; data went through registered memory.
        assert_eq!(st.reduce, 0, "{st:?}");
        assert_eq!(st.d2d, 0, "{st:?}");
        assert!(st.register_host >= 2 * n as u64, "{st:?}");
    }
}

/// Runs `f(rank, DeviceComm)` on `n` in-process ranks; returns the results.
fn with_ranks<R: Send>(
    n: usize,
    gpus: &[Arc<FakeDevice>],
    devices: &[u32],
    path: GpuPath,
    f: impl Fn(Result<DeviceComm, Error>) -> R + Sync,
) -> Vec<R> {
    let comms = Communicator::in_process_with(
        n,
        &InProcessOptions {
            timeout: Some(Duration::from_secs(20)),
            ..Default::default()
        },
    )
    .unwrap();
    std::thread::scope(|sc| {
        let hs: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(r, c)| {
                let gpu: Arc<dyn DeviceBackend> = gpus[r % gpus.len()].clone();
                let (f, d) = (&f, devices[r % devices.len()]);
                sc.spawn(move || f(DeviceComm::new(c, gpu, d, &opts(path))))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn ranks_in_place_and_out_of_place_in_one_call() {
    // Even ranks pass one buffer, odd ranks two: the phases (and barriers)
    // must still line up, and nobody may overwrite what a peer reads.
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        let gpu = Arc::new(FakeDevice::new(1));
        let n = 3;
        let res = with_ranks(n, &[gpu], &[0], path, |dc| {
            let dc = dc.unwrap();
            let s = dc.stream().unwrap();
            let mut checked = 0;
            for call in calls(n) {
                for (dtype, count) in [(DataType::I32, 5), (DataType::F16, 1001)] {
                    let case = Case {
                        call,
                        dtype,
                        count,
                        in_place: dc.rank() % 2 == 0,
                    };
                    checked += run_dyn(&dc, &s, &case).unwrap_or_else(|e| panic!("{e}"));
                }
            }
            checked
        });
        assert!(res.iter().all(|&c| c > 0), "{path}");
    }
}

/// A floating-point `avg` divides every input by the rank count before
/// the sum on both paths, as the host path does (NCCL's PreMulSum): two
/// f16 40000s average to 40000. The IPC path summed then divided, and the
/// f16 sum was inf.
#[test]
fn float_avg_divides_before_it_sums_on_both_paths() {
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        let gpu = Arc::new(FakeDevice::new(1));
        let res = with_ranks(2, &[gpu], &[0], path, |dc| -> Result<Vec<f32>, Error> {
            let dc = dc?;
            let s = dc.stream()?;
            let big = f16::from_f32(40000.0);
            let send = dc.alloc_from(&[big; 4], &s)?;
            let mut got = Vec::new();
            let mut r = dc.alloc::<f16>(4)?;
            dc.all_reduce(&send, &mut r, ReduceOp::Avg, &s)?.wait()?;
            got.extend(r.to_vec(&s)?);
            let mut r = dc.alloc_from(&[big; 4], &s)?;
            dc.all_reduce_in_place(&mut r, ReduceOp::Avg, &s)?.wait()?;
            got.extend(r.to_vec(&s)?);
            let mut r = dc.alloc::<f16>(2)?;
            dc.reduce_scatter(&send, &mut r, ReduceOp::Avg, &s)?
                .wait()?;
            got.extend(r.to_vec(&s)?);
            let mut r = dc.alloc::<f16>(4)?;
            dc.reduce(&send, &mut r, ReduceOp::Avg, 1, &s)?.wait()?;
            if dc.rank() == 1 {
                got.extend(r.to_vec(&s)?);
            }
            Ok(got.into_iter().map(f32::from).collect())
        });
        for (rank, r) in res.into_iter().enumerate() {
            let got = r.unwrap();
            assert_eq!(got.len(), if rank == 1 { 14 } else { 10 });
            assert!(
                got.iter().all(|&x| x == 40000.0),
                "{path} rank {rank}: {got:?}"
            );
        }
    }
}

#[test]
fn point_to_point_on_device_buffers() {
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        let gpu = Arc::new(FakeDevice::new(1));
        let res = with_ranks(2, &[gpu], &[0], path, |dc| {
            let dc = dc.unwrap();
            let s = dc.stream().unwrap();
            let data: Vec<i64> = (0..1000).map(|i| i * 3 + dc.rank() as i64).collect();
            let mut b = dc.alloc_from(&data, &s).unwrap();
            if dc.rank() == 0 {
                dc.run(
                    Call::Send { peer: 1 },
                    Some(&b),
                    &mut dc.alloc(0).unwrap(),
                    &s,
                    &CallOptions::default(),
                )
                .unwrap()
                .wait()
                .unwrap();
                vec![]
            } else {
                dc.run(
                    Call::Recv { peer: 0 },
                    None,
                    &mut b,
                    &s,
                    &CallOptions::default(),
                )
                .unwrap()
                .wait()
                .unwrap();
                b.to_vec(&s).unwrap()
            }
        });
        let want: Vec<i64> = (0..1000).map(|i| i * 3).collect();
        assert_eq!(res[1], want, "{path}");
    }
}

/// Point-to-point patterns the host path allows, on even `n` ranks paired
/// `(2k, 2k + 1)`, around the size under which sends do not wait for the
/// receiver (16 KiB): both ranks sending first (small messages only, as on
/// the host), an exchange against a recv-then-send and a send-then-recv, a
/// large send met by the peer's small send first, and a ring of exchanges.
fn p2p_patterns(dc: &DeviceComm, s: &Stream) -> Result<(), String> {
    let (n, me) = (dc.world_size(), dc.rank());
    let partner = me ^ 1;
    let even = me % 2 == 0;
    fn e(me: usize, what: &str) -> impl Fn(Error) -> String + '_ {
        move |e| format!("rank {me}: {what}: {e}")
    }
    let data = |r: usize, count: usize, round: u32| -> Vec<u32> {
        (0..count as u32)
            .map(|i| r as u32 * 1_000_000 + i + 7 * round)
            .collect()
    };
    let o = CallOptions::default();
    let send = |to: usize, v: &[u32]| -> Result<(), Error> {
        let b = dc.alloc_from(v, s)?;
        dc.run(Call::Send { peer: to }, Some(&b), &mut dc.alloc(0)?, s, &o)?
            .wait()
    };
    let recv = |from: usize, count: usize| -> Result<Vec<u32>, Error> {
        let mut b = dc.alloc_from(&vec![99u32; count], s)?;
        dc.run(Call::Recv { peer: from }, None, &mut b, s, &o)?
            .wait()?;
        b.to_vec(s)
    };
    let exchange = |to: usize, v: &[u32], from: usize, count: usize| -> Result<Vec<u32>, Error> {
        let a = dc.alloc_from(v, s)?;
        let mut b = dc.alloc_from(&vec![99u32; count], s)?;
        dc.run(Call::Exchange { to, from }, Some(&a), &mut b, s, &o)?
            .wait()?;
        b.to_vec(s)
    };
    let check = |what: &str, got: Vec<u32>, want: Vec<u32>| {
        if got == want {
            Ok(())
        } else {
            Err(format!(
                "rank {me}: {what}: got {:?}.. want {:?}..",
                &got[..got.len().min(3)],
                &want[..want.len().min(3)]
            ))
        }
    };
    for count in [3usize, 1000, 4095, 4096, 300_000] {
        let small = count * 4 < 16 * 1024;
        if small {
            let what = format!("both send first, {count}");
            send(partner, &data(me, count, 1)).map_err(e(me, &what))?;
            check(
                &what,
                recv(partner, count).map_err(e(me, &what))?,
                data(partner, count, 1),
            )?;
        }
        let what = format!("exchange against recv then send, {count}");
        let got = if even {
            exchange(partner, &data(me, count, 2), partner, count).map_err(e(me, &what))?
        } else {
            let got = recv(partner, count).map_err(e(me, &what))?;
            send(partner, &data(me, count, 2)).map_err(e(me, &what))?;
            got
        };
        check(&what, got, data(partner, count, 2))?;
        let what = format!("exchange against send then recv, {count}");
        let got = if even {
            exchange(partner, &data(me, count, 3), partner, count).map_err(e(me, &what))?
        } else {
            send(partner, &data(me, count, 3)).map_err(e(me, &what))?;
            recv(partner, count).map_err(e(me, &what))?
        };
        check(&what, got, data(partner, count, 3))?;
        let what = format!("a large send met by a small one, {count}");
        let (mine, theirs) = if even { (count, 3) } else { (3, count) };
        send(partner, &data(me, mine, 4)).map_err(e(me, &what))?;
        check(
            &what,
            recv(partner, theirs).map_err(e(me, &what))?,
            data(partner, theirs, 4),
        )?;
        let what = format!("a ring of exchanges, {count}");
        let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
        let got = exchange(next, &data(me, count, 5), prev, count).map_err(e(me, &what))?;
        check(&what, got, data(prev, count, 5))?;
    }
    Ok(())
}

#[test]
fn point_to_point_patterns_match_the_host_path() {
    // On the IPC path a send that waited for an acknowledgement met the
    // peer's own send (a Mismatch), and an exchange (staged) did not match
    // a send or recv (IPC) on the peer.
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        let gpu = Arc::new(FakeDevice::new(1));
        let res = with_ranks(4, &[gpu], &[0], path, |dc| {
            let dc = dc.map_err(|e| e.to_string())?;
            let s = dc.stream().map_err(|e| e.to_string())?;
            p2p_patterns(&dc, &s)
        });
        for (r, x) in res.iter().enumerate() {
            assert!(x.is_ok(), "{path}, rank {r}: {x:?}");
        }
        // Both sending 1.2 MB first wait for each other, as on the host,
        // and the error names the send.
        let gpu = Arc::new(FakeDevice::new(1));
        let res = with_ranks(2, &[gpu], &[0], path, |dc| {
            let dc = dc.unwrap();
            let s = dc.stream().unwrap();
            let a = dc.alloc_from(&[7u32; 300_000], &s).unwrap();
            let o = CallOptions {
                timeout: Some(Duration::from_millis(500)),
                algorithm: None,
            };
            let peer = 1 - dc.rank();
            dc.run(
                Call::Send { peer },
                Some(&a),
                &mut dc.alloc(0).unwrap(),
                &s,
                &o,
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        });
        // (The first to time out aborts; the other may see that first.)
        for (r, x) in res.iter().enumerate() {
            assert!(
                x.as_ref().is_err_and(|e| e.starts_with("send #")
                    && (e.contains("timed out") || e.contains("aborted"))),
                "{path}, rank {r}: {x:?}"
            );
        }
        assert!(
            res.iter()
                .any(|x| x.as_ref().is_err_and(|e| e.contains("timed out"))),
            "{path}: {res:?}"
        );
    }
}

#[test]
fn calls_without_a_schedule_stage_on_device_buffers() {
    // exchange, gather, scatter and the blocks-of-any-size calls: through
    // pinned host memory on either path (the IPC path has no plan for them).
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        let gpu = Arc::new(FakeDevice::new(1));
        let n = 3;
        let res = with_ranks(n, &[gpu], &[0], path, |dc| -> Result<(), String> {
            let dc = dc.map_err(|e| e.to_string())?;
            let s = dc.stream().map_err(|e| e.to_string())?;
            let r = dc.rank();
            let e = |e: Error| format!("rank {r}: {e}");
            let run = |call, send: &DeviceBuffer<u32>, recv: &mut DeviceBuffer<u32>| {
                dc.run(call, Some(send), recv, &s, &CallOptions::default())
                    .and_then(|ev| ev.wait())
            };
            // A ring exchange.
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            let mine = dc.alloc_from(&vec![r as u32; 777], &s).map_err(e)?;
            let mut got = dc.alloc::<u32>(777).map_err(e)?;
            run(
                Call::Exchange {
                    to: next,
                    from: prev,
                },
                &mine,
                &mut got,
            )
            .map_err(e)?;
            if got.to_vec(&s).map_err(e)? != vec![prev as u32; 777] {
                return Err(format!("rank {r}: exchange"));
            }
            // Gather to rank 1, then scatter it back.
            let block = dc.alloc_from(&[r as u32, 10 + r as u32], &s).map_err(e)?;
            let mut all = dc.alloc::<u32>(if r == 1 { 2 * n } else { 0 }).map_err(e)?;
            run(Call::Gather { root: 1 }, &block, &mut all).map_err(e)?;
            if r == 1 && all.to_vec(&s).map_err(e)? != [0, 10, 1, 11, 2, 12] {
                return Err("gather".into());
            }
            let mut back = dc.alloc::<u32>(2).map_err(e)?;
            run(Call::Scatter { root: 1 }, &all, &mut back).map_err(e)?;
            if back.to_vec(&s).map_err(e)? != [r as u32, 10 + r as u32] {
                return Err(format!("rank {r}: scatter"));
            }
            // Rank r sends p + 1 copies of r to each rank p.
            let send: Vec<u32> = (0..n).flat_map(|p| vec![r as u32; p + 1]).collect();
            let send = dc.alloc_from(&send, &s).map_err(e)?;
            let mut recv = dc.alloc::<u32>(n * (r + 1)).map_err(e)?;
            let counts: Vec<usize> = (1..=n).collect();
            dc.all_to_all_v(&send, &counts, &mut recv, &vec![r + 1; n], &s)
                .and_then(|ev| ev.wait())
                .map_err(e)?;
            let want: Vec<u32> = (0..n).flat_map(|q| vec![q as u32; r + 1]).collect();
            if recv.to_vec(&s).map_err(e)? != want {
                return Err(format!("rank {r}: all_to_all_v"));
            }
            // Rank q's block is q + 1 copies of q: gathered everywhere,
            // gathered to rank 2, scattered back from it.
            let counts: Vec<usize> = (1..=n).collect();
            let want: Vec<u32> = (0..n).flat_map(|q| vec![q as u32; q + 1]).collect();
            let mine = dc.alloc_from(&vec![r as u32; r + 1], &s).map_err(e)?;
            let mut all = dc.alloc::<u32>(want.len()).map_err(e)?;
            dc.all_gather_v(&mine, &mut all, &counts, &s)
                .and_then(|ev| ev.wait())
                .map_err(e)?;
            if all.to_vec(&s).map_err(e)? != want {
                return Err(format!("rank {r}: all_gather_v"));
            }
            let mut at_root = dc
                .alloc::<u32>(if r == 2 { want.len() } else { 0 })
                .map_err(e)?;
            dc.gather_v(&mine, &mut at_root, &counts, 2, &s)
                .and_then(|ev| ev.wait())
                .map_err(e)?;
            if r == 2 && at_root.to_vec(&s).map_err(e)? != want {
                return Err("gather_v".into());
            }
            let mut back = dc.alloc::<u32>(r + 1).map_err(e)?;
            dc.scatter_v(&at_root, &counts, &mut back, 2, &s)
                .and_then(|ev| ev.wait())
                .map_err(e)?;
            if back.to_vec(&s).map_err(e)? != vec![r as u32; r + 1] {
                return Err(format!("rank {r}: scatter_v"));
            }
            // Off the root a gather leaves `recv` as it was (the staging
            // buffer still holds the all_gather_v's blocks).
            let (len, counts_here) = if r == 2 {
                (want.len(), &counts[..])
            } else {
                (4, &[][..])
            };
            let mut keep = dc.alloc_from(&vec![99u32; len], &s).map_err(e)?;
            dc.gather_v(&mine, &mut keep, counts_here, 2, &s)
                .and_then(|ev| ev.wait())
                .map_err(e)?;
            let kept = keep.to_vec(&s).map_err(e)?;
            if (r == 2 && kept != want) || (r != 2 && kept != [99; 4]) {
                return Err(format!("rank {r}: gather_v wrote {kept:?}"));
            }
            // A bad count is this rank's own error, before anything moves.
            let bad = dc.all_gather_v(&mine, &mut all, &[1, 1], &s).unwrap_err();
            if !bad
                .to_string()
                .contains("all_gather_v: 2 receive counts for 3 ranks")
            {
                return Err(format!("rank {r}: {bad}"));
            }
            Ok(())
        });
        for (r, x) in res.iter().enumerate() {
            assert!(x.is_ok(), "{path}, rank {r}: {x:?}");
        }
    }
}

#[test]
fn a_bad_argument_to_a_staged_call_is_the_ranks_own_error() {
    // It aborted the host communicator (every rank's next call failed).
    let gpu = Arc::new(FakeDevice::new(1));
    let res = with_ranks(2, &[gpu], &[0], GpuPath::Staged, |dc| {
        let dc = dc.unwrap();
        let s = dc.stream().unwrap();
        let a = dc.alloc_from(&[1u32; 4], &s).unwrap();
        let mut b = dc.alloc::<u32>(4).unwrap();
        let me = dc.rank();
        let bad = dc
            .run(
                Call::Exchange {
                    to: me,
                    from: 1 - me,
                },
                Some(&a),
                &mut b,
                &s,
                &CallOptions::default(),
            )
            .map(|_| ());
        let counts = dc
            .all_to_all_v(&a, &[1, 1], &mut b, &[2, 2], &s)
            .map(|_| ());
        let next = dc.barrier(&s).and_then(|e| e.wait());
        (
            bad.map_err(|e| e.to_string()),
            counts.map_err(|e| e.to_string()),
            next.is_ok(),
        )
    });
    for (r, (bad, counts, next)) in res.iter().enumerate() {
        assert!(
            bad.as_ref().is_err_and(|e| e.contains("invalid")),
            "rank {r}: {bad:?}"
        );
        assert!(
            counts.as_ref().is_err_and(|e| e.contains("add up")),
            "rank {r}: {counts:?}"
        );
        assert!(next, "rank {r}: the communicator was aborted");
    }
}

#[test]
fn device_communicators_split_into_groups() {
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        let gpu = Arc::new(FakeDevice::new(1));
        let res = with_ranks(5, &[gpu], &[0], path, |dc| -> Result<Vec<i64>, String> {
            let dc = dc.map_err(|e| e.to_string())?;
            let r = dc.rank();
            // Evens and odds; rank 4 stays out.
            let color = (r != 4).then_some(r as u32 % 2);
            let Some(g) = dc.split(color, 0).map_err(|e| e.to_string())? else {
                return Ok(vec![]);
            };
            if g.path() != path {
                return Err(format!("rank {r}: group path {}", g.path()));
            }
            let s = g.stream().map_err(|e| e.to_string())?;
            let mut b = g
                .alloc_from(&[r as i64; 3], &s)
                .map_err(|e| e.to_string())?;
            g.all_reduce_in_place(&mut b, ReduceOp::Sum, &s)
                .and_then(|ev| ev.wait())
                .map_err(|e| e.to_string())?;
            b.to_vec(&s).map_err(|e| e.to_string())
        });
        let res: Vec<Vec<i64>> = res.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            res,
            vec![vec![2; 3], vec![4; 3], vec![2; 3], vec![4; 3], vec![]],
            "{path}"
        );
    }
}

#[test]
fn pinned_host_buffers_are_registered_and_valid_collective_buffers() {
    let gpu = Arc::new(FakeDevice::new(1));
    let res = with_ranks(3, std::slice::from_ref(&gpu), &[0], GpuPath::Ipc, |dc| {
        let dc = dc.unwrap();
        let mut b = dc.alloc_host::<f32>(10_000).unwrap();
        assert_eq!(b.space(), MemorySpace::HostPinned);
        assert!(b.is_shared());
        b.iter_mut().for_each(|x| *x = dc.rank() as f32 + 1.0);
        dc.comm()
            .all_reduce_in_place(&mut b, ReduceOp::Sum)
            .unwrap();
        // And a device copy from/to it.
        let s = dc.stream().unwrap();
        let d = dc.alloc_from(&b, &s).unwrap();
        d.copy_to_host(&mut b, &s).unwrap();
        b.to_vec()
    });
    for r in res {
        assert!(r.iter().all(|&x| x == 6.0));
    }
    assert_eq!(gpu.stats().register_host, 3);
}

#[test]
fn auto_picks_ipc_with_p2p_and_staged_without() {
    let gpu = Arc::new(FakeDevice::new(2));
    let paths = with_ranks(2, &[gpu], &[0, 1], GpuPath::Auto, |dc| dc.unwrap().path());
    assert_eq!(paths, vec![GpuPath::Ipc; 2]);
    let gpu = Arc::new(FakeDevice::without_peer_access(2));
    let r = with_ranks(
        2,
        std::slice::from_ref(&gpu),
        &[0, 1],
        GpuPath::Auto,
        |dc| {
            let dc = dc.unwrap();
            (dc.path(), dc.path_reason().to_string())
        },
    );
    for (p, why) in r {
        assert_eq!(p, GpuPath::Staged);
        assert!(why.contains("no P2P"), "{why}");
    }
    // Several ranks on one device: IPC.
    let gpu = Arc::new(FakeDevice::without_peer_access(2));
    let paths = with_ranks(3, &[gpu], &[0], GpuPath::Auto, |dc| dc.unwrap().path());
    assert_eq!(paths, vec![GpuPath::Ipc; 3]);
    // Forcing IPC where it cannot work fails on every rank, clearly.
    let errs = with_ranks(2, &[gpu_np()], &[0, 1], GpuPath::Ipc, |dc| {
        dc.unwrap_err().to_string()
    });
    for e in errs {
        assert!(
            e.contains("GPUCOMM_GPU_PATH=ipc") && e.contains("P2P"),
            "{e}"
        );
    }
}

fn gpu_np() -> Arc<FakeDevice> {
    Arc::new(FakeDevice::without_peer_access(2))
}

#[test]
fn wrong_device_and_wrong_space_are_clear_errors() {
    // A device that does not exist: every rank fails, none hangs.
    let errs = with_ranks(
        2,
        &[Arc::new(FakeDevice::new(1))],
        &[0, 5],
        GpuPath::Auto,
        |dc| dc.unwrap_err().to_string(),
    );
    assert!(errs[1].contains("device 5"), "{}", errs[1]);
    assert!(
        errs[0].contains("could not open their device"),
        "{}",
        errs[0]
    );
    // A buffer of another backend or device.
    let other = Arc::new(FakeDevice::new(2));
    let res = with_ranks(
        1,
        &[Arc::new(FakeDevice::new(1))],
        &[0],
        GpuPath::Ipc,
        |dc| {
            let dc = dc.unwrap();
            let s = dc.stream().unwrap();
            let c2 = Communicator::in_process(1).unwrap().pop().unwrap();
            let foreign = DeviceComm::new(c2, other.clone(), 1, &opts(GpuPath::Ipc)).unwrap();
            let theirs = foreign.alloc::<f32>(4).unwrap();
            let mut mine = dc.alloc::<f32>(4).unwrap();
            let e1 = dc
                .all_reduce(&theirs, &mut mine, ReduceOp::Sum, &s)
                .unwrap_err()
                .to_string();
            let fs = foreign.stream().unwrap();
            let e2 = dc
                .all_reduce_in_place(&mut mine, ReduceOp::Sum, &fs)
                .unwrap_err()
                .to_string();
            let mut short = dc.alloc::<f32>(3).unwrap();
            let e3 = dc
                .all_reduce(&mine, &mut short, ReduceOp::Sum, &s)
                .unwrap_err()
                .to_string();
            let e4 = mine.copy_from_host(&[1.0; 5], &s).unwrap_err().to_string();
            // Host Buffers cannot be device memory.
            let e5 = dc
                .comm()
                .alloc_in::<f32>(4, MemorySpace::Device(0))
                .unwrap_err()
                .to_string();
            [e1, e2, e3, e4, e5]
        },
    );
    let [e1, e2, e3, e4, e5] = &res[0];
    assert!(
        e1.contains("send buffer") && e1.contains("device 1"),
        "{e1}"
    );
    assert!(e2.contains("stream"), "{e2}");
    assert!(e3.contains("send has 4 elements, recv 3"), "{e3}");
    assert!(e4.contains("5 elements"), "{e4}");
    assert!(e5.contains("DeviceComm::alloc"), "{e5}");
}

#[test]
fn mismatched_calls_fail_on_every_rank() {
    let gpu = Arc::new(FakeDevice::new(1));
    let res = with_ranks(3, &[gpu], &[0], GpuPath::Ipc, |dc| {
        let dc = dc.unwrap();
        let s = dc.stream().unwrap();
        let n = if dc.rank() == 2 { 9 } else { 8 };
        let mut b = dc.alloc_from(&vec![1u32; n], &s).unwrap();
        dc.all_reduce_in_place(&mut b, ReduceOp::Sum, &s)
            .unwrap_err()
    });
    for e in res {
        assert!(matches!(e.failure(), Some(Failure::Mismatch { .. })), "{e}");
    }
}

#[test]
fn a_device_failure_on_one_rank_ends_every_rank_without_hanging() {
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        let bad = Arc::new(FakeDevice::new(1));
        // In-process ranks share a backend on the IPC path (both may hit
        // the failure); on the staged path only rank 0's backend fails.
        let gpus = if path == GpuPath::Ipc {
            bad.fail_on(Some("reduce"));
            vec![bad.clone()]
        } else {
            bad.fail_on(Some("copy_d2h"));
            vec![bad.clone(), Arc::new(FakeDevice::new(1))]
        };
        let t0 = Instant::now();
        let res = with_ranks(2, &gpus, &[0], path, |dc| {
            let dc = dc.unwrap();
            let s = dc.stream().unwrap();
            let mut b = dc.alloc_from(&[1.0f64; 100], &s).unwrap();
            let r = dc.all_reduce_in_place(&mut b, ReduceOp::Sum, &s);
            r.map(|_| ()).unwrap_err().to_string()
        });
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "{path}: took {:?}",
            t0.elapsed()
        );
        assert!(
            res.iter().any(|e| e.contains("injected failure")),
            "{path}: {res:?}"
        );
        if path == GpuPath::Staged {
            assert!(res[0].contains("injected failure"), "{}", res[0]);
        }
    }
}

/// Another process holding a file of `bytes` at its fd 3: what the fake
/// device's IPC handle `(pid, fd, length)` names. Killed on drop.
struct PeerFile {
    child: Child,
    path: std::path::PathBuf,
}

impl PeerFile {
    fn new(tag: &str, bytes: &[u8]) -> PeerFile {
        let path = std::env::temp_dir().join(format!("gpucomm-{tag}-{}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        let child = Command::new("sh")
            .args([
                "-c",
                &format!("exec 3<>'{}'; exec sleep 60", path.display()),
            ])
            .spawn()
            .unwrap();
        let fd = format!("/proc/{}/fd/3", child.id());
        let t = Instant::now();
        while std::fs::read_link(&fd).is_err() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        PeerFile { child, path }
    }

    /// The fake IPC handle announcing `len` bytes.
    fn handle(&self, len: u64) -> Vec<u8> {
        let mut h = b"GFAK".to_vec();
        h.extend_from_slice(&self.child.id().to_le_bytes());
        h.extend_from_slice(&3i32.to_le_bytes());
        h.extend_from_slice(&len.to_le_bytes());
        h
    }
}

impl Drop for PeerFile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// CUDA maps a peer allocation once per context: a second open of it
/// returns the same address and counts a reference, and the mapping goes
/// with the last close. Two users of one backend (ranks as threads, a
/// communicator and its split child) open the same peer buffer; the CUDA
/// backend's table, keyed by address, replaced the first open by the
/// second, so the first close unmapped the buffer under the other user.
/// The fake device models CUDA here and shares that table.
#[test]
fn an_ipc_mapping_opened_twice_stays_until_its_last_close() {
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let peer = PeerFile::new("ipc-refs", &data);
    let gpu = FakeDevice::new(1);
    let (a, la) = gpu.ipc_open(0, &peer.handle(4096)).unwrap();
    let (b, lb) = gpu.ipc_open(0, &peer.handle(1000)).unwrap();
    assert_eq!((a, la, lb), (b, 4096, 1000), "the second open maps anew");
    let s = gpu.create_stream(0).unwrap();
    let read = |p: u64| -> Result<Vec<u8>, Error> {
        let mut back = vec![0u8; 64];
        // SAFETY: `back` outlives the synchronize; the source is checked
        // against the open mappings by the fake.
        unsafe { gpu.copy_d2h(s, back.as_mut_ptr(), p + 64, 64)? };
        gpu.synchronize(s)?;
        Ok(back)
    };
    // SAFETY: the second user's reference, closed once, nothing in flight.
    unsafe { gpu.ipc_close(0, b) };
    assert_eq!(
        read(a).expect("the first user's mapping went with the second's close"),
        data[64..128]
    );
    // SAFETY: the first user's reference, closed once, nothing in flight.
    unsafe { gpu.ipc_close(0, a) };
    let e = read(a).unwrap_err().to_string();
    assert!(e.contains("not in any device allocation"), "{e}");
    assert_eq!((gpu.stats().ipc_open, gpu.stats().ipc_close), (2, 2));
    // A handle announcing more than the allocation is refused.
    let e = gpu.ipc_open(0, &peer.handle(4097)).unwrap_err().to_string();
    assert!(e.contains("4097 bytes of an allocation of 4096"), "{e}");
}

#[test]
fn no_gpu_is_a_clear_error() {
    match gpucomm::device::open_cuda() {
        Ok(g) => eprintln!(
            "a GPU is present ({} devices): nothing to check",
            g.device_count()
        ),
        Err(e) => {
            assert!(matches!(e, Error::NoGpu(_)), "{e}");
            assert!(e.to_string().starts_with("no GPU: "), "{e}");
            let c = Communicator::in_process(1).unwrap().pop().unwrap();
            let e = DeviceComm::cuda(c, 0, &DeviceOptions::default()).unwrap_err();
            assert!(e.to_string().starts_with("no GPU: "), "{e}");
        }
    }
}

// ---------------------------------------------------------------------------
// Real processes: the test binary re-executes itself, one process per rank.

/// Spawns `n` ranks running `scenario`; returns (exit code, output) per rank.
fn job(
    scenario: &str,
    n: usize,
    backend: &str,
    path: GpuPath,
    limit: Duration,
) -> Vec<(i32, String)> {
    let groups: Vec<String> = (0..n).map(|r| r.to_string()).collect();
    job_groups(scenario, n, &groups, backend, path, limit)
}

/// Like [`job`], one process per group of ranks (`"0+1"`: ranks 0 and 1 as
/// threads of one process).
fn job_groups(
    scenario: &str,
    n: usize,
    groups: &[String],
    backend: &str,
    path: GpuPath,
    limit: Duration,
) -> Vec<(i32, String)> {
    let port = common::free_port();
    let exe = std::env::current_exe().unwrap();
    let token = format!("dev-{}-{port}", std::process::id());
    let mut children: Vec<Child> = groups
        .iter()
        .map(|r| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "worker",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(
                    ROLE,
                    format!("{scenario},{r},{n},127.0.0.1:{port},{token},{backend},{path}"),
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let out = common::wait_children(&mut children, limit);
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    out
}

/// The worker role: never runs unless re-executed by a test.
#[test]
#[ignore]
fn worker() {
    let Ok(spec) = std::env::var(ROLE) else {
        return;
    };
    let f: Vec<&str> = spec.split(',').collect();
    let (scenario, n) = (f[0], f[2].parse::<usize>().unwrap());
    let ranks: Vec<usize> = f[1].split('+').map(|r| r.parse().unwrap()).collect();
    let path = GpuPath::parse(f[6]).unwrap();
    // Threads of one process share one backend.
    let fake = Arc::new(FakeDevice::new(1));
    let backend: Arc<dyn DeviceBackend> = match f[5] {
        "cuda" => gpucomm::device::open_cuda().unwrap_or_else(|e| panic!("{e}")),
        _ => fake.clone(),
    };
    let one = |rank: usize| {
        let cfg = BootstrapConfig {
            rank,
            world_size: n,
            local_rank: Some(rank),
            local_world_size: Some(n),
            store_addr: f[3].to_string(),
            token: f[4].to_string(),
            transport: TransportChoice::Shm,
            algorithm: None,
            timeout: Duration::from_secs(60),
            socket_ifname: None,
        };
        let c = Communicator::new(&cfg).unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        let dc = DeviceComm::new(c, backend.clone(), 0, &opts(path))
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(dc.path(), path);
        let s = dc.stream().unwrap();
        match scenario {
            "cases" | "full" => {
                let mut checked = 0;
                for case in cases(n, scenario == "full") {
                    checked += run_dyn(&dc, &s, &case).unwrap_or_else(|e| panic!("{e}"));
                }
                println!("rank {rank}: {checked} elements checked");
            }
            "cache" => {
                // The same buffers, many calls: each peer buffer is opened once.
                let mut send = dc.alloc_from(&vec![rank as u32 + 1; 4096], &s).unwrap();
                let mut recv = dc.alloc::<u32>(4096).unwrap();
                for _ in 0..10 {
                    dc.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)
                        .unwrap()
                        .wait()
                        .unwrap();
                }
                let want = (n * (n + 1) / 2) as u32;
                assert!(recv.to_vec(&s).unwrap().iter().all(|&x| x == want));
                if f[5] == "fake" {
                    assert_eq!(
                        fake.stats().ipc_open,
                        2 * (n as u64 - 1),
                        "{:?}",
                        fake.stats()
                    );
                    assert_eq!(fake.stats().ipc_export, 2, "{:?}", fake.stats());
                }
                // In place on the same buffers.
                dc.all_reduce_in_place(&mut send, ReduceOp::Max, &s)
                    .unwrap()
                    .wait()
                    .unwrap();
                assert!(send.to_vec(&s).unwrap().iter().all(|&x| x == n as u32));
                // Dropped exported buffers stay allocated until the next
                // call has told the peers, who close them; then they go.
                let before = fake.live_allocations();
                drop((send, recv));
                if f[5] == "fake" {
                    assert_eq!(
                        fake.live_allocations(),
                        before,
                        "freed while peers map them"
                    );
                    assert_eq!(fake.stats().ipc_close, 0);
                }
                let mut b = dc.alloc_from(&[1.5f64; 100], &s).unwrap();
                dc.all_reduce_in_place(&mut b, ReduceOp::Sum, &s)
                    .unwrap()
                    .wait()
                    .unwrap();
                assert!(b.to_vec(&s).unwrap().iter().all(|&x| x == 1.5 * n as f64));
                if f[5] == "fake" {
                    let st = fake.stats();
                    assert_eq!(st.ipc_close, 2 * (n as u64 - 1), "{st:?}");
                    // The two old buffers went; `b` came.
                    assert_eq!(fake.live_allocations(), before - 1, "{st:?}");
                }
            }
            "p2p" => {
                let before = fake.live_allocations();
                p2p_patterns(&dc, &s).unwrap_or_else(|e| panic!("{e}"));
                // Sent buffers were freed as they dropped: a receiver maps
                // a sender's buffer for its copy alone (they stayed, until
                // a collective, growing without bound).
                if f[5] == "fake" {
                    let st = fake.stats();
                    assert_eq!(fake.live_allocations(), before, "{st:?}");
                    assert_eq!(st.ipc_open, st.ipc_close, "{st:?}");
                }
            }
            "shared_mapping" => {
                // Rank 0's communicator and its split child both map rank
                // 1's buffer `x` (one mapping, two references, as CUDA
                // counts them): the child's receive opens it for its copy
                // and closes it, and the parent's cached mapping stays.
                let count = 8192; // 32 KiB: the receiver copies from `x`
                let x = dc.alloc_from(&vec![rank as u32 + 1; count], &s).unwrap();
                let mut sum = dc.alloc::<u32>(count).unwrap();
                dc.all_reduce(&x, &mut sum, ReduceOp::Sum, &s)
                    .unwrap()
                    .wait()
                    .unwrap();
                let child = dc.split(Some(0), rank as i64).unwrap().unwrap();
                let cs = child.stream().unwrap();
                let o = CallOptions::default();
                if rank == 1 {
                    let mut none = child.alloc::<u32>(0).unwrap();
                    child.run(Call::Send { peer: 0 }, Some(&x), &mut none, &cs, &o)
                } else {
                    let mut got = child.alloc::<u32>(count).unwrap();
                    let r = child.run(Call::Recv { peer: 1 }, None, &mut got, &cs, &o);
                    assert!(got.to_vec(&cs).unwrap().iter().all(|&v| v == 2));
                    r
                }
                .unwrap()
                .wait()
                .unwrap();
                let before = fake.stats();
                dc.all_reduce(&x, &mut sum, ReduceOp::Sum, &s)
                    .unwrap_or_else(|e| panic!("rank {rank}: the parent's mapping is gone: {e}"))
                    .wait()
                    .unwrap();
                assert!(sum.to_vec(&s).unwrap().iter().all(|&v| v == 3));
                assert_eq!(fake.stats().ipc_open, before.ipc_open, "reopened");
                drop(child);
            }
            "split_retire" => {
                // Buffers of the parent used in calls of its split child:
                // the peer opens them in its child's cache, so only the
                // child's calls can announce them retired; freeing them
                // when the parent's next call announced them freed memory
                // the peer still mapped.
                let child = dc.split(Some(0), rank as i64).unwrap().unwrap();
                let cs = child.stream().unwrap();
                let send = dc.alloc_from(&vec![1u32; 1024], &s).unwrap();
                let mut recv = dc.alloc::<u32>(1024).unwrap();
                child
                    .all_reduce(&send, &mut recv, ReduceOp::Sum, &cs)
                    .unwrap()
                    .wait()
                    .unwrap();
                assert!(recv.to_vec(&cs).unwrap().iter().all(|&v| v == n as u32));
                // And one used by both: the peer maps it in both caches.
                let mut both = dc.alloc_from(&[2u32; 64], &s).unwrap();
                dc.all_reduce_in_place(&mut both, ReduceOp::Sum, &s)
                    .unwrap()
                    .wait()
                    .unwrap();
                child
                    .all_reduce_in_place(&mut both, ReduceOp::Sum, &cs)
                    .unwrap()
                    .wait()
                    .unwrap();
                assert!(both.to_vec(&s).unwrap().iter().all(|&v| v == 2 * 4));
                let (live0, closed0) = (fake.live_allocations(), fake.stats().ipc_close);
                drop((send, recv, both));
                assert_eq!(fake.live_allocations(), live0, "freed while peers map them");
                // The parent's next call announces `both` (the peer closes
                // its parent mapping) and frees nothing: the peer's child
                // still maps all three.
                let mut x = dc.alloc_from(&[1u32; 16], &s).unwrap();
                dc.all_reduce_in_place(&mut x, ReduceOp::Sum, &s)
                    .unwrap()
                    .wait()
                    .unwrap();
                let st = fake.stats();
                assert_eq!(
                    fake.live_allocations(),
                    live0 + 1,
                    "rank {rank}: freed while the peer's split child maps them: {st:?}"
                );
                assert_eq!(st.ipc_close - closed0, 1, "{st:?}");
                // The child's next call announces the three: the peer
                // closes them, and they go.
                let mut y = child.alloc_from(&[1u32; 16], &cs).unwrap();
                child
                    .all_reduce_in_place(&mut y, ReduceOp::Sum, &cs)
                    .unwrap()
                    .wait()
                    .unwrap();
                let st = fake.stats();
                assert_eq!(fake.live_allocations(), live0 + 2 - 3, "{st:?}");
                assert_eq!(st.ipc_close - closed0, 1 + 3, "{st:?}");
                assert_eq!(x.to_vec(&s).unwrap(), vec![n as u32; 16]);
                assert_eq!(y.to_vec(&cs).unwrap(), vec![n as u32; 16]);
                drop((x, y));
                drop(child);
            }
            "crash" => {
                // Rank 1 dies after setup; the others must fail, not hang.
                if rank == 1 {
                    std::process::exit(7);
                }
                let mut b = dc.alloc_from(&[1.0f32; 64], &s).unwrap();
                let e = dc
                    .all_reduce_in_place(&mut b, ReduceOp::Sum, &s)
                    .unwrap_err();
                println!("rank {rank}: {e}");
            }
            other => panic!("unknown scenario {other}"),
        }
    };
    if let [r] = ranks[..] {
        one(r);
    } else {
        std::thread::scope(|sc| {
            for &r in &ranks {
                let one = &one;
                sc.spawn(move || one(r));
            }
        });
    }
    println!("WORKER-OK");
}

#[test]
fn processes_fake_ipc_2_and_4_ranks() {
    all_ok(&job(
        "full",
        2,
        "fake",
        GpuPath::Ipc,
        Duration::from_secs(120),
    ));
    all_ok(&job(
        "cases",
        4,
        "fake",
        GpuPath::Ipc,
        Duration::from_secs(120),
    ));
}

#[test]
fn processes_point_to_point_patterns() {
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        all_ok(&job("p2p", 2, "fake", path, Duration::from_secs(120)));
    }
}

#[test]
fn processes_fake_staged_2_and_4_ranks() {
    all_ok(&job(
        "cases",
        2,
        "fake",
        GpuPath::Staged,
        Duration::from_secs(120),
    ));
    all_ok(&job(
        "cases",
        4,
        "fake",
        GpuPath::Staged,
        Duration::from_secs(120),
    ));
}

#[test]
fn processes_and_threads_mixed() {
    // Ranks 0 and 1 are threads of one process, rank 2 another process:
    // descriptors carry IPC handles, which the threads use as addresses.
    let groups = ["0+1".to_string(), "2".to_string()];
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        all_ok(&job_groups(
            "cases",
            3,
            &groups,
            "fake",
            path,
            Duration::from_secs(120),
        ));
    }
}

#[test]
fn processes_open_each_peer_buffer_once() {
    all_ok(&job(
        "cache",
        3,
        "fake",
        GpuPath::Ipc,
        Duration::from_secs(60),
    ));
}

#[test]
fn processes_a_split_child_and_its_parent_share_a_peer_mapping() {
    all_ok(&job(
        "shared_mapping",
        2,
        "fake",
        GpuPath::Ipc,
        Duration::from_secs(60),
    ));
}

#[test]
fn processes_free_a_buffer_only_after_every_communicator_that_exposed_it_retired_it() {
    all_ok(&job(
        "split_retire",
        2,
        "fake",
        GpuPath::Ipc,
        Duration::from_secs(60),
    ));
}

#[test]
fn processes_a_dead_rank_ends_the_others() {
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        let res = job("crash", 3, "fake", path, Duration::from_secs(60));
        assert_eq!(res[1].0, 7);
        for r in [0, 2] {
            assert_eq!(res[r].0, 0, "{path} rank {r}:\n{}", res[r].1);
            assert!(res[r].1.contains("WORKER-OK"), "{}", res[r].1);
        }
    }
}

// ---------------------------------------------------------------------------
// On a GPU.

/// `Some(())` when a GPU is there; otherwise prints SKIPPED, or fails when
/// `GPUCOMM_REQUIRE_GPU=1`.
fn gpu_or_skip(test: &str) -> Option<()> {
    match gpucomm::device::open_cuda() {
        Ok(_) => Some(()),
        Err(e) => {
            if std::env::var(gpucomm_cuda::REQUIRE_GPU_ENV).as_deref() == Ok("1") {
                panic!("{test}: {e} (GPUCOMM_REQUIRE_GPU=1)");
            }
            eprintln!("# {test}: SKIPPED (set GPUCOMM_REQUIRE_GPU=1 to fail instead): {e}");
            None
        }
    }
}

#[test]
fn gpu_processes_sharing_device_0_ipc() {
    if gpu_or_skip("gpu_processes_sharing_device_0_ipc").is_none() {
        return;
    }
    all_ok(&job(
        "full",
        2,
        "cuda",
        GpuPath::Ipc,
        Duration::from_secs(300),
    ));
    all_ok(&job(
        "full",
        4,
        "cuda",
        GpuPath::Ipc,
        Duration::from_secs(300),
    ));
    all_ok(&job(
        "cache",
        4,
        "cuda",
        GpuPath::Ipc,
        Duration::from_secs(120),
    ));
    all_ok(&job(
        "p2p",
        2,
        "cuda",
        GpuPath::Ipc,
        Duration::from_secs(120),
    ));
}

#[test]
fn gpu_processes_sharing_device_0_staged() {
    if gpu_or_skip("gpu_processes_sharing_device_0_staged").is_none() {
        return;
    }
    all_ok(&job(
        "full",
        2,
        "cuda",
        GpuPath::Staged,
        Duration::from_secs(300),
    ));
    all_ok(&job(
        "full",
        4,
        "cuda",
        GpuPath::Staged,
        Duration::from_secs(300),
    ));
}

#[test]
fn gpu_threads_sharing_device_0() {
    if gpu_or_skip("gpu_threads_sharing_device_0").is_none() {
        return;
    }
    let gpu = gpucomm::device::open_cuda().unwrap();
    for path in [GpuPath::Ipc, GpuPath::Staged] {
        let comms = Communicator::in_process(2).unwrap();
        let cases = cases(2, false);
        std::thread::scope(|sc| {
            for c in comms {
                let (gpu, cases) = (gpu.clone(), &cases);
                sc.spawn(move || {
                    let dc = DeviceComm::new(c, gpu, 0, &opts(path)).unwrap();
                    let s = dc.stream().unwrap();
                    for case in cases {
                        run_dyn(&dc, &s, case).unwrap_or_else(|e| panic!("{e}"));
                    }
                });
            }
        });
    }
}
