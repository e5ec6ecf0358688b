//! `gpucomm launch` (being built).

use std::process::ExitCode;

/// Arguments of `gpucomm launch`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `gpucomm launch`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`gpucomm launch` is not built yet")
}
