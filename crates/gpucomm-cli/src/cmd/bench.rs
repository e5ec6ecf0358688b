//! `gpucomm bench` (being built).

use std::process::ExitCode;

/// Arguments of `gpucomm bench`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `gpucomm bench`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`gpucomm bench` is not built yet")
}
