//! Starting the ranks of a job on this host: the machinery behind
//! `gpucomm launch` and `gpucomm bench`.
//!
//! [`launch`] starts `nranks` copies of a program, each with the `GPUCOMM_*`
//! environment that [`BootstrapConfig::from_env`](crate::env::BootstrapConfig::from_env)
//! reads (rank, world size, local rank, a free port on 127.0.0.1 for rank 0's
//! store, a fresh random token), forwards every line they print with the rank
//! in front (`[1] hello`; a line longer than [`MAX_LINE`] bytes, or output
//! without newlines, in pieces of that size, each with the rank in front),
//! and waits for all of them. When the ranks succeed
//! but their output could not be written (a full disk), [`launch`] says so
//! ([`LaunchError::Output`]); a closed pipe (`| head`) is not an error.
//!
//! If a rank fails (exits with a non-zero code or is killed by a signal), the
//! others are stopped: after [`LaunchConfig::term_delay`] (default 0) they get
//! `SIGTERM`, and `SIGKILL` after [`LaunchConfig::grace`] more. The result then
//! names the rank that failed first and how ([`LaunchError::RankFailed`]). An
//! optional overall [`LaunchConfig::timeout`] bounds the whole job
//! ([`LaunchError::Timeout`]).
//!
//! Each rank runs in a process group of its own (its pid is the group id), and
//! stopping a rank signals that whole group, so what a rank started (a shell's
//! children, a data loader's workers) is stopped with it. When a job is torn
//! down (a failure, the timeout, a signal), the groups of the ranks that have
//! already exited are signalled too, in case they left children behind; a
//! job whose ranks all succeed leaves what they left running alone. A rank
//! that exited is reaped only when [`launch`] returns: until then it is a
//! zombie that keeps its pid, so the group id signalled is never one the
//! kernel has given to an unrelated process since.
//!
//! Being in their own groups, the ranks do not get the terminal's `SIGINT`
//! (Ctrl-C) or `SIGHUP` themselves: while [`launch`] runs, the launcher
//! forwards the `SIGINT`, `SIGTERM` and `SIGHUP` it receives to every rank's
//! group, gives them [`LaunchConfig::grace`] to exit, then sends `SIGKILL`
//! (at once on a second signal), and returns [`LaunchError::Interrupted`]
//! ([`LaunchConfig::forward_signals`]; a signal this process ignores or
//! handles itself is left alone).
//!
//! Ranks get `SIGKILL` if the launching thread dies (Linux
//! `PR_SET_PDEATHSIG`); start ranks from a thread that lives until [`launch`]
//! returns. The kernel sends that signal to the rank's own process only: a
//! launcher killed with `SIGKILL` (which it cannot catch) leaves the ranks'
//! children running. Stop a launcher with `SIGTERM` or `SIGINT`.
//!
//! "First" is the order in which the launcher observed the exits: each rank
//! has a thread blocked in `waitpid`, which stamps the time it returned. A
//! rank that dies on its own is observed before the ranks that fail because
//! it died (they must first notice, then exit), except when the machine is so
//! loaded that the waiting threads are not scheduled for longer than that.
//! To make that case right where it matters most, a first failure that is an
//! exit code waits 100 ms for a rank killed by a signal: if one shows up, it
//! is named first (a crash causes errors on its peers, not the reverse).
//!
//! ```no_run
//! use gpucomm::launch::{launch, LaunchConfig};
//! let cfg = LaunchConfig::new(2, "python3").args(["train.py"]);
//! match launch(&cfg) {
//!     Ok(report) => println!("all {} ranks succeeded", report.ranks.len()),
//!     Err(e) => eprintln!("{e}"),
//! }
//! ```

use std::ffi::OsString;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::comm::deadline;

use crate::env::TransportChoice;

/// Which output stream of a rank a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// The rank's standard output.
    Stdout,
    /// The rank's standard error.
    Stderr,
}

/// Receives every line the ranks print: `(rank, stream, line)`, the line
/// without its trailing newline. Called from one thread per rank and stream.
/// A line longer than [`MAX_LINE`] bytes comes in pieces of that size, one
/// call each (a continued line is not marked as such); the bytes are the
/// rank's own, not necessarily UTF-8.
pub type LineSink = Arc<dyn Fn(usize, Stream, &[u8]) + Send + Sync>;

/// What to start and how.
#[derive(Clone, Debug)]
pub struct LaunchConfig {
    /// Number of ranks (at least 1).
    pub nranks: usize,
    /// The program each rank runs.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// `GPUCOMM_TRANSPORT` for the ranks (`None`: inherited from this process).
    pub transport: Option<TransportChoice>,
    /// `GPUCOMM_ALGORITHM` for the ranks (`None`: inherited).
    pub algorithm: Option<gpucomm_algo::Algorithm>,
    /// `GPUCOMM_TIMEOUT_MS` for the ranks: their bound on every wait (`None`: inherited).
    pub rank_timeout: Option<Duration>,
    /// Bound on the whole job; `None` waits as long as the ranks run.
    pub timeout: Option<Duration>,
    /// After the first failure, how long the other ranks may take to exit on
    /// their own (reporting their own errors) before they get `SIGTERM`.
    pub term_delay: Duration,
    /// How long a rank has between `SIGTERM` and `SIGKILL`.
    pub grace: Duration,
    /// Host for rank 0's store (default `127.0.0.1`).
    pub store_host: String,
    /// Extra environment for every rank.
    pub env: Vec<(OsString, OsString)>,
    /// While the job runs, forward the `SIGINT`, `SIGTERM` and `SIGHUP` this
    /// process receives to every rank's process group, then stop the job
    /// ([`LaunchError::Interrupted`]) instead of dying (default `true`). The
    /// ranks run in process groups of their own, so without this a Ctrl-C
    /// at a terminal reaches only this process. Signals whose disposition is
    /// not the default when the job starts (ignored, as under `nohup`, or
    /// handled by the program) are left alone; the previous dispositions are
    /// restored when the last running job ends.
    pub forward_signals: bool,
}

impl LaunchConfig {
    /// `nranks` copies of `program`, no arguments, default settings
    /// (no overall timeout, no term delay, 3 s grace).
    pub fn new(nranks: usize, program: impl Into<OsString>) -> Self {
        LaunchConfig {
            nranks,
            program: program.into(),
            args: Vec::new(),
            transport: None,
            algorithm: None,
            rank_timeout: None,
            timeout: None,
            term_delay: Duration::ZERO,
            grace: Duration::from_secs(3),
            store_host: "127.0.0.1".into(),
            env: Vec::new(),
            forward_signals: true,
        }
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
}

/// How a rank ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl ExitKind {
    fn from_status(s: ExitStatus) -> Self {
        match (s.code(), s.signal()) {
            (Some(c), _) => ExitKind::Code(c),
            (None, Some(sig)) => ExitKind::Signal(sig),
            (None, None) => ExitKind::Code(-1),
        }
    }

    /// True for a zero exit code.
    pub fn success(&self) -> bool {
        *self == ExitKind::Code(0)
    }

    /// The shell's convention: the code itself, or 128 + the signal number.
    pub fn shell_code(&self) -> i32 {
        match *self {
            ExitKind::Code(c) => c,
            ExitKind::Signal(s) => 128 + s,
        }
    }
}

