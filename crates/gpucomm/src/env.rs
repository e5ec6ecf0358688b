//! Bootstrap configuration: who this rank is and where the rendezvous store lives.
//!
//! Environment variables are read here, at the edge, and nowhere else in the
//! runtime: [`BootstrapConfig::from_env`] reads the process environment, and
//! [`BootstrapConfig::from_vars`] does the same work on any lookup function
//! (which is how it is tested).
//!
//! # Launchers
//!
//! The first launcher whose variables are present wins:
//!
//! | launcher | rank | world size | local rank | local world size | store | job id (for the token) |
//! |---|---|---|---|---|---|---|
//! | gpucomm (`gpucomm launch`) | `GPUCOMM_RANK` | `GPUCOMM_WORLD_SIZE` | `GPUCOMM_LOCAL_RANK` | `GPUCOMM_LOCAL_WORLD_SIZE` | `GPUCOMM_STORE` | — |
//! | torchrun | `RANK` | `WORLD_SIZE` | `LOCAL_RANK` | `LOCAL_WORLD_SIZE` | `MASTER_ADDR`, `MASTER_PORT` + 1 | `TORCHELASTIC_RUN_ID` |
//! | Open MPI (`mpirun`) | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` | `OMPI_COMM_WORLD_LOCAL_SIZE` | `MASTER_ADDR`, `MASTER_PORT` + 1 | `PMIX_NAMESPACE`, `OMPI_MCA_ess_base_jobid` |
//! | Slurm (`srun`) | `SLURM_PROCID` | `SLURM_NTASKS` (or `SLURM_NPROCS`) | `SLURM_LOCALID` | from `SLURM_STEP_TASKS_PER_NODE` and `SLURM_NODEID` | `MASTER_ADDR`, `MASTER_PORT` + 1, else the first host of `SLURM_STEP_NODELIST` | `SLURM_JOB_ID`, `SLURM_STEP_ID` |
//!
//! Whatever the launcher, these override or complete it:
//!
//! - `GPUCOMM_STORE=host:port`: the rendezvous store (hosted by rank 0). Takes
//!   precedence over everything else. The host is a host name, an IPv4
//!   address, or an IPv6 address in brackets (`[fd00::1]:29500`; a
//!   link-local one with its zone, `[fe80::1%eth0]:29500` or `%2`);
//!   anything else is refused, naming the variable ([`parse_store_addr`]).
//! - `GPUCOMM_TOKEN`: the per-job secret (see *Token* below).
//! - `GPUCOMM_TRANSPORT=auto|shm|tcp` (default `auto`).
//! - `GPUCOMM_ALGORITHM=ring|tree|halving_doubling|recursive_doubling|direct|hierarchical|bruck|auto`
//!   (default: the tuner chooses).
//! - `GPUCOMM_TIMEOUT_MS`: the bound on every wait, in milliseconds (default
//!   [`BootstrapConfig::DEFAULT_TIMEOUT`]).
//! - `GPUCOMM_SOCKET_IFNAME`: the network interfaces the TCP transport may
//!   listen on, as `NCCL_SOCKET_IFNAME`: comma-separated name prefixes
//!   (`eth,ib`), `^` first to exclude the listed ones (`^docker,lo`), `=`
//!   first for exact names (`=eth0`, `^=docker0`) ([`SocketIfname`]; see
//!   *Data addresses* below).
//!
//! An empty value counts as unset. Values are trimmed of surrounding spaces.
//!
//! ## Store address from `MASTER_ADDR`/`MASTER_PORT`
//!
//! `MASTER_PORT` belongs to PyTorch: torchrun's agent (or `init_process_group`
//! on rank 0) already listens there with its own store. So gpucomm's store
//! listens on `MASTER_ADDR:(MASTER_PORT + 1)`, and gpucomm and
//! `torch.distributed` can share a job. Set `GPUCOMM_STORE` to choose exactly.
//! `MASTER_ADDR` is a bare host: a name, an IPv4 address or an IPv6 address
//! (`fe80::1%eth0` with a zone; brackets optional); one with a port or a
//! scheme (`10.0.0.1:29500`, `http://x`) is refused.
//!
//! Under Slurm without `MASTER_ADDR`, the store is on the first host of the
//! step's node list (where task 0 runs with Slurm's default block
//! distribution), on port `20000 + (SLURM_JOB_ID * 16 + SLURM_STEP_ID) % 10000`
//! (or `MASTER_PORT + 1` when `MASTER_PORT` is set): deterministic per job
//! step, below the Linux ephemeral port range.
//!
//! ## Which addresses listen
//!
//! Rank 0's store listens on the store address's IP when it is an IP
//! literal, and on every interface (as PyTorch's `TCPStore` does) when it is
//! a host name: a name can resolve to a loopback address on its own host
//! (Debian and Ubuntu write `127.0.1.1 <hostname>` into `/etc/hosts`) and
//! to the real address everywhere else.
//!
//! ### Data addresses
//!
//! Each rank's TCP data listener takes, in this order: the first address of
//! an interface `GPUCOMM_SOCKET_IFNAME` names (an error when none matches);
//! else the local address of its store connection (the interface that
//! reaches rank 0); else, when that is a loopback address (the rank shares
//! rank 0's host) and the store's host is not a loopback IP, the first
//! address of an interface that is up, not loopback and not `docker*`
//! (IPv4 before IPv6, IPv6 link-local skipped), as NCCL picks one. A job
//! whose store is on `127.0.0.1` (as `gpucomm launch`'s) is local and keeps
//! loopback.
//!
//! ## Token
//!
//! Every connection to the store must present the job's token, so that a stray
//! connection (another job, a stale rank of a previous run, a port scanner)
//! cannot join. `gpucomm launch` draws a random one and passes it in
//! `GPUCOMM_TOKEN`. When the launcher gives none, every rank derives the same
//! token from what all ranks share: the launcher's name, its job id (table
//! above; empty when there is none), the store address and the world size,
//! hashed to 128 bits ([`derive_token`]). A derived token separates jobs but is
//! not a secret (anyone who can read the job's environment can compute it): set
//! `GPUCOMM_TOKEN` yourself when other users of the machine must be kept out.

use std::fmt;
use std::time::Duration;

/// The largest world size gpucomm accepts: 2^20 (1,048,576) ranks, far
/// beyond any job it serves. Every rank sizes per-peer state by the world
/// size (its shared-memory region holds a ring per peer, bootstrap keeps an
/// entry per peer), so a size no job has (a typo, a wrapped number) is
/// refused with an error instead of an allocation that aborts the process.
/// [`BootstrapConfig::from_vars`], `Communicator::new` and
/// `Communicator::in_process` all check it.
pub const MAX_WORLD_SIZE: usize = 1 << 20;

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

impl TransportChoice {
    /// The name used in `GPUCOMM_TRANSPORT` and on command lines.
    pub const fn name(&self) -> &'static str {
        match self {
            TransportChoice::Auto => "auto",
            TransportChoice::Shm => "shm",
            TransportChoice::Tcp => "tcp",
        }
    }

    /// Parses `auto`, `shm` or `tcp` (case-insensitive).
    pub fn from_name(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(TransportChoice::Auto),
            "shm" => Some(TransportChoice::Shm),
            "tcp" => Some(TransportChoice::Tcp),
            _ => None,
        }
    }
}

