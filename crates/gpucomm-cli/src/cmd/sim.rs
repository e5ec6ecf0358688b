//! `gpucomm sim` (being built).

use std::process::ExitCode;

/// Arguments of `gpucomm sim`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `gpucomm sim`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`gpucomm sim` is not built yet")
}
