//! `gpucomm launch -n N [--transport shm|tcp] [--algorithm NAME|auto] [--timeout S] -- PROGRAM ARGS`:
//! starts N local ranks of a program with the rendezvous environment set
//! (see `gpucomm::launch`), prefixes their output with the rank, and exits
//! non-zero naming the rank that failed first.
//!
//! Exit codes: 0 when every rank succeeded; the first failed rank's exit code
//! (128 + signal number when a signal killed it); 124 when `--timeout`
//! expired; 128 + N when this process got signal N (SIGINT, SIGTERM, SIGHUP:
//! forwarded to every rank's process group); 1 when the ranks could not be
//! started or their output could not be written (a full disk; a closed pipe
//! is not an error); 2 for a bad command line (`-n 0`, more ranks than
//! `gpucomm::launch::MAX_LOCAL_RANKS`), as for clap's own usage errors.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use gpucomm::env::TransportChoice;
use gpucomm::launch::{LaunchConfig, LaunchError, MAX_LOCAL_RANKS, launch};

use super::common::{Usage, usage};

/// Arguments of `gpucomm launch`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of ranks to start.
    #[arg(
        short = 'n',
        long = "nranks",
        visible_alias = "ranks",
        value_name = "N"
    )]
    pub nranks: usize,
    /// Transport between the ranks (sets GPUCOMM_TRANSPORT; default: inherited, else auto).
    #[arg(long, value_parser = parse_transport, value_name = "auto|shm|tcp")]
    pub transport: Option<TransportChoice>,
    /// Collective algorithm, or auto for the tuner's choice (sets
    /// GPUCOMM_ALGORITHM, auto included, so it overrides an inherited one;
    /// default: inherited, else the tuner chooses).
    #[arg(long, value_parser = parse_algorithm_or_auto, value_name = "NAME|auto")]
    pub algorithm: Option<AlgorithmChoice>,
    /// Stop every rank and fail after this many seconds.
    #[arg(long, value_parser = parse_secs, value_name = "SECONDS")]
    pub timeout: Option<Duration>,
    /// Each rank's bound on every wait, in seconds (sets GPUCOMM_TIMEOUT_MS).
    #[arg(long, value_parser = parse_secs, value_name = "SECONDS")]
    pub rank_timeout: Option<Duration>,
    /// After a rank fails, let the others exit on their own for this long
    /// (to report their own errors) before sending SIGTERM.
    #[arg(long, value_parser = parse_secs_or_zero, default_value = "0", value_name = "SECONDS")]
    pub term_delay: Duration,
    /// Time between SIGTERM and SIGKILL when stopping ranks.
    #[arg(long, value_parser = parse_secs_or_zero, default_value = "3", value_name = "SECONDS")]
    pub grace: Duration,
    /// The program to run, then its arguments (put `--` before them).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub command: Vec<OsString>,
}

/// Parses `auto`, `shm` or `tcp`.
pub fn parse_transport(s: &str) -> Result<TransportChoice, String> {
    TransportChoice::from_name(s)
        .ok_or_else(|| format!("unknown transport {s:?} (expected auto, shm or tcp)"))
}

/// `--algorithm`: a fixed algorithm, or `None` for `auto` (the tuner chooses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlgorithmChoice(pub Option<gpucomm_algo::Algorithm>);

impl AlgorithmChoice {
    /// The algorithm's name, or `auto`.
    pub fn name(&self) -> &'static str {
        self.0.map_or("auto", |a| a.name())
    }
}

/// Parses an algorithm name or `auto` (case-insensitive), as
/// `GPUCOMM_ALGORITHM` takes them.
pub fn parse_algorithm_or_auto(s: &str) -> Result<AlgorithmChoice, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(AlgorithmChoice(None));
    }
    parse_algorithm(s)
        .map(|a| AlgorithmChoice(Some(a)))
        .map_err(|e| e.replace("(expected one of ", "(expected auto or one of "))
}

/// Parses an algorithm name (not `auto`: see [`parse_algorithm_or_auto`]).
pub fn parse_algorithm(s: &str) -> Result<gpucomm_algo::Algorithm, String> {
    gpucomm_algo::Algorithm::from_name(s).ok_or_else(|| {
        let names: Vec<_> = gpucomm_algo::Algorithm::ALL
            .iter()
            .map(|a| a.name())
            .collect();
        format!(
            "unknown algorithm {s:?} (expected one of {})",
            names.join(", ")
        )
    })
}

