//! The `gpucomm` command.
//!
//! Each subcommand lives in its own module under `cmd/` and exposes
//! `Args` (clap) and `run(args) -> anyhow::Result<ExitCode>`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// gpucomm: collectives, topology, benchmarks and simulation for GPU communication.
#[derive(Parser, Debug)]
#[command(name = "gpucomm", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show the hardware topology (this machine, a preset, or a file).
    Topo(cmd::topo::Args),
    /// Inspect collective schedules (`gpucomm algo show all_reduce --algorithm ring --ranks 4`).
    Algo(cmd::algo::Args),
    /// Benchmark a collective on local ranks, nccl-tests style.
    Bench(cmd::bench::Args),
    /// Start N local ranks of a program with the rendezvous environment set.
    Launch(cmd::launch::Args),
    /// Simulate collectives, transfers and training steps on modeled fabrics.
    Sim(Box<cmd::sim::Args>),
    /// Copy bandwidth and latency of the GPUs (exit status 3: no GPU).
    Bandwidth(cmd::bandwidth::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Topo(a) => cmd::topo::run(a),
        Command::Algo(a) => cmd::algo::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Launch(a) => cmd::launch::run(a),
        Command::Sim(a) => cmd::sim::run(*a),
        Command::Bandwidth(a) => cmd::bandwidth::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // A closed stdout (`gpucomm topo | head`) is not a failure.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("gpucomm: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
