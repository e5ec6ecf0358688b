//! Errors of the runtime.

use std::fmt;
use std::time::Duration;

/// The transport a peer is reached over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportKind {
    /// Ranks are threads of one process (memory shared directly).
    InProcess,
    /// Shared memory between processes of one host.
    Shm,
    /// TCP sockets.
    Tcp,
}

impl TransportKind {
    /// `inproc`, `shm` or `tcp`.
    pub const fn name(self) -> &'static str {
        match self {
            TransportKind::InProcess => "inproc",
            TransportKind::Shm => "shm",
            TransportKind::Tcp => "tcp",
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which operation failed: its name (`all_reduce`, `send`, ...), its sequence
/// number on this communicator (0 for the first), and when known the peer and
/// transport involved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpContext {
    /// Operation name.
    pub op: &'static str,
    /// Sequence number of the operation on this communicator.
    pub seq: u64,
    /// This rank.
    pub rank: usize,
    /// The peer involved, when the failure concerns one.
    pub peer: Option<usize>,
    /// The transport to that peer.
    pub transport: Option<TransportKind>,
}

impl fmt::Display for OpContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} #{} on rank {}", self.op, self.seq, self.rank)?;
        if let Some(p) = self.peer {
            write!(f, ", peer {p}")?;
        }
        if let Some(t) = self.transport {
            write!(f, " over {t}")?;
        }
        Ok(())
    }
}

/// Why an operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// A wait passed its deadline.
    Timeout(Duration),
    /// The peer closed its connection or its process died.
    PeerGone(String),
    /// The peer called a different operation (collective, count, dtype, op or root).
    Mismatch {
        /// What this rank called.
        ours: String,
        /// What the peer called.
        theirs: String,
    },
    /// Malformed or unexpected data from the peer (bad magic, version, length).
    Protocol(String),
    /// `abort()` was called on this communicator, or a peer aborted.
    Aborted(String),
    /// A system call failed.
    Io(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Timeout(d) => write!(f, "timed out after {d:?}"),
            Failure::PeerGone(s) => write!(f, "peer gone: {s}"),
            Failure::Mismatch { ours, theirs } => {
                write!(
                    f,
                    "mismatched call: this rank called {ours}, the peer called {theirs}"
                )
            }
            Failure::Protocol(s) => write!(f, "protocol error: {s}"),
            Failure::Aborted(s) => write!(f, "aborted: {s}"),
            Failure::Io(s) => write!(f, "i/o error: {s}"),
        }
    }
}

/// Errors of the gpucomm runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bad argument (buffer length, rank, root...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Something this build cannot do yet (device memory, ...).
    #[error("not supported yet: {0}")]
    Unsupported(String),
    /// Joining the job failed (store unreachable, bad token, peers missing...).
    #[error("bootstrap failed on rank {rank}: {detail}")]
    Bootstrap {
        /// This rank.
        rank: usize,
        /// What went wrong.
        detail: String,
    },
    /// An operation failed; the communicator is unusable afterwards.
    #[error("{ctx}: {failure}")]
    Op {
        /// Which operation, peer and transport.
        ctx: OpContext,
        /// What happened.
        failure: Failure,
    },
    /// An earlier operation failed or `abort()` was called: the communicator
    /// must be dropped.
    #[error("communicator unusable after an earlier failure: {0}")]
    Broken(String),
    /// The schedule generator refused the problem.
    #[error("no schedule: {0}")]
    Algo(gpucomm_algo::AlgoError),
    /// No GPU can be used: the CUDA driver is missing, fails to start, or
    /// reports no device (the reason says which). Never a panic.
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// A device operation (allocation, copy, kernel, event, IPC) failed.
    #[error("device {device} ({backend}): {what}: {detail}")]
    Device {
        /// The backend (`cuda`, `fake`).
        backend: String,
        /// The device ordinal.
        device: u32,
        /// What was being done.
        what: String,
        /// The backend's error.
        detail: String,
    },
    /// An operating-system call failed outside an operation.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The algorithm error is the message (not also its source: a chain
/// printer such as anyhow's `{:#}` would print it twice).
impl From<gpucomm_algo::AlgoError> for Error {
    fn from(e: gpucomm_algo::AlgoError) -> Self {
        Error::Algo(e)
    }
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The failure of an operation, when this error is one.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Error::Op { failure, .. } => Some(failure),
            _ => None,
        }
    }

    /// The operation context, when this error is an operation failure.
    pub fn context(&self) -> Option<&OpContext> {
        match self {
            Error::Op { ctx, .. } => Some(ctx),
            _ => None,
        }
    }
}

/// A failure inside a transport, before the engine adds the operation context.
#[derive(Clone, Debug)]
pub(crate) struct LinkError {
    pub failure: Failure,
}

impl LinkError {
    pub fn gone(s: impl Into<String>) -> Self {
        LinkError {
            failure: Failure::PeerGone(s.into()),
        }
    }
    pub fn protocol(s: impl Into<String>) -> Self {
        LinkError {
            failure: Failure::Protocol(s.into()),
        }
    }
    pub fn mismatch(ours: String, theirs: String) -> Self {
        LinkError {
            failure: Failure::Mismatch { ours, theirs },
        }
    }
}