impl fmt::Display for TransportChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which network interfaces the TCP data listener may use: the value of
/// `GPUCOMM_SOCKET_IFNAME`, with the syntax and meaning of
/// `NCCL_SOCKET_IFNAME`.
///
/// A comma-separated list of interface name prefixes (`eth,ib`: any name
/// starting with one); a leading `^` excludes the listed interfaces instead
/// (`^docker,lo`: any but those); a leading `=` (after the `^`, if any)
/// makes every entry an exact name (`=eth0,eth1`, `^=docker0`). A single
/// entry may also be written `=name` for an exact name (`eth,=ib0`). Parsed
/// once, here ([`str::parse`]); an empty entry, a name no interface can
/// have, or a `^` or `=` inside the list is refused.
///
/// ```
/// use gpucomm::env::SocketIfname;
/// let spec: SocketIfname = "^docker,lo".parse().unwrap();
/// assert!(spec.matches("eth0") && !spec.matches("docker0") && !spec.matches("lo"));
/// let spec: SocketIfname = "=eth0".parse().unwrap();
/// assert!(spec.matches("eth0") && !spec.matches("eth01"));
/// assert!("eth0,".parse::<SocketIfname>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketIfname {
    /// `^`: the entries say which interfaces not to use.
    exclude: bool,
    /// Each name, and whether it must match exactly (else as a prefix).
    entries: Vec<(String, bool)>,
}

impl SocketIfname {
    /// Whether the interface `name` may be used.
    pub fn matches(&self, name: &str) -> bool {
        let listed = self.entries.iter().any(|(e, exact)| {
            if *exact {
                name == e
            } else {
                name.starts_with(e.as_str())
            }
        });
        listed != self.exclude
    }
}

impl std::str::FromStr for SocketIfname {
    type Err = EnvError;

    fn from_str(spec: &str) -> Result<Self, EnvError> {
        let malformed = || EnvError::Malformed {
            var: "GPUCOMM_SOCKET_IFNAME".into(),
            value: spec.to_string(),
            expected: "comma-separated interface name prefixes (eth,ib), ^ first to exclude \
                       them (^docker,lo), = first for exact names (=eth0, ^=docker0); =name \
                       for one exact name (eth,=ib0)",
        };
        let list = spec.trim();
        let (exclude, list) = match list.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, list),
        };
        let (all_exact, list) = match list.strip_prefix('=') {
            Some(rest) => (true, rest),
            None => (false, list),
        };
        let entries = list
            .split(',')
            .map(|e| {
                let e = e.trim();
                let (exact, name) = match e.strip_prefix('=') {
                    Some(name) => (true, name),
                    None => (all_exact, e),
                };
                (crate::netif::valid_if_label(name) && !name.contains(['^', '=']))
                    .then(|| (name.to_string(), exact))
                    .ok_or_else(malformed)
            })
            .collect::<Result<_, _>>()?;
        Ok(SocketIfname { exclude, entries })
    }
}

impl fmt::Display for SocketIfname {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exclude {
            f.write_str("^")?;
        }
        for (i, (name, exact)) in self.entries.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let eq = if *exact { "=" } else { "" };
            write!(f, "{sep}{eq}{name}")?;
        }
        Ok(())
    }
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
    /// Interfaces the TCP data listener may use (`GPUCOMM_SOCKET_IFNAME`, as
    /// `NCCL_SOCKET_IFNAME`: see [`SocketIfname`]). `None`: the address this
    /// rank reaches the store from,
    /// unless that is a loopback address and the store's host is not a
    /// loopback IP (see the [module docs](self#data-addresses)).
    pub socket_ifname: Option<SocketIfname>,
}

/// The launchers whose environment [`BootstrapConfig::from_vars`] understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Launcher {
    /// `gpucomm launch`, or anything that sets `GPUCOMM_RANK`.
    Gpucomm,
    /// PyTorch's torchrun (`RANK`, `WORLD_SIZE`, ...).
    Torchrun,
    /// Open MPI's mpirun (`OMPI_COMM_WORLD_*`).
    OpenMpi,
    /// Slurm's srun (`SLURM_PROCID`, ...).
    Slurm,
}

impl Launcher {
    /// A short name for messages and the derived token.
    pub const fn name(&self) -> &'static str {
        match self {
            Launcher::Gpucomm => "gpucomm",
            Launcher::Torchrun => "torchrun",
            Launcher::OpenMpi => "Open MPI",
            Launcher::Slurm => "Slurm",
        }
    }

    /// The launcher whose variables are present, in priority order (gpucomm,
    /// torchrun, Open MPI, Slurm). A launcher counts as present when its rank
    /// or its world-size variable is set (and not empty).
    pub fn detect<F: Fn(&str) -> Option<String>>(get: F) -> Option<Launcher> {
        let set = |name: &str| get(name).is_some_and(|v| !v.trim().is_empty());
        if set("GPUCOMM_RANK") || set("GPUCOMM_WORLD_SIZE") {
            Some(Launcher::Gpucomm)
        } else if set("RANK") || set("WORLD_SIZE") {
            Some(Launcher::Torchrun)
        } else if set("OMPI_COMM_WORLD_RANK") || set("OMPI_COMM_WORLD_SIZE") {
            Some(Launcher::OpenMpi)
        } else if set("SLURM_PROCID") || set("SLURM_NTASKS") || set("SLURM_NPROCS") {
            Some(Launcher::Slurm)
        } else {
            None
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the environment does not describe a rank of a job.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// None of the recognised launchers' variables is set.
    #[error(
        "no launcher environment found: run under `gpucomm launch`, torchrun, mpirun or srun, \
         or set GPUCOMM_RANK, GPUCOMM_WORLD_SIZE and GPUCOMM_STORE"
    )]
    NoLauncher,
    /// A variable the detected launcher needs is not set.
    #[error("{launcher} environment: {var} is not set ({hint})")]
    Missing {
        /// The detected launcher.
        launcher: Launcher,
        /// The missing variable.
        var: &'static str,
        /// What to do about it.
        hint: &'static str,
    },
    /// A variable is set to something that cannot be parsed.
    #[error("{var}={value:?} is not valid: expected {expected}")]
    Malformed {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// What a valid value looks like.
        expected: &'static str,
    },
    /// The values are each valid but contradict one another.
    #[error("{launcher} environment: {detail}")]
    Contradictory {
        /// The detected launcher.
        launcher: Launcher,
        /// Which values contradict and how.
        detail: String,
    },
}

/// The variables one launcher provides.
struct Names {
    rank: &'static str,
    size: &'static [&'static str],
    local_rank: &'static str,
    local_size: Option<&'static str>,
}

const GPUCOMM_NAMES: Names = Names {
    rank: "GPUCOMM_RANK",
    size: &["GPUCOMM_WORLD_SIZE"],
    local_rank: "GPUCOMM_LOCAL_RANK",
    local_size: Some("GPUCOMM_LOCAL_WORLD_SIZE"),
};
const TORCHRUN_NAMES: Names = Names {
    rank: "RANK",
    size: &["WORLD_SIZE"],
    local_rank: "LOCAL_RANK",
    local_size: Some("LOCAL_WORLD_SIZE"),
};
const OMPI_NAMES: Names = Names {
    rank: "OMPI_COMM_WORLD_RANK",
    size: &["OMPI_COMM_WORLD_SIZE"],
    local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
    local_size: Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
};
const SLURM_NAMES: Names = Names {
    rank: "SLURM_PROCID",
    size: &["SLURM_NTASKS", "SLURM_NPROCS"],
    local_rank: "SLURM_LOCALID",
    local_size: None,
};

impl BootstrapConfig {
    /// The default bound on every wait when `GPUCOMM_TIMEOUT_MS` is not set:
    /// generous, so that slow first connections and large transfers never
    /// trip it, yet finite, so that nothing hangs forever.
    pub const DEFAULT_TIMEOUT: Duration = crate::DEFAULT_TIMEOUT;

