//! The reference executor: runs a schedule on numbers, one `Vec<f64>` per
//! rank and buffer, sequentially (no threads), in an order the checker's
//! engine model allows. Used to test schedules against [`expected`], the
//! direct computation of each collective, and by engines as an oracle.

use crate::check::{CheckError, Event, order, validate};
use crate::generate::{locate, physical_lens};
use crate::{Buf, Collective, Problem, ReduceOp, Schedule, Slice, Step, StepKind};

/// Errors running a schedule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// An input vector has the wrong length.
    #[error("rank {rank}: input has {got} elements, the problem needs {want}")]
    InputLength {
        /// Rank.
        rank: usize,
        /// Length given.
        got: usize,
        /// Length required.
        want: usize,
    },
    /// Not one input per rank.
    #[error("{got} inputs for {want} ranks")]
    Ranks {
        /// Inputs given.
        got: usize,
        /// Ranks in the problem.
        want: usize,
    },
    /// The schedule cannot run (malformed, unmatched or deadlocked).
    #[error(transparent)]
    Schedule(#[from] CheckError),
}

/// Applies `op` to two values (`Avg` sums; see [`finish_avg`]).
pub fn apply(op: ReduceOp, a: f64, b: f64) -> f64 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Min => a.min(b),
        ReduceOp::Max => a.max(b),
    }
}

/// Runs `s` with `op` on `inputs` (one per rank, lengths as in
/// [`Schedule::buffer_len`]) and returns every rank's output. Undefined
/// output elements (non-root ranks of a reduce) are whatever the schedule
/// left there (NaN if never written).
///
/// ```
/// use gpucomm_algo::{Algorithm, Collective, Problem, ReduceOp, Schedule, execute, expected};
///
/// let p = Problem::new(Collective::AllReduce, 5, 3, 3);
/// let s = Schedule::new(p, Algorithm::Ring).unwrap();
/// let inputs: Vec<Vec<f64>> = (0..3).map(|r| vec![r as f64; 5]).collect();
/// let out = execute(&s, ReduceOp::Sum, &inputs).unwrap();
/// assert_eq!(out, expected(&p, ReduceOp::Sum, &inputs));
/// assert_eq!(out[0], vec![3.0; 5]);
/// ```
pub fn execute(
    s: &Schedule,
    op: ReduceOp,
    inputs: &[Vec<f64>],
) -> Result<Vec<Vec<f64>>, ExecError> {
    s.validate().map_err(|e| CheckError::Shape(e.to_string()))?;
    let n = s.problem.nranks;
    let steps: Vec<Vec<Step>> = (0..n).map(|r| s.rank_steps(r)).collect();
    let scratch: Vec<usize> = (0..n).map(|r| s.buffer_len(r, Buf::Scratch)).collect();
    execute_steps(&s.problem, &steps, &scratch, op, inputs, false)
}

/// Runs explicit step lists; `in_place` aliases input and output as an
/// in-place call does (see [`Schedule::in_place_safe`]).
pub fn execute_steps(
    p: &Problem,
    steps: &[Vec<Step>],
    scratch_len: &[usize],
    op: ReduceOp,
    inputs: &[Vec<f64>],
    in_place: bool,
) -> Result<Vec<Vec<f64>>, ExecError> {
    let n = p.nranks;
    if inputs.len() != n {
        return Err(ExecError::Ranks {
            got: inputs.len(),
            want: n,
        });
    }
    for (rank, inp) in inputs.iter().enumerate() {
        if inp.len() != p.input_len(rank) {
            return Err(ExecError::InputLength {
                rank,
                got: inp.len(),
                want: p.input_len(rank),
            });
        }
    }
    validate(p, steps, scratch_len)?;
    let ord = order(steps)?;
    let mut mem: Vec<[Vec<f64>; 3]> = (0..n)
        .map(|r| {
            let l = physical_lens(p, r, in_place, scratch_len[r]);
            [
                vec![f64::NAN; l[0]],
                vec![f64::NAN; l[1]],
                vec![f64::NAN; l[2]],
            ]
        })
        .collect();
    for (r, inp) in inputs.iter().enumerate() {
        let (b, o) = locate(p, r, in_place, Slice::new(Buf::Input, 0, inp.len()));
        mem[r][b][o..o + inp.len()].copy_from_slice(inp);
    }
    let read = |mem: &Vec<[Vec<f64>; 3]>, r: usize, s: Slice| -> Vec<f64> {
        let (b, o) = locate(p, r, in_place, s);
        mem[r][b][o..o + s.len].to_vec()
    };
    let write = |mem: &mut Vec<[Vec<f64>; 3]>, r: usize, s: Slice, v: &[f64]| {
        let (b, o) = locate(p, r, in_place, s);
        mem[r][b][o..o + s.len].copy_from_slice(v);
    };
    let combine = |a: &[f64], b: &[f64]| -> Vec<f64> {
        a.iter().zip(b).map(|(&x, &y)| apply(op, x, y)).collect()
    };
    for ev in &ord.events {
        match *ev {
            Event::Local { rank, step } => match steps[rank][step].kind {
                StepKind::Copy { src, dst } => {
                    let v = read(&mem, rank, src);
                    write(&mut mem, rank, dst, &v);
                }
                StepKind::Reduce { src, dst } => {
                    let v = combine(&read(&mem, rank, dst), &read(&mem, rank, src));
                    write(&mut mem, rank, dst, &v);
                }
                _ => unreachable!("local events are local steps"),
            },
            Event::Transfer {
                from,
                send,
                to,
                recv,
            } => {
                let StepKind::Send { src, .. } = steps[from][send].kind else {
                    unreachable!("a transfer starts with a send")
                };
                let data = read(&mem, from, src);
                match steps[to][recv].kind {
                    StepKind::Recv { dst, .. } => write(&mut mem, to, dst, &data),
                    StepKind::RecvReduce { src: own, dst, .. } => {
                        let v = combine(&read(&mem, to, own), &data);
                        write(&mut mem, to, dst, &v);
                    }
                    _ => unreachable!("a transfer ends with a receive"),
                }
            }
        }
    }
    let mut outs: Vec<Vec<f64>> = (0..n)
        .map(|r| read(&mem, r, Slice::new(Buf::Output, 0, p.output_len(r))))
        .collect();
    finish_avg(p, op, &mut outs);
    Ok(outs)
}

