//! Schedule generation (placeholder until the algorithms land).

use crate::{Algorithm, Problem, Schedule, Step, schedule::AlgoError};

pub(crate) fn validate(problem: &Problem, _algorithm: Algorithm) -> Result<(), AlgoError> {
    if problem.nranks == 0 {
        return Err(AlgoError::InvalidProblem(
            "nranks must be at least 1".into(),
        ));
    }
    Ok(())
}

pub(crate) fn rank_steps(_s: &Schedule, _rank: usize) -> Vec<Step> {
    todo!("schedule generation")
}

pub(crate) fn scratch_len(_s: &Schedule, _rank: usize) -> usize {
    0
}

pub(crate) fn in_place_safe(_s: &Schedule) -> bool {
    false
}