/// Parses a positive number of seconds (`2`, `0.5`).
pub fn parse_secs(s: &str) -> Result<Duration, String> {
    match parse_secs_or_zero(s)? {
        d if d.is_zero() => Err(format!("{s:?} is not a positive number of seconds")),
        d => Ok(d),
    }
}

/// Parses a non-negative number of seconds.
pub fn parse_secs_or_zero(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.0..=1e9).contains(&v) {
        return Err(format!("{s:?} is not a valid number of seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Runs `gpucomm launch`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Usage errors (exit status 2), found before anything starts.
    // A mistyped option (`--timout 20 prog`) reaches here as the program
    // (the program's own options must pass through): it was started, and
    // "cannot start rank 0 (--timout)" exited 1.
    if let Some(opt) = args
        .command
        .first()
        .and_then(|p| p.to_str())
        .filter(|p| p.starts_with('-') && *p != "-")
    {
        usage!(
            "unknown option {opt:?} (gpucomm launch's options come before the program; see gpucomm launch --help)"
        );
    }
    if args.nranks == 0 {
        usage!("-n must be at least 1");
    }
    if args.nranks > MAX_LOCAL_RANKS {
        usage!(
            "-n {} is more than gpucomm starts on one host ({MAX_LOCAL_RANKS})",
            args.nranks
        );
    }
    let mut command = args.command.into_iter();
    let Some(program) = command.next() else {
        usage!("no program given (usage: gpucomm launch -n N -- PROGRAM ARGS)");
    };
    let mut cfg = LaunchConfig {
        transport: args.transport,
        algorithm: args.algorithm.and_then(|a| a.0),
        rank_timeout: args.rank_timeout,
        timeout: args.timeout,
        term_delay: args.term_delay,
        grace: args.grace,
        ..LaunchConfig::new(args.nranks, program).args(command)
    };
    if args.algorithm == Some(AlgorithmChoice(None)) {
        // `auto` overrides a GPUCOMM_ALGORITHM this process inherited
        // (LaunchConfig::algorithm None would pass that one on).
        cfg.env.push(("GPUCOMM_ALGORITHM".into(), "auto".into()));
    }
    match launch(&cfg) {
        Ok(_) => Ok(ExitCode::SUCCESS),
        // A configuration the library refuses is a bad command line too
        // (the checks above find the ones known today).
        Err(LaunchError::Config(m)) => Err(anyhow::Error::new(Usage(m))),
        Err(e) => {
            // Not eprintln!, which panics when stderr cannot be written (the
            // exit code still tells).
            let _ = writeln!(std::io::stderr(), "gpucomm launch: {e}");
            Ok(ExitCode::from(e.exit_code().clamp(1, 255) as u8))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds() {
        assert_eq!(parse_secs("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_secs("0.25").unwrap(), Duration::from_millis(250));
        assert!(parse_secs("0").is_err());
        assert!(parse_secs("-1").is_err());
        assert!(parse_secs("inf").is_err());
        assert!(parse_secs("soon").is_err());
        assert_eq!(parse_secs_or_zero("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn names() {
        assert_eq!(parse_transport("TCP").unwrap(), TransportChoice::Tcp);
        assert!(
            parse_transport("ib")
                .unwrap_err()
                .contains("auto, shm or tcp")
        );
        assert_eq!(
            parse_algorithm("ring").unwrap(),
            gpucomm_algo::Algorithm::Ring
        );
        assert!(parse_algorithm("magic").unwrap_err().contains("ring"));
        assert_eq!(
            parse_algorithm_or_auto("Auto").unwrap(),
            AlgorithmChoice(None)
        );
        assert_eq!(
            parse_algorithm_or_auto("bruck").unwrap(),
            AlgorithmChoice(Some(gpucomm_algo::Algorithm::Bruck))
        );
        assert!(
            parse_algorithm_or_auto("magic")
                .unwrap_err()
                .contains("expected auto or one of ring")
        );
    }
}
