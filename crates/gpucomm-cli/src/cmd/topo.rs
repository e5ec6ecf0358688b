//! `gpucomm topo` (being built).

use std::process::ExitCode;

/// Arguments of `gpucomm topo`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `gpucomm topo`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`gpucomm topo` is not built yet")
}
