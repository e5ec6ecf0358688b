//! Errors of the simulator.

use crate::SimTime;

/// Why a simulation could not run or finish.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The schedule could not be built (algorithm does not implement the collective, ...).
    #[error("schedule: {0}")]
    Schedule(String),
    /// The fabric cannot carry a transfer between two ranks.
    #[error("no route from rank {src} to rank {dst}: {why}")]
    NoRoute {
        /// Sending rank.
        src: usize,
        /// Receiving rank.
        dst: usize,
        /// Detail.
        why: String,
    },
    /// The schedule and the fabric disagree on the number of ranks.
    #[error("schedule has {schedule} ranks but the fabric has {fabric}")]
    RankMismatch {
        /// Ranks in the schedule.
        schedule: usize,
        /// Ranks in the fabric.
        fabric: usize,
    },
    /// A step refers to something that does not exist (a dependency on a
    /// later step, a peer out of range, a mismatched transfer length).
    #[error("malformed schedule at rank {rank} step {step}: {why}")]
    Malformed {
        /// Rank.
        rank: usize,
        /// Step index.
        step: usize,
        /// Detail.
        why: String,
    },
    /// Nothing is left to happen but some steps never ran.
    #[error(
        "deadlock at {time_us:.3} us: {pending} steps never ran (first: rank {rank} step {step})"
    )]
    Deadlock {
        /// Simulated time when the run stopped.
        time_us: f64,
        /// Steps left.
        pending: usize,
        /// A rank with a stuck step.
        rank: usize,
        /// That step.
        step: usize,
    },
    /// The run went past its bound on simulated time or events (livelock guard).
    #[error("simulation exceeded its bound ({what}) at {time_us:.3} us")]
    Limit {
        /// Which bound.
        what: String,
        /// Simulated time when it stopped.
        time_us: f64,
    },
    /// The hardware description is unusable (unknown model, zero bandwidth, ...).
    #[error("invalid model: {0}")]
    Model(String),
    /// A file's text is not what it should hold (TOML or JSON that does not
    /// parse, or fields of the wrong type).
    #[error("not a valid {what}: {why}")]
    Parse {
        /// What the text should be ("model file", "calibration file").
        what: &'static str,
        /// The parser's words, with the line and column.
        why: String,
    },
    /// The run would not fit in this machine's memory: every rank is
    /// simulated (the schedule or the fabric is not node-symmetric) and
    /// the ranks' steps alone would take more than is available.
    #[error(
        "too large to simulate here: {ranks} ranks simulated one by one ({why}; {steps} steps each) would need about {need_gib:.1} GiB of memory, {available_gib:.1} GiB available; simulate fewer nodes or channels, an algorithm whose every node runs the same steps (a ring on most node counts), or, behind oversubscribed leaves, whole leaves"
    )]
    TooLarge {
        /// Ranks that would be simulated.
        ranks: usize,
        /// Why every rank would be ([`crate::exec::Symmetry::why_every_rank`]).
        why: &'static str,
        /// Steps of the largest rank generated.
        steps: usize,
        /// Estimated memory, GiB.
        need_gib: f64,
        /// Memory available, GiB.
        available_gib: f64,
    },
}

impl SimError {
    /// `t` if it is a time the simulation reached, the [`SimError::Limit`]
    /// of the simulator's time range if it saturated there ([`SimTime::MAX`],
    /// about 213 days: a run that reaches it did not finish in the
    /// representable range, as a copy over a link of a few bytes per second
    /// would not).
    ///
    /// ```
    /// use gpucomm_sim::{SimError, SimTime};
    /// assert!(SimError::within_time_range(SimTime::from_us(5.0)).is_ok());
    /// assert!(SimError::within_time_range(SimTime::MAX).is_err());
    /// ```
    pub fn within_time_range(t: SimTime) -> Result<SimTime, SimError> {
        if t == SimTime::MAX {
            Err(SimError::Limit {
                what: "the simulator's time range (2^64 ps)".into(),
                time_us: t.as_us(),
            })
        } else {
            Ok(t)
        }
    }
}
