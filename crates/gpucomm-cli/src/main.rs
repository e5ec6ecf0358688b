//! The `gpucomm` command.
//!
//! Each subcommand lives in its own module under `cmd/` and exposes
//! `Args` (clap) and `run(args) -> anyhow::Result<ExitCode>`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cmd::common::chain_message;

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
    let cli = Cli::parse_from(cmd::sim::collective_spelled(std::env::args_os().collect()));
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
            eprintln!("gpucomm: error: {}", chain_message(&e));
            // A bad command line exits 2, as clap's usage errors do.
            if e.chain().any(|c| c.is::<cmd::common::Usage>()) {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::cmd::common::chain_message;
    use anyhow::Context;

    #[test]
    fn a_cause_the_message_already_ends_with_is_said_once() {
        #[derive(Debug)]
        struct Wrapped {
            path: String,
            source: std::io::Error,
        }
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}: {}", self.path, self.source)
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.source)
            }
        }
        let io = std::io::Error::from_raw_os_error(libc::EISDIR);
        let text = io.to_string();
        let e = Err::<(), _>(Wrapped {
            path: "/".into(),
            source: io,
        })
        .context("--topology /")
        .unwrap_err();
        assert_eq!(chain_message(&e), format!("--topology /: /: {text}"));
        // Distinct causes are all kept.
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(chain_message(&e), "outer: inner");
    }
}
