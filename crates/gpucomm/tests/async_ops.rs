//! Non-blocking calls, per-call options, memory spaces, and a hammer test of
//! the lock-free rings.

use std::time::{Duration, Instant};

use gpucomm::{
    Buffer, Call, CallOptions, Communicator, Error, Failure, InProcessOptions, MemorySpace,
    ReduceOp,
};

fn comms(n: usize, timeout_ms: u64) -> Vec<Communicator> {
    Communicator::in_process_with(
        n,
        &InProcessOptions {
            timeout: Some(Duration::from_millis(timeout_ms)),
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn several_in_flight_complete_in_issue_order() {
    let cs = comms(3, 20_000);
    std::thread::scope(|s| {
        for c in &cs {
            s.spawn(move || {
                let r = c.rank() as i64;
                // Issue 8 operations of different kinds without waiting.
                let mut reqs = Vec::new();
                for k in 0..8i64 {
                    let buf = Buffer::from_vec(vec![r + k; 1000 + k as usize]);
                    let call = if k % 2 == 0 {
                        Call::AllReduce(ReduceOp::Sum)
                    } else {
                        Call::Broadcast {
                            root: (k as usize) % 3,
                        }
                    };
                    reqs.push((
                        k,
                        call,
                        c.start(call, None, buf, CallOptions::default()).unwrap(),
                    ));
                }
                // A blocking call issued after them runs after them.
                let mut v = vec![1i64; 10];
                c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
                assert_eq!(v, vec![3; 10]);
                // Everything issued earlier is complete now.
                for (_, _, q) in &reqs {
                    assert!(q.test());
                }
                for (k, call, q) in reqs {
                    let out = q.wait().unwrap();
                    let want = match call {
                        Call::AllReduce(_) => 3 * k + 3,
                        _ => (k as usize % 3) as i64 + k,
                    };
                    assert!(out.iter().all(|&x| x == want), "k={k}");
                }
            });
        }
    });
}

#[test]
fn overlap_compute_with_communication() {
    let cs = comms(2, 20_000);
    std::thread::scope(|s| {
        for c in &cs {
            s.spawn(move || {
                let mut buf = c.alloc::<f32>(1 << 18).unwrap();
                buf.fill(1.0);
                let req = c.all_reduce_async(buf, ReduceOp::Sum).unwrap();
                // Compute while it runs.
                let mut acc = 0u64;
                for i in 0..1_000_000u64 {
                    acc = acc.wrapping_add(i * i);
                }
                std::hint::black_box(acc);
                let buf = req.wait().unwrap();
                assert!(buf.iter().all(|&x| x == 2.0));
            });
        }
    });
}

#[test]
fn per_call_timeout_overrides_the_communicators() {
    let cs = comms(2, 60_000);
    let t = Instant::now();
    let mut v = [0u8; 8];
    let e = cs[0]
        .run(
            Call::AllReduce(ReduceOp::Max),
            None,
            &mut v,
            &CallOptions {
                timeout: Some(Duration::from_millis(200)),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(e.failure(), Some(Failure::Timeout(_))), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(e.context().unwrap().op, "all_reduce");
}

#[test]
fn async_error_is_reported_by_wait() {
    let cs = comms(2, 200);
    let req = cs[0]
        .start(
            Call::AllReduce(ReduceOp::Sum),
            None,
            Buffer::from_vec(vec![1f64; 4]),
            CallOptions::default(),
        )
        .unwrap();
    let e = req.wait().unwrap_err();
    assert!(matches!(e.failure(), Some(Failure::Timeout(_))), "{e}");
}

#[test]
fn device_memory_is_refused_clearly() {
    let cs = comms(2, 1000);
    let e = cs[0]
        .alloc_in::<f32>(16, MemorySpace::Device(0))
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("device"));
    let b = cs[0].alloc::<f32>(16).unwrap();
    assert!(b.is_shared());
    assert_eq!(b.space(), MemorySpace::HostPageable);
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let cs = comms(3, 1000);
    let c = &cs[0];
    let mut out = vec![0f32; 4];
    assert!(matches!(
        c.all_reduce(&[1.0f32; 3], &mut out, ReduceOp::Sum),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        c.broadcast_in_place(&mut out, 3),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(c.send(&out, 0), Err(Error::InvalidArgument(_))));
    assert!(matches!(c.send(&out, 9), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        c.all_to_all(&[0f32; 4], &mut out),
        Err(Error::InvalidArgument(_))
    ));
    let mut rs = vec![0f32; 5];
    assert!(matches!(
        c.reduce_scatter(&[0f32; 9], &mut rs, ReduceOp::Sum),
        Err(Error::InvalidArgument(_))
    ));
    // Still usable: argument errors do not poison.
    assert!(c.timeout() > Duration::ZERO);
}

/// A size past the address space is an error: `alloc::<u64>(1 << 61)`
/// wrapped in release builds to a 4 KiB segment the buffer claimed 2^61
/// elements of (a write past the page was a SIGSEGV from safe code).
#[test]
fn an_allocation_too_large_to_address_is_an_error() {
    let cs = comms(1, 1000);
    for r in [
        cs[0].alloc::<u64>(1 << 61).map(|b| b.len()),
        cs[0].alloc::<f32>(usize::MAX / 2).map(|b| b.len()),
        cs[0].alloc::<u8>(usize::MAX).map(|b| b.len()),
    ] {
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    }
    assert_eq!(cs[0].alloc::<u64>(3).unwrap().len(), 3);
}

/// A timeout too long for the clock (`Duration::MAX`, "no timeout") works
/// as a very long one: it panicked adding to `Instant::now()` with the
/// state lock held (every later call then panicked on the poisoned lock),
/// and `set_timeout` of 2^61 s wrapped to 0 ms (every call timed out).
#[test]
fn timeouts_too_long_for_the_clock_work() {
    let cs = Communicator::in_process_with(
        2,
        &InProcessOptions {
            timeout: Some(Duration::MAX),
            ..Default::default()
        },
    )
    .unwrap();
    cs[1].set_timeout(Duration::from_secs(1 << 61));
    assert!(cs[1].timeout() > Duration::from_secs(1 << 40));
    std::thread::scope(|s| {
        for (r, c) in cs.iter().enumerate() {
            s.spawn(move || {
                let opts = CallOptions {
                    timeout: Some(Duration::MAX),
                    ..Default::default()
                };
                let mut out = [0f32; 4];
                c.run(
                    Call::AllReduce(ReduceOp::Sum),
                    Some(&[r as f32 + 1.0; 4][..]),
                    &mut out,
                    &opts,
                )
                .unwrap();
                assert_eq!(out, [3.0; 4]);
                // And with the communicator's own (huge) timeout.
                c.all_reduce_in_place(&mut out, ReduceOp::Sum).unwrap();
                assert_eq!(out, [6.0; 4]);
            });
        }
    });
}

/// Many iterations of mixed sizes in both directions at once, from several
/// pairs concurrently: the SPSC rings, zero-copy completion and doorbells.
#[test]
fn ring_hammer() {
    let n = 4;
    let cs = comms(n, 30_000);
    std::thread::scope(|s| {
        for c in &cs {
            s.spawn(move || {
                let me = c.rank();
                let sizes = [0usize, 1, 3, 1000, 16_385, 70_001];
                for it in 0..300usize {
                    let len = sizes[it % sizes.len()];
                    let send: Vec<u32> = (0..len)
                        .map(|i| (it * 1_000_003 + me * 7919 + i) as u32)
                        .collect();
                    let mut recv = vec![0u32; len];
                    let shift = 1 + it % (n - 1);
                    c.sendrecv(&send, &mut recv, shift).unwrap();
                    let from = (me + n - shift) % n;
                    for (i, x) in recv.iter().enumerate() {
                        assert_eq!(*x, (it * 1_000_003 + from * 7919 + i) as u32);
                    }
                }
            });
        }
    });
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Communicator>();
    check::<gpucomm::AbortHandle>();
    check::<gpucomm::Request<f32>>();
    check::<Buffer<gpucomm::f16>>();
    check::<Error>();
}