/// For [`ReduceOp::Avg`], divides the result elements of a reducing
/// collective by the number of ranks (what an engine does after the sum).
pub fn finish_avg(p: &Problem, op: ReduceOp, outputs: &mut [Vec<f64>]) {
    if op != ReduceOp::Avg {
        return;
    }
    let n = p.nranks as f64;
    for (r, out) in outputs.iter_mut().enumerate() {
        let defined = match p.collective {
            Collective::AllReduce | Collective::ReduceScatter => true,
            Collective::Reduce { root } => r == root,
            _ => false,
        };
        if defined {
            out.iter_mut().for_each(|x| *x /= n);
        }
    }
}

/// The collective computed directly from its definition (see the table in
/// [`Collective`]): every rank's output. Non-root outputs of a reduce are
/// NaN (undefined).
///
/// # Panics
/// If `inputs` does not hold one vector per rank of the lengths
/// [`Problem::input_len`] gives (what [`execute`] checks).
pub fn expected(p: &Problem, op: ReduceOp, inputs: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let n = p.nranks;
    let c = p.count;
    let reduced = || -> Vec<f64> {
        (0..c)
            .map(|i| {
                let mut acc = inputs[0][i];
                for inp in &inputs[1..] {
                    acc = apply(op, acc, inp[i]);
                }
                acc
            })
            .collect()
    };
    let mut outs: Vec<Vec<f64>> = match p.collective {
        Collective::AllReduce => vec![reduced(); n],
        Collective::ReduceScatter => {
            let all = reduced();
            (0..n)
                .map(|r| {
                    let (o, l) = p.block(r);
                    all[o..o + l].to_vec()
                })
                .collect()
        }
        Collective::AllGather => vec![inputs.concat(); n],
        Collective::Broadcast { root } => vec![inputs[root].clone(); n],
        Collective::Reduce { root } => {
            let all = reduced();
            (0..n)
                .map(|r| {
                    if r == root {
                        all.clone()
                    } else {
                        vec![f64::NAN; c]
                    }
                })
                .collect()
        }
        Collective::AllToAll => (0..n)
            .map(|r| {
                (0..n)
                    .flat_map(|q| inputs[q][r * c..(r + 1) * c].to_vec())
                    .collect()
            })
            .collect(),
        Collective::SendRecv { shift } => (0..n)
            .map(|r| inputs[(r + n - shift % n) % n].clone())
            .collect(),
        Collective::Gather { root } => (0..n)
            .map(|r| {
                if r == root {
                    inputs.concat()
                } else {
                    Vec::new()
                }
            })
            .collect(),
        Collective::Scatter { root } => (0..n)
            .map(|r| inputs[root][r * c..(r + 1) * c].to_vec())
            .collect(),
        Collective::Barrier => vec![Vec::new(); n],
    };
    finish_avg(p, op, &mut outs);
    outs
}
