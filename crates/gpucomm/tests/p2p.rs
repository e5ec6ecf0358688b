//! Point-to-point calls between in-process ranks, and the failure paths.

use std::time::{Duration, Instant};

use gpucomm::{Communicator, Failure, InProcessOptions};

fn pair(timeout_ms: u64) -> Vec<Communicator> {
    Communicator::in_process_with(
        2,
        &InProcessOptions {
            timeout: Some(Duration::from_millis(timeout_ms)),
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn send_recv_many_sizes() {
    let comms = pair(10_000);
    let sizes = [0usize, 1, 7, 4096, 16 * 1024 + 3, 70_000, 1 << 20];
    std::thread::scope(|s| {
        let (a, b) = (&comms[0], &comms[1]);
        s.spawn(move || {
            for &n in &sizes {
                let v: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2654435761)).collect();
                a.send(&v, 1).unwrap();
            }
        });
        s.spawn(move || {
            for &n in &sizes {
                let mut v = vec![0u32; n];
                b.recv(&mut v, 0).unwrap();
                for (i, x) in v.iter().enumerate() {
                    assert_eq!(*x, (i as u32).wrapping_mul(2654435761), "n={n} i={i}");
                }
            }
        });
    });
}

#[test]
fn length_mismatch_is_an_error_naming_the_peer() {
    let comms = pair(2_000);
    std::thread::scope(|s| {
        let (a, b) = (&comms[0], &comms[1]);
        s.spawn(move || {
            let _ = a.send(&[1u8; 10], 1);
        });
        let h = s.spawn(move || {
            let mut v = [0u8; 11];
            b.recv(&mut v, 0)
        });
        let e = h.join().unwrap().unwrap_err();
        let ctx = e.context().unwrap();
        assert_eq!(ctx.op, "recv");
        assert_eq!(ctx.peer, Some(0));
        assert!(matches!(e.failure(), Some(Failure::Mismatch { .. })), "{e}");
    });
}

#[test]
fn recv_without_sender_times_out() {
    let comms = pair(300);
    let t = Instant::now();
    let mut v = [0f32; 4];
    let e = comms[1].recv(&mut v, 0).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(matches!(e.failure(), Some(Failure::Timeout(_))), "{e}");
    assert!(e.to_string().contains("recv #0"), "{e}");
    assert!(e.to_string().contains("peer 0"), "{e}");
    // Poisoned afterwards.
    assert!(matches!(
        comms[1].recv(&mut v, 0),
        Err(gpucomm::Error::Broken(_))
    ));
}

#[test]
fn abort_from_another_thread_ends_a_wait() {
    let comms = pair(60_000);
    let h = comms[1].abort_handle();
    let t = Instant::now();
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            h.abort();
        });
        let mut v = [0f32; 4];
        let e = comms[1].recv(&mut v, 0).unwrap_err();
        assert!(matches!(e.failure(), Some(Failure::Aborted(_))), "{e}");
        // The error names the operation, its sequence number, the peer and the transport.
        let ctx = e.context().unwrap();
        assert_eq!((ctx.op, ctx.seq, ctx.peer), ("recv", 0, Some(0)));
        assert_eq!(ctx.transport, Some(gpucomm::TransportKind::InProcess));
    });
    assert!(t.elapsed() < Duration::from_secs(5));
    // The peer sees the abort too.
    let mut v = [0f32; 4];
    let e = comms[0].recv(&mut v, 1).unwrap_err();
    assert!(matches!(e.failure(), Some(Failure::Aborted(_))), "{e}");
}

