//! `gpucomm algo` (being built).

use std::process::ExitCode;

/// Arguments of `gpucomm algo`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `gpucomm algo`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`gpucomm algo` is not built yet")
}
