//! Deliberately broken schedules: the checker must reject each one with a
//! message that says what is wrong and where.

use gpucomm_algo::{
    Algorithm, Buf, CheckError, Collective, Problem, Schedule, Slice, Step, StepKind, check_steps,
    check_steps_in_place,
};

fn st(kind: StepKind, deps: &[u32]) -> Step {
    Step {
        kind,
        channel: 0,
        deps: deps.to_vec(),
    }
}
fn input(o: usize, l: usize) -> Slice {
    Slice::new(Buf::Input, o, l)
}
fn output(o: usize, l: usize) -> Slice {
    Slice::new(Buf::Output, o, l)
}
fn send(peer: usize, src: Slice) -> StepKind {
    StepKind::Send { peer, src }
}
fn recv(peer: usize, dst: Slice) -> StepKind {
    StepKind::Recv { peer, dst }
}
fn recv_reduce(peer: usize, src: Slice, dst: Slice) -> StepKind {
    StepKind::RecvReduce { peer, src, dst }
}

fn ar2() -> Problem {
    Problem::new(Collective::AllReduce, 2, 2, 2)
}

/// A correct 2-rank all_reduce: exchange and reduce.
fn exchange() -> Vec<Vec<Step>> {
    (0..2)
        .map(|r| {
            let peer = 1 - r;
            vec![
                st(send(peer, input(0, 2)), &[]),
                st(recv_reduce(peer, input(0, 2), output(0, 2)), &[]),
            ]
        })
        .collect()
}

fn err(p: &Problem, steps: &[Vec<Step>]) -> (CheckError, String) {
    let e = check_steps(p, steps, &vec![0; p.nranks]).expect_err("the checker must reject this");
    let m = e.to_string();
    (e, m)
}

#[test]
fn the_correct_exchange_passes() {
    let r = check_steps(&ar2(), &exchange(), &[0, 0]).unwrap();
    assert_eq!(r.critical_path, 1);
    assert_eq!(r.ranks[0].bytes_sent, 8);
    assert_eq!(r.ranks[1].bytes_recv, 8);
}

#[test]
fn missing_step_leaves_a_send_unmatched() {
    let mut s = exchange();
    s[1].pop();
    let (e, m) = err(&ar2(), &s);
    assert!(
        matches!(
            e,
            CheckError::UnmatchedSend {
                rank: 0,
                step: 0,
                peer: 1,
                ..
            }
        ),
        "{m}"
    );
    assert!(
        m.contains("rank 0 step 0: send to rank 1") && m.contains("no matching receive"),
        "{m}"
    );
}

#[test]
fn missing_contribution() {
    let mut s = exchange();
    s[0][1] = st(recv(1, output(0, 2)), &[]);
    let (e, m) = err(&ar2(), &s);
    assert!(matches!(e, CheckError::WrongResult { rank: 0, .. }), "{m}");
    assert!(
        m.contains("rank 0: output[0]") && m.contains("missing {0}"),
        "{m}"
    );
}

#[test]
fn double_counted_contribution() {
    let mut s = exchange();
    s[0].push(st(
        StepKind::Reduce {
            src: input(0, 2),
            dst: output(0, 2),
        },
        &[1],
    ));
    let (e, m) = err(&ar2(), &s);
    assert!(
        matches!(
            e,
            CheckError::BadData {
                rank: 0,
                step: 2,
                ..
            }
        ),
        "{m}"
    );
    assert!(
        m.contains("rank 0 step 2") && m.contains("rank(s) {0} twice"),
        "{m}"
    );
}

#[test]
fn size_mismatch() {
    let mut s = exchange();
    s[1][0] = st(send(0, input(0, 1)), &[]);
    let (e, m) = err(&ar2(), &s);
    assert!(
        matches!(
            e,
            CheckError::SizeMismatch {
                from: 1,
                send: 0,
                to: 0,
                recv: 1,
                ..
            }
        ),
        "{m}"
    );
    assert!(
        m.contains("rank 1 step 0 sends 1 elements to rank 0") && m.contains("takes 2"),
        "{m}"
    );
}

#[test]
fn unmatched_receive() {
    let mut s = exchange();
    s[0].push(Step {
        kind: recv(1, output(0, 1)),
        channel: 3,
        deps: vec![1],
    });
    let (e, m) = err(&ar2(), &s);
    assert!(
        matches!(
            e,
            CheckError::UnmatchedRecv {
                rank: 0,
                step: 2,
                peer: 1,
                channel: 3,
                ..
            }
        ),
        "{m}"
    );
    assert!(
        m.contains("rank 0 step 2: receive from rank 1 on channel 3"),
        "{m}"
    );
}

