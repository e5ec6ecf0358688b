//! Parallel groups as a training job sets them up, each result checked:
//! tensor-parallel groups of `GROUPS_TP` consecutive ranks (default 2) and
//! data-parallel groups across them (`Communicator::split`), an all-reduce
//! in each, a mixture-of-experts token exchange with uneven counts
//! (`all_to_all_v`), and pipeline stages passing activations on and
//! gradients back at once (`exchange`). Every rank prints one line and
//! exits 1 on a wrong result.
//!
//! ```sh
//! cargo build --release -p gpucomm --example groups
//! gpucomm launch -n 4 -- target/release/examples/groups
//! ```
//!
//! Ranks join from the launcher's environment (`gpucomm launch`, torchrun,
//! mpirun or Slurm: `BootstrapConfig::from_env`).

use std::process::ExitCode;

use gpucomm::{BootstrapConfig, Communicator, Error, ReduceOp};

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("groups: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One rank of the job: joins it, checks every step, says what it was.
pub fn run() -> Result<String, String> {
    let cfg = BootstrapConfig::from_env().map_err(|e| e.to_string())?;
    let world = Communicator::new(&cfg).map_err(|e| e.to_string())?;
    let (r, n) = (world.rank(), world.world_size());
    let tp_size: usize = match std::env::var("GROUPS_TP") {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("GROUPS_TP={v:?}: not a number"))?,
        Err(_) => 2,
    };
    if tp_size == 0 || n % tp_size != 0 {
        return Err(format!("{n} ranks do not split into groups of {tp_size}"));
    }
    let e = |e: Error| format!("rank {r}: {e}");
    // Tensor-parallel: consecutive ranks; data-parallel: the same place in
    // every tensor-parallel group.
    let tp = world
        .split(Some((r / tp_size) as u32), r as i64)
        .map_err(e)?
        .ok_or("no tensor-parallel group")?;
    let dp = world
        .split(Some((r % tp_size) as u32), r as i64)
        .map_err(e)?
        .ok_or("no data-parallel group")?;
    let sum = |g: &Communicator, x: u64| -> Result<u64, String> {
        let mut v = [x];
        g.all_reduce_in_place(&mut v, ReduceOp::Sum).map_err(e)?;
        Ok(v[0])
    };
    let tp_first = r / tp_size * tp_size;
    let want_tp: u64 = (tp_first..tp_first + tp_size).map(|q| q as u64).sum();
    let want_dp: u64 = (r % tp_size..n).step_by(tp_size).map(|q| q as u64).sum();
    // Both reductions run before either is compared: a rank that stopped
    // at a wrong first sum would leave its data-parallel peers waiting.
    let (got_tp, got_dp) = (sum(&tp, r as u64)?, sum(&dp, r as u64)?);
    if got_tp != want_tp || got_dp != want_dp {
        return Err(format!("rank {r}: a group's all-reduce is wrong"));
    }
    // Mixture of experts: every rank routes (r + 2 d) % 5 tokens of 4 values
    // to rank d's experts, each token saying where it came from.
    let tokens = |s: usize, d: usize| (s + 2 * d) % 5;
    let send_counts: Vec<usize> = (0..n).map(|d| 4 * tokens(r, d)).collect();
    let recv_counts: Vec<usize> = (0..n).map(|s| 4 * tokens(s, r)).collect();
    let send: Vec<u32> = (0..n)
        .flat_map(|d| std::iter::repeat_n((r * 1000 + d) as u32, send_counts[d]))
        .collect();
    let mut recv = vec![0u32; recv_counts.iter().sum()];
    world
        .all_to_all_v(&send, &send_counts, &mut recv, &recv_counts)
        .map_err(e)?;
    let want: Vec<u32> = (0..n)
        .flat_map(|s| std::iter::repeat_n((s * 1000 + r) as u32, recv_counts[s]))
        .collect();
    if recv != want {
        return Err(format!("rank {r}: the expert exchange is wrong"));
    }
    // Pipeline stages along the data-parallel group: activations to the
    // next stage and gradients from it at once (the ends only one way, so
    // they use plain send and receive).
    let (stage, stages) = (dp.rank(), dp.world_size());
    let activations = vec![stage as f32; 1 << 16];
    let mut from_prev = vec![0f32; 1 << 16];
    let mut grads = vec![0f32; 1 << 16];
    let prev_ok = stage > 0;
    let next_ok = stage + 1 < stages;
    if prev_ok {
        dp.recv(&mut from_prev, stage - 1).map_err(e)?;
    }
    if next_ok {
        dp.exchange(&activations, stage + 1, &mut grads, stage + 1)
            .map_err(e)?;
    }
    if prev_ok {
        dp.send(&vec![-(stage as f32); 1 << 16], stage - 1)
            .map_err(e)?;
    }
    let ok = (!prev_ok || from_prev.iter().all(|&x| x == (stage - 1) as f32))
        && (!next_ok || grads.iter().all(|&x| x == -((stage + 1) as f32)));
    if !ok {
        return Err(format!("rank {r}: the pipeline exchange is wrong"));
    }
    world.barrier().map_err(e)?;
    Ok(format!(
        "rank {r} of {n}: tensor-parallel rank {} of {}, data-parallel rank {} of {}, {} tokens in, all checked",
        tp.rank(),
        tp.world_size(),
        stage,
        stages,
        recv.len() / 4
    ))
}
