//! Bootstrap configuration: who this rank is and where the rendezvous store lives.
//!
//! Environment variables are read here, at the edge, and nowhere else in the
//! runtime. Recognised launchers (first match wins): gpucomm's own
//! (`GPUCOMM_*`, set by `gpucomm launch`), torchrun (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), Open MPI's
//! mpirun (`OMPI_COMM_WORLD_*`) and Slurm (`SLURM_PROCID`, `SLURM_NTASKS`,
//! `SLURM_LOCALID`).

use std::time::Duration;

/// Which transport to use between peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TransportChoice {
    /// Shared memory on the same host, TCP otherwise.
    #[default]
    Auto,
    /// Shared memory for every peer (all ranks must share the host).
    Shm,
    /// TCP for every peer.
    Tcp,
}

/// Everything a rank needs to join a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapConfig {
    /// This rank, `0..world_size`.
    pub rank: usize,
    /// Number of ranks in the job.
    pub world_size: usize,
    /// Index of this rank among the ranks of its host, when the launcher says.
    pub local_rank: Option<usize>,
    /// Number of ranks on this host, when the launcher says.
    pub local_world_size: Option<usize>,
    /// `host:port` of the rendezvous store (hosted by rank 0).
    pub store_addr: String,
    /// Per-job secret every store connection must present.
    pub token: String,
    /// Transport override (`GPUCOMM_TRANSPORT=auto|shm|tcp`).
    pub transport: TransportChoice,
    /// Algorithm override (`GPUCOMM_ALGORITHM=ring|tree|...`).
    pub algorithm: Option<gpucomm_algo::Algorithm>,
    /// Bound on every wait (`GPUCOMM_TIMEOUT_MS`).
    pub timeout: Duration,
}