#[test]
fn deadlock_cycle() {
    // Both ranks receive first and send only after: a rendezvous deadlock.
    let s: Vec<Vec<Step>> = (0..2)
        .map(|r| {
            let peer = 1 - r;
            vec![
                st(recv_reduce(peer, input(0, 2), output(0, 2)), &[]),
                st(send(peer, input(0, 2)), &[0]),
            ]
        })
        .collect();
    let (e, m) = err(&ar2(), &s);
    assert!(
        matches!(
            e,
            CheckError::Deadlock {
                rank: 0,
                step: 0,
                ..
            }
        ),
        "{m}"
    );
    assert!(m.contains("rank 0 step 0 (recv_reduce from 1"), "{m}");
    assert!(m.contains("rank 1 step 1 (send to 0"), "{m}");
    assert!(m.contains("(a cycle)"), "{m}");
}

#[test]
fn deadlock_through_connection_order() {
    // Rank 0 sends a then b; rank 1 receives b's data first on the same
    // connection only after a dependency on its own send that waits on rank 0.
    let p = Problem::new(Collective::SendRecv { shift: 1 }, 2, 2, 2);
    let s = vec![
        vec![
            st(send(1, input(0, 1)), &[]),
            st(send(1, input(1, 1)), &[]),
            st(recv(1, output(0, 2)), &[]),
        ],
        vec![
            st(send(0, input(0, 2)), &[]),
            st(recv(0, output(0, 1)), &[0]),
            st(recv(0, output(1, 1)), &[]),
        ],
    ];
    // Rank 1's send waits for rank 0's receive, which is independent: this one
    // is fine. Now make rank 0's receive depend on its second send.
    assert!(check_steps(&p, &s, &[0, 0]).is_ok());
    let mut bad = s.clone();
    bad[0][2].deps = vec![1];
    let (e, m) = err(&p, &bad);
    assert!(matches!(e, CheckError::Deadlock { .. }), "{m}");
    assert!(m.contains("an earlier transfer on its connection"), "{m}");
}

#[test]
fn out_of_bounds_slice() {
    let mut s = exchange();
    s[1][0] = st(send(0, input(1, 2)), &[]);
    let (e, m) = err(&ar2(), &s);
    assert!(
        matches!(
            e,
            CheckError::InvalidStep {
                rank: 1,
                step: 0,
                ..
            }
        ),
        "{m}"
    );
    assert!(
        m.contains("rank 1 step 0: slice input[1..3] out of bounds (input has 2 elements)"),
        "{m}"
    );
}

#[test]
fn bad_dependency() {
    let mut s = exchange();
    s[1][1].deps = vec![1];
    let (e, m) = err(&ar2(), &s);
    assert!(
        matches!(
            e,
            CheckError::InvalidStep {
                rank: 1,
                step: 1,
                ..
            }
        ),
        "{m}"
    );
    assert!(
        m.contains("rank 1 step 1: depends on step 1, which is not an earlier step"),
        "{m}"
    );
}

#[test]
fn bad_peer_and_self_send() {
    let mut s = exchange();
    s[0][0] = st(send(5, input(0, 2)), &[]);
    let (_, m) = err(&ar2(), &s);
    assert!(m.contains("rank 0 step 0: peer 5 out of range"), "{m}");
    let mut s = exchange();
    s[0][0] = st(send(0, input(0, 2)), &[]);
    let (_, m) = err(&ar2(), &s);
    assert!(m.contains("rank 0 step 0: communicates with itself"), "{m}");
}

#[test]
fn writing_the_input() {
    let mut s = exchange();
    s[0].push(st(
        StepKind::Copy {
            src: output(0, 2),
            dst: input(0, 2),
        },
        &[1],
    ));
    let (_, m) = err(&ar2(), &s);
    assert!(
        m.contains("rank 0 step 2: writes input[0..2] (the input is read only)"),
        "{m}"
    );
}

#[test]
fn race_between_unordered_steps() {
    // Rank 0 copies its input into the output while receiving into it.
    let mut s = exchange();
    s[0] = vec![
        st(send(1, input(0, 2)), &[]),
        st(
            StepKind::Copy {
                src: input(0, 2),
                dst: output(0, 2),
            },
            &[],
        ),
        st(
            StepKind::RecvReduce {
                peer: 1,
                src: output(0, 2),
                dst: output(0, 2),
            },
            &[],
        ),
    ];
    let (e, m) = err(&ar2(), &s);
    assert!(
        matches!(
            e,
            CheckError::Race {
                rank: 0,
                first: 1,
                second: 2,
                ..
            }
        ),
        "{m}"
    );
    assert!(
        m.contains("rank 0: steps 1 and 2 race") && m.contains("output[0..2]"),
        "{m}"
    );
    s[0][2].deps = vec![1];
    check_steps(&ar2(), &s, &[0, 0]).unwrap();
}