impl fmt::Display for ExitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExitKind::Code(c) => write!(f, "exited with code {c}"),
            ExitKind::Signal(s) => write!(f, "was killed by signal {s} ({})", signal_name(s)),
        }
    }
}

/// The usual name of a signal number (`SIGKILL`), or `signal N`.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// One rank's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankExit {
    /// The rank.
    pub rank: usize,
    /// How it ended.
    pub kind: ExitKind,
    /// When, counted from the start of the job.
    pub after: Duration,
    /// True when the launcher stopped it (after another rank failed, at the
    /// overall timeout, or forwarding a signal).
    pub stopped: bool,
}

impl fmt::Display for RankExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {} {} after {:.2} s",
            self.rank,
            self.kind,
            self.after.as_secs_f64()
        )?;
        if self.stopped {
            f.write_str(" (stopped by the launcher)")?;
        }
        Ok(())
    }
}

/// A job whose ranks all succeeded.
#[derive(Clone, Debug)]
pub struct LaunchReport {
    /// Every rank's exit, by rank.
    pub ranks: Vec<RankExit>,
    /// Wall time of the whole job.
    pub elapsed: Duration,
}

/// Why a job did not succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The configuration cannot be run.
    #[error("invalid launch configuration: {0}")]
    Config(String),
    /// No free port for the store.
    #[error("cannot find a free port on {host} for the rendezvous store: {source}")]
    Port {
        /// The store host.
        host: String,
        /// The bind error.
        source: io::Error,
    },
    /// A rank could not be started.
    #[error("cannot start rank {rank} ({program}): {source}")]
    Spawn {
        /// The rank.
        rank: usize,
        /// The program.
        program: String,
        /// The error from the OS.
        source: io::Error,
    },
    /// A rank failed; the others were stopped or ended on their own.
    #[error("{}", describe_failure(.first, .others))]
    RankFailed {
        /// The rank that failed first.
        first: RankExit,
        /// Every other rank's end, by rank.
        others: Vec<RankExit>,
    },
    /// The overall timeout expired; the ranks still running were stopped.
    #[error("timed out after {:.1} s with rank(s) {} still running; stopped them", .after.as_secs_f64(), join_ranks(.running))]
    Timeout {
        /// The timeout.
        after: Duration,
        /// The ranks that were still running.
        running: Vec<usize>,
        /// Every rank's end, by rank.
        exits: Vec<RankExit>,
    },
    /// This process got `SIGINT`, `SIGTERM` or `SIGHUP` while the job ran
    /// ([`LaunchConfig::forward_signals`]); it was forwarded to every rank
    /// that was started. One that came while the ranks were being started
    /// stops the starting: the ranks after those started never run.
    #[error("{}", describe_interrupt(*.signal, .running, .exits.len(), *.not_started))]
    Interrupted {
        /// The signal (the last one, when several came).
        signal: i32,
        /// The ranks that were started and still running when it came.
        running: Vec<usize>,
        /// Every started rank's end, by rank: ranks `0..exits.len()`.
        exits: Vec<RankExit>,
        /// How many ranks were never started (ranks `exits.len()..`).
        not_started: usize,
    },
    /// Every rank succeeded, but their output could not all be written to
    /// this process's stdout or stderr (a full disk, ...). A closed pipe is
    /// not an error: the output is just dropped.
    #[error("cannot write the ranks' output to {}: {source}", stream_name(*.stream))]
    Output {
        /// The stream that failed (the first, when both did).
        stream: Stream,
        /// The write error.
        source: io::Error,
        /// Every rank's exit.
        report: LaunchReport,
    },
}

impl LaunchError {
    /// The exit code `gpucomm launch` uses for this error: the first failed
    /// rank's code (128 + signal for a signal), 124 for a timeout, 128 + the
    /// signal when interrupted, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::RankFailed { first, .. } => first.kind.shell_code().clamp(1, 255),
            LaunchError::Timeout { .. } => 124,
            LaunchError::Interrupted { signal, .. } => (128 + signal).clamp(1, 255),
            _ => 1,
        }
    }
}

fn join_ranks(r: &[usize]) -> String {
    r.iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn stream_name(s: Stream) -> &'static str {
    match s {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

fn describe_interrupt(
    signal: i32,
    running: &[usize],
    started: usize,
    not_started: usize,
) -> String {
    let mut s = format!("interrupted by {}", signal_name(signal));
    if not_started > 0 {
        s.push_str(&format!(
            " while starting the ranks ({started} of {} started)",
            started + not_started
        ));
    }
    if !running.is_empty() {
        s.push_str(&format!(
            "; forwarded it to rank(s) {} and stopped them",
            join_ranks(running)
        ));
    }
    if not_started > 0 {
        s.push_str(&format!("; {not_started} rank(s) never started"));
    }
    s
}

fn describe_failure(first: &RankExit, others: &[RankExit]) -> String {
    let mut s = format!("rank {} failed first: it {}", first.rank, first.kind);
    s.push_str(&format!(" after {:.2} s", first.after.as_secs_f64()));
    let failed: Vec<_> = others
        .iter()
        .filter(|o| !o.stopped && !o.kind.success())
        .map(|o| format!("rank {} {}", o.rank, o.kind))
        .collect();
    if !failed.is_empty() {
        s.push_str(&format!("; then {}", failed.join(", ")));
    }
    let stopped: Vec<_> = others
        .iter()
        .filter(|o| o.stopped)
        .map(|o| o.rank)
        .collect();
    if !stopped.is_empty() {
        s.push_str(&format!("; stopped rank(s) {}", join_ranks(&stopped)));
    }
    s
}

/// The default line sink: `[rank] line` to this process's stdout or stderr,
/// one write per line so that lines of different ranks never interleave.
/// Write errors are ignored ([`checked_prefix_sink`] keeps them).
pub fn prefix_sink() -> LineSink {
    checked_prefix_sink().0
}

/// The first error [`checked_prefix_sink`] met writing a line.
#[derive(Clone, Debug, Default)]
pub struct OutputErrors(Arc<Mutex<Option<(Stream, io::Error)>>>);

impl OutputErrors {
    /// Keeps `e` unless an error is already kept or `e` is a closed pipe
    /// (a reader that has seen enough, `| head`, is not a failure).
    pub fn record(&self, stream: Stream, e: io::Error) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return;
        }
        let mut first = crate::lock(&self.0);
        if first.is_none() {
            *first = Some((stream, e));
        }
    }

    /// The first error kept, if any (and forgets it).
    pub fn take(&self) -> Option<(Stream, io::Error)> {
        crate::lock(&self.0).take()
    }
}

/// [`prefix_sink`], keeping the first write error other than a closed pipe.
/// A failed line does not stop the forwarding: the ranks' pipes are always
/// drained, so that a rank never blocks on a full pipe.
pub fn checked_prefix_sink() -> (LineSink, OutputErrors) {
    let errors = OutputErrors::default();
    let kept = errors.clone();
    let sink: LineSink = Arc::new(move |rank, stream, line| {
        let mut buf = Vec::with_capacity(line.len() + 8);
        buf.extend_from_slice(format!("[{rank}] ").as_bytes());
        buf.extend_from_slice(line);
        buf.push(b'\n');
        let written = match stream {
            Stream::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(&buf).and_then(|()| out.flush())
            }
            Stream::Stderr => io::stderr().lock().write_all(&buf),
        };
        if let Err(e) = written {
            kept.record(stream, e);
        }
    });
    (sink, errors)
}

