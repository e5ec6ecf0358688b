//! Starting the ranks of a job on this host: the machinery behind
//! `gpucomm launch` and `gpucomm bench`.
//!
//! [`launch`] starts `nranks` copies of a program, each with the `GPUCOMM_*`
//! environment that [`BootstrapConfig::from_env`](crate::env::BootstrapConfig::from_env)
//! reads (rank, world size, local rank, a free port on 127.0.0.1 for rank 0's
//! store, a fresh random token), forwards every line they print with the rank
//! in front (`[1] hello`), and waits for all of them.
//!
//! If a rank fails (exits with a non-zero code or is killed by a signal), the
//! others are stopped: after [`LaunchConfig::term_delay`] (default 0) they get
//! `SIGTERM`, and `SIGKILL` after [`LaunchConfig::grace`] more. The result then
//! names the rank that failed first and how ([`LaunchError::RankFailed`]). An
//! optional overall [`LaunchConfig::timeout`] bounds the whole job
//! ([`LaunchError::Timeout`]). Ranks get `SIGKILL` if the launching thread
//! dies (Linux `PR_SET_PDEATHSIG`), so a killed launcher leaves no orphans;
//! start ranks from a thread that lives until [`launch`] returns.
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
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

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
    /// True when the launcher stopped it (after another rank failed, or at
    /// the overall timeout).
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
}