    /// Reads the process environment (see the [module docs](self)).
    pub fn from_env() -> Result<Self, EnvError> {
        Self::from_vars(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Builds the configuration from a variable lookup, so that it can be
    /// tested without touching the process environment.
    ///
    /// ```
    /// use gpucomm::env::{BootstrapConfig, TransportChoice};
    /// let vars = [("RANK", "1"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1"),
    ///             ("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500"),
    ///             ("GPUCOMM_TRANSPORT", "tcp")];
    /// let cfg = BootstrapConfig::from_vars(|name| {
    ///     vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    /// })
    /// .unwrap();
    /// assert_eq!((cfg.rank, cfg.world_size, cfg.local_rank), (1, 4, Some(1)));
    /// assert_eq!(cfg.store_addr, "10.0.0.1:29501"); // MASTER_PORT + 1
    /// assert_eq!(cfg.transport, TransportChoice::Tcp);
    /// ```
    pub fn from_vars<F: Fn(&str) -> Option<String>>(get: F) -> Result<Self, EnvError> {
        // Empty (or all-space) values count as unset.
        let get = |name: &str| {
            get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let launcher = Launcher::detect(get).ok_or(EnvError::NoLauncher)?;
        let names = match launcher {
            Launcher::Gpucomm => &GPUCOMM_NAMES,
            Launcher::Torchrun => &TORCHRUN_NAMES,
            Launcher::OpenMpi => &OMPI_NAMES,
            Launcher::Slurm => &SLURM_NAMES,
        };

        let rank = parse_usize(&get, names.rank)?.ok_or(EnvError::Missing {
            launcher,
            var: names.rank,
            hint: "the rank of this process",
        })?;
        let mut world_size = None;
        for var in names.size {
            if let Some(n) = parse_usize(&get, var)? {
                world_size = Some((var, n));
                break;
            }
        }
        let (size_var, world_size) = world_size.ok_or(EnvError::Missing {
            launcher,
            var: names.size[0],
            hint: "the number of ranks in the job",
        })?;
        if world_size == 0 {
            return Err(EnvError::Malformed {
                var: size_var.to_string(),
                value: "0".into(),
                expected: "a positive number of ranks",
            });
        }
        if world_size > MAX_WORLD_SIZE {
            return Err(EnvError::Malformed {
                var: size_var.to_string(),
                value: world_size.to_string(),
                // MAX_WORLD_SIZE (a test checks that the two agree).
                expected: "a number of ranks of at most 1048576",
            });
        }
        if rank >= world_size {
            return Err(EnvError::Contradictory {
                launcher,
                detail: format!(
                    "rank {rank} ({}) is not below the world size {world_size} ({size_var})",
                    names.rank
                ),
            });
        }

        let local_rank = parse_usize(&get, names.local_rank)?;
        let (local_size_var, local_world_size) = match names.local_size {
            Some(var) => (var, parse_usize(&get, var)?),
            None => ("SLURM_STEP_TASKS_PER_NODE", slurm_local_size(&get)?),
        };
        if let Some(lws) = local_world_size {
            if lws == 0 {
                return Err(EnvError::Malformed {
                    var: local_size_var.to_string(),
                    value: "0".into(),
                    expected: "a positive number of ranks",
                });
            }
            if lws > world_size {
                return Err(EnvError::Contradictory {
                    launcher,
                    detail: format!(
                        "the local world size {lws} ({local_size_var}) exceeds the world size \
                         {world_size} ({size_var})"
                    ),
                });
            }
            if let Some(lr) = local_rank.filter(|&lr| lr >= lws) {
                return Err(EnvError::Contradictory {
                    launcher,
                    detail: format!(
                        "local rank {lr} ({}) is not below the local world size {lws} \
                         ({local_size_var})",
                        names.local_rank
                    ),
                });
            }
        }
        if let Some(lr) = local_rank.filter(|&lr| lr >= world_size) {
            return Err(EnvError::Contradictory {
                launcher,
                detail: format!(
                    "local rank {lr} ({}) is not below the world size {world_size} ({size_var})",
                    names.local_rank
                ),
            });
        }

        let store_addr = store_addr(&get, launcher)?;

        let token = match get("GPUCOMM_TOKEN") {
            Some(t) => t,
            None => derive_token(launcher, &job_id(&get, launcher), &store_addr, world_size),
        };

        let transport = match get("GPUCOMM_TRANSPORT") {
            None => TransportChoice::Auto,
            Some(v) => TransportChoice::from_name(&v).ok_or(EnvError::Malformed {
                var: "GPUCOMM_TRANSPORT".into(),
                value: v,
                expected: "auto, shm or tcp",
            })?,
        };

        let algorithm = match get("GPUCOMM_ALGORITHM") {
            None => None,
            Some(v) if v.eq_ignore_ascii_case("auto") => None,
            Some(v) => Some(
                gpucomm_algo::Algorithm::from_name(&v).ok_or(EnvError::Malformed {
                    var: "GPUCOMM_ALGORITHM".into(),
                    value: v,
                    expected: "auto, ring, tree, halving_doubling, recursive_doubling, direct, \
                               hierarchical or bruck",
                })?,
            ),
        };

        let timeout = match get("GPUCOMM_TIMEOUT_MS") {
            None => Self::DEFAULT_TIMEOUT,
            Some(v) => match v.parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    return Err(EnvError::Malformed {
                        var: "GPUCOMM_TIMEOUT_MS".into(),
                        value: v,
                        expected: "a positive number of milliseconds",
                    });
                }
            },
        };

        let socket_ifname = get("GPUCOMM_SOCKET_IFNAME")
            .map(|v| v.parse::<SocketIfname>())
            .transpose()?;

        Ok(BootstrapConfig {
            rank,
            world_size,
            local_rank,
            local_world_size,
            store_addr,
            token,
            transport,
            algorithm,
            timeout,
            socket_ifname,
        })
    }
}

/// Parses an optional non-negative integer variable.
fn parse_usize(
    get: &impl Fn(&str) -> Option<String>,
    var: &str,
) -> Result<Option<usize>, EnvError> {
    match get(var) {
        None => Ok(None),
        Some(v) => v
            .parse::<usize>()
            .map(Some)
            .map_err(|_| EnvError::Malformed {
                var: var.to_string(),
                value: v,
                expected: "a non-negative integer",
            }),
    }
}

/// Parses a TCP port variable (1..=65535).
fn parse_port(get: &impl Fn(&str) -> Option<String>, var: &str) -> Result<Option<u16>, EnvError> {
    match get(var) {
        None => Ok(None),
        Some(v) => match v.parse::<u16>() {
            Ok(p) if p > 0 => Ok(Some(p)),
            _ => Err(EnvError::Malformed {
                var: var.to_string(),
                value: v,
                expected: "a TCP port (1 to 65535)",
            }),
        },
    }
}

/// Checks a `host:port` address without resolving the host. Returns the
/// host and the port. The host is a host name, an IPv4 address, or an IPv6
/// address in brackets, which may carry a zone for a link-local address
/// (`[fe80::1%eth0]:29500` or `[fe80::1%2]:29500`); the port is 1 to 65535.
pub fn parse_store_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|&p| p > 0)?;
    let host_ok = if host.starts_with('[') {
        host.ends_with(']')
            && matches!(
                crate::netif::split_literal(host),
                Some((std::net::IpAddr::V6(_), _))
            )
    } else {
        valid_host(host)
    };
    host_ok.then_some((host, port))
}

