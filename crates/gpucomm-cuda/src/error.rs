//! The crate's error type.

/// Errors of the CUDA backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable GPU in this process: no driver library, a driver without an
    /// entry point we need, `cuInit` (or, after it, `cuDeviceGetCount` or
    /// `cuDriverGetVersion`) failing, or zero devices.
    #[error("no GPU: {reason}")]
    NoGpu {
        /// Why, in words (the `dlopen` error, the driver's error text...).
        reason: String,
    },
    /// A driver call failed.
    #[error("{call} failed on device {device}: {message}")]
    Driver {
        /// The driver function (`cuMemAlloc`, ...).
        call: &'static str,
        /// The device ordinal (-1 when none is involved).
        device: i32,
        /// The `CUresult` code.
        code: i32,
        /// `CUDA_ERROR_NAME: description` from the driver.
        message: String,
    },
    /// NVRTC is missing or compiling the kernels failed.
    #[error("NVRTC: {message}")]
    Nvrtc {
        /// What went wrong.
        message: String,
        /// The compiler log, when there is one.
        log: String,
    },
    /// A bad argument: offsets past a buffer's end, mismatched lengths, a
    /// device used with another device's stream...
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Bytes that do not decode (an IPC descriptor from a peer, ...).
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// A valid operation broke while it ran: a staged transfer aborted
    /// because the other side failed, or its sender thread panicked. Not a
    /// bad argument, and not a capability this machine lacks.
    #[error("transfer failed: {0}")]
    Transfer(String),
    /// A bounded wait ran out (a staging peer that stopped making progress).
    #[error("timed out after {millis} ms waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long we waited.
        millis: u64,
    },
}

impl Error {
    /// True for [`Error::NoGpu`]: the capability is absent, not broken.
    pub fn is_no_gpu(&self) -> bool {
        matches!(self, Error::NoGpu { .. })
    }
}