/// Runs the job, prefixing every line with its rank ([`prefix_sink`]). A
/// job whose ranks succeeded but whose output could not be written ends
/// in [`LaunchError::Output`].
pub fn launch(cfg: &LaunchConfig) -> Result<LaunchReport, LaunchError> {
    let (sink, errors) = checked_prefix_sink();
    let result = launch_with(cfg, sink);
    match (result, errors.take()) {
        (Ok(report), Some((stream, source))) => Err(LaunchError::Output {
            stream,
            source,
            report,
        }),
        (result, _) => result,
    }
}

/// A fresh 128-bit token from the OS's random source, as 32 hex digits.
pub fn random_token() -> String {
    random_bytes().iter().map(|x| format!("{x:02x}")).collect()
}

/// 16 bytes from the OS's random source (time and pid mixed without one).
fn random_bytes() -> [u8; 16] {
    let mut b = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    if !ok {
        // No /dev/urandom (a minimal container): mix time and pid.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mix = t ^ (u128::from(std::process::id()) << 64);
        b = mix.to_le_bytes();
    }
    b
}

/// The kernel's range of ephemeral ports (what it gives outgoing
/// connections and `bind` to port 0), `/proc/sys/net/ipv4/ip_local_port_range`.
fn ephemeral_ports() -> Option<(u16, u16)> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

/// A TCP port that was free a moment ago on `host`, for the store rank 0
/// will bind. Picked outside the kernel's ephemeral range: a port from that
/// range (`bind` to port 0) can be handed to any outgoing connection
/// between this call and rank 0's `bind` (seen as "Address already in use"
/// with many tests connecting in parallel). A process walks that space from
/// a random start, so two calls of one process never return the same port
/// (jobs launched side by side do not collide); other processes start
/// elsewhere. Falls back to an ephemeral port when no other is free.
pub fn free_port(host: &str) -> io::Result<u16> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(u64::MAX);
    let (lo, hi) = ephemeral_ports().unwrap_or((32768, 60999));
    // Unprivileged ports outside [lo, hi]: 10000..lo, then hi+1..=65535.
    let below = lo.saturating_sub(10000) as u32;
    let above = 65535u32.saturating_sub(hi as u32);
    let span = below + above;
    if span > 0 {
        if NEXT.load(Ordering::Relaxed) == u64::MAX {
            // The first call of the process picks where it starts.
            let start = u64::from_le_bytes(random_bytes()[..8].try_into().expect("8 bytes")) >> 1;
            let _ = NEXT.compare_exchange(u64::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
        }
        for _ in 0..32 {
            let k = (NEXT.fetch_add(1, Ordering::Relaxed) % u64::from(span)) as u32;
            let port = if k < below {
                10000 + k
            } else {
                hi as u32 + 1 + (k - below)
            };
            if let Ok(port) = u16::try_from(port)
                && TcpListener::bind((host, port)).is_ok()
            {
                return Ok(port);
            }
        }
    }
    let l = TcpListener::bind((host, 0))?;
    Ok(l.local_addr()?.port())
}

/// How long a failure with an exit code waits for a signal death to explain it.
const SETTLE: Duration = Duration::from_millis(100);

/// During a teardown whose ranks have all exited, how often the launcher
/// looks whether their process groups still have members.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// How often a job that forwards signals looks whether one came.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// A wait with nothing to wake for (looked at again after it).
const LONG_WAIT: Duration = Duration::from_secs(3600);

enum Event {
    /// A rank exited; its process is handed over not yet reaped (a zombie).
    Exited(usize, ExitKind, Instant, Child),
}

/// The ranks that exited, not yet reaped: each stays a zombie, so its pid
/// (its process group's id) cannot be given to another process while the
/// launcher may still signal the group, which it does to stop what the rank
/// left running. Reaped when dropped, after the last signal.
struct Unreaped(Vec<Child>);

impl Drop for Unreaped {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // It has exited: this returns at once.
            let _ = child.wait();
        }
    }
}

/// The most ranks [`launch`] starts on one host. Every rank is a process
/// with a shared-memory region and a connection to each peer, so far beyond
/// this the job exhausts the host (descriptors, mappings, memory) long before
/// it does useful work; a clear refusal beats a job that never starts.
pub const MAX_LOCAL_RANKS: usize = 1024;