#[test]
fn injected_link_failure_ends_in_errors_on_both_sides() {
    let comms = Communicator::in_process_with(
        2,
        &InProcessOptions {
            timeout: Some(Duration::from_secs(20)),
            faults: vec![(0, 1, gpucomm::Fault::BreakAfterSends(3))],
            ..Default::default()
        },
    )
    .unwrap();
    let t = Instant::now();
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let mut v = vec![1f32; 100];
                    for _ in 0..10 {
                        c.all_reduce_in_place(&mut v, gpucomm::ReduceOp::Sum)?;
                    }
                    Ok::<_, gpucomm::Error>(())
                })
            })
            .collect();
        let r: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let e0 = r[0].as_ref().unwrap_err();
        assert!(matches!(e0.failure(), Some(Failure::PeerGone(_))), "{e0}");
        let e1 = r[1].as_ref().unwrap_err();
        assert!(e1.context().is_some(), "{e1}");
    });
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn exchange_both_ways_at_once() {
    // Each rank sends 16 MiB and then receives: they wait for each other
    // until the timeout. Exchanging, they do not, with sizes that differ
    // by direction.
    let comms = pair(2_000);
    let big = 4 << 20;
    let sizes = |r: usize| if r == 0 { (big, 3) } else { (3, big) };
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let r = c.rank();
                    let (out, inn) = sizes(r);
                    let mine: Vec<u32> = (0..out as u32).map(|i| i ^ r as u32).collect();
                    let mut theirs = vec![0u32; inn];
                    c.exchange(&mine, 1 - r, &mut theirs, 1 - r)
                        .map_err(|e| e.to_string())?;
                    let ok = theirs
                        .iter()
                        .enumerate()
                        .all(|(i, &x)| x == i as u32 ^ (1 - r) as u32);
                    ok.then_some(()).ok_or(format!("rank {r}: wrong data"))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // The same with send then recv on both sides: a timeout, not a hang.
    let comms = pair(300);
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let other = 1 - c.rank();
                    c.send(&vec![1u8; 16 << 20], other)?;
                    c.recv(&mut vec![0u8; 16 << 20], other)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().all(Result::is_err), "{results:?}");
}

#[test]
fn exchange_halves_match_sends_and_receives() {
    // Three ranks in a ring, each speaking differently: rank 0 exchanges,
    // rank 1 receives then sends, rank 2 sends then receives.
    let comms = Communicator::in_process_with(
        3,
        &InProcessOptions {
            timeout: Some(Duration::from_secs(10)),
            ..Default::default()
        },
    )
    .unwrap();
    let results: Vec<Result<u64, gpucomm::Error>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let r = c.rank();
                    let (next, prev) = ((r + 1) % 3, (r + 2) % 3);
                    let mine = vec![r as u64 + 1; 300_000];
                    let mut got = vec![0u64; 300_000];
                    match r {
                        0 => c.exchange(&mine, next, &mut got, prev)?,
                        1 => {
                            c.recv(&mut got, prev)?;
                            c.send(&mine, next)?;
                        }
                        _ => {
                            c.send(&mine, next)?;
                            c.recv(&mut got, prev)?;
                        }
                    }
                    Ok(got.iter().sum())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let sums: Vec<u64> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(sums, vec![3 * 300_000, 300_000, 2 * 300_000]);
}

#[test]
fn exchange_errors() {
    let comms = pair(2_000);
    let c = &comms[0];
    let mut v = [0u8; 4];
    for (to, from) in [(0, 1), (1, 0), (2, 1), (1, 5)] {
        let e = c.exchange(&[1u8; 4], to, &mut v, from).unwrap_err();
        assert!(
            matches!(e, gpucomm::Error::InvalidArgument(_)) && e.to_string().contains("invalid"),
            "{e}"
        );
    }
    // A half whose length the peer does not expect: a mismatch naming the peer.
    let comms = pair(2_000);
    std::thread::scope(|s| {
        let (a, b) = (&comms[0], &comms[1]);
        s.spawn(move || {
            let _ = a.exchange(&[1u8; 10], 1, &mut [0u8; 10], 1);
        });
        let h = s.spawn(move || {
            let mut v = [0u8; 11];
            b.recv(&mut v, 0)
        });
        let e = h.join().unwrap().unwrap_err();
        assert_eq!(e.context().unwrap().peer, Some(0));
        assert!(matches!(e.failure(), Some(Failure::Mismatch { .. })), "{e}");
    });
}

/// Rank 0's zero-copy send (in process: a reference to its buffer) times
/// out; rank 0 then writes over the buffer and frees it. Rank 1's later
/// receive must fail, not read the buffer through the reference its ring
/// still held (it returned Ok with the new contents, or faulted on the
/// freed memory).
#[test]
fn a_failed_zero_copy_send_is_withdrawn() {
    let comms = pair(5_000);
    comms[0].set_timeout(Duration::from_millis(50));
    let n = 1 << 20; // 4 MiB: zero copy, and freed by unmapping
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (a, b) = (&comms[0], &comms[1]);
        s.spawn(move || {
            let mut v = vec![1u32; n];
            assert!(a.send(&v, 1).is_err(), "rank 1 was not there yet");
            v.fill(0xdead_beef);
            drop(v);
            tx.send(()).unwrap();
        });
        s.spawn(move || {
            rx.recv().unwrap();
            let mut v = vec![0u32; n];
            let r = b.recv(&mut v, 0);
            assert!(r.is_err(), "read a withdrawn send: v[0] = {:#x}", v[0]);
            assert!(v.iter().all(|&x| x == 0), "v[0] = {:#x}", v[0]);
        });
    });
}