/// An IPv4 address or a host name: dot-separated labels of 1 to 63 letters,
/// digits, `-` or `_` (Slurm node names have it), at most 253 bytes, maybe
/// one trailing dot; not all digits and dots (a mistyped IPv4 address).
fn valid_host(host: &str) -> bool {
    if host.parse::<std::net::Ipv4Addr>().is_ok() {
        return true;
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// Joins a host and a port, bracketing IPv6 literals.
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The store address: `GPUCOMM_STORE`, else `MASTER_ADDR:(MASTER_PORT + 1)`
/// (not for gpucomm's own launcher), else (Slurm) the step's first host.
fn store_addr(
    get: &impl Fn(&str) -> Option<String>,
    launcher: Launcher,
) -> Result<String, EnvError> {
    if let Some(v) = get("GPUCOMM_STORE") {
        return match parse_store_addr(&v) {
            Some(_) => Ok(v),
            None => Err(EnvError::Malformed {
                var: "GPUCOMM_STORE".into(),
                value: v,
                expected: "host:port: a host name, an IPv4 address or an IPv6 address in \
                           brackets ([fd00::1]:29500; a link-local one with its zone, \
                           [fe80::1%eth0]:29500), and a port from 1 to 65535",
            }),
        };
    }
    if launcher == Launcher::Gpucomm {
        return Err(EnvError::Missing {
            launcher,
            var: "GPUCOMM_STORE",
            hint: "host:port of the rendezvous store that rank 0 hosts",
        });
    }
    let master_port = parse_port(get, "MASTER_PORT")?;
    let port_above = |p: u16| {
        p.checked_add(1).ok_or(EnvError::Malformed {
            var: "MASTER_PORT".into(),
            value: p.to_string(),
            expected: "a port below 65535 (gpucomm's store listens on MASTER_PORT + 1)",
        })
    };
    if let Some(addr) = get("MASTER_ADDR") {
        let port = master_port.ok_or(EnvError::Missing {
            launcher,
            var: "MASTER_PORT",
            hint: "MASTER_ADDR is set; gpucomm's store listens on MASTER_PORT + 1",
        })?;
        let port = port_above(port)?;
        let joined = join_host_port(&addr, port);
        if parse_store_addr(&joined).is_none() {
            return Err(EnvError::Malformed {
                var: "MASTER_ADDR".into(),
                value: addr,
                expected: "a host name or an IP address, without a port (gpucomm's store \
                           listens on MASTER_PORT + 1); an IPv6 link-local address with its \
                           zone, as fe80::1%eth0",
            });
        }
        return Ok(joined);
    }
    if launcher == Launcher::Slurm {
        let (var, list) = match get("SLURM_STEP_NODELIST") {
            Some(l) => ("SLURM_STEP_NODELIST", l),
            None => match get("SLURM_JOB_NODELIST").or_else(|| get("SLURM_NODELIST")) {
                Some(l) => ("SLURM_JOB_NODELIST", l),
                None => {
                    return Err(EnvError::Missing {
                        launcher,
                        var: "GPUCOMM_STORE",
                        hint: "set it, or MASTER_ADDR and MASTER_PORT; SLURM_STEP_NODELIST is \
                               not set either",
                    });
                }
            },
        };
        let host = first_slurm_host(&list).ok_or(EnvError::Malformed {
            var: var.into(),
            value: list.clone(),
            expected: "a Slurm node list such as node[01-04,07],gpu2",
        })?;
        let port = match master_port {
            Some(p) => port_above(p)?,
            None => {
                let job = parse_u64(get, "SLURM_JOB_ID")?.unwrap_or(0);
                let step = parse_u64(get, "SLURM_STEP_ID")?.unwrap_or(0);
                (20_000 + (job.wrapping_mul(16).wrapping_add(step)) % 10_000) as u16
            }
        };
        return Ok(join_host_port(&host, port));
    }
    Err(EnvError::Missing {
        launcher,
        var: "GPUCOMM_STORE",
        hint: "set it (host:port of the store rank 0 hosts), or MASTER_ADDR and MASTER_PORT",
    })
}

fn parse_u64(get: &impl Fn(&str) -> Option<String>, var: &str) -> Result<Option<u64>, EnvError> {
    match get(var) {
        None => Ok(None),
        Some(v) => v.parse::<u64>().map(Some).map_err(|_| EnvError::Malformed {
            var: var.to_string(),
            value: v,
            expected: "a non-negative integer",
        }),
    }
}

/// The first host of a Slurm node list: `node[01-04,07],gpu2` -> `node01`.
fn first_slurm_host(list: &str) -> Option<String> {
    // The first entry ends at the first comma outside brackets.
    let mut depth = 0usize;
    let mut end = list.len();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let entry = &list[..end];
    let host = match entry.split_once('[') {
        None => entry.to_string(),
        Some((prefix, rest)) => {
            let (ranges, suffix) = rest.split_once(']')?;
            let first = ranges.split(',').next()?;
            let start = first.split('-').next()?;
            if start.is_empty() || !start.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            format!("{prefix}{start}{suffix}")
        }
    };
    let valid = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    valid.then_some(host)
}

/// Slurm's ranks on this node, from `SLURM_STEP_TASKS_PER_NODE` (or
/// `SLURM_TASKS_PER_NODE`), e.g. `2(x3),1`, indexed by `SLURM_NODEID`.
fn slurm_local_size(get: &impl Fn(&str) -> Option<String>) -> Result<Option<usize>, EnvError> {
    let Some((var, spec)) = get("SLURM_STEP_TASKS_PER_NODE")
        .map(|v| ("SLURM_STEP_TASKS_PER_NODE", v))
        .or_else(|| get("SLURM_TASKS_PER_NODE").map(|v| ("SLURM_TASKS_PER_NODE", v)))
    else {
        return Ok(None);
    };
    let malformed = || EnvError::Malformed {
        var: var.into(),
        value: spec.clone(),
        expected: "a Slurm tasks-per-node list such as 2(x3),1",
    };
    let node = parse_usize(get, "SLURM_NODEID")?.unwrap_or(0);
    let mut seen = 0usize;
    for item in spec.split(',') {
        let (tasks, repeat) = match item.split_once("(x") {
            None => (item, "1"),
            Some((t, r)) => (t, r.strip_suffix(')').ok_or_else(malformed)?),
        };
        let tasks: usize = tasks.parse().map_err(|_| malformed())?;
        let repeat: usize = repeat.parse().map_err(|_| malformed())?;
        // More nodes than a usize counts: no real list, and a wrapped count
        // would pick the wrong entry.
        let upto = seen.checked_add(repeat).ok_or_else(malformed)?;
        if node < upto {
            return Ok(Some(tasks));
        }
        seen = upto;
    }
    Err(EnvError::Contradictory {
        launcher: Launcher::Slurm,
        detail: format!("SLURM_NODEID={node} but {var}={spec:?} lists only {seen} nodes"),
    })
}

/// The launcher's job id, shared by every rank of the job (empty if none).
fn job_id(get: &impl Fn(&str) -> Option<String>, launcher: Launcher) -> String {
    let first = |names: &[&str]| names.iter().find_map(|n| get(n)).unwrap_or_default();
    match launcher {
        Launcher::Gpucomm => String::new(),
        Launcher::Torchrun => first(&["TORCHELASTIC_RUN_ID"]),
        Launcher::OpenMpi => first(&["PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"]),
        Launcher::Slurm => format!(
            "{}.{}",
            first(&["SLURM_JOB_ID", "SLURM_JOBID"]),
            first(&["SLURM_STEP_ID", "SLURM_STEPID"])
        ),
    }
}

/// The token every rank derives when the launcher gives none: 32 hex digits
/// hashing the launcher, its job id, the store address and the world size.
/// Stable across builds and platforms (two independent FNV-1a 64-bit hashes,
/// no randomness), so ranks built separately agree.
///
/// ```
/// use gpucomm::env::{derive_token, Launcher};
/// let a = derive_token(Launcher::Slurm, "1234.0", "node01:20000", 8);
/// assert_eq!(a, derive_token(Launcher::Slurm, "1234.0", "node01:20000", 8));
/// assert_ne!(a, derive_token(Launcher::Slurm, "1235.0", "node01:20000", 8));
/// assert_eq!(a.len(), 32);
/// ```
pub fn derive_token(
    launcher: Launcher,
    job_id: &str,
    store_addr: &str,
    world_size: usize,
) -> String {
    let material = format!(
        "gpucomm-token-v1\0{}\0{job_id}\0{store_addr}\0{world_size}",
        launcher.name()
    );
    let fnv = |seed: u64| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for b in material.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    format!("{:016x}{:016x}", fnv(0), fnv(0x9e37_79b9_7f4a_7c15))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucomm_algo::Algorithm;

    fn cfg(vars: &[(&str, &str)]) -> Result<BootstrapConfig, EnvError> {
        BootstrapConfig::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    const GPUCOMM: &[(&str, &str)] = &[
        ("GPUCOMM_RANK", "2"),
        ("GPUCOMM_WORLD_SIZE", "4"),
        ("GPUCOMM_LOCAL_RANK", "2"),
        ("GPUCOMM_LOCAL_WORLD_SIZE", "4"),
        ("GPUCOMM_STORE", "127.0.0.1:40000"),
        ("GPUCOMM_TOKEN", "s3cret"),
    ];

    fn with(
        base: &[(&'static str, &'static str)],
        extra: &[(&'static str, &'static str)],
    ) -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<_> = base
            .iter()
            .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
            .copied()
            .collect();
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn gpucomm_launcher() {
        let c = cfg(GPUCOMM).unwrap();
        assert_eq!(
            c,
            BootstrapConfig {
                rank: 2,
                world_size: 4,
                local_rank: Some(2),
                local_world_size: Some(4),
                store_addr: "127.0.0.1:40000".into(),
                token: "s3cret".into(),
                transport: TransportChoice::Auto,
                algorithm: None,
                timeout: BootstrapConfig::DEFAULT_TIMEOUT,
                socket_ifname: None,
            }
        );
        assert_eq!(
            Launcher::detect(|n| GPUCOMM
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())),
            Some(Launcher::Gpucomm)
        );
    }

    #[test]
    fn gpucomm_overrides() {
        let c = cfg(&with(
            GPUCOMM,
            &[
                ("GPUCOMM_TRANSPORT", "TCP"),
                ("GPUCOMM_ALGORITHM", "halving-doubling"),
                ("GPUCOMM_TIMEOUT_MS", "1500"),
            ],
        ))
        .unwrap();
        assert_eq!(c.transport, TransportChoice::Tcp);
        assert_eq!(c.algorithm, Some(Algorithm::HalvingDoubling));
        assert_eq!(c.timeout, Duration::from_millis(1500));
        let c = cfg(&with(
            GPUCOMM,
            &[("GPUCOMM_TRANSPORT", "shm"), ("GPUCOMM_ALGORITHM", "auto")],
        ))
        .unwrap();
        assert_eq!(c.transport, TransportChoice::Shm);
        assert_eq!(c.algorithm, None);
        // Empty values count as unset.
        let c = cfg(&with(
            GPUCOMM,
            &[("GPUCOMM_TRANSPORT", ""), ("GPUCOMM_LOCAL_RANK", " ")],
        ))
        .unwrap();
        assert_eq!(c.transport, TransportChoice::Auto);
        assert_eq!(c.local_rank, None);
    }

    #[test]
    fn gpucomm_missing_values() {
        let e = cfg(&[("GPUCOMM_WORLD_SIZE", "2"), ("GPUCOMM_STORE", "h:1")]).unwrap_err();
        assert!(
            matches!(
                e,
                EnvError::Missing {
                    var: "GPUCOMM_RANK",
                    launcher: Launcher::Gpucomm,
                    ..
                }
            ),
            "{e}"
        );
        let e = cfg(&[("GPUCOMM_RANK", "0"), ("GPUCOMM_STORE", "h:1")]).unwrap_err();
        assert!(
            matches!(
                e,
                EnvError::Missing {
                    var: "GPUCOMM_WORLD_SIZE",
                    ..
                }
            ),
            "{e}"
        );
        let e = cfg(&[("GPUCOMM_RANK", "0"), ("GPUCOMM_WORLD_SIZE", "2")]).unwrap_err();
        assert!(
            matches!(
                e,
                EnvError::Missing {
                    var: "GPUCOMM_STORE",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("GPUCOMM_STORE is not set"), "{e}");
        // gpucomm's own launcher does not fall back to MASTER_ADDR.
        let e = cfg(&[
            ("GPUCOMM_RANK", "0"),
            ("GPUCOMM_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "5"),
        ])
        .unwrap_err();
        assert!(
            matches!(
                e,
                EnvError::Missing {
                    var: "GPUCOMM_STORE",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn no_launcher() {
        assert_eq!(cfg(&[]).unwrap_err(), EnvError::NoLauncher);
        assert_eq!(
            cfg(&[("MASTER_ADDR", "h"), ("LOCAL_RANK", "0")]).unwrap_err(),
            EnvError::NoLauncher
        );
        assert_eq!(
            cfg(&[("GPUCOMM_RANK", "")]).unwrap_err(),
            EnvError::NoLauncher
        );
    }

    #[test]
    fn socket_ifname_is_read() {
        assert_eq!(cfg(GPUCOMM).unwrap().socket_ifname, None);
        let c = cfg(&with(GPUCOMM, &[("GPUCOMM_SOCKET_IFNAME", " ib,=eth1 ")])).unwrap();
        let spec = c.socket_ifname.unwrap();
        assert_eq!(spec.to_string(), "ib,=eth1");
        assert!(spec.matches("ib0") && spec.matches("eth1") && !spec.matches("eth10"));
    }

    /// NCCL_SOCKET_IFNAME's `^` (exclude) and leading `=` (every name
    /// exact): `^docker,lo` was taken as the prefix "^docker", which no
    /// interface has, and `=eth0,eth1` made eth1 a prefix.
    #[test]
    fn socket_ifname_has_nccl_semantics() {
        let spec = |s: &str| s.parse::<SocketIfname>().unwrap();
        let names = ["lo", "eth0", "eth1", "eth10", "docker0", "ib0"];
        let picks = |s: &str| -> Vec<&str> {
            let spec = spec(s);
            names.into_iter().filter(|n| spec.matches(n)).collect()
        };
        assert_eq!(picks("eth"), ["eth0", "eth1", "eth10"]);
        assert_eq!(picks("^docker,lo"), ["eth0", "eth1", "eth10", "ib0"]);
        assert_eq!(picks("=eth0,eth1"), ["eth0", "eth1"]);
        assert_eq!(picks("^=eth1"), ["lo", "eth0", "eth10", "docker0", "ib0"]);
        assert_eq!(picks("^eth,=ib0"), ["lo", "docker0"]);
        assert_eq!(picks("docker, =eth1"), ["eth1", "docker0"]);
        assert_eq!(spec(" ^=eth0 , ib ").to_string(), "^=eth0,=ib");
        // IPv4 alias labels, as getifaddrs names their addresses (they
        // were refused as names with a ':').
        let alias = spec("=eth0:1");
        assert!(alias.matches("eth0:1") && !alias.matches("eth0"));
        assert!(spec("eth0").matches("eth0:1"));
        for bad in [
            "",
            "eth0,",
            "=",
            "^",
            "^=",
            "=^eth",
            "eth,^ib",
            "e th",
            "a/b",
            "a%b",
            "a=b",
            "abcdefghijklmnop",
            ",eth",
        ] {
            let e = bad.parse::<SocketIfname>().unwrap_err();
            assert!(matches!(e, EnvError::Malformed { .. }), "{bad:?}: {e:?}");
            assert!(e.to_string().contains("GPUCOMM_SOCKET_IFNAME"), "{e}");
        }
        let c = cfg(&with(GPUCOMM, &[("GPUCOMM_SOCKET_IFNAME", "^docker,lo")])).unwrap();
        assert!(
            c.socket_ifname
                .is_some_and(|s| s.matches("eth0") && !s.matches("lo"))
        );
    }

    #[test]
    fn malformed_values() {
        for (var, value, needle) in [
            ("GPUCOMM_RANK", "one", "GPUCOMM_RANK=\"one\" is not valid"),
            ("GPUCOMM_RANK", "-1", "non-negative integer"),
            ("GPUCOMM_WORLD_SIZE", "0", "positive number of ranks"),
            ("GPUCOMM_LOCAL_RANK", "x", "GPUCOMM_LOCAL_RANK"),
            ("GPUCOMM_LOCAL_WORLD_SIZE", "0", "positive number of ranks"),
            ("GPUCOMM_STORE", "localhost", "host:port"),
            ("GPUCOMM_STORE", "localhost:0", "host:port"),
            ("GPUCOMM_STORE", "localhost:65536", "host:port"),
            ("GPUCOMM_STORE", ":80", "host:port"),
            ("GPUCOMM_STORE", "::1:80", "host:port"),
            ("GPUCOMM_TRANSPORT", "rdma", "auto, shm or tcp"),
            ("GPUCOMM_ALGORITHM", "bogus", "ring, tree"),
            ("GPUCOMM_TIMEOUT_MS", "0", "positive number of milliseconds"),
            ("GPUCOMM_SOCKET_IFNAME", "eth0,", "= first for exact names"),
            ("GPUCOMM_SOCKET_IFNAME", "=", "interface name prefixes"),
            ("GPUCOMM_SOCKET_IFNAME", "eth,^lo", "^ first to exclude"),
            (
                "GPUCOMM_TIMEOUT_MS",
                "1.5",
                "positive number of milliseconds",
            ),
        ] {
            let e = cfg(&with(GPUCOMM, &[(var, value)])).unwrap_err();
            assert!(
                matches!(e, EnvError::Malformed { .. }),
                "{var}={value}: {e:?}"
            );
            assert!(e.to_string().contains(needle), "{var}={value}: {e}");
        }
        // The hand-written list of accepted algorithms names every one.
        let e = cfg(&with(GPUCOMM, &[("GPUCOMM_ALGORITHM", "bogus")]))
            .unwrap_err()
            .to_string();
        for a in gpucomm_algo::Algorithm::ALL {
            assert!(e.contains(a.name()), "{e} lacks {}", a.name());
        }
        // IPv6 in brackets is fine.
        let c = cfg(&with(GPUCOMM, &[("GPUCOMM_STORE", "[::1]:29500")])).unwrap();
        assert_eq!(c.store_addr, "[::1]:29500");
    }

    /// A world size no job has is refused before anything is sized by it
    /// (it aborted the process: a vector of that many peers).
    #[test]
    fn world_size_is_bounded() {
        let size = |base: &[(&str, &str)], var: &str, value: &str| {
            let mut v: Vec<(&str, &str)> =
                base.iter().filter(|(k, _)| *k != var).copied().collect();
            v.push((var, value));
            cfg(&v)
        };
        let max = MAX_WORLD_SIZE.to_string();
        let c = size(GPUCOMM, "GPUCOMM_WORLD_SIZE", &max).unwrap();
        assert_eq!(c.world_size, MAX_WORLD_SIZE);
        for (base, var, value) in [
            (GPUCOMM, "GPUCOMM_WORLD_SIZE", "1000000000000".to_string()),
            (
                GPUCOMM,
                "GPUCOMM_WORLD_SIZE",
                (MAX_WORLD_SIZE + 1).to_string(),
            ),
            (TORCHRUN, "WORLD_SIZE", "99999999999".to_string()),
        ] {
            let e = size(base, var, &value).unwrap_err();
            assert!(matches!(e, EnvError::Malformed { .. }), "{e:?}");
            let e = e.to_string();
            assert!(e.contains(&format!("{var}=\"{value}\"")), "{e}");
            assert!(e.contains(&format!("at most {max}")), "{e}");
        }
    }

    #[test]
    fn contradictory_values() {
        for (extra, needle) in [
            (
                &[("GPUCOMM_RANK", "4")][..],
                "rank 4 (GPUCOMM_RANK) is not below the world size 4",
            ),
            (
                &[("GPUCOMM_LOCAL_WORLD_SIZE", "5")][..],
                "local world size 5 (GPUCOMM_LOCAL_WORLD_SIZE) exceeds the world size 4",
            ),
            (
                &[
                    ("GPUCOMM_LOCAL_RANK", "2"),
                    ("GPUCOMM_LOCAL_WORLD_SIZE", "2"),
                ][..],
                "local rank 2 (GPUCOMM_LOCAL_RANK) is not below the local world size 2",
            ),
        ] {
            let e = cfg(&with(GPUCOMM, extra)).unwrap_err();
            assert!(
                matches!(
                    e,
                    EnvError::Contradictory {
                        launcher: Launcher::Gpucomm,
                        ..
                    }
                ),
                "{e:?}"
            );
            assert!(e.to_string().contains(needle), "{e}");
        }
        let e = cfg(&[
            ("GPUCOMM_RANK", "0"),
            ("GPUCOMM_WORLD_SIZE", "2"),
            ("GPUCOMM_LOCAL_RANK", "3"),
            ("GPUCOMM_STORE", "h:1"),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("local rank 3 (GPUCOMM_LOCAL_RANK) is not below the world size 2"),
            "{e}"
        );
    }

    const TORCHRUN: &[(&str, &str)] = &[
        ("RANK", "3"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("MASTER_ADDR", "node7"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_RUN_ID", "abc"),
    ];

    #[test]
    fn torchrun_launcher() {
        let c = cfg(TORCHRUN).unwrap();
        assert_eq!(
            (c.rank, c.world_size, c.local_rank, c.local_world_size),
            (3, 8, Some(1), Some(2))
        );
        assert_eq!(c.store_addr, "node7:29501");
        assert_eq!(
            c.token,
            derive_token(Launcher::Torchrun, "abc", "node7:29501", 8)
        );
        // Every rank of the job derives the same token; another run does not.
        let other_rank = cfg(&with(TORCHRUN, &[("RANK", "0"), ("LOCAL_RANK", "0")])).unwrap();
        assert_eq!(other_rank.token, c.token);
        let other_run = cfg(&with(TORCHRUN, &[("TORCHELASTIC_RUN_ID", "abd")])).unwrap();
        assert_ne!(other_run.token, c.token);
        // GPUCOMM_STORE and GPUCOMM_TOKEN win.
        let c = cfg(&with(
            TORCHRUN,
            &[("GPUCOMM_STORE", "10.1.1.1:7000"), ("GPUCOMM_TOKEN", "t")],
        ))
        .unwrap();
        assert_eq!(
            (c.store_addr.as_str(), c.token.as_str()),
            ("10.1.1.1:7000", "t")
        );
        // IPv6 MASTER_ADDR gets brackets.
        let c = cfg(&with(TORCHRUN, &[("MASTER_ADDR", "fe80::1")])).unwrap();
        assert_eq!(c.store_addr, "[fe80::1]:29501");
    }

    #[test]
    fn torchrun_errors() {
        let e = cfg(&with(TORCHRUN, &[("MASTER_PORT", "http")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("MASTER_PORT=\"http\" is not valid: expected a TCP port"),
            "{e}"
        );
        let e = cfg(&with(TORCHRUN, &[("MASTER_PORT", "65535")])).unwrap_err();
        assert!(e.to_string().contains("MASTER_PORT + 1"), "{e}");
        let e = cfg(&with(TORCHRUN, &[("MASTER_PORT", "0")])).unwrap_err();
        assert!(matches!(e, EnvError::Malformed { .. }), "{e}");
        // A port, a URL or garbage in MASTER_ADDR is refused, naming it (a
        // port came out as the "host" [10.0.0.1:29500]:29501).
        for bad in [
            "bad host",
            "10.0.0.1:29500",
            "http://x",
            "node7:1",
            "[x]",
            "fe80::1%",
        ] {
            let e = cfg(&with(TORCHRUN, &[("MASTER_ADDR", bad)])).unwrap_err();
            assert!(matches!(e, EnvError::Malformed { .. }), "{bad}: {e:?}");
            assert!(
                e.to_string().contains(&format!("MASTER_ADDR=\"{bad}\"")),
                "{bad}: {e}"
            );
        }
        for (good, store) in [
            ("10.0.0.1", "10.0.0.1:29501"),
            ("fd00::2", "[fd00::2]:29501"),
            ("[fd00::2]", "[fd00::2]:29501"),
            ("fe80::1%eth0", "[fe80::1%eth0]:29501"),
            ("node7.cluster", "node7.cluster:29501"),
        ] {
            let c = cfg(&with(TORCHRUN, &[("MASTER_ADDR", good)])).unwrap();
            assert_eq!(c.store_addr, store);
        }
        let e = cfg(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")]).unwrap_err();
        assert!(
            matches!(
                e,
                EnvError::Missing {
                    var: "MASTER_PORT",
                    ..
                }
            ),
            "{e}"
        );
        let e = cfg(&[("RANK", "0"), ("WORLD_SIZE", "2")]).unwrap_err();
        assert!(
            matches!(
                e,
                EnvError::Missing {
                    var: "GPUCOMM_STORE",
                    launcher: Launcher::Torchrun,
                    ..
                }
            ),
            "{e}"
        );
        let e = cfg(&[
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ])
        .unwrap_err();
        assert!(
            matches!(
                e,
                EnvError::Missing {
                    var: "RANK",
                    launcher: Launcher::Torchrun,
                    ..
                }
            ),
            "{e}"
        );
        let e = cfg(&with(TORCHRUN, &[("RANK", "8")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("rank 8 (RANK) is not below the world size 8 (WORLD_SIZE)"),
            "{e}"
        );
        let e = cfg(&with(TORCHRUN, &[("LOCAL_RANK", "2")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("(LOCAL_RANK) is not below the local world size 2 (LOCAL_WORLD_SIZE)"),
            "{e}"
        );
    }

    const OMPI: &[(&str, &str)] = &[
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "6"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "3"),
        ("OMPI_MCA_ess_base_jobid", "4242"),
        ("GPUCOMM_STORE", "head:5000"),
    ];

    #[test]
    fn open_mpi_launcher() {
        let c = cfg(OMPI).unwrap();
        assert_eq!(
            (c.rank, c.world_size, c.local_rank, c.local_world_size),
            (5, 6, Some(2), Some(3))
        );
        assert_eq!(c.store_addr, "head:5000");
        assert_eq!(
            c.token,
            derive_token(Launcher::OpenMpi, "4242", "head:5000", 6)
        );
        // PMIx namespace (Open MPI 5) is preferred as the job id.
        let c5 = cfg(&with(OMPI, &[("PMIX_NAMESPACE", "prterun-x-1@1")])).unwrap();
        assert_eq!(
            c5.token,
            derive_token(Launcher::OpenMpi, "prterun-x-1@1", "head:5000", 6)
        );
        // MASTER_ADDR/PORT work too.
        let mut v = OMPI[..5].to_vec();
        v.extend([("MASTER_ADDR", "head"), ("MASTER_PORT", "6000")]);
        assert_eq!(cfg(&v).unwrap().store_addr, "head:6001");
        // gpucomm's variables take precedence over mpirun's.
        let c = cfg(&with(OMPI, GPUCOMM)).unwrap();
        assert_eq!(c.rank, 2);
    }

    #[test]
    fn open_mpi_errors() {
        let e = cfg(&OMPI[..5]).unwrap_err();
        assert!(
            matches!(
                e,
                EnvError::Missing {
                    var: "GPUCOMM_STORE",
                    launcher: Launcher::OpenMpi,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("MASTER_ADDR"), "{e}");
        let e = cfg(&with(OMPI, &[("OMPI_COMM_WORLD_LOCAL_RANK", "3")])).unwrap_err();
        assert!(e.to_string().contains("OMPI_COMM_WORLD_LOCAL_SIZE"), "{e}");
        let e = cfg(&with(OMPI, &[("OMPI_COMM_WORLD_SIZE", "5")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("rank 5 (OMPI_COMM_WORLD_RANK) is not below the world size 5"),
            "{e}"
        );
        let e = cfg(&with(OMPI, &[("OMPI_COMM_WORLD_SIZE", "many")])).unwrap_err();
        assert!(matches!(e, EnvError::Malformed { .. }), "{e}");
    }

    const SLURM: &[(&str, &str)] = &[
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "7"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", "2"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x3),1"),
        ("SLURM_STEP_NODELIST", "gpu[07-09,12],login1"),
        ("SLURM_JOB_ID", "1234"),
        ("SLURM_STEP_ID", "3"),
    ];

    #[test]
    fn slurm_launcher() {
        let c = cfg(SLURM).unwrap();
        assert_eq!(
            (c.rank, c.world_size, c.local_rank, c.local_world_size),
            (5, 7, Some(1), Some(2))
        );
        let port = 20_000 + (1234 * 16 + 3) % 10_000;
        assert_eq!(c.store_addr, format!("gpu07:{port}"));
        assert_eq!(
            c.token,
            derive_token(Launcher::Slurm, "1234.3", &c.store_addr, 7)
        );
        // The last node has one task.
        let c = cfg(&with(
            SLURM,
            &[
                ("SLURM_NODEID", "3"),
                ("SLURM_LOCALID", "0"),
                ("SLURM_PROCID", "6"),
            ],
        ))
        .unwrap();
        assert_eq!(c.local_world_size, Some(1));
        // MASTER_PORT moves the port, MASTER_ADDR the host, GPUCOMM_STORE both.
        let c = cfg(&with(SLURM, &[("MASTER_PORT", "29500")])).unwrap();
        assert_eq!(c.store_addr, "gpu07:29501");
        let c = cfg(&with(
            SLURM,
            &[("MASTER_ADDR", "x"), ("MASTER_PORT", "29500")],
        ))
        .unwrap();
        assert_eq!(c.store_addr, "x:29501");
        // SLURM_NPROCS stands in for SLURM_NTASKS; a plain node list works.
        let c = cfg(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NPROCS", "2"),
            ("SLURM_JOB_NODELIST", "n1,n2"),
        ])
        .unwrap();
        assert_eq!((c.world_size, c.local_world_size), (2, None));
        assert!(c.store_addr.starts_with("n1:"), "{}", c.store_addr);
    }

    #[test]
    fn slurm_errors() {
        let e = cfg(&with(SLURM, &[("SLURM_NODEID", "4")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("SLURM_NODEID=4 but SLURM_STEP_TASKS_PER_NODE"),
            "{e}"
        );
        let e = cfg(&with(SLURM, &[("SLURM_STEP_TASKS_PER_NODE", "2(x3")])).unwrap_err();
        assert!(matches!(e, EnvError::Malformed { .. }), "{e}");
        // Repeat counts that overflow a node count are malformed, not a
        // panic (debug) or a wrapped count (release).
        for (spec, node) in [
            ("1(x18446744073709551615),1", "18446744073709551615"),
            (
                "2(x9223372036854775808),1(x9223372036854775808)",
                "18446744073709551615",
            ),
        ] {
            let e = cfg(&with(
                SLURM,
                &[("SLURM_STEP_TASKS_PER_NODE", spec), ("SLURM_NODEID", node)],
            ))
            .unwrap_err();
            assert!(matches!(e, EnvError::Malformed { .. }), "{spec}: {e}");
            assert!(e.to_string().contains("SLURM_STEP_TASKS_PER_NODE"), "{e}");
        }
        let e = cfg(&with(SLURM, &[("SLURM_STEP_NODELIST", "gpu[a-b]")])).unwrap_err();
        assert!(e.to_string().contains("Slurm node list"), "{e}");
        let e = cfg(&with(SLURM, &[("SLURM_STEP_NODELIST", "gpu[01-02")])).unwrap_err();
        assert!(e.to_string().contains("Slurm node list"), "{e}");
        let e = cfg(&with(SLURM, &[("SLURM_JOB_ID", "x")])).unwrap_err();
        assert!(e.to_string().contains("SLURM_JOB_ID"), "{e}");
        let e = cfg(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")]).unwrap_err();
        assert!(
            matches!(
                e,
                EnvError::Missing {
                    var: "GPUCOMM_STORE",
                    launcher: Launcher::Slurm,
                    ..
                }
            ),
            "{e}"
        );
        let e = cfg(&[("SLURM_NTASKS", "2"), ("SLURM_JOB_NODELIST", "n1")]).unwrap_err();
        assert!(
            matches!(
                e,
                EnvError::Missing {
                    var: "SLURM_PROCID",
                    ..
                }
            ),
            "{e}"
        );
        let e = cfg(&with(
            SLURM,
            &[
                ("SLURM_STEP_TASKS_PER_NODE", "8(x4)"),
                ("SLURM_LOCALID", "1"),
            ],
        ))
        .unwrap_err();
        assert!(e.to_string().contains("exceeds the world size 7"), "{e}");
    }

    #[test]
    fn torchrun_under_srun_wins_over_slurm() {
        // `srun torchrun ...`: Slurm's variables describe the agent, torchrun's
        // the worker; the worker's are the ones that count.
        let mut v = SLURM.to_vec();
        v.extend_from_slice(TORCHRUN);
        let c = cfg(&v).unwrap();
        assert_eq!((c.rank, c.world_size), (3, 8));
        assert_eq!(c.store_addr, "node7:29501");
        // And mpirun's variables win over Slurm's when both are set.
        let mut v = SLURM.to_vec();
        v.extend_from_slice(OMPI);
        assert_eq!(cfg(&v).unwrap().world_size, 6); // Slurm says 7
        assert_eq!(
            Launcher::detect(|n| v.iter().find(|(k, _)| *k == n).map(|(_, x)| x.to_string())),
            Some(Launcher::OpenMpi)
        );
    }

    #[test]
    fn slurm_host_lists() {
        assert_eq!(first_slurm_host("a").as_deref(), Some("a"));
        assert_eq!(first_slurm_host("a[3-5]b,c").as_deref(), Some("a3b"));
        assert_eq!(
            first_slurm_host("rack1-n[001,004]").as_deref(),
            Some("rack1-n001")
        );
        assert_eq!(
            first_slurm_host("x.example.org,y").as_deref(),
            Some("x.example.org")
        );
        assert_eq!(first_slurm_host("a]"), None);
        assert_eq!(first_slurm_host("[]"), None);
    }

    #[test]
    fn store_addresses() {
        assert_eq!(parse_store_addr("h:1"), Some(("h", 1)));
        assert_eq!(parse_store_addr("[::1]:2"), Some(("[::1]", 2)));
        assert_eq!(parse_store_addr("h:"), None);
        assert_eq!(parse_store_addr("[]:2"), None);
        assert_eq!(parse_store_addr("a b:2"), None);
        for ok in [
            "node-7.example.org:29500",
            "gpu_01:1",
            "node7.:1",
            "10.0.0.1:1",
            "[fd00::2]:3",
            "[fe80::1%eth0]:1234",
            "[fe80::1%4]:1234",
            "[::ffff:10.0.0.1]:5",
        ] {
            assert!(parse_store_addr(ok).is_some(), "{ok}");
        }
        // Garbage that passed: anything in brackets, URLs, a port twice,
        // numbers that are no IPv4 address, empty labels, bad zones.
        for bad in [
            "[a b:c]:1234",
            "[x:y]:1",
            "[10.0.0.1]:1",
            "http://x:1",
            "x/y:1",
            "[10.0.0.1:29500]:29501",
            "10.0.0.1:29500:29501",
            "10.0.0.256:1",
            "1.2.3:1",
            "a..b:1",
            ".a:1",
            "[fe80::1%]:1",
            "[fe80::1%a/b]:1",
            "[fe80::1%eth0%1]:1",
            "[fe80::1%abcdefghijklmnop]:1",
        ] {
            assert_eq!(parse_store_addr(bad), None, "{bad}");
        }
        let long = format!("{}:1", "a".repeat(64));
        assert_eq!(parse_store_addr(&long), None);
        let e = cfg(&with(GPUCOMM, &[("GPUCOMM_STORE", "[a b:c]:1234")])).unwrap_err();
        assert!(
            e.to_string().contains("GPUCOMM_STORE=\"[a b:c]:1234\""),
            "{e}"
        );
    }

    #[test]
    fn transport_names() {
        for t in [
            TransportChoice::Auto,
            TransportChoice::Shm,
            TransportChoice::Tcp,
        ] {
            assert_eq!(TransportChoice::from_name(t.name()), Some(t));
            assert_eq!(t.to_string(), t.name());
        }
        assert_eq!(TransportChoice::from_name("ib"), None);
    }

    #[test]
    fn derived_token_is_pinned() {
        // Ranks built by other compilers must agree: the hash is pinned
        // (value computed independently with a few lines of Python FNV-1a).
        assert_eq!(
            derive_token(Launcher::Torchrun, "abc", "node7:29501", 8),
            "834808db46a7e03066b22cf773db2a13"
        );
        let t = derive_token(Launcher::Gpucomm, "", "h:1", 2);
        assert_eq!(t.len(), 32);
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(t, derive_token(Launcher::Gpucomm, "", "h:1", 3));
        assert_ne!(t, derive_token(Launcher::Slurm, "", "h:1", 2));
    }
}