#[test]
fn reading_undefined_data() {
    let mut s = exchange();
    s[0][0] = st(send(1, output(0, 2)), &[]);
    s[0][1].deps = vec![0];
    let (e, m) = err(&ar2(), &s);
    assert!(
        matches!(
            e,
            CheckError::BadData {
                rank: 0,
                step: 0,
                ..
            }
        ),
        "{m}"
    );
    assert!(
        m.contains("rank 0 step 0: sends output[0..2] but element 0 of it holds no data"),
        "{m}"
    );
}

#[test]
fn mixing_different_elements() {
    let p = Problem::new(Collective::AllReduce, 2, 2, 2);
    let mut s = exchange();
    s[1][0] = st(send(0, input(0, 1)), &[]);
    s[1].push(st(send(0, input(0, 1)), &[]));
    s[0][1] = st(recv_reduce(1, input(0, 1), output(0, 1)), &[]);
    s[0].push(st(recv_reduce(1, input(1, 1), output(1, 1)), &[]));
    let (e, m) = err(&p, &s);
    assert!(
        matches!(
            e,
            CheckError::BadData {
                rank: 0,
                step: 2,
                ..
            }
        ),
        "{m}"
    );
    assert!(m.contains("combines element 1 with element 0"), "{m}");
}

#[test]
fn barrier_without_hearing_from_everyone() {
    let p = Problem::new(Collective::Barrier, 0, 3, 3);
    let tok_in = input(0, 0);
    let tok_out = output(0, 0);
    // A chain 0 -> 1 -> 2: rank 2 hears from everyone, rank 0 from nobody.
    let s = vec![
        vec![st(send(1, tok_in), &[])],
        vec![st(recv(0, tok_out), &[]), st(send(2, tok_in), &[0])],
        vec![st(recv(1, tok_out), &[])],
    ];
    let (e, m) = err(&p, &s);
    assert!(matches!(e, CheckError::WrongResult { rank: 0, .. }), "{m}");
    assert!(
        m.contains("rank 0: barrier: completes without hearing from {1, 2}"),
        "{m}"
    );
    // Without the dependency, rank 2 no longer hears from rank 0 through 1.
    let mut s2 = s.clone();
    s2[1][1].deps.clear();
    s2[0].push(st(recv(2, tok_out), &[]));
    s2[2].push(st(send(0, tok_in), &[0]));
    let (_, m) = err(&p, &s2);
    assert!(
        m.contains("rank 1: barrier: completes without hearing from {2}"),
        "{m}"
    );
}

#[test]
fn in_place_hazard_is_caught() {
    // Direct all_to_all overwrites blocks a later send still reads when input
    // and output alias: it is declared not in-place safe, and the aliased
    // check proves that declaration necessary.
    let p = Problem::new(Collective::AllToAll, 2, 3, 3);
    let s = Schedule::new(p, Algorithm::Direct).unwrap();
    assert!(!s.in_place_safe());
    let steps: Vec<Vec<Step>> = (0..3).map(|r| s.rank_steps(r)).collect();
    check_steps(&p, &steps, &[0, 0, 0]).unwrap();
    let e = check_steps_in_place(&p, &steps, &[0, 0, 0]).unwrap_err();
    assert!(
        matches!(
            e,
            CheckError::Race { .. } | CheckError::WrongResult { .. } | CheckError::BadData { .. }
        ),
        "{e}"
    );
}

#[test]
fn wrong_number_of_ranks() {
    let (e, m) = err(&Problem::new(Collective::AllReduce, 2, 3, 3), &exchange());
    assert!(matches!(e, CheckError::Shape(_)), "{m}");
}

#[test]
fn hand_made_schedule_fields_are_validated() {
    let mut s = Schedule::new(
        Problem::new(Collective::AllToAll, 2, 3, 3),
        Algorithm::Direct,
    )
    .unwrap();
    s.algorithm = Algorithm::Ring;
    let e = gpucomm_algo::check(&s).unwrap_err().to_string();
    assert!(e.contains("ring does not implement all_to_all"), "{e}");
    s.algorithm = Algorithm::Direct;
    s.channels = 0;
    assert!(gpucomm_algo::check(&s).is_err());
    assert!(
        gpucomm_algo::execute(
            &s,
            gpucomm_algo::ReduceOp::Sum,
            &[vec![0.0; 6], vec![0.0; 6], vec![0.0; 6]]
        )
        .is_err()
    );
}
