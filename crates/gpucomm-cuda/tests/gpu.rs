//! GPU tests: they run for real when a device is present, skip with a
//! printed reason when not, and fail when `GPUCOMM_REQUIRE_GPU=1` and there
//! is no GPU. On a GPU machine:
//!
//! ```text
//! GPUCOMM_REQUIRE_GPU=1 cargo test --workspace
//! ```

use gpucomm_algo::ReduceOp;
use gpucomm_cuda::{
    CodeKind, DType, Device, DeviceMemory, Error, Gpu, IpcBufferDesc, Kernels, REQUIRE_GPU_ENV,
    StagedCopier, reference,
};

/// The first device, or `None` (skip) when there is none and a GPU is not required.
fn device() -> Option<Device> {
    match Gpu::probe() {
        Ok(gpu) => Some(gpu.device(0).expect("device 0 opens")),
        Err(e) => {
            if std::env::var(REQUIRE_GPU_ENV).as_deref() == Ok("1") {
                panic!("{REQUIRE_GPU_ENV}=1 but {e}");
            }
            eprintln!("SKIPPED (set {REQUIRE_GPU_ENV}=1 to fail instead): {e}");
            None
        }
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed))
        .collect()
}

#[test]
fn device_reports_itself() {
    let Some(dev) = device() else { return };
    let i = dev.info();
    eprintln!("{i:?}");
    assert!(!i.name.is_empty());
    assert!(i.total_memory > 0);
    assert!(i.compute_capability.0 >= 3);
    assert!(i.multiprocessors > 0);
    assert!(!i.pci_bus_id.is_empty());
}

