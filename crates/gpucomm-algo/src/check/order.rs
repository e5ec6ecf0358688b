//! Structure, matching and a deadlock-free execution order.
//!
//! The execution model (shared by every engine): a step may run once its
//! dependencies have completed; local steps complete at once; the k-th send
//! from `a` to `b` on channel `c` and the k-th receive by `b` from `a` on `c`
//! form one transfer, which happens when both steps may run and the
//! transfer before it on the same `(a, b, c)` connection has happened
//! (rendezvous, in order per connection). Executing a transfer never disables
//! another, so running everything that can run until nothing can is a
//! decision procedure: the schedule deadlocks exactly when steps remain.

use std::collections::{HashMap, VecDeque};

use super::CheckError;
use crate::{Buf, Problem, Slice, Step, StepKind};

/// One event of a sequential execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A local step (`Copy` or `Reduce`) of `rank`.
    Local { rank: usize, step: usize },
    /// A matched send and receive.
    Transfer {
        from: usize,
        send: usize,
        to: usize,
        recv: usize,
    },
}

/// A valid execution order, and the communication level of every step (the
/// number of transfers on the longest chain of dependencies, message edges
/// and connection order ending at the step).
pub(crate) struct Order {
    pub events: Vec<Event>,
    pub level: Vec<Vec<u32>>,
}

fn describe(steps: &[Vec<Step>], rank: usize, i: usize) -> String {
    let s = &steps[rank][i];
    let what = match s.kind {
        StepKind::Send { peer, .. } => format!("send to {peer}"),
        StepKind::Recv { peer, .. } => format!("recv from {peer}"),
        StepKind::RecvReduce { peer, .. } => format!("recv_reduce from {peer}"),
        StepKind::Copy { .. } => "copy".to_string(),
        StepKind::Reduce { .. } => "reduce".to_string(),
    };
    format!("rank {rank} step {i} ({what}, channel {})", s.channel)
}

fn buf_name(b: Buf) -> &'static str {
    match b {
        Buf::Input => "input",
        Buf::Output => "output",
        Buf::Scratch => "scratch",
    }
}

/// `output[3..5]`.
pub(crate) fn show_slice(s: &Slice) -> String {
    format!("{}[{}..{}]", buf_name(s.buf), s.offset, s.end())
}

/// Checks ranks, dependencies, peers and slice bounds.
pub(crate) fn validate(
    p: &Problem,
    steps: &[Vec<Step>],
    scratch_len: &[usize],
) -> Result<(), CheckError> {
    let n = p.nranks;
    if steps.len() != n || scratch_len.len() != n {
        return Err(CheckError::Shape(format!(
            "{} ranks in the problem but {} step lists and {} scratch lengths",
            n,
            steps.len(),
            scratch_len.len()
        )));
    }
    for (rank, list) in steps.iter().enumerate() {
        validate_rank(p, rank, list, scratch_len[rank])?;
    }
    Ok(())
}

