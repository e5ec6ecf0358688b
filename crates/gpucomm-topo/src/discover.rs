//! Discovery of the live machine (placeholder, replaced below).
use std::path::PathBuf;

use crate::error::TopoError;
use crate::model::Topology;

/// Options of [`discover`].
#[derive(Clone, Debug)]
pub struct DiscoverOptions {
    /// Root directory holding `sys/` (and `proc/`): `/` for the machine.
    pub root: PathBuf,
    /// Ask NVML for GPUs and NVLinks (when the library loads).
    pub nvml: bool,
}

impl Default for DiscoverOptions {
    fn default() -> Self {
        DiscoverOptions {
            root: PathBuf::from("/"),
            nvml: true,
        }
    }
}

/// Discovers the machine.
pub fn discover(_opts: &DiscoverOptions) -> Result<Topology, TopoError> {
    Err(TopoError::Options("discovery not built yet".into()))
}