impl LaunchError {
    /// The exit code `gpucomm launch` uses for this error: the first failed
    /// rank's code (128 + signal for a signal), 124 for a timeout, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::RankFailed { first, .. } => first.kind.shell_code().clamp(1, 255),
            LaunchError::Timeout { .. } => 124,
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
pub fn prefix_sink() -> LineSink {
    Arc::new(|rank, stream, line| {
        let mut buf = Vec::with_capacity(line.len() + 8);
        buf.extend_from_slice(format!("[{rank}] ").as_bytes());
        buf.extend_from_slice(line);
        buf.push(b'\n');
        // A closed stdout must not stop the draining of the rank's pipe.
        let _ = match stream {
            Stream::Stdout => io::stdout().lock().write_all(&buf),
            Stream::Stderr => io::stderr().lock().write_all(&buf),
        };
    })
}

/// Runs the job, prefixing every line with its rank ([`prefix_sink`]).
pub fn launch(cfg: &LaunchConfig) -> Result<LaunchReport, LaunchError> {
    launch_with(cfg, prefix_sink())
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

enum Event {
    Exited(usize, ExitKind, Instant),
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
    let mut pids: Vec<u32> = Vec::with_capacity(cfg.nranks);
    let mut readers = Vec::new();

    for rank in 0..cfg.nranks {
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
            cmd.env("GPUCOMM_TIMEOUT_MS", t.as_millis().max(1).to_string());
        }
        die_with_parent(&mut cmd);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(source) => {
                // Stop what was started, then report.
                for &pid in &pids {
                    signal(pid, rustix::process::Signal::KILL);
                }
                drop(tx);
                for _exited in rx.iter().take(pids.len()) {}
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

    let deadline = cfg.timeout.map(|t| start + t);
    let mut exits: Vec<Option<RankExit>> = vec![None; cfg.nranks];
    let mut first_failure: Option<usize> = None;
    let mut timed_out = false;
    let mut remaining = cfg.nranks;
    // Phase 1: wait for every rank, or the first failure, or the deadline.
    while remaining > 0 {
        let ev = match deadline {
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(ev) => ev,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    timed_out = true;
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(ev) => ev,
                Err(_) => break,
            },
        };
        let Event::Exited(rank, kind, at) = ev;
        exits[rank] = Some(RankExit {
            rank,
            kind,
            after: at - start,
            stopped: false,
        });
        remaining -= 1;
        if !kind.success() {
            first_failure = Some(rank);
            break;
        }
    }

    // A rank that exited with an error code may be reacting to a peer that a
    // signal killed a moment earlier, whose exit the launcher has not seen yet
    // (a loaded machine delays the waiting threads). Give such a peer a short
    // while to show up; a signal death is the cause, not the reaction.
    if let Some(f) =
        first_failure.filter(|&f| matches!(exits[f].map(|e| e.kind), Some(ExitKind::Code(_))))
    {
        let mut settle_end = Instant::now() + SETTLE;
        if let Some(d) = deadline {
            settle_end = settle_end.min(d);
        }
        while remaining > 0 {
            match rx.recv_timeout(settle_end.saturating_duration_since(Instant::now())) {
                Ok(Event::Exited(rank, kind, at)) => {
                    exits[rank] = Some(RankExit {
                        rank,
                        kind,
                        after: at - start,
                        stopped: false,
                    });
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

    // Phase 2: stop the others (after the term delay, which is bounded by the deadline).
    if remaining > 0 {
        let mut stop_at = Instant::now();
        if first_failure.is_some() {
            stop_at += cfg.term_delay;
            if let Some(d) = deadline {
                stop_at = stop_at.min(d.max(Instant::now()));
            }
        }
        let mut signalled_term = false;
        let mut kill_at: Option<Instant> = None;
        let mut stopped = vec![false; cfg.nranks];
        while remaining > 0 {
            let now = Instant::now();
            if !signalled_term && now >= stop_at {
                for (r, e) in exits.iter().enumerate() {
                    if e.is_none() {
                        signal(pids[r], rustix::process::Signal::TERM);
                        stopped[r] = true;
                    }
                }
                signalled_term = true;
                kill_at = Some(now + cfg.grace);
            }
            if kill_at.is_some_and(|k| now >= k) {
                for (r, e) in exits.iter().enumerate() {
                    if e.is_none() {
                        signal(pids[r], rustix::process::Signal::KILL);
                    }
                }
                kill_at = None;
            }
            let wake = if !signalled_term {
                stop_at
            } else {
                kill_at.unwrap_or(now + Duration::from_secs(3600))
            };
            match rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(Event::Exited(rank, kind, at)) => {
                    exits[rank] = Some(RankExit {
                        rank,
                        kind,
                        after: at - start,
                        stopped: stopped[rank],
                    });
                    remaining -= 1;
                    if first_failure.is_none() && !timed_out && !kind.success() {
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
    let drain_until = Instant::now() + Duration::from_secs(2);
    for (done_rx, handle) in readers {
        if done_rx
            .recv_timeout(drain_until.saturating_duration_since(Instant::now()))
            .is_ok()
        {
            let _ = handle.join();
        }
    }

    let elapsed = start.elapsed();
    let exits: Vec<RankExit> = exits
        .into_iter()
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
    Ok(LaunchReport {
        ranks: exits,
        elapsed,
    })
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        // ESRCH (already gone) is fine.
        let _ = rustix::process::kill_process(pid, sig);
    }
}

fn spawn_waiter(rank: usize, mut child: Child, tx: mpsc::Sender<Event>) {
    thread::Builder::new()
        .name(format!("gpucomm-wait-{rank}"))
        .spawn(move || {
            let kind = match child.wait() {
                Ok(s) => ExitKind::from_status(s),
                Err(_) => ExitKind::Code(-1),
            };
            let _ = tx.send(Event::Exited(rank, kind, Instant::now()));
        })
        .expect("spawning a waiter thread");
}

type Reader = (mpsc::Receiver<()>, thread::JoinHandle<()>);

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
            let mut r = BufReader::with_capacity(64 * 1024, pipe);
            let mut line = Vec::with_capacity(256);
            loop {
                line.clear();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if line.last() == Some(&b'\n') {
                            line.pop();
                        }
                        sink(rank, stream, &line);
                    }
                }
            }
            let _ = done_tx.send(());
        })
        .expect("spawning an output thread");
    (done_rx, handle)
}

/// Makes the child get `SIGKILL` when the thread that started it dies, so a
/// launcher killed by a signal leaves no orphaned ranks.
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
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(64), "signal 64");
    }
}