/// Checks one rank's dependencies, peers and slice bounds.
pub(crate) fn validate_rank(
    p: &Problem,
    rank: usize,
    list: &[Step],
    scratch_len: usize,
) -> Result<(), CheckError> {
    let n = p.nranks;
    {
        if list.len() > u32::MAX as usize {
            return Err(CheckError::Shape(format!("rank {rank} has too many steps")));
        }
        for (i, st) in list.iter().enumerate() {
            let bad = |what: String| CheckError::InvalidStep {
                rank,
                step: i,
                what,
            };
            for &d in &st.deps {
                if d as usize >= i {
                    return Err(bad(format!(
                        "depends on step {d}, which is not an earlier step"
                    )));
                }
            }
            if let Some(peer) = st.kind.peer() {
                if peer >= n {
                    return Err(bad(format!("peer {peer} out of range ({n} ranks)")));
                }
                if peer == rank {
                    return Err(bad("communicates with itself".into()));
                }
            }
            let (reads, write): (Vec<Slice>, Option<Slice>) = match st.kind {
                StepKind::Send { src, .. } => (vec![src], None),
                StepKind::Recv { dst, .. } => (vec![], Some(dst)),
                StepKind::RecvReduce { src, dst, .. }
                | StepKind::Copy { src, dst }
                | StepKind::Reduce { src, dst } => (vec![src], Some(dst)),
            };
            for s in reads.iter().chain(write.iter()) {
                let len = match s.buf {
                    Buf::Input => p.input_len(rank),
                    Buf::Output => p.output_len(rank),
                    Buf::Scratch => scratch_len,
                };
                if s.offset.checked_add(s.len).is_none_or(|e| e > len) {
                    return Err(bad(format!(
                        "slice {} out of bounds ({} has {len} elements)",
                        show_slice(s),
                        buf_name(s.buf)
                    )));
                }
            }
            if let Some(w) = write {
                if w.buf == Buf::Input {
                    return Err(bad(format!(
                        "writes {} (the input is read only)",
                        show_slice(&w)
                    )));
                }
                if let Some(r) = reads.first() {
                    if r.len != w.len {
                        return Err(bad(format!(
                            "source {} and destination {} differ in length",
                            show_slice(r),
                            show_slice(&w)
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

const NONE: u32 = u32::MAX;

/// Pairs sends with receives and finds an execution order, or the deadlock.
pub(crate) fn order(steps: &[Vec<Step>]) -> Result<Order, CheckError> {
    let n = steps.len();
    // Matching: FIFO per (sender, receiver, channel).
    type Conn = (Vec<usize>, Vec<usize>);
    let mut conns: HashMap<(usize, usize, u16), Conn> = HashMap::new();
    for (rank, list) in steps.iter().enumerate() {
        for (i, st) in list.iter().enumerate() {
            match st.kind {
                StepKind::Send { peer, .. } => {
                    conns.entry((rank, peer, st.channel)).or_default().0.push(i)
                }
                StepKind::Recv { peer, .. } | StepKind::RecvReduce { peer, .. } => {
                    conns.entry((peer, rank, st.channel)).or_default().1.push(i)
                }
                _ => {}
            }
        }
    }
    let mut keys: Vec<_> = conns.keys().copied().collect();
    keys.sort_unstable();
    let mut partner: Vec<Vec<(u32, u32)>> =
        steps.iter().map(|l| vec![(NONE, NONE); l.len()]).collect();
    let mut conn_of: Vec<Vec<(u32, u32)>> =
        steps.iter().map(|l| vec![(NONE, NONE); l.len()]).collect();
    let mut pairs: Vec<Vec<(usize, usize)>> = Vec::with_capacity(keys.len());
    for (ci, key) in keys.iter().enumerate() {
        let (a, b, ch) = *key;
        let (sends, recvs) = &conns[key];
        for (k, (&si, &ri)) in sends.iter().zip(recvs).enumerate() {
            let (sl, rl) = (steps[a][si].kind.len(), steps[b][ri].kind.len());
            if sl != rl {
                return Err(CheckError::SizeMismatch {
                    from: a,
                    send: si,
                    to: b,
                    recv: ri,
                    channel: ch,
                    send_len: sl,
                    recv_len: rl,
                });
            }
            partner[a][si] = (b as u32, ri as u32);
            partner[b][ri] = (a as u32, si as u32);
            conn_of[a][si] = (ci as u32, k as u32);
            conn_of[b][ri] = (ci as u32, k as u32);
        }
        if sends.len() != recvs.len() {
            let k = sends.len().min(recvs.len());
            return Err(if sends.len() > k {
                CheckError::UnmatchedSend {
                    rank: a,
                    step: sends[k],
                    peer: b,
                    channel: ch,
                    sends: sends.len(),
                    recvs: recvs.len(),
                }
            } else {
                CheckError::UnmatchedRecv {
                    rank: b,
                    step: recvs[k],
                    peer: a,
                    channel: ch,
                    sends: sends.len(),
                    recvs: recvs.len(),
                }
            });
        }
        pairs.push(sends.iter().copied().zip(recvs.iter().copied()).collect());
    }

    // Simulation.
    let mut dependents: Vec<Vec<Vec<u32>>> =
        steps.iter().map(|l| vec![Vec::new(); l.len()]).collect();
    let mut waiting: Vec<Vec<u32>> = Vec::with_capacity(n);
    for (rank, list) in steps.iter().enumerate() {
        waiting.push(list.iter().map(|s| s.deps.len() as u32).collect());
        for (i, st) in list.iter().enumerate() {
            for &d in &st.deps {
                dependents[rank][d as usize].push(i as u32);
            }
        }
    }
    let mut level: Vec<Vec<u32>> = steps.iter().map(|l| vec![0; l.len()]).collect();
    let mut done: Vec<Vec<bool>> = steps.iter().map(|l| vec![false; l.len()]).collect();
    let mut conn_next = vec![0usize; keys.len()];
    let mut conn_level = vec![0u32; keys.len()];
    let mut queue: VecDeque<(usize, usize)> = VecDeque::new();
    for (rank, w) in waiting.iter().enumerate() {
        for (i, &c) in w.iter().enumerate() {
            if c == 0 {
                queue.push_back((rank, i));
            }
        }
    }
    let mut events = Vec::new();
    let mut remaining: usize = steps.iter().map(|l| l.len()).sum();
    let dep_level = |level: &Vec<Vec<u32>>, r: usize, i: usize| {
        steps[r][i]
            .deps
            .iter()
            .map(|&d| level[r][d as usize])
            .max()
            .unwrap_or(0)
    };
    while let Some((r, i)) = queue.pop_front() {
        if done[r][i] {
            continue;
        }
        let mut completed: [(usize, usize); 2] = [(r, i), (NONE as usize, 0)];
        if steps[r][i].kind.peer().is_none() {
            level[r][i] = dep_level(&level, r, i);
            events.push(Event::Local { rank: r, step: i });
        } else {
            let (pr, pi) = partner[r][i];
            let (pr, pi) = (pr as usize, pi as usize);
            let (ci, k) = conn_of[r][i];
            let (ci, k) = (ci as usize, k as usize);
            if conn_next[ci] != k || waiting[pr][pi] != 0 || done[pr][pi] {
                continue;
            }
            let lv = 1 + dep_level(&level, r, i)
                .max(dep_level(&level, pr, pi))
                .max(conn_level[ci]);
            level[r][i] = lv;
            level[pr][pi] = lv;
            conn_level[ci] = lv;
            conn_next[ci] += 1;
            let (from, send, to, recv) = if steps[r][i].kind.is_send() {
                (r, i, pr, pi)
            } else {
                (pr, pi, r, i)
            };
            events.push(Event::Transfer {
                from,
                send,
                to,
                recv,
            });
            completed[1] = (pr, pi);
            if let Some(&(s2, r2)) = pairs[ci].get(conn_next[ci]) {
                let (a, b, _) = keys[ci];
                if waiting[a][s2] == 0 && waiting[b][r2] == 0 {
                    queue.push_back((a, s2));
                }
            }
        }
        for &(cr, cs) in completed.iter().filter(|c| c.0 != NONE as usize) {
            done[cr][cs] = true;
            remaining -= 1;
            for &d in &dependents[cr][cs] {
                let w = &mut waiting[cr][d as usize];
                *w -= 1;
                if *w == 0 {
                    queue.push_back((cr, d as usize));
                }
            }
        }
    }
    if remaining > 0 {
        return Err(deadlock(
            steps, &done, &waiting, &partner, &conn_of, &conn_next, &pairs, &keys,
        ));
    }
    Ok(Order { events, level })
}

/// Explains a deadlock by following what each blocked step waits for.
#[allow(clippy::too_many_arguments)]
fn deadlock(
    steps: &[Vec<Step>],
    done: &[Vec<bool>],
    waiting: &[Vec<u32>],
    partner: &[Vec<(u32, u32)>],
    conn_of: &[Vec<(u32, u32)>],
    conn_next: &[usize],
    pairs: &[Vec<(usize, usize)>],
    keys: &[(usize, usize, u16)],
) -> CheckError {
    // The first step not done on the first rank with one: its deps are done.
    let (r0, i0) = steps
        .iter()
        .enumerate()
        .find_map(|(r, l)| (0..l.len()).find(|&i| !done[r][i]).map(|i| (r, i)))
        .expect("some step remains");
    // A blocked step whose deps are done waits for its partner to be runnable,
    // or for the earlier transfer on its connection.
    let runnable_blocker = |r: usize, i: usize| -> (usize, usize) {
        // Earliest not-done step of rank r at or before i whose deps are done.
        let mut j = i;
        loop {
            if waiting[r][j] == 0 {
                return (r, j);
            }
            j = steps[r][j]
                .deps
                .iter()
                .map(|&d| d as usize)
                .find(|&d| !done[r][d])
                .expect("a waiting step has an unfinished dependency");
        }
    };
    let mut chain: Vec<(usize, usize, String)> = Vec::new();
    let mut cur = (r0, i0);
    let mut seen = std::collections::HashSet::new();
    while seen.insert(cur) && chain.len() < 64 {
        let (r, i) = cur;
        let (ci, k) = conn_of[r][i];
        let (ci, k) = (ci as usize, k as usize);
        let next = if conn_next[ci] < k {
            let (s, rv) = pairs[ci][conn_next[ci]];
            let (a, b, _) = keys[ci];
            let (x, y) = if waiting[a][s] != 0 { (a, s) } else { (b, rv) };
            chain.push((r, i, "an earlier transfer on its connection".into()));
            runnable_blocker(x, y)
        } else {
            let (pr, pi) = partner[r][i];
            let (pr, pi) = (pr as usize, pi as usize);
            let blocker = runnable_blocker(pr, pi);
            let why = if blocker == (pr, pi) {
                "its partner".to_string()
            } else {
                format!(
                    "its partner {}, which waits for its dependency",
                    describe(steps, pr, pi)
                )
            };
            chain.push((r, i, why));
            blocker
        };
        cur = next;
    }
    let mut msg = describe(steps, chain[0].0, chain[0].1);
    for (k, (_, _, why)) in chain.iter().enumerate() {
        let target = chain.get(k + 1).map(|c| (c.0, c.1)).unwrap_or(cur);
        if k > 0 {
            msg.push_str(", which");
        }
        msg.push_str(&format!(
            " waits for {why} {}",
            describe(steps, target.0, target.1)
        ));
    }
    if chain.iter().any(|c| (c.0, c.1) == cur) {
        msg.push_str(" (a cycle)");
    }
    CheckError::Deadlock {
        rank: r0,
        step: i0,
        explanation: msg,
    }
}