/// Runs the job, handing every line the ranks print to `sink`.
pub fn launch_with(cfg: &LaunchConfig, sink: LineSink) -> Result<LaunchReport, LaunchError> {
    if cfg.nranks == 0 {
        return Err(LaunchError::Config(
            "the number of ranks must be at least 1".into(),
        ));
    }
    if cfg.nranks > MAX_LOCAL_RANKS {
        return Err(LaunchError::Config(format!(
            "{} ranks on one host is more than gpucomm starts ({MAX_LOCAL_RANKS})",
            cfg.nranks
        )));
    }
    let port = free_port(&cfg.store_host).map_err(|source| LaunchError::Port {
        host: cfg.store_host.clone(),
        source,
    })?;
    let store = if cfg.store_host.contains(':') {
        format!("[{}]:{port}", cfg.store_host)
    } else {
        format!("{}:{port}", cfg.store_host)
    };
    let token = random_token();
    let start = Instant::now();
    let (tx, rx) = mpsc::channel::<Event>();
    // Counting this process's SIGINT, SIGTERM and SIGHUP from before the
    // first rank starts; this thread forwards them (a handler only counts).
    let mut forwarding = cfg.forward_signals.then(forward::Guard::install);
    let mut new_signals = move || forwarding.as_mut().and_then(forward::Guard::take);
    // Every rank's pid, which is also its process group's id.
    let mut pids: Vec<u32> = Vec::with_capacity(cfg.nranks);
    let mut readers = Vec::new();
    // Declared before anything that may signal a group, so dropped (reaped)
    // after the last signal.
    let mut unreaped = Unreaped(Vec::with_capacity(cfg.nranks));
    let mut interrupt: Option<i32> = None;
    let mut kill_now = false;

    for rank in 0..cfg.nranks {
        if let Some((sig, n)) = new_signals() {
            // Interrupted while starting: start no more, stop those started.
            interrupt = Some(sig);
            kill_now = n > 1;
            break;
        }
        let mut cmd = Command::new(&cfg.program);
        cmd.args(&cfg.args)
            .envs(cfg.env.iter().map(|(k, v)| (k, v)))
            .env("GPUCOMM_RANK", rank.to_string())
            .env("GPUCOMM_WORLD_SIZE", cfg.nranks.to_string())
            .env("GPUCOMM_LOCAL_RANK", rank.to_string())
            .env("GPUCOMM_LOCAL_WORLD_SIZE", cfg.nranks.to_string())
            .env("GPUCOMM_STORE", &store)
            .env("GPUCOMM_TOKEN", &token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(t) = cfg.transport {
            cmd.env("GPUCOMM_TRANSPORT", t.name());
        }
        if let Some(a) = cfg.algorithm {
            cmd.env("GPUCOMM_ALGORITHM", a.name());
        }
        if let Some(t) = cfg.rank_timeout {
            cmd.env("GPUCOMM_TIMEOUT_MS", crate::comm::timeout_ms(t).to_string());
        }
        // A process group of its own (set in the child before exec, so
        // before `spawn` returns): stopping the rank stops what it started.
        cmd.process_group(0);
        die_with_parent(&mut cmd);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(source) => {
                // Stop what was started, then report.
                for &pid in &pids {
                    signal_group(pid, rustix::process::Signal::KILL);
                }
                drop(tx);
                for Event::Exited(_, _, _, child) in rx.iter().take(pids.len()) {
                    unreaped.0.push(child);
                }
                return Err(LaunchError::Spawn {
                    rank,
                    program: cfg.program.to_string_lossy().into_owned(),
                    source,
                });
            }
        };
        pids.push(child.id());
        if let Some(out) = child.stdout.take() {
            readers.push(spawn_reader(rank, Stream::Stdout, out, sink.clone()));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(spawn_reader(rank, Stream::Stderr, err, sink.clone()));
        }
        spawn_waiter(rank, child, tx.clone());
    }
    drop(tx);

    let job_deadline = cfg.timeout.map(|t| deadline(start, t));
    let mut exits: Vec<Option<RankExit>> = vec![None; cfg.nranks];
    let mut first_failure: Option<usize> = None;
    let mut timed_out = false;
    let mut remaining = pids.len();
    // With signals to look for, no wait is longer than SIGNAL_POLL.
    let forwards = cfg.forward_signals;
    let wait_until = move |wake: Instant| {
        let now = Instant::now();
        let wake = if forwards {
            wake.min(deadline(now, SIGNAL_POLL))
        } else {
            wake
        };
        wake.saturating_duration_since(now)
    };
    // Phase 1: wait for every rank, or the first failure, or the deadline,
    // or a signal.
    while remaining > 0 && interrupt.is_none() {
        if let Some((sig, n)) = new_signals() {
            interrupt = Some(sig);
            kill_now = n > 1;
            break;
        }
        // Past the deadline this still takes the exits already reported
        // (starting many ranks can take longer than the timeout).
        let wake = job_deadline.unwrap_or_else(|| deadline(Instant::now(), LONG_WAIT));
        match rx.recv_timeout(wait_until(wake)) {
            Ok(ev) => {
                let (rank, kind) = record(&mut exits, &mut unreaped, start, ev, false);
                remaining -= 1;
                if !kind.success() {
                    first_failure = Some(rank);
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if job_deadline.is_some_and(|d| Instant::now() >= d) {
                    timed_out = true;
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }

    // A rank that exited with an error code may be reacting to a peer that a
    // signal killed a moment earlier, whose exit the launcher has not seen yet
    // (a loaded machine delays the waiting threads). Give such a peer a short
    // while to show up; a signal death is the cause, not the reaction.
    if let Some(f) =
        first_failure.filter(|&f| matches!(exits[f].map(|e| e.kind), Some(ExitKind::Code(_))))
    {
        let mut settle_end = deadline(Instant::now(), SETTLE);
        if let Some(d) = job_deadline {
            settle_end = settle_end.min(d);
        }
        while remaining > 0 {
            match rx.recv_timeout(settle_end.saturating_duration_since(Instant::now())) {
                Ok(ev) => {
                    let (rank, kind) = record(&mut exits, &mut unreaped, start, ev, false);
                    remaining -= 1;
                    if matches!(kind, ExitKind::Signal(_)) && first_failure == Some(f) {
                        first_failure = Some(rank);
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    }

    // Phase 2, the teardown: stop the ranks still running (after the term
    // delay, which is bounded by the deadline), and what the ranks that
    // already exited left running in their groups. Every signal goes to a
    // whole process group.
    if first_failure.is_some() || timed_out || interrupt.is_some() {
        let now = Instant::now();
        let mut stop_at = now;
        if first_failure.is_some() {
            stop_at = deadline(now, cfg.term_delay);
            if let Some(d) = job_deadline {
                stop_at = stop_at.min(d.max(now));
            }
        }
        let mut td = Teardown::new(&pids, cfg.grace);
        if let Some(sig) = interrupt {
            td.forward(sig, kill_now, &exits);
        }
        loop {
            if let Some((sig, n)) = new_signals() {
                interrupt.get_or_insert(sig);
                td.forward(sig, n > 1, &exits);
            }
            let now = Instant::now();
            if remaining == 0 {
                if td.killed || !any_group_alive(&pids) {
                    break;
                }
                // Only what exited ranks left behind: nothing to wait for.
                stop_at = stop_at.min(now);
            }
            if !td.signalled && now >= stop_at {
                td.first_signal(rustix::process::Signal::TERM, &exits);
            }
            if td.kill_at.is_some_and(|k| now >= k) {
                td.kill();
                continue;
            }
            let wake = if !td.signalled {
                stop_at
            } else {
                td.kill_at.unwrap_or_else(|| deadline(now, LONG_WAIT))
            };
            if remaining == 0 {
                // No waiter is left to wake this thread: poll the groups.
                thread::sleep(wait_until(wake.min(deadline(now, GROUP_POLL))));
                continue;
            }
            match rx.recv_timeout(wait_until(wake)) {
                Ok(ev) => {
                    let Event::Exited(rank, ..) = ev;
                    let (rank, kind) =
                        record(&mut exits, &mut unreaped, start, ev, td.stopped[rank]);
                    remaining -= 1;
                    if first_failure.is_none()
                        && !timed_out
                        && interrupt.is_none()
                        && !kind.success()
                    {
                        first_failure = Some(rank);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    // Let the readers forward the last lines; a grandchild that keeps a pipe
    // open must not hold the launcher, so the wait is bounded.
    let drain_until = deadline(Instant::now(), Duration::from_secs(2));
    for (done_rx, handle) in readers {
        if done_rx
            .recv_timeout(drain_until.saturating_duration_since(Instant::now()))
            .is_ok()
        {
            let _ = handle.join();
        }
    }
    if interrupt.is_none()
        && first_failure.is_none()
        && !timed_out
        && let Some((sig, _)) = new_signals()
    {
        // Came after the ranks ended: forward it to what they left running.
        if let Some(s) = rustix::process::Signal::from_named_raw(sig) {
            for &pid in &pids {
                signal_group(pid, s);
            }
        }
        interrupt = Some(sig);
    }

    let elapsed = start.elapsed();
    // Ranks start in order; a signal while they start leaves the rest
    // unstarted (only then: otherwise every rank was started). Those are not
    // reported as exits.
    let started = pids.len();
    let not_started = cfg.nranks - started;
    let exits: Vec<RankExit> = exits
        .into_iter()
        .take(started)
        .enumerate()
        .map(|(rank, e)| {
            e.unwrap_or(RankExit {
                rank,
                kind: ExitKind::Code(-1),
                after: elapsed,
                stopped: true,
            })
        })
        .collect();
    if let Some(f) = first_failure {
        let first = exits[f];
        let others = exits.into_iter().filter(|e| e.rank != f).collect();
        return Err(LaunchError::RankFailed { first, others });
    }
    if timed_out {
        let running = exits.iter().filter(|e| e.stopped).map(|e| e.rank).collect();
        return Err(LaunchError::Timeout {
            after: cfg.timeout.unwrap_or_default(),
            running,
            exits,
        });
    }
    if let Some(signal) = interrupt {
        let running = exits.iter().filter(|e| e.stopped).map(|e| e.rank).collect();
        return Err(LaunchError::Interrupted {
            signal,
            running,
            exits,
            not_started,
        });
    }
    Ok(LaunchReport {
        ranks: exits,
        elapsed,
    })
}

/// The signals of a teardown, each to every rank's process group: a first
/// one (`SIGTERM`, or the signal this process got), then `SIGKILL` after the
/// grace.
struct Teardown<'a> {
    /// Every rank's pid, its group's id.
    pids: &'a [u32],
    grace: Duration,
    /// The ranks that were running at the first signal, by rank.
    stopped: Vec<bool>,
    /// Whether the first signal went out.
    signalled: bool,
    /// When `SIGKILL` is due.
    kill_at: Option<Instant>,
    /// Whether `SIGKILL` went out.
    killed: bool,
}

impl<'a> Teardown<'a> {
    fn new(pids: &'a [u32], grace: Duration) -> Self {
        Teardown {
            pids,
            grace,
            stopped: vec![false; pids.len()],
            signalled: false,
            kill_at: None,
            killed: false,
        }
    }

    fn signal_all(&self, sig: rustix::process::Signal) {
        for &pid in self.pids {
            signal_group(pid, sig);
        }
    }

    /// `sig` to every group; the ranks still running are marked stopped;
    /// `SIGKILL` is due after the grace.
    fn first_signal(&mut self, sig: rustix::process::Signal, exits: &[Option<RankExit>]) {
        self.signal_all(sig);
        for (r, stopped) in self.stopped.iter_mut().enumerate() {
            *stopped = exits[r].is_none();
        }
        self.signalled = true;
        // Saturating: a `Duration::MAX` grace must not panic between the
        // first signal and scheduling `SIGKILL` (a second signal to this
        // process still brings it forward).
        self.kill_at = Some(deadline(Instant::now(), self.grace));
    }

    /// This process got `sig` (`many`: more than once): forwarded as the
    /// first signal; once that went out, `SIGKILL` is due at once.
    fn forward(&mut self, sig: i32, many: bool, exits: &[Option<RankExit>]) {
        if !self.signalled {
            let sig = rustix::process::Signal::from_named_raw(sig)
                .unwrap_or(rustix::process::Signal::TERM);
            self.first_signal(sig, exits);
            if !many {
                return;
            }
        }
        if !self.killed {
            self.kill_at = Some(Instant::now());
        }
    }

    fn kill(&mut self) {
        self.signal_all(rustix::process::Signal::KILL);
        self.kill_at = None;
        self.killed = true;
    }
}

/// Sends `sig` to the process group `pgid` (a rank's pid, its group's id).
/// A group with no member left (ESRCH) is fine.
fn signal_group(pgid: u32, sig: rustix::process::Signal) {
    if let Some(pgid) = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pgid, sig);
    }
}

/// True while the process group `pgid` has a member this process may
/// signal (a zombie counts).
fn group_alive(pgid: u32) -> bool {
    i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|p| rustix::process::test_kill_process_group(p).is_ok())
}

/// True while one of the process groups `pgids` has a live member. A zombie
/// is not one: it is dead, waiting for its parent to reap it, and an orphan's
/// new parent (a container's init) may take its time or never do it. Groups
/// that `kill(2)` finds are looked up in `/proc`; without `/proc`, they count.
fn any_group_alive(pgids: &[u32]) -> bool {
    let mut found: Vec<u32> = pgids.iter().copied().filter(|&g| group_alive(g)).collect();
    if found.is_empty() {
        return false;
    }
    found.sort_unstable();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...", where comm may hold anything.
        let Some(close) = stat.iter().rposition(|&b| b == b')') else {
            continue;
        };
        let rest = String::from_utf8_lossy(&stat[close + 1..]);
        let mut fields = rest.split_ascii_whitespace();
        let (Some(state), Some(_ppid), Some(pgrp)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !matches!(state, "Z" | "X" | "x")
            && pgrp
                .parse::<u32>()
                .is_ok_and(|g| found.binary_search(&g).is_ok())
        {
            return true;
        }
    }
    false
}

/// Records rank `rank`'s exit in `exits`.
/// Records a rank's exit (its time since `start`), keeps its process
/// unreaped until the launch is over, and says which rank and how.
fn record(
    exits: &mut [Option<RankExit>],
    unreaped: &mut Unreaped,
    start: Instant,
    ev: Event,
    stopped: bool,
) -> (usize, ExitKind) {
    let Event::Exited(rank, kind, at, child) = ev;
    unreaped.0.push(child);
    exits[rank] = Some(RankExit {
        rank,
        kind,
        after: at.saturating_duration_since(start),
        stopped,
    });
    (rank, kind)
}

fn spawn_waiter(rank: usize, mut child: Child, tx: mpsc::Sender<Event>) {
    thread::Builder::new()
        .name(format!("gpucomm-wait-{rank}"))
        .spawn(move || {
            let kind = wait_unreaped(&mut child);
            let _ = tx.send(Event::Exited(rank, kind, Instant::now(), child));
        })
        .expect("spawning a waiter thread");
}

/// Waits for `child` to exit and says how, leaving it unreaped (`waitid`
/// with `WNOWAIT`): see [`Unreaped`]. Where that fails, reaps it.
fn wait_unreaped(child: &mut Child) -> ExitKind {
    use rustix::process::{WaitId, WaitIdOptions};
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        loop {
            match rustix::process::waitid(
                WaitId::Pid(pid),
                WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
            ) {
                Ok(Some(st)) => {
                    if let Some(code) = st.exit_status() {
                        return ExitKind::Code(code);
                    }
                    if let Some(sig) = st.terminating_signal() {
                        return ExitKind::Signal(sig);
                    }
                    break;
                }
                Err(rustix::io::Errno::INTR) => continue,
                Ok(None) | Err(_) => break,
            }
        }
    }
    match child.wait() {
        Ok(s) => ExitKind::from_status(s),
        Err(_) => ExitKind::Code(-1),
    }
}

type Reader = (mpsc::Receiver<()>, thread::JoinHandle<()>);

/// The longest piece of a line handed to a [`LineSink`], in bytes. A longer
/// line (or output with no newline at all: binary data) is handed over in
/// pieces of this size as it arrives, each as a line of its own, so that the
/// launcher holds at most this much of a rank's stream (and
/// [`prefix_sink`] puts the rank in front of each piece).
pub const MAX_LINE: usize = 64 * 1024;

/// Reads `r` to its end (or a read error), handing `emit` every line without
/// its newline, a line longer than [`MAX_LINE`] in pieces of `MAX_LINE`
/// bytes (the last may be shorter), and what follows the last newline.
/// Bytes are passed on as they are (no UTF-8 needed).
fn forward_lines(r: &mut impl BufRead, mut emit: impl FnMut(&[u8])) {
    let mut line: Vec<u8> = Vec::with_capacity(256);
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if buf.is_empty() {
            break;
        }
        let room = MAX_LINE - line.len();
        // One byte past the room: a newline right at the limit ends the
        // line there, rather than leaving an empty piece behind.
        let window = &buf[..buf.len().min(room + 1)];
        if let Some(i) = window.iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&buf[..i]);
            r.consume(i + 1);
            emit(&line);
            line.clear();
        } else {
            let n = buf.len().min(room);
            // The byte after the room is there and is not a newline: the
            // line goes on, hand over this much now.
            let full = buf.len() > room;
            line.extend_from_slice(&buf[..n]);
            r.consume(n);
            if full {
                emit(&line);
                line.clear();
            }
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
}

fn spawn_reader(
    rank: usize,
    stream: Stream,
    pipe: impl Read + Send + 'static,
    sink: LineSink,
) -> Reader {
    let (done_tx, done_rx) = mpsc::channel();
    let handle = thread::Builder::new()
        .name(format!("gpucomm-out-{rank}"))
        .spawn(move || {
            let mut r = BufReader::with_capacity(MAX_LINE, pipe);
            forward_lines(&mut r, |piece| sink(rank, stream, piece));
            let _ = done_tx.send(());
        })
        .expect("spawning an output thread");
    (done_rx, handle)
}

/// Makes the child get `SIGKILL` when the thread that started it dies, so a
/// launcher killed by a signal leaves no orphaned ranks. The kernel signals
/// the rank's own process only, not the rest of its group: a launcher that
/// can run its teardown (`SIGINT`, `SIGTERM`, `SIGHUP`: [`forward`]) stops
/// the groups itself; one killed by `SIGKILL` cannot.
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // two system calls (prctl, getppid) through rustix, which neither
    // allocate nor take locks, so it is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(io::Error::from)?;
            // The launcher may have died before prctl took effect.
            if rustix::process::getppid() != Some(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// This process's `SIGINT`, `SIGTERM` and `SIGHUP` while a job runs
/// ([`LaunchConfig::forward_signals`]). The handler only counts them (lock-free
/// atomics, which is async-signal-safe); each running job's launching thread
/// looks at the count every [`SIGNAL_POLL`] and forwards the signal to its
/// ranks' groups itself.
mod forward {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

    const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

    /// Signals received while the handler was installed.
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    /// The last of them.
    static LAST: AtomicI32 = AtomicI32::new(0);
    static INSTALLED: Mutex<Installed> = Mutex::new(Installed {
        jobs: 0,
        previous: Vec::new(),
    });

    struct Installed {
        /// Running jobs that forward signals.
        jobs: usize,
        /// The actions the handler replaced, put back when the last job ends.
        previous: Vec<(libc::c_int, libc::sigaction)>,
    }

    extern "C" fn on_signal(sig: libc::c_int) {
        LAST.store(sig, Ordering::SeqCst);
        COUNT.fetch_add(1, Ordering::SeqCst);
    }

    /// One job's view of the signals; the handler stays installed while
    /// any job holds one.
    pub(super) struct Guard {
        seen: usize,
    }

    impl Guard {
        /// Installs the handler for each of the signals whose action is the
        /// default (one that is ignored or handled by the program is left
        /// alone), unless another running job did.
        pub(super) fn install() -> Guard {
            let mut st = crate::lock(&INSTALLED);
            if st.jobs == 0 {
                for sig in SIGNALS {
                    if let Some(previous) = install_handler(sig) {
                        st.previous.push((sig, previous));
                    }
                }
            }
            st.jobs += 1;
            Guard {
                seen: COUNT.load(Ordering::SeqCst),
            }
        }

        /// The last signal that came since the previous call, and how many
        /// came; `None` when none did.
        pub(super) fn take(&mut self) -> Option<(i32, usize)> {
            let count = COUNT.load(Ordering::SeqCst);
            let n = count.wrapping_sub(self.seen);
            if n == 0 {
                return None;
            }
            self.seen = count;
            Some((LAST.load(Ordering::SeqCst), n))
        }
    }

    impl Drop for Guard {
        #[allow(unsafe_code)]
        fn drop(&mut self) {
            let mut st = crate::lock(&INSTALLED);
            st.jobs = st.jobs.saturating_sub(1);
            if st.jobs == 0 {
                for (sig, previous) in st.previous.drain(..) {
                    // SAFETY: puts back the action that `install_handler` read
                    // for this signal, unchanged; a null old-action pointer is
                    // allowed.
                    unsafe { libc::sigaction(sig, &previous, std::ptr::null_mut()) };
                }
            }
        }
    }

    /// Installs [`on_signal`] for `sig` if its action is the default; the
    /// action it replaced.
    #[allow(unsafe_code)]
    fn install_handler(sig: libc::c_int) -> Option<libc::sigaction> {
        // SAFETY: `sigaction` is a plain C struct, valid all zeroes (no
        // handler, empty mask, no flags).
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: with a null new action, sigaction only writes the current
        // action into `old`, which is valid for writes.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return None;
        }
        // SAFETY: as above.
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // Interrupted system calls in other threads resume.
        new.sa_flags = libc::SA_RESTART;
        // SAFETY: `new` is fully initialised (empty mask, SA_RESTART, a
        // handler with the signature sigaction expects without SA_SIGINFO)
        // and `on_signal` only touches lock-free atomics, which is
        // async-signal-safe; `old` is valid for writes.
        let ok = unsafe {
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(sig, &new, &mut old)
        } == 0;
        ok.then_some(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn sh(nranks: usize, script: &str) -> LaunchConfig {
        LaunchConfig::new(nranks, "/bin/sh").args(["-c", script])
    }

    #[test]
    fn too_many_ranks_is_refused_before_anything_starts() {
        match launch(&sh(MAX_LOCAL_RANKS + 1, "exit 0")) {
            Err(LaunchError::Config(m)) => assert!(m.contains("more than gpucomm starts"), "{m}"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    type Lines = Arc<Mutex<Vec<(usize, Stream, String)>>>;

    fn capture() -> (LineSink, Lines) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l2 = lines.clone();
        let sink: LineSink = Arc::new(move |r, s, line| {
            l2.lock()
                .unwrap()
                .push((r, s, String::from_utf8_lossy(line).into_owned()));
        });
        (sink, lines)
    }

    #[test]
    fn every_rank_gets_its_environment() {
        let (sink, lines) = capture();
        let cfg = sh(
            3,
            "echo $GPUCOMM_RANK/$GPUCOMM_WORLD_SIZE/$GPUCOMM_LOCAL_RANK/$GPUCOMM_LOCAL_WORLD_SIZE \
             $GPUCOMM_STORE $GPUCOMM_TOKEN $GPUCOMM_TRANSPORT; echo err >&2; printf partial",
        );
        let cfg = LaunchConfig {
            transport: Some(TransportChoice::Tcp),
            ..cfg
        };
        let report = launch_with(&cfg, sink).unwrap();
        assert_eq!(report.ranks.len(), 3);
        assert!(report.ranks.iter().all(|r| r.kind.success() && !r.stopped));
        let lines = lines.lock().unwrap();
        let mut stores = Vec::new();
        for rank in 0..3 {
            let out: Vec<_> = lines
                .iter()
                .filter(|(r, s, _)| *r == rank && *s == Stream::Stdout)
                .map(|(_, _, l)| l.clone())
                .collect();
            assert_eq!(out.len(), 2, "{out:?}");
            let f: Vec<_> = out[0].split(' ').collect();
            assert_eq!(f[0], format!("{rank}/3/{rank}/3"));
            assert!(f[1].starts_with("127.0.0.1:"), "{}", f[1]);
            assert_eq!(f[2].len(), 32);
            assert_eq!(f[3], "tcp");
            stores.push((f[1].to_string(), f[2].to_string()));
            assert_eq!(out[1], "partial");
            assert!(lines.contains(&(rank, Stream::Stderr, "err".into())));
        }
        assert!(stores.windows(2).all(|w| w[0] == w[1]), "{stores:?}");
    }

    #[test]
    fn a_failing_rank_stops_the_others_and_is_named() {
        let (sink, _) = capture();
        let cfg = sh(
            3,
            r#"if [ "$GPUCOMM_RANK" = 1 ]; then exit 7; fi; exec sleep 30"#,
        );
        let t = Instant::now();
        let err = launch_with(&cfg, sink).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        match &err {
            LaunchError::RankFailed { first, others } => {
                assert_eq!(first.rank, 1);
                assert_eq!(first.kind, ExitKind::Code(7));
                assert_eq!(others.len(), 2);
                for o in others {
                    assert!(o.stopped, "{o}");
                    assert_eq!(o.kind, ExitKind::Signal(libc::SIGTERM));
                }
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(err.exit_code(), 7);
        let msg = err.to_string();
        assert!(
            msg.starts_with("rank 1 failed first: it exited with code 7"),
            "{msg}"
        );
        assert!(msg.contains("stopped rank(s) 0, 2"), "{msg}");
    }

    #[test]
    fn a_signalled_rank_is_reported_with_the_signal() {
        let (sink, _) = capture();
        let cfg = sh(
            2,
            r#"if [ "$GPUCOMM_RANK" = 0 ]; then kill -9 $$; fi; exec sleep 30"#,
        );
        let err = launch_with(&cfg, sink).unwrap_err();
        let LaunchError::RankFailed { first, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(
            (first.rank, first.kind),
            (0, ExitKind::Signal(libc::SIGKILL))
        );
        assert_eq!(err.exit_code(), 128 + 9);
        assert!(
            err.to_string().contains("killed by signal 9 (SIGKILL)"),
            "{err}"
        );
    }

    #[test]
    fn a_signal_death_just_after_an_error_exit_is_named_first() {
        // Rank 0 "reacts" (exits 1) a moment before the launcher sees rank 1's
        // crash: within the settle window, the crash is the cause.
        let (sink, _) = capture();
        let cfg = sh(
            3,
            r#"case $GPUCOMM_RANK in 0) exit 1;; 1) sleep 0.03; kill -9 $$;; esac; exec sleep 30"#,
        );
        let err = launch_with(&cfg, sink).unwrap_err();
        let LaunchError::RankFailed { first, others } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(
            (first.rank, first.kind),
            (1, ExitKind::Signal(libc::SIGKILL)),
            "{err}"
        );
        assert_eq!(others[0].kind, ExitKind::Code(1));
        assert!(!others[0].stopped);
        assert!(others[1].stopped);
        // Outside the window, the order stands.
        let (sink, _) = capture();
        let cfg = sh(
            2,
            r#"case $GPUCOMM_RANK in 0) exit 1;; esac; trap '' TERM; sleep 1; kill -9 $$"#,
        );
        let err = launch_with(&cfg, sink).unwrap_err();
        let LaunchError::RankFailed { first, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(first.rank, 0, "{err}");
    }

    #[test]
    fn sigterm_is_followed_by_sigkill_after_the_grace() {
        let (sink, _) = capture();
        let cfg = sh(
            2,
            r#"if [ "$GPUCOMM_RANK" = 1 ]; then sleep 0.2; exit 3; fi; trap '' TERM; while :; do sleep 0.05; done"#,
        );
        let cfg = LaunchConfig {
            grace: Duration::from_millis(300),
            ..cfg
        };
        let err = launch_with(&cfg, sink).unwrap_err();
        let LaunchError::RankFailed { first, others } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(first.rank, 1);
        assert_eq!(others[0].kind, ExitKind::Signal(libc::SIGKILL));
        assert!(others[0].after >= first.after + Duration::from_millis(300));
    }

    #[test]
    fn term_delay_lets_the_others_exit_on_their_own() {
        let (sink, _) = capture();
        let cfg = sh(
            2,
            r#"if [ "$GPUCOMM_RANK" = 1 ]; then exit 3; fi; sleep 0.3; echo peer gone >&2; exit 5"#,
        );
        let cfg = LaunchConfig {
            term_delay: Duration::from_secs(5),
            ..cfg
        };
        let err = launch_with(&cfg, sink).unwrap_err();
        let LaunchError::RankFailed { first, others } = &err else {
            panic!("{err:?}")
        };
        assert_eq!((first.rank, first.kind), (1, ExitKind::Code(3)));
        assert_eq!(others[0].kind, ExitKind::Code(5));
        assert!(!others[0].stopped);
        assert!(
            err.to_string().contains("then rank 0 exited with code 5"),
            "{err}"
        );
    }

    #[test]
    fn the_overall_timeout_stops_everything() {
        let (sink, _) = capture();
        let cfg = sh(
            2,
            r#"if [ "$GPUCOMM_RANK" = 1 ]; then exit 0; fi; exec sleep 30"#,
        );
        let cfg = LaunchConfig {
            timeout: Some(Duration::from_millis(400)),
            ..cfg
        };
        let t = Instant::now();
        let err = launch_with(&cfg, sink).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(5));
        match &err {
            LaunchError::Timeout { running, .. } => assert_eq!(running, &vec![0]),
            other => panic!("{other:?}"),
        }
        assert_eq!(err.exit_code(), 124);
        assert!(err.to_string().contains("rank(s) 0 still running"), "{err}");
    }

    #[test]
    fn spawn_errors_and_bad_configs() {
        let (sink, _) = capture();
        let err =
            launch_with(&LaunchConfig::new(2, "/nonexistent/prog"), sink.clone()).unwrap_err();
        assert!(matches!(err, LaunchError::Spawn { rank: 0, .. }), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/prog"), "{err}");
        let err = launch_with(&LaunchConfig::new(0, "/bin/true"), sink).unwrap_err();
        assert!(matches!(err, LaunchError::Config(_)), "{err:?}");
    }

    #[test]
    fn store_ports_stay_out_of_the_ephemeral_range_and_do_not_repeat() {
        let (lo, hi) = ephemeral_ports().unwrap_or((32768, 60999));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let p = free_port("127.0.0.1").unwrap();
            assert!(p >= 10000 && !(lo..=hi).contains(&p), "{p} in {lo}..={hi}");
            assert!(seen.insert(p), "{p} twice");
        }
    }

    #[test]
    fn tokens_are_fresh() {
        let a = random_token();
        assert_eq!(a.len(), 32);
        assert_ne!(a, random_token());
    }

    #[test]
    fn interrupts_and_output_errors_say_what_happened() {
        let err = LaunchError::Interrupted {
            signal: libc::SIGINT,
            running: vec![0, 2],
            exits: Vec::new(),
            not_started: 0,
        };
        assert_eq!(err.exit_code(), 130);
        assert_eq!(
            err.to_string(),
            "interrupted by SIGINT; forwarded it to rank(s) 0, 2 and stopped them"
        );
        let started = |n| {
            (0..n)
                .map(|rank| RankExit {
                    rank,
                    kind: ExitKind::Signal(libc::SIGINT),
                    after: Duration::ZERO,
                    stopped: true,
                })
                .collect()
        };
        let err = LaunchError::Interrupted {
            signal: libc::SIGINT,
            running: vec![0, 1, 2],
            exits: started(3),
            not_started: 597,
        };
        assert_eq!(
            err.to_string(),
            "interrupted by SIGINT while starting the ranks (3 of 600 started); \
             forwarded it to rank(s) 0, 1, 2 and stopped them; 597 rank(s) never started"
        );
        let errors = OutputErrors::default();
        errors.record(Stream::Stdout, io::ErrorKind::BrokenPipe.into());
        assert!(errors.take().is_none(), "a closed pipe is not an error");
        errors.record(Stream::Stderr, io::Error::from_raw_os_error(libc::ENOSPC));
        errors.record(Stream::Stdout, io::Error::from_raw_os_error(libc::EIO));
        let (stream, source) = errors.take().unwrap();
        let err = LaunchError::Output {
            stream,
            source,
            report: LaunchReport {
                ranks: Vec::new(),
                elapsed: Duration::ZERO,
            },
        };
        assert_eq!(err.exit_code(), 1);
        let msg = err.to_string();
        assert!(
            msg.starts_with("cannot write the ranks' output to stderr: "),
            "{msg}"
        );
    }

    /// `data` split as [`forward_lines`] must: at each newline, then every
    /// line in pieces of [`MAX_LINE`] bytes.
    fn expected_pieces(data: &[u8]) -> Vec<Vec<u8>> {
        let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
        if lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        let mut pieces = Vec::new();
        for l in lines {
            if l.is_empty() {
                pieces.push(Vec::new());
            }
            pieces.extend(l.chunks(MAX_LINE).map(<[u8]>::to_vec));
        }
        pieces
    }

    #[test]
    fn long_lines_and_binary_output_are_forwarded_in_bounded_pieces() {
        // Every byte value but the newline, then lines around the limit.
        let binary: Vec<u8> = (0..3 * MAX_LINE + 5)
            .map(|i| (i % 256) as u8)
            .map(|b| if b == b'\n' { 0 } else { b })
            .collect();
        let mut cases: Vec<Vec<u8>> = vec![binary.clone()];
        for len in [MAX_LINE - 1, MAX_LINE, MAX_LINE + 1, 2 * MAX_LINE] {
            let mut d = vec![b'x'; len];
            d.push(b'\n');
            d.extend_from_slice(b"\n\nshort\n");
            d.extend(vec![b'y'; len]);
            cases.push(d);
        }
        for data in &cases {
            // Read in small and odd chunks too: the split must not depend
            // on how the pipe hands the bytes over.
            for cap in [7, 4096, 64 * 1024] {
                let mut r = BufReader::with_capacity(cap, &data[..]);
                let mut got = Vec::new();
                forward_lines(&mut r, |p| got.push(p.to_vec()));
                assert!(got.iter().all(|p| p.len() <= MAX_LINE));
                assert!(got == expected_pieces(data), "len {} cap {cap}", data.len());
            }
        }
        // Through a real rank: 1 MiB without a newline, plus binary bytes.
        let path = std::env::temp_dir().join(format!("gpucomm-launch-bin-{}", std::process::id()));
        std::fs::write(&path, &binary).unwrap();
        let got: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let g2 = got.clone();
        let sink: LineSink = Arc::new(move |_, s, line| {
            if s == Stream::Stdout {
                g2.lock().unwrap().push(line.to_vec());
            }
        });
        let script = format!("head -c 1048576 /dev/zero; echo; cat '{}'", path.display());
        let report = launch_with(&sh(1, &script), sink);
        let _ = std::fs::remove_file(&path);
        report.unwrap();
        let got = got.lock().unwrap();
        let longest = got.iter().map(Vec::len).max().unwrap_or(0);
        assert!(longest <= MAX_LINE, "a piece of {longest} bytes");
        let mut want = vec![0u8; 1 << 20];
        want.push(b'\n');
        want.extend_from_slice(&binary);
        assert!(*got == expected_pieces(&want), "{} pieces", got.len());
    }

    #[test]
    fn durations_too_long_for_an_instant_do_not_panic() {
        let now = Instant::now();
        let decades = Duration::from_secs(50 * 365 * 24 * 3600);
        assert!(deadline(now, Duration::MAX) > now + decades);
        assert_eq!(deadline(now, Duration::ZERO), now);
        // A timeout and a grace of Duration::MAX: a failure still stops the
        // others (they die of SIGTERM) and the job ends.
        let (sink, _) = capture();
        let cfg = LaunchConfig {
            timeout: Some(Duration::MAX),
            grace: Duration::MAX,
            ..sh(2, r#"[ "$GPUCOMM_RANK" = 1 ] && exit 3; exec sleep 30"#)
        };
        let t = Instant::now();
        let err = launch_with(&cfg, sink).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        let LaunchError::RankFailed { first, others } = &err else {
            panic!("{err:?}")
        };
        assert_eq!((first.rank, first.kind), (1, ExitKind::Code(3)));
        assert_eq!(others[0].kind, ExitKind::Signal(libc::SIGTERM));
        // A term delay of Duration::MAX is bounded by the timeout.
        let (sink, _) = capture();
        let cfg = LaunchConfig {
            timeout: Some(Duration::from_millis(500)),
            term_delay: Duration::MAX,
            forward_signals: false,
            ..sh(2, r#"[ "$GPUCOMM_RANK" = 1 ] && exit 3; exec sleep 30"#)
        };
        let err = launch_with(&cfg, sink).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        let LaunchError::RankFailed { others, .. } = &err else {
            panic!("{err:?}")
        };
        assert!(others[0].stopped, "{err}");
    }

    /// The state letter of process `pid` (`Z` for a zombie) and its parent.
    fn proc_state(pid: u32) -> Option<(String, u32)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut f = rest.split_ascii_whitespace();
        Some((f.next()?.to_string(), f.next()?.parse().ok()?))
    }

    #[test]
    fn an_exited_rank_keeps_its_pid_while_its_group_may_be_signalled() {
        // Rank 1 fails; while the job is torn down (rank 0 exits on its own
        // within the term delay), rank 1 must still be an unreaped zombie,
        // so that its pid, the id of the group the teardown signals, cannot
        // have gone to another process.
        let dir = std::env::temp_dir().join(format!("gpucomm-launch-reap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let script = format!(
            r#"f='{}/pid'
if [ "$GPUCOMM_RANK" = 1 ]; then echo $$ > "$f.tmp"; mv "$f.tmp" "$f"; exit 3; fi
while [ ! -s "$f" ]; do sleep 0.01; done
p=$(cat "$f")
st() {{ sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f1; }}
while s=$(st); [ -n "$s" ] && [ "$s" != Z ]; do sleep 0.01; done
sleep 0.3
echo "state $p $(st)""#,
            dir.display()
        );
        let (sink, lines) = capture();
        let cfg = LaunchConfig {
            term_delay: Duration::from_secs(10),
            ..sh(2, &script)
        };
        let err = launch_with(&cfg, sink).unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        let LaunchError::RankFailed { first, others } = &err else {
            panic!("{err:?}")
        };
        assert_eq!((first.rank, first.kind), (1, ExitKind::Code(3)));
        assert_eq!(
            (others[0].kind, others[0].stopped),
            (ExitKind::Code(0), false)
        );
        let lines = lines.lock().unwrap();
        let line = lines
            .iter()
            .find(|(r, _, l)| *r == 0 && l.starts_with("state "))
            .map(|(_, _, l)| l.clone())
            .unwrap_or_default();
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.get(2), Some(&"Z"), "{line:?} {lines:?}");
        // Reaped once the launcher is done with it.
        let pid: u32 = f[1].parse().unwrap();
        let me = std::process::id();
        assert!(
            !proc_state(pid).is_some_and(|(s, parent)| s == "Z" && parent == me),
            "rank 1 (pid {pid}) left a zombie"
        );
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(64), "signal 64");
    }
}