#[test]
fn host_device_round_trips_pageable_pinned_registered() {
    let Some(dev) = device() else { return };
    let s = dev.stream().unwrap();
    let n = (1 << 20) + 3;
    let d = dev.alloc(n).unwrap();
    // New memory is zeroed.
    let mut back = vec![1u8; n];
    s.copy_to_host(&mut back, &d, 0).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    // Pageable.
    let src = pattern(n, 1);
    s.copy_from_host(&d, 0, &src).unwrap();
    s.copy_to_host(&mut back, &d, 0).unwrap();
    assert_eq!(back, src);
    // Pinned, at an offset.
    let mut pinned = dev.alloc_pinned(1000).unwrap();
    pinned.copy_from_slice(&pattern(1000, 9));
    s.copy_from_host(&d, 12345, &pinned).unwrap();
    let mut out = dev.alloc_pinned(1000).unwrap();
    s.copy_to_host(&mut out, &d, 12345).unwrap();
    assert_eq!(&out[..], &pinned[..]);
    // Registered.
    let mut host = pattern(4096, 5);
    let reg = dev.register(&mut host).unwrap();
    s.copy_from_host(&d, 0, &reg).unwrap();
    drop(reg);
    s.copy_to_host(&mut back[..4096], &d, 0).unwrap();
    assert_eq!(back[..4096], pattern(4096, 5)[..]);
    // Out of range is an error, not a fault.
    let e = s.copy_from_host(&d, n - 1, &[0u8; 2]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

#[test]
fn device_copies_memset_and_events() {
    let Some(dev) = device() else { return };
    let (s1, s2) = (dev.stream().unwrap(), dev.stream().unwrap());
    let n = 8 << 20;
    let (a, b) = (dev.alloc(n).unwrap(), dev.alloc(n).unwrap());
    s1.copy_from_host(&a, 0, &pattern(n, 3)).unwrap();
    // s2 copies a -> b only after s1's memset of a's first MiB is done.
    let ev = dev.event(false, false).unwrap();
    let head = dev.alloc(1 << 20).unwrap();
    s1.memset(&head, 0xAB).unwrap();
    s1.copy_device(&a, 0, &head, 0, 1 << 20).unwrap();
    ev.record(&s1).unwrap();
    s2.wait_event(&ev).unwrap();
    s2.copy_device(&b, 0, &a, 0, n).unwrap();
    let done = dev.event(false, false).unwrap();
    done.record(&s2).unwrap();
    done.wait().unwrap();
    assert!(done.is_done().unwrap());
    let mut back = vec![0u8; n];
    s2.copy_to_host(&mut back, &b, 0).unwrap();
    assert!(back[..1 << 20].iter().all(|&x| x == 0xAB));
    assert_eq!(back[1 << 20..], pattern(n, 3)[1 << 20..]);
    // Timing events measure something non-negative.
    let (t0, t1) = (
        dev.event(true, false).unwrap(),
        dev.event(true, false).unwrap(),
    );
    t0.record(&s1).unwrap();
    s1.copy_device(&b, 0, &a, 0, n).unwrap();
    t1.record(&s1).unwrap();
    t1.wait().unwrap();
    assert!(t1.elapsed_ms(&t0).unwrap() >= 0.0);
    // A timing interprocess event is refused up front.
    assert!(dev.event(true, true).is_err());
}

#[test]
fn peer_copies_between_every_device_pair() {
    let Some(dev) = device() else { return };
    let gpu = Gpu::probe().unwrap();
    let devs = gpu.devices().unwrap();
    eprintln!("{} device(s)", devs.len());
    let n = (4 << 20) + 16;
    for src in &devs {
        for dst in &devs {
            let (a, b) = (src.alloc(n).unwrap(), dst.alloc(n).unwrap());
            let ss = src.stream().unwrap();
            ss.copy_from_host(&a, 0, &pattern(n, src.ordinal() as u8))
                .unwrap();
            let s = dst.stream().unwrap();
            s.copy_peer(&b, 0, &a, 0, n).unwrap();
            s.synchronize().unwrap();
            let mut back = vec![0u8; n];
            s.copy_to_host(&mut back, &b, 0).unwrap();
            assert_eq!(
                back,
                pattern(n, src.ordinal() as u8),
                "{} -> {}",
                src.ordinal(),
                dst.ordinal()
            );
            if dst.can_access_peer(src).unwrap() {
                dst.enable_peer_access(src).unwrap();
                dst.enable_peer_access(src).unwrap(); // twice is fine
                let k = dst.kernels().unwrap();
                s.memset(&b, 0).unwrap();
                k.copy(&s, &b, 0, &a, 0, n).unwrap();
                s.copy_to_host(&mut back, &b, 0).unwrap();
                assert_eq!(
                    back,
                    pattern(n, src.ordinal() as u8),
                    "kernel {} -> {}",
                    src.ordinal(),
                    dst.ordinal()
                );
            }
        }
    }
    drop(dev);
}

#[test]
fn kernel_copy_any_alignment() {
    let Some(dev) = device() else { return };
    let k = dev.kernels().unwrap();
    let s = dev.stream().unwrap();
    let n = 1 << 20;
    let (a, b) = (dev.alloc(n).unwrap(), dev.alloc(n).unwrap());
    s.copy_from_host(&a, 0, &pattern(n, 4)).unwrap();
    for (so, dof, len) in [
        (0, 0, n),
        (1, 3, n - 5),
        (16, 32, 4096),
        (7, 0, 1),
        (0, 0, 0),
    ] {
        s.memset(&b, 0).unwrap();
        k.copy(&s, &b, dof, &a, so, len).unwrap();
        let mut back = vec![0u8; n];
        s.copy_to_host(&mut back, &b, 0).unwrap();
        assert_eq!(
            back[dof..dof + len],
            pattern(n, 4)[so..so + len],
            "{so} {dof} {len}"
        );
        assert!(back[..dof].iter().all(|&x| x == 0));
        assert!(back[dof + len..].iter().all(|&x| x == 0));
    }
    assert!(k.copy(&s, &b, 1, &a, 0, n).is_err());
}

#[test]
fn misaligned_reduce_operands_are_refused_and_the_context_survives() {
    let Some(dev) = device() else { return };
    let k = dev.kernels().unwrap();
    let s = dev.stream().unwrap();
    let buf = dev.alloc(64).unwrap();
    let odd = buf.slice(2..34).unwrap();
    let e = k
        .reduce(&s, ReduceOp::Sum, DType::I32, &odd, &odd, &odd, 8)
        .unwrap_err();
    assert!(e.to_string().contains("not aligned"), "{e}");
    assert!(k.divide(&s, DType::F32, &odd, 8, 2).is_err());
    // Nothing reached the GPU, so the context still works.
    let ok = buf.slice(0..32).unwrap();
    s.copy_from_host(&ok, 0, &[1u8; 32]).unwrap();
    k.reduce(&s, ReduceOp::Sum, DType::I32, &ok, &ok, &ok, 8)
        .unwrap();
    let mut back = vec![0u8; 32];
    s.copy_to_host(&mut back, &ok, 0).unwrap();
    assert_eq!(back, [2u8; 32], "0x01010101 + 0x01010101 in every i32");
}

#[test]
fn reduction_kernels_equal_the_cpu_reference_for_every_op_and_type() {
    let Some(dev) = device() else { return };
    let k = dev.kernels().unwrap();
    eprintln!(
        "NVRTC {:?} ({}), loaded {:?} of {} bytes",
        gpucomm_cuda::nvrtc_version().unwrap(),
        gpucomm_cuda::nvrtc_library().unwrap(),
        k.code,
        k.image_len
    );
    kernels_equal_the_reference(&dev, &k);
}

#[test]
fn ptx_fallbacks_load_and_compute_what_the_cpu_reference_does() {
    // Device::kernels loads a CUBIN where it can; the PTX attempts behind
    // it (for the device, then for compute_75, JIT-compiled by the driver)
    // must work too. (compute_70 is last: NVRTC 13 refuses it, as CUDA 13
    // dropped Volta, so it is not checked here.)
    let Some(dev) = device() else { return };
    let cc = dev.info().compute_capability;
    for arch in [cc, (7, 5)].into_iter().filter(|&a| a <= cc) {
        let k = dev.load_kernels(&[(arch, CodeKind::Ptx)]).unwrap();
        assert_eq!(k.code, CodeKind::Ptx);
        eprintln!(
            "PTX for compute_{}{}: {} bytes",
            arch.0, arch.1, k.image_len
        );
        kernels_equal_the_reference(&dev, &k);
    }
    assert!(dev.load_kernels(&[]).is_err());
}

#[test]
fn freeing_a_buffer_waits_for_copies_in_flight() {
    // DeviceComm drops buffers right after a call's last copy is queued;
    // cuMemFree must not let the memory be reused before that copy ran.
    let Some(dev) = device() else { return };
    let n = 256 << 20;
    let s = dev.stream().unwrap();
    let src = dev.alloc(n).unwrap();
    let dst = dev.alloc(n).unwrap();
    s.copy_from_host(&src, 0, &pattern(n, 9)).unwrap();
    s.synchronize().unwrap();
    for _ in 0..4 {
        s.copy_device(&dst, 0, &src, 0, n).unwrap();
    }
    drop(src);
    // Likely the freed memory: overwritten at once on another stream.
    let other = dev.stream().unwrap();
    let reuse = dev.alloc(n).unwrap();
    other.memset(&reuse, 0xee).unwrap();
    other.synchronize().unwrap();
    let mut back = vec![0u8; n];
    s.copy_to_host(&mut back, &dst, 0).unwrap();
    assert!(back == pattern(n, 9), "the copy read freed memory");
}

fn kernels_equal_the_reference(dev: &Device, k: &Kernels) {
    let s = dev.stream().unwrap();
    for count in [0usize, 1, 1000, 100_003] {
        for dtype in DType::ALL {
            let bytes = count * dtype.size();
            let a = reference::test_data(dtype, count, 11);
            let b = reference::test_data(dtype, count, 12);
            let (da, db, dd) = (
                dev.alloc(bytes).unwrap(),
                dev.alloc(bytes).unwrap(),
                dev.alloc(bytes).unwrap(),
            );
            s.copy_from_host(&da, 0, &a).unwrap();
            s.copy_from_host(&db, 0, &b).unwrap();
            for op in ReduceOp::ALL {
                let mut want = vec![0u8; bytes];
                reference::reduce(op, dtype, &mut want, &a, &b).unwrap();
                k.reduce(&s, op, dtype, &dd, &da, &db, count).unwrap();
                let mut got = vec![0u8; bytes];
                s.copy_to_host(&mut got, &dd, 0).unwrap();
                assert_eq!(got, want, "{} {dtype} x{count}", op.name());
                if op == ReduceOp::Avg {
                    for ranks in [2u64, 3, 8] {
                        let mut w = want.clone();
                        reference::divide(dtype, &mut w, ranks).unwrap();
                        s.copy_from_host(&dd, 0, &want).unwrap();
                        k.divide(&s, dtype, &dd, count, ranks).unwrap();
                        s.copy_to_host(&mut got, &dd, 0).unwrap();
                        assert_eq!(got, w, "avg {dtype} x{count} / {ranks}");
                    }
                }
            }
            // In place: a = a op b.
            if count > 0 {
                k.reduce(&s, ReduceOp::Sum, dtype, &da, &da, &db, count)
                    .unwrap();
                let mut want = vec![0u8; bytes];
                reference::reduce(ReduceOp::Sum, dtype, &mut want, &a, &b).unwrap();
                let mut got = vec![0u8; bytes];
                s.copy_to_host(&mut got, &da, 0).unwrap();
                assert_eq!(got, want, "in place sum {dtype}");
                assert!(
                    k.reduce(&s, ReduceOp::Sum, dtype, &dd, &da, &db, count + 1)
                        .is_err()
                );
            }
        }
    }
}

#[test]
fn slices_address_chunks_and_registered_regions_work() {
    let Some(dev) = device() else { return };
    let k = dev.kernels().unwrap();
    let s = dev.stream().unwrap();
    // Reduce the second half of `a` with the first half of `b` into the
    // middle of `d`, through slices.
    let n = 1000usize;
    let a = reference::test_data(DType::F32, 2 * n, 1);
    let b = reference::test_data(DType::F32, 2 * n, 2);
    let (da, db, dd) = (
        dev.alloc(8 * n).unwrap(),
        dev.alloc(8 * n).unwrap(),
        dev.alloc(12 * n).unwrap(),
    );
    s.copy_from_host(&da, 0, &a).unwrap();
    s.copy_from_host(&db, 0, &b).unwrap();
    let (sa, sb, sd) = (
        da.slice(4 * n..8 * n).unwrap(),
        db.slice(0..4 * n).unwrap(),
        dd.slice(4 * n..8 * n).unwrap(),
    );
    k.reduce(&s, ReduceOp::Max, DType::F32, &sd, &sa, &sb, n)
        .unwrap();
    let mut want = vec![0u8; 4 * n];
    reference::reduce(
        ReduceOp::Max,
        DType::F32,
        &mut want,
        &a[4 * n..],
        &b[..4 * n],
    )
    .unwrap();
    let mut got = vec![0u8; 12 * n];
    s.copy_to_host(&mut got, &dd, 0).unwrap();
    assert_eq!(got[4 * n..8 * n], want[..]);
    assert!(got[..4 * n].iter().chain(&got[8 * n..]).all(|&x| x == 0));
    assert!(da.slice(4..8 * n + 1).is_err());
    assert!(
        k.reduce(&s, ReduceOp::Max, DType::F32, &sd, &sa, &sb, n + 1)
            .is_err()
    );
    // A registered region (as the runtime's shared segments would be).
    let mut host = pattern(1 << 16, 6);
    // SAFETY: `host` outlives the guard, dropped below.
    let reg = unsafe { dev.register_raw(host.as_mut_ptr(), host.len()) }.unwrap();
    s.copy_from_host(&dd, 0, &host[..12 * n]).unwrap();
    drop(reg);
    s.copy_to_host(&mut got, &dd, 0).unwrap();
    assert_eq!(got, pattern(1 << 16, 6)[..12 * n]);
}

#[test]
fn host_staged_copy_equals_the_source() {
    let Some(dev) = device() else { return };
    for (n, chunk, slots) in [
        (10 << 20, 1 << 20, 2),
        ((3 << 20) + 7, 1 << 20, 1),
        (100, 4096, 3),
        (0, 64, 2),
    ] {
        let (a, b) = (dev.alloc(n).unwrap(), dev.alloc(n).unwrap());
        let s = dev.stream().unwrap();
        s.copy_from_host(&a, 0, &pattern(n, 8)).unwrap();
        let mut c = StagedCopier::new(&dev, &dev, n, chunk, slots).unwrap();
        c.copy(&a, &b).unwrap();
        c.copy(&a, &b).unwrap(); // reusable
        let mut back = vec![0u8; n];
        s.copy_to_host(&mut back, &b, 0).unwrap();
        assert_eq!(back, pattern(n, 8), "{n} {chunk} {slots}");
    }
}

const IPC_ENV: &str = "GPUCOMM_TEST_IPC_DESC";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The child half of `ipc_between_two_processes_sharing_one_gpu` (does
/// nothing when run on its own).
#[test]
fn ipc_child_role() {
    let Ok(desc) = std::env::var(IPC_ENV) else {
        return;
    };
    let desc = IpcBufferDesc::from_bytes(&unhex(&desc)).unwrap();
    let dev = Gpu::probe().unwrap().device(desc.device).unwrap();
    let buf = dev.open_ipc_memory(&desc.mem, desc.len as usize).unwrap();
    let ready = dev.open_ipc_event(desc.ready.as_ref().unwrap()).unwrap();
    let s = dev.stream().unwrap();
    s.wait_event(&ready).unwrap();
    let mut back = vec![0u8; buf.len()];
    s.copy_to_host(&mut back, &buf, 0).unwrap();
    assert_eq!(back, pattern(buf.len(), 77), "child sees the parent's data");
    // Answer by writing into the parent's buffer.
    s.copy_from_host(&buf, 0, &pattern(buf.len(), 99)).unwrap();
}

#[test]
fn ipc_between_two_processes_sharing_one_gpu() {
    let Some(dev) = device() else { return };
    let n = (2 << 20) + 5;
    let buf = dev.alloc(n).unwrap();
    let s = dev.stream().unwrap();
    s.copy_from_host(&buf, 0, &pattern(n, 77)).unwrap();
    let ready = dev.event(false, true).unwrap();
    ready.record(&s).unwrap();
    let desc = IpcBufferDesc {
        pid: std::process::id(),
        device: dev.ordinal(),
        len: n as u64,
        mem: buf.ipc_handle().unwrap(),
        ready: Some(ready.ipc_handle().unwrap()),
    };
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ipc_child_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(IPC_ENV, hex(&desc.to_bytes()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut back = vec![0u8; n];
    s.copy_to_host(&mut back, &buf, 0).unwrap();
    assert_eq!(back, pattern(n, 99), "parent sees the child's answer");
}

const RANK_ENV: &str = "GPUCOMM_TEST_RANK";
const NRANKS_ENV: &str = "GPUCOMM_TEST_NRANKS";
const DIR_ENV: &str = "GPUCOMM_TEST_DIR";
/// Element types of the multi-rank test (a float, a 16-bit float, an integer).
const RANK_TYPES: [DType; 3] = [DType::F32, DType::Bf16, DType::I32];
const RANK_COUNT: usize = 100_003;

/// Waits (bounded) until `path` exists.
fn wait_for(path: &std::path::Path) {
    let start = std::time::Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed().as_secs() < 60,
            "timed out waiting for {}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Writes `bytes` to `path` atomically (rename), so readers never see a part.
fn publish(path: &std::path::Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// One rank of `ipc_all_reduce_with_ranks_sharing_one_gpu` (does nothing
/// when run on its own): exports its input through CUDA IPC, maps every
/// peer's, folds all inputs in rank order with the reduce kernels, and
/// compares with the CPU reference, for every op and three types.
#[test]
fn ipc_rank_role() {
    let (Ok(rank), Ok(n), Ok(dir)) = (
        std::env::var(RANK_ENV),
        std::env::var(NRANKS_ENV),
        std::env::var(DIR_ENV),
    ) else {
        return;
    };
    let (rank, n, dir): (usize, usize, std::path::PathBuf) =
        (rank.parse().unwrap(), n.parse().unwrap(), dir.into());
    let dev = Gpu::probe().unwrap().device(0).unwrap();
    let k = dev.kernels().unwrap();
    let s = dev.stream().unwrap();
    // Each type's block starts 16-byte aligned, as kernels need (an i32
    // right after 100,003 bf16 would not be); the gaps stay zero.
    let offsets: Vec<usize> = RANK_TYPES
        .iter()
        .scan(0, |o, t| {
            let here = *o;
            *o = (*o + RANK_COUNT * t.size()).next_multiple_of(16);
            Some(here)
        })
        .collect();
    let total =
        offsets[RANK_TYPES.len() - 1] + RANK_COUNT * RANK_TYPES[RANK_TYPES.len() - 1].size();
    let inputs = |r: usize| -> Vec<u8> {
        let mut v = vec![0u8; total];
        for (&t, &o) in RANK_TYPES.iter().zip(&offsets) {
            let d = reference::test_data(t, RANK_COUNT, 100 + r as u64);
            v[o..o + d.len()].copy_from_slice(&d);
        }
        v
    };
    let mine = inputs(rank);
    let buf = dev.alloc(mine.len()).unwrap();
    s.copy_from_host(&buf, 0, &mine).unwrap();
    let ready = dev.event(false, true).unwrap();
    ready.record(&s).unwrap();
    let desc = IpcBufferDesc {
        pid: std::process::id(),
        device: 0,
        len: mine.len() as u64,
        mem: buf.ipc_handle().unwrap(),
        ready: Some(ready.ipc_handle().unwrap()),
    };
    publish(&dir.join(format!("desc.{rank}")), &desc.to_bytes());
    // Map every peer's buffer and wait for its data.
    let mut peers = Vec::new();
    for r in 0..n {
        if r == rank {
            continue;
        }
        let p = dir.join(format!("desc.{r}"));
        wait_for(&p);
        let d = IpcBufferDesc::from_bytes(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(d.len as usize, mine.len());
        let ev = dev.open_ipc_event(d.ready.as_ref().unwrap()).unwrap();
        s.wait_event(&ev).unwrap();
        peers.push((r, dev.open_ipc_memory(&d.mem, d.len as usize).unwrap()));
    }
    let out = dev.alloc(mine.len()).unwrap();
    for (ti, &dtype) in RANK_TYPES.iter().enumerate() {
        let bytes = RANK_COUNT * dtype.size();
        let range = offsets[ti]..offsets[ti] + bytes;
        // Every rank's input for this type, in rank order.
        let mut views = Vec::new();
        for r in 0..n {
            let v = if r == rank {
                buf.slice(range.clone()).unwrap()
            } else {
                peers
                    .iter()
                    .find(|(pr, _)| *pr == r)
                    .unwrap()
                    .1
                    .slice(range.clone())
                    .unwrap()
            };
            views.push(v);
        }
        let acc = out.slice(range.clone()).unwrap();
        for op in ReduceOp::ALL {
            k.reduce(&s, op, dtype, &acc, &views[0], &views[1], RANK_COUNT)
                .unwrap();
            for v in &views[2..] {
                k.reduce(&s, op, dtype, &acc, &acc, v, RANK_COUNT).unwrap();
            }
            if op == ReduceOp::Avg {
                k.divide(&s, dtype, &acc, RANK_COUNT, n as u64).unwrap();
            }
            let mut want = inputs(0)[range.clone()].to_vec();
            for r in 1..n {
                let prev = want.clone();
                reference::reduce(op, dtype, &mut want, &prev, &inputs(r)[range.clone()]).unwrap();
            }
            if op == ReduceOp::Avg {
                reference::divide(dtype, &mut want, n as u64).unwrap();
            }
            let mut got = vec![0u8; bytes];
            s.copy_to_host(&mut got, &acc, 0).unwrap();
            assert_eq!(got, want, "rank {rank}/{n}: {} {dtype}", op.name());
        }
    }
    // Keep our buffer alive until every peer is done reading it.
    publish(&dir.join(format!("done.{rank}")), b"ok");
    for r in 0..n {
        wait_for(&dir.join(format!("done.{r}")));
    }
}

#[test]
fn ipc_all_reduce_with_ranks_sharing_one_gpu() {
    let Some(dev) = device() else { return };
    drop(dev);
    for n in [2usize, 4] {
        let dir = std::env::temp_dir().join(format!("gpucomm-cuda-ipc-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut children: Vec<_> = (0..n)
            .map(|r| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--exact",
                        "ipc_rank_role",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(RANK_ENV, r.to_string())
                    .env(NRANKS_ENV, n.to_string())
                    .env(DIR_ENV, &dir)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let start = std::time::Instant::now();
        let mut failures = Vec::new();
        for (r, c) in children.iter_mut().enumerate() {
            let status = loop {
                if let Some(st) = c.try_wait().unwrap() {
                    break Some(st);
                }
                if start.elapsed().as_secs() > 120 {
                    let _ = c.kill();
                    let _ = c.wait();
                    break None;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            };
            if status.is_none_or(|st| !st.success()) {
                let mut err = String::new();
                if let Some(mut e) = c.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                failures.push(format!("rank {r} of {n}: {status:?}\n{err}"));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
