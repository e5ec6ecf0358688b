//! Virtual time: the simulator's own clock, in integer picoseconds.
//!
//! Integer time makes event order exact and runs reproducible; a `u64` of
//! picoseconds spans about 213 days of simulated time.

use std::fmt;
use std::ops::{Add, Sub};

/// A point in (or span of) simulated time, in picoseconds.
///
/// ```
/// use gpucomm_sim::SimTime;
/// let t = SimTime::from_us(1.5);
/// assert_eq!(t.as_ps(), 1_500_000);
/// assert_eq!((t + SimTime::from_ns(500.0)).as_us(), 2.0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(u64);

impl SimTime {
    /// Time zero.
    pub const ZERO: SimTime = SimTime(0);
    /// The largest representable time.
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// From picoseconds.
    pub const fn from_ps(ps: u64) -> Self {
        SimTime(ps)
    }
    /// From nanoseconds (rounded to the nearest picosecond; negative and NaN give zero).
    pub fn from_ns(ns: f64) -> Self {
        Self::from_secs_f64(ns * 1e-9)
    }
    /// From microseconds (rounded to the nearest picosecond).
    pub fn from_us(us: f64) -> Self {
        Self::from_secs_f64(us * 1e-6)
    }
    /// From seconds (rounded to the nearest picosecond, saturating).
    pub fn from_secs_f64(s: f64) -> Self {
        let ps = (s * 1e12).round();
        if ps.is_nan() || ps <= 0.0 {
            SimTime(0)
        } else if ps >= u64::MAX as f64 {
            SimTime::MAX
        } else {
            SimTime(ps as u64)
        }
    }
    /// Picoseconds.
    pub const fn as_ps(self) -> u64 {
        self.0
    }
    /// Microseconds.
    pub fn as_us(self) -> f64 {
        self.0 as f64 * 1e-6
    }
    /// Seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-12
    }
    /// Saturating addition.
    pub const fn saturating_add(self, o: SimTime) -> SimTime {
        SimTime(self.0.saturating_add(o.0))
    }
}

impl Add for SimTime {
    type Output = SimTime;
    fn add(self, o: SimTime) -> SimTime {
        self.saturating_add(o)
    }
}

impl Sub for SimTime {
    type Output = SimTime;
    /// Saturating subtraction (never below zero).
    fn sub(self, o: SimTime) -> SimTime {
        SimTime(self.0.saturating_sub(o.0))
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3} us", self.as_us())
    }
}
